//! Paused handlers on a database: [`PausedHandlers`] for [`Store`], each
//! statement written once on the [SQL seam](crate::sql).

use super::paused::{Pause, PausedHandler, PausedHandlers};
use super::{Store, StoreDatabase, from_ms};
use crate::error::Error;
use crate::sql::{Columns, Dialect, Statement, args, storable};

static PAUSE: Statement = Statement::new(
    "INSERT INTO consumer_paused_handlers (handler, paused_by, reason, since) \
     VALUES ($1, $2, $3, {now}) ON CONFLICT (handler) DO NOTHING",
);

static RESUME: Statement =
    Statement::new("DELETE FROM consumer_paused_handlers WHERE handler = $1");

static LIST: Statement = Statement::new(
    "SELECT handler, paused_by, reason, {ms since} FROM consumer_paused_handlers ORDER BY handler",
);

fn paused<DB: Dialect>(row: &DB::Row) -> Result<PausedHandler, sqlx::Error> {
    let mut c = Columns::<DB>::of(row);
    Ok(PausedHandler {
        handler: c.text()?,
        by: c.text()?,
        reason: c.text()?,
        since: from_ms(c.int()?),
    })
}

impl<DB: StoreDatabase> PausedHandlers for Store<DB> {
    async fn pause(&self, handler: &str, by: &str, reason: &str) -> Result<Pause, Error> {
        let mut conn = self.pool().acquire().await?;
        let (by, reason) = (storable(by), storable(reason));
        let args = args![handler, by.as_ref(), reason.as_ref()];
        Ok(
            match DB::execute(&mut conn, PAUSE.sql::<DB>(), args).await? {
                0 => Pause::AlreadyPaused,
                _ => Pause::Paused,
            },
        )
    }

    async fn resume(&self, handler: &str) -> Result<bool, Error> {
        let mut conn = self.pool().acquire().await?;
        Ok(DB::execute(&mut conn, RESUME.sql::<DB>(), args![handler]).await? > 0)
    }

    async fn paused_handlers(&self) -> Result<Vec<PausedHandler>, Error> {
        let mut conn = self.pool().acquire().await?;
        let rows = DB::fetch_all(&mut conn, LIST.sql::<DB>(), &[]).await?;
        Ok(rows
            .iter()
            .map(paused::<DB>)
            .collect::<Result<Vec<_>, _>>()?)
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;
    use crate::store::paused::{EVERY_HANDLER, pause_of};

    async fn store() -> Store<sqlx::Sqlite> {
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .expect("in-memory SQLite");
        let store = Store::new(pool);
        store.migrate().await.expect("migrations");
        store
    }

    #[tokio::test]
    async fn a_pause_is_kept_with_who_and_why_until_resumed() {
        let store = store().await;
        let first = store.pause("orders", "ana", "db migration").await;
        assert_eq!(first.ok(), Some(Pause::Paused));
        let again = store.pause("orders", "bo", "again").await;
        assert_eq!(again.ok(), Some(Pause::AlreadyPaused));
        let paused = store.paused_handlers().await.expect("list");
        assert_eq!(paused.len(), 1);
        assert_eq!(paused[0].handler, "orders");
        assert_eq!(
            (paused[0].by.as_str(), paused[0].reason.as_str()),
            ("ana", "db migration")
        );
        assert!(paused[0].since > time::OffsetDateTime::UNIX_EPOCH);
        assert_eq!(store.resume("orders").await.ok(), Some(true));
        assert_eq!(store.resume("orders").await.ok(), Some(false));
        assert!(store.paused_handlers().await.expect("list").is_empty());
    }

    #[tokio::test]
    async fn a_pause_of_every_handler_stops_each_one_until_resumed_itself() {
        let store = store().await;
        let _ = store.pause(EVERY_HANDLER, "ana", "incident").await;
        let paused = store.paused_handlers().await.expect("list");
        assert_eq!(
            pause_of(&paused, "billing").map(|p| p.handler.as_str()),
            Some("*")
        );
        assert_eq!(store.resume("billing").await.ok(), Some(false));
        assert_eq!(store.resume(EVERY_HANDLER).await.ok(), Some(true));
        assert!(store.paused_handlers().await.expect("list").is_empty());
    }
}
