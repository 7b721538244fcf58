//! How librdkafka's errors map onto the framework's [`Error`].
//!
//! Every broker failure becomes [`Error::Broker`] with `retriable` set from
//! the error code: a broker that is down, a leader that moved, a request
//! that timed out may succeed later; a message that is too large, a record
//! the broker rejects as invalid or a missing authorization will not.

use consumer_core::Error;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// Whether the operation that failed with `code` may succeed if tried again.
pub fn is_retriable(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    !matches!(
        code,
        C::MessageSizeTooLarge
            | C::InvalidMessageSize
            | C::InvalidMessage
            | C::InvalidRecord
            | C::InvalidTopic
            | C::MessageBatchTooLarge
            | C::InvalidRequiredAcks
            | C::TopicAuthorizationFailed
            | C::GroupAuthorizationFailed
            | C::ClusterAuthorizationFailed
            | C::TransactionalIdAuthorizationFailed
            | C::UnsupportedVersion
            | C::UnsupportedForMessageFormat
            | C::PolicyViolation
            | C::InvalidArgument
            | C::InvalidConfig
            | C::Fatal
    )
}

/// `error` as a framework broker error, with `context` saying what failed.
pub fn broker(context: &str, error: KafkaError) -> Error {
    let retriable = match &error {
        KafkaError::ClientConfig(..) => false,
        e => e.rdkafka_error_code().is_none_or(is_retriable),
    };
    Error::broker(
        format!("{context}: {error}"),
        retriable,
        Some(Box::new(error)),
    )
}

/// A configuration mistake (a property librdkafka rejects, a bad name).
pub fn config(context: &str, error: impl std::fmt::Display) -> Error {
    Error::Config(format!("{context}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_and_authorization_errors_are_final_transport_errors_are_not() {
        assert!(!is_retriable(RDKafkaErrorCode::MessageSizeTooLarge));
        assert!(!is_retriable(RDKafkaErrorCode::TopicAuthorizationFailed));
        assert!(is_retriable(RDKafkaErrorCode::BrokerTransportFailure));
        assert!(is_retriable(RDKafkaErrorCode::NotLeaderForPartition));
        assert!(is_retriable(RDKafkaErrorCode::MessageTimedOut));
        let e = broker(
            "produce",
            KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge),
        );
        assert!(!e.is_retriable());
        assert!(e.to_string().contains("produce"));
    }
}
