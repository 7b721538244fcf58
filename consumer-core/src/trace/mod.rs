//! W3C trace context over message headers.
//!
//! Consumers always use the W3C propagator (not the global one): the wire
//! format is part of the framework's contract with producers in any
//! language. A `traceparent` that is malformed or oversized is logged and
//! ignored: the handler then runs in a new root span, and the message is
//! processed as usual.

mod batch;
mod span;

pub use batch::batch_span;
pub use consumer_backend::trace::{
    MAX_TRACEPARENT_LEN, MAX_TRACESTATE_LEN, SendTarget, Sends, TRACE_METADATA, TraceContextError,
    current, extract, inject, inject_current, metadata, record_error,
};
pub use span::{SpanScope, consume_span, delivery_context, settle_span};
