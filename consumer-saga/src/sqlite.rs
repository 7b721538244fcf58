//! Saga rows on SQLite. Its single writer serialises transitions: the
//! dedup claim takes the write lock before the row is loaded, so a version
//! conflict cannot happen here (the check stays, for correctness).

use sqlx::{Pool, Sqlite, SqliteConnection};

use super::database::{OpenSagas, SagaDatabase, SagaFilter, open_sagas, saga_row, sealed};
use super::record::{SagaRow, SagaWrite};
use consumer_core::store::now_ms;

impl sealed::Sealed for Sqlite {}

const COLUMNS: &str = "saga_type, saga_id, version, status, reason, state, timeouts, compensation, \
     retries, history, started_at, updated_at, finished_at";

impl SagaDatabase for Sqlite {
    async fn migrate_sagas(pool: &Pool<Self>) -> Result<(), consumer_core::Error> {
        super::database::run_migrations(sqlx::migrate!("./migrations/sqlite"), pool).await
    }

    async fn purge_tombstones(
        pool: &Pool<Self>,
        older_than_ms: i64,
        batch: i64,
    ) -> Result<u64, sqlx::Error> {
        Ok(sqlx::query(
            "DELETE FROM consumer_sagas WHERE (saga_type, saga_id) IN \
               (SELECT saga_type, saga_id FROM consumer_sagas WHERE finished_at < ?1 \
                AND status <> 'compensation_failed' LIMIT ?2)",
        )
        .bind(older_than_ms)
        .bind(batch)
        .execute(pool)
        .await?
        .rows_affected())
    }

    async fn load(
        conn: &mut SqliteConnection,
        saga_type: &str,
        saga_id: &str,
    ) -> Result<Option<SagaRow>, sqlx::Error> {
        let found = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM consumer_sagas WHERE saga_type = ?1 AND saga_id = ?2"
        )))
        .bind(saga_type)
        .bind(saga_id)
        .fetch_optional(conn)
        .await?;
        found.as_ref().map(saga_row).transpose()
    }

    async fn insert(conn: &mut SqliteConnection, w: &SagaWrite<'_>) -> Result<bool, sqlx::Error> {
        let now = now_ms();
        let done = sqlx::query(
            "INSERT INTO consumer_sagas (saga_type, saga_id, version, status, reason, state, timeouts, \
               compensation, retries, history, started_at, updated_at, finished_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, CASE WHEN ?12 THEN ?11 END) \
             ON CONFLICT (saga_type, saga_id) DO NOTHING",
        )
        .bind(w.saga_type)
        .bind(w.saga_id)
        .bind(w.version)
        .bind(w.status)
        .bind(w.reason)
        .bind(&w.state)
        .bind(&w.timeouts)
        .bind(&w.compensation)
        .bind(&w.retries)
        .bind(&w.history)
        .bind(now)
        .bind(w.finished)
        .execute(conn)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn update(
        conn: &mut SqliteConnection,
        w: &SagaWrite<'_>,
        expected: i64,
    ) -> Result<bool, sqlx::Error> {
        let done = sqlx::query(
            "UPDATE consumer_sagas SET version = ?3, status = ?4, reason = ?5, state = ?6, \
               timeouts = ?7, compensation = ?8, retries = ?9, history = ?10, updated_at = ?11, \
               finished_at = CASE WHEN ?12 THEN coalesce(finished_at, ?11) END \
             WHERE saga_type = ?1 AND saga_id = ?2 AND version = ?13",
        )
        .bind(w.saga_type)
        .bind(w.saga_id)
        .bind(w.version)
        .bind(w.status)
        .bind(w.reason)
        .bind(&w.state)
        .bind(&w.timeouts)
        .bind(&w.compensation)
        .bind(&w.retries)
        .bind(&w.history)
        .bind(now_ms())
        .bind(w.finished)
        .bind(expected)
        .execute(conn)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn list(pool: &Pool<Self>, f: &SagaFilter) -> Result<Vec<SagaRow>, sqlx::Error> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM consumer_sagas \
             WHERE (?1 IS NULL OR saga_type = ?1) AND {} \
               AND (?2 IS NULL OR started_at < ?2) \
             ORDER BY started_at, saga_type, saga_id LIMIT ?3",
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
                    sum(status IN ('running', 'compensating')), \
                    sum(status = 'compensation_failed'), \
                    min(CASE WHEN status IN ('running', 'compensating') THEN started_at END) \
             FROM consumer_sagas WHERE status IN ('running', 'compensating', 'compensation_failed') \
             GROUP BY saga_type",
        )
        .fetch_all(pool)
        .await?;
        Ok(open_sagas(rows))
    }
}
