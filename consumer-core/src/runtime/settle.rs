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
//! dead letter ─refused for its size─▶ dead letter without its payload
//!      │                                         │
//!      └──────────── refused for good, or still failing ────────────┐
//!                                                                    ▼
//!                        store's dead-letter table (mark + letter, one transaction)
//!                                                                    │ fails too
//!                                                                    ▼
//!                                  release for redelivery (ERROR log, `settle_failures`)
//!
//! retry copy ─refused for good, or still failing─▶ retry in place
//! ```
//!
//! So a settle step that cannot succeed never holds its key's lane for
//! longer than the settle timeout, and the other deliveries of the key go
//! on once the fallback completed.

use std::time::{Duration, Instant};

use time::OffsetDateTime;

use super::{STEP_BACKOFF, Shared, jitter};
use crate::dead_letter::{DeadLetter, DeadLetterKind};
use crate::envelope::{Envelope, Message};
use crate::error::Error;
use crate::router::Routes;
use crate::settle::RetryCopy;
use crate::source::Acker;
use crate::stats::Counter;
use crate::store::DedupStore;

/// What a settle step may still spend on failures that can heal.
struct StepBudget {
    deadline: Instant,
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

impl<S, R, A> Shared<S, R, A>
where
    S: DedupStore,
    R: Routes<S>,
    A: Acker,
{
    fn budget(&self) -> StepBudget {
        StepBudget {
            deadline: Instant::now() + self.settle_timeout,
            failures: 0,
        }
    }

    /// Decides, after `step` failed with `error`, whether to try again.
    async fn after_failure(&self, budget: &mut StepBudget, step: &str, error: &Error) -> Next {
        self.stats.incr(Counter::SettleErrors);
        if !error.is_retriable() {
            tracing::warn!(target: "consumer", step, error = %chain(error), "settle step refused for good; taking its fallback");
            return Next::GiveUp;
        }
        budget.failures = budget.failures.saturating_add(1);
        let delay: Duration = jitter(&STEP_BACKOFF, budget.failures);
        if Instant::now() + delay > budget.deadline {
            tracing::warn!(target: "consumer", step, error = %chain(error), failures = budget.failures, "settle step still failing at the settle timeout; taking its fallback");
            return Next::GiveUp;
        }
        tracing::warn!(target: "consumer", step, error = %chain(error), ?delay, "settle step failed; trying again");
        if self.sleep_unless_stopping(delay).await {
            Next::TryAgain
        } else {
            Next::Stopping
        }
    }

    pub(super) async fn ack(&self, acker: A) {
        if let Err(e) = acker.ack().await {
            self.stats.incr(Counter::SettleErrors);
            tracing::warn!(target: "consumer", error = %e, "ack failed; the broker will redeliver and dedup will skip it");
        }
    }

    pub(super) async fn release(&self, acker: A) {
        self.stats.incr(Counter::Released);
        if let Err(e) = acker.release().await {
            tracing::warn!(target: "consumer", error = %e, "release failed; the broker redelivers unsettled deliveries");
        }
    }

    /// Sends `copy` through the broker and acks the original once it is
    /// confirmed (`None`: settled or released). A copy the broker refuses
    /// for good, or that still fails at the settle timeout, gives the
    /// acker back (`Some`): the caller retries in place.
    pub(super) async fn redeliver(
        &self,
        handler: &str,
        mut acker: A,
        copy: &RetryCopy,
    ) -> Option<A> {
        let mut budget = self.budget();
        loop {
            let Err(e) = acker.publish_retry(copy).await else {
                self.ack(acker).await;
                return None;
            };
            match self
                .after_failure(&mut budget, "publishing the retry copy", &e)
                .await
            {
                Next::TryAgain => {}
                Next::Stopping => {
                    self.release(acker).await;
                    return None;
                }
                Next::GiveUp => {
                    self.stats.incr(Counter::RetryFallbacks);
                    tracing::warn!(
                        target: "consumer",
                        handler,
                        message_id = %copy.message.headers.get(crate::envelope::names::ID).ok().flatten().unwrap_or_default(),
                        attempt = copy.attempt,
                        error = %chain(&e),
                        "the broker did not take the retry copy; retrying in place"
                    );
                    return Some(acker);
                }
            }
        }
    }

    /// Dead-letters the delivery down the fallback chain (see the module
    /// docs), then settles it.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn dead_letter(
        &self,
        name: &str,
        envelope: &Envelope,
        mut acker: A,
        kind: DeadLetterKind,
        error: &(dyn std::error::Error + Send + Sync + 'static),
        attempts: u32,
        first_failure: Option<OffsetDateTime>,
    ) {
        let dl = DeadLetter::new(kind, error, envelope, name, attempts, first_failure);
        tracing::error!(
            target: "consumer",
            handler = name,
            message_id = %envelope.id,
            origin = %envelope.origin,
            kind = %kind,
            attempts,
            error = %dl.error,
            "dead-lettering message"
        );

        // The mark, committed only once the letter is confirmed: a crash
        // before that dead-letters again on redelivery (at least once);
        // after it, the redelivery is acked without a second letter.
        let mut budget = self.budget();
        let mark = loop {
            match self
                .store
                .begin_dead_letter(&dl.handler, &dl.message_id, &dl.error)
                .await
            {
                Ok(Some(mark)) => break mark,
                Ok(None) => {
                    tracing::info!(target: "consumer", message_id = %dl.message_id, "already dead-lettered; acking the redelivery");
                    return self.ack(acker).await;
                }
                Err(e) => match self
                    .after_failure(&mut budget, "marking the dead letter", &e)
                    .await
                {
                    Next::TryAgain => {}
                    Next::Stopping => return self.release(acker).await,
                    Next::GiveUp => return self.settle_failed(acker, &dl, &e).await,
                },
            }
        };

        let refusal = match self.publish_letter(&mut acker, &dl.to_message()).await {
            Published::Yes => return self.letter_published(mark, acker, kind).await,
            Published::Stopping => return self.give_back(mark, acker).await,
            Published::No(e) if e.is_too_large() => {
                let small = dl.without_payload();
                match self.publish_letter(&mut acker, &small.to_message()).await {
                    Published::Yes => {
                        self.stats.incr(Counter::PayloadOmitted);
                        tracing::warn!(
                            target: "consumer",
                            message_id = %dl.message_id,
                            size = dl.payload.len(),
                            error = %chain(&e),
                            "the dead-letter destination refused the letter for its size; sent it without its payload"
                        );
                        return self.letter_published(mark, acker, kind).await;
                    }
                    Published::Stopping => return self.give_back(mark, acker).await,
                    Published::No(again) => format!(
                        "refused for its size ({}), and without its payload too ({})",
                        chain(&e),
                        chain(&again)
                    ),
                }
            }
            Published::No(e) => chain(&e),
        };

        // The broker will not take it: the store's dead-letter table, with
        // a mark of its own (the one held above is let go first, so the two
        // transactions never wait for each other).
        if let Err(e) = self.store.abandon_dead_letter(mark).await {
            tracing::debug!(target: "consumer", error = %e, "rolling back the dead-letter mark failed; the server rolls it back");
        }
        let mut budget = self.budget();
        loop {
            match self.store.store_dead_letter(&dl, &refusal).await {
                Ok(first) => {
                    if first {
                        self.stats.incr(Counter::StoredDeadLetters);
                        self.count_dead_letter(kind);
                    }
                    tracing::error!(
                        target: "consumer",
                        handler = name,
                        message_id = %dl.message_id,
                        refusal = %refusal,
                        "the broker refused the dead letter; it is in the store's dead-letter table"
                    );
                    return self.ack(acker).await;
                }
                Err(e) => match self
                    .after_failure(&mut budget, "storing the dead letter", &e)
                    .await
                {
                    Next::TryAgain => {}
                    Next::Stopping => return self.release(acker).await,
                    Next::GiveUp => return self.settle_failed(acker, &dl, &e).await,
                },
            }
        }
    }

    async fn publish_letter(&self, acker: &mut A, letter: &Message) -> Published {
        let mut budget = self.budget();
        loop {
            let Err(e) = acker.publish_dead_letter(letter).await else {
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

    /// The letter is confirmed: commit the mark, count, ack the original.
    async fn letter_published(&self, mark: S::Mark, acker: A, kind: DeadLetterKind) {
        if let Err(e) = self.store.commit_dead_letter(mark).await {
            // The letter is on the broker; a redelivery of the original
            // (only if the ack below is lost) would be dead-lettered again.
            tracing::warn!(target: "consumer", error = %e, "could not commit the dead-letter mark after the letter was confirmed");
        }
        self.count_dead_letter(kind);
        self.ack(acker).await;
    }

    fn count_dead_letter(&self, kind: DeadLetterKind) {
        self.stats.incr(match kind {
            DeadLetterKind::Poison => Counter::DeadPoison,
            DeadLetterKind::Terminal => Counter::DeadTerminal,
            DeadLetterKind::Exhausted => Counter::DeadExhausted,
        });
    }

    /// Shutdown during a step: let go of the mark, release the delivery.
    async fn give_back(&self, mark: S::Mark, acker: A) {
        if let Err(e) = self.store.abandon_dead_letter(mark).await {
            tracing::debug!(target: "consumer", error = %e, "rolling back the dead-letter mark failed; the server rolls it back");
        }
        self.release(acker).await;
    }

    /// The last resort: nothing took the letter, so the original goes back
    /// to the broker and comes again.
    async fn settle_failed(&self, acker: A, dl: &DeadLetter, error: &Error) {
        self.stats.incr(Counter::SettleFailures);
        tracing::error!(
            target: "consumer",
            handler = %dl.handler,
            message_id = %dl.message_id,
            kind = %dl.kind,
            error = %chain(error),
            "could not dead-letter the message on the broker nor in the store; releasing it for redelivery"
        );
        self.release(acker).await;
    }
}
