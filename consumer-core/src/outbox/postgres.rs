use sqlx::{AssertSqlSafe, PgConnection, Pool, Postgres, Row as _};

use super::postgres_schedule as schedule;
use super::schedule::{Due, Released};
use super::{NewEvent, Outbox, OutboxDatabase, Row, RowOutcome, statements};
use crate::error::Error;

/// Advisory-lock class of relay aggregate locks (first key of the pair).
const LOCK_CLASS: i32 = 0x6f75_7462; // "outb"

fn sql(template: &str, table: &str) -> AssertSqlSafe<String> {
    // `table` is validated as an identifier when the Outbox is built.
    AssertSqlSafe(template.replace("{t}", table))
}

const ENQUEUE: &str = "WITH v AS ( \
       INSERT INTO {t}_aggregates AS a (aggregate_type, aggregate_id, last_version) VALUES ($2, $3, 1) \
       ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_version = a.last_version + 1 \
       RETURNING last_version) \
     INSERT INTO {t} (id, aggregate_type, aggregate_id, version, event_type, destination, payload, headers, trace_metadata) \
     SELECT $1::uuid, $2, $3, v.last_version, $4, $5, $6::jsonb, $7::jsonb, $8::jsonb FROM v";

/// The claim, O(batch) whatever the backlog: the `{batch}` oldest ready
/// rows, by `seq` through the partial index on unpublished rows, locked
/// `FOR UPDATE SKIP LOCKED` so that concurrent relays take disjoint
/// windows; of those, the rows whose aggregate's advisory lock this relay
/// gets (re-taking a lock it holds is free; rows of aggregates another
/// relay holds stay row-locked, unpublished, until commit). The last
/// column says whether the row's predecessor version is still unpublished:
/// [`hold_gaps`] then holds the row back unless that predecessor is just
/// before it in this batch (it may be waiting for a retry, in another
/// relay's window, or beyond this one), so what goes out is, per
/// aggregate, always the next unpublished version onwards, whatever order
/// `seq` and versions are in.
///
/// Reading only the window (not every unpublished event of each aggregate,
/// with its published history) keeps a round's cost proportional to the
/// batch, and spreads a batch over many aggregates: one publish wave
/// rather than one wave per event of a few deep aggregates.
const CLAIM: &str = "SELECT w.id::text, w.aggregate_type, w.aggregate_id, w.version, w.event_type, \
            w.destination, w.payload, w.headers, w.trace_metadata, w.created_ms, w.attempts, \
            CASE WHEN w.version = 1 THEN false \
                 ELSE EXISTS (SELECT 1 FROM {t} p WHERE p.aggregate_type = w.aggregate_type \
                              AND p.aggregate_id = w.aggregate_id AND p.version = w.version - 1 \
                              AND p.published_at IS NULL) END, \
            w.due_ms \
     FROM ( \
       SELECT e.id, e.aggregate_type, e.aggregate_id, e.version, e.event_type, e.destination, \
              e.payload::text AS payload, e.headers::text AS headers, \
              e.trace_metadata::text AS trace_metadata, \
              (extract(epoch FROM e.created_at) * 1000)::bigint AS created_ms, e.attempts, \
              (extract(epoch FROM e.due_at) * 1000)::bigint AS due_ms \
       FROM {t} e \
       WHERE e.published_at IS NULL AND e.failed_at IS NULL \
         AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= now()) \
         AND NOT EXISTS (SELECT 1 FROM {t}_aggregates a WHERE a.aggregate_type = e.aggregate_type \
                         AND a.aggregate_id = e.aggregate_id AND a.blocked_at IS NOT NULL) \
       ORDER BY e.seq LIMIT {batch} \
       FOR UPDATE OF e SKIP LOCKED \
     ) w \
     WHERE pg_try_advisory_xact_lock($1, hashtext(w.aggregate_type || chr(31) || w.aggregate_id))";

/// Puts claimed rows in aggregate then version order and holds back every
/// row whose predecessor is unpublished (`pending`) and not the row just
/// before it: the relay stops that aggregate there for this round.
fn hold_gaps(mut rows: Vec<(Row, bool)>) -> Vec<Row> {
    rows.sort_by(|(a, _), (b, _)| {
        (&a.aggregate_type, &a.aggregate_id, a.version).cmp(&(
            &b.aggregate_type,
            &b.aggregate_id,
            b.version,
        ))
    });
    let mut out: Vec<Row> = Vec::with_capacity(rows.len());
    for (mut row, pending) in rows {
        let follows_predecessor = out.last().is_some_and(|prev| {
            prev.aggregate_type == row.aggregate_type
                && prev.aggregate_id == row.aggregate_id
                && prev.version == row.version - 1
        });
        row.held |= pending && !follows_predecessor;
        out.push(row);
    }
    out
}

/// The ids are cast once, in an InitPlan: with `id = ANY($1::uuid[])` a
/// cached generic plan that scans the table (one planned while it was
/// small, before any ANALYZE) casts the whole array again for every row,
/// O(rows x batch): 0.4 s per round on a 5 000-row table.
const MARK_PUBLISHED: &str = "UPDATE {t} SET published_at = now(), attempts = attempts + 1, \
     last_error = NULL, next_attempt_at = NULL \
     WHERE id = ANY(ARRAY(SELECT unnest($1::text[])::uuid))";

impl OutboxDatabase for Postgres {
    async fn enqueue(
        outbox: &Outbox,
        conn: &mut PgConnection,
        id: uuid::Uuid,
        event: &NewEvent,
        destination: &str,
        headers: Option<&str>,
        trace: Option<&str>,
    ) -> Result<(), Error> {
        sqlx::query(sql(ENQUEUE, outbox.table()))
            .bind(id.to_string())
            .bind(&event.aggregate_type)
            .bind(&event.aggregate_id)
            .bind(&event.event_type)
            .bind(destination)
            .bind(&event.payload)
            .bind(headers)
            .bind(trace)
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

    async fn schedule(
        outbox: &Outbox,
        conn: &mut PgConnection,
        id: uuid::Uuid,
        event: &NewEvent,
        destination: &str,
        headers: Option<&str>,
        trace: Option<&str>,
        due: Due,
    ) -> Result<(), Error> {
        schedule::schedule(
            outbox,
            conn,
            id,
            event,
            destination,
            headers,
            trace,
            due.millis(),
        )
        .await
    }

    async fn release_due(
        outbox: &Outbox,
        pool: &Pool<Self>,
        batch: i64,
    ) -> Result<Released, Error> {
        schedule::release_due(outbox, pool, batch).await
    }

    fn ddl(table: &str) -> String {
        format!("{DDL}\n{SCHEDULED_DDL}").replace(super::DEFAULT_TABLE, table)
    }

    async fn create_tables(outbox: &Outbox, pool: &Pool<Self>) -> Result<(), Error> {
        let mut conn = pool.acquire().await?;
        // One advisory lock so concurrent starters do not race on CREATE.
        sqlx::query("SELECT pg_advisory_lock($1, 0)")
            .bind(LOCK_CLASS)
            .execute(&mut *conn)
            .await?;
        let result = sqlx::raw_sql(AssertSqlSafe(Self::ddl(outbox.table())))
            .execute(&mut *conn)
            .await;
        sqlx::query("SELECT pg_advisory_unlock($1, 0)")
            .bind(LOCK_CLASS)
            .execute(&mut *conn)
            .await?;
        result?;
        Ok(())
    }

    type ClaimGuard = sqlx::Transaction<'static, Postgres>;

    // Round k's rows stay row-locked and its aggregates advisory-locked
    // until its commit: a claim on a second connection skips them.
    const OVERLAPPING_ROUNDS: bool = true;

    async fn claim(
        outbox: &Outbox,
        pool: &Pool<Self>,
        _holder: &str,
        batch: i64,
    ) -> Result<(Self::ClaimGuard, Vec<Row>), Error> {
        let mut tx = pool.begin().await?;
        // The batch size is spliced in (an integer, so safe) rather than
        // bound: with `LIMIT $1` PostgreSQL's generic plan assumes 10 % of
        // the table, never wins over a custom plan, and the claim is
        // planned again on every round.
        let claim = sql(CLAIM, outbox.table())
            .0
            .replace("{batch}", &batch.max(1).to_string());
        let rows = sqlx::query(AssertSqlSafe(claim))
            .bind(LOCK_CLASS)
            .fetch_all(&mut *tx)
            .await?;
        let mut claimed = Vec::with_capacity(rows.len());
        for r in &rows {
            let row = Row {
                id: r.try_get(0)?,
                aggregate_type: r.try_get(1)?,
                aggregate_id: r.try_get(2)?,
                version: r.try_get(3)?,
                event_type: r.try_get(4)?,
                destination: r.try_get(5)?,
                payload: r.try_get(6)?,
                headers: r.try_get(7)?,
                trace_metadata: r.try_get(8)?,
                created_at_ms: r.try_get(9)?,
                attempts: r.try_get(10)?,
                due_at_ms: r.try_get(12)?,
                held: false,
            };
            claimed.push((row, r.try_get::<bool, _>(11)?));
        }
        Ok((tx, hold_gaps(claimed)))
    }

    async fn finish(
        outbox: &Outbox,
        _pool: &Pool<Self>,
        mut tx: Self::ClaimGuard,
        outcomes: &[(Row, RowOutcome)],
    ) -> Result<(), Error> {
        let table = outbox.table();
        let published: Vec<&str> = outcomes
            .iter()
            .filter(|(_, o)| matches!(o, RowOutcome::Published))
            .map(|(r, _)| r.id.as_str())
            .collect();
        if !published.is_empty() {
            sqlx::query(sql(MARK_PUBLISHED, table))
                .bind(&published)
                .execute(&mut *tx)
                .await?;
        }
        for (row, outcome) in outcomes {
            if let RowOutcome::Failed {
                error,
                retry_after,
                give_up,
            } = outcome
            {
                statements::failed::<Self>(&mut tx, table, row, error, *retry_after, *give_up)
                    .await?;
            }
        }
        // Commit releases the aggregate locks.
        tx.commit().await?;
        Ok(())
    }
}

const DDL: &str = include_str!("../../migrations/postgres/2_outbox.sql");
const SCHEDULED_DDL: &str = include_str!("../../migrations/postgres/4_outbox_scheduled.sql");

#[cfg(test)]
mod tests {
    use super::*;

    fn row(aggregate: &str, version: i64) -> Row {
        Row {
            id: format!("{aggregate}-{version}"),
            aggregate_type: "Order".into(),
            aggregate_id: aggregate.into(),
            version,
            event_type: "OrderPlaced".into(),
            destination: "orders".into(),
            payload: "{}".into(),
            headers: None,
            trace_metadata: None,
            created_at_ms: 0,
            attempts: 0,
            due_at_ms: None,
            held: false,
        }
    }

    fn held(rows: &[Row]) -> Vec<(String, bool)> {
        rows.iter().map(|r| (r.id.clone(), r.held)).collect()
    }

    #[test]
    fn rows_come_out_in_aggregate_then_version_order() {
        let out = hold_gaps(vec![
            (row("b", 4), true),
            (row("a", 2), true),
            (row("b", 3), false),
            (row("a", 1), false),
        ]);
        assert_eq!(
            held(&out),
            [
                ("a-1".into(), false),
                ("a-2".into(), false),
                ("b-3".into(), false),
                ("b-4".into(), false),
            ]
        );
    }

    #[test]
    fn a_row_whose_unpublished_predecessor_is_not_in_the_batch_is_held() {
        let out = hold_gaps(vec![
            // a-4 is unpublished elsewhere (retrying, another relay's window).
            (row("a", 5), true),
            (row("a", 6), true),
            // c-2 is unpublished and c-3 missing from the batch: c-4 waits.
            (row("c", 2), true),
            (row("c", 4), true),
            // d-7 was published: d-8 goes.
            (row("d", 8), false),
        ]);
        assert_eq!(
            held(&out),
            [
                ("a-5".into(), true),
                ("a-6".into(), false),
                ("c-2".into(), true),
                ("c-4".into(), true),
                ("d-8".into(), false),
            ]
        );
    }
}
