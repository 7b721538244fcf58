//! What a source reports when metrics are collected: lag per partition,
//! queue depths, and the counters only the backend sees (rebalances,
//! commit failures, reconnects), which it reads from its
//! [`SourceObserver`](crate::SourceObserver)'s counters.
//!
//! A backend implements [`SourceGauges`] and returns it from
//! [`Source::gauges`](crate::source::Source::gauges); the runtime registers
//! the instruments (their names and units are the runtime's metric
//! catalogue's) and calls [`SourceGauges::observe`] at each collection.
//! Only what is observed is exported, so a partition that is revoked stops
//! being reported and its series go away.

use std::sync::Arc;
use std::time::Duration;

/// Reports a source's gauges; called on the collector's thread, so it
/// must only read what the source keeps up to date (atomics, a short
/// lock), never block or wait for the broker.
pub trait SourceGauges: Send + Sync + 'static {
    /// Appends the current readings.
    fn observe(&self, readings: &mut SourceReadings);
}

/// The role of a queue a source reads or retries through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueRole {
    /// Where deliveries come from.
    Work,
    /// Where retry copies wait for their due time.
    Delay,
    /// Messages scheduled for later that are not retries (the job queue's
    /// jobs given a due time).
    Scheduled,
    /// Where dead letters go.
    DeadLetter,
    /// Messages of the work queue taken by consumers and not settled yet,
    /// where the broker counts them (SQS's
    /// `ApproximateNumberOfMessagesNotVisible`).
    InFlight,
}

/// One assigned partition, as [`SourceReadings::partition`] recorded it.
#[derive(Debug, Clone)]
pub struct PartitionReading {
    /// The topic.
    pub destination: Arc<str>,
    /// The partition.
    pub partition: i32,
    /// Records not yet settled by this consumer.
    pub lag: u64,
    /// The age of the oldest record held unsettled.
    pub oldest_age: Duration,
}

/// One queue, as [`SourceReadings::queue`] recorded it.
#[derive(Debug, Clone)]
pub struct QueueReading {
    /// The queue.
    pub name: Arc<str>,
    /// What it holds.
    pub role: QueueRole,
    /// How many messages.
    pub depth: u64,
}

/// What [`SourceGauges::observe`] fills in.
#[derive(Debug, Default)]
pub struct SourceReadings {
    partitions: Vec<PartitionReading>,
    queues: Vec<QueueReading>,
    crashed: Vec<(Arc<str>, bool)>,
    rebalances: Option<[u64; 3]>,
    commit_failures: Option<u64>,
    reconnects: Option<(Arc<str>, u64)>,
    oldest: Vec<(Arc<str>, Duration)>,
}

impl SourceReadings {
    /// One assigned partition: `lag` records not yet settled by this
    /// consumer, and the age of the oldest one it holds unsettled
    /// (`Duration::ZERO` when it holds none).
    pub fn partition(
        &mut self,
        destination: Arc<str>,
        partition: i32,
        lag: u64,
        oldest_age: Duration,
    ) {
        self.partitions.push(PartitionReading {
            destination,
            partition,
            lag,
            oldest_age,
        });
    }

    /// The messages in a queue.
    pub fn queue(&mut self, name: Arc<str>, role: QueueRole, depth: u64) {
        self.queues.push(QueueReading { name, role, depth });
    }

    /// How long the oldest message ready in `queue` (due, taken by no
    /// consumer) has waited since it became ready; `Duration::ZERO` when
    /// none is ready.
    pub fn queue_oldest(&mut self, queue: Arc<str>, age: Duration) {
        self.oldest.push((queue, age));
    }

    /// Whether the broker reports `queue` (one the source consumes) as
    /// crashed: its messages are out of reach until an operator acts.
    pub fn queue_crashed(&mut self, queue: Arc<str>, crashed: bool) {
        self.crashed.push((queue, crashed));
    }

    /// Group membership changes since the source started.
    pub fn rebalances(&mut self, assigned: u64, revoked: u64, lost: u64) {
        self.rebalances = Some([assigned, revoked, lost]);
    }

    /// Offset commits that failed since the source started.
    pub fn commit_failures(&mut self, n: u64) {
        self.commit_failures = Some(n);
    }

    /// Times the consuming connection to `destination` was opened again.
    pub fn reconnects(&mut self, destination: Arc<str>, n: u64) {
        self.reconnects = Some((destination, n));
    }

    /// The partitions recorded.
    pub fn partitions_read(&self) -> &[PartitionReading] {
        &self.partitions
    }

    /// The queues recorded.
    pub fn queues_read(&self) -> &[QueueReading] {
        &self.queues
    }

    /// The oldest ready message's age per queue, as recorded.
    pub fn oldest_read(&self) -> &[(Arc<str>, Duration)] {
        &self.oldest
    }

    /// The queues recorded as crashed or not.
    pub fn crashed_read(&self) -> &[(Arc<str>, bool)] {
        &self.crashed
    }

    /// The membership changes recorded: assigned, revoked, lost.
    pub fn rebalances_read(&self) -> Option<[u64; 3]> {
        self.rebalances
    }

    /// The commit failures recorded.
    pub fn commit_failures_read(&self) -> Option<u64> {
        self.commit_failures
    }

    /// The reconnects recorded, with their destination.
    pub fn reconnects_read(&self) -> Option<(&Arc<str>, u64)> {
        self.reconnects.as_ref().map(|(d, n)| (d, *n))
    }
}
