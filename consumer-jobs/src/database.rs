//! [`JobDatabase`]: what the job queue does differently on each database.
//! Everything else is written once, in `statements.rs`, on the core's
//! [SQL seam](consumer_core::sql).

use std::future::Future;
use std::sync::Arc;

use consumer_core::outbox::OutboxDatabase;
use consumer_core::store::StoreDatabase;
use sqlx::Pool;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// A database the job queue runs on (PostgreSQL, SQLite): the store's
/// database, whose transactions the application enqueues in (the
/// [`InTransaction`](consumer_core::outbox::InTransaction)s the outbox
/// writes into).
pub trait JobDatabase: StoreDatabase + OutboxDatabase {
    /// Called in the enqueuing transaction before a keyed job is inserted:
    /// makes writers of one key commit in the order of their `seq`
    /// (PostgreSQL: a transaction-scoped advisory lock on the key; SQLite
    /// has one writer, so nothing).
    fn lock_key(
        conn: &mut Self::Connection,
        queue: &str,
        key: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Starts a task that notifies `waker` whenever a job is announced
    /// with [`announce`](Self::announce) from any process (PostgreSQL:
    /// `LISTEN`); `None` where the database has no such channel or it could
    /// not be opened (polling covers it).
    fn listen(
        pool: &Pool<Self>,
        waker: Arc<Notify>,
    ) -> impl Future<Output = Option<JoinHandle<()>>> + Send;

    /// Tells listening workers of every process that `queue` has new jobs,
    /// outside any transaction (PostgreSQL: `NOTIFY` after the commit, so
    /// writers' commits never queue on the notification lock).
    fn announce(
        pool: &Pool<Self>,
        queue: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Deletes the rows of the finished deliveries `settled` (`seq`,
    /// `claims`) in one go; per delivery, in order, whether its row was
    /// still that delivery's (PostgreSQL: one statement; SQLite, whose one
    /// writer makes a statement cheap: one each).
    fn delete_settled(
        conn: &mut Self::Connection,
        settled: &[(i64, i64)],
    ) -> impl Future<Output = Result<Vec<bool>, sqlx::Error>> + Send;

    /// [`announce`](Self::announce) from inside a transaction on `conn`:
    /// delivered when it commits, never if it rolls back (PostgreSQL queues
    /// the notification with the transaction).
    fn announce_in(
        conn: &mut Self::Connection,
        queue: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
}
