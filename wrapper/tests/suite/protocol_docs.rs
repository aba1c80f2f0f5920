//! `docs/protocol.md` matches the code: every JSON example round-trips through the protocol
//! type it is tagged with, field for field, and the signing example verifies.

use std::collections::BTreeSet;

use mthpt_wrapper::protocol::{
    AlarmBatch, AlarmBatchResponse, CancelRequest, CancelResponse, DeregisterRequest,
    DeregisterResponse, ErrorBody, HealthResponse, HeartbeatRequest, HeartbeatResponse,
    ProgressBatch, ProgressBatchResponse, RegisterRequest, RegisterResponse, ResultBatch,
    ResultBatchResponse, RunAck, RunBatchRequest, RunBatchResponse, RunRequest, SignatureHeaders,
    signature_hex, verify_signature,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

const DOC: &str = include_str!("../../../docs/protocol.md");

/// Fenced blocks whose info string is `<lang> mthpt:<tag>`, as (tag, text).
fn tagged_blocks() -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in DOC.lines() {
        match current.as_mut() {
            None => {
                if let Some(info) = line.trim_start().strip_prefix("```")
                    && let Some(tag) = info
                        .split_whitespace()
                        .find_map(|w| w.strip_prefix("mthpt:"))
                {
                    current = Some((tag.to_owned(), String::new()));
                }
            }
            Some((_, text)) => {
                if line.trim_start().starts_with("```") {
                    blocks.extend(current.take());
                } else {
                    text.push_str(line);
                    text.push('\n');
                }
            }
        }
    }
    blocks
}

fn round_trip<T: DeserializeOwned + Serialize>(tag: &str, text: &str) -> Result<(), String> {
    let original: Value =
        serde_json::from_str(text).map_err(|e| format!("{tag}: example is not JSON: {e}"))?;
    let typed: T = serde_json::from_value(original.clone())
        .map_err(|e| format!("{tag}: example does not parse as the type: {e}\n{text}"))?;
    let again = serde_json::to_value(&typed).map_err(|e| format!("{tag}: {e}"))?;
    if again != original {
        return Err(format!(
            "{tag}: the type serialises differently from the example\nexample: {original}\ncode:    {again}"
        ));
    }
    Ok(())
}

fn check(tag: &str, text: &str) -> Result<(), String> {
    match tag {
        "RunRequest" => round_trip::<RunRequest>(tag, text),
        "RunAck" => round_trip::<RunAck>(tag, text),
        "RunBatchRequest" => round_trip::<RunBatchRequest>(tag, text),
        "RunBatchResponse" => round_trip::<RunBatchResponse>(tag, text),
        "CancelRequest" => round_trip::<CancelRequest>(tag, text),
        "CancelResponse" => round_trip::<CancelResponse>(tag, text),
        "HealthResponse" => round_trip::<HealthResponse>(tag, text),
        "RegisterRequest" => round_trip::<RegisterRequest>(tag, text),
        "RegisterResponse" => round_trip::<RegisterResponse>(tag, text),
        "HeartbeatRequest" => round_trip::<HeartbeatRequest>(tag, text),
        "HeartbeatResponse" => round_trip::<HeartbeatResponse>(tag, text),
        "DeregisterRequest" => round_trip::<DeregisterRequest>(tag, text),
        "DeregisterResponse" => round_trip::<DeregisterResponse>(tag, text),
        "ResultBatch" => round_trip::<ResultBatch>(tag, text),
        "ResultBatchResponse" => round_trip::<ResultBatchResponse>(tag, text),
        "ProgressBatch" => round_trip::<ProgressBatch>(tag, text),
        "ProgressBatchResponse" => round_trip::<ProgressBatchResponse>(tag, text),
        "AlarmBatch" => round_trip::<AlarmBatch>(tag, text),
        "AlarmBatchResponse" => round_trip::<AlarmBatchResponse>(tag, text),
        "ErrorBody" => round_trip::<ErrorBody>(tag, text),
        "signing-example" => check_signing_example(text),
        other => Err(format!("unknown example tag mthpt:{other}")),
    }
}

fn check_signing_example(text: &str) -> Result<(), String> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .ok_or_else(|| format!("signing example lacks {name}"))
    };
    let secret = field("secret")?.as_bytes();
    let method = field("method")?;
    let path = field("path")?;
    let timestamp: i64 = field("timestamp")?
        .parse()
        .map_err(|e| format!("timestamp: {e}"))?;
    let nonce = field("nonce")?;
    let body = field("body")?.as_bytes();
    let signature = field("signature")?;
    let computed = signature_hex(secret, method, path, timestamp, nonce, body);
    if computed != signature {
        return Err(format!(
            "signing example: documented {signature}, computed {computed}"
        ));
    }
    let headers = SignatureHeaders {
        app: "example".to_owned(),
        timestamp,
        nonce: nonce.to_owned(),
        signature: signature.to_owned(),
    };
    verify_signature(secret, method, path, &headers, body, timestamp + 10)
        .map_err(|e| format!("signing example does not verify: {e}"))?;
    // The signed body is itself a valid run request.
    round_trip::<RunRequest>("signing-example body", field("body")?)
}

#[test]
fn every_json_example_in_protocol_doc_round_trips() {
    let blocks = tagged_blocks();
    let failures: Vec<String> = blocks
        .iter()
        .filter_map(|(tag, text)| check(tag, text).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));

    let covered: BTreeSet<&str> = blocks.iter().map(|(tag, _)| tag.as_str()).collect();
    let required = [
        "RunRequest",
        "RunAck",
        "RunBatchRequest",
        "RunBatchResponse",
        "CancelRequest",
        "CancelResponse",
        "HealthResponse",
        "RegisterRequest",
        "RegisterResponse",
        "HeartbeatRequest",
        "HeartbeatResponse",
        "DeregisterRequest",
        "DeregisterResponse",
        "ResultBatch",
        "ResultBatchResponse",
        "ProgressBatch",
        "ProgressBatchResponse",
        "ErrorBody",
        "signing-example",
    ];
    let missing: Vec<_> = required.iter().filter(|t| !covered.contains(*t)).collect();
    assert!(
        missing.is_empty(),
        "protocol.md has no example for {missing:?}"
    );
}

#[test]
fn every_ack_status_and_outcome_is_documented() {
    for word in [
        "accepted",
        "already_known",
        "at_capacity",
        "draining",
        "unknown_handler",
        "malformed",
        "succeeded",
        "failed_retryable",
        "failed_fatal",
        "cancelled",
        "timed_out",
        "duplicate",
        "rejected",
        "cancelling",
        "already_finished",
        "reported",
    ] {
        assert!(
            DOC.contains(&format!("`{word}`")),
            "protocol.md does not mention `{word}`"
        );
    }
    for path in [
        mthpt_wrapper::protocol::paths::RUNS,
        mthpt_wrapper::protocol::paths::RUNS_BATCH,
        mthpt_wrapper::protocol::paths::RUN_CANCEL_PATTERN,
        mthpt_wrapper::protocol::paths::HEALTH,
        mthpt_wrapper::protocol::paths::REGISTER,
        mthpt_wrapper::protocol::paths::HEARTBEAT,
        mthpt_wrapper::protocol::paths::DEREGISTER,
        mthpt_wrapper::protocol::paths::RESULTS,
        mthpt_wrapper::protocol::paths::PROGRESS,
    ] {
        assert!(DOC.contains(path), "protocol.md does not document {path}");
    }
    for header in [
        mthpt_wrapper::protocol::headers::APP,
        mthpt_wrapper::protocol::headers::TIMESTAMP,
        mthpt_wrapper::protocol::headers::NONCE,
        mthpt_wrapper::protocol::headers::SIGNATURE,
    ] {
        assert!(
            DOC.contains(header),
            "protocol.md does not document {header}"
        );
    }
}
