//! Several consumer processes in one Kafka group on Apache Kafka
//! (`KAFKA_BROKERS`, default 127.0.0.1:9092: `scripts/services kafka` starts
//! it), with PostgreSQL (`DATABASE_URL`): each key keeps its order through a
//! SIGKILLed instance and one added while running, with no record lost or
//! applied twice.
//!
//! The members have the source's default membership (a static id derived
//! from the host name and a slot: the file lock keeps the processes' ids
//! apart) and `cooperative-sticky` assignment, with a 6 s session: the
//! killed instance is not restarted, and the survivors must take its
//! partitions over once the broker has given up on it (the test prints how
//! long that took); the instance added later may take the dead one's free
//! slot. A restarted instance taking its own partitions back at once is in
//! `kafka_external` (`static_membership`, `derived_membership`).
//!
//! The records are produced in multi-record batches (librdkafka's default
//! batching), as an application's producer sends them.

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

/// The body of the consumer processes the test starts, kills and adds: a
/// group member recording under its instance id. Run by the test
/// below as a child process (`--ignored --exact`), never on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of three_processes_keep_each_keys_order_through_a_sigkill_and_an_added_instance"]
async fn child_kafka_consumer_process() {
    let spec = std::env::var(CHILD_ENV)
        .unwrap_or_else(|_| panic!("{CHILD_ENV} is unset: this is a child process of the scale-out test, not a test of its own"));
    let mut parts = spec.split(' ');
    let (Some(topic), Some(group), Some(schema)) = (parts.next(), parts.next(), parts.next())
    else {
        panic!("{CHILD_ENV} is `topic group schema`");
    };
    let pool = consumer::testing::FreshSchema::pool_on(schema, 8)
        .await
        .expect("child pool");
    let source = KafkaSource::builder(external_brokers(), group, topics(topic))
        .with_property("session.timeout.ms", "6000")
        .with_property("heartbeat.interval.ms", "1000")
        .connect()
        .await
        .expect("child source");
    // The source has no assignment event: its metrics are read every
    // 50 ms and each new assignment is logged for the test to wait on.
    let metrics = source.stats();
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

/// Waits until the instances' latest assignments cover every partition,
/// each instance holding at least one, and returns when the last of those
/// assignments was logged (ms since the epoch, the database's clock).
async fn all_partitions_held_by(h: &PgHarness, instances: &[&str]) -> i64 {
    support::within(async {
        loop {
            let rows: Vec<(String, String, i64)> = sqlx::query_as(
                "SELECT DISTINCT ON (instance) instance, partitions, \
                 (extract(epoch FROM at) * 1000)::bigint FROM part_assignments \
                 ORDER BY instance, at DESC",
            )
            .fetch_all(h.pool())
            .await
            .expect("assignments");
            let mut held = std::collections::BTreeSet::new();
            let mut holders = 0;
            let mut last = None;
            for (instance, partitions, at) in rows {
                if !instances.contains(&instance.as_str()) {
                    continue;
                }
                let before = held.len();
                held.extend(
                    partitions
                        .trim_matches(|c| c == '[' || c == ']')
                        .split(',')
                        .filter_map(|p| p.trim().parse::<i32>().ok()),
                );
                holders += usize::from(held.len() > before);
                last = last.max(Some(at));
            }
            if held.len() == PARTITIONS as usize
                && holders == instances.len()
                && let Some(at) = last
            {
                return at;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    })
    .await
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
        .connect()
        .await
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

    // SIGKILL c1 in the middle of its work and leave it dead: once its
    // session expires, c2 and c3 take its partitions over from the
    // committed offsets.
    all_partitions_held_by(&h, &["c1", "c2", "c3"]).await;
    let killed_at: i64 =
        sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
            .fetch_one(h.pool())
            .await
            .expect("clock");
    if let Some(mut c1) = children.remove("c1") {
        c1.kill();
    }
    let taken_over_at = all_partitions_held_by(&h, &["c2", "c3"]).await;
    println!(
        "takeover: c2 and c3 hold all {PARTITIONS} partitions {} ms after c1 was SIGKILLed (session.timeout.ms=6000)",
        taken_over_at - killed_at
    );
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
