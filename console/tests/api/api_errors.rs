//! How the API answers requests it cannot take: a body of the wrong shape is `422` naming the
//! field by its path, text that is not JSON is `400`, every error (bodies too large, queries it
//! cannot read) is problem+json, and `HEAD` is answered as `GET`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mthpt_console::api::ApiLimits;
use mthpt_console::testing::{TestApp, spawn_app, spawn_app_with};
use mthpt_engine::store::Backend;
use reqwest::Method;
use serde_json::{Value, json};

use super::api_skeleton::problem;
use super::api_tasks::{create, cron_task, json, manual_task, tenant_with_app};

/// `POST` of raw `body` (as `content_type`) to an API path, as the operator.
async fn post_raw(app: &TestApp, path: &str, content_type: &str, body: &str) -> reqwest::Response {
    app.op(Method::POST, path)
        .header("content-type", content_type)
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

/// What the server answers to `request`, written to it as it is.
async fn raw_request(app: &TestApp, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = app.base_url.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The server may answer and close before it has read everything.
    let _ = stream.write_all(request.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut answer),
    )
    .await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// The fields a 422 names.
fn fields(problem: &Value) -> Vec<String> {
    problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn wrong_types_and_enum_values_name_the_field_by_its_path() {
    let app = spawn_app(Backend::Postgres).await;
    tenant_with_app(&app, "acme").await;
    let with = |field: &str, value: Value| {
        let mut task = cron_task("t");
        task[field] = value;
        task
    };
    let cases = [
        (
            "/api/v1/tenants/acme/tasks",
            with("timeout_ms", json!("soon")),
            "timeout_ms",
        ),
        (
            "/api/v1/tenants/acme/tasks",
            with("misfire_policy", json!("sometimes")),
            "misfire_policy",
        ),
        (
            "/api/v1/tenants/acme/tasks",
            with("schedule", json!({ "kind": "hourly" })),
            "schedule.kind",
        ),
        (
            "/api/v1/tenants/acme/tasks",
            with(
                "schedule",
                json!({ "kind": "fixed_rate", "every_ms": "1s" }),
            ),
            "schedule.every_ms",
        ),
        (
            "/api/v1/tenants/acme/tasks",
            with("schedule", json!({ "kind": "cron", "expr": 5 })),
            "schedule.expr",
        ),
        (
            "/api/v1/tenants/acme/tasks",
            with(
                "schedule",
                json!({ "kind": "cron", "every_ms": 1000, "expr": "0 0 12 * * ?" }),
            ),
            "schedule.every_ms",
        ),
        (
            "/api/v1/tenants/acme/tasks",
            with("schedule", json!({ "kind": "once" })),
            "schedule.at",
        ),
        (
            "/api/v1/tenants/acme/tasks",
            with("retries", json!(3)),
            "retries",
        ),
        (
            "/api/v1/tenants/acme/tasks",
            json!({ "app": "billing" }),
            "name",
        ),
        (
            "/api/v1/tenants/acme/tasks/apply",
            json!({ "tasks": [
                manual_task("a"), manual_task("b"), manual_task("c"),
                { "name": "d", "app": "billing", "handler": "h", "schedule": { "kind": "manual" },
                  "timeout_ms": [1] },
            ] }),
            "tasks[3].timeout_ms",
        ),
        (
            "/api/v1/tenants/acme/tasks/apply",
            json!({ "tasks": [], "dependencies": [{ "parent": "a", "child": "b", "condition": "maybe" }] }),
            "dependencies[0].condition",
        ),
        (
            "/api/v1/tenants/acme/tasks/bulk",
            json!({ "action": "explode", "task_ids": [1] }),
            "action",
        ),
        (
            "/api/v1/tenants/acme/tasks/bulk",
            json!({ "action": "pause", "task_ids": ["1"] }),
            "task_ids[0]",
        ),
        ("/api/v1/tenants", json!({ "name": 5 }), "name"),
        (
            "/api/v1/tenants/acme/schedule-preview",
            json!({ "count": "five" }),
            "count",
        ),
    ];
    for (path, body, field) in cases {
        let res = app.op(Method::POST, path).json(&body).send().await.unwrap();
        let p = problem(res, 422, "validation_failed").await;
        assert_eq!(fields(&p), [field], "{path} {body} → {p}");
        assert!(
            !p["errors"][0]["message"].as_str().unwrap().is_empty(),
            "{p}"
        );
    }

    // Optional bodies (trigger, cancel) name the field too, and so does an update.
    let task = create(&app, "acme", &manual_task("job")).await;
    let trigger = format!("/api/v1/tenants/acme/tasks/{}/trigger", task["id"]);
    let p = problem(
        post_raw(
            &app,
            &trigger,
            "application/json",
            r#"{"params": {}, "when": "now"}"#,
        )
        .await,
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(fields(&p), ["when"], "{p}");
    // An optional body that is sent must be sent as JSON, as every other body.
    let p = problem(
        post_raw(&app, &trigger, "text/plain", r#"{"params": 1}"#).await,
        400,
        "bad_request",
    )
    .await;
    assert!(
        p["detail"].as_str().unwrap().contains("application/json"),
        "{p}"
    );
    let mut edited = task.clone();
    edited["max_retries"] = json!("twice");
    let res = app
        .op(
            Method::PUT,
            &format!("/api/v1/tenants/acme/tasks/{}", task["id"]),
        )
        .json(&edited)
        .send()
        .await
        .unwrap();
    assert_eq!(
        fields(&problem(res, 422, "validation_failed").await),
        ["max_retries"]
    );
    let run = json(app.op(Method::POST, &trigger).send().await.unwrap(), 201).await;
    let cancel = format!("/api/v1/tenants/acme/runs/{}/cancel", run["id"]);
    let p = problem(
        post_raw(&app, &cancel, "application/json", r#"{"reason": 5}"#).await,
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(fields(&p), ["reason"], "{p}");
    app.stop().await;
}

#[tokio::test]
async fn text_that_is_not_json_is_a_bad_request() {
    let app = spawn_app(Backend::Postgres).await;
    tenant_with_app(&app, "acme").await;
    let task = create(&app, "acme", &manual_task("job")).await;
    let trigger = format!("/api/v1/tenants/acme/tasks/{}/trigger", task["id"]);
    for (path, body) in [
        ("/api/v1/tenants", r#"{"name": "acme2""#),
        ("/api/v1/tenants", "{name: 'x'}"),
        ("/api/v1/tenants", r#"{"name": "x"} trailing"#),
        (
            "/api/v1/tenants/acme/tasks",
            r#"{"name": "t", "app": "billing", "handler": "#,
        ),
        (
            "/api/v1/tenants/acme/tasks/apply",
            r#"{"tasks": [{"name": 5"#,
        ),
        ("/api/v1/tenants/acme/tasks/import", r#"{"tasks": ["#),
        (trigger.as_str(), "{"),
    ] {
        let p = problem(
            post_raw(&app, path, "application/json", body).await,
            400,
            "bad_request",
        )
        .await;
        assert!(
            p["detail"].as_str().unwrap().contains("not valid JSON"),
            "{path} {body}: {p}"
        );
        assert_eq!(p["errors"], json!([]), "{p}");
    }
    // JSON sent as something else is refused as unreadable, not as a wrong field.
    let p = problem(
        post_raw(
            &app,
            "/api/v1/tenants",
            "text/plain",
            r#"{"name": "acme2"}"#,
        )
        .await,
        400,
        "bad_request",
    )
    .await;
    assert!(
        p["detail"].as_str().unwrap().contains("application/json"),
        "{p}"
    );
    // Well-formed JSON of the wrong shape stays 422.
    let p = problem(
        post_raw(
            &app,
            "/api/v1/tenants",
            "application/json",
            r#"{"name": ["acme2"]}"#,
        )
        .await,
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(fields(&p), ["name"]);
    app.stop().await;
}

#[tokio::test]
async fn oversized_bodies_are_problems_on_every_operation_that_reads_one() {
    let app = spawn_app_with(
        Backend::Postgres,
        ApiLimits {
            max_body_bytes: 200,
        },
    )
    .await;
    tenant_with_app(&app, "acme").await;
    let task = create(&app, "acme", &manual_task("job")).await;
    let trigger = format!("/api/v1/tenants/acme/tasks/{}/trigger", task["id"]);
    let run = json(app.op(Method::POST, &trigger).send().await.unwrap(), 201).await;
    let big = json!({ "params": { "x": "y".repeat(300) } }).to_string();
    for (path, content_type) in [
        (trigger.clone(), "application/json"),
        (
            format!("/api/v1/tenants/acme/runs/{}/cancel", run["id"]),
            "application/json",
        ),
        (
            "/api/v1/tenants/acme/tasks/import".to_owned(),
            "application/toml",
        ),
        ("/api/v1/tenants/acme/tasks".to_owned(), "application/json"),
    ] {
        let p = problem(
            post_raw(&app, &path, content_type, &big).await,
            413,
            "payload_too_large",
        )
        .await;
        assert!(
            p["detail"].as_str().unwrap().contains("200 bytes"),
            "{path}: {p}"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn queries_that_cannot_be_read_are_problems() {
    let app = spawn_app(Backend::Postgres).await;
    tenant_with_app(&app, "acme").await;
    let get = |path: String| app.op(Method::GET, &path).send();
    for query in ["paused=perhaps", "limit=-1", "limit=99999999999"] {
        let res = get(format!("/api/v1/tenants/acme/tasks?{query}"))
            .await
            .unwrap();
        let p = problem(res, 400, "bad_request").await;
        let detail = p["detail"].as_str().unwrap();
        // It quotes the query, so the reader sees which value, and no extractor's jargon.
        assert!(detail.contains(query), "{query}: {p}");
        assert!(!detail.contains("deserialize"), "{query}: {p}");
    }
    // A path whose id is not a number names it.
    let res = get("/api/v1/tenants/acme/runs/abc".to_owned())
        .await
        .unwrap();
    let p = problem(res, 404, "not_found").await;
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("\"abc\" is not a number"),
        "{p}"
    );
    let res = get("/api/v1/tenants/acme/tasks?limit=0".to_owned())
        .await
        .unwrap();
    assert_eq!(
        fields(&problem(res, 422, "validation_failed").await),
        ["limit"]
    );
    // A long query the server reads is answered as any other.
    let long = format!("/api/v1/tenants/acme/tasks?name={}", "n".repeat(60_000));
    assert_eq!(
        json(get(long).await.unwrap(), 200).await["items"],
        json!([])
    );
    // A request head beyond 128 KiB is refused by the HTTP parser before the console's code
    // runs: 431 with no body (docs/api.md, "Errors"). Sent by hand: no HTTP client builds
    // such a request.
    let head = raw_request(
        &app,
        &format!(
            "GET /api/v1/tenants/acme/tasks?name={} HTTP/1.1\r\nHost: x\r\n\r\n",
            "n".repeat(140_000)
        ),
    )
    .await;
    assert!(
        head.starts_with("HTTP/1.1 431"),
        "{}",
        &head[..head.len().min(200)]
    );
    assert!(
        head.to_ascii_lowercase().contains("content-length: 0"),
        "{head}"
    );
    app.stop().await;
}

#[tokio::test]
async fn head_is_answered_as_get_without_a_body() {
    let app = spawn_app(Backend::Postgres).await;
    tenant_with_app(&app, "acme").await;
    create(&app, "acme", &manual_task("job")).await;
    for path in [
        "/api/v1/me",
        "/api/v1/tenants/acme/tasks",
        "/api/v1/tenants/acme/tasks/export",
        "/api/v1/openapi.json",
        "/api/v1/tenants/nope/tasks",
        "/api/v1/nowhere",
    ] {
        let get = app.op(Method::GET, path).send().await.unwrap();
        let head = app.op(Method::HEAD, path).send().await.unwrap();
        assert_eq!(head.status(), get.status(), "{path}");
        assert_eq!(
            head.headers().get("content-type"),
            get.headers().get("content-type"),
            "{path}"
        );
        let get_len = get.bytes().await.unwrap().len();
        assert_eq!(
            head.headers()
                .get("content-length")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<usize>().ok()),
            Some(get_len),
            "{path}"
        );
        assert!(head.bytes().await.unwrap().is_empty(), "{path}");
    }
    // The web pages too.
    for path in ["/", "/login"] {
        let get = app.client.get(app.url(path)).send().await.unwrap();
        let head = app.client.head(app.url(path)).send().await.unwrap();
        assert_eq!(head.status(), get.status(), "{path}");
    }
    app.stop().await;
}

/// A body that never finishes arriving is answered `408` once the read timeout passes, and the
/// connection is closed: a slow client holds neither a worker nor memory for longer.
#[tokio::test]
async fn a_body_that_trickles_in_too_slowly_is_answered_408() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = spawn_app(Backend::Sqlite).await;
    let addr = app.base_url.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /api/v1/tenants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{",
        app.operator_token
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = std::time::Instant::now();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        mthpt_console::api::body::BODY_READ_TIMEOUT * 3,
        stream.read_to_end(&mut answer),
    )
    .await;
    assert!(
        read.is_ok(),
        "the server answered and closed the connection"
    );
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    assert!(started.elapsed() >= mthpt_console::api::body::BODY_READ_TIMEOUT);
    app.stop().await;
}
