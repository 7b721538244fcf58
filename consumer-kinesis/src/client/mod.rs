//! The Kinesis calls the backend makes, behind a small trait
//! ([`KinesisApi`]) so that tests can wrap the real client ([`AwsKinesis`],
//! on `aws-sdk-kinesis`) and inject what an emulator cannot produce:
//! throttled records, partial `PutRecords` failures, a call that fails on
//! the way, a throttled or expired read.
//!
//! The types are the backend's own, not the SDK's, so a wrapper builds any
//! answer without the SDK's HTTP plumbing; every error already says what
//! kind of failure it is ([`consumer_backend::BrokerErrorKind`]).

mod aws;
mod codes;

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

use crate::shards::ShardInfo;

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

    /// `ListShards`: every shard of the stream Kinesis still lists (open,
    /// and closed ones within the retention period), every page read.
    fn list_shards<'a>(&'a self, stream: &'a str) -> ApiFuture<'a, Vec<ShardInfo>>;

    /// `GetShardIterator`: an iterator on `shard_id` from `start`.
    fn shard_iterator<'a>(
        &'a self,
        stream: &'a str,
        shard_id: &'a str,
        start: &'a IteratorStart,
    ) -> ApiFuture<'a, String>;

    /// `GetRecords`: at most `limit` records (1 to 10 000) from `iterator`.
    fn get_records<'a>(&'a self, iterator: &'a str, limit: i32) -> ApiFuture<'a, RecordsPage>;
}

/// Where a shard iterator starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IteratorStart {
    /// The oldest record still in the shard (`TRIM_HORIZON`).
    TrimHorizon,
    /// After the newest record at the time of the call (`LATEST`).
    Latest,
    /// Just after this sequence number (`AFTER_SEQUENCE_NUMBER`): where a
    /// checkpoint says to go on.
    AfterSequence(String),
}

/// One record read from a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRecord {
    /// Its sequence number in the shard.
    pub sequence_number: String,
    /// Its `PartitionKey`.
    pub partition_key: String,
    /// Its data: the envelope and the payload, or a plain producer's bytes.
    pub data: Bytes,
    /// When Kinesis took it (`ApproximateArrivalTimestamp`).
    pub arrival: Option<std::time::SystemTime>,
}

/// One `GetRecords` answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordsPage {
    /// The records, in the shard's order.
    pub records: Vec<ReadRecord>,
    /// The iterator for the next call; `None` once a closed shard is read
    /// to its end.
    pub next_iterator: Option<String>,
    /// How far behind the shard's newest record this answer is
    /// (`MillisBehindLatest`): the lag signal.
    pub millis_behind_latest: Option<i64>,
}

/// Whether `error` says the iterator it was given has expired
/// (`ExpiredIteratorException`: iterators last five minutes).
pub fn is_expired_iterator(error: &ApiError) -> bool {
    error.code() == Some("ExpiredIteratorException")
}

/// Whether `error` is Kinesis throttling the call
/// (`ProvisionedThroughputExceededException`: five `GetRecords` calls and
/// 2 MB a second per shard, shared by every reader; `LimitExceededException`
/// for the control plane).
pub fn is_throttled(error: &ApiError) -> bool {
    matches!(
        error.code(),
        Some(
            "ProvisionedThroughputExceededException"
                | "LimitExceededException"
                | "ThrottlingException"
        )
    )
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
