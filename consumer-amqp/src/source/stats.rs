//! [`AmqpStats`]: the counters of a source, as its [`SourceObserver`]
//! counts them, and the depths of its queues.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use consumer_backend::observe::{Broker, Counter, SourceObserver};

use crate::error::Result;
use crate::publisher::AmqpPublisher;
use crate::topology::{Depths, Topology};

/// Live counters of an [`AmqpSource`](super::AmqpSource) or a
/// [`PartitionedSource`](super::PartitionedSource), and the depths of its
/// queues; clone it before handing the source to the consumer, read it
/// with [`snapshot`](Self::snapshot).
#[derive(Clone, Debug)]
pub struct AmqpStats {
    pub(super) inner: Arc<StatsInner>,
}

#[derive(Debug)]
pub(super) struct StatsInner {
    pub(super) topology: Arc<Topology>,
    pub(super) publisher: AmqpPublisher,
    /// What the source, its sessions and its ackers emit through; its
    /// counters are the ones read here.
    pub(super) observer: SourceObserver,
    /// The queues the source consumes (or tries to), each with whether
    /// RabbitMQ reports it crashed: the `consumer.queue.crashed` gauge.
    pub(super) crashed: Mutex<BTreeMap<Arc<str>, bool>>,
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AmqpStatsSnapshot {
    /// Deliveries received from RabbitMQ.
    pub delivered: u64,
    /// Of those, flagged `redelivered` by RabbitMQ.
    pub redelivered: u64,
    /// Deliveries received and not yet settled.
    pub in_flight: u64,
    /// Consuming channels lost and opened again.
    pub reconnects: u64,
    /// Queues RabbitMQ reports crashed now.
    pub crashed_queues: u64,
}

impl AmqpStats {
    /// The counters now.
    pub fn snapshot(&self) -> AmqpStatsSnapshot {
        let crashed_queues = self
            .inner
            .crashed
            .lock()
            .map_or(0, |queues| queues.values().filter(|&&c| c).count() as u64);
        AmqpStatsSnapshot {
            delivered: self.delivered(),
            redelivered: self.redelivered(),
            in_flight: self.in_flight(),
            reconnects: self.reconnects(),
            crashed_queues,
        }
    }

    pub(super) fn new(topology: Arc<Topology>, publisher: AmqpPublisher) -> Self {
        Self {
            inner: Arc::new(StatsInner {
                topology,
                publisher,
                observer: SourceObserver::new(Broker::Amqp),
                crashed: Mutex::default(),
            }),
        }
    }

    /// Deliveries received from RabbitMQ.
    pub fn delivered(&self) -> u64 {
        self.inner.observer.counters().get(Counter::Received)
    }

    /// Deliveries RabbitMQ flagged `redelivered` (handed out before and not
    /// acked: a crash, a lost channel, a release).
    pub fn redelivered(&self) -> u64 {
        self.inner.observer.counters().get(Counter::Redelivered)
    }

    /// Deliveries received and not yet settled (acked, released or dropped).
    pub fn in_flight(&self) -> u64 {
        self.delivered()
            .saturating_sub(self.inner.observer.counters().get(Counter::Left))
    }

    /// How many times the consuming channel was lost and re-opened.
    pub fn reconnects(&self) -> u64 {
        self.inner.observer.counters().get(Counter::Reconnects)
    }

    /// Ready messages in the work, dead-letter and delay queues (passive
    /// declares on the settle connection).
    pub async fn depths(&self) -> Result<Depths> {
        let channel = self.inner.publisher.side_channel().await?;
        self.inner.topology.depths(channel).await
    }
}
