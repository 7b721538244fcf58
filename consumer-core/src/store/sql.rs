//! [`Store`]: the dedup, attempt and dead-letter store on a PostgreSQL or
//! SQLite pool.

use std::sync::Arc;
use std::time::Duration;

use sqlx::Pool;
use time::OffsetDateTime;

use super::statements;
use super::{Claim, DedupStore, FailureRecord, LetterRow, StoreDatabase, StoreExtension, Tx};
use crate::dead_letter::DeadLetter;
use crate::error::Error;

/// The dedup and attempt store on one database pool.
pub struct Store<DB: StoreDatabase> {
    pool: Pool<DB>,
    retention: Duration,
    purge_batch: u32,
    extensions: Vec<Arc<dyn StoreExtension<DB>>>,
}

impl<DB: StoreDatabase> std::fmt::Debug for Store<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("pool", &self.pool)
            .field("retention", &self.retention)
            .field("purge_batch", &self.purge_batch)
            .field(
                "extensions",
                &self.extensions.iter().map(|e| e.name()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<DB: StoreDatabase> Clone for Store<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            retention: self.retention,
            purge_batch: self.purge_batch,
            extensions: self.extensions.clone(),
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
            extensions: Vec::new(),
        }
    }

    /// Registers a part that keeps tables of its own in this database (the
    /// sagas' `consumer_sagas`): [`migrate`](Self::migrate) creates them
    /// and [`purge`](Self::purge) deletes their old rows with the store's.
    pub fn with_extension(mut self, extension: impl StoreExtension<DB>) -> Self {
        self.extensions.push(Arc::new(extension));
        self
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
    /// `consumer_attempts`, `consumer_dead_letters` and the outbox's),
    /// tracked in [`MIGRATIONS_TABLE`](super::MIGRATIONS_TABLE), then each
    /// [extension](Self::with_extension)'s.
    pub async fn migrate(&self) -> Result<(), Error> {
        statements::migrate(&self.pool).await?;
        for extension in &self.extensions {
            extension.migrate(&self.pool).await?;
        }
        Ok(())
    }

    /// Begins a transaction and claims `key` for `handler` in it.
    pub async fn claim(
        &self,
        handler: &str,
        key: &str,
        message_id: &str,
    ) -> Result<Claim<Tx<DB>>, Error> {
        let mut tx = self.pool.begin().await?;
        if statements::claim::<DB>(&mut tx, handler, key, message_id).await? {
            Ok(Claim::Fresh(Tx { inner: tx }))
        } else {
            tx.commit().await?;
            Ok(Claim::Duplicate)
        }
    }

    /// Begins a transaction and claims every key of `claims` in it; see
    /// [`DedupStore::claim_batch`].
    pub async fn claim_batch(
        &self,
        handler: &str,
        claims: &[(&str, &str)],
    ) -> Result<(Tx<DB>, Vec<bool>), Error> {
        let mut order: Vec<usize> = (0..claims.len()).collect();
        order.sort_by(|a, b| claims[*a].0.cmp(claims[*b].0));
        let sorted: Vec<(&str, &str)> = order.iter().map(|i| claims[*i]).collect();
        let mut tx = self.pool.begin().await?;
        let fresh_sorted = DB::claim_many(&mut tx, handler, &sorted).await?;
        let mut fresh = vec![false; claims.len()];
        for (at, i) in order.into_iter().enumerate() {
            fresh[i] = fresh_sorted.get(at).copied().unwrap_or(false);
        }
        Ok((Tx { inner: tx }, fresh))
    }

    /// Records one more failed attempt (in its own transaction, so a
    /// rollback of the business transaction does not erase it).
    pub async fn record_failure(
        &self,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> Result<FailureRecord, Error> {
        Ok(statements::record_failure(&self.pool, handler, message_id, error).await?)
    }

    /// Forgets the failures of a message that finally succeeded.
    pub async fn clear_failures(&self, handler: &str, message_id: &str) -> Result<(), Error> {
        Ok(statements::clear_failures(&self.pool, handler, message_id).await?)
    }

    /// Whether the message was dead-lettered before; see
    /// [`DedupStore::was_dead_lettered`].
    pub async fn was_dead_lettered(&self, handler: &str, message_id: &str) -> Result<bool, Error> {
        Ok(statements::dead_lettered(&self.pool, handler, message_id).await?)
    }

    /// Marks the message as dead-lettered, committed at once.
    pub async fn mark_dead_lettered(
        &self,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> Result<(), Error> {
        let mut conn = self.pool.acquire().await?;
        statements::mark_dead_lettered::<DB>(&mut conn, handler, message_id, error).await?;
        Ok(())
    }

    /// Marks and stores a dead letter in one transaction; see
    /// [`DedupStore::store_dead_letter`].
    pub async fn store_dead_letter(
        &self,
        letter: &DeadLetter,
        refusal: &str,
    ) -> Result<bool, Error> {
        let mut tx = self.pool.begin().await?;
        if !statements::mark_dead_lettered::<DB>(
            &mut tx,
            &letter.handler,
            &letter.message_id,
            &letter.error,
        )
        .await?
        {
            tx.rollback().await?;
            return Ok(false);
        }
        statements::insert_dead_letter::<DB>(&mut tx, &LetterRow::of(letter, refusal)).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Deletes dedup and attempt rows older than the retention, and each
    /// [extension](Self::with_extension)'s rows it no longer needs (the
    /// tombstones of sagas that finished before it), in batches of
    /// [`Store::with_purge_batch`] rows; returns how many went.
    pub async fn purge(&self) -> Result<u64, Error> {
        // A retention longer than the calendar reaches back (`Duration::MAX`:
        // keep every row) leaves nothing old enough to go.
        let Some(cutoff) = time::Duration::try_from(self.retention)
            .ok()
            .and_then(|retention| OffsetDateTime::now_utc().checked_sub(retention))
        else {
            return Ok(0);
        };
        let cutoff_ms = i64::try_from(cutoff.unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
        let mut total = 0;
        let batch = i64::from(self.purge_batch);
        loop {
            let mut n = statements::purge_batch(&self.pool, cutoff_ms, batch).await?;
            for extension in &self.extensions {
                n = n.max(extension.purge_batch(&self.pool, cutoff_ms, batch).await?);
            }
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

    async fn claim(
        &self,
        handler: &str,
        key: &str,
        message_id: &str,
    ) -> Result<Claim<Tx<DB>>, Error> {
        Store::claim(self, handler, key, message_id).await
    }

    async fn claim_batch(
        &self,
        handler: &str,
        claims: &[(&str, &str)],
    ) -> Result<(Tx<DB>, Vec<bool>), Error> {
        Store::claim_batch(self, handler, claims).await
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

    async fn was_dead_lettered(&self, handler: &str, message_id: &str) -> Result<bool, Error> {
        Store::was_dead_lettered(self, handler, message_id).await
    }

    async fn mark_dead_lettered(
        &self,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> Result<(), Error> {
        Store::mark_dead_lettered(self, handler, message_id, error).await
    }

    async fn store_dead_letter(&self, letter: &DeadLetter, refusal: &str) -> Result<bool, Error> {
        Store::store_dead_letter(self, letter, refusal).await
    }

    fn retention(&self) -> Duration {
        self.retention
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;

    /// `with_retention(Duration::MAX)`, "keep every row", used to overflow
    /// the purge's cutoff.
    #[tokio::test]
    async fn a_retention_past_the_calendar_keeps_every_row() {
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .expect("in-memory SQLite");
        let store = Store::new(pool).with_retention(Duration::MAX);
        store.migrate().await.expect("migrations");
        let claim = store.claim("h", "k", "m").await.expect("claim");
        let Claim::Fresh(tx) = claim else {
            panic!("a first claim is fresh");
        };
        tx.commit().await.expect("commit");
        assert_eq!(store.purge().await.expect("purge"), 0);
    }
}
