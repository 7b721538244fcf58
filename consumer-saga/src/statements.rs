//! The sagas' statements, written once for every database on the core's
//! [SQL seam](consumer_core::sql): load, insert and update a saga's row
//! (optimistically, by version), list them, count the open ones, and
//! purge old tombstones.

use consumer_core::sql::{Arg, Columns, Dialect, Migrations, Statement, args, render};
use sqlx::{AssertSqlSafe, Pool, SqlSafeStr};

use super::database::{OpenSagas, SagaFilter};
use super::record::{SagaRow, SagaWrite};

/// The columns a [`SagaRow`] is read from, in its fields' order.
macro_rules! columns {
    () => {
        "saga_type, saga_id, version, status, reason, {state::text}, {timeouts::text}, \
         {compensation::text}, {retries::text}, {history::text}, \
         {ms started_at}, {ms updated_at}, {ms finished_at}"
    };
}

static LOAD: Statement = Statement::new(concat!(
    "SELECT ",
    columns!(),
    " FROM consumer_sagas WHERE saga_type = $1 AND saga_id = $2"
));

static INSERT: Statement = Statement::new(
    "INSERT INTO consumer_sagas (saga_type, saga_id, version, status, reason, state, timeouts, \
       compensation, retries, history, started_at, updated_at, finished_at) \
     VALUES ($1, $2, $3, $4, $5, {$6::jsonb}, {$7::jsonb}, {$8::jsonb}, {$9::jsonb}, {$10::jsonb}, \
       {now}, {now}, CASE WHEN $11 THEN {now} END) \
     ON CONFLICT (saga_type, saga_id) DO NOTHING",
);

static UPDATE: Statement = Statement::new(
    "UPDATE consumer_sagas SET version = $3, status = $4, reason = $5, state = {$6::jsonb}, \
       timeouts = {$7::jsonb}, compensation = {$8::jsonb}, retries = {$9::jsonb}, \
       history = {$10::jsonb}, updated_at = {now}, \
       finished_at = CASE WHEN $11 THEN coalesce(finished_at, {now}) END \
     WHERE saga_type = $1 AND saga_id = $2 AND version = $12",
);

static OPEN: Statement = Statement::new(
    "SELECT saga_type, \
       count(*) FILTER (WHERE status IN ('running', 'compensating')), \
       count(*) FILTER (WHERE status = 'compensation_failed'), \
       {ms min(started_at) FILTER (WHERE status IN ('running', 'compensating'))} \
     FROM consumer_sagas WHERE status IN ('running', 'compensating', 'compensation_failed') \
     GROUP BY saga_type",
);

static PURGE_TOMBSTONES: Statement = Statement::new(
    "DELETE FROM consumer_sagas WHERE (saga_type, saga_id) IN \
       (SELECT saga_type, saga_id FROM consumer_sagas WHERE finished_at < {at $1} \
        AND status <> 'compensation_failed' LIMIT $2)",
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
        history: c.text()?,
        started_ms: c.int()?,
        updated_ms: c.int()?,
        finished_ms: c.maybe_int()?,
    })
}

/// The columns of `write`, `$1` to `$11`.
fn write_args<'a>(w: &'a SagaWrite<'a>) -> [Arg<'a>; 11] {
    [
        Arg::Text(w.saga_type),
        Arg::Text(w.saga_id),
        Arg::Int(w.version),
        Arg::Text(w.status),
        Arg::MaybeText(w.reason),
        Arg::Text(&w.state),
        Arg::Text(&w.timeouts),
        Arg::Text(&w.compensation),
        Arg::Text(&w.retries),
        Arg::Text(&w.history),
        Arg::Bool(w.finished),
    ]
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

/// Inserts a new saga's row; `false` when another transaction inserted it
/// first (a conflict).
pub(super) async fn insert<DB: Dialect>(
    conn: &mut DB::Connection,
    write: &SagaWrite<'_>,
) -> Result<bool, sqlx::Error> {
    Ok(DB::execute(conn, INSERT.sql::<DB>(), &write_args(write)).await? == 1)
}

/// Saves the row at `write.version` if it is still at `expected`; `false`
/// otherwise (a conflict).
pub(super) async fn update<DB: Dialect>(
    conn: &mut DB::Connection,
    write: &SagaWrite<'_>,
    expected: i64,
) -> Result<bool, sqlx::Error> {
    let [a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11] = write_args(write);
    let args = [
        a1,
        a2,
        a3,
        a4,
        a5,
        a6,
        a7,
        a8,
        a9,
        a10,
        a11,
        Arg::Int(expected),
    ];
    Ok(DB::execute(conn, UPDATE.sql::<DB>(), &args).await? == 1)
}

/// Rows matching `filter`, oldest first.
pub(super) async fn list<DB: Dialect>(
    pool: &Pool<DB>,
    f: &SagaFilter,
) -> Result<Vec<SagaRow>, sqlx::Error> {
    let sql = render::<DB>(
        &[
            concat!(
                "SELECT ",
                columns!(),
                " FROM consumer_sagas WHERE ({$1::text} IS NULL OR saga_type = $1) AND "
            ),
            &f.status_sql(),
            " AND ({$2::bigint} IS NULL OR started_at < {at $2}) \
             ORDER BY started_at, saga_type, saga_id LIMIT $3",
        ]
        .concat(),
    );
    let mut conn = pool.acquire().await?;
    let args = args![f.saga_type.as_deref(), f.started_before_ms, f.limit()];
    let rows = DB::fetch_all(&mut conn, AssertSqlSafe(sql).into_sql_str(), args).await?;
    rows.iter().map(saga_row::<DB>).collect()
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
/// `older_than_ms`, never one whose compensation failed (an operator
/// settles it).
pub(super) async fn purge_tombstones<DB: Dialect>(
    pool: &Pool<DB>,
    older_than_ms: i64,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    DB::execute(
        &mut conn,
        PURGE_TOMBSTONES.sql::<DB>(),
        args![older_than_ms, batch],
    )
    .await
}
