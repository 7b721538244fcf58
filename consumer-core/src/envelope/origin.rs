//! [`Origin`]: where a delivery was consumed from.

use std::fmt;

/// Where a message came from: enough to find it again on the broker.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Origin {
    /// Topic, queue or stream the message was consumed from.
    pub destination: String,
    /// Position within it (`partition/offset`, delivery tag, ...).
    pub position: String,
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
            return std::borrow::Cow::Borrowed(&self.destination);
        };
        let routing_key = if routing_key == &self.destination {
            ""
        } else {
            routing_key.as_str()
        };
        let parts = [exchange.as_str(), routing_key, self.destination.as_str()];
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
        write!(f, "{}@{}", self.destination, self.position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amqp(exchange: &str, routing_key: &str, queue: &str) -> Origin {
        Origin {
            destination: queue.into(),
            position: String::new(),
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
            destination: "orders".into(),
            position: "0/7".into(),
            placement: Placement::Log {
                partition: 0,
                offset: 7,
            },
        };
        assert_eq!(o.span_destination(), "orders");
    }
}
