//! The Amazon Kinesis backend of the `consumer` framework, on
//! `aws-sdk-kinesis`: publishing, the record envelope, the shard graph,
//! leases and checkpoints, and the consuming source.
//!
//! ```no_run
//! use consumer_backend::{Message, Outgoing, Publisher};
//! use consumer_kinesis::{KinesisClient, KinesisPublisher};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // `KinesisClient::from_env().await` on AWS; an emulator here.
//! let client = KinesisClient::local("http://127.0.0.1:4566");
//! let publisher = KinesisPublisher::builder(client).build();
//! let message = Message::json("OrderPlaced", &serde_json::json!({"total": 3}))?
//!     .with_key("order-7");
//! let results = publisher
//!     .publish(&[Outgoing { destination: "orders".into(), message }])
//!     .await;
//! assert!(results.iter().all(Result::is_ok));
//! # Ok(())
//! # }
//! ```
//!
//! * [`envelope`]: how headers (CloudEvents attributes, trace context)
//!   travel in a record, which has none; a record without the envelope is
//!   a plain message keyed by its `PartitionKey`.
//! * [`KinesisPublisher`]: `PutRecords` in batches, per-record failures
//!   sent again with backoff while each key keeps its order.
//! * [`shards`]: which shards may be read now, children after their
//!   parents across a split or a merge.
//! * [`KinesisSource`]: reads the shards this instance holds leases on,
//!   hands records to the runtime keyed by partition key, and checkpoints
//!   a shard only past records settled with every earlier one.
//! * [`lease`]: a lease and a checkpoint per shard, fair shares across
//!   instances ([`lease::LeaseStore`]: in memory here; in the store's
//!   database with the `consumer-kinesis-store` crate).
//! * [`client`]: the calls behind a small trait, for fault injection.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod client;
mod connection;
pub mod envelope;
pub mod error;
pub mod lease;
pub mod publisher;
pub mod shards;
pub mod source;
mod stream_name;

/// The SDK this backend runs on, for an application that configures its
/// own client ([`KinesisClient::from_sdk`]) with the same version.
pub use aws_sdk_kinesis;
pub use connection::KinesisClient;
pub use error::{Error, Result};
pub use publisher::{KinesisPublisher, KinesisPublisherBuilder};
pub use source::{KinesisAcker, KinesisSource, KinesisSourceBuilder, KinesisStats};
pub use stream_name::StreamName;
