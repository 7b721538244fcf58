//! [`KafkaAcker`]: settles one record.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use consumer_backend::{Acker, BrokerErrorKind, Message, RetryCopy};
use rdkafka::producer::FutureRecord;
use rdkafka::util::Timeout;

use super::Link;
use super::ledger::Tp;
use crate::error::Error;
use crate::headers::to_kafka_headers;

/// Settles one Kafka record.
///
/// * `ack`: the record is done; its partition's position moves past it
///   once every earlier record is done too.
/// * `publish_retry`: produces the retry copy the runtime built (same id
///   and key, attempt, first failure and due time in headers) to the retry
///   topic and waits for its delivery report; the runtime acks afterwards.
/// * `publish_dead_letter`: produces the dead letter to the dead-letter
///   topic with `acks=all` and waits for its delivery report. A letter over
///   the settle producer's `message.max.bytes` is refused at once as too
///   large (the runtime sends it again without its payload), one to a
///   topic that does not exist after `topic.metadata.propagation.max.ms` as
///   having no destination.
/// * `release`, or dropped unsettled: the record stays pending, so the
///   committed offset stays below it and the partition's next owner (after
///   a restart or rebalance) receives it again.
pub struct KafkaAcker {
    link: Arc<Link>,
    tp: Tp,
    offset: i64,
    epoch: u64,
    settled: bool,
}

impl fmt::Debug for KafkaAcker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaAcker")
            .field("topic", &self.tp.topic)
            .field("partition", &self.tp.partition)
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

impl KafkaAcker {
    pub(super) fn new(link: Arc<Link>, tp: Tp, offset: i64, epoch: u64) -> Self {
        Self {
            link,
            tp,
            offset,
            epoch,
            settled: false,
        }
    }

    /// Takes the record off its partition's ledger: done (its offset may be
    /// committed past) or given back.
    fn leave_ledger(&mut self, done: bool) {
        if self.settled {
            return;
        }
        self.settled = true;
        let shared = &self.link.shared;
        let mut state = shared.lock();
        if let Some(p) = state.partitions.get_mut(&self.tp)
            && p.epoch == self.epoch
        {
            p.taken = p.taken.saturating_sub(1);
            if done {
                p.pending.remove(&self.offset);
                if p.full && p.pending.len() == p.low_water {
                    shared.room.notify_one();
                }
            } else {
                p.released += 1;
            }
            if p.revoking {
                shared.settled.notify_all();
            }
        }
        drop(state);
        shared.dirty.store(true, Ordering::Relaxed);
    }

    async fn produce(&self, topic: &str, message: &Message) -> Result<(), Error> {
        let mut record = FutureRecord::<str, [u8]>::to(topic)
            .payload(&message.payload[..])
            .headers(to_kafka_headers(message));
        if let Some(key) = &message.key {
            record = record.key(key.as_str());
        }
        match self
            .link
            .producer
            .send(record, Timeout::After(Duration::from_secs(5)))
            .await
        {
            Ok(_) => Ok(()),
            Err((e, _)) => Err(Error::kafka(format!("producing to {topic}"), e)),
        }
    }
}

impl Acker for KafkaAcker {
    async fn ack(mut self) -> Result<(), consumer_backend::Error> {
        self.leave_ledger(true);
        Ok(())
    }

    async fn release(mut self) -> Result<(), consumer_backend::Error> {
        self.leave_ledger(false);
        Ok(())
    }

    async fn publish_dead_letter(
        &mut self,
        letter: &Message,
    ) -> Result<(), consumer_backend::Error> {
        let topic = self.link.topics.dead_letter_topic();
        Ok(self.produce(topic, letter).await?)
    }

    async fn publish_retry(&mut self, copy: &RetryCopy) -> Result<(), consumer_backend::Error> {
        // The runtime checked at start that a handler retrying through the
        // broker runs on a source with a retry topic.
        let Some(topic) = self.link.topics.retry_topic() else {
            return Err(consumer_backend::Error::broker(
                BrokerErrorKind::NoDestination,
                format!("{} has no retry topic", self.link.topics.topic()),
                None,
            ));
        };
        Ok(self.produce(topic, &copy.message).await?)
    }
}

impl Drop for KafkaAcker {
    fn drop(&mut self) {
        self.leave_ledger(false);
    }
}
