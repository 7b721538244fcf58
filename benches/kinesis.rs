//! Kinesis throughput against moto: the framework against a raw
//! `aws-sdk-kinesis` loop doing the same batching, on streams of the same
//! shape (2 shards), the same records (1 KiB JSON in the framework's
//! envelope, 64 partition keys). Prints records/s and client CPU time per
//! record for each, and the ratios to the raw baseline.
//!
//! * publishing: `PutRecords` of 500 records, one call after the other;
//!   the framework's `KinesisPublisher` gets the same 500 a publish (it keeps
//!   a key's order across partial failures, which moto never produces).
//! * consuming: the raw loop reads each shard from its start with
//!   `GetRecords` (up to 10 000 a call, a task per shard, a pause of the
//!   poll interval when a page comes back empty) and keeps each shard's
//!   last sequence number as its checkpoint; the framework runs a no-op
//!   handler on the in-memory store through `KinesisSource` (leases and
//!   checkpoints in a `MemoryLeaseStore`, a checkpoint written every
//!   second), with its default bound of unsettled records per shard and
//!   again with room for a whole call (10 000), the second time reading
//!   the same stream from its start.
//!
//! `cargo bench --bench kinesis --features kinesis` (needs a Kinesis
//! emulator: `scripts/services sqs` starts moto, which serves both;
//! `KINESIS_ENDPOINT` names another). `BENCH_MESSAGES` overrides the count
//! (default 5000). moto answers in milliseconds, so the figures measure the
//! clients' overhead over an emulator, not Kinesis's throughput.

use std::time::{Duration, Instant};

use consumer::kinesis::aws_sdk_kinesis;
use consumer::kinesis::client::AwsKinesis;
use consumer::kinesis::lease::MemoryLeaseStore;
use consumer::kinesis::{KinesisClient, KinesisPublisher, KinesisSource, envelope};
use consumer::{Consumer, MemoryStore, Message, Outgoing, Publisher};

#[path = "throughput/mod.rs"]
mod throughput;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, ShardIteratorType, StreamStatus};
use throughput::{Figure, KEYS, messages, noop};

const SHARDS: i32 = 2;
const PUT_BATCH: usize = 500;
const POLL: Duration = Duration::from_millis(200);

/// This process's CPU time (user + system), to the nanosecond.
fn cpu() -> Duration {
    cpu_time::ProcessTime::now().as_duration()
}

/// Creates `stream` and waits until moto says it is active.
async fn create_stream(sdk: &aws_sdk_kinesis::Client, stream: &str, endpoint: &str) {
    sdk.create_stream()
        .stream_name(stream)
        .shard_count(SHARDS)
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!("no Kinesis emulator answers at {endpoint} ({e:?}): run `scripts/services sqs` (it starts moto there) or set KINESIS_ENDPOINT")
        });
    loop {
        let summary = sdk
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await
            .expect("describe");
        let status = summary
            .stream_description_summary()
            .map(|s| s.stream_status().clone());
        if status == Some(StreamStatus::Active) {
            return;
        }
        // Stream creation has no event to await.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn raw_publish(sdk: &aws_sdk_kinesis::Client, stream: &str, msgs: &[Message]) -> Figure {
    // The same bytes and partition keys the framework sends, built before
    // the clock.
    let entries: Vec<PutRecordsRequestEntry> = msgs
        .iter()
        .map(|m| {
            PutRecordsRequestEntry::builder()
                .data(Blob::new(envelope::encode(m).expect("envelope")))
                .partition_key(envelope::partition_key(
                    m.key.as_deref().unwrap_or_default(),
                ))
                .build()
                .expect("entry")
        })
        .collect();
    let (t0, c0) = (Instant::now(), cpu());
    for call in entries.chunks(PUT_BATCH) {
        let out = sdk
            .put_records()
            .stream_name(stream)
            .set_records(Some(call.to_vec()))
            .send()
            .await
            .expect("put_records");
        assert_eq!(out.failed_record_count(), Some(0));
    }
    Figure::measure(msgs.len(), t0.elapsed(), cpu() - c0)
}

async fn framework_publish(client: KinesisClient, stream: &str, msgs: &[Message]) -> Figure {
    let publisher = KinesisPublisher::builder(client).build();
    let batch: Vec<Outgoing> = msgs
        .iter()
        .map(|m| Outgoing {
            destination: stream.to_owned(),
            message: m.clone(),
        })
        .collect();
    let (t0, c0) = (Instant::now(), cpu());
    for chunk in batch.chunks(PUT_BATCH) {
        for r in publisher.publish(chunk).await {
            r.expect("publish");
        }
    }
    Figure::measure(msgs.len(), t0.elapsed(), cpu() - c0)
}

/// Reads one shard from its start until `stop` says every record arrived;
/// the records it read, and its last sequence number (its checkpoint).
async fn raw_read_shard(
    sdk: aws_sdk_kinesis::Client,
    stream: String,
    shard: String,
    total: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    n: usize,
) -> (usize, Option<String>) {
    use std::sync::atomic::Ordering;
    let mut iterator = sdk
        .get_shard_iterator()
        .stream_name(&stream)
        .shard_id(&shard)
        .shard_iterator_type(ShardIteratorType::TrimHorizon)
        .send()
        .await
        .expect("iterator")
        .shard_iterator
        .expect("an iterator");
    let (mut read, mut checkpoint) = (0, None);
    while total.load(Ordering::Acquire) < n {
        let page = sdk
            .get_records()
            .shard_iterator(&iterator)
            .limit(10_000)
            .send()
            .await
            .expect("get_records");
        let records = page.records();
        if records.is_empty() {
            // The poll interval, as a caught-up reader of the framework waits.
            tokio::time::sleep(POLL).await;
        } else {
            for r in records {
                // Decoded as the framework decodes each record.
                let _ = envelope::decode(r.data().as_ref(), r.partition_key());
            }
            read += records.len();
            total.fetch_add(records.len(), Ordering::AcqRel);
            checkpoint = records.last().map(|r| r.sequence_number().to_owned());
        }
        match page.next_shard_iterator {
            Some(next) => iterator = next,
            None => break,
        }
    }
    (read, checkpoint)
}

async fn raw_consume(sdk: &aws_sdk_kinesis::Client, stream: &str, n: usize) -> Figure {
    let shards: Vec<String> = sdk
        .list_shards()
        .stream_name(stream)
        .send()
        .await
        .expect("list_shards")
        .shards()
        .iter()
        .map(|s| s.shard_id().to_owned())
        .collect();
    let total = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (t0, c0) = (Instant::now(), cpu());
    let mut readers = tokio::task::JoinSet::new();
    for shard in shards {
        readers.spawn(raw_read_shard(
            sdk.clone(),
            stream.to_owned(),
            shard.clone(),
            std::sync::Arc::clone(&total),
            n,
        ));
    }
    let mut read = 0;
    while let Some(r) = readers.join_next().await {
        let (shard_read, checkpoint) = r.expect("join");
        assert!(
            shard_read == 0 || checkpoint.is_some(),
            "a shard read has a checkpoint"
        );
        read += shard_read;
    }
    assert!(read >= n, "every record read: {read} of {n}");
    Figure::measure(n, t0.elapsed(), cpu() - c0)
}

/// The framework reads `stream` from its start (a fresh lease store), with
/// `bound` records unsettled per shard at most (the default when `None`).
async fn framework_consume(
    client: KinesisClient,
    stream: &str,
    n: usize,
    bound: Option<usize>,
) -> Figure {
    let (t0, c0) = (Instant::now(), cpu());
    let mut builder =
        KinesisSource::builder(client, stream, MemoryLeaseStore::new()).with_poll_interval(POLL);
    if let Some(bound) = bound {
        builder = builder.with_max_unsettled_per_shard(bound);
    }
    let source = builder.connect().await.expect("source");
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
    let endpoint = std::env::var("KINESIS_ENDPOINT")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL_KINESIS"))
        .unwrap_or_else(|_| "http://127.0.0.1:4566".to_owned());
    let n: usize = std::env::var("BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let aws = AwsKinesis::local(&endpoint);
    let sdk = aws.client().clone();
    let client = KinesisClient::from_sdk(sdk.clone());
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let (raw_stream, fw_stream) = (format!("bench-raw-{suffix}"), format!("bench-fw-{suffix}"));
    create_stream(&sdk, &raw_stream, &endpoint).await;
    create_stream(&sdk, &fw_stream, &endpoint).await;
    let msgs = messages(n);

    println!(
        "Kinesis on moto at {endpoint}: {n} records of 1 KiB, {KEYS} partition keys, {SHARDS} shards\n"
    );
    println!("publishing (PutRecords of {PUT_BATCH}):");
    let raw_pub = raw_publish(&sdk, &raw_stream, &msgs).await;
    raw_pub.line("raw aws-sdk-kinesis PutRecords", None, "rec");
    let fw_pub = framework_publish(client.clone(), &fw_stream, &msgs).await;
    fw_pub.line(
        "KinesisPublisher (outbox relay path)",
        Some(&raw_pub),
        "rec",
    );

    println!("\nconsuming (GetRecords per shard, checkpoints):");
    let raw_con = raw_consume(&sdk, &raw_stream, n).await;
    raw_con.line("raw GetRecords loop", None, "rec");
    let fw_con = framework_consume(client.clone(), &fw_stream, n, None).await;
    fw_con.line("framework, no-op handler", Some(&raw_con), "rec");
    // The same stream read again from its start, with room for a whole
    // call: Kinesis allows five calls a second per shard, so a bound of B
    // reads at most 5 B records a second per shard, and the raw loop (which
    // asks for 10 000 a call, paced only by moto) has no bound.
    let wide = framework_consume(client, &fw_stream, n, Some(10_000)).await;
    wide.line(
        "framework, 10 000 unsettled per shard",
        Some(&raw_con),
        "rec",
    );

    for stream in [raw_stream, fw_stream] {
        let _ = sdk.delete_stream().stream_name(stream).send().await;
    }
}
