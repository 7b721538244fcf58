//! Why a saga event failed, each error saying what to do.

/// No saga has the event's id, and its [`NotFound`](super::NotFound)
/// policy retries or dead-letters it.
#[derive(Debug, thiserror::Error)]
#[error("no saga `{saga}` `{saga_id}` for event `{event_type}`: {reason}")]
pub struct SagaNotFound {
    /// The saga type.
    pub saga: &'static str,
    /// The id the event correlates to.
    pub saga_id: String,
    /// The event's type.
    pub event_type: &'static str,
    /// The policy's reason, or that the event waits for the saga's start.
    pub reason: String,
}

/// A saga event keyed otherwise than by its saga's id: the router's lanes
/// are per key, so the saga's events would lose their order (and
/// [`KeyMismatch::Refuse`](super::KeyMismatch::Refuse) dead-letters it).
#[derive(Debug, thiserror::Error)]
#[error(
    "event `{event_type}` for saga `{saga}` `{saga_id}` is keyed {}: messages for a saga must be keyed by its id, so its events keep their order (key them so, or accept the mismatch with SagaBuilder::with_key_mismatch)",
    key.as_deref().map_or_else(|| "by nothing".to_owned(), |k| format!("`{k}`"))
)]
pub struct KeyMismatchError {
    /// The saga type.
    pub saga: &'static str,
    /// The id the event correlates to.
    pub saga_id: String,
    /// The event's type.
    pub event_type: &'static str,
    /// The message's key.
    pub key: Option<String>,
}

/// A delivery whose type the saga does not take (a saga run without a
/// router, on a source carrying other types).
#[derive(Debug, thiserror::Error)]
#[error("saga `{saga}` takes no event of type {}; it takes: {}", kind.as_deref().map_or_else(|| "(none)".to_owned(), |k| format!("`{k}`")), takes.join(", "))]
pub struct UnknownSagaEvent {
    /// The saga type.
    pub saga: &'static str,
    /// The delivery's type.
    pub kind: Option<String>,
    /// What the saga takes.
    pub takes: Vec<&'static str>,
}

/// A timeout that names no saga: neither a subject nor a key.
#[derive(Debug, thiserror::Error)]
#[error(
    "timeout `{event_type}` of saga `{saga}` names no saga: it has neither a CloudEvents subject nor a key (timeouts are published by the outbox with both)"
)]
pub struct TimeoutWithoutSaga {
    /// The saga type.
    pub saga: &'static str,
    /// The timeout's type.
    pub event_type: &'static str,
}

/// A transition asked for what cannot be done (complete a finished saga,
/// report an undo none awaits, send what does not serialise): a bug in the
/// saga, terminal.
#[derive(Debug, thiserror::Error)]
#[error("saga `{saga}` `{saga_id}`, event `{event_type}`: {}", problems.join("; "))]
pub struct SagaMisuse {
    /// The saga type.
    pub saga: &'static str,
    /// Its id.
    pub saga_id: String,
    /// The event's type.
    pub event_type: &'static str,
    /// What it asked for, and why it cannot be.
    pub problems: Vec<String>,
}

/// Other transactions changed the saga this many times in a row while
/// this one ran: it gives up for now (a transient failure, retried).
#[derive(Debug, thiserror::Error)]
#[error("saga `{saga}` `{saga_id}` changed under this transition {conflicts} times in a row")]
pub struct TooManyConflicts {
    /// The saga type.
    pub saga: &'static str,
    /// Its id.
    pub saga_id: String,
    /// Conflicts met.
    pub conflicts: u32,
}

/// What an operator's `resume` or `abandon` could not do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// No such saga.
    #[error("no saga `{saga_type}` `{saga_id}` (`consumer sagas list` shows them)")]
    NoSuchSaga {
        /// The saga type asked for.
        saga_type: String,
        /// The id asked for.
        saga_id: String,
    },
    /// The saga is not in a state the operation applies to.
    #[error("saga `{saga_type}` `{saga_id}` is {status}: {reason}")]
    Refused {
        /// The saga type.
        saga_type: String,
        /// Its id.
        saga_id: String,
        /// Its status.
        status: super::SagaStatus,
        /// Why nothing was done, and what would be.
        reason: String,
    },
    /// Its row does not read as the framework wrote it.
    #[error(transparent)]
    Unreadable(#[from] super::record::UnreadableRow),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] consumer_core::Error),
}

impl From<sqlx::Error> for OperatorError {
    fn from(e: sqlx::Error) -> Self {
        Self::Store(consumer_core::Error::Database(e))
    }
}
