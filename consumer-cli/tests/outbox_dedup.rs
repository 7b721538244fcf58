//! `consumer outbox` and `consumer dedup` on a real PostgreSQL store
//! (`DATABASE_URL`) and, for the outbox relay, RabbitMQ (`AMQP_URL`).

mod support;

use std::time::Duration;

use consumer::RetryPolicy;
use consumer::amqp::AmqpPublisher;
use consumer::outbox::{NewEvent, Outbox, OutboxRelay};
use lapin::options::{BasicGetOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use serde::{Deserialize, Serialize};
use support::{World, both, stdout};

#[derive(Debug, Serialize, Deserialize)]
struct OrderEvent {
    n: u32,
}

async fn declare(queue: &str) {
    let conn =
        lapin::Connection::connect(&support::amqp_url(), lapin::ConnectionProperties::default())
            .await
            .expect("RabbitMQ connection");
    let channel = conn.create_channel().await.expect("channel");
    let mut args = FieldTable::default();
    args.insert("x-expires".into(), AMQPValue::LongInt(600_000));
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            args,
        )
        .await
        .expect("declare");
    let _ = conn.close(200, "declared".into()).await;
}

async fn drain(queue: &str) -> Vec<u32> {
    let conn =
        lapin::Connection::connect(&support::amqp_url(), lapin::ConnectionProperties::default())
            .await
            .expect("RabbitMQ connection");
    let channel = conn.create_channel().await.expect("channel");
    let mut got = Vec::new();
    while let Some(m) = channel
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
    {
        let ev: OrderEvent = serde_json::from_slice(&m.delivery.data).expect("event");
        got.push(ev.n);
    }
    let _ = conn.close(200, "drained".into()).await;
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_retry_unblocks_a_failed_aggregate_and_its_later_events_follow_in_order() {
    let w = World::new("outbox").await;
    let pool = w.schema.pool.clone();
    let ok_queue = format!("{}.ok", w.queue());
    let bad_queue = format!("{}.bad", w.queue());
    declare(&ok_queue).await;
    let outbox = Outbox::new();
    for n in 1..=3u32 {
        for (agg, queue) in [("ok", &ok_queue), ("bad", &bad_queue)] {
            let mut tx = pool.begin().await.expect("begin");
            let ev = NewEvent::new("Order", agg, "OrderPlaced", &OrderEvent { n })
                .expect("json")
                .with_destination(format!("/{queue}"));
            outbox.enqueue(&mut tx, ev).await.expect("enqueue");
            tx.commit().await.expect("commit");
        }
    }
    // The bad aggregate's queue does not exist: its first event is
    // unroutable, fails for good, and blocks the two behind it.
    let relay = OutboxRelay::new(
        pool.clone(),
        Outbox::new(),
        AmqpPublisher::builder(support::amqp_url()).build(),
    )
    .with_retry_policy(RetryPolicy::exponential(
        Duration::from_millis(1),
        Duration::from_millis(5),
        2,
    ));
    let stats = relay.stats();
    support::eventually("the bad aggregate failed", || async {
        relay.run_once().await.expect("relay round");
        stats.snapshot().failed >= 1
    })
    .await;
    relay.run_once().await.expect("relay round");
    assert_eq!(drain(&ok_queue).await, [1, 2, 3]);

    let status = w.run(&["outbox", "status", "--json"]).await;
    assert_eq!(status.status.code(), Some(0), "{}", both(&status));
    let v: serde_json::Value = serde_json::from_str(stdout(&status).trim()).expect("json");
    assert_eq!(v["pending"], 3, "{v}");
    assert_eq!(v["failed"][0]["aggregate_id"], "bad", "{v}");
    assert_eq!(v["failed"][0]["version"], 1, "{v}");
    let table = w.run(&["outbox", "status"]).await;
    assert!(stdout(&table).contains("Order/bad"), "{}", both(&table));

    let nothing = w.run(&["outbox", "retry", "Order/none"]).await;
    assert_eq!(nothing.status.code(), Some(6), "{}", both(&nothing));

    // The fix: the queue exists now. Then the operator retries.
    declare(&bad_queue).await;
    let retry = w.run(&["outbox", "retry", "Order/bad"]).await;
    assert_eq!(retry.status.code(), Some(0), "{}", both(&retry));
    support::eventually("the outbox drained", || async {
        relay.run_once().await.expect("relay round");
        outbox.pending(&pool).await.expect("pending") == 0
    })
    .await;
    assert_eq!(
        drain(&bad_queue).await,
        [1, 2, 3],
        "in order after the unblock"
    );
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_status_counts_scheduled_events_and_lists_the_next_due() {
    use consumer::outbox::Due;

    let w = World::new("outbox-scheduled").await;
    let pool = w.schema.pool.clone();
    let outbox = Outbox::new();
    let hour = Duration::from_secs(3600);
    let mut tokens = Vec::new();
    let mut tx = pool.begin().await.expect("begin");
    for (n, due) in [
        (3, Due::after(hour * 3)),
        (1, Due::after(hour)),
        (2, Due::after(hour * 2)),
        // Due a minute ago, and no relay runs: pending, listed first.
        (
            0,
            Due::at(time::OffsetDateTime::now_utc() - time::Duration::minutes(1)),
        ),
    ] {
        let ev = NewEvent::new(
            "Order",
            format!("s{n}"),
            "PaymentTimedOut",
            &OrderEvent { n },
        )
        .expect("json")
        .with_destination("payments");
        tokens.push((
            n,
            outbox.schedule(&mut tx, ev, due).await.expect("schedule"),
        ));
    }
    tx.commit().await.expect("commit");
    tokens.sort_by_key(|(n, _)| *n);

    let status = w.run(&["outbox", "status", "--json", "--next", "2"]).await;
    assert_eq!(status.status.code(), Some(0), "{}", both(&status));
    let v: serde_json::Value = serde_json::from_str(stdout(&status).trim()).expect("json");
    assert_eq!(v["pending"], 1, "the overdue one waits for a relay: {v}");
    assert!(
        v["oldest_age_seconds"].as_i64().is_some_and(|s| s >= 60),
        "{v}"
    );
    assert_eq!(v["scheduled"]["count"], 3, "{v}");
    let next = v["scheduled"]["next"].as_array().expect("next");
    assert_eq!(next.len(), 2, "{v}");
    assert_eq!(next[0]["id"], tokens[0].1.to_string(), "{v}");
    assert_eq!(next[1]["id"], tokens[1].1.to_string(), "{v}");
    assert_eq!(next[1]["aggregate_id"], "s1", "{v}");
    assert_eq!(next[1]["event_type"], "PaymentTimedOut", "{v}");
    assert_eq!(next[1]["destination"], "payments", "{v}");

    let table = w.run(&["outbox", "status"]).await;
    let text = stdout(&table);
    assert!(text.contains("scheduled events: 3"), "{}", both(&table));
    assert!(text.contains("Order/s3"), "{}", both(&table));
    assert!(text.contains("waiting for a relay"), "{}", both(&table));
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_counts_per_handler_and_purges_only_old_rows() {
    let w = World::new("dedup").await;
    sqlx::raw_sql(
        "INSERT INTO consumer_processed (handler, key, message_id, processed_at) \
         SELECT 'book', 'old-' || i, 'm-' || i, now() - interval '10 days' FROM generate_series(1, 5) i; \
         INSERT INTO consumer_processed (handler, key, message_id) \
         SELECT 'ship', 'new-' || i, 'n-' || i FROM generate_series(1, 3) i;",
    )
    .execute(&w.schema.pool)
    .await
    .expect("dedup rows");
    let counts = w.run(&["dedup", "counts", "--json"]).await;
    assert_eq!(counts.status.code(), Some(0), "{}", both(&counts));
    let lines: Vec<serde_json::Value> = stdout(&counts)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (&lines[0]["handler"], &lines[0]["processed"]),
        (&"book".into(), &5.into())
    );
    assert_eq!(
        (&lines[1]["handler"], &lines[1]["processed"]),
        (&"ship".into(), &3.into())
    );

    let purge = w
        .run(&["dedup", "purge", "--older-than", "7days", "--batch", "2"])
        .await;
    assert_eq!(purge.status.code(), Some(0), "{}", both(&purge));
    assert!(stdout(&purge).contains("deleted 5"), "{}", both(&purge));
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM consumer_processed")
        .fetch_one(&w.schema.pool)
        .await
        .expect("count");
    assert_eq!(left, 3);
    w.close().await;
}
