//! The transactional outbox on PostgreSQL and SQLite: atomicity, relay
//! order, CloudEvents headers, trace continuity, refused events, several
//! relays at once, retention, scheduled events (published once due and not
//! before, cancelled, outside their aggregate's order until due, waking an
//! idle relay). (The process-kill crash tests are tests/outbox_crash.rs.)

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use consumer::outbox::{Due, ScheduleToken, WakeUp};
use consumer::{
    Envelope, MemoryBroker, NewEvent, Outbox, OutboxRelay, Outgoing, Publisher, RetryPolicy, Store,
    outbox::{OutboxDatabase, RowOutcome},
    source::{Acker, Source},
};
use opentelemetry::trace::TraceContextExt;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

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
async fn drain(broker: &MemoryBroker, topic: &str) -> Vec<Arc<Envelope>> {
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
    envs: &[Arc<Envelope>],
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

fn order_event(agg: &str, n: u32) -> NewEvent {
    NewEvent::new(
        "Order",
        agg,
        "OrderPlaced",
        &OrderEvent {
            order: agg.into(),
            n,
        },
    )
    .expect("json")
    .with_destination("orders")
}

/// Enqueues (`due` None) or schedules one event in its own transaction.
async fn write<DB: OutboxDatabase>(
    pool: &sqlx::Pool<DB>,
    agg: &str,
    n: u32,
    due: Option<Due>,
) -> String
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    let outbox = Outbox::new();
    let mut tx = pool.begin().await.expect("begin");
    let id = match due {
        None => outbox
            .enqueue(&mut tx, order_event(agg, n))
            .await
            .expect("enqueue")
            .to_string(),
        Some(due) => outbox
            .schedule(&mut tx, order_event(agg, n), due)
            .await
            .expect("schedule")
            .to_string(),
    };
    tx.commit().await.expect("commit");
    id
}

/// Cancels in its own transaction, committed.
async fn cancel<DB: OutboxDatabase>(pool: &sqlx::Pool<DB>, token: ScheduleToken) -> bool
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    let mut tx = pool.begin().await.expect("begin");
    let was_pending = Outbox::new().cancel(&mut tx, token).await.expect("cancel");
    tx.commit().await.expect("commit");
    was_pending
}

/// The next delivery on `source`, with the instant it arrived.
async fn next_arrival(
    source: &mut consumer::memory::MemorySource,
) -> (Arc<Envelope>, OffsetDateTime) {
    let (env, acker) = within(source.recv())
        .await
        .expect("recv")
        .expect("a delivery");
    let at = OffsetDateTime::now_utc();
    acker.ack().await.expect("ack");
    (env, at)
}

fn n_of(env: &Envelope) -> u32 {
    serde_json::from_slice::<OrderEvent>(&env.payload)
        .expect("payload")
        .n
}

macro_rules! outbox_suite {
    ($db:ident, $pool:expr, $versions:expr, $id_literal:expr) => {
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
                // Everything of "ok" goes out, in order (its transient
                // failures are sent again after the broker's backoff, at
                // least 100 ms); "bad" is blocked at its first event.
                within(async {
                    while outbox.pending(&pool).await.expect("pending") > 3 {
                        r.run_once().await.expect("round");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
                .await;
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
                        .purge_published(&pool, Duration::MAX, 10)
                        .await
                        .expect("an age past the calendar keeps every event"),
                    0
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

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_scheduled_event_holds_back_none_of_its_aggregates_events() {
                let pool = $pool.await;
                let outbox = Outbox::new();
                let hour = Duration::from_secs(3600);
                let mut tx = pool.begin().await.expect("begin");
                let token = outbox
                    .schedule(&mut tx, order_event("s", 0), Due::after(hour))
                    .await
                    .expect("schedule");
                tx.commit().await.expect("commit");
                for n in 1..=3 {
                    write(&pool, "s", n, None).await;
                }
                let broker = MemoryBroker::new(1);
                let r = relay(pool.clone(), broker.clone());
                run_until_empty(&pool, &r).await;
                let got: Vec<u32> = drain(&broker, "orders")
                    .await
                    .iter()
                    .map(|e| n_of(e))
                    .collect();
                assert_eq!(got, [1, 2, 3], "the aggregate's events went out past the scheduled one, in order");
                let versions = $versions(&pool).await;
                assert_eq!(versions.len(), 3, "the scheduled event took no version");
                let mut tx = pool.begin().await.expect("begin");
                let listed = outbox.scheduled_for(&mut tx, "Order", "s").await.expect("list");
                tx.commit().await.expect("commit");
                assert_eq!(listed.len(), 1);
                assert_eq!(listed[0].token, token);
                assert_eq!(listed[0].event_type, "OrderPlaced");
                assert!(
                    listed[0].due_at >= OffsetDateTime::now_utc() + time::Duration::minutes(59),
                    "due an hour after scheduling: {}",
                    listed[0].due_at
                );
                assert_eq!(outbox.scheduled(&pool, 10).await.expect("list"), listed);
                let backlog = r.read_backlog().await.expect("backlog");
                assert_eq!((backlog.pending, backlog.scheduled), (0, 1), "{backlog:?}");
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_scheduled_event_goes_out_once_due_and_not_before_in_its_aggregates_order() {
                let pool = $pool.await;
                let outbox = Outbox::new();
                write(&pool, "d", 1, None).await;
                // Due times are kept to the millisecond.
                let at = OffsetDateTime::now_utc() + time::Duration::milliseconds(1500);
                let at = at.replace_nanosecond(at.millisecond() as u32 * 1_000_000).expect("ms");
                let by_instant = write(&pool, "d", 2, Some(Due::at(at))).await;
                let by_delay = write(&pool, "e", 1, Some(Due::after(Duration::from_secs(1)))).await;
                let mut tx = pool.begin().await.expect("begin");
                let delayed = outbox.scheduled_for(&mut tx, "Order", "e").await.expect("list");
                tx.commit().await.expect("commit");
                let delayed_due = delayed[0].due_at;

                let broker = MemoryBroker::new(1);
                let mut source = broker.source("orders");
                let r = relay(pool.clone(), broker.clone());
                let stop = Arc::new(tokio::sync::Notify::new());
                let stopped = Arc::clone(&stop);
                let run = tokio::spawn(r.run_until(async move { stopped.notified().await }));
                let mut seen = HashMap::new();
                while seen.len() < 3 {
                    let (env, arrived) = next_arrival(&mut source).await;
                    seen.insert(env.id.clone(), (env, arrived));
                }
                let (env, arrived) = &seen[&by_instant];
                assert!(*arrived >= at, "published at {arrived}, before its due time {at}");
                assert_eq!(env.time, Some(at), "CloudEvents time: when it fell due");
                let (_, arrived) = &seen[&by_delay];
                assert!(*arrived >= delayed_due, "published at {arrived}, before its due time {delayed_due}");

                // Once due, the event took the aggregate's next version: an
                // event enqueued now comes after it.
                write(&pool, "d", 3, None).await;
                let (env, _) = next_arrival(&mut source).await;
                assert_eq!(n_of(&env), 3);
                stop.notify_one();
                within(run).await.expect("join").expect("relay");
                let versions = $versions(&pool).await;
                assert_eq!(versions[&by_instant], 2, "the version after every event committed before it fell due");
                assert_eq!(versions[&env.id], 3);
                assert_eq!(outbox.scheduled(&pool, 10).await.expect("list"), []);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_cancelled_event_is_never_published_and_a_published_one_cannot_be_cancelled() {
                let pool = $pool.await;
                let soon = OffsetDateTime::now_utc() + time::Duration::milliseconds(300);
                let cancelled: ScheduleToken = write(&pool, "c", 1, Some(Due::at(soon))).await.parse().expect("token");
                // A cancel that rolls back cancels nothing.
                let kept: ScheduleToken = write(&pool, "c", 2, Some(Due::at(soon))).await.parse().expect("token");
                let mut tx = pool.begin().await.expect("begin");
                assert!(Outbox::new().cancel(&mut tx, kept).await.expect("cancel"));
                tx.rollback().await.expect("rollback");
                // No relay runs yet: the event has not been taken.
                assert!(cancel(&pool, cancelled).await, "cancelled while pending");
                assert!(!cancel(&pool, cancelled).await, "a second cancel finds nothing");
                // Due after both: released after them, in due order.
                let marker = write(&pool, "c", 3, Some(Due::at(soon + time::Duration::milliseconds(200)))).await;

                let broker = MemoryBroker::new(1);
                let mut source = broker.source("orders");
                let r = relay(pool.clone(), broker.clone());
                let stop = Arc::new(tokio::sync::Notify::new());
                let stopped = Arc::clone(&stop);
                let run = tokio::spawn(r.run_until(async move { stopped.notified().await }));
                let (first, _) = next_arrival(&mut source).await;
                let (second, _) = next_arrival(&mut source).await;
                stop.notify_one();
                within(run).await.expect("join").expect("relay");
                assert_eq!(first.id, kept.to_string());
                assert_eq!(second.id, marker, "the cancelled event, due before, never went out");
                assert_eq!(broker.depth("orders"), 0);
                assert!(!cancel(&pool, kept).await, "published: too late to cancel");
                assert_eq!($versions(&pool).await.len(), 2);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_idle_relay_wakes_when_the_next_scheduled_event_falls_due() {
                let pool = $pool.await;
                let id = write(&pool, "w", 1, Some(Due::after(Duration::from_millis(500)))).await;
                let broker = MemoryBroker::new(1);
                let mut source = broker.source("orders");
                // Polling so slow that only the due-time timer can explain a publish.
                let r = relay(pool.clone(), broker.clone()).with_wake_up(WakeUp::Poll {
                    min: Duration::from_secs(3600),
                    max: Duration::from_secs(3600),
                });
                let run = tokio::spawn(r.run_until(std::future::pending()));
                let (env, _) = next_arrival(&mut source).await;
                run.abort();
                assert_eq!(env.id, id);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_event_whose_headers_cannot_be_read_fails_at_once_and_blocks_only_its_aggregate() {
                let pool = $pool.await;
                let broken = write(&pool, "broken", 1, None).await;
                write(&pool, "broken", 2, None).await;
                write(&pool, "fine", 1, None).await;
                // Numbers are not header values: a writer in another language
                // got the column's format wrong.
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE outbox_events SET headers = '{{\"x-retry\": 3}}' WHERE id = {}",
                    $id_literal(&broken)
                )))
                .execute(&pool)
                .await
                .expect("corrupt the row");
                let broker = MemoryBroker::new(1);
                let r = relay(pool.clone(), broker.clone());
                let stats = r.stats();
                r.run_once().await.expect("round");
                let got: Vec<_> = drain(&broker, "orders").await.iter().map(|e| e.key.clone()).collect();
                assert_eq!(got, [Some("fine".to_owned())]);
                let s = stats.snapshot();
                assert_eq!((s.failed, s.retried), (1, 0), "failed at once, not retried: {s:?}");
                let last_error: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT last_error FROM outbox_events WHERE id = {}",
                    $id_literal(&broken)
                )))
                .fetch_one(&pool)
                .await
                .expect("row");
                let last_error = last_error.unwrap_or_default();
                assert!(last_error.contains(&broken), "the error names the event: {last_error}");
                assert_eq!(Outbox::new().pending(&pool).await.expect("pending"), 2, "both events of the aggregate wait");
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

/// An event id as a literal in each database's SQL.
fn pg_id(id: &str) -> String {
    format!("'{id}'::uuid")
}

fn sqlite_id(id: &str) -> String {
    format!("'{id}'")
}

outbox_suite!(postgres, pg_pool(), pg_versions, pg_id);
outbox_suite!(sqlite, sqlite_pool(), sqlite_versions, sqlite_id);

/// An idle relay that finds a scheduled event due while another releaser
/// holds the release lock looks again soon, not after its polling wait:
/// here an hour, so only the retry can explain the publish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_due_event_another_releaser_held_is_released_once_it_lets_go() {
    let pool = pg_pool().await;
    // The release lock of this table, as a second relay would hold it.
    let mut other = pool.acquire().await.expect("a connection");
    sqlx::query("SELECT pg_advisory_lock($1, hashtext('outbox_events'))")
        .bind(0x6f75_7473_i32)
        .execute(&mut *other)
        .await
        .expect("take the release lock");
    let id = write(&pool, "w", 1, Some(Due::after(Duration::ZERO))).await;
    let broker = MemoryBroker::new(1);
    let mut source = broker.source("orders");
    let r = relay(pool.clone(), broker.clone()).with_wake_up(WakeUp::Poll {
        min: Duration::from_secs(3600),
        max: Duration::from_secs(3600),
    });
    let stats = r.stats();
    let run = tokio::spawn(r.run_until(std::future::pending()));
    within(async {
        // A second round while the lock is held: the relay looked again.
        while stats.snapshot().rounds < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await; // polling a counter: no event to await
        }
    })
    .await;
    assert_eq!(broker.depth("orders"), 0, "nothing released while locked");
    sqlx::query("SELECT pg_advisory_unlock($1, hashtext('outbox_events'))")
        .bind(0x6f75_7473_i32)
        .execute(&mut *other)
        .await
        .expect("let go of the release lock");
    let (env, _) = next_arrival(&mut source).await;
    run.abort();
    assert_eq!(env.id, id);
}

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

    async fn publish(&self, batch: &[Outgoing]) -> Vec<Result<(), consumer::backend::Error>> {
        let refused = self.refused.lock().expect("lock").clone();
        let mut out = Vec::new();
        for o in batch {
            if o.message.key.as_ref().is_some_and(|k| refused.contains(k)) {
                out.push(Err(consumer::backend::Error::broker(
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

/// Enqueues one event per entry, in this order, each in its own
/// transaction; returns their ids.
async fn enqueue_pg(pool: &sqlx::PgPool, aggregates: &[&str]) -> Vec<String> {
    let outbox = Outbox::new().with_default_destination("orders");
    let mut ids = Vec::new();
    for (n, agg) in aggregates.iter().enumerate() {
        let mut tx = pool.begin().await.expect("begin");
        let ev = NewEvent::new(
            "Order",
            *agg,
            "OrderPlaced",
            &OrderEvent {
                order: (*agg).to_owned(),
                n: u32::try_from(n).expect("few events"),
            },
        )
        .expect("json");
        ids.push(
            outbox
                .enqueue(&mut tx, ev)
                .await
                .expect("enqueue")
                .to_string(),
        );
        tx.commit().await.expect("commit");
    }
    ids
}

/// `aggregate-version` of the rows a claim would publish (not held back).
fn publishable(rows: &[consumer::outbox::Row]) -> Vec<String> {
    rows.iter()
        .filter(|r| !r.held)
        .map(|r| format!("{}-{}", r.aggregate_id, r.version))
        .collect()
}

fn published(rows: &[consumer::outbox::Row]) -> Vec<(consumer::outbox::Row, RowOutcome)> {
    rows.iter()
        .map(|r| {
            let outcome = if r.held {
                RowOutcome::Skipped
            } else {
                RowOutcome::Published
            };
            (r.clone(), outcome)
        })
        .collect()
}

/// What a PostgreSQL relay does when it overlaps rounds: it claims round
/// k+1 on a second connection while round k, published, is not yet marked
/// and committed. That claim must take neither round k's rows nor any
/// later event of round k's aggregates (whose earlier event could still
/// roll back and go out again), while other aggregates flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_claim_beside_an_unfinished_round_leaves_that_rounds_aggregates_alone() {
    let pool = pg_pool().await;
    let outbox = Outbox::new();
    enqueue_pg(&pool, &["a", "b", "a", "b", "a", "c", "c"]).await;

    let (round_k, rows_k) = <sqlx::Postgres as OutboxDatabase>::claim(&outbox, &pool, "r", 2)
        .await
        .expect("claim k");
    assert_eq!(publishable(&rows_k), ["a-1", "b-1"]);
    // Round k is published, not marked: the next claim runs beside it.
    let (round_next, rows_next) =
        <sqlx::Postgres as OutboxDatabase>::claim(&outbox, &pool, "r", 50)
            .await
            .expect("claim k+1");
    assert_eq!(
        publishable(&rows_next),
        ["c-1", "c-2"],
        "only the aggregates round k does not hold"
    );
    <sqlx::Postgres as OutboxDatabase>::finish(&outbox, &pool, round_next, &published(&rows_next))
        .await
        .expect("finish k+1");
    <sqlx::Postgres as OutboxDatabase>::finish(&outbox, &pool, round_k, &published(&rows_k))
        .await
        .expect("finish k");

    let (round, rows) = <sqlx::Postgres as OutboxDatabase>::claim(&outbox, &pool, "r", 50)
        .await
        .expect("claim after k committed");
    assert_eq!(publishable(&rows), ["a-2", "a-3", "b-2"]);
    <sqlx::Postgres as OutboxDatabase>::finish(&outbox, &pool, round, &published(&rows))
        .await
        .expect("finish");
    assert_eq!(outbox.pending(&pool).await.expect("pending"), 0);
}

/// A relay that dies after the broker confirmed a round and before the
/// round's mark committed (its transaction rolls back): the round's events
/// are claimed again, first of their aggregates, and nothing behind them
/// overtakes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_round_lost_between_publish_and_mark_goes_out_again_first() {
    let pool = pg_pool().await;
    let outbox = Outbox::new();
    enqueue_pg(&pool, &["a", "b", "a", "b"]).await;

    let (round_k, rows_k) = <sqlx::Postgres as OutboxDatabase>::claim(&outbox, &pool, "r", 2)
        .await
        .expect("claim k");
    assert_eq!(publishable(&rows_k), ["a-1", "b-1"]);
    let (round_next, rows_next) =
        <sqlx::Postgres as OutboxDatabase>::claim(&outbox, &pool, "r", 50)
            .await
            .expect("claim k+1");
    assert!(
        publishable(&rows_next).is_empty(),
        "a-2 and b-2 wait for a-1 and b-1"
    );
    <sqlx::Postgres as OutboxDatabase>::finish(&outbox, &pool, round_next, &published(&rows_next))
        .await
        .expect("finish k+1");
    // The crash: round k's transaction ends without its mark.
    round_k.rollback().await.expect("rollback");

    let (round, rows) = <sqlx::Postgres as OutboxDatabase>::claim(&outbox, &pool, "r", 50)
        .await
        .expect("claim again");
    assert_eq!(publishable(&rows), ["a-1", "a-2", "b-1", "b-2"]);
    <sqlx::Postgres as OutboxDatabase>::finish(&outbox, &pool, round, &published(&rows))
        .await
        .expect("finish");
    assert_eq!(outbox.pending(&pool).await.expect("pending"), 0);
}

/// One relay overlapping its rounds (batches smaller than an aggregate's
/// run, so each claim meets the aggregates of the round still committing):
/// every event once, each aggregate in version order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_relay_overlapping_its_rounds_publishes_every_event_once_in_order() {
    let pool = pg_pool().await;
    let aggregates: Vec<String> = (0..120).map(|i| format!("agg-{}", i % 4)).collect();
    let names: Vec<&str> = aggregates.iter().map(String::as_str).collect();
    enqueue_pg(&pool, &names).await;
    let broker = MemoryBroker::new(4);
    let relay = OutboxRelay::new(
        pool.clone(),
        Outbox::new().with_default_destination("orders"),
        broker.clone(),
    )
    .with_batch_size(6)
    .with_wake_up(WakeUp::Poll {
        min: Duration::from_millis(1),
        max: Duration::from_millis(2),
    });
    let stats = relay.stats();
    let stop = Arc::new(tokio::sync::Notify::new());
    let stopped = Arc::clone(&stop);
    let run = tokio::spawn(relay.run_until(async move { stopped.notified().await }));
    within(async {
        while Outbox::new().pending(&pool).await.expect("pending") > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await; // polling the table: no event to await
        }
    })
    .await;
    stop.notify_one();
    within(run).await.expect("join").expect("relay");
    let envs = drain(&broker, "orders").await;
    assert_eq!(
        envs.len(),
        120,
        "every event exactly once (no failure, no crash)"
    );
    let got = first_arrivals(&envs, &pg_versions(&pool).await);
    for (agg, vs) in got {
        assert_eq!(vs, (1..=30).collect::<Vec<i64>>(), "order of {agg}");
    }
    assert_eq!(stats.snapshot().errors, 0);
}

/// The overlap needs a second connection; a relay whose pool has one only
/// loses the overlap: its rounds take turns and everything goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_relay_on_a_pool_of_one_connection_still_publishes_everything_in_order() {
    let pool = pg_pool().await;
    let aggregates: Vec<String> = (0..40).map(|i| format!("agg-{}", i % 4)).collect();
    let names: Vec<&str> = aggregates.iter().map(String::as_str).collect();
    enqueue_pg(&pool, &names).await;
    let schema: String = sqlx::query_scalar("SELECT current_schema()")
        .fetch_one(&pool)
        .await
        .expect("schema");
    let single = consumer::testing::FreshSchema::pool_on(&schema, 1)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let broker = MemoryBroker::new(4);
    let relay = OutboxRelay::new(
        single,
        Outbox::new().with_default_destination("orders"),
        broker.clone(),
    )
    .with_batch_size(3);
    let stats = relay.stats();
    let stop = Arc::new(tokio::sync::Notify::new());
    let stopped = Arc::clone(&stop);
    let run = tokio::spawn(relay.run_until(async move { stopped.notified().await }));
    within(async {
        while Outbox::new().pending(&pool).await.expect("pending") > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await; // polling the table: no event to await
        }
    })
    .await;
    stop.notify_one();
    within(run).await.expect("join").expect("relay");
    let envs = drain(&broker, "orders").await;
    assert_eq!(envs.len(), 40, "every event exactly once");
    for (agg, vs) in first_arrivals(&envs, &pg_versions(&pool).await) {
        assert_eq!(vs, (1..=10).collect::<Vec<i64>>(), "order of {agg}");
    }
    assert_eq!(stats.snapshot().errors, 0, "no round failed");
}

/// An unavailable broker heals: an event it could not take is sent again,
/// past the policy's attempts, until it goes out, and never marked failed
/// (a broker outage longer than the retry span used to block the
/// aggregate until an operator ran `consumer outbox retry`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_broker_never_makes_the_relay_give_up_on_an_event() {
    let pool = sqlite_pool().await;
    write(&pool, "patient", 1, None).await;
    let broker = MemoryBroker::new(1);
    let faults = consumer::testing::Faults::new();
    // Twice the policy's three attempts.
    faults.fail_next_publishes(6);
    let r = relay(
        pool.clone(),
        consumer::testing::FaultyPublisher::new(broker.clone(), faults),
    );
    let stats = r.stats();
    within(async {
        while Outbox::new().pending(&pool).await.expect("pending") > 0 {
            r.run_once().await.expect("round");
            // The backoff of an unavailable broker: at least 100 ms.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let s = stats.snapshot();
    assert_eq!(s.failed, 0, "never marked failed: {s:?}");
    assert!(s.retried >= 6, "{s:?}");
    assert_eq!(drain(&broker, "orders").await.len(), 1);
}
