//! The one global subscriber a test process installs: spans exported to
//! memory and events kept as lines, together, so that a test binary may
//! ask for both ([`in_memory_spans`](super::in_memory_spans) and
//! [`captured_logs`](super::captured_logs)) in any order.

use std::sync::OnceLock;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{
    InMemorySpanExporter, InMemorySpanExporterBuilder, SdkTracerProvider,
};
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;

use super::logs::CapturedLogs;

/// What the installed subscriber fills.
pub(super) struct Installed {
    pub(super) spans: InMemorySpanExporter,
    pub(super) logs: CapturedLogs,
}

/// Installs the subscriber on first call and returns what it fills (the
/// same on every call).
///
/// # Panics
///
/// When another global subscriber was installed first.
pub(super) fn installed() -> &'static Installed {
    static INSTALLED: OnceLock<Installed> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let spans = InMemorySpanExporterBuilder::new().build();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(spans.clone())
            .build();
        let tracer = provider.tracer("consumer-tests");
        // The provider must outlive every span: keep it for the process.
        std::mem::forget(provider);
        let logs = CapturedLogs::default();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(tracer))
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .without_time()
                    .with_writer(logs.clone())
                    .with_filter(LevelFilter::INFO),
            );
        if tracing::subscriber::set_global_default(subscriber).is_err() {
            panic!(
                "consumer::testing: another global tracing subscriber is installed in this process"
            );
        }
        Installed { spans, logs }
    })
}
