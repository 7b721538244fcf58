//! The conformance suite's broker on a partitioned RabbitMQ queue: every
//! topic is a logical queue of two partition queues, consumed by a
//! [`PartitionedSource`]; the tests publish to the logical queue and the
//! publisher places each key on its partition.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use consumer::amqp::{AmqpPublisher, AmqpStats, PartitionedSource, PartitionedTopology, QueueType};
use consumer::testing::{Faults, FaultyPublisher};
use consumer::{Message, Outgoing, Publisher};

use super::amqp::{amqp_url, connect, delete_queues, read_in_place, ready_messages, unique_prefix};
use super::broker::{BrokerHarness, SettleSettingsByTopic};
use super::support;

/// Partitions of every topic.
const PARTITIONS: u32 = 2;

/// Publishes to the logical queue of a topic through a publisher that
/// knows its partitions (one per topic, made on first use).
#[derive(Clone, Default)]
pub struct TopicPublishers {
    by_queue: Arc<Mutex<HashMap<String, AmqpPublisher>>>,
}

impl TopicPublishers {
    fn get(&self, queue: &str) -> AmqpPublisher {
        self.by_queue
            .lock()
            .expect("publishers")
            .entry(queue.to_owned())
            .or_insert_with(|| {
                AmqpPublisher::builder(amqp_url())
                    .with_partitions(partitioned(queue))
                    .build()
            })
            .clone()
    }
}

impl Publisher for TopicPublishers {
    fn system(&self) -> &'static str {
        "rabbitmq"
    }

    async fn publish(&self, batch: &[Outgoing]) -> Vec<Result<(), consumer::backend::Error>> {
        let mut results = Vec::with_capacity(batch.len());
        for out in batch {
            let queue = out.destination.trim_start_matches('/');
            results.extend(self.get(queue).publish(std::slice::from_ref(out)).await);
        }
        results
    }
}

/// The partitioned topology of the suite's queue `queue`: classic queues.
/// What the suite checks (settling, dedup, order through a
/// `PartitionedSource`) does not depend on the queue type, and the quorum
/// queues' own rules have a suite of their own (`tests/amqp_quorum.rs`).
/// Each topic here is 13 queues; as quorum queues (a Raft cluster each) on
/// the single RabbitMQ 3.10.8 node the suite took over 10 minutes instead of
/// 50 s, and several cases ran into their 60 s limit, with the source of
/// before quorum became the default too (each case alone passes in seconds).
/// Quorum partition queues, the default, are what `tests/amqp_partitions.rs`
/// and `tests/amqp_churn.rs` run on.
fn partitioned(queue: &str) -> PartitionedTopology {
    PartitionedTopology::new(queue, PARTITIONS)
        .expect("valid test queue name")
        .with_queue_type(QueueType::Classic)
        .with_max_retry_delay(Duration::from_millis(256))
        .with_expires(Duration::from_secs(600))
}

/// RabbitMQ with partitioned queues as a `BrokerHarness`.
#[derive(Clone)]
pub struct AmqpPartitionedBroker {
    prefix: String,
    publisher: FaultyPublisher<TopicPublishers>,
    faults: Faults,
    declared: Arc<Mutex<HashSet<String>>>,
    metrics: Arc<Mutex<HashMap<String, AmqpStats>>>,
    settle: SettleSettingsByTopic,
}

impl AmqpPartitionedBroker {
    fn queue(&self, topic: &str) -> String {
        format!("{}.{topic}", self.prefix)
    }

    fn topology(&self, topic: &str) -> PartitionedTopology {
        partitioned(&self.queue(topic))
    }

    /// Every partition's work and delay queues.
    fn queues(&self, topic: &str) -> Vec<String> {
        let t = self.topology(topic);
        (0..t.partitions())
            .flat_map(|p| {
                let part = t.partition(p);
                std::iter::once(part.queue().to_owned())
                    .chain(part.delay_queues().into_iter().map(|(_, q)| q))
            })
            .collect()
    }
}

impl BrokerHarness for AmqpPartitionedBroker {
    type Inner = PartitionedSource;
    type Publisher = TopicPublishers;

    async fn new(_partitions: usize) -> Self {
        drop(connect().await);
        let faults = Faults::new();
        Self {
            prefix: unique_prefix("confp"),
            publisher: FaultyPublisher::new(TopicPublishers::default(), faults.clone()),
            faults,
            declared: Arc::default(),
            metrics: Arc::default(),
            settle: SettleSettingsByTopic::default(),
        }
    }

    fn faults(&self) -> &Faults {
        &self.faults
    }

    fn publisher(&self) -> &FaultyPublisher<TopicPublishers> {
        &self.publisher
    }

    /// Declares the topic's partitions (the publisher checks and declares
    /// them on its first message too).
    async fn prepare(&self, topic: &str) {
        if self.declared.lock().expect("declared").contains(topic) {
            return;
        }
        let conn = connect().await;
        let channel = conn.create_channel().await.expect("channel");
        let t = self.topology(topic);
        for p in (0..t.partitions()).rev() {
            t.partition(p)
                .declare(&channel)
                .await
                .expect("declare the test partitions");
        }
        let _ = conn.close(200, "declared".into()).await;
        self.declared
            .lock()
            .expect("declared")
            .insert(topic.to_owned());
    }

    fn publish_destination(&self, topic: &str) -> String {
        format!("/{}", self.queue(topic))
    }

    fn destination(&self, topic: &str) -> String {
        self.queue(topic)
    }

    /// A message's origin is the partition queue it was consumed from.
    fn is_destination_of(&self, topic: &str, destination: &str) -> bool {
        let t = self.topology(topic);
        (0..t.partitions()).any(|p| t.partition_queue(p) == destination)
    }

    async fn connect(&self, topic: &str) -> Result<PartitionedSource, consumer::backend::Error> {
        let settings = self.settle.get(topic);
        let mut source = PartitionedSource::builder(amqp_url(), self.topology(topic))
            .with_prefetch(64)
            .with_heartbeat(Duration::from_millis(100));
        if let Some(bytes) = settings.max_dead_letter_bytes {
            source = source.with_max_message_bytes(bytes);
        }
        let source = source.connect().await?;
        self.declared
            .lock()
            .expect("declared")
            .insert(topic.to_owned());
        self.metrics
            .lock()
            .expect("metrics")
            .insert(topic.to_owned(), source.stats());
        let t = self.topology(topic);
        if settings.no_dead_letter_destination {
            delete_queues(&[t.dead_letter_queue()]).await;
        }
        if settings.no_retry_destination {
            let delays: Vec<String> = (0..t.partitions())
                .flat_map(|p| t.partition(p).delay_queues().into_iter().map(|(_, q)| q))
                .collect();
            delete_queues(&delays).await;
        }
        // Wait until the source holds its partitions, so a test's first
        // message does not wait out the membership's first heartbeat.
        let mut assignment = source.assignment();
        let _ = assignment.wait_for(Option::is_some).await;
        Ok(source)
    }

    /// As the unpartitioned harness: ready counts of every partition's
    /// queues and the source's in-flight count, polled.
    async fn wait_drained(&self, topic: &str) {
        support::until_drained(Duration::from_millis(20), || self.depth(topic)).await;
    }

    async fn dead_letters(&self, topic: &str) -> Vec<Message> {
        self.prepare(topic).await;
        if self.settle.get(topic).no_dead_letter_destination {
            return Vec::new();
        }
        read_in_place(&self.topology(topic).dead_letter_queue()).await
    }

    async fn depth(&self, topic: &str) -> usize {
        let ready = ready_messages(&self.queues(topic)).await;
        let in_flight = self
            .metrics
            .lock()
            .expect("metrics")
            .get(topic)
            .map_or(0, AmqpStats::in_flight);
        usize::try_from(ready + in_flight).expect("fits")
    }

    fn limit_dead_letter_bytes(&self, topic: &str, bytes: usize) {
        self.settle.limit_dead_letter_bytes(topic, bytes);
    }

    fn remove_dead_letter_destination(&self, topic: &str) {
        self.settle.remove_dead_letter_destination(topic);
    }

    fn remove_retry_destination(&self, topic: &str) {
        self.settle.remove_retry_destination(topic);
    }
}
