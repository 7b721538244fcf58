//! SQS throughput against moto: the framework against a raw `aws-sdk-sqs`
//! loop doing the same batching, on the same FIFO queue settings, the same
//! messages (1 KiB JSON, 64 groups). Prints messages/s and client CPU time
//! per message for each, and the ratios to the raw baseline.
//!
//! * publishing: 64 messages a publish (one per group, the relay's shape),
//!   sent as `SendMessageBatch` calls of ten, concurrently; the raw loop
//!   sends the same calls.
//! * consuming: the raw loop receives ten (long polling) and deletes them
//!   with one `DeleteMessageBatch`, one call after the other; the framework
//!   runs a no-op handler on the in-memory store through `SqsSource`.
//!
//! `cargo bench --bench sqs --features sqs` (needs an SQS emulator:
//! `scripts/services sqs`; `SQS_ENDPOINT` names another). `BENCH_MESSAGES`
//! overrides the count (default 1000). moto answers in milliseconds, so
//! the figures measure the clients' overhead over an emulator, not SQS's
//! throughput.

use std::time::{Duration, Instant};

use consumer::sqs::aws_sdk_sqs;
use consumer::sqs::client::AwsSqs;
use consumer::sqs::{SqsClient, SqsPublisher, SqsSource, Topology};
use consumer::{Consumer, MemoryStore, Message, Outgoing, Publisher};

#[path = "throughput/mod.rs"]
mod throughput;

use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageAttributeValue, MessageSystemAttributeName,
    QueueAttributeName, SendMessageBatchRequestEntry,
};
use throughput::{Figure, KEYS, messages, noop};

/// FIFO groups: the messages' keys.
const GROUPS: usize = KEYS;

/// This process's CPU time (user + system), to the nanosecond.
fn cpu() -> Duration {
    cpu_time::ProcessTime::now().as_duration()
}

async fn raw_publish(client: &aws_sdk_sqs::Client, url: &str, msgs: &[Message]) -> Figure {
    // The same attributes the framework sends, built before the clock.
    let entries: Vec<SendMessageBatchRequestEntry> = msgs
        .iter()
        .map(|m| {
            let mut e = SendMessageBatchRequestEntry::builder()
                .message_body(String::from_utf8_lossy(&m.payload))
                .message_group_id(m.key.clone().unwrap_or_default())
                .message_deduplication_id(
                    m.headers.get("ce_id").ok().flatten().unwrap_or_default(),
                );
            for (k, v) in m.headers.iter() {
                e = e.message_attributes(
                    k,
                    MessageAttributeValue::builder()
                        .data_type("String")
                        .string_value(String::from_utf8_lossy(v))
                        .build()
                        .expect("attribute"),
                );
            }
            e
        })
        .map(|b| b.id("0").build().expect("entry"))
        .collect();
    let (t0, c0) = (Instant::now(), cpu());
    for publish in entries.chunks(GROUPS) {
        let mut calls = tokio::task::JoinSet::new();
        for call in publish.chunks(10) {
            let entries: Vec<_> = call
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let mut e = e.clone();
                    e.id = i.to_string();
                    e
                })
                .collect();
            let (client, url) = (client.clone(), url.to_owned());
            calls.spawn(async move {
                let out = client
                    .send_message_batch()
                    .queue_url(url)
                    .set_entries(Some(entries))
                    .send()
                    .await
                    .expect("send");
                assert!(out.failed().is_empty());
            });
        }
        while let Some(r) = calls.join_next().await {
            r.expect("join");
        }
    }
    Figure::measure(msgs.len(), t0.elapsed(), cpu() - c0)
}

async fn raw_consume(client: &aws_sdk_sqs::Client, url: &str, n: usize) -> Figure {
    let (t0, c0) = (Instant::now(), cpu());
    let mut got = 0;
    while got < n {
        let out = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .visibility_timeout(30)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .expect("receive");
        let entries: Vec<DeleteMessageBatchRequestEntry> = out
            .messages()
            .iter()
            .enumerate()
            .map(|(i, m)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .build()
                    .expect("entry")
            })
            .collect();
        if entries.is_empty() {
            continue;
        }
        got += entries.len();
        let out = client
            .delete_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .expect("delete");
        assert!(out.failed().is_empty());
    }
    Figure::measure(n, t0.elapsed(), cpu() - c0)
}

async fn framework_publish(client: SqsClient, queue: &str, msgs: &[Message]) -> Figure {
    let publisher = SqsPublisher::builder(client)
        .connect()
        .await
        .expect("publisher");
    let batch: Vec<Outgoing> = msgs
        .iter()
        .map(|m| Outgoing {
            destination: queue.to_owned(),
            message: m.clone(),
        })
        .collect();
    // Resolves the queue's URL before the clock.
    for r in publisher.publish(&batch[..1]).await {
        r.expect("warm-up");
    }
    let (t0, c0) = (Instant::now(), cpu());
    for chunk in batch[1..].chunks(GROUPS) {
        for r in publisher.publish(chunk).await {
            r.expect("publish");
        }
    }
    Figure::measure(msgs.len() - 1, t0.elapsed(), cpu() - c0)
}

async fn framework_consume(client: SqsClient, topology: Topology, n: usize) -> Figure {
    let source = SqsSource::builder(client, topology)
        .with_wait_time(Duration::from_secs(1))
        .connect()
        .await
        .expect("source");
    let (t0, c0) = (Instant::now(), cpu());
    let consumer = Consumer::new(source, MemoryStore::new(), noop).with_max_in_flight(256);
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    stats.wait_for(|s| s.processed as usize >= n).await;
    let f = Figure::measure(n, t0.elapsed(), cpu() - c0);
    let _ = stop.send(());
    run.await.expect("join").expect("consumer");
    f
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let endpoint = std::env::var("SQS_ENDPOINT")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL_SQS"))
        .unwrap_or_else(|_| "http://127.0.0.1:4566".to_owned());
    let n: usize = std::env::var("BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let aws = AwsSqs::local(&endpoint);
    let raw = aws.client().clone();
    let client = SqsClient::local(&endpoint);
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let raw_url = raw
        .create_queue()
        .queue_name(format!("bench-raw-{suffix}.fifo"))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!("no SQS emulator answers at {endpoint} ({e:?}): run `scripts/services sqs` (it starts moto there) or set SQS_ENDPOINT")
        })
        .queue_url()
        .unwrap_or_default()
        .to_owned();
    let topology = Topology::new(format!("bench-fw-{suffix}.fifo")).expect("name");
    let (fw_url, fw_dlq) = topology.declare(&client).await.expect("declare");
    let msgs = messages(n);

    println!(
        "SQS on moto at {endpoint}: {n} messages of 1 KiB in {GROUPS} FIFO groups, batches of 10\n"
    );
    println!("publishing ({GROUPS} messages a publish, one per group):");
    let raw_pub = raw_publish(&raw, &raw_url, &msgs).await;
    raw_pub.line("raw aws-sdk-sqs SendMessageBatch", None, "msg");
    let fw_pub = framework_publish(client.clone(), topology.queue().name(), &msgs).await;
    fw_pub.line("SqsPublisher (outbox relay path)", Some(&raw_pub), "msg");

    println!("\nconsuming (receive 10, delete in batches):");
    let raw_con = raw_consume(&raw, &raw_url, n).await;
    raw_con.line("raw receive + DeleteMessageBatch", None, "msg");
    let fw_con = framework_consume(client.clone(), topology.clone(), n).await;
    fw_con.line("framework, no-op handler", Some(&raw_con), "msg");

    for url in [raw_url, fw_url, fw_dlq] {
        let _ = raw.delete_queue().queue_url(url).send().await;
    }
}
