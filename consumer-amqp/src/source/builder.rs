//! [`AmqpSourceBuilder`]: how an [`AmqpSource`] is configured and connected.

use std::time::Duration;

use super::AmqpSource;
use super::options::SourceOptions;
use crate::error::Result;
use crate::topology::Topology;

/// Configures an [`AmqpSource`]; made by [`AmqpSource::builder`], finished
/// by [`connect`](Self::connect).
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct AmqpSourceBuilder {
    pub(super) options: SourceOptions,
    pub(super) topology: Topology,
}

impl AmqpSourceBuilder {
    /// Most unacked deliveries RabbitMQ sends this consumer (`basic.qos`;
    /// default 256, at least 1).
    pub fn with_prefetch(mut self, prefetch: u16) -> Self {
        self.options.set_prefetch(prefetch);
        self
    }

    /// The largest dead letter or retry copy the settle publisher sends
    /// (see [`AmqpPublisherBuilder::with_max_message_bytes`](crate::AmqpPublisherBuilder::with_max_message_bytes));
    /// a dead letter over it is sent again without its payload. Set it to
    /// the broker's `max_message_size` when that is lower than RabbitMQ's
    /// default.
    pub fn with_max_message_bytes(mut self, n: usize) -> Self {
        self.options.max_message_bytes = n;
        self
    }

    /// How often the queue depths behind the metrics
    /// (`consumer.queue.depth`, `consumer.dead_letter_queue.depth`) are
    /// read, by passive declares on the settle connection (default 15 s:
    /// a Prometheus scrape interval; at least 10 ms).
    pub fn with_depth_interval(mut self, every: Duration) -> Self {
        self.options.set_depth_interval(every);
        self
    }

    /// Checks the names, connects, declares the topology and starts
    /// consuming now, so that a broker that cannot be reached or a topology
    /// conflict shows at start rather than in the consumer's retry loop. A
    /// queue RabbitMQ reports crashed is not an error here: it is reported,
    /// and `recv` tries it again (see [`AmqpSource`]).
    pub async fn connect(self) -> Result<AmqpSource> {
        let mut source = self.build()?;
        source.start().await?;
        Ok(source)
    }

    /// The source without contacting the broker: its first `recv`
    /// connects (and every `recv` after a loss reconnects). For a service
    /// described (its AsyncAPI document) or checked where no broker runs;
    /// a service that consumes should [`connect`](Self::connect).
    pub fn build(self) -> Result<AmqpSource> {
        AmqpSource::from_builder(self)
    }
}
