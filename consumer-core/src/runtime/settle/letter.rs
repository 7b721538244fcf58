//! The dead letter's chain: the broker, then the store's dead-letter table,
//! then held where it is and tried again (see the module docs of
//! `settle`), and the hold of its key once it is out.

use std::time::Duration;

use time::OffsetDateTime;

use super::{Next, Settler, chain};
use crate::dead_letter::{DeadLetter, DeadLetterKind};
use crate::envelope::{Envelope, Message};
use crate::error::Error;
use crate::metrics::attr::operation;
use crate::runtime::Ended;
use crate::runtime::observe::Happened;
use crate::source::Acker;
use crate::store::DedupStore;
use crate::store::held::Holding;

/// How a publish step ended.
enum Published {
    Yes,
    /// Refused for good, or still failing when the budget ran out.
    No(Error),
    Stopping,
}

/// Why a delivery is dead-lettered, and what its letter says of it.
pub(in crate::runtime) struct Why<'a> {
    /// The handler (or `router:<name>`) that gave up.
    pub(in crate::runtime) handler: &'a str,
    pub(in crate::runtime) envelope: &'a Envelope,
    pub(in crate::runtime) kind: DeadLetterKind,
    pub(in crate::runtime) error: &'a (dyn std::error::Error + Send + Sync + 'static),
    pub(in crate::runtime) attempts: u32,
    /// When its first attempt failed (an exhausted one's).
    pub(in crate::runtime) first_failure: Option<OffsetDateTime>,
    /// Its handler holds keys
    /// ([`OnDeadLetter::HoldKey`](crate::store::held::OnDeadLetter::HoldKey)): once the letter
    /// is out, its key is held with it at the head.
    pub(in crate::runtime) holds_key: bool,
}

/// How one pass of a dead letter down its chain ended.
enum Tried<A> {
    /// Settled (a destination took the letter), or released (shutdown).
    Ended(Ended),
    /// Neither the broker nor the store took it: the store's error, and
    /// the delivery, still held.
    Refused(A, Error),
}

/// The first wait before a dead letter that nothing took is tried again.
const HELD_LETTER_FIRST_WAIT: Duration = Duration::from_secs(1);

/// The longest wait between two tries of a dead letter that nothing took.
const HELD_LETTER_MAX_WAIT: Duration = Duration::from_secs(60);

/// How writing to the store's dead-letter table ended.
enum Stored {
    /// Written (`first`), or found there from before.
    Yes {
        first: bool,
    },
    /// Refused for good, or still failing when the budget ran out.
    No(Error),
    Stopping,
}

impl<S: DedupStore> Settler<S> {
    /// Dead-letters the delivery down the fallback chain (see the module
    /// docs), then settles it, or releases it when every step failed.
    pub(in crate::runtime) async fn dead_letter<A: Acker>(&self, why: Why<'_>, acker: A) -> Ended {
        let Why {
            handler: name,
            envelope,
            kind,
            error,
            attempts,
            first_failure,
            holds_key,
        } = why;
        let dl = DeadLetter::new(kind, error, envelope, name, attempts, first_failure);
        // What a letter that is out does next: hold its key first, when
        // its handler holds keys.
        let hold = holds_key.then_some((dl.error.as_str(), Holding::Dead));
        self.observer.emit(Happened::DeadLettering {
            envelope,
            handler: name,
            kind,
            attempts,
            error: &dl.error,
        });

        match self.was_dead_lettered(&dl).await {
            Some(true) => {
                self.observer.emit(Happened::AlreadyDeadLettered {
                    message_id: &dl.message_id,
                });
                // Its key held by its first delivery stays as an operator
                // left it (released, perhaps); one its first delivery
                // could not hold is held now.
                let hold = hold.map(|(reason, _)| (reason, Holding::Redelivered));
                return self.settle_letter(name, envelope, acker, hold).await;
            }
            Some(false) => {}
            None => return self.release(envelope, acker).await,
        }

        self.send_letter(name, envelope, acker, &dl, hold).await
    }

    /// Sends the letter down the chain (the broker, then the store's
    /// dead-letter table) and settles the delivery once one took it. When
    /// neither does, the delivery is held where it is, its key's later
    /// messages behind it in their lane, and the chain is tried again after
    /// a wait that doubles up to [`HELD_LETTER_MAX_WAIT`]: the handler does
    /// not run again, and nothing is released to come back and fail the
    /// same way. Shutdown releases it.
    async fn send_letter<A: Acker>(
        &self,
        name: &str,
        envelope: &Envelope,
        mut acker: A,
        dl: &DeadLetter,
        hold: Option<(&str, Holding)>,
    ) -> Ended {
        let mut again_in = HELD_LETTER_FIRST_WAIT;
        loop {
            let refused = match self.letter_once(name, envelope, acker, dl, hold).await {
                Tried::Ended(ended) => return ended,
                Tried::Refused(kept, e) => {
                    acker = kept;
                    e
                }
            };
            self.observer.emit(Happened::SettleFailed {
                envelope,
                handler: &dl.handler,
                message_id: &dl.message_id,
                kind: dl.kind,
                error: &chain(&refused),
                again_in,
            });
            tokio::select! {
                biased;
                () = self.stopping.begun() => return self.release(envelope, acker).await,
                () = tokio::time::sleep(again_in) => {}
            }
            again_in = again_in.saturating_mul(2).min(HELD_LETTER_MAX_WAIT);
        }
    }

    /// One pass down the chain: the broker, then the store's table.
    async fn letter_once<A: Acker>(
        &self,
        name: &str,
        envelope: &Envelope,
        mut acker: A,
        dl: &DeadLetter,
        hold: Option<(&str, Holding)>,
    ) -> Tried<A> {
        let refusal = match self
            .publish_letter(envelope, &mut acker, &dl.to_message())
            .await
        {
            Published::Yes => {
                self.mark_letter_out(envelope, dl, dl.kind).await;
                return Tried::Ended(self.settle_letter(name, envelope, acker, hold).await);
            }
            Published::Stopping => return Tried::Ended(self.release(envelope, acker).await),
            Published::No(e) if e.is_too_large() => {
                return self
                    .store_too_large(name, envelope, acker, dl, &e, hold)
                    .await;
            }
            Published::No(e) => chain(&e),
        };

        // The broker will not take it: the store's dead-letter table.
        match self.store_letter(dl, &refusal).await {
            Stored::Yes { first } => {
                self.observer.emit(Happened::LetterStored {
                    envelope,
                    handler: name,
                    message_id: &dl.message_id,
                    refusal: &refusal,
                    first,
                });
                if first {
                    self.dead_lettered(envelope, name, dl.kind);
                }
                Tried::Ended(self.settle_letter(name, envelope, acker, hold).await)
            }
            Stored::No(e) => Tried::Refused(acker, e),
            Stored::Stopping => Tried::Ended(self.release(envelope, acker).await),
        }
    }

    /// Marks the letter the broker took as sent, in the store, and counts
    /// it. The mark is tried again within the settle budget while the
    /// store cannot take it (a database restarting): without it, the
    /// store's record of what was dead-lettered misses a letter the broker
    /// holds. A mark that still fails is told and left: the letter is on
    /// the broker, and only a redelivery of the original (a lost ack)
    /// would send it again.
    async fn mark_letter_out(&self, envelope: &Envelope, dl: &DeadLetter, kind: DeadLetterKind) {
        let mut budget = self.budget();
        loop {
            let Err(e) = self
                .store
                .mark_dead_lettered(&dl.handler, &dl.message_id, &dl.error)
                .await
            else {
                break;
            };
            match self
                .after_failure(&mut budget, "marking the message dead-lettered", &e)
                .await
            {
                Next::TryAgain => {}
                Next::Stopping | Next::GiveUp => {
                    self.observer
                        .emit(Happened::MarkFailed { error: &chain(&e) });
                    break;
                }
            }
        }
        self.dead_lettered(envelope, &dl.handler, kind);
    }

    /// Asks the store whether the message was dead-lettered before, within
    /// the budget: `None` when shutdown began, `Some(false)` too when the
    /// store cannot say (the letter is then sent anyway: at least once).
    async fn was_dead_lettered(&self, dl: &DeadLetter) -> Option<bool> {
        let mut budget = self.budget();
        loop {
            match self
                .store
                .was_dead_lettered(&dl.handler, &dl.message_id)
                .await
            {
                Ok(before) => return Some(before),
                Err(e) => match self
                    .after_failure(&mut budget, "checking for an earlier dead letter", &e)
                    .await
                {
                    Next::TryAgain => {}
                    Next::Stopping => return None,
                    Next::GiveUp => return Some(false),
                },
            }
        }
    }

    /// A letter too large for the dead-letter destination: kept whole in
    /// the store's table (on AMQP nothing else keeps the payload once the
    /// original is acked), then announced on the destination by a letter
    /// without its payload.
    async fn store_too_large<A: Acker>(
        &self,
        name: &str,
        envelope: &Envelope,
        mut acker: A,
        dl: &DeadLetter,
        refused: &Error,
        hold: Option<(&str, Holding)>,
    ) -> Tried<A> {
        let refusal = format!(
            "too large for the dead-letter destination ({}); a letter without its payload was sent there",
            chain(refused)
        );
        let first = match self.store_letter(dl, &refusal).await {
            Stored::Yes { first } => first,
            Stored::No(e) => return Tried::Refused(acker, e),
            Stored::Stopping => return Tried::Ended(self.release(envelope, acker).await),
        };
        if first {
            match self
                .publish_letter(envelope, &mut acker, &dl.without_payload().to_message())
                .await
            {
                Published::Yes => {}
                Published::No(e) => self.observer.emit(Happened::LetterWithoutPayloadRefused {
                    message_id: &dl.message_id,
                    error: &chain(&e),
                }),
                // Stored and marked: settled whatever happens now.
                Published::Stopping => {}
            }
        }
        self.observer.emit(Happened::LetterTooLarge {
            envelope,
            message_id: &dl.message_id,
            size: dl.payload.len(),
            error: &chain(refused),
            first,
        });
        if first {
            self.dead_lettered(envelope, name, dl.kind);
        }
        Tried::Ended(self.settle_letter(name, envelope, acker, hold).await)
    }

    /// Settles a delivery whose letter is out: holds its key first when
    /// `hold` says why (its handler holds keys), then acks. A hold the
    /// store cannot take within the budget releases the delivery instead:
    /// it comes back, finds itself dead-lettered, and holds its key then.
    async fn settle_letter<A: Acker>(
        &self,
        handler: &str,
        envelope: &Envelope,
        acker: A,
        hold: Option<(&str, Holding)>,
    ) -> Ended {
        let (Some((reason, how)), Some(key)) = (hold, envelope.key.as_deref()) else {
            return self.ack(envelope, acker).await;
        };
        let mut budget = self.budget();
        loop {
            match self
                .store
                .hold_key(handler, key, envelope, reason, how)
                .await
            {
                Ok(()) => {
                    self.observer.emit(Happened::KeyHeld {
                        envelope,
                        handler,
                        key,
                    });
                    return self.ack(envelope, acker).await;
                }
                Err(e) => match self.after_failure(&mut budget, "holding its key", &e).await {
                    Next::TryAgain => {}
                    Next::Stopping | Next::GiveUp => return self.release(envelope, acker).await,
                },
            }
        }
    }

    /// Writes the letter to the store's dead-letter table (with its mark)
    /// within the budget.
    async fn store_letter(&self, dl: &DeadLetter, refusal: &str) -> Stored {
        let mut budget = self.budget();
        loop {
            match self.store.store_dead_letter(dl, refusal).await {
                Ok(first) => return Stored::Yes { first },
                Err(e) => match self
                    .after_failure(&mut budget, "storing the dead letter", &e)
                    .await
                {
                    Next::TryAgain => {}
                    Next::Stopping => return Stored::Stopping,
                    Next::GiveUp => return Stored::No(e),
                },
            }
        }
    }

    async fn publish_letter<A: Acker>(
        &self,
        envelope: &Envelope,
        acker: &mut A,
        letter: &Message,
    ) -> Published {
        let mut budget = self.budget();
        loop {
            let r = self
                .settle_op(
                    envelope,
                    operation::DEAD_LETTER,
                    acker.publish_dead_letter(letter),
                )
                .await;
            let Err(e) = r.map_err(Error::from) else {
                return Published::Yes;
            };
            match self
                .after_failure(&mut budget, "publishing the dead letter", &e)
                .await
            {
                Next::TryAgain => {}
                Next::GiveUp => return Published::No(e),
                Next::Stopping => return Published::Stopping,
            }
        }
    }

    fn dead_lettered(&self, envelope: &Envelope, handler: &str, kind: DeadLetterKind) {
        self.observer.emit(Happened::DeadLettered {
            envelope,
            handler,
            kind,
        });
    }
}
