//! The console API against its own OpenAPI description, by schemathesis
//! (`scripts/schemathesis.sh`): generated requests to every operation as a platform operator,
//! on PostgreSQL; no answer may be a 5xx or differ from what the description says. The script
//! installs schemathesis (pinned) into a virtualenv under `target/` the first time.

use std::path::Path;
use std::process::Command;

#[test]
fn every_operation_of_the_console_api_answers_as_its_openapi_description_says() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the console crate is in the workspace root");
    let out = Command::new(root.join("scripts/schemathesis.sh"))
        .env("MTHPT_BIN", env!("CARGO_BIN_EXE_mthpt"))
        .env(
            "MTHPT_TEST_DATABASE_URL",
            mthpt_engine::testing::postgres_url(),
        )
        .output()
        .expect("run scripts/schemathesis.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "scripts/schemathesis.sh failed ({}); its output is above",
        out.status
    );
}
