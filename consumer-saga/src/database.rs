//! [`SagaDatabase`]: the SQL of saga rows on each supported database,
//! sealed like the store's and the outbox's.

use std::future::Future;

use super::record::{SagaRow, SagaWrite};
use super::status::SagaStatus;
use consumer_core::outbox::OutboxDatabase;
use consumer_core::store::StoreDatabase;

pub(super) mod sealed {
    pub trait Sealed {}
}

/// Which sagas [`SagaStore::list`](super::SagaStore::list) returns.
#[derive(Debug, Clone, Default)]
pub struct SagaFilter {
    pub(super) saga_type: Option<String>,
    pub(super) statuses: Vec<SagaStatus>,
    pub(super) started_before_ms: Option<i64>,
    pub(super) limit: Option<u32>,
}

impl SagaFilter {
    /// Every saga.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only sagas of this type.
    #[must_use]
    pub fn with_type(mut self, saga_type: impl Into<String>) -> Self {
        self.saga_type = Some(saga_type.into());
        self
    }

    /// Only sagas with this status (called again: or that one).
    #[must_use]
    pub fn with_status(mut self, status: SagaStatus) -> Self {
        if !self.statuses.contains(&status) {
            self.statuses.push(status);
        }
        self
    }

    /// Only active sagas: running or compensating.
    #[must_use]
    pub fn active(self) -> Self {
        self.with_status(SagaStatus::Running)
            .with_status(SagaStatus::Compensating)
    }

    /// Only sagas started before `instant` (with `running`: the ones active
    /// for longer than a threshold).
    #[must_use]
    pub fn with_started_before(mut self, instant: time::OffsetDateTime) -> Self {
        self.started_before_ms =
            Some(i64::try_from(instant.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX));
        self
    }

    /// At most `n` sagas, oldest first.
    #[must_use]
    pub fn with_limit(mut self, n: u32) -> Self {
        self.limit = Some(n);
        self
    }

    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(super) fn limit(&self) -> i64 {
        self.limit.map_or(i64::MAX, i64::from)
    }

    /// The status condition, spliced into SQL: the names come from
    /// [`SagaStatus::as_str`], a closed set, never from input.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(super) fn status_sql(&self) -> String {
        if self.statuses.is_empty() {
            return "TRUE".to_owned();
        }
        let names: Vec<String> = self
            .statuses
            .iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        format!("status IN ({})", names.join(", "))
    }
}

/// What one saga type has open, for [`SagaMonitor`](super::SagaMonitor)'s
/// gauges.
#[derive(Debug, Clone, PartialEq, Eq)]
#[doc(hidden)]
pub struct OpenSagas {
    pub saga_type: String,
    /// Running or compensating.
    pub active: i64,
    /// In `compensation_failed`, waiting for an operator.
    pub compensation_failed: i64,
    /// When the oldest active one started (Unix ms).
    pub oldest_active_ms: Option<i64>,
}

/// Open sagas per type from `(type, active, compensation_failed,
/// oldest_active_ms)` rows, each dialect's aggregate query.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(super) fn open_sagas(rows: Vec<(String, i64, i64, Option<i64>)>) -> Vec<OpenSagas> {
    rows.into_iter()
        .map(
            |(saga_type, active, compensation_failed, oldest_active_ms)| OpenSagas {
                saga_type,
                active,
                compensation_failed,
                oldest_active_ms,
            },
        )
        .collect()
}

/// Runs the sagas' migrations, tracked in their own table.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(super) async fn run_migrations<DB>(
    mut migrator: sqlx::migrate::Migrator,
    pool: &sqlx::Pool<DB>,
) -> Result<(), consumer_core::Error>
where
    DB: sqlx::Database,
    <DB as sqlx::Database>::Connection: sqlx::migrate::Migrate,
{
    migrator.dangerous_set_table_name(super::MIGRATIONS_TABLE);
    migrator.run(pool).await?;
    Ok(())
}

/// A saga row from the columns each dialect's `COLUMNS` selects, in that
/// order: type, id, version, status, reason, the five JSON documents as
/// text, then started, updated and finished as Unix milliseconds.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(super) fn saga_row<'r, R>(r: &'r R) -> Result<SagaRow, sqlx::Error>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    Ok(SagaRow {
        saga_type: r.try_get(0)?,
        saga_id: r.try_get(1)?,
        version: r.try_get(2)?,
        status: r.try_get(3)?,
        reason: r.try_get(4)?,
        state: r.try_get(5)?,
        timeouts: r.try_get(6)?,
        compensation: r.try_get(7)?,
        retries: r.try_get(8)?,
        history: r.try_get(9)?,
        started_ms: r.try_get(10)?,
        updated_ms: r.try_get(11)?,
        finished_ms: r.try_get(12)?,
    })
}

/// A database sagas run on (PostgreSQL, SQLite): the store's and the
/// outbox's, so a transition's state, dedup row and outbox rows share one
/// transaction. Sealed.
pub trait SagaDatabase: StoreDatabase + OutboxDatabase + sealed::Sealed {
    /// The saga's row, if it has one.
    #[doc(hidden)]
    fn load(
        conn: &mut Self::Connection,
        saga_type: &str,
        saga_id: &str,
    ) -> impl Future<Output = Result<Option<SagaRow>, sqlx::Error>> + Send;

    /// Inserts a new saga's row; `false` when another transaction inserted
    /// it first (a conflict).
    #[doc(hidden)]
    fn insert(
        conn: &mut Self::Connection,
        write: &SagaWrite<'_>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Saves the row at `write.version` if it is still at `expected`;
    /// `false` otherwise (a conflict).
    #[doc(hidden)]
    fn update(
        conn: &mut Self::Connection,
        write: &SagaWrite<'_>,
        expected: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Rows matching `filter`, oldest first.
    #[doc(hidden)]
    fn list(
        pool: &sqlx::Pool<Self>,
        filter: &SagaFilter,
    ) -> impl Future<Output = Result<Vec<SagaRow>, sqlx::Error>> + Send;

    /// Open sagas per type.
    #[doc(hidden)]
    fn open(
        pool: &sqlx::Pool<Self>,
    ) -> impl Future<Output = Result<Vec<OpenSagas>, sqlx::Error>> + Send;

    /// Creates or upgrades `consumer_sagas`, tracked in
    /// [`MIGRATIONS_TABLE`](super::MIGRATIONS_TABLE).
    #[doc(hidden)]
    fn migrate_sagas(
        pool: &sqlx::Pool<Self>,
    ) -> impl Future<Output = Result<(), consumer_core::Error>> + Send;

    /// Deletes at most `batch` tombstones of sagas that finished before
    /// `older_than_ms`, never one whose compensation failed (an operator
    /// settles it).
    #[doc(hidden)]
    fn purge_tombstones(
        pool: &sqlx::Pool<Self>,
        older_than_ms: i64,
        batch: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;
}
