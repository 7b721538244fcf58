//! Schema-registry payloads for the `consumer` framework: the Confluent
//! wire format, a client of the Confluent-compatible registry API, and
//! Avro decoding with schema resolution.
//!
//! ```
//! use consumer_codec::wire::{decode_frame, encode_frame};
//! use consumer_codec::{Error, WireError};
//!
//! let framed = encode_frame(7, b"\x06abc");
//! assert_eq!(decode_frame(&framed)?.schema_id, 7);
//!
//! // A plain JSON payload is poison: no retry will make it framed.
//! let error = Error::from(decode_frame(br#"{"id":1}"#).unwrap_err());
//! assert!(error.is_poison() && !error.is_transient());
//! # Ok::<(), WireError>(())
//! ```
//!
//! Against a registry (the `avro` feature, on by default):
//!
//! ```no_run
//! # #[cfg(feature = "avro")]
//! # async fn demo(payload: &[u8]) -> Result<(), consumer_codec::Error> {
//! use consumer_codec::avro::AvroDecoder;
//! use consumer_codec::registry::{RegistryClient, RegistryConfig};
//!
//! #[derive(serde::Deserialize)]
//! struct OrderPlaced { id: String, amount: i64 }
//!
//! let registry = RegistryClient::new(RegistryConfig::new("http://127.0.0.1:8081/apis/ccompat/v7"))?;
//! let decoder = AvroDecoder::new(registry, r#"{"type": "record", "name": "OrderPlaced",
//!     "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "long"}]}"#)?;
//! match decoder.decode::<OrderPlaced>(payload).await {
//!     Ok(order) => { /* handle it */ }
//!     Err(e) if e.is_poison() => { /* dead letter, with e.schema_id() and e */ }
//!     Err(e) => { /* transient or configuration: back off, never dead letter */ }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! * [`wire`]: the framing (magic byte 0, a 4-byte big-endian schema id,
//!   Protobuf's message indexes) as pure functions.
//! * [`registry`]: [`RegistryClient`](registry::RegistryClient): schemas by
//!   id, subject versions, register, lookup, compatibility checks and
//!   rules; basic or bearer auth, timeouts, `https://` with the `tls`
//!   feature; what never changes is cached.
//! * [`subject`]: the Confluent subject name strategies.
//! * [`avro`]: [`AvroDecoder`](avro::AvroDecoder) (writer's schema by id,
//!   resolved into the reader's, into a serde type) and
//!   [`AvroEncoder`](avro::AvroEncoder) (auto-registration off unless
//!   switched on).
//! * [`protobuf`]: [`ProtobufDecoder`](protobuf::ProtobufDecoder) and
//!   [`ProtobufEncoder`](protobuf::ProtobufEncoder), into and from `prost`
//!   types, with the message indexes.
//! * [`Avro`], [`Protobuf`] and [`JsonSchema`]: the codecs a consumer
//!   decodes `#[handler(codec = avro | protobuf | json_schema)]` messages
//!   with ([`Codec`], [`Decode`]: the seam the runtime calls).
//! * [`Error`] says whose fault a failure is: [`Error::is_poison`] (the
//!   message's: dead letter it with [`Error::schema_id`]) or
//!   [`Error::is_transient`] (the registry's, for now: back off).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod decode;
mod error;
pub mod subject;
pub mod wire;

#[cfg(feature = "avro")]
#[cfg_attr(docsrs, doc(cfg(feature = "avro")))]
pub mod avro;
#[cfg(feature = "registry")]
mod codecs;
#[cfg(feature = "protobuf")]
#[cfg_attr(docsrs, doc(cfg(feature = "protobuf")))]
pub mod protobuf;
#[cfg(any(feature = "avro", feature = "protobuf"))]
mod registration;
#[cfg(feature = "registry")]
#[cfg_attr(docsrs, doc(cfg(feature = "registry")))]
pub mod registry;

#[cfg(feature = "avro")]
#[cfg_attr(docsrs, doc(cfg(feature = "avro")))]
pub use codecs::Avro;
#[cfg(feature = "registry")]
#[cfg_attr(docsrs, doc(cfg(feature = "registry")))]
pub use codecs::JsonSchema;
#[cfg(feature = "protobuf")]
#[cfg_attr(docsrs, doc(cfg(feature = "protobuf")))]
pub use codecs::Protobuf;
pub use decode::{Codec, Decode};

pub use error::{BoxError, Error, Result, WireError};
