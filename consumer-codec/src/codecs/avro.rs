//! [`Avro`]: the Avro codec of a consumer's handlers.

use std::any::{Any, TypeId};
use std::sync::{Arc, PoisonError, RwLock};

use apache_avro::AvroSchema;
use apache_avro::reader::datum::SpecificDatumReader;
use serde::de::DeserializeOwned;

use crate::avro::AvroDecoder;
use crate::decode::{Codec, Decode};
use crate::error::{Error, Result};
use crate::registry::RegistryClient;
use crate::wire::decode_frame;

/// Decodes Avro payloads in the Confluent wire format into the handler's
/// message type, whose derived schema (`#[derive(apache_avro::AvroSchema,
/// serde::Deserialize)]`) is the reader's: a record written with any
/// version of the subject is resolved into it by Avro's rules (see
/// [`AvroDecoder`]). A record written with the reader's own schema (the
/// same Parsing Canonical Form) is read straight into the type, with no
/// resolution. One reader per message type, made on its first message;
/// writers' schemas fetched once per id.
#[derive(Debug)]
pub struct Avro {
    registry: RegistryClient,
    /// One reader per message type, looked up by a scan: a consumer's
    /// handlers read a few types, and comparing `TypeId`s is cheaper than
    /// hashing them on every message.
    readers: RwLock<Vec<(TypeId, Arc<dyn Any + Send + Sync>)>>,
}

/// What reads one message type: the resolving decoder, and the direct
/// reader for records written with the type's own schema.
struct Reader<M: AvroSchema> {
    resolving: AvroDecoder,
    direct: SpecificDatumReader<M>,
}

impl Avro {
    /// The codec, asking `registry` for writers' schemas.
    pub fn new(registry: RegistryClient) -> Self {
        Self {
            registry,
            readers: RwLock::new(Vec::new()),
        }
    }

    /// The reader of `M`, made once.
    fn reader<M>(&self) -> Result<Arc<Reader<M>>>
    where
        M: AvroSchema + DeserializeOwned + Send + Sync + 'static,
    {
        let id = TypeId::of::<M>();
        let known = self
            .readers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|(of, _)| *of == id)
            .map(|(_, any)| Arc::clone(any));
        let any = match known {
            Some(any) => any,
            None => {
                let made: Arc<dyn Any + Send + Sync> = Arc::new(Reader::<M> {
                    resolving: AvroDecoder::with_reader(self.registry.clone(), M::get_schema()),
                    direct: SpecificDatumReader::<M>::builder().build().map_err(|e| {
                        Error::InvalidSchema {
                            reason: format!(
                                "the Avro schema of {} does not resolve: {e}",
                                std::any::type_name::<M>()
                            ),
                        }
                    })?,
                });
                let mut readers = self.readers.write().unwrap_or_else(PoisonError::into_inner);
                // Made by another task meanwhile: theirs is kept.
                match readers.iter().find(|(of, _)| *of == id) {
                    Some((_, theirs)) => Arc::clone(theirs),
                    None => {
                        readers.push((id, Arc::clone(&made)));
                        made
                    }
                }
            }
        };
        any.downcast::<Reader<M>>().map_err(|_| {
            Error::Config(format!(
                "the Avro codec's reader of {} is of another type",
                std::any::type_name::<M>()
            ))
        })
    }
}

impl Codec for Avro {
    const NAME: &'static str = "avro";
}

impl<M> Decode<M> for Avro
where
    M: AvroSchema + DeserializeOwned + Send + Sync + 'static,
{
    async fn decode(&self, payload: &[u8]) -> Result<M> {
        let frame = decode_frame(payload)?;
        let schema_id = frame.schema_id;
        // The steady state, without a reference count or an await: the
        // type's reader is made and the id is the reader's own schema.
        {
            let readers = self.readers.read().unwrap_or_else(PoisonError::into_inner);
            let id = TypeId::of::<M>();
            if let Some(reader) = readers
                .iter()
                .find(|(of, _)| *of == id)
                .and_then(|(_, any)| any.downcast_ref::<Reader<M>>())
                && reader.resolving.is_last_readers(schema_id)
            {
                return reader.direct(schema_id, frame.payload);
            }
        }
        let reader = self.reader::<M>()?;
        if reader.resolving.is_readers(schema_id).await? {
            reader.direct(schema_id, frame.payload)
        } else {
            reader.resolving.decode(payload).await
        }
    }
}

impl<M: AvroSchema + DeserializeOwned> Reader<M> {
    /// `payload` read straight into `M`: it was written with `M`'s schema.
    fn direct(&self, schema_id: u32, mut payload: &[u8]) -> Result<M> {
        let undecodable = |reason: String| Error::Undecodable { schema_id, reason };
        let message = self.direct.read(&mut payload).map_err(|e| {
            undecodable(format!(
                "the Avro record does not decode as {}: {e}",
                std::any::type_name::<M>()
            ))
        })?;
        if !payload.is_empty() {
            return Err(undecodable(format!(
                "{} byte(s) are left after the record: it was not written with this schema",
                payload.len()
            )));
        }
        Ok(message)
    }
}
