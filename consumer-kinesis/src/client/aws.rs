//! [`AwsKinesis`]: [`KinesisApi`] on `aws-sdk-kinesis`.

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use consumer_backend::BrokerErrorKind;

use super::{ApiError, ApiFuture, KinesisApi, PutEntry, PutOutcome};

/// The real client: every call goes to Kinesis (or the endpoint the SDK's
/// configuration names, such as an emulator's).
#[derive(Debug, Clone)]
pub struct AwsKinesis {
    client: aws_sdk_kinesis::Client,
}

impl AwsKinesis {
    /// Calls Kinesis through `client`.
    pub fn new(client: aws_sdk_kinesis::Client) -> Self {
        Self { client }
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

    /// The SDK client.
    pub fn client(&self) -> &aws_sdk_kinesis::Client {
        &self.client
    }
}

impl KinesisApi for AwsKinesis {
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
