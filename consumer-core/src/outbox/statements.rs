//! The outbox's statements written once for every database on the
//! [SQL seam](crate::sql): listing and cancelling scheduled events, a
//! failed row's retry and its aggregate's block, the purge, and what waits
//! in the table. What each database writes its own way (the enqueue, the
//! claim, the release of due events) is in `postgres*.rs` and `sqlite*.rs`.

use sqlx::{AssertSqlSafe, Pool, SqlSafeStr, SqlStr};

use super::schedule::ScheduledEvent;
use super::{Backlog, Outbox, Row};
use crate::error::Error;
use crate::sql::{Columns, Dialect, args, render};

/// `template` on `table` (validated as an identifier when the [`Outbox`]
/// was built), rendered for `DB`.
pub(super) fn sql<DB: Dialect>(template: &str, table: &str) -> SqlStr {
    AssertSqlSafe(render::<DB>(&template.replace("{t}", table))).into_sql_str()
}

const LISTED: &str = "SELECT {id::text}, aggregate_type, aggregate_id, event_type, destination, \
     {ms created_at}, {ms due_at} FROM {t}_scheduled";

fn listed<DB: Dialect>(rows: &[DB::Row]) -> Result<Vec<ScheduledEvent>, Error> {
    rows.iter()
        .map(|r| {
            let mut c = Columns::<DB>::of(r);
            let id = c.text()?;
            ScheduledEvent::from_columns(
                &id,
                c.text()?,
                c.text()?,
                c.text()?,
                c.text()?,
                c.int()?,
                c.int()?,
            )
        })
        .collect()
}

/// Deletes a scheduled event not yet released; whether there was one.
pub(super) async fn cancel<DB: Dialect>(
    outbox: &Outbox,
    conn: &mut DB::Connection,
    id: uuid::Uuid,
) -> Result<bool, Error> {
    let sql = sql::<DB>(
        "DELETE FROM {t}_scheduled WHERE id = {$1::uuid}",
        outbox.table(),
    );
    Ok(DB::execute(conn, sql, args![id.to_string().as_str()]).await? == 1)
}

/// One aggregate's scheduled events, in due order.
pub(super) async fn scheduled_for<DB: Dialect>(
    outbox: &Outbox,
    conn: &mut DB::Connection,
    aggregate_type: &str,
    aggregate_id: &str,
) -> Result<Vec<ScheduledEvent>, Error> {
    let template =
        format!("{LISTED} WHERE aggregate_type = $1 AND aggregate_id = $2 ORDER BY due_at, seq");
    let sql = sql::<DB>(&template, outbox.table());
    let rows = DB::fetch_all(conn, sql, args![aggregate_type, aggregate_id]).await?;
    listed::<DB>(&rows)
}

/// The `limit` scheduled events due first.
pub(super) async fn scheduled<DB: Dialect>(
    outbox: &Outbox,
    pool: &Pool<DB>,
    limit: i64,
) -> Result<Vec<ScheduledEvent>, Error> {
    let sql = sql::<DB>(
        &format!("{LISTED} ORDER BY due_at, seq LIMIT $1"),
        outbox.table(),
    );
    let mut conn = pool.acquire().await?;
    let rows = DB::fetch_all(&mut conn, sql, args![limit.max(0)]).await?;
    listed::<DB>(&rows)
}

/// Makes an aggregate's failed events eligible again and unblocks it; how
/// many events.
pub(super) async fn retry_failed<DB: Dialect>(
    outbox: &Outbox,
    pool: &Pool<DB>,
    aggregate_type: &str,
    aggregate_id: &str,
) -> Result<u64, Error> {
    let table = outbox.table();
    let mut tx = pool.begin().await?;
    let retried = sql::<DB>(
        "UPDATE {t} SET failed_at = NULL, next_attempt_at = NULL, attempts = 0 \
         WHERE aggregate_type = $1 AND aggregate_id = $2 AND failed_at IS NOT NULL \
         AND published_at IS NULL",
        table,
    );
    let n = DB::execute(&mut tx, retried, args![aggregate_type, aggregate_id]).await?;
    let unblocked = sql::<DB>(
        "UPDATE {t}_aggregates SET blocked_at = NULL WHERE aggregate_type = $1 AND aggregate_id = $2",
        table,
    );
    DB::execute(&mut tx, unblocked, args![aggregate_type, aggregate_id]).await?;
    tx.commit().await?;
    Ok(n)
}

/// Deletes at most `batch` events published before `cutoff_ms`.
pub(super) async fn purge_batch<DB: Dialect>(
    outbox: &Outbox,
    pool: &Pool<DB>,
    cutoff_ms: i64,
    batch: i64,
) -> Result<u64, Error> {
    let sql = sql::<DB>(
        "DELETE FROM {t} WHERE seq IN (SELECT seq FROM {t} WHERE published_at IS NOT NULL \
         AND published_at < {at $1} LIMIT $2)",
        outbox.table(),
    );
    let mut conn = pool.acquire().await?;
    Ok(DB::execute(&mut conn, sql, args![cutoff_ms, batch]).await?)
}

/// Unpublished events, and scheduled ones that have fallen due.
pub(super) async fn pending<DB: Dialect>(outbox: &Outbox, pool: &Pool<DB>) -> Result<i64, Error> {
    let sql = sql::<DB>(
        "SELECT (SELECT count(*) FROM {t} WHERE published_at IS NULL) \
              + (SELECT count(*) FROM {t}_scheduled WHERE due_at <= {now})",
        outbox.table(),
    );
    let mut conn = pool.acquire().await?;
    let row = DB::fetch_optional(&mut conn, sql, &[]).await?;
    let row = row.ok_or(sqlx::Error::RowNotFound)?;
    Ok(Columns::<DB>::of(&row).int()?)
}

/// What waits in the table, for the relay's gauges.
pub(super) async fn backlog<DB: Dialect>(
    outbox: &Outbox,
    pool: &Pool<DB>,
) -> Result<Backlog, Error> {
    // A released event waits from when it fell due, not from when its
    // transaction wrote it.
    let sql = sql::<DB>(
        "SELECT \
           (SELECT count(*) FROM {t} WHERE published_at IS NULL), \
           (SELECT {ms min(coalesce(due_at, created_at))} FROM {t} WHERE published_at IS NULL), \
           (SELECT count(*) FROM {t}_scheduled WHERE due_at > {now}), \
           (SELECT count(*) FROM {t}_scheduled WHERE due_at <= {now}), \
           (SELECT {ms min(due_at)} FROM {t}_scheduled WHERE due_at <= {now}), \
           (SELECT count(*) FROM {t}_aggregates WHERE blocked_at IS NOT NULL)",
        outbox.table(),
    );
    let mut conn = pool.acquire().await?;
    let row = DB::fetch_optional(&mut conn, sql, &[]).await?;
    let row = row.ok_or(sqlx::Error::RowNotFound)?;
    let mut c = Columns::<DB>::of(&row);
    let (pending, oldest_ms) = (c.int()?, c.maybe_int()?);
    let (scheduled, due, oldest_due_ms) = (c.int()?, c.int()?, c.maybe_int()?);
    Ok(Backlog {
        pending: pending + due,
        oldest_ms: oldest_ms.into_iter().chain(oldest_due_ms).min(),
        blocked: c.int()?,
        scheduled,
    })
}

/// A retry delay in milliseconds, at most ten years (a delay neither
/// database's time arithmetic overflows on).
fn retry_millis(after: std::time::Duration) -> i64 {
    const TEN_YEARS_MS: u128 = 10 * 365 * 24 * 3600 * 1000;
    i64::try_from(after.as_millis().min(TEN_YEARS_MS)).unwrap_or(i64::MAX)
}

/// Counts one more attempt of a claimed row that did not go out: due again
/// `retry_ms` from now, or failed for good.
async fn mark_failed<DB: Dialect>(
    conn: &mut DB::Connection,
    table: &str,
    id: &str,
    error: &str,
    retry_ms: i64,
    give_up: bool,
) -> Result<(), Error> {
    let sql = sql::<DB>(
        "UPDATE {t} SET attempts = attempts + 1, last_error = $2, next_attempt_at = {later $3}, \
         failed_at = CASE WHEN $4 THEN {now} ELSE NULL END WHERE id = {$1::uuid}",
        table,
    );
    DB::execute(conn, sql, args![id, error, retry_ms, give_up]).await?;
    Ok(())
}

/// Blocks an aggregate whose event failed for good: nothing behind it goes
/// out until [`Outbox::retry_failed`].
async fn block<DB: Dialect>(
    conn: &mut DB::Connection,
    table: &str,
    aggregate_type: &str,
    aggregate_id: &str,
) -> Result<(), Error> {
    let sql = sql::<DB>(
        "UPDATE {t}_aggregates SET blocked_at = {now} WHERE aggregate_type = $1 AND aggregate_id = $2",
        table,
    );
    DB::execute(conn, sql, args![aggregate_type, aggregate_id]).await?;
    Ok(())
}

/// Records a claimed row that did not go out: one more attempt, due again
/// after `retry_after`, or (`give_up`) failed for good with its aggregate
/// blocked. The relay's finish on either database.
pub(super) async fn failed<DB: Dialect>(
    conn: &mut DB::Connection,
    table: &str,
    row: &Row,
    error: &str,
    retry_after: std::time::Duration,
    give_up: bool,
) -> Result<(), Error> {
    let retry_ms = retry_millis(retry_after);
    mark_failed::<DB>(conn, table, &row.id, error, retry_ms, give_up).await?;
    if give_up {
        block::<DB>(conn, table, &row.aggregate_type, &row.aggregate_id).await?;
    }
    Ok(())
}
