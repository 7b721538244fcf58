//! What the parts of a service say about themselves: the channels a source
//! reads and a publisher writes, and the message type of each handler and
//! outbox event. Plain data, gathered when parts are added to a
//! [`Service`](crate::Service), whether or not the `asyncapi` feature
//! builds a document from it.

pub use consumer_backend::describe::{ChannelDescription, SourceChannels};

/// A message type, as a handler or an outbox event declares it: its Rust
/// name and, with the `asyncapi` feature and a `schemars::JsonSchema`
/// implementation, how to make its schema.
#[derive(Clone, Copy)]
pub struct PayloadType {
    type_name: &'static str,
    #[cfg(feature = "schemas")]
    schema: Option<super::probe::SchemaFn>,
}

impl PayloadType {
    /// A type without a schema: a document that needs it is refused with
    /// an error naming it.
    pub fn without_schema<T: ?Sized>() -> Self {
        Self {
            type_name: std::any::type_name::<T>(),
            #[cfg(feature = "schemas")]
            schema: None,
        }
    }

    /// The type's Rust name (`std::any::type_name`).
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }

    /// The type of `T`, with its schema made by `schema`.
    #[cfg(feature = "schemas")]
    pub(crate) fn with_schema<T: ?Sized>(schema: super::probe::SchemaFn) -> Self {
        Self {
            type_name: std::any::type_name::<T>(),
            schema: Some(schema),
        }
    }

    /// How to make its schema in a `schemars` generator, when it has one.
    #[cfg(feature = "schemas")]
    pub fn schema_fn(&self) -> Option<super::probe::SchemaFn> {
        self.schema
    }

    /// Whether a payload schema can be made for it.
    pub fn has_schema(&self) -> bool {
        #[cfg(feature = "schemas")]
        {
            self.schema.is_some()
        }
        #[cfg(not(feature = "schemas"))]
        {
            false
        }
    }
}

impl std::fmt::Debug for PayloadType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PayloadType")
            .field("type_name", &self.type_name)
            .field("has_schema", &self.has_schema())
            .finish()
    }
}

/// An event type an [`Outbox`](crate::Outbox) declares it writes.
#[derive(Debug, Clone)]
pub struct DeclaredEvent {
    /// Its CloudEvents type.
    pub event_type: String,
    /// Its destination, when not the outbox's default one.
    pub destination: Option<String>,
    /// Its payload type.
    pub payload: PayloadType,
}

/// One handler of a consumer.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HandlerDescription {
    /// The handler's name (its dedup scope).
    pub name: &'static str,
    /// The CloudEvents types it takes.
    pub event_types: Vec<&'static str>,
    /// What its payload decodes into; `None` for a handler that does not
    /// say (a hand-written [`Handler`](crate::Handler)).
    pub payload: Option<PayloadType>,
    /// What it writes through the outbox, each with its destination: a
    /// saga's commands and timeouts.
    pub sends: Vec<DeclaredEvent>,
}

impl HandlerDescription {
    /// A handler's description.
    pub fn new(
        name: &'static str,
        event_types: Vec<&'static str>,
        payload: Option<PayloadType>,
    ) -> Self {
        Self {
            name,
            event_types,
            payload,
            sends: Vec::new(),
        }
    }

    /// The same description, writing `sends` through the outbox.
    #[must_use]
    pub fn with_sends(mut self, sends: Vec<DeclaredEvent>) -> Self {
        self.sends = sends;
        self
    }
}

/// One part of a service. Exhaustive on purpose: the contract tooling must
/// describe every kind of part, so a new kind is a change it has to follow.
#[derive(Debug, Clone)]
pub enum PartDescription {
    /// A consumer: its source's channels and its handlers.
    Consumer {
        /// The part's name in the service.
        name: String,
        /// `messaging.system` of its source.
        system: &'static str,
        /// Its source's channels; `None` when the source does not say.
        channels: Option<Box<SourceChannels>>,
        /// Its handlers.
        handlers: Vec<HandlerDescription>,
    },
    /// An outbox relay: the events its outbox declares, each with its
    /// destination and the channel its publisher sends it to (`None`: the
    /// publisher does not describe its channels).
    Relay {
        /// The part's name in the service.
        name: String,
        /// `messaging.system` of its publisher.
        system: &'static str,
        /// Each declared event, its destination and its channel.
        events: Vec<(DeclaredEvent, String, Option<ChannelDescription>)>,
    },
}

/// A whole service: its name and what each of its parts reads and writes,
/// as [`Service::description`](crate::Service::description) gives it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServiceDescription {
    /// The service's name.
    pub name: &'static str,
    /// Its version ([`Service::with_version`](crate::Service::with_version)).
    pub version: &'static str,
    /// Its parts, in the order they were added.
    pub parts: Vec<PartDescription>,
}
