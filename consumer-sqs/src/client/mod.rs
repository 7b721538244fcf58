//! The SQS calls the backend makes, behind a small trait ([`SqsApi`]) so
//! that tests can put a fault-injecting wrapper around the real client
//! ([`AwsSqs`], on `aws-sdk-sqs`) for what an emulator cannot show:
//! throttling, partial batch failures, network errors on a delete or a
//! visibility change.
//!
//! The types here are the backend's own, not the SDK's: a wrapper builds
//! any answer (a batch with one failed entry, a throttled receive) without
//! the SDK's HTTP plumbing. Every error is an [`ApiError`] that already
//! says what kind of failure it is ([`BrokerErrorKind`]), so the settle
//! loop knows what can heal.

mod aws;
mod classify;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use consumer_backend::BrokerErrorKind;

pub use aws::AwsSqs;
pub use classify::{SqsCodes, kind_of_code};

/// A call's future.
pub type ApiFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ApiError>> + Send + 'a>>;

/// The SQS calls the backend makes. Implemented by [`AwsSqs`]; wrap it to
/// inject faults (see the crate's tests).
pub trait SqsApi: Send + Sync + 'static {
    /// `ReceiveMessage`: up to `request.max` messages, with every system
    /// attribute and every message attribute.
    fn receive<'a>(&'a self, request: ReceiveRequest<'a>) -> ApiFuture<'a, Vec<ReceivedMessage>>;

    /// `DeleteMessageBatch`: the entries' ids are unique within the call.
    fn delete_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<ReceiptEntry>,
    ) -> ApiFuture<'a, BatchOutcome>;

    /// `ChangeMessageVisibilityBatch`: each entry with its new timeout.
    fn change_visibility_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<VisibilityEntry>,
    ) -> ApiFuture<'a, BatchOutcome>;

    /// `SendMessageBatch`: at most ten entries.
    fn send_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<SendEntry>,
    ) -> ApiFuture<'a, BatchOutcome>;

    /// `GetQueueUrl`.
    fn queue_url<'a>(&'a self, queue_name: &'a str) -> ApiFuture<'a, String>;

    /// `GetQueueAttributes` with `All`.
    fn queue_attributes<'a>(&'a self, queue_url: &'a str)
    -> ApiFuture<'a, HashMap<String, String>>;

    /// `CreateQueue` with `attributes`; the queue's URL.
    fn create_queue<'a>(
        &'a self,
        queue_name: &'a str,
        attributes: HashMap<String, String>,
    ) -> ApiFuture<'a, String>;

    /// `SetQueueAttributes`.
    fn set_queue_attributes<'a>(
        &'a self,
        queue_url: &'a str,
        attributes: HashMap<String, String>,
    ) -> ApiFuture<'a, ()>;

    /// `PurgeQueue`.
    fn purge_queue<'a>(&'a self, queue_url: &'a str) -> ApiFuture<'a, ()>;

    /// `DeleteQueue`.
    fn delete_queue<'a>(&'a self, queue_url: &'a str) -> ApiFuture<'a, ()>;
}

/// What a `ReceiveMessage` asks for.
#[derive(Debug, Clone)]
pub struct ReceiveRequest<'a> {
    /// The queue.
    pub queue_url: &'a str,
    /// 1 to 10.
    pub max: i32,
    /// Long polling: 0 to 20 seconds.
    pub wait_seconds: i32,
    /// How long the received messages stay invisible, in seconds.
    pub visibility_seconds: i32,
    /// `ReceiveRequestAttemptId` (FIFO queues): the same id on a retried
    /// receive returns the same messages.
    pub attempt_id: Option<&'a str>,
}

/// A message as `ReceiveMessage` returned it.
#[derive(Debug, Clone, Default)]
pub struct ReceivedMessage {
    /// SQS's id of the message (a message moved by a redrive gets a new one).
    pub message_id: String,
    /// The handle of this receive: deletes and visibility changes name it.
    pub receipt_handle: String,
    /// The body, as sent.
    pub body: String,
    /// `ApproximateReceiveCount`, `MessageGroupId`, `SentTimestamp`, ... by
    /// their SQS names.
    pub system: HashMap<String, String>,
    /// Every message attribute.
    pub attributes: Vec<(String, AttributeValue)>,
}

impl ReceivedMessage {
    /// `ApproximateReceiveCount` (1 when missing or unreadable).
    pub fn receive_count(&self) -> u32 {
        self.system
            .get("ApproximateReceiveCount")
            .and_then(|v| v.parse().ok())
            .filter(|n| *n >= 1)
            .unwrap_or(1)
    }

    /// `MessageGroupId` (FIFO queues).
    pub fn group_id(&self) -> Option<&str> {
        self.system.get("MessageGroupId").map(String::as_str)
    }
}

/// A message attribute's value, whatever client sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttributeValue {
    /// `String` or `String.<custom>`.
    String {
        /// The data type as sent.
        data_type: String,
        /// The value.
        value: String,
    },
    /// `Number` or `Number.<custom>`: the number as text.
    Number {
        /// The data type as sent.
        data_type: String,
        /// The value.
        value: String,
    },
    /// `Binary` or `Binary.<custom>`.
    Binary {
        /// The data type as sent.
        data_type: String,
        /// The value.
        value: Bytes,
    },
}

impl AttributeValue {
    /// A plain `String` attribute.
    pub fn string(value: impl Into<String>) -> Self {
        Self::String {
            data_type: "String".to_owned(),
            value: value.into(),
        }
    }

    /// The value's bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Self::String { value, .. } | Self::Number { value, .. } => value.as_bytes(),
            Self::Binary { value, .. } => value,
        }
    }

    /// The data type.
    pub fn data_type(&self) -> &str {
        match self {
            Self::String { data_type, .. }
            | Self::Number { data_type, .. }
            | Self::Binary { data_type, .. } => data_type,
        }
    }

    /// What SQS counts of it toward the message size: its data type and
    /// value.
    pub fn size(&self) -> usize {
        self.data_type().len() + self.bytes().len()
    }
}

/// One entry of a delete: a batch-unique id and a receipt handle.
#[derive(Debug, Clone)]
pub struct ReceiptEntry {
    /// Unique within the call.
    pub id: String,
    /// The receipt handle.
    pub receipt_handle: String,
}

/// One entry of a visibility change.
#[derive(Debug, Clone)]
pub struct VisibilityEntry {
    /// Unique within the call.
    pub id: String,
    /// The receipt handle.
    pub receipt_handle: String,
    /// Seconds from now the message stays invisible (0: visible now).
    pub seconds: i32,
}

/// One entry of a send.
#[derive(Debug, Clone)]
pub struct SendEntry {
    /// Unique within the call.
    pub id: String,
    /// The body.
    pub body: String,
    /// At most ten attributes.
    pub attributes: Vec<(String, AttributeValue)>,
    /// `MessageGroupId` (FIFO queues).
    pub group_id: Option<String>,
    /// `MessageDeduplicationId` (FIFO queues).
    pub deduplication_id: Option<String>,
}

/// What a batch call did: the entries that failed (every other one
/// succeeded).
#[derive(Debug, Clone, Default)]
pub struct BatchOutcome {
    /// The failed entries, by id.
    pub failed: Vec<EntryFailure>,
}

/// One failed entry of a batch call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryFailure {
    /// The entry's id.
    pub id: String,
    /// SQS's error code.
    pub code: String,
    /// SQS's message.
    pub message: String,
    /// Whether SQS blames the request (`true`) or itself.
    pub sender_fault: bool,
}

impl EntryFailure {
    /// What kind of failure it is: the code's kind; an unknown code that
    /// SQS does not blame on the sender heals.
    pub fn kind(&self) -> BrokerErrorKind {
        match kind_of_code(&self.code, &self.message) {
            Some(kind) => kind,
            None if self.sender_fault => BrokerErrorKind::Rejected,
            None => BrokerErrorKind::Unavailable,
        }
    }
}

/// A failed SQS call: its kind, SQS's code and message when SQS answered,
/// and the client's error (the AWS backends' shared type, with SQS's
/// codes).
pub type ApiError = consumer_aws::ApiError<SqsCodes>;
