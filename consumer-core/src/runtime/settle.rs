//! The settle steps and their fallbacks: the only loop that retries what
//! the broker or the store failed, and it retries only what can heal.
//!
//! Every step (publish a dead letter, publish a retry copy, mark or store a
//! dead letter) runs under a [`StepBudget`]: a failure the backend reports
//! as retriable is tried again with backoff until the settle timeout; one
//! that cannot heal, or the end of the budget, takes the step's fallback at
//! once:
//!
//! ```text
//! dead letter ─refused for its size─▶ store's dead-letter table (whole letter),
//!      │                              then a letter without its payload that
//!      │                              points there (best effort)
//!      └──── refused for good, or still failing ────┐
//!                                                   ▼
//!                          store's dead-letter table (mark + letter, one transaction)
//!                                                   │ fails too
//!                                                   ▼
//!                     release for redelivery (ERROR log, `settle_failures`)
//!
//! retry copy ─refused for good, or still failing─▶ retry in place
//! ```
//!
//! Dead letters are at least once: the store is asked whether the message
//! was dead-lettered before, the letter is published, and the mark is
//! written after the broker confirmed it, each in a statement of its own,
//! so no transaction stays open while the broker confirms (see
//! [`DedupStore::was_dead_lettered`]). A store that cannot answer does
//! not stop the letter: it is sent anyway.
//!
//! Each step has the settle timeout to itself, so a delivery whose every
//! step fails until the timeout holds its key's lane for at most three of
//! them (the check, the letter, the table; or the copy) plus the broker's
//! own send timeouts, and the other deliveries of the key go on once the
//! fallback completed.

use std::future::Future;
use std::time::{Duration, Instant};

use tracing::Instrument;

use time::OffsetDateTime;

use super::observe::{Happened, Observer, StepThen};
use super::{Ended, STEP_BACKOFF, Stopping, jitter};
use crate::dead_letter::{DeadLetter, DeadLetterKind};
use crate::envelope::{Envelope, Message};
use crate::error::Error;
use crate::metrics::attr::operation;
use crate::source::Acker;
use crate::store::DedupStore;
use crate::store::held::Holding;
use crate::trace::{self, SpanScope};
use consumer_backend::RetryCopy;

/// The settle loop: ack, release, retry copy and dead letter, each step
/// retried while its failure can heal and otherwise taken down its
/// fallback. It holds what the steps need, and nothing of the lanes or the
/// handlers.
pub(super) struct Settler<S> {
    /// Where dead letters are marked, and kept when the broker refuses them.
    pub(super) store: S,
    /// Where what happens to deliveries is told.
    pub(super) observer: Observer,
    /// What every settle span carries.
    pub(super) spans: SpanScope,
    /// How long a step may keep failing with what can heal.
    pub(super) timeout: Duration,
    pub(super) stopping: Stopping,
}

/// What a settle step may still spend on failures that can heal.
struct StepBudget {
    /// `None`: a settle timeout past what the clock can count, so no
    /// deadline (`with_settle_timeout(Duration::MAX)` must not overflow).
    deadline: Option<Instant>,
    failures: u32,
}

/// What to do after a step failed.
enum Next {
    /// Backed off: try the step again.
    TryAgain,
    /// Take the fallback.
    GiveUp,
    /// Shutdown began while backing off: release the delivery.
    Stopping,
}

/// How a publish step ended.
enum Published {
    Yes,
    /// Refused for good, or still failing when the budget ran out.
    No(Error),
    Stopping,
}

/// How sending a retry copy ended.
pub(super) enum Redelivered<A> {
    /// The copy is confirmed and the original settled, or shutdown began
    /// and the original was released.
    Ended(Ended),
    /// The broker did not take the copy: retry in place.
    Refused(A),
}

/// Why a delivery is dead-lettered, and what its letter says of it.
pub(super) struct Why<'a> {
    /// The handler (or `router:<name>`) that gave up.
    pub(super) handler: &'a str,
    pub(super) envelope: &'a Envelope,
    pub(super) kind: DeadLetterKind,
    pub(super) error: &'a (dyn std::error::Error + Send + Sync + 'static),
    pub(super) attempts: u32,
    /// When its first attempt failed (an exhausted one's).
    pub(super) first_failure: Option<OffsetDateTime>,
    /// Its handler holds keys
    /// ([`OnDeadLetter::HoldKey`](crate::store::held::OnDeadLetter::HoldKey)): once the letter
    /// is out, its key is held with it at the head.
    pub(super) holds_key: bool,
}

/// How looking for a hold on a delivery's key ended.
pub(super) enum Parking<A> {
    /// Not held: the delivery runs, with its acker.
    Runs(A),
    /// Parked and acked, or released (the store could not say).
    Ended(Ended),
}

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

/// `error` with its `source()` chain, for logs and the dead-letter table.
fn chain(error: &Error) -> String {
    let mut out = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

impl<S: DedupStore> Settler<S> {
    fn budget(&self) -> StepBudget {
        StepBudget {
            deadline: Instant::now().checked_add(self.timeout),
            failures: 0,
        }
    }

    /// Decides, after `step` failed with `error`, whether to try again.
    async fn after_failure(&self, budget: &mut StepBudget, step: &str, error: &Error) -> Next {
        let told = chain(error);
        let failed = |then| Happened::SettleStepFailed {
            step,
            error: &told,
            then,
        };
        if !error.is_retriable() {
            self.observer.emit(failed(StepThen::RefusedForGood));
            return Next::GiveUp;
        }
        budget.failures = budget.failures.saturating_add(1);
        let delay: Duration = jitter(&STEP_BACKOFF, budget.failures);
        if budget
            .deadline
            .is_some_and(|deadline| Instant::now() + delay > deadline)
        {
            self.observer.emit(failed(StepThen::OutOfTime {
                failures: budget.failures,
            }));
            return Next::GiveUp;
        }
        self.observer.emit(failed(StepThen::TryAgain { delay }));
        if self.stopping.sleep_unless_stopping(delay).await {
            Next::TryAgain
        } else {
            Next::Stopping
        }
    }

    /// Runs one settle operation in its span, and records its duration
    /// and outcome.
    async fn settle_op<F>(
        &self,
        envelope: &Envelope,
        op: &'static str,
        run: F,
    ) -> Result<(), consumer_backend::Error>
    where
        F: Future<Output = Result<(), consumer_backend::Error>>,
    {
        let span = trace::settle_span(envelope, op, &self.spans);
        let started = Instant::now();
        let r = if span.is_disabled() {
            run.await
        } else {
            run.instrument(span.clone()).await
        };
        let error = r.as_ref().err().map(consumer_backend::Error::error_type);
        if let Some(e) = error {
            trace::record_error(&span, e);
        }
        self.observer.emit(Happened::SettleOperation {
            envelope,
            op,
            took: started.elapsed(),
            error,
        });
        r
    }

    /// Acks: the delivery is settled (whether or not the broker
    /// heard: a lost ack is a redelivery that dedup skips).
    pub(super) async fn ack<A: Acker>(&self, envelope: &Envelope, acker: A) -> Ended {
        let r = self.settle_op(envelope, operation::ACK, acker.ack()).await;
        if let Err(e) = r {
            self.observer.emit(Happened::AckFailed { error: &e });
        }
        Ended::Settled
    }

    /// Gives the delivery back unsettled.
    pub(super) async fn release<A: Acker>(&self, envelope: &Envelope, acker: A) -> Ended {
        self.observer.emit(Happened::Released(envelope));
        let r = self
            .settle_op(envelope, operation::RELEASE, acker.release())
            .await;
        if let Err(e) = r {
            self.observer.emit(Happened::ReleaseFailed { error: &e });
        }
        Ended::Released
    }

    /// Sends `copy` through the broker and acks the original once it is
    /// confirmed. A copy the broker refuses for good, or that still fails
    /// at the settle timeout, gives the acker back: the caller retries in
    /// place.
    pub(super) async fn redeliver<A: Acker>(
        &self,
        handler: &str,
        envelope: &Envelope,
        mut acker: A,
        copy: &RetryCopy,
    ) -> Redelivered<A> {
        let mut budget = self.budget();
        loop {
            let r = self
                .settle_op(envelope, operation::RETRY, acker.publish_retry(copy))
                .await;
            let Err(e) = r.map_err(Error::from) else {
                return Redelivered::Ended(self.ack(envelope, acker).await);
            };
            match self
                .after_failure(&mut budget, "publishing the retry copy", &e)
                .await
            {
                Next::TryAgain => {}
                Next::Stopping => {
                    return Redelivered::Ended(self.release(envelope, acker).await);
                }
                Next::GiveUp => {
                    self.observer.emit(Happened::RetryCopyRefused {
                        envelope,
                        handler,
                        attempt: copy.attempt,
                        error: &chain(&e),
                    });
                    return Redelivered::Refused(acker);
                }
            }
        }
    }

    /// Dead-letters the delivery down the fallback chain (see the module
    /// docs), then settles it, or releases it when every step failed.
    pub(super) async fn dead_letter<A: Acker>(&self, why: Why<'_>, mut acker: A) -> Ended {
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

        let refusal = match self
            .publish_letter(envelope, &mut acker, &dl.to_message())
            .await
        {
            Published::Yes => {
                self.mark_letter_out(envelope, &dl, kind).await;
                return self.settle_letter(name, envelope, acker, hold).await;
            }
            Published::Stopping => return self.release(envelope, acker).await,
            Published::No(e) if e.is_too_large() => {
                return self
                    .store_too_large(name, envelope, acker, &dl, &e, hold)
                    .await;
            }
            Published::No(e) => chain(&e),
        };

        // The broker will not take it: the store's dead-letter table.
        match self.store_letter(&dl, &refusal).await {
            Stored::Yes { first } => {
                self.observer.emit(Happened::LetterStored {
                    envelope,
                    handler: name,
                    message_id: &dl.message_id,
                    refusal: &refusal,
                    first,
                });
                if first {
                    self.dead_lettered(envelope, name, kind);
                }
                self.settle_letter(name, envelope, acker, hold).await
            }
            Stored::No(e) => self.settle_failed(envelope, acker, &dl, &e).await,
            Stored::Stopping => self.release(envelope, acker).await,
        }
    }

    /// Marks the letter the broker took as sent, in the store, and counts
    /// it. A mark that fails is told and left: the letter is on the broker,
    /// and only a redelivery of the original (a lost ack) would send it
    /// again.
    async fn mark_letter_out(&self, envelope: &Envelope, dl: &DeadLetter, kind: DeadLetterKind) {
        if let Err(e) = self
            .store
            .mark_dead_lettered(&dl.handler, &dl.message_id, &dl.error)
            .await
        {
            self.observer
                .emit(Happened::MarkFailed { error: &chain(&e) });
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
    ) -> Ended {
        let refusal = format!(
            "too large for the dead-letter destination ({}); a letter without its payload was sent there",
            chain(refused)
        );
        let first = match self.store_letter(dl, &refusal).await {
            Stored::Yes { first } => first,
            Stored::No(e) => return self.settle_failed(envelope, acker, dl, &e).await,
            Stored::Stopping => return self.release(envelope, acker).await,
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
        self.settle_letter(name, envelope, acker, hold).await
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

    /// Parks the delivery behind its key when the key is held, and acks
    /// it; a store that cannot say within the budget releases it (it is
    /// never run past a hold it could not see).
    pub(super) async fn park_if_held<A: Acker>(
        &self,
        handler: &str,
        key: &str,
        envelope: &Envelope,
        acker: A,
    ) -> Parking<A> {
        let mut budget = self.budget();
        loop {
            match self.store.park_if_held(handler, key, envelope).await {
                Ok(false) => return Parking::Runs(acker),
                Ok(true) => {
                    self.observer.emit(Happened::Parked {
                        envelope,
                        handler,
                        key,
                    });
                    return Parking::Ended(self.ack(envelope, acker).await);
                }
                Err(e) => match self
                    .after_failure(&mut budget, "looking for a hold on its key", &e)
                    .await
                {
                    Next::TryAgain => {}
                    Next::Stopping | Next::GiveUp => {
                        return Parking::Ended(self.release(envelope, acker).await);
                    }
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

    /// The last resort: nothing took the letter, so the original goes back
    /// to the broker and comes again.
    async fn settle_failed<A: Acker>(
        &self,
        envelope: &Envelope,
        acker: A,
        dl: &DeadLetter,
        error: &Error,
    ) -> Ended {
        self.observer.emit(Happened::SettleFailed {
            envelope,
            handler: &dl.handler,
            message_id: &dl.message_id,
            kind: dl.kind,
            error: &chain(error),
        });
        self.release(envelope, acker).await
    }
}
