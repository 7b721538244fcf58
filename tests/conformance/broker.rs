//! The broker side of the conformance suite: what a backend's test harness
//! provides so the cases in `suite!` run unchanged on it.
//!
//! Faults are named after what they model, and each backend produces them
//! as really as it can:
//!
//! * `duplicate_next_publishes`: the message is stored twice, as after a
//!   producer retry whose first confirm was lost (the memory broker stores
//!   two copies; RabbitMQ gets two publishes);
//! * `lose_next_acks`: the consumer crashes between its database commit and
//!   its ack (the memory broker requeues instead of acking; on RabbitMQ the
//!   channel is closed instead of sending `basic.ack`, and RabbitMQ
//!   requeues every unacked delivery of that channel, as it does when a
//!   process dies);
//! * `fail_next_publishes`: the next dead-letter or retry-copy publishes
//!   fail with a retriable error. On RabbitMQ this is injected at the
//!   acker, because a broker that refuses exactly N publishes and then
//!   recovers cannot be arranged from the outside; the real failures
//!   (unroutable dead letter, broker down mid-run) have dedicated tests in
//!   `tests/amqp.rs` and `tests/amqp_restart.rs`.

use std::future::Future;

use consumer::{DeadLetter, MemoryBroker, MemorySource, Message, Source};

/// A broker the suite can drive. Every instance is a namespace of its own:
/// topics of one instance never meet those of another.
pub trait BrokerHarness: Clone + Send + Sync + 'static {
    /// What the consumer reads from.
    type Source: Source;

    /// A fresh broker; `partitions` is a hint for brokers that have them.
    fn new(partitions: usize) -> impl Future<Output = Self> + Send;
    /// Publishes with the broker's confirmation.
    fn publish(
        &self,
        topic: &str,
        message: Message,
    ) -> impl Future<Output = Result<(), consumer::Error>> + Send;
    /// The name the broker gives `topic` (what a dead letter's origin says).
    fn destination(&self, topic: &str) -> String;
    /// A source consuming `topic`.
    fn source(&self, topic: &str) -> impl Future<Output = Self::Source> + Send;
    /// Resolves once `topic` has nothing left to settle: nothing ready,
    /// delayed or unacked.
    fn wait_drained(&self, topic: &str) -> impl Future<Output = ()> + Send;
    /// The dead letters of `topic`, oldest first, left in place.
    fn dead_letters(&self, topic: &str) -> impl Future<Output = Vec<Message>> + Send;
    /// Messages of `topic` not yet settled.
    fn depth(&self, topic: &str) -> impl Future<Output = usize> + Send;
    /// See the module docs.
    fn duplicate_next_publishes(&self, n: u32);
    /// See the module docs.
    fn lose_next_acks(&self, n: u32);
    /// See the module docs.
    fn fail_next_publishes(&self, n: u32);

    /// The dead letters of `topic`, parsed.
    fn dead_letter_records(&self, topic: &str) -> impl Future<Output = Vec<DeadLetter>> + Send {
        async move {
            self.dead_letters(topic)
                .await
                .iter()
                .filter_map(DeadLetter::from_message)
                .collect()
        }
    }
}

impl BrokerHarness for MemoryBroker {
    type Source = MemorySource;

    async fn new(partitions: usize) -> Self {
        MemoryBroker::new(partitions)
    }

    async fn publish(&self, topic: &str, message: Message) -> Result<(), consumer::Error> {
        MemoryBroker::publish(self, topic, message)
            .await
            .map(|_| ())
    }

    fn destination(&self, topic: &str) -> String {
        topic.to_owned()
    }

    async fn source(&self, topic: &str) -> MemorySource {
        MemoryBroker::source(self, topic)
    }

    async fn wait_drained(&self, topic: &str) {
        MemoryBroker::wait_drained(self, topic).await;
    }

    async fn dead_letters(&self, topic: &str) -> Vec<Message> {
        MemoryBroker::dead_letters(self, topic)
    }

    async fn depth(&self, topic: &str) -> usize {
        MemoryBroker::depth(self, topic)
    }

    fn duplicate_next_publishes(&self, n: u32) {
        self.faults().duplicate_next_publishes(n);
    }

    fn lose_next_acks(&self, n: u32) {
        self.faults().lose_next_acks(n);
    }

    fn fail_next_publishes(&self, n: u32) {
        self.faults().fail_next_publishes(n);
    }
}
