//! One delivery's attempts: pre-check, run the handler in its span,
//! classify, and decide the outcome (ack, retry in place or through the
//! broker, dead letter).

use std::sync::Arc;
use std::time::Instant;

use opentelemetry::Context;
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::TraceContextExt as _;
use time::OffsetDateTime;
use tracing::Instrument;

use super::circuit::{Admission, Circuit, Verdict};
use super::observe::Happened;
use super::settle::{Parking, Redelivered, Why};
use super::worker::Worker;
use super::{Ended, jitter};
use crate::dead_letter::DeadLetterKind;
use crate::envelope::{Envelope, HeaderError, Placement};
use crate::error::BoxError;
use crate::handler::CatchUnwind;
use crate::handler::{Failure, FailureKind, Handler, Invocation, Outcome};
use crate::metrics::attr::error_type;
use crate::retry::{RetryMode, RetryPolicy};
use crate::router::{Route, Routes};
use crate::source::Acker;
use crate::store::held::OnDeadLetter;
use crate::store::{DedupStore, FailureRecord};
use crate::trace;
use consumer_backend::RetryCopy;

/// Input rejected before the handler runs: always a poison pill.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// Headers present but malformed.
    #[error("malformed headers: {}", join(.0))]
    MalformedHeaders(Vec<HeaderError>),
    /// Payload over the configured limit.
    #[error("payload of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
}

/// What follows a failed attempt.
enum Next<A> {
    /// The delivery is done here: settled or released.
    Ended(Ended),
    /// Try again in place with this envelope (the next attempt's number).
    Again(Arc<Envelope>, A),
}

/// Awaits `step` in the context `cx`, or in the current one when `cx` is
/// `None`. A macro, not an `async fn`: the step's future is built where it
/// is awaited instead of moved into a wrapper's (a copy of some hundred
/// bytes on every ack).
macro_rules! within {
    ($cx:expr, $step:expr) => {
        match $cx {
            Some(cx) => $step.with_context(cx).await,
            None => $step.await,
        }
    };
}

/// The delivery with its attempt number bounded by the handler's policy:
/// a number past the policy's last attempt was not written by a retry of
/// this handler (a forged or foreign `x-consumer-attempt`), and taken as is
/// it would skip every retry. It counts as a first attempt; the store's
/// count of the message's failures still bounds its retries.
fn bounded_attempt(envelope: Arc<Envelope>, policy: &RetryPolicy) -> Arc<Envelope> {
    if envelope.attempt <= policy.max_attempts() {
        return envelope;
    }
    let mut first = Envelope::clone(&envelope);
    first.attempt = 1;
    Arc::new(first)
}

/// The handler a failure happened in, as what follows it needs it.
#[derive(Clone, Copy)]
struct Who {
    name: &'static str,
    /// It holds keys: its dead letters hold theirs.
    holds_key: bool,
}

/// Whether the delivery is a parked message the drain of a released key
/// handed back (no broker delivery carries that placement).
fn is_drained(envelope: &Envelope) -> bool {
    matches!(envelope.origin.placement, Placement::Held { .. })
}

fn join(errors: &[HeaderError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl<S, R, A> Worker<S, R, A>
where
    S: DedupStore,
    R: Routes<S>,
    A: Acker,
{
    /// Routes the delivery to its handler, then runs attempts until it is
    /// settled or released.
    pub(super) async fn process(&self, envelope: Arc<Envelope>, acker: A) -> Ended {
        match self.routes.route(&envelope) {
            Route::To(handler) => self.run(handler, envelope, acker).await,
            Route::Ignore => {
                self.observer.emit(Happened::Ignored(&envelope));
                self.settler.ack(&envelope, acker).await
            }
            Route::Unknown { router, error } => {
                let why = Why {
                    handler: router,
                    envelope: &envelope,
                    kind: DeadLetterKind::Poison,
                    error: &error,
                    attempts: envelope.attempt,
                    first_failure: None,
                    holds_key: false,
                };
                self.settler.dead_letter(why, acker).await
            }
        }
    }

    /// Runs `handler`'s attempts until the delivery is settled or
    /// released (`false`).
    async fn run(&self, handler: &R::Handler, envelope: Arc<Envelope>, acker: A) -> Ended {
        let name = handler.name();
        let holds_key = handler.on_dead_letter() == OnDeadLetter::HoldKey;
        // A held key's later messages wait behind its head; what the
        // drain hands back is what the hold kept, and runs.
        let mut acker = match envelope.key.as_deref() {
            Some(key) if holds_key && !is_drained(&envelope) => {
                match self.settler.park_if_held(name, key, &envelope, acker).await {
                    Parking::Runs(acker) => acker,
                    Parking::Ended(ended) => return ended,
                }
            }
            _ => acker,
        };
        let policy = handler.retry_policy();
        let circuit = self.circuits.of(name, handler.circuit_policy());
        let mut envelope = bounded_attempt(envelope, &policy);
        let mut failed_here = false;
        loop {
            let Some(admission) = self.admit(name, &circuit, &envelope).await else {
                return self.settler.release(&envelope, acker).await;
            };
            // Settle spans are children of the attempt's span (of the
            // delivery's context when no attempt ran).
            let Some((outcome, cx)) = self.attempt_in_turn(handler, &envelope).await else {
                return self.settler.release(&envelope, acker).await;
            };
            self.record_circuit(&circuit, name, &envelope.id, admission, &outcome);
            let failure = match outcome {
                Outcome::Processed => {
                    self.observer.emit(Happened::Processed);
                    if (failed_here || envelope.attempt > 1)
                        && let Err(e) = self.store.clear_failures(name, &envelope.id).await
                    {
                        self.observer
                            .emit(Happened::FailuresNotCleared { error: &e });
                    }
                    return within!(cx, self.settler.ack(&envelope, acker));
                }
                Outcome::Duplicate => {
                    self.observer.emit(Happened::Duplicate {
                        envelope: &envelope,
                        handler: name,
                    });
                    return within!(cx, self.settler.ack(&envelope, acker));
                }
                Outcome::Failed(f) => f,
            };
            failed_here |= failure.kind == FailureKind::Transient;
            // The circuit opened (this failure may have opened it): the
            // cause is behind the handler, so the delivery waits for the
            // probe with its attempt unspent. A probe's own failure counts.
            if failure.kind == FailureKind::Transient
                && admission == Admission::Closed
                && !circuit.is_closed()
            {
                continue;
            }
            match self
                .after_failure(
                    Who { name, holds_key },
                    &policy,
                    envelope,
                    acker,
                    failure,
                    cx,
                )
                .await
            {
                Next::Ended(ended) => return ended,
                Next::Again(next, kept) => (envelope, acker) = (next, kept),
            }
        }
    }

    /// One attempt: the pre-check, then the handler, in its turn when it
    /// has limits; `None` when shutdown began while the delivery waited
    /// for its turn (it is released).
    async fn attempt_in_turn(
        &self,
        handler: &R::Handler,
        envelope: &Arc<Envelope>,
    ) -> Option<(Outcome, Option<Context>)> {
        if let Err(e) = self.precheck(envelope) {
            let poison = Outcome::Failed(Failure::new(FailureKind::Poison, e));
            return Some((poison, None));
        }
        let turn = if self.limits.is_empty() {
            None
        } else {
            tokio::select! {
                biased;
                turn = self.limits.enter(handler.name()) => Some(turn),
                () = self.stopping.begun() => return None,
            }
        };
        let attempted = self.attempt(handler, envelope).await;
        drop(turn);
        Some(attempted)
    }

    /// Waits until the delivery may run an attempt: its handler not
    /// paused by an operator, then let through by its circuit (at once
    /// while closed); `None` when shutdown began first. A paused handler's
    /// deliveries wait before the circuit's: none of them probes.
    async fn admit(&self, name: &str, circuit: &Circuit, envelope: &Envelope) -> Option<Admission> {
        if self.pauses.is_paused(name) {
            tokio::select! {
                () = self.pauses.until_resumed(name) => {}
                () = self.stopping.begun() => return None,
            }
        }
        if circuit.is_closed() {
            return Some(Admission::Closed);
        }
        tokio::select! {
            admitted = circuit.admit(&envelope.id, envelope.attempt) => Some(admitted),
            () = self.stopping.begun() => None,
        }
    }

    /// Tells `circuit` what an attempt said about what is behind its
    /// handler, and the observer when that opened or closed it.
    fn record_circuit(
        &self,
        circuit: &Circuit,
        handler: &'static str,
        id: &str,
        admission: Admission,
        outcome: &Outcome,
    ) {
        let verdict = match outcome {
            Outcome::Processed | Outcome::Duplicate => Verdict::Worked,
            Outcome::Failed(f) if f.kind == FailureKind::Transient => Verdict::FailedTransiently,
            Outcome::Failed(_) => Verdict::Neither,
        };
        if let Some(transition) = circuit.record(id, admission, verdict) {
            self.circuits.changed(transition);
            self.observer.emit(Happened::Circuit {
                handler,
                transition,
                opens_after: circuit.policy().opens_after(),
            });
        }
    }

    /// Decides what follows a failed attempt: a dead letter (poison,
    /// terminal, or out of attempts), a retry copy through the broker, or
    /// an in-place retry after its delay, with the next attempt's envelope.
    async fn after_failure(
        &self,
        who: Who,
        policy: &RetryPolicy,
        envelope: Arc<Envelope>,
        acker: A,
        failure: Failure,
        cx: Option<Context>,
    ) -> Next<A> {
        let Who { name, holds_key } = who;
        let kind = match failure.kind {
            FailureKind::Poison => Some(DeadLetterKind::Poison),
            FailureKind::Terminal => Some(DeadLetterKind::Terminal),
            FailureKind::Transient => None,
        };
        if let Some(kind) = kind {
            let why = Why {
                handler: name,
                envelope: &envelope,
                kind,
                error: &*failure.error,
                attempts: envelope.attempt,
                first_failure: None,
                holds_key,
            };
            let letter = self.settler.dead_letter(why, acker);
            return Next::Ended(within!(cx, letter));
        }
        // A failure may carry its own policy (see `Failure::with_retry`).
        let policy = &failure.retry.unwrap_or(*policy);
        let record = self.record_failure(name, &envelope, &failure.error).await;
        if !policy.should_retry(record.attempts) {
            let why = Why {
                handler: name,
                envelope: &envelope,
                kind: DeadLetterKind::Exhausted,
                error: &*failure.error,
                attempts: record.attempts,
                first_failure: Some(record.first_failure),
                holds_key,
            };
            let letter = self.settler.dead_letter(why, acker);
            return Next::Ended(within!(cx, letter));
        }
        let delay = jitter(policy, record.attempts);
        self.observer.emit(Happened::Retrying {
            envelope: &envelope,
            handler: name,
            attempt: record.attempts,
            delay,
            error: &failure.error,
        });
        let copy = RetryCopy::new(&envelope, record.attempts + 1, record.first_failure, delay)
            .with_error(failure.error.to_string());
        let mut acker = acker;
        if policy.mode() == RetryMode::Redeliver {
            let copied = self.settler.redeliver(name, &envelope, acker, &copy);
            match within!(cx.clone(), copied) {
                Redelivered::Refused(refused) => acker = refused,
                Redelivered::Ended(ended) => {
                    if ended == Ended::Settled {
                        self.retried(&envelope, name, "redeliver");
                    }
                    return Next::Ended(ended);
                }
            }
        }
        // In place (the mode, or the fallback for a refused copy).
        self.retried(&envelope, name, "in_place");
        if !self.stopping.sleep_unless_stopping(delay).await {
            return Next::Ended(within!(cx, self.settler.release(&envelope, acker)));
        }
        let mut next = Envelope::clone(&envelope);
        next.attempt = copy.attempt;
        next.first_failure = Some(copy.first_failure);
        Next::Again(Arc::new(next), acker)
    }

    fn retried(&self, envelope: &Envelope, handler: &'static str, mode: &'static str) {
        self.observer.emit(Happened::Retried {
            envelope,
            handler,
            mode,
        });
    }

    fn precheck(&self, envelope: &Envelope) -> Result<(), InputError> {
        if !envelope.defects.is_empty() {
            return Err(InputError::MalformedHeaders(envelope.defects.clone()));
        }
        if envelope.payload.len() > self.max_payload_bytes {
            return Err(InputError::TooLarge {
                size: envelope.payload.len(),
                limit: self.max_payload_bytes,
            });
        }
        Ok(())
    }

    /// One handler attempt, in its span, timed for
    /// `messaging.process.duration`; with the context its settle steps run
    /// in (`None`: the current one, when the span is not recorded).
    async fn attempt(
        &self,
        handler: &R::Handler,
        envelope: &Arc<Envelope>,
    ) -> (Outcome, Option<Context>) {
        let (span, cx) = trace::consume_span(envelope, handler.name(), &self.spans);
        let mut invocation = Invocation::new(envelope, &self.store, &self.codecs, handler.name());
        let started = Instant::now();
        // A span not recorded leaves `cx` the current context (attaching it
        // again on every poll would change nothing, at a cost), or a fresh
        // root when the delivery had no valid parent: the handler runs in
        // that, so what it sends carries a `traceparent` at any log level.
        // The handler's future is built in the branch that awaits it (built
        // before, it would be copied into the branch's wrapper).
        let (ran, cx) = if span.is_disabled() {
            if Context::current().span().span_context().is_valid() {
                (
                    CatchUnwind::new(handler.handle(&mut invocation)).await,
                    None,
                )
            } else {
                let run = CatchUnwind::new(handler.handle(&mut invocation));
                (run.with_context(cx).await, None)
            }
        } else {
            let recorded = span.clone();
            let run = CatchUnwind::new(handler.handle(&mut invocation));
            (
                run.with_context(cx.clone()).instrument(recorded).await,
                Some(cx),
            )
        };
        let (outcome, error) = match ran {
            Ok(outcome) => {
                let error = match &outcome {
                    Outcome::Failed(f) => Some(match f.kind {
                        FailureKind::Poison => error_type::POISON,
                        FailureKind::Terminal => error_type::TERMINAL,
                        FailureKind::Transient => error_type::TRANSIENT,
                    }),
                    Outcome::Processed | Outcome::Duplicate => None,
                };
                (outcome, error)
            }
            Err(panic) => (
                Outcome::Failed(Failure::new(FailureKind::Terminal, panic)),
                Some(error_type::PANIC),
            ),
        };
        self.observer.emit(Happened::Attempted {
            envelope,
            handler: handler.name(),
            took: started.elapsed(),
            error,
        });
        if let Some(e) = error {
            trace::record_error(&span, e);
        }
        (outcome, cx)
    }

    async fn record_failure(
        &self,
        name: &str,
        envelope: &Envelope,
        error: &BoxError,
    ) -> FailureRecord {
        match self
            .store
            .record_failure(name, &envelope.id, &error.to_string())
            .await
        {
            Ok(r) => FailureRecord {
                attempts: r.attempts.max(envelope.attempt),
                first_failure: r.first_failure,
            },
            Err(e) => {
                // The count still travels with the message (in-memory attempt
                // number, header on redelivery); only a crash now resets it.
                self.observer
                    .emit(Happened::FailureNotRecorded { error: &e });
                FailureRecord {
                    attempts: envelope.attempt,
                    first_failure: envelope
                        .first_failure
                        .unwrap_or_else(OffsetDateTime::now_utc),
                }
            }
        }
    }
}
