//! Metrics (no services: the in-memory broker and store).
//!
//! * Every metric the runtime emits is in the catalogue, with its unit,
//!   instrument, buckets and only documented attributes, and the values
//!   say what happened.
//! * The catalogue matches the committed snapshot
//!   (`tests/snapshots/metrics.txt`), so a rename is a visible change
//!   (`UPDATE_SNAPSHOTS=1` rewrites it).
//! * Cardinality is bounded: 10 000 messages with distinct ids and keys
//!   add no series, and no attribute carries an id or a key.
//! * A consumer's partition series go away with it.

use std::collections::BTreeSet;
use std::time::Duration;

use consumer::testing::MetricsRecorder;
use consumer::testing::metrics::{Point, check_against_catalogue, total};
use consumer::{Consumer, MemoryBroker, MemoryStore, MemoryTx, Message, Router, handler};

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Order {
    id: String,
    /// Fail this many attempts (transiently), then succeed.
    #[serde(default)]
    fail: u32,
    #[serde(default)]
    terminal: bool,
}

#[derive(Debug, thiserror::Error)]
enum OrderError {
    #[error("not yet")]
    NotYet,
    #[error("never")]
    Never,
}

#[handler(
    event_type = "OrderPlaced",
    idempotency_key = order.id,
    retry = exponential(base = "1ms", max_delay = "5ms", attempts = 3),
    terminal = OrderError::Never,
)]
async fn placed(
    order: Order,
    _tx: &mut MemoryTx,
    ctx: &consumer::MessageContext,
) -> Result<(), OrderError> {
    if order.terminal {
        return Err(OrderError::Never);
    }
    if ctx.attempt() <= order.fail {
        return Err(OrderError::NotYet);
    }
    Ok(())
}

fn order(id: &str, key: &str) -> Message {
    Message::json(
        "OrderPlaced",
        &Order {
            id: id.to_owned(),
            fail: 0,
            terminal: false,
        },
    )
    .expect("json")
    .with_key(key)
}

/// [`total`] of the points of `name` with attributes `with`, failing the
/// test when there is none: a value of zero must not pass for a series that
/// is not emitted at all.
fn emitted(points: &[Point], name: &str, with: &[(&str, &str)]) -> f64 {
    assert!(
        points.iter().any(|p| p.name == name
            && with
                .iter()
                .all(|(k, v)| p.attributes.get(*k).is_some_and(|a| a == v))),
        "no {name} series with {with:?} was emitted: {:?}",
        series(points)
    );
    total(points, name, with)
}

fn series(points: &[Point]) -> BTreeSet<String> {
    points
        .iter()
        .map(|p| format!("{}{:?}", p.name, p.attributes))
        .collect()
}

/// Runs the router over `topic` until `done` holds for the stats, hands
/// the collected points to `while_running`, then stops.
async fn run(
    broker: &MemoryBroker,
    recorder: &MetricsRecorder,
    topic: &str,
    expected_settled: u64,
) -> (Vec<Point>, consumer::stats::StatsSnapshot) {
    let router = Router::builder("orders")
        .route(placed)
        .ignore_unknown_types()
        .build()
        .expect("router");
    let consumer = Consumer::router(broker.source(topic), MemoryStore::new(), router)
        .with_meter(recorder.meter());
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    let settled = tokio::time::timeout(
        Duration::from_secs(60),
        stats.wait_for(|s| {
            s.processed + s.duplicates + s.dead_letters() + s.unknown_types_ignored
                >= expected_settled
                && s.in_flight == 0
        }),
    )
    .await
    .expect("the consumer settled everything within 60 s");
    let points = recorder.collect();
    let _ = stop.send(());
    running.await.expect("join").expect("consumer");
    (points, settled)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_emitted_is_in_the_catalogue_and_says_what_happened() {
    let broker = MemoryBroker::new(2);
    let recorder = MetricsRecorder::new();
    for i in 0..5 {
        broker
            .publish("orders", order(&format!("o{i}"), &format!("k{i}")))
            .await
            .expect("publish");
    }
    // The same order twice: a duplicate.
    broker
        .publish("orders", order("o0", "k0"))
        .await
        .expect("publish");
    let flaky = |id: &str, fail, terminal| {
        Message::json(
            "OrderPlaced",
            &Order {
                id: id.to_owned(),
                fail,
                terminal,
            },
        )
        .expect("json")
        .with_key("k9")
    };
    for m in [
        flaky("once", 1, false),
        flaky("never", 0, true),
        flaky("always", 99, false),
        Message::raw(&b"{not json"[..])
            .with_header(consumer::envelope::names::TYPE, "OrderPlaced")
            .with_key("k9"),
        Message::json("OrderPaid", &serde_json::json!({})).expect("json"),
    ] {
        broker.publish("orders", m).await.expect("publish");
    }

    let (points, s) = run(&broker, &recorder, "orders", 11).await;
    check_against_catalogue(&points).expect("what is emitted is documented");

    let memory = [
        ("messaging.system", "memory"),
        ("messaging.destination.name", "orders"),
    ];
    let at = |name, extra: &[(&str, &str)]| {
        let mut with = memory.to_vec();
        with.extend_from_slice(extra);
        emitted(&points, name, &with)
    };
    assert_eq!(at("messaging.client.consumed.messages", &[]), 11.0);
    assert_eq!(
        at("consumer.duplicates", &[("consumer.handler", "placed")]),
        1.0
    );
    assert_eq!(at("consumer.unknown_types", &[]), 1.0);
    for reason in ["poison", "terminal", "exhausted"] {
        assert_eq!(
            at(
                "consumer.dead_letters",
                &[("consumer.dead_letter.reason", reason)]
            ),
            1.0,
            "{reason}"
        );
    }
    // once: 1 retry; always: 2 (3 attempts).
    assert_eq!(
        at("consumer.retries", &[("consumer.retry.mode", "in_place")]),
        3.0
    );
    assert_eq!(at("consumer.in_flight", &[]), 0.0);
    // Attempts: 5 + the duplicate + once (2) + never + always (3) + the
    // poison pill (its decoding fails in the handler).
    let attempts = at(
        "messaging.process.duration",
        &[("messaging.operation.name", "process")],
    );
    assert_eq!(attempts, 13.0);
    assert_eq!(
        at("messaging.process.duration", &[("error.type", "poison")]),
        1.0
    );
    assert_eq!(
        at("messaging.process.duration", &[("error.type", "transient")]),
        4.0
    );
    assert_eq!(
        at("messaging.process.duration", &[("error.type", "terminal")]),
        1.0
    );
    assert_eq!(
        at(
            "messaging.client.operation.duration",
            &[("messaging.operation.name", "dead_letter")]
        ),
        3.0
    );
    assert_eq!(
        at(
            "messaging.client.operation.duration",
            &[
                ("messaging.operation.name", "ack"),
                ("messaging.operation.type", "settle")
            ]
        ),
        11.0
    );
    assert!(
        points
            .iter()
            .filter(|p| p.name == "messaging.client.operation.duration")
            .all(|p| !p.attributes.contains_key("error.type")),
        "no settle operation failed"
    );
    assert_eq!(at("consumer.delivery.duration", &[]), 11.0);
    // Every message but the raw one carries a CloudEvents time.
    assert_eq!(at("consumer.critical_time", &[]), 10.0);
    let lags: Vec<&Point> = points.iter().filter(|p| p.name == "consumer.lag").collect();
    assert_eq!(lags.len(), 2, "one lag series per partition: {lags:?}");
    assert!(lags.iter().all(|p| p.value == 0.0), "drained: {lags:?}");
    assert_eq!(s.dead_letters(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumers_partition_series_go_away_with_it() {
    let broker = MemoryBroker::new(3);
    let recorder = MetricsRecorder::new();
    broker.publish("t", order("a", "a")).await.expect("publish");
    let (running, _) = run(&broker, &recorder, "t", 1).await;
    assert_eq!(
        running.iter().filter(|p| p.name == "consumer.lag").count(),
        3
    );
    let after = recorder.collect();
    assert!(
        after
            .iter()
            .all(|p| p.name != "consumer.lag" && p.name != "consumer.lag.age"),
        "{:?}",
        series(&after)
    );
    assert!(
        after
            .iter()
            .any(|p| p.name == "messaging.client.consumed.messages"),
        "counters stay"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_distinct_ids_and_keys_add_no_series() {
    let broker = MemoryBroker::new(4);
    let recorder = MetricsRecorder::new();
    let mut ids = BTreeSet::new();
    for i in 0..100 {
        let (id, key) = (format!("first-{i}"), format!("key-first-{i}"));
        broker
            .publish("t", order(&id, &key))
            .await
            .expect("publish");
        ids.insert(id);
        ids.insert(key);
    }
    let (first, _) = run(&broker, &recorder, "t", 100).await;
    for i in 0..10_000 {
        let (id, key) = (format!("id-{i}"), format!("key-{i}"));
        broker
            .publish("t", order(&id, &key))
            .await
            .expect("publish");
        ids.insert(id);
        ids.insert(key);
    }
    let (after, _) = run(&broker, &recorder, "t", 10_000).await;
    assert_eq!(
        total(&after, "messaging.client.consumed.messages", &[]),
        10_100.0
    );
    assert_eq!(series(&first), series(&after), "no new series");
    for p in &after {
        for v in p.attributes.values() {
            assert!(!ids.contains(v), "{p} carries an id or key");
        }
    }
}

/// A relay's sends, their latency, an event marked failed, and what
/// waits in the table (read by `read_backlog`, as `run_until` does every
/// backlog interval).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_reports_what_it_sent_and_what_waits_in_its_table() {
    use consumer::backend::BrokerErrorKind;
    use consumer::testing::{Faults, FaultyPublisher};
    use consumer::{NewEvent, Outbox, OutboxRelay, RetryPolicy, SqliteStore};

    let recorder = MetricsRecorder::new();
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await
        .expect("in-memory SQLite");
    SqliteStore::new(pool.clone())
        .migrate()
        .await
        .expect("migrations");
    let outbox = Outbox::new().with_default_destination("events");
    let mut tx = pool.begin().await.expect("begin");
    for i in 0..3 {
        let event = NewEvent::new(
            "Order",
            format!("o{i}"),
            "OrderPlaced",
            &serde_json::json!({ "i": i }),
        )
        .expect("event");
        outbox.enqueue(&mut tx, event).await.expect("enqueue");
    }
    tx.commit().await.expect("commit");

    let broker = MemoryBroker::new(1);
    let faults = Faults::new();
    faults.refuse_next_publishes(1, BrokerErrorKind::Rejected);
    let relay = OutboxRelay::new(pool, outbox, FaultyPublisher::new(broker.clone(), faults))
        .with_retry_policy(RetryPolicy::none())
        .with_meter(recorder.meter());
    assert_eq!(relay.read_backlog().await.expect("backlog").pending, 3);
    relay.run_once().await.expect("a round");
    let after = relay.read_backlog().await.expect("backlog");
    assert_eq!((after.pending, after.blocked), (1, 1), "{after:?}");

    let points = recorder.collect();
    check_against_catalogue(&points).expect("what is emitted is documented");
    let events = [
        ("messaging.destination.name", "events"),
        ("messaging.system", "memory"),
    ];
    assert_eq!(
        total(&points, "messaging.client.sent.messages", &events),
        3.0
    );
    assert_eq!(
        total(
            &points,
            "messaging.client.sent.messages",
            &[
                ("error.type", "rejected"),
                ("messaging.operation.name", "send")
            ]
        ),
        1.0
    );
    assert_eq!(total(&points, "consumer.outbox.failed", &events), 1.0);
    assert_eq!(
        total(&points, "consumer.outbox.publish.latency", &events),
        2.0
    );
    let table = [
        ("consumer.outbox.table", "outbox_events"),
        ("db.system.name", "sqlite"),
    ];
    assert_eq!(total(&points, "consumer.outbox.pending", &table), 1.0);
    assert_eq!(
        total(&points, "consumer.outbox.blocked_aggregates", &table),
        1.0
    );
    // One event waits (the failed one): its age is a reading, not a
    // missing series.
    assert!(emitted(&points, "consumer.outbox.oldest.age", &table) >= 0.0);
    assert_eq!(broker.depth("events"), 2);
}

/// Scheduled events: counted while not yet due, counted as pending once
/// due, and how late each went out after its due time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_counts_scheduled_events_and_how_late_they_went_out() {
    use consumer::outbox::Due;
    use consumer::{NewEvent, Outbox, OutboxRelay, SqliteStore};
    use time::OffsetDateTime;

    let recorder = MetricsRecorder::new();
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await
        .expect("in-memory SQLite");
    SqliteStore::new(pool.clone())
        .migrate()
        .await
        .expect("migrations");
    let outbox = Outbox::new().with_default_destination("events");
    let ten_s_ago = OffsetDateTime::now_utc() - time::Duration::seconds(10);
    let mut tx = pool.begin().await.expect("begin");
    for (i, due) in [
        Due::at(ten_s_ago),
        Due::after(Duration::from_secs(3600)),
        Due::after(Duration::from_secs(7200)),
    ]
    .into_iter()
    .enumerate()
    {
        let event = NewEvent::new(
            "Order",
            format!("o{i}"),
            "Reminder",
            &serde_json::json!({ "i": i }),
        )
        .expect("event");
        outbox
            .schedule(&mut tx, event, due)
            .await
            .expect("schedule");
    }
    tx.commit().await.expect("commit");

    let broker = MemoryBroker::new(1);
    let relay = OutboxRelay::new(pool, outbox, broker.clone()).with_meter(recorder.meter());
    let before = relay.read_backlog().await.expect("backlog");
    assert_eq!((before.pending, before.scheduled), (1, 2), "{before:?}");
    let now_ms = i64::try_from(OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000)
        .expect("ms since 1970");
    let waited = before.oldest_ms.map(|ms| now_ms - ms);
    assert!(
        waited.is_some_and(|ms| ms >= 10_000),
        "the overdue event has waited since it fell due: {waited:?}"
    );
    relay.run_once().await.expect("a round");
    let after = relay.read_backlog().await.expect("backlog");
    assert_eq!((after.pending, after.scheduled), (0, 2), "{after:?}");

    let points = recorder.collect();
    check_against_catalogue(&points).expect("what is emitted is documented");
    let events = [
        ("messaging.destination.name", "events"),
        ("messaging.system", "memory"),
    ];
    assert_eq!(
        total(&points, "consumer.outbox.scheduled.lateness", &events),
        1.0
    );
    let late: f64 = points
        .iter()
        .filter(|p| p.name == "consumer.outbox.scheduled.lateness")
        .map(|p| p.sum)
        .sum();
    assert!(
        late >= 10.0,
        "published at least 10 s after it fell due: {late}"
    );
    assert_eq!(
        total(&points, "consumer.outbox.publish.latency", &events),
        0.0,
        "a scheduled event is not counted as an enqueued one"
    );
    let table = [
        ("consumer.outbox.table", "outbox_events"),
        ("db.system.name", "sqlite"),
    ];
    assert_eq!(total(&points, "consumer.outbox.scheduled", &table), 2.0);
    assert_eq!(total(&points, "consumer.outbox.pending", &table), 0.0);
    assert_eq!(broker.depth("events"), 1);
}

#[test]
fn the_catalogue_matches_the_committed_snapshot() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/snapshots/metrics.txt");
    // The runtime's catalogue, then the parts' built on it (sagas).
    let now = consumer::metrics::catalogue::snapshot()
        + &consumer::metrics::catalogue::snapshot_of(consumer::saga::metrics::CATALOGUE);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(path, &now).expect("write the snapshot");
    }
    let committed = std::fs::read_to_string(path).expect("tests/snapshots/metrics.txt");
    assert_eq!(
        committed, now,
        "the metrics changed: review the difference, then run with UPDATE_SNAPSHOTS=1"
    );
}

mod sagas {
    //! A saga's counters (recorded once its transitions committed) and the
    //! gauges its monitor reads from the store, on SQLite in memory.

    use std::time::Duration;

    use consumer::saga::{NotFound, SagaBuilder, SagaMonitor, SagaStore, Step};
    use consumer::testing::MetricsRecorder;
    use consumer::{Consumer, MemoryBroker, Message, Outbox, Saga, SqliteStore};

    use super::emitted;

    #[derive(Debug, serde::Serialize, serde::Deserialize)]
    struct Ev {
        id: String,
    }

    #[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
    struct Nothing {}

    #[derive(Debug, thiserror::Error)]
    #[error("never")]
    struct Never;

    struct Counted;

    impl Saga for Counted {
        type State = Nothing;
        type Error = Never;
        fn name(&self) -> &'static str {
            "counted"
        }
    }

    fn open(_: &Counted, _: &mut Nothing, e: Ev, step: &mut Step<'_>) -> Result<(), Never> {
        step.schedule_timeout("Expire", &e, Duration::from_secs(3600));
        Ok(())
    }

    fn close(_: &Counted, _: &mut Nothing, _: Ev, step: &mut Step<'_>) -> Result<(), Never> {
        step.complete();
        Ok(())
    }

    fn expire(_: &Counted, _: &mut Nothing, _: Ev, step: &mut Step<'_>) -> Result<(), Never> {
        step.fail("expired");
        Ok(())
    }

    fn ev(kind: &str, id: &str) -> Message {
        Message::json(kind, &Ev { id: id.into() })
            .expect("json")
            .with_key(id)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sagas_counters_and_gauges_say_what_its_transitions_did() {
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .expect("SQLite");
        let store = SqliteStore::new(pool.clone()).with_extension(consumer::saga::SagaTables);
        store.migrate().await.expect("migrations");
        let recorder = MetricsRecorder::new();
        let id = |e: &Ev| e.id.clone();
        let saga = SagaBuilder::new(Counted, Outbox::new())
            .on("Open", id, NotFound::Start, open)
            .on("Close", id, NotFound::Ignore, close)
            .on_timeout("Expire", expire)
            .with_meter(recorder.meter())
            .build()
            .expect("saga");
        let broker = MemoryBroker::new(2);
        // a: opened, closed, then a late close; b: never opened;
        // c: opened, then its timeout fires; d: opened, still active, a
        // timeout it does not wait for arrives.
        for m in [
            ev("Open", "a"),
            ev("Close", "a"),
            ev("Close", "a"),
            ev("Close", "b"),
            ev("Open", "c"),
            ev("Open", "d"),
        ] {
            broker.publish("t", m).await.expect("publish");
        }
        let consumer = Consumer::new(broker.source("t"), store.clone(), saga);
        let stats = consumer.stats();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(consumer.run_until(async move {
            let _ = stopped.await;
        }));
        stats.wait_for(|s| s.processed == 6).await;
        // c's timeout, as the relay would publish it: its token is its id.
        let sagas = SagaStore::new(pool.clone());
        let c = sagas.get("counted", "c").await.expect("read").expect("c");
        let token = c.timeouts[0].token().to_string();
        broker
            .publish("t", ev("Expire", "c").with_id(token.clone()))
            .await
            .expect("publish");
        // One d never scheduled (or cancelled): stale.
        broker
            .publish(
                "t",
                ev("Expire", "d").with_id(uuid::Uuid::now_v7().to_string()),
            )
            .await
            .expect("publish");
        stats.wait_for(|s| s.processed == 8).await;
        let _ = stop.send(());
        running.await.expect("join").expect("consumer");

        let monitor = SagaMonitor::new(pool.clone()).with_meter(recorder.meter());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let reading = tokio::spawn(monitor.run_until(async move {
            let _ = stopped.await;
        }));
        // The monitor reads at once when it starts; the gauges observe it.
        let points = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let points = recorder.collect();
                if points.iter().any(|p| p.name == "consumer.saga.active") {
                    return points;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the monitor read the store within 60 s");
        let _ = stop.send(());
        reading.await.expect("join").expect("monitor");

        consumer::testing::metrics::check_against_catalogues(
            &points,
            &[
                consumer::metrics::CATALOGUE,
                consumer::saga::metrics::CATALOGUE,
            ],
        )
        .expect("what is emitted is documented");
        let of = [("consumer.saga.type", "counted")];
        let with = |extra: (&'static str, &'static str)| [of[0], extra];
        assert_eq!(emitted(&points, "consumer.saga.started", &of), 3.0);
        assert_eq!(
            emitted(
                &points,
                "consumer.saga.finished",
                &with(("consumer.saga.status", "completed"))
            ),
            1.0
        );
        assert_eq!(
            emitted(
                &points,
                "consumer.saga.finished",
                &with(("consumer.saga.status", "failed"))
            ),
            1.0
        );
        assert_eq!(emitted(&points, "consumer.saga.timed_out", &of), 1.0);
        for reason in ["finished", "not_found", "stale_timeout"] {
            let n = emitted(
                &points,
                "consumer.saga.ignored",
                &with(("consumer.saga.ignored.reason", reason)),
            );
            assert_eq!(n, 1.0, "{reason}");
        }
        assert_eq!(
            emitted(&points, "consumer.saga.active", &of),
            1.0,
            "d is still open"
        );
        assert_eq!(
            emitted(&points, "consumer.saga.compensation_failed", &of),
            0.0
        );
        assert!(emitted(&points, "consumer.saga.oldest_active.age", &of) >= 0.0);
    }
}
