//! [`ApiError`]: a failed call to an AWS service, with the kind of failure
//! the framework's settle loop reads, written once for every AWS backend;
//! each backend says through [`ServiceCodes`] which of its service's codes
//! heal.

use std::fmt;
use std::marker::PhantomData;

use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use consumer_backend::{BoxError, BrokerErrorKind};

use crate::{SdkFailure, sdk_failure};

/// What a backend knows of its AWS service's error codes.
pub trait ServiceCodes: Send + Sync + 'static {
    /// The service's name in messages (`SQS`, `Kinesis`).
    const SERVICE: &'static str;

    /// The kind of error `code` (with its `message`, which some services
    /// need to tell one refusal from another); `None` for a code not
    /// listed, which heals.
    fn kind_of_code(code: &str, message: &str) -> Option<BrokerErrorKind>;
}

/// A failed call: its kind, the service's code and message when the
/// service answered, and the client's error.
pub struct ApiError<C> {
    kind: BrokerErrorKind,
    code: Option<String>,
    message: String,
    source: Option<BoxError>,
    service: PhantomData<fn() -> C>,
}

impl<C: ServiceCodes> ApiError<C> {
    /// An error of `kind`.
    pub fn new(kind: BrokerErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            code: None,
            message: message.into(),
            source: None,
            service: PhantomData,
        }
    }

    /// The service answered with error `code`; its kind follows from the
    /// code ([`ServiceCodes::kind_of_code`]); a code not listed heals.
    pub fn service(code: impl Into<String>, message: impl Into<String>) -> Self {
        let (code, message) = (code.into(), message.into());
        Self {
            kind: C::kind_of_code(&code, &message).unwrap_or(BrokerErrorKind::Unavailable),
            code: Some(code),
            message,
            source: None,
            service: PhantomData,
        }
    }

    /// An SDK error of `operation`: the service's code decides a service
    /// error's kind; a request that could not be built is fatal; anything
    /// on the way (connection, timeout, an answer that could not be read)
    /// heals.
    pub fn from_sdk<E, R>(operation: &str, e: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: fmt::Debug + Send + Sync + 'static,
    {
        let error = match sdk_failure(operation, &e) {
            SdkFailure::Service { code, message } => Self::service(code, message),
            SdkFailure::Construction => Self::new(
                BrokerErrorKind::Fatal,
                format!("{operation}: the request could not be built"),
            ),
            SdkFailure::Timeout => Self::new(
                BrokerErrorKind::Unavailable,
                format!("{operation} timed out"),
            ),
            SdkFailure::Unreachable => Self::new(
                BrokerErrorKind::Unavailable,
                format!(
                    "{operation}: {} could not be reached or its answer read",
                    C::SERVICE
                ),
            ),
        };
        error.with_source(Box::new(e))
    }

    /// With the client's error as its source.
    #[must_use]
    pub fn with_source(mut self, source: BoxError) -> Self {
        self.source = Some(source);
        self
    }

    /// Its kind.
    pub fn kind(&self) -> BrokerErrorKind {
        self.kind
    }

    /// The service's error code, when the service answered.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// What went wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl<C> fmt::Debug for ApiError<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiError")
            .field("kind", &self.kind)
            .field("code", &self.code)
            .field("message", &self.message)
            .field("source", &self.source)
            .finish()
    }
}

impl<C> fmt::Display for ApiError<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.code {
            Some(code) => write!(f, "{code}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl<C> std::error::Error for ApiError<C> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Codes;

    impl ServiceCodes for Codes {
        const SERVICE: &'static str = "Test";

        fn kind_of_code(code: &str, _: &str) -> Option<BrokerErrorKind> {
            (code == "Nope").then_some(BrokerErrorKind::Rejected)
        }
    }

    #[test]
    fn a_listed_code_has_its_kind_and_an_unknown_one_heals() {
        let refused = ApiError::<Codes>::service("Nope", "no");
        assert_eq!(refused.kind(), BrokerErrorKind::Rejected);
        assert_eq!(refused.to_string(), "Nope: no");
        let unknown = ApiError::<Codes>::service("SomethingNew", "hm");
        assert_eq!(unknown.kind(), BrokerErrorKind::Unavailable);
    }
}
