//! The contracts of a [`Service`], as methods on it.

use consumer_core::{Error, Service};

use crate::asyncapi::{self, AsyncApiError, PayloadSchema};

/// A service's contracts: its AsyncAPI document and its payload schemas,
/// made from [`Service::description`].
pub trait ServiceContracts: Sized {
    /// The AsyncAPI 3.1.0 document of the parts added so far: a channel per
    /// source, retry, dead-letter and outbox destination, the handlers'
    /// receive operations, the sends of retries, dead letters and outbox
    /// events, payload schemas in draft-07 (see [`crate::asyncapi`]).
    /// `Err` names every handler, event and type that keeps it from being
    /// made (a message type without `schemars::JsonSchema`, a source that
    /// does not describe its channels).
    fn asyncapi(&self) -> Result<serde_json::Value, AsyncApiError>;

    /// Each event type's payload schema per contract, as its own draft-07
    /// document, made as [`asyncapi`](Self::asyncapi) makes the
    /// document's: what handlers read (`Deserialize`) and what the outbox
    /// writes (`Serialize`), one per event type and contract, sorted.
    /// Snapshot and check them with [`crate::compat::SnapshotDir`], one
    /// directory per contract
    /// ([`Contract::dir_name`](crate::asyncapi::Contract::dir_name)). `Err`
    /// names each type without a schema, and an event type read (or
    /// written) as two types whose schemas differ.
    fn payload_schemas(&self) -> Result<Vec<PayloadSchema>, AsyncApiError>;

    /// Serves [`asyncapi`](Self::asyncapi) as `GET /asyncapi.json` on the
    /// health endpoint. Call it after the parts are added: the document is
    /// made here, so one that cannot be made fails the service before it
    /// starts.
    fn with_asyncapi_endpoint(self) -> Result<Self, Error>;
}

impl ServiceContracts for Service {
    fn asyncapi(&self) -> Result<serde_json::Value, AsyncApiError> {
        asyncapi::build(&self.description())
    }

    fn payload_schemas(&self) -> Result<Vec<PayloadSchema>, AsyncApiError> {
        asyncapi::payload_schemas(&self.description())
    }

    fn with_asyncapi_endpoint(self) -> Result<Self, Error> {
        let document = self.asyncapi().map_err(|e| Error::Config(e.to_string()))?;
        let text = serde_json::to_string_pretty(&document)
            .map_err(|e| Error::Config(format!("the AsyncAPI document cannot be rendered: {e}")))?;
        Ok(self.with_json_document("/asyncapi.json", text))
    }
}
