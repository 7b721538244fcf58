//! Scheduled events on SQLite: written and cancelled in the caller's
//! transaction, listed, and released into the outbox table once due.
//!
//! SQLite has one writer at a time, so a release (one write transaction)
//! and a cancel never interleave: whichever commits first wins, and the
//! other finds the row gone.

use sqlx::{AssertSqlSafe, Pool, Row as _, Sqlite, SqliteConnection};

use super::schedule::{DueMillis, Released, due_in};
use super::{NewEvent, Outbox};
use crate::error::Error;

fn sql(template: &str, table: &str) -> AssertSqlSafe<String> {
    // `table` is validated as an identifier when the Outbox is built.
    AssertSqlSafe(template.replace("{t}", table))
}

const SCHEDULE: &str = "INSERT INTO {t}_scheduled (id, aggregate_type, aggregate_id, event_type, destination, \
     payload, headers, trace_metadata, created_at, due_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

/// The due rows, taken in the write lock by the statement that deletes
/// them (a read first would have to upgrade its snapshot to write, which
/// fails when another writer committed in between).
const TAKE_DUE: &str = "DELETE FROM {t}_scheduled WHERE seq IN \
       (SELECT seq FROM {t}_scheduled WHERE due_at <= ?1 ORDER BY due_at, seq LIMIT ?2) \
     RETURNING seq, id, aggregate_type, aggregate_id, event_type, destination, payload, headers, \
       trace_metadata, created_at, due_at";

const BUMP: &str = "INSERT INTO {t}_aggregates (aggregate_type, aggregate_id, last_version) VALUES (?1, ?2, 1) \
     ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_version = last_version + 1 \
     RETURNING last_version";

const INSERT: &str = "INSERT INTO {t} (id, aggregate_type, aggregate_id, version, event_type, destination, \
     payload, headers, trace_metadata, created_at, due_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

#[allow(clippy::too_many_arguments)]
pub(super) async fn schedule(
    outbox: &Outbox,
    conn: &mut SqliteConnection,
    id: uuid::Uuid,
    event: &NewEvent,
    destination: &str,
    headers: Option<&str>,
    trace: Option<&str>,
    due: DueMillis,
    now_ms: i64,
) -> Result<(), Error> {
    let due_ms = match due {
        DueMillis::After(ms) => now_ms.saturating_add(ms),
        DueMillis::At(ms) => ms,
    };
    sqlx::query(sql(SCHEDULE, outbox.table()))
        .bind(id.to_string())
        .bind(&event.aggregate_type)
        .bind(&event.aggregate_id)
        .bind(&event.event_type)
        .bind(destination)
        .bind(&event.payload)
        .bind(headers)
        .bind(trace)
        .bind(now_ms)
        .bind(due_ms)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// One taken row, as `TAKE_DUE` returns it.
struct Taken {
    seq: i64,
    id: String,
    aggregate_type: String,
    aggregate_id: String,
    event_type: String,
    destination: String,
    payload: String,
    headers: Option<String>,
    trace_metadata: Option<String>,
    created_at: i64,
    due_at: i64,
}

impl Taken {
    fn read(r: &sqlx::sqlite::SqliteRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            seq: r.try_get(0)?,
            id: r.try_get(1)?,
            aggregate_type: r.try_get(2)?,
            aggregate_id: r.try_get(3)?,
            event_type: r.try_get(4)?,
            destination: r.try_get(5)?,
            payload: r.try_get(6)?,
            headers: r.try_get(7)?,
            trace_metadata: r.try_get(8)?,
            created_at: r.try_get(9)?,
            due_at: r.try_get(10)?,
        })
    }
}

/// Moves up to `batch` due events in one write transaction: each takes
/// its aggregate's next version, in due order (`RETURNING` gives rows in
/// no particular order, so they are sorted first).
pub(super) async fn release_due(
    outbox: &Outbox,
    pool: &Pool<Sqlite>,
    batch: i64,
    now_ms: impl Fn() -> i64,
) -> Result<Released, Error> {
    let table = outbox.table();
    let next_due = || async {
        let min: Option<i64> =
            sqlx::query_scalar(sql("SELECT min(due_at) FROM {t}_scheduled", table))
                .fetch_one(pool)
                .await?;
        Ok::<_, Error>(min.map(|at| at.saturating_sub(now_ms())))
    };
    // Only a read while nothing is due: a relay's idle rounds never take
    // the write lock the application's writers need.
    let before = next_due().await?;
    if before.is_none_or(|ms| ms > 0) {
        return Ok(Released {
            moved: 0,
            next_due_in: due_in(before),
        });
    }
    let mut tx = pool.begin().await?;
    let mut taken = sqlx::query(sql(TAKE_DUE, table))
        .bind(now_ms())
        .bind(batch.max(1))
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(Taken::read)
        .collect::<Result<Vec<_>, _>>()?;
    taken.sort_by_key(|t| (t.due_at, t.seq));
    for t in &taken {
        let version: i64 = sqlx::query_scalar(sql(BUMP, table))
            .bind(&t.aggregate_type)
            .bind(&t.aggregate_id)
            .fetch_one(&mut *tx)
            .await?;
        sqlx::query(sql(INSERT, table))
            .bind(&t.id)
            .bind(&t.aggregate_type)
            .bind(&t.aggregate_id)
            .bind(version)
            .bind(&t.event_type)
            .bind(&t.destination)
            .bind(&t.payload)
            .bind(&t.headers)
            .bind(&t.trace_metadata)
            .bind(t.created_at)
            .bind(t.due_at)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(Released {
        moved: taken.len() as u64,
        next_due_in: due_in(next_due().await?),
    })
}
