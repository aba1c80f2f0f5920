//! API errors: the service's [`ApiError`] and its table of stable codes
//! ([`crate::service::error`]), rendered as RFC 9457 `application/problem+json` with the code's
//! HTTP status.
//!
//! The internal cause of a server error is logged with the request id, which the problem body
//! carries in `instance` so a report can be matched to the log.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use utoipa::ToSchema;

pub use crate::http::status_of;
pub use crate::service::error::{ApiError, ApiResult, Code, FieldProblem};

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The RFC 9457 body of every error response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Problem {
    /// `urn:mthpt:problem:<code>`.
    #[serde(rename = "type")]
    pub type_: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    /// The stable code (see docs/api.md).
    pub code: Code,
    /// Field errors; empty unless `code` is `validation_failed`.
    #[serde(default)]
    pub errors: Vec<FieldProblem>,
    /// For `quota_exceeded`: the quota reached (`max_concurrent_runs`, `max_fires_per_second`,
    /// `max_tasks`, `max_waiting_runs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<String>,
    /// For `quota_exceeded`: the quota's value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    /// The request id (`urn:mthpt:request:<id>`), also logged and sent as `X-Request-Id`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

/// The problem body of an error, with the request id when known.
pub fn problem(e: &ApiError, request_id: Option<&str>) -> Problem {
    Problem {
        type_: format!("urn:mthpt:problem:{}", e.code),
        title: e.code.title().to_owned(),
        status: e.code.status(),
        detail: e.detail.clone(),
        code: e.code,
        errors: e.errors.clone(),
        quota: e.quota.as_ref().map(|q| q.quota.as_str().to_owned()),
        limit: e.quota.as_ref().map(|q| q.limit),
        instance: request_id.map(|id| format!("urn:mthpt:request:{id}")),
    }
}

/// The full response of an error (the request-id middleware re-renders it with `instance`).
pub fn to_response(e: &ApiError, request_id: Option<&str>) -> HttpResponse {
    let mut res = HttpResponse::build(status_of(e.code));
    res.content_type(PROBLEM_JSON);
    for (name, value) in &e.headers {
        res.insert_header((*name, value.as_str()));
    }
    res.json(problem(e, request_id))
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        status_of(self.code)
    }

    fn error_response(&self) -> HttpResponse {
        to_response(self, None)
    }
}

#[cfg(test)]
mod tests {
    use mthpt_engine::store::StoreError;
    use mthpt_engine::validate::FieldError;

    use super::*;

    #[test]
    fn every_code_has_an_error_status() {
        for code in Code::ALL {
            let status = status_of(*code);
            assert!(
                status.is_client_error() || status.is_server_error(),
                "{code}"
            );
        }
    }

    #[test]
    fn the_problem_body_names_the_field_and_the_request() {
        let err = ApiError::from(StoreError::Invalid(FieldError::new(
            "name",
            "must not be empty",
        )));
        let p = problem(&err, Some("r1"));
        assert_eq!((p.status, p.code), (422, Code::ValidationFailed));
        assert_eq!(p.errors[0].field, "name");
        assert_eq!(p.instance.as_deref(), Some("urn:mthpt:request:r1"));
    }
}
