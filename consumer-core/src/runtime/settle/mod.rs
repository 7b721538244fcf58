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
//!        held: the delivery stays (its key's lane waits behind it) and the
//!        chain is tried again, 1 s later, then twice as long each time up
//!        to a minute (ERROR log, `settle_failures`); shutdown releases it
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
//! Each step has the settle timeout to itself, so a delivery whose steps
//! fail until the timeout holds its key's lane for three of them (the
//! check, the letter, the table; or the copy) plus the broker's own send
//! timeouts, and the other deliveries of the key go on once a fallback
//! took it. The one exception is a dead letter that nothing takes: it
//! holds the lane until the broker or the store takes it (`letter.rs`),
//! since releasing it would only run it, and fail it, again.

use std::future::Future;
use std::time::{Duration, Instant};

use tracing::Instrument;

use super::observe::{Happened, Observer, StepThen};
use super::{Ended, STEP_BACKOFF, Stopping, jitter};
use crate::envelope::Envelope;
use crate::error::Error;
use crate::metrics::attr::operation;
use crate::source::Acker;
use crate::store::DedupStore;
use crate::trace::{self, SpanScope};
use consumer_backend::RetryCopy;

mod letter;

pub(super) use letter::Why;

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

/// How sending a retry copy ended.
pub(super) enum Redelivered<A> {
    /// The copy is confirmed and the original settled, or shutdown began
    /// and the original was released.
    Ended(Ended),
    /// The broker did not take the copy: retry in place.
    Refused(A),
}

/// How looking for a hold on a delivery's key ended.
pub(super) enum Parking<A> {
    /// Not held: the delivery runs, with its acker.
    Runs(A),
    /// Parked and acked, or released (the store could not say).
    Ended(Ended),
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
    /// and outcome. An operation the backend never answers (a confirm or
    /// an ack lost with its connection) fails after the settle timeout as
    /// one that can heal, so its step's budget and fallback apply and no
    /// lane waits for it for ever.
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
        let bounded = async {
            tokio::time::timeout(self.timeout, run)
                .await
                .unwrap_or_else(|_| {
                    Err(consumer_backend::Error::broker(
                        consumer_backend::BrokerErrorKind::Unavailable,
                        format!(
                            "the broker did not answer the {op} within the settle timeout ({:?})",
                            self.timeout
                        ),
                        None,
                    ))
                })
        };
        let r = if span.is_disabled() {
            bounded.await
        } else {
            bounded.instrument(span.clone()).await
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
}
