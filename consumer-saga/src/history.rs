//! A saga's history as rows of its own, `consumer_saga_history`: one per
//! transition, keyed by the version it wrote, appended with the saga's
//! row and pruned to the saga's history limit by version, so a save
//! writes one entry instead of rewriting the whole history; and read
//! back, oldest first, for [`SagaStore`](super::SagaStore).
//!
//! On PostgreSQL the row's save, the entry and the prune are one statement
//! (data-modifying `WITH`): one round trip, as when the history was a
//! column. SQLite has no such statement; it runs in process, so there
//! they are one statement each, the prune only once the saga has more
//! versions than it keeps.

use std::collections::HashMap;

use consumer_core::sql::{Arg, Columns, Dialect, Statement, args};
use sqlx::{AssertSqlSafe, Pool, SqlSafeStr};

use super::record::{HistoryEntry, SagaWrite};
use super::status::SagaStatus;

/// The columns of an entry, in [`HistoryEntry`]'s fields' order.
const ENTRY: &str = "version, event_type, message_id, status, {ms at}, note";

/// A new saga's row, and its first entry (PostgreSQL).
static START: Statement = Statement::new(
    "WITH saga AS (INSERT INTO consumer_sagas (saga_type, saga_id, version, status, reason, \
       state, timeouts, compensation, retries, history, started_at, updated_at, finished_at) \
     VALUES ($1, $2, $3, $4, $5, {$6::jsonb}, {$7::jsonb}, {$8::jsonb}, {$9::jsonb}, '[]', \
       {now}, {now}, CASE WHEN $10 THEN {now} END) \
     ON CONFLICT (saga_type, saga_id) DO NOTHING RETURNING saga_type, saga_id, version) \
     INSERT INTO consumer_saga_history \
       (saga_type, saga_id, version, event_type, message_id, status, at, note) \
     SELECT saga_type, saga_id, version, $11, $12, $13, {at $14}, $15 FROM saga",
);

/// The row at its next version if it is still at `$16`, its entry, and
/// the entries older than the last `$17` deleted (PostgreSQL).
static NEXT: Statement = Statement::new(
    "WITH saga AS (UPDATE consumer_sagas SET version = $3, status = $4, reason = $5, \
       state = {$6::jsonb}, timeouts = {$7::jsonb}, compensation = {$8::jsonb}, \
       retries = {$9::jsonb}, updated_at = {now}, \
       finished_at = CASE WHEN $10 THEN coalesce(finished_at, {now}) END \
     WHERE saga_type = $1 AND saga_id = $2 AND version = $16 \
     RETURNING saga_type, saga_id, version), \
     pruned AS (DELETE FROM consumer_saga_history h USING saga s \
       WHERE h.saga_type = s.saga_type AND h.saga_id = s.saga_id AND h.version <= s.version - $17) \
     INSERT INTO consumer_saga_history \
       (saga_type, saga_id, version, event_type, message_id, status, at, note) \
     SELECT saga_type, saga_id, version, $11, $12, $13, {at $14}, $15 FROM saga",
);

/// The row alone, new (SQLite).
static INSERT_ROW: Statement = Statement::new(
    "INSERT INTO consumer_sagas (saga_type, saga_id, version, status, reason, state, timeouts, \
       compensation, retries, history, started_at, updated_at, finished_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, '[]', {now}, {now}, CASE WHEN $10 THEN {now} END) \
     ON CONFLICT (saga_type, saga_id) DO NOTHING",
);

/// The row alone, at its next version if still at `$11` (SQLite).
static UPDATE_ROW: Statement = Statement::new(
    "UPDATE consumer_sagas SET version = $3, status = $4, reason = $5, state = $6, \
       timeouts = $7, compensation = $8, retries = $9, updated_at = {now}, \
       finished_at = CASE WHEN $10 THEN coalesce(finished_at, {now}) END \
     WHERE saga_type = $1 AND saga_id = $2 AND version = $11",
);

/// One entry (SQLite).
static APPEND: Statement = Statement::new(
    "INSERT INTO consumer_saga_history \
       (saga_type, saga_id, version, event_type, message_id, status, at, note) \
     VALUES ($1, $2, $3, $4, $5, $6, {at $7}, $8)",
);

/// The entries up to version `$3` (SQLite).
static PRUNE: Statement = Statement::new(
    "DELETE FROM consumer_saga_history WHERE saga_type = $1 AND saga_id = $2 AND version <= $3",
);

/// One saga's entries up to the version of the row read.
static OF_SAGA: Statement = Statement::new(
    "SELECT version, event_type, message_id, status, {ms at}, note \
     FROM consumer_saga_history WHERE saga_type = $1 AND saga_id = $2 AND version <= $3 \
     ORDER BY version",
);

/// Tombstones deleted with their history in one statement (PostgreSQL).
static PURGE: Statement = Statement::new(
    "WITH gone AS (DELETE FROM consumer_sagas WHERE (saga_type, saga_id) IN \
       (SELECT saga_type, saga_id FROM consumer_sagas WHERE finished_at < {at $1} \
        AND status <> 'compensation_failed' LIMIT $2) RETURNING saga_type, saga_id), \
     entries AS (DELETE FROM consumer_saga_history h USING gone g \
       WHERE h.saga_type = g.saga_type AND h.saga_id = g.saga_id) \
     SELECT count(*) FROM gone",
);

/// The history of the tombstones the next statement deletes (SQLite, in
/// its transaction: its single writer keeps the two selections equal).
static PURGE_ENTRIES: Statement = Statement::new(
    "DELETE FROM consumer_saga_history WHERE (saga_type, saga_id) IN \
       (SELECT saga_type, saga_id FROM consumer_sagas WHERE finished_at < {at $1} \
        AND status <> 'compensation_failed' ORDER BY saga_type, saga_id LIMIT $2)",
);

/// The tombstones themselves (SQLite).
static PURGE_ROWS: Statement = Statement::new(
    "DELETE FROM consumer_sagas WHERE (saga_type, saga_id) IN \
       (SELECT saga_type, saga_id FROM consumer_sagas WHERE finished_at < {at $1} \
        AND status <> 'compensation_failed' ORDER BY saga_type, saga_id LIMIT $2)",
);

/// Whether `DB` saves a transition in one statement (PostgreSQL's
/// data-modifying `WITH`).
fn in_one_statement<DB: Dialect>() -> bool {
    DB::SYSTEM == "postgresql"
}

/// The row's columns `$1` to `$10`, then the entry's `$11` to `$15`:
/// event type, message id, status, time, note.
fn save_args<'a>(w: &'a SagaWrite<'a>) -> [Arg<'a>; 15] {
    let e = w.entry;
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
        Arg::Bool(w.finished),
        Arg::Text(&e.event_type),
        Arg::Text(&e.message_id),
        Arg::Text(e.status.as_str()),
        Arg::Int(e.at_ms),
        Arg::MaybeText(e.note.as_deref()),
    ]
}

/// Inserts a new saga's row with its first entry; `false` when another
/// transaction inserted the saga first (a conflict).
pub(super) async fn start<DB: Dialect>(
    conn: &mut DB::Connection,
    w: &SagaWrite<'_>,
) -> Result<bool, sqlx::Error> {
    if in_one_statement::<DB>() {
        return Ok(DB::execute(conn, START.sql::<DB>(), &save_args(w)).await? == 1);
    }
    if DB::execute(conn, INSERT_ROW.sql::<DB>(), &save_args(w)[..10]).await? != 1 {
        return Ok(false);
    }
    append::<DB>(conn, w).await?;
    Ok(true)
}

/// Saves the row at `w.version` if it is still at `expected`, with its
/// entry, the history pruned to `w.keep`; `false` otherwise (a conflict).
pub(super) async fn next<DB: Dialect>(
    conn: &mut DB::Connection,
    w: &SagaWrite<'_>,
    expected: i64,
) -> Result<bool, sqlx::Error> {
    if in_one_statement::<DB>() {
        let mut args = [Arg::Int(expected); 17];
        args[..15].copy_from_slice(&save_args(w));
        args[16] = Arg::Int(w.keep);
        return Ok(DB::execute(conn, NEXT.sql::<DB>(), &args).await? == 1);
    }
    let mut args = [Arg::Int(expected); 11];
    args[..10].copy_from_slice(&save_args(w)[..10]);
    if DB::execute(conn, UPDATE_ROW.sql::<DB>(), &args).await? != 1 {
        return Ok(false);
    }
    append::<DB>(conn, w).await?;
    let last_dropped = w.version.saturating_sub(w.keep);
    if last_dropped > 0 {
        let key = args![w.saga_type, w.saga_id, last_dropped];
        DB::execute(conn, PRUNE.sql::<DB>(), key).await?;
    }
    Ok(true)
}

/// The entry, on its own (SQLite).
async fn append<DB: Dialect>(
    conn: &mut DB::Connection,
    w: &SagaWrite<'_>,
) -> Result<(), sqlx::Error> {
    let e = w.entry;
    let args = args![
        w.saga_type,
        w.saga_id,
        w.version,
        e.event_type.as_str(),
        e.message_id.as_str(),
        e.status.as_str(),
        e.at_ms,
        e.note.as_deref(),
    ];
    DB::execute(conn, APPEND.sql::<DB>(), args).await?;
    Ok(())
}

/// Reads an entry from `c`, at its first column.
fn entry<DB: Dialect>(c: &mut Columns<'_, DB>) -> Result<HistoryEntry, sqlx::Error> {
    let version = c.int()?;
    let event_type = c.text()?;
    let message_id = c.text()?;
    let status = c.text()?;
    let status = SagaStatus::parse(&status).ok_or_else(|| {
        sqlx::Error::Decode(format!("history entry {version}: unknown status {status:?}").into())
    })?;
    Ok(HistoryEntry {
        version,
        event_type,
        message_id,
        status,
        at_ms: c.int()?,
        note: c.maybe_text()?,
    })
}

/// Saga `saga_type`/`saga_id`'s entries up to `version` (the row's, as
/// read: a transition committed since is not half shown), oldest first.
pub(super) async fn of_saga<DB: Dialect>(
    conn: &mut DB::Connection,
    saga_type: &str,
    saga_id: &str,
    version: i64,
) -> Result<Vec<HistoryEntry>, sqlx::Error> {
    let rows = DB::fetch_all(
        conn,
        OF_SAGA.sql::<DB>(),
        args![saga_type, saga_id, version],
    )
    .await?;
    rows.iter()
        .map(|row| entry::<DB>(&mut Columns::<DB>::of(row)))
        .collect()
}

/// The entries of the sagas `selected` (a `SELECT saga_type, saga_id
/// FROM consumer_sagas ...` template over `args`) by saga, oldest first.
pub(super) async fn of_sagas<DB: Dialect>(
    pool: &Pool<DB>,
    selected: &str,
    args: &[Arg<'_>],
) -> Result<HashMap<(String, String), Vec<HistoryEntry>>, sqlx::Error> {
    let sql = consumer_core::sql::render::<DB>(
        &[
            "SELECT saga_type, saga_id, ",
            ENTRY,
            " FROM consumer_saga_history WHERE (saga_type, saga_id) IN (",
            selected,
            ") ORDER BY saga_type, saga_id, version",
        ]
        .concat(),
    );
    let mut conn = pool.acquire().await?;
    let rows = DB::fetch_all(&mut conn, AssertSqlSafe(sql).into_sql_str(), args).await?;
    let mut out: HashMap<(String, String), Vec<HistoryEntry>> = HashMap::new();
    for row in &rows {
        let mut c = Columns::<DB>::of(row);
        let key = (c.text()?, c.text()?);
        out.entry(key).or_default().push(entry::<DB>(&mut c)?);
    }
    Ok(out)
}

/// Deletes at most `batch` tombstones of sagas that finished before
/// `older_than_ms` with their history, never one whose compensation
/// failed; how many sagas went.
pub(super) async fn purge_tombstones<DB: Dialect>(
    pool: &Pool<DB>,
    older_than_ms: i64,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    if in_one_statement::<DB>() {
        let mut conn = pool.acquire().await?;
        let row =
            DB::fetch_optional(&mut conn, PURGE.sql::<DB>(), args![older_than_ms, batch]).await?;
        let gone = row.map_or(Ok(0), |row| Columns::<DB>::of(&row).int())?;
        return Ok(u64::try_from(gone).unwrap_or(0));
    }
    let mut tx = pool.begin().await?;
    DB::execute(
        &mut tx,
        PURGE_ENTRIES.sql::<DB>(),
        args![older_than_ms, batch],
    )
    .await?;
    let gone = DB::execute(&mut tx, PURGE_ROWS.sql::<DB>(), args![older_than_ms, batch]).await?;
    tx.commit().await?;
    Ok(gone)
}
