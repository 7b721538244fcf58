//! [`Step`]: what a transition may do besides changing the state. It
//! records intents; the framework writes them after the transition
//! returns, in the transaction that holds the dedup row and saves the
//! state, so a transition can neither publish nor schedule anything that
//! is not committed with its state.

use serde::Serialize;

use super::compensation::{self, Undo};
use super::ids;
use super::record::{Meta, PendingTimeout, UndoStatus, UndoStep};
use super::status::SagaStatus;
use consumer_core::handler::MessageContext;
use consumer_core::outbox::{Due, NewEvent, ScheduleToken};
use consumer_core::retry::RetryPolicy;

/// What the framework writes for a transition, in this order, after
/// saving the state.
#[derive(Debug)]
pub(super) enum Intent {
    /// `Outbox::enqueue`.
    Send(NewEvent),
    /// `Outbox::schedule`.
    Schedule(NewEvent, Due),
    /// `Outbox::cancel`.
    Cancel(ScheduleToken),
}

/// A transition's view of its saga besides the state: the message that
/// triggered it, and everything it may ask for: commands and events
/// (through the outbox only), timeouts, undo steps, compensation, the end.
///
/// Nothing is written while the transition runs: what it asks for is
/// written after it returns `Ok`, in the transaction that holds the
/// message's dedup row and saves the state at the next version; if that
/// transaction does not commit, none of it exists. Every command gets an
/// id derived from the saga, the version and its place in the transition,
/// so it is the same id whenever the same transition is written.
pub struct Step<'a> {
    saga_type: &'static str,
    saga_id: &'a str,
    version: i64,
    started: bool,
    message: &'a MessageContext,
    timeouts_to: Option<&'a str>,
    meta: &'a mut Meta,
    intents: Vec<Intent>,
    written: u32,
    problems: Vec<String>,
    notes: Vec<String>,
    now_ms: i64,
}

impl std::fmt::Debug for Step<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Step")
            .field("saga_type", &self.saga_type)
            .field("saga_id", &self.saga_id)
            .field("version", &self.version)
            .field("status", &self.meta.status)
            .field("intents", &self.intents.len())
            .finish_non_exhaustive()
    }
}

/// What a transition left for the framework.
pub(super) struct Written {
    pub(super) intents: Vec<Intent>,
    pub(super) problems: Vec<String>,
    pub(super) notes: Vec<String>,
}

impl<'a> Step<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        saga_type: &'static str,
        saga_id: &'a str,
        version: i64,
        started: bool,
        message: &'a MessageContext,
        timeouts_to: Option<&'a str>,
        meta: &'a mut Meta,
        now_ms: i64,
    ) -> Self {
        Self {
            saga_type,
            saga_id,
            version,
            started,
            message,
            timeouts_to,
            meta,
            intents: Vec::new(),
            written: 0,
            problems: Vec::new(),
            notes: Vec::new(),
            now_ms,
        }
    }

    pub(super) fn finish(self) -> Written {
        Written {
            intents: self.intents,
            problems: self.problems,
            notes: self.notes,
        }
    }

    /// The saga type.
    pub fn saga_type(&self) -> &'static str {
        self.saga_type
    }

    /// The saga's id.
    pub fn saga_id(&self) -> &str {
        self.saga_id
    }

    /// The version this transition writes (1 for the first).
    pub fn version(&self) -> i64 {
        self.version
    }

    /// Whether this transition starts the saga.
    pub fn is_start(&self) -> bool {
        self.started
    }

    /// Where the saga is now (what this transition asked for so far
    /// included).
    pub fn status(&self) -> SagaStatus {
        self.meta.status
    }

    /// The message that triggered the transition: its id, headers, key,
    /// attempt and trace context.
    pub fn message(&self) -> &MessageContext {
        self.message
    }

    fn next_id(&mut self) -> uuid::Uuid {
        let id = ids::written(self.saga_type, self.saga_id, self.version, self.written);
        self.written += 1;
        id
    }

    fn problem(&mut self, text: String) {
        self.problems.push(text);
    }

    /// Sends a command or an event of `event_type` with `payload` to
    /// `destination`, through the outbox, keyed by the saga id (replies
    /// must come back keyed by it too; see the [module docs](super)).
    /// A payload that does not serialise fails the transition (terminal).
    pub fn send<T: Serialize + ?Sized>(
        &mut self,
        destination: &str,
        event_type: &str,
        payload: &T,
    ) {
        match NewEvent::new(self.saga_type, self.saga_id, event_type, payload) {
            Ok(event) => self.send_event(event.with_destination(destination)),
            Err(e) => self.problem(format!(
                "the payload of `{event_type}` cannot be serialised: {e}"
            )),
        }
    }

    /// Sends `event` as built (another aggregate, headers of its own),
    /// through the outbox. It gets the transition's deterministic id unless
    /// it has one ([`NewEvent::with_id`]).
    pub fn send_event(&mut self, event: NewEvent) {
        let event = match event.id() {
            Some(_) => event,
            None => {
                let id = self.next_id();
                event.with_id(id)
            }
        };
        self.intents.push(Intent::Send(event));
    }

    /// Schedules a timeout: an event of `event_type` with `payload`,
    /// published to the saga's own input once `due` (through the outbox's
    /// scheduled events) and taken by the transition registered with
    /// [`SagaBuilder::on_timeout`](super::SagaBuilder::on_timeout). Its
    /// token is kept on the saga: a timeout cancelled, replaced or arriving
    /// after the saga finished is acked and ignored.
    pub fn schedule_timeout<T: Serialize + ?Sized>(
        &mut self,
        event_type: &str,
        payload: &T,
        due: impl Into<Due>,
    ) -> ScheduleToken {
        let id = self.next_id();
        let token = ScheduleToken::from(id);
        let due = due.into();
        let event = match NewEvent::new(self.saga_type, self.saga_id, event_type, payload) {
            Ok(e) => e.with_id(id),
            Err(e) => {
                self.problem(format!(
                    "the payload of timeout `{event_type}` cannot be serialised: {e}"
                ));
                return token;
            }
        };
        let event = match self.timeouts_to {
            Some(to) => event.with_destination(to),
            None => event,
        };
        let due_ms = match due {
            Due::At(t) => i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX),
            Due::After(d) => self
                .now_ms
                .saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        };
        self.meta
            .timeouts
            .push(PendingTimeout::new(token, event_type.to_owned(), due_ms));
        self.intents.push(Intent::Schedule(event, due));
        token
    }

    /// Cancels a pending timeout: `true` when the saga was waiting for it.
    /// If it was published already, it arrives, is recognised as stale,
    /// and does nothing.
    pub fn cancel_timeout(&mut self, token: ScheduleToken) -> bool {
        let before = self.meta.timeouts.len();
        self.meta.timeouts.retain(|t| t.token() != token);
        if self.meta.timeouts.len() == before {
            return false;
        }
        self.intents.push(Intent::Cancel(token));
        true
    }

    /// Cancels every pending timeout.
    pub fn cancel_timeouts(&mut self) {
        for t in std::mem::take(&mut self.meta.timeouts) {
            self.intents.push(Intent::Cancel(t.token()));
        }
    }

    /// The timeouts the saga waits for.
    pub fn timeouts(&self) -> &[PendingTimeout] {
        &self.meta.timeouts
    }

    /// Records how to undo a step just taken: sent, last recorded first,
    /// if the saga compensates.
    pub fn record_undo(&mut self, undo: Undo) {
        match undo.into_step(self.version) {
            Ok(step) => self.meta.compensation.push(step),
            Err(problem) => self.problem(problem),
        }
    }

    /// Withdraws the undo of step `name`, recorded earlier and not sent: a
    /// step whose effect is gone by other means (a payment the gateway
    /// voided, a hold that lapsed) must not be undone again if the saga
    /// compensates later. `false`, with nothing changed, when no such undo
    /// is waiting (never recorded, already withdrawn, or already sent: an
    /// undo under way is reported with [`undone`](Self::undone) or
    /// [`undo_failed`](Self::undo_failed)). Of several unsent undos of
    /// one name, the last recorded goes. The step stays in the log as
    /// `withdrawn`, and the history notes it.
    pub fn withdraw_undo(&mut self, name: &str) -> bool {
        let waiting = self
            .meta
            .compensation
            .iter_mut()
            .rev()
            .find(|u| u.name == name && u.status == UndoStatus::Recorded);
        match waiting {
            Some(undo) => {
                undo.status = UndoStatus::Withdrawn;
                self.notes.push(format!("undo `{name}` withdrawn"));
                true
            }
            None => false,
        }
    }

    /// The compensation log, in the order the steps were recorded.
    pub fn compensation(&self) -> &[UndoStep] {
        &self.meta.compensation
    }

    /// Starts compensating, for `reason`: the pending timeouts are
    /// cancelled (schedule the compensation's own after this call), and
    /// the recorded undo steps are sent last first, each once the one
    /// after it is done. Once none is left the saga is `compensated`, or
    /// `compensation_failed` if one failed. Compensating again is a no-op;
    /// a finished saga cannot compensate (the transition fails, terminal).
    pub fn compensate(&mut self, reason: impl Into<String>) {
        match self.meta.status {
            SagaStatus::Running => {
                let reason = reason.into();
                self.notes.push(format!("compensating: {reason}"));
                self.meta.status = SagaStatus::Compensating;
                self.meta.reason = Some(reason);
                self.cancel_timeouts();
            }
            SagaStatus::Compensating => {}
            done => self.problem(format!("a {done} saga cannot compensate")),
        }
    }

    /// The undo awaiting its outcome succeeded: the compensation goes on
    /// with the step before it. Without one in flight the transition fails
    /// (terminal).
    pub fn undone(&mut self) {
        match compensation::in_flight(self.meta) {
            Some(step) => step.status = UndoStatus::Done,
            None => self.problem("`undone` with no undo step awaiting its outcome".into()),
        }
    }

    /// The undo awaiting its outcome failed for good, for `reason`: it is
    /// marked failed, the compensation goes on with the step before it, and
    /// the saga ends `compensation_failed` (dead-lettered with its context).
    pub fn undo_failed(&mut self, reason: impl Into<String>) {
        let reason = reason.into();
        match compensation::in_flight(self.meta) {
            Some(step) => {
                self.notes
                    .push(format!("undo `{}` failed: {reason}", step.name));
                step.status = UndoStatus::Failed;
                step.error = Some(reason);
            }
            None => self.problem("`undo_failed` with no undo step awaiting its outcome".into()),
        }
    }

    /// Sends step `name`'s command again, after `policy`'s full-jitter delay
    /// for this attempt, if `policy` allows one more attempt: `true` when
    /// sent, `false` when its attempts are used up (compensate then). The
    /// first send counts as attempt 1. The resend is a scheduled outbox
    /// event, cancelled if the saga finishes before it goes.
    pub fn retry_step<T: Serialize + ?Sized>(
        &mut self,
        name: &str,
        policy: &RetryPolicy,
        destination: &str,
        event_type: &str,
        payload: &T,
    ) -> bool {
        let failed = self.meta.retries.get(name).map_or(0, |r| r.attempts) + 1;
        if !policy.should_retry(failed) {
            return false;
        }
        let delay = policy.delay(failed, &mut rand::rng());
        let id = self.next_id();
        let event = match NewEvent::new(self.saga_type, self.saga_id, event_type, payload) {
            Ok(e) => e.with_destination(destination).with_id(id),
            Err(e) => {
                self.problem(format!(
                    "the payload of `{event_type}` cannot be serialised: {e}"
                ));
                return false;
            }
        };
        let entry = self.meta.retries.entry(name.to_owned()).or_default();
        entry.attempts = failed;
        entry.scheduled = Some(ScheduleToken::from(id));
        self.notes
            .push(format!("step `{name}` sent again (attempt {})", failed + 1));
        self.intents
            .push(Intent::Schedule(event, Due::after(delay)));
        true
    }

    /// How many times step `name` was sent again with
    /// [`Step::retry_step`].
    pub fn step_retries(&self, name: &str) -> u32 {
        self.meta.retries.get(name).map_or(0, |r| r.attempts)
    }

    /// Finishes the saga: `completed`. Its pending timeouts are cancelled;
    /// its row stays as a tombstone until the store's retention ends.
    pub fn complete(&mut self) {
        match self.meta.status {
            SagaStatus::Running => self.meta.status = SagaStatus::Completed,
            other => self.problem(format!("a {other} saga cannot complete")),
        }
    }

    /// Finishes the saga without compensating: `failed`, for `reason`.
    pub fn fail(&mut self, reason: impl Into<String>) {
        match self.meta.status {
            SagaStatus::Running => {
                let reason = reason.into();
                self.notes.push(format!("failed: {reason}"));
                self.meta.status = SagaStatus::Failed;
                self.meta.reason = Some(reason);
            }
            other => self.problem(format!("a {other} saga cannot fail")),
        }
    }
}
