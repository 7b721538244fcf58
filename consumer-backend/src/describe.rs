//! What a source or a publisher says of its channels, for the service's
//! AsyncAPI document: the address, the protocol's bindings, the
//! parameters of the address.

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
