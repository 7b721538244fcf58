//! [`Job`]: a message with how the queue should hold it (when it falls
//! due, its priority, whether it is unique while pending), and
//! [`Enqueued`]: what an enqueue did.

use std::time::Duration;

use consumer_core::Message;
use consumer_core::outbox::Due;

/// A job to enqueue: a framework [`Message`] (a handler takes it as it
/// would take the message from a broker), with the queue's options. A
/// `Message` converts into a job due now, at priority 0, not unique.
///
/// ```
/// use std::time::Duration;
/// use consumer_core::Message;
/// use consumer_jobs::Job;
///
/// # fn demo() -> Result<(), serde_json::Error> {
/// let reminder = Job::new(Message::json("SendReminder", &serde_json::json!({"user": 7}))?)
///     .with_due(Duration::from_secs(3600)) // in an hour
///     .with_priority(5)
///     .unique_while_pending("reminder-7"); // at most one waiting per user
/// # let _ = reminder;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Job {
    pub(crate) message: Message,
    pub(crate) due: Option<Due>,
    pub(crate) priority: i32,
    pub(crate) unique_key: Option<String>,
    /// With `unique_key`: unique for this long after the enqueue rather
    /// than while pending.
    pub(crate) unique_window: Option<Duration>,
}

impl Job {
    /// `message` as a job due now.
    pub fn new(message: Message) -> Self {
        Self {
            message,
            due: None,
            priority: 0,
            unique_key: None,
            unique_window: None,
        }
    }

    /// Not claimed before it falls due: [`Due::at`] an instant (a past one
    /// is due at once) or [`Due::after`] a delay (a `Duration` or an
    /// `OffsetDateTime` converts). A delay is counted by the database's
    /// clock on PostgreSQL, by this process's on SQLite. A keyed job that
    /// waits for its due time holds the later jobs of its key back, as one
    /// waiting to retry does.
    #[must_use]
    pub fn with_due(mut self, due: impl Into<Due>) -> Self {
        self.due = Some(due.into());
        self
    }

    /// Claimed before the due jobs of its queue with a lower priority
    /// (default 0; higher first). A key's order comes first: a job never
    /// overtakes an earlier job of its key, whatever their priorities.
    #[must_use]
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Written only if no job of its queue with this unique key is pending
    /// (waiting, running or waiting to retry); once that one is acked the
    /// key is free again. The enqueue then says
    /// [`Enqueued::AlreadyPending`].
    #[must_use]
    pub fn unique_while_pending(mut self, unique_key: impl Into<String>) -> Self {
        self.unique_key = Some(unique_key.into());
        self.unique_window = None;
        self
    }

    /// Written only if no job of its queue took this unique key within
    /// the last `window`, whether that job is still pending or finished
    /// long ago; the enqueue then says [`Enqueued::WithinWindow`]. The
    /// window starts at the enqueue that took the key (on PostgreSQL at
    /// its transaction's start, by the database's clock); a rolled-back
    /// enqueue takes nothing. It
    /// replaces [`unique_while_pending`](Self::unique_while_pending): a job
    /// unique for a window shorter than it waits may have a second one
    /// pending beside it.
    #[must_use]
    pub fn unique_for(mut self, unique_key: impl Into<String>, window: Duration) -> Self {
        self.unique_key = Some(unique_key.into());
        self.unique_window = Some(window);
        self
    }

    /// The window in ms, when unique for one.
    pub(crate) fn unique_window_millis(&self) -> Option<i64> {
        self.unique_window.map(delay_millis)
    }

    /// The due instant in Unix ms and the delay in ms the insert binds.
    pub(crate) fn due_millis(&self) -> (Option<i64>, i64) {
        let saturate = |ms: i128| i64::try_from(ms).unwrap_or(if ms < 0 { 0 } else { i64::MAX });
        match self.due {
            None => (None, 0),
            Some(Due::At(t)) => (Some(saturate(t.unix_timestamp_nanos() / 1_000_000)), 0),
            Some(Due::After(d)) => (None, delay_millis(d)),
        }
    }
}

/// A delay in milliseconds, at most ten years (a delay neither database's
/// time arithmetic overflows on).
fn delay_millis(d: Duration) -> i64 {
    const TEN_YEARS_MS: u128 = 10 * 365 * 24 * 3600 * 1000;
    i64::try_from(d.as_millis().min(TEN_YEARS_MS)).unwrap_or(i64::MAX)
}

impl From<Message> for Job {
    fn from(message: Message) -> Self {
        Self::new(message)
    }
}

/// What an enqueue did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Enqueued {
    /// The job was written (visible once its transaction commits), with
    /// this id: its message's `ce_id`, or a new UUIDv7.
    Added {
        /// The job's message id.
        id: String,
    },
    /// A job with the same unique key is pending in the queue: nothing
    /// was written.
    AlreadyPending,
    /// A job with the same unique key was enqueued within the window of
    /// [`Job::unique_for`]: nothing was written.
    WithinWindow,
}

impl Enqueued {
    /// The new job's id, if one was written.
    pub fn id(&self) -> Option<&str> {
        match self {
            Self::Added { id } => Some(id),
            Self::AlreadyPending | Self::WithinWindow => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_due_time_is_an_instant_or_a_bounded_delay() {
        let job = || Job::new(Message::raw(&b"{}"[..]));
        assert_eq!(job().due_millis(), (None, 0));
        let at = time::OffsetDateTime::UNIX_EPOCH + Duration::from_secs(2);
        assert_eq!(job().with_due(at).due_millis(), (Some(2_000), 0));
        assert_eq!(
            job().with_due(Duration::from_millis(1500)).due_millis(),
            (None, 1500)
        );
        let far = job().with_due(Duration::MAX).due_millis().1;
        assert_eq!(far, 10 * 365 * 24 * 3600 * 1000);
    }
}
