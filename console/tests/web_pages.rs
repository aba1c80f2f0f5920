//! The web console's pages over HTTP, without a browser (SQLite): signing in with the form,
//! redirects to sign in, roles (a tenant viewer is offered no controls and a post of its
//! session is refused), the CSRF rule for form posts, and the Chinese catalog.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mthpt_console::testing::{TestApp, spawn_app};
use mthpt_engine::store::Backend;
use mthpt_engine::tenant::{Role, Tenant};
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, ORIGIN, SET_COOKIE};
use reqwest::{Client, Method, StatusCode, redirect};
use serde_json::json;

const FORM: &str = "application/x-www-form-urlencoded";

/// An URL-encoded form body.
fn form(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn client() -> Client {
    Client::builder()
        .redirect(redirect::Policy::none())
        .build()
        .unwrap()
}

/// Signs `username` in through the form; returns the session cookie (`name=value`).
async fn sign_in(app: &TestApp, username: &str) -> String {
    let res = client()
        .post(app.url("/login"))
        .header(ORIGIN, &app.base_url)
        .header(CONTENT_TYPE, FORM)
        .body(form(&[
            ("username", username),
            ("password", &format!("password-{username}")),
            ("next", "/t/acme/tasks"),
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    assert_eq!(res.headers()[LOCATION], "/t/acme/tasks");
    let cookie = res.headers()[SET_COOKIE].to_str().unwrap();
    cookie.split(';').next().unwrap().to_owned()
}

async fn page(app: &TestApp, cookie: &str, path: &str) -> (StatusCode, String) {
    let res = client()
        .get(app.url(path))
        .header(COOKIE, cookie)
        .send()
        .await
        .unwrap();
    (res.status(), res.text().await.unwrap())
}

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
