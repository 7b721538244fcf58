//! [`AwsKinesis`]: [`KinesisApi`] on `aws-sdk-kinesis`.

use std::time::Duration;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, ShardIteratorType};
use bytes::Bytes;
use consumer_backend::BrokerErrorKind;

use super::{
    ApiError, ApiFuture, IteratorStart, KinesisApi, PutEntry, PutOutcome, ReadRecord, RecordsPage,
};
use crate::shards::ShardInfo;

/// The real client: every call goes to Kinesis (or the endpoint the
/// SDK's configuration names, such as an emulator's), and waits for its
/// answer at most [`consumer_aws::ANSWER_WITHIN`], whatever the SDK's
/// configuration says: the SDK has no read timeout, and a `GetRecords` on
/// a connection the network dropped silently would wait for ever
/// ([`AwsKinesis::with_answer_within`]).
#[derive(Debug, Clone)]
pub struct AwsKinesis {
    sdk: Sdk,
    answer_within: Duration,
}

/// The calls themselves, on the SDK.
#[derive(Debug, Clone)]
struct Sdk {
    client: aws_sdk_kinesis::Client,
}

impl AwsKinesis {
    /// Calls Kinesis through `client`.
    pub fn new(client: aws_sdk_kinesis::Client) -> Self {
        Self {
            sdk: Sdk { client },
            answer_within: consumer_aws::ANSWER_WITHIN,
        }
    }

    /// The SDK's default configuration ([`consumer_aws::from_env`]:
    /// `AWS_ENDPOINT_URL_KINESIS` included).
    pub async fn from_env() -> Self {
        Self::new(aws_sdk_kinesis::Client::new(
            &consumer_aws::from_env().await,
        ))
    }

    /// An emulator (moto, LocalStack) at `endpoint`, with static test
    /// credentials and region `us-east-1` ([`consumer_aws::local_config`]).
    pub fn local(endpoint: impl Into<String>) -> Self {
        let config = consumer_aws::local_config(endpoint, "consumer-kinesis-local");
        Self::new(aws_sdk_kinesis::Client::new(&config))
    }

    /// How long a call waits for its answer (default
    /// [`consumer_aws::ANSWER_WITHIN`], 10 s): past it, the call fails as
    /// [`Unavailable`](BrokerErrorKind::Unavailable) and is tried again on
    /// a new connection.
    #[must_use]
    pub fn with_answer_within(mut self, limit: Duration) -> Self {
        self.answer_within = limit;
        self
    }

    /// The SDK client.
    pub fn client(&self) -> &aws_sdk_kinesis::Client {
        &self.sdk.client
    }

    fn within<'a, T: Send + 'a>(
        &self,
        operation: &'static str,
        call: ApiFuture<'a, T>,
    ) -> ApiFuture<'a, T> {
        Box::pin(consumer_aws::answered_within(
            operation,
            self.answer_within,
            call,
        ))
    }
}

impl KinesisApi for AwsKinesis {
    fn put_records<'a>(
        &'a self,
        stream: &'a str,
        entries: Vec<PutEntry>,
    ) -> ApiFuture<'a, Vec<PutOutcome>> {
        self.within("PutRecords", self.sdk.put_records(stream, entries))
    }

    fn list_shards<'a>(&'a self, stream: &'a str) -> ApiFuture<'a, Vec<ShardInfo>> {
        self.within("ListShards", self.sdk.list_shards(stream))
    }

    fn shard_iterator<'a>(
        &'a self,
        stream: &'a str,
        shard_id: &'a str,
        start: &'a IteratorStart,
    ) -> ApiFuture<'a, String> {
        let call = self.sdk.shard_iterator(stream, shard_id, start);
        self.within("GetShardIterator", call)
    }

    fn get_records<'a>(&'a self, iterator: &'a str, limit: i32) -> ApiFuture<'a, RecordsPage> {
        self.within("GetRecords", self.sdk.get_records(iterator, limit))
    }
}

impl KinesisApi for Sdk {
    fn put_records<'a>(
        &'a self,
        stream: &'a str,
        entries: Vec<PutEntry>,
    ) -> ApiFuture<'a, Vec<PutOutcome>> {
        Box::pin(async move {
            let sent = entries.len();
            let records = entries
                .into_iter()
                .map(|e| {
                    PutRecordsRequestEntry::builder()
                        .partition_key(e.partition_key)
                        .data(Blob::new(e.data.to_vec()))
                        .build()
                        .map_err(|e| {
                            ApiError::new(BrokerErrorKind::Fatal, format!("PutRecords: {e}"))
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let out = self
                .client
                .put_records()
                .stream_name(stream)
                .set_records(Some(records))
                .send()
                .await
                .map_err(|e| ApiError::from_sdk("PutRecords", e))?;
            if out.records().len() != sent {
                return Err(ApiError::new(
                    BrokerErrorKind::Unavailable,
                    format!(
                        "PutRecords answered for {} records of {sent}",
                        out.records().len()
                    ),
                ));
            }
            Ok(out.records().iter().map(outcome).collect())
        })
    }

    fn list_shards<'a>(&'a self, stream: &'a str) -> ApiFuture<'a, Vec<ShardInfo>> {
        Box::pin(async move {
            let mut shards = Vec::new();
            let mut token: Option<String> = None;
            loop {
                // Kinesis refuses a stream name beside a page token.
                let call = match token.take() {
                    Some(t) => self.client.list_shards().next_token(t),
                    None => self.client.list_shards().stream_name(stream),
                };
                let out = call
                    .send()
                    .await
                    .map_err(|e| ApiError::from_sdk("ListShards", e))?;
                shards.extend(out.shards().iter().map(ShardInfo::from));
                match out.next_token() {
                    Some(t) if !t.is_empty() => token = Some(t.to_owned()),
                    _ => return Ok(shards),
                }
            }
        })
    }

    fn shard_iterator<'a>(
        &'a self,
        stream: &'a str,
        shard_id: &'a str,
        start: &'a IteratorStart,
    ) -> ApiFuture<'a, String> {
        Box::pin(async move {
            let call = self
                .client
                .get_shard_iterator()
                .stream_name(stream)
                .shard_id(shard_id);
            let call = match start {
                IteratorStart::TrimHorizon => {
                    call.shard_iterator_type(ShardIteratorType::TrimHorizon)
                }
                IteratorStart::Latest => call.shard_iterator_type(ShardIteratorType::Latest),
                IteratorStart::AfterSequence(seq) => call
                    .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                    .starting_sequence_number(seq),
            };
            let out = call
                .send()
                .await
                .map_err(|e| ApiError::from_sdk("GetShardIterator", e))?;
            out.shard_iterator().map(str::to_owned).ok_or_else(|| {
                ApiError::new(
                    BrokerErrorKind::Unavailable,
                    format!("GetShardIterator answered without an iterator for shard {shard_id}"),
                )
            })
        })
    }

    fn get_records<'a>(&'a self, iterator: &'a str, limit: i32) -> ApiFuture<'a, RecordsPage> {
        Box::pin(async move {
            let out = self
                .client
                .get_records()
                .shard_iterator(iterator)
                .limit(limit.clamp(1, 10_000))
                .send()
                .await
                .map_err(|e| ApiError::from_sdk("GetRecords", e))?;
            let records = out
                .records()
                .iter()
                .map(|r| ReadRecord {
                    sequence_number: r.sequence_number().to_owned(),
                    partition_key: r.partition_key().to_owned(),
                    data: Bytes::copy_from_slice(r.data().as_ref()),
                    arrival: r
                        .approximate_arrival_timestamp()
                        .and_then(|t| std::time::SystemTime::try_from(*t).ok()),
                })
                .collect();
            Ok(RecordsPage {
                records,
                next_iterator: out.next_shard_iterator().map(str::to_owned),
                millis_behind_latest: out.millis_behind_latest(),
            })
        })
    }
}

fn outcome(entry: &aws_sdk_kinesis::types::PutRecordsResultEntry) -> PutOutcome {
    match (
        entry.error_code(),
        entry.sequence_number(),
        entry.shard_id(),
    ) {
        (None, Some(sequence_number), Some(shard_id)) => PutOutcome::Stored {
            shard_id: shard_id.to_owned(),
            sequence_number: sequence_number.to_owned(),
        },
        (code, _, _) => PutOutcome::Failed {
            code: code.unwrap_or("InternalFailure").to_owned(),
            message: entry
                .error_message()
                .unwrap_or("Kinesis returned no sequence number for the record")
                .to_owned(),
        },
    }
}
