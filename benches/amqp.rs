//! RabbitMQ throughput: the framework against raw lapin on the same broker,
//! same messages (100 000 × 1 KiB JSON), same prefetch and the same number
//! of unconfirmed publishes in flight. Prints messages/s and client CPU
//! time per message for each, and the ratio to the raw baseline.
//!
//! `cargo bench --bench amqp --features amqp` (needs RabbitMQ at `AMQP_URL`,
//! default amqp://guest:guest@127.0.0.1:5672/%2f). `BENCH_MESSAGES`
//! overrides the count.

use std::time::{Duration, Instant};

use consumer::amqp::{AmqpPublisher, AmqpSource, Topology};
use consumer::{Consumer, MemoryStore, Message, Outgoing, Publisher};
use cpu_time::ProcessTime;
use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use throughput::{Figure, messages, noop};

#[path = "throughput/mod.rs"]
mod throughput;

const PREFETCH: u16 = 256;
const UNCONFIRMED: usize = 1024;

async fn raw_publish(conn: &Connection, queue: &str, msgs: &[Message]) -> Figure {
    let channel = conn.create_channel().await.expect("channel");
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let props: Vec<BasicProperties> = msgs
        .iter()
        .map(|m| {
            let mut t = FieldTable::default();
            for (k, v) in m.headers.iter() {
                t.insert(
                    k.into(),
                    lapin::types::AMQPValue::LongString(v.to_vec().into()),
                );
            }
            BasicProperties::default()
                .with_delivery_mode(2)
                .with_headers(t)
        })
        .collect();
    let (t0, c0) = (Instant::now(), ProcessTime::now());
    for (chunk, pchunk) in msgs.chunks(UNCONFIRMED).zip(props.chunks(UNCONFIRMED)) {
        let mut confirms = Vec::with_capacity(chunk.len());
        for (m, p) in chunk.iter().zip(pchunk) {
            confirms.push(
                channel
                    .basic_publish(
                        "".into(),
                        queue.into(),
                        BasicPublishOptions {
                            mandatory: true,
                            ..Default::default()
                        },
                        &m.payload,
                        p.clone(),
                    )
                    .await
                    .expect("publish"),
            );
        }
        for c in confirms {
            assert!(c.await.expect("confirm").is_ack());
        }
    }
    Figure::measure(msgs.len(), t0.elapsed(), c0.elapsed())
}

async fn raw_consume(conn: &Connection, queue: &str, n: usize) -> Figure {
    let channel = conn.create_channel().await.expect("channel");
    channel
        .basic_qos(PREFETCH, BasicQosOptions::default())
        .await
        .expect("qos");
    let (t0, c0) = (Instant::now(), ProcessTime::now());
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let mut got = 0;
    while got < n {
        let d = consumer.next().await.expect("stream").expect("delivery");
        d.ack(BasicAckOptions::default()).await.expect("ack");
        got += 1;
    }
    let f = Figure::measure(n, t0.elapsed(), c0.elapsed());
    let _ = channel.close(200, "done".into()).await;
    f
}

async fn framework_publish(url: &str, queue: &str, msgs: &[Message]) -> Figure {
    let publisher = AmqpPublisher::builder(url)
        .with_max_unconfirmed(UNCONFIRMED)
        .connect()
        .await
        .expect("a RabbitMQ publisher");
    let batch: Vec<Outgoing> = msgs
        .iter()
        .map(|m| Outgoing {
            destination: format!("/{queue}"),
            message: m.clone(),
        })
        .collect();
    publisher
        .publish(&batch[..1])
        .await
        .into_iter()
        .for_each(|r| r.expect("warm-up"));
    let (t0, c0) = (Instant::now(), ProcessTime::now());
    // The relay's shape: batches of outbox rows, each confirmed as a whole.
    for chunk in batch[1..].chunks(UNCONFIRMED) {
        for r in publisher.publish(chunk).await {
            r.expect("publish");
        }
    }
    let f = Figure::measure(msgs.len() - 1, t0.elapsed(), c0.elapsed());
    publisher.close().await;
    f
}

async fn framework_consume(url: &str, topology: Topology, n: usize) -> Figure {
    let source = AmqpSource::builder(url, topology)
        .with_prefetch(PREFETCH)
        .build()
        .expect("topology");
    let (t0, c0) = (Instant::now(), ProcessTime::now());
    let consumer =
        Consumer::new(source, MemoryStore::new(), noop).with_max_in_flight(usize::from(PREFETCH));
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    stats.wait_for(|s| s.processed as usize >= n).await;
    let f = Figure::measure(n, t0.elapsed(), c0.elapsed());
    let _ = stop.send(());
    run.await.expect("join").expect("consumer");
    f
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let url = std::env::var("AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
    let n: usize = std::env::var("BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let conn = Connection::connect(&url, ConnectionProperties::default())
        .await
        .unwrap_or_else(|e| {
            panic!("RabbitMQ is not reachable at {url} ({e}): start it or set AMQP_URL")
        });
    let msgs = messages(n);
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let raw_q = format!("bench.raw.{suffix}");
    let fw = Topology::new(format!("bench.fw.{suffix}"))
        .expect("name")
        .with_max_retry_delay(Duration::from_millis(16));
    let setup = conn.create_channel().await.expect("channel");
    setup
        .queue_declare(
            raw_q.as_str().into(),
            lapin::options::QueueDeclareOptions::durable(),
            FieldTable::default(),
        )
        .await
        .expect("declare");
    fw.declare(&setup).await.expect("declare");

    println!(
        "RabbitMQ: {n} messages of 1 KiB, prefetch {PREFETCH}, {UNCONFIRMED} unconfirmed publishes in flight\n"
    );
    println!("publishing with confirms:");
    let raw_pub = raw_publish(&conn, &raw_q, &msgs).await;
    raw_pub.line("raw lapin", None, "msg");
    let fw_pub = framework_publish(&url, fw.queue(), &msgs).await;
    fw_pub.line("AmqpPublisher (outbox relay path)", Some(&raw_pub), "msg");

    println!("\nconsuming with a per-message ack:");
    let raw_con = raw_consume(&conn, &raw_q, n).await;
    raw_con.line("raw lapin", None, "msg");
    let fw_con = framework_consume(&url, fw.clone(), n).await;
    fw_con.line("framework, no-op handler", Some(&raw_con), "msg");

    for q in [
        raw_q.clone(),
        fw.queue().to_owned(),
        fw.dead_letter_queue().to_owned(),
    ]
    .into_iter()
    .chain(fw.delay_queues().into_iter().map(|d| d.1))
    {
        let _ = setup
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
}
