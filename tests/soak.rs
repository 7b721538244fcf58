//! The soak's short version: what needs no clock. A consumer process
//! (this test binary again) with PostgreSQL dedup takes three equal rounds
//! of messages on RabbitMQ (`AMQP_URL`) and on Kafka (`KAFKA_BROKERS`,
//! default 127.0.0.1:9092), with `DATABASE_URL`. Every message is applied
//! once, each key's in order, and the process's resident memory after the
//! third round is within [`SLACK_KIB`] of what it was after the first: a
//! leak of a few hundred bytes a message would be over it. The 30-minute
//! run at a constant rate, with throughput, p99 and memory per minute, is
//! `benches/soak.rs`.

mod conformance;

use consumer::Consumer;
use consumer::amqp::{AmqpPublisher, AmqpSource};
use consumer::kafka::{KafkaPublisher, KafkaSource, Topics};

use crate::conformance::amqp::{amqp_url, connect, test_topology, unique_prefix};
use crate::conformance::kafka::{check_external, external_brokers};
use crate::conformance::scale_out::{
    Child, assert_in_order_exactly_once, count, effects_table, jobs, publish, record_in_order,
    wait_effects,
};
use crate::conformance::support::{Harness, PgHarness};

const CHILD_ENV: &str = "CONSUMER_SOAK_CHILD";
/// Keys, and messages per key in each round.
const KEYS: usize = 100;
const PER_ROUND: i64 = 100;
const ROUNDS: i64 = 3;
/// How much the consumer's resident memory may grow from the end of the
/// first round (its working set reached) to the end of the last, over
/// 20 000 messages: 4 MiB, about 200 bytes a message.
const SLACK_KIB: u64 = 4 * 1024;

/// The consumer process: `backend destination schema` in [`CHILD_ENV`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of the soak tests"]
async fn child_soak_consumer_process() {
    let spec = std::env::var(CHILD_ENV).unwrap_or_else(|_| {
        panic!(
            "{CHILD_ENV} is unset: this is a child process of the soak tests, not a test of its own"
        )
    });
    let parts: Vec<&str> = spec.split(' ').collect();
    let [backend, destination, schema] = parts[..] else {
        panic!("{CHILD_ENV} is `backend destination schema`");
    };
    let pool = consumer::testing::FreshSchema::pool_on(schema, 8)
        .await
        .expect("child pool");
    let store = consumer::Store::new(pool);
    let run = match backend {
        "rabbitmq" => {
            let source = AmqpSource::builder(amqp_url(), test_topology(destination))
                .connect()
                .await
                .expect("connect");
            Consumer::new(source, store, record_in_order)
                .run_until(std::future::pending())
                .await
        }
        "kafka" => {
            let source = KafkaSource::builder(
                external_brokers(),
                format!("g-{destination}"),
                Topics::new(destination)
                    .expect("topic")
                    .without_retry_topic(),
            )
            .connect()
            .await
            .expect("connect");
            Consumer::new(source, store, record_in_order)
                .run_until(std::future::pending())
                .await
        }
        other => panic!("unknown backend {other}"),
    };
    run.expect("child consumer");
}

/// Resident memory of `pid`, in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("the consumer process {pid} is gone: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// Publishes three rounds, reading the consumer's memory after each once
/// all of the round's effects are written.
async fn three_rounds(
    h: &PgHarness,
    child: &Child,
    publisher: &impl consumer::Publisher,
    destination: &str,
) {
    let mut rss = Vec::new();
    for round in 0..ROUNDS {
        let batch = jobs(KEYS, round * PER_ROUND..(round + 1) * PER_ROUND);
        publish(publisher, destination, &batch).await;
        wait_effects(h, (round + 1) * PER_ROUND * KEYS as i64).await;
        rss.push(rss_kib(child.pid()));
    }
    println!(
        "consumer RSS after each round of {} messages: {:?} KiB",
        PER_ROUND * KEYS as i64,
        rss
    );
    assert_eq!(
        count(h, "SELECT count(*) FROM part_effects").await,
        ROUNDS * PER_ROUND * KEYS as i64,
        "0 lost, 0 applied twice"
    );
    assert_in_order_exactly_once(h, KEYS, ROUNDS * PER_ROUND).await;
    let (first, last) = (rss[0], rss[rss.len() - 1]);
    assert!(
        last <= first + SLACK_KIB,
        "the consumer's memory grew by {} KiB over {} messages after its first round (slack {SLACK_KIB} KiB): {rss:?}",
        last.saturating_sub(first),
        (ROUNDS - 1) * PER_ROUND * KEYS as i64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_consumer_memory_stays_flat_and_every_message_is_applied_once_in_order() {
    drop(connect().await);
    let h = PgHarness::new().await;
    effects_table(&h).await;
    let queue = unique_prefix("soak");
    // Declared before the first publish (the consumer declares it too).
    let conn = connect().await;
    let channel = conn.create_channel().await.expect("channel");
    test_topology(&queue)
        .declare(&channel)
        .await
        .expect("declare");
    let _ = conn.close(200, "declared".into()).await;
    let child = Child::spawn(
        "child_soak_consumer_process",
        (CHILD_ENV, format!("rabbitmq {queue} {}", h.schema)),
        "soak",
    );
    let publisher = AmqpPublisher::builder(amqp_url())
        .connect()
        .await
        .expect("a RabbitMQ publisher");
    three_rounds(&h, &child, &publisher, &format!("/{queue}")).await;
    publisher.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_consumer_memory_stays_flat_and_every_message_is_applied_once_in_order() {
    let brokers = external_brokers();
    check_external(&brokers);
    let h = PgHarness::new().await;
    effects_table(&h).await;
    let topic = format!("ct.soak.{}", uuid::Uuid::now_v7().simple());
    Topics::new(&topic)
        .expect("topic")
        .without_retry_topic()
        .create(&brokers, 4, 1)
        .await
        .expect("create topic");
    let child = Child::spawn(
        "child_soak_consumer_process",
        (CHILD_ENV, format!("kafka {topic} {}", h.schema)),
        "soak",
    );
    let publisher = KafkaPublisher::builder(&brokers)
        .connect()
        .await
        .expect("publisher");
    three_rounds(&h, &child, &publisher, &topic).await;
}
