//! [`KafkaStats`]: the counters of one source, as its
//! [`SourceObserver`](consumer_backend::SourceObserver) counts them, and
//! its per-partition lag, as its ledger holds it.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use consumer_backend::observe::Counter;

use super::KafkaSource;
use super::ledger::Ledger;

/// Counters and per-partition lag of one [`KafkaSource`].
#[derive(Clone)]
pub struct KafkaStats {
    shared: Arc<Ledger>,
}

impl KafkaSource {
    /// Live counters and per-partition lag.
    pub fn stats(&self) -> KafkaStats {
        KafkaStats {
            shared: Arc::clone(&self.link.shared),
        }
    }
}

impl fmt::Debug for KafkaStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.snapshot(), f)
    }
}

/// One assigned partition.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionStats {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The offset stored for commit (lowest unfinished), if any record came.
    pub position: Option<i64>,
    /// The last committed offset librdkafka reported.
    pub committed: Option<i64>,
    /// The high watermark librdkafka reported (every `statistics.interval.ms`).
    pub high_watermark: Option<i64>,
    /// Records pending: received and not settled.
    pub pending: usize,
    /// Whether the partition is paused (full window, or a parked retry).
    pub paused: bool,
    /// Whether a retry copy waits for its due time.
    pub parked: bool,
}

impl PartitionStats {
    /// Records behind the high watermark: `high_watermark - position` (or
    /// the committed offset before any record came).
    pub fn lag(&self) -> Option<i64> {
        let hw = self.high_watermark?;
        let pos = self.position.or(self.committed)?;
        Some((hw - pos).max(0))
    }
}

/// A reading of [`KafkaStats`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KafkaStatsSnapshot {
    /// Records handed to the runtime.
    pub delivered: u64,
    /// Assignments received (one per rebalance this member took part in).
    pub rebalances: u64,
    /// Revocations received.
    pub revocations: u64,
    /// Revokes that gave partitions up with records still running.
    pub revoke_timeouts: u64,
    /// Assignments lost (session timeout): nothing committed for them.
    pub lost_assignments: u64,
    /// Offset commits that failed or went unanswered (auto-commits, on
    /// revoke, on close).
    pub commit_failures: u64,
    /// Closes that returned before the consumer had left its group.
    pub close_timeouts: u64,
    /// Connections to brokers that were lost (a broker down, a link cut,
    /// requests timing out on a stalled link); librdkafka opens them again
    /// by itself. Read from its statistics, once a second.
    pub broker_disconnects: u64,
    /// The consumer has closed and left its group (after a close timeout,
    /// this turns true later, once librdkafka gives up or gets through).
    pub closed: bool,
    /// Records the runtime holds (handed out, not settled).
    pub in_flight: usize,
    /// Retry copies waiting for their due time.
    pub parked: usize,
    /// Records released unsettled (redelivered after a restart or rebalance).
    pub released: u64,
    /// Assigned partitions, sorted by topic and partition.
    pub partitions: Vec<PartitionStats>,
}

impl KafkaStatsSnapshot {
    /// The sum of the partitions' lags.
    pub fn total_lag(&self) -> i64 {
        self.partitions.iter().filter_map(PartitionStats::lag).sum()
    }
}

impl KafkaStats {
    /// A consistent reading.
    pub fn snapshot(&self) -> KafkaStatsSnapshot {
        let s = &self.shared;
        let state = s.lock();
        let mut partitions: Vec<PartitionStats> = state
            .partitions
            .iter()
            .map(|(tp, p)| PartitionStats {
                topic: tp.topic.to_string(),
                partition: tp.partition,
                position: p.position(),
                committed: p.committed,
                high_watermark: p.high_watermark,
                pending: p.pending.len(),
                paused: p.paused,
                parked: p.parked.is_some(),
            })
            .collect();
        partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        let c = s.observer.snapshot();
        KafkaStatsSnapshot {
            delivered: c.get(Counter::Received),
            rebalances: c.get(Counter::Assigned),
            revocations: c.get(Counter::Revoked),
            revoke_timeouts: c.get(Counter::RevokeTimeouts),
            lost_assignments: c.get(Counter::Lost),
            commit_failures: c.get(Counter::CommitFailures),
            close_timeouts: c.get(Counter::CloseTimeouts),
            broker_disconnects: c.get(Counter::Reconnects),
            closed: s.closed.load(Ordering::SeqCst),
            in_flight: state.partitions.values().map(|p| p.taken).sum(),
            parked: state
                .partitions
                .values()
                .filter(|p| p.parked.is_some())
                .count(),
            released: state.partitions.values().map(|p| p.released).sum(),
            partitions,
        }
    }
}
