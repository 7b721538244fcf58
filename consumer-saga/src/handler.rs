//! [`SagaHandler`]: a saga as a [`Handler`] on a SQL store. One delivery
//! is one transition, in one transaction: claim the message's dedup row,
//! load the saga's row, run the transition, save the row at the next
//! version (a conflict runs the transition again, at once, on the new
//! version), write what the transition asked for into the outbox, commit.

use crate::statements;
use std::sync::Arc;

use tracing::Instrument;
use tracing::field::Empty;

use super::compensation;
use super::error::{
    KeyMismatchError, SagaMisuse, SagaNotFound, TimeoutWithoutSaga, TooManyConflicts,
    UnknownSagaEvent,
};
use super::metrics::Ignored;
use super::observe::{Happened, SagaObserver};
use super::record::{HistoryEntry, Meta, SagaWrite, UnreadableRow};
use super::route::{Route, RouteKind};
use super::step::{Intent, Step, Written};
use super::{KeyMismatch, NotFound, Saga, SagaBuilder, SagaDatabase, SagaStatus};
use consumer_core::describe::{DeclaredEvent, HandlerDescription, PayloadType};
use consumer_core::envelope::Envelope;
use consumer_core::error::Error;
use consumer_core::handler::{Failure, FailureKind, Handler, Invocation, MessageContext, Outcome};
use consumer_core::outbox::{Outbox, ScheduleToken};
use consumer_core::retry::RetryPolicy;
use consumer_core::store::{Store, Tx};

/// Conflicts one delivery meets before it gives up as a transient failure
/// (each means another transaction changed the saga and committed: it
/// heals, but not in a loop without end).
const MAX_CONFLICTS: u32 = 16;

/// A saga, as a handler: add it to a [`Router`](consumer_core::Router) beside
/// ordinary handlers (it takes the event types it registered), or run it
/// alone in a [`Consumer`](consumer_core::Consumer). Built by [`SagaBuilder`].
///
/// Its name ([`Saga::name`]) scopes its dedup rows like a handler's, and
/// its rows in `consumer_sagas`: renaming a saga type forgets its sagas.
pub struct SagaHandler<S: Saga> {
    saga: S,
    outbox: Outbox,
    routes: Vec<Box<dyn Route<S>>>,
    types: Vec<&'static str>,
    schemas: Vec<(&'static str, PayloadType)>,
    sends: Vec<DeclaredEvent>,
    retry: RetryPolicy,
    timeouts_to: Option<String>,
    key_mismatch: KeyMismatch,
    /// Entries its sagas' history keeps.
    history_limit: i64,
    observer: SagaObserver,
}

impl<S: Saga> std::fmt::Debug for SagaHandler<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SagaHandler")
            .field("saga", &self.saga.name())
            .field("types", &self.types)
            .field("retry", &self.retry)
            .field("timeouts_to", &self.timeouts_to)
            .finish_non_exhaustive()
    }
}

/// What one run of the transition decided.
enum Decision {
    Saved(Effects),
    Conflict,
    Ignored(Ignored),
    NotFound(NotFound),
}

/// What a saved transition did, for the metrics (recorded after commit).
struct Effects {
    started: bool,
    timed_out: bool,
    status: SagaStatus,
    version: i64,
}

/// Why a run failed.
enum Failed<E> {
    Transition(E),
    Misuse(Vec<String>),
    Poison(serde_json::Error),
    Store(Error),
    Unreadable(UnreadableRow),
}

impl<E> From<Error> for Failed<E> {
    fn from(e: Error) -> Self {
        Self::Store(e)
    }
}

impl<E> From<sqlx::Error> for Failed<E> {
    fn from(e: sqlx::Error) -> Self {
        Self::Store(Error::Database(e))
    }
}

impl<E> From<UnreadableRow> for Failed<E> {
    fn from(e: UnreadableRow) -> Self {
        Self::Unreadable(e)
    }
}

fn poison(error: impl Into<consumer_core::BoxError>) -> Outcome {
    Outcome::Failed(Failure::new(FailureKind::Poison, error))
}

impl<S: Saga> SagaHandler<S> {
    pub(super) fn from_builder(b: SagaBuilder<S>) -> Self {
        let observer = SagaObserver::new(b.saga.name(), b.meter);
        Self {
            types: b.routes.iter().map(|r| r.event_type()).collect(),
            saga: b.saga,
            outbox: b.outbox,
            routes: b.routes,
            schemas: b.schemas,
            sends: b.sends,
            retry: b.retry,
            timeouts_to: b.timeouts_to,
            key_mismatch: b.key_mismatch,
            history_limit: i64::try_from(b.history_limit).unwrap_or(i64::MAX),
            observer,
        }
    }

    /// The saga.
    pub fn saga(&self) -> &S {
        &self.saga
    }

    /// The outbox it writes into.
    pub fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    fn route(&self, kind: Option<&str>) -> Option<&dyn Route<S>> {
        let kind = kind?;
        self.routes
            .iter()
            .find(|r| r.event_type() == kind)
            .map(|r| &**r)
    }

    /// The saga id of `envelope`: correlated from its payload, or, for a
    /// timeout, its subject (the outbox's aggregate id) or key.
    fn saga_id(&self, route: &dyn Route<S>, envelope: &Envelope) -> Result<String, Outcome> {
        match route.correlate(&envelope.payload) {
            Ok(Some(id)) => Ok(id),
            Err(e) => Err(poison(consumer_core::handler::DecodeError::new(
                route.payload().type_name(),
                e,
            ))),
            Ok(None) => envelope
                .subject
                .clone()
                .or_else(|| envelope.key.clone())
                .ok_or_else(|| {
                    poison(TimeoutWithoutSaga {
                        saga: self.saga.name(),
                        event_type: route.event_type(),
                    })
                }),
        }
    }

    /// Refuses (or logs) an event not keyed by its saga's id.
    fn check_key(
        &self,
        route: &dyn Route<S>,
        saga_id: &str,
        envelope: &Envelope,
    ) -> Result<(), Outcome> {
        if envelope.key.as_deref() == Some(saga_id) {
            return Ok(());
        }
        let error = KeyMismatchError {
            saga: self.saga.name(),
            saga_id: saga_id.to_owned(),
            event_type: route.event_type(),
            key: envelope.key.clone(),
        };
        match self.key_mismatch {
            KeyMismatch::Refuse => Err(poison(error)),
            KeyMismatch::Accept => {
                self.observer.emit(&Happened::KeyMismatchAccepted {
                    message_id: &envelope.id,
                    error: &error,
                });
                Ok(())
            }
        }
    }

    /// Runs the transition in `step` and returns what it asked for.
    #[allow(clippy::too_many_arguments)]
    fn run_transition(
        &self,
        route: &dyn Route<S>,
        state: &mut S::State,
        meta: &mut Meta,
        saga_id: &str,
        version: i64,
        started: bool,
        message: &MessageContext,
    ) -> Result<Written, Failed<S::Error>> {
        let mut step = Step::new(
            self.saga.name(),
            saga_id,
            version,
            started,
            message,
            self.timeouts_to.as_deref(),
            meta,
            consumer_core::store::now_ms(),
        );
        let result = route.apply(&self.saga, state, &message.envelope().payload, &mut step);
        let written = step.finish();
        match result {
            Err(e) => Err(Failed::Poison(e)),
            Ok(Err(e)) => Err(Failed::Transition(e)),
            Ok(Ok(())) if !written.problems.is_empty() => Err(Failed::Misuse(written.problems)),
            Ok(Ok(())) => Ok(written),
        }
    }

    /// One run on the saga's current row: load, decide, transition, save,
    /// write the outbox rows. `Conflict` when the row changed since it was
    /// loaded (nothing of this run is written then).
    async fn attempt<DB: SagaDatabase>(
        &self,
        tx: &mut Tx<DB>,
        message: &MessageContext,
        route: &dyn Route<S>,
        saga_id: &str,
    ) -> Result<Decision, Failed<S::Error>> {
        let name = self.saga.name();
        let loaded = statements::load::<DB>(tx, name, saga_id).await?;
        let (mut state, mut meta, version) = match &loaded {
            Some(row) => (row.state::<S::State>()?, row.meta()?, row.version),
            None => match route.kind() {
                RouteKind::Event(NotFound::Start) => (S::State::default(), Meta::new(), 0),
                RouteKind::Event(policy) => return Ok(Decision::NotFound(policy.clone())),
                RouteKind::Timeout => return Ok(Decision::Ignored(Ignored::NotFound)),
            },
        };
        if !meta.status.is_active() {
            return Ok(Decision::Ignored(Ignored::Finished));
        }
        if !route.runs().accepts(meta.status) {
            return Ok(Decision::Ignored(Ignored::OutOfStatus(meta.status)));
        }
        let timed_out = matches!(route.kind(), RouteKind::Timeout);
        if timed_out && !take_timeout(&mut meta, message.message_id()) {
            return Ok(Decision::Ignored(Ignored::StaleTimeout));
        }
        let started = loaded.is_none();
        let next = version + 1;
        let written = self.run_transition(
            route, &mut state, &mut meta, saga_id, next, started, message,
        )?;
        let state = serde_json::to_string(&state)
            .map_err(|e| Failed::Misuse(vec![format!("the state cannot be serialised: {e}")]))?;
        let (intents, entry) = self.settle_meta(
            &mut meta,
            saga_id,
            written,
            route.event_type(),
            message,
            next,
            timed_out,
        )?;
        let write = SagaWrite::of(name, saga_id, state, &meta, &entry, self.history_limit)?;
        let saved = if started {
            statements::insert::<DB>(tx, &write).await?
        } else {
            statements::update::<DB>(tx, &write, version).await?
        };
        if !saved {
            return Ok(Decision::Conflict);
        }
        self.write_intents(tx, intents).await?;
        if meta.status == SagaStatus::CompensationFailed {
            super::letter::store(
                tx,
                message.envelope(),
                name,
                saga_id,
                next,
                &meta,
                &write.state,
            )
            .await?;
        }
        Ok(Decision::Saved(Effects {
            started,
            timed_out,
            status: meta.status,
            version: next,
        }))
    }

    /// After the transition: moves the compensation on and cancels what a
    /// finished saga no longer waits for; returns every outbox write, in
    /// order, and the transition's history entry.
    #[allow(clippy::too_many_arguments)]
    fn settle_meta(
        &self,
        meta: &mut Meta,
        saga_id: &str,
        written: Written,
        event_type: &str,
        message: &MessageContext,
        version: i64,
        timed_out: bool,
    ) -> Result<(Vec<Intent>, HistoryEntry), Failed<S::Error>> {
        let Written {
            mut intents,
            mut notes,
            ..
        } = written;
        let mut undo = Vec::new();
        compensation::advance(self.saga.name(), saga_id, meta, &mut undo)?;
        intents.extend(undo.into_iter().map(Intent::Send));
        if !meta.status.is_active() {
            intents.extend(cancel_everything(meta).into_iter().map(Intent::Cancel));
        }
        if timed_out {
            notes.insert(0, "timed out".to_owned());
        }
        let entry = HistoryEntry {
            version,
            event_type: event_type.to_owned(),
            message_id: message.message_id().to_owned(),
            status: meta.status,
            at_ms: consumer_core::store::now_ms(),
            note: (!notes.is_empty()).then(|| notes.join("; ")),
        };
        Ok((intents, entry))
    }

    async fn write_intents<DB: SagaDatabase>(
        &self,
        tx: &mut Tx<DB>,
        intents: Vec<Intent>,
    ) -> Result<(), Error> {
        for intent in intents {
            match intent {
                Intent::Send(event) => {
                    self.outbox.enqueue(tx, event).await?;
                }
                Intent::Schedule(event, due) => {
                    self.outbox.schedule(tx, event, due).await?;
                }
                Intent::Cancel(token) => {
                    self.outbox.cancel(tx, token).await?;
                }
            }
        }
        Ok(())
    }

    /// The delivery's transaction: claims the dedup row, runs the
    /// transition until it saves without a conflict, commits.
    async fn transact<DB: SagaDatabase>(
        &self,
        inv: &mut Invocation<'_, Store<DB>>,
        route: &dyn Route<S>,
        saga_id: &str,
    ) -> Outcome {
        let mut tx = match inv.begin_on_message_id().await {
            Ok(tx) => tx,
            Err(outcome) => return outcome,
        };
        for _ in 0..MAX_CONFLICTS {
            let decision = self.attempt(&mut tx, inv.context(), route, saga_id).await;
            let decision = match decision {
                Ok(d) => d,
                Err(failed) => return self.fail(inv, tx, route, saga_id, failed).await,
            };
            match decision {
                Decision::Conflict => self.observer.emit(&Happened::Conflict { saga_id }),
                Decision::Saved(effects) => return self.commit(inv, tx, saga_id, effects).await,
                Decision::Ignored(why) => return self.ignore(inv, tx, route, saga_id, why).await,
                Decision::NotFound(policy) => {
                    return self.not_found(inv, tx, route, saga_id, policy).await;
                }
            }
        }
        let error = TooManyConflicts {
            saga: self.saga.name(),
            saga_id: saga_id.to_owned(),
            conflicts: MAX_CONFLICTS,
        };
        inv.fail(tx, false, error).await
    }

    async fn commit<DB: SagaDatabase>(
        &self,
        inv: &Invocation<'_, Store<DB>>,
        tx: Tx<DB>,
        saga_id: &str,
        effects: Effects,
    ) -> Outcome {
        let outcome = inv.commit(tx).await;
        if matches!(outcome, Outcome::Processed) {
            let span = tracing::Span::current();
            span.record("consumer.saga.version", effects.version);
            span.record("consumer.saga.status", effects.status.as_str());
            self.observer.emit(&Happened::Saved {
                saga_id,
                started: effects.started,
                timed_out: effects.timed_out,
                status: effects.status,
            });
        }
        outcome
    }

    async fn ignore<DB: SagaDatabase>(
        &self,
        inv: &Invocation<'_, Store<DB>>,
        tx: Tx<DB>,
        route: &dyn Route<S>,
        saga_id: &str,
        why: Ignored,
    ) -> Outcome {
        let outcome = inv.commit(tx).await;
        if !matches!(outcome, Outcome::Processed) {
            return outcome;
        }
        self.observer.emit(&Happened::Ignored {
            saga_id,
            event_type: route.event_type(),
            message_id: inv.context().message_id(),
            why,
        });
        outcome
    }

    async fn not_found<DB: SagaDatabase>(
        &self,
        inv: &Invocation<'_, Store<DB>>,
        tx: Tx<DB>,
        route: &dyn Route<S>,
        saga_id: &str,
        policy: NotFound,
    ) -> Outcome {
        let error = |reason: String| SagaNotFound {
            saga: self.saga.name(),
            saga_id: saga_id.to_owned(),
            event_type: route.event_type(),
            reason,
        };
        match policy {
            NotFound::Ignore => {
                self.ignore(inv, tx, route, saga_id, Ignored::NotFound)
                    .await
            }
            NotFound::DeadLetter(reason) => inv.fail(tx, true, error(reason)).await,
            NotFound::Retry(retry) => {
                let reason = "waiting for the event that starts it".to_owned();
                match inv.fail(tx, false, error(reason)).await {
                    Outcome::Failed(f) => Outcome::Failed(f.with_retry(retry)),
                    other => other,
                }
            }
            // Start never reaches here: a start begins a saga.
            NotFound::Start => inv.fail(tx, false, error("starts it".into())).await,
        }
    }

    async fn fail<DB: SagaDatabase>(
        &self,
        inv: &Invocation<'_, Store<DB>>,
        tx: Tx<DB>,
        route: &dyn Route<S>,
        saga_id: &str,
        failed: Failed<S::Error>,
    ) -> Outcome {
        match failed {
            Failed::Transition(e) => {
                let terminal = self.saga.is_terminal(&e);
                inv.fail(tx, terminal, e).await
            }
            Failed::Misuse(problems) => {
                let misuse = SagaMisuse {
                    saga: self.saga.name(),
                    saga_id: saga_id.to_owned(),
                    event_type: route.event_type(),
                    problems,
                };
                inv.fail(tx, true, misuse).await
            }
            Failed::Unreadable(e) => inv.fail(tx, true, e).await,
            Failed::Store(e) => inv.fail(tx, !e.is_retriable(), e).await,
            Failed::Poison(e) => match inv
                .fail(
                    tx,
                    true,
                    consumer_core::handler::DecodeError::new(route.payload().type_name(), e),
                )
                .await
            {
                Outcome::Failed(f) => Outcome::Failed(Failure::new(FailureKind::Poison, f.error)),
                other => other,
            },
        }
    }
}

/// Takes the timeout `token` off the saga: `false` when the saga does not
/// wait for it (cancelled, replaced, or not a token at all).
fn take_timeout(meta: &mut Meta, message_id: &str) -> bool {
    let Ok(token) = message_id.parse::<ScheduleToken>() else {
        return false;
    };
    let before = meta.timeouts.len();
    meta.timeouts.retain(|t| t.token() != token);
    meta.timeouts.len() != before
}

/// Everything a finished saga no longer waits for: its timeouts and its
/// scheduled resends.
pub(super) fn cancel_everything(meta: &mut Meta) -> Vec<ScheduleToken> {
    let mut tokens: Vec<ScheduleToken> = meta.timeouts.drain(..).map(|t| t.token()).collect();
    for retry in meta.retries.values_mut() {
        tokens.extend(retry.scheduled.take());
    }
    tokens
}

impl<S: Saga, DB: SagaDatabase> Handler<Store<DB>> for SagaHandler<S> {
    fn name(&self) -> &'static str {
        self.saga.name()
    }

    fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    fn retry_policies(&self) -> Vec<RetryPolicy> {
        let mut policies = vec![self.retry];
        for r in &self.routes {
            if let RouteKind::Event(NotFound::Retry(p)) = r.kind() {
                policies.push(*p);
            }
        }
        policies
    }

    fn event_types(&self) -> &[&'static str] {
        &self.types
    }

    fn describe(&self) -> Vec<HandlerDescription> {
        let mut out: Vec<HandlerDescription> = self
            .routes
            .iter()
            .map(|r| {
                let payload = self
                    .schemas
                    .iter()
                    .find(|(t, _)| *t == r.event_type())
                    .map_or_else(|| r.payload(), |(_, p)| *p);
                HandlerDescription::new(self.saga.name(), vec![r.event_type()], Some(payload))
            })
            .collect();
        if let Some(first) = out.first_mut() {
            first.sends = self.sends.clone();
        }
        out
    }

    async fn handle(&self, inv: &mut Invocation<'_, Store<DB>>) -> Outcome {
        let envelope = Arc::clone(inv.envelope());
        let Some(route) = self.route(envelope.kind.as_deref()) else {
            return poison(UnknownSagaEvent {
                saga: self.saga.name(),
                kind: envelope.kind.clone(),
                takes: self.types.clone(),
            });
        };
        let saga_id = match self.saga_id(route, &envelope) {
            Ok(id) => id,
            Err(outcome) => return outcome,
        };
        if let Err(outcome) = self.check_key(route, &saga_id, &envelope) {
            return outcome;
        }
        let span = tracing::info_span!(
            target: "consumer::saga",
            "transition",
            otel.name = %format_args!("saga {} {}", self.saga.name(), route.event_type()),
            consumer.saga.type = self.saga.name(),
            consumer.saga.id = %saga_id,
            consumer.saga.event = route.event_type(),
            messaging.message.id = %envelope.id,
            consumer.saga.version = Empty,
            consumer.saga.status = Empty,
        );
        self.transact(inv, route, &saga_id).instrument(span).await
    }
}
