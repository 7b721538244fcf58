//! [`DedupStore`]: what the runtime needs from a store, whichever it is.

use std::future::Future;
use std::time::Duration;

use time::OffsetDateTime;

use super::held::HeldKeys;
use super::paused::PausedHandlers;
use crate::dead_letter::DeadLetter;
use crate::error::Error;

/// What the store knows of a message's failures after recording one more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureRecord {
    /// Failed attempts so far, this one included.
    pub attempts: u32,
    /// When the first one failed.
    pub first_failure: OffsetDateTime,
}

/// What the runtime needs from a store: claim a key inside a transaction
/// the handler then receives, and record failures outside it.
///
/// Implemented by [`Store`](super::Store) (PostgreSQL, SQLite: durable) and
/// [`MemoryStore`](super::MemoryStore) (in process: tests, benchmarks, throwaway demos).
/// Every store also keeps held keys ([`HeldKeys`]), for handlers whose
/// dead letters hold their key, and the handlers an operator paused
/// ([`PausedHandlers`]).
pub trait DedupStore: HeldKeys + PausedHandlers + Clone + Send + Sync + 'static {
    /// The transaction a handler receives: it already holds the dedup row.
    type Tx: Send + 'static;

    /// Begins a transaction and claims `key` for `handler` in it, with one
    /// atomic insert (never a read then a write).
    fn claim(
        &self,
        handler: &str,
        key: &str,
        message_id: &str,
    ) -> impl Future<Output = Result<Claim<Self::Tx>, Error>> + Send;

    /// Begins one transaction and claims every key of `claims`
    /// (`(key, message_id)`, keys distinct) for `handler` in it, with one
    /// multi-row insert in key order, so batches that share keys cannot
    /// deadlock; per claim, in the order given, whether it was fresh. The
    /// transaction holds the fresh rows; the duplicates were committed
    /// before. A batched handler's claim ([`batch`](crate::batch)).
    fn claim_batch(
        &self,
        handler: &str,
        claims: &[(&str, &str)],
    ) -> impl Future<Output = Result<(Self::Tx, Vec<bool>), Error>> + Send;

    /// Commits business writes and the dedup row together.
    fn commit(&self, tx: Self::Tx) -> impl Future<Output = Result<(), Error>> + Send;

    /// Rolls everything back, the dedup row included.
    fn rollback(&self, tx: Self::Tx) -> impl Future<Output = Result<(), Error>> + Send;

    /// Records one more failed attempt, durably and outside any rolled-back
    /// transaction; returns the count so far.
    fn record_failure(
        &self,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> impl Future<Output = Result<FailureRecord, Error>> + Send;

    /// Forgets the failures of a message that finally succeeded.
    fn clear_failures(
        &self,
        handler: &str,
        message_id: &str,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Whether the message was dead-lettered before (a redelivery after a
    /// crash, or after a lost ack): the runtime then acks it without a
    /// second letter.
    ///
    /// This read and [`DedupStore::mark_dead_lettered`] around the publish
    /// make dead letters at least once, not exactly once: a crash between
    /// the broker's confirmation and the mark sends the letter again on
    /// redelivery (the letter carries the message id, so readers of the
    /// dead-letter queue can tell). No transaction stays open across the
    /// publish, so a broker that is slow to confirm holds no lock and no
    /// pooled connection.
    fn was_dead_lettered(
        &self,
        handler: &str,
        message_id: &str,
    ) -> impl Future<Output = Result<bool, Error>> + Send;

    /// Marks the message as dead-lettered, committed at once, after the
    /// broker confirmed its letter.
    fn mark_dead_lettered(
        &self,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Marks the message as dead-lettered and writes `letter`, payload
    /// included, to the store's dead-letter table, in one transaction: the
    /// fallback for a letter the broker refused for good. `refusal` says
    /// why it is not on the broker. `Ok(false)` when it was marked before
    /// (nothing is written).
    fn store_dead_letter(
        &self,
        letter: &DeadLetter,
        refusal: &str,
    ) -> impl Future<Output = Result<bool, Error>> + Send;

    /// How long a key is remembered.
    fn retention(&self) -> Duration;
}

/// The result of claiming a key.
#[derive(Debug)]
pub enum Claim<T> {
    /// First time: the transaction holds the new dedup row.
    Fresh(T),
    /// Committed before: nothing to do but ack.
    Duplicate,
}
