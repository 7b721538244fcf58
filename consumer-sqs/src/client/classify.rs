//! Which SQS error codes can heal.
//!
//! SQS answers the JSON protocol with short codes (`QueueDoesNotExist`) and
//! the query protocol with prefixed ones
//! (`AWS.SimpleQueueService.NonExistentQueue`); both are read. Throttling,
//! SQS's own failures and the in-flight limit heal; a missing queue,
//! missing rights, a message over the size limit and a malformed request
//! do not, so no loop retries them.

use consumer_aws::ServiceCodes;
use consumer_backend::BrokerErrorKind;

/// SQS's codes, for [`ApiError`](super::ApiError).
#[derive(Debug)]
pub struct SqsCodes;

impl ServiceCodes for SqsCodes {
    const SERVICE: &'static str = "SQS";

    fn kind_of_code(code: &str, message: &str) -> Option<BrokerErrorKind> {
        kind_of_code(code, message)
    }
}

/// The kind of an SQS error `code` (with its `message`, which alone tells
/// a message over the size limit from another invalid parameter); `None`
/// for a code not listed.
pub fn kind_of_code(code: &str, message: &str) -> Option<BrokerErrorKind> {
    use BrokerErrorKind as K;
    let short = code.rsplit('.').next().unwrap_or(code);
    let kind = match short {
        // Heal: throttling, SQS or KMS for now, the 20 000 (FIFO) /
        // 120 000 in-flight limit.
        "ThrottlingException"
        | "RequestThrottled"
        | "Throttling"
        | "KmsThrottled"
        | "ServiceUnavailable"
        | "InternalError"
        | "InternalFailure"
        | "RequestTimeout"
        | "RequestTimeoutException"
        | "KmsUnavailable"
        | "OverLimit"
        | "SlowDown" => K::Unavailable,
        "QueueDoesNotExist" | "NonExistentQueue" | "QueueDeletedRecently" => K::NoDestination,
        "AccessDenied"
        | "AccessDeniedException"
        | "InvalidSecurity"
        | "InvalidClientTokenId"
        | "UnrecognizedClientException"
        | "SignatureDoesNotMatch"
        | "ExpiredToken"
        | "MissingAuthenticationToken"
        | "KmsAccessDenied"
        | "KmsDisabled"
        | "KmsNotFound"
        | "KmsInvalidState"
        | "KmsInvalidKeyUsage"
        | "KmsOptInRequired" => K::NotAuthorized,
        "BatchRequestTooLong" | "MessageTooLong" => K::TooLarge,
        "InvalidParameterValue" | "InvalidParameterValueException"
            if message.contains("shorter than") || message.contains("too long") =>
        {
            K::TooLarge
        }
        "InvalidParameterValue"
        | "InvalidParameterValueException"
        | "InvalidMessageContents"
        | "InvalidAttributeName"
        | "InvalidAttributeValue"
        | "InvalidBatchEntryId"
        | "BatchEntryIdsNotDistinct"
        | "TooManyEntriesInBatchRequest"
        | "EmptyBatchRequest"
        | "MissingParameter"
        | "UnsupportedOperation"
        | "InvalidIdFormat"
        | "ReceiptHandleIsInvalid"
        | "MessageNotInflight"
        | "InvalidAddress"
        | "QueueAlreadyExists"
        | "QueueNameExists"
        | "PurgeQueueInProgress"
        | "ValidationException"
        | "SerializationException" => K::Rejected,
        _ => return None,
    };
    Some(kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use BrokerErrorKind as K;

    #[test]
    fn throttling_and_outages_heal_and_refusals_do_not() {
        for (code, message, kind) in [
            ("ThrottlingException", "", K::Unavailable),
            (
                "AWS.SimpleQueueService.RequestThrottled",
                "",
                K::Unavailable,
            ),
            ("InternalError", "", K::Unavailable),
            ("AWS.SimpleQueueService.OverLimit", "", K::Unavailable),
            ("QueueDoesNotExist", "", K::NoDestination),
            (
                "AWS.SimpleQueueService.NonExistentQueue",
                "",
                K::NoDestination,
            ),
            ("AccessDenied", "", K::NotAuthorized),
            ("KmsAccessDenied", "", K::NotAuthorized),
            (
                "InvalidParameterValue",
                "One or more parameters are invalid. Reason: Message must be shorter than 262144 bytes.",
                K::TooLarge,
            ),
            ("BatchRequestTooLong", "", K::TooLarge),
            (
                "InvalidParameterValue",
                "Value -1 for parameter",
                K::Rejected,
            ),
            ("ReceiptHandleIsInvalid", "", K::Rejected),
            ("InvalidMessageContents", "", K::Rejected),
        ] {
            assert_eq!(kind_of_code(code, message), Some(kind), "{code}");
        }
        assert_eq!(kind_of_code("SomethingNew", ""), None);
    }
}
