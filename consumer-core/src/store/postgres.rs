use sqlx::{PgConnection, Pool, Postgres, Row};

use super::database::sealed;
use super::text::storable;
use super::{FailureRecord, LetterRow, MIGRATIONS_TABLE, StoreDatabase, from_ms};
use crate::error::Error;

impl sealed::Sealed for Postgres {}

impl StoreDatabase for Postgres {
    async fn migrate(pool: &Pool<Self>) -> Result<(), Error> {
        let mut migrator = sqlx::migrate!("./migrations/postgres");
        migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
        // Version 5 (consumer_sagas) moved to consumer-saga's own
        // migrations: databases that ran it here keep it, and may.
        migrator.set_ignore_missing(true);
        migrator.run(pool).await?;
        Ok(())
    }

    async fn claim(
        conn: &mut PgConnection,
        handler: &str,
        key: &str,
        message_id: &str,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(
            "INSERT INTO consumer_processed (handler, key, message_id) VALUES ($1, $2, $3) \
             ON CONFLICT (handler, key) DO NOTHING",
        )
        .bind(storable(handler))
        .bind(storable(key))
        .bind(storable(message_id))
        .execute(conn)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn claim_many(
        conn: &mut PgConnection,
        handler: &str,
        claims: &[(&str, &str)],
    ) -> Result<Vec<bool>, sqlx::Error> {
        let keys: Vec<String> = claims
            .iter()
            .map(|(k, _)| storable(k).into_owned())
            .collect();
        let ids: Vec<String> = claims
            .iter()
            .map(|(_, m)| storable(m).into_owned())
            .collect();
        // Rows go in key order (the caller sorted them), so two batches that
        // share keys take their row locks in the same order: no deadlock.
        let fresh: Vec<String> = sqlx::query_scalar(
            "INSERT INTO consumer_processed (handler, key, message_id) \
             SELECT $1, c.key, c.message_id FROM unnest($2::text[], $3::text[]) AS c(key, message_id) \
             ORDER BY c.key \
             ON CONFLICT (handler, key) DO NOTHING RETURNING key",
        )
        .bind(storable(handler))
        .bind(&keys)
        .bind(&ids)
        .fetch_all(conn)
        .await?;
        let fresh: std::collections::HashSet<&str> = fresh.iter().map(String::as_str).collect();
        Ok(keys.iter().map(|k| fresh.contains(k.as_str())).collect())
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
             VALUES ($1, $2, 1, now(), now(), $3) \
             ON CONFLICT (handler, message_id) DO UPDATE \
               SET attempts = consumer_attempts.attempts + 1, \
                   last_failure_at = now(), last_error = excluded.last_error \
             RETURNING attempts, (extract(epoch FROM first_failure_at) * 1000)::bigint",
        )
        .bind(storable(handler))
        .bind(storable(message_id))
        .bind(storable(error))
        .fetch_one(pool)
        .await?;
        let attempts: i32 = row.try_get(0)?;
        let first_ms: i64 = row.try_get(1)?;
        Ok(FailureRecord {
            attempts: u32::try_from(attempts).unwrap_or(1),
            first_failure: from_ms(first_ms),
        })
    }

    async fn mark_dead_lettered(
        conn: &mut PgConnection,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(
            "INSERT INTO consumer_attempts \
               (handler, message_id, attempts, first_failure_at, last_failure_at, last_error, dead_lettered_at) \
             VALUES ($1, $2, 1, now(), now(), $3, now()) \
             ON CONFLICT (handler, message_id) DO UPDATE SET dead_lettered_at = now() \
             WHERE consumer_attempts.dead_lettered_at IS NULL",
        )
        .bind(storable(handler))
        .bind(storable(message_id))
        .bind(storable(error))
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
             WHERE handler = $1 AND message_id = $2",
        )
        .bind(storable(handler))
        .bind(storable(message_id))
        .fetch_optional(pool)
        .await?;
        Ok(marked.unwrap_or(false))
    }

    async fn insert_dead_letter(
        conn: &mut PgConnection,
        row: &LetterRow<'_>,
    ) -> Result<(), sqlx::Error> {
        row.bind(sqlx::query(
            "INSERT INTO consumer_dead_letters \
               (handler, message_id, kind, error, causes, attempts, first_failure_at, \
                last_failure_at, destination, position, partition_key, headers, payload, refusal) \
             VALUES ($1, $2, $3, $4, $5::jsonb, $6, to_timestamp($7::double precision / 1000), \
                     to_timestamp($8::double precision / 1000), $9, $10, $11, $12::jsonb, $13, $14)",
        ))
        .execute(conn)
        .await?;
        Ok(())
    }

    async fn clear_failures(
        pool: &Pool<Self>,
        handler: &str,
        message_id: &str,
    ) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM consumer_attempts WHERE handler = $1 AND message_id = $2")
            .bind(storable(handler))
            .bind(storable(message_id))
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
            "DELETE FROM consumer_processed WHERE ctid IN (SELECT ctid FROM consumer_processed \
             WHERE processed_at < to_timestamp($1::double precision / 1000) LIMIT $2)",
        )
        .bind(older_than_ms)
        .bind(batch)
        .execute(pool)
        .await?
        .rows_affected();
        let attempts = sqlx::query(
            "DELETE FROM consumer_attempts WHERE ctid IN (SELECT ctid FROM consumer_attempts \
             WHERE last_failure_at < to_timestamp($1::double precision / 1000) LIMIT $2)",
        )
        .bind(older_than_ms)
        .bind(batch)
        .execute(pool)
        .await?
        .rows_affected();
        Ok(processed.max(attempts))
    }
}
