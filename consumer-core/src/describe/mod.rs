//! What a service's parts say about themselves: the channels a source reads
//! and writes, the handlers and event types a consumer takes, the events an
//! outbox relay sends, each message's payload type. Sources, publishers,
//! handlers and outboxes implement or fill these; the contract tooling
//! (`consumer-contracts`: the AsyncAPI document, schema snapshots and their
//! compatibility checks) reads them from [`Service::description`](crate::Service::description).
//!
//! A message type's schema comes from `schemars` (feature `schemas`). A
//! type without one still compiles: `#[handler]` finds out through autoref
//! specialisation ([`Probe`]), and the document that needs the schema is
//! refused with an error naming the type.

mod parts;
mod probe;

pub use parts::{
    ChannelDescription, DeclaredEvent, HandlerDescription, PartDescription, PayloadType,
    ServiceDescription, SourceChannels,
};
pub use probe::{Probe, ViaNothing};
#[cfg(feature = "schemas")]
pub use probe::{SchemaFn, ViaJsonSchema};
