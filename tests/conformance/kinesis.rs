//! The conformance suite's broker on Kinesis: moto's server
//! (`KINESIS_ENDPOINT`, else `AWS_ENDPOINT_URL_KINESIS`, else
//! http://127.0.0.1:4566, where `scripts/services sqs` starts it). Each
//! topic is a stream of two shards with a dead-letter stream beside it,
//! under a name prefix of the harness's own; the streams are deleted when
//! the harness's last clone goes. Leases and checkpoints of a topic live in
//! one in-memory store shared by the sources a case starts, so a restart
//! goes on from the last checkpoint.
//!
//! Refusals for good are real: a dead-letter stream that does not exist
//! (`ResourceNotFoundException`). A dead-letter size limit is a publisher
//! wrapper's (Kinesis's own limit is 1 MiB a record).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use consumer::Message;
use consumer::error::BrokerErrorKind;
use consumer::kinesis::client::{AwsKinesis, IteratorStart, KinesisApi};
use consumer::kinesis::lease::{Checkpoint, LeaseStore, MemoryLeaseStore};
use consumer::kinesis::{KinesisClient, KinesisPublisher, KinesisSource, envelope};
use consumer::testing::{Faults, FaultyPublisher};
use consumer::{Outgoing, Publisher};

use super::broker::{BrokerHarness, SettleSettingsByTopic};

/// The Kinesis endpoint the tests use.
pub fn endpoint() -> String {
    std::env::var("KINESIS_ENDPOINT")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL_KINESIS"))
        .unwrap_or_else(|_| "http://127.0.0.1:4566".to_owned())
}

type Store = Arc<MemoryLeaseStore>;

/// Refuses dead letters whose record would be over `limit` bytes, as too
/// large, before the real publisher sees them.
#[derive(Clone)]
pub struct LimitedPublisher {
    inner: KinesisPublisher,
    limit: usize,
}

impl Publisher for LimitedPublisher {
    fn system(&self) -> &'static str {
        self.inner.system()
    }

    async fn publish(&self, batch: &[Outgoing]) -> Vec<Result<(), consumer::backend::Error>> {
        let size = |m: &Message| envelope::encode(m).map_or(usize::MAX, |d| d.len());
        if batch.iter().any(|o| size(&o.message) > self.limit) {
            // A dead letter is sent alone: the whole call is refused.
            return batch
                .iter()
                .map(|_| {
                    Err(consumer::backend::Error::broker(
                        BrokerErrorKind::TooLarge,
                        format!("over the test's limit of {} bytes", self.limit),
                        None,
                    ))
                })
                .collect();
        }
        self.inner.publish(batch).await
    }
}

/// Deletes the harness's streams when its last clone goes.
struct Streams {
    sdk: consumer::kinesis::aws_sdk_kinesis::Client,
    names: Mutex<HashSet<String>>,
}

impl Drop for Streams {
    fn drop(&mut self) {
        let names: Vec<String> = self.names.lock().expect("names").drain().collect();
        let sdk = self.sdk.clone();
        // The case's runtime may be gone: a thread with a runtime of its own.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                for name in names {
                    let _ = sdk.delete_stream().stream_name(name).send().await;
                }
            });
        })
        .join();
    }
}

/// Kinesis as a `BrokerHarness`; see the module docs.
#[derive(Clone)]
pub struct KinesisBroker {
    prefix: String,
    api: Arc<AwsKinesis>,
    publisher: FaultyPublisher<KinesisPublisher>,
    faults: Faults,
    stores: Arc<Mutex<HashMap<String, Store>>>,
    streams: Arc<Streams>,
    settle: SettleSettingsByTopic,
}

impl KinesisBroker {
    /// The stream of `topic`.
    pub fn stream(&self, topic: &str) -> String {
        format!("{}-{topic}", self.prefix)
    }

    /// The dead-letter stream of `topic`.
    pub fn dead_letter_stream(&self, topic: &str) -> String {
        format!("{}-{topic}-dlq", self.prefix)
    }

    fn client(&self) -> KinesisClient {
        KinesisClient::from_api(Arc::clone(&self.api) as Arc<dyn KinesisApi>)
    }

    fn store(&self, topic: &str) -> Store {
        Arc::clone(
            self.stores
                .lock()
                .expect("stores")
                .entry(topic.to_owned())
                .or_default(),
        )
    }

    /// Creates `name` with `shards` shards and waits until it is active;
    /// fails with a sentence naming moto when Kinesis does not answer.
    async fn create(&self, name: &str, shards: i32) {
        if !self
            .streams
            .names
            .lock()
            .expect("names")
            .insert(name.to_owned())
        {
            return;
        }
        let sdk = &self.streams.sdk;
        let created = tokio::time::timeout(
            Duration::from_secs(10),
            sdk.create_stream()
                .stream_name(name)
                .shard_count(shards)
                .send(),
        )
        .await;
        if !matches!(created, Ok(Ok(_))) {
            panic!(
                "no Kinesis emulator answers at {}: run `scripts/services sqs` (it starts moto, which serves Kinesis) or set KINESIS_ENDPOINT ({created:?})",
                endpoint()
            );
        }
        for _ in 0..600 {
            let summary = sdk.describe_stream_summary().stream_name(name).send().await;
            let active =
                summary.ok().and_then(|s| {
                    s.stream_description_summary()
                        .map(|d| d.stream_status().clone())
                }) == Some(consumer::kinesis::aws_sdk_kinesis::types::StreamStatus::Active);
            if active {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("stream {name} not active after 30 s");
    }

    /// Every record of `stream` from `start` on each shard (`start` of a
    /// shard: after its checkpoint), decoded.
    async fn records(&self, stream: &str, checkpoints: Option<&Store>) -> Vec<Message> {
        let api = &self.api;
        let Ok(shards) = api.list_shards(stream).await else {
            return Vec::new();
        };
        let mut all = Vec::new();
        for shard in shards {
            let checkpoint = match checkpoints {
                Some(store) => store.checkpoint_of(&shard.id).await.unwrap_or_default(),
                None => None,
            };
            let start = match checkpoint {
                Some(Checkpoint::At(seq)) => IteratorStart::AfterSequence(seq),
                Some(Checkpoint::ShardEnd) => continue,
                None => IteratorStart::TrimHorizon,
            };
            let mut iterator = api.shard_iterator(stream, &shard.id, &start).await.ok();
            while let Some(it) = iterator.take() {
                let Ok(page) = api.get_records(&it, 10_000).await else {
                    break;
                };
                if page.records.is_empty() {
                    break;
                }
                for r in &page.records {
                    if let Ok(m) = envelope::decode(&r.data, &r.partition_key) {
                        all.push(m);
                    }
                }
                iterator = page.next_iterator;
            }
        }
        all
    }
}

impl BrokerHarness for KinesisBroker {
    type Inner = KinesisSource<Store>;
    type Publisher = KinesisPublisher;

    async fn new(_partitions: usize) -> Self {
        let api = Arc::new(AwsKinesis::local(endpoint()));
        let faults = Faults::new();
        let client = KinesisClient::from_api(Arc::clone(&api) as Arc<dyn KinesisApi>);
        let publisher = KinesisPublisher::builder(client).build();
        let id = uuid::Uuid::new_v4().simple().to_string();
        Self {
            prefix: format!("ck-{}", &id[..12]),
            streams: Arc::new(Streams {
                sdk: api.client().clone(),
                names: Mutex::default(),
            }),
            api,
            publisher: FaultyPublisher::new(publisher, faults.clone()),
            faults,
            stores: Arc::default(),
            settle: SettleSettingsByTopic::default(),
        }
    }

    fn faults(&self) -> &Faults {
        &self.faults
    }

    fn publisher(&self) -> &FaultyPublisher<KinesisPublisher> {
        &self.publisher
    }

    async fn prepare(&self, topic: &str) {
        self.create(&self.stream(topic), 2).await;
        if !self.settle.get(topic).no_dead_letter_destination {
            self.create(&self.dead_letter_stream(topic), 1).await;
        }
    }

    fn publish_destination(&self, topic: &str) -> String {
        self.stream(topic)
    }

    fn destination(&self, topic: &str) -> String {
        self.stream(topic)
    }

    async fn connect(&self, topic: &str) -> Result<KinesisSource<Store>, consumer::backend::Error> {
        self.prepare(topic).await;
        let settings = self.settle.get(topic);
        let owner = uuid::Uuid::new_v4().simple().to_string();
        let builder = KinesisSource::builder(self.client(), self.stream(topic), self.store(topic))
            .with_owner(owner)
            .with_lease_duration(Duration::from_secs(3))
            .with_poll_interval(Duration::from_millis(200))
            .with_checkpoint_interval(Duration::from_millis(50));
        // A stream never created: Kinesis refuses for good.
        let dead_letters = if settings.no_dead_letter_destination {
            format!("{}-gone", self.dead_letter_stream(topic))
        } else {
            self.dead_letter_stream(topic)
        };
        let inner = KinesisPublisher::builder(self.client()).build();
        let limit = settings.max_dead_letter_bytes.unwrap_or(usize::MAX);
        let builder =
            builder.with_dead_letter_publisher(LimitedPublisher { inner, limit }, dead_letters);
        Ok(builder.connect().await?)
    }

    /// Kinesis has no "drained" event: this polls until every record of the
    /// stream is behind its shard's checkpoint, on three readings in a row.
    async fn wait_drained(&self, topic: &str) {
        let mut zero_readings = 0;
        while zero_readings < 3 {
            if self.depth(topic).await == 0 {
                zero_readings += 1;
            } else {
                zero_readings = 0;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn dead_letters(&self, topic: &str) -> Vec<Message> {
        if self.settle.get(topic).no_dead_letter_destination {
            return Vec::new();
        }
        self.records(&self.dead_letter_stream(topic), None).await
    }

    async fn depth(&self, topic: &str) -> usize {
        let store = self.store(topic);
        self.records(&self.stream(topic), Some(&store)).await.len()
    }

    fn limit_dead_letter_bytes(&self, topic: &str, bytes: usize) {
        self.settle.limit_dead_letter_bytes(topic, bytes);
    }

    fn remove_dead_letter_destination(&self, topic: &str) {
        self.settle.remove_dead_letter_destination(topic);
    }

    fn remove_retry_destination(&self, topic: &str) {
        // Kinesis retries in place only; the cases that need a retry
        // destination do not run on it.
        self.settle.remove_retry_destination(topic);
    }
}
