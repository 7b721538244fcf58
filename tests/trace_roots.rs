//! Trace roots at any log level (no services: the in-memory broker and
//! in-memory SQLite).
//!
//! This binary installs one global subscriber, as an application does with
//! `RUST_LOG=warn`: a global `EnvFilter` at WARN over a log layer and an
//! OpenTelemetry layer, so no span of the framework is recorded. A delivery
//! without a valid parent (no `traceparent`, or a malformed one) must still
//! get a fresh, valid root context, so the outbox row its handler writes and
//! the message it publishes carry a `traceparent`, a new trace per delivery;
//! a valid `traceparent` is still continued. It is a binary of its own
//! because the global subscriber is process-wide.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, Once};

use consumer::{
    Consumer, MemoryBroker, Message, MessageContext, NewEvent, Outbox, SqliteStore, SqliteTx,
    handler,
};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;

const PRODUCER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

static OUTBOX: LazyLock<Outbox> = LazyLock::new(|| Outbox::new().with_default_destination("next"));
/// The broker every handler call publishes to, on the topic of its run.
static SENT: LazyLock<MemoryBroker> = LazyLock::new(|| MemoryBroker::new(1));
/// Which run this is: the handler publishes to topic `sent-<run>`.
static RUN: AtomicUsize = AtomicUsize::new(0);
/// One test at a time: they share `RUN` and the handler's log.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// `(ping, trace id of MessageContext::trace_context)` per handler call.
static SEEN: LazyLock<Mutex<Vec<(u32, String)>>> = LazyLock::new(Mutex::default);

/// The exporter of the OpenTelemetry layer: with the global filter at WARN
/// it must stay empty, or these tests would not test an unrecorded span.
static EXPORTER: LazyLock<InMemorySpanExporter> = LazyLock::new(InMemorySpanExporter::default);

/// Installs the global subscriber once for the whole binary.
fn global_warn_subscriber() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(EXPORTER.clone())
            .build();
        let tracer = provider.tracer("trace-roots");
        std::mem::forget(provider);
        let subscriber = tracing_subscriber::registry()
            .with(EnvFilter::new("warn"))
            .with(tracing_subscriber::fmt::layer().with_test_writer())
            .with(tracing_opentelemetry::layer().with_tracer(tracer));
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
    });
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Ping {
    n: u32,
}

#[derive(Debug, thiserror::Error)]
enum PingError {
    #[error("database")]
    Db(#[from] sqlx::Error),
    #[error("consumer")]
    Consumer(#[from] consumer::Error),
    #[error("json")]
    Json(#[from] serde_json::Error),
}

/// Writes an outbox event and publishes a message, both in the context it
/// runs in.
#[handler]
async fn pong(ping: Ping, tx: &mut SqliteTx, ctx: &MessageContext) -> Result<(), PingError> {
    let trace = ctx.trace_context().span().span_context().trace_id();
    SEEN.lock().expect("seen").push((ping.n, trace.to_string()));
    OUTBOX
        .enqueue(
            tx,
            NewEvent::new("Ping", ping.n.to_string(), "Pong", &ping)?,
        )
        .await?;
    let sent = Message::json("Pong", &ping)?
        .with_key(ping.n.to_string())
        .with_current_trace();
    SENT.publish(&sent_topic(), sent).await?;
    Ok(())
}

fn sent_topic() -> String {
    format!("sent-{}", RUN.load(Ordering::SeqCst))
}

/// What one delivery's handler sent on: the `traceparent` of its outbox
/// row and of its published message, and the trace id its context had.
#[derive(Debug)]
struct Sent {
    outbox: Option<String>,
    published: Option<String>,
    seen: String,
}

/// Runs one `Ping` per entry of `traceparents` (its `traceparent` header,
/// if any) through `pong`; returns what each handler call sent on, in
/// order.
async fn run(traceparents: &[Option<&str>]) -> Vec<Sent> {
    global_warn_subscriber();
    let _serial = SERIAL.lock().await;
    SEEN.lock().expect("seen").clear();
    RUN.fetch_add(1, Ordering::SeqCst);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await
        .expect("in-memory SQLite");
    let store = SqliteStore::new(pool.clone());
    store.migrate().await.expect("migrations");
    let broker = MemoryBroker::new(1);
    for (n, traceparent) in traceparents.iter().enumerate() {
        let mut message = Message::json("Ping", &Ping { n: n as u32 })
            .expect("json")
            .with_key("one-lane");
        if let Some(tp) = traceparent {
            message = message.with_header("traceparent", tp);
        }
        broker.publish("pings", message).await.expect("publish");
    }
    let drained = broker.clone();
    Consumer::new(broker.source("pings"), store, pong)
        .run_until(async move { drained.wait_drained("pings").await })
        .await
        .expect("consumer");
    assert!(
        EXPORTER.get_finished_spans().expect("spans").is_empty(),
        "the global filter at WARN really drops every span"
    );

    let rows: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT aggregate_id, trace_metadata FROM outbox_events")
            .fetch_all(&pool)
            .await
            .expect("the enqueued events");
    let mut sent_by_key = std::collections::HashMap::new();
    let mut source = SENT.source(&sent_topic());
    for _ in 0..SENT.depth(&sent_topic()) {
        let (envelope, acker) = consumer::Source::recv(&mut source)
            .await
            .expect("recv")
            .expect("a published message");
        sent_by_key.insert(
            envelope.key.clone().unwrap_or_default(),
            envelope
                .headers
                .get("traceparent")
                .ok()
                .flatten()
                .map(str::to_owned),
        );
        consumer::Acker::ack(acker).await.expect("ack");
    }
    let seen = SEEN.lock().expect("seen").clone();
    assert_eq!(seen.len(), traceparents.len(), "one handler call each");
    seen.into_iter()
        .map(|(n, seen)| {
            let key = n.to_string();
            let outbox = rows
                .iter()
                .find(|(aggregate, _)| *aggregate == key)
                .and_then(|(_, metadata)| metadata.as_deref())
                .and_then(traceparent_in);
            Sent {
                outbox,
                published: sent_by_key.get(&key).cloned().flatten(),
                seen,
            }
        })
        .collect()
}

/// The `traceparent` of an outbox row's `trace_metadata` JSON.
fn traceparent_in(metadata: &str) -> Option<String> {
    let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(metadata).ok()?;
    map.get("traceparent")?.as_str().map(str::to_owned)
}

/// The trace id of a valid, sampled W3C `traceparent` (version 00, lower
/// case hex, non-zero ids, flags 01); fails the test otherwise.
fn valid_trace_id(traceparent: Option<&str>, what: &str) -> String {
    let tp = traceparent.unwrap_or_else(|| panic!("{what}: no traceparent"));
    let parts: Vec<&str> = tp.split('-').collect();
    let hex = |s: &str, len: usize| {
        s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    assert!(
        parts.len() == 4
            && parts[0] == "00"
            && hex(parts[1], 32)
            && hex(parts[2], 16)
            && parts[3] == "01"
            && parts[1].bytes().any(|b| b != b'0')
            && parts[2].bytes().any(|b| b != b'0'),
        "{what}: {tp} is not a valid sampled traceparent"
    );
    parts[1].to_owned()
}

/// Without a `traceparent`, and with a malformed one, each delivery's
/// handler runs in a fresh root: its outbox row and its message carry a
/// valid `traceparent` of that root's trace, a new trace per delivery.
#[tokio::test(flavor = "current_thread")]
async fn a_delivery_without_a_valid_parent_starts_a_trace_that_what_it_sends_carries() {
    let sent = run(&[None, Some("garbage"), None, Some("00-zz-00-01")]).await;
    let mut traces = Vec::new();
    for (i, s) in sent.iter().enumerate() {
        let row = valid_trace_id(s.outbox.as_deref(), &format!("delivery {i}'s outbox row"));
        let message = valid_trace_id(
            s.published.as_deref(),
            &format!("delivery {i}'s published message"),
        );
        assert_eq!(row, message, "delivery {i}: one trace for all it sends");
        assert_eq!(s.seen, row, "delivery {i}: MessageContext::trace_context");
        traces.push(row);
    }
    let distinct: std::collections::BTreeSet<&String> = traces.iter().collect();
    assert_eq!(
        distinct.len(),
        traces.len(),
        "a new trace per delivery: {traces:?}"
    );
}

/// A valid `traceparent` is continued: with no span recorded, what the
/// handler sends names the producer's span as its parent.
#[tokio::test(flavor = "current_thread")]
async fn a_valid_traceparent_is_still_continued() {
    let sent = run(&[Some(PRODUCER_TRACEPARENT)]).await;
    assert_eq!(sent[0].outbox.as_deref(), Some(PRODUCER_TRACEPARENT));
    assert_eq!(sent[0].published.as_deref(), Some(PRODUCER_TRACEPARENT));
    assert_eq!(sent[0].seen, PRODUCER_TRACE);
}
