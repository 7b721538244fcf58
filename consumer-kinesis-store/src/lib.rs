//! Leases and checkpoints of `consumer-kinesis` in the store's database:
//! [`SqlLeaseStore`], a [`LeaseStore`](consumer_kinesis::lease::LeaseStore)
//! on PostgreSQL or SQLite, its statements written once on the runtime's
//! [SQL seam](consumer_core::sql), as the KCL keeps them in DynamoDB.
//!
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use consumer_kinesis::{KinesisClient, KinesisSource};
//! use consumer_kinesis_store::SqlLeaseStore;
//!
//! let store = SqlLeaseStore::new(pool, "billing", "orders");
//! store.migrate().await?;
//! let client = KinesisClient::local("http://127.0.0.1:4566");
//! let source = KinesisSource::builder(client, "orders", store).connect().await?;
//! # drop(source); Ok(())
//! # }
//! ```
//!
//! One table, `consumer_kinesis_leases`, holds a row per shard of each
//! stream an application reads (the application is the consumer's name:
//! two applications reading one stream keep leases and checkpoints of
//! their own). Every lease transition is one conditional `UPDATE` on the
//! row, so two instances racing for a lease cannot both win; times are the
//! database's clock, the one clock every instance shares. The migration is
//! tracked in [`MIGRATIONS_TABLE`].

#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod operator;
mod statements;
mod store;

pub use error::{Error, Result};
pub use operator::{CheckpointMove, ShardState};
pub use store::SqlLeaseStore;

/// The table that records which of this crate's migrations ran.
pub const MIGRATIONS_TABLE: &str = "_consumer_kinesis_migrations";
