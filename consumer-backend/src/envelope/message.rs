//! [`Message`]: what publishers send.

use bytes::Bytes;
use time::OffsetDateTime;

use super::{Headers, format_time, names};

/// A message to publish: payload, partition key and headers.
///
/// `Message::json` fills in the CloudEvents attributes a consumer needs
/// (`ce_id`, `ce_type`, `ce_specversion`, `ce_time`, `content-type`), and
/// every publisher gives a message that names no `ce_source` its own
/// default source ([`cloudevent::complete`](super::cloudevent::complete)),
/// so the simplest publish is a valid binary-mode CloudEvent. A message
/// without a `ce_type` ([`Message::raw`]) is sent as a plain message.
#[derive(Debug, Clone)]
pub struct Message {
    /// Partition key; `None` lets the broker spread messages.
    pub key: Option<String>,
    /// Headers to send.
    pub headers: Headers,
    /// The body.
    pub payload: Bytes,
}

impl Message {
    /// Raw bytes with no headers at all: what a plain client would send.
    pub fn raw(payload: impl Into<Bytes>) -> Self {
        Self {
            key: None,
            headers: Headers::new(),
            payload: payload.into(),
        }
    }

    /// A JSON CloudEvent of the given type with a fresh id.
    pub fn json<T: serde::Serialize + ?Sized>(
        kind: &str,
        value: &T,
    ) -> Result<Self, serde_json::Error> {
        let payload = serde_json::to_vec(value)?;
        let mut headers = Headers::new();
        headers.insert(names::ID, uuid::Uuid::now_v7().to_string());
        headers.insert(names::SPEC_VERSION, "1.0");
        headers.insert(names::TYPE, kind);
        headers.insert(names::TIME, format_time(OffsetDateTime::now_utc()));
        headers.insert(names::CONTENT_TYPE, "application/json");
        Ok(Self {
            key: None,
            headers,
            payload: payload.into(),
        })
    }

    /// Sets the partition key.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the message id (`ce_id`), e.g. to publish the same message twice.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.headers.insert(names::ID, id.into());
        self
    }

    /// Sets the CloudEvents `source`.
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.headers.insert(names::SOURCE, source.into());
        self
    }

    /// Sets any header.
    pub fn with_header(mut self, name: impl AsRef<str>, value: impl AsRef<[u8]>) -> Self {
        self.headers.insert(name, value);
        self
    }
}
