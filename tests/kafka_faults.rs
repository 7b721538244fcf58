//! Faults on librdkafka's mock cluster, each test on a cluster of its own
//! (in process, no install; needs PostgreSQL: `DATABASE_URL`):
//!
//! * a broker that leads a partition and coordinates the group goes down
//!   and comes back mid-run;
//! * produce errors on the settle producer (retry copies, dead letters) and
//!   on the outbox publisher;
//! * every offset commit failing for a whole run;
//! * a second member joining and leaving while handlers hold records;
//! * consumer processes SIGKILLed at random points (the test binary re-run
//!   as a child, consuming from the cluster this process hosts);
//! * one blocked key filling its partition's window.
//!
//! Effects are rows written in the handler's transaction, so "exactly once"
//! and "in key order" are read from PostgreSQL. Where nothing can be awaited
//! (rows, librdkafka's metrics), conditions are polled under a timeout;
//! nothing sleeps to let something happen.
//!
//! Mock cluster facts the tests rely on: a topic created with one replica
//! has its leader on broker `partition % brokers + 1` (pinned explicitly
//! here anyway); a group's coordinator is a hash of its name unless pinned;
//! a broker that goes down keeps its partitions and groups (nothing fails
//! over), it only refuses connections; every membership change holds the
//! group in a join phase for `session.timeout.ms - 1 s`, the first join of
//! an empty group for 3 s, so the tests use a 3 s session timeout.

mod conformance;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use consumer::kafka::{KafkaPublisher, KafkaSource, KafkaSourceBuilder, KafkaStats, Topics};
use consumer::testing::MetricsRecorder;
use consumer::testing::metrics::total;
use consumer::{
    Consumer, Handler, Message, MessageContext, Outgoing, PgTx, Publisher, Stats, Store, handler,
    stats::StatsSnapshot,
};
use rand::RngExt;
use rdkafka::ClientConfig;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

use crate::conformance::broker::BrokerHarness;
use crate::conformance::kafka::{MockHost, MockKafka};
use crate::conformance::support::{self, Gate, Harness, Job, JobError, PgHarness};

/// Writes one effect per message; transient failures retry in place.
#[handler(idempotency_key = job.id, retry = exponential(base = "10ms", max_delay = "200ms", attempts = 20))]
async fn record(job: Job, tx: &mut PgTx, ctx: &MessageContext) -> Result<(), JobError> {
    support::behave(&job, ctx).await?;
    PgHarness::insert_effect(tx, "record", &job, ctx.message_id()).await?;
    Ok(())
}

/// Retries go through the retry topic and failures end in the dead-letter
/// topic: both are produced by the source's settle producer.
#[handler(
    idempotency_key = job.id,
    retry = exponential(base = "10ms", max_delay = "100ms", attempts = 4, mode = redeliver),
    terminal = JobError::Terminal(_),
)]
async fn settle(job: Job, tx: &mut PgTx, ctx: &MessageContext) -> Result<(), JobError> {
    support::behave(&job, ctx).await?;
    PgHarness::insert_effect(tx, "settle", &job, ctx.message_id()).await?;
    Ok(())
}

/// `record`, plus where the record sat, in the same transaction: the kill
/// test counts effects whose offset the group had not committed.
#[handler(name = "record", idempotency_key = job.id, retry = exponential(base = "10ms", max_delay = "200ms", attempts = 20))]
async fn record_landed(job: Job, tx: &mut PgTx, ctx: &MessageContext) -> Result<(), JobError> {
    support::behave(&job, ctx).await?;
    // Stretches a child's life over several auto-commits, so kills land
    // before, between and after offset commits.
    tokio::time::sleep(Duration::from_millis(50)).await;
    PgHarness::insert_effect(tx, "record", &job, ctx.message_id()).await?;
    let (partition, offset) = ctx
        .envelope()
        .origin
        .position
        .split_once('/')
        .and_then(|(p, o)| Some((p.parse::<i32>().ok()?, o.parse::<i64>().ok()?)))
        .ok_or_else(|| JobError::Terminal("a Kafka position is partition/offset".into()))?;
    sqlx::query("INSERT INTO landed (job_id, partition, record_offset) VALUES ($1, $2, $3)")
        .bind(&job.id)
        .bind(partition)
        .bind(offset)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The backend's warnings (failed commits, revoke timeouts, lost
/// assignments) in the output of a failing test; `KAFKA_FAULTS_LOG` takes
/// an `EnvFilter` directive for more.
fn show_warnings() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KAFKA_FAULTS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("consumer=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// A mock cluster of `brokers` brokers that stays up until the process
/// ends. A failing test unwinds while its consumers still shut down; had
/// the cluster gone with the test's locals, their final synchronous commit
/// would wait for a coordinator forever and the test binary would hang
/// instead of reporting the failure.
fn cluster(brokers: i32) -> MockHost {
    show_warnings();
    static HOSTS: Mutex<Vec<MockHost>> = Mutex::new(Vec::new());
    let host = MockHost::start(brokers);
    HOSTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(host.clone());
    host
}

/// A test's mock cluster of `brokers` brokers with the topic `t` (and its
/// retry and dead-letter topics) of `partitions` partitions.
struct Fixture {
    host: MockHost,
    broker: MockKafka,
    topic: String,
    group: String,
    bootstrap: String,
}

async fn fixture(brokers: i32, partitions: i32) -> Fixture {
    let host = cluster(brokers);
    let broker = MockKafka::on_mock(host.clone(), partitions).await;
    broker.create("t").await;
    Fixture {
        topic: broker.topic_name("t"),
        group: broker.group("t"),
        bootstrap: host.bootstrap().to_owned(),
        host,
        broker,
    }
}

/// The consumer settings of these tests: a short session (rebalances on
/// the mock cluster last `session.timeout.ms - 1 s`), statistics often
/// enough for the lag to show, reconnects within a second of a broker's
/// return.
fn source_builder(bootstrap: &str, group: &str, topics: Topics) -> KafkaSourceBuilder {
    KafkaSource::builder(bootstrap, group, topics)
        .with_property("session.timeout.ms", "3000")
        .with_property("heartbeat.interval.ms", "300")
        .with_property("statistics.interval.ms", "100")
        .with_property("reconnect.backoff.max.ms", "500")
        .with_revoke_timeout(Duration::from_secs(10))
}

/// A consumer running on its own task.
struct Running {
    stats: Arc<Stats>,
    metrics: KafkaStats,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), consumer::Error>>,
}

impl Running {
    fn start<H>(source: KafkaSource, store: Store<sqlx::Postgres>, handler: H) -> Self
    where
        H: Handler<Store<sqlx::Postgres>>,
    {
        Self::start_with_meter(source, store, handler, None)
    }

    /// [`start`](Self::start), recording metrics on `meter`.
    fn start_with_meter<H>(
        source: KafkaSource,
        store: Store<sqlx::Postgres>,
        handler: H,
        meter: Option<opentelemetry::metrics::Meter>,
    ) -> Self
    where
        H: Handler<Store<sqlx::Postgres>>,
    {
        let metrics = source.stats();
        let mut consumer = Consumer::new(source, store, handler).with_max_in_flight(64);
        if let Some(meter) = meter {
            consumer = consumer.with_meter(meter);
        }
        let stats = consumer.stats();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(consumer.run_until(async move {
            let _ = stopped.await;
        }));
        Self {
            stats,
            metrics,
            stop,
            task,
        }
    }

    /// Shuts down (running work finishes, the rest is released, the source
    /// commits and leaves the group) and returns the final counters.
    async fn stop(self) -> StatsSnapshot {
        let _ = self.stop.send(());
        support::within(self.task)
            .await
            .expect("consumer task")
            .expect("consumer");
        self.stats.snapshot()
    }
}

/// Polls `probe` until it holds, for conditions with no event to await
/// (rows in the database, librdkafka's metrics). Fails naming `what`.
async fn until<F, Fut>(what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let waited = tokio::time::timeout(Duration::from_secs(60), async {
        while !probe().await {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "timed out after 60 s waiting for {what}");
}

/// Distinct jobs with an effect of `handler`.
async fn effects(h: &PgHarness, handler: &str) -> i64 {
    sqlx::query_scalar("SELECT count(DISTINCT job_id) FROM effects WHERE handler = $1")
        .bind(handler)
        .fetch_one(h.pool())
        .await
        .expect("count effects")
}

async fn wait_effects(h: &PgHarness, handler: &str, n: usize) {
    let n = i64::try_from(n).expect("count");
    until(&format!("{n} effects of {handler}"), || async move {
        effects(h, handler).await >= n
    })
    .await;
}

/// Where a group commits: to tell "not yet processed" from "lost".
struct Group<'a> {
    bootstrap: &'a str,
    group: &'a str,
    topic: &'a str,
    partitions: i32,
}

impl Group<'_> {
    /// Fails, as lost, when the group's committed offsets have reached the
    /// end of every partition with fewer than `n` effects: a committed
    /// offset never passes an unfinished record, so what is missing then
    /// will never come.
    async fn assert_nothing_lost(&self, h: &PgHarness, handler: &str, n: i64) {
        let marks = offsets(self.bootstrap, self.group, self.topic, self.partitions).await;
        let done = effects(h, handler).await;
        assert!(
            done >= n || marks.iter().any(|(_, c, end)| c < end),
            "records lost: the group committed the end of every partition of {} with {done} of {n} messages processed (partition, committed, end): {marks:?}",
            self.topic
        );
    }

    /// Waits for `n` effects of `handler`, failing early if some are lost.
    async fn wait_effects(&self, h: &PgHarness, handler: &str, n: usize) {
        let n = i64::try_from(n).expect("count");
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            let mut checked = std::time::Instant::now();
            while effects(h, handler).await < n {
                if checked.elapsed() >= Duration::from_millis(500) {
                    self.assert_nothing_lost(h, handler, n).await;
                    checked = std::time::Instant::now();
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "timed out after 60 s waiting for {n} effects of {handler} ({} so far)",
            effects(h, handler).await
        );
    }
}

/// Every job has exactly one effect of `handler`, and each key's effects
/// were committed in the order its jobs were published.
async fn assert_once_each_in_key_order(h: &PgHarness, handler: &str, jobs: &[Job]) {
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT job_id, count(*) FROM effects WHERE handler = $1 GROUP BY job_id")
            .bind(handler)
            .fetch_all(h.pool())
            .await
            .expect("effects per job");
    let counts: HashMap<String, i64> = rows.into_iter().collect();
    let lost: Vec<(&str, i64)> = jobs
        .iter()
        .filter(|j| !counts.contains_key(&j.id))
        .map(|j| (j.key.as_str(), j.seq))
        .collect();
    let repeated: Vec<(&str, i64)> = jobs
        .iter()
        .filter(|j| counts.get(&j.id).is_some_and(|c| *c > 1))
        .map(|j| (j.key.as_str(), j.seq))
        .collect();
    assert!(
        lost.is_empty() && repeated.is_empty(),
        "{} of {} messages lost {lost:?}, {} processed more than once {repeated:?}",
        lost.len(),
        jobs.len(),
        repeated.len()
    );
    assert_eq!(
        counts.len(),
        jobs.len(),
        "effects of messages never published"
    );

    let mut expected: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for j in jobs {
        expected.entry(&j.key).or_default().push(j.seq);
    }
    let mut seen: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (key, seq) in h.effects_in_commit_order(handler).await {
        seen.entry(key).or_default().push(seq);
    }
    for (key, seqs) in &expected {
        assert_eq!(
            seen.get(*key).map(Vec::as_slice),
            Some(seqs.as_slice()),
            "effects of key {key} in commit order"
        );
    }
}

/// `n` keys, `per_key` jobs each (seq `from..from + per_key`), interleaved
/// key by key as a stream of orders would be.
fn jobs(keys: &[String], from: i64, per_key: i64, gate: Option<&Gate>) -> Vec<Job> {
    let mut out = Vec::new();
    for seq in from..from + per_key {
        for key in keys {
            out.push(Job {
                gate: gate.map(Gate::id),
                ..Job::new(key, seq)
            });
        }
    }
    out
}

fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

/// Publishes through the outbox publisher, one pipelined batch.
async fn publish(bootstrap: &str, topic: &str, jobs: &[Job]) {
    let publisher = KafkaPublisher::builder(bootstrap)
        .connect()
        .await
        .expect("publisher");
    let batch: Vec<Outgoing> = jobs
        .iter()
        .map(|j| Outgoing {
            destination: topic.to_owned(),
            message: j.message(),
        })
        .collect();
    for r in support::within(publisher.publish(&batch)).await {
        r.expect("publish");
    }
}

/// Produces each job to the partition given with it (the test decides
/// which key lives where instead of the partitioner).
async fn produce_to(bootstrap: &str, topic: &str, jobs: &[(i32, Job)]) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    let messages: Vec<(i32, Message)> = jobs.iter().map(|(p, j)| (*p, j.message())).collect();
    let mut deliveries = Vec::new();
    for (partition, m) in &messages {
        let key = m.key.as_deref().unwrap_or_default();
        let out = FutureRecord::to(topic)
            .partition(*partition)
            .key(key)
            .payload(&m.payload[..])
            .headers(consumer::kafka::headers::to_kafka_headers(m));
        deliveries.push(
            producer
                .send_result(out)
                .map_err(|(e, _)| e)
                .expect("enqueue"),
        );
    }
    for d in deliveries {
        support::within(d)
            .await
            .expect("delivery report")
            .expect("produced");
    }
}

/// `(partition, committed, end)` of each partition of `topic` for `group`
/// (committed is 0 while the group has committed nothing).
async fn offsets(
    bootstrap: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Vec<(i32, i64, i64)> {
    let (bootstrap, group, topic) = (bootstrap.to_owned(), group.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let reader: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .create()
            .expect("offset reader");
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(&topic, p);
        }
        let committed = reader
            .committed_offsets(tpl, Duration::from_secs(10))
            .expect("committed offsets");
        (0..partitions)
            .map(|p| {
                let c = committed
                    .find_partition(&topic, p)
                    .and_then(|e| e.offset().to_raw())
                    .filter(|o| *o >= 0)
                    .unwrap_or(0);
                let (_, end) = reader
                    .fetch_watermarks(&topic, p, Duration::from_secs(10))
                    .expect("watermarks");
                (p, c, end)
            })
            .collect()
    })
    .await
    .expect("offset reader thread")
}

/// Records stored in `topic` (no transactions, so no control records).
async fn records_in(bootstrap: &str, topic: &str, partitions: i32) -> i64 {
    let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let reader: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .create()
            .expect("reader");
        (0..partitions)
            .map(|p| {
                let (lo, hi) = reader
                    .fetch_watermarks(&topic, p, Duration::from_secs(10))
                    .expect("watermarks");
                hi - lo
            })
            .sum()
    })
    .await
    .expect("reader thread")
}

async fn assert_all_committed(bootstrap: &str, group: &str, topic: &str, partitions: i32) {
    let offsets = offsets(bootstrap, group, topic, partitions).await;
    assert!(
        offsets.iter().all(|(_, c, end)| c == end),
        "committed offsets short of the end (partition, committed, end): {offsets:?}"
    );
}

/// Whether the members together hold all `partitions` of `topic`, each
/// received up to the end (or committed there) with nothing held.
fn caught_up(members: &[&KafkaStats], topic: &str, partitions: usize) -> bool {
    let snaps: Vec<_> = members.iter().map(|m| m.snapshot()).collect();
    let parts: Vec<_> = snaps
        .iter()
        .flat_map(|s| s.partitions.iter())
        .filter(|p| p.topic == topic)
        .collect();
    parts.len() == partitions
        && parts.iter().all(|p| p.lag() == Some(0) && p.pending == 0)
        && snaps.iter().all(|s| s.in_flight == 0)
}

async fn wait_caught_up(members: &[&KafkaStats], topic: &str, partitions: usize) {
    until(
        &format!("the group to consume {topic} to its end"),
        || async { caught_up(members, topic, partitions) },
    )
    .await;
}

// ---------------------------------------------------------------------------
// 1. A broker down and back.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_and_coordinator_down_mid_run_then_back_nothing_lost_nothing_twice_key_order_kept() {
    let h = PgHarness::new().await;
    let Fixture {
        host,
        topic,
        group,
        bootstrap,
        ..
    } = fixture(3, 3).await;
    // Broker 1 leads partition 0 and coordinates the group: while it is down
    // partition 0 cannot be fetched and no group request (heartbeat, commit,
    // join) succeeds.
    for p in 0..3 {
        host.partition_leader(&topic, p, p + 1);
    }
    host.group_coordinator(&group, 1);

    let gate = Gate::new();
    let ks = keys("k", 12);
    // Each key's sixth message waits at the gate: the run is mid-flight,
    // with records inside handlers and queued behind them, when the broker
    // goes.
    let mut all = jobs(&ks, 0, 5, None);
    all.extend(jobs(&ks, 5, 1, Some(&gate)));
    all.extend(jobs(&ks, 6, 19, None));
    publish(&bootstrap, &topic, &all).await;

    let source = source_builder(
        &bootstrap,
        &group,
        Topics::new(&topic).expect("topic").without_retry_topic(),
    )
    .connect()
    .await
    .expect("source");
    let run = Running::start(source, h.store(), record);
    support::within(gate.wait_entered(1)).await;

    host.broker_down(1);
    // Without its coordinator for session.timeout.ms, the member gives its
    // partitions up as lost (nothing is committed for them).
    until("the member to give up its assignment as lost", || async {
        run.metrics.snapshot().lost_assignments >= 1
    })
    .await;
    // What the runtime holds finishes while the broker is still down; those
    // acks belong to the lost assignment and move nothing.
    gate.open();
    support::within(run.stats.wait_for(|s| s.in_flight == 0)).await;
    let before_return = effects(&h, "record").await;
    host.broker_up(1);

    wait_effects(&h, "record", all.len()).await;
    wait_caught_up(&[&run.metrics], &topic, 3).await;
    let m = run.metrics.snapshot();
    let s = run.stop().await;

    assert_once_each_in_key_order(&h, "record", &all).await;
    assert!(
        before_return < all.len() as i64,
        "the broker came back after the run had finished"
    );
    assert!(
        s.duplicates > 0,
        "records finished after the assignment was lost came back after the rejoin and dedup skipped them"
    );
    assert!(
        m.rebalances >= 2,
        "assigned again after the broker came back: {m:?}"
    );
    assert_eq!(s.dead_letters(), 0);
    assert_all_committed(&bootstrap, &group, &topic, 3).await;
    eprintln!(
        "broker down/up: {} effects before the broker returned, {} redeliveries skipped by dedup, {} assignments, {} lost",
        before_return, s.duplicates, m.rebalances, m.lost_assignments
    );
}

// ---------------------------------------------------------------------------
// 2. Produce errors.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_errors_on_retry_copies_and_dead_letters_are_retried_and_each_lands_once() {
    use RDKafkaRespErr::*;
    let h = PgHarness::new().await;
    let Fixture {
        host,
        broker,
        topic,
        group,
        bootstrap,
    } = fixture(1, 2).await;
    let topics = broker.topics("t");

    let poison = Message::raw(&b"not json"[..])
        .with_key("p")
        .with_id("settle-poison");
    let terminal = Job {
        terminal: true,
        ..Job::new("t", 1)
    };
    let flaky = Job {
        fail_times: 1,
        ..Job::new("f", 1)
    };
    let goods = jobs(&keys("g", 5), 0, 2, None);
    broker.publish("t", poison).await.expect("publish");
    for j in [&terminal, &flaky].into_iter().chain(&goods) {
        broker.publish("t", j.message()).await.expect("publish");
    }

    // From here only the settle producer produces. Retriable errors are
    // retried inside librdkafka (the idempotent producer keeps them from
    // duplicating); TOPIC_AUTHORIZATION_FAILED is final for the produce, so
    // the acker reports it, and the runtime takes the settle step's
    // fallback: a dead letter goes to the store's dead-letter table, a retry
    // copy is retried in place.
    host.request_errors(
        RDKafkaApiKey::Produce,
        &[
            RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
            RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
            RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ],
    );

    let source = source_builder(&bootstrap, &group, topics.clone())
        .connect()
        .await
        .expect("source");
    let run = Running::start(source, h.store(), settle);
    let expected_processed = goods.len() as u64 + 1;
    support::within(
        run.stats
            .wait_for(|s| s.processed == expected_processed && s.dead_letters() == 2),
    )
    .await;
    wait_caught_up(&[&run.metrics], &topic, 2).await;
    let s = run.stop().await;

    let mut done = goods.clone();
    done.push(flaky.clone());
    assert_once_each_in_key_order(&h, "settle", &done).await;
    assert_eq!(effects(&h, "settle").await, done.len() as i64);
    assert!(
        s.settle_errors >= 1,
        "the final produce error reached the runtime"
    );
    assert!(
        s.dead_letters_stored + s.retry_fallbacks >= 1,
        "the refused settle step took its fallback: {s:?}"
    );
    // Each dead letter once, on the topic or (refused) in the table.
    let on_topic = broker.dead_letter_records("t").await;
    let mut letters: Vec<(String, String, String)> = on_topic
        .iter()
        .map(|d| (d.message_id.clone(), d.kind.to_string(), d.error.clone()))
        .collect();
    letters.extend(
        h.stored_dead_letters()
            .await
            .into_iter()
            .map(|row| (row.message_id, row.kind, row.error)),
    );
    assert_eq!(
        letters.len(),
        2,
        "each dead letter exactly once: {letters:?}"
    );
    assert!(
        letters
            .iter()
            .any(|(id, kind, _)| id == "settle-poison" && kind == "poison"),
        "{letters:?}"
    );
    assert!(
        letters
            .iter()
            .any(|(_, kind, error)| kind == "terminal" && error.contains("card declined")),
        "{letters:?}"
    );
    assert_eq!(
        records_in(&bootstrap, topics.dead_letter_topic(), 2).await,
        i64::try_from(on_topic.len()).expect("fits"),
        "no dead letter stored twice"
    );
    assert_eq!(
        records_in(&bootstrap, topics.retry_topic().expect("retry topic"), 2).await,
        1 - i64::try_from(s.retry_fallbacks).expect("fits"),
        "one retry copy, stored once (none if it was refused and retried in place)"
    );
    assert_eq!(
        support::call_log(&flaky.id)
            .iter()
            .map(|c| c.attempt)
            .collect::<Vec<_>>(),
        [1, 2]
    );
    assert_all_committed(&bootstrap, &group, &topic, 2).await;
    assert_all_committed(&bootstrap, &group, topics.retry_topic().expect("retry"), 2).await;
    eprintln!(
        "settle produce errors: {} settle steps retried by the runtime",
        s.settle_errors
    );
}

/// A retry-topic record whose due header says year 9999 (hand-edited, or
/// from a producer whose clock was far off) is taken as due at the
/// handler's longest retry delay (`settle`: 100 ms) after it was written,
/// instead of pausing its partition for 8 000 years.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_record_due_in_year_9999_is_due_at_the_longest_retry_delay() {
    let h = PgHarness::new().await;
    let Fixture {
        broker,
        bootstrap,
        group,
        ..
    } = fixture(1, 1).await;
    let topics = broker.topics("t");
    let far = Job::new("k", 1);
    let copy = far
        .message()
        .with_header("x-consumer-attempt", "2")
        .with_header("x-consumer-due", "9999-12-31T23:59:59Z");
    let publisher = KafkaPublisher::builder(&bootstrap)
        .connect()
        .await
        .expect("publisher");
    let sent = publisher
        .publish(&[Outgoing {
            destination: topics.retry_topic().expect("retry topic").to_owned(),
            message: copy,
        }])
        .await;
    assert!(sent.iter().all(Result::is_ok), "{sent:?}");

    let source = source_builder(&bootstrap, &group, topics)
        .connect()
        .await
        .expect("source");
    let run = Running::start(source, h.store(), settle);
    support::within(run.stats.wait_for(|s| s.processed == 1)).await;
    run.stop().await;
    assert_eq!(effects(&h, "settle").await, 1);
    assert_eq!(
        support::call_log(&far.id)
            .iter()
            .map(|c| c.attempt)
            .collect::<Vec<_>>(),
        [2],
        "the copy ran once, as the attempt it carries"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publisher_fails_a_message_on_a_final_error_and_stores_retried_ones_once() {
    use RDKafkaRespErr::*;
    let host = cluster(1);
    host.create_topic("out", 1);
    let bootstrap = host.bootstrap().to_owned();
    let publisher = KafkaPublisher::builder(&bootstrap)
        .with_property("message.max.bytes", "10000")
        .connect()
        .await
        .expect("publisher");
    let batch = |n: usize, big: Option<usize>| -> Vec<Outgoing> {
        (0..n)
            .map(|i| Outgoing {
                destination: "out".to_owned(),
                message: if big == Some(i) {
                    Message::raw(vec![b'x'; 20_000]).with_key("k")
                } else {
                    Job::new("k", i as i64).message()
                },
            })
            .collect()
    };
    let mut stored = 0;

    // Too large for the client: refused before it leaves, that message only.
    let results = publisher.publish(&batch(6, Some(3))).await;
    for (i, r) in results.iter().enumerate() {
        if i == 3 {
            let e = r
                .as_ref()
                .expect_err("a message over message.max.bytes fails");
            assert!(!e.is_retriable(), "too large is final: {e}");
            assert!(e.to_string().contains("producing to out"), "{e}");
        } else {
            assert!(r.is_ok(), "message {i}: {r:?}");
            stored += 1;
        }
    }

    // Retriable broker errors: librdkafka retries, every result is Ok, and
    // the idempotent producer stores each message once. (Injected errors
    // queue up in order: the refusal below lands only if these were used.)
    host.request_errors(
        RDKafkaApiKey::Produce,
        &[
            RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
            RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ],
    );
    for (i, r) in publisher.publish(&batch(10, None)).await.iter().enumerate() {
        assert!(r.is_ok(), "message {i} after retriable errors: {r:?}");
        stored += 1;
    }

    // The broker refuses a produce for good: that message fails, final.
    host.request_errors(
        RDKafkaApiKey::Produce,
        &[RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    let refused = publisher.publish(&batch(1, None)).await;
    let e = refused[0].as_ref().expect_err("the broker refused it");
    assert!(
        !e.is_retriable(),
        "MSG_SIZE_TOO_LARGE from the broker is final: {e}"
    );

    // And the producer goes on afterwards.
    for r in publisher.publish(&batch(3, None)).await {
        assert!(r.is_ok(), "{r:?}");
        stored += 1;
    }
    assert_eq!(
        records_in(&bootstrap, "out", 1).await,
        stored,
        "exactly the messages reported Ok are stored, each once"
    );
}

// ---------------------------------------------------------------------------
// 3. Commit errors.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_failing_for_a_whole_run_lose_nothing_and_the_restart_is_absorbed_by_dedup() {
    use RDKafkaRespErr::*;
    let h = PgHarness::new().await;
    let Fixture {
        host,
        topic,
        group,
        bootstrap,
        ..
    } = fixture(1, 4).await;
    let all = jobs(&keys("c", 6), 0, 20, None);
    publish(&bootstrap, &topic, &all).await;

    // Every OffsetCommit from now on fails: a code librdkafka retries
    // within the request, then one that fails it. Far more than one run
    // issues (auto-commit each second, the commits on close and leave).
    let mut errors = Vec::new();
    for _ in 0..1000 {
        errors.push(RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS);
        errors.push(RD_KAFKA_RESP_ERR_UNKNOWN);
    }
    host.request_errors(RDKafkaApiKey::OffsetCommit, &errors);
    let topics = || Topics::new(&topic).expect("topic").without_retry_topic();

    let first = Running::start(
        source_builder(&bootstrap, &group, topics())
            .connect()
            .await
            .expect("source"),
        h.store(),
        record,
    );
    // Processing goes on while no commit succeeds.
    wait_effects(&h, "record", all.len()).await;
    until("the first member to receive every record", || async {
        let s = first.metrics.snapshot();
        s.in_flight == 0
            && s.partitions.len() == 4
            && s.partitions
                .iter()
                .all(|p| p.pending == 0 && p.lag() == Some(0))
    })
    .await;
    let m1 = first.metrics.clone();
    let s1 = first.stop().await;
    assert_eq!(s1.processed, all.len() as u64);
    assert!(
        m1.snapshot().commit_failures >= 1,
        "the commit on close failed as injected: {:?}",
        m1.snapshot()
    );
    let nothing = offsets(&bootstrap, &group, &topic, 4).await;
    assert!(
        nothing.iter().all(|(_, c, _)| *c == 0),
        "no commit got through: {nothing:?}"
    );

    host.clear_request_errors(RDKafkaApiKey::OffsetCommit);
    let second = Running::start(
        source_builder(&bootstrap, &group, topics())
            .connect()
            .await
            .expect("source"),
        h.store(),
        record,
    );
    // The whole topic comes again; dedup skips every record.
    let n = all.len() as u64;
    support::within(second.stats.wait_for(|s| s.duplicates == n)).await;
    wait_caught_up(&[&second.metrics], &topic, 4).await;
    let s2 = second.stop().await;

    assert_eq!((s2.processed, s2.duplicates), (0, n));
    assert_once_each_in_key_order(&h, "record", &all).await;
    assert_all_committed(&bootstrap, &group, &topic, 4).await;
}

/// Closing while the group coordinator is unreachable: the final commit
/// cannot succeed, and `close` must not wait for it: librdkafka holds a
/// commit for `session.timeout.ms` without a coordinator (20 s here), and a
/// deploy's shutdown would hang that long per commit, then be SIGKILLed.
/// `close` gives up after its close timeout (2 s here) and leaves the poll
/// thread to finish on its own; what it could not commit comes again to
/// the next member and dedup absorbs it.
///
/// The bound asserted is the behaviour under test, not a speed: the close
/// must end far inside the session timeout (under half of it), which a
/// close that waits for its synchronous commit cannot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_while_the_coordinator_is_down_returns_within_the_close_timeout_and_loses_nothing()
{
    const SESSION: Duration = Duration::from_secs(20);
    let h = PgHarness::new().await;
    let Fixture {
        host,
        topic,
        group,
        bootstrap,
        ..
    } = fixture(2, 2).await;
    // Broker 1 coordinates the group and leads nothing: records flow while
    // it is down, only group requests (commit, heartbeat, leave) fail.
    for p in 0..2 {
        host.partition_leader(&topic, p, 2);
    }
    host.group_coordinator(&group, 1);
    let all = jobs(&keys("z", 6), 0, 10, None);
    publish(&bootstrap, &topic, &all).await;
    let topics = || Topics::new(&topic).expect("topic").without_retry_topic();

    // No auto-commit during the run: every position is left to the final
    // commit on close.
    let first = Running::start(
        source_builder(&bootstrap, &group, topics())
            .with_property("session.timeout.ms", SESSION.as_millis().to_string())
            .with_property("auto.commit.interval.ms", "3600000")
            .with_close_timeout(Duration::from_secs(2))
            .connect()
            .await
            .expect("source"),
        h.store(),
        record,
    );
    wait_effects(&h, "record", all.len()).await;
    wait_caught_up(&[&first.metrics], &topic, 2).await;
    host.broker_down(1);
    let m1 = first.metrics.clone();
    let closing = std::time::Instant::now();
    let s1 = first.stop().await;
    let took = closing.elapsed();
    assert!(
        took < SESSION / 2,
        "close took {took:?}: it waited for the unreachable coordinator instead of giving up after its close timeout"
    );
    assert_eq!(s1.processed, all.len() as u64);
    assert_eq!(
        m1.snapshot().close_timeouts,
        1,
        "close gave up waiting for the final commit and the group leave: {:?}",
        m1.snapshot()
    );

    host.broker_up(1);
    // The first member's librdkafka finishes closing in the background
    // (its queued commit may go through now).
    until("the first member to finish leaving the group", || async {
        m1.snapshot().closed
    })
    .await;
    let second = Running::start(
        // The same session timeout: the mock cluster waits that long for a
        // member that vanished without leaving before it rebalances
        // without it, and marks it active at each rebalance, so a shorter
        // one would expire the joiner's syncs instead.
        source_builder(&bootstrap, &group, topics())
            .with_property("session.timeout.ms", SESSION.as_millis().to_string())
            .connect()
            .await
            .expect("source"),
        h.store(),
        record,
    );
    wait_caught_up(&[&second.metrics], &topic, 2).await;
    let s2 = second.stop().await;
    eprintln!(
        "close without a coordinator: returned after {took:?} ({} close timeouts); the next member skipped {} redeliveries",
        m1.snapshot().close_timeouts,
        s2.duplicates
    );
    // Whether the first member's commit got through once the coordinator
    // was back (librdkafka keeps it queued in the thread left to finish)
    // decides how many records come again; none is processed twice.
    assert_eq!(s2.processed, 0, "every record had been processed once");
    assert_once_each_in_key_order(&h, "record", &all).await;
    assert_all_committed(&bootstrap, &group, &topic, 2).await;
}

/// The partitions `recorder`'s consumer reports lag for on `topic`.
fn lag_partitions(recorder: &MetricsRecorder, topic: &str) -> HashSet<String> {
    recorder
        .collect()
        .into_iter()
        .filter(|p| {
            p.name == "consumer.lag"
                && p.attributes
                    .get("messaging.destination.name")
                    .map(String::as_str)
                    == Some(topic)
        })
        .filter_map(|p| {
            p.attributes
                .get("messaging.destination.partition.id")
                .cloned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_partitions_series_go_away_and_the_rebalance_is_counted() {
    let h = PgHarness::new().await;
    let Fixture {
        topic,
        group,
        bootstrap,
        ..
    } = fixture(1, 4).await;
    let topics = || Topics::new(&topic).expect("topic").without_retry_topic();
    let member =
        || source_builder(&bootstrap, &group, topics()).with_property("session.timeout.ms", "6000");
    let (meter_a, meter_b) = (MetricsRecorder::new(), MetricsRecorder::new());
    let a = Running::start_with_meter(
        member().connect().await.expect("source A"),
        h.store(),
        record,
        Some(meter_a.meter()),
    );
    until("A to report lag for all four partitions", || async {
        lag_partitions(&meter_a, &topic).len() == 4
    })
    .await;
    let b = Running::start_with_meter(
        member().connect().await.expect("source B"),
        h.store(),
        record,
        Some(meter_b.meter()),
    );
    until(
        "the group to share the partitions between A and B",
        || async {
            let (on_a, on_b) = (
                lag_partitions(&meter_a, &topic),
                lag_partitions(&meter_b, &topic),
            );
            !on_a.is_empty()
                && !on_b.is_empty()
                && on_a.len() + on_b.len() == 4
                && on_a.is_disjoint(&on_b)
        },
    )
    .await;
    let points = meter_a.collect();
    assert!(
        total(
            &points,
            "consumer.rebalances",
            &[("consumer.rebalance.event", "revoked")]
        ) >= 1.0,
        "A's revocation is counted"
    );
    assert_eq!(
        points
            .iter()
            .filter(|p| p.name == "consumer.lag.age")
            .count(),
        lag_partitions(&meter_a, &topic).len(),
        "the age series follow the lag series"
    );
    b.stop().await;
    a.stop().await;
}

// ---------------------------------------------------------------------------
// 4. A member joins and leaves while handlers hold records.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_joining_then_leaving_while_handlers_hold_records_loses_and_repeats_nothing() {
    let h = PgHarness::new().await;
    let Fixture {
        topic,
        group,
        bootstrap,
        ..
    } = fixture(1, 4).await;
    let topics = || Topics::new(&topic).expect("topic").without_retry_topic();
    // The mock cluster gives members `session.timeout.ms - 1 s` to rejoin a
    // rebalance (a real broker gives them `max.poll.interval.ms`), then
    // assigns without the late ones: a 6 s session leaves A's revoke (wait
    // and commit, tens of milliseconds here) a wide margin.
    let member =
        || source_builder(&bootstrap, &group, topics()).with_property("session.timeout.ms", "6000");
    // Two keys per partition, placed explicitly so each member gets keys.
    let ks = keys("m", 8);
    let place = |jobs: Vec<Job>| -> Vec<(i32, Job)> {
        jobs.into_iter()
            .map(|j| {
                let i: i32 = j.key[1..].parse().expect("key index");
                (i % 4, j)
            })
            .collect()
    };

    // Phase 1: A holds records inside its handlers when B joins.
    let first = Gate::new();
    let batch1 = jobs(&ks, 0, 10, Some(&first));
    produce_to(&bootstrap, &topic, &place(batch1.clone())).await;
    let a = Running::start(
        member().connect().await.expect("source A"),
        h.store(),
        record,
    );
    support::within(first.wait_entered(1)).await;
    support::within(a.stats.wait_for(|s| s.in_flight >= 16)).await;
    let b = Running::start(
        member().connect().await.expect("source B"),
        h.store(),
        record,
    );
    // A's revoke callback has started and waits for the records its
    // handlers hold; they finish now, during the rebalance.
    until("A to be asked to give partitions up", || async {
        a.metrics.snapshot().revocations >= 1
    })
    .await;
    first.open();
    until("B to be assigned partitions", || async {
        b.metrics
            .snapshot()
            .partitions
            .iter()
            .any(|p| p.topic == topic)
    })
    .await;
    Group {
        bootstrap: &bootstrap,
        group: &group,
        topic: &topic,
        partitions: 4,
    }
    .wait_effects(&h, "record", batch1.len())
    .await;
    wait_caught_up(&[&a.metrics, &b.metrics], &topic, 4).await;
    let (a1, b1) = (a.stats.snapshot(), b.stats.snapshot());
    let revoking = a.metrics.snapshot();
    if revoking.commit_failures == 0 {
        // A committed past everything it had finished before letting go:
        // B re-ran nothing.
        assert_eq!(
            (a1.duplicates, b1.duplicates),
            (0, 0),
            "records finished by A came to B again: the revoke did not wait for them or did not commit them\nA: {revoking:?}\nB: {:?}",
            b.metrics.snapshot()
        );
    } else {
        // The mock cluster ends a SyncGroup round as soon as the leader's
        // request arrives; a member syncing after it is refused with
        // REBALANCE_IN_PROGRESS and rejoins, and A's commit, in flight at
        // that moment, is refused the same way (a real broker waits for
        // every member's SyncGroup and accepts commits of the current
        // generation while a rebalance is prepared). B then starts from
        // the last auto-committed offsets and dedup absorbs the rest.
        eprintln!(
            "join: A's commit on revoke was refused (mock cluster race), B skipped {} records A had finished",
            b1.duplicates
        );
    }

    // Phase 2: B leaves while its handlers hold records and more wait
    // behind them in its lanes.
    let second = Gate::new();
    let batch2 = jobs(&ks, 10, 10, Some(&second));
    let b_parts = b
        .metrics
        .snapshot()
        .partitions
        .iter()
        .filter(|p| p.topic == topic)
        .count();
    produce_to(&bootstrap, &topic, &place(batch2.clone())).await;
    // All of B's share of the batch is held: one record per key inside the
    // handler, nine queued behind it.
    let b_share = (b_parts * 2 * 10) as u64;
    support::within(b.stats.wait_for(|s| s.in_flight == b_share)).await;
    support::within(second.wait_entered(1)).await;
    let _ = b.stop.send(());
    support::within(b.stats.wait_for(|s| s.draining)).await;
    second.open();
    let bs = support::within(b.task)
        .await
        .expect("B task")
        .map(|()| b.stats.snapshot())
        .expect("B");
    let bm = b.metrics.snapshot();
    assert!(bs.released > 0, "B left with queued records: {bs:?}");

    let committing = Group {
        bootstrap: &bootstrap,
        group: &group,
        topic: &topic,
        partitions: 4,
    };
    committing
        .wait_effects(&h, "record", batch1.len() + batch2.len())
        .await;
    wait_caught_up(&[&a.metrics], &topic, 4).await;
    let am = a.metrics.snapshot();
    let as_ = a.stop().await;

    let mut all = batch1;
    all.extend(batch2);
    assert_once_each_in_key_order(&h, "record", &all).await;
    assert!(am.revocations >= 1 && am.rebalances >= 2, "A: {am:?}");
    assert!(bm.rebalances >= 1 && bm.revocations >= 1, "B: {bm:?}");
    assert_eq!((am.revoke_timeouts, bm.revoke_timeouts), (0, 0));
    assert_all_committed(&bootstrap, &group, &topic, 4).await;
    eprintln!(
        "join/leave: A {} processed, {} duplicates, {} assignments, {} revocations; B {} processed, {} released on leaving, {} duplicates",
        as_.processed,
        as_.duplicates,
        am.rebalances,
        am.revocations,
        bs.processed,
        bs.released,
        bs.duplicates
    );
}

// ---------------------------------------------------------------------------
// 5. Consumer processes killed at random points.

const CHILD_ENV: &str = "CONSUMER_KAFKA_KILL_CHILD";
const KILLS: usize = 4;

/// Fails with a sentence when nothing listens at `bootstrap`.
fn check_cluster(bootstrap: &str) {
    let first = bootstrap.split(',').next().unwrap_or(bootstrap);
    let up = std::net::ToSocketAddrs::to_socket_addrs(first)
        .map(|addrs| {
            addrs
                .into_iter()
                .any(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok())
        })
        .unwrap_or(false);
    assert!(
        up,
        "no Kafka mock cluster answers at {bootstrap}: this process consumes from the cluster its parent test hosts; run consumers_killed_at_random_points_process_every_message_exactly_once_in_key_order"
    );
}

/// The consumer process that the kill test SIGKILLs: consumes until
/// killed, printing its duplicate count as it changes. Offsets are
/// committed every 200 ms, so most kills land with some of the finished
/// records committed and some not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the child processes of consumers_killed_at_random_points_..."]
async fn child_consumer_process() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split(' ').collect();
    let [bootstrap, topic, group, schema] = parts[..] else {
        panic!("{CHILD_ENV} must be `bootstrap topic group schema`, got {spec:?}");
    };
    check_cluster(bootstrap);
    let url = support::database_url();
    let pool = consumer::testing::FreshSchema::pool_on(schema, 8)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is not reachable at {url} ({e}): start it (scripts/services postgres) or set DATABASE_URL"));
    let source = source_builder(
        bootstrap,
        group,
        Topics::new(topic).expect("topic").without_retry_topic(),
    )
    .with_property("auto.commit.interval.ms", "200")
    .connect()
    .await
    .expect("child source");
    let consumer = Consumer::new(source, Store::new(pool), record_landed).with_max_in_flight(8);
    let stats = consumer.stats();
    tokio::spawn(async move {
        let mut last = 0;
        loop {
            let s = stats.wait_for(|s| s.duplicates > last).await;
            last = s.duplicates;
            println!("duplicates {last}");
        }
    });
    consumer
        .run_until(std::future::pending())
        .await
        .expect("child consumer");
}

struct ChildProcess {
    child: Child,
    log: std::path::PathBuf,
}

impl ChildProcess {
    fn spawn(spec: &str, round: usize) -> Self {
        let dir = std::env::temp_dir().join("consumer-tests");
        std::fs::create_dir_all(&dir).expect("temp dir");
        let log = dir.join(format!(
            "kafka-kill-{}-{round}.log",
            uuid::Uuid::new_v4().simple()
        ));
        let out = std::fs::File::create(&log).expect("child log");
        let err = out.try_clone().expect("child log");
        let child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--ignored",
                "--exact",
                "child_consumer_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, spec)
            .env("DATABASE_URL", support::database_url())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn the child consumer");
        Self { child, log }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Fails the test when the child ended on its own.
    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "the child consumer exited ({status}) before it was killed:\n{}",
                self.output()
            );
        }
    }

    /// SIGKILL (`Child::kill` on Unix); returns the last duplicate count it printed.
    fn kill(mut self) -> u64 {
        self.assert_running();
        self.child.kill().expect("SIGKILL the child");
        let _ = self.child.wait();
        self.output()
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("duplicates ")?.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for ChildProcess {
    /// Also when the test fails: no child goes on consuming, no log stays.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Effects whose record's offset the group has not committed: each is
/// delivered again after a kill, and only dedup keeps it from running twice.
async fn exposed(h: &PgHarness, bootstrap: &str, group: &str, topic: &str) -> i64 {
    let mut total = 0;
    for (p, committed, _) in offsets(bootstrap, group, topic, 4).await {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM landed WHERE partition = $1 AND record_offset >= $2",
        )
        .bind(p)
        .bind(committed)
        .fetch_one(h.pool())
        .await
        .expect("count exposed");
        total += n;
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_killed_at_random_points_process_every_message_exactly_once_in_key_order() {
    let h = PgHarness::new().await;
    sqlx::query(
        "CREATE TABLE landed (job_id TEXT PRIMARY KEY, partition INT NOT NULL, record_offset BIGINT NOT NULL)",
    )
    .execute(h.pool())
    .await
    .expect("landed table");
    let Fixture {
        topic,
        group,
        bootstrap,
        ..
    } = fixture(1, 4).await;
    let all: Vec<Job> = jobs(&keys("x", 20), 0, 20, None)
        .into_iter()
        .map(|j| Job { jitter: true, ..j })
        .collect();
    publish(&bootstrap, &topic, &all).await;
    let spec = format!("{bootstrap} {topic} {group} {}", h.schema);
    let committing = Group {
        bootstrap: &bootstrap,
        group: &group,
        topic: &topic,
        partitions: 4,
    };

    // Each child dies after a random number of new effects.
    let steps: Vec<i64> = {
        let mut rng = rand::rng();
        (0..KILLS).map(|_| rng.random_range(30..90)).collect()
    };
    let mut child_duplicates = 0;
    let mut exposed_at_kills = Vec::new();
    for (round, step) in steps.iter().enumerate() {
        let mut child = ChildProcess::spawn(&spec, round);
        let target = effects(&h, "record").await + step;
        let mut checked = std::time::Instant::now();
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            while effects(&h, "record").await < target {
                child.assert_running();
                if checked.elapsed() >= Duration::from_secs(1) {
                    committing
                        .assert_nothing_lost(&h, "record", all.len() as i64)
                        .await;
                    checked = std::time::Instant::now();
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "child {round} made no progress in 60 s:\n{}",
            child.output()
        );
        child_duplicates += child.kill();
        exposed_at_kills.push(exposed(&h, &bootstrap, &group, &topic).await);
    }
    let after_kills = effects(&h, "record").await;
    assert!(
        after_kills < all.len() as i64,
        "the kills came after the run had finished"
    );

    // A last member drains what is left (and what the dead ones held).
    let last = Running::start(
        source_builder(
            &bootstrap,
            &group,
            Topics::new(&topic).expect("topic").without_retry_topic(),
        )
        .connect()
        .await
        .expect("source"),
        h.store(),
        record_landed,
    );
    committing.wait_effects(&h, "record", all.len()).await;
    wait_caught_up(&[&last.metrics], &topic, 4).await;
    let s = last.stop().await;

    assert_once_each_in_key_order(&h, "record", &all).await;
    assert_all_committed(&bootstrap, &group, &topic, 4).await;
    assert_eq!(s.dead_letters(), 0);
    eprintln!(
        "{KILLS} kills; {after_kills} of {} effects written by the killed children; effects past the committed offset at each kill {exposed_at_kills:?}; redeliveries skipped by dedup: {child_duplicates} in children (as last printed), {} in the final member",
        all.len(),
        s.duplicates
    );
}

// ---------------------------------------------------------------------------
// 6. One blocked key fills its partition's window.
//
// librdkafka needs no slack over the bound: `pause` raises the partition's
// version barrier before it returns, so records fetched earlier and still
// queued are dropped at the next poll (and fetched again on resume, from
// the offset after the last one polled). A resume takes effect with the
// next fetch, which can wait behind one in flight for up to
// `fetch.wait.max.ms` (500 ms by default), so a saturated partition drains
// about half a window per fetch wait.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_key_pauses_only_its_partition_at_the_bound_and_the_rest_flows() {
    const BOUND: usize = 8;
    let h = PgHarness::new().await;
    let Fixture {
        topic,
        group,
        bootstrap,
        ..
    } = fixture(1, 4).await;
    let gate = Gate::new();
    // Partition 0: the blocked key interleaved with two free keys;
    // partitions 1 to 3: free keys only.
    let mut placed = Vec::new();
    for seq in 0..30 {
        placed.push((
            0,
            Job {
                gate: Some(gate.id()),
                ..Job::new("blocked", seq)
            },
        ));
        for key in ["p0-a", "p0-b"] {
            placed.push((0, Job::new(key, seq)));
        }
        for p in 1..4 {
            for key in ["a", "b"] {
                placed.push((p, Job::new(&format!("p{p}-{key}"), seq)));
            }
        }
    }
    produce_to(&bootstrap, &topic, &placed).await;
    let elsewhere: HashSet<String> = placed
        .iter()
        .filter(|(p, _)| *p != 0)
        .map(|(_, j)| j.id.clone())
        .collect();

    let run = Running::start(
        source_builder(
            &bootstrap,
            &group,
            Topics::new(&topic).expect("topic").without_retry_topic(),
        )
        .with_max_per_partition(BOUND)
        .connect()
        .await
        .expect("source"),
        h.store(),
        record,
    );
    // Samples partition 0's pending count as often as it can.
    let max_pending = Arc::new(AtomicUsize::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (metrics, topic) = (run.metrics.clone(), topic.clone());
        let (max_pending, sampling) = (Arc::clone(&max_pending), Arc::clone(&sampling));
        tokio::spawn(async move {
            while sampling.load(Ordering::Relaxed) {
                if let Some(p) = metrics
                    .snapshot()
                    .partitions
                    .iter()
                    .find(|p| p.topic == topic && p.partition == 0)
                {
                    max_pending.fetch_max(p.pending, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };

    // The other partitions drain completely while the key stays blocked.
    until("every record outside partition 0 to be processed", || {
        let elsewhere = &elsewhere;
        let h = &h;
        async move {
            let done: Vec<String> =
                sqlx::query_scalar("SELECT job_id FROM effects WHERE handler = 'record'")
                    .fetch_all(h.pool())
                    .await
                    .expect("effects");
            done.iter().filter(|id| elsewhere.contains(*id)).count() == elsewhere.len()
        }
    })
    .await;
    let held = max_pending.load(Ordering::Relaxed);
    assert!(
        held <= BOUND,
        "partition 0 held {held} pending records, over the bound of {BOUND}"
    );
    until("partition 0 to be paused", || async {
        run.metrics
            .snapshot()
            .partitions
            .iter()
            .any(|p| p.topic == topic && p.partition == 0 && p.paused)
    })
    .await;
    let p0 = run
        .metrics
        .snapshot()
        .partitions
        .into_iter()
        .find(|p| p.partition == 0 && p.topic == topic)
        .expect("partition 0 assigned");
    assert!(p0.pending <= BOUND, "{p0:?}");
    assert!(
        p0.lag().is_some_and(|l| l > 0),
        "partition 0 still has records to fetch: {p0:?}"
    );
    let blocked_done: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM effects WHERE handler = 'record' AND key = 'blocked'",
    )
    .fetch_one(h.pool())
    .await
    .expect("count");
    assert_eq!(blocked_done, 0);

    gate.open();
    wait_effects(&h, "record", placed.len()).await;
    wait_caught_up(&[&run.metrics], &topic, 4).await;
    sampling.store(false, Ordering::Relaxed);
    sampler.await.expect("sampler");
    run.stop().await;

    let max_seen = max_pending.load(Ordering::Relaxed);
    assert!(
        max_seen <= BOUND,
        "partition 0 held {max_seen} pending records, over the bound of {BOUND}"
    );
    let all: Vec<Job> = placed.into_iter().map(|(_, j)| j).collect();
    assert_once_each_in_key_order(&h, "record", &all).await;
    eprintln!(
        "pause/resume: at most {max_seen} records pending in the blocked partition (bound {BOUND}); paused with {} pending",
        p0.pending
    );
}

// ---------------------------------------------------------------------------
// 7. Static membership (`group.instance.id`).
//
// The mock cluster implements KIP-345 for the KIP-848 protocol only: under
// the classic protocol the source uses, it finds members by member id, so
// a restarted static member joins as a new member and the old one stays
// until its session times out (librdkafka's rdkafka_mock_cgrp.c,
// `rd_kafka_mock_cgrp_classic_member_add`). What is tested here is what the
// option must not break: close commits although no LeaveGroup is sent, the
// restarted instance goes on from there, and a fenced member stops.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_member_stopped_and_restarted_with_its_id_loses_and_repeats_nothing() {
    let h = PgHarness::new().await;
    let Fixture {
        topic,
        group,
        bootstrap,
        ..
    } = fixture(1, 1).await;
    let member = || async {
        source_builder(
            &bootstrap,
            &group,
            Topics::new(&topic).expect("topic").without_retry_topic(),
        )
        .with_static_membership("t-instance-0")
        .connect()
        .await
        .expect("static source")
    };
    let ks = keys("s", 4);
    let first = jobs(&ks, 0, 10, None);
    publish(&bootstrap, &topic, &first).await;
    let a = Running::start(member().await, h.store(), record);
    wait_effects(&h, "record", first.len()).await;
    wait_caught_up(&[&a.metrics], &topic, 1).await;
    let s = a.stop().await;
    assert_eq!(s.duplicates, 0);
    // A static member sends no LeaveGroup, but close committed.
    assert_all_committed(&bootstrap, &group, &topic, 1).await;

    let second = jobs(&ks, 10, 10, None);
    publish(&bootstrap, &topic, &second).await;
    let b = Running::start(member().await, h.store(), record);
    let all: Vec<Job> = first.iter().chain(&second).cloned().collect();
    wait_effects(&h, "record", all.len()).await;
    wait_caught_up(&[&b.metrics], &topic, 1).await;
    let s = b.stop().await;

    // Nothing of the first run came again: it resumed from the commit.
    assert_eq!(s.duplicates, 0, "{s:?}");
    assert_once_each_in_key_order(&h, "record", &all).await;
    assert_all_committed(&bootstrap, &group, &topic, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_static_member_stops_with_an_error_that_says_so_instead_of_rejoining() {
    let h = PgHarness::new().await;
    let Fixture {
        host,
        topic,
        group,
        bootstrap,
        ..
    } = fixture(1, 2).await;
    let source = source_builder(
        &bootstrap,
        &group,
        Topics::new(&topic).expect("topic").without_retry_topic(),
    )
    .with_static_membership("t-instance-0")
    .connect()
    .await
    .expect("static source");
    let ks = keys("f", 2);
    let batch = jobs(&ks, 0, 5, None);
    publish(&bootstrap, &topic, &batch).await;
    let a = Running::start(source, h.store(), record);
    wait_effects(&h, "record", batch.len()).await;

    // What the broker answers a member whose id another instance took over.
    host.request_errors(
        RDKafkaApiKey::Heartbeat,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_FENCED_INSTANCE_ID; 4],
    );
    let ended = support::within(a.task)
        .await
        .expect("consumer task")
        .expect_err("a fenced member stops with an error");
    host.clear_request_errors(RDKafkaApiKey::Heartbeat);
    assert!(!ended.is_retriable(), "{ended}");
    let message = ended.to_string();
    assert!(
        message.contains("group.instance.id `t-instance-0`") && message.contains("fenced"),
        "{message}"
    );
    assert_once_each_in_key_order(&h, "record", &batch).await;
}
