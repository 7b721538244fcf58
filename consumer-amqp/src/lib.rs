//! The RabbitMQ backend of the `consumer` framework, on `lapin`.
//!
//! ```no_run
//! use consumer_amqp::{AmqpSource, QueueType, Topology};
//! use consumer_core::{Consumer, MemoryStore, MessageContext};
//!
//! # async fn demo<H: consumer_core::Handler<MemoryStore>>(handler: H) -> Result<(), Box<dyn std::error::Error>> {
//! let topology = Topology::new("orders")?.with_queue_type(QueueType::Quorum);
//! println!("{topology}");
//! let source = AmqpSource::builder("amqp://guest:guest@127.0.0.1:5672/%2f", topology)
//!     .with_prefetch(256)
//!     .connect()
//!     .await?;
//! Consumer::new(source, MemoryStore::new(), handler)
//!     .run_until(std::future::pending::<()>())
//!     .await?;
//! # Ok(())
//! # }
//! ```
//!
//! * [`Topology`]: work queue (classic or quorum) with a dead-letter
//!   exchange, a dead-letter queue and delay queues for retries, declared
//!   idempotently at start; names validated.
//! * [`AmqpSource`]: manual acks, `basic.qos` prefetch as the in-flight
//!   bound, partition key from `ce_partitionkey` or the routing key,
//!   reconnection with backoff.
//! * [`AmqpAcker`]: ack, release (nack with requeue), and the retry copies
//!   and dead letters the runtime builds, published to the delay queues and
//!   the dead-letter exchange with confirms before the ack.
//! * [`AmqpPublisher`]: publisher confirms, persistent, `mandatory`,
//!   CloudEvents attributes and trace context as headers ([`headers`]).
//! * [`AmqpStats`]: in-flight, redelivery and reconnect counts; queue
//!   depths by passive declare.
//! * [`AmqpEndpoint`] and [`AmqpTls`]: `amqps://` with a private CA and a
//!   client certificate (the `tls` feature), and a password kept out of
//!   the URI, of logs and of errors; a broker that refuses either fails
//!   `connect` with a sentence saying which.

mod asyncapi;
mod connection;
mod content_id;
pub mod error;
mod header_values;
pub mod headers;
mod names;
mod partition_route;
pub mod publisher;
pub mod source;
mod tls;
pub mod topology;

pub use connection::AmqpEndpoint;
pub use error::{Error, Result};
pub use headers::AttributePrefix;
pub use names::validate_name;
pub use publisher::{AmqpPublisher, AmqpPublisherBuilder, DEFAULT_MAX_MESSAGE_BYTES};
pub use source::{AmqpAcker, AmqpSource, AmqpSourceBuilder, AmqpStats, AmqpStatsSnapshot};
pub use source::{PartitionedSource, PartitionedSourceBuilder};
pub use tls::AmqpTls;
pub use topology::{Depths, PartitionedTopology, QueueType, Topology};
