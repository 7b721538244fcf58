//! [`MemorySource`]: consumes one topic of a [`MemoryBroker`].

use std::sync::Arc;

use tokio::time::Instant;

use super::MemoryBroker;
use super::acker::MemoryAcker;
use super::gauges::MemoryGauges;
use crate::envelope::{Envelope, Message, Origin, Placement, Position};
use crate::metrics::SourceGauges;
use crate::source::Source;
use consumer_backend::Error;

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
///
/// Retries sent back through the broker wait in their partition until due
/// (any delay: the broker holds them itself).
#[derive(Debug)]
pub struct MemorySource {
    broker: MemoryBroker,
    topic: Arc<str>,
    /// The topic's index in the broker.
    index: usize,
    id: u64,
    max_per_partition: usize,
    /// The largest body whose attributes are read ([`Source::limit_body`]).
    max_body: usize,
}

impl MemorySource {
    pub(super) fn new(broker: MemoryBroker, topic: Arc<str>, index: usize, id: u64) -> Self {
        Self {
            broker,
            topic,
            index,
            id,
            max_per_partition: DEFAULT_MAX_PER_PARTITION,
            max_body: usize::MAX,
        }
    }

    /// Unsettled deliveries a partition may have before the source takes
    /// from the others only (default [`DEFAULT_MAX_PER_PARTITION`]; at
    /// least 1). Keep it at or below the runtime's `max_in_flight` divided
    /// by the partitions with traffic.
    #[must_use]
    pub fn with_max_per_partition(mut self, n: usize) -> Self {
        self.max_per_partition = n.max(1);
        self
    }

    fn try_take(&self) -> Result<(Arc<Envelope>, MemoryAcker), Option<Instant>> {
        let mut state = self.broker.lock();
        let n = self.broker.inner.partitions;
        let Some(topic) = state.topics.get_mut(self.index) else {
            return Err(None);
        };
        // Read only when a partition holds retries: a clock read per take
        // costs more than the rest of the take.
        let mut now = None;
        let mut next_due: Option<Instant> = None;
        for step in 0..n {
            let index = (topic.cursor + step) % n;
            let p = &mut topic.partitions[index];
            if p.owner.is_some_and(|o| o != self.id) {
                continue;
            }
            if !p.delayed.is_empty() {
                p.promote_due(*now.get_or_insert_with(Instant::now));
                if let Some(due) = p.next_due() {
                    next_due = Some(next_due.map_or(due, |n| n.min(due)));
                }
            }
            if p.unacked.len() >= self.max_per_partition {
                // Full: a settle wakes the source.
                continue;
            }
            let Some(stored) = p.ready.pop_front() else {
                continue;
            };
            p.owner = Some(self.id);
            // The copy redelivered if this delivery is released: the
            // payload and headers are shared, only the key is copied.
            p.hold_unacked(stored.clone());
            topic.cursor = (index + 1) % n;
            let (partition, offset) = (
                i32::try_from(index).unwrap_or(i32::MAX),
                i64::try_from(stored.offset).unwrap_or(i64::MAX),
            );
            // The topic's name shared, the position written only if read.
            let origin = Origin {
                channel: Arc::clone(&self.topic).into(),
                position: Position::log(partition, offset),
                placement: Placement::Log { partition, offset },
            };
            let Message {
                key,
                headers,
                payload,
            } = stored.message;
            // Built only for messages that carry no id of their own.
            let topic = &self.topic;
            let offset = stored.offset;
            let envelope = Arc::new(Envelope::from_parts_within(
                self.max_body,
                payload,
                headers,
                key,
                origin,
                || format!("{topic}/{index}/{offset}"),
            ));
            let acker = MemoryAcker::new(self.broker.clone(), self.index, index, offset);
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

    fn limit_body(&mut self, max_bytes: usize) {
        self.max_body = max_bytes;
    }

    fn gauges(&self) -> Option<Arc<dyn SourceGauges>> {
        Some(Arc::new(MemoryGauges {
            broker: self.broker.clone(),
            topic: Arc::clone(&self.topic),
            index: self.index,
            source: self.id,
        }))
    }

    fn channels(&self) -> Option<crate::describe::SourceChannels> {
        use crate::describe::{ChannelDescription, SourceChannels};
        Some(SourceChannels {
            input: ChannelDescription::new("memory", String::from(&*self.topic)),
            retry: None,
            retries_return_on_input: false,
            dead_letter: Some(ChannelDescription::new(
                "memory",
                format!("{}.dlq", self.topic),
            )),
        })
    }

    fn check_redelivery(&self, _longest_delay: std::time::Duration) -> Result<(), String> {
        Ok(())
    }

    async fn recv(&mut self) -> Result<Option<(Arc<Envelope>, MemoryAcker)>, Error> {
        loop {
            // A delivery ready is taken without registering a waiter
            // (registering and dropping one cost more than the take).
            if let Ok(delivery) = self.try_take() {
                return Ok(Some(delivery));
            }
            let _waiting = self.broker.waiting();
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
            if let Some(t) = state.topics.get_mut(self.index) {
                for p in &mut t.partitions {
                    if p.owner == Some(self.id) {
                        for s in p.unacked.take_all() {
                            p.requeue(s);
                        }
                        p.owner = None;
                    }
                }
            }
        }
        self.broker.wake();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::source::Acker;

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
    async fn a_released_delivery_comes_back_at_its_offset_and_an_acked_one_does_not() {
        let broker = MemoryBroker::new(1);
        broker.publish("t", msg("k", "x")).await.expect("publish");
        let mut s = broker.source("t");
        let (a, ack) = s.recv().await.expect("recv").expect("some");
        ack.release().await.expect("release");
        let (b, ack) = s.recv().await.expect("recv").expect("some");
        assert_eq!(a.origin, b.origin, "a release redelivers the same offset");
        ack.ack().await.expect("ack");
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
