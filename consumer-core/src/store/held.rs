//! [`HeldKeys`]: where sequenced dead letters keep a held key and the
//! messages it parks.
//!
//! A handler that holds keys ([`OnDeadLetter::HoldKey`]) sets its key
//! aside when one of its messages is dead-lettered: the store records the
//! hold, with the dead-lettered message parked as its head, and every later
//! message of the key is parked behind it, in arrival order, and acked on
//! the broker (nothing blocks the partition or the queue). An operator
//! then releases the key (the head runs again first) or skips the head;
//! a consumer of the handler drains the parked messages in order, one at a
//! time, under a lease, and deletes the hold once none is left.
//!
//! The order rests on one row per held key: parking increments its
//! `next_seq` under the row's lock, in the transaction that parks, and the
//! drain deletes the hold only while `next_seq` is what it was when the
//! drain found nothing parked. A message parked meanwhile keeps the hold.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use time::OffsetDateTime;

use crate::envelope::{Envelope, Headers};
use crate::error::Error;

/// What a handler's key does when one of its messages is dead-lettered:
/// `#[handler(on_dead_letter = hold_key)]` or
/// [`Handler::on_dead_letter`](crate::Handler::on_dead_letter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnDeadLetter {
    /// The key's later messages run as they come (the default): right for
    /// events that do not depend on each other.
    #[default]
    MoveOn,
    /// The key is held: its later messages are parked, in order, until an
    /// operator releases or skips the dead-lettered head. For events whose
    /// meaning depends on the ones before (a ledger, an aggregate's state
    /// machine). Costs one store statement per delivery of the handler.
    HoldKey,
}

/// Why a key is being held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Holding {
    /// The message was just dead-lettered: the key is held with it at its
    /// head, whatever the key's hold was.
    Dead,
    /// A redelivery of a message dead-lettered before (its first delivery
    /// could not hold the key, or its ack was lost): the key is held only
    /// if no hold of it exists.
    Redelivered,
}

/// Where a held key stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HoldStatus {
    /// Waiting for an operator.
    Held,
    /// Released: a consumer of the handler will drain it.
    Released,
    /// A consumer is running its parked messages.
    Draining,
}

impl HoldStatus {
    /// The name the store writes.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldStatus::Held => "held",
            HoldStatus::Released => "released",
            HoldStatus::Draining => "draining",
        }
    }

    /// The status a stored name stands for.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "held" => Some(HoldStatus::Held),
            "released" => Some(HoldStatus::Released),
            "draining" => Some(HoldStatus::Draining),
            _ => None,
        }
    }
}

impl std::fmt::Display for HoldStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One held key, as operators list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldKey {
    /// The handler that holds it.
    pub handler: String,
    /// The key.
    pub key: String,
    /// The dead-lettered message at its head.
    pub head_message_id: String,
    /// Why the head was dead-lettered.
    pub reason: String,
    /// Where it stands.
    pub status: HoldStatus,
    /// Messages parked, the head included while it is there.
    pub parked: u64,
    /// When the key was held.
    pub held_at: OffsetDateTime,
}

/// A parked message, as the drain hands it to the handler again.
#[derive(Debug, Clone)]
pub struct Parked {
    /// Its place in the key's order.
    pub seq: i64,
    /// The message id.
    pub message_id: String,
    /// The topic or queue it came from.
    pub destination: String,
    /// Its position there.
    pub position: String,
    /// Its headers as received.
    pub headers: Headers,
    /// Its body.
    pub payload: Bytes,
}

/// How many keys of a handler wait for an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeldCount {
    /// Keys held (not released yet).
    pub held: u64,
    /// When the oldest of them was held.
    pub oldest: Option<OffsetDateTime>,
}

/// What the drain finds next for a key it drains.
#[derive(Debug)]
pub enum NextParked {
    /// The oldest parked message.
    Message(Parked),
    /// Nothing is parked; `next_seq` is the hold's counter, for
    /// [`HeldKeys::finish_hold`].
    Empty {
        /// The counter when nothing was found.
        next_seq: i64,
    },
    /// The hold is no longer this drainer's: held again (a parked message
    /// was dead-lettered), taken over after the lease ran out, or gone.
    NotOurs,
}

/// What releasing a key did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// Released: its parked messages will run, the head first unless it
    /// was skipped.
    Released,
    /// The key is not held (never was, or released already).
    NotHeld,
}

/// Where held keys and their parked messages live: implemented by every
/// [`DedupStore`](super::DedupStore) ([`Store`](super::Store) in the
/// `consumer_held_keys` and `consumer_parked` tables, [`MemoryStore`](super::MemoryStore)
/// in process).
pub trait HeldKeys: Clone + Send + Sync + 'static {
    /// Parks `envelope` behind the held `key` of `handler` and returns
    /// `true`, or returns `false` when the key is not held. One
    /// transaction: the hold's counter is taken under its row's lock. A
    /// message parked before (a redelivery) is not parked twice.
    fn park_if_held(
        &self,
        handler: &str,
        key: &str,
        envelope: &Envelope,
    ) -> impl Future<Output = Result<bool, Error>> + Send;

    /// Holds `key` of `handler` with `envelope`, just dead-lettered for
    /// `reason`, parked at its head (or, when it was parked already, left
    /// where it is). A key held already is held again with this head
    /// ([`Holding::Dead`]: a drained message failed on its turn), or left
    /// as it is ([`Holding::Redelivered`]: a redelivery of a message
    /// dead-lettered before, whose key an operator may have released
    /// since).
    fn hold_key(
        &self,
        handler: &str,
        key: &str,
        envelope: &Envelope,
        reason: &str,
        how: Holding,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Takes one released key of `handler` (or one whose drainer's lease
    /// ran out) for `drainer`, leased for `lease`; `None` when there is
    /// none.
    fn take_released(
        &self,
        handler: &str,
        drainer: &str,
        lease: Duration,
    ) -> impl Future<Output = Result<Option<String>, Error>> + Send;

    /// The oldest message parked behind `key`, while `drainer` holds its
    /// lease (renewed for `lease`).
    fn next_parked(
        &self,
        handler: &str,
        key: &str,
        drainer: &str,
        lease: Duration,
    ) -> impl Future<Output = Result<NextParked, Error>> + Send;

    /// Deletes a drained message, unless it is the head of the key held
    /// again (it was dead-lettered on its turn).
    fn unpark(
        &self,
        handler: &str,
        key: &str,
        message_id: &str,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Ends the hold when `drainer` still drains it and nothing was parked
    /// since the counter read `next_seq`; whether it ended.
    fn finish_hold(
        &self,
        handler: &str,
        key: &str,
        drainer: &str,
        next_seq: i64,
    ) -> impl Future<Output = Result<bool, Error>> + Send;

    /// Held keys, by handler then key, after `after` (keyset pagination),
    /// at most `limit`; of `handler` only when given.
    fn held_keys(
        &self,
        handler: Option<&str>,
        after: Option<(&str, &str)>,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<HeldKey>, Error>> + Send;

    /// How many keys of `handler` are held (waiting for an operator), and
    /// since when the oldest: what the consumer's `consumer.held_keys`
    /// gauges read.
    fn held_count(&self, handler: &str) -> impl Future<Output = Result<HeldCount, Error>> + Send;

    /// Releases a held key: its head's failures are forgotten (it gets its
    /// whole retry policy again) and, with `skip_head`, the head is
    /// dropped instead (it stays in the dead-letter queue).
    fn release_key(
        &self,
        handler: &str,
        key: &str,
        skip_head: bool,
    ) -> impl Future<Output = Result<Release, Error>> + Send;
}
