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

use std::sync::{LazyLock, Mutex};

use consumer::{
    Consumer, MemoryBroker, Message, MessageContext, NewEvent, Outbox, SqliteStore, SqliteTx,
    handler,
};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{
    InMemorySpanExporter, InMemorySpanExporterBuilder, SdkTracerProvider,
};
use tracing_subscriber::filter::{EnvFilter, LevelFilter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{Layer, Registry};

const PRODUCER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

static OUTBOX: LazyLock<Outbox> = LazyLock::new(|| Outbox::new().with_default_destination("next"));
/// The trace id each handler call saw in its context.
static SEEN: LazyLock<Mutex<Vec<String>>> = LazyLock::new(Mutex::default);
/// One test at a time: they share `SEEN`.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(serde::Serialize, serde::Deserialize)]
struct Ping {
    n: u32,
}

#[derive(Debug, thiserror::Error)]
enum PingError {
    #[error("database")]
    Db(#[from] sqlx::Error),
    #[error("outbox")]
    Outbox(#[from] consumer::Error),
}

#[handler]
async fn pong(ping: Ping, tx: &mut SqliteTx, ctx: &MessageContext) -> Result<(), PingError> {
    let trace = ctx
        .trace_context()
        .span()
        .span_context()
        .trace_id()
        .to_string();
    SEEN.lock().expect("seen").push(trace);
    OUTBOX
        .enqueue(
            tx,
            NewEvent::new("Ping", ping.n.to_string(), "Pong", &ping)?,
        )
        .await?;
    Ok(())
}

/// Runs one message carrying the producer's trace through `pong`; returns
/// the trace ids the handler saw and the `trace_metadata` of its event.
async fn run_one() -> (Vec<String>, String) {
    let _serial = SERIAL.lock().await;
    SEEN.lock().expect("seen").clear();
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await
        .expect("in-memory SQLite");
    let store = SqliteStore::new(pool.clone());
    store.migrate().await.expect("migrations");
    let broker = MemoryBroker::new(1);
    let message = Message::json("Ping", &Ping { n: 1 })
        .expect("json")
        .with_header("traceparent", PRODUCER_TRACEPARENT);
    broker.publish("pings", message).await.expect("publish");
    let drained = broker.clone();
    Consumer::new(broker.source("pings"), store, pong)
        .run_until(async move { drained.wait_drained("pings").await })
        .await
        .expect("consumer");
    let (metadata,): (String,) = sqlx::query_as("SELECT trace_metadata FROM outbox_events")
        .fetch_one(&pool)
        .await
        .expect("the enqueued event");
    (SEEN.lock().expect("seen").clone(), metadata)
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

    let (seen, metadata) = run_one().await;
    assert_eq!(
        seen,
        [PRODUCER_TRACE],
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
    assert!(
        metadata.contains(&expected),
        "the event's parent is the handler's span: {metadata}"
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

    let (seen, metadata) = run_one().await;
    assert!(
        exporter.get_finished_spans().expect("spans").is_empty(),
        "the filter really dropped the spans"
    );
    assert_eq!(
        seen,
        [PRODUCER_TRACE],
        "the handler's context is the producer's"
    );
    assert!(
        metadata.contains(PRODUCER_TRACEPARENT),
        "the event continues the producer's trace: {metadata}"
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

    let (seen, metadata) = run_one().await;
    assert_eq!(
        seen,
        [PRODUCER_TRACE],
        "the handler's context is the producer's"
    );
    assert!(
        metadata.contains(PRODUCER_TRACEPARENT),
        "the event continues the producer's trace: {metadata}"
    );
}
