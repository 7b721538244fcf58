//! `consumer outbox` with the relay publishing to Apache Kafka (at
//! `KAFKA_BROKERS`) from the PostgreSQL store (`DATABASE_URL`): a failed
//! aggregate, retried by the operator, publishes its events in order.

mod support;

use std::time::Duration;

use consumer::RetryPolicy;
use consumer::kafka::KafkaPublisher;
use consumer::outbox::{NewEvent, Outbox, OutboxRelay};
use serde::{Deserialize, Serialize};
use support::kafka::{KafkaTopics, read_topic};
use support::{World, both, stdout};

#[derive(Debug, Serialize, Deserialize)]
struct OrderEvent {
    n: u32,
    padding: String,
}

async fn relay(
    pool: sqlx::PgPool,
    brokers: &str,
    max_bytes: &str,
) -> OutboxRelay<sqlx::Postgres, KafkaPublisher> {
    let publisher = KafkaPublisher::builder(brokers)
        .with_property("message.max.bytes", max_bytes)
        .connect()
        .await
        .expect("Kafka producer");
    OutboxRelay::new(pool, Outbox::new(), publisher).with_retry_policy(RetryPolicy::exponential(
        Duration::from_millis(1),
        Duration::from_millis(5),
        2,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_retry_on_kafka_unblocks_a_failed_aggregate_and_its_later_events_follow_in_order() {
    let w = World::new("outbox-kafka").await;
    let k = KafkaTopics::create("outbox").await;
    let pool = w.schema.pool.clone();
    let outbox = Outbox::new();
    for n in 1..=3u32 {
        for agg in ["ok", "bad"] {
            // The bad aggregate's first event is larger than the first
            // relay's producer accepts: refused for good, it blocks the
            // two behind it.
            let padding = if agg == "bad" && n == 1 {
                "x".repeat(20_000)
            } else {
                String::new()
            };
            let mut tx = pool.begin().await.expect("begin");
            let ev = NewEvent::new("Order", agg, "OrderPlaced", &OrderEvent { n, padding })
                .expect("json")
                .with_destination(k.topic());
            outbox.enqueue(&mut tx, ev).await.expect("enqueue");
            tx.commit().await.expect("commit");
        }
    }
    let small = relay(pool.clone(), &k.brokers, "10000").await;
    let stats = small.stats();
    support::eventually("the bad aggregate failed", || async {
        small.run_once().await.expect("relay round");
        stats.snapshot().failed >= 1
    })
    .await;
    small.run_once().await.expect("relay round");

    let status = w.run(&["outbox", "status", "--json"]).await;
    assert_eq!(status.status.code(), Some(0), "{}", both(&status));
    let v: serde_json::Value = serde_json::from_str(stdout(&status).trim()).expect("json");
    assert_eq!(v["pending"], 3, "{v}");
    assert_eq!(v["failed"][0]["aggregate_id"], "bad", "{v}");
    assert_eq!(v["failed"][0]["version"], 1, "{v}");

    // The fix: a relay whose producer takes the large event. Then the
    // operator retries.
    let large = relay(pool.clone(), &k.brokers, "1000000").await;
    let retry = w.run(&["outbox", "retry", "Order/bad"]).await;
    assert_eq!(retry.status.code(), Some(0), "{}", both(&retry));
    support::eventually("the outbox drained", || async {
        large.run_once().await.expect("relay round");
        outbox.pending(&pool).await.expect("pending") == 0
    })
    .await;

    let records = tokio::task::spawn_blocking({
        let (brokers, topic) = (k.brokers.clone(), k.topic().to_owned());
        move || read_topic(&brokers, &topic)
    })
    .await
    .expect("reader");
    let of = |agg: &str| -> Vec<u32> {
        records
            .iter()
            .filter(|(key, _)| key.as_deref() == Some(agg))
            .map(|(_, p)| serde_json::from_slice::<OrderEvent>(p).expect("event").n)
            .collect()
    };
    assert_eq!(of("ok"), [1, 2, 3]);
    assert_eq!(of("bad"), [1, 2, 3], "in order after the unblock");
    w.close().await;
}
