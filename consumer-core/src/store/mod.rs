//! The idempotency store: dedup rows written in the handler's own
//! transaction, failed-attempt records written outside it, and retention.
//!
//! The claim is one atomic `INSERT … ON CONFLICT DO NOTHING` inside the
//! transaction the handler then receives: if the insert touched no row, the
//! key was committed before, and the delivery is a duplicate. Never
//! SELECT-then-INSERT: two concurrent deliveries would both pass the SELECT.
//! If the handler fails, the transaction rolls back and the claim with it,
//! so a retry can claim again.

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use sqlx::{Database, Pool};
use time::OffsetDateTime;

use crate::error::Error;

pub use memory::{MemoryStore, MemoryTx};

mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

/// Name of the table that records which of this crate's migrations ran;
/// kept apart from `_sqlx_migrations` so the application's own sqlx
/// migrations and ours never see each other's versions.
pub const MIGRATIONS_TABLE: &str = "_consumer_migrations";

mod sealed {
    pub trait Sealed {}
}

/// A database the store supports (PostgreSQL, SQLite). Sealed: the SQL
/// differs per database and is this crate's to keep correct.
pub trait StoreDatabase: Database + sealed::Sealed {
    #[doc(hidden)]
    fn migrate(pool: &Pool<Self>) -> impl Future<Output = Result<(), Error>> + Send;

    #[doc(hidden)]
    fn claim(
        conn: &mut Self::Connection,
        handler: &str,
        key: &str,
        message_id: &str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    #[doc(hidden)]
    fn record_failure(
        pool: &Pool<Self>,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> impl Future<Output = Result<FailureRecord, sqlx::Error>> + Send;

    #[doc(hidden)]
    fn mark_dead_lettered(
        conn: &mut Self::Connection,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    #[doc(hidden)]
    fn clear_failures(
        pool: &Pool<Self>,
        handler: &str,
        message_id: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    #[doc(hidden)]
    fn purge_batch(
        pool: &Pool<Self>,
        older_than_ms: i64,
        batch: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;
}

/// What the store knows of a message's failures after recording one more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureRecord {
    /// Failed attempts so far, this one included.
    pub attempts: u32,
    /// When the first one failed.
    pub first_failure: OffsetDateTime,
}

/// What the runtime needs from a store: claim a key inside a transaction
/// the handler then receives, and record failures outside it.
///
/// Implemented by [`Store`] (PostgreSQL, SQLite: durable) and
/// [`MemoryStore`] (in process: tests, benchmarks, throwaway demos).
pub trait DedupStore: Clone + Send + Sync + 'static {
    /// The transaction a handler receives: it already holds the dedup row.
    type Tx: Send + 'static;
    /// Held while a dead letter is being published; committed after the
    /// broker confirms it.
    type Mark: Send + 'static;

    /// Begins a transaction and claims `key` for `handler` in it, with one
    /// atomic insert (never a read then a write).
    fn claim(
        &self,
        handler: &str,
        key: &str,
        message_id: &str,
    ) -> impl Future<Output = Result<Claim<Self::Tx>, Error>> + Send;

    /// Commits business writes and the dedup row together.
    fn commit(&self, tx: Self::Tx) -> impl Future<Output = Result<(), Error>> + Send;

    /// Rolls everything back, the dedup row included.
    fn rollback(&self, tx: Self::Tx) -> impl Future<Output = Result<(), Error>> + Send;

    /// Records one more failed attempt, durably and outside any rolled-back
    /// transaction; returns the count so far.
    fn record_failure(
        &self,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> impl Future<Output = Result<FailureRecord, Error>> + Send;

    /// Forgets the failures of a message that finally succeeded.
    fn clear_failures(
        &self,
        handler: &str,
        message_id: &str,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Marks a message as dead-lettered, uncommitted. `None` when it was
    /// marked before (a redelivery after a crash): ack it without a second
    /// dead letter.
    fn begin_dead_letter(
        &self,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> impl Future<Output = Result<Option<Self::Mark>, Error>> + Send;

    /// Commits the mark, after the broker confirmed the dead letter.
    fn commit_dead_letter(
        &self,
        mark: Self::Mark,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// How long a key is remembered.
    fn retention(&self) -> Duration;
}

/// The dedup and attempt store on one database pool.
#[derive(Debug)]
pub struct Store<DB: Database> {
    pool: Pool<DB>,
    retention: Duration,
    purge_batch: u32,
}

impl<DB: Database> Clone for Store<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            retention: self.retention,
            purge_batch: self.purge_batch,
        }
    }
}

/// The store on PostgreSQL.
#[cfg(feature = "postgres")]
pub type PgStore = Store<sqlx::Postgres>;
/// The store on SQLite.
#[cfg(feature = "sqlite")]
pub type SqliteStore = Store<sqlx::Sqlite>;

impl<DB: StoreDatabase> Store<DB> {
    /// A store on `pool` with a 7-day retention. Run [`Store::migrate`] once
    /// before use (it is idempotent).
    pub fn new(pool: Pool<DB>) -> Self {
        Self {
            pool,
            retention: Duration::from_secs(7 * 24 * 3600),
            purge_batch: 1000,
        }
    }

    /// How long a dedup key is remembered. The consumer refuses to start
    /// when this is shorter than its handler's longest retry window.
    pub fn with_retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// Rows deleted per statement by [`Store::purge`] (default 1000), so a
    /// purge never holds long locks.
    pub fn with_purge_batch(mut self, rows: u32) -> Self {
        self.purge_batch = rows.max(1);
        self
    }

    /// The configured retention.
    pub fn retention(&self) -> Duration {
        self.retention
    }

    /// The pool, for the application's own queries.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Creates or upgrades the tables (`consumer_processed`,
    /// `consumer_attempts`), tracked in [`MIGRATIONS_TABLE`].
    pub async fn migrate(&self) -> Result<(), Error> {
        DB::migrate(&self.pool).await
    }

    /// Begins a transaction and claims `key` for `handler` in it.
    pub async fn claim(
        &self,
        handler: &str,
        key: &str,
        message_id: &str,
    ) -> Result<Claim<Tx<DB>>, Error> {
        let mut tx = self.pool.begin().await?;
        if DB::claim(&mut tx, handler, key, message_id).await? {
            Ok(Claim::Fresh(Tx { inner: tx }))
        } else {
            tx.commit().await?;
            Ok(Claim::Duplicate)
        }
    }

    /// Records one more failed attempt (in its own transaction, so a
    /// rollback of the business transaction does not erase it).
    pub async fn record_failure(
        &self,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> Result<FailureRecord, Error> {
        Ok(DB::record_failure(&self.pool, handler, message_id, error).await?)
    }

    /// Forgets the failures of a message that finally succeeded.
    pub async fn clear_failures(&self, handler: &str, message_id: &str) -> Result<(), Error> {
        Ok(DB::clear_failures(&self.pool, handler, message_id).await?)
    }

    /// Begins the transaction that marks a message as dead-lettered. `None`
    /// when it was dead-lettered before (a redelivery after a crash): the
    /// caller acks it without a second dead letter. Commit the transaction
    /// only after the dead letter is confirmed.
    pub async fn begin_dead_letter(
        &self,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> Result<Option<sqlx::Transaction<'static, DB>>, Error> {
        let mut tx = self.pool.begin().await?;
        if DB::mark_dead_lettered(&mut tx, handler, message_id, error).await? {
            Ok(Some(tx))
        } else {
            tx.rollback().await?;
            Ok(None)
        }
    }

    /// Deletes dedup and attempt rows older than the retention, in batches
    /// of [`Store::with_purge_batch`] rows; returns how many went.
    pub async fn purge(&self) -> Result<u64, Error> {
        let cutoff = OffsetDateTime::now_utc() - self.retention;
        let cutoff_ms = i64::try_from(cutoff.unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
        let mut total = 0;
        loop {
            let n = DB::purge_batch(&self.pool, cutoff_ms, i64::from(self.purge_batch)).await?;
            total += n;
            if n < u64::from(self.purge_batch) {
                return Ok(total);
            }
            tokio::task::yield_now().await;
        }
    }
}

impl<DB: StoreDatabase> DedupStore for Store<DB> {
    type Tx = Tx<DB>;
    type Mark = sqlx::Transaction<'static, DB>;

    async fn claim(
        &self,
        handler: &str,
        key: &str,
        message_id: &str,
    ) -> Result<Claim<Tx<DB>>, Error> {
        Store::claim(self, handler, key, message_id).await
    }

    async fn commit(&self, tx: Tx<DB>) -> Result<(), Error> {
        tx.commit().await
    }

    async fn rollback(&self, tx: Tx<DB>) -> Result<(), Error> {
        tx.rollback().await
    }

    async fn record_failure(
        &self,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> Result<FailureRecord, Error> {
        Store::record_failure(self, handler, message_id, error).await
    }

    async fn clear_failures(&self, handler: &str, message_id: &str) -> Result<(), Error> {
        Store::clear_failures(self, handler, message_id).await
    }

    async fn begin_dead_letter(
        &self,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> Result<Option<Self::Mark>, Error> {
        Store::begin_dead_letter(self, handler, message_id, error).await
    }

    async fn commit_dead_letter(&self, mark: Self::Mark) -> Result<(), Error> {
        Ok(mark.commit().await?)
    }

    fn retention(&self) -> Duration {
        self.retention
    }
}

/// The result of claiming a key.
#[derive(Debug)]
pub enum Claim<T> {
    /// First time: the transaction holds the new dedup row.
    Fresh(T),
    /// Committed before: nothing to do but ack.
    Duplicate,
}

/// The handler's transaction. It already holds the dedup row of the message
/// being handled, and only the framework can create one, so business writes
/// made through it commit if and only if the dedup row does.
///
/// Use it wherever sqlx wants a connection: `query.execute(&mut **tx)`.
#[derive(Debug)]
pub struct Tx<DB: Database> {
    inner: sqlx::Transaction<'static, DB>,
}

/// A handler transaction on PostgreSQL.
#[cfg(feature = "postgres")]
pub type PgTx = Tx<sqlx::Postgres>;
/// A handler transaction on SQLite.
#[cfg(feature = "sqlite")]
pub type SqliteTx = Tx<sqlx::Sqlite>;

impl<DB: Database> Tx<DB> {
    /// Commits business writes and the dedup row together.
    pub async fn commit(self) -> Result<(), Error> {
        Ok(self.inner.commit().await?)
    }

    /// Rolls everything back, the dedup row included.
    pub async fn rollback(self) -> Result<(), Error> {
        Ok(self.inner.rollback().await?)
    }
}

impl<DB: Database> Deref for Tx<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl<DB: Database> DerefMut for Tx<DB> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.inner
    }
}

#[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
fn now_ms() -> i64 {
    i64::try_from(OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

#[cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]
fn from_ms(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}
