//! The broker side of the conformance suite: what a backend's test harness
//! provides so the cases in `tests/suite/` run unchanged on it.
//!
//! Faults come from one place, `consumer::testing` (the wrappers every
//! harness puts around its source and publisher):
//!
//! * `duplicate_next_publishes`: the message is sent twice, as after a
//!   producer retry whose first confirm was lost;
//! * `lose_next_acks`: the consumer crashes between its database commit and
//!   its ack: the delivery is never settled, and the source is closed and
//!   started again ([`BrokerHarness::connect`]) once it holds nothing else,
//!   so the broker delivers it again as it does after a real crash (a new
//!   group member on Kafka, a new connection on RabbitMQ);
//! * `fail_next_publishes`: the next dead-letter or retry-copy publishes
//!   fail with an error that can heal.
//!
//! Refusals for good are real where the broker can produce them: a
//! dead-letter or retry destination that does not exist (Kafka: a topic
//! never created; RabbitMQ: a queue deleted under the consumer), and a size
//! limit on dead letters (Kafka: the settle producer's `message.max.bytes`;
//! RabbitMQ: the settle publisher's limit, which mirrors `max_message_size`;
//! the memory broker: its dead-letter size limit).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use consumer::testing::{Faults, FaultyPublisher, FaultySource};

use super::support::within;
use consumer::{
    DeadLetter, MemoryBroker, Message, Outgoing, Publisher, memory::MemorySource, source::Source,
};

/// A broker the suite can drive. Every instance is a namespace of its own:
/// topics of one instance never meet those of another.
pub trait BrokerHarness: Clone + Send + Sync + 'static {
    /// The backend's own source.
    type Inner: Source;
    /// The backend's own publisher.
    type Publisher: Publisher;

    /// Whether this broker's cases run one at a time within their test
    /// binary (see [`crate::suite::one_at_a_time`]).
    const ONE_AT_A_TIME: bool = false;

    /// Run before and after each case, outside its runtime: housekeeping on
    /// the broker (nothing by default).
    fn between_cases() {}

    /// A fresh broker; `partitions` is a hint for brokers that have them.
    fn new(partitions: usize) -> impl Future<Output = Self> + Send;
    /// The faults armed on this harness's wrappers.
    fn faults(&self) -> &Faults;
    /// The publisher tests publish with.
    fn publisher(&self) -> &FaultyPublisher<Self::Publisher>;
    /// Creates or declares what `topic` needs before a publish.
    fn prepare(&self, topic: &str) -> impl Future<Output = ()> + Send;
    /// The destination the publisher takes for `topic`.
    fn publish_destination(&self, topic: &str) -> String;
    /// The name the broker gives `topic` (what a dead letter's origin says).
    fn destination(&self, topic: &str) -> String;
    /// Whether a message's origin `destination` is `topic` (on a
    /// partitioned broker, one of its partitions).
    fn is_destination_of(&self, topic: &str, destination: &str) -> bool {
        destination == self.destination(topic)
    }
    /// A new source consuming `topic` (also what a restart after a crash
    /// starts).
    fn connect(
        &self,
        topic: &str,
    ) -> impl Future<Output = Result<Self::Inner, consumer::backend::Error>> + Send;
    /// Resolves once `topic` has nothing left to settle: nothing ready,
    /// delayed or unacked.
    fn wait_drained(&self, topic: &str) -> impl Future<Output = ()> + Send;
    /// The dead letters of `topic`, oldest first, left in place.
    fn dead_letters(&self, topic: &str) -> impl Future<Output = Vec<Message>> + Send;
    /// Messages of `topic` not yet settled.
    fn depth(&self, topic: &str) -> impl Future<Output = usize> + Send;
    /// Dead letters of `topic` larger than `bytes` are refused for their
    /// size by sources started from now on.
    fn limit_dead_letter_bytes(&self, topic: &str, bytes: usize);
    /// Dead letters of `topic` are refused for good (their destination is
    /// gone) by sources started from now on.
    fn remove_dead_letter_destination(&self, topic: &str);
    /// Retry copies of `topic` are refused for good (their destination is
    /// gone) by sources started from now on.
    fn remove_retry_destination(&self, topic: &str);

    /// Publishes with the broker's confirmation.
    fn publish(
        &self,
        topic: &str,
        message: Message,
    ) -> impl Future<Output = Result<(), consumer::Error>> + Send {
        within(async move {
            self.prepare(topic).await;
            let out = Outgoing {
                destination: self.publish_destination(topic),
                message,
            };
            for r in Publisher::publish(self.publisher(), &[out]).await {
                r?;
            }
            Ok(())
        })
    }

    /// A source consuming `topic`, with the harness's faults, restarted
    /// through [`BrokerHarness::connect`] after a lost ack.
    fn source(&self, topic: &str) -> impl Future<Output = FaultySource<Self::Inner>> + Send {
        async move {
            let inner = within(self.connect(topic))
                .await
                .unwrap_or_else(|e| panic!("a source for {topic}: {e}"));
            let (harness, topic) = (self.clone(), topic.to_owned());
            FaultySource::new(inner, self.faults().clone()).with_restart(Box::new(move || {
                let (harness, topic) = (harness.clone(), topic.clone());
                Box::pin(async move { harness.connect(&topic).await })
            }))
        }
    }

    /// See the module docs.
    fn duplicate_next_publishes(&self, n: u32) {
        self.faults().duplicate_next_publishes(n);
    }

    /// See the module docs.
    fn lose_next_acks(&self, n: u32) {
        self.faults().lose_next_acks(n);
    }

    /// See the module docs.
    fn fail_next_publishes(&self, n: u32) {
        self.faults().fail_next_publishes(n);
    }

    /// The dead letters of `topic`, parsed.
    fn dead_letter_records(&self, topic: &str) -> impl Future<Output = Vec<DeadLetter>> + Send {
        async move {
            within(self.dead_letters(topic))
                .await
                .iter()
                .filter_map(DeadLetter::from_message)
                .collect()
        }
    }
}

/// The memory broker with the suite's wrappers.
#[derive(Clone)]
pub struct MemoryHarness {
    broker: MemoryBroker,
    faults: Faults,
    publisher: FaultyPublisher<MemoryBroker>,
}

impl MemoryHarness {
    /// The broker itself.
    pub fn broker(&self) -> &MemoryBroker {
        &self.broker
    }
}

impl BrokerHarness for MemoryHarness {
    type Inner = MemorySource;
    type Publisher = MemoryBroker;

    async fn new(partitions: usize) -> Self {
        let broker = MemoryBroker::new(partitions);
        let faults = Faults::new();
        Self {
            publisher: FaultyPublisher::new(broker.clone(), faults.clone()),
            broker,
            faults,
        }
    }

    fn faults(&self) -> &Faults {
        &self.faults
    }

    fn publisher(&self) -> &FaultyPublisher<MemoryBroker> {
        &self.publisher
    }

    async fn prepare(&self, _topic: &str) {}

    fn publish_destination(&self, topic: &str) -> String {
        topic.to_owned()
    }

    fn destination(&self, topic: &str) -> String {
        topic.to_owned()
    }

    async fn connect(&self, topic: &str) -> Result<MemorySource, consumer::backend::Error> {
        Ok(self.broker.source(topic))
    }

    async fn wait_drained(&self, topic: &str) {
        self.broker.wait_drained(topic).await;
    }

    async fn dead_letters(&self, topic: &str) -> Vec<Message> {
        self.broker.dead_letters(topic)
    }

    async fn depth(&self, topic: &str) -> usize {
        self.broker.depth(topic)
    }

    fn limit_dead_letter_bytes(&self, _topic: &str, bytes: usize) {
        // One limit for every dead-letter list of this broker: each harness
        // has a broker of its own.
        let _ = self.broker.clone().with_max_dead_letter_bytes(bytes);
    }

    fn remove_dead_letter_destination(&self, _topic: &str) {
        // The memory broker's dead-letter lists cannot go away.
        self.faults
            .refuse_dead_letters(Some(consumer::error::BrokerErrorKind::NoDestination));
    }

    fn remove_retry_destination(&self, _topic: &str) {
        self.faults
            .refuse_retries(Some(consumer::error::BrokerErrorKind::NoDestination));
    }
}

/// How the sources of one topic settle, for harnesses that apply it when
/// they start a source: see [`BrokerHarness::limit_dead_letter_bytes`] and
/// the two `remove_*` methods.
#[derive(Debug, Clone, Default)]
pub struct SettleSettings {
    pub max_dead_letter_bytes: Option<usize>,
    pub no_dead_letter_destination: bool,
    pub no_retry_destination: bool,
}

/// [`SettleSettings`] by topic, shared by a harness's clones.
#[derive(Debug, Clone, Default)]
pub struct SettleSettingsByTopic(Arc<Mutex<HashMap<String, SettleSettings>>>);

impl SettleSettingsByTopic {
    pub fn get(&self, topic: &str) -> SettleSettings {
        self.0
            .lock()
            .expect("settle settings")
            .get(topic)
            .cloned()
            .unwrap_or_default()
    }

    pub fn update(&self, topic: &str, f: impl FnOnce(&mut SettleSettings)) {
        f(self
            .0
            .lock()
            .expect("settle settings")
            .entry(topic.to_owned())
            .or_default());
    }

    /// What [`BrokerHarness::limit_dead_letter_bytes`] records.
    pub fn limit_dead_letter_bytes(&self, topic: &str, bytes: usize) {
        self.update(topic, |s| s.max_dead_letter_bytes = Some(bytes));
    }

    /// What [`BrokerHarness::remove_dead_letter_destination`] records.
    pub fn remove_dead_letter_destination(&self, topic: &str) {
        self.update(topic, |s| s.no_dead_letter_destination = true);
    }

    /// What [`BrokerHarness::remove_retry_destination`] records.
    pub fn remove_retry_destination(&self, topic: &str) {
        self.update(topic, |s| s.no_retry_destination = true);
    }
}
