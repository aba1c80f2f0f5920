//! How a handler reports failure: [`HandlerError`] and its [`FailureKind`], which decide the
//! run's outcome.

use serde_json::Value;

/// What a handler returns: output JSON (`Value::Null` for none) or an error.
pub type HandlerResult = Result<Value, HandlerError>;

/// How a handler failed; decides the run's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// Another attempt may succeed (a dependency was down, a timeout...): outcome `failed_retryable`.
    Retryable,
    /// No retry will help (bad parameters, a bug...): outcome `failed_fatal`.
    Fatal,
    /// The handler stopped because cancellation was signalled: outcome `cancelled` or `timed_out`.
    Cancelled,
}

/// A handler's failure. An error returned after cancellation was signalled always counts as a
/// cancellation (or a timeout, for a deadline), whatever its kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HandlerError {
    kind: FailureKind,
    message: String,
}

impl HandlerError {
    /// A failure another attempt may fix.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            kind: FailureKind::Retryable,
            message: message.into(),
        }
    }

    /// A failure no retry will fix.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            kind: FailureKind::Fatal,
            message: message.into(),
        }
    }

    /// The handler stopped on cancellation.
    pub fn cancelled() -> Self {
        Self {
            kind: FailureKind::Cancelled,
            message: "cancelled".to_owned(),
        }
    }

    /// The kind of failure.
    pub fn kind(&self) -> FailureKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}
