//! What the outbox needs from a database ([`OutboxDatabase`], sealed), the
//! transactions it writes into ([`InTransaction`]), and the rows a relay
//! claims.

use std::future::Future;
use std::time::Duration;

use super::schedule::{Due, Released};
use super::{NewEvent, Outbox};
use crate::error::Error;
use crate::sql::Dialect;

/// A row claimed by a relay, as [`OutboxDatabase::claim`] reads it.
#[derive(Debug, Clone)]
pub struct Row {
    /// The event's id (a UUID).
    pub id: String,
    /// Its aggregate's type.
    pub aggregate_type: String,
    /// Its aggregate's id: the partition key.
    pub aggregate_id: String,
    /// Its version within the aggregate, from 1, in commit order.
    pub version: i64,
    /// The event type (`type` on the wire).
    pub event_type: String,
    /// Where it goes.
    pub destination: String,
    /// The payload, JSON.
    pub payload: String,
    /// Extra headers, a JSON object.
    pub headers: Option<String>,
    /// The trace context of the transaction that wrote it.
    pub trace_metadata: Option<String>,
    /// When it was committed (Unix ms).
    pub created_at_ms: i64,
    /// Publish attempts so far.
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

/// A database the outbox supports: a [`Dialect`] (sealed) and the
/// statements it writes its own way: the enqueue, the scheduling of an
/// event and the release of due ones, the tables, and the relay's claim
/// and finish. The rest is written once, in `statements.rs`.
pub trait OutboxDatabase: Dialect {
    /// Writes an event in the caller's transaction, with its aggregate's
    /// next version.
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

    /// Moves up to `batch` scheduled events that have fallen due into the
    /// outbox table, each with its aggregate's next version, in due order.
    fn release_due(
        outbox: &Outbox,
        pool: &sqlx::Pool<Self>,
        batch: i64,
    ) -> impl Future<Output = Result<Released, Error>> + Send;

    /// The DDL of the tables of an outbox on `table`.
    fn ddl(table: &str) -> String;

    /// Creates the tables when missing (idempotent).
    fn create_tables(
        outbox: &Outbox,
        pool: &sqlx::Pool<Self>,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// What a relay holds between claim and finish (PostgreSQL: the open
    /// transaction with its aggregate locks).
    type ClaimGuard: Send;

    /// Whether a relay may claim its next batch while the previous one is
    /// still being marked and committed. True only where an unfinished
    /// claim keeps its rows and aggregates from every other claim
    /// (PostgreSQL: row locks and advisory locks until commit); SQLite's
    /// claim reads outside a transaction, so a second claim would take the
    /// same rows again.
    const OVERLAPPING_ROUNDS: bool;

    /// Claims up to `batch` rows, ordered by aggregate then version.
    fn claim(
        outbox: &Outbox,
        pool: &sqlx::Pool<Self>,
        holder: &str,
        batch: i64,
    ) -> impl Future<Output = Result<(Self::ClaimGuard, Vec<Row>), Error>> + Send;

    /// Records what happened to the claimed rows and releases the claim.
    fn finish(
        outbox: &Outbox,
        pool: &sqlx::Pool<Self>,
        guard: Self::ClaimGuard,
        outcomes: &[(Row, RowOutcome)],
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

/// What happened to one claimed row, for [`OutboxDatabase::finish`].
#[derive(Debug, Clone)]
pub enum RowOutcome {
    /// Confirmed by the broker.
    Published,
    /// Refused or not sent; retry after the delay, or mark failed.
    Failed {
        /// Why.
        error: String,
        /// When to try again.
        retry_after: Duration,
        /// Whether it is failed for good (its aggregate stops).
        give_up: bool,
    },
    /// Not attempted (an earlier event of its aggregate did not go out).
    Skipped,
}
