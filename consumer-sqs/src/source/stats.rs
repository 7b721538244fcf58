//! [`SqsStats`]: the counters of an [`SqsSource`](super::SqsSource), as its
//! [`SourceObserver`] counts them, read as SQS names them.

use consumer_backend::observe::{Broker, Counter, Level, SourceObserver};

/// Live counters of an [`SqsSource`](super::SqsSource); clone it before
/// handing the source to the consumer, read it with
/// [`snapshot`](Self::snapshot).
#[derive(Clone, Debug)]
pub struct SqsStats {
    pub(super) observer: SourceObserver,
}

impl Default for SqsStats {
    fn default() -> Self {
        Self {
            observer: SourceObserver::new(Broker::Sqs),
        }
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
        let s = self.observer.snapshot();
        SqsStatsSnapshot {
            received: s.get(Counter::Received),
            redelivered: s.get(Counter::Redelivered),
            receive_errors: s.get(Counter::ReceiveErrors),
            deleted: s.get(Counter::Acked),
            delete_failures: s.get(Counter::AckFailures),
            released: s.get(Counter::Released),
            extended: s.get(Counter::Extended),
            extension_failures: s.get(Counter::ExtensionFailures),
            retried_by_visibility: s.get(Counter::RetriedByBroker),
            dead_letters: s.get(Counter::DeadLetters),
            in_flight: s.level(Level::InFlight),
            waiting: s.level(Level::Waiting),
        }
    }
}
