//! The job queue on PostgreSQL: a key's writers ordered by an advisory
//! lock, wake-ups by `LISTEN/NOTIFY` (the outbox's listener).

use std::sync::Arc;

use sqlx::{PgConnection, Pool, Postgres};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::{CHANNEL, JobDatabase};

/// Advisory-lock class of the queue's key locks (first key of the pair).
const LOCK_CLASS: i32 = 0x6a6f_6273; // "jobs"

impl JobDatabase for Postgres {
    async fn lock_key(conn: &mut PgConnection, queue: &str, key: &str) -> Result<(), sqlx::Error> {
        // Held until the writer commits: a second writer of the key draws
        // its `seq` after the first one's job is visible, so `seq` order is
        // commit order per key. Different keys never wait on each other
        // (but for a hash collision, which only delays).
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2 || chr(31) || $3))")
            .bind(LOCK_CLASS)
            .bind(consumer_core::sql::storable(queue))
            .bind(consumer_core::sql::storable(key))
            .execute(conn)
            .await?;
        Ok(())
    }

    async fn listen(pool: &Pool<Self>, waker: Arc<Notify>) -> Option<JoinHandle<()>> {
        match consumer_core::outbox::listen(pool, CHANNEL, waker).await {
            Ok(task) => Some(task),
            Err(e) => {
                tracing::warn!(
                    target: "consumer::jobs",
                    error = %e,
                    "LISTEN {CHANNEL} failed: the workers find new jobs by polling only"
                );
                None
            }
        }
    }

    async fn delete_settled(
        conn: &mut PgConnection,
        settled: &[(i64, i64)],
    ) -> Result<Vec<bool>, sqlx::Error> {
        let (seqs, claims): (Vec<i64>, Vec<i64>) = settled.iter().copied().unzip();
        let gone: Vec<i64> = sqlx::query_scalar(
            "DELETE FROM consumer_jobs j \
             USING unnest($1::bigint[], $2::bigint[]) AS d(seq, claims) \
             WHERE j.seq = d.seq AND j.claims = d.claims RETURNING j.seq",
        )
        .bind(&seqs)
        .bind(&claims)
        .fetch_all(conn)
        .await?;
        Ok(seqs.iter().map(|s| gone.contains(s)).collect())
    }

    async fn announce(pool: &Pool<Self>, queue: &str) -> Result<(), sqlx::Error> {
        let mut conn = pool.acquire().await?;
        Self::announce_in(&mut conn, queue).await
    }

    async fn announce_in(conn: &mut PgConnection, queue: &str) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(consumer_core::sql::storable(queue))
            .execute(conn)
            .await?;
        Ok(())
    }
}
