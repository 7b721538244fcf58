//! [`JsonSchema`]: the JSON Schema codec of a consumer's handlers.

use serde::de::DeserializeOwned;

use crate::decode::{Codec, Decode};
use crate::error::{Error, Result};
use std::sync::Arc;

use crate::registry::{LastUsable, RegistryClient, SchemaType};
use crate::wire::decode_frame;

/// Decodes JSON payloads in the Confluent wire format (what Confluent's
/// `JSONSerializer` writes: the header, then the JSON document) into the
/// handler's `serde` type. The payload's schema id must name a JSON schema
/// the registry knows (fetched once per id); the document is checked by
/// the type it decodes into, not validated against the schema's keywords.
#[derive(Debug, Clone)]
pub struct JsonSchema {
    registry: RegistryClient,
    last: Arc<LastUsable>,
}

impl JsonSchema {
    /// The codec, asking `registry` for the schemas payloads name.
    pub fn new(registry: RegistryClient) -> Self {
        Self {
            registry,
            last: Arc::default(),
        }
    }
}

impl Codec for JsonSchema {
    const NAME: &'static str = "json_schema";
}

impl<M> Decode<M> for JsonSchema
where
    M: DeserializeOwned + Send + 'static,
{
    async fn decode(&self, payload: &[u8]) -> Result<M> {
        let frame = decode_frame(payload)?;
        let schema_id = frame.schema_id;
        self.last
            .check(&self.registry, schema_id, SchemaType::Json)
            .await?;
        serde_json::from_slice(frame.payload).map_err(|e| Error::Undecodable {
            schema_id,
            reason: format!(
                "the JSON document is not a {}: {e}",
                std::any::type_name::<M>()
            ),
        })
    }
}
