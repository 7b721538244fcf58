//! What the parts of a service say about themselves: the channels a source
//! reads and a publisher writes, and the message type of each handler and
//! outbox event. Plain data, gathered when parts are added to a
//! [`Service`](crate::Service), whether or not the `asyncapi` feature
//! builds a document from it.

use serde_json::Value;

/// One channel (a topic, a queue, an exchange) as a backend describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelDescription {
    /// The address on the broker: the topic, the queue or the exchange.
    pub address: String,
    /// The AsyncAPI protocol and bindings key: `kafka`, `amqp`, or
    /// `memory` (no bindings).
    pub protocol: &'static str,
    /// The prefix of CloudEvents attributes in headers on this channel:
    /// `ce_` (Kafka, the framework's own), `ce-` (the AMQP default), ...
    pub attribute_prefix: &'static str,
    /// The channel binding object under `protocol`, if it has one.
    pub binding: Option<Value>,
    /// The binding object of an operation that receives from this channel.
    pub receive_binding: Option<Value>,
    /// The binding object of an operation that sends to this channel.
    pub send_binding: Option<Value>,
    /// The parameters of `address` (`orders.retry.{delay}`), each with its
    /// AsyncAPI parameter object (`enum`, `description`).
    pub parameters: Vec<(String, Value)>,
}

impl ChannelDescription {
    /// A channel of `protocol` at `address`, with the framework's `ce_`
    /// attribute prefix and no bindings.
    pub fn new(protocol: &'static str, address: impl Into<String>) -> Self {
        Self {
            address: address.into(),
            protocol,
            attribute_prefix: "ce_",
            binding: None,
            receive_binding: None,
            send_binding: None,
            parameters: Vec::new(),
        }
    }

    /// A parameter of the address (`{name}` in it).
    #[must_use]
    pub fn with_parameter(mut self, name: impl Into<String>, parameter: Value) -> Self {
        self.parameters.push((name.into(), parameter));
        self
    }

    /// Another attribute prefix.
    #[must_use]
    pub fn with_attribute_prefix(mut self, prefix: &'static str) -> Self {
        self.attribute_prefix = prefix;
        self
    }

    /// The channel binding object.
    #[must_use]
    pub fn with_binding(mut self, binding: Value) -> Self {
        self.binding = Some(binding);
        self
    }

    /// The binding object of operations receiving from the channel.
    #[must_use]
    pub fn with_receive_binding(mut self, binding: Value) -> Self {
        self.receive_binding = Some(binding);
        self
    }

    /// The binding object of operations sending to the channel.
    #[must_use]
    pub fn with_send_binding(mut self, binding: Value) -> Self {
        self.send_binding = Some(binding);
        self
    }
}

/// The channels one source reads from and settles to.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceChannels {
    /// Where deliveries come from.
    pub input: ChannelDescription,
    /// Where retry copies go when the source sends retries through the
    /// broker.
    pub retry: Option<ChannelDescription>,
    /// Whether retry copies come back on `input` once their delay is over
    /// (RabbitMQ's delay queues) rather than being read from `retry`
    /// (Kafka's retry topic).
    pub retries_return_on_input: bool,
    /// Where dead letters go.
    pub dead_letter: Option<ChannelDescription>,
}

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
    /// saga's commands and timeouts ([`SagaBuilder::with_command`](crate::saga::SagaBuilder)).
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
