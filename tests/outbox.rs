//! The transactional outbox on PostgreSQL and SQLite: atomicity, relay
//! order, CloudEvents headers, trace continuity, refused events, several
//! relays at once, retention. (The process-kill crash test is
//! tests/outbox_crash.rs.)

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use consumer::outbox::WakeUp;
use consumer::{
    Envelope, Error, MemoryBroker, NewEvent, Outbox, OutboxRelay, Outgoing, Publisher, RetryPolicy,
    Store,
    outbox::OutboxDatabase,
    source::{Acker, Source},
};
use opentelemetry::trace::TraceContextExt;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct OrderEvent {
    order: String,
    n: u32,
}

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| {
            panic!("timed out after 60 s: the behaviour under test never completed")
        })
}

async fn pg_pool() -> sqlx::PgPool {
    consumer::testing::FreshSchema::create("ct", 12)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .pool
}

async fn sqlite_pool() -> sqlx::SqlitePool {
    let dir = std::env::temp_dir().join("consumer-tests");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.join(format!("outbox-{}.db", uuid::Uuid::new_v4())))
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30));
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .expect("SQLite file in the temp dir");
    Store::new(pool.clone())
        .migrate()
        .await
        .expect("migrations");
    pool
}

/// Installs an OpenTelemetry-backed subscriber once for this binary.
fn tracing_on() {
    consumer::testing::in_memory_spans();
}

use consumer::testing::trace_id_of as trace_id;

/// Drains `topic` from the broker: every delivery, acked, in arrival order.
async fn drain(broker: &MemoryBroker, topic: &str) -> Vec<Envelope> {
    let mut source = broker.source(topic);
    let mut out = Vec::new();
    while broker.depth(topic) > 0 {
        let Ok(Some((env, acker))) = source.recv().await else {
            break;
        };
        acker.ack().await.expect("ack");
        out.push(env);
    }
    out
}

/// Versions per aggregate, in arrival order, duplicates (at-least-once)
/// removed after their first arrival.
fn first_arrivals(
    envs: &[Envelope],
    versions: &HashMap<String, i64>,
) -> BTreeMap<String, Vec<i64>> {
    let mut seen = HashSet::new();
    let mut out: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for e in envs {
        if seen.insert(e.id.clone()) {
            let key = e.key.clone().expect("aggregate id is the key");
            out.entry(key).or_default().push(versions[&e.id]);
        }
    }
    out
}

fn relay<DB: OutboxDatabase, P: Publisher>(pool: sqlx::Pool<DB>, p: P) -> OutboxRelay<DB, P> {
    OutboxRelay::new(pool, Outbox::new(), p)
        .with_batch_size(50)
        .with_retry_policy(RetryPolicy::exponential(
            Duration::from_millis(1),
            Duration::from_millis(5),
            3,
        ))
        .with_source("/tests/outbox")
}

async fn run_until_empty<DB: OutboxDatabase, P: Publisher>(
    pool: &sqlx::Pool<DB>,
    r: &OutboxRelay<DB, P>,
) {
    within(async {
        loop {
            r.run_once().await.expect("relay round");
            if Outbox::new().pending(pool).await.expect("pending") == 0 {
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
}

macro_rules! outbox_suite {
    ($db:ident, $pool:expr, $versions:expr) => {
        mod $db {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_rolled_back_transaction_enqueues_nothing() {
                let pool = $pool.await;
                let outbox = Outbox::new();
                let mut tx = pool.begin().await.expect("begin");
                let ev = NewEvent::new(
                    "Order",
                    "o-1",
                    "OrderPlaced",
                    &OrderEvent {
                        order: "o-1".into(),
                        n: 1,
                    },
                )
                .expect("serialisable");
                outbox.enqueue(&mut tx, ev).await.expect("enqueue");
                tx.rollback().await.expect("rollback");
                assert_eq!(outbox.pending(&pool).await.expect("pending"), 0);

                let mut tx = pool.begin().await.expect("begin");
                let ev = NewEvent::new(
                    "Order",
                    "o-1",
                    "OrderPlaced",
                    &OrderEvent {
                        order: "o-1".into(),
                        n: 1,
                    },
                )
                .expect("serialisable");
                outbox.enqueue(&mut tx, ev).await.expect("enqueue");
                tx.commit().await.expect("commit");
                assert_eq!(outbox.pending(&pool).await.expect("pending"), 1);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn relayed_events_are_cloudevents_in_aggregate_order_with_the_writers_trace() {
                tracing_on();
                let pool = $pool.await;
                let outbox = Outbox::new().with_default_destination("orders");
                let mut trace_of = HashMap::new();
                for n in 1..=5u32 {
                    for agg in ["a", "b", "c"] {
                        let span = tracing::info_span!("place order");
                        let _in = span.enter();
                        let mut tx = pool.begin().await.expect("begin");
                        let ev = NewEvent::new(
                            "Order",
                            agg,
                            "OrderPlaced",
                            &OrderEvent {
                                order: agg.into(),
                                n,
                            },
                        )
                        .expect("json")
                        .with_header("x-tenant", "acme");
                        let id = outbox.enqueue(&mut tx, ev).await.expect("enqueue");
                        tx.commit().await.expect("commit");
                        trace_of.insert(id.to_string(), trace_id(&span));
                    }
                }
                let broker = MemoryBroker::new(2);
                let r = relay(pool.clone(), broker.clone());
                run_until_empty(&pool, &r).await;
                let envs = drain(&broker, "orders").await;
                assert_eq!(envs.len(), 15);
                let mut per_agg: BTreeMap<String, Vec<u32>> = BTreeMap::new();
                for e in &envs {
                    let body: OrderEvent = serde_json::from_slice(&e.payload).expect("payload");
                    per_agg
                        .entry(e.key.clone().expect("key"))
                        .or_default()
                        .push(body.n);
                    assert_eq!(e.kind.as_deref(), Some("OrderPlaced"));
                    assert_eq!(e.source.as_deref(), Some("/tests/outbox"));
                    assert_eq!(e.subject.as_deref(), e.key.as_deref());
                    assert!(e.time.is_some());
                    assert_eq!(e.headers.get("ce_specversion"), Ok(Some("1.0")));
                    assert_eq!(e.headers.get("content-type"), Ok(Some("application/json")));
                    assert_eq!(e.headers.get("x-tenant"), Ok(Some("acme")));
                    let cx = consumer::trace::extract(&e.headers)
                        .expect("valid")
                        .expect("traceparent present");
                    assert_eq!(
                        cx.span().span_context().trace_id().to_string(),
                        trace_of[&e.id],
                        "trace of the enqueuing transaction"
                    );
                }
                for (agg, ns) in per_agg {
                    assert_eq!(ns, [1, 2, 3, 4, 5], "order of {agg}");
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn refused_events_retry_then_fail_and_block_only_their_aggregate() {
                let pool = $pool.await;
                let outbox = Outbox::new();
                for n in 1..=3u32 {
                    for agg in ["ok", "bad"] {
                        let mut tx = pool.begin().await.expect("begin");
                        let ev = NewEvent::new(
                            "Order",
                            agg,
                            "OrderPlaced",
                            &OrderEvent {
                                order: agg.into(),
                                n,
                            },
                        )
                        .expect("json")
                        .with_destination("orders");
                        outbox.enqueue(&mut tx, ev).await.expect("enqueue");
                        tx.commit().await.expect("commit");
                    }
                }
                let broker = MemoryBroker::new(2);
                let faults = consumer::testing::Faults::new();
                let refusing = Refusing {
                    inner: consumer::testing::FaultyPublisher::new(broker.clone(), faults.clone()),
                    refused: Arc::new(Mutex::new(HashSet::from(["bad".to_owned()]))),
                };
                // Transient broker failures mid-batch, on top.
                faults.fail_next_publishes(2);
                let r = relay(pool.clone(), refusing.clone());
                let stats = r.stats();
                within(async {
                    while stats.snapshot().failed == 0 {
                        r.run_once().await.expect("round");
                        tokio::time::sleep(Duration::from_millis(2)).await; // let the 1-5 ms backoff elapse
                    }
                })
                .await;
                // Everything of "ok" went out, in order; "bad" is blocked at its first event.
                for _ in 0..3 {
                    r.run_once().await.expect("round");
                }
                let envs = drain(&broker, "orders").await;
                let versions = $versions(&pool).await;
                let got = first_arrivals(&envs, &versions);
                assert_eq!(got.get("ok"), Some(&vec![1, 2, 3]));
                assert_eq!(
                    got.get("bad"),
                    None,
                    "nothing of the refused aggregate went out"
                );
                assert_eq!(outbox.pending(&pool).await.expect("pending"), 3);
                let s = stats.snapshot();
                assert_eq!(s.failed, 1);
                assert!(s.retried >= 2, "{s:?}");

                // The cause is fixed; the operator unblocks the aggregate.
                refusing.refused.lock().expect("lock").clear();
                assert_eq!(
                    outbox
                        .retry_failed(&pool, "Order", "bad")
                        .await
                        .expect("retry"),
                    1
                );
                run_until_empty(&pool, &r).await;
                let envs = drain(&broker, "orders").await;
                let got = first_arrivals(&envs, &versions);
                assert_eq!(
                    got.get("bad"),
                    Some(&vec![1, 2, 3]),
                    "published in order after the unblock"
                );
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn concurrent_writers_and_relays_publish_everything_in_aggregate_order() {
                let pool = $pool.await;
                let broker = MemoryBroker::new(4);
                let writers: Vec<_> = (0..4u32)
                    .map(|w| {
                        let pool = pool.clone();
                        tokio::spawn(async move {
                            let outbox = Outbox::new().with_default_destination("orders");
                            for i in 0..60u32 {
                                let agg = format!("agg-{}", (i * 7 + w) % 20);
                                let mut tx = pool.begin().await.expect("begin");
                                let ev = NewEvent::new(
                                    "Order",
                                    &agg,
                                    "OrderPlaced",
                                    &OrderEvent {
                                        order: agg.clone(),
                                        n: i,
                                    },
                                )
                                .expect("json");
                                outbox.enqueue(&mut tx, ev).await.expect("enqueue");
                                tx.commit().await.expect("commit");
                            }
                        })
                    })
                    .collect();
                let stop = Arc::new(tokio::sync::Notify::new());
                let relays: Vec<_> = (0..3)
                    .map(|_| {
                        let r = relay(pool.clone(), broker.clone()).with_wake_up(WakeUp::Poll {
                            min: Duration::from_millis(1),
                            max: Duration::from_millis(5),
                        });
                        let stop = Arc::clone(&stop);
                        tokio::spawn(r.run_until(async move { stop.notified().await }))
                    })
                    .collect();
                for w in writers {
                    within(w).await.expect("writer");
                }
                within(async {
                    while Outbox::new().pending(&pool).await.expect("pending") > 0 {
                        tokio::time::sleep(Duration::from_millis(5)).await; // polling the table: no event to await
                    }
                })
                .await;
                stop.notify_waiters();
                for r in relays {
                    within(r).await.expect("join").expect("relay");
                }
                let envs = drain(&broker, "orders").await;
                let versions = $versions(&pool).await;
                assert_eq!(versions.len(), 240);
                let got = first_arrivals(&envs, &versions);
                let total: usize = got.values().map(Vec::len).sum();
                assert_eq!(total, 240, "every event published at least once");
                for (agg, vs) in got {
                    let expected: Vec<i64> = (1..=vs.len() as i64).collect();
                    assert_eq!(vs, expected, "order of {agg}");
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn published_events_are_purged_after_the_window_in_batches() {
                let pool = $pool.await;
                let outbox = Outbox::new().with_default_destination("orders");
                for n in 0..25u32 {
                    let mut tx = pool.begin().await.expect("begin");
                    let ev = NewEvent::new(
                        "Order",
                        "p",
                        "OrderPlaced",
                        &OrderEvent {
                            order: "p".into(),
                            n,
                        },
                    )
                    .expect("json");
                    outbox.enqueue(&mut tx, ev).await.expect("enqueue");
                    tx.commit().await.expect("commit");
                }
                let broker = MemoryBroker::new(1);
                run_until_empty(&pool, &relay(pool.clone(), broker.clone())).await;
                let mut tx = pool.begin().await.expect("begin");
                let ev = NewEvent::new(
                    "Order",
                    "p",
                    "OrderPlaced",
                    &OrderEvent {
                        order: "p".into(),
                        n: 99,
                    },
                )
                .expect("json");
                outbox.enqueue(&mut tx, ev).await.expect("enqueue");
                tx.commit().await.expect("commit");
                assert_eq!(
                    outbox
                        .purge_published(&pool, Duration::from_secs(3600), 10)
                        .await
                        .expect("purge"),
                    0,
                    "nothing old yet"
                );
                assert_eq!(
                    outbox
                        .purge_published(&pool, Duration::ZERO, 10)
                        .await
                        .expect("purge"),
                    25
                );
                assert_eq!(
                    outbox.pending(&pool).await.expect("pending"),
                    1,
                    "unpublished events stay"
                );
            }
        }
    };
}

async fn pg_versions(pool: &sqlx::PgPool) -> HashMap<String, i64> {
    sqlx::query_as::<_, (String, i64)>("SELECT id::text, version FROM outbox_events")
        .fetch_all(pool)
        .await
        .expect("versions")
        .into_iter()
        .collect()
}

async fn sqlite_versions(pool: &sqlx::SqlitePool) -> HashMap<String, i64> {
    sqlx::query_as::<_, (String, i64)>("SELECT id, version FROM outbox_events")
        .fetch_all(pool)
        .await
        .expect("versions")
        .into_iter()
        .collect()
}

outbox_suite!(postgres, pg_pool(), pg_versions);
outbox_suite!(sqlite, sqlite_pool(), sqlite_versions);

/// A broker that refuses every message of some aggregates (as a broker
/// refuses a message too large or without a route).
#[derive(Clone)]
struct Refusing {
    inner: consumer::testing::FaultyPublisher<MemoryBroker>,
    refused: Arc<Mutex<HashSet<String>>>,
}

impl Publisher for Refusing {
    fn system(&self) -> &'static str {
        "memory"
    }

    async fn publish(&self, batch: &[Outgoing]) -> Vec<Result<(), Error>> {
        let refused = self.refused.lock().expect("lock").clone();
        let mut out = Vec::new();
        for o in batch {
            if o.message.key.as_ref().is_some_and(|k| refused.contains(k)) {
                out.push(Err(Error::broker(
                    consumer::error::BrokerErrorKind::TooLarge,
                    "message too large",
                    None,
                )));
            } else {
                out.extend(Publisher::publish(&self.inner, std::slice::from_ref(o)).await);
            }
        }
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notify_wakes_an_idle_postgres_relay() {
    let pool = pg_pool().await;
    let outbox = Outbox::new()
        .with_default_destination("orders")
        .with_notify("outbox_wake")
        .expect("channel");
    let broker = MemoryBroker::new(1);
    // Polling so slow that only the notification can explain a publish.
    let relay =
        OutboxRelay::new(pool.clone(), outbox.clone(), broker.clone()).with_wake_up(WakeUp::Poll {
            min: Duration::from_secs(3600),
            max: Duration::from_secs(3600),
        });
    let listener = consumer::outbox::listen(&pool, "outbox_wake", relay.waker())
        .await
        .expect("LISTEN");
    let stats = relay.stats();
    let run = tokio::spawn(relay.run_until(std::future::pending()));
    // The first (empty) round runs at once; then the relay sleeps.
    within(async {
        while stats.snapshot().rounds == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    let mut tx = pool.begin().await.expect("begin");
    let ev = NewEvent::new(
        "Order",
        "w",
        "OrderPlaced",
        &OrderEvent {
            order: "w".into(),
            n: 1,
        },
    )
    .expect("json");
    outbox.enqueue(&mut tx, ev).await.expect("enqueue");
    tx.commit().await.expect("commit");
    let mut source = broker.source("orders");
    let (env, _ack) = within(source.recv())
        .await
        .expect("recv")
        .expect("delivery");
    assert_eq!(env.key.as_deref(), Some("w"));
    run.abort();
    listener.abort();
}

/// The PostgreSQL claim relies on `seq` following version order within an
/// aggregate (an event's unpublished predecessor comes before it in the
/// claim's scan): concurrent writers on the same few aggregates must never
/// give a later version a smaller `seq`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_seq_follows_version_order_within_an_aggregate_under_concurrent_writers() {
    let pool = pg_pool().await;
    let writers: Vec<_> = (0..6u32)
        .map(|w| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let outbox = Outbox::new().with_default_destination("orders");
                for i in 0..40u32 {
                    let agg = format!("agg-{}", (i + w) % 3);
                    let mut tx = pool.begin().await.expect("begin");
                    let ev = NewEvent::new(
                        "Order",
                        &agg,
                        "OrderPlaced",
                        &OrderEvent {
                            order: agg.clone(),
                            n: i,
                        },
                    )
                    .expect("json");
                    outbox.enqueue(&mut tx, ev).await.expect("enqueue");
                    tx.commit().await.expect("commit");
                }
            })
        })
        .collect();
    for w in writers {
        within(w).await.expect("writer");
    }
    let (events, inverted): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM outbox_events), \
                (SELECT count(*) FROM outbox_events a JOIN outbox_events b \
                   ON a.aggregate_type = b.aggregate_type AND a.aggregate_id = b.aggregate_id \
                  AND a.version < b.version AND a.seq > b.seq)",
    )
    .fetch_one(&pool)
    .await
    .expect("query");
    assert_eq!(events, 240);
    assert_eq!(inverted, 0, "a later version got a smaller seq");
}
