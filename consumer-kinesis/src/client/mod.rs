//! The Kinesis calls the backend makes, behind a small trait
//! ([`KinesisApi`]) so that tests can wrap the real client ([`AwsKinesis`],
//! on `aws-sdk-kinesis`) and inject what an emulator cannot produce:
//! throttled records, partial `PutRecords` failures, a call that fails on
//! the way.
//!
//! The types are the backend's own, not the SDK's, so a wrapper builds any
//! answer without the SDK's HTTP plumbing; every error already says what
//! kind of failure it is ([`BrokerErrorKind`]).

mod aws;
mod codes;

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use consumer_backend::{BoxError, BrokerErrorKind};

pub use aws::AwsKinesis;
pub use codes::kind_of_code;

/// A call's future.
pub type ApiFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, CallError>> + Send + 'a>>;

/// The Kinesis calls the backend makes. Implemented by [`AwsKinesis`];
/// wrap it to inject faults (see the crate's tests).
pub trait KinesisApi: Send + Sync + 'static {
    /// `PutRecords`: at most 500 entries; one [`PutOutcome`] per entry, in
    /// the entries' order.
    fn put_records<'a>(
        &'a self,
        stream: &'a str,
        entries: Vec<PutEntry>,
    ) -> ApiFuture<'a, Vec<PutOutcome>>;
}

/// One record of a `PutRecords` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutEntry {
    /// The record's `PartitionKey` (1 to 256 characters).
    pub partition_key: String,
    /// The record's data: the envelope and the payload.
    pub data: Bytes,
}

impl PutEntry {
    /// What Kinesis counts of it toward its limits: the data and the
    /// partition key.
    pub fn size(&self) -> usize {
        self.data.len() + self.partition_key.len()
    }
}

/// What Kinesis did with one record of a `PutRecords` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutOutcome {
    /// Stored: its shard and sequence number.
    Stored {
        /// The shard it went to.
        shard_id: String,
        /// Its sequence number in that shard.
        sequence_number: String,
    },
    /// Refused: Kinesis's code (`ProvisionedThroughputExceededException`,
    /// `InternalFailure`) and message.
    Failed {
        /// Kinesis's error code.
        code: String,
        /// Kinesis's message.
        message: String,
    },
}

/// A failed Kinesis call: its kind, Kinesis's code and message when it
/// answered, and the client's error.
#[derive(Debug)]
pub struct CallError {
    kind: BrokerErrorKind,
    code: Option<String>,
    message: String,
    source: Option<BoxError>,
}

impl CallError {
    /// An error of `kind`.
    pub fn new(kind: BrokerErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            code: None,
            message: message.into(),
            source: None,
        }
    }

    /// Kinesis answered with error `code`; its kind follows from the code
    /// ([`kind_of_code`]); a code not listed heals.
    pub fn service(code: impl Into<String>, message: impl Into<String>) -> Self {
        let code = code.into();
        Self {
            kind: kind_of_code(&code).unwrap_or(BrokerErrorKind::Unavailable),
            code: Some(code),
            message: message.into(),
            source: None,
        }
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

    /// Kinesis's error code, when Kinesis answered.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.code {
            Some(code) => write!(f, "{code}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for CallError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
