//! The web console's pages over HTTP, without a browser (SQLite): signing in with the form,
//! redirects to sign in, roles (a tenant viewer is offered no controls and a post of its
//! session is refused), the CSRF rule for form posts, the Chinese catalog, the task page (its
//! dependency graph linked both ways), bulk actions on the task list and parents in the task form,
//! confirmation steps of destructive actions and the messages after actions, and the apps page
//! (a new app's secret shown once with the lines to paste).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mthpt_console::testing::{TestApp, spawn_app};
use mthpt_engine::alarm::{AlarmKind, NewAlarm, Severity};
use mthpt_engine::store::Backend;
use mthpt_engine::tenant::{Role, Tenant};
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, ORIGIN, SET_COOKIE};
use reqwest::{Method, StatusCode};
use serde_json::json;

use super::web_session::{FORM, client, form, page, post, sign_in};

/// A tenant `acme` with an app and a manual task; returns them.
async fn acme(app: &TestApp) -> (Tenant, i64) {
    let tenant = app.tenant("acme").await;
    let res = app
        .op(Method::POST, "/api/v1/tenants/acme/apps")
        .json(&json!({ "name": "billing" }))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.text().await.unwrap());
    let res = app
        .op(Method::POST, "/api/v1/tenants/acme/tasks")
        .json(
            &json!({ "name": "invoices", "app": "billing", "handler": "h",
            "schedule": { "kind": "manual" } }),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let id = res.json::<serde_json::Value>().await.unwrap()["id"]
        .as_i64()
        .unwrap();
    (tenant, id)
}

#[tokio::test]
async fn pages_need_a_session_and_offer_only_what_the_role_may_do() {
    let app = spawn_app(Backend::Sqlite).await;
    let (acme_tenant, task) = acme(&app).await;
    app.tenant("other").await;
    app.user(Some(&acme_tenant), "vera", Role::TenantViewer)
        .await;
    app.user(Some(&acme_tenant), "adam", Role::TenantAdmin)
        .await;

    // Signed out: to the sign-in page, coming back afterwards.
    let res = client()
        .get(app.url("/t/acme/tasks?q=inv"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        res.headers()[LOCATION],
        "/login?next=/t/acme/tasks%3Fq%3Dinv"
    );

    // The admin is offered the controls.
    let admin = sign_in(&app, "adam").await;
    let (status, html) = page(&app, &admin, "/t/acme/tasks").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("invoices") && html.contains("id=\"new-task\""));
    assert!(html.contains(&format!("/t/acme/tasks/{task}/trigger")));

    // The viewer sees the task, and no edit or trigger controls.
    let viewer = sign_in(&app, "vera").await;
    let (status, html) = page(&app, &viewer, "/t/acme/tasks").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("invoices"));
    assert!(!html.contains("new-task") && !html.contains("/trigger") && !html.contains("/edit"));
    let (status, _) = page(&app, &viewer, "/t/acme/tasks/new").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Another tenant's pages do not exist for it.
    let (status, _) = page(&app, &viewer, "/t/other/tasks").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A post of the viewer's session is refused: from its own origin by role, and from
    // another site by the CSRF rule, before anything happens.
    let trigger = app.url(&format!("/t/acme/tasks/{task}/trigger"));
    for (origin, refused) in [
        (app.base_url.clone(), "role"),
        ("http://evil.example".to_owned(), "origin"),
    ] {
        let res = client()
            .post(&trigger)
            .header(COOKIE, &viewer)
            .header(ORIGIN, origin)
            .header(CONTENT_TYPE, FORM)
            .body(form(&[("back", "/")]))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::FORBIDDEN, "refused by {refused}");
    }
    // The admin's session from another site is refused too.
    let res = client()
        .post(&trigger)
        .header(COOKIE, &admin)
        .header(ORIGIN, "http://evil.example")
        .header(CONTENT_TYPE, FORM)
        .body(form(&[("back", "/")]))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    let (_, runs) = page(&app, &admin, &format!("/t/acme/runs?task={task}")).await;
    assert!(!runs.contains("class=\"run "), "no run was created");

    // From its own origin, the admin's trigger creates a run.
    let res = client()
        .post(&trigger)
        .header(COOKIE, &admin)
        .header(ORIGIN, &app.base_url)
        .header(CONTENT_TYPE, FORM)
        .body(form(&[("back", "/t/acme/tasks")]))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let (_, runs) = page(&app, &admin, &format!("/t/acme/runs?task={task}")).await;
    assert!(runs.contains("class=\"run "), "the run is listed");
    app.stop().await;
}

#[tokio::test]
async fn pages_in_chinese_leave_no_key_untranslated() {
    let app = spawn_app(Backend::Sqlite).await;
    let (_, task) = acme(&app).await;
    let admin = sign_in(&app, "root").await;
    let zh = format!("{admin}; mthpt_lang=zh-CN");
    for path in [
        "/t/acme/tasks".to_owned(),
        "/t/acme/tasks/new".to_owned(),
        format!("/t/acme/tasks/{task}/edit"),
        "/t/acme/runs".to_owned(),
        "/t/acme/alarms".to_owned(),
        "/t/acme/schedule-preview?schedule.kind=cron&schedule.expr=0+0+9+%3F+*+MON-FRI&schedule.timezone=Asia/Shanghai".to_owned(),
    ] {
        let (status, html) = page(&app, &zh, &path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(!html.contains('⟦'), "{path} has an untranslated key: {html}");
    }
    let (_, html) = page(&app, &zh, "/t/acme/tasks").await;
    assert!(html.contains("<html lang=\"zh-CN\">") && html.contains("新建任务"));
    let (_, preview) = page(
        &app,
        &zh,
        "/t/acme/schedule-preview?schedule.kind=cron&schedule.expr=0+0+9+%3F+*+MON-FRI&schedule.timezone=Asia/Shanghai",
    )
    .await;
    assert!(preview.contains("09:00:00 +08:00"), "{preview}");
    app.stop().await;
}

/// Creates a manual task in `acme` (app `billing`) through the API; returns its id.
async fn task(app: &TestApp, name: &str, description: &str) -> i64 {
    let res = app
        .op(Method::POST, "/api/v1/tenants/acme/tasks")
        .json(&json!({ "name": name, "app": "billing", "handler": "h",
            "description": description, "schedule": { "kind": "manual" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    res.json::<serde_json::Value>().await.unwrap()["id"]
        .as_i64()
        .unwrap()
}

async fn depend(app: &TestApp, parent: i64, child: i64) {
    let res = app
        .op(Method::POST, "/api/v1/tenants/acme/dependencies")
        .json(&json!({ "parent_task_id": parent, "child_task_id": child }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
}

/// (parent, child) of every dependency of `acme`.
async fn dependencies(app: &TestApp) -> Vec<(i64, i64)> {
    let deps: Vec<serde_json::Value> = app
        .op(Method::GET, "/api/v1/tenants/acme/dependencies")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    deps.iter()
        .map(|d| {
            (
                d["parent_task_id"].as_i64().unwrap(),
                d["child_task_id"].as_i64().unwrap(),
            )
        })
        .collect()
}

async fn paused(app: &TestApp, id: i64) -> bool {
    let t: serde_json::Value = app
        .op(Method::GET, &format!("/api/v1/tenants/acme/tasks/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    t["paused"].as_bool().unwrap()
}

#[tokio::test]
async fn the_task_page_links_parents_and_children_both_ways_and_escapes_text() {
    let app = spawn_app(Backend::Sqlite).await;
    let (acme_tenant, invoices) = acme(&app).await;
    let hostile = "<img src=x onerror=alert(1)>";
    let ledger = task(&app, "ledger", hostile).await;
    let report = task(&app, "report", "").await;
    depend(&app, invoices, ledger).await;
    depend(&app, ledger, report).await;
    app.user(Some(&acme_tenant), "vera", Role::TenantViewer)
        .await;
    let admin = sign_in(&app, "root").await;

    // The middle task: its parent and child linked, in the list and in the graph.
    let (status, html) = page(&app, &admin, &format!("/t/acme/tasks/{ledger}")).await;
    assert_eq!(status, StatusCode::OK);
    let parent_link = format!("href=\"/t/acme/tasks/{invoices}\"");
    let child_link = format!("href=\"/t/acme/tasks/{report}\"");
    let parents = html.split("id=\"task-parents\"").nth(1).unwrap();
    assert!(parents.split("</p>").next().unwrap().contains(&parent_link));
    let children = html.split("id=\"task-children\"").nth(1).unwrap();
    assert!(children.split("</p>").next().unwrap().contains(&child_link));
    let svg = html.split("<svg").nth(1).expect("the graph is drawn");
    let svg = svg.split("</svg>").next().unwrap();
    for id in [invoices, ledger, report] {
        assert!(
            svg.contains(&format!("<a href=\"/t/acme/tasks/{id}\"")),
            "node {id} is a link"
        );
    }
    assert!(svg.contains(&format!(
        "<a href=\"/t/acme/tasks/{ledger}\" class=\"node current\""
    )));
    // Free text is text: the description is escaped, never markup.
    assert!(
        html.contains("img src=x onerror=alert(1)"),
        "the text is shown"
    );
    assert!(!html.contains("<img"), "the text is not markup");
    // The admin is offered edit, run now and pause.
    for control in ["/edit\"", "/trigger\"", "/pause\""] {
        assert!(
            html.contains(&format!("/t/acme/tasks/{ledger}{control}")),
            "{control}"
        );
    }

    // Both ways: the parent's page links the child, the child's the whole chain.
    let (_, html) = page(&app, &admin, &format!("/t/acme/tasks/{invoices}")).await;
    let children = html.split("id=\"task-children\"").nth(1).unwrap();
    assert!(
        children
            .split("</p>")
            .next()
            .unwrap()
            .contains(&format!("href=\"/t/acme/tasks/{ledger}\""))
    );
    let (_, html) = page(&app, &admin, &format!("/t/acme/tasks/{report}")).await;
    assert!(html.contains(&parent_link), "ancestors are in the graph");

    // Task names link here from the task list and the runs pages.
    let (_, html) = page(&app, &admin, "/t/acme/tasks").await;
    assert!(html.contains(&format!(
        "<a href=\"/t/acme/tasks/{ledger}\" class=\"task-name\">ledger</a>"
    )));
    let res = post(
        &app,
        &admin,
        &format!("/t/acme/tasks/{report}/trigger"),
        form(&[("back", "/")]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let (_, html) = page(&app, &admin, "/t/acme/runs").await;
    assert!(html.contains(&format!(
        "<a href=\"/t/acme/tasks/{report}\" class=\"task-link\">report</a>"
    )));

    // A viewer reads the page and is offered no controls; the list offers no bulk actions.
    let viewer = sign_in(&app, "vera").await;
    let (status, html) = page(&app, &viewer, &format!("/t/acme/tasks/{ledger}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains(&parent_link) && html.contains(&child_link));
    for control in ["/edit", "/trigger", "/pause", "/resume"] {
        assert!(!html.contains(control), "{control} is offered to a viewer");
    }
    let (_, html) = page(&app, &viewer, "/t/acme/tasks").await;
    assert!(!html.contains("id=\"bulk\"") && !html.contains("name=\"id\""));

    // In Chinese, nothing is left untranslated.
    let zh = format!("{admin}; mthpt_lang=zh-CN");
    for path in [
        format!("/t/acme/tasks/{ledger}"),
        format!("/t/acme/tasks/{report}/edit"),
        "/t/acme/tasks?bulk=pause&done=1&failed=999%3Anot_found".to_owned(),
    ] {
        let (status, html) = page(&app, &zh, &path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(
            !html.contains('⟦'),
            "{path} has an untranslated key: {html}"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn bulk_pause_pauses_the_chosen_tasks_only_and_is_refused_to_a_viewer() {
    let app = spawn_app(Backend::Sqlite).await;
    let (acme_tenant, invoices) = acme(&app).await;
    let ledger = task(&app, "ledger", "").await;
    let report = task(&app, "report", "").await;
    app.user(Some(&acme_tenant), "vera", Role::TenantViewer)
        .await;
    app.user(Some(&acme_tenant), "otto", Role::TenantOperator)
        .await;
    let (a, b) = (invoices.to_string(), ledger.to_string());
    let body = form(&[("action", "pause"), ("id", &a), ("id", &b)]);

    // A forged post of the viewer's session is refused and changes nothing.
    let viewer = sign_in(&app, "vera").await;
    let res = post(&app, &viewer, "/t/acme/tasks/bulk", body.clone()).await;
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    let res = post(
        &app,
        &viewer,
        "/t/acme/tasks/bulk",
        form(&[("action", "pause")]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::FORBIDDEN, "even naming no task");
    for id in [invoices, ledger, report] {
        assert!(!paused(&app, id).await, "task {id} was paused by a viewer");
    }

    // The operator sees the checkboxes and pauses the two chosen tasks, not the third.
    let operator = sign_in(&app, "otto").await;
    let (_, html) = page(&app, &operator, "/t/acme/tasks").await;
    assert!(html.contains(&format!("name=\"id\" value=\"{ledger}\" form=\"bulk\"")));
    let res = post(&app, &operator, "/t/acme/tasks/bulk", body).await;
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let back = res.headers()[LOCATION].to_str().unwrap().to_owned();
    assert!(back.contains("bulk=pause&done=2"), "{back}");
    assert!(paused(&app, invoices).await && paused(&app, ledger).await);
    assert!(!paused(&app, report).await, "a task not chosen was paused");
    let (_, html) = page(&app, &operator, &back).await;
    let result = html.split("id=\"bulk-result\"").nth(1).unwrap();
    assert!(result.contains("Paused 2 task(s)"), "{result}");

    // One failure is named and does not stop the others.
    let missing = (report + 1000).to_string();
    let res = post(
        &app,
        &operator,
        "/t/acme/tasks/bulk",
        form(&[("action", "resume"), ("id", &a), ("id", &missing)]),
    )
    .await;
    let back = res.headers()[LOCATION].to_str().unwrap().to_owned();
    assert!(!paused(&app, invoices).await && paused(&app, ledger).await);
    let (_, html) = page(&app, &operator, &back).await;
    let result = html.split("id=\"bulk-result\"").nth(1).unwrap();
    assert!(result.contains("Resumed 1 task(s)"), "{result}");
    assert!(result.contains(&format!("#{missing}: ")), "{result}");
    app.stop().await;
}

#[tokio::test]
async fn the_task_form_sets_parents_and_shows_a_cycle_next_to_the_field() {
    let app = spawn_app(Backend::Sqlite).await;
    let (_, invoices) = acme(&app).await;
    let ledger = task(&app, "ledger", "").await;
    let admin = sign_in(&app, "root").await;

    // The form offers the other tasks as parents.
    let (_, html) = page(&app, &admin, &format!("/t/acme/tasks/{ledger}/edit")).await;
    assert!(html.contains(&format!("name=\"parents\" value=\"{invoices}\"")));
    assert!(!html.contains(&format!("name=\"parents\" value=\"{ledger}\"")));

    let edit = |id: i64, name: &'static str, parent: i64| {
        let app = &app;
        async move {
            let t: serde_json::Value = app
                .op(Method::GET, &format!("/api/v1/tenants/acme/tasks/{id}"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let version = t["version"].as_i64().unwrap().to_string();
            form(&[
                ("version", &version),
                ("name", name),
                ("app", "billing"),
                ("handler", "h"),
                ("schedule.kind", "manual"),
                ("parents", &parent.to_string()),
            ])
        }
    };
    // ledger runs after invoices.
    let body = edit(ledger, "ledger", invoices).await;
    let res = post(&app, &admin, &format!("/t/acme/tasks/{ledger}/edit"), body).await;
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    assert_eq!(dependencies(&app).await, vec![(invoices, ledger)]);
    let (_, html) = page(&app, &admin, &format!("/t/acme/tasks/{ledger}/edit")).await;
    assert!(html.contains(&format!("name=\"parents\" value=\"{invoices}\" checked")));

    // invoices after ledger would close a cycle: refused next to the field, nothing saved.
    let body = edit(invoices, "invoices-renamed", ledger).await;
    let res = post(
        &app,
        &admin,
        &format!("/t/acme/tasks/{invoices}/edit"),
        body,
    )
    .await;
    assert_eq!(res.status(), StatusCode::CONFLICT);
    let html = res.text().await.unwrap();
    let error = html.split("id=\"err-f-parents\">").nth(1).expect("{html}");
    assert!(error.starts_with("dependency cycle"), "{error}");
    assert_eq!(dependencies(&app).await, vec![(invoices, ledger)]);
    let t: serde_json::Value = app
        .op(
            Method::GET,
            &format!("/api/v1/tenants/acme/tasks/{invoices}"),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(t["name"], "invoices", "the rename was not saved either");

    // Unchecking every parent removes the dependency.
    let body = edit(ledger, "ledger", 0).await.replace("&parents=0", "");
    let res = post(&app, &admin, &format!("/t/acme/tasks/{ledger}/edit"), body).await;
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    assert!(dependencies(&app).await.is_empty());
    app.stop().await;
}

/// The overview and the administration pages render for the roles that may see them, in
/// English and Chinese with every catalog key translated; a viewer is offered no change on them
/// and its forged posts are refused without changing anything.
#[tokio::test]
async fn overview_and_administration_pages_render_by_role_in_both_languages() {
    let app = spawn_app(Backend::Sqlite).await;
    let (acme_tenant, _task) = acme(&app).await;
    app.user(Some(&acme_tenant), "vera", Role::TenantViewer)
        .await;
    app.user(Some(&acme_tenant), "adam", Role::TenantAdmin)
        .await;
    let admin = sign_in(&app, "adam").await;
    let viewer = sign_in(&app, "vera").await;
    let root = sign_in(&app, "root").await;
    let pages: [(&str, &String, &[&str]); 3] = [
        (
            "tenant admin",
            &admin,
            &[
                "/t/acme",
                "/t/acme?range=24h",
                "/t/acme?range=7d",
                "/t/acme/apps",
                "/t/acme/executors",
                "/t/acme/users",
                "/t/acme/audit",
                "/account/tokens",
            ],
        ),
        (
            "tenant viewer",
            &viewer,
            &[
                "/t/acme",
                "/t/acme/apps",
                "/t/acme/executors",
                "/t/acme/audit",
                "/account/tokens",
            ],
        ),
        ("operator", &root, &["/t/acme", "/nodes", "/tenants"]),
    ];
    for (who, cookie, paths) in pages {
        for lang in ["en", "zh-CN"] {
            let cookie = format!("{cookie}; mthpt_lang={lang}");
            for path in paths {
                let (status, html) = page(&app, &cookie, path).await;
                assert_eq!(status, StatusCode::OK, "{who} {lang} {path}: {html}");
                assert!(
                    !html.contains('⟦'),
                    "an untranslated key on {path} ({who}, {lang}): {}",
                    html.split('⟦').nth(1).unwrap_or_default()
                );
            }
        }
    }
    // `/` opens the overview; a range it does not know is named in the error.
    let res = client()
        .get(app.url("/"))
        .header(COOKIE, &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers()[LOCATION], "/t/acme");
    let (status, html) = page(&app, &admin, "/t/acme?range=2y").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(html.contains("range"), "{html}");
    let (_, html) = page(&app, &admin, "/t/acme").await;
    assert!(
        html.contains("<svg"),
        "the overview draws its charts: {html}"
    );

    // A viewer is offered no change on these pages, and its forged posts are refused.
    for path in ["/t/acme/executors", "/t/acme/audit"] {
        let (_, html) = page(&app, &viewer, path).await;
        assert!(
            !html.contains("method=\"post\" action=\"/t/"),
            "a viewer is offered a change on {path}"
        );
    }
    let users_before = page(&app, &admin, "/t/acme/users").await.1;
    for (path, body) in [
        (
            "/t/acme/users",
            form(&[
                ("username", "mallory"),
                ("password", "a-long-password-1"),
                ("role", "tenant_admin"),
            ]),
        ),
        ("/tenants", form(&[("name", "mallory")])),
    ] {
        let res = client()
            .post(app.url(path))
            .header(COOKIE, &viewer)
            .header(ORIGIN, &app.base_url)
            .header(CONTENT_TYPE, FORM)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(
            res.status(),
            StatusCode::FORBIDDEN,
            "a viewer's post to {path}"
        );
    }
    let users_after = page(&app, &admin, "/t/acme/users").await.1;
    assert!(!users_after.contains("mallory") && !users_before.contains("mallory"));
    let (_, tenants) = page(&app, &root, "/tenants").await;
    assert!(
        !tenants.contains("mallory"),
        "the forged tenant was not created"
    );
    app.stop().await;
}

#[tokio::test]
async fn static_files_carry_an_etag_and_an_unchanged_one_costs_a_304_without_body() {
    let app = spawn_app(Backend::Sqlite).await;
    for path in ["/static/app.css", "/static/app.js"] {
        let first = client().get(app.url(path)).send().await.unwrap();
        assert_eq!(first.status(), StatusCode::OK, "{path}");
        let tag = first.headers()["etag"].to_str().unwrap().to_owned();
        assert!(tag.starts_with('"') && tag.len() == 66, "{path}: {tag}");
        assert!(!first.bytes().await.unwrap().is_empty());
        let again = client()
            .get(app.url(path))
            .header("if-none-match", &tag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{path}");
        assert_eq!(again.headers()["etag"].to_str().unwrap(), tag);
        assert!(again.bytes().await.unwrap().is_empty());
        let stale = client()
            .get(app.url(path))
            .header("if-none-match", "\"stale\"")
            .send()
            .await
            .unwrap();
        assert_eq!(stale.status(), StatusCode::OK, "{path}");
    }
    let missing = client()
        .get(app.url("/static/nope.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    app.stop().await;
}

/// The tenants page shows each tenant's usage against its quotas; an operator sets them with
/// the row's form (an empty field is unlimited), a tenant admin's forged post is refused.
#[tokio::test]
async fn operators_set_quotas_on_the_tenants_page_and_see_usage_against_them() {
    let app = spawn_app(Backend::Sqlite).await;
    let (acme_tenant, _task) = acme(&app).await;
    app.user(Some(&acme_tenant), "adam", Role::TenantAdmin)
        .await;
    let admin = sign_in(&app, "adam").await;
    let root = sign_in(&app, "root").await;

    let (status, html) = page(&app, &root, "/tenants").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("id=\"tenant-quotas\""), "{html}");
    assert!(html.contains("1 / ∞"), "one task, no quota: {html}");

    let res = post(
        &app,
        &root,
        "/tenants/acme/quotas",
        form(&[("max_tasks", "7"), ("max_waiting_runs", "")]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let (_, html) = page(&app, &root, "/tenants").await;
    assert!(
        html.contains("1 / 7"),
        "usage against the new quota: {html}"
    );
    for lang in ["en", "zh-CN"] {
        let (_, html) = page(&app, &format!("{root}; mthpt_lang={lang}"), "/tenants").await;
        assert!(!html.contains('⟦'), "an untranslated key ({lang})");
    }

    let res = post(
        &app,
        &admin,
        "/tenants/acme/quotas",
        form(&[("max_tasks", "1000")]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    let read = app
        .op(Method::GET, "/api/v1/tenants/acme/quotas")
        .send()
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap();
    assert_eq!(read["quotas"]["max_tasks"], json!(7));
    app.stop().await;
}

/// The operator's weight in `app`'s database for `tenant`, through the API.
async fn weight_of(app: &TestApp, tenant: &str) -> serde_json::Value {
    app.op(Method::GET, &format!("/api/v1/tenants/{tenant}/weight"))
        .send()
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap()["weight"]
        .clone()
}

/// The tenants page shows each tenant's claim weight in a form of its row: an operator sets
/// it; a refused value is shown next to the field, as typed, with why; a post from another
/// origin (CSRF) and a tenant admin's post change nothing.
#[tokio::test]
async fn operators_set_a_tenants_claim_weight_on_the_tenants_page() {
    let app = spawn_app(Backend::Sqlite).await;
    let (acme_tenant, _task) = acme(&app).await;
    app.user(Some(&acme_tenant), "adam", Role::TenantAdmin)
        .await;
    let admin = sign_in(&app, "adam").await;
    let root = sign_in(&app, "root").await;

    let (status, html) = page(&app, &root, "/tenants").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        html.contains("action=\"/tenants/acme/weight\"") && html.contains("value=\"1\""),
        "the weight form shows the default: {html}"
    );

    let res = post(
        &app,
        &root,
        "/tenants/acme/weight",
        form(&[("weight", "4")]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    assert_eq!(weight_of(&app, "acme").await, json!(4));
    let (_, html) = page(&app, &root, "/tenants").await;
    assert!(html.contains("name=\"weight\" value=\"4\""), "{html}");

    for bad in ["0", "1001", "heavy"] {
        let res = post(
            &app,
            &root,
            "/tenants/acme/weight",
            form(&[("weight", bad)]),
        )
        .await;
        assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
        let html = res.text().await.unwrap();
        assert!(
            html.contains("id=\"weight-acme-err\"")
                && html.contains("must be a whole number from 1 to 1000")
                && html.contains(&format!("name=\"weight\" value=\"{bad}\"")),
            "{bad}: the refusal is shown next to the field, with what was typed: {html}"
        );
    }
    for lang in ["en", "zh-CN"] {
        let (_, html) = page(&app, &format!("{root}; mthpt_lang={lang}"), "/tenants").await;
        assert!(!html.contains('⟦'), "an untranslated key ({lang})");
    }

    let forged = client()
        .post(app.url("/tenants/acme/weight"))
        .header(COOKIE, &root)
        .header(ORIGIN, "http://evil.example")
        .header(CONTENT_TYPE, FORM)
        .body(form(&[("weight", "999")]))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN, "another origin");
    let res = post(
        &app,
        &admin,
        "/tenants/acme/weight",
        form(&[("weight", "999")]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::FORBIDDEN, "a tenant admin");
    let res = post(
        &app,
        &admin,
        "/tenants/acme/weight",
        form(&[("weight", "x")]),
    )
    .await;
    assert_eq!(
        res.status(),
        StatusCode::FORBIDDEN,
        "a tenant admin, whatever the value"
    );
    assert_eq!(weight_of(&app, "acme").await, json!(4), "nothing changed");
    app.stop().await;
}

/// The `href` of the first link in `html` whose attributes end with `tail` (e.g. `rel="next"`).
fn link_with(html: &str, tail: &str) -> Option<String> {
    let end = html.find(&format!("\" {tail}>"))?;
    let start = html[..end].rfind("href=\"")? + "href=\"".len();
    Some(
        html[start..end]
            .replace("&amp;", "&")
            .replace("&#38;", "&")
            .replace("&#x3D;", "="),
    )
}

/// The run ids listed in a runs page, in order.
fn listed_runs(html: &str) -> Vec<i64> {
    html.split("data-run-id=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next()?.parse().ok())
        .collect()
}

#[tokio::test]
async fn the_runs_list_pages_both_ways_finds_a_run_by_id_and_filters_by_day() {
    let app = spawn_app(Backend::Sqlite).await;
    let (_, task) = acme(&app).await;
    let admin = sign_in(&app, "root").await;
    let mut made = Vec::new();
    for _ in 0..60 {
        let res = app
            .op(
                Method::POST,
                &format!("/api/v1/tenants/acme/tasks/{task}/trigger"),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::CREATED);
        made.push(
            res.json::<serde_json::Value>().await.unwrap()["id"]
                .as_i64()
                .unwrap(),
        );
    }
    made.reverse();

    // The newest page: 50 runs, a way to older ones, none to newer.
    let (status, first) = page(&app, &admin, "/t/acme/runs").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed_runs(&first), made[..50]);
    assert!(first.contains(">Duration</th>"), "a duration column");
    assert!(link_with(&first, "rel=\"prev\"").is_none());
    let older = link_with(&first, "rel=\"next\"").expect("a link to older runs");

    // The older page links back to newer runs and to the newest.
    let (_, second) = page(&app, &admin, &older).await;
    assert_eq!(listed_runs(&second), made[50..]);
    let newer = link_with(&second, "rel=\"prev\"").expect("a link to newer runs");
    assert!(second.contains(">Newest</a>"), "{second}");
    let (_, back) = page(&app, &admin, &newer).await;
    assert_eq!(
        listed_runs(&back),
        made[..50],
        "Newer leads back to the page before"
    );

    // A run is found by its id.
    let res = client()
        .get(app.url(&format!("/t/acme/runs?run={}", made[7])))
        .header(COOKIE, &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        res.headers()[LOCATION],
        format!("/t/acme/runs/{}", made[7]).as_str()
    );

    // Days filter the scheduled time; a day that is not one is refused naming the field.
    let (_, none) = page(&app, &admin, "/t/acme/runs?from=2999-01-01").await;
    assert!(listed_runs(&none).is_empty() && none.contains("No runs match."));
    let (_, all) = page(&app, &admin, "/t/acme/runs?from=2000-01-01&to=2999-12-31").await;
    assert_eq!(listed_runs(&all), made[..50]);
    let (status, wrong) = page(&app, &admin, "/t/acme/runs?from=31.12.2026").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(wrong.contains("from"), "{wrong}");
    app.stop().await;
}

#[tokio::test]
async fn the_task_form_reports_every_wrong_field_in_one_answer() {
    let app = spawn_app(Backend::Sqlite).await;
    acme(&app).await;
    let admin = sign_in(&app, "root").await;
    // A field the form cannot read (timeout), and fields only saving checks (the handler
    // missing, retries out of range): all of them come back at once.
    let body = form(&[
        ("name", "nightly"),
        ("app", "billing"),
        ("handler", ""),
        ("schedule.kind", "manual"),
        ("timeout_ms", "soon"),
        ("max_retries", "5000"),
    ]);
    let res = post(&app, &admin, "/t/acme/tasks/new", body).await;
    assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let html = res.text().await.unwrap();
    for field in ["timeout_ms", "handler", "max_retries"] {
        let id = format!("id=\"err-f-{}\"", field.replace('_', "-"));
        assert!(html.contains(&id), "{field} has its error: {html}");
    }
    app.stop().await;
}

/// Destructive actions answer with a confirmation page first and act only on `confirm=yes`;
/// every action then lands on a page with a message linking what it made, and a drain's
/// message offers the undrain. A viewer gets no confirmation page for what it may not do.
#[tokio::test]
async fn destructive_actions_ask_first_and_actions_say_what_they_did() {
    let app = spawn_app(Backend::Sqlite).await;
    let (acme_tenant, task) = acme(&app).await;
    let (user, _) = app
        .user(Some(&acme_tenant), "dora", Role::TenantOperator)
        .await;
    app.user(Some(&acme_tenant), "vera", Role::TenantViewer)
        .await;
    let root = sign_in(&app, "root").await;
    let viewer = sign_in(&app, "vera").await;

    // Delete a user: a question first, nothing deleted; confirmed, deleted, with a message.
    let delete = format!("/t/acme/users/{}/delete", user.id);
    let res = post(&app, &root, &delete, String::new()).await;
    assert_eq!(res.status(), StatusCode::OK);
    let html = res.text().await.unwrap();
    assert!(
        html.contains("id=\"confirm-yes\"") && html.contains("dora"),
        "the question names the user: {html}"
    );
    let (_, users) = page(&app, &root, "/t/acme/users").await;
    assert!(users.contains("dora"), "asking deleted nothing");
    let res = post(&app, &root, &delete, form(&[("confirm", "yes")])).await;
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let to = res.headers()[LOCATION].to_str().unwrap().to_owned();
    assert_eq!(
        to,
        format!("/t/acme/users?flash=user_deleted&flash_id={}", user.id)
    );
    let (_, users) = page(&app, &root, &to).await;
    assert!(
        !users.contains("dora") && users.contains("id=\"flash\""),
        "{users}"
    );
    let res = post(&app, &viewer, &delete, String::new()).await;
    assert_eq!(
        res.status(),
        StatusCode::FORBIDDEN,
        "no question for a viewer"
    );

    // Run now: the message links to the run it made.
    let res = post(
        &app,
        &root,
        &format!("/t/acme/tasks/{task}/trigger"),
        form(&[("back", "/t/acme/tasks")]),
    )
    .await;
    let to = res.headers()[LOCATION].to_str().unwrap().to_owned();
    let run: i64 = to
        .strip_prefix("/t/acme/tasks?flash=triggered&flash_id=")
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("{to}"));
    let (_, html) = page(&app, &root, &to).await;
    assert!(
        html.contains(&format!("href=\"/t/acme/runs/{run}\" id=\"flash-link\"")),
        "{html}"
    );
    assert!(
        !html.contains("value=\"/t/acme/tasks?flash="),
        "the page's own back links drop the message"
    );

    // Cancel that run: a question first; confirmed, the message links to it.
    let cancel = format!("/t/acme/runs/{run}/cancel");
    let res = post(&app, &root, &cancel, String::new()).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.text().await.unwrap().contains(&format!("#{run}")));
    let res = post(&app, &root, &cancel, form(&[("confirm", "yes")])).await;
    assert_eq!(
        res.headers()[LOCATION].to_str().unwrap(),
        format!("/t/acme/runs/{run}?flash=cancelled&flash_id={run}")
    );

    // A drain's message offers the undrain.
    let executor = {
        let mut tx = app.store().begin().await.unwrap();
        let billing = tx
            .find_app_by_name(acme_tenant.id, "billing")
            .await
            .unwrap()
            .unwrap();
        let e = tx
            .register_executor(
                &mthpt_engine::app::ExecutorRegistration {
                    app_id: billing.id,
                    instance_id: "b-1".into(),
                    base_url: "http://127.0.0.1:9".into(),
                    capacity: 1,
                    handlers: vec!["h".into()],
                    labels: Default::default(),
                },
                mthpt_engine::clock::Clock::now_ms(&mthpt_engine::clock::SystemClock),
            )
            .await
            .unwrap();
        tx.commit().await.unwrap();
        e
    };
    let drain = format!("/t/acme/executors/{}/drain", executor.id);
    let res = post(&app, &root, &drain, String::new()).await;
    assert!(
        res.text().await.unwrap().contains("b-1"),
        "the question names the instance"
    );
    let res = post(&app, &root, &drain, form(&[("confirm", "yes")])).await;
    let to = res.headers()[LOCATION].to_str().unwrap().to_owned();
    let (_, html) = page(&app, &root, &to).await;
    assert!(
        html.contains(&format!(
            "action=\"/t/acme/executors/{}/undrain\"",
            executor.id
        )),
        "{html}"
    );
    app.stop().await;
}

/// The apps page: a tenant admin creates an app and the answer shows its secret — the one
/// wrappers sign with — once, with the `mthpt wrapper` lines (a placeholder for the engine URL
/// this console does not know); replacing it asks first, then shows the new one once. A
/// token's revocation asks first too.
#[tokio::test]
async fn a_tenant_admin_creates_an_app_and_sees_its_secret_once_with_the_lines_to_paste() {
    let app = spawn_app(Backend::Sqlite).await;
    let (acme_tenant, _) = acme(&app).await;
    let (adam, token) = app
        .user(Some(&acme_tenant), "adam", Role::TenantAdmin)
        .await;
    app.user(Some(&acme_tenant), "vera", Role::TenantViewer)
        .await;
    let admin = sign_in(&app, "adam").await;
    let viewer = sign_in(&app, "vera").await;
    let secret_of = |html: &str| {
        html.split("id=\"app-secret\" class=\"secret-value\" value=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .map(str::to_owned)
    };
    let stored = || async {
        let mut tx = app.store().begin_read().await.unwrap();
        tx.find_app_by_key("acme", "ops")
            .await
            .unwrap()
            .map(|a| a.secret)
    };

    let res = post(&app, &admin, "/t/acme/apps", form(&[("name", "ops")])).await;
    assert_eq!(res.status(), StatusCode::OK);
    let html = res.text().await.unwrap();
    let secret = secret_of(&html).expect("the secret is shown");
    assert_eq!(stored().await.as_deref(), Some(secret.as_str()));
    let text = html
        .replace("&#x27;", "'")
        .replace("&#39;", "'")
        .replace("&gt;", ">")
        .replace("&#62;", ">")
        .replace("&lt;", "<")
        .replace("&#60;", "<");
    assert!(
        text.contains(&format!(
            "printf '%s' '{secret}' > acme.ops.secret\nmthpt wrapper --app acme.ops --secret-file acme.ops.secret --engine <ENGINE_URL> --listen 127.0.0.1:9010 --enable-shell"
        )),
        "the lines to paste: {html}"
    );
    assert!(html.contains("id=\"engine-unknown\""));
    let (_, again) = page(&app, &admin, "/t/acme/apps").await;
    assert!(secret_of(&again).is_none(), "the secret is shown once");
    assert!(again.contains("data-app=\"ops\""), "the app is listed");
    let res = post(&app, &admin, "/t/acme/apps", form(&[("name", "ops")])).await;
    let html = res.text().await.unwrap();
    assert!(
        html.contains("id=\"app-name-err\"") && secret_of(&html).is_none(),
        "a taken name is shown next to the field: {html}"
    );
    let res = post(&app, &viewer, "/t/acme/apps", form(&[("name", "evil")])).await;
    assert_eq!(res.status(), StatusCode::FORBIDDEN);

    // Replacing the secret asks first; confirmed, the new one is shown once.
    let rotate = "/t/acme/apps/ops/rotate-secret";
    let res = post(&app, &admin, rotate, String::new()).await;
    assert!(res.text().await.unwrap().contains("id=\"confirm-yes\""));
    assert_eq!(
        stored().await.as_deref(),
        Some(secret.as_str()),
        "asking changed nothing"
    );
    let res = post(&app, &admin, rotate, form(&[("confirm", "yes")])).await;
    let new = secret_of(&res.text().await.unwrap()).expect("the new secret is shown");
    assert_ne!(new, secret);
    assert_eq!(stored().await.as_deref(), Some(new.as_str()));

    // Revoking a token asks first; confirmed, it stops working.
    let tokens = {
        let mut tx = app.store().begin_read().await.unwrap();
        tx.list_api_tokens(adam.id).await.unwrap()
    };
    let revoke = format!("/account/tokens/{}/revoke", tokens[0].id.0);
    let res = post(&app, &admin, &revoke, String::new()).await;
    assert!(res.text().await.unwrap().contains("id=\"confirm-yes\""));
    let me = app
        .request(Method::GET, "/api/v1/me", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(me.status(), StatusCode::OK, "asking revoked nothing");
    let res = post(&app, &admin, &revoke, form(&[("confirm", "yes")])).await;
    assert_eq!(
        res.headers()[LOCATION].to_str().unwrap(),
        format!(
            "/account/tokens?flash=token_revoked&flash_id={}",
            tokens[0].id.0
        )
    );
    let me = app
        .request(Method::GET, "/api/v1/me", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(me.status(), StatusCode::UNAUTHORIZED);
    app.stop().await;
}

/// The visible text of a page (no tags, no scripts), for looking for English prose.
fn visible_text(html: &str) -> String {
    let mut text = String::new();
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        text.push_str(&rest[..open]);
        text.push(' ');
        let tag = &rest[open..];
        let skip_to = if tag.starts_with("<script") {
            tag.find("</script>").map(|i| i + "</script>".len())
        } else {
            tag.find('>').map(|i| i + 1)
        };
        rest = &tag[skip_to.unwrap_or(tag.len())..];
    }
    text.push_str(rest);
    text
}

/// Three lower-case English words in a row in `text`, if any.
fn english_prose(text: &str) -> Option<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .windows(3)
        .find(|w| {
            w.iter()
                .all(|x| x.len() >= 2 && x.chars().all(|c| c.is_ascii_lowercase()))
        })
        .map(|w| w.join(" "))
}

#[tokio::test]
async fn server_messages_on_chinese_pages_are_in_chinese() {
    let app = spawn_app(Backend::Sqlite).await;
    let (acme_tenant, task) = acme(&app).await;
    let admin = sign_in(&app, "root").await;
    let zh = format!("{admin}; mthpt_lang=zh-CN");
    let assert_chinese = |what: &str, html: &str| {
        let text = visible_text(html);
        assert!(
            english_prose(&text).is_none(),
            "{what}: English in a Chinese page: {:?}\n{text}",
            english_prose(&text)
        );
    };

    // The task form: every wrong field, each said in Chinese.
    let res = post(
        &app,
        &zh,
        "/t/acme/tasks/new",
        form(&[
            ("name", "bad name!"),
            ("app", "billing"),
            ("handler", "h"),
            ("schedule.kind", "cron"),
            ("schedule.expr", "0 0 25 * * ?"),
            ("schedule.timezone", "Asia/Shanghai"),
            ("timeout_ms", "soon"),
        ]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let html = res.text().await.unwrap();
    assert!(html.contains("不是有效的任务名"), "{html}");
    assert!(html.contains("小时字段：值 25 超出范围 0-23"), "{html}");
    assert!(html.contains("必须是整数"), "{html}");
    assert_chinese("task form", &html);

    // A cron expression that never fires, in the live preview.
    let (_, preview) = page(
        &app,
        &zh,
        "/t/acme/schedule-preview?schedule.kind=cron&schedule.expr=0+0+0+31+2+%3F&schedule.timezone=UTC",
    )
    .await;
    assert!(preview.contains("永远不会触发"), "{preview}");
    assert_chinese("preview", &preview);

    // Not found.
    let (status, html) = page(&app, &zh, "/t/acme/tasks/999999").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(html.contains("未找到"), "{html}");
    assert_chinese("404 page", &html);
    // A path the pages cannot read: the same error page, saying what is wrong.
    let (status, html) = page(&app, &zh, "/t/acme/tasks/abc").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(html.contains("不是数字"), "{html}");
    assert_chinese("unreadable path", &html);

    // An engine alarm, on the alarms page and the overview.
    let alarm = NewAlarm::new(
        Some(acme_tenant.id),
        AlarmKind::RetriesExhausted,
        Severity::Critical,
        "task \"invoices\" failed after 3 attempt(s); last error: exit status 1",
    );
    let mut tx = app.store().begin().await.unwrap();
    tx.insert_alarm(&alarm, app.now()).await.unwrap().unwrap();
    tx.commit().await.unwrap();
    for path in ["/t/acme/alarms", "/t/acme"] {
        let (_, html) = page(&app, &zh, path).await;
        assert!(
            html.contains("任务 \"invoices\" 尝试 3 次后失败；最后的错误：exit status 1")
                || html.contains(
                    "任务 &quot;invoices&quot; 尝试 3 次后失败；最后的错误：exit status 1"
                )
                || html
                    .contains("任务 &#34;invoices&#34; 尝试 3 次后失败；最后的错误：exit status 1"),
            "{path}: {html}"
        );
    }

    // A time zone that is none: back where the reader was, told so, nothing changed.
    let res = post(
        &app,
        &zh,
        "/prefs",
        form(&[
            ("tz", "Mars/Olympus"),
            ("back", &format!("/t/acme/tasks/{task}")),
        ]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    assert!(res.headers().get(SET_COOKIE).is_none(), "no zone saved");
    let back = res.headers()[LOCATION].to_str().unwrap().to_owned();
    assert!(
        back.starts_with(&format!("/t/acme/tasks/{task}?")),
        "{back}"
    );
    let (status, html) = page(&app, &zh, &back).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("这不是 IANA 时区名"), "{html}");
    app.stop().await;
}
