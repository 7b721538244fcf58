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
mod publisher;
mod source;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

pub use acker::MemoryAcker;
pub use source::{DEFAULT_MAX_PER_PARTITION, MemorySource};

use crate::dead_letter::DeadLetter;
use crate::envelope::Message;
use consumer_backend::{BrokerErrorKind, Error};
use partition::Partition;

/// Where a published message landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOffset {
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
    /// Tasks registered on `notify` (see [`MemoryBroker::wake`]).
    waiting: AtomicUsize,
    partitions: usize,
}

/// A task registered on the broker's wake-ups; unregisters on drop (a
/// waiter whose future is dropped too).
pub(super) struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct State {
    /// Every topic, by index: sources and ackers hold the index, so a take
    /// or a settle never looks a name up.
    topics: Vec<Topic>,
    /// The index of each topic's name, for publishes and for creating
    /// sources.
    by_name: HashMap<Arc<str>, usize>,
    next_source: u64,
    round_robin: usize,
    max_message_bytes: usize,
    max_dead_letter_bytes: usize,
}

#[derive(Debug)]
struct Topic {
    name: Arc<str>,
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
                    topics: Vec::new(),
                    by_name: HashMap::new(),
                    next_source: 0,
                    round_robin: 0,
                    max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
                    max_dead_letter_bytes: DEFAULT_MAX_MESSAGE_BYTES,
                }),
                notify: Notify::new(),
                waiting: AtomicUsize::new(0),
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

    /// Registers a task that is about to wait on `inner.notify`: call it
    /// before `enable`, and before looking at the state under the lock.
    pub(super) fn waiting(&self) -> Waiting<'_> {
        self.inner.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(&self.inner.waiting)
    }

    /// Wakes the waiting tasks after a change of the state, made under the
    /// lock and let go before this call. Only a registered waiter pays
    /// for the wake-up (the notifier's lock and the waiters' list): one
    /// that registered before looking at the state under the lock is seen
    /// here (the lock orders its registration before this load), and one
    /// that looked after the change saw it.
    fn wake(&self) {
        if self.inner.waiting.load(Ordering::Relaxed) > 0 {
            self.inner.notify.notify_waiters();
        }
    }

    /// The index of topic `name`, created with `partitions` partitions if
    /// it did not exist.
    fn topic_index(state: &mut State, name: &str, partitions: usize) -> usize {
        // Look up before inserting: a publish never allocates the name.
        if let Some(&index) = state.by_name.get(name) {
            return index;
        }
        let index = state.topics.len();
        let name: Arc<str> = Arc::from(name);
        state.topics.push(Topic {
            name: Arc::clone(&name),
            partitions: (0..partitions).map(|_| Partition::default()).collect(),
            dead_letters: Vec::new(),
            cursor: 0,
        });
        state.by_name.insert(name, index);
        index
    }

    /// Topic `name`, created with `partitions` partitions if it did not
    /// exist.
    fn topic<'s>(state: &'s mut State, name: &str, partitions: usize) -> &'s mut Topic {
        let index = Self::topic_index(state, name, partitions);
        &mut state.topics[index]
    }

    /// An existing topic by name.
    fn existing<'s>(state: &'s State, name: &str) -> Option<&'s Topic> {
        state.by_name.get(name).map(|&index| &state.topics[index])
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
    pub async fn publish(&self, topic: &str, message: Message) -> Result<LogOffset, Error> {
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
            LogOffset { partition, offset }
        };
        self.wake();
        Ok(position)
    }

    /// A source consuming `topic`. Several sources on one topic split its
    /// partitions between them.
    pub fn source(&self, topic: &str) -> MemorySource {
        let (id, index, name) = {
            let mut state = self.lock();
            state.next_source += 1;
            let index = Self::topic_index(&mut state, topic, self.inner.partitions);
            let name = Arc::clone(&state.topics[index].name);
            (state.next_source, index, name)
        };
        MemorySource::new(self.clone(), name, index, id)
    }

    /// Copies of the dead letters of `topic`, oldest first.
    pub fn dead_letters(&self, topic: &str) -> Vec<Message> {
        Self::existing(&self.lock(), topic)
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
        Self::existing(&self.lock(), topic)
            .map_or(0, |t| t.partitions.iter().map(Partition::depth).sum())
    }

    /// Waits until `topic` has no message left to settle.
    pub async fn wait_drained(&self, topic: &str) {
        let _waiting = self.waiting();
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

    /// Appends a dead letter of topic `topic` (an index), within the
    /// dead-letter size limit.
    fn push_dead_letter(&self, topic: usize, letter: &Message) -> Result<(), Error> {
        {
            let mut state = self.lock();
            Self::check_size(letter, state.max_message_bytes, "dead letter")?;
            Self::check_size(letter, state.max_dead_letter_bytes, "dead letter")?;
            if let Some(t) = state.topics.get_mut(topic) {
                t.dead_letters.push(letter.clone());
            }
        }
        self.wake();
        Ok(())
    }

    /// Holds `copy` in partition `partition` of topic `topic` (an index)
    /// until `due`.
    fn push_delayed(
        &self,
        topic: usize,
        partition: usize,
        due: tokio::time::Instant,
        copy: &Message,
    ) -> Result<(), Error> {
        {
            let mut state = self.lock();
            Self::check_size(copy, state.max_message_bytes, "retry copy")?;
            if let Some(p) = state
                .topics
                .get_mut(topic)
                .and_then(|t| t.partitions.get_mut(partition))
            {
                p.delayed.push((due, copy.clone()));
            }
        }
        self.wake();
        Ok(())
    }

    /// Removes a delivery of topic `topic` (an index) from the unacked
    /// set: gone (ack) or back in line (release).
    fn settle(&self, topic: usize, partition: usize, offset: u64, release: bool) {
        {
            let mut state = self.lock();
            let Some(p) = state
                .topics
                .get_mut(topic)
                .and_then(|t| t.partitions.get_mut(partition))
            else {
                return;
            };
            let Some(stored) = p.take_unacked(offset) else {
                return;
            };
            if release {
                p.requeue(stored);
            }
        }
        self.wake();
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
