//! [`HeldAcker`]: settles a broker delivery, or a parked message the drain
//! handed back.

use tokio::sync::oneshot;

use crate::dead_letter::DeadLetter;
use crate::envelope::Message;
use crate::error::Error as RuntimeError;
use crate::source::Acker;
use crate::store::DedupStore;
use consumer_backend::{BrokerErrorKind, Error, RetryCopy};

/// Why a drained message's letter is in the store's dead-letter table.
const PARKED_LETTER: &str =
    "a message parked behind a held key: its letter is kept in the store's dead-letter table";

/// How a drained message ended, as its drain is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Settled {
    /// Done (processed, a duplicate, or dead-lettered): the drain goes on.
    Acked,
    /// Given back unsettled (shutdown, a settle step that failed): the
    /// drain stops; the message stays parked and runs when the key is
    /// drained again.
    Released,
}

/// Settles a delivery of a source whose handlers may hold keys.
pub enum HeldAcker<A, S> {
    /// A delivery from the broker.
    Broker(A),
    /// A parked message of a released key (boxed: rare, and the broker's
    /// acker, moved with every delivery, stays its own size).
    Parked(Box<ParkedAcker<S>>),
}

/// Settles a parked message: an ack deletes its row (unless it became the
/// head of its key held again), a dead letter goes to the store's table,
/// a retry runs in place (there is no broker to send a copy through).
pub struct ParkedAcker<S> {
    pub(super) store: S,
    pub(super) handler: &'static str,
    pub(super) key: String,
    pub(super) message_id: String,
    pub(super) settled: Option<oneshot::Sender<Settled>>,
}

impl<S> ParkedAcker<S> {
    fn tell(&mut self, how: Settled) {
        if let Some(tx) = self.settled.take() {
            // The drain stopped waiting: nothing to tell.
            let _ = tx.send(how);
        }
    }
}

impl<S> Drop for ParkedAcker<S> {
    fn drop(&mut self) {
        self.tell(Settled::Released);
    }
}

fn unavailable(what: &str, e: RuntimeError) -> Error {
    Error::broker(
        BrokerErrorKind::Unavailable,
        format!("{what}: {e}"),
        Some(Box::new(e)),
    )
}

impl<S: DedupStore> Acker for ParkedAcker<S> {
    async fn ack(mut self) -> Result<(), Error> {
        let r = self
            .store
            .unpark(self.handler, &self.key, &self.message_id)
            .await
            .map_err(|e| unavailable("deleting a drained message", e));
        // Acked whether or not the row went: one left behind runs again,
        // and its dedup row makes it a duplicate.
        self.tell(Settled::Acked);
        r
    }

    async fn release(mut self) -> Result<(), Error> {
        self.tell(Settled::Released);
        Ok(())
    }

    async fn publish_dead_letter(&mut self, letter: &Message) -> Result<(), Error> {
        let Some(letter) = DeadLetter::from_message(letter) else {
            return Err(Error::broker(
                BrokerErrorKind::Rejected,
                "a parked message's dead letter must be one the runtime built",
                None,
            ));
        };
        self.store
            .store_dead_letter(&letter, PARKED_LETTER)
            .await
            .map_err(|e| unavailable("storing a drained message's dead letter", e))?;
        Ok(())
    }

    async fn publish_retry(&mut self, _copy: &RetryCopy) -> Result<(), Error> {
        Err(Error::broker(
            BrokerErrorKind::Rejected,
            "a parked message is retried in place: it has no broker to go back through",
            None,
        ))
    }
}

// The parked path's futures are boxed: they hold the store's (a SQL
// store's are kilobytes), and inline they would make every broker ack's
// future as large, copied several times per delivery on its way through
// the settle timeout and span (about 70 000 instructions a delivery on
// PostgreSQL, `benches/README.md`'s `saga`).
impl<A: Acker, S: DedupStore> Acker for HeldAcker<A, S> {
    async fn ack(self) -> Result<(), Error> {
        match self {
            HeldAcker::Broker(a) => a.ack().await,
            HeldAcker::Parked(a) => Box::pin((*a).ack()).await,
        }
    }

    async fn release(self) -> Result<(), Error> {
        match self {
            HeldAcker::Broker(a) => a.release().await,
            HeldAcker::Parked(a) => (*a).release().await,
        }
    }

    async fn publish_dead_letter(&mut self, letter: &Message) -> Result<(), Error> {
        match self {
            HeldAcker::Broker(a) => a.publish_dead_letter(letter).await,
            HeldAcker::Parked(a) => Box::pin(a.publish_dead_letter(letter)).await,
        }
    }

    async fn publish_retry(&mut self, copy: &RetryCopy) -> Result<(), Error> {
        match self {
            HeldAcker::Broker(a) => a.publish_retry(copy).await,
            HeldAcker::Parked(a) => a.publish_retry(copy).await,
        }
    }
}
