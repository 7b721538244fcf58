//! The crate's error type, and how librdkafka's errors map onto the kinds
//! of broker failure the framework's settle loop reads.
//!
//! A broker that is down, a leader that moved, a request that timed out may
//! succeed later ([`BrokerErrorKind::Unavailable`]); a record over the size
//! limit ([`BrokerErrorKind::TooLarge`]), a topic that does not exist
//! ([`BrokerErrorKind::NoDestination`]), a missing authorization
//! ([`BrokerErrorKind::NotAuthorized`]) or a record the broker rejects as
//! invalid ([`BrokerErrorKind::Rejected`]) will not.

use consumer_backend::BrokerErrorKind;
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
    /// A `group.instance.id` Kafka would refuse
    /// ([`KafkaSourceBuilder::with_static_membership`]).
    ///
    /// [`KafkaSourceBuilder::with_static_membership`]: crate::KafkaSourceBuilder::with_static_membership
    #[error(
        "invalid Kafka group.instance.id {id:?}: use 1 to 249 characters of [A-Za-z0-9._-], not `.` or `..`, one stable id per instance (a pod name, say)"
    )]
    InvalidInstanceId {
        /// The id given.
        id: String,
    },
    /// Another consumer joined the group with this static member's
    /// `group.instance.id`, and the broker fenced this one out: the source
    /// stops (librdkafka's fatal `FENCED_INSTANCE_ID` or
    /// `UNRELEASED_INSTANCE_ID`). Not retriable: rejoining would fence the
    /// other instance in turn. With the derived id (the default), two
    /// hosts that share a host name fence each other this way.
    #[error(
        "Kafka: another consumer joined group `{group}` with the same group.instance.id `{instance_id}` ({code}), so this one was fenced out and stops: give every live instance an id of its own (a derived `<hostname>-<slot>` id repeats on two hosts or containers with one host name: give each an id with `with_static_membership`, or set CONSUMER_KAFKA_MEMBERSHIP=dynamic); a broker failover can also make librdkafka fence its own static member, which a restart of the consumer mends"
    )]
    Fenced {
        /// The consumer group.
        group: String,
        /// The static member's id.
        instance_id: String,
        /// librdkafka's error code.
        code: RDKafkaErrorCode,
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
    /// A broker refused this client's security settings at start (the
    /// check of [`KafkaSecurity`](crate::KafkaSecurity)): a certificate,
    /// a CA or credentials that retrying cannot fix.
    #[error("Kafka at {brokers} refused this client at start: {cause} (librdkafka: {reason})")]
    Refused {
        /// The bootstrap brokers.
        brokers: String,
        /// The cause, as a sentence.
        cause: &'static str,
        /// librdkafka's own words (they name no secret).
        reason: String,
        /// librdkafka's error code.
        code: RDKafkaErrorCode,
    },
    /// A security setting this build of librdkafka cannot honour: it was
    /// built without OpenSSL.
    #[error(
        "Kafka: {setting} needs librdkafka with OpenSSL: enable the `tls` feature of `consumer` (or of `consumer-kafka`)"
    )]
    NeedsTls {
        /// The property and value (`security.protocol=SASL_SSL`).
        setting: String,
    },
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
            Self::InvalidTopic { .. } | Self::InvalidInstanceId { .. } | Self::Config { .. } => {
                BrokerErrorKind::Fatal
            }
            Self::Fatal { .. } | Self::Fenced { .. } | Self::PollThread(_) => {
                BrokerErrorKind::Fatal
            }
            Self::NoDeliveryReport { .. } => BrokerErrorKind::Unavailable,
            Self::Refused { code, .. } => match kind_of(*code) {
                BrokerErrorKind::NotAuthorized => BrokerErrorKind::NotAuthorized,
                _ => BrokerErrorKind::Fatal,
            },
            Self::NeedsTls { .. } => BrokerErrorKind::Fatal,
        }
    }

    /// Whether the same operation may succeed if tried again.
    pub fn is_retriable(&self) -> bool {
        self.kind().is_retriable()
    }

    /// A fatal error that fenced the static member `instance_id` of
    /// `group` as [`Error::Fenced`]; any other error as it is.
    pub(crate) fn fenced(self, group: &str, instance_id: Option<&str>) -> Self {
        match (self, instance_id) {
            (
                Self::Fatal {
                    code:
                        code @ (RDKafkaErrorCode::FencedInstanceId
                        | RDKafkaErrorCode::UnreleasedInstanceId),
                    ..
                },
                Some(id),
            ) => Self::Fenced {
                group: group.to_owned(),
                instance_id: id.to_owned(),
                code,
            },
            (e, _) => e,
        }
    }
}

/// The kind of failure an error code stands for.
///
/// Broker codes follow the Kafka protocol's retriable flag (the "Protocol
/// Error Codes" table): a retriable code is [`Unavailable`], any other is
/// final. `CORRUPT_MESSAGE` (2) is retriable by that table (a record
/// damaged on the way, or a CRC the broker could not check yet) and so
/// heals. Among the final codes, those that refuse this record for good
/// (`MESSAGE_TOO_LARGE` 10 and `RECORD_LIST_TOO_LARGE` 18 as
/// [`TooLarge`]; `INVALID_TIMESTAMP` 32, `UNSUPPORTED_FOR_MESSAGE_FORMAT`
/// 43, `POLICY_VIOLATION` 44, `INVALID_RECORD` 87, an unknown server error
/// as [`Rejected`]) differ from those that say the destination or the
/// client is wrong ([`NoDestination`], [`NotAuthorized`], and [`Fatal`]
/// for configuration and client state, e.g. `UNSUPPORTED_COMPRESSION_TYPE`
/// 76, `INVALID_REQUIRED_ACKS` 21, `UNSUPPORTED_VERSION` 35, a fenced
/// producer). Two codes deviate from the table on purpose, as librdkafka
/// recovers from them itself: `BROKER_NOT_AVAILABLE` (8) and
/// `REBOOTSTRAP_REQUIRED` (129) are [`Unavailable`]. librdkafka's own
/// (negative) codes are transient unless listed; an unknown code is
/// transient too, so a new broker code delays a record rather than
/// dead-lettering it.
///
/// [`Unavailable`]: BrokerErrorKind::Unavailable
/// [`TooLarge`]: BrokerErrorKind::TooLarge
/// [`Rejected`]: BrokerErrorKind::Rejected
/// [`NoDestination`]: BrokerErrorKind::NoDestination
/// [`NotAuthorized`]: BrokerErrorKind::NotAuthorized
/// [`Fatal`]: BrokerErrorKind::Fatal
pub fn kind_of(code: RDKafkaErrorCode) -> BrokerErrorKind {
    use BrokerErrorKind as K;
    use RDKafkaErrorCode as C;
    match code {
        // This record, refused for good.
        C::MessageSizeTooLarge | C::MessageBatchTooLarge => K::TooLarge,
        C::Unknown
        | C::InvalidTimestamp
        | C::UnsupportedForMessageFormat
        | C::PolicyViolation
        | C::InvalidRecord
        | C::OffsetMetadataTooLarge
        | C::InvalidCommitOffsetSize
        | C::InvalidArgument
        | C::KeySerialization
        | C::ValueSerialization => K::Rejected,
        // No such destination (librdkafka's UnknownTopic is a topic the
        // metadata says does not exist, with auto-creation off).
        C::UnknownTopic | C::UnknownPartition | C::InvalidTopic => K::NoDestination,
        C::TopicAuthorizationFailed
        | C::GroupAuthorizationFailed
        | C::ClusterAuthorizationFailed
        | C::TransactionalIdAuthorizationFailed
        | C::SaslAuthenticationFailed
        | C::DelegationTokenAuthorizationFailed
        | C::Authentication => K::NotAuthorized,
        // Configuration, or a client state no retry repairs.
        c if no_retry_repairs(c) => K::Fatal,
        _ => K::Unavailable,
    }
}

/// The codes that say the configuration or the client's state is wrong:
/// trying the same operation again cannot succeed.
fn no_retry_repairs(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        code,
        C::OffsetOutOfRange
            | C::InvalidMessageSize
            | C::StaleControllerEpoch
            | C::InvalidRequiredAcks
            | C::IllegalGeneration
            | C::InconsistentGroupProtocol
            | C::InvalidGroupId
            | C::UnknownMemberId
            | C::InvalidSessionTimeout
            | C::RebalanceInProgress
            | C::UnsupportedSASLMechanism
            | C::IllegalSASLState
            | C::UnsupportedVersion
            | C::TopicAlreadyExists
            | C::InvalidPartitions
            | C::InvalidReplicationFactor
            | C::InvalidReplicaAssignment
            | C::InvalidConfig
            | C::InvalidRequest
            | C::OutOfOrderSequenceNumber
            | C::DuplicateSequenceNumber
            | C::InvalidProducerEpoch
            | C::InvalidTransactionalState
            | C::InvalidProducerIdMapping
            | C::InvalidTransactionTimeout
            | C::TransactionCoordinatorFenced
            | C::SecurityDisabled
            | C::OperationNotAttempted
            | C::LogDirNotFound
            | C::UnknownProducerId
            | C::ReassignmentInProgress
            | C::DelegationTokenAuthDisabled
            | C::DelegationTokenNotFound
            | C::DelegationTokenOwnerMismatch
            | C::DelegationTokenRequestNotAllowed
            | C::DelegationTokenExpired
            | C::InvalidPrincipalType
            | C::NonEmptyGroup
            | C::GroupIdNotFound
            | C::TopicDeletionDisabled
            | C::UnsupportedCompressionType
            | C::StaleBrokerEpoch
            | C::MemberIdRequired
            | C::GroupMaxSizeReached
            | C::FencedInstanceId
            | C::NoReassignmentInProgress
            | C::GroupSubscribedToTopic
            | C::ProducerFenced
            | C::ResourceNotFound
            | C::DuplicateResource
            | C::UnacceptableCredential
            | C::InconsistentVoterSet
            | C::InvalidUpdateVersion
            | C::FeatureUpdateFailed
            | C::PrincipalDeserializationFailure
            | C::FencedMemberEpoch
            | C::UnreleasedInstanceId
            | C::UnsupportedAssignor
            | C::StaleMemberEpoch
            | C::UnknownSubscriptionId
            | C::TelemetryTooLarge
            | C::Fatal
            | C::Fenced
            | C::NotConfigured
            | C::UnsupportedFeature
            | C::NotImplemented
            | C::UnknownProtocol
    )
}

/// Whether the operation that failed with `code` may succeed if tried again.
pub fn is_retriable(code: RDKafkaErrorCode) -> bool {
    kind_of(code).is_retriable()
}

impl From<Error> for consumer_backend::Error {
    fn from(e: Error) -> Self {
        // The context is this error's message; its cause chain goes on
        // from librdkafka's error, so nothing is said twice.
        let source: Option<consumer_backend::BoxError> = match &e {
            Error::Kafka { source, .. } | Error::Config { source, .. } => {
                Some(Box::new(source.clone()))
            }
            _ => None,
        };
        match e {
            Error::InvalidTopic { .. }
            | Error::InvalidInstanceId { .. }
            | Error::NeedsTls { .. } => consumer_backend::Error::Config(e.to_string()),
            e => consumer_backend::Error::broker(e.kind(), e.to_string(), source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Kafka protocol's error codes librdkafka names, with their
    /// retriable flag as the protocol's error table gives it.
    const PROTOCOL: &[(RDKafkaErrorCode, i32, bool)] = {
        use RDKafkaErrorCode as C;
        &[
            (C::Unknown, -1, false),
            (C::OffsetOutOfRange, 1, false),
            (C::InvalidMessage, 2, true),
            (C::UnknownTopicOrPartition, 3, true),
            (C::InvalidMessageSize, 4, false),
            (C::LeaderNotAvailable, 5, true),
            (C::NotLeaderForPartition, 6, true),
            (C::RequestTimedOut, 7, true),
            (C::BrokerNotAvailable, 8, false),
            (C::ReplicaNotAvailable, 9, true),
            (C::MessageSizeTooLarge, 10, false),
            (C::StaleControllerEpoch, 11, false),
            (C::OffsetMetadataTooLarge, 12, false),
            (C::NetworkException, 13, true),
            (C::CoordinatorLoadInProgress, 14, true),
            (C::CoordinatorNotAvailable, 15, true),
            (C::NotCoordinator, 16, true),
            (C::InvalidTopic, 17, false),
            (C::MessageBatchTooLarge, 18, false),
            (C::NotEnoughReplicas, 19, true),
            (C::NotEnoughReplicasAfterAppend, 20, true),
            (C::InvalidRequiredAcks, 21, false),
            (C::IllegalGeneration, 22, false),
            (C::InconsistentGroupProtocol, 23, false),
            (C::InvalidGroupId, 24, false),
            (C::UnknownMemberId, 25, false),
            (C::InvalidSessionTimeout, 26, false),
            (C::RebalanceInProgress, 27, false),
            (C::InvalidCommitOffsetSize, 28, false),
            (C::TopicAuthorizationFailed, 29, false),
            (C::GroupAuthorizationFailed, 30, false),
            (C::ClusterAuthorizationFailed, 31, false),
            (C::InvalidTimestamp, 32, false),
            (C::UnsupportedSASLMechanism, 33, false),
            (C::IllegalSASLState, 34, false),
            (C::UnsupportedVersion, 35, false),
            (C::TopicAlreadyExists, 36, false),
            (C::InvalidPartitions, 37, false),
            (C::InvalidReplicationFactor, 38, false),
            (C::InvalidReplicaAssignment, 39, false),
            (C::InvalidConfig, 40, false),
            (C::NotController, 41, true),
            (C::InvalidRequest, 42, false),
            (C::UnsupportedForMessageFormat, 43, false),
            (C::PolicyViolation, 44, false),
            (C::OutOfOrderSequenceNumber, 45, false),
            (C::DuplicateSequenceNumber, 46, false),
            (C::InvalidProducerEpoch, 47, false),
            (C::InvalidTransactionalState, 48, false),
            (C::InvalidProducerIdMapping, 49, false),
            (C::InvalidTransactionTimeout, 50, false),
            (C::ConcurrentTransactions, 51, true),
            (C::TransactionCoordinatorFenced, 52, false),
            (C::TransactionalIdAuthorizationFailed, 53, false),
            (C::SecurityDisabled, 54, false),
            (C::OperationNotAttempted, 55, false),
            (C::KafkaStorageError, 56, true),
            (C::LogDirNotFound, 57, false),
            (C::SaslAuthenticationFailed, 58, false),
            (C::UnknownProducerId, 59, false),
            (C::ReassignmentInProgress, 60, false),
            (C::DelegationTokenAuthDisabled, 61, false),
            (C::DelegationTokenNotFound, 62, false),
            (C::DelegationTokenOwnerMismatch, 63, false),
            (C::DelegationTokenRequestNotAllowed, 64, false),
            (C::DelegationTokenAuthorizationFailed, 65, false),
            (C::DelegationTokenExpired, 66, false),
            (C::InvalidPrincipalType, 67, false),
            (C::NonEmptyGroup, 68, false),
            (C::GroupIdNotFound, 69, false),
            (C::FetchSessionIdNotFound, 70, true),
            (C::InvalidFetchSessionEpoch, 71, true),
            (C::ListenerNotFound, 72, true),
            (C::TopicDeletionDisabled, 73, false),
            (C::FencedLeaderEpoch, 74, true),
            (C::UnknownLeaderEpoch, 75, true),
            (C::UnsupportedCompressionType, 76, false),
            (C::StaleBrokerEpoch, 77, false),
            (C::OffsetNotAvailable, 78, true),
            (C::MemberIdRequired, 79, false),
            (C::PreferredLeaderNotAvailable, 80, true),
            (C::GroupMaxSizeReached, 81, false),
            (C::FencedInstanceId, 82, false),
            (C::EligibleLeadersNotAvailable, 83, true),
            (C::ElectionNotNeeded, 84, true),
            (C::NoReassignmentInProgress, 85, false),
            (C::GroupSubscribedToTopic, 86, false),
            (C::InvalidRecord, 87, false),
            (C::UnstableOffsetCommit, 88, true),
            (C::ThrottlingQuotaExceeded, 89, true),
            (C::ProducerFenced, 90, false),
            (C::ResourceNotFound, 91, false),
            (C::DuplicateResource, 92, false),
            (C::UnacceptableCredential, 93, false),
            (C::InconsistentVoterSet, 94, false),
            (C::InvalidUpdateVersion, 95, false),
            (C::FeatureUpdateFailed, 96, false),
            (C::PrincipalDeserializationFailure, 97, false),
            (C::UnknownTopicId, 100, true),
            (C::FencedMemberEpoch, 110, false),
            (C::UnreleasedInstanceId, 111, false),
            (C::UnsupportedAssignor, 112, false),
            (C::StaleMemberEpoch, 113, false),
            (C::UnknownSubscriptionId, 117, false),
            (C::TelemetryTooLarge, 118, false),
            (C::RebootstrapRequired, 129, false),
        ]
    };

    /// Final by the protocol's table, transient here: librdkafka recovers
    /// from them itself.
    const RECOVERED_BY_LIBRDKAFKA: &[RDKafkaErrorCode] = &[
        RDKafkaErrorCode::BrokerNotAvailable,
        RDKafkaErrorCode::RebootstrapRequired,
    ];

    #[test]
    fn every_protocol_code_heals_exactly_when_kafka_says_it_is_retriable() {
        for &(code, number, retriable) in PROTOCOL {
            assert_eq!(code as i32, number, "{code:?} is misnumbered in the table");
            let expected = retriable || RECOVERED_BY_LIBRDKAFKA.contains(&code);
            assert_eq!(
                is_retriable(code),
                expected,
                "{code:?} ({number}) is classified {}",
                kind_of(code)
            );
        }
        // Every protocol code librdkafka knows is in the table.
        let listed: Vec<i32> = PROTOCOL.iter().map(|&(_, n, _)| n).collect();
        for n in (1..=129).chain([-1]) {
            if let Ok(raw) = rdkafka::types::RDKafkaRespErr::try_from(n) {
                let code = RDKafkaErrorCode::from(raw);
                assert!(
                    listed.contains(&n),
                    "{code:?} ({n}) is missing from the table"
                );
            }
        }
    }

    #[test]
    fn records_refused_for_good_are_told_from_configuration_and_transient_errors() {
        use BrokerErrorKind as K;
        use RDKafkaErrorCode as C;
        for (code, kind) in [
            (C::MessageSizeTooLarge, K::TooLarge),
            (C::MessageBatchTooLarge, K::TooLarge),
            (C::InvalidTimestamp, K::Rejected),
            (C::InvalidRecord, K::Rejected),
            (C::UnsupportedForMessageFormat, K::Rejected),
            (C::PolicyViolation, K::Rejected),
            (C::UnsupportedCompressionType, K::Fatal),
            (C::InvalidRequiredAcks, K::Fatal),
            (C::UnsupportedVersion, K::Fatal),
            (C::InvalidMessageSize, K::Fatal),
            (C::ProducerFenced, K::Fatal),
            (C::Fatal, K::Fatal),
            (C::UnknownTopic, K::NoDestination),
            (C::InvalidTopic, K::NoDestination),
            (C::TopicAuthorizationFailed, K::NotAuthorized),
            (C::SaslAuthenticationFailed, K::NotAuthorized),
            (C::InvalidMessage, K::Unavailable),
            (C::NotEnoughReplicas, K::Unavailable),
            (C::LeaderNotAvailable, K::Unavailable),
            (C::RequestTimedOut, K::Unavailable),
            (C::MessageTimedOut, K::Unavailable),
            (C::QueueFull, K::Unavailable),
            (C::AllBrokersDown, K::Unavailable),
        ] {
            assert_eq!(kind_of(code), kind, "{code:?}");
        }
    }

    #[test]
    fn a_fenced_static_member_is_told_so_and_does_not_retry() {
        let fatal = |code| Error::Fatal {
            code,
            reason: "Fatal consumer error".to_owned(),
        };
        for code in [
            RDKafkaErrorCode::FencedInstanceId,
            RDKafkaErrorCode::UnreleasedInstanceId,
        ] {
            let e = fatal(code).fenced("billing", Some("billing-0"));
            assert!(matches!(e, Error::Fenced { .. }), "{e}");
            assert!(!e.is_retriable());
            let message = e.to_string();
            assert!(
                message.contains("billing-0") && message.contains("`billing`"),
                "{message}"
            );
            let core: consumer_backend::Error = e.into();
            assert!(!core.is_retriable(), "{core}");
        }
        // A dynamic member has no instance id to be fenced on.
        assert!(matches!(
            fatal(RDKafkaErrorCode::FencedInstanceId).fenced("billing", None),
            Error::Fatal { .. }
        ));
        assert!(matches!(
            fatal(RDKafkaErrorCode::Fatal).fenced("billing", Some("billing-0")),
            Error::Fatal { .. }
        ));
    }

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
        let core: consumer_backend::Error = e.into();
        assert!(core.is_too_large(), "{core}");
        assert!(core.to_string().contains("orders.dlq"), "{core}");
    }
}
