use sqlx::{AssertSqlSafe, Pool, Row as _, Sqlite, SqliteConnection};

use super::schedule::{Due, Released};
use super::sqlite_schedule as schedule;
use super::{NewEvent, Outbox, OutboxDatabase, Row, RowOutcome, statements};
use crate::error::Error;

/// How long a relay's lease lasts without renewal.
const LEASE_MS: i64 = 15_000;

fn sql(template: &str, table: &str) -> AssertSqlSafe<String> {
    // `table` is validated as an identifier when the Outbox is built.
    AssertSqlSafe(template.replace("{t}", table))
}

/// The stores' clock, which a test's virtual clock moves (`store::clock`).
fn now_ms() -> i64 {
    crate::store::now_ms()
}

const BUMP: &str = "INSERT INTO {t}_aggregates (aggregate_type, aggregate_id, last_version) VALUES (?1, ?2, 1) \
     ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_version = last_version + 1 \
     RETURNING last_version";

const INSERT: &str = "INSERT INTO {t} (id, aggregate_type, aggregate_id, version, event_type, destination, \
     payload, headers, trace_metadata, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

const LEASE: &str = "INSERT INTO {t}_lease (id, holder, expires_at) VALUES (1, ?1, ?2) \
     ON CONFLICT (id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at \
     WHERE {t}_lease.holder = excluded.holder OR {t}_lease.expires_at < ?3";

const CLAIM: &str = "SELECT e.id, e.aggregate_type, e.aggregate_id, e.version, e.event_type, e.destination, \
       e.payload, e.headers, e.trace_metadata, e.created_at, e.attempts, \
       (e.failed_at IS NOT NULL OR (e.next_attempt_at IS NOT NULL AND e.next_attempt_at > ?2)), \
       e.due_at \
     FROM {t} e WHERE e.published_at IS NULL \
       AND NOT EXISTS (SELECT 1 FROM {t}_aggregates a WHERE a.aggregate_type = e.aggregate_type \
                       AND a.aggregate_id = e.aggregate_id AND a.blocked_at IS NOT NULL) \
     ORDER BY e.seq LIMIT ?1";

impl OutboxDatabase for Sqlite {
    async fn enqueue(
        outbox: &Outbox,
        conn: &mut SqliteConnection,
        id: uuid::Uuid,
        event: &NewEvent,
        destination: &str,
        headers: Option<&str>,
        trace: Option<&str>,
    ) -> Result<(), Error> {
        let version: i64 = sqlx::query_scalar(sql(BUMP, outbox.table()))
            .bind(&event.aggregate_type)
            .bind(&event.aggregate_id)
            .fetch_one(&mut *conn)
            .await?;
        sqlx::query(sql(INSERT, outbox.table()))
            .bind(id.to_string())
            .bind(&event.aggregate_type)
            .bind(&event.aggregate_id)
            .bind(version)
            .bind(&event.event_type)
            .bind(destination)
            .bind(&event.payload)
            .bind(headers)
            .bind(trace)
            .bind(now_ms())
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    async fn schedule(
        outbox: &Outbox,
        conn: &mut SqliteConnection,
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
            now_ms(),
        )
        .await
    }

    async fn release_due(
        outbox: &Outbox,
        pool: &Pool<Self>,
        batch: i64,
    ) -> Result<Released, Error> {
        schedule::release_due(outbox, pool, batch, now_ms).await
    }

    fn ddl(table: &str) -> String {
        format!("{DDL}\n{SCHEDULED_DDL}").replace(super::DEFAULT_TABLE, table)
    }

    /// SQLite has no `ADD COLUMN IF NOT EXISTS`: the scheduling migration's
    /// `ALTER TABLE` runs only when the column is missing, the rest (all
    /// `IF NOT EXISTS`) every time.
    async fn create_tables(outbox: &Outbox, pool: &Pool<Self>) -> Result<(), Error> {
        let table = outbox.table();
        let mut tx = pool.begin().await?;
        sqlx::raw_sql(AssertSqlSafe(DDL.replace(super::DEFAULT_TABLE, table)))
            .execute(&mut *tx)
            .await?;
        let has_due: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pragma_table_info(?1) WHERE name = 'due_at')",
        )
        .bind(table)
        .fetch_one(&mut *tx)
        .await?;
        let scheduled = SCHEDULED_DDL.replace(super::DEFAULT_TABLE, table);
        let scheduled: String = if has_due {
            scheduled
                .lines()
                .filter(|l| !l.starts_with("ALTER TABLE"))
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            scheduled
        };
        sqlx::raw_sql(AssertSqlSafe(scheduled))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    type ClaimGuard = ();

    // The claim reads outside a transaction: until finish marks them, a
    // second claim would take the same rows.
    const OVERLAPPING_ROUNDS: bool = false;

    async fn claim(
        outbox: &Outbox,
        pool: &Pool<Self>,
        holder: &str,
        batch: i64,
    ) -> Result<((), Vec<Row>), Error> {
        let table = outbox.table();
        let now = now_ms();
        let held = sqlx::query(sql(LEASE, table))
            .bind(holder)
            .bind(now + LEASE_MS)
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected();
        if held == 0 {
            return Ok(((), Vec::new())); // another relay holds the lease
        }
        // Read outside a transaction: holding SQLite's write lock while the
        // broker confirms would stall every writer of the application.
        let rows = sqlx::query(sql(CLAIM, table))
            .bind(batch)
            .bind(now)
            .fetch_all(pool)
            .await?;
        let mut claimed = Vec::with_capacity(rows.len());
        for r in &rows {
            claimed.push(Row {
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
                attempts: r
                    .try_get::<i64, _>(10)
                    .map(|a| i32::try_from(a).unwrap_or(i32::MAX))?,
                held: r.try_get(11)?,
                due_at_ms: r.try_get(12)?,
            });
        }
        Ok(((), claimed))
    }

    async fn finish(
        outbox: &Outbox,
        pool: &Pool<Self>,
        _guard: (),
        outcomes: &[(Row, RowOutcome)],
    ) -> Result<(), Error> {
        let table = outbox.table();
        let mut tx = pool.begin().await?;
        let done = now_ms();
        for (row, outcome) in outcomes {
            match outcome {
                RowOutcome::Published => {
                    sqlx::query(sql(
                        "UPDATE {t} SET published_at = ?2, attempts = attempts + 1, last_error = NULL, \
                         next_attempt_at = NULL WHERE id = ?1",
                        table,
                    ))
                    .bind(&row.id)
                    .bind(done)
                    .execute(&mut *tx)
                    .await?;
                }
                RowOutcome::Failed {
                    error,
                    retry_after,
                    give_up,
                } => {
                    statements::failed::<Self>(&mut tx, table, row, error, *retry_after, *give_up)
                        .await?;
                }
                RowOutcome::Skipped => {}
            }
        }
        tx.commit().await?;
        Ok(())
    }
}

const DDL: &str = include_str!("../../migrations/sqlite/2_outbox.sql");
const SCHEDULED_DDL: &str = include_str!("../../migrations/sqlite/4_outbox_scheduled.sql");
