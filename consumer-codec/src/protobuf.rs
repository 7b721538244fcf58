//! Protobuf payloads in the Confluent wire format, into and from `prost`
//! types.
//!
//! The reader's type decides how the bytes are read, as with Confluent's
//! specific deserializer: the writer's schema is fetched by id (once) to
//! check that the id is known and names a Protobuf schema, and the message
//! indexes are parsed and handed back, but not yet matched against the
//! type's name (that needs the `.proto` text parsed, a later step).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::registration::Registration;
use crate::registry::{LastUsable, RegistryClient, Schema, SchemaType};
use crate::wire::{decode_protobuf_frame, protobuf_payload, write_header, write_message_indexes};

/// Decodes framed Protobuf payloads into `prost` messages.
#[derive(Debug, Clone)]
pub struct ProtobufDecoder {
    registry: RegistryClient,
    last: Arc<LastUsable>,
}

/// A decoded message with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded<T> {
    /// The writer's schema id.
    pub schema_id: u32,
    /// The message type's path in the writer's schema (`[0]`: its first
    /// message).
    pub message_indexes: Vec<u32>,
    /// The message.
    pub message: T,
}

impl ProtobufDecoder {
    /// A decoder that asks `registry` for the schemas payloads name.
    pub fn new(registry: RegistryClient) -> Self {
        Self {
            registry,
            last: Arc::default(),
        }
    }

    /// Decodes a framed payload into `T`.
    ///
    /// # Errors
    ///
    /// Poison ([`Error::is_poison`]): bad framing or message indexes, an id
    /// the registry does not know or that is not a Protobuf schema, bytes
    /// that are not a `T`. Transient ([`Error::is_transient`]): the
    /// registry did not answer.
    pub async fn decode<T: prost::Message + Default>(&self, bytes: &[u8]) -> Result<Decoded<T>> {
        let frame = decode_protobuf_frame(bytes)?;
        let message = self.message(frame.schema_id, frame.payload).await?;
        Ok(Decoded {
            schema_id: frame.schema_id,
            message_indexes: frame.message_indexes,
            message,
        })
    }

    /// [`decode`](Self::decode) of the message alone: the message indexes
    /// are checked, not kept.
    ///
    /// # Errors
    ///
    /// As [`decode`](Self::decode).
    pub async fn decode_message<T: prost::Message + Default>(&self, bytes: &[u8]) -> Result<T> {
        let (schema_id, payload) = protobuf_payload(bytes)?;
        self.message(schema_id, payload).await
    }

    /// `payload` as a `T`, once `schema_id` is known to name a Protobuf
    /// schema.
    async fn message<T: prost::Message + Default>(
        &self,
        schema_id: u32,
        payload: &[u8],
    ) -> Result<T> {
        self.last
            .check(&self.registry, schema_id, SchemaType::Protobuf)
            .await?;
        T::decode(payload).map_err(|e| Error::Undecodable {
            schema_id,
            reason: format!(
                "the bytes are not a Protobuf {}: {e}",
                std::any::type_name::<T>()
            ),
        })
    }
}

/// Encodes `prost` messages as framed Protobuf payloads under one subject's
/// `.proto` schema; auto-registration off unless switched on.
#[derive(Debug)]
pub struct ProtobufEncoder {
    registration: Registration,
    message_indexes: Vec<u32>,
}

impl ProtobufEncoder {
    /// An encoder under `subject` of the messages `proto` (a `.proto`
    /// file's text) declares first; auto-registration off.
    pub fn new(
        registry: RegistryClient,
        subject: impl Into<String>,
        proto: impl Into<String>,
    ) -> Self {
        let schema = Schema {
            schema_type: SchemaType::Protobuf,
            schema: proto.into(),
            references: Vec::new(),
        };
        Self {
            registration: Registration::new(registry, subject.into(), schema),
            message_indexes: vec![0],
        }
    }

    /// The path of the message type in the `.proto` file, when it is not
    /// the first top-level message: `[2]` the third, `[1, 0]` the first
    /// nested in the second.
    pub fn with_message_indexes(mut self, message_indexes: Vec<u32>) -> Self {
        self.message_indexes = message_indexes;
        self
    }

    /// Registers the schema under the subject when it is not there yet: for
    /// development.
    pub fn with_auto_register(mut self, auto_register: bool) -> Self {
        self.registration.auto_register = auto_register;
        self
    }

    /// The registry's id of the schema, found on first use.
    ///
    /// # Errors
    ///
    /// As [`AvroEncoder::schema_id`](crate::avro::AvroEncoder::schema_id).
    pub async fn schema_id(&self) -> Result<u32> {
        self.registration.schema_id().await
    }

    /// Encodes `message`: header, message indexes, then the message.
    ///
    /// # Errors
    ///
    /// What [`schema_id`](Self::schema_id) returns; [`Error::Unencodable`]
    /// never in practice (a `Vec` always has room).
    pub async fn encode<T: prost::Message>(&self, message: &T) -> Result<Vec<u8>> {
        let schema_id = self.schema_id().await?;
        let mut out = Vec::with_capacity(8 + message.encoded_len());
        write_header(schema_id, &mut out);
        write_message_indexes(&self.message_indexes, &mut out);
        message.encode(&mut out).map_err(|e| Error::Unencodable {
            subject: self.registration.subject.clone(),
            reason: e.to_string(),
        })?;
        Ok(out)
    }
}
