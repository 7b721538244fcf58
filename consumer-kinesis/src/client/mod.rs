//! The Kinesis calls the backend makes, behind a small trait
//! ([`KinesisApi`]) so that tests can wrap the real client ([`AwsKinesis`],
//! on `aws-sdk-kinesis`) and inject what an emulator cannot produce:
//! throttled records, partial `PutRecords` failures, a call that fails on
//! the way.
//!
//! The types are the backend's own, not the SDK's, so a wrapper builds any
//! answer without the SDK's HTTP plumbing; every error already says what
//! kind of failure it is ([`consumer_backend::BrokerErrorKind`]).

mod aws;
mod codes;

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

pub use aws::AwsKinesis;
pub use codes::{KinesisCodes, kind_of_code};

/// A call's future.
pub type ApiFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ApiError>> + Send + 'a>>;

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
/// answered, and the client's error (the AWS backends' shared type, with
/// Kinesis's codes).
pub type ApiError = consumer_aws::ApiError<KinesisCodes>;
