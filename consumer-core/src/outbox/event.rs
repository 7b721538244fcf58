//! [`NewEvent`]: an event to enqueue, serialised before anything is written.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::Error;

/// An event to enqueue.
#[derive(Debug, Clone)]
#[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
pub struct NewEvent {
    pub(crate) aggregate_type: String,
    pub(crate) aggregate_id: String,
    pub(crate) event_type: String,
    pub(crate) payload: String,
    pub(crate) destination: Option<String>,
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) id: Option<uuid::Uuid>,
}

impl NewEvent {
    /// An event of `event_type` about one aggregate, its payload serialised
    /// to JSON now: a payload that cannot be serialised is an error here,
    /// before anything is written.
    pub fn new<T: Serialize + ?Sized>(
        aggregate_type: impl Into<String>,
        aggregate_id: impl Into<String>,
        event_type: impl Into<String>,
        payload: &T,
    ) -> Result<Self, Error> {
        let payload = serde_json::to_string(payload).map_err(|source| Error::Serialize {
            what: "event payload",
            source,
        })?;
        Ok(Self {
            aggregate_type: aggregate_type.into(),
            aggregate_id: aggregate_id.into(),
            event_type: event_type.into(),
            payload,
            destination: None,
            headers: BTreeMap::new(),
            id: None,
        })
    }

    /// Publishes to this destination instead of the outbox's default.
    pub fn with_destination(mut self, destination: impl Into<String>) -> Self {
        self.destination = Some(destination.into());
        self
    }

    /// Gives the event this id (its CloudEvents `id`, and the token of a
    /// scheduled event) instead of a fresh UUIDv7: a deterministic id, so
    /// the receiver's dedup recognises the same command written again. An
    /// id already in the outbox table makes the write fail (its primary
    /// key), so derive it from something written once (a saga derives its
    /// commands' ids from its id and version).
    pub fn with_id(mut self, id: uuid::Uuid) -> Self {
        self.id = Some(id);
        self
    }

    /// The id set with [`NewEvent::with_id`], if any.
    pub fn id(&self) -> Option<uuid::Uuid> {
        self.id
    }

    /// The CloudEvents type.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The destination set with [`NewEvent::with_destination`], if any.
    pub fn destination(&self) -> Option<&str> {
        self.destination.as_deref()
    }

    /// The payload, serialised.
    pub fn payload_json(&self) -> &str {
        &self.payload
    }

    /// Adds a header to the published message.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// The headers as the `headers` column stores them (a JSON object of
    /// strings), `None` when there are none.
    pub(super) fn headers_json(&self) -> Result<Option<String>, Error> {
        if self.headers.is_empty() {
            return Ok(None);
        }
        serde_json::to_string(&self.headers)
            .map(Some)
            .map_err(|source| Error::Serialize {
                what: "event headers",
                source,
            })
    }
}
