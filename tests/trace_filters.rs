//! Trace continuity does not depend on the application's log filter
//! (no services: the in-memory broker and in-memory SQLite).
//!
//! A producer's `traceparent` arrives with a message; the handler records
//! the trace id of its context and enqueues an outbox event. With the
//! subscriber the observability guide tells users to install (logs filtered at WARN,
//! traces not), the handler's span is a child of the producer's and the
//! event carries the trace on. With a subscriber that filters everything
//! at WARN (spans are then not recorded at all), the handler's context and
//! the event still continue the producer's trace.

mod ping;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{
    InMemorySpanExporter, InMemorySpanExporterBuilder, SdkTracerProvider,
};
use tracing_subscriber::filter::{EnvFilter, LevelFilter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{Layer, Registry};

const PRODUCER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Runs one message carrying the producer's trace through `ping::pong`;
/// returns what its handler saw and sent on.
async fn run_one() -> ping::Sent {
    let mut sent = ping::run(&[Some(PRODUCER_TRACEPARENT)]).await;
    sent.pop().expect("one handler call")
}

fn exporter_and_layer() -> (InMemorySpanExporter, impl Layer<Registry> + Send + Sync) {
    let exporter = InMemorySpanExporterBuilder::new().build();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let tracer = provider.tracer("trace-filters");
    std::mem::forget(provider);
    (exporter, tracing_opentelemetry::layer().with_tracer(tracer))
}

/// The subscriber the observability guide gives: the log layer filters (here at WARN,
/// as `RUST_LOG=warn` would), the trace layer takes every span.
#[tokio::test(flavor = "current_thread")]
async fn with_the_recommended_subscriber_logs_at_warn_and_the_trace_goes_on() {
    let (exporter, otel) = exporter_and_layer();
    let subscriber = tracing_subscriber::registry()
        .with(otel)
        .with(tracing_subscriber::fmt::layer().with_filter(EnvFilter::new("warn")));
    let _default = tracing::subscriber::set_default(subscriber);

    let sent = run_one().await;
    assert_eq!(
        sent.seen, PRODUCER_TRACE,
        "the handler's context is in the producer's trace"
    );
    let spans = exporter.get_finished_spans().expect("spans");
    let process = spans
        .iter()
        .find(|s| s.name.starts_with("process"))
        .expect("the handler's span was recorded");
    assert_eq!(process.span_context.trace_id().to_string(), PRODUCER_TRACE);
    assert_eq!(process.parent_span_id.to_string(), "00f067aa0ba902b7");
    let expected = format!("00-{PRODUCER_TRACE}-{}-01", process.span_context.span_id());
    assert_eq!(
        sent.outbox.as_deref(),
        Some(expected.as_str()),
        "the event's parent is the handler's span"
    );
}

/// A subscriber that filters everything at WARN: no span is recorded, and
/// the trace still goes on, from the producer's context itself.
#[tokio::test(flavor = "current_thread")]
async fn with_everything_filtered_at_warn_the_trace_still_goes_on() {
    let (exporter, otel) = exporter_and_layer();
    let subscriber = tracing_subscriber::registry()
        .with(otel)
        .with(tracing_subscriber::fmt::layer())
        .with(LevelFilter::WARN);
    let _default = tracing::subscriber::set_default(subscriber);

    let sent = run_one().await;
    assert!(
        exporter.get_finished_spans().expect("spans").is_empty(),
        "the filter really dropped the spans"
    );
    assert_eq!(
        sent.seen, PRODUCER_TRACE,
        "the handler's context is the producer's"
    );
    assert_eq!(
        sent.outbox.as_deref(),
        Some(PRODUCER_TRACEPARENT),
        "the event continues the producer's trace"
    );
    assert_eq!(
        sent.published.as_deref(),
        Some(PRODUCER_TRACEPARENT),
        "so does the message it publishes"
    );
}

/// A subscriber with no OpenTelemetry layer at all (logs only, at INFO):
/// the span is enabled but has no OpenTelemetry data, and the trace still
/// goes on from the producer's context.
#[tokio::test(flavor = "current_thread")]
async fn with_a_log_only_subscriber_the_trace_still_goes_on() {
    let subscriber = tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_filter(EnvFilter::new("info")));
    let _default = tracing::subscriber::set_default(subscriber);

    let sent = run_one().await;
    assert_eq!(
        sent.seen, PRODUCER_TRACE,
        "the handler's context is the producer's"
    );
    assert_eq!(
        sent.outbox.as_deref(),
        Some(PRODUCER_TRACEPARENT),
        "the event continues the producer's trace"
    );
}
