//! [`SqsStats`]: in-process counters of an [`SqsSource`](super::SqsSource).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters of an [`SqsSource`](super::SqsSource); clone it before
/// handing the source to the consumer, read it with
/// [`snapshot`](Self::snapshot).
#[derive(Clone, Debug, Default)]
pub struct SqsStats {
    pub(super) inner: Arc<StatsInner>,
}

#[derive(Debug, Default)]
pub(super) struct StatsInner {
    pub(super) received: AtomicU64,
    pub(super) redelivered: AtomicU64,
    pub(super) receive_errors: AtomicU64,
    pub(super) deleted: AtomicU64,
    pub(super) delete_failures: AtomicU64,
    pub(super) released: AtomicU64,
    pub(super) extended: AtomicU64,
    pub(super) extension_failures: AtomicU64,
    pub(super) retried_by_visibility: AtomicU64,
    pub(super) dead_letters: AtomicU64,
    pub(super) in_flight: AtomicU64,
    pub(super) waiting: AtomicU64,
}

impl StatsInner {
    pub(super) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqsStatsSnapshot {
    /// Messages received.
    pub received: u64,
    /// Of those, received before (`ApproximateReceiveCount` above 1).
    pub redelivered: u64,
    /// `ReceiveMessage` calls that failed.
    pub receive_errors: u64,
    /// Messages deleted (acked).
    pub deleted: u64,
    /// Deletes that failed for good (SQS redelivers those; dedup skips them).
    pub delete_failures: u64,
    /// Messages given back unprocessed (visibility 0): at shutdown, or
    /// because an earlier message of their group was retried by visibility.
    pub released: u64,
    /// Visibility extensions of messages held while they wait or run.
    pub extended: u64,
    /// Visibility extensions that failed.
    pub extension_failures: u64,
    /// Retries served by `ChangeMessageVisibility` (mode `redeliver`).
    pub retried_by_visibility: u64,
    /// Dead letters SQS confirmed.
    pub dead_letters: u64,
    /// Messages received and not settled.
    pub in_flight: u64,
    /// Of those, waiting in the source (not handed to the runtime yet).
    pub waiting: u64,
}

impl SqsStats {
    /// The counters now.
    pub fn snapshot(&self) -> SqsStatsSnapshot {
        let i = &self.inner;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SqsStatsSnapshot {
            received: get(&i.received),
            redelivered: get(&i.redelivered),
            receive_errors: get(&i.receive_errors),
            deleted: get(&i.deleted),
            delete_failures: get(&i.delete_failures),
            released: get(&i.released),
            extended: get(&i.extended),
            extension_failures: get(&i.extension_failures),
            retried_by_visibility: get(&i.retried_by_visibility),
            dead_letters: get(&i.dead_letters),
            in_flight: get(&i.in_flight),
            waiting: get(&i.waiting),
        }
    }
}
