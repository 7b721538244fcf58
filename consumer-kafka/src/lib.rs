//! The Kafka backend of the `consumer` framework, on `rdkafka` (librdkafka
//! built from its bundled source; no system library needed; with the `tls`
//! feature, OpenSSL is built from source too, for TLS and SASL: see
//! [`KafkaSecurity`]).
//!
//! ```no_run
//! use consumer_core::{Consumer, MemoryStore};
//! use consumer_kafka::{KafkaSource, Topics};
//!
//! # async fn demo<H: consumer_core::Handler<MemoryStore>>(handler: H) -> Result<(), Box<dyn std::error::Error>> {
//! let topics = Topics::new("orders")?;
//! println!("{topics}");
//! let source = KafkaSource::builder("127.0.0.1:9092", "billing", topics).connect().await?;
//! Consumer::new(source, MemoryStore::new(), handler)
//!     .run_until(std::future::pending::<()>())
//!     .await?;
//! # Ok(())
//! # }
//! ```
//!
//! * [`KafkaSource`]: consumer-group member; per-key lanes inside each
//!   partition (the runtime's), a committed offset that never passes the
//!   lowest unfinished record, pause/resume per partition as the bound on
//!   pending work, revoke that waits for running work and commits; see the
//!   [`source`] module for the details.
//! * [`KafkaAcker`]: ack marks done; retries go to a retry topic with a due
//!   time (parked by pausing the partition until then); dead letters go to
//!   `<topic>.dlq` with `acks=all`, confirmed before the record counts done.
//! * [`KafkaPublisher`]: idempotent producer for the outbox relay,
//!   CloudEvents binary-mode headers, record key = aggregate id.
//! * [`KafkaStats`]: per-partition position, high watermark and lag;
//!   rebalance, in-flight and parked counts.

mod asyncapi;
pub mod error;
pub mod headers;
pub mod publisher;
mod raw_headers;
pub mod security;
pub mod source;
mod start_check;
pub mod topics;
mod tracing_context;

pub use error::{Error, Result};
pub use publisher::{KafkaPublisher, KafkaPublisherBuilder, PUBLISHER_DEFAULTS};
pub use security::{KafkaSasl, KafkaSecurity};
pub use source::{
    CONSUMER_DEFAULTS, DUE, KafkaAcker, KafkaSource, KafkaSourceBuilder, KafkaStats,
    KafkaStatsSnapshot, MEMBERSHIP_ENV, PartitionStats, SETTLE_PRODUCER_DEFAULTS,
};
pub use topics::{Topics, validate_topic};
pub use tracing_context::TracingContext;
