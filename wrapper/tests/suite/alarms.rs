//! The wrapper's own alarm: "engine unreachable" is raised when no engine answers for a while
//! and resolved when one answers again; both reach the engine once it is back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{EngineStandIn, TestWrapper, eventually};
use mthpt_wrapper::protocol::{AlarmSeverity, AlarmState, ENGINE_UNREACHABLE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_unreachable_is_raised_while_engines_fail_and_resolved_when_one_answers() {
    let engine = EngineStandIn::start().unwrap();
    let spool = tempfile::tempdir().unwrap();
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.engine_unreachable_after(Duration::from_millis(400))
            .blocking_handler("noop", |_ctx| Ok(serde_json::Value::Null))
    })
    .unwrap();
    assert!(eventually(Duration::from_secs(5), || w.wrapper.is_registered()).await);

    engine.set_down(true);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        engine.log().alarms.is_empty(),
        "nothing reaches a down engine"
    );
    engine.set_down(false);

    assert!(
        eventually(Duration::from_secs(5), || engine.log().alarms.len() >= 2).await,
        "raised and resolved arrive once the engine is back: {:?}",
        engine.log().alarms
    );
    let alarms = engine.log().alarms.clone();
    let raised = &alarms[0];
    assert_eq!(
        (raised.kind.as_str(), raised.severity, raised.state),
        (
            ENGINE_UNREACHABLE,
            AlarmSeverity::Critical,
            AlarmState::Raised
        )
    );
    assert!(
        raised.message.contains("no answer from any engine"),
        "{}",
        raised.message
    );
    let resolved = &alarms[1];
    assert_eq!(
        (resolved.id.as_str(), resolved.state),
        (raised.id.as_str(), AlarmState::Resolved)
    );
    assert_eq!(alarms.len(), 2, "{:?}", alarms);

    w.wrapper.shutdown(Duration::from_secs(1)).await;
    w.stop_server().await;
    engine.stop().await;
}
