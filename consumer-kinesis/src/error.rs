//! The crate's error type, and the kinds of broker failure the framework's
//! settle loop and outbox relay read from it.
//!
//! Throttling (`ProvisionedThroughputExceededException`), Kinesis's own
//! failures and the network heal ([`BrokerErrorKind::Unavailable`]); a
//! missing stream ([`BrokerErrorKind::NoDestination`]), missing rights
//! ([`BrokerErrorKind::NotAuthorized`]), a record over 1 MiB
//! ([`BrokerErrorKind::TooLarge`]) and a request Kinesis refuses
//! ([`BrokerErrorKind::Rejected`]) do not: nothing retries them.

use consumer_backend::BrokerErrorKind;

use crate::client::ApiError;
use crate::envelope::EnvelopeError;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong talking to Kinesis.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A call to Kinesis failed.
    #[error("Kinesis {operation} on stream `{stream}` failed")]
    Kinesis {
        /// The call.
        operation: &'static str,
        /// The stream it named.
        stream: String,
        /// Kinesis's or the client's error.
        #[source]
        source: ApiError,
    },
    /// Kinesis refused one record of a `PutRecords` call (after the
    /// publisher's retries, for a code that heals).
    #[error("Kinesis refused the record for stream `{stream}`: {code} ({message})")]
    Record {
        /// The stream.
        stream: String,
        /// Kinesis's code.
        code: String,
        /// Kinesis's message.
        message: String,
    },
    /// A record over Kinesis's limit of 1 MiB (data and partition key).
    #[error(
        "a record of {size} bytes for Kinesis stream `{stream}` is over its limit of {limit} bytes"
    )]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
        /// The stream.
        stream: String,
    },
    /// An earlier record of the same key in the same publish failed: this
    /// one was not sent, so the key's order holds.
    #[error(
        "not sent to Kinesis stream `{stream}`: an earlier record of its key failed in the same publish"
    )]
    HeldBack {
        /// The stream.
        stream: String,
    },
    /// A stream name Kinesis would refuse.
    #[error("invalid Kinesis stream name {name:?}: {reason}")]
    InvalidStream {
        /// The name given.
        name: String,
        /// What Kinesis accepts.
        reason: &'static str,
    },
    /// The message's headers do not fit the record envelope.
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
}

impl Error {
    /// What kind of failure this is, for the settle loop and the relay.
    pub fn kind(&self) -> BrokerErrorKind {
        match self {
            Self::Kinesis { source, .. } => source.kind(),
            Self::Record { code, .. } => {
                crate::client::kind_of_code(code).unwrap_or(BrokerErrorKind::Unavailable)
            }
            Self::TooLarge { .. } => BrokerErrorKind::TooLarge,
            Self::HeldBack { .. } => BrokerErrorKind::Unavailable,
            Self::InvalidStream { .. } => BrokerErrorKind::Fatal,
            Self::Envelope(_) => BrokerErrorKind::Rejected,
        }
    }

    /// Whether the same operation may succeed if tried again.
    pub fn is_retriable(&self) -> bool {
        self.kind().is_retriable()
    }
}

impl From<Error> for consumer_backend::Error {
    fn from(e: Error) -> Self {
        if let Error::InvalidStream { .. } = e {
            return consumer_backend::Error::Config(e.to_string());
        }
        let kind = e.kind();
        let context = e.to_string();
        // The context is this error's message; the chain goes on from
        // Kinesis's own error, so nothing is said twice.
        let source: Option<consumer_backend::BoxError> = match e {
            Error::Kinesis { source, .. } => Some(Box::new(source)),
            _ => None,
        };
        consumer_backend::Error::broker(kind, context, source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttled_records_heal_and_oversize_ones_never_do() {
        let throttled = Error::Record {
            stream: "orders".into(),
            code: "ProvisionedThroughputExceededException".into(),
            message: "Rate exceeded for shard".into(),
        };
        assert!(consumer_backend::Error::from(throttled).is_retriable());
        let large = Error::TooLarge {
            size: 2 << 20,
            limit: 1 << 20,
            stream: "orders".into(),
        };
        let large = consumer_backend::Error::from(large);
        assert!(large.is_too_large() && !large.is_retriable(), "{large}");
        let missing = Error::Kinesis {
            operation: "PutRecords",
            stream: "orders".into(),
            source: ApiError::service("ResourceNotFoundException", "no stream"),
        };
        assert_eq!(missing.kind(), BrokerErrorKind::NoDestination);
    }
}
