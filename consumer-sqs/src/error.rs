//! The crate's error type, and the kinds of broker failure the framework's
//! settle loop reads from it.
//!
//! Throttling, SQS's own failures, the in-flight limit and the network
//! heal ([`BrokerErrorKind::Unavailable`]); a missing queue
//! ([`BrokerErrorKind::NoDestination`]), missing rights
//! ([`BrokerErrorKind::NotAuthorized`]), a message over the queue's size
//! limit ([`BrokerErrorKind::TooLarge`]) and a request SQS refuses
//! ([`BrokerErrorKind::Rejected`]) do not: nothing retries them.

use consumer_backend::BrokerErrorKind;

use crate::client::{ApiError, EntryFailure};

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong talking to SQS.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A call to SQS failed.
    #[error("SQS {operation} on `{queue}` failed")]
    Sqs {
        /// The call.
        operation: &'static str,
        /// The queue it named.
        queue: String,
        /// SQS's or the client's error.
        #[source]
        source: ApiError,
    },
    /// SQS refused one entry of a batch call.
    #[error("SQS {operation} on `{queue}` refused the entry: {} ({})", failure.code, failure.message)]
    Entry {
        /// The call.
        operation: &'static str,
        /// The queue.
        queue: String,
        /// What SQS said of the entry.
        failure: EntryFailure,
    },
    /// A queue name or URL SQS would refuse.
    #[error("invalid SQS queue {name:?}: {reason}")]
    InvalidQueue {
        /// The name or URL given.
        name: String,
        /// What SQS accepts.
        reason: String,
    },
    /// A queue exists with settings this backend cannot keep its promises
    /// on (no redrive policy, a standard dead-letter queue for a FIFO
    /// queue, ...), or cannot be created.
    #[error("SQS queue `{queue}`: {reason}")]
    Topology {
        /// The queue.
        queue: String,
        /// What is wrong, and how to fix it.
        reason: String,
    },
    /// The message is larger than the queue takes (its
    /// `MaximumMessageSize`, body and attributes counted as SQS counts
    /// them).
    #[error("message of {size} bytes for SQS queue `{queue}` is over its limit of {limit} bytes")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The queue's limit.
        limit: usize,
        /// The queue.
        queue: String,
    },
    /// An earlier message of the same group in the same publish failed:
    /// this one was not sent, so the group's order holds.
    #[error(
        "not sent to SQS queue `{queue}`: an earlier message of its group failed in the same publish"
    )]
    HeldBack {
        /// The queue.
        queue: String,
    },
    /// The source this delivery came from is closed: SQS redelivers it
    /// once its visibility timeout is over.
    #[error("the SQS source is closed; SQS redelivers the message when its visibility ends")]
    Closed,
}

impl Error {
    /// What kind of failure this is, for the settle loop and the relay.
    pub fn kind(&self) -> BrokerErrorKind {
        match self {
            Self::Sqs { source, .. } => source.kind(),
            Self::Entry { failure, .. } => failure.kind(),
            Self::InvalidQueue { .. } | Self::Topology { .. } => BrokerErrorKind::Fatal,
            Self::TooLarge { .. } => BrokerErrorKind::TooLarge,
            Self::HeldBack { .. } | Self::Closed => BrokerErrorKind::Unavailable,
        }
    }

    /// Whether the same operation may succeed if tried again.
    pub fn is_retriable(&self) -> bool {
        self.kind().is_retriable()
    }

    pub(crate) fn sqs(operation: &'static str, queue: &str) -> impl FnOnce(ApiError) -> Self {
        let queue = queue.to_owned();
        move |source| Self::Sqs {
            operation,
            queue,
            source,
        }
    }
}

impl From<Error> for consumer_backend::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::InvalidQueue { .. } | Error::Topology { .. } => {
                consumer_backend::Error::Config(e.to_string())
            }
            e => {
                let kind = e.kind();
                let context = e.to_string();
                // The context is this error's message; the chain goes on
                // from SQS's own error, so nothing is said twice.
                let source: Option<consumer_backend::BoxError> = match e {
                    Error::Sqs { source, .. } => Some(Box::new(source)),
                    _ => None,
                };
                consumer_backend::Error::broker(kind, context, source)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_letter_over_the_limit_is_too_large_for_the_settle_loop() {
        let e = Error::TooLarge {
            size: 300_000,
            limit: 262_144,
            queue: "orders-dlq.fifo".into(),
        };
        let core: consumer_backend::Error = e.into();
        assert!(core.is_too_large(), "{core}");
        let sqs = Error::sqs("SendMessageBatch", "q")(ApiError::service(
            "InvalidParameterValue",
            "One or more parameters are invalid. Reason: Message must be shorter than 262144 bytes.",
        ));
        let core: consumer_backend::Error = sqs.into();
        assert!(core.is_too_large(), "{core}");
    }

    #[test]
    fn a_missing_queue_or_missing_rights_never_heal_and_throttling_does() {
        let missing = Error::sqs("ReceiveMessage", "q")(ApiError::service(
            "AWS.SimpleQueueService.NonExistentQueue",
            "The specified queue does not exist.",
        ));
        assert_eq!(missing.kind(), BrokerErrorKind::NoDestination);
        let denied = Error::sqs("ReceiveMessage", "q")(ApiError::service("AccessDenied", "no"));
        assert!(!consumer_backend::Error::from(denied).is_retriable());
        let throttled =
            Error::sqs("ReceiveMessage", "q")(ApiError::service("ThrottlingException", "slow"));
        assert!(throttled.is_retriable());
    }
}
