//! [`Origin`]: where a delivery was consumed from.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

/// Where a message came from: enough to find it again on the broker.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Origin {
    /// Topic, queue or stream the message was consumed from.
    pub channel: Channel,
    /// Position within it (`partition/offset`, delivery tag, ...).
    pub position: Position,
    /// The same position in the broker's own terms, for the span
    /// attributes the OpenTelemetry conventions give each system.
    pub placement: Placement,
}

/// Where a delivery sat on its broker, as the messaging conventions name
/// it on spans. Never used for metrics: offsets, routing keys and tags
/// grow with traffic.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Placement {
    /// Not known.
    #[default]
    Unknown,
    /// A record in a partitioned log (Kafka, the in-memory broker):
    /// `messaging.destination.partition.id` and the offset
    /// (`messaging.kafka.offset` on Kafka).
    Log {
        /// The partition.
        partition: i32,
        /// The record's offset in it.
        offset: i64,
    },
    /// A delivery from a RabbitMQ queue: the exchange and routing key it
    /// was published with (`messaging.rabbitmq.destination.routing_key`)
    /// and its delivery tag (`messaging.rabbitmq.message.delivery_tag`).
    Exchange {
        /// The exchange it was published to; empty for the default one.
        exchange: String,
        /// The routing key it was published with.
        routing_key: String,
        /// The channel's delivery tag.
        delivery_tag: u64,
    },
    /// A message parked behind a held key (sequenced dead letters), handed
    /// to its handler again from the store once the key was released: the
    /// runtime runs it without looking for a hold (it is what the hold
    /// kept). Only the runtime's drain of held keys makes these; no broker
    /// delivery carries one.
    Held {
        /// Its place in the key's order.
        seq: i64,
    },
}

/// The name of the topic, queue or stream a delivery was consumed from: its
/// channel, in AsyncAPI's word. (Where a message is *sent* is an
/// [`Outgoing::destination`](crate::publish::Outgoing::destination).)
/// Shared: a backend makes one per topic and every delivery from it holds a
/// reference (cloning is a reference-count bump, never a copy). Reads as a
/// `&str`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Channel(Arc<str>);

impl Channel {
    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for Channel {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Channel {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<Arc<str>> for Channel {
    fn from(name: Arc<str>) -> Self {
        Self(name)
    }
}

impl From<&str> for Channel {
    fn from(name: &str) -> Self {
        Self(Arc::from(name))
    }
}

impl From<String> for Channel {
    fn from(name: String) -> Self {
        Self(Arc::from(name))
    }
}

impl From<&String> for Channel {
    fn from(name: &String) -> Self {
        Self(Arc::from(name.as_str()))
    }
}

impl PartialEq<str> for Channel {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for Channel {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<String> for Channel {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A delivery's position within its channel as text
/// (`partition/offset`, a delivery tag, ...). A backend that has it as a
/// log's partition and offset gives those ([`Position::log`]): the text is
/// then written only when something reads it (a dead letter, a log line),
/// not for every delivery. Reads as a `&str`.
#[derive(Clone, Default)]
pub struct Position {
    /// The partition and offset the text is made of, when not given as text.
    log: Option<(i32, i64)>,
    /// The text, given or written on first read.
    text: OnceLock<String>,
}

impl Position {
    /// `partition/offset`, written when first read.
    pub fn log(partition: i32, offset: i64) -> Self {
        Self {
            log: Some((partition, offset)),
            text: OnceLock::new(),
        }
    }

    /// The position as text.
    pub fn as_str(&self) -> &str {
        self.text.get_or_init(|| match self.log {
            None => String::new(),
            Some((partition, offset)) => {
                let mut p = itoa::Buffer::new();
                let mut o = itoa::Buffer::new();
                let (p, o) = (p.format(partition), o.format(offset));
                let mut out = String::with_capacity(p.len() + 1 + o.len());
                out.push_str(p);
                out.push('/');
                out.push_str(o);
                out
            }
        })
    }
}

impl Deref for Position {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Position {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<String> for Position {
    fn from(text: String) -> Self {
        Self {
            log: None,
            text: OnceLock::from(text),
        }
    }
}

impl From<&str> for Position {
    fn from(text: &str) -> Self {
        Self::from(text.to_owned())
    }
}

impl PartialEq for Position {
    fn eq(&self, other: &Self) -> bool {
        match (self.log, other.log) {
            (Some(a), Some(b)) => a == b,
            _ => self.as_str() == other.as_str(),
        }
    }
}

impl Eq for Position {}

impl PartialEq<str> for Position {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Position {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Position {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl fmt::Debug for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Origin {
    /// `messaging.destination.name` for a consumer's spans: the topic or
    /// queue, except on RabbitMQ, where the conventions ask for
    /// `{exchange}:{routing key}:{queue}` (empty parts left out, and the
    /// routing key left out when it names the queue).
    pub fn span_destination(&self) -> std::borrow::Cow<'_, str> {
        let Placement::Exchange {
            exchange,
            routing_key,
            ..
        } = &self.placement
        else {
            return std::borrow::Cow::Borrowed(self.channel.as_str());
        };
        let routing_key = if self.channel == *routing_key {
            ""
        } else {
            routing_key.as_str()
        };
        let parts = [exchange.as_str(), routing_key, self.channel.as_str()];
        let mut out = String::new();
        for part in parts.into_iter().filter(|p| !p.is_empty()) {
            if !out.is_empty() {
                out.push(':');
            }
            out.push_str(part);
        }
        std::borrow::Cow::Owned(out)
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.channel, self.position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amqp(exchange: &str, routing_key: &str, queue: &str) -> Origin {
        Origin {
            channel: queue.into(),
            position: Position::default(),
            placement: Placement::Exchange {
                exchange: exchange.into(),
                routing_key: routing_key.into(),
                delivery_tag: 1,
            },
        }
    }

    #[test]
    fn a_rabbitmq_destination_names_exchange_routing_key_and_queue() {
        assert_eq!(
            amqp("orders", "o-1", "billing").span_destination(),
            "orders:o-1:billing"
        );
        // The default exchange routes by queue name: the queue alone.
        assert_eq!(amqp("", "billing", "billing").span_destination(), "billing");
        assert_eq!(
            amqp("orders", "", "billing").span_destination(),
            "orders:billing"
        );
        assert_eq!(
            amqp("orders", "billing", "billing").span_destination(),
            "orders:billing"
        );
    }

    #[test]
    fn a_log_destination_is_the_topic() {
        let o = Origin {
            channel: "orders".into(),
            position: "0/7".into(),
            placement: Placement::Log {
                partition: 0,
                offset: 7,
            },
        };
        assert_eq!(o.span_destination(), "orders");
    }

    #[test]
    fn a_log_position_reads_as_partition_slash_offset_and_equals_its_text() {
        let lazy = Position::log(3, 42);
        assert_eq!(lazy, "3/42");
        assert_eq!(lazy, Position::from("3/42"));
        assert_eq!(Position::log(-1, -1).as_str(), "-1/-1");
        assert_ne!(Position::log(3, 42), Position::log(3, 43));
        assert_eq!(format!("{:?}", lazy.clone()), "\"3/42\"");
        let d = Channel::from("orders");
        assert_eq!(d, "orders");
        assert_eq!(format!("{d}@{lazy}"), "orders@3/42");
    }
}
