//! The job queue on SQLite: one writer orders everything, and there is no
//! channel between processes (workers of other processes poll).

use std::sync::Arc;

use sqlx::{Pool, Sqlite, SqliteConnection};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::JobDatabase;

impl JobDatabase for Sqlite {
    async fn lock_key(
        _conn: &mut SqliteConnection,
        _queue: &str,
        _key: &str,
    ) -> Result<(), sqlx::Error> {
        Ok(())
    }

    async fn listen(_pool: &Pool<Self>, _waker: Arc<Notify>) -> Option<JoinHandle<()>> {
        None
    }

    async fn delete_settled(
        conn: &mut SqliteConnection,
        settled: &[(i64, i64)],
    ) -> Result<Vec<bool>, sqlx::Error> {
        let mut gone = Vec::with_capacity(settled.len());
        for &(seq, claims) in settled {
            gone.push(super::statements::delete::<Sqlite>(conn, seq, claims).await?);
        }
        Ok(gone)
    }

    async fn announce(_pool: &Pool<Self>, _queue: &str) -> Result<(), sqlx::Error> {
        Ok(())
    }

    async fn announce_in(_conn: &mut SqliteConnection, _queue: &str) -> Result<(), sqlx::Error> {
        Ok(())
    }
}
