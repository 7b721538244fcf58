//! [`Avro`]: the Avro codec of a consumer's handlers.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use apache_avro::AvroSchema;
use serde::de::DeserializeOwned;

use crate::avro::AvroDecoder;
use crate::decode::{Codec, Decode};
use crate::error::Result;
use crate::registry::RegistryClient;

/// Decodes Avro payloads in the Confluent wire format into the handler's
/// message type, whose derived schema (`#[derive(apache_avro::AvroSchema,
/// serde::Deserialize)]`) is the reader's: a record written with any
/// version of the subject is resolved into it by Avro's rules (see
/// [`AvroDecoder`]). One decoder per message type, made on its first
/// message; writers' schemas fetched once per id.
#[derive(Debug)]
pub struct Avro {
    registry: RegistryClient,
    readers: RwLock<HashMap<TypeId, Arc<AvroDecoder>>>,
}

impl Avro {
    /// The codec, asking `registry` for writers' schemas.
    pub fn new(registry: RegistryClient) -> Self {
        Self {
            registry,
            readers: RwLock::new(HashMap::new()),
        }
    }

    /// The decoder into `M`'s schema, made once.
    fn reader<M: AvroSchema + 'static>(&self) -> Arc<AvroDecoder> {
        let id = TypeId::of::<M>();
        if let Some(decoder) = self
            .readers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
        {
            return Arc::clone(decoder);
        }
        let mut readers = self.readers.write().unwrap_or_else(PoisonError::into_inner);
        let decoder = readers.entry(id).or_insert_with(|| {
            Arc::new(AvroDecoder::with_reader(
                self.registry.clone(),
                M::get_schema(),
            ))
        });
        Arc::clone(decoder)
    }
}

impl Codec for Avro {
    const NAME: &'static str = "avro";
}

impl<M> Decode<M> for Avro
where
    M: AvroSchema + DeserializeOwned + Send + 'static,
{
    async fn decode(&self, payload: &[u8]) -> Result<M> {
        self.reader::<M>().decode(payload).await
    }
}
