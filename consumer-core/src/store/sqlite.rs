use sqlx::{Pool, Row, Sqlite, SqliteConnection};

use super::database::sealed;
use super::{FailureRecord, LetterRow, MIGRATIONS_TABLE, StoreDatabase, from_ms, now_ms};
use crate::error::Error;

impl sealed::Sealed for Sqlite {}

impl StoreDatabase for Sqlite {
    async fn migrate(pool: &Pool<Self>) -> Result<(), Error> {
        let mut migrator = sqlx::migrate!("./migrations/sqlite");
        migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
        // Version 5 (consumer_sagas) moved to consumer-saga's own
        // migrations: databases that ran it here keep it, and may.
        migrator.set_ignore_missing(true);
        migrator.run(pool).await?;
        Ok(())
    }

    async fn claim(
        conn: &mut SqliteConnection,
        handler: &str,
        key: &str,
        message_id: &str,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(
            "INSERT INTO consumer_processed (handler, key, message_id, processed_at) \
             VALUES (?1, ?2, ?3, ?4) ON CONFLICT (handler, key) DO NOTHING",
        )
        .bind(handler)
        .bind(key)
        .bind(message_id)
        .bind(now_ms())
        .execute(conn)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn claim_many(
        conn: &mut SqliteConnection,
        handler: &str,
        claims: &[(&str, &str)],
    ) -> Result<Vec<bool>, sqlx::Error> {
        let now = now_ms();
        let mut fresh = std::collections::HashSet::new();
        // SQLite binds at most 32 766 parameters per statement; 4 per row.
        for chunk in claims.chunks(1000) {
            let mut q = sqlx::QueryBuilder::<Sqlite>::new(
                "INSERT INTO consumer_processed (handler, key, message_id, processed_at) ",
            );
            q.push_values(chunk, |mut row, (key, id)| {
                row.push_bind(handler)
                    .push_bind(*key)
                    .push_bind(*id)
                    .push_bind(now);
            });
            q.push(" ON CONFLICT (handler, key) DO NOTHING RETURNING key");
            let keys: Vec<String> = q.build_query_scalar().fetch_all(&mut *conn).await?;
            fresh.extend(keys);
        }
        Ok(claims.iter().map(|(k, _)| fresh.contains(*k)).collect())
    }

    async fn record_failure(
        pool: &Pool<Self>,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> Result<FailureRecord, sqlx::Error> {
        let row = sqlx::query(
            "INSERT INTO consumer_attempts \
               (handler, message_id, attempts, first_failure_at, last_failure_at, last_error) \
             VALUES (?1, ?2, 1, ?4, ?4, ?3) \
             ON CONFLICT (handler, message_id) DO UPDATE \
               SET attempts = consumer_attempts.attempts + 1, \
                   last_failure_at = excluded.last_failure_at, last_error = excluded.last_error \
             RETURNING attempts, first_failure_at",
        )
        .bind(handler)
        .bind(message_id)
        .bind(error)
        .bind(now_ms())
        .fetch_one(pool)
        .await?;
        let attempts: i64 = row.try_get(0)?;
        let first_ms: i64 = row.try_get(1)?;
        Ok(FailureRecord {
            attempts: u32::try_from(attempts).unwrap_or(1),
            first_failure: from_ms(first_ms),
        })
    }

    async fn mark_dead_lettered(
        conn: &mut SqliteConnection,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(
            "INSERT INTO consumer_attempts \
               (handler, message_id, attempts, first_failure_at, last_failure_at, last_error, dead_lettered_at) \
             VALUES (?1, ?2, 1, ?4, ?4, ?3, ?4) \
             ON CONFLICT (handler, message_id) DO UPDATE SET dead_lettered_at = excluded.dead_lettered_at \
             WHERE consumer_attempts.dead_lettered_at IS NULL",
        )
        .bind(handler)
        .bind(message_id)
        .bind(error)
        .bind(now_ms())
        .execute(conn)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn dead_lettered(
        pool: &Pool<Self>,
        handler: &str,
        message_id: &str,
    ) -> Result<bool, sqlx::Error> {
        let marked: Option<bool> = sqlx::query_scalar(
            "SELECT dead_lettered_at IS NOT NULL FROM consumer_attempts \
             WHERE handler = ?1 AND message_id = ?2",
        )
        .bind(handler)
        .bind(message_id)
        .fetch_optional(pool)
        .await?;
        Ok(marked.unwrap_or(false))
    }

    async fn insert_dead_letter(
        conn: &mut SqliteConnection,
        row: &LetterRow<'_>,
    ) -> Result<(), sqlx::Error> {
        row.bind(sqlx::query(
            "INSERT INTO consumer_dead_letters \
               (handler, message_id, kind, error, causes, attempts, first_failure_at, \
                last_failure_at, destination, position, partition_key, headers, payload, \
                refusal, stored_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        ))
        .bind(now_ms())
        .execute(conn)
        .await?;
        Ok(())
    }

    async fn clear_failures(
        pool: &Pool<Self>,
        handler: &str,
        message_id: &str,
    ) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM consumer_attempts WHERE handler = ?1 AND message_id = ?2")
            .bind(handler)
            .bind(message_id)
            .execute(pool)
            .await?;
        Ok(())
    }

    async fn purge_batch(
        pool: &Pool<Self>,
        older_than_ms: i64,
        batch: i64,
    ) -> Result<u64, sqlx::Error> {
        let processed = sqlx::query(
            "DELETE FROM consumer_processed WHERE (handler, key) IN \
               (SELECT handler, key FROM consumer_processed WHERE processed_at < ?1 LIMIT ?2)",
        )
        .bind(older_than_ms)
        .bind(batch)
        .execute(pool)
        .await?
        .rows_affected();
        let attempts = sqlx::query(
            "DELETE FROM consumer_attempts WHERE (handler, message_id) IN \
               (SELECT handler, message_id FROM consumer_attempts WHERE last_failure_at < ?1 LIMIT ?2)",
        )
        .bind(older_than_ms)
        .bind(batch)
        .execute(pool)
        .await?
        .rows_affected();
        Ok(processed.max(attempts))
    }
}
