//! [`MessageContext`]: what a handler may know about its delivery.

use std::fmt;
use std::sync::Arc;

use crate::envelope::{Envelope, Headers};

/// Everything a handler may know about the delivery it is processing.
#[derive(Clone)]
pub struct MessageContext {
    envelope: Arc<Envelope>,
    pub(super) handler: &'static str,
    pub(super) idempotency_key: Option<String>,
}

impl MessageContext {
    pub(crate) fn new(envelope: Arc<Envelope>, handler: &'static str) -> Self {
        Self {
            envelope,
            handler,
            idempotency_key: None,
        }
    }

    /// Sets the key the delivery is deduplicated on.
    pub(crate) fn set_idempotency_key(&mut self, key: String) {
        self.idempotency_key = Some(key);
    }

    /// The message id (CloudEvents `id`).
    pub fn message_id(&self) -> &str {
        &self.envelope.id
    }

    /// The partition key.
    pub fn key(&self) -> Option<&str> {
        self.envelope.key.as_deref()
    }

    /// Which attempt this is (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.envelope.attempt
    }

    /// Every header as received.
    pub fn headers(&self) -> &Headers {
        &self.envelope.headers
    }

    /// The whole envelope (type, source, subject, time, origin, payload).
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// The handler's name.
    pub fn handler(&self) -> &'static str {
        self.handler
    }

    /// The key this delivery was deduplicated on. Pass it to external APIs
    /// as their idempotency key, so a retry after a crash between their
    /// call and our commit is harmless there too. Falls back to the message
    /// id before the key is computed.
    pub fn idempotency_key(&self) -> &str {
        self.idempotency_key.as_deref().unwrap_or(&self.envelope.id)
    }

    /// The OpenTelemetry context the handler runs in: its span's (a child
    /// of the producer's) when the subscriber records the span, else the
    /// producer's own: continuity does not depend on the log filter.
    /// Inject it into outgoing calls.
    pub fn trace_context(&self) -> opentelemetry::Context {
        crate::trace::current()
    }
}

impl fmt::Debug for MessageContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MessageContext")
            .field("message_id", &self.envelope.id)
            .field("key", &self.envelope.key)
            .field("attempt", &self.envelope.attempt)
            .field("handler", &self.handler)
            .field("idempotency_key", &self.idempotency_key)
            .finish()
    }
}
