//! The span a batch handler runs in: one for the whole batch, linked to
//! each message's own `process` span.
//!
//! A batch holds messages of many traces, so its span can continue none of
//! them: it is a root of its own (kind INTERNAL), and each message's
//! `process` span, a child of that message's producer, is a link, as the
//! OpenTelemetry messaging conventions link a batch to its messages.

use opentelemetry::Context;
use opentelemetry::trace::TraceContextExt;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// `handle_batch <handler>`, with `messaging.batch.message_count` and a
/// link to every valid context of `messages` (the messages' `process`
/// spans, or their producers' when those spans are not recorded).
pub fn batch_span<'a>(handler: &str, messages: impl ExactSizeIterator<Item = &'a Context>) -> Span {
    let span = tracing::info_span!(
        target: "consumer::runtime",
        "handle_batch",
        otel.name = %format_args!("handle_batch {handler}"),
        otel.kind = "internal",
        otel.status_code = Empty,
        messaging.operation.type = "process",
        messaging.batch.message_count = messages.len(),
        consumer.handler = handler,
        error.type = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    // A root: not a child of whichever context the batcher task has.
    let _ = span.set_parent(Context::new());
    for cx in messages {
        let linked = cx.span().span_context().clone();
        if linked.is_valid() {
            span.add_link(linked);
        }
    }
    span
}
