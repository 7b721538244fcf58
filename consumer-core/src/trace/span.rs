//! The span a handler runs in.

use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::extract;
use crate::envelope::Envelope;

/// The span a handler runs in: a child of the producer's context when the
/// headers carry a valid one, else a root span. Attributes follow the OTel
/// messaging semantic conventions.
pub fn consume_span(envelope: &Envelope, handler: &str, system: &'static str) -> tracing::Span {
    let span = tracing::info_span!(
        target: "consumer",
        "process",
        otel.name = %format_args!("process {}", envelope.origin.destination),
        otel.kind = "consumer",
        messaging.system = system,
        messaging.operation.type = "process",
        messaging.destination.name = %envelope.origin.destination,
        messaging.consumer.group.name = handler,
        messaging.message.id = %envelope.id,
        messaging.message.body.size = envelope.payload.len(),
        messaging.delivery.attempt = envelope.attempt,
        messaging.partition.key = envelope.key.as_deref().unwrap_or(""),
    );
    if span.is_disabled() {
        return span;
    }
    match extract(&envelope.headers) {
        Ok(Some(cx)) => {
            let _ = span.set_parent(cx);
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(
                target: "consumer",
                message_id = %envelope.id,
                error = %e,
                "ignoring the message's trace context; the handler runs in a new root span"
            );
        }
    }
    span
}
