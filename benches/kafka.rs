//! Kafka throughput: the framework against raw rdkafka on the same broker,
//! in the same run, over the same records (200 000 CloudEvents of 1 KiB of
//! JSON, 64 keys, topics of 6 partitions), with the same producer settings
//! and the same offset policy. Prints messages/s and client CPU time per
//! message (process user + system time over the measured section, every
//! thread: librdkafka's included) for each side, and the ratio to the raw
//! baseline.
//!
//! * Publishing: `KafkaPublisher` (batches of 1 000 `Outgoing`, each batch's
//!   delivery reports awaited whole: the outbox relay's shape) against a raw
//!   `FutureProducer` with the same properties (`PUBLISHER_DEFAULTS`:
//!   idempotence, `acks=all`; plus `batch.num.messages`) sending the same
//!   records, headers built per record from the message like the publisher
//!   does, in the same batches of 1 000 awaited whole. The first record of
//!   each side is a warm-up (metadata, producer id) and is not timed.
//! * Consuming: `KafkaSource` + `Consumer` + a no-op `#[handler]` (which
//!   decodes the JSON) + `MemoryStore`, with no tracing subscriber (spans
//!   off), against two raw `BaseConsumer` loops that store each record's
//!   offset after it (`store_offset_from_message`). The primary baseline
//!   (`raw-consume-equal`) does the framework's work by hand: it reads
//!   `ce_id`, `ce_type` and the key from the record, decodes the payload
//!   into the handler's type with the same `serde_json` call, and claims and
//!   commits the message id through the same `MemoryStore`; the bare loop
//!   (`raw-consume`) only touches the payload, and is kept as a second
//!   baseline. All three with
//!   `enable.auto.offset.store=false`, auto-commit every second, a final
//!   synchronous commit (`CONSUMER_DEFAULTS` minus `statistics.interval.ms`,
//!   which the source needs for its lag metrics and a raw loop would not
//!   set). Each run is a fresh consumer group reading the same preloaded
//!   topic from the beginning; timing starts at the first record received,
//!   and the committed offsets are checked afterwards. The decode's own cost
//!   is printed for reference. The bench polls
//!   `Stats` every 10 ms rather than awaiting `Stats::wait_for`, whose
//!   wake-up on every counter change would be charged to the framework.
//! * Consuming, diagnostics: the framework with a pause window larger than a
//!   partition (`with_max_per_partition(n + 1)`: it never pauses), which
//!   measures the runtime without the source's flow control; and, with
//!   `KAFKA_BENCH_PAUSING=1` (slow), the raw loop pausing each partition
//!   after every 256 records of it and resuming it at the next poll, which
//!   is the source's flow control alone.
//!
//! Each side runs twice, alternating (raw, framework, raw, framework, ...),
//! on fresh topics (publishing) or fresh groups (consuming); the best rate
//! and the best CPU time of each side are compared. The first raw publish
//! run writes the topic the consume runs read.
//!
//! ```sh
//! scripts/services kafka                                  # Apache Kafka on 127.0.0.1:9092
//! cargo bench --bench kafka --features kafka              # 200 000 records
//! KAFKA_BENCH_MESSAGES=20000 cargo bench --bench kafka --features kafka
//! ```
//!
//! Environment: `KAFKA_BROKERS` (default 127.0.0.1:9092),
//! `KAFKA_BENCH_MESSAGES` (default 200 000), `KAFKA_BENCH_BATCH_MESSAGES`
//! (`batch.num.messages` of every producer, default 1: tansu 0.6 loses
//! records for a consumer resuming inside a multi-record batch; raise it on
//! Apache Kafka), `KAFKA_BENCH_CONSUMER_PROPERTIES` (`key=value ...` set on
//! every consumer of both sides, e.g. `fetch.wait.max.ms=10`; with
//! `debug=fetch,topic` the raw consumers print librdkafka's log),
//! `KAFKA_BENCH_PAUSING=1`.
//!
//! # Instructions per message (callgrind)
//!
//! Instruction counts do not move with the load of a shared machine. With
//! `--callgrind`, the bench preloads a topic (natively), then runs each side
//! of itself under callgrind twice, over N/5 and N records
//! (`KAFKA_CALLGRIND_MESSAGES`, default 20 000; each consume run reads all
//! of a topic preloaded with its count), and prints
//! `(Ir(N) - Ir(N/5)) / (N - N/5)`: the fixed costs (start-up, group join,
//! topic creation, close) cancel out. Every thread counts. Time-driven work
//! (librdkafka's timers, the source's 1 s statistics, idle pollers) is
//! stretched by valgrind's slowdown, so it weighs more per message there
//! than natively. `KAFKA_CALLGRIND_OUT=dir` keeps the profiles for
//! `callgrind_annotate`; `KAFKA_CALLGRIND_SIDES="raw-consume
//! raw-consume-equal fw-consume"` runs only the sides named. (`scripts/bench-callgrind` is written for
//! `runtime_overhead`'s sides and setup-only runs; this bench drives
//! valgrind itself.)
//!
//! ```sh
//! cargo bench --bench kafka --features kafka -- --callgrind
//! KAFKA_CALLGRIND_MESSAGES=5000 cargo bench --bench kafka --features kafka -- --callgrind
//! # one side by hand, on a topic preloaded with --preload:
//! BENCH=$(cargo bench --bench kafka --features kafka --no-run --message-format=json \
//!     | sed -n 's/.*"executable":"\([^"]*kafka-[^"]*\)".*/\1/p')
//! $BENCH --preload bench-cg --n 10000
//! valgrind --tool=callgrind --callgrind-out-file=fw.callgrind \
//!     $BENCH --side fw-consume --topic bench-cg --n 10000
//! ```
//!
//! Sides for `--side` (each prints its figure; a consume side should read a
//! topic of exactly `--n` records): `raw-publish`, `fw-publish`
//! (a topic of their own), `raw-consume`, `raw-consume-equal`, `fw-consume`,
//! `fw-consume-unpaused`, `raw-consume-pausing` (`--topic`, a fresh group).

use std::collections::HashMap;
use std::hint::black_box;
use std::process::Command;
use std::time::{Duration, Instant};

use consumer::kafka::{
    CONSUMER_DEFAULTS, KafkaPublisher, KafkaSource, KafkaStats, PUBLISHER_DEFAULTS, Topics,
};
use consumer::store::Claim;
use consumer::{Consumer, DedupStore, MemoryStore, Message, Outgoing, Publisher, Stats};
use cpu_time::ProcessTime;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers as _, Message as _, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use throughput::{Figure, KEYS, Pad, messages, noop};

#[path = "throughput/mod.rs"]
mod throughput;

const PARTITIONS: i32 = 6;
const PUBLISH_BATCH: usize = 1000;
const ROUNDS: usize = 2;
/// `KafkaSource`'s default pause threshold (records pending per partition).
const DEFAULT_WINDOW: usize = 256;
/// A run with no progress for this long is reported as stalled.
const STALL: Duration = Duration::from_secs(30);

#[derive(Clone)]
struct Settings {
    brokers: String,
    batch_messages: String,
    /// `KAFKA_BENCH_CONSUMER_PROPERTIES`: set on every consumer, both sides.
    consumer_properties: Vec<(String, String)>,
    /// `KAFKA_BENCH_PAUSING=1`: the full run includes the pausing raw loop.
    slow_diagnostics: bool,
}

impl Settings {
    fn from_env() -> Self {
        let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
        Self {
            brokers: env("KAFKA_BROKERS", "127.0.0.1:9092"),
            batch_messages: env("KAFKA_BENCH_BATCH_MESSAGES", "1"),
            consumer_properties: env("KAFKA_BENCH_CONSUMER_PROPERTIES", "")
                .split_whitespace()
                .map(|kv| {
                    let (k, v) = kv
                        .split_once('=')
                        .expect("KAFKA_BENCH_CONSUMER_PROPERTIES is `key=value key=value`");
                    (k.to_owned(), v.to_owned())
                })
                .collect(),
            slow_diagnostics: env("KAFKA_BENCH_PAUSING", "0") == "1",
        }
    }

    /// What `KafkaPublisher` sets, for the raw producer and the loader.
    fn raw_producer(&self) -> FutureProducer {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers);
        for (k, v) in PUBLISHER_DEFAULTS {
            c.set(*k, *v);
        }
        c.set("batch.num.messages", &self.batch_messages);
        c.create().expect("raw producer")
    }

    async fn publisher(&self) -> KafkaPublisher {
        KafkaPublisher::builder(&self.brokers)
            .with_property("batch.num.messages", &self.batch_messages)
            .connect()
            .await
            .expect("publisher")
    }

    /// The source's offset policy, without the statistics it reads.
    fn raw_consumer_config(&self, group: &str) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers)
            .set("group.id", group);
        for (k, v) in CONSUMER_DEFAULTS {
            if *k != "statistics.interval.ms" {
                c.set(*k, *v);
            }
        }
        for (k, v) in &self.consumer_properties {
            c.set(k, v);
        }
        c
    }

    fn raw_consumer(&self, group: &str) -> BaseConsumer {
        self.raw_consumer_config(group)
            .create()
            .expect("raw consumer")
    }

    fn admin(&self) -> AdminClient<DefaultClientContext> {
        ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .create()
            .expect("admin client")
    }

    async fn create_topic(&self, name: &str) {
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = self
            .admin()
            .create_topics(
                &[NewTopic::new(name, PARTITIONS, TopicReplication::Fixed(1))],
                &opts,
            )
            .await
            .unwrap_or_else(|e| panic!("creating topic {name} at {}: {e}", self.brokers));
        for r in results {
            if let Err((t, code)) = r {
                panic!("creating topic {t}: {code}");
            }
        }
    }

    /// Frees the broker's memory; a broker that cannot delete keeps them.
    async fn delete_topics(&self, names: &[&str]) {
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        match self.admin().delete_topics(names, &opts).await {
            Ok(results) => {
                for r in results {
                    if let Err((t, code)) = r {
                        eprintln!("(could not delete topic {t}: {code})");
                    }
                }
            }
            Err(e) => eprintln!("(could not delete topics {names:?}: {e})"),
        }
    }

    /// Sum of the group's committed offsets over the topic's partitions.
    fn committed(&self, topic: &str, group: &str) -> i64 {
        let consumer = self.raw_consumer(group);
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition(topic, p);
        }
        let committed = consumer
            .committed_offsets(tpl, Duration::from_secs(10))
            .expect("committed offsets");
        committed
            .elements()
            .iter()
            .map(|e| match e.offset() {
                Offset::Offset(o) => o,
                _ => 0,
            })
            .sum()
    }
}

/// Sends `chunk` the way `KafkaPublisher::publish` does: every record
/// enqueued (waiting while librdkafka's queue is full), then every delivery
/// report awaited.
async fn raw_send(producer: &FutureProducer, topic: &str, chunk: &[Message]) {
    let mut pending = Vec::with_capacity(chunk.len());
    for m in chunk {
        let mut headers = OwnedHeaders::new_with_capacity(m.headers.len());
        for (key, value) in m.headers.iter() {
            headers = headers.insert(Header {
                key,
                value: Some(value),
            });
        }
        let mut record = FutureRecord::<str, [u8]>::to(topic)
            .payload(&m.payload[..])
            .headers(headers);
        if let Some(key) = &m.key {
            record = record.key(key.as_str());
        }
        loop {
            match producer.send_result(record) {
                Ok(delivery) => {
                    pending.push(delivery);
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err((e, _)) => panic!("producing to {topic}: {e}"),
            }
        }
    }
    for delivery in pending {
        match delivery.await {
            Ok(Ok(_)) => {}
            Ok(Err((e, _))) => panic!("delivery to {topic} failed: {e}"),
            Err(_) => panic!("the producer went away before a delivery report"),
        }
    }
}

async fn raw_publish(s: &Settings, topic: &str, msgs: &[Message]) -> Figure {
    let producer = s.raw_producer();
    raw_send(&producer, topic, &msgs[..1]).await;
    let (t0, c0) = (Instant::now(), ProcessTime::now());
    for chunk in msgs[1..].chunks(PUBLISH_BATCH) {
        raw_send(&producer, topic, chunk).await;
    }
    Figure::measure(msgs.len() - 1, t0.elapsed(), c0.elapsed())
}

async fn framework_publish(s: &Settings, topic: &str, msgs: &[Message]) -> Figure {
    let publisher = s.publisher().await;
    // The relay's shape: rows already read, published batch by batch.
    let batch: Vec<Outgoing> = msgs
        .iter()
        .map(|m| Outgoing {
            destination: topic.to_owned(),
            message: m.clone(),
        })
        .collect();
    for r in publisher.publish(&batch[..1]).await {
        r.expect("warm-up publish");
    }
    let (t0, c0) = (Instant::now(), ProcessTime::now());
    for chunk in batch[1..].chunks(PUBLISH_BATCH) {
        for r in publisher.publish(chunk).await {
            r.expect("publish");
        }
    }
    Figure::measure(msgs.len() - 1, t0.elapsed(), c0.elapsed())
}

/// Prints librdkafka's log lines (with `debug=...` in
/// `KAFKA_BENCH_CONSUMER_PROPERTIES`) on the raw consumers.
struct RawContext;

impl ClientContext for RawContext {
    fn log(&self, _level: RDKafkaLogLevel, fac: &str, message: &str) {
        eprintln!("librdkafka {fac}: {message}");
    }
}

impl ConsumerContext for RawContext {}

/// Reads `n` records of `topic` from the beginning in a fresh group,
/// storing each offset after the record; blocking. With `pause_window`, a
/// partition is paused after every `pause_window` records of it and resumed
/// at the next poll: the source's flow control with a handler that finishes
/// at once, to tell what pausing costs from what the runtime costs.
fn raw_consume(
    s: &Settings,
    topic: &str,
    group: &str,
    n: usize,
    pause_window: Option<usize>,
    work: Option<MemoryStore>,
) -> Figure {
    let mut config = s.raw_consumer_config(group);
    if s.consumer_properties.iter().any(|(k, _)| k == "debug") {
        config.set_log_level(RDKafkaLogLevel::Debug);
    }
    let consumer: BaseConsumer<RawContext> = config
        .create_with_context(RawContext)
        .expect("raw consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut since_pause: HashMap<i32, usize> = HashMap::new();
    let mut paused = TopicPartitionList::new();
    let mut start = None;
    let mut got = 0;
    let mut progress = Instant::now();
    while got < n {
        if paused.count() > 0 {
            consumer.resume(&paused).expect("resume");
            paused = TopicPartitionList::new();
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => assert!(
                progress.elapsed() < STALL,
                "raw consumer stalled: no record for {STALL:?} after {got} of {n}"
            ),
            Some(Err(e)) => eprintln!("(raw consumer: {e})"),
            Some(Ok(record)) => {
                if start.is_none() {
                    start = Some((Instant::now(), ProcessTime::now()));
                }
                match &work {
                    None => {
                        black_box(record.payload());
                    }
                    Some(store) => equal_work(&record, store),
                }
                consumer
                    .store_offset_from_message(&record)
                    .expect("store offset");
                got += 1;
                progress = Instant::now();
                if let Some(window) = pause_window {
                    let count = since_pause.entry(record.partition()).or_default();
                    *count += 1;
                    if *count >= window {
                        *count = 0;
                        let mut tpl = TopicPartitionList::new();
                        tpl.add_partition(topic, record.partition());
                        consumer.pause(&tpl).expect("pause");
                        paused.add_partition(topic, record.partition());
                    }
                }
            }
        }
    }
    let (t0, c0) = start.expect("at least one record");
    let f = Figure::measure(n - 1, t0.elapsed(), c0.elapsed());
    consumer
        .commit_consumer_state(CommitMode::Sync)
        .expect("final commit");
    f
}

/// What the framework does per record besides storing its offset, done by
/// hand: the id, type and key read from the record (`ce_id`, `ce_type`,
/// UTF-8 checked), the payload decoded into the handler's type with the
/// same `serde_json` call, and the no-op handler's dedup claim and commit
/// through the same `MemoryStore` (`#[handler]` claims on the message id).
fn equal_work(record: &rdkafka::message::BorrowedMessage<'_>, store: &MemoryStore) {
    let (mut id, mut kind) = (None, None);
    if let Some(headers) = record.headers() {
        for h in headers.iter() {
            match h.key {
                "ce_id" => id = h.value.and_then(|v| std::str::from_utf8(v).ok()),
                "ce_type" => kind = h.value.and_then(|v| std::str::from_utf8(v).ok()),
                _ => {}
            }
        }
    }
    let key = record.key().map(String::from_utf8_lossy);
    let id = id.expect("ce_id");
    black_box((kind.expect("ce_type"), key));
    let pad: Pad = serde_json::from_slice(record.payload().unwrap_or_default()).expect("decode");
    black_box(pad);
    futures_lite::future::block_on(async {
        match store.claim("noop", id, id).await.expect("claim") {
            Claim::Fresh(tx) => store.commit(tx).await.expect("commit"),
            Claim::Duplicate => {}
        }
    });
}

/// Polls `stats` until `done` holds; fails when nothing moves for [`STALL`].
/// Polling, not `Stats::wait_for`: a waiter is woken on every counter
/// change, a cost the framework would be charged for.
async fn poll_until(
    stats: &Stats,
    metrics: &KafkaStats,
    every: Duration,
    done: impl Fn(&consumer::stats::StatsSnapshot) -> bool,
) -> consumer::stats::StatsSnapshot {
    let mut last = (stats.snapshot().received, Instant::now());
    loop {
        let s = stats.snapshot();
        if done(&s) {
            return s;
        }
        if s.received != last.0 {
            last = (s.received, Instant::now());
        }
        assert!(
            last.1.elapsed() < STALL,
            "framework consumer stalled for {STALL:?}: {s:?}\n{:?}",
            metrics.snapshot()
        );
        tokio::time::sleep(every).await;
    }
}

/// `window`: the source's pause threshold (`None`: its default).
async fn framework_consume(
    s: &Settings,
    topic: &str,
    group: &str,
    n: usize,
    window: Option<usize>,
) -> Figure {
    let topics = Topics::new(topic).expect("topic name");
    let mut builder = KafkaSource::builder(&s.brokers, group, topics)
        .with_producer_property("batch.num.messages", &s.batch_messages);
    for (k, v) in &s.consumer_properties {
        builder = builder.with_property(k, v);
    }
    if let Some(w) = window {
        builder = builder.with_max_per_partition(w);
    }
    let source = builder.connect().await.expect("source");
    let metrics = source.stats();
    let consumer = Consumer::new(source, MemoryStore::new(), noop);
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    let first = poll_until(&stats, &metrics, Duration::from_millis(1), |s| {
        s.received >= 1
    })
    .await;
    let (t0, c0) = (Instant::now(), ProcessTime::now());
    let last = poll_until(&stats, &metrics, Duration::from_millis(10), |s| {
        s.processed as usize >= n
    })
    .await;
    let f = Figure::measure(n - first.processed as usize, t0.elapsed(), c0.elapsed());
    let _ = stop.send(());
    run.await.expect("join").expect("consumer");
    if last.duplicates + last.dead_letters() + last.retries > 0 || last.processed as usize != n {
        eprintln!("(framework run: unexpected counts {last:?})");
    }
    f
}

/// A way of consuming the preloaded topic.
struct ConsumeSide {
    id: &'static str,
    label: &'static str,
    /// Only with `KAFKA_BENCH_PAUSING=1` in the full run.
    slow: bool,
}

/// Baseline and framework first; the rest are diagnostics.
const CONSUME_SIDES: &[ConsumeSide] = &[
    ConsumeSide {
        id: "raw-consume-equal",
        label: "raw, equal work",
        slow: false,
    },
    ConsumeSide {
        id: "fw-consume",
        label: "framework, no-op handler",
        slow: false,
    },
    ConsumeSide {
        id: "raw-consume",
        label: "raw BaseConsumer, bare",
        slow: false,
    },
    ConsumeSide {
        id: "fw-consume-unpaused",
        label: "framework, window > partition",
        slow: false,
    },
    ConsumeSide {
        id: "raw-consume-pausing",
        label: "raw, paused every 256 records",
        slow: true,
    },
];

/// Consumes `n` records of `topic` from the beginning in `group`, one of
/// [`CONSUME_SIDES`].
async fn consume(s: &Settings, side: &str, topic: &str, group: &str, n: usize) -> Figure {
    let raw = |pause_window: Option<usize>, work: Option<MemoryStore>| {
        let (s, topic, group) = (s.clone(), topic.to_owned(), group.to_owned());
        tokio::task::spawn_blocking(move || raw_consume(&s, &topic, &group, n, pause_window, work))
    };
    match side {
        "raw-consume" => raw(None, None).await.expect("raw consumer thread"),
        "raw-consume-equal" => raw(None, Some(MemoryStore::new()))
            .await
            .expect("raw consumer thread"),
        "raw-consume-pausing" => raw(Some(DEFAULT_WINDOW), None)
            .await
            .expect("raw consumer thread"),
        "fw-consume" => framework_consume(s, topic, group, n, None).await,
        // A window no partition reaches: the source never pauses.
        "fw-consume-unpaused" => framework_consume(s, topic, group, n, Some(n + 1)).await,
        other => panic!("unknown consume side {other:?}"),
    }
}

fn run_line(name: &str, round: usize, f: &Figure, note: &str) {
    println!(
        "  {name:<34} run {round}  {:>9.0} msg/s  {:>6.2} µs CPU/msg{note}",
        f.rate, f.cpu_us
    );
}

fn line(name: &str, f: &Figure, base: Option<&Figure>, targets: &str) {
    match base {
        None => println!(
            "  {name:<34} {:>9.0} msg/s  {:>6.2} µs CPU/msg  (baseline)",
            f.rate, f.cpu_us
        ),
        Some(b) => println!(
            "  {name:<34} {:>9.0} msg/s  {:>6.2} µs CPU/msg  {:.2}× throughput, {:.2}× CPU ({:+.2} µs/msg)  {targets}",
            f.rate,
            f.cpu_us,
            f.rate / b.rate,
            f.cpu_us / b.cpu_us,
            f.cpu_us - b.cpu_us
        ),
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

/// What decoding one payload costs (the framework's handler decodes, the
/// bare raw loop does not).
fn decode_cost(msgs: &[Message]) -> f64 {
    let sample = &msgs[..msgs.len().min(20_000)];
    let c0 = ProcessTime::now();
    for m in sample {
        black_box(serde_json::from_slice::<Pad>(&m.payload).expect("decode"));
    }
    c0.elapsed().as_secs_f64() * 1e6 / sample.len() as f64
}

async fn full(s: &Settings, n: usize) {
    let msgs = messages(n);
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let consume_topic = Topics::new(format!("bench-kafka-{suffix}")).expect("topic name");
    consume_topic
        .create(&s.brokers, PARTITIONS, 1)
        .await
        .unwrap_or_else(|e| panic!("creating topics at {}: {e}", s.brokers));

    println!(
        "Kafka at {}: {n} records of 1 KiB, {KEYS} keys, {PARTITIONS} partitions, \
         batch.num.messages={}, best of {ROUNDS} alternating runs\n",
        s.brokers, s.batch_messages
    );
    if !s.consumer_properties.is_empty() {
        println!(
            "every consumer (both sides) also has: {:?}\n",
            s.consumer_properties
        );
    }
    println!(
        "publishing (idempotent, acks=all; batches of {PUBLISH_BATCH}, each batch's delivery reports awaited):"
    );
    let (mut raw_pub, mut fw_pub) = (Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        // The first raw run writes the topic every consume run reads.
        let topic = if round == 1 {
            consume_topic.topic().to_owned()
        } else {
            let t = format!("bench-kafka-{suffix}-raw-pub-{round}");
            s.create_topic(&t).await;
            t
        };
        let f = raw_publish(s, &topic, &msgs).await;
        run_line("raw FutureProducer", round, &f, "");
        raw_pub.push(f);
        if round > 1 {
            s.delete_topics(&[&topic]).await;
        }

        let topic = format!("bench-kafka-{suffix}-fw-pub-{round}");
        s.create_topic(&topic).await;
        let f = framework_publish(s, &topic, &msgs).await;
        run_line("KafkaPublisher", round, &f, "");
        fw_pub.push(f);
        s.delete_topics(&[&topic]).await;
    }
    let (raw_pub, fw_pub) = (Figure::best(&raw_pub), Figure::best(&fw_pub));

    println!(
        "\nconsuming from the beginning, offsets stored after each record, auto-commit every 1 s:"
    );
    let mut con: Vec<Vec<Figure>> = vec![Vec::new(); CONSUME_SIDES.len()];
    for round in 1..=ROUNDS {
        for (i, side) in CONSUME_SIDES.iter().enumerate() {
            if side.slow && !s.slow_diagnostics {
                continue;
            }
            let topic = consume_topic.topic();
            let group = format!("bench-kafka-{suffix}-{}-{round}", side.id);
            let f = consume(s, side.id, topic, &group, n).await;
            let committed = s.committed(topic, &group);
            run_line(
                side.label,
                round,
                &f,
                &format!("  (committed {committed} of {n})"),
            );
            con[i].push(f);
        }
    }
    let con: Vec<Figure> = con.iter().map(|runs| Figure::best(runs)).collect();
    let (raw_con, fw_con) = (con[0], con[1]);

    println!("\nbest of {ROUNDS} (highest rate, lowest CPU/msg):");
    println!("publishing:");
    line("raw FutureProducer", &raw_pub, None, "");
    let ok = fw_pub.rate >= 0.9 * raw_pub.rate;
    line(
        "KafkaPublisher (outbox relay path)",
        &fw_pub,
        Some(&raw_pub),
        &format!("target ≥ 0.90× throughput: {}", verdict(ok)),
    );
    println!("consuming:");
    line("raw, equal work", &raw_con, None, "");
    let (ok_rate, ok_cpu) = (
        fw_con.rate >= 0.9 * raw_con.rate,
        fw_con.cpu_us - raw_con.cpu_us <= 2.0,
    );
    line(
        "framework, no-op handler",
        &fw_con,
        Some(&raw_con),
        &format!(
            "targets ≥ 0.90× throughput: {}, ≤ +2 µs CPU/msg: {}",
            verdict(ok_rate),
            verdict(ok_cpu)
        ),
    );
    let bare = con[2];
    line("raw BaseConsumer, bare", &bare, None, "(second baseline)");
    line("framework against the bare loop", &fw_con, Some(&bare), "");
    println!("consuming, diagnostics (not the targets' figures, against equal work):");
    for (side, f) in CONSUME_SIDES.iter().zip(&con).skip(3) {
        if f.rate > 0.0 {
            line(side.label, f, Some(&raw_con), "");
        }
    }
    println!(
        "  (for reference: serde_json decoding one payload, which the framework's handler and the equal-work loop do and the bare loop does not: {:.2} µs CPU)",
        decode_cost(&msgs)
    );

    let t = consume_topic;
    s.delete_topics(&[
        t.topic(),
        t.retry_topic().unwrap_or_default(),
        t.dead_letter_topic(),
    ])
    .await;
}

/// One side once (for callgrind and perf); prints its figure.
async fn side(s: &Settings, side: &str, topic: Option<&str>, n: usize) {
    let group = format!("bench-kafka-cg-{}", uuid::Uuid::new_v4().simple());
    let topic_for_consume = || topic.expect("--side *-consume needs --topic").to_owned();
    let f = match side {
        "raw-publish" | "fw-publish" => {
            let msgs = messages(n);
            let t = format!("bench-kafka-cg-{}", uuid::Uuid::new_v4().simple());
            s.create_topic(&t).await;
            let f = if side == "raw-publish" {
                raw_publish(s, &t, &msgs).await
            } else {
                framework_publish(s, &t, &msgs).await
            };
            s.delete_topics(&[&t]).await;
            f
        }
        other if CONSUME_SIDES.iter().any(|c| c.id == other) => {
            consume(s, other, &topic_for_consume(), &group, n).await
        }
        other => panic!(
            "unknown side {other:?}; accepted: raw-publish, fw-publish, {}",
            CONSUME_SIDES
                .iter()
                .map(|c| c.id)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    run_line(side, 1, &f, "");
}

/// Creates `topic` (with the source's retry and dead-letter topics) and
/// writes `n` records to it.
async fn preload(s: &Settings, topic: &str, n: usize) {
    let topics = Topics::new(topic).expect("topic name");
    topics
        .create(&s.brokers, PARTITIONS, 1)
        .await
        .unwrap_or_else(|e| panic!("creating topics at {}: {e}", s.brokers));
    let producer = s.raw_producer();
    for chunk in messages(n).chunks(PUBLISH_BATCH) {
        raw_send(&producer, topic, chunk).await;
    }
}

/// Instructions of one run of `side` under callgrind.
fn callgrind_run(side: &str, topic: &str, n: usize, out: &std::path::Path) -> u64 {
    let exe = std::env::current_exe().expect("own path");
    let file = out.join(format!("{side}-{n}.callgrind"));
    let output = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", file.display()))
        .arg(&exe)
        .args(["--side", side, "--topic", topic, "--n", &n.to_string()])
        .output()
        .expect("valgrind is not installed (apt-get install valgrind)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{side} --n {n} failed under callgrind:\n{stderr}"
    );
    stderr
        .lines()
        .find_map(|l| {
            l.split_once("Collected :")
                .and_then(|(_, v)| v.trim().parse().ok())
        })
        .unwrap_or_else(|| panic!("no instruction count in callgrind's output:\n{stderr}"))
}

fn callgrind(s: &Settings, rt: &tokio::runtime::Runtime, n: usize) {
    let small = (n / 5).max(1);
    // A topic per count: librdkafka prefetches whatever the topic holds, so
    // a run must read all of its topic for its instructions to scale.
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let topic = |count: usize| format!("bench-kafka-cg-{suffix}-{count}");
    for count in [small, n] {
        rt.block_on(preload(s, &topic(count), count));
    }
    let (out, keep) = match std::env::var("KAFKA_CALLGRIND_OUT") {
        Ok(dir) => {
            std::fs::create_dir_all(&dir).expect("KAFKA_CALLGRIND_OUT");
            (std::path::PathBuf::from(dir), true)
        }
        Err(_) => {
            let dir = std::env::temp_dir().join(format!("kafka-callgrind-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("temp dir");
            (dir, false)
        }
    };
    println!(
        "callgrind: each side over {small} and {n} records; Ir/msg = (Ir({n}) - Ir({small})) / {}",
        n - small
    );
    println!(
        "{:<20} {:>16} {:>16} {:>10}",
        "side",
        format!("Ir {small}"),
        format!("Ir {n}"),
        "Ir/msg"
    );
    let mut per_msg = HashMap::new();
    let sides: Vec<String> = match std::env::var("KAFKA_CALLGRIND_SIDES") {
        Ok(list) => list.split_whitespace().map(str::to_owned).collect(),
        Err(_) => [
            "raw-publish",
            "fw-publish",
            "raw-consume",
            "raw-consume-equal",
            "fw-consume",
            "fw-consume-unpaused",
        ]
        .map(str::to_owned)
        .to_vec(),
    };
    for side in &sides {
        let side = side.as_str();
        let a = callgrind_run(side, &topic(small), small, &out);
        let b = callgrind_run(side, &topic(n), n, &out);
        let ir = b.saturating_sub(a) / (n - small) as u64;
        per_msg.insert(side, ir);
        println!("{side:<20} {a:>16} {b:>16} {ir:>10}");
    }
    for (fw, raw) in [
        ("fw-publish", "raw-publish"),
        ("fw-consume", "raw-consume-equal"),
        ("fw-consume", "raw-consume"),
        ("raw-consume-equal", "raw-consume"),
        ("fw-consume-unpaused", "raw-consume-equal"),
    ] {
        let (Some(&f), Some(&r)) = (per_msg.get(fw), per_msg.get(raw)) else {
            continue;
        };
        println!(
            "{fw} / {raw}: {:.2}× instructions per message ({:+} Ir/msg)",
            f as f64 / r as f64,
            f as i64 - r as i64
        );
    }
    if !keep {
        let _ = std::fs::remove_dir_all(&out);
    } else {
        println!("profiles in {}", out.display());
    }
    for count in [small, n] {
        let t = Topics::new(topic(count)).expect("topic name");
        rt.block_on(s.delete_topics(&[
            t.topic(),
            t.retry_topic().unwrap_or_default(),
            t.dead_letter_topic(),
        ]));
    }
}

fn main() {
    let s = Settings::from_env();
    let env_n = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (mut only, mut topic, mut n, mut preload_topic, mut cg) = (None, None, None, None, false);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--side" => only = Some(value()),
            "--topic" => topic = Some(value()),
            "--n" => n = Some(value().parse::<usize>().expect("--n takes a number")),
            "--preload" => preload_topic = Some(value()),
            "--callgrind" => cg = true,
            // `cargo bench` appends `--bench`.
            "--bench" => {}
            other => panic!(
                "unknown argument {other:?}; accepted: --callgrind, --side SIDE [--topic T] --n N, --preload TOPIC --n N"
            ),
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    check_broker(&s.brokers);
    if cg {
        callgrind(
            &s,
            &rt,
            n.unwrap_or_else(|| env_n("KAFKA_CALLGRIND_MESSAGES", 20_000)),
        );
    } else if let Some(t) = preload_topic {
        rt.block_on(preload(&s, &t, n.expect("--preload needs --n")));
    } else if let Some(side_name) = only {
        rt.block_on(side(
            &s,
            &side_name,
            topic.as_deref(),
            n.expect("--side needs --n"),
        ));
    } else {
        let n = n.unwrap_or_else(|| env_n("KAFKA_BENCH_MESSAGES", 200_000));
        assert!(n >= 2, "at least 2 messages");
        rt.block_on(full(&s, n));
    }
}

/// Fails with a sentence naming the broker when it does not answer.
fn check_broker(brokers: &str) {
    let first = brokers.split(',').next().unwrap_or(brokers);
    let up = std::net::ToSocketAddrs::to_socket_addrs(first)
        .map(|mut addrs| {
            addrs.any(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok())
        })
        .unwrap_or(false);
    assert!(
        up,
        "no Kafka broker answers at {brokers}: run `scripts/services kafka` (it starts Apache Kafka there) or set KAFKA_BROKERS"
    );
}
