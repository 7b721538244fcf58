//! The AWS SQS backend of the `consumer` framework, on `aws-sdk-sqs`.
//!
//! ```no_run
//! use consumer_core::{Consumer, MemoryStore};
//! use consumer_sqs::{SqsClient, SqsSource, Topology};
//!
//! # async fn demo<H: consumer_core::Handler<MemoryStore>>(handler: H) -> Result<(), Box<dyn std::error::Error>> {
//! // `SqsClient::from_env().await` on AWS; an emulator here.
//! let client = SqsClient::local("http://127.0.0.1:4566");
//! let source = SqsSource::builder(client, Topology::new("orders.fifo")?)
//!     .connect()
//!     .await?;
//! Consumer::new(source, MemoryStore::new(), handler)
//!     .run_until(std::future::pending::<()>())
//!     .await?;
//! # Ok(())
//! # }
//! ```
//!
//! * [`Topology`]: the queue and its dead-letter queue (FIFO for a FIFO
//!   queue), found or created at start, the redrive policy checked.
//! * [`SqsSource`]: long polling, ten messages a call, visibility extended
//!   while a message is held, the FIFO group as the partition key; see
//!   its docs for order, attempts and retries.
//! * [`SqsAcker`]: `DeleteMessageBatch` for acks, `ChangeMessageVisibility`
//!   for releases and retries, the dead-letter queue for letters.
//! * [`SqsPublisher`]: `SendMessageBatch` with per-message results; on a
//!   FIFO queue the key is the group, the id the deduplication id.
//! * [`attributes`]: how headers travel within SQS's ten message
//!   attributes (trace context and CloudEvents attributes included).
//! * [`client`]: the calls behind a small trait, for fault injection.
//! * [`SqsStats`]: in-process counters; queue depths go to the metrics.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod asyncapi;
pub mod attributes;
pub mod client;
mod connection;
pub mod error;
pub mod names;
pub mod publisher;
pub mod source;
pub mod topology;

/// The SDK this backend runs on, for an application that configures its
/// own client ([`SqsClient::from_sdk`]) with the same version.
pub use aws_sdk_sqs;
pub use connection::SqsClient;
pub use error::{Error, Result};
pub use publisher::{SqsPublisher, SqsPublisherBuilder};
pub use source::{SqsAcker, SqsSource, SqsSourceBuilder, SqsStats, SqsStatsSnapshot};
pub use topology::Topology;
