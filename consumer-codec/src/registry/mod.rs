//! A thin client of the Confluent-compatible schema registry API, with
//! caching and classified failures.

mod api;
mod cache;
mod client;
mod config;
mod usable;

pub use api::{
    Compatibility, CompatibilityCheck, Schema, SchemaReference, SchemaType, SubjectVersion, Version,
};
pub use client::RegistryClient;
pub use config::{RegistryAuth, RegistryConfig};
#[cfg(feature = "avro")]
pub(crate) use usable::LastId;
pub(crate) use usable::LastUsable;
