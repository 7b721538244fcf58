//! The service the trace tests run, each in a binary of its own for its
//! subscriber (`tests/trace_filters.rs`, `tests/trace_roots.rs`): `pong`
//! records the trace id of the context it runs in, enqueues an outbox event
//! and publishes a message, on in-memory SQLite and the memory broker.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};

use consumer::{
    Consumer, MemoryBroker, Message, MessageContext, NewEvent, Outbox, SqliteStore, SqliteTx,
    handler,
};
use opentelemetry::trace::TraceContextExt;

static OUTBOX: LazyLock<Outbox> = LazyLock::new(|| Outbox::new().with_default_destination("next"));
/// The broker every handler call publishes to, on the topic of its run.
static SENT: LazyLock<MemoryBroker> = LazyLock::new(|| MemoryBroker::new(1));
/// Which run this is: the handler publishes to topic `sent-<run>`.
static RUN: AtomicUsize = AtomicUsize::new(0);
/// One run at a time: they share `RUN` and the handler's log.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// `(ping, trace id of MessageContext::trace_context)` per handler call.
static SEEN: LazyLock<Mutex<Vec<(u32, String)>>> = LazyLock::new(Mutex::default);

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Ping {
    n: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum PingError {
    #[error("database")]
    Db(#[from] sqlx::Error),
    #[error("consumer")]
    Consumer(#[from] consumer::Error),
    #[error("broker")]
    Broker(#[from] consumer::backend::Error),
    #[error("json")]
    Json(#[from] serde_json::Error),
}

/// Writes an outbox event and publishes a message, both in the context it
/// runs in.
#[handler]
pub async fn pong(ping: Ping, tx: &mut SqliteTx, ctx: &MessageContext) -> Result<(), PingError> {
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
pub struct Sent {
    pub outbox: Option<String>,
    pub published: Option<String>,
    pub seen: String,
}

/// Runs one `Ping` per entry of `traceparents` (its `traceparent` header,
/// if any) through `pong`, in order on one key; returns what each handler
/// call sent on, in the same order.
pub async fn run(traceparents: &[Option<&str>]) -> Vec<Sent> {
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

    let rows: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT aggregate_id, trace_metadata FROM outbox_events")
            .fetch_all(&pool)
            .await
            .expect("the enqueued events");
    let mut published = HashMap::new();
    let mut source = SENT.source(&sent_topic());
    for _ in 0..SENT.depth(&sent_topic()) {
        let (envelope, acker) = consumer::source::Source::recv(&mut source)
            .await
            .expect("recv")
            .expect("a published message");
        published.insert(
            envelope.key.clone().unwrap_or_default(),
            envelope
                .headers
                .get("traceparent")
                .ok()
                .flatten()
                .map(str::to_owned),
        );
        consumer::source::Acker::ack(acker).await.expect("ack");
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
                published: published.get(&key).cloned().flatten(),
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
