//! What the page tests share: a browser-like client that does not follow redirects, form
//! bodies, signing in through the form, and a session's page views and form posts.

use mthpt_console::testing::TestApp;
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, ORIGIN, SET_COOKIE};
use reqwest::{Client, StatusCode, redirect};

pub const FORM: &str = "application/x-www-form-urlencoded";

/// `s` percent-encoded for a form body or a query.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An URL-encoded form body.
pub fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

pub fn client() -> Client {
    Client::builder()
        .redirect(redirect::Policy::none())
        .build()
        .unwrap()
}

/// Signs `username` in through the form; returns the session cookie (`name=value`).
pub async fn sign_in(app: &TestApp, username: &str) -> String {
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

/// `path` as `cookie`'s session sees it.
pub async fn page(app: &TestApp, cookie: &str, path: &str) -> (StatusCode, String) {
    let res = client()
        .get(app.url(path))
        .header(COOKIE, cookie)
        .send()
        .await
        .unwrap();
    (res.status(), res.text().await.unwrap())
}

/// A form post of `cookie`'s session from the console's own origin.
pub async fn post(app: &TestApp, cookie: &str, path: &str, body: String) -> reqwest::Response {
    client()
        .post(app.url(path))
        .header(COOKIE, cookie)
        .header(ORIGIN, &app.base_url)
        .header(CONTENT_TYPE, FORM)
        .body(body)
        .send()
        .await
        .unwrap()
}
