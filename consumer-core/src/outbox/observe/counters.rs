//! [`RelayStats`], the live counters of a relay, as a listener: which
//! event counts what.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::Happened;

/// Live counters of a relay.
#[derive(Debug, Default)]
pub struct RelayStats {
    rounds: AtomicU64,
    claimed: AtomicU64,
    published: AtomicU64,
    retried: AtomicU64,
    failed: AtomicU64,
    errors: AtomicU64,
}

pub(super) fn on(s: &RelayStats, what: &Happened<'_>) {
    match *what {
        Happened::RoundEnded { claimed } => {
            s.rounds.fetch_add(1, Relaxed);
            s.claimed.fetch_add(claimed as u64, Relaxed);
        }
        Happened::RoundFailed { .. } => {
            s.rounds.fetch_add(1, Relaxed);
            s.errors.fetch_add(1, Relaxed);
        }
        Happened::Sent { error: None, .. } => {
            s.published.fetch_add(1, Relaxed);
        }
        Happened::Retrying { .. } => {
            s.retried.fetch_add(1, Relaxed);
        }
        Happened::GaveUp { .. } => {
            s.failed.fetch_add(1, Relaxed);
        }
        Happened::BacklogRead(_)
        | Happened::BacklogNotRead { .. }
        | Happened::ClaimingAgain { .. }
        | Happened::Sent { .. } => {}
    }
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
    /// [`Outbox::retry_failed`](crate::outbox::Outbox::retry_failed)).
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
