//! An in-memory broker: the embedded default and the test harness.
//!
//! It keeps the semantics the real backends have, so code tested against it
//! behaves the same on Kafka or RabbitMQ:
//!
//! * **Partitions by key**: a topic has N partitions; a message goes to
//!   `hash(key) % N` (round-robin without a key), and each partition hands
//!   out messages in offset order. A partition belongs to one source at a
//!   time (like a Kafka assignment) until that source closes.
//! * **At-least-once**: a delivery stays unacked until settled; a released
//!   delivery, one whose acker is dropped, or one held by a source that is
//!   dropped (a crash) is delivered again, before later messages of its
//!   partition.
//! * **Delayed redelivery** for retries sent back through the broker, and a
//!   **dead-letter list** per topic.
//! * **Fault injection** ([`Faults`]): duplicate publishes, acks lost in a
//!   crash between commit and ack, and publish failures.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::dead_letter::DeadLetter;
use crate::envelope::{Envelope, Message, Origin, format_time, names};
use crate::error::Error;
use crate::source::{Acker, DeadLettered, Redelivery, Source};

/// Where a published message landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Partition index.
    pub partition: usize,
    /// Offset within it.
    pub offset: u64,
}

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

#[derive(Debug, Default)]
struct State {
    topics: HashMap<String, Topic>,
    faults: FaultState,
    next_source: u64,
    round_robin: usize,
}

#[derive(Debug, Default)]
struct FaultState {
    duplicate_publishes: u32,
    lost_acks: u32,
    failed_publishes: u32,
}

#[derive(Debug, Default)]
struct Topic {
    partitions: Vec<Partition>,
    dead_letters: Vec<Message>,
    cursor: usize,
}

#[derive(Debug, Default)]
struct Partition {
    next_offset: u64,
    /// Ready to deliver, in offset order.
    ready: VecDeque<Stored>,
    /// Delivered and not settled, by offset.
    unacked: HashMap<u64, Stored>,
    /// Retries waiting for their due time.
    delayed: Vec<(Instant, Stored)>,
    owner: Option<u64>,
}

#[derive(Debug, Clone)]
struct Stored {
    offset: u64,
    message: Message,
}

impl Partition {
    fn append(&mut self, message: Message) -> u64 {
        let offset = self.next_offset;
        self.next_offset += 1;
        self.ready.push_back(Stored { offset, message });
        offset
    }

    /// Puts a delivery back where its offset says, ahead of later messages.
    fn requeue(&mut self, stored: Stored) {
        let at = self.ready.partition_point(|s| s.offset < stored.offset);
        self.ready.insert(at, stored);
    }

    fn promote_due(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.delayed.len() {
            if self.delayed[i].0 <= now {
                let (_, stored) = self.delayed.swap_remove(i);
                let offset = self.next_offset;
                self.next_offset += 1;
                self.ready.push_back(Stored { offset, ..stored });
            } else {
                i += 1;
            }
        }
    }
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
                state: Mutex::new(State::default()),
                notify: Notify::new(),
                partitions: partitions.max(1),
            }),
        }
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

    /// Publishes a message; `Ok` means it is stored (the broker's confirm).
    pub async fn publish(&self, topic: &str, message: Message) -> Result<Position, Error> {
        let position = {
            let mut state = self.lock();
            if state.faults.failed_publishes > 0 {
                state.faults.failed_publishes -= 1;
                return Err(Error::broker("injected publish failure", true, None));
            }
            let copies = if state.faults.duplicate_publishes > 0 {
                state.faults.duplicate_publishes -= 1;
                2
            } else {
                1
            };
            let n = self.inner.partitions;
            let partition = match &message.key {
                Some(key) => {
                    let mut h = DefaultHasher::new();
                    key.hash(&mut h);
                    usize::try_from(h.finish() % n as u64).unwrap_or(0)
                }
                None => {
                    state.round_robin = state.round_robin.wrapping_add(1);
                    state.round_robin % n
                }
            };
            let t = Self::topic(&mut state, topic, n);
            let mut offset = 0;
            for _ in 0..copies {
                offset = t.partitions[partition].append(message.clone());
            }
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
        MemorySource {
            broker: self.clone(),
            topic: topic.to_owned(),
            id,
            max_per_partition: DEFAULT_MAX_PER_PARTITION,
        }
    }

    /// Fault injection for tests.
    pub fn faults(&self) -> Faults {
        Faults {
            broker: self.clone(),
        }
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
        self.lock().topics.get(topic).map_or(0, |t| {
            t.partitions
                .iter()
                .map(|p| p.ready.len() + p.delayed.len() + p.unacked.len())
                .sum()
        })
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

    fn settle(&self, topic: &str, partition: usize, offset: u64, how: Settle) {
        {
            let mut state = self.lock();
            let State { topics, faults, .. } = &mut *state;
            let Some(p) = topics
                .get_mut(topic)
                .and_then(|t| t.partitions.get_mut(partition))
            else {
                return;
            };
            let Some(stored) = p.unacked.remove(&offset) else {
                return;
            };
            match how {
                Settle::Ack if faults.lost_acks > 0 => {
                    // The consumer "crashed" after its commit and before the
                    // ack reached the broker: the message comes back.
                    faults.lost_acks -= 1;
                    p.requeue(stored);
                }
                Settle::Ack => {}
                Settle::Release => p.requeue(stored),
            }
        }
        self.inner.notify.notify_waiters();
    }
}

enum Settle {
    Ack,
    Release,
}

/// Fault injection on a [`MemoryBroker`].
#[derive(Debug, Clone)]
pub struct Faults {
    broker: MemoryBroker,
}

impl Faults {
    /// The next `n` published messages are stored twice (a producer retry
    /// after a lost confirm): consumers see each of them delivered twice.
    pub fn duplicate_next_publishes(&self, n: u32) {
        self.broker.lock().faults.duplicate_publishes += n;
    }

    /// The next `n` acks are lost, as in a consumer crash between its
    /// database commit and its ack: those messages are delivered again.
    pub fn lose_next_acks(&self, n: u32) {
        self.broker.lock().faults.lost_acks += n;
    }

    /// The next `n` publishes (including dead letters and retry copies)
    /// fail with a retriable error.
    pub fn fail_next_publishes(&self, n: u32) {
        self.broker.lock().faults.failed_publishes += n;
    }
}

/// Unsettled deliveries one partition may have before a source skips it
/// (see [`MemorySource::with_max_per_partition`]).
pub const DEFAULT_MAX_PER_PARTITION: usize = 64;

/// Consumes one topic of a [`MemoryBroker`].
///
/// The source takes from its partitions in turn, skipping a partition that
/// has `max_per_partition` deliveries unsettled, as the Kafka backend holds
/// off a full partition. Without that share, one partition whose messages
/// all belong to one key (which runs them one at a time) would fill the
/// runtime's in-flight window with a backlog while the keys of the other
/// partitions wait for deliveries.
#[derive(Debug)]
pub struct MemorySource {
    broker: MemoryBroker,
    topic: String,
    id: u64,
    max_per_partition: usize,
}

impl MemorySource {
    /// Unsettled deliveries a partition may have before the source takes
    /// from the others only (default [`DEFAULT_MAX_PER_PARTITION`]; at
    /// least 1). Keep it at or below the runtime's `max_in_flight` divided
    /// by the partitions with traffic.
    #[must_use]
    pub fn with_max_per_partition(mut self, n: usize) -> Self {
        self.max_per_partition = n.max(1);
        self
    }

    fn try_take(&self) -> Result<(Envelope, MemoryAcker), Option<Instant>> {
        let mut state = self.broker.lock();
        let n = self.broker.inner.partitions;
        let topic = MemoryBroker::topic(&mut state, &self.topic, n);
        let now = Instant::now();
        let mut next_due: Option<Instant> = None;
        for step in 0..n {
            let index = (topic.cursor + step) % n;
            let p = &mut topic.partitions[index];
            if p.owner.is_some_and(|o| o != self.id) {
                continue;
            }
            p.promote_due(now);
            if let Some(due) = p.delayed.iter().map(|(d, _)| *d).min() {
                next_due = Some(next_due.map_or(due, |n| n.min(due)));
            }
            if p.unacked.len() >= self.max_per_partition {
                // Full: a settle wakes the source.
                continue;
            }
            let Some(stored) = p.ready.pop_front() else {
                continue;
            };
            p.owner = Some(self.id);
            p.unacked.insert(stored.offset, stored.clone());
            topic.cursor = (index + 1) % n;
            let origin = Origin {
                destination: self.topic.clone(),
                position: format!("{index}/{}", stored.offset),
            };
            let Message {
                key,
                headers,
                payload,
            } = stored.message;
            // Built only for messages that carry no id of their own.
            let topic = &self.topic;
            let offset = stored.offset;
            let envelope = Envelope::from_parts(payload, headers, key, origin, || {
                format!("{topic}/{index}/{offset}")
            });
            let acker = MemoryAcker {
                broker: self.broker.clone(),
                topic: self.topic.clone(),
                partition: index,
                offset: stored.offset,
                settled: false,
            };
            return Ok((envelope, acker));
        }
        Err(next_due)
    }
}

impl Source for MemorySource {
    type Acker = MemoryAcker;

    fn system(&self) -> &'static str {
        "memory"
    }

    async fn recv(&mut self) -> Result<Option<(Envelope, MemoryAcker)>, Error> {
        loop {
            let notified = self.broker.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.try_take() {
                Ok(delivery) => return Ok(Some(delivery)),
                Err(Some(due)) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(due) => {}
                    }
                }
                Err(None) => notified.await,
            }
        }
    }

    async fn close(self) {}
}

impl Drop for MemorySource {
    /// Closing (or crashing) gives every unsettled delivery back, in order,
    /// and frees the partitions for other sources.
    fn drop(&mut self) {
        {
            let mut state = self.broker.lock();
            if let Some(t) = state.topics.get_mut(&self.topic) {
                for p in &mut t.partitions {
                    if p.owner == Some(self.id) {
                        let unacked: Vec<Stored> = p.unacked.drain().map(|(_, s)| s).collect();
                        for s in unacked {
                            p.requeue(s);
                        }
                        p.owner = None;
                    }
                }
            }
        }
        self.broker.inner.notify.notify_waiters();
    }
}

/// Settles one delivery of a [`MemorySource`]; dropping it unsettled
/// releases the delivery.
#[derive(Debug)]
pub struct MemoryAcker {
    broker: MemoryBroker,
    topic: String,
    partition: usize,
    offset: u64,
    settled: bool,
}

impl MemoryAcker {
    fn fail_publish(&self) -> Result<(), Error> {
        let mut state = self.broker.lock();
        if state.faults.failed_publishes > 0 {
            state.faults.failed_publishes -= 1;
            return Err(Error::broker("injected publish failure", true, None));
        }
        Ok(())
    }
}

impl Acker for MemoryAcker {
    async fn ack(mut self) -> Result<(), Error> {
        self.settled = true;
        self.broker
            .settle(&self.topic, self.partition, self.offset, Settle::Ack);
        Ok(())
    }

    async fn release(mut self) -> Result<(), Error> {
        self.settled = true;
        self.broker
            .settle(&self.topic, self.partition, self.offset, Settle::Release);
        Ok(())
    }

    async fn dead_letter(&mut self, dead_letter: &DeadLetter) -> Result<DeadLettered, Error> {
        self.fail_publish()?;
        {
            let mut state = self.broker.lock();
            let n = self.broker.inner.partitions;
            MemoryBroker::topic(&mut state, &self.topic, n)
                .dead_letters
                .push(dead_letter.to_message());
        }
        self.broker.inner.notify.notify_waiters();
        Ok(DeadLettered::Published)
    }

    async fn schedule_retry(
        &mut self,
        envelope: &Envelope,
        retry: &Redelivery,
    ) -> Result<(), Error> {
        self.fail_publish()?;
        let mut headers = envelope.headers.clone();
        headers.insert(names::ATTEMPT, retry.attempt.to_string());
        headers.insert(names::FIRST_FAILURE, format_time(retry.first_failure));
        let message = Message {
            key: envelope.key.clone(),
            headers,
            payload: envelope.payload.clone(),
        };
        {
            let mut state = self.broker.lock();
            let n = self.broker.inner.partitions;
            let t = MemoryBroker::topic(&mut state, &self.topic, n);
            if let Some(p) = t.partitions.get_mut(self.partition) {
                let due = Instant::now() + retry.delay;
                p.delayed.push((due, Stored { offset: 0, message }));
            }
        }
        self.broker.inner.notify.notify_waiters();
        Ok(())
    }
}

impl Drop for MemoryAcker {
    fn drop(&mut self) {
        if !self.settled {
            self.broker
                .settle(&self.topic, self.partition, self.offset, Settle::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn msg(key: &str, body: &str) -> Message {
        Message::raw(body.as_bytes().to_vec()).with_key(key)
    }

    #[tokio::test]
    async fn a_dropped_source_gives_its_unacked_deliveries_back_in_order() {
        let broker = MemoryBroker::new(1);
        for i in 0..3 {
            broker
                .publish("t", msg("k", &i.to_string()))
                .await
                .expect("publish");
        }
        let mut a = broker.source("t");
        let (first, ack_first) = a.recv().await.expect("recv").expect("some");
        let (_second, ack_second) = a.recv().await.expect("recv").expect("some");
        assert_eq!(&first.payload[..], b"0");
        ack_first.ack().await.expect("ack");
        std::mem::forget(ack_second); // a crash: the acker never runs
        drop(a);
        let mut b = broker.source("t");
        let (again, _) = b.recv().await.expect("recv").expect("some");
        assert_eq!(
            &again.payload[..],
            b"1",
            "the unacked delivery comes back first"
        );
    }

    #[tokio::test]
    async fn lost_acks_and_duplicate_publishes_redeliver() {
        let broker = MemoryBroker::new(1);
        broker.faults().duplicate_next_publishes(1);
        broker.publish("t", msg("k", "x")).await.expect("publish");
        let mut s = broker.source("t");
        let (a, ack) = s.recv().await.expect("recv").expect("some");
        broker.faults().lose_next_acks(1);
        ack.ack().await.expect("ack");
        let (b, ack) = s.recv().await.expect("recv").expect("some");
        ack.ack().await.expect("ack");
        let (c, ack) = s.recv().await.expect("recv").expect("some");
        ack.ack().await.expect("ack");
        assert_eq!(a.origin, b.origin, "a lost ack redelivers the same offset");
        assert_ne!(b.origin, c.origin, "the duplicate is a second copy");
        assert_eq!(broker.depth("t"), 0);
    }

    #[tokio::test]
    async fn a_full_partition_is_skipped_until_a_delivery_of_it_settles() {
        let broker = MemoryBroker::new(2);
        // Partition of each key, as the broker hashes it.
        let mut by_partition: [Vec<String>; 2] = Default::default();
        for i in 0..40 {
            let key = format!("k{i}");
            let pos = broker
                .publish("probe", msg(&key, "x"))
                .await
                .expect("publish");
            by_partition[pos.partition].push(key);
        }
        let (crowded, other) = (&by_partition[0][0], &by_partition[1][0]);
        for _ in 0..10 {
            broker
                .publish("t", msg(crowded, "c"))
                .await
                .expect("publish");
        }
        broker.publish("t", msg(other, "o")).await.expect("publish");
        let mut s = broker.source("t").with_max_per_partition(2);
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(s.recv().await.expect("recv").expect("some"));
        }
        let bodies: Vec<&[u8]> = held.iter().map(|(e, _)| &e.payload[..]).collect();
        assert_eq!(
            bodies.iter().filter(|b| **b == b"c").count(),
            2,
            "two of the crowded partition and the other's one: {bodies:?}"
        );
        // `timeout` polls `recv` once before looking at the clock: a
        // delivery there to take is returned.
        let next = tokio::time::timeout(Duration::ZERO, s.recv()).await;
        assert!(
            next.is_err(),
            "the crowded partition is full and the other empty: nothing to take"
        );
        let (_, ack) = held.remove(0);
        ack.ack().await.expect("ack");
        let (e, _ack) = s.recv().await.expect("recv").expect("some");
        assert_eq!(&e.payload[..], b"c", "a settle makes room");
    }

    #[tokio::test]
    async fn partitions_belong_to_one_source() {
        let broker = MemoryBroker::new(2);
        let mut a = broker.source("t");
        let mut b = broker.source("t");
        for i in 0..20 {
            broker
                .publish("t", msg(&format!("k{i}"), "x"))
                .await
                .expect("publish");
        }
        let mut seen_a = std::collections::HashSet::new();
        let mut seen_b = std::collections::HashSet::new();
        for _ in 0..10 {
            if let Ok(Ok(Some((e, _ack)))) =
                tokio::time::timeout(Duration::from_millis(50), a.recv()).await
            {
                seen_a.insert(e.origin.position.split('/').next().map(str::to_owned));
                std::mem::forget(_ack);
            }
            if let Ok(Ok(Some((e, _ack)))) =
                tokio::time::timeout(Duration::from_millis(50), b.recv()).await
            {
                seen_b.insert(e.origin.position.split('/').next().map(str::to_owned));
                std::mem::forget(_ack);
            }
        }
        assert!(seen_a.is_disjoint(&seen_b), "{seen_a:?} vs {seen_b:?}");
    }
}
