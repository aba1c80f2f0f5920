//! The served OpenAPI description equals the committed docs/openapi.json, so every API change
//! shows in review. After changing the API, regenerate the file with:
//!
//!     MTHPT_WRITE_OPENAPI=1 cargo test -p mthpt-console --test api openapi::

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mthpt_console::testing::spawn_app;
use mthpt_engine::store::Backend;
use serde_json::Value;

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");

#[tokio::test]
async fn served_spec_matches_the_committed_copy() {
    let app = spawn_app(Backend::Sqlite).await;
    let served: Value = app
        .client
        .get(app.url("/api/v1/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    app.stop().await;
    assert_eq!(served["openapi"], "3.1.0");
    if std::env::var_os("MTHPT_WRITE_OPENAPI").is_some() {
        let text = serde_json::to_string_pretty(&served).unwrap() + "\n";
        std::fs::write(COMMITTED, text).unwrap();
        return;
    }
    let committed: Value = serde_json::from_str(
        &std::fs::read_to_string(COMMITTED).unwrap_or_else(|e| {
            panic!("{COMMITTED}: {e}; create it with MTHPT_WRITE_OPENAPI=1 cargo test -p mthpt-console --test api openapi::")
        }),
    )
    .unwrap();
    assert!(
        served == committed,
        "the API changed but docs/openapi.json did not; review the change and regenerate it with \
         MTHPT_WRITE_OPENAPI=1 cargo test -p mthpt-console --test api openapi::"
    );
}
