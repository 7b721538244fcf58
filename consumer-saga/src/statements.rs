//! The sagas' statements, written once for every database on the core's
//! [SQL seam](consumer_core::sql): load a saga's row, list them, count
//! the open ones. Saving a row (optimistically, by version) writes its
//! history entry too, and the purge of old tombstones their history: both
//! are in [`history`](super::history).

use consumer_core::sql::{Columns, Dialect, Migrations, Statement, args, render};
use sqlx::{AssertSqlSafe, Pool, SqlSafeStr};

use super::database::{OpenSagas, SagaFilter};
use super::history;
use super::record::{HistoryEntry, SagaRow, SagaWrite};

/// The columns a [`SagaRow`] is read from, in its fields' order.
macro_rules! columns {
    () => {
        "saga_type, saga_id, version, status, reason, {state::text}, {timeouts::text}, \
         {compensation::text}, {retries::text}, \
         {ms started_at}, {ms updated_at}, {ms finished_at}"
    };
}

static LOAD: Statement = Statement::new(concat!(
    "SELECT ",
    columns!(),
    " FROM consumer_sagas WHERE saga_type = $1 AND saga_id = $2"
));

static OPEN: Statement = Statement::new(
    "SELECT saga_type, \
       count(*) FILTER (WHERE status IN ('running', 'compensating')), \
       count(*) FILTER (WHERE status = 'compensation_failed'), \
       {ms min(started_at) FILTER (WHERE status IN ('running', 'compensating'))} \
     FROM consumer_sagas WHERE status IN ('running', 'compensating', 'compensation_failed') \
     GROUP BY saga_type",
);

fn saga_row<DB: Dialect>(row: &DB::Row) -> Result<SagaRow, sqlx::Error> {
    let mut c = Columns::<DB>::of(row);
    Ok(SagaRow {
        saga_type: c.text()?,
        saga_id: c.text()?,
        version: c.int()?,
        status: c.text()?,
        reason: c.maybe_text()?,
        state: c.text()?,
        timeouts: c.text()?,
        compensation: c.text()?,
        retries: c.text()?,
        started_ms: c.int()?,
        updated_ms: c.int()?,
        finished_ms: c.maybe_int()?,
    })
}

/// Creates or upgrades `consumer_sagas`, tracked in
/// [`MIGRATIONS_TABLE`](super::MIGRATIONS_TABLE).
pub(super) async fn migrate<DB: Dialect>(pool: &Pool<DB>) -> Result<(), consumer_core::Error> {
    let migrations = Migrations {
        postgres: sqlx::migrate!("./migrations/postgres"),
        sqlite: sqlx::migrate!("./migrations/sqlite"),
        table: super::MIGRATIONS_TABLE,
        ignore_missing: false,
    };
    DB::migrate(pool, migrations).await
}

/// The saga's row, if it has one.
pub(super) async fn load<DB: Dialect>(
    conn: &mut DB::Connection,
    saga_type: &str,
    saga_id: &str,
) -> Result<Option<SagaRow>, sqlx::Error> {
    let found = DB::fetch_optional(conn, LOAD.sql::<DB>(), args![saga_type, saga_id]).await?;
    found.as_ref().map(saga_row::<DB>).transpose()
}

/// Inserts a new saga's row with its first history entry; `false` when
/// another transaction inserted it first (a conflict).
pub(super) async fn insert<DB: Dialect>(
    conn: &mut DB::Connection,
    write: &SagaWrite<'_>,
) -> Result<bool, sqlx::Error> {
    history::start::<DB>(conn, write).await
}

/// Saves the row at `write.version` if it is still at `expected`, with
/// its history entry; `false` otherwise (a conflict).
pub(super) async fn update<DB: Dialect>(
    conn: &mut DB::Connection,
    write: &SagaWrite<'_>,
    expected: i64,
) -> Result<bool, sqlx::Error> {
    history::next::<DB>(conn, write, expected).await
}

/// The sagas `f` selects, oldest first: a query's `FROM` on, over
/// `$1` to `$3`.
fn selection(f: &SagaFilter) -> String {
    [
        "FROM consumer_sagas WHERE ({$1::text} IS NULL OR saga_type = $1) AND ",
        &f.status_sql(),
        " AND ({$2::bigint} IS NULL OR started_at < {at $2}) \
         ORDER BY started_at, saga_type, saga_id LIMIT $3",
    ]
    .concat()
}

/// Rows matching `filter`, oldest first, each with its history.
pub(super) async fn list<DB: Dialect>(
    pool: &Pool<DB>,
    f: &SagaFilter,
) -> Result<Vec<(SagaRow, Vec<HistoryEntry>)>, sqlx::Error> {
    let selection = selection(f);
    let sql = render::<DB>(&[concat!("SELECT ", columns!(), " "), &selection].concat());
    let args = args![f.saga_type.as_deref(), f.started_before_ms, f.limit()];
    let rows = {
        let mut conn = pool.acquire().await?;
        DB::fetch_all(&mut conn, AssertSqlSafe(sql).into_sql_str(), args).await?
    };
    let selected = ["SELECT saga_type, saga_id ", &selection].concat();
    let mut histories = history::of_sagas(pool, &selected, args).await?;
    rows.iter()
        .map(|row| {
            let row = saga_row::<DB>(row)?;
            let mut entries = histories
                .remove(&(row.saga_type.clone(), row.saga_id.clone()))
                .unwrap_or_default();
            // A transition committed between the two reads is not half shown.
            entries.retain(|e| e.version <= row.version);
            Ok((row, entries))
        })
        .collect()
}

/// Open sagas per type.
pub(super) async fn open<DB: Dialect>(pool: &Pool<DB>) -> Result<Vec<OpenSagas>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let rows = DB::fetch_all(&mut conn, OPEN.sql::<DB>(), &[]).await?;
    rows.iter()
        .map(|row| {
            let mut c = Columns::<DB>::of(row);
            Ok(OpenSagas {
                saga_type: c.text()?,
                active: c.int()?,
                compensation_failed: c.int()?,
                oldest_active_ms: c.maybe_int()?,
            })
        })
        .collect()
}

/// Deletes at most `batch` tombstones of sagas that finished before
/// `older_than_ms`, with their history, never one whose compensation
/// failed (an operator settles it).
pub(super) async fn purge_tombstones<DB: Dialect>(
    pool: &Pool<DB>,
    older_than_ms: i64,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    history::purge_tombstones(pool, older_than_ms, batch).await
}
