//! Pauses on the memory broker and store: a paused handler's deliveries
//! wait without an attempt while the others run, and go on in order once
//! it is resumed; a consumer started paused takes nothing.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::envelope::{Message, names};
use crate::handler::{Handler, Invocation, Outcome};
use crate::memory::MemoryBroker;
use crate::retry::RetryPolicy;
use crate::router::Router;
use crate::runtime::Consumer;
use crate::store::MemoryStore;
use crate::store::paused::{EVERY_HANDLER, PausedHandlers};

/// Writes down each message it runs, under its name.
#[derive(Clone)]
struct Recording {
    name: &'static str,
    types: &'static [&'static str],
    seen: Arc<Mutex<Vec<String>>>,
}

impl Handler<MemoryStore> for Recording {
    fn name(&self) -> &'static str {
        self.name
    }

    fn event_types(&self) -> &[&'static str] {
        self.types
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::none()
    }

    async fn handle(&self, inv: &mut Invocation<'_, MemoryStore>) -> Outcome {
        let id = format!("{}:{}", self.name, inv.envelope().id);
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(id);
        Outcome::Processed
    }
}

fn seen(log: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
    log.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

async fn publish(broker: &MemoryBroker, kind: &str, id: &str) {
    let message = Message::raw(&b"{}"[..])
        .with_id(id)
        .with_key(kind)
        .with_header(names::TYPE, kind);
    broker.publish("t", message).await.expect("publish");
}

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_paused_route_waits_without_attempts_while_the_others_run_and_goes_on_in_order() {
    let broker = MemoryBroker::new(1);
    let store = MemoryStore::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let handler = |name, types| Recording {
        name,
        types,
        seen: Arc::clone(&log),
    };
    let router = Router::builder("r")
        .route(handler("orders", &["order"]))
        .route(handler("invoices", &["invoice"]))
        .build()
        .expect("router");
    let consumer = Consumer::router(broker.source("t"), store.clone(), router)
        .with_pause_poll(Duration::from_millis(20));
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    tokio::time::timeout(WAIT, stats.wait_for(|s| s.running))
        .await
        .expect("running");

    let _ = store.pause("orders", "ana", "test").await;
    tokio::time::timeout(WAIT, stats.wait_for(|s| s.handlers_paused == 1))
        .await
        .expect("the consumer saw the pause");
    assert_eq!(stats.paused_handlers(), ["orders"]);
    for n in 1..=3 {
        publish(&broker, "order", &format!("o-{n}")).await;
    }
    // The marker: published after the paused route's messages, handled by
    // the route that runs.
    publish(&broker, "invoice", "i-1").await;
    tokio::time::timeout(
        WAIT,
        stats.wait_for(|s| s.processed == 1 && s.received == 4),
    )
    .await
    .expect("the invoice ran, the orders were taken");
    assert_eq!(
        seen(&log),
        ["invoices:i-1"],
        "no order ran, no attempt spent"
    );

    let _ = store.resume("orders").await;
    tokio::time::timeout(
        WAIT,
        stats.wait_for(|s| s.processed == 4 && s.handlers_paused == 0),
    )
    .await
    .expect("the orders ran once resumed");
    let runs = seen(&log);
    assert_eq!(
        runs[1..],
        ["orders:o-1", "orders:o-2", "orders:o-3"],
        "once each, in order"
    );
    assert_eq!(stats.snapshot().retries, 0);
    let _ = stop.send(());
    running.await.expect("task").expect("consumer");
}

#[tokio::test]
async fn a_consumer_started_while_every_handler_is_paused_takes_nothing_until_resumed() {
    let broker = MemoryBroker::new(1);
    let store = MemoryStore::new();
    let _ = store.pause(EVERY_HANDLER, "ana", "incident").await;
    for n in 1..=2 {
        publish(&broker, "order", &format!("o-{n}")).await;
    }
    let log = Arc::new(Mutex::new(Vec::new()));
    let handler = Recording {
        name: "orders",
        types: &[],
        seen: Arc::clone(&log),
    };
    let consumer = Consumer::new(broker.source("t"), store.clone(), handler)
        .with_pause_poll(Duration::from_millis(20));
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    // Paused before it runs: the first reading precedes the first take.
    let at_start = tokio::time::timeout(WAIT, stats.wait_for(|s| s.running))
        .await
        .expect("running");
    assert_eq!(at_start.handlers_paused, 1);
    assert_eq!(at_start.received, 0);

    let _ = store.resume(EVERY_HANDLER).await;
    tokio::time::timeout(WAIT, stats.wait_for(|s| s.processed == 2))
        .await
        .expect("both ran once resumed");
    assert_eq!(seen(&log), ["orders:o-1", "orders:o-2"]);
    let _ = stop.send(());
    running.await.expect("task").expect("consumer");
}

/// A store whose pauses table went away keeps the pauses read last: a
/// paused handler stays paused (and a running one runs) until the store
/// answers again.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_store_that_cannot_be_read_keeps_the_pauses_read_last() {
    use super::Pauses;
    use crate::metrics::consumer::ConsumerMetrics;
    use crate::runtime::observe::Observer;
    use crate::stats::Stats;

    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await
        .expect("in-memory SQLite");
    let store = crate::store::Store::new(pool.clone());
    store.migrate().await.expect("migrations");
    let meter = crate::metrics::global_meter();
    let metrics = Arc::new(ConsumerMetrics::new(&meter, "memory", None, None, None));
    let stats = Arc::new(Stats::default());
    let observer = Observer::new(metrics, Arc::clone(&stats));
    let pauses = Pauses::new(vec!["orders", "invoices"]);

    let _ = store.pause("orders", "ana", "test").await;
    assert!(pauses.read(&store, &observer, true).await.is_ok());
    assert!(pauses.is_paused("orders") && !pauses.is_paused("invoices"));
    assert!(!pauses.all_paused());

    sqlx::query("DROP TABLE consumer_paused_handlers")
        .execute(&pool)
        .await
        .expect("drop the table");
    assert!(pauses.read(&store, &observer, false).await.is_err());
    assert!(pauses.is_paused("orders"), "still paused");
    assert!(!pauses.is_paused("invoices"), "still running");
    assert_eq!(stats.paused_handlers(), ["orders"]);
}
