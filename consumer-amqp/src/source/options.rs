//! What both RabbitMQ sources are configured with ([`SourceOptions`]), and
//! the settle publisher each derives from it.

use std::time::Duration;

use crate::connection::AmqpEndpoint;
use crate::publisher::{AmqpPublisher, DEFAULT_MAX_MESSAGE_BYTES};

/// The options [`AmqpSource`](crate::AmqpSource) and
/// [`PartitionedSource`](crate::PartitionedSource) share: one struct, so the
/// two builders cannot drift apart.
#[derive(Clone, Debug)]
pub(crate) struct SourceOptions {
    /// The broker, its credentials and TLS.
    pub(crate) endpoint: AmqpEndpoint,
    /// Most unacked deliveries RabbitMQ sends per consuming channel.
    pub(crate) prefetch: u16,
    /// The largest dead letter or retry copy the settle publisher sends.
    pub(crate) max_message_bytes: usize,
    /// How often the queue depths behind the metrics are read.
    pub(crate) depth_interval: Duration,
    /// The largest body whose attributes are read (`Source::limit_body`).
    pub(crate) max_body: usize,
}

impl SourceOptions {
    pub(crate) fn new(endpoint: AmqpEndpoint, prefetch: u16) -> Self {
        Self {
            endpoint,
            prefetch,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            depth_interval: Duration::from_secs(15),
            max_body: usize::MAX,
        }
    }

    pub(crate) fn set_prefetch(&mut self, prefetch: u16) {
        self.prefetch = prefetch.max(1);
    }

    pub(crate) fn set_depth_interval(&mut self, every: Duration) {
        self.depth_interval = every.max(Duration::from_millis(10));
    }

    /// The publisher the source's acker sends retry copies and dead letters
    /// with, named after `queue` in RabbitMQ's connection list; it connects
    /// on first use.
    pub(crate) fn settle_publisher(&self, queue: &str) -> AmqpPublisher {
        AmqpPublisher::builder(self.endpoint.clone())
            .with_connection_name(format!("consumer-settle {queue}"))
            .with_max_message_bytes(self.max_message_bytes)
            .build()
    }
}
