//! [`Protobuf`]: the Protobuf codec of a consumer's handlers.

use crate::decode::{Codec, Decode};
use crate::error::Result;
use crate::protobuf::ProtobufDecoder;
use crate::registry::RegistryClient;

/// Decodes Protobuf payloads in the Confluent wire format into the
/// handler's `prost` message type (see [`ProtobufDecoder`]: the payload's
/// schema id must name a Protobuf schema the registry knows; the message
/// indexes are read, not yet matched against the type).
#[derive(Debug, Clone)]
pub struct Protobuf {
    decoder: ProtobufDecoder,
}

impl Protobuf {
    /// The codec, asking `registry` for the schemas payloads name.
    pub fn new(registry: RegistryClient) -> Self {
        Self {
            decoder: ProtobufDecoder::new(registry),
        }
    }
}

impl Codec for Protobuf {
    const NAME: &'static str = "protobuf";
}

impl<M> Decode<M> for Protobuf
where
    M: prost::Message + Default + Send + 'static,
{
    async fn decode(&self, payload: &[u8]) -> Result<M> {
        self.decoder.decode_message::<M>(payload).await
    }
}
