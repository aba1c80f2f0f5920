//! Handlers: the business code a wrapper runs, as registered with the builder (how they report
//! failure is in [`crate::failure`]).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::context::RunContext;
use crate::failure::HandlerResult;
use crate::protocol::HandlerKind;

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
