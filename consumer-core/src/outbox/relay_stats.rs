//! [`RelayStats`]: the live counters of a relay.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Live counters of a relay.
#[derive(Debug, Default)]
pub struct RelayStats {
    pub(super) rounds: AtomicU64,
    pub(super) claimed: AtomicU64,
    pub(super) published: AtomicU64,
    pub(super) retried: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) errors: AtomicU64,
}

/// A copy of [`RelayStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStatsSnapshot {
    /// Claim rounds completed.
    pub rounds: u64,
    /// Rows claimed.
    pub claimed: u64,
    /// Events the broker confirmed.
    pub published: u64,
    /// Publishes refused or lost, to be retried.
    pub retried: u64,
    /// Events marked failed (their aggregate is blocked until
    /// [`Outbox::retry_failed`](super::Outbox::retry_failed)).
    pub failed: u64,
    /// Rounds that failed (database down, ...).
    pub errors: u64,
}

impl RelayStats {
    /// Reads the counters.
    pub fn snapshot(&self) -> RelayStatsSnapshot {
        RelayStatsSnapshot {
            rounds: self.rounds.load(Relaxed),
            claimed: self.claimed.load(Relaxed),
            published: self.published.load(Relaxed),
            retried: self.retried.load(Relaxed),
            failed: self.failed.load(Relaxed),
            errors: self.errors.load(Relaxed),
        }
    }
}
