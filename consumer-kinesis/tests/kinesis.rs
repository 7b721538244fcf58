//! What only a Kinesis stream shows (needs moto's Kinesis: `scripts/services
//! sqs` starts moto on 127.0.0.1:4566; `KINESIS_ENDPOINT` or
//! `AWS_ENDPOINT_URL_KINESIS` names another): records published with
//! [`KinesisPublisher`] and read back with the raw SDK in per-key order with
//! their envelope, partial `PutRecords` failures injected around the real
//! client (moto never refuses a record), a plain producer's record read
//! with its partition key as key, and a split whose children wait for their
//! parent. Each test works on a stream of its own and deletes it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::ShardIteratorType;
use consumer_backend::{Message, Outgoing, Publisher, RetryPolicy, names};
use consumer_kinesis::client::{
    ApiFuture, AwsKinesis, IteratorStart, KinesisApi, PutEntry, PutOutcome, RecordsPage,
};
use consumer_kinesis::shards::{self, Readiness, ShardInfo};
use consumer_kinesis::{KinesisClient, KinesisPublisher, envelope};

mod common;
use common::{DEADLINE, list_shards, wait_active, with_stream};

const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// Every record of `stream` decoded, shard after shard, each shard read
/// until `GetRecords` is caught up (no record, 0 ms behind latest) or
/// closed.
async fn read_all(client: &aws_sdk_kinesis::Client, stream: &str) -> Vec<Message> {
    let deadline = Instant::now() + DEADLINE;
    let mut read = Vec::new();
    for shard in list_shards(client, stream).await {
        let mut iterator = client
            .get_shard_iterator()
            .stream_name(stream)
            .shard_id(&shard.id)
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .expect("GetShardIterator answers for a listed shard")
            .shard_iterator()
            .map(str::to_owned);
        while let Some(it) = iterator.take() {
            assert!(
                Instant::now() < deadline,
                "shard {} of {stream} not read to its end after {DEADLINE:?}",
                shard.id
            );
            let out = client
                .get_records()
                .shard_iterator(it)
                .send()
                .await
                .expect("GetRecords answers with a fresh iterator");
            for r in out.records() {
                read.push(
                    envelope::decode(r.data().as_ref(), r.partition_key())
                        .expect("every record of the test decodes"),
                );
            }
            let caught_up = out.records().is_empty() && out.millis_behind_latest() == Some(0);
            if !caught_up {
                iterator = out.next_shard_iterator().map(str::to_owned);
            }
        }
    }
    read
}

fn orders(keys: &[&str], per_key: usize, stream: &str) -> Vec<Outgoing> {
    (0..per_key)
        .flat_map(|n| {
            keys.iter().map(move |k| Outgoing {
                destination: stream.to_owned(),
                message: Message::json("OrderChanged", &serde_json::json!({"key": k, "n": n}))
                    .expect("a JSON value serialises")
                    .with_key(*k)
                    .with_header(names::TRACEPARENT, TRACEPARENT),
            })
        })
        .collect()
}

/// The `n` of each record of `key`, in the order read.
fn sequence_of(read: &[Message], key: &str) -> Vec<u64> {
    read.iter()
        .filter(|m| m.key.as_deref() == Some(key))
        .map(|m| {
            let v: serde_json::Value =
                serde_json::from_slice(&m.payload).expect("the payloads are JSON");
            v["n"].as_u64().expect("every payload has an n")
        })
        .collect()
}

#[tokio::test]
async fn kinesis_published_records_come_back_in_key_order_with_their_envelope() {
    with_stream("order", 2, |client, stream| async move {
        let keys = ["order-1", "order-2", "order-3", "order-4", "order-5"];
        let batch = orders(&keys, 8, &stream);
        let publisher = KinesisPublisher::builder(KinesisClient::from_sdk(client.clone())).build();
        let results = publisher.publish(&batch).await;
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        let read = read_all(&client, &stream).await;
        assert_eq!(read.len(), batch.len());
        for key in keys {
            assert_eq!(sequence_of(&read, key), (0..8).collect::<Vec<_>>(), "{key}");
        }
        let first = &read[0];
        let header = |name| first.headers.get(name).ok().flatten();
        assert_eq!(header(names::TYPE), Some("OrderChanged"));
        assert_eq!(header(names::SPEC_VERSION), Some("1.0"));
        assert_eq!(
            header(names::SOURCE),
            Some(consumer_backend::DEFAULT_SOURCE)
        );
        assert!(header(names::ID).is_some_and(|id| !id.is_empty()));
        assert_eq!(header(names::TRACEPARENT), Some(TRACEPARENT));
    })
    .await;
}

/// The real client, except that the records whose payload is listed are
/// refused (not sent) as throttled, each as often as listed.
struct Throttling {
    real: AwsKinesis,
    refuse: Mutex<HashMap<Vec<u8>, u32>>,
    refused: AtomicU32,
}

impl KinesisApi for Throttling {
    fn put_records<'a>(
        &'a self,
        stream: &'a str,
        entries: Vec<PutEntry>,
    ) -> ApiFuture<'a, Vec<PutOutcome>> {
        Box::pin(async move {
            let mut through = Vec::new();
            let mut plan = Vec::new();
            {
                let mut refuse = self.refuse.lock().unwrap_or_else(PoisonError::into_inner);
                for e in entries {
                    let payload = envelope::decode(&e.data, &e.partition_key)
                        .expect("the publisher's records decode")
                        .payload
                        .to_vec();
                    match refuse.get_mut(&payload) {
                        Some(left) if *left > 0 => {
                            *left -= 1;
                            plan.push(false);
                        }
                        _ => {
                            plan.push(true);
                            through.push(e);
                        }
                    }
                }
            }
            let mut stored = self.real.put_records(stream, through).await?.into_iter();
            Ok(plan
                .into_iter()
                .map(|sent| match sent {
                    true => stored.next().unwrap_or(PutOutcome::Failed {
                        code: "InternalFailure".to_owned(),
                        message: "missing".to_owned(),
                    }),
                    false => {
                        self.refused.fetch_add(1, Ordering::Relaxed);
                        PutOutcome::Failed {
                            code: "ProvisionedThroughputExceededException".to_owned(),
                            message: "Rate exceeded for shard (injected)".to_owned(),
                        }
                    }
                })
                .collect())
        })
    }

    fn list_shards<'a>(&'a self, stream: &'a str) -> ApiFuture<'a, Vec<shards::ShardInfo>> {
        self.real.list_shards(stream)
    }

    fn shard_iterator<'a>(
        &'a self,
        stream: &'a str,
        shard_id: &'a str,
        start: &'a IteratorStart,
    ) -> ApiFuture<'a, String> {
        self.real.shard_iterator(stream, shard_id, start)
    }

    fn get_records<'a>(&'a self, iterator: &'a str, limit: i32) -> ApiFuture<'a, RecordsPage> {
        self.real.get_records(iterator, limit)
    }
}

#[tokio::test]
async fn kinesis_partial_put_records_failures_keep_each_keys_order() {
    with_stream("partial", 2, |client, stream| async move {
        let keys = ["a", "b", "c", "d"];
        let batch = orders(&keys, 6, &stream);
        let mut refuse = HashMap::new();
        // Throttle some early and middle records of three keys, more than
        // once: their later records must wait.
        for (i, out) in batch.iter().enumerate() {
            if matches!(i % 7, 0 | 3) {
                refuse.insert(out.message.payload.to_vec(), 1 + (i % 3) as u32);
            }
        }
        let api = Arc::new(Throttling {
            real: AwsKinesis::new(client.clone()),
            refuse: Mutex::new(refuse),
            refused: AtomicU32::new(0),
        });
        let publisher = KinesisPublisher::builder(KinesisClient::from_api(api.clone()))
            .with_record_retry(RetryPolicy::exponential(
                Duration::from_millis(1),
                Duration::from_millis(20),
                10,
            ))
            .build();
        let results = publisher.publish(&batch).await;
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        assert!(
            api.refused.load(Ordering::Relaxed) >= 8,
            "the faults were injected"
        );
        let read = read_all(&client, &stream).await;
        assert_eq!(read.len(), batch.len(), "each record stored once");
        for key in keys {
            assert_eq!(sequence_of(&read, key), (0..6).collect::<Vec<_>>(), "{key}");
        }
    })
    .await;
}

#[tokio::test]
async fn kinesis_a_plain_producers_record_is_read_with_its_partition_key_as_key() {
    with_stream("plain", 1, |client, stream| async move {
        // As the standard's producer: put_record(Data=json, PartitionKey=aggregate_id).
        let data = br#"{"order_id":"o-42","status":"placed"}"#;
        client
            .put_record()
            .stream_name(&stream)
            .partition_key("o-42")
            .data(Blob::new(&data[..]))
            .send()
            .await
            .expect("PutRecord answers for an active stream");
        let read = read_all(&client, &stream).await;
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].key.as_deref(), Some("o-42"));
        assert!(read[0].headers.is_empty());
        assert_eq!(&read[0].payload[..], data);
    })
    .await;
}

#[tokio::test]
async fn kinesis_after_a_split_the_children_wait_for_the_parent() {
    with_stream("split", 1, |client, stream| async move {
        let parent = list_shards(&client, &stream).await.remove(0).id;
        client
            .split_shard()
            .stream_name(&stream)
            .shard_to_split(&parent)
            .new_starting_hash_key("170141183460469231731687303715884105728")
            .send()
            .await
            .expect("SplitShard answers for an active stream's open shard");
        wait_active(&client, &stream).await;
        let listed = list_shards(&client, &stream).await;
        assert_eq!(listed.len(), 3, "the parent and two children: {listed:?}");
        let closed = listed
            .iter()
            .find(|s| s.id == parent)
            .expect("the parent is listed");
        assert!(
            closed.is_closed(),
            "the parent has an ending sequence number"
        );
        let children: Vec<&ShardInfo> = listed.iter().filter(|s| s.id != parent).collect();
        assert!(
            children
                .iter()
                .all(|c| c.parent.as_deref() == Some(parent.as_str()))
        );

        let before = shards::readiness(&listed, |_| false);
        for (id, state) in &before {
            let expected = if *id == parent {
                Readiness::Read
            } else {
                Readiness::Wait {
                    parents: vec![parent.clone()],
                }
            };
            assert_eq!(*state, expected, "{id}");
        }
        let after = shards::readable(&listed, |id| id == parent);
        let mut child_ids: Vec<String> = children.iter().map(|c| c.id.clone()).collect();
        child_ids.sort();
        let mut after_sorted = after.clone();
        after_sorted.sort();
        assert_eq!(
            after_sorted, child_ids,
            "children once the parent is finished"
        );
    })
    .await;
}
