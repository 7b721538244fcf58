//! `LISTEN/NOTIFY` wake-ups for relays on PostgreSQL.

use sqlx::{Pool, Postgres};

use crate::error::Error;

/// Wakes a relay whenever a transaction that enqueued with
/// [`Outbox::with_notify`](super::Outbox::with_notify) commits: LISTENs on `channel` and notifies
/// `waker` (from [`OutboxRelay::waker`](super::OutboxRelay::waker)). The
/// listener reconnects by itself; polling still covers any gap.
pub async fn listen(
    pool: &Pool<Postgres>,
    channel: &str,
    waker: std::sync::Arc<tokio::sync::Notify>,
) -> Result<tokio::task::JoinHandle<()>, Error> {
    super::validate_identifier(channel)?;
    let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    Ok(tokio::spawn(async move {
        loop {
            match listener.recv().await {
                Ok(_) => waker.notify_one(),
                Err(e) => {
                    tracing::warn!(target: "consumer::outbox", error = %e, "LISTEN connection failed; reconnecting");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
            }
        }
    }))
}
