//! Several consumer processes in one Kafka group on the out-of-process
//! broker (`KAFKA_BROKERS`, default 127.0.0.1:9092: `scripts/services
//! kafka` starts tansu there), with PostgreSQL (`DATABASE_URL`): each key
//! keeps its order through a SIGKILLed instance (restarted) and one added
//! while running, with no record lost or applied twice.
//!
//! The killed instance is restarted with its `group.instance.id` and takes
//! its partitions back at once (static membership). That is also what tansu
//! 0.6 needs: it never hands a dead *dynamic* member's partitions to the
//! others (measured: more than 60 s with a 10 s session; see the README),
//! so "another instance takes over" is shown on RabbitMQ
//! (`amqp_partitions`) and, for Kafka, on librdkafka's mock cluster
//! (`kafka_faults`). Nor does tansu 0.6 finish a cooperative rebalance: with
//! `cooperative-sticky` (the source's default) the others give partitions
//! up and a member that joins is assigned none, so these processes use the
//! eager `range` strategy; the README says so.

mod conformance;

use std::collections::BTreeMap;

use consumer::Consumer;
use consumer::kafka::{KafkaPublisher, KafkaSource, Topics};

use crate::conformance::kafka::{check_external, external_brokers};
use crate::conformance::scale_out::{
    Child, assert_in_order_exactly_once, count, effects_table, instance, jobs, publish,
    record_in_order, wait_effects,
};
use crate::conformance::support::{self, Harness, PgHarness};

const CHILD_ENV: &str = "CONSUMER_KAFKA_SCALE_CHILD";
const PARTITIONS: i32 = 8;

fn topics(topic: &str) -> Topics {
    Topics::new(topic).expect("topic").without_retry_topic()
}

/// The body of the consumer processes the test starts, kills and adds:
/// a static member named by its instance id. Does nothing in a normal run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_kafka_consumer_process() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.split(' ');
    let (Some(topic), Some(group), Some(schema)) = (parts.next(), parts.next(), parts.next())
    else {
        panic!("{CHILD_ENV} is `topic group schema`");
    };
    let pool = consumer::testing::FreshSchema::pool_on(schema, 8)
        .await
        .expect("child pool");
    let source = KafkaSource::builder(external_brokers(), group, topics(topic))
        .with_property("session.timeout.ms", "240000")
        // tansu 0.6 never runs the second round of a cooperative rebalance,
        // so a member that joins would get nothing: eager `range` here.
        .with_property("partition.assignment.strategy", "range")
        .with_static_membership(instance())
        .connect()
        .expect("child source");
    // The source has no assignment event: its metrics are read every
    // 50 ms and each new assignment is logged for the test to wait on.
    let metrics = source.metrics();
    let log = pool.clone();
    tokio::spawn(async move {
        let mut last: Option<Vec<i32>> = None;
        loop {
            let now: Vec<i32> = metrics
                .snapshot()
                .partitions
                .iter()
                .map(|p| p.partition)
                .collect();
            if last.as_ref() != Some(&now) {
                let _ = sqlx::query(
                    "INSERT INTO part_assignments (instance, partitions) VALUES ($1, $2)",
                )
                .bind(instance())
                .bind(format!("{now:?}"))
                .execute(&log)
                .await;
                last = Some(now);
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    });
    Consumer::new(source, consumer::Store::new(pool), record_in_order)
        .run_until(std::future::pending())
        .await
        .expect("child consumer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_keep_each_keys_order_through_a_sigkill_and_an_added_instance() {
    let brokers = external_brokers();
    check_external(&brokers);
    let h = PgHarness::new().await;
    effects_table(&h).await;
    let topic = format!("scale-{}", uuid::Uuid::new_v4().simple());
    let group = format!("g-{topic}");
    topics(&topic)
        .create(&brokers, PARTITIONS, 1)
        .await
        .expect("create topic");
    let publisher = KafkaPublisher::builder(&brokers)
        // tansu 0.6: one record per batch (see `conformance::kafka`).
        .with_property("batch.num.messages", "1")
        .build()
        .expect("publisher");
    let spawn = |id: &str| {
        Child::spawn(
            "child_kafka_consumer_process",
            (CHILD_ENV, format!("{topic} {group} {}", h.schema)),
            id,
        )
    };
    let (keys, per_key) = (100, 100);
    let all = jobs(keys, 0..per_key);
    let (first, rest) = all.split_at(4_000);

    let mut children: BTreeMap<&str, Child> = ["c1", "c2", "c3"]
        .into_iter()
        .map(|id| (id, spawn(id)))
        .collect();
    publish(&publisher, &topic, first).await;
    wait_effects(&h, 2_000).await;

    // SIGKILL c1 in the middle of its work, and start it again with its
    // instance id: it takes its partitions back from the committed offsets.
    if let Some(mut c1) = children.remove("c1") {
        c1.kill();
    }
    children.insert("c1", spawn("c1"));
    let (second, third) = rest.split_at(3_000);
    publish(&publisher, &topic, second).await;
    wait_effects(&h, 7_000).await;

    // An instance added while running: the group rebalances and it takes a
    // share before the last records are published.
    children.insert("c4", spawn("c4"));
    support::within(async {
        loop {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM part_assignments WHERE instance = 'c4' AND partitions <> '[]'",
            )
            .fetch_one(h.pool())
            .await
            .expect("assignments");
            if n > 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    })
    .await;
    publish(&publisher, &topic, third).await;
    wait_effects(&h, i64::try_from(all.len()).expect("fits")).await;
    drop(children);

    assert_eq!(
        count(&h, "SELECT count(*) FROM part_effects").await,
        i64::try_from(all.len()).expect("fits"),
        "0 lost, 0 duplicate effects"
    );
    assert_in_order_exactly_once(&h, keys, per_key).await;
    let by: Vec<(String, i64)> =
        sqlx::query_as("SELECT instance, count(*) FROM part_effects GROUP BY instance ORDER BY 1")
            .fetch_all(h.pool())
            .await
            .expect("effects per instance");
    println!("effects per instance: {by:?}");
    assert!(
        by.iter().any(|(id, n)| id == "c4" && *n > 0),
        "the added instance processed its share: {by:?}"
    );
}
