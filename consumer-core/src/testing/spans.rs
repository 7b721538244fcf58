//! Spans exported to memory, through `tracing-opentelemetry`, for tests
//! that check trace continuity.

use std::sync::OnceLock;

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{
    InMemorySpanExporter, InMemorySpanExporterBuilder, SdkTracerProvider,
};
use tracing_subscriber::layer::SubscriberExt;

/// Installs, once per process, a global subscriber that exports every span
/// to memory, and returns the exporter (the same one on every call).
///
/// # Panics
///
/// When another global subscriber was installed first.
pub fn in_memory_spans() -> InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER
        .get_or_init(|| {
            let exporter = InMemorySpanExporterBuilder::new().build();
            let provider = SdkTracerProvider::builder()
                .with_simple_exporter(exporter.clone())
                .build();
            let tracer = provider.tracer("consumer-tests");
            // The provider must outlive every span: keep it for the process.
            std::mem::forget(provider);
            let subscriber = tracing_subscriber::registry()
                .with(tracing_opentelemetry::layer().with_tracer(tracer));
            if tracing::subscriber::set_global_default(subscriber).is_err() {
                panic!("in_memory_spans: another global tracing subscriber is installed in this process");
            }
            exporter
        })
        .clone()
}

/// The OpenTelemetry trace id of a `tracing` span, as hex.
pub fn trace_id_of(span: &tracing::Span) -> String {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    span.context().span().span_context().trace_id().to_string()
}
