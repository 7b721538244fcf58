//! Relays killed at random points (SIGKILL on real processes) while
//! writers enqueue: every event reaches the broker at least once, each
//! aggregate's events arrive in commit order, nothing is lost. A second
//! test mixes scheduled events (and cancels of some) in: none is lost or
//! published before its due time, and none whose cancel succeeded is
//! published.
//!
//! The relays are child processes (this test binary re-run with
//! `--ignored --exact child_relay`). Their "broker" is a `sink` table
//! written outside the relay's transaction, exactly as a broker confirm is:
//! a relay killed after publishing and before marking republishes.
//! Needs PostgreSQL (`DATABASE_URL`).

use std::collections::{BTreeMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use consumer::outbox::WakeUp;
use consumer::{NewEvent, Outbox, OutboxRelay, Outgoing, Publisher, error::BrokerErrorKind};
use rand::RngExt;

const SCHEMA_ENV: &str = "OUTBOX_CRASH_SCHEMA";

use consumer::testing::{FreshSchema, database_url};

async fn pool_in(schema: &str, max: u32) -> sqlx::PgPool {
    FreshSchema::pool_on(schema, max).await.unwrap_or_else(|e| {
        panic!("PostgreSQL is not reachable at {} ({e}): start it (scripts/services postgres does) or set DATABASE_URL", database_url())
    })
}

/// A broker stand-in: a row in `sink`, committed on its own, per message.
struct Sink(sqlx::PgPool);

impl Publisher for Sink {
    fn system(&self) -> &'static str {
        "memory"
    }

    async fn publish(&self, batch: &[Outgoing]) -> Vec<Result<(), consumer::backend::Error>> {
        let mut out = Vec::with_capacity(batch.len());
        for o in batch {
            let id = o
                .message
                .headers
                .get("ce_id")
                .ok()
                .flatten()
                .unwrap_or_default()
                .to_owned();
            let r = sqlx::query("INSERT INTO sink (event_id, aggregate_id) VALUES ($1, $2)")
                .bind(id)
                .bind(o.message.key.clone())
                .execute(&self.0)
                .await
                .map(|_| ())
                .map_err(|e| {
                    consumer::backend::Error::broker(
                        BrokerErrorKind::Unavailable,
                        e.to_string(),
                        None,
                    )
                });
            out.push(r);
        }
        out
    }
}

/// The relay process. Runs only when the parent test starts it.
#[tokio::test]
#[ignore = "entry point of the relay child processes of relays_killed_at_random_points_lose_nothing"]
async fn child_relay() {
    let Ok(schema) = std::env::var(SCHEMA_ENV) else {
        return;
    };
    let pool = pool_in(&schema, 4).await;
    let relay = OutboxRelay::new(pool.clone(), Outbox::new(), Sink(pool))
        .with_batch_size(20)
        .with_wake_up(WakeUp::Poll {
            min: Duration::from_millis(1),
            max: Duration::from_millis(5),
        });
    let _ = relay.run_until(std::future::pending()).await;
}

fn spawn_relay(schema: &str) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--ignored",
            "--exact",
            "child_relay",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCHEMA_ENV, schema)
        .env("DATABASE_URL", database_url())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn relay process")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_killed_at_random_points_lose_nothing_and_keep_aggregate_order() {
    let FreshSchema { pool, schema, .. } = FreshSchema::create("ct", 8)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    sqlx::query("CREATE TABLE sink (seq BIGSERIAL PRIMARY KEY, event_id TEXT NOT NULL, aggregate_id TEXT NOT NULL)")
        .execute(&pool)
        .await
        .expect("sink");

    let mut relays: Vec<Child> = (0..3).map(|_| spawn_relay(&schema)).collect();
    let writers: Vec<_> = (0..4u32)
        .map(|w| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let outbox = Outbox::new().with_default_destination("orders");
                for i in 0..150u32 {
                    let agg = format!("agg-{}", (i * 13 + w * 7) % 30);
                    let mut tx = pool.begin().await.expect("begin");
                    let ev = NewEvent::new(
                        "Order",
                        &agg,
                        "OrderChanged",
                        &serde_json::json!({"writer": w, "i": i}),
                    )
                    .expect("json");
                    outbox.enqueue(&mut tx, ev).await.expect("enqueue");
                    tx.commit().await.expect("commit");
                }
            })
        })
        .collect();

    let outbox = Outbox::new();
    let mut kills = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let writing = writers.iter().any(|w| !w.is_finished());
        let pending = outbox.pending(&pool).await.expect("pending");
        if !writing && pending == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "relays never drained the outbox ({pending} pending)"
        );
        // A random relay dies at a random point of its loop, and a new one starts.
        let (victim, pause) = {
            let mut rng = rand::rng();
            (
                rng.random_range(0..relays.len()),
                rng.random_range(5..40u64),
            )
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if kills < 40 {
            relays[victim].kill().expect("SIGKILL");
            let _ = relays[victim].wait();
            relays[victim] = spawn_relay(&schema);
            kills += 1;
        }
    }
    for mut r in relays {
        let _ = r.kill();
        let _ = r.wait();
    }
    for w in writers {
        w.await.expect("writer");
    }

    let events: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT id::text, aggregate_id, version FROM outbox_events")
            .fetch_all(&pool)
            .await
            .expect("events");
    assert_eq!(events.len(), 600);
    let version: std::collections::HashMap<&str, i64> =
        events.iter().map(|(id, _, v)| (id.as_str(), *v)).collect();
    let sink: Vec<(String, String)> =
        sqlx::query_as("SELECT event_id, aggregate_id FROM sink ORDER BY seq")
            .fetch_all(&pool)
            .await
            .expect("sink");
    let mut seen = HashSet::new();
    let mut arrivals: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for (id, agg) in &sink {
        if seen.insert(id.as_str()) {
            arrivals
                .entry(agg.as_str())
                .or_default()
                .push(version[id.as_str()]);
        }
    }
    assert_eq!(
        seen.len(),
        600,
        "every event published at least once ({kills} relays killed)"
    );
    for (agg, vs) in arrivals {
        let expected: Vec<i64> = (1..=vs.len() as i64).collect();
        assert_eq!(vs, expected, "order of {agg}");
    }
    assert!(kills > 0, "no relay was killed: the test proved nothing");
    eprintln!(
        "{kills} relays killed; {} deliveries for 600 events ({} republished)",
        sink.len(),
        sink.len() - 600
    );
}

/// What one writer of the scheduled-events crash test wrote.
#[derive(Default)]
struct Written {
    /// Event id and the instant it falls due (scheduled ones only).
    due: Vec<(String, time::OffsetDateTime)>,
    /// Scheduled events whose cancel returned true: never published.
    cancelled: Vec<String>,
    /// Scheduled events whose cancel came too late: published.
    too_late: Vec<String>,
}

/// Waits until event `id` has reached the sink (relays are killed and
/// restarted meanwhile; at most a minute).
async fn published(pool: &sqlx::PgPool, id: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let seen: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM sink WHERE event_id = $1)")
                .bind(id)
                .fetch_one(pool)
                .await
                .expect("read the sink");
        if seen {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "event {id}, due at once, was not published within a minute"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_killed_at_random_points_keep_scheduled_events_and_honour_cancels() {
    use consumer::outbox::Due;

    let FreshSchema { pool, schema, .. } = FreshSchema::create("ct", 8)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The broker's clock: when each delivery reached it.
    sqlx::query(
        "CREATE TABLE sink (seq BIGSERIAL PRIMARY KEY, event_id TEXT NOT NULL, aggregate_id TEXT NOT NULL, \
         at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())",
    )
    .execute(&pool)
    .await
    .expect("sink");

    let mut relays: Vec<Child> = (0..3).map(|_| spawn_relay(&schema)).collect();
    let writers: Vec<_> = (0..3u32)
        .map(|w| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let outbox = Outbox::new().with_default_destination("orders");
                let mut written = Written::default();
                let mut later = Vec::new();
                for i in 0..120u32 {
                    let agg = format!("agg-{}", (i * 7 + w * 5) % 20);
                    let ev = NewEvent::new(
                        "Order",
                        &agg,
                        "OrderChanged",
                        &serde_json::json!({"writer": w, "i": i}),
                    )
                    .expect("json");
                    let mut tx = pool.begin().await.expect("begin");
                    if i % 3 == 0 {
                        // Of the events cancelled later, half are due in an
                        // hour (the cancel must succeed) and half at once
                        // (cancelled once published: it must come too
                        // late); the others fall due within 3 s.
                        let ms = match i % 24 {
                            0 => 3_600_000,
                            12 => 0,
                            _ => rand::rng().random_range(0..3_000),
                        };
                        let due =
                            time::OffsetDateTime::now_utc() + time::Duration::milliseconds(ms);
                        let token = outbox
                            .schedule(&mut tx, ev, Due::at(due))
                            .await
                            .expect("schedule");
                        tx.commit().await.expect("commit");
                        if i % 4 == 0 {
                            later.push((token, due));
                            continue;
                        }
                        written.due.push((token.to_string(), due));
                    } else {
                        outbox.enqueue(&mut tx, ev).await.expect("enqueue");
                        tx.commit().await.expect("commit");
                    }
                }
                // Cancelled in later transactions: those due at once after
                // a relay has published them, the others long before they
                // fall due.
                for (token, due) in later {
                    if due < time::OffsetDateTime::now_utc() + time::Duration::minutes(1) {
                        published(&pool, &token.to_string()).await;
                    }
                    let mut tx = pool.begin().await.expect("begin");
                    let was_pending = outbox.cancel(&mut tx, token).await.expect("cancel");
                    tx.commit().await.expect("commit");
                    if was_pending {
                        written.cancelled.push(token.to_string());
                    } else {
                        written.too_late.push(token.to_string());
                        written.due.push((token.to_string(), due));
                    }
                }
                written
            })
        })
        .collect();

    let outbox = Outbox::new();
    let mut kills = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let writing = writers.iter().any(|w| !w.is_finished());
        let pending = outbox.pending(&pool).await.expect("pending");
        let scheduled = outbox.scheduled(&pool, 1).await.expect("scheduled").len();
        if !writing && pending == 0 && scheduled == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "relays never drained the outbox ({pending} pending, {scheduled} scheduled)"
        );
        let (victim, pause) = {
            let mut rng = rand::rng();
            (
                rng.random_range(0..relays.len()),
                rng.random_range(5..40u64),
            )
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if kills < 60 {
            relays[victim].kill().expect("SIGKILL");
            let _ = relays[victim].wait();
            relays[victim] = spawn_relay(&schema);
            kills += 1;
        }
    }
    for mut r in relays {
        let _ = r.kill();
        let _ = r.wait();
    }
    let mut written = Written::default();
    for w in writers {
        let w = w.await.expect("writer");
        written.due.extend(w.due);
        written.cancelled.extend(w.cancelled);
        written.too_late.extend(w.too_late);
    }

    let events: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT id::text, aggregate_id, version FROM outbox_events")
            .fetch_all(&pool)
            .await
            .expect("events");
    let version: std::collections::HashMap<&str, i64> =
        events.iter().map(|(id, _, v)| (id.as_str(), *v)).collect();
    let sink: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT event_id, aggregate_id, (extract(epoch FROM at) * 1000000)::bigint FROM sink ORDER BY seq",
    )
    .fetch_all(&pool)
    .await
    .expect("sink");
    let mut first_arrival = std::collections::HashMap::new();
    let mut arrivals: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for (id, agg, at) in &sink {
        if first_arrival.insert(id.as_str(), *at).is_none() {
            arrivals
                .entry(agg.as_str())
                .or_default()
                .push(version[id.as_str()]);
        }
    }
    let expected = 360 - written.cancelled.len();
    assert_eq!(
        events.len(),
        expected,
        "every event not cancelled reached the outbox table"
    );
    assert_eq!(
        first_arrival.len(),
        expected,
        "every event not cancelled published at least once ({kills} relays killed)"
    );
    for id in &written.cancelled {
        assert!(
            !first_arrival.contains_key(id.as_str()),
            "cancelled event {id} was published"
        );
    }
    for id in &written.too_late {
        assert!(
            first_arrival.contains_key(id.as_str()),
            "event {id} too late to cancel was lost"
        );
    }
    // Due times are kept to the millisecond.
    for (id, due) in &written.due {
        let at_us = first_arrival[id.as_str()];
        let due_us = due.unix_timestamp_nanos() / 1_000_000 * 1_000;
        assert!(
            i128::from(at_us) >= due_us,
            "event {id} published at {at_us} us, before its due time {due_us} us"
        );
    }
    for (agg, vs) in arrivals {
        let expected: Vec<i64> = (1..=vs.len() as i64).collect();
        assert_eq!(vs, expected, "order of {agg}");
    }
    // The claim reads an aggregate's events in `seq` order: released events
    // must get theirs in version order too.
    let inverted: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox_events a JOIN outbox_events b \
           ON a.aggregate_type = b.aggregate_type AND a.aggregate_id = b.aggregate_id \
          AND a.version < b.version AND a.seq > b.seq",
    )
    .fetch_one(&pool)
    .await
    .expect("query");
    assert_eq!(inverted, 0, "a later version got a smaller seq");
    assert!(kills > 0, "no relay was killed: the test proved nothing");
    assert!(
        !written.cancelled.is_empty() && !written.too_late.is_empty(),
        "cancels never succeeded or never came too late: the test proved nothing of them"
    );
    eprintln!(
        "{kills} relays killed; {} scheduled published, {} cancelled, {} too late to cancel; {} deliveries",
        written.due.len(),
        written.cancelled.len(),
        written.too_late.len(),
        sink.len()
    );
}
