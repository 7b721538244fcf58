//! An in-memory broker: the embedded default and the test harness.
//!
//! It keeps the semantics the real backends have, so code tested against it
//! behaves the same on Kafka or RabbitMQ:
//!
//! * **Partitions by key**: a topic has N partitions; a message goes to
//!   [`partition_for`](crate::partition::partition_for)`(key, N)`, Kafka's
//!   partitioner (round-robin without a key), and each partition hands
//!   out messages in offset order. A partition belongs to one source at a
//!   time (like a Kafka assignment) until that source closes.
//! * **At-least-once**: a delivery stays unacked until settled; a released
//!   delivery, one whose acker is dropped, or one held by a source that is
//!   dropped (a crash) is delivered again, before later messages of its
//!   partition.
//! * **Delayed redelivery** for retries sent back through the broker, and a
//!   **dead-letter list** per topic.
//! * **A size limit** on every message (1 MiB by default, as Kafka's
//!   `message.max.bytes`), and one for dead letters, so a refusal for size
//!   happens here as it does on a real broker.
//!
//! Faults (duplicate publishes, lost acks, failing publishes) are injected
//! with the wrappers of the `testing` feature, which work over every
//! backend.

mod acker;
mod gauges;
mod partition;
mod source;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

pub use acker::MemoryAcker;
pub use source::{DEFAULT_MAX_PER_PARTITION, MemorySource};

use crate::dead_letter::DeadLetter;
use crate::envelope::Message;
use crate::error::{BrokerErrorKind, Error};
use partition::Partition;

/// Where a published message landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Partition index.
    pub partition: usize,
    /// Offset within it.
    pub offset: u64,
}

/// The default limit on a message's size: payload, key and headers.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// An in-memory broker; clones share the same topics.
#[derive(Clone, Debug)]
pub struct MemoryBroker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    notify: Notify,
    partitions: usize,
}

#[derive(Debug)]
struct State {
    topics: HashMap<String, Topic>,
    next_source: u64,
    round_robin: usize,
    max_message_bytes: usize,
    max_dead_letter_bytes: usize,
}

#[derive(Debug, Default)]
struct Topic {
    partitions: Vec<Partition>,
    dead_letters: Vec<Message>,
    cursor: usize,
}

/// What a message weighs against the size limits.
fn size_of_message(message: &Message) -> usize {
    let headers: usize = message.headers.iter().map(|(n, v)| n.len() + v.len()).sum();
    message.payload.len() + message.key.as_ref().map_or(0, String::len) + headers
}

impl Default for MemoryBroker {
    fn default() -> Self {
        Self::new(4)
    }
}

impl MemoryBroker {
    /// A broker whose topics have `partitions` partitions each (at least 1).
    pub fn new(partitions: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    topics: HashMap::new(),
                    next_source: 0,
                    round_robin: 0,
                    max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
                    max_dead_letter_bytes: DEFAULT_MAX_MESSAGE_BYTES,
                }),
                notify: Notify::new(),
                partitions: partitions.max(1),
            }),
        }
    }

    /// The largest message (payload, key and headers) any publish may
    /// carry; larger ones are refused as too large. Default
    /// [`DEFAULT_MAX_MESSAGE_BYTES`]. Applies to every clone.
    #[must_use]
    pub fn with_max_message_bytes(self, n: usize) -> Self {
        self.lock().max_message_bytes = n;
        self
    }

    /// The largest dead letter the dead-letter lists take (as a dead-letter
    /// topic with its own size limit). Default
    /// [`DEFAULT_MAX_MESSAGE_BYTES`]. Applies to every clone.
    #[must_use]
    pub fn with_max_dead_letter_bytes(self, n: usize) -> Self {
        self.lock().max_dead_letter_bytes = n;
        self
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn topic<'s>(state: &'s mut State, name: &str, partitions: usize) -> &'s mut Topic {
        // Look up before inserting: the hot path never allocates the name.
        if !state.topics.contains_key(name) {
            state.topics.insert(
                name.to_owned(),
                Topic {
                    partitions: (0..partitions).map(|_| Partition::default()).collect(),
                    ..Topic::default()
                },
            );
        }
        match state.topics.get_mut(name) {
            Some(t) => t,
            None => unreachable!("inserted above"),
        }
    }

    fn check_size(message: &Message, limit: usize, what: &str) -> Result<(), Error> {
        let size = size_of_message(message);
        if size > limit {
            return Err(Error::broker(
                BrokerErrorKind::TooLarge,
                format!(
                    "{what} of {size} bytes is over the memory broker's limit of {limit} bytes"
                ),
                None,
            ));
        }
        Ok(())
    }

    /// Publishes a message; `Ok` means it is stored (the broker's confirm).
    pub async fn publish(&self, topic: &str, message: Message) -> Result<Position, Error> {
        let position = {
            let mut state = self.lock();
            Self::check_size(&message, state.max_message_bytes, "message")?;
            let n = self.inner.partitions;
            let partition = match &message.key {
                Some(key) => {
                    let n = u32::try_from(n).unwrap_or(u32::MAX);
                    usize::try_from(crate::partition::partition_for(key.as_bytes(), n)).unwrap_or(0)
                }
                None => {
                    state.round_robin = state.round_robin.wrapping_add(1);
                    state.round_robin % n
                }
            };
            let t = Self::topic(&mut state, topic, n);
            let offset = t.partitions[partition].append(message);
            Position { partition, offset }
        };
        self.inner.notify.notify_waiters();
        Ok(position)
    }

    /// A source consuming `topic`. Several sources on one topic split its
    /// partitions between them.
    pub fn source(&self, topic: &str) -> MemorySource {
        let id = {
            let mut state = self.lock();
            state.next_source += 1;
            Self::topic(&mut state, topic, self.inner.partitions);
            state.next_source
        };
        MemorySource::new(self.clone(), topic, id)
    }

    /// Copies of the dead letters of `topic`, oldest first.
    pub fn dead_letters(&self, topic: &str) -> Vec<Message> {
        self.lock()
            .topics
            .get(topic)
            .map(|t| t.dead_letters.clone())
            .unwrap_or_default()
    }

    /// The dead letters of `topic`, parsed.
    pub fn dead_letter_records(&self, topic: &str) -> Vec<DeadLetter> {
        self.dead_letters(topic)
            .iter()
            .filter_map(DeadLetter::from_message)
            .collect()
    }

    /// Messages of `topic` not yet settled: ready, delayed and unacked.
    pub fn depth(&self, topic: &str) -> usize {
        self.lock()
            .topics
            .get(topic)
            .map_or(0, |t| t.partitions.iter().map(Partition::depth).sum())
    }

    /// Waits until `topic` has no message left to settle.
    pub async fn wait_drained(&self, topic: &str) {
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.depth(topic) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Appends a dead letter of `topic`, within the dead-letter size limit.
    fn push_dead_letter(&self, topic: &str, letter: &Message) -> Result<(), Error> {
        {
            let mut state = self.lock();
            Self::check_size(letter, state.max_message_bytes, "dead letter")?;
            Self::check_size(letter, state.max_dead_letter_bytes, "dead letter")?;
            let n = self.inner.partitions;
            Self::topic(&mut state, topic, n)
                .dead_letters
                .push(letter.clone());
        }
        self.inner.notify.notify_waiters();
        Ok(())
    }

    /// Holds `copy` in `topic`'s partition until `due`.
    fn push_delayed(
        &self,
        topic: &str,
        partition: usize,
        due: tokio::time::Instant,
        copy: &Message,
    ) -> Result<(), Error> {
        {
            let mut state = self.lock();
            Self::check_size(copy, state.max_message_bytes, "retry copy")?;
            let n = self.inner.partitions;
            let t = Self::topic(&mut state, topic, n);
            if let Some(p) = t.partitions.get_mut(partition) {
                p.delayed.push((due, copy.clone()));
            }
        }
        self.inner.notify.notify_waiters();
        Ok(())
    }

    /// Removes a delivery from the unacked set: gone (ack) or back in
    /// line (release).
    fn settle(&self, topic: &str, partition: usize, offset: u64, release: bool) {
        {
            let mut state = self.lock();
            let Some(p) = state
                .topics
                .get_mut(topic)
                .and_then(|t| t.partitions.get_mut(partition))
            else {
                return;
            };
            let Some(stored) = p.unacked.remove(&offset) else {
                return;
            };
            if release {
                p.requeue(stored);
            }
        }
        self.inner.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{Acker, Source};

    #[tokio::test]
    async fn messages_over_the_limit_are_refused_as_too_large() {
        let broker = MemoryBroker::new(1)
            .with_max_message_bytes(16)
            .with_max_dead_letter_bytes(8);
        let err = broker
            .publish("t", Message::raw(vec![0u8; 17]))
            .await
            .expect_err("too large");
        assert!(err.is_too_large(), "{err}");
        broker
            .publish("t", Message::raw(vec![0u8; 16]))
            .await
            .expect("at the limit");
        let mut s = broker.source("t");
        let (_, mut acker) = s.recv().await.expect("recv").expect("some");
        let err = acker
            .publish_dead_letter(&Message::raw(vec![0u8; 9]))
            .await
            .expect_err("over the dead-letter limit");
        assert!(err.is_too_large(), "{err}");
        acker
            .publish_dead_letter(&Message::raw(vec![0u8; 8]))
            .await
            .expect("within it");
        acker.ack().await.expect("ack");
        assert_eq!(broker.dead_letters("t").len(), 1);
    }
}
