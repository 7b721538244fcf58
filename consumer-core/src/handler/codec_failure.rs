//! What a codec's failure to decode makes of the message: the class of
//! [`consumer_codec::Error`] decides.

use std::time::Duration;

use consumer_codec::Codec;

use super::{Failure, FailureKind};
use crate::retry::{RetryMode, RetryPolicy};

/// How a message waits for a registry that does not answer: in its lane
/// (its key's later messages wait behind it), up to 30 s between tries,
/// and without a last attempt: the registry's outage is not the message's
/// fault, and it heals.
pub const REGISTRY_UNAVAILABLE: RetryPolicy = RetryPolicy::exponential(
    Duration::from_millis(200),
    Duration::from_secs(30),
    u32::MAX,
)
.with_mode(RetryMode::InPlace);

/// The codec refused the payload, or could not reach what it needs.
#[derive(Debug, thiserror::Error)]
#[error("the {codec} codec cannot decode this payload into `{type_name}`")]
pub struct CodecRefused {
    codec: &'static str,
    type_name: &'static str,
    #[source]
    source: consumer_codec::Error,
}

/// A handler names a codec its consumer does not have.
#[derive(Debug, thiserror::Error)]
#[error(
    "the handler decodes with the {codec} codec (`{type_name}`), and its consumer has none: add it with `with_codec`"
)]
struct CodecMissing {
    codec: &'static str,
    type_name: &'static str,
}

/// The class of `error`, decoding into `M` with `C`: poison when the
/// message is at fault, transient under [`REGISTRY_UNAVAILABLE`] when the
/// registry did not answer, transient under the handler's policy
/// otherwise (a configuration or schema this codec cannot use yet).
pub(crate) fn classify<C: Codec, M>(error: consumer_codec::Error) -> Failure {
    let kind = if error.is_poison() {
        FailureKind::Poison
    } else {
        FailureKind::Transient
    };
    let unavailable = error.is_transient();
    let failure = Failure::new(
        kind,
        CodecRefused {
            codec: C::NAME,
            type_name: std::any::type_name::<M>(),
            source: error,
        },
    );
    if unavailable {
        failure.with_retry(REGISTRY_UNAVAILABLE)
    } else {
        failure
    }
}

/// A codec the consumer lacks: transient under the handler's policy (a
/// consumer refuses to start this way, so it is only a hand-built
/// invocation's).
pub(crate) fn missing<C: Codec>() -> Failure {
    Failure::new(
        FailureKind::Transient,
        CodecMissing {
            codec: C::NAME,
            type_name: std::any::type_name::<C>(),
        },
    )
}
