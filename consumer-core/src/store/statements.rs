//! The store's statements, written once for every database on the
//! [SQL seam](crate::sql): the claim, the attempt records, the dead-letter
//! marks and table, and the retention purge.

use sqlx::Pool;

use super::{FailureRecord, LetterRow, MIGRATIONS_TABLE, from_ms};
use crate::error::Error;
use crate::sql::{Columns, Dialect, Migrations, Statement, args};

static CLAIM: Statement = Statement::new(
    "INSERT INTO consumer_processed (handler, key, message_id, processed_at) \
     VALUES ($1, $2, $3, {now}) ON CONFLICT (handler, key) DO NOTHING",
);

static RECORD_FAILURE: Statement = Statement::new(
    "INSERT INTO consumer_attempts \
       (handler, message_id, attempts, first_failure_at, last_failure_at, last_error) \
     VALUES ($1, $2, 1, {now}, {now}, $3) \
     ON CONFLICT (handler, message_id) DO UPDATE \
       SET attempts = consumer_attempts.attempts + 1, \
           last_failure_at = excluded.last_failure_at, last_error = excluded.last_error \
     RETURNING attempts, {ms first_failure_at}",
);

static MARK_DEAD_LETTERED: Statement = Statement::new(
    "INSERT INTO consumer_attempts \
       (handler, message_id, attempts, first_failure_at, last_failure_at, last_error, dead_lettered_at) \
     VALUES ($1, $2, 1, {now}, {now}, $3, {now}) \
     ON CONFLICT (handler, message_id) DO UPDATE SET dead_lettered_at = excluded.dead_lettered_at \
     WHERE consumer_attempts.dead_lettered_at IS NULL",
);

static DEAD_LETTERED: Statement = Statement::new(
    "SELECT dead_lettered_at IS NOT NULL FROM consumer_attempts \
     WHERE handler = $1 AND message_id = $2",
);

static INSERT_DEAD_LETTER: Statement = Statement::new(
    "INSERT INTO consumer_dead_letters \
       (handler, message_id, kind, error, causes, attempts, first_failure_at, last_failure_at, \
        destination, position, partition_key, headers, payload, refusal, stored_at) \
     VALUES ($1, $2, $3, $4, {$5::jsonb}, $6, {at $7}, {at $8}, $9, $10, $11, {$12::jsonb}, $13, $14, {now})",
);

static CLEAR_FAILURES: Statement =
    Statement::new("DELETE FROM consumer_attempts WHERE handler = $1 AND message_id = $2");

static PURGE_PROCESSED: Statement = Statement::new(
    "DELETE FROM consumer_processed WHERE (handler, key) IN (SELECT handler, key \
     FROM consumer_processed WHERE processed_at < {at $1} LIMIT $2)",
);

static PURGE_ATTEMPTS: Statement = Statement::new(
    "DELETE FROM consumer_attempts WHERE (handler, message_id) IN (SELECT handler, message_id \
     FROM consumer_attempts WHERE last_failure_at < {at $1} LIMIT $2)",
);

/// Creates or upgrades the store's tables (and the outbox's).
pub(super) async fn migrate<DB: Dialect>(pool: &Pool<DB>) -> Result<(), Error> {
    let migrations = Migrations {
        postgres: sqlx::migrate!("./migrations/postgres"),
        sqlite: sqlx::migrate!("./migrations/sqlite"),
        table: MIGRATIONS_TABLE,
        // Version 5 (consumer_sagas) moved to consumer-saga's own
        // migrations: databases that ran it here keep it, and may.
        ignore_missing: true,
    };
    DB::migrate(pool, migrations).await
}

/// Claims `key` for `handler`; whether the claim is fresh.
pub(super) async fn claim<DB: Dialect>(
    conn: &mut DB::Connection,
    handler: &str,
    key: &str,
    message_id: &str,
) -> Result<bool, sqlx::Error> {
    let touched = DB::execute(conn, CLAIM.sql::<DB>(), args![handler, key, message_id]).await?;
    Ok(touched == 1)
}

/// Counts one more failed attempt.
pub(super) async fn record_failure<DB: Dialect>(
    pool: &Pool<DB>,
    handler: &str,
    message_id: &str,
    error: &str,
) -> Result<FailureRecord, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let sql = RECORD_FAILURE.sql::<DB>();
    let row = DB::fetch_optional(&mut conn, sql, args![handler, message_id, error])
        .await?
        .ok_or(sqlx::Error::RowNotFound)?;
    let mut columns = Columns::<DB>::of(&row);
    let attempts = columns.int()?;
    let first_ms = columns.int()?;
    Ok(FailureRecord {
        attempts: u32::try_from(attempts).unwrap_or(1),
        first_failure: from_ms(first_ms),
    })
}

/// Marks the message dead-lettered; whether it was not before.
pub(super) async fn mark_dead_lettered<DB: Dialect>(
    conn: &mut DB::Connection,
    handler: &str,
    message_id: &str,
    error: &str,
) -> Result<bool, sqlx::Error> {
    let sql = MARK_DEAD_LETTERED.sql::<DB>();
    Ok(DB::execute(conn, sql, args![handler, message_id, error]).await? == 1)
}

/// Whether the message is marked dead-lettered.
pub(super) async fn dead_lettered<DB: Dialect>(
    pool: &Pool<DB>,
    handler: &str,
    message_id: &str,
) -> Result<bool, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let sql = DEAD_LETTERED.sql::<DB>();
    match DB::fetch_optional(&mut conn, sql, args![handler, message_id]).await? {
        Some(row) => Columns::<DB>::of(&row).boolean(),
        None => Ok(false),
    }
}

/// Writes `row` to the dead-letter table, in the caller's transaction.
pub async fn insert_dead_letter<DB: Dialect>(
    conn: &mut DB::Connection,
    row: &LetterRow<'_>,
) -> Result<(), sqlx::Error> {
    DB::execute(conn, INSERT_DEAD_LETTER.sql::<DB>(), &row.args()).await?;
    Ok(())
}

/// Forgets the message's failures.
pub(super) async fn clear_failures<DB: Dialect>(
    pool: &Pool<DB>,
    handler: &str,
    message_id: &str,
) -> Result<(), sqlx::Error> {
    let mut conn = pool.acquire().await?;
    DB::execute(
        &mut conn,
        CLEAR_FAILURES.sql::<DB>(),
        args![handler, message_id],
    )
    .await?;
    Ok(())
}

/// Deletes at most `batch` dedup rows and `batch` attempt rows older than
/// `older_than_ms`; the larger count.
pub(super) async fn purge_batch<DB: Dialect>(
    pool: &Pool<DB>,
    older_than_ms: i64,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let processed = DB::execute(
        &mut conn,
        PURGE_PROCESSED.sql::<DB>(),
        args![older_than_ms, batch],
    )
    .await?;
    let attempts = DB::execute(
        &mut conn,
        PURGE_ATTEMPTS.sql::<DB>(),
        args![older_than_ms, batch],
    )
    .await?;
    Ok(processed.max(attempts))
}
