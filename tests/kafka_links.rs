//! Kafka links cut, stalled and slowed mid-run, and a broker of three lost
//! and restarted (needs the three-broker cluster: `scripts/services
//! kafka-cluster`, and PostgreSQL: `DATABASE_URL`).
//!
//! Writers enqueue outbox events at a steady pace; an `OutboxRelay`
//! publishes them with `KafkaPublisher` (idempotent, `acks=all`) to a topic
//! of replication factor 3 (`min.insync.replicas` 2), and a consumer
//! records them in PostgreSQL (dedup row and effect in one transaction).
//!
//! * Links: each broker's PROXIED listener (127.0.0.1:19393-19395)
//!   advertises 127.0.0.1:19493-19495, where this test runs a
//!   [`LinkProxy`] in front of it; clients bootstrap there, so every
//!   connection the relay and the consumer open goes through the proxies.
//!   Mid-run the links are cut (every connection reset), stalled (no byte
//!   either way, connections open, past the consumer's 6 s session
//!   timeout) or slowed.
//! * A broker lost: the leader of partition 0 is SIGKILLed mid-run, the
//!   work goes on with two brokers, then it is started again on its data
//!   (`scripts/services kafka-node N`).
//!
//! Each case: every event's effect exactly once, each aggregate's in
//! order, the consumer back by itself, and what happened in a metric
//! (`consumer.reconnects`: broker connections librdkafka lost) and a log
//! line; a slowed link, which loses nothing, shows in the relay's send
//! duration (`messaging.client.operation.duration`) instead. The cases
//! share the proxies' fixed ports and the cluster, so they run one at a
//! time.

mod conformance;

use std::time::{Duration, Instant};

use consumer::kafka::{KafkaPublisher, KafkaSource, KafkaStats, Topics};
use consumer::testing::metrics::total;
use consumer::testing::{LinkProxy, MetricsRecorder, captured_logs};
use consumer::{Consumer, Outbox, OutboxRelay};
use rdkafka::consumer::{BaseConsumer, Consumer as _};

use crate::conformance::kafka::{
    CLUSTER, bootstrap_through_proxies, check_proxied_listeners, kill_cluster_node,
    node_link_proxies,
};
use crate::conformance::links::{
    Fault, RELAY_RETRY, assert_nothing_lost_twice_or_reordered, assert_sends_show_the_slow_link,
    effects, mean_send_between, recovered_after, write_events,
};
use crate::conformance::scale_out::{effects_table, record_in_order, wait_effects};
use crate::conformance::support::{self, Harness, PgHarness};

const PARTITIONS: i32 = 4;

/// One case at a time: the proxies' ports and the cluster are shared.
static CLUSTER_IN_USE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What librdkafka is told on both sides: requests time out after 3 s
/// (a stalled link shows within seconds, not the default minute), and a
/// broker that could not be reached is tried again at least every second
/// (the default backs off to 10 s, which only makes the case longer).
const CLIENT_PROPERTIES: &[(&str, &str)] = &[
    ("socket.timeout.ms", "3000"),
    ("reconnect.backoff.max.ms", "1000"),
];

/// The producer's own request timeout (default 30 s), likewise.
const PRODUCER_PROPERTIES: &[(&str, &str)] = &[("request.timeout.ms", "3000")];

struct Pipeline {
    h: PgHarness,
    topic: String,
    group: String,
    recorder: MetricsRecorder,
    stats: KafkaStats,
    writer: tokio::task::JoinHandle<()>,
    stop: Vec<tokio::sync::oneshot::Sender<()>>,
    runs: Vec<tokio::task::JoinHandle<Result<(), consumer::Error>>>,
}

impl Pipeline {
    /// Writers, relay and consumer on `bootstrap`, the writers pacing one
    /// event every `every`.
    async fn start(bootstrap: &str, every: Duration) -> Self {
        let h = PgHarness::new().await;
        effects_table(&h).await;
        let topic = format!("ct.links.{}", uuid::Uuid::now_v7().simple());
        let group = format!("g-{topic}");
        let topics = Topics::new(&topic).expect("topic").without_retry_topic();
        topics
            .create(CLUSTER, PARTITIONS, 3)
            .await
            .expect("create the topic with replication factor 3");
        let recorder = MetricsRecorder::new();

        let mut source = KafkaSource::builder(bootstrap, &group, topics)
            .with_property("session.timeout.ms", "6000")
            .with_property("heartbeat.interval.ms", "1000");
        for (k, v) in CLIENT_PROPERTIES {
            source = source.with_property(*k, *v);
        }
        let source = source.connect().await.expect("source");
        let stats = source.stats();
        let consumer =
            Consumer::new(source, h.store(), record_in_order).with_meter(recorder.meter());
        let (stop_consumer, consumer_stopped) = tokio::sync::oneshot::channel::<()>();
        let consumer_run = tokio::spawn(consumer.run_until(async move {
            let _ = consumer_stopped.await;
        }));

        let outbox = Outbox::new().with_default_destination(&topic);
        let mut publisher = KafkaPublisher::builder(bootstrap);
        for (k, v) in CLIENT_PROPERTIES.iter().chain(PRODUCER_PROPERTIES) {
            publisher = publisher.with_property(*k, *v);
        }
        let relay = OutboxRelay::new(
            h.pool().clone(),
            outbox.clone(),
            publisher.connect().await.expect("publisher"),
        )
        .with_retry_policy(RELAY_RETRY)
        .with_meter(recorder.meter());
        let (stop_relay, relay_stopped) = tokio::sync::oneshot::channel::<()>();
        let relay_run = tokio::spawn(relay.run_until(async move {
            let _ = relay_stopped.await;
        }));
        let writer = tokio::spawn(write_events(h.pool().clone(), outbox, every));
        Self {
            h,
            topic,
            group,
            recorder,
            stats,
            writer,
            stop: vec![stop_relay, stop_consumer],
            runs: vec![relay_run, consumer_run],
        }
    }

    /// Waits for every effect, checks them, stops the relay and the
    /// consumer, and returns `consumer.reconnects` of the topic.
    async fn finish(self) -> (f64, KafkaStats) {
        support::within(self.writer).await.expect("writer");
        assert_nothing_lost_twice_or_reordered(&self.h).await;
        // Read while the consumer runs: its gauges go with it.
        let points = self.recorder.collect();
        for stop in self.stop {
            let _ = stop.send(());
        }
        for run in self.runs {
            support::within(run)
                .await
                .expect("join")
                .expect("relay or consumer");
        }
        let reconnects = total(
            &points,
            "consumer.reconnects",
            &[("messaging.destination.name", self.topic.as_str())],
        );
        (reconnects, self.stats)
    }
}

async fn wait_stats(stats: &KafkaStats, f: impl Fn(&consumer::kafka::KafkaStatsSnapshot) -> bool) {
    support::within(async {
        while !f(&stats.snapshot()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

async fn links_fail_mid_run(fault: Fault) {
    check_proxied_listeners();
    let _cluster = CLUSTER_IN_USE.lock().await;
    let logs = captured_logs();
    let publisher_lines = logs.matching(&["client=\"publisher\""]).len();
    let links = node_link_proxies().await;
    let links: Vec<&LinkProxy> = links.iter().collect();
    let p = Pipeline::start(&bootstrap_through_proxies(), Duration::from_millis(3)).await;

    wait_effects(&p.h, 300).await;
    let at_fault = p.recorder.collect();
    let mut slow_sends = None;
    fault.apply(&links);
    let fault_began = Instant::now();
    let ended = match fault {
        Fault::Cut => {
            wait_stats(&p.stats, |s| s.broker_disconnects > 0).await;
            fault_began
        }
        Fault::Stall => {
            // Requests time out (3 s) and the connections are dropped;
            // past the 6 s session the consumer gives its assignment up
            // (the coordinator has evicted it meanwhile).
            wait_stats(&p.stats, |s| {
                s.broker_disconnects > 0 && s.lost_assignments > 0
            })
            .await;
            println!(
                "stall noticed after {:?} (socket timeout 3 s, session 6 s)",
                fault_began.elapsed()
            );
            Fault::restore(&links);
            Instant::now()
        }
        Fault::Slow => {
            let before = effects(&p.h).await;
            wait_effects(&p.h, before + 200).await;
            Fault::restore(&links);
            slow_sends = Some(mean_send_between(&at_fault, &p.recorder.collect()));
            Instant::now()
        }
    };
    let from = effects(&p.h).await;
    let recovery = recovered_after(&p.h, from, ended).await;
    println!("{fault:?}: effects flow again {recovery:?} after the fault ended");
    let group = p.group.clone();
    let (reconnects, stats) = p.finish().await;
    let snapshot = stats.snapshot();
    let lost_lines = logs.matching(&["lost connections to brokers", &group]);
    let producer_lines = logs.matching(&["client=\"publisher\""]);
    println!(
        "consumer.reconnects {reconnects}; broker disconnects {}, lost assignments {}, rebalances {}",
        snapshot.broker_disconnects, snapshot.lost_assignments, snapshot.rebalances
    );
    for line in lost_lines
        .iter()
        .chain(&producer_lines[publisher_lines..])
        .take(8)
    {
        println!("log: {line}");
    }
    match fault {
        Fault::Cut | Fault::Stall => {
            assert!(
                reconnects >= 1.0,
                "consumer.reconnects counts the broker connections lost"
            );
            assert!(
                !lost_lines.is_empty(),
                "the consumer logs the lost connections"
            );
            assert!(
                producer_lines.len() > publisher_lines,
                "the relay's producer logs its lost connections"
            );
        }
        Fault::Slow => {
            assert_eq!(
                snapshot.lost_assignments, 0,
                "a slow link is not a lost session"
            );
            assert_sends_show_the_slow_link(slow_sends);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_cut_mid_run_lose_nothing_and_both_sides_reconnect() {
    links_fail_mid_run(Fault::Cut).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_stalled_past_the_session_timeout_lose_nothing_and_the_consumer_rejoins() {
    links_fail_mid_run(Fault::Stall).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowed_links_lose_nothing_and_reorder_nothing() {
    links_fail_mid_run(Fault::Slow).await;
}

/// The leader of the topic's partition 0.
fn leader_of_partition_zero(topic: &str) -> i32 {
    let client: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", CLUSTER)
        .create()
        .expect("metadata client");
    let metadata = client
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    metadata
        .topics()
        .iter()
        .flat_map(|t| t.partitions())
        .find(|p| p.id() == 0)
        .map(|p| p.leader())
        .expect("partition 0 has a leader")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_of_three_killed_and_restarted_mid_run_loses_nothing() {
    check_proxied_listeners();
    let _cluster = CLUSTER_IN_USE.lock().await;
    let logs = captured_logs();
    let p = Pipeline::start(CLUSTER, Duration::from_millis(4)).await;
    wait_effects(&p.h, 300).await;

    let topic = p.topic.clone();
    let node = tokio::task::spawn_blocking(move || leader_of_partition_zero(&topic))
        .await
        .expect("metadata");
    let mut restart = kill_cluster_node(node);
    let killed = Instant::now();
    let before = effects(&p.h).await;
    wait_stats(&p.stats, |s| s.broker_disconnects > 0).await;
    // The work goes on with two brokers of three (min.insync.replicas 2).
    let recovery = recovered_after(&p.h, before + 50, killed).await;
    println!(
        "node {node} (leader of partition 0) SIGKILLed: 50 more effects {recovery:?} later, with two brokers"
    );
    tokio::task::spawn_blocking(move || restart.now())
        .await
        .expect("restart");
    println!(
        "node {node} started again {:?} after the kill",
        killed.elapsed()
    );
    let group = p.group.clone();
    let (reconnects, stats) = p.finish().await;
    let lost_lines = logs.matching(&["lost connections to brokers", &group]);
    for line in lost_lines.iter().take(4) {
        println!("log: {line}");
    }
    println!(
        "consumer.reconnects {reconnects}; {:?}",
        stats.snapshot().broker_disconnects
    );
    assert!(
        reconnects >= 1.0,
        "consumer.reconnects counts the lost broker"
    );
    assert!(!lost_lines.is_empty(), "the consumer logs the lost broker");
}
