//! What can go wrong, classified: the message's fault (poison), the
//! registry's passing trouble (transient), or the configuration's.

/// A boxed error kept as the source of an [`Error`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A `Result` whose error is this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why bytes are not a Confluent-framed payload. Always the payload's
/// fault: see [`crate::wire`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The payload has no bytes at all.
    #[error(
        "the payload is empty: a schema-registry payload starts with magic byte 0 and a 4-byte schema id"
    )]
    Empty,
    /// The first byte is not the magic byte 0 (plain JSON starts with `{`,
    /// 0x7b).
    #[error(
        "the payload starts with byte {found:#04x}, not the magic byte 0x00: it was not written by a schema-registry serializer"
    )]
    BadMagic {
        /// The first byte found.
        found: u8,
    },
    /// Fewer than the 5 bytes of the magic byte and the schema id.
    #[error(
        "the payload has {len} byte(s), fewer than the 5 of the magic byte and the schema id: it is truncated"
    )]
    TruncatedHeader {
        /// The payload's length.
        len: usize,
    },
    /// A varint of the Protobuf message indexes runs past the end.
    #[error(
        "the Protobuf message indexes are truncated: the varint at byte {offset} runs past the end of the payload"
    )]
    TruncatedVarint {
        /// Where the varint starts in the payload.
        offset: usize,
    },
    /// A varint of the Protobuf message indexes does not fit 32 bits.
    #[error(
        "the Protobuf message indexes hold a bad varint at byte {offset}: longer than 5 bytes or over 32 bits"
    )]
    VarintTooLong {
        /// Where the varint starts in the payload.
        offset: usize,
    },
    /// The count of message indexes is negative, or more than the bytes left
    /// could hold.
    #[error(
        "the Protobuf message index count {count} is impossible with {remaining} byte(s) left in the payload"
    )]
    BadIndexCount {
        /// The count read.
        count: i32,
        /// The bytes left after the count.
        remaining: usize,
    },
    /// A message index is negative.
    #[error("Protobuf message index {position} is {index}: indexes are never negative")]
    NegativeMessageIndex {
        /// The index's position in the array.
        position: usize,
        /// The value read.
        index: i32,
    },
}

/// Everything this crate can fail with. Three classes, each with its
/// predicate: [`is_poison`](Self::is_poison) (the message is at fault: dead
/// letter it), [`is_transient`](Self::is_transient) (the registry may
/// answer later: back off and try again, never dead letter), and the rest,
/// which a change of configuration, of a schema or of this crate fixes
/// (neither dead letter the message nor count on a retry).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bytes are not a Confluent-framed payload. Poison.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The registry does not know the schema id the payload names (HTTP
    /// 404, error code 40403). Poison.
    #[error(
        "schema id {schema_id} is unknown to the registry at {registry}: the payload names a schema that was never registered there"
    )]
    UnknownSchema {
        /// The id the payload names.
        schema_id: u32,
        /// The registry's base URL.
        registry: String,
    },
    /// The payload does not decode with its writer's schema, or does not
    /// resolve into the reader's schema or type. Poison.
    #[error("the payload written with schema id {schema_id} does not decode: {reason}")]
    Undecodable {
        /// The writer's schema id.
        schema_id: u32,
        /// What did not decode or resolve, and why.
        reason: String,
    },
    /// The writer's schema the payload names is not one this codec can use
    /// (another schema type, or a schema that does not parse). Poison.
    #[error("schema id {schema_id} cannot be used to decode this payload: {reason}")]
    UnusableSchema {
        /// The writer's schema id.
        schema_id: u32,
        /// Why the schema cannot be used.
        reason: String,
    },
    /// The writer's schema uses what this crate does not handle yet (a
    /// schema that refers to other registered schemas). Not poison: the
    /// message is fine, and a later version of this crate reads it.
    #[error("schema id {schema_id} needs what consumer-codec does not support yet: {what}")]
    Unsupported {
        /// The writer's schema id.
        schema_id: u32,
        /// What is not supported.
        what: String,
    },
    /// The registry did not answer: refused connection, timeout, HTTP 5xx,
    /// 408 or 429, or a reply that is not the API's. Transient.
    #[error("the schema registry at {registry} did not answer {request}: {reason}")]
    Unavailable {
        /// The registry's base URL.
        registry: String,
        /// The request, as `METHOD path`.
        request: String,
        /// What happened.
        reason: String,
        /// The underlying error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// The subject, or the version asked for, does not exist (HTTP 404,
    /// error code 40401 or 40402).
    #[error("the schema registry at {registry} has no {what}")]
    NotFound {
        /// The registry's base URL.
        registry: String,
        /// What is missing: the subject, its version, or the schema under
        /// the subject.
        what: String,
    },
    /// The registry refused a new version as incompatible with the
    /// subject's compatibility rule (HTTP 409).
    #[error(
        "the schema registry refused the schema under subject `{subject}` as incompatible: {message}"
    )]
    Incompatible {
        /// The subject.
        subject: String,
        /// The registry's reason.
        message: String,
    },
    /// Any other refusal: a schema the registry finds invalid (422), bad
    /// credentials (401, 403).
    #[error(
        "the schema registry at {registry} refused {request} with HTTP {status} (error code {error_code}): {message}"
    )]
    Refused {
        /// The registry's base URL.
        registry: String,
        /// The request, as `METHOD path`.
        request: String,
        /// The HTTP status.
        status: u16,
        /// The registry's error code (`0` when it gave none).
        error_code: i64,
        /// The registry's message.
        message: String,
    },
    /// A value to produce does not fit the schema it is encoded with.
    #[error("the value does not fit the schema of subject `{subject}`: {reason}")]
    Unencodable {
        /// The subject.
        subject: String,
        /// Why.
        reason: String,
    },
    /// A schema given to this crate (a reader's, a producer's) does not
    /// parse, or is not the kind the codec needs.
    #[error("invalid schema: {reason}")]
    InvalidSchema {
        /// Why.
        reason: String,
    },
    /// A setting is unusable: a URL that does not parse, an `https://`
    /// registry without the `tls` feature, a subject strategy without the
    /// record name it needs.
    #[error("{0}")]
    Config(String),
}

impl Error {
    /// True when the message itself is at fault and no retry can help: bad
    /// framing, a schema id the registry does not know, a payload that does
    /// not decode or resolve into the reader's type. A consumer dead-letters
    /// it, with [`schema_id`](Self::schema_id) and this error's text as the
    /// reason.
    pub fn is_poison(&self) -> bool {
        matches!(
            self,
            Self::Wire(_)
                | Self::UnknownSchema { .. }
                | Self::Undecodable { .. }
                | Self::UnusableSchema { .. }
        )
    }

    /// True when the registry did not answer (refused connection, timeout,
    /// HTTP 5xx, 408 or 429): the same message may decode once it does. A
    /// consumer backs off and tries again, and never dead-letters for it.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }

    /// The schema id the failing payload named, when one was read.
    pub fn schema_id(&self) -> Option<u32> {
        match self {
            Self::UnknownSchema { schema_id, .. }
            | Self::Undecodable { schema_id, .. }
            | Self::UnusableSchema { schema_id, .. }
            | Self::Unsupported { schema_id, .. } => Some(*schema_id),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_and_unknown_ids_are_poison_and_not_transient() {
        let poison = [
            Error::from(WireError::BadMagic { found: 1 }),
            Error::UnknownSchema {
                schema_id: 7,
                registry: "r".into(),
            },
            Error::Undecodable {
                schema_id: 7,
                reason: "r".into(),
            },
            Error::UnusableSchema {
                schema_id: 7,
                reason: "r".into(),
            },
        ];
        for error in poison {
            assert!(error.is_poison() && !error.is_transient(), "{error}");
        }
    }

    #[test]
    fn an_unanswered_registry_is_transient_and_not_poison() {
        let error = Error::Unavailable {
            registry: "http://127.0.0.1:1".into(),
            request: "GET /schemas/ids/1".into(),
            reason: "connection refused".into(),
            source: None,
        };
        assert!(error.is_transient() && !error.is_poison());
        assert_eq!(error.schema_id(), None);
    }

    #[test]
    fn a_refusal_of_the_configuration_or_a_missing_feature_is_neither() {
        let error = Error::Incompatible {
            subject: "s".into(),
            message: "m".into(),
        };
        assert!(!error.is_transient() && !error.is_poison());
        let error = Error::Unsupported {
            schema_id: 7,
            what: "references".into(),
        };
        assert!(!error.is_transient() && !error.is_poison());
        assert_eq!(error.schema_id(), Some(7));
    }
}
