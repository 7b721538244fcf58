//! The AsyncAPI 3.1.0 document of a service, generated from what its host
//! runs: [`Service::asyncapi`](crate::Service::asyncapi) (feature
//! `asyncapi`).
//!
//! * **Channels**: each consumer's source (with its retry and dead-letter
//!   channels) and each destination of an outbox relay, with the Kafka or
//!   AMQP bindings the backend describes ([`Source::channels`](crate::Source::channels),
//!   [`Publisher::channel`](crate::Publisher::channel)).
//! * **Operations**: `receive` for each handler and event type (and again
//!   on the retry channel); `send` for retry copies, dead letters, and each
//!   event type the outbox declares ([`Outbox::with_event`](crate::Outbox::with_event)).
//! * **Messages**: the CloudEvents attributes as the headers' schema, the
//!   payload's schema from `schemars` in the draft-07 dialect (the one the
//!   AsyncAPI parser checks), with every subschema under
//!   `components.schemas` and no `#/definitions` or `$defs` reference left.
//!   A handler takes what its type *deserializes* from; the outbox sends
//!   what its type *serializes* to.
//!
//! The same schemas, one document per event type and contract, are what
//! schema-evolution checks snapshot: [`Service::payload_schemas`](crate::Service::payload_schemas)
//! and [`crate::compat`].
//!
//! A message type without a schema (no `schemars::JsonSchema`) still
//! compiles; the document is refused with an error naming the type and the
//! handler or event (`#[handler]` finds out through autoref
//! specialisation: see [`Probe`]). Refusing at compile time would make
//! every handler depend on the feature; a service that serves its document
//! ([`Service::with_asyncapi_endpoint`](crate::Service::with_asyncapi_endpoint))
//! fails at start instead.

#[cfg(feature = "asyncapi")]
mod builder;
#[cfg(feature = "asyncapi")]
mod contracts;
mod description;
#[cfg(feature = "asyncapi")]
mod document;
#[cfg(feature = "asyncapi")]
mod error;
#[cfg(feature = "asyncapi")]
mod headers;
mod probe;
#[cfg(feature = "asyncapi")]
mod schemas;

#[cfg(feature = "asyncapi")]
pub(crate) use builder::{ServiceInfo, build};
#[cfg(feature = "asyncapi")]
pub(crate) use contracts::payload_schemas;
#[cfg(feature = "asyncapi")]
pub use contracts::{Contract, PayloadSchema, write_current};
pub use description::{ChannelDescription, DeclaredEvent, PayloadType, SourceChannels};
pub(crate) use description::{HandlerDescription, PartDescription};
#[cfg(feature = "asyncapi")]
pub use error::AsyncApiError;
#[cfg(feature = "asyncapi")]
pub use probe::ViaJsonSchema;
pub use probe::{Probe, ViaNothing};
