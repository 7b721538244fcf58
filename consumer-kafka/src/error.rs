//! The crate's error type, and how librdkafka's errors map onto the kinds
//! of broker failure the framework's settle loop reads.
//!
//! A broker that is down, a leader that moved, a request that timed out may
//! succeed later ([`BrokerErrorKind::Unavailable`]); a record over the size
//! limit ([`BrokerErrorKind::TooLarge`]), a topic that does not exist
//! ([`BrokerErrorKind::NoDestination`]), a missing authorization
//! ([`BrokerErrorKind::NotAuthorized`]) or a record the broker rejects as
//! invalid ([`BrokerErrorKind::Rejected`]) will not.

use consumer_core::BrokerErrorKind;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong talking to Kafka.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// librdkafka reported a failure while doing `context`.
    #[error("Kafka: {context} failed")]
    Kafka {
        /// What was being done.
        context: String,
        /// The client library's error.
        #[source]
        source: KafkaError,
    },
    /// The broker refused to create a topic.
    #[error("creating Kafka topic `{topic}` failed: {code}")]
    TopicCreation {
        /// The topic.
        topic: String,
        /// The broker's error code.
        code: RDKafkaErrorCode,
    },
    /// A topic name Kafka would refuse.
    #[error(
        "invalid Kafka topic name {name:?}: use 1 to 249 characters of [A-Za-z0-9._-], not `.` or `..`"
    )]
    InvalidTopic {
        /// The name given.
        name: String,
    },
    /// librdkafka refused the client's configuration.
    #[error("Kafka: {context}: the configuration was refused")]
    Config {
        /// Which client.
        context: &'static str,
        /// The client library's error.
        #[source]
        source: KafkaError,
    },
    /// The client failed for good (librdkafka's fatal error).
    #[error("fatal Kafka client error {code}: {reason}")]
    Fatal {
        /// librdkafka's error code.
        code: RDKafkaErrorCode,
        /// Its reason.
        reason: String,
    },
    /// The producer went away before it reported the delivery.
    #[error("the Kafka producer went away before the delivery report of a record to `{topic}`")]
    NoDeliveryReport {
        /// Where the record was going.
        topic: String,
    },
    /// The consumer's poll thread could not start, or panicked.
    #[error("the Kafka poll thread {0}")]
    PollThread(&'static str),
}

impl Error {
    /// librdkafka's `error` while doing `context`.
    pub fn kafka(context: impl Into<String>, source: KafkaError) -> Self {
        Self::Kafka {
            context: context.into(),
            source,
        }
    }

    /// What kind of failure this is, for the settle loop and the relay.
    pub fn kind(&self) -> BrokerErrorKind {
        match self {
            Self::Kafka { source, .. } => match source {
                KafkaError::ClientConfig(..) => BrokerErrorKind::Fatal,
                e => e
                    .rdkafka_error_code()
                    .map_or(BrokerErrorKind::Unavailable, kind_of),
            },
            Self::TopicCreation { code, .. } => kind_of(*code),
            Self::InvalidTopic { .. } | Self::Config { .. } => BrokerErrorKind::Fatal,
            Self::Fatal { .. } | Self::PollThread(_) => BrokerErrorKind::Fatal,
            Self::NoDeliveryReport { .. } => BrokerErrorKind::Unavailable,
        }
    }

    /// Whether the same operation may succeed if tried again.
    pub fn is_retriable(&self) -> bool {
        self.kind().is_retriable()
    }
}

/// The kind of failure an error code stands for.
pub fn kind_of(code: RDKafkaErrorCode) -> BrokerErrorKind {
    use RDKafkaErrorCode as C;
    match code {
        C::MessageSizeTooLarge | C::InvalidMessageSize | C::MessageBatchTooLarge => {
            BrokerErrorKind::TooLarge
        }
        C::UnknownTopic | C::InvalidTopic | C::UnknownPartition => BrokerErrorKind::NoDestination,
        C::TopicAuthorizationFailed
        | C::GroupAuthorizationFailed
        | C::ClusterAuthorizationFailed
        | C::TransactionalIdAuthorizationFailed
        | C::SaslAuthenticationFailed
        | C::Authentication => BrokerErrorKind::NotAuthorized,
        C::InvalidMessage
        | C::InvalidRecord
        | C::InvalidRequiredAcks
        | C::UnsupportedVersion
        | C::UnsupportedForMessageFormat
        | C::PolicyViolation
        | C::InvalidArgument => BrokerErrorKind::Rejected,
        C::InvalidConfig | C::Fatal => BrokerErrorKind::Fatal,
        _ => BrokerErrorKind::Unavailable,
    }
}

/// Whether the operation that failed with `code` may succeed if tried again.
pub fn is_retriable(code: RDKafkaErrorCode) -> bool {
    kind_of(code).is_retriable()
}

impl From<Error> for consumer_core::Error {
    fn from(e: Error) -> Self {
        // The context is this error's message; its cause chain goes on
        // from librdkafka's error, so nothing is said twice.
        let source: Option<consumer_core::BoxError> = match &e {
            Error::Kafka { source, .. } | Error::Config { source, .. } => {
                Some(Box::new(source.clone()))
            }
            _ => None,
        };
        match e {
            Error::InvalidTopic { .. } => consumer_core::Error::Config(e.to_string()),
            e => consumer_core::Error::broker(e.kind(), e.to_string(), source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_topic_and_authorization_errors_are_final_transport_errors_are_not() {
        assert_eq!(
            kind_of(RDKafkaErrorCode::MessageSizeTooLarge),
            BrokerErrorKind::TooLarge
        );
        assert_eq!(
            kind_of(RDKafkaErrorCode::UnknownTopic),
            BrokerErrorKind::NoDestination
        );
        assert_eq!(
            kind_of(RDKafkaErrorCode::TopicAuthorizationFailed),
            BrokerErrorKind::NotAuthorized
        );
        assert!(is_retriable(RDKafkaErrorCode::BrokerTransportFailure));
        assert!(is_retriable(RDKafkaErrorCode::NotLeaderForPartition));
        assert!(is_retriable(RDKafkaErrorCode::MessageTimedOut));
        let e = Error::kafka(
            "producing to orders.dlq",
            KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge),
        );
        assert!(!e.is_retriable());
        let core: consumer_core::Error = e.into();
        assert!(core.is_too_large(), "{core}");
        assert!(core.to_string().contains("orders.dlq"), "{core}");
    }
}
