//! [`PartitionedSourceBuilder`]: how a [`PartitionedSource`] instance is
//! configured and joins the others.

use std::time::Duration;

use super::{PartitionedSource, membership};
use crate::error::Result;
use crate::source::options::SourceOptions;
use crate::topology::PartitionedTopology;

/// Configures a [`PartitionedSource`]; made by
/// [`PartitionedSource::builder`], finished by [`connect`](Self::connect).
/// Its first three options are [`AmqpSourceBuilder`](crate::AmqpSourceBuilder)'s,
/// per partition.
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct PartitionedSourceBuilder {
    pub(super) options: SourceOptions,
    pub(super) topology: PartitionedTopology,
    pub(super) instance: String,
    pub(super) heartbeat: Duration,
}

impl PartitionedSourceBuilder {
    /// Most unacked deliveries RabbitMQ sends per partition (`basic.qos` on
    /// each partition's channel; default 64, at least 1).
    pub fn with_prefetch(mut self, prefetch: u16) -> Self {
        self.options.set_prefetch(prefetch);
        self
    }

    /// The largest dead letter or retry copy the settle publisher sends
    /// (see [`AmqpPublisherBuilder::with_max_message_bytes`](crate::AmqpPublisherBuilder::with_max_message_bytes)).
    pub fn with_max_message_bytes(mut self, n: usize) -> Self {
        self.options.max_message_bytes = n;
        self
    }

    /// How often the queue depths behind the metrics are read (default
    /// 15 s), as [`AmqpSourceBuilder::with_depth_interval`](crate::AmqpSourceBuilder::with_depth_interval).
    pub fn with_depth_interval(mut self, every: Duration) -> Self {
        self.options.set_depth_interval(every);
        self
    }

    /// This instance's id among the others (default: process id and a
    /// random suffix). Ids must differ between running instances.
    pub fn with_instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance = id.into();
        self
    }

    /// How often this instance says it is alive (default 1 s). An instance
    /// silent for three intervals is taken as gone and its partitions are
    /// dealt to the others: the longest a dead instance's partitions wait.
    /// Taken within 50 ms and one hour.
    pub fn with_heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = membership::bounded_heartbeat(every);
        self
    }

    /// Checks the partition count, declares the topology and joins the
    /// other instances now, so that a mismatch or an unreachable broker
    /// shows at start.
    pub async fn connect(self) -> Result<PartitionedSource> {
        let mut source = self.build()?;
        source.session = Some(source.open().await?);
        Ok(source)
    }

    /// The source without contacting the broker: its first `recv` joins
    /// the others (see [`AmqpSourceBuilder::build`](crate::AmqpSourceBuilder::build)).
    pub fn build(self) -> Result<PartitionedSource> {
        Ok(PartitionedSource::from_builder(self))
    }
}
