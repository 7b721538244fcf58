//! [`SqlLeaseStore`]: the lease table through a pool of the store's
//! database.

use std::time::SystemTime;

use consumer_core::sql::{Columns, Dialect, Migrations, args};
use consumer_kinesis::lease::{Checkpoint, CheckpointWrite, Lease, LeaseStore};
use sqlx::Pool;

use crate::error::{Error, Result};
use crate::statements::{
    self as st, CHECKPOINT, CHECKPOINT_OF, CHECKPOINT_STATE, ENSURE, LEASES, RELEASE, RENEW, TAKE,
};

/// How often a checkpoint write reads the row again when it changed
/// between the read and the write (only its owner writes it, so once is
/// the rule).
const CHECKPOINT_TRIES: usize = 3;

/// Leases and checkpoints of one application's reading of one stream, in
/// the database behind `pool` (PostgreSQL or SQLite); see the crate docs.
#[derive(Debug, Clone)]
pub struct SqlLeaseStore<DB: Dialect> {
    pub(crate) pool: Pool<DB>,
    pub(crate) application: String,
    pub(crate) stream: String,
}

impl<DB: Dialect> SqlLeaseStore<DB> {
    /// The leases of `application` (the consumer's name) reading `stream`.
    /// The names are bound as values, never written into SQL.
    pub fn new(pool: Pool<DB>, application: impl Into<String>, stream: impl Into<String>) -> Self {
        Self {
            pool,
            application: application.into(),
            stream: stream.into(),
        }
    }

    /// Creates or upgrades the lease table, tracked in
    /// [`MIGRATIONS_TABLE`](crate::MIGRATIONS_TABLE).
    pub async fn migrate(&self) -> Result<()> {
        let migrations = Migrations {
            postgres: sqlx::migrate!("./migrations/postgres"),
            sqlite: sqlx::migrate!("./migrations/sqlite"),
            table: crate::MIGRATIONS_TABLE,
            ignore_missing: false,
        };
        DB::migrate(&self.pool, migrations)
            .await
            .map_err(Error::Migrate)
    }

    /// Runs a lease transition that returns the row as changed.
    async fn transition(
        &self,
        sql: sqlx::SqlStr,
        args: &[consumer_core::sql::Arg<'_>],
    ) -> Result<Option<Lease>> {
        let mut conn = self.pool.acquire().await?;
        let row = DB::fetch_optional(&mut conn, sql, args).await?;
        row.as_ref().map(st::lease::<DB>).transpose()
    }

    /// The stored checkpoint and whether `owner` holds the lease now.
    async fn checkpoint_state(
        &self,
        shard_id: &str,
        owner: &str,
    ) -> Result<Option<(Option<String>, bool)>> {
        let mut conn = self.pool.acquire().await?;
        let row = DB::fetch_optional(
            &mut conn,
            CHECKPOINT_STATE.sql::<DB>(),
            args![
                self.application.as_str(),
                self.stream.as_str(),
                shard_id,
                owner
            ],
        )
        .await?;
        let Some(row) = row else { return Ok(None) };
        let mut c = Columns::<DB>::of(&row);
        Ok(Some((c.maybe_text()?, c.int()? == 1)))
    }
}

impl<DB: Dialect> LeaseStore for SqlLeaseStore<DB> {
    type Error = Error;

    async fn ensure(&self, shard_ids: &[String]) -> Result<()> {
        let mut conn = self.pool.acquire().await?;
        for shard_id in shard_ids {
            DB::execute(
                &mut conn,
                ENSURE.sql::<DB>(),
                args![
                    self.application.as_str(),
                    self.stream.as_str(),
                    shard_id.as_str(),
                    0_i64
                ],
            )
            .await?;
        }
        Ok(())
    }

    async fn leases(&self) -> Result<Vec<Lease>> {
        let mut conn = self.pool.acquire().await?;
        let rows = DB::fetch_all(
            &mut conn,
            LEASES.sql::<DB>(),
            args![self.application.as_str(), self.stream.as_str()],
        )
        .await?;
        rows.iter().map(st::lease::<DB>).collect()
    }

    async fn take(
        &self,
        shard_id: &str,
        owner: &str,
        seen_counter: u64,
        until: SystemTime,
        steal: bool,
    ) -> Result<Option<Lease>> {
        let seen = i64::try_from(seen_counter).unwrap_or(-1);
        self.transition(
            TAKE.sql::<DB>(),
            args![
                self.application.as_str(),
                self.stream.as_str(),
                shard_id,
                owner,
                st::ms_until(until),
                seen,
                steal
            ],
        )
        .await
    }

    async fn renew(&self, shard_id: &str, owner: &str, until: SystemTime) -> Result<Option<Lease>> {
        self.transition(
            RENEW.sql::<DB>(),
            args![
                self.application.as_str(),
                self.stream.as_str(),
                shard_id,
                owner,
                st::ms_until(until)
            ],
        )
        .await
    }

    async fn release(&self, shard_id: &str, owner: &str) -> Result<bool> {
        let mut conn = self.pool.acquire().await?;
        let n = DB::execute(
            &mut conn,
            RELEASE.sql::<DB>(),
            args![
                self.application.as_str(),
                self.stream.as_str(),
                shard_id,
                owner,
                0_i64
            ],
        )
        .await?;
        Ok(n == 1)
    }

    async fn checkpoint(
        &self,
        shard_id: &str,
        owner: &str,
        checkpoint: Checkpoint,
    ) -> Result<CheckpointWrite> {
        for _ in 0..CHECKPOINT_TRIES {
            let Some((stored, held)) = self.checkpoint_state(shard_id, owner).await? else {
                return Ok(CheckpointWrite::NotOwner);
            };
            if !held {
                return Ok(CheckpointWrite::NotOwner);
            }
            if st::checkpoint(stored.clone()).is_some_and(|c| checkpoint.position_cmp(&c).is_lt()) {
                return Ok(CheckpointWrite::Behind);
            }
            let mut conn = self.pool.acquire().await?;
            let n = DB::execute(
                &mut conn,
                CHECKPOINT.sql::<DB>(),
                &[
                    self.application.as_str().into(),
                    self.stream.as_str().into(),
                    shard_id.into(),
                    owner.into(),
                    st::stored(&checkpoint).into(),
                    consumer_core::sql::Arg::MaybeText(stored.as_deref()),
                ],
            )
            .await?;
            if n == 1 {
                return Ok(CheckpointWrite::Written);
            }
        }
        // Changed under us every time: the lease moved meanwhile.
        Ok(CheckpointWrite::NotOwner)
    }

    async fn checkpoint_of(&self, shard_id: &str) -> Result<Option<Checkpoint>> {
        let mut conn = self.pool.acquire().await?;
        let row = DB::fetch_optional(
            &mut conn,
            CHECKPOINT_OF.sql::<DB>(),
            args![self.application.as_str(), self.stream.as_str(), shard_id],
        )
        .await?;
        let Some(row) = row else { return Ok(None) };
        Ok(st::checkpoint(Columns::<DB>::of(&row).maybe_text()?))
    }
}
