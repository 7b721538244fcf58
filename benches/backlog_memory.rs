//! Memory under a backlog: a million messages wait on the broker, then a
//! consumer starts on them; its resident memory is printed over the run,
//! beside its own at start.
//!
//! ```text
//! cargo bench --bench backlog_memory --all-features               # memory, rabbitmq, kafka
//! cargo bench --bench backlog_memory --all-features -- kafka sqs  # some of them
//! ```
//!
//! Each backend's consumer runs in a child process (this binary again) with
//! the framework's defaults, the bounds the guide documents: 256 deliveries
//! in flight, RabbitMQ's prefetch 256, Kafka's 256 pending records per
//! partition, SQS's 100 unsettled messages. Its handler is a `#[handler]`
//! with a PostgreSQL transaction (the dedup row is its only write), on a
//! pool of 8 connections in a fresh schema. The parent fills the broker
//! first, then reads the child's `VmRSS` and `VmHWM` (the peak, so nothing
//! between two readings is missed) from `/proc/<pid>/status` every second.
//!
//! The in-memory broker lives in the consumer's process, so the child fills
//! it itself: its figure is the growth above the process's resident memory
//! once the backlog is loaded. The broker frees each message as it is
//! acked, so what the run adds on top of that is the consumer's.
//!
//! Environment: `BENCH_BACKLOG` (1 000 000), `BENCH_SQS_BACKLOG` (20 000:
//! moto takes messages at a few hundred a second, see benches/README.md),
//! `BENCH_PAYLOAD_BYTES` (256), `BENCH_KEYS` (1 000), `DATABASE_URL`,
//! `AMQP_URL`, `KAFKA_BROKERS`, `SQS_ENDPOINT`.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use consumer::testing::FreshSchema;
use consumer::{Consumer, MemoryBroker, Message, Outgoing, PgTx, Publisher, handler};

#[path = "endurance/mod.rs"]
mod endurance;

use endurance::{CHILD_ENV, ChildConsumer, Rss, args, env_or, mib};

/// Partitions of the memory broker's and Kafka's topic.
const PARTITIONS: usize = 8;

#[derive(serde::Serialize, serde::Deserialize)]
struct Pad {
    seq: u64,
    pad: String,
}

/// Claims the message's id in the handler's transaction and writes nothing
/// else: the dedup row is the work.
#[handler(retry = none)]
async fn absorb(_m: Pad, _tx: &mut PgTx) -> Result<(), Infallible> {
    Ok(())
}

struct Settings {
    backlog: u64,
    sqs_backlog: u64,
    payload: usize,
    keys: u64,
}

impl Settings {
    fn from_env() -> Self {
        Self {
            backlog: env_or("BENCH_BACKLOG", 1_000_000),
            sqs_backlog: env_or("BENCH_SQS_BACKLOG", 20_000),
            payload: env_or("BENCH_PAYLOAD_BYTES", 256),
            keys: env_or("BENCH_KEYS", 1_000),
        }
    }

    /// Messages `from..to` of the backlog, keyed over `keys`.
    fn messages(&self, from: u64, to: u64) -> Vec<Message> {
        let pad = "x".repeat(self.payload.saturating_sub(30));
        (from..to)
            .map(|seq| {
                Message::json(
                    "Pad",
                    &Pad {
                        seq,
                        pad: pad.clone(),
                    },
                )
                .expect("json")
                .with_key(format!("k{}", seq % self.keys))
            })
            .collect()
    }
}

fn sqs_endpoint() -> String {
    std::env::var("SQS_ENDPOINT")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL_SQS"))
        .unwrap_or_else(|_| "http://127.0.0.1:4566".to_owned())
}

/// Publishes the backlog in batches, each confirmed, printing the rate.
async fn fill(publisher: &impl Publisher, destination: &str, s: &Settings, n: u64, batch: u64) {
    let t0 = Instant::now();
    let mut from = 0;
    while from < n {
        let to = (from + batch).min(n);
        let out: Vec<Outgoing> = s
            .messages(from, to)
            .into_iter()
            .map(|message| Outgoing {
                destination: destination.to_owned(),
                message,
            })
            .collect();
        for r in publisher.publish(&out).await {
            r.expect("publish the backlog");
        }
        from = to;
    }
    let took = t0.elapsed();
    println!(
        "  backlog of {n} messages published in {:.0} s ({:.0} msg/s)",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64()
    );
}

/// One backend: fill, start the child on the backlog, read its memory
/// until it has processed everything, clean up.
async fn measure(backend: &str, s: &Settings) {
    let n = if backend == "sqs" {
        s.sqs_backlog
    } else {
        s.backlog
    };
    let schema = FreshSchema::create("bench_backlog", 2)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let name = format!("bench.backlog.{}", uuid::Uuid::new_v4().simple());
    let mut destination = name.clone();
    println!(
        "\n{backend}: {n} messages of {} B over {} keys",
        s.payload, s.keys
    );
    match backend {
        "memory" => {}
        "rabbitmq" => {
            let conn = lapin::Connection::connect(&endurance::amqp_url(), lapin::ConnectionProperties::default())
                .await
                .unwrap_or_else(|e| panic!("RabbitMQ is not reachable at {} ({e}): start it (scripts/services rabbitmq does) or set AMQP_URL", endurance::amqp_url()));
            let channel = conn.create_channel().await.expect("channel");
            endurance::amqp_topology(&name)
                .declare(&channel)
                .await
                .expect("declare the queue");
            let _ = conn.close(200, "declared".into()).await;
            let publisher = consumer::amqp::AmqpPublisher::builder(endurance::amqp_url())
                .with_max_unconfirmed(4096)
                .connect()
                .await
                .expect("a RabbitMQ publisher");
            fill(&publisher, &format!("/{name}"), s, n, 4096).await;
            publisher.close().await;
        }
        "kafka" => {
            destination = name.replace('.', "-");
            endurance::kafka_topics(&destination)
                .create(&endurance::kafka_brokers(), PARTITIONS as i32, 1)
                .await
                .unwrap_or_else(|e| panic!("creating the topic on Kafka at {} failed ({e}): start it (scripts/services kafka does) or set KAFKA_BROKERS", endurance::kafka_brokers()));
            let publisher = consumer::kafka::KafkaPublisher::builder(endurance::kafka_brokers())
                .with_property("linger.ms", "20")
                .connect()
                .await
                .expect("publisher");
            fill(&publisher, &destination, s, n, 20_000).await;
        }
        "sqs" => {
            destination = name.replace('.', "-");
            let client = consumer::sqs::SqsClient::local(sqs_endpoint());
            consumer::sqs::Topology::new(&destination)
                .expect("queue name")
                .declare(&client)
                .await
                .unwrap_or_else(|e| panic!("no SQS emulator answers at {} ({e}): run `scripts/services sqs` (it starts moto there) or set SQS_ENDPOINT", sqs_endpoint()));
            let publisher = consumer::sqs::SqsPublisher::builder(client)
                .connect()
                .await
                .expect("publisher");
            fill(&publisher, &destination, s, n, 100).await;
        }
        other => panic!("unknown backend {other}: memory, rabbitmq, kafka or sqs"),
    }

    let mut child = ChildConsumer::spawn(&format!(
        "{backend} {destination} {} {n} {} {}",
        schema.schema, s.payload, s.keys
    ));
    let started = parse_kib(&child.line(), "rss-start");
    let loaded = (backend == "memory").then(|| parse_kib(&child.line(), "rss-loaded"));
    let t0 = Instant::now();
    println!(
        "  consumer child pid {}: {:.1} MiB resident at start{}",
        child.pid(),
        mib(started),
        loaded.map_or(String::new(), |l| format!(
            ", {:.1} MiB with the broker's backlog loaded",
            mib(l)
        ))
    );
    println!(
        "  {:>6}  {:>9}  {:>8}  {:>9}  {:>9}",
        "s", "processed", "msg/s", "RSS MiB", "peak MiB"
    );
    let mut last = Rss::default();
    let mut max_now = 0;
    let mut printed = (Instant::now(), 0u64);
    loop {
        std::thread::sleep(Duration::from_secs(1));
        if let Some(r) = child.rss() {
            last = r;
            max_now = max_now.max(r.now_kib);
        }
        let done = child.processed.load(Ordering::Relaxed);
        if printed.0.elapsed() >= Duration::from_secs(15) || child.exited().is_some() {
            let rate = (done - printed.1) as f64 / printed.0.elapsed().as_secs_f64();
            println!(
                "  {:>6.0}  {:>9}  {:>8.0}  {:>9.1}  {:>9.1}",
                t0.elapsed().as_secs_f64(),
                done,
                rate,
                mib(last.now_kib),
                mib(last.peak_kib)
            );
            printed = (Instant::now(), done);
        }
        if child.exited().is_some() {
            break;
        }
    }
    for line in child.pending_lines() {
        println!("  child: {line}");
    }
    let status = child.wait();
    assert!(status.success(), "the consumer child failed: {status}");
    let base = loaded.unwrap_or(started);
    println!(
        "  {backend}: peak {:.1} MiB (VmHWM), highest reading {:.1} MiB; baseline {:.1} MiB {}; growth over it {:.1} MiB; {n} processed in {:.0} s",
        mib(last.peak_kib),
        mib(max_now),
        mib(base),
        if loaded.is_some() {
            "(process with the backlog loaded)"
        } else {
            "(the same process at start)"
        },
        mib(last.peak_kib.saturating_sub(base)),
        t0.elapsed().as_secs_f64()
    );

    match backend {
        "rabbitmq" => {
            endurance::delete_queues(&endurance::amqp_url(), &endurance::amqp_topology(&name)).await
        }
        "kafka" => endurance::delete_topics(&endurance::kafka_brokers(), &destination).await,
        _ => {}
    }
    let _ = schema.drop_schema().await;
}

fn parse_kib(line: &str, tag: &str) -> u64 {
    line.strip_prefix(tag)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("the consumer child said {line:?}, expected `{tag} <KiB>`"))
}

/// The consumer child: starts on the backlog and exits once it processed
/// `n` messages.
async fn child(spec: &str) {
    let parts: Vec<&str> = spec.split(' ').collect();
    let [backend, destination, schema, n, payload, keys] = parts[..] else {
        panic!("{CHILD_ENV} is `backend destination schema n payload keys`, got {spec:?}");
    };
    let n: u64 = n.parse().expect("n");
    println!("rss-start {}", Rss::of_self().now_kib);
    let pool = FreshSchema::pool_on(schema, 8).await.expect("pool");
    let store = consumer::Store::new(pool);
    match backend {
        "memory" => {
            let s = Settings {
                backlog: n,
                sqs_backlog: 0,
                payload: payload.parse().expect("payload"),
                keys: keys.parse().expect("keys"),
            };
            let broker = MemoryBroker::new(PARTITIONS);
            let mut from = 0;
            while from < n {
                let to = (from + 10_000).min(n);
                for m in s.messages(from, to) {
                    broker.publish(destination, m).await.expect("publish");
                }
                from = to;
            }
            println!("rss-loaded {}", Rss::of_self().now_kib);
            consume(broker.source(destination), store, n).await;
        }
        "rabbitmq" => {
            let source = consumer::amqp::AmqpSource::builder(
                endurance::amqp_url(),
                endurance::amqp_topology(destination),
            )
            .connect()
            .await
            .expect("connect");
            consume(source, store, n).await;
        }
        "kafka" => {
            let source = consumer::kafka::KafkaSource::builder(
                endurance::kafka_brokers(),
                format!("g-{destination}"),
                endurance::kafka_topics(destination),
            )
            .connect()
            .await
            .expect("connect");
            consume(source, store, n).await;
        }
        "sqs" => {
            let client = consumer::sqs::SqsClient::local(sqs_endpoint());
            let source = consumer::sqs::SqsSource::builder(
                client,
                consumer::sqs::Topology::new(destination).expect("queue"),
            )
            .with_wait_time(Duration::from_secs(1))
            .connect()
            .await
            .expect("connect");
            consume(source, store, n).await;
        }
        other => panic!("unknown backend {other}"),
    }
}

async fn consume<Src: consumer::source::Source>(source: Src, store: consumer::PgStore, n: u64) {
    let consumer = Consumer::new(source, store, absorb);
    let stats = consumer.stats();
    endurance::report_progress(std::sync::Arc::clone(&stats));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    let last = stats.wait_for(|s| s.processed + s.duplicates >= n).await;
    let _ = stop.send(());
    run.await.expect("join").expect("consumer");
    println!("processed {}", last.processed);
    println!(
        "{} processed, {} duplicates, {} dead letters",
        last.processed,
        last.duplicates,
        last.dead_letters()
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        rt.block_on(child(&spec));
        return;
    }
    let s = Settings::from_env();
    let mut backends = args();
    if backends.is_empty() {
        backends = vec!["memory".into(), "rabbitmq".into(), "kafka".into()];
    }
    println!(
        "backlog memory: consumer defaults (max_in_flight 256; RabbitMQ prefetch 256; Kafka 256 pending per partition, {PARTITIONS} partitions; SQS 100 unsettled), PostgreSQL dedup, 2 tokio workers"
    );
    for b in &backends {
        rt.block_on(measure(b, &s));
    }
}
