//! [`MemoryAcker`]: settles one delivery of a [`MemorySource`](super::MemorySource).

use tokio::time::Instant;

use super::MemoryBroker;
use crate::envelope::Message;
use crate::source::Acker;
use consumer_backend::Error;
use consumer_backend::RetryCopy;

/// Settles one delivery of a [`MemorySource`](super::MemorySource);
/// dropping it unsettled releases the delivery.
///
/// * `publish_dead_letter` appends to the topic's dead-letter list (within
///   the broker's dead-letter size limit);
/// * `publish_retry` holds the copy in the delivery's partition until its
///   delay has passed, then appends it as a new message.
#[derive(Debug)]
pub struct MemoryAcker {
    broker: MemoryBroker,
    /// The topic's index in the broker.
    topic: usize,
    partition: usize,
    offset: u64,
    settled: bool,
}

impl MemoryAcker {
    pub(super) fn new(broker: MemoryBroker, topic: usize, partition: usize, offset: u64) -> Self {
        Self {
            broker,
            topic,
            partition,
            offset,
            settled: false,
        }
    }
}

impl Acker for MemoryAcker {
    async fn ack(mut self) -> Result<(), Error> {
        self.settled = true;
        self.broker
            .settle(self.topic, self.partition, self.offset, false);
        Ok(())
    }

    async fn release(mut self) -> Result<(), Error> {
        self.settled = true;
        self.broker
            .settle(self.topic, self.partition, self.offset, true);
        Ok(())
    }

    async fn publish_dead_letter(&mut self, letter: &Message) -> Result<(), Error> {
        self.broker.push_dead_letter(self.topic, letter)
    }

    async fn publish_retry(&mut self, copy: &RetryCopy) -> Result<(), Error> {
        let due = Instant::now() + copy.delay;
        self.broker
            .push_delayed(self.topic, self.partition, due, &copy.message)
    }
}

impl Drop for MemoryAcker {
    fn drop(&mut self) {
        if !self.settled {
            self.broker
                .settle(self.topic, self.partition, self.offset, true);
        }
    }
}
