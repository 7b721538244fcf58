//! Which Kinesis error codes can heal.
//!
//! Throttling (`ProvisionedThroughputExceededException`, the per-shard
//! write limit; `LimitExceededException`, the control plane's), Kinesis's
//! own failures and KMS throttling heal; a missing stream, missing rights
//! and a request Kinesis refuses do not, so no loop retries them.

use consumer_aws::ServiceCodes;
use consumer_backend::BrokerErrorKind;

/// Kinesis's codes, for [`ApiError`](super::ApiError).
#[derive(Debug)]
pub struct KinesisCodes;

impl ServiceCodes for KinesisCodes {
    const SERVICE: &'static str = "Kinesis";

    fn kind_of_code(code: &str, _message: &str) -> Option<BrokerErrorKind> {
        kind_of_code(code)
    }
}

/// The kind of a Kinesis error `code` (of a call or of one record of
/// `PutRecords`); `None` for a code not listed.
pub fn kind_of_code(code: &str) -> Option<BrokerErrorKind> {
    use BrokerErrorKind as K;
    let kind = match code {
        "ProvisionedThroughputExceededException"
        | "LimitExceededException"
        | "ThrottlingException"
        | "InternalFailure"
        | "InternalFailureException"
        | "ServiceUnavailable"
        | "ServiceUnavailableException"
        | "KMSThrottlingException"
        | "ResourceInUseException"
        | "ExpiredIteratorException"
        | "ExpiredNextTokenException" => K::Unavailable,
        "ResourceNotFoundException" => K::NoDestination,
        "AccessDeniedException"
        | "KMSAccessDeniedException"
        | "KMSDisabledException"
        | "KMSNotFoundException"
        | "KMSInvalidStateException"
        | "KMSOptInRequired"
        | "UnrecognizedClientException"
        | "ExpiredTokenException"
        | "IncompleteSignature"
        | "MissingAuthenticationToken" => K::NotAuthorized,
        "InvalidArgumentException" | "ValidationException" | "SerializationException" => {
            K::Rejected
        }
        _ => return None,
    };
    Some(kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use BrokerErrorKind as K;

    #[test]
    fn throttling_heals_and_refusals_do_not() {
        for (code, kind) in [
            ("ProvisionedThroughputExceededException", K::Unavailable),
            ("InternalFailure", K::Unavailable),
            ("KMSThrottlingException", K::Unavailable),
            ("ResourceNotFoundException", K::NoDestination),
            ("AccessDeniedException", K::NotAuthorized),
            ("KMSDisabledException", K::NotAuthorized),
            ("InvalidArgumentException", K::Rejected),
        ] {
            assert_eq!(kind_of_code(code), Some(kind), "{code}");
        }
        assert_eq!(kind_of_code("SomethingNew"), None);
    }
}
