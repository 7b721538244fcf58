//! [`SdkFailure`]: what an AWS SDK error is made of, before a backend
//! decides with its service's codes whether it can heal.

use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// What went wrong with an SDK call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SdkFailure {
    /// The service answered with an error: its code (`Unknown` when it
    /// sent none) and message (the operation's name when it sent none).
    Service {
        /// The service's error code, such as `ThrottlingException`.
        code: String,
        /// The service's message.
        message: String,
    },
    /// The request could not be built: a bug or a bad configuration,
    /// never healed by trying again.
    Construction,
    /// The call timed out: it may heal.
    Timeout,
    /// The service could not be reached or its answer read: it may heal.
    Unreachable,
}

/// The anatomy of `error`, returned by `operation`.
pub fn sdk_failure<E, R>(operation: &str, error: &SdkError<E, R>) -> SdkFailure
where
    E: ProvideErrorMetadata,
{
    match error {
        SdkError::ServiceError(service) => {
            let err = service.err();
            SdkFailure::Service {
                code: err.code().unwrap_or("Unknown").to_owned(),
                message: err.message().unwrap_or(operation).to_owned(),
            }
        }
        SdkError::ConstructionFailure(_) => SdkFailure::Construction,
        SdkError::TimeoutError(_) => SdkFailure::Timeout,
        _ => SdkFailure::Unreachable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct NoMetadata;

    impl ProvideErrorMetadata for NoMetadata {
        fn meta(&self) -> &aws_smithy_types::error::ErrorMetadata {
            unreachable!("a construction failure carries no service error")
        }
    }

    #[test]
    fn a_request_that_cannot_be_built_is_a_construction_failure() {
        let error: SdkError<NoMetadata, ()> = SdkError::construction_failure("bad");
        assert_eq!(sdk_failure("PutRecords", &error), SdkFailure::Construction);
    }
}
