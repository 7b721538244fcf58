//! The AsyncAPI 3.1.0 document of a service, generated from what its host
//! runs ([`ServiceContracts::asyncapi`](crate::ServiceContracts::asyncapi)).
//!
//! * **Channels**: each consumer's source (with its retry and dead-letter
//!   channels) and each destination of an outbox relay, with the Kafka or
//!   AMQP bindings the backend describes
//!   ([`Source::channels`](consumer_core::source::Source::channels),
//!   [`Publisher::channel`](consumer_core::Publisher::channel)).
//! * **Operations**: `receive` for each handler and event type (and again
//!   on the retry channel); `send` for retry copies, dead letters, and each
//!   event type the outbox declares
//!   ([`Outbox::with_event`](consumer_core::Outbox::with_event)).
//! * **Messages**: the CloudEvents attributes as the headers' schema, the
//!   payload's schema from `schemars` in the draft-07 dialect (the one the
//!   AsyncAPI parser checks), with every subschema under
//!   `components.schemas` and no `#/definitions` or `$defs` reference left.
//!   A handler takes what its type *deserializes* from; the outbox sends
//!   what its type *serializes* to.
//!
//! The same schemas, one document per event type and contract, are what
//! schema-evolution checks snapshot:
//! [`ServiceContracts::payload_schemas`](crate::ServiceContracts::payload_schemas)
//! and [`crate::compat`].
//!
//! A message type without a schema (no `schemars::JsonSchema`) still
//! compiles; the document is refused with an error naming the type and the
//! handler or event (`#[handler]` finds out through autoref
//! specialisation: see [`consumer_core::describe::Probe`]). A service that
//! serves its document
//! ([`ServiceContracts::with_asyncapi_endpoint`](crate::ServiceContracts::with_asyncapi_endpoint))
//! fails at start instead.

mod builder;
mod contracts;
mod document;
mod error;
mod headers;
mod schemas;

pub use builder::build;
pub use contracts::{Contract, PayloadSchema, payload_schemas, write_current};
pub use error::AsyncApiError;
