//! [`NotFound`]: what an event does when its saga has no row.

use consumer_core::retry::RetryPolicy;

/// What an event type does when no saga has its id. Each registration
/// ([`SagaBuilder::on`](super::SagaBuilder::on)) names one: there is no
/// silent default. A saga that finished is not "not found": its row stays
/// as a tombstone and a late event is acked and counted
/// (`consumer.saga.ignored`, reason `finished`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotFound {
    /// The event starts the saga: its transition runs on the state's
    /// `Default`. A saga type needs at least one such event.
    Start,
    /// The event overtook the one that starts the saga (another topic,
    /// another partition, a retry): it is retried under this policy, and
    /// dead-lettered as exhausted if the saga never appears. Give it
    /// `RetryMode::Redeliver` when the start may come behind it on the same
    /// source: in place, the event holds its key's lane, and so the start,
    /// until its attempts run out.
    Retry(RetryPolicy),
    /// Dead-letter it at once (terminal), with this reason beside the
    /// saga found missing (its type and id).
    DeadLetter(String),
    /// Ack it, count it (`consumer.saga.ignored`, reason `not_found`) and
    /// log it at DEBUG: for events many sagas do not care about.
    Ignore,
}

impl NotFound {
    /// [`NotFound::Retry`] with `Redeliver` retries: 10 attempts, 200 ms to
    /// 30 s apart (about 2 minutes in all), so the start can arrive behind
    /// the event on the same source.
    pub fn retry() -> Self {
        Self::Retry(
            RetryPolicy::exponential(
                std::time::Duration::from_millis(200),
                std::time::Duration::from_secs(30),
                10,
            )
            .with_mode(consumer_core::retry::RetryMode::Redeliver),
        )
    }

    /// [`NotFound::DeadLetter`] with `reason`.
    pub fn dead_letter(reason: impl Into<String>) -> Self {
        Self::DeadLetter(reason.into())
    }

    /// The name logs and metrics use: `start`, `retry`, `dead_letter`,
    /// `ignore`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Retry(_) => "retry",
            Self::DeadLetter(_) => "dead_letter",
            Self::Ignore => "ignore",
        }
    }
}
