//! A handler panic becomes an error of the attempt instead of the end of
//! its lane.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::BoxError;

/// The handler panicked: a bug, classified terminal.
#[derive(Debug, thiserror::Error)]
#[error("handler panicked: {0}")]
pub struct HandlerPanicked(String);

pin_project_lite::pin_project! {
    /// Turns a panic inside the handler's future into an error, so one bad
    /// message cannot take its lane (and every later message of its key) down.
    pub(crate) struct CatchUnwind<F> {
        #[pin]
        inner: F,
    }
}

impl<F> CatchUnwind<F> {
    pub(crate) fn new(inner: F) -> Self {
        Self { inner }
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.project().inner;
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".to_owned());
                Poll::Ready(Err(Box::new(HandlerPanicked(msg))))
            }
        }
    }
}
