//! The errors of console operations: one table of stable codes, each with the HTTP status it is
//! answered with and a title (`api::error` renders them as RFC 9457
//! `application/problem+json`; the web pages as an error page).
//!
//! A caller sees the code, a title, a detail that names what is wrong, and field errors; it never
//! sees SQL text or a stack trace. The internal cause of a server error is kept in
//! [`ApiError::internal`] for the log.

use std::fmt;

use mthpt_engine::quota::QuotaExceeded;
use mthpt_engine::store::StoreError;
use mthpt_engine::validate::FieldError;
use serde::Serialize;
use utoipa::ToSchema;

/// Declares [`Code`] and its table: code → (HTTP status, title).
macro_rules! codes {
    ($($(#[$doc:meta])* $variant:ident = ($text:literal, $status:literal, $title:literal),)+) => {
        /// A stable error code. Clients branch on it; its spelling never changes.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, ToSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum Code {
            $($(#[$doc])* $variant,)+
        }

        impl Code {
            /// Every code, in table order.
            pub const ALL: &'static [Code] = &[$(Code::$variant),+];

            /// The spelling in `code` and in the `type` URI.
            pub fn as_str(self) -> &'static str {
                match self { $(Code::$variant => $text,)+ }
            }

            /// The HTTP status this code is answered with (`api::error` and the web pages
            /// answer with it).
            pub fn status(self) -> u16 {
                match self { $(Code::$variant => $status,)+ }
            }

            /// A short, fixed summary of the problem type.
            pub fn title(self) -> &'static str {
                match self { $(Code::$variant => $title,)+ }
            }
        }
    };
}

codes! {
    /// The body or a parameter is not acceptable; `errors[]` names the fields.
    ValidationFailed = ("validation_failed", 422, "The request is not valid"),
    /// The body is not JSON of the expected shape, or a header is malformed.
    BadRequest = ("bad_request", 400, "The request cannot be read"),
    /// No credentials, or credentials that are unknown, expired or revoked.
    Unauthenticated = ("unauthenticated", 401, "Authentication is required"),
    /// The caller is known but its role does not allow this.
    Forbidden = ("forbidden", 403, "This is not allowed for your role"),
    /// An API token was asked for with a role above what the caller may grant (its own role,
    /// and the role of the user the token is for).
    RoleAboveOwn = ("role_above_own", 403, "The role is above what you may grant"),
    /// The thing does not exist, or is not visible to the caller.
    NotFound = ("not_found", 404, "Not found"),
    /// A name or key is taken, or the change does not fit the current state.
    Conflict = ("conflict", 409, "Conflict"),
    /// The change would close a cycle of task dependencies.
    Cycle = ("cycle", 409, "Dependency cycle"),
    /// Optimistic locking: the resource changed since the version the caller named.
    VersionConflict = ("version_conflict", 412, "The resource was changed by someone else"),
    /// An update needs `If-Match` (or a version) to say which version it changes.
    PreconditionRequired = ("precondition_required", 428, "A version precondition is required"),
    /// The body is larger than the server accepts.
    PayloadTooLarge = ("payload_too_large", 413, "The request body is too large"),
    /// The body did not arrive in time.
    RequestTimeout = ("request_timeout", 408, "The request body did not arrive in time"),
    /// The change would go beyond one of the tenant's quotas; `quota` and `limit` name it
    /// (the rate quota also sends `Retry-After`).
    QuotaExceeded = ("quota_exceeded", 429, "A tenant quota is reached"),
    /// Too many attempts; retry later.
    RateLimited = ("rate_limited", 429, "Too many requests"),
    /// The database cannot be reached or is overloaded; retry later.
    Unavailable = ("unavailable", 503, "The service is unavailable"),
    /// Something failed on the server; the log has the details under the request id.
    Internal = ("internal", 500, "Internal server error"),
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One wrong input field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct FieldProblem {
    /// The field as named in the API, e.g. `schedule.expr`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

/// An error of a console operation: a stable [`Code`], a detail safe to show to the caller
/// (API client or page), field problems, and an internal cause that is only logged.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {detail}")]
pub struct ApiError {
    pub code: Code,
    /// Safe to show to the client.
    pub detail: String,
    pub errors: Vec<FieldProblem>,
    /// Logged, never sent (e.g. the database's message).
    pub internal: Option<String>,
    /// Extra response headers (e.g. `Retry-After`).
    pub headers: Vec<(&'static str, String)>,
    /// For `quota_exceeded`: which quota, and its value (boxed: most errors have none).
    pub quota: Option<Box<QuotaExceeded>>,
}

impl ApiError {
    /// An error with a code and a detail for the client.
    pub fn new(code: Code, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
            errors: Vec::new(),
            internal: None,
            headers: Vec::new(),
            quota: None,
        }
    }

    pub fn not_found(what: impl fmt::Display) -> Self {
        Self::new(Code::NotFound, format!("{what} not found"))
    }

    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(Code::Forbidden, detail)
    }

    pub fn unauthenticated(detail: impl Into<String>) -> Self {
        Self::new(Code::Unauthenticated, detail)
    }

    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(Code::BadRequest, detail)
    }

    /// A validation error naming one field.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::fields(vec![FieldProblem {
            field: field.into(),
            message: message.into(),
        }])
    }

    /// A validation error naming several fields.
    pub fn fields(errors: Vec<FieldProblem>) -> Self {
        let detail = errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect::<Vec<_>>()
            .join("; ");
        Self {
            errors,
            ..Self::new(Code::ValidationFailed, detail)
        }
    }

    /// A server error: the client learns only that it happened; `cause` goes to the log.
    pub fn internal(cause: impl fmt::Display) -> Self {
        Self {
            internal: Some(cause.to_string()),
            ..Self::new(
                Code::Internal,
                "the request failed on the server; the log has the details under this request's id",
            )
        }
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

impl From<QuotaExceeded> for ApiError {
    fn from(e: QuotaExceeded) -> Self {
        let mut err = Self {
            quota: Some(Box::new(e)),
            ..Self::new(
                Code::QuotaExceeded,
                format!(
                    "the tenant's quota {} is {}; this would go beyond it",
                    e.quota, e.limit
                ),
            )
        };
        if let Some(ms) = e.retry_after_ms {
            // Whole seconds, rounded up: a client that waits that long finds a token.
            err = err.with_header("Retry-After", ((ms + 999) / 1000).max(1).to_string());
        }
        err
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> Self {
        Self::field(e.field, e.reason)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => Self::not_found(what),
            StoreError::Conflict { .. } => Self::new(Code::VersionConflict, e.to_string()),
            StoreError::Duplicate(msg) => Self::new(Code::Conflict, msg),
            StoreError::Cycle(_) => Self::new(Code::Cycle, e.to_string()),
            StoreError::InvalidState(msg) => Self::new(Code::Conflict, msg),
            StoreError::Fenced { .. } => Self::new(
                Code::Conflict,
                "the run moved on while this request was handled; reload and try again",
            ),
            StoreError::Invalid(field) => field.into(),
            StoreError::Unavailable(_) => Self {
                internal: Some(e.to_string()),
                ..Self::new(
                    Code::Unavailable,
                    "the database is unavailable; retry later",
                )
            },
            e if e.is_transient() => Self {
                internal: Some(e.to_string()),
                ..Self::new(Code::Unavailable, "the database is busy; retry later")
            },
            e => Self::internal(e),
        }
    }
}

/// The result type of services (and of the handlers over them).
pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_distinct_spelling_and_an_error_status() {
        let mut seen = std::collections::HashSet::new();
        for code in Code::ALL {
            assert!(seen.insert(code.as_str()), "{code} twice");
            let status = code.status();
            assert!((400..600).contains(&status), "{code}");
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, code.as_str());
        }
    }

    #[test]
    fn store_errors_keep_sql_text_out_of_the_body() {
        let db = StoreError::Corrupt("column \"secret\" of relation apps".to_owned());
        let err = ApiError::from(db);
        assert_eq!(err.code, Code::Internal);
        assert!(!err.detail.contains("apps"), "{}", err.detail);
        assert!(err.internal.unwrap().contains("apps"));
    }

    #[test]
    fn field_errors_become_validation_failed_naming_the_field() {
        let err = ApiError::from(StoreError::Invalid(FieldError::new(
            "name",
            "must not be empty",
        )));
        assert_eq!(err.code, Code::ValidationFailed);
        assert_eq!(err.code.status(), 422);
        assert_eq!(err.errors[0].field, "name");
    }

    #[test]
    fn every_code_title_reads_in_chinese_too() {
        for code in Code::ALL {
            assert_ne!(
                crate::messages::chinese(code.title()),
                code.title(),
                "{code}"
            );
        }
    }

    #[test]
    fn version_conflicts_are_412() {
        let err = ApiError::from(StoreError::Conflict {
            what: "task 3".into(),
            expected: 1,
            actual: 2,
        });
        assert_eq!((err.code, err.code.status()), (Code::VersionConflict, 412));
    }
}
