//! The idempotency store: dedup rows written in the handler's own
//! transaction, failed-attempt records written outside it, and retention.
//!
//! The claim is one atomic `INSERT … ON CONFLICT DO NOTHING` inside the
//! transaction the handler then receives: if the insert touched no row, the
//! key was committed before, and the delivery is a duplicate. Never
//! SELECT-then-INSERT: two concurrent deliveries would both pass the SELECT.
//! If the handler fails, the transaction rolls back and the claim with it,
//! so a retry can claim again.
use time::OffsetDateTime;

pub use database::StoreDatabase;
pub use dedup::{Claim, DedupStore, FailureRecord};
pub use extension::{ExtensionFuture, StoreExtension};
pub use letter_row::{LetterRow, headers_from_json, headers_json};
pub use memory::{MemoryStore, MemoryTx};
#[cfg(feature = "postgres")]
pub use sql::PgStore;
#[cfg(feature = "sqlite")]
pub use sql::SqliteStore;
pub use sql::Store;
#[cfg(feature = "postgres")]
pub use tx::PgTx;
#[cfg(feature = "sqlite")]
pub use tx::SqliteTx;
pub use tx::Tx;

pub(crate) mod clock;
mod database;
mod dedup;
mod extension;
pub mod held;
mod held_statements;
mod letter_row;
mod memory;
pub mod paused;
mod paused_statements;
#[cfg(feature = "postgres")]
mod postgres;
mod sql;
mod statements;
pub use statements::insert_dead_letter;
#[cfg(feature = "sqlite")]
mod sqlite;
pub use crate::sql::storable;
mod tx;

/// Name of the table that records which of this crate's migrations ran;
/// kept apart from `_sqlx_migrations` so the application's own sqlx
/// migrations and ours never see each other's versions.
pub const MIGRATIONS_TABLE: &str = "_consumer_migrations";

/// Milliseconds since the Unix epoch, as the store's time columns are
/// written and compared (0 before it).
pub fn now_ms() -> i64 {
    i64::try_from(clock::now().unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

#[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
fn from_ms(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}
