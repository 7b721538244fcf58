//! What can go wrong in a kit: setting it up, or a wait that did not end.

/// A kit's error: a part failed, or a wait did not end in time.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KitError {
    /// The store, the broker or the outbox failed.
    #[error(transparent)]
    Consumer(#[from] crate::Error),
    /// A consumer stopped on an error, so what it consumes cannot settle.
    #[error("the consumer of `{topic}` stopped: {error}")]
    ConsumerStopped {
        /// The topic it consumed.
        topic: String,
        /// Why it stopped.
        error: String,
    },
    /// The kit waited for the outcome of a message on a topic none of its
    /// consumers reads.
    #[error("no consumer of the kit reads `{topic}`: add one with `handler` or `router` first")]
    NoConsumer {
        /// The topic.
        topic: String,
    },
    /// A wait did not end within the kit's wall-clock timeout; `pending`
    /// names what was still in flight.
    #[error("{waiting} did not happen within {timeout:?} (wall clock); still pending: {}", .pending.join("; "))]
    Timeout {
        /// What the kit waited for.
        waiting: String,
        /// The wall-clock timeout.
        timeout: std::time::Duration,
        /// What was still in flight, one entry each.
        pending: Vec<String>,
    },
}
