//! The span a handler runs in, and the OpenTelemetry context it runs in
//! whatever the application's log filter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::Context;
use opentelemetry::trace::TraceContextExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::extract;
use crate::envelope::Envelope;

/// A malformed trace context is logged at most once per this many seconds
/// (with how many went unlogged): a producer that writes garbage must not
/// flood the log.
const MALFORMED_LOG_EVERY_SECS: u64 = 10;

static MALFORMED_LAST_LOGGED: AtomicU64 = AtomicU64::new(0);
static MALFORMED_UNLOGGED: AtomicU64 = AtomicU64::new(0);

/// The span a handler runs in, and the OpenTelemetry context to attach to
/// its task: a child of the producer's context when the headers carry a
/// valid one, else a root span. Attributes follow the OTel messaging
/// semantic conventions.
///
/// The context does not depend on the span being recorded: when the
/// application's subscriber filters the span out (a global filter at
/// WARN, say), the context is the producer's own, so what the handler
/// sends on ([`trace::inject_current`](super::inject_current), the outbox)
/// still continues the producer's trace.
pub fn consume_span(
    envelope: &Envelope,
    handler: &str,
    system: &'static str,
) -> (tracing::Span, Context) {
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
    let parent = match extract(&envelope.headers) {
        Ok(parent) => parent,
        Err(e) => {
            log_malformed(&envelope.id, &e);
            None
        }
    };
    if span.is_disabled() {
        return (span, parent.unwrap_or_default());
    }
    if let Some(parent) = &parent {
        let _ = span.set_parent(parent.clone());
    }
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        // Recorded by no OpenTelemetry layer (a fmt-only subscriber, or an
        // OpenTelemetry layer with a filter of its own): go on in the
        // producer's context.
        return (span, parent.unwrap_or_default());
    }
    (span, cx)
}

fn log_malformed(message_id: &str, error: &super::TraceContextError) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let last = MALFORMED_LAST_LOGGED.load(Ordering::Relaxed);
    if now >= last + MALFORMED_LOG_EVERY_SECS
        && MALFORMED_LAST_LOGGED
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        let unlogged = MALFORMED_UNLOGGED.swap(0, Ordering::Relaxed);
        tracing::warn!(
            target: "consumer",
            message_id,
            error = %error,
            unlogged_since_last = unlogged,
            "ignoring a message's malformed trace context; its handler runs in a new root span"
        );
    } else {
        MALFORMED_UNLOGGED.fetch_add(1, Ordering::Relaxed);
    }
}
