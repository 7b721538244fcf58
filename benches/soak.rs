//! The soak: a constant rate for half an hour on RabbitMQ or Kafka, with
//! PostgreSQL dedup, printing per minute the consumer's throughput, its
//! latency (p50, p99, max: from the producer's send to the handler) and
//! its resident memory.
//!
//! ```text
//! cargo bench --bench soak --features amqp,kafka -- rabbitmq
//! BENCH_SOAK_MINUTES=3 cargo bench --bench soak --features amqp,kafka -- kafka
//! ```
//!
//! The producer (this process) publishes open loop: each 10 ms it sends
//! what the rate says is due since the start, whatever the last publish
//! took. The consumer is a child process (this binary again) with the
//! framework's defaults and a `#[handler]` in a PostgreSQL transaction
//! (the dedup row is its write; 8 connections); it prints one line a
//! minute. Flat within noise is the figure: throughput equal to the rate,
//! p99 and memory without a trend. The baseline is the first minute's
//! memory (the working set reached), beside the process's at start.
//!
//! Environment: `BENCH_SOAK_MINUTES` (30), `BENCH_SOAK_RATE` (500 msg/s),
//! `BENCH_KEYS` (100), `DATABASE_URL`, `AMQP_URL`, `KAFKA_BROKERS`.

use std::convert::Infallible;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use consumer::testing::FreshSchema;
use consumer::{Consumer, Message, Outgoing, PgTx, Publisher, handler};

#[path = "endurance/mod.rs"]
mod endurance;

use endurance::{CHILD_ENV, ChildConsumer, Rss, args, env_or, mib};

#[derive(serde::Serialize, serde::Deserialize)]
struct Timed {
    seq: u64,
    /// When the producer sent it, in microseconds since the epoch.
    sent_us: u64,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Latencies (µs) of the minute in progress, in the consumer child.
static LATENCIES: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// Records how long the message took from the producer to here; the
/// dedup row is claimed in the same transaction by the expansion.
#[handler(retry = none)]
async fn timed(m: Timed, _tx: &mut PgTx) -> Result<(), Infallible> {
    let took = now_us().saturating_sub(m.sent_us);
    LATENCIES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(took);
    Ok(())
}

/// One minute's figures, as the child prints them.
fn minute_line(minute: u64, took: Duration, mut latencies: Vec<u64>) -> String {
    latencies.sort_unstable();
    let at = |q: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let i = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[i] as f64 / 1000.0
    };
    format!(
        "minute {minute:>3}  {:>7.1} msg/s  p50 {:>7.2} ms  p99 {:>8.2} ms  max {:>8.2} ms  RSS {:>6.1} MiB",
        latencies.len() as f64 / took.as_secs_f64(),
        at(0.50),
        at(0.99),
        latencies.last().map_or(0.0, |m| *m as f64 / 1000.0),
        mib(Rss::of_self().now_kib)
    )
}

/// The consumer child: consumes until killed, printing a line a minute.
async fn child(spec: &str) {
    let parts: Vec<&str> = spec.split(' ').collect();
    let [backend, destination, schema] = parts[..] else {
        panic!("{CHILD_ENV} is `backend destination schema`, got {spec:?}");
    };
    println!("rss-start {}", Rss::of_self().now_kib);
    let pool = FreshSchema::pool_on(schema, 8).await.expect("pool");
    let store = consumer::Store::new(pool);
    tokio::spawn(async {
        let mut minute = 0;
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        tick.tick().await;
        let mut since = Instant::now();
        loop {
            tick.tick().await;
            minute += 1;
            let latencies = std::mem::take(
                &mut *LATENCIES
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            println!("{}", minute_line(minute, since.elapsed(), latencies));
            since = Instant::now();
        }
    });
    let result = match backend {
        "rabbitmq" => {
            let source = consumer::amqp::AmqpSource::builder(
                endurance::amqp_url(),
                endurance::amqp_topology(destination),
            )
            .connect()
            .await
            .expect("connect");
            let consumer = Consumer::new(source, store, timed);
            endurance::report_progress(consumer.stats());
            consumer.run_until(std::future::pending()).await
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
            let consumer = Consumer::new(source, store, timed);
            endurance::report_progress(consumer.stats());
            consumer.run_until(std::future::pending()).await
        }
        other => panic!("unknown backend {other}: rabbitmq or kafka"),
    };
    result.expect("consumer");
}

/// Publishes at `rate` for `minutes`, open loop; returns how many were sent.
async fn produce(
    publisher: &impl Publisher,
    destination: &str,
    rate: u64,
    minutes: u64,
    keys: u64,
) -> u64 {
    let start = Instant::now();
    let end = Duration::from_secs(minutes * 60);
    let mut sent = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while start.elapsed() < end {
        tick.tick().await;
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        if due <= sent {
            continue;
        }
        let sent_us = now_us();
        let batch: Vec<Outgoing> = (sent..due)
            .map(|seq| Outgoing {
                destination: destination.to_owned(),
                message: Message::json("Timed", &Timed { seq, sent_us })
                    .expect("json")
                    .with_key(format!("k{}", seq % keys)),
            })
            .collect();
        for r in publisher.publish(&batch).await {
            r.expect("publish");
        }
        sent = due;
    }
    sent
}

async fn soak(backend: &str, minutes: u64, rate: u64, keys: u64) {
    let schema = FreshSchema::create("bench_soak", 2)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let name = format!("bench.soak.{}", uuid::Uuid::new_v4().simple());
    let destination = match backend {
        "rabbitmq" => {
            let conn = lapin::Connection::connect(&endurance::amqp_url(), lapin::ConnectionProperties::default())
                .await
                .unwrap_or_else(|e| panic!("RabbitMQ is not reachable at {} ({e}): start it (scripts/services rabbitmq does) or set AMQP_URL", endurance::amqp_url()));
            let channel = conn.create_channel().await.expect("channel");
            endurance::amqp_topology(&name)
                .declare(&channel)
                .await
                .expect("declare");
            let _ = conn.close(200, "declared".into()).await;
            name.clone()
        }
        "kafka" => {
            let topic = name.replace('.', "-");
            endurance::kafka_topics(&topic)
                .create(&endurance::kafka_brokers(), 8, 1)
                .await
                .unwrap_or_else(|e| panic!("creating the topic on Kafka at {} failed ({e}): start it (scripts/services kafka does) or set KAFKA_BROKERS", endurance::kafka_brokers()));
            topic
        }
        other => panic!("unknown backend {other}: rabbitmq or kafka"),
    };
    let mut child = ChildConsumer::spawn(&format!("{backend} {destination} {}", schema.schema));
    let started = child.line();
    let started = started.strip_prefix("rss-start ").unwrap_or(&started);
    println!(
        "\n{backend}: {rate} msg/s for {minutes} min over {keys} keys; consumer child pid {}, {started} KiB resident at start",
        child.pid()
    );
    let printer = std::thread::spawn({
        let lines = child.lines_handle();
        move || {
            for line in lines {
                println!("  {line}");
            }
        }
    });
    let sent = match backend {
        "rabbitmq" => {
            let publisher = consumer::amqp::AmqpPublisher::builder(endurance::amqp_url())
                .connect()
                .await
                .expect("a RabbitMQ publisher");
            let sent = produce(&publisher, &format!("/{destination}"), rate, minutes, keys).await;
            publisher.close().await;
            sent
        }
        _ => {
            let publisher = consumer::kafka::KafkaPublisher::builder(endurance::kafka_brokers())
                .connect()
                .await
                .expect("publisher");
            produce(&publisher, &destination, rate, minutes, keys).await
        }
    };
    // The last messages' minute is printed by the child; give it that.
    let drained = Instant::now();
    while child.processed.load(std::sync::atomic::Ordering::Relaxed) < sent
        && drained.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let processed = child.processed.load(std::sync::atomic::Ordering::Relaxed);
    let rss = child.rss().unwrap_or_default();
    println!(
        "  {backend}: {sent} sent, {processed} processed; consumer RSS {:.1} MiB now, peak {:.1} MiB",
        mib(rss.now_kib),
        mib(rss.peak_kib)
    );
    drop(child);
    let _ = printer.join();
    let dedup: i64 = sqlx::query_scalar("SELECT count(*) FROM consumer_processed")
        .fetch_one(&schema.pool)
        .await
        .unwrap_or(-1);
    println!("  dedup rows: {dedup} (one per message: none applied twice, none lost)");
    match backend {
        "rabbitmq" => {
            endurance::delete_queues(
                &endurance::amqp_url(),
                &endurance::amqp_topology(&destination),
            )
            .await
        }
        _ => endurance::delete_topics(&endurance::kafka_brokers(), &destination).await,
    }
    let _ = schema.drop_schema().await;
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
    let minutes = env_or("BENCH_SOAK_MINUTES", 30);
    let rate = env_or("BENCH_SOAK_RATE", 500);
    let keys = env_or("BENCH_KEYS", 100);
    let mut backends = args();
    if backends.is_empty() {
        backends = vec!["rabbitmq".into(), "kafka".into()];
    }
    for b in &backends {
        rt.block_on(soak(b, minutes, rate, keys));
    }
}
