//! The console's actions on many rows and the pages around them, over HTTP on both backends:
//! cancelling (after a question) and re-running the runs ticked in the list (and the same
//! through `POST /api/v1/tenants/{tenant}/runs/bulk`), acknowledging the ticked alarms, muting a
//! task's alarms for some hours and unmuting them, deleting a task after a question and cloning
//! one into the new-task form, the task file's download and its import after a dry run, and an
//! executor instance's page with its runs and alarms. Each is refused to a viewer, and a bad
//! input is answered with a page that says what is wrong (never a 500).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use mthpt_console::testing::TestApp;
use mthpt_engine::alarm::{AlarmKind, NewAlarm, Severity};
use mthpt_engine::app::ExecutorId;
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::tenant::{Role, Tenant};
use mthpt_tests::{TestWrapper, quick_engine_config, start_engine, tenancy, wait_until};
use reqwest::header::{CONTENT_DISPOSITION, CONTENT_TYPE, COOKIE, LOCATION, ORIGIN};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::web_session::{FORM, client, enc, form, page, post, sign_in};

mthpt_engine::on_both_backends!(
    with mthpt_console::testing::spawn_app;
    runs_are_cancelled_after_a_question_and_rerun_in_bulk_naming_each_failure,
    the_runs_bulk_api_is_refused_to_a_viewer_and_reaches_no_other_tenants_runs,
    ticked_alarms_are_acknowledged_and_a_tasks_alarms_muted_for_hours,
    a_task_is_deleted_after_a_question_and_cloned_into_the_new_task_form,
    tasks_download_as_a_file_and_import_after_a_dry_run,
    an_executor_page_shows_its_runs_its_alarms_and_drain,
);

const WAIT: Duration = Duration::from_secs(20);

/// Where a redirect leads.
fn location(res: &reqwest::Response) -> String {
    assert_eq!(res.status(), StatusCode::SEE_OTHER, "{res:?}");
    res.headers()[LOCATION].to_str().unwrap().to_owned()
}

/// Visits `path` in English and Chinese: it answers 200 with every catalog key translated.
async fn translated(app: &TestApp, cookie: &str, path: &str) -> String {
    let mut english = String::new();
    for lang in ["zh-CN", "en"] {
        let (status, html) = page(app, &format!("{cookie}; mthpt_lang={lang}"), path).await;
        assert_eq!(status, StatusCode::OK, "{lang} {path}: {html}");
        assert!(
            !html.contains('⟦'),
            "an untranslated key on {path} ({lang}): {}",
            html.split('⟦').nth(1).unwrap_or_default()
        );
        english = html;
    }
    english
}

async fn api(app: &TestApp, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = app.op(method, path);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// Tenant `acme` with app `billing` and a manual task `invoices`; a tenant operator `olga`
/// and a viewer `vera`. Returns the tenant and the task.
async fn acme(app: &TestApp) -> (Tenant, i64) {
    let tenant = app.tenant("acme").await;
    let (s, body) = api(
        app,
        Method::POST,
        "/api/v1/tenants/acme/apps",
        Some(json!({ "name": "billing" })),
    )
    .await;
    assert_eq!(s, 201, "{body}");
    let task = new_task(app, "invoices").await;
    app.user(Some(&tenant), "olga", Role::TenantOperator).await;
    app.user(Some(&tenant), "vera", Role::TenantViewer).await;
    (tenant, task)
}

async fn new_task(app: &TestApp, name: &str) -> i64 {
    let (s, task) = api(
        app,
        Method::POST,
        "/api/v1/tenants/acme/tasks",
        Some(json!({ "name": name, "app": "billing", "handler": "h",
            "params": { "region": "eu" }, "max_retries": 2,
            "schedule": { "kind": "manual" } })),
    )
    .await;
    assert_eq!(s, 201, "{task}");
    task["id"].as_i64().unwrap()
}

async fn trigger(app: &TestApp, task: i64) -> i64 {
    let (s, run) = api(
        app,
        Method::POST,
        &format!("/api/v1/tenants/acme/tasks/{task}/trigger"),
        None,
    )
    .await;
    assert_eq!(s, 201, "{run}");
    run["id"].as_i64().unwrap()
}

async fn run_state(app: &TestApp, run: i64) -> String {
    let (s, body) = api(
        app,
        Method::GET,
        &format!("/api/v1/tenants/acme/runs/{run}"),
        None,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    body["state"].as_str().unwrap().to_owned()
}

async fn run_count(app: &TestApp) -> usize {
    let (_, body) = api(app, Method::GET, "/api/v1/tenants/acme/runs", None).await;
    body["items"].as_array().unwrap().len()
}

async fn runs_are_cancelled_after_a_question_and_rerun_in_bulk_naming_each_failure(app: TestApp) {
    let (_, task) = acme(&app).await;
    let (r1, r2, r3) = (
        trigger(&app, task).await,
        trigger(&app, task).await,
        trigger(&app, task).await,
    );
    let (s, _) = api(
        &app,
        Method::POST,
        &format!("/api/v1/tenants/acme/runs/{r3}/cancel"),
        None,
    )
    .await;
    assert_eq!(s, 200);
    let ops = sign_in(&app, "olga").await;
    let viewer = sign_in(&app, "vera").await;

    // The list offers a checkbox per row and the two actions.
    let html = translated(&app, &ops, "/t/acme/runs").await;
    assert!(html.contains("id=\"bulk-cancel\"") && html.contains("id=\"bulk-rerun\""));
    assert!(html.contains(&format!("name=\"id\" value=\"{r1}\" form=\"run-bulk\"")));

    // Cancel asks first, naming the runs, and carries them to the confirmed post.
    let ticked = |extra: &[(&str, &str)]| {
        let (a, b, c) = (r1.to_string(), r2.to_string(), r3.to_string());
        let mut pairs: Vec<(&str, String)> = vec![
            ("action", "cancel".to_owned()),
            ("task", task.to_string()),
            ("id", a),
            ("id", b),
            ("id", c),
            ("id", "999999".to_owned()),
        ];
        pairs.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        pairs
            .iter()
            .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
            .collect::<Vec<_>>()
            .join("&")
    };
    let res = post(&app, &ops, "/t/acme/runs/bulk", ticked(&[])).await;
    assert_eq!(res.status(), StatusCode::OK);
    let question = res.text().await.unwrap();
    assert!(
        question.contains("id=\"confirm-yes\"")
            && question.contains(&format!("#{r1}"))
            && question.contains(&format!("name=\"id\" value=\"{r2}\"")),
        "{question}"
    );
    assert_eq!(
        run_state(&app, r1).await,
        "pending",
        "asking changed nothing"
    );

    // Confirmed: the two open runs are cancelled; the finished and the unknown are named.
    let res = post(
        &app,
        &ops,
        "/t/acme/runs/bulk",
        ticked(&[("confirm", "yes")]),
    )
    .await;
    let to = location(&res);
    assert!(
        to.starts_with(&format!("/t/acme/runs?task={task}&")) && to.contains("bulk=cancel&done=2&"),
        "back on the same filter: {to}"
    );
    assert_eq!(run_state(&app, r1).await, "cancelled");
    assert_eq!(run_state(&app, r2).await, "cancelled");
    let html = translated(&app, &ops, &to).await;
    let notice = html.split("id=\"bulk-result\"").nth(1).expect(&html);
    let notice = notice.split("</div>").next().unwrap();
    assert!(notice.contains("Cancelled 2 run(s)"), "{notice}");
    assert!(
        notice.contains(&format!("Run #{r3}: already finished")),
        "{notice}"
    );
    assert!(notice.contains("Run #999999: no such run"), "{notice}");

    // Re-run: a new run of the same task, no question.
    let before = run_count(&app).await;
    let res = post(
        &app,
        &ops,
        "/t/acme/runs/bulk",
        form(&[("action", "rerun"), ("id", &r1.to_string())]),
    )
    .await;
    assert!(location(&res).contains("bulk=rerun&done=1&failed="));
    assert_eq!(run_count(&app).await, before + 1);

    // Nothing ticked, an id that is not a number, an unknown action: said plainly.
    let res = post(
        &app,
        &ops,
        "/t/acme/runs/bulk",
        form(&[("action", "cancel")]),
    )
    .await;
    let to = location(&res);
    assert!(to.ends_with("&bulk=none"), "{to}");
    let (_, html) = page(&app, &ops, &to).await;
    assert!(html.contains("Select at least one run."), "{html}");
    let res = post(
        &app,
        &ops,
        "/t/acme/runs/bulk",
        form(&[("action", "rerun"), ("id", "abc")]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(res.text().await.unwrap().contains("abc&#34; is not an id"));
    let res = post(
        &app,
        &ops,
        "/t/acme/runs/bulk",
        form(&[("action", "explode"), ("id", "1")]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);

    // A viewer is offered no checkbox and its posts are refused, changing nothing.
    let (_, html) = page(&app, &viewer, "/t/acme/runs").await;
    assert!(!html.contains("run-bulk") && !html.contains("type=\"checkbox\""));
    let before = run_count(&app).await;
    for body in [
        form(&[("action", "rerun"), ("id", &r1.to_string())]),
        form(&[("action", "cancel")]),
    ] {
        let res = post(&app, &viewer, "/t/acme/runs/bulk", body).await;
        assert_eq!(res.status(), StatusCode::FORBIDDEN);
    }
    assert_eq!(run_count(&app).await, before);

    // The same through the API: one result per run.
    let r4 = trigger(&app, task).await;
    let (s, body) = api(
        &app,
        Method::POST,
        "/api/v1/tenants/acme/runs/bulk",
        Some(json!({ "action": "cancel", "run_ids": [r4, r1, 999_999] })),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(
        (body["succeeded"].as_u64(), body["failed"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(body["results"][0]["run_id"], r4);
    assert_eq!(body["results"][1]["status"], 409);
    assert_eq!(body["results"][2]["code"], "not_found");
    assert_eq!(run_state(&app, r4).await, "cancelled");
    let (s, body) = api(
        &app,
        Method::POST,
        "/api/v1/tenants/acme/runs/bulk",
        Some(json!({ "action": "rerun", "run_ids": [r4] })),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert!(body["results"][0]["new_run_id"].as_i64().unwrap() > r4);
    let (s, body) = api(
        &app,
        Method::POST,
        "/api/v1/tenants/acme/runs/bulk",
        Some(json!({ "action": "rerun", "run_ids": [] })),
    )
    .await;
    assert_eq!(
        (s, body["errors"][0]["field"].as_str()),
        (422, Some("run_ids"))
    );
    app.stop().await;
}

async fn the_runs_bulk_api_is_refused_to_a_viewer_and_reaches_no_other_tenants_runs(app: TestApp) {
    let (acme_tenant, task) = acme(&app).await;
    let run = trigger(&app, task).await;
    let other = app.tenant("other").await;
    let (_, viewer) = app
        .user(Some(&acme_tenant), "vic", Role::TenantViewer)
        .await;
    let (_, intruder) = app.user(Some(&other), "ivo", Role::TenantOperator).await;
    let cancel = json!({ "action": "cancel", "run_ids": [run] });
    let send = |token: &str, tenant: &str| {
        app.request(
            Method::POST,
            &format!("/api/v1/tenants/{tenant}/runs/bulk"),
            token,
        )
        .json(&cancel)
        .send()
    };
    // A viewer of the tenant: refused as a whole.
    let res = send(&viewer, "acme").await.unwrap();
    assert_eq!(res.status().as_u16(), 403);
    // Another tenant's operator: acme is not theirs to name, and through their own tenant
    // acme's run is not found.
    let res = send(&intruder, "acme").await.unwrap();
    assert_eq!(res.status().as_u16(), 404);
    let res = send(&intruder, "other").await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["results"][0]["code"], "not_found", "{body}");
    assert_eq!(
        run_state(&app, run).await,
        "pending",
        "nothing was cancelled"
    );
    app.stop().await;
}

async fn raise(app: &TestApp, tenant: &Tenant, task: Option<i64>, executor: Option<i64>) -> i64 {
    let mut alarm = NewAlarm::new(
        Some(tenant.id),
        AlarmKind::RunFailed,
        Severity::Critical,
        format!("failure of {task:?} on {executor:?}"),
    );
    alarm.task_id = task.map(mthpt_engine::task::TaskId);
    alarm.executor_id = executor.map(ExecutorId);
    let mut tx = app.store().begin().await.unwrap();
    let a = tx
        .insert_alarm(&alarm, SystemClock.now_ms())
        .await
        .unwrap()
        .unwrap();
    tx.commit().await.unwrap();
    a.id.0
}

async fn open_alarms(app: &TestApp) -> Vec<i64> {
    let (_, body) = api(
        app,
        Method::GET,
        "/api/v1/tenants/acme/alarms?status=open",
        None,
    )
    .await;
    body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_i64().unwrap())
        .collect()
}

async fn mutes(app: &TestApp) -> Vec<Value> {
    let (_, body) = api(app, Method::GET, "/api/v1/tenants/acme/alarm-mutes", None).await;
    body.as_array()
        .or_else(|| body["items"].as_array())
        .cloned()
        .unwrap_or_default()
}

async fn ticked_alarms_are_acknowledged_and_a_tasks_alarms_muted_for_hours(app: TestApp) {
    let (tenant, task) = acme(&app).await;
    let a1 = raise(&app, &tenant, Some(task), None).await;
    let a2 = raise(&app, &tenant, None, None).await;
    let ops = sign_in(&app, "olga").await;
    let viewer = sign_in(&app, "vera").await;

    let html = translated(&app, &ops, "/t/acme/alarms").await;
    assert!(html.contains(&format!("name=\"id\" value=\"{a1}\" form=\"alarm-bulk\"")));
    assert!(html.contains("id=\"mute-form\"") && html.contains("id=\"bulk-ack\""));

    // Acknowledge the ticked ones: each is, and an unknown one is named.
    let body = form(&[
        ("status", "open"),
        ("id", &a1.to_string()),
        ("id", &a2.to_string()),
        ("id", "999999"),
    ]);
    let res = post(&app, &ops, "/t/acme/alarms/ack", body).await;
    let to = location(&res);
    assert!(to.starts_with("/t/acme/alarms?status=open&"), "{to}");
    assert!(open_alarms(&app).await.is_empty());
    let html = translated(&app, &ops, &to).await;
    assert!(html.contains("Acknowledged 2 alarm(s)"), "{html}");
    assert!(html.contains("Alarm #999999: no such alarm"), "{html}");
    let res = post(
        &app,
        &ops,
        "/t/acme/alarms/ack",
        form(&[("status", "open")]),
    )
    .await;
    let (_, html) = page(&app, &ops, &location(&res)).await;
    assert!(html.contains("Select at least one alarm."));

    // Mute the task's alarms for 4 hours from the alarms page: listed, with the unmute.
    let res = post(
        &app,
        &ops,
        "/t/acme/alarms/mute",
        form(&[
            ("task", &task.to_string()),
            ("hours", "4"),
            ("back", "/t/acme/alarms"),
        ]),
    )
    .await;
    let to = location(&res);
    assert_eq!(to, format!("/t/acme/alarms?flash=muted&flash_id={task}"));
    let listed = mutes(&app).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let html = translated(&app, &ops, &to).await;
    let list = html.split("id=\"mute-list\"").nth(1).expect(&html);
    assert!(list.contains("invoices") && list.contains(&format!("/t/acme/tasks/{task}/unmute")));
    assert!(html.contains(&format!("action=\"/t/acme/tasks/{task}/unmute\"")));
    let (_, audit) = api(&app, Method::GET, "/api/v1/tenants/acme/audit", None).await;
    assert!(audit.to_string().contains("alarm.mute"), "{audit}");

    // Unmute from the list; then mute for 1 hour from the task's page, which says until when.
    let res = post(
        &app,
        &ops,
        &format!("/t/acme/tasks/{task}/unmute"),
        form(&[("back", "/t/acme/alarms")]),
    )
    .await;
    assert!(location(&res).contains("flash=unmuted"));
    assert!(mutes(&app).await.is_empty());
    let task_page = format!("/t/acme/tasks/{task}");
    let html = translated(&app, &ops, &task_page).await;
    assert!(html.contains(&format!("action=\"/t/acme/tasks/{task}/mute\"")));
    let res = post(
        &app,
        &ops,
        &format!("{task_page}/mute"),
        form(&[("hours", "1"), ("back", &task_page)]),
    )
    .await;
    let html = translated(&app, &ops, &location(&res)).await;
    assert!(html.contains("id=\"muted-until\"") && html.contains("id=\"unmute-task\""));
    assert_eq!(mutes(&app).await.len(), 1);

    // Bad input: a duration not offered, no task, an unknown task.
    for (body, status, says) in [
        (
            form(&[("task", &task.to_string()), ("hours", "5")]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "must be 1, 4 or 24",
        ),
        (
            form(&[("task", ""), ("hours", "1")]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "choose the task",
        ),
        (
            form(&[("task", "999999"), ("hours", "1")]),
            StatusCode::NOT_FOUND,
            "not found",
        ),
    ] {
        let res = post(&app, &ops, "/t/acme/alarms/mute", body).await;
        assert_eq!(res.status(), status);
        assert!(res.text().await.unwrap().contains(says), "{says}");
    }

    // A viewer sees the mutes but no control, and its posts are refused.
    let (_, html) = page(&app, &viewer, "/t/acme/alarms").await;
    assert!(html.contains("id=\"mute-list\""));
    assert!(
        !html.contains("mute-form") && !html.contains("/unmute") && !html.contains("alarm-bulk")
    );
    let (_, html) = page(&app, &viewer, &task_page).await;
    assert!(!html.contains("/mute\"") && !html.contains("/unmute\""));
    let a3 = raise(&app, &tenant, None, None).await;
    for (path, body) in [
        (
            "/t/acme/alarms/ack".to_owned(),
            form(&[("id", &a3.to_string())]),
        ),
        ("/t/acme/alarms/ack".to_owned(), String::new()),
        (
            "/t/acme/alarms/mute".to_owned(),
            form(&[("task", &task.to_string()), ("hours", "24")]),
        ),
        ("/t/acme/alarms/mute".to_owned(), form(&[("task", "")])),
        (format!("{task_page}/unmute"), String::new()),
        (format!("{task_page}/mute"), form(&[("hours", "5")])),
    ] {
        let res = post(&app, &viewer, &path, body).await;
        assert_eq!(res.status(), StatusCode::FORBIDDEN, "{path}");
    }
    assert_eq!(open_alarms(&app).await, vec![a3]);
    assert_eq!(mutes(&app).await.len(), 1, "still muted");
    app.stop().await;
}

/// The inputs a browser would post with form `id` of `html`: text and hidden inputs, ticked
/// checkboxes, each select's chosen option and each textarea.
fn form_fields(html: &str, id: &str) -> Vec<(String, String)> {
    let start = html.find(&format!("id=\"{id}\"")).expect(html);
    let body = &html[start..];
    let body = &body[..body.find("</form>").unwrap()];
    let unescape = |s: &str| {
        s.replace("&#34;", "\"")
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&")
    };
    let attr = |tag: &str, name: &str| {
        tag.split(&format!(" {name}=\""))
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .map(unescape)
    };
    let mut out = Vec::new();
    for (i, _) in body.match_indices('<') {
        let rest = &body[i + 1..];
        let tag = &rest[..rest.find('>').unwrap()];
        if let Some(tag) = tag.strip_prefix("input ") {
            let tag = format!(" {tag}");
            let (Some(name), kind) = (attr(&tag, "name"), attr(&tag, "type")) else {
                continue;
            };
            let value = attr(&tag, "value").unwrap_or_else(|| "on".to_owned());
            match kind.as_deref() {
                Some("checkbox") if !tag.contains(" checked") => {}
                Some("submit") => {}
                _ => out.push((name, value)),
            }
        } else if let Some(tag) = tag.strip_prefix("select ") {
            let name = attr(&format!(" {tag}"), "name").unwrap();
            let options = &rest[..rest.find("</select>").unwrap()];
            let chosen = options
                .split("<option ")
                .find(|o| o.contains(" selected"))
                .and_then(|o| attr(&format!(" {o}"), "value"))
                .unwrap_or_default();
            out.push((name, chosen));
        } else if let Some(tag) = tag.strip_prefix("textarea ") {
            let name = attr(&format!(" {tag}"), "name").unwrap();
            let text = &rest[rest.find('>').unwrap() + 1..rest.find("</textarea>").unwrap()];
            out.push((name, unescape(text)));
        }
    }
    out
}

async fn a_task_is_deleted_after_a_question_and_cloned_into_the_new_task_form(app: TestApp) {
    let (_, task) = acme(&app).await;
    let admin = sign_in(&app, "root").await;
    let ops = sign_in(&app, "olga").await;
    let viewer = sign_in(&app, "vera").await;
    let task_page = format!("/t/acme/tasks/{task}");
    let html = translated(&app, &admin, &task_page).await;
    assert!(html.contains("id=\"delete-task\"") && html.contains("id=\"clone-task\""));
    assert!(html.contains(&format!("href=\"/t/acme/tasks/new?clone={task}\"")));

    // Clone: the new-task form with the task's definition under a new name; saving it makes a
    // second task with the same definition.
    let html = translated(&app, &admin, &format!("/t/acme/tasks/new?clone={task}")).await;
    let fields = form_fields(&html, "task-form");
    let value = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert_eq!(value("name"), "invoices-copy");
    assert_eq!(value("version"), "", "saving creates, never updates");
    assert_eq!(value("handler"), "h");
    assert_eq!(value("max_retries"), "2");
    let body = fields
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&");
    let res = post(&app, &admin, "/t/acme/tasks/new", body).await;
    let to = location(&res);
    let copy: i64 = to
        .split("flash_id=")
        .nth(1)
        .and_then(|id| id.parse().ok())
        .expect(&to);
    assert_ne!(copy, task);
    let (_, original) = api(
        &app,
        Method::GET,
        &format!("/api/v1/tenants/acme/tasks/{task}"),
        None,
    )
    .await;
    let (_, cloned) = api(
        &app,
        Method::GET,
        &format!("/api/v1/tenants/acme/tasks/{copy}"),
        None,
    )
    .await;
    assert_eq!(cloned["name"], "invoices-copy");
    for key in [
        "app",
        "handler",
        "params",
        "schedule",
        "max_retries",
        "routing",
    ] {
        assert_eq!(cloned[key], original[key], "{key}");
    }

    // Delete asks first, naming the task; confirmed, the list says so and the task is gone.
    let res = post(
        &app,
        &admin,
        &format!("{task_page}/delete"),
        form(&[("back", &task_page)]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
    let question = res.text().await.unwrap();
    assert!(question.contains("id=\"confirm-yes\"") && question.contains("invoices"));
    assert!(question.contains(&format!("href=\"{task_page}\" id=\"confirm-no\"")));
    let (s, _) = api(
        &app,
        Method::GET,
        &format!("/api/v1/tenants/acme/tasks/{task}"),
        None,
    )
    .await;
    assert_eq!(s, 200, "asking deleted nothing");
    let res = post(
        &app,
        &admin,
        &format!("{task_page}/delete"),
        form(&[("back", &task_page), ("confirm", "yes")]),
    )
    .await;
    let to = location(&res);
    assert_eq!(
        to,
        format!("/t/acme/tasks?flash=task_deleted&flash_id={task}")
    );
    let html = translated(&app, &admin, &to).await;
    assert!(html.contains("id=\"flash\"") && html.contains("invoices-copy"));
    let (s, _) = api(
        &app,
        Method::GET,
        &format!("/api/v1/tenants/acme/tasks/{task}"),
        None,
    )
    .await;
    assert_eq!(s, 404);

    // Unknown tasks and bad ids are said plainly.
    for (path, status) in [
        ("/t/acme/tasks/new?clone=999999", StatusCode::NOT_FOUND),
        (
            "/t/acme/tasks/new?clone=abc",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let (s, html) = page(&app, &admin, path).await;
        assert_eq!(s, status, "{path}: {html}");
    }
    let res = post(&app, &admin, "/t/acme/tasks/999999/delete", String::new()).await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);

    // An operator may not change tasks: no delete nor clone, and refused; a viewer too.
    for who in [&ops, &viewer] {
        let (_, html) = page(&app, who, &format!("/t/acme/tasks/{copy}")).await;
        assert!(!html.contains("delete-task") && !html.contains("clone-task"));
        let (s, _) = page(&app, who, &format!("/t/acme/tasks/new?clone={copy}")).await;
        assert_eq!(s, StatusCode::FORBIDDEN);
        for body in [String::new(), form(&[("confirm", "yes")])] {
            let res = post(&app, who, &format!("/t/acme/tasks/{copy}/delete"), body).await;
            assert_eq!(res.status(), StatusCode::FORBIDDEN);
        }
    }
    let (s, _) = api(
        &app,
        Method::GET,
        &format!("/api/v1/tenants/acme/tasks/{copy}"),
        None,
    )
    .await;
    assert_eq!(s, 200);
    app.stop().await;
}

/// A multipart form body with a file `file` and text fields.
fn multipart(boundary: &str, file: &str, fields: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (k, v) in fields {
        out.push_str(&format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n"
        ));
    }
    out.push_str(&format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"tasks.toml\"\r\nContent-Type: application/toml\r\n\r\n{file}\r\n--{boundary}--\r\n"
    ));
    out
}

async fn task_names(app: &TestApp) -> Vec<String> {
    let (_, body) = api(app, Method::GET, "/api/v1/tenants/acme/tasks", None).await;
    let items = body
        .as_array()
        .or_else(|| body["items"].as_array())
        .unwrap();
    let mut names: Vec<String> = items
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

async fn tasks_download_as_a_file_and_import_after_a_dry_run(app: TestApp) {
    acme(&app).await;
    let admin = sign_in(&app, "root").await;
    let viewer = sign_in(&app, "vera").await;

    // Both formats download as attachments, for any role that may read.
    let html = translated(&app, &viewer, "/t/acme/tasks").await;
    assert!(html.contains("id=\"export-toml\"") && !html.contains("id=\"import-tasks\""));
    let res = client()
        .get(app.url("/t/acme/tasks/export?format=toml"))
        .header(COOKIE, &viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(
        res.headers()[CONTENT_DISPOSITION],
        "attachment; filename=\"acme-tasks.toml\""
    );
    let toml = res.text().await.unwrap();
    assert!(toml.contains("name = \"invoices\""), "{toml}");
    let res = client()
        .get(app.url("/t/acme/tasks/export?format=json"))
        .header(COOKIE, &admin)
        .send()
        .await
        .unwrap();
    assert!(
        res.headers()[CONTENT_DISPOSITION]
            .to_str()
            .unwrap()
            .contains("acme-tasks.json")
    );
    let file: Value = res.json().await.unwrap();
    assert_eq!(file["tasks"][0]["name"], "invoices");
    let (s, _) = page(&app, &admin, "/t/acme/tasks/export?format=xml").await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);

    // Import: the uploaded file's dry run shows the plan and changes nothing.
    let html = translated(&app, &admin, "/t/acme/tasks").await;
    assert!(html.contains("id=\"import-tasks\""));
    translated(&app, &admin, "/t/acme/tasks/import").await;
    let renamed = toml.replace("name = \"invoices\"", "name = \"reports\"");
    let boundary = "b0undary";
    let res = client()
        .post(app.url("/t/acme/tasks/import"))
        .header(COOKIE, &admin)
        .header(ORIGIN, &app.base_url)
        .header(
            CONTENT_TYPE,
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(multipart(
            boundary,
            &renamed,
            &[
                ("step", "plan"),
                ("text", ""),
                ("format", ""),
                ("prune", "on"),
            ],
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let html = res.text().await.unwrap();
    let plan = html.split("id=\"plan-list\"").nth(1).expect(&html);
    assert!(
        plan.contains("class=\"plan step-create\"") && plan.contains("reports"),
        "{plan}"
    );
    assert!(
        plan.contains("class=\"plan step-delete\"") && plan.contains("invoices"),
        "{plan}"
    );
    assert!(html.contains("id=\"apply-import\""));
    assert_eq!(task_names(&app).await, vec!["invoices"]);
    // The page in Chinese has every word too.
    let res = client()
        .post(app.url("/t/acme/tasks/import"))
        .header(COOKIE, format!("{admin}; mthpt_lang=zh-CN"))
        .header(ORIGIN, &app.base_url)
        .header(CONTENT_TYPE, FORM)
        .body(form(&[("text", &renamed), ("prune", "on")]))
        .send()
        .await
        .unwrap();
    assert!(!res.text().await.unwrap().contains('⟦'));

    // Apply (the form the plan offers, the file carried along): created and deleted.
    let apply = form_fields(&html, "import-apply");
    assert!(
        apply
            .iter()
            .any(|(k, v)| k == "text" && v.contains("reports"))
    );
    let body = apply
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&");
    let res = post(&app, &admin, "/t/acme/tasks/import", body).await;
    assert_eq!(location(&res), "/t/acme/tasks?flash=imported&flash_id=2");
    assert_eq!(task_names(&app).await, vec!["reports"]);
    // The same file again changes nothing and offers no Apply.
    let res = post(
        &app,
        &admin,
        "/t/acme/tasks/import",
        form(&[("text", &renamed)]),
    )
    .await;
    let html = res.text().await.unwrap();
    assert!(html.contains("id=\"nothing-to-change\"") && !html.contains("apply-import"));

    // Errors are named on the page: per entry, the file's syntax, an empty form.
    let bad = r#"{"tasks": [{"name": "x", "app": "nope", "handler": "h", "schedule": {"kind": "manual"}}]}"#;
    for (text, says) in [
        (bad, "data-field=\"tasks[0].app\""),
        ("[[tasks]\nname = ", "not valid TOML"),
        ("  ", "Paste a task file or choose one."),
    ] {
        let res = post(
            &app,
            &admin,
            "/t/acme/tasks/import",
            form(&[("text", text), ("step", "apply")]),
        )
        .await;
        assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY, "{text}");
        let html = res.text().await.unwrap();
        assert!(html.contains(says), "{says}: {html}");
        assert!(html.contains("id=\"import-errors\""));
    }
    assert_eq!(task_names(&app).await, vec!["reports"]);

    // A viewer (and an operator) may not import.
    let ops = sign_in(&app, "olga").await;
    for who in [&viewer, &ops] {
        let (s, _) = page(&app, who, "/t/acme/tasks/import").await;
        assert_eq!(s, StatusCode::FORBIDDEN);
        let res = post(
            &app,
            who,
            "/t/acme/tasks/import",
            form(&[("text", &toml), ("step", "apply")]),
        )
        .await;
        assert_eq!(res.status(), StatusCode::FORBIDDEN);
    }
    assert_eq!(task_names(&app).await, vec!["reports"]);
    app.stop().await;
}

async fn an_executor_page_shows_its_runs_its_alarms_and_drain(app: TestApp) {
    let t = tenancy(app.store(), "acme", "billing").await.unwrap();
    app.user(Some(&t.tenant), "vera", Role::TenantViewer).await;
    let engine = start_engine(app.shared_store(), quick_engine_config("node-1"))
        .await
        .unwrap();
    let w = TestWrapper::start(&t, &[engine.url()], |b| {
        b.async_handler("quick", |_ctx| async { Ok(json!("done")) })
    })
    .unwrap();
    w.registered().await.unwrap();
    let (s, body) = api(
        &app,
        Method::POST,
        "/api/v1/tenants/acme/tasks",
        Some(
            json!({ "name": "ping", "app": "billing", "handler": "quick",
            "schedule": { "kind": "manual" } }),
        ),
    )
    .await;
    assert_eq!(s, 201, "{body}");
    let task = body["id"].as_i64().unwrap();
    let run = trigger(&app, task).await;
    wait_until(WAIT, "the run succeeds", || async {
        Ok(run_state(&app, run).await == "succeeded")
    })
    .await
    .unwrap();
    let executor = {
        let mut tx = app.store().begin_read().await.unwrap();
        let list = tx.list_executors(t.tenant.id, None).await.unwrap();
        assert_eq!(list.len(), 1);
        list[0].clone()
    };
    let id = executor.id.0;
    let about = raise(&app, &t.tenant, None, Some(id)).await;
    let other = raise(&app, &t.tenant, Some(task), None).await;
    let root = sign_in(&app, "root").await;
    let viewer = sign_in(&app, "vera").await;

    // The list links each instance to its page.
    let (_, html) = page(&app, &root, "/t/acme/executors").await;
    assert!(html.contains(&format!("href=\"/t/acme/executors/{id}\"")));
    let here = format!("/t/acme/executors/{id}");
    let html = translated(&app, &root, &here).await;
    let settings = html.split("id=\"executor-settings\"").nth(1).expect(&html);
    assert!(
        settings.contains(&executor.instance_id)
            && settings.contains(&executor.base_url)
            && settings.contains("quick")
            && settings.contains("billing"),
        "{settings}"
    );
    let runs = html.split("id=\"run-list\"").nth(1).expect(&html);
    assert!(runs.contains(&format!("data-run-id=\"{run}\"")), "{runs}");
    let alarms = html.split("id=\"alarm-list\"").nth(1).expect(&html);
    assert!(
        alarms.contains(&format!("data-alarm-id=\"{about}\"")),
        "{alarms}"
    );
    assert!(
        !alarms.contains(&format!("data-alarm-id=\"{other}\"")),
        "only alarms about it"
    );

    // Drain from the page (asked first), back on the page with the undrain offered.
    let drain = format!("{here}/drain");
    let res = post(&app, &root, &drain, form(&[("back", &here)])).await;
    assert_eq!(res.status(), StatusCode::OK);
    let res = post(
        &app,
        &root,
        &drain,
        form(&[("back", &here), ("confirm", "yes")]),
    )
    .await;
    let to = location(&res);
    assert!(to.starts_with(&format!("{here}?flash=drained")), "{to}");
    let html = translated(&app, &root, &to).await;
    assert!(
        html.contains(&format!("action=\"{here}/undrain\"")),
        "{html}"
    );

    // A viewer reads the page without controls, and is refused the drain.
    let (s, html) = page(&app, &viewer, &here).await;
    assert_eq!(s, StatusCode::OK);
    assert!(!html.contains("/drain\"") && !html.contains("/undrain\""));
    let res = post(&app, &viewer, &format!("{here}/undrain"), String::new()).await;
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    // An unknown instance, or another tenant's, is not found.
    for path in ["/t/acme/executors/999999", "/t/acme/executors/abc"] {
        let (s, _) = page(&app, &root, path).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}");
    }
    w.stop().await;
    engine.shutdown().await;
    app.stop().await;
}
