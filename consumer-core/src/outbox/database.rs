//! What the outbox needs from a database ([`OutboxDatabase`], sealed), the
//! transactions it writes into ([`InTransaction`]), and the rows a relay
//! claims.

use std::future::Future;
use std::time::Duration;

use super::schedule::{Due, Released, ScheduledEvent};
use super::{NewEvent, Outbox};
use crate::error::Error;

/// A row claimed by a relay.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct Row {
    pub id: String,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub version: i64,
    pub event_type: String,
    pub destination: String,
    pub payload: String,
    pub headers: Option<String>,
    pub trace_metadata: Option<String>,
    pub created_at_ms: i64,
    pub attempts: i32,
    /// When it fell due, for an event that was scheduled (Unix ms).
    pub due_at_ms: Option<i64>,
    /// Waiting for a retry, failed, or (PostgreSQL) its predecessor version
    /// is unpublished and not in this batch: this aggregate stops here.
    pub held: bool,
}

/// What waits in an outbox table ([`OutboxRelay::read_backlog`](super::OutboxRelay::read_backlog)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Events committed and not published: enqueued ones, and scheduled
    /// ones that have fallen due.
    pub pending: i64,
    /// When the oldest of them was committed, or fell due for a scheduled
    /// one (Unix milliseconds).
    pub oldest_ms: Option<i64>,
    /// Aggregates blocked by an event marked failed.
    pub blocked: i64,
    /// Scheduled events not yet due.
    pub scheduled: i64,
}

pub(super) mod sealed {
    pub trait Sealed {}
}

/// An open transaction the outbox can write into: a sqlx
/// `Transaction`, or the `Tx` a `#[handler]` receives.
pub trait InTransaction: Send {
    /// Its database.
    type Database: OutboxDatabase;
    /// The connection the transaction runs on.
    fn connection(&mut self) -> &mut <Self::Database as sqlx::Database>::Connection;
}

impl<DB: OutboxDatabase> InTransaction for sqlx::Transaction<'_, DB> {
    type Database = DB;
    fn connection(&mut self) -> &mut DB::Connection {
        self
    }
}

impl<DB: OutboxDatabase> InTransaction for crate::store::Tx<DB> {
    type Database = DB;
    fn connection(&mut self) -> &mut DB::Connection {
        self
    }
}

/// A database the outbox supports; sealed, like
/// [`StoreDatabase`](crate::store::StoreDatabase).
pub trait OutboxDatabase: sqlx::Database + sealed::Sealed {
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    fn enqueue(
        outbox: &Outbox,
        conn: &mut Self::Connection,
        id: uuid::Uuid,
        event: &NewEvent,
        destination: &str,
        headers: Option<&str>,
        trace: Option<&str>,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Writes a scheduled event in the caller's transaction.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    fn schedule(
        outbox: &Outbox,
        conn: &mut Self::Connection,
        id: uuid::Uuid,
        event: &NewEvent,
        destination: &str,
        headers: Option<&str>,
        trace: Option<&str>,
        due: Due,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Deletes a scheduled event not yet released; whether there was one.
    #[doc(hidden)]
    fn cancel(
        outbox: &Outbox,
        conn: &mut Self::Connection,
        id: uuid::Uuid,
    ) -> impl Future<Output = Result<bool, Error>> + Send;

    /// One aggregate's scheduled events, in due order.
    #[doc(hidden)]
    fn scheduled_for(
        outbox: &Outbox,
        conn: &mut Self::Connection,
        aggregate_type: &str,
        aggregate_id: &str,
    ) -> impl Future<Output = Result<Vec<ScheduledEvent>, Error>> + Send;

    /// The `limit` scheduled events due first.
    #[doc(hidden)]
    fn scheduled(
        outbox: &Outbox,
        pool: &sqlx::Pool<Self>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<ScheduledEvent>, Error>> + Send;

    /// Moves up to `batch` scheduled events that have fallen due into the
    /// outbox table, each with its aggregate's next version, in due order.
    #[doc(hidden)]
    fn release_due(
        outbox: &Outbox,
        pool: &sqlx::Pool<Self>,
        batch: i64,
    ) -> impl Future<Output = Result<Released, Error>> + Send;

    #[doc(hidden)]
    fn ddl(table: &str) -> String;

    #[doc(hidden)]
    fn create_tables(
        outbox: &Outbox,
        pool: &sqlx::Pool<Self>,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    #[doc(hidden)]
    fn retry_failed(
        outbox: &Outbox,
        pool: &sqlx::Pool<Self>,
        aggregate_type: &str,
        aggregate_id: &str,
    ) -> impl Future<Output = Result<u64, Error>> + Send;

    #[doc(hidden)]
    fn purge_batch(
        outbox: &Outbox,
        pool: &sqlx::Pool<Self>,
        cutoff_ms: i64,
        batch: i64,
    ) -> impl Future<Output = Result<u64, Error>> + Send;

    #[doc(hidden)]
    fn pending(
        outbox: &Outbox,
        pool: &sqlx::Pool<Self>,
    ) -> impl Future<Output = Result<i64, Error>> + Send;

    /// `db.system.name` for metrics: `postgresql`, `sqlite`.
    #[doc(hidden)]
    const SYSTEM: &'static str;

    /// What waits in the table, for the relay's gauges.
    #[doc(hidden)]
    fn backlog(
        outbox: &Outbox,
        pool: &sqlx::Pool<Self>,
    ) -> impl Future<Output = Result<Backlog, Error>> + Send;

    /// What a relay holds between claim and finish (PostgreSQL: the open
    /// transaction with its aggregate locks).
    #[doc(hidden)]
    type ClaimGuard: Send;

    /// Whether a relay may claim its next batch while the previous one is
    /// still being marked and committed. True only where an unfinished
    /// claim keeps its rows and aggregates from every other claim
    /// (PostgreSQL: row locks and advisory locks until commit); SQLite's
    /// claim reads outside a transaction, so a second claim would take the
    /// same rows again.
    #[doc(hidden)]
    const OVERLAPPING_ROUNDS: bool;

    /// Claims up to `batch` rows, ordered by aggregate then version.
    #[doc(hidden)]
    fn claim(
        outbox: &Outbox,
        pool: &sqlx::Pool<Self>,
        holder: &str,
        batch: i64,
    ) -> impl Future<Output = Result<(Self::ClaimGuard, Vec<Row>), Error>> + Send;

    /// Records what happened to the claimed rows and releases the claim.
    #[doc(hidden)]
    fn finish(
        outbox: &Outbox,
        pool: &sqlx::Pool<Self>,
        guard: Self::ClaimGuard,
        outcomes: &[(Row, RowOutcome)],
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

/// What happened to one claimed row.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub enum RowOutcome {
    /// Confirmed by the broker.
    Published,
    /// Refused or not sent; retry after the delay, or mark failed.
    Failed {
        error: String,
        retry_after: Duration,
        give_up: bool,
    },
    /// Not attempted (an earlier event of its aggregate did not go out).
    Skipped,
}
