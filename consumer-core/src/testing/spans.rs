//! Spans exported to memory, through `tracing-opentelemetry`, for tests
//! that check trace continuity.

use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::trace::InMemorySpanExporter;

/// Installs, once per process, the test subscriber and returns the exporter
/// its spans go to (the same one on every call). The subscriber also keeps
/// every event at `INFO` and above as a line
/// ([`captured_logs`](super::captured_logs)): one process, one subscriber.
///
/// # Panics
///
/// When another global subscriber was installed first.
pub fn in_memory_spans() -> InMemorySpanExporter {
    super::subscriber::installed().spans.clone()
}

/// The OpenTelemetry trace id of a `tracing` span, as hex.
pub fn trace_id_of(span: &tracing::Span) -> String {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    span.context().span().span_context().trace_id().to_string()
}
