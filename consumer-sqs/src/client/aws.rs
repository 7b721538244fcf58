//! [`AwsSqs`]: [`SqsApi`] on `aws-sdk-sqs`.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{
    BatchResultErrorEntry, ChangeMessageVisibilityBatchRequestEntry,
    DeleteMessageBatchRequestEntry, MessageAttributeValue, MessageSystemAttributeName,
    QueueAttributeName, SendMessageBatchRequestEntry,
};
use bytes::Bytes;
use consumer_backend::BrokerErrorKind;

use super::{
    ApiError, ApiFuture, AttributeValue, BatchOutcome, EntryFailure, ReceiptEntry, ReceiveRequest,
    ReceivedMessage, SendEntry, SqsApi, VisibilityEntry,
};

/// The real client: every call goes to SQS (or the endpoint the SDK's
/// configuration names, such as an emulator's), and waits for its answer
/// at most [`consumer_aws::ANSWER_WITHIN`] (a receive: its long poll and
/// that), whatever the SDK's configuration says: the SDK has no read
/// timeout, and a request on a connection the network dropped silently
/// would wait for ever ([`AwsSqs::with_answer_within`]).
#[derive(Debug, Clone)]
pub struct AwsSqs {
    sdk: Sdk,
    answer_within: Duration,
}

/// The calls themselves, on the SDK.
#[derive(Debug, Clone)]
struct Sdk {
    client: aws_sdk_sqs::Client,
}

impl AwsSqs {
    /// Calls SQS through `client`.
    pub fn new(client: aws_sdk_sqs::Client) -> Self {
        Self {
            sdk: Sdk { client },
            answer_within: consumer_aws::ANSWER_WITHIN,
        }
    }

    /// The SDK's default configuration: region, credentials and endpoint
    /// from the environment, profile files and instance metadata, as every
    /// AWS SDK reads them (`AWS_ENDPOINT_URL_SQS` included).
    pub async fn from_env() -> Self {
        Self::new(aws_sdk_sqs::Client::new(&consumer_aws::from_env().await))
    }

    /// An emulator (moto, LocalStack, ElasticMQ) at `endpoint`, with static
    /// test credentials and region `us-east-1`: nothing is read from the
    /// environment.
    pub fn local(endpoint: impl Into<String>) -> Self {
        let config = consumer_aws::local_config(endpoint, "consumer-sqs-local");
        Self::new(aws_sdk_sqs::Client::new(&config))
    }

    /// How long a call waits for its answer beyond what it asked SQS to
    /// wait (default [`consumer_aws::ANSWER_WITHIN`], 10 s): past it, the
    /// call fails as [`Unavailable`](BrokerErrorKind::Unavailable) and is
    /// tried again on a new connection.
    #[must_use]
    pub fn with_answer_within(mut self, limit: Duration) -> Self {
        self.answer_within = limit;
        self
    }

    /// The SDK client.
    pub fn client(&self) -> &aws_sdk_sqs::Client {
        &self.sdk.client
    }

    fn within<'a, T: Send + 'a>(
        &self,
        operation: &'static str,
        waits: Duration,
        call: ApiFuture<'a, T>,
    ) -> ApiFuture<'a, T> {
        Box::pin(consumer_aws::answered_within(
            operation,
            self.answer_within.saturating_add(waits),
            call,
        ))
    }
}

impl SqsApi for AwsSqs {
    fn receive<'a>(&'a self, r: ReceiveRequest<'a>) -> ApiFuture<'a, Vec<ReceivedMessage>> {
        let waits = Duration::from_secs(u64::try_from(r.wait_seconds).unwrap_or(0));
        self.within("ReceiveMessage", waits, self.sdk.receive(r))
    }

    fn delete_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<ReceiptEntry>,
    ) -> ApiFuture<'a, BatchOutcome> {
        let call = self.sdk.delete_batch(queue_url, entries);
        self.within("DeleteMessageBatch", Duration::ZERO, call)
    }

    fn change_visibility_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<VisibilityEntry>,
    ) -> ApiFuture<'a, BatchOutcome> {
        let call = self.sdk.change_visibility_batch(queue_url, entries);
        self.within("ChangeMessageVisibilityBatch", Duration::ZERO, call)
    }

    fn send_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<SendEntry>,
    ) -> ApiFuture<'a, BatchOutcome> {
        let call = self.sdk.send_batch(queue_url, entries);
        self.within("SendMessageBatch", Duration::ZERO, call)
    }

    fn queue_url<'a>(&'a self, queue_name: &'a str) -> ApiFuture<'a, String> {
        self.within(
            "GetQueueUrl",
            Duration::ZERO,
            self.sdk.queue_url(queue_name),
        )
    }

    fn queue_attributes<'a>(
        &'a self,
        queue_url: &'a str,
    ) -> ApiFuture<'a, HashMap<String, String>> {
        let call = self.sdk.queue_attributes(queue_url);
        self.within("GetQueueAttributes", Duration::ZERO, call)
    }

    fn create_queue<'a>(
        &'a self,
        queue_name: &'a str,
        attributes: HashMap<String, String>,
    ) -> ApiFuture<'a, String> {
        let call = self.sdk.create_queue(queue_name, attributes);
        self.within("CreateQueue", Duration::ZERO, call)
    }

    fn set_queue_attributes<'a>(
        &'a self,
        queue_url: &'a str,
        attributes: HashMap<String, String>,
    ) -> ApiFuture<'a, ()> {
        let call = self.sdk.set_queue_attributes(queue_url, attributes);
        self.within("SetQueueAttributes", Duration::ZERO, call)
    }

    fn purge_queue<'a>(&'a self, queue_url: &'a str) -> ApiFuture<'a, ()> {
        self.within(
            "PurgeQueue",
            Duration::ZERO,
            self.sdk.purge_queue(queue_url),
        )
    }

    fn delete_queue<'a>(&'a self, queue_url: &'a str) -> ApiFuture<'a, ()> {
        self.within(
            "DeleteQueue",
            Duration::ZERO,
            self.sdk.delete_queue(queue_url),
        )
    }
}

fn fatal(operation: &str, what: impl std::fmt::Display) -> ApiError {
    ApiError::new(BrokerErrorKind::Fatal, format!("{operation}: {what}"))
}

/// The code of an entry SQS listed neither as successful nor as failed.
const UNLISTED: &str = "Unlisted";

/// What a batch call did to the entries `sent`: those SQS lists as failed,
/// and those it lists nowhere (which did not happen as far as anyone can
/// tell: failed, and worth another try, rather than counted as done).
fn outcome<'r>(
    sent: &[String],
    successful: impl IntoIterator<Item = &'r str>,
    failed: &'r [BatchResultErrorEntry],
) -> BatchOutcome {
    let mut failures: Vec<EntryFailure> = failed
        .iter()
        .map(|f| EntryFailure {
            id: f.id().to_owned(),
            code: f.code().to_owned(),
            message: f.message().unwrap_or_default().to_owned(),
            sender_fault: f.sender_fault(),
        })
        .collect();
    let listed: std::collections::HashSet<&str> = successful
        .into_iter()
        .chain(failed.iter().map(BatchResultErrorEntry::id))
        .collect();
    for id in sent.iter().filter(|id| !listed.contains(id.as_str())) {
        failures.push(EntryFailure {
            id: id.clone(),
            code: UNLISTED.to_owned(),
            message: "SQS listed the entry neither as successful nor as failed".to_owned(),
            sender_fault: false,
        });
    }
    BatchOutcome { failed: failures }
}

fn to_sdk_attribute(value: &AttributeValue) -> Result<MessageAttributeValue, ApiError> {
    let builder = MessageAttributeValue::builder().data_type(value.data_type());
    let builder = match value {
        AttributeValue::String { value, .. } | AttributeValue::Number { value, .. } => {
            builder.string_value(value)
        }
        AttributeValue::Binary { value, .. } => builder.binary_value(Blob::new(value.to_vec())),
    };
    builder
        .build()
        .map_err(|e| fatal("building a message attribute", e))
}

fn from_sdk_attribute(value: &MessageAttributeValue) -> AttributeValue {
    let data_type = value.data_type().to_owned();
    let base = data_type.split('.').next().unwrap_or_default();
    if base.eq_ignore_ascii_case("Binary") {
        let bytes = value
            .binary_value()
            .map(|b| Bytes::copy_from_slice(b.as_ref()))
            .unwrap_or_default();
        return AttributeValue::Binary {
            data_type,
            value: bytes,
        };
    }
    let text = value.string_value().unwrap_or_default().to_owned();
    if base.eq_ignore_ascii_case("Number") {
        AttributeValue::Number {
            data_type,
            value: text,
        }
    } else {
        AttributeValue::String {
            data_type,
            value: text,
        }
    }
}

impl SqsApi for Sdk {
    fn receive<'a>(&'a self, r: ReceiveRequest<'a>) -> ApiFuture<'a, Vec<ReceivedMessage>> {
        Box::pin(async move {
            let mut call = self
                .client
                .receive_message()
                .queue_url(r.queue_url)
                .max_number_of_messages(r.max)
                .wait_time_seconds(r.wait_seconds)
                .visibility_timeout(r.visibility_seconds)
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .message_attribute_names("All");
            if let Some(id) = r.attempt_id {
                call = call.receive_request_attempt_id(id);
            }
            let out = call
                .send()
                .await
                .map_err(|e| ApiError::from_sdk("ReceiveMessage", e))?;
            Ok(out
                .messages()
                .iter()
                .map(|m| ReceivedMessage {
                    message_id: m.message_id().unwrap_or_default().to_owned(),
                    receipt_handle: m.receipt_handle().unwrap_or_default().to_owned(),
                    body: m.body().unwrap_or_default().to_owned(),
                    system: m
                        .attributes()
                        .map(|a| {
                            a.iter()
                                .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                                .collect()
                        })
                        .unwrap_or_default(),
                    attributes: m
                        .message_attributes()
                        .map(|a| {
                            a.iter()
                                .map(|(k, v)| (k.clone(), from_sdk_attribute(v)))
                                .collect()
                        })
                        .unwrap_or_default(),
                })
                .collect())
        })
    }

    fn delete_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<ReceiptEntry>,
    ) -> ApiFuture<'a, BatchOutcome> {
        Box::pin(async move {
            let sent: Vec<String> = entries.iter().map(|e| e.id.clone()).collect();
            let entries = entries
                .into_iter()
                .map(|e| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(e.id)
                        .receipt_handle(e.receipt_handle)
                        .build()
                        .map_err(|e| fatal("DeleteMessageBatch", e))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let out = self
                .client
                .delete_message_batch()
                .queue_url(queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| ApiError::from_sdk("DeleteMessageBatch", e))?;
            let successful = out.successful().iter().map(|r| r.id());
            Ok(outcome(&sent, successful, out.failed()))
        })
    }

    fn change_visibility_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<VisibilityEntry>,
    ) -> ApiFuture<'a, BatchOutcome> {
        Box::pin(async move {
            let sent: Vec<String> = entries.iter().map(|e| e.id.clone()).collect();
            let entries = entries
                .into_iter()
                .map(|e| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(e.id)
                        .receipt_handle(e.receipt_handle)
                        .visibility_timeout(e.seconds)
                        .build()
                        .map_err(|e| fatal("ChangeMessageVisibilityBatch", e))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let out = self
                .client
                .change_message_visibility_batch()
                .queue_url(queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| ApiError::from_sdk("ChangeMessageVisibilityBatch", e))?;
            let successful = out.successful().iter().map(|r| r.id());
            Ok(outcome(&sent, successful, out.failed()))
        })
    }

    fn send_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<SendEntry>,
    ) -> ApiFuture<'a, BatchOutcome> {
        Box::pin(async move {
            let sent: Vec<String> = entries.iter().map(|e| e.id.clone()).collect();
            let mut sdk = Vec::with_capacity(entries.len());
            for e in entries {
                let mut b = SendMessageBatchRequestEntry::builder()
                    .id(e.id)
                    .message_body(e.body)
                    .set_message_group_id(e.group_id)
                    .set_message_deduplication_id(e.deduplication_id);
                for (name, value) in &e.attributes {
                    b = b.message_attributes(name, to_sdk_attribute(value)?);
                }
                sdk.push(b.build().map_err(|e| fatal("SendMessageBatch", e))?);
            }
            let out = self
                .client
                .send_message_batch()
                .queue_url(queue_url)
                .set_entries(Some(sdk))
                .send()
                .await
                .map_err(|e| ApiError::from_sdk("SendMessageBatch", e))?;
            let successful = out.successful().iter().map(|r| r.id());
            Ok(outcome(&sent, successful, out.failed()))
        })
    }

    fn queue_url<'a>(&'a self, queue_name: &'a str) -> ApiFuture<'a, String> {
        Box::pin(async move {
            let out = self
                .client
                .get_queue_url()
                .queue_name(queue_name)
                .send()
                .await
                .map_err(|e| ApiError::from_sdk("GetQueueUrl", e))?;
            out.queue_url()
                .map(str::to_owned)
                .ok_or_else(|| fatal("GetQueueUrl", "SQS answered without a queue URL"))
        })
    }

    fn queue_attributes<'a>(
        &'a self,
        queue_url: &'a str,
    ) -> ApiFuture<'a, HashMap<String, String>> {
        Box::pin(async move {
            let out = self
                .client
                .get_queue_attributes()
                .queue_url(queue_url)
                .attribute_names(QueueAttributeName::All)
                .send()
                .await
                .map_err(|e| ApiError::from_sdk("GetQueueAttributes", e))?;
            Ok(out
                .attributes()
                .map(|a| {
                    a.iter()
                        .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                        .collect()
                })
                .unwrap_or_default())
        })
    }

    fn create_queue<'a>(
        &'a self,
        queue_name: &'a str,
        attributes: HashMap<String, String>,
    ) -> ApiFuture<'a, String> {
        Box::pin(async move {
            let mut call = self.client.create_queue().queue_name(queue_name);
            for (k, v) in attributes {
                call = call.attributes(QueueAttributeName::from(k.as_str()), v);
            }
            let out = call
                .send()
                .await
                .map_err(|e| ApiError::from_sdk("CreateQueue", e))?;
            out.queue_url()
                .map(str::to_owned)
                .ok_or_else(|| fatal("CreateQueue", "SQS answered without a queue URL"))
        })
    }

    fn set_queue_attributes<'a>(
        &'a self,
        queue_url: &'a str,
        attributes: HashMap<String, String>,
    ) -> ApiFuture<'a, ()> {
        Box::pin(async move {
            let mut call = self.client.set_queue_attributes().queue_url(queue_url);
            for (k, v) in attributes {
                call = call.attributes(QueueAttributeName::from(k.as_str()), v);
            }
            call.send()
                .await
                .map_err(|e| ApiError::from_sdk("SetQueueAttributes", e))?;
            Ok(())
        })
    }

    fn purge_queue<'a>(&'a self, queue_url: &'a str) -> ApiFuture<'a, ()> {
        Box::pin(async move {
            self.client
                .purge_queue()
                .queue_url(queue_url)
                .send()
                .await
                .map_err(|e| ApiError::from_sdk("PurgeQueue", e))?;
            Ok(())
        })
    }

    fn delete_queue<'a>(&'a self, queue_url: &'a str) -> ApiFuture<'a, ()> {
        Box::pin(async move {
            self.client
                .delete_queue()
                .queue_url(queue_url)
                .send()
                .await
                .map_err(|e| ApiError::from_sdk("DeleteQueue", e))?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_listed_nowhere_is_a_failure_that_heals() {
        let sent = ["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let failed = BatchResultErrorEntry::builder()
            .id("b")
            .code("InvalidParameterValue")
            .sender_fault(true)
            .build()
            .expect("an error entry");
        let out = outcome(&sent, ["a"], &[failed]);
        let ids: Vec<&str> = out.failed.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, ["b", "c"]);
        assert_eq!(out.failed[1].code, UNLISTED);
        assert_eq!(out.failed[1].kind(), BrokerErrorKind::Unavailable);
    }
}
