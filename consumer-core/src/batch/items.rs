//! [`Batch`]: the messages a [`BatchHandler`](super::BatchHandler) handles
//! at once, and which of them failed.

use crate::error::BoxError;
use crate::handler::{FailureKind, MessageContext};

/// One message of a batch, decoded, with its delivery's context.
#[derive(Debug)]
pub struct BatchItem<M> {
    pub(super) message: M,
    pub(super) context: MessageContext,
    /// The delivery's `process` span's context, captured on its lane.
    pub(super) trace: opentelemetry::Context,
}

impl<M> BatchItem<M> {
    /// The decoded message.
    pub fn message(&self) -> &M {
        &self.message
    }

    /// Its delivery: id, key, attempt, headers, idempotency key.
    pub fn context(&self) -> &MessageContext {
        &self.context
    }

    /// The OpenTelemetry context of this message's own `process` span (a
    /// child of its producer's). The batch runs in a span of its own,
    /// linked to every message's; to continue this message's trace in what
    /// is sent for it, attach this context while building the message
    /// (`let _guard = item.trace_context().attach();` then
    /// `Message::with_current_trace`).
    pub fn trace_context(&self) -> &opentelemetry::Context {
        &self.trace
    }
}

/// The fresh messages of one batch, in the order their lanes handed them
/// over (one per key), and the failures the handler marks.
#[derive(Debug)]
pub struct Batch<M> {
    pub(super) items: Vec<BatchItem<M>>,
    pub(super) failed: Vec<Option<(FailureKind, BoxError)>>,
}

impl<M> Batch<M> {
    pub(super) fn new(items: Vec<BatchItem<M>>) -> Self {
        let failed = items.iter().map(|_| None).collect();
        Self { items, failed }
    }

    /// How many messages.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none (never, for a batch handed to a handler).
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The messages, with their index.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &BatchItem<M>)> {
        self.items.iter().enumerate()
    }

    /// Message `index` failed and may heal: the batch rolls back, the others
    /// run again without it, and it is retried alone.
    pub fn fail(&mut self, index: usize, error: impl Into<BoxError>) {
        self.mark(index, FailureKind::Transient, error.into());
    }

    /// Message `index` failed for good: it is dead-lettered without retry;
    /// the others run again without it.
    pub fn fail_terminal(&mut self, index: usize, error: impl Into<BoxError>) {
        self.mark(index, FailureKind::Terminal, error.into());
    }

    fn mark(&mut self, index: usize, kind: FailureKind, error: BoxError) {
        if let Some(slot) = self.failed.get_mut(index) {
            *slot = Some((kind, error));
        }
    }

    /// Whether any message is marked failed.
    pub fn any_failed(&self) -> bool {
        self.failed.iter().any(Option::is_some)
    }
}
