//! A [`KinesisSource`] whose leases and checkpoints are in PostgreSQL
//! (needs PostgreSQL: `DATABASE_URL`, and moto's Kinesis: `scripts/services
//! postgres sqs`; `KINESIS_ENDPOINT` names another Kinesis): an instance
//! that crashes (dropped without closing) leaves its lease to expire and
//! its checkpoint in the database, and the next instance, on a pool of its
//! own, goes on from it without reading a settled record again.

use std::sync::Arc;
use std::time::Duration;

use consumer_backend::{Acker, Envelope, Message, Outgoing, Publisher, Source};
use consumer_core::testing::FreshSchema;
use consumer_kinesis::client::AwsKinesis;
use consumer_kinesis::lease::{Checkpoint, LeaseStore};
use consumer_kinesis::{KinesisAcker, KinesisClient, KinesisPublisher, KinesisSource};
use consumer_kinesis_store::SqlLeaseStore;
use sqlx::Postgres;

const DEADLINE: Duration = Duration::from_secs(30);

fn endpoint() -> String {
    std::env::var("KINESIS_ENDPOINT")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL_KINESIS"))
        .unwrap_or_else(|_| "http://127.0.0.1:4566".to_owned())
}

/// A one-shard stream of the test's own, active.
async fn create_stream(sdk: &consumer_kinesis::aws_sdk_kinesis::Client) -> String {
    let name = format!(
        "ck-sql-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let created = tokio::time::timeout(
        Duration::from_secs(10),
        sdk.create_stream().stream_name(&name).shard_count(1).send(),
    )
    .await;
    assert!(
        matches!(created, Ok(Ok(_))),
        "no Kinesis emulator answers at {}: run `scripts/services sqs` (it starts moto, which serves Kinesis) or set KINESIS_ENDPOINT ({created:?})",
        endpoint()
    );
    for _ in 0..600 {
        let active = sdk
            .describe_stream_summary()
            .stream_name(&name)
            .send()
            .await
            .ok()
            .and_then(|s| {
                s.stream_description_summary()
                    .map(|d| d.stream_status().clone())
            })
            == Some(consumer_kinesis::aws_sdk_kinesis::types::StreamStatus::Active);
        if active {
            return name;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("stream {name} not active after 30 s");
}

async fn publish(stream: &str, from: u64, to: u64) {
    let batch: Vec<Outgoing> = (from..to)
        .map(|n| Outgoing {
            destination: stream.to_owned(),
            message: Message::json("OrderChanged", &serde_json::json!({"n": n}))
                .expect("JSON")
                .with_key("order-1"),
        })
        .collect();
    let publisher = KinesisPublisher::builder(KinesisClient::local(endpoint())).build();
    let results = publisher.publish(&batch).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

async fn source(
    schema: &FreshSchema,
    stream: &str,
    owner: &str,
) -> KinesisSource<SqlLeaseStore<Postgres>> {
    let pool = FreshSchema::pool_on(&schema.schema, 2)
        .await
        .expect("a pool on the test schema");
    let store = SqlLeaseStore::new(pool, "billing", stream);
    store.migrate().await.expect("migrations");
    KinesisSource::builder(KinesisClient::local(endpoint()), stream, store)
        .with_owner(owner)
        .with_lease_duration(Duration::from_secs(2))
        .with_poll_interval(Duration::from_millis(200))
        .with_checkpoint_interval(Duration::from_millis(50))
        .connect()
        .await
        .expect("a source")
}

async fn recv_n<S: LeaseStore>(
    source: &mut KinesisSource<S>,
    n: usize,
) -> Vec<(Arc<Envelope>, KinesisAcker)> {
    let mut got = Vec::new();
    while got.len() < n {
        let next = tokio::time::timeout(DEADLINE, source.recv())
            .await
            .unwrap_or_else(|_| panic!("{} of {n} records within {DEADLINE:?}", got.len()))
            .expect("recv")
            .expect("open");
        got.push(next);
    }
    got
}

fn n_of(e: &Envelope) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(&e.payload).expect("JSON");
    v["n"].as_u64().expect("an n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_checkpoints_carry_a_stream_across_a_crashed_instance() {
    let schema = FreshSchema::create("ct_kinesis", 2)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let sdk = AwsKinesis::local(endpoint()).client().clone();
    let stream = create_stream(&sdk).await;
    publish(&stream, 0, 10).await;

    let mut first = source(&schema, &stream, "a").await;
    let got = recv_n(&mut first, 10).await;
    let last = got[6]
        .0
        .origin
        .position
        .rsplit('/')
        .next()
        .map(str::to_owned);
    // 0..7 settle; 7, 8 and 9 do not, and the instance crashes.
    for (_, acker) in got.into_iter().take(7) {
        acker.ack().await.expect("ack");
    }
    let store = SqlLeaseStore::new(schema.pool.clone(), "billing", stream.as_str());
    let want = last.map(Checkpoint::At);
    let deadline = std::time::Instant::now() + DEADLINE;
    while store
        .checkpoint_of("shardId-000000000000")
        .await
        .expect("read")
        != want
    {
        assert!(
            std::time::Instant::now() < deadline,
            "checkpoint at the 7th record"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(first);

    let mut second = source(&schema, &stream, "b").await;
    let again = recv_n(&mut second, 3).await;
    let ns: Vec<u64> = again.iter().map(|(e, _)| n_of(e)).collect();
    assert_eq!(ns, [7, 8, 9], "from the checkpoint, once the lease expired");
    for (_, acker) in again {
        acker.ack().await.expect("ack");
    }
    second.close().await;
    let leases = store.leases().await.expect("read");
    assert!(leases.iter().all(|l| l.owner.is_none()), "{leases:?}");
    let _ = sdk.delete_stream().stream_name(&stream).send().await;
    schema.drop_schema().await.expect("drop the test schema");
}
