//! What the Kinesis tests share: moto's endpoint, a stream of the test's
//! own (deleted whatever the test does), its shards.

#![allow(dead_code, reason = "each test binary uses its own part of this")]

use std::time::{Duration, Instant};

use aws_sdk_kinesis::types::StreamStatus;
use consumer_kinesis::shards::ShardInfo;

/// How long moto gets to make a stream active or hand records back.
pub const DEADLINE: Duration = Duration::from_secs(30);

pub fn endpoint() -> String {
    std::env::var("KINESIS_ENDPOINT")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL_KINESIS"))
        .unwrap_or_else(|_| "http://127.0.0.1:4566".to_owned())
}

pub fn sdk() -> aws_sdk_kinesis::Client {
    let config = consumer_aws::local_config(endpoint(), "consumer-kinesis-tests");
    aws_sdk_kinesis::Client::new(&config)
}

/// A stream of the test's own, created with `shards` shards and active.
/// Fails with a sentence naming moto when Kinesis does not answer.
pub async fn create_stream(client: &aws_sdk_kinesis::Client, tag: &str, shards: i32) -> String {
    let name = format!(
        "ck-{tag}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let created = tokio::time::timeout(
        Duration::from_secs(10),
        client
            .create_stream()
            .stream_name(&name)
            .shard_count(shards)
            .send(),
    )
    .await;
    if !matches!(created, Ok(Ok(_))) {
        panic!(
            "no Kinesis emulator answers at {}: run `scripts/services sqs` (it starts moto, which serves Kinesis, there) or set KINESIS_ENDPOINT to a running Kinesis ({created:?})",
            endpoint()
        );
    }
    wait_active(client, &name).await;
    name
}

/// Polls `DescribeStreamSummary` until the stream is active.
pub async fn wait_active(client: &aws_sdk_kinesis::Client, stream: &str) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let summary = client
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await
            .expect("DescribeStreamSummary answers for a stream just created");
        let status = summary
            .stream_description_summary()
            .map(|s| s.stream_status().clone());
        if status == Some(StreamStatus::Active) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "stream {stream} not active after {DEADLINE:?}: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs `body` on a fresh stream, then deletes the stream whether the body
/// passed or panicked (and then panics with the body's panic).
pub async fn with_stream<F, Fut>(tag: &str, shards: i32, body: F)
where
    F: FnOnce(aws_sdk_kinesis::Client, String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let client = sdk();
    let stream = create_stream(&client, tag, shards).await;
    let outcome = tokio::spawn(body(client.clone(), stream.clone())).await;
    let _ = client
        .delete_stream()
        .stream_name(&stream)
        .enforce_consumer_deletion(true)
        .send()
        .await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// The shards of `stream`, as the shard graph reads them.
pub async fn list_shards(client: &aws_sdk_kinesis::Client, stream: &str) -> Vec<ShardInfo> {
    let out = client
        .list_shards()
        .stream_name(stream)
        .send()
        .await
        .expect("ListShards answers for an active stream");
    out.shards().iter().map(ShardInfo::from).collect()
}
