//! Saga rows on PostgreSQL.

use sqlx::{PgConnection, Pool, Postgres};

use super::database::{OpenSagas, SagaDatabase, SagaFilter, open_sagas, saga_row, sealed};
use super::record::{SagaRow, SagaWrite};
use consumer_core::store::storable;

impl sealed::Sealed for Postgres {}

const COLUMNS: &str = "saga_type, saga_id, version, status, reason, state::text, timeouts::text, \
     compensation::text, retries::text, history::text, \
     (extract(epoch FROM started_at) * 1000)::bigint, (extract(epoch FROM updated_at) * 1000)::bigint, \
     (extract(epoch FROM finished_at) * 1000)::bigint";

impl SagaDatabase for Postgres {
    async fn migrate_sagas(pool: &Pool<Self>) -> Result<(), consumer_core::Error> {
        super::database::run_migrations(sqlx::migrate!("./migrations/postgres"), pool).await
    }

    async fn purge_tombstones(
        pool: &Pool<Self>,
        older_than_ms: i64,
        batch: i64,
    ) -> Result<u64, sqlx::Error> {
        Ok(sqlx::query(
            "DELETE FROM consumer_sagas WHERE ctid IN (SELECT ctid FROM consumer_sagas \
             WHERE finished_at < to_timestamp($1::double precision / 1000) \
               AND status <> 'compensation_failed' LIMIT $2)",
        )
        .bind(older_than_ms)
        .bind(batch)
        .execute(pool)
        .await?
        .rows_affected())
    }

    async fn load(
        conn: &mut PgConnection,
        saga_type: &str,
        saga_id: &str,
    ) -> Result<Option<SagaRow>, sqlx::Error> {
        let found = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM consumer_sagas WHERE saga_type = $1 AND saga_id = $2"
        )))
        .bind(storable(saga_type))
        .bind(storable(saga_id))
        .fetch_optional(conn)
        .await?;
        found.as_ref().map(saga_row).transpose()
    }

    async fn insert(conn: &mut PgConnection, w: &SagaWrite<'_>) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(
            "INSERT INTO consumer_sagas (saga_type, saga_id, version, status, reason, state, timeouts, \
               compensation, retries, history, finished_at) \
             VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7::jsonb, $8::jsonb, $9::jsonb, $10::jsonb, \
               CASE WHEN $11 THEN now() END) \
             ON CONFLICT (saga_type, saga_id) DO NOTHING",
        )
        .bind(storable(w.saga_type))
        .bind(storable(w.saga_id))
        .bind(w.version)
        .bind(w.status)
        .bind(w.reason.map(storable))
        .bind(&w.state)
        .bind(&w.timeouts)
        .bind(&w.compensation)
        .bind(&w.retries)
        .bind(&w.history)
        .bind(w.finished)
        .execute(conn)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn update(
        conn: &mut PgConnection,
        w: &SagaWrite<'_>,
        expected: i64,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(
            "UPDATE consumer_sagas SET version = $3, status = $4, reason = $5, state = $6::jsonb, \
               timeouts = $7::jsonb, compensation = $8::jsonb, retries = $9::jsonb, history = $10::jsonb, \
               updated_at = now(), \
               finished_at = CASE WHEN $11 THEN coalesce(finished_at, now()) END \
             WHERE saga_type = $1 AND saga_id = $2 AND version = $12",
        )
        .bind(storable(w.saga_type))
        .bind(storable(w.saga_id))
        .bind(w.version)
        .bind(w.status)
        .bind(w.reason.map(storable))
        .bind(&w.state)
        .bind(&w.timeouts)
        .bind(&w.compensation)
        .bind(&w.retries)
        .bind(&w.history)
        .bind(w.finished)
        .bind(expected)
        .execute(conn)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn list(pool: &Pool<Self>, f: &SagaFilter) -> Result<Vec<SagaRow>, sqlx::Error> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM consumer_sagas \
             WHERE ($1::text IS NULL OR saga_type = $1) AND {} \
               AND ($2::bigint IS NULL OR started_at < to_timestamp($2::double precision / 1000)) \
             ORDER BY started_at, saga_type, saga_id LIMIT $3",
            f.status_sql()
        )))
        .bind(f.saga_type.as_deref())
        .bind(f.started_before_ms)
        .bind(f.limit())
        .fetch_all(pool)
        .await?;
        rows.iter().map(saga_row).collect()
    }

    async fn open(pool: &Pool<Self>) -> Result<Vec<OpenSagas>, sqlx::Error> {
        let rows: Vec<(String, i64, i64, Option<i64>)> = sqlx::query_as(
            "SELECT saga_type, \
                    count(*) FILTER (WHERE status IN ('running', 'compensating')), \
                    count(*) FILTER (WHERE status = 'compensation_failed'), \
                    (extract(epoch FROM min(started_at) FILTER (WHERE status IN ('running', 'compensating'))) * 1000)::bigint \
             FROM consumer_sagas WHERE status IN ('running', 'compensating', 'compensation_failed') \
             GROUP BY saga_type",
        )
        .fetch_all(pool)
        .await?;
        Ok(open_sagas(rows))
    }
}
