//! Scheduled events on PostgreSQL: written and cancelled in the caller's
//! transaction, listed, and released into the outbox table once due.

use std::collections::{BTreeMap, HashSet};

use sqlx::{AssertSqlSafe, PgConnection, Pool, Postgres, Row as _};

use super::schedule::{DueMillis, Released, due_in};
use super::{NewEvent, Outbox};
use crate::error::Error;

/// Advisory-lock class of the release of scheduled events (the second key
/// is the table's hash): one relay releases at a time, so releases give
/// versions in due order.
const RELEASE_CLASS: i32 = 0x6f75_7473; // "outs"

fn sql(template: &str, table: &str) -> AssertSqlSafe<String> {
    // `table` is validated as an identifier when the Outbox is built.
    AssertSqlSafe(template.replace("{t}", table))
}

/// Writes the event into the scheduled table, and makes sure its
/// aggregate's version row exists (without locking it, or bumping it), so
/// the release can lock that row with `SKIP LOCKED` instead of waiting on
/// a writer that is creating it. `$9` says whether `$10` is a delay from
/// now (the database's clock: `clock_timestamp()`, not the transaction's
/// start) or Unix milliseconds.
const SCHEDULE: &str = "WITH a AS ( \
       INSERT INTO {t}_aggregates (aggregate_type, aggregate_id, last_version) VALUES ($2, $3, 0) \
       ON CONFLICT (aggregate_type, aggregate_id) DO NOTHING) \
     INSERT INTO {t}_scheduled (id, aggregate_type, aggregate_id, event_type, destination, payload, \
       headers, trace_metadata, due_at) \
     VALUES ($1::uuid, $2, $3, $4, $5, $6::jsonb, $7::jsonb, $8::jsonb, \
       CASE WHEN $9 THEN clock_timestamp() ELSE timestamptz 'epoch' END \
         + $10::bigint * interval '1 millisecond')";

/// Milliseconds until the earliest scheduled event falls due (negative
/// when overdue, NULL when nothing is scheduled), rounded up so a timer
/// set by it never fires before.
const NEXT_DUE: &str = "SELECT ceil(extract(epoch FROM (min(due_at) - clock_timestamp())) * 1000)::bigint \
     FROM {t}_scheduled";

/// The release's window: the events due first, in due order, unlocked.
const DUE: &str = "SELECT seq, aggregate_type, aggregate_id FROM {t}_scheduled WHERE due_at <= now() \
     ORDER BY due_at, seq LIMIT $1";

/// Of the window, the rows no cancelling transaction holds.
const LOCK_DUE: &str = "SELECT seq FROM {t}_scheduled WHERE seq = ANY($1) FOR UPDATE SKIP LOCKED";

/// The version rows of the window's aggregates that no writer holds.
const LOCK_AGGREGATES: &str = "SELECT a.aggregate_type, a.aggregate_id, a.last_version \
     FROM {t}_aggregates a JOIN unnest($1::text[], $2::text[]) AS u(t, i) \
       ON a.aggregate_type = u.t AND a.aggregate_id = u.i \
     FOR UPDATE OF a SKIP LOCKED";

/// Version rows that do not exist at all (a scheduled row written by other
/// means): created here, locked by the insert.
const CREATE_AGGREGATES: &str = "INSERT INTO {t}_aggregates (aggregate_type, aggregate_id, last_version) \
     SELECT u.t, u.i, 0 FROM unnest($1::text[], $2::text[]) AS u(t, i) \
     WHERE NOT EXISTS (SELECT 1 FROM {t}_aggregates a WHERE a.aggregate_type = u.t AND a.aggregate_id = u.i) \
     ON CONFLICT (aggregate_type, aggregate_id) DO NOTHING \
     RETURNING aggregate_type, aggregate_id, last_version";

const BUMP: &str = "UPDATE {t}_aggregates a SET last_version = u.v \
     FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(t, i, v) \
     WHERE a.aggregate_type = u.t AND a.aggregate_id = u.i";

/// Moves the rows, in the order given: `seq` is assigned as they are
/// inserted, so within an aggregate it follows the versions, as the
/// claim expects.
const MOVE: &str = "WITH moved AS ( \
       DELETE FROM {t}_scheduled s USING unnest($1::bigint[], $2::bigint[]) WITH ORDINALITY AS u(seq, version, ord) \
       WHERE s.seq = u.seq \
       RETURNING s.id, s.aggregate_type, s.aggregate_id, u.version, s.event_type, s.destination, s.payload, \
         s.headers, s.trace_metadata, s.created_at, s.due_at, u.ord) \
     INSERT INTO {t} (id, aggregate_type, aggregate_id, version, event_type, destination, payload, headers, \
       trace_metadata, created_at, due_at) \
     SELECT id, aggregate_type, aggregate_id, version, event_type, destination, payload, headers, \
       trace_metadata, created_at, due_at FROM moved ORDER BY ord";

#[allow(clippy::too_many_arguments)]
pub(super) async fn schedule(
    outbox: &Outbox,
    conn: &mut PgConnection,
    id: uuid::Uuid,
    event: &NewEvent,
    destination: &str,
    headers: Option<&str>,
    trace: Option<&str>,
    due: DueMillis,
) -> Result<(), Error> {
    let (relative, ms) = match due {
        DueMillis::After(ms) => (true, ms),
        DueMillis::At(ms) => (false, ms),
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
        .bind(relative)
        .bind(ms)
        .execute(&mut *conn)
        .await?;
    if let Some(channel) = outbox.notify_channel() {
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(channel)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// An aggregate: its type and id.
type Aggregate = (String, String);

/// One due row of the release's window.
struct DueRow {
    seq: i64,
    aggregate: Aggregate,
}

/// Of the window (in due order), the rows to move now: per aggregate,
/// those before its first row that is held (being cancelled) or whose
/// version row a writer holds. A later event of an aggregate never moves
/// before an earlier one, so versions follow due order.
fn movable(window: Vec<DueRow>, locked: &HashSet<i64>) -> Vec<DueRow> {
    let mut stopped = HashSet::new();
    let mut out = Vec::with_capacity(window.len());
    for row in window {
        if stopped.contains(&row.aggregate) {
            continue;
        }
        if locked.contains(&row.seq) {
            out.push(row);
        } else {
            stopped.insert(row.aggregate);
        }
    }
    out
}

/// Each row's version: its aggregate's last version plus its rank among
/// the aggregate's rows here. Rows of aggregates not in `last` (their
/// version row is held by a writer) wait for the next release.
fn number(
    rows: Vec<DueRow>,
    mut last: BTreeMap<Aggregate, i64>,
) -> (Vec<(i64, i64)>, BTreeMap<Aggregate, i64>) {
    let mut moves = Vec::with_capacity(rows.len());
    for row in rows {
        if let Some(v) = last.get_mut(&row.aggregate) {
            *v += 1;
            moves.push((row.seq, *v));
        }
    }
    (moves, last)
}

async fn versions(
    tx: &mut PgConnection,
    table: &str,
    rows: &[DueRow],
) -> Result<BTreeMap<Aggregate, i64>, Error> {
    let aggregates: Vec<&Aggregate> = {
        let mut seen = HashSet::new();
        rows.iter()
            .map(|r| &r.aggregate)
            .filter(|a| seen.insert(*a))
            .collect()
    };
    let types: Vec<&str> = aggregates.iter().map(|a| a.0.as_str()).collect();
    let ids: Vec<&str> = aggregates.iter().map(|a| a.1.as_str()).collect();
    let mut last = BTreeMap::new();
    for statement in [LOCK_AGGREGATES, CREATE_AGGREGATES] {
        for r in sqlx::query(sql(statement, table))
            .bind(&types)
            .bind(&ids)
            .fetch_all(&mut *tx)
            .await?
        {
            last.insert((r.try_get(0)?, r.try_get(1)?), r.try_get::<i64, _>(2)?);
        }
        if last.len() == aggregates.len() {
            break;
        }
    }
    Ok(last)
}

/// The rows of the window that may move now, in due order (see
/// [`movable`]).
async fn window(tx: &mut PgConnection, table: &str, batch: i64) -> Result<Vec<DueRow>, Error> {
    let mut window = Vec::new();
    for r in sqlx::query(sql(DUE, table))
        .bind(batch.max(1))
        .fetch_all(&mut *tx)
        .await?
    {
        window.push(DueRow {
            seq: r.try_get(0)?,
            aggregate: (r.try_get(1)?, r.try_get(2)?),
        });
    }
    let seqs: Vec<i64> = window.iter().map(|r| r.seq).collect();
    let locked: HashSet<i64> = sqlx::query_scalar(sql(LOCK_DUE, table))
        .bind(&seqs)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
    Ok(movable(window, &locked))
}

/// Sets each aggregate's version row to its new last version, then moves
/// the rows (`seq`, version) into the outbox table, in that order.
async fn bump_and_move(
    tx: &mut PgConnection,
    table: &str,
    moves: &[(i64, i64)],
    last: &BTreeMap<Aggregate, i64>,
) -> Result<(), Error> {
    let types: Vec<&str> = last.keys().map(|(t, _)| t.as_str()).collect();
    let ids: Vec<&str> = last.keys().map(|(_, i)| i.as_str()).collect();
    let tops: Vec<i64> = last.values().copied().collect();
    sqlx::query(sql(BUMP, table))
        .bind(&types)
        .bind(&ids)
        .bind(&tops)
        .execute(&mut *tx)
        .await?;
    let (seqs, versions): (Vec<i64>, Vec<i64>) = moves.iter().copied().unzip();
    sqlx::query(sql(MOVE, table))
        .bind(&seqs)
        .bind(&versions)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Milliseconds until the earliest scheduled event falls due.
async fn next_due(pool: &Pool<Postgres>, table: &str) -> Result<Option<i64>, Error> {
    Ok(sqlx::query_scalar(sql(NEXT_DUE, table))
        .fetch_one(pool)
        .await?)
}

/// Moves up to `batch` due events in one transaction: the release lock
/// (one releaser at a time), the window and its row locks, the version
/// rows, then one statement that bumps the versions and one that moves the
/// rows. Idle (nothing due), it only reads the earliest due time.
pub(super) async fn release_due(
    outbox: &Outbox,
    pool: &Pool<Postgres>,
    batch: i64,
) -> Result<Released, Error> {
    let table = outbox.table();
    let before = next_due(pool, table).await?;
    let nothing = Released {
        moved: 0,
        next_due_in: due_in(before),
    };
    if before.is_none_or(|ms| ms > 0) {
        return Ok(nothing);
    }
    let mut tx = pool.begin().await?;
    let ours: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1, hashtext($2))")
        .bind(RELEASE_CLASS)
        .bind(table)
        .fetch_one(&mut *tx)
        .await?;
    if !ours {
        tx.rollback().await?;
        return Ok(nothing);
    }
    let rows = window(&mut tx, table, batch).await?;
    let last = versions(&mut tx, table, &rows).await?;
    let (moves, last) = number(rows, last);
    if !moves.is_empty() {
        bump_and_move(&mut tx, table, &moves, &last).await?;
    }
    // Commit releases the version rows: writers of those aggregates go on.
    tx.commit().await?;
    Ok(Released {
        moved: moves.len() as u64,
        next_due_in: due_in(next_due(pool, table).await?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: i64, aggregate: &str) -> DueRow {
        DueRow {
            seq,
            aggregate: ("Order".into(), aggregate.into()),
        }
    }

    #[test]
    fn an_aggregate_stops_at_its_first_held_row() {
        let window = vec![
            row(1, "a"),
            row(2, "b"),
            row(3, "a"),
            row(4, "b"),
            row(5, "c"),
        ];
        // 2 (b) is being cancelled: b's later row 4 must not overtake it.
        let locked = HashSet::from([1, 3, 4, 5]);
        let seqs: Vec<i64> = movable(window, &locked).iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [1, 3, 5]);
    }

    #[test]
    fn versions_follow_due_order_and_skip_aggregates_held_by_writers() {
        let last = BTreeMap::from([
            (("Order".to_owned(), "a".to_owned()), 7),
            (("Order".to_owned(), "c".to_owned()), 0),
        ]);
        let (moves, last) = number(
            vec![row(1, "a"), row(2, "b"), row(3, "a"), row(5, "c")],
            last,
        );
        assert_eq!(moves, [(1, 8), (3, 9), (5, 1)]);
        assert_eq!(last[&("Order".to_owned(), "a".to_owned())], 9);
    }
}
