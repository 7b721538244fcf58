//! [`PausedHandlers`]: which handlers an operator paused, kept in the
//! store so that a pause outlives the consumers it stops.
//!
//! An operator pauses a handler by name (or every handler, [`EVERY_HANDLER`])
//! with `consumer pause` or the service's admin endpoint; every consumer of
//! the handler reads the paused set from its store about once a second
//! (see [`Consumer::with_pause_poll`](crate::Consumer::with_pause_poll)),
//! and its deliveries wait before their next attempt, spending none, until
//! the handler is resumed. A consumer started while its handler is paused
//! reads the set before it takes its first delivery.

use std::future::Future;

use time::OffsetDateTime;

use crate::error::Error;

/// The name that pauses every handler of every consumer on the store.
pub const EVERY_HANDLER: &str = "*";

/// One pause, as operators list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PausedHandler {
    /// The handler paused, or [`EVERY_HANDLER`].
    pub handler: String,
    /// Who paused it (an operator's name, as the tool was given it).
    pub by: String,
    /// Why.
    pub reason: String,
    /// Since when.
    pub since: OffsetDateTime,
}

/// What pausing a handler did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pause {
    /// Paused now.
    Paused,
    /// It was paused already: the first pause (its author, reason and
    /// time) stays.
    AlreadyPaused,
}

/// Where pauses live: implemented by every
/// [`DedupStore`](super::DedupStore) ([`Store`](super::Store) in the
/// `consumer_paused_handlers` table, [`MemoryStore`](super::MemoryStore) in
/// process).
pub trait PausedHandlers: Clone + Send + Sync + 'static {
    /// Pauses `handler` (or every handler: [`EVERY_HANDLER`]), by `by`,
    /// for `reason`.
    fn pause(
        &self,
        handler: &str,
        by: &str,
        reason: &str,
    ) -> impl Future<Output = Result<Pause, Error>> + Send;

    /// Resumes `handler`; whether it was paused. Resuming a handler does
    /// not end a pause of [`EVERY_HANDLER`].
    fn resume(&self, handler: &str) -> impl Future<Output = Result<bool, Error>> + Send;

    /// Every pause, by handler name.
    fn paused_handlers(&self) -> impl Future<Output = Result<Vec<PausedHandler>, Error>> + Send;
}

/// Whether `handler` is paused by one of `pauses` (its own, or a pause of
/// every handler): the pause that stops it.
pub fn pause_of<'p>(pauses: &'p [PausedHandler], handler: &str) -> Option<&'p PausedHandler> {
    pauses
        .iter()
        .find(|p| p.handler == handler)
        .or_else(|| pauses.iter().find(|p| p.handler == EVERY_HANDLER))
}
