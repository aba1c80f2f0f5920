//! Console sign-in: session cookies, CSRF on cookie-authenticated changes, sign-out, and the
//! sign-in rate limit — on both backends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mthpt_console::testing::{TestApp, spawn_app};
use mthpt_engine::store::Backend;
use mthpt_engine::tenant::Role;
use reqwest::Method;
use serde_json::{Value, json};

async fn sign_in(app: &TestApp, username: &str, password: &str) -> reqwest::Response {
    app.client
        .post(app.url("/api/v1/session"))
        .json(&json!({ "username": username, "password": password }))
        .send()
        .await
        .unwrap()
}

/// The `name=value` part of the session cookie a response sets.
fn session_cookie(res: &reqwest::Response) -> String {
    let set = res.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(set.contains("HttpOnly"), "{set}");
    assert!(set.contains("SameSite=Lax"), "{set}");
    set.split(';').next().unwrap().to_owned()
}

fn with_cookie(app: &TestApp, method: Method, path: &str, cookie: &str) -> reqwest::RequestBuilder {
    app.client
        .request(method, app.url(path))
        .header("cookie", cookie)
}

async fn code(res: reqwest::Response) -> (u16, String) {
    let status = res.status().as_u16();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    (status, body["code"].as_str().unwrap_or("").to_owned())
}

async fn sessions_cookies_and_csrf(app: TestApp) {
    let acme = app.tenant("acme").await;
    app.user(Some(&acme), "ada", Role::TenantAdmin).await;

    assert_eq!(
        code(sign_in(&app, "ada", "wrong").await).await,
        (401, "unauthenticated".to_owned())
    );
    assert_eq!(
        code(sign_in(&app, "nobody", "x").await).await,
        (401, "unauthenticated".to_owned())
    );
    let res = sign_in(&app, "ada", "password-ada").await;
    assert_eq!(res.status(), 200);
    let cookie = session_cookie(&res);

    let me: Value = with_cookie(&app, Method::GET, "/api/v1/me", &cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(me["authenticated_by"], "session");
    assert_eq!(me["tenant"], "acme");

    // An unsafe request with only the cookie (a forged cross-site form) is refused …
    let bare = with_cookie(&app, Method::DELETE, "/api/v1/session", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(code(bare).await, (403, "forbidden".to_owned()));
    let cross = with_cookie(&app, Method::DELETE, "/api/v1/session", &cookie)
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .unwrap();
    assert_eq!(code(cross).await, (403, "forbidden".to_owned()));
    let foreign_origin = with_cookie(&app, Method::DELETE, "/api/v1/session", &cookie)
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(code(foreign_origin).await, (403, "forbidden".to_owned()));
    // … and the session still works.
    let still = with_cookie(&app, Method::GET, "/api/v1/me", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(still.status(), 200);

    // A bearer token wins over a cookie: the operator's token with the tenant admin's cookie
    // sees every tenant.
    let both: Value = app
        .op(Method::GET, "/api/v1/me")
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(both["role"], "operator");

    // The same origin may sign out; the cookie is dead afterwards.
    let origin = app.base_url.clone();
    let out = with_cookie(&app, Method::DELETE, "/api/v1/session", &cookie)
        .header("origin", origin)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 204);
    let after = with_cookie(&app, Method::GET, "/api/v1/me", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(code(after).await, (401, "unauthenticated".to_owned()));

    let again = sign_in(&app, "ada", "password-ada").await;
    let cookie = session_cookie(&again);
    let same_site = with_cookie(&app, Method::DELETE, "/api/v1/session", &cookie)
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .unwrap();
    assert_eq!(same_site.status(), 204);
    app.stop().await;
}

#[tokio::test]
async fn sessions_cookies_and_csrf_postgres() {
    sessions_cookies_and_csrf(spawn_app(Backend::Postgres).await).await;
}

#[tokio::test]
async fn sessions_cookies_and_csrf_sqlite() {
    sessions_cookies_and_csrf(spawn_app(Backend::Sqlite).await).await;
}

async fn repeated_failures_are_rate_limited(app: TestApp) {
    let acme = app.tenant("acme").await;
    app.user(Some(&acme), "bea", Role::TenantViewer).await;
    for _ in 0..5 {
        assert_eq!(sign_in(&app, "bea", "guess").await.status(), 401);
    }
    let limited = sign_in(&app, "bea", "password-bea").await;
    assert!(limited.headers().contains_key("retry-after"));
    assert_eq!(code(limited).await, (429, "rate_limited".to_owned()));
    app.stop().await;
}

#[tokio::test]
async fn repeated_failures_are_rate_limited_postgres() {
    repeated_failures_are_rate_limited(spawn_app(Backend::Postgres).await).await;
}

#[tokio::test]
async fn repeated_failures_are_rate_limited_sqlite() {
    repeated_failures_are_rate_limited(spawn_app(Backend::Sqlite).await).await;
}

/// The app reads the time from the clock the test gives it: a session stops holding once that
/// clock passes its lifetime, without waiting twelve hours.
#[tokio::test]
async fn a_session_expires_by_the_apps_clock() {
    use std::sync::Arc;

    use mthpt_console::service::sessions::SESSION_TTL_MS;
    use mthpt_console::testing::spawn_app_with_clock;
    use mthpt_engine::clock::ManualClock;

    let clock = ManualClock::at_ms(1_900_000_000_000);
    let app = spawn_app_with_clock(Backend::Sqlite, Arc::new(clock.clone())).await;
    let t = app.tenant("acme").await;
    app.user(Some(&t), "ada", Role::TenantViewer).await;
    let res = sign_in(&app, "ada", "password-ada").await;
    assert_eq!(res.status().as_u16(), 200);
    let cookie = session_cookie(&res);
    let me = || with_cookie(&app, Method::GET, "/api/v1/me", &cookie).send();
    assert_eq!(me().await.unwrap().status().as_u16(), 200);
    clock.advance_ms(SESSION_TTL_MS + 1);
    assert_eq!(
        code(me().await.unwrap()).await,
        (401, "unauthenticated".to_owned())
    );
    app.stop().await;
}
