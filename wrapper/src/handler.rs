//! Handlers: the business code a wrapper runs, and how they report failure.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use crate::context::RunContext;
use crate::protocol::HandlerKind;

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

type BlockingFn = dyn Fn(RunContext) -> HandlerResult + Send + Sync;
/// A boxed handler future.
pub(crate) type BoxFuture = Pin<Box<dyn Future<Output = HandlerResult> + Send>>;
type AsyncFn = dyn Fn(RunContext) -> BoxFuture + Send + Sync;

/// A registered handler.
#[derive(Clone)]
pub(crate) enum Handler {
    /// Runs on an OS thread of its own per run.
    Blocking(Arc<BlockingFn>),
    /// Runs as a tokio task per run.
    Async { f: Arc<AsyncFn>, builtin: bool },
}

impl fmt::Debug for Handler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Blocking(_) => "Handler::Blocking",
            Self::Async { .. } => "Handler::Async",
        })
    }
}

impl Handler {
    pub(crate) fn blocking<F>(f: F) -> Self
    where
        F: Fn(RunContext) -> HandlerResult + Send + Sync + 'static,
    {
        Self::Blocking(Arc::new(f))
    }

    pub(crate) fn asynchronous<F, Fut>(f: F, builtin: bool) -> Self
    where
        F: Fn(RunContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        Self::Async {
            f: Arc::new(move |ctx| Box::pin(f(ctx)) as BoxFuture),
            builtin,
        }
    }

    pub(crate) fn kind(&self) -> HandlerKind {
        match self {
            Self::Blocking(_) => HandlerKind::Blocking,
            Self::Async { builtin: false, .. } => HandlerKind::Async,
            Self::Async { builtin: true, .. } => HandlerKind::Builtin,
        }
    }
}
