//! [`SagaBuilder`]: a saga's event types, how each finds its saga, what
//! each does when there is none, and their transitions; it builds the
//! [`SagaHandler`] a router (or a consumer) runs.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;

use super::Saga;
use super::handler::SagaHandler;
use super::not_found::NotFound;
use super::route::{EventRoute, Route, RouteKind, Runs};
use super::step::Step;
use consumer_core::describe::{DeclaredEvent, PayloadType};
use consumer_core::error::Error;
use consumer_core::outbox::Outbox;
use consumer_core::retry::RetryPolicy;

/// What a saga does with an event whose key is not its saga's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyMismatch {
    /// Dead-letter it as poison on its first attempt (the default): a
    /// router's lanes are per key, so a saga's events keep their order only
    /// when they are keyed by its id.
    #[default]
    Refuse,
    /// Apply it anyway, and log a WARN: the version check still keeps the
    /// saga consistent (two events at once: one wins, the other applies on
    /// top), but its events may be applied out of order.
    Accept,
}

/// Builds a [`SagaHandler`]: see the [module docs](super).
pub struct SagaBuilder<S: Saga> {
    pub(super) saga: S,
    pub(super) outbox: Outbox,
    pub(super) routes: Vec<Box<dyn Route<S>>>,
    pub(super) schemas: Vec<(&'static str, PayloadType)>,
    pub(super) sends: Vec<DeclaredEvent>,
    pub(super) retry: RetryPolicy,
    pub(super) timeouts_to: Option<String>,
    pub(super) key_mismatch: KeyMismatch,
    pub(super) history_limit: usize,
    pub(super) meter: Option<opentelemetry::metrics::Meter>,
}

impl<S: Saga> std::fmt::Debug for SagaBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SagaBuilder")
            .field("saga", &self.saga.name())
            .field(
                "events",
                &self
                    .routes
                    .iter()
                    .map(|r| r.event_type())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl<S: Saga> SagaBuilder<S> {
    /// A saga that writes its commands, events and timeouts into `outbox`
    /// (the one its service's relay publishes), with the defaults: the
    /// retry policy `RetryPolicy::DEFAULT`, timeouts to the outbox's
    /// default destination, key mismatches refused, the last 100
    /// transitions kept in its history.
    pub fn new(saga: S, outbox: Outbox) -> Self {
        Self {
            saga,
            outbox,
            routes: Vec::new(),
            schemas: Vec::new(),
            sends: Vec::new(),
            retry: RetryPolicy::DEFAULT,
            timeouts_to: None,
            key_mismatch: KeyMismatch::Refuse,
            history_limit: 100,
            meter: None,
        }
    }

    /// Takes events of `event_type` (CloudEvents `type`), decoded from JSON
    /// as `E`, while the saga goes forward (`running`): `correlate` gives
    /// the id of their saga, `not_found` says what to do when it has no
    /// row, and `transition` is what the event does to the saga.
    /// `transition` is a plain function (a method of the saga works:
    /// `OrderSaga::paid`): it changes the state and asks `step` for
    /// commands, timeouts, undo steps and the end; the framework writes all
    /// of it in the message's transaction.
    ///
    /// An event of this type that arrives while the saga compensates (a
    /// forward step's late reply) is acked without `transition` and counted
    /// in `consumer.saga.ignored` (reason `out_of_status`, logged at WARN):
    /// a saga undoing its payment must not go on to reserve stock. Replies
    /// to undo steps are registered with
    /// [`on_compensating`](Self::on_compensating); an event that acts in
    /// both with [`on_running_or_compensating`](Self::on_running_or_compensating).
    #[must_use]
    pub fn on<E, C, T>(
        self,
        event_type: &'static str,
        correlate: C,
        not_found: NotFound,
        transition: T,
    ) -> Self
    where
        E: DeserializeOwned + 'static,
        C: Fn(&E) -> String + Send + Sync + 'static,
        T: Fn(&S, &mut S::State, E, &mut Step<'_>) -> Result<(), S::Error> + Send + Sync + 'static,
    {
        self.event(event_type, correlate, not_found, transition, Runs::Forward)
    }

    /// Takes events of `event_type` only while the saga compensates: the
    /// replies to its undo steps, whose transitions report each outcome
    /// with [`Step::undone`] or [`Step::undo_failed`]. One that arrives
    /// while the saga runs forward is acked without `transition` and
    /// counted (`out_of_status`). The arguments are [`on`](Self::on)'s;
    /// `NotFound::Start` is refused by [`build`](Self::build) (a saga that
    /// does not exist compensates nothing).
    #[must_use]
    pub fn on_compensating<E, C, T>(
        self,
        event_type: &'static str,
        correlate: C,
        not_found: NotFound,
        transition: T,
    ) -> Self
    where
        E: DeserializeOwned + 'static,
        C: Fn(&E) -> String + Send + Sync + 'static,
        T: Fn(&S, &mut S::State, E, &mut Step<'_>) -> Result<(), S::Error> + Send + Sync + 'static,
    {
        self.event(
            event_type,
            correlate,
            not_found,
            transition,
            Runs::Compensating,
        )
    }

    /// Takes events of `event_type` whether the saga runs forward or
    /// compensates (a customer's cancellation, say): the transition reads
    /// [`Step::status`] to tell which. The arguments are [`on`](Self::on)'s.
    #[must_use]
    pub fn on_running_or_compensating<E, C, T>(
        self,
        event_type: &'static str,
        correlate: C,
        not_found: NotFound,
        transition: T,
    ) -> Self
    where
        E: DeserializeOwned + 'static,
        C: Fn(&E) -> String + Send + Sync + 'static,
        T: Fn(&S, &mut S::State, E, &mut Step<'_>) -> Result<(), S::Error> + Send + Sync + 'static,
    {
        self.event(event_type, correlate, not_found, transition, Runs::Both)
    }

    fn event<E, C, T>(
        mut self,
        event_type: &'static str,
        correlate: C,
        not_found: NotFound,
        transition: T,
        runs: Runs,
    ) -> Self
    where
        E: DeserializeOwned + 'static,
        C: Fn(&E) -> String + Send + Sync + 'static,
        T: Fn(&S, &mut S::State, E, &mut Step<'_>) -> Result<(), S::Error> + Send + Sync + 'static,
    {
        self.routes.push(Box::new(EventRoute {
            event_type,
            kind: RouteKind::Event(not_found),
            runs,
            correlate: Some(correlate),
            transition,
            _event: PhantomData::<fn() -> E>,
        }));
        self
    }

    /// Takes the saga's own timeouts of `event_type`
    /// ([`Step::schedule_timeout`]): their saga is the one that scheduled
    /// them, in whichever active status it scheduled them (compensating
    /// cancels the pending ones first, so a timeout that fires while a saga
    /// compensates is one the compensation scheduled). A timeout whose token the saga no longer holds (cancelled,
    /// replaced), or whose saga finished or is gone, is acked and counted
    /// (`consumer.saga.ignored`) without running `transition`; one that
    /// runs it counts in `consumer.saga.timed_out`.
    #[must_use]
    pub fn on_timeout<E, T>(mut self, event_type: &'static str, transition: T) -> Self
    where
        E: DeserializeOwned + 'static,
        T: Fn(&S, &mut S::State, E, &mut Step<'_>) -> Result<(), S::Error> + Send + Sync + 'static,
    {
        self.routes
            .push(Box::new(EventRoute::<E, fn(&E) -> String, T> {
                event_type,
                kind: RouteKind::Timeout,
                runs: Runs::Both,
                correlate: None,
                transition,
                _event: PhantomData,
            }));
        self
    }

    /// How failed transitions are retried (default
    /// [`RetryPolicy::DEFAULT`]). A version conflict (another instance
    /// changed the saga first) is not a failure: the transition runs again
    /// at once on the new version, and no attempt is counted.
    #[must_use]
    pub fn with_retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Where timeouts are published: the destination the saga's consumer
    /// reads (default: the outbox's default destination, else the saga
    /// type).
    #[must_use]
    pub fn with_timeouts_to(mut self, destination: impl Into<String>) -> Self {
        self.timeouts_to = Some(destination.into());
        self
    }

    /// What to do with an event not keyed by its saga's id (default
    /// [`KeyMismatch::Refuse`]).
    #[must_use]
    pub fn with_key_mismatch(mut self, policy: KeyMismatch) -> Self {
        self.key_mismatch = policy;
        self
    }

    /// How many of its last transitions a saga's history keeps (default
    /// 100, at least 1): rows of `consumer_saga_history`, the older ones
    /// deleted by version as each transition saves.
    #[must_use]
    pub fn with_history_limit(mut self, transitions: usize) -> Self {
        self.history_limit = transitions.max(1);
        self
    }

    /// Where the saga's instruments come from (default: the global meter
    /// provider's, as installed when the saga's first message arrives).
    #[must_use]
    pub fn with_meter(mut self, meter: opentelemetry::metrics::Meter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// Gives the events of `event_type` the schema of `E`, for the
    /// service's AsyncAPI document (registering with [`SagaBuilder::on`]
    /// cannot require `JsonSchema`: it is an optional feature).
    #[cfg(feature = "schemas")]
    #[must_use]
    pub fn with_event_schema<E: schemars::JsonSchema>(mut self, event_type: &'static str) -> Self {
        self.schemas.push((event_type, PayloadType::of::<E>()));
        self
    }

    /// Declares a command or event the saga sends: `event_type` to
    /// `destination` with payloads of `T`, for the service's AsyncAPI
    /// document (a send operation of the saga). Declaring changes nothing
    /// at run time.
    #[cfg(feature = "schemas")]
    #[must_use]
    pub fn with_command<T: serde::Serialize + schemars::JsonSchema>(
        mut self,
        destination: impl Into<String>,
        event_type: impl Into<String>,
    ) -> Self {
        self.sends.push(DeclaredEvent {
            event_type: event_type.into(),
            destination: Some(destination.into()),
            payload: PayloadType::of::<T>(),
        });
        self
    }

    /// The saga, as a handler for a [`Router`](consumer_core::Router) (or a
    /// [`Consumer`](consumer_core::Consumer) of its own); `Err` for a saga without
    /// events, without an event that starts it, with two registrations of
    /// one type, or with a schema for a type it does not take.
    pub fn build(self) -> Result<SagaHandler<S>, Error> {
        let name = self.saga.name();
        let refuse = |why: String| Err(Error::Config(format!("saga `{name}`: {why}")));
        if name.is_empty() {
            return Err(Error::Config(
                "a saga's name cannot be empty: it scopes its rows".into(),
            ));
        }
        if self.routes.is_empty() {
            return refuse(
                "it takes no event: register each with `on` (and timeouts with `on_timeout`)"
                    .into(),
            );
        }
        if !self
            .routes
            .iter()
            .any(|r| matches!(r.kind(), RouteKind::Event(NotFound::Start)))
        {
            return refuse(
                "no event starts it: give at least one `on` registration `NotFound::Start`".into(),
            );
        }
        for (i, r) in self.routes.iter().enumerate() {
            if r.event_type().is_empty() {
                return refuse("an event type is empty".into());
            }
            if r.runs() == Runs::Compensating
                && matches!(r.kind(), RouteKind::Event(NotFound::Start))
            {
                return refuse(format!(
                    "`{}` runs only while the saga compensates, so it cannot start one (`NotFound::Start`)",
                    r.event_type()
                ));
            }
            if self.routes[..i]
                .iter()
                .any(|o| o.event_type() == r.event_type())
            {
                return refuse(format!(
                    "event type `{}` is registered twice",
                    r.event_type()
                ));
            }
        }
        for (t, _) in &self.schemas {
            if !self.routes.iter().any(|r| r.event_type() == *t) {
                return refuse(format!(
                    "`with_event_schema` names `{t}`, which no `on` or `on_timeout` registers"
                ));
            }
        }
        Ok(SagaHandler::from_builder(self))
    }
}
