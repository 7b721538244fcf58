//! The codecs a consumer decodes `#[handler(codec = ..)]` messages with,
//! one per format, each sharing one [`RegistryClient`](crate::registry::RegistryClient)
//! and its caches among the handlers that name it:
//!
//! ```no_run
//! # #[cfg(all(feature = "avro", feature = "protobuf"))]
//! # fn demo() -> Result<(), consumer_codec::Error> {
//! use consumer_codec::registry::{RegistryClient, RegistryConfig};
//! use consumer_codec::{Avro, JsonSchema, Protobuf};
//!
//! let registry = RegistryClient::new(RegistryConfig::new("http://127.0.0.1:8081/apis/ccompat/v7"))?;
//! let avro = Avro::new(registry.clone());
//! let protobuf = Protobuf::new(registry.clone());
//! let json = JsonSchema::new(registry);
//! // consumer.with_codec(avro).with_codec(protobuf).with_codec(json)
//! # Ok(())
//! # }
//! ```

#[cfg(feature = "avro")]
mod avro;
mod json_schema;
#[cfg(feature = "protobuf")]
mod protobuf;

#[cfg(feature = "avro")]
pub use avro::Avro;
pub use json_schema::JsonSchema;
#[cfg(feature = "protobuf")]
pub use protobuf::Protobuf;
