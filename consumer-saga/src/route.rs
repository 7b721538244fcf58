//! One registration of a saga: an event type, how it finds its saga, what
//! it does when there is none, and its transition, behind one pointer type
//! so a saga holds routes of different event types.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;

use super::Saga;
use super::not_found::NotFound;
use super::status::SagaStatus;
use super::step::Step;
use consumer_core::describe::PayloadType;

/// What kind of message a route takes.
#[derive(Debug, Clone)]
pub(super) enum RouteKind {
    /// An event: correlated from its payload, with its not-found policy.
    Event(NotFound),
    /// One of the saga's own timeouts: its saga is its subject (the
    /// outbox's aggregate id), its token its message id.
    Timeout,
}

/// In which of a saga's active statuses a registration's transition runs.
/// An event that arrives in the other is acked without it and counted
/// (`out_of_status`): a forward step's late reply must not act on a saga
/// that is undoing what it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Runs {
    /// While the saga goes forward ([`SagaBuilder::on`](super::SagaBuilder::on)).
    Forward,
    /// While it compensates: the replies to its undo steps
    /// ([`SagaBuilder::on_compensating`](super::SagaBuilder::on_compensating)).
    Compensating,
    /// In both (timeouts, and
    /// [`SagaBuilder::on_running_or_compensating`](super::SagaBuilder::on_running_or_compensating)).
    Both,
}

impl Runs {
    /// Whether the transition runs on a saga in `status`.
    pub(super) fn accepts(self, status: SagaStatus) -> bool {
        match self {
            Self::Forward => status == SagaStatus::Running,
            Self::Compensating => status == SagaStatus::Compensating,
            Self::Both => status.is_active(),
        }
    }
}

/// A route, whatever its event type.
pub(super) trait Route<S: Saga>: Send + Sync + 'static {
    fn event_type(&self) -> &'static str;
    fn kind(&self) -> &RouteKind;
    /// The statuses its transition runs in.
    fn runs(&self) -> Runs;
    fn payload(&self) -> PayloadType;
    /// The saga id the payload names (`None` for a timeout).
    fn correlate(&self, payload: &[u8]) -> Result<Option<String>, serde_json::Error>;
    /// Decodes the payload and runs the transition.
    fn apply(
        &self,
        saga: &S,
        state: &mut S::State,
        payload: &[u8],
        step: &mut Step<'_>,
    ) -> Result<Result<(), S::Error>, serde_json::Error>;
}

/// An event route of payload type `E`.
pub(super) struct EventRoute<E, C, T> {
    pub(super) event_type: &'static str,
    pub(super) kind: RouteKind,
    pub(super) runs: Runs,
    pub(super) correlate: Option<C>,
    pub(super) transition: T,
    pub(super) _event: PhantomData<fn() -> E>,
}

impl<S, E, C, T> Route<S> for EventRoute<E, C, T>
where
    S: Saga,
    E: DeserializeOwned + 'static,
    C: Fn(&E) -> String + Send + Sync + 'static,
    T: Fn(&S, &mut S::State, E, &mut Step<'_>) -> Result<(), S::Error> + Send + Sync + 'static,
{
    fn event_type(&self) -> &'static str {
        self.event_type
    }

    fn kind(&self) -> &RouteKind {
        &self.kind
    }

    fn runs(&self) -> Runs {
        self.runs
    }

    fn payload(&self) -> PayloadType {
        PayloadType::without_schema::<E>()
    }

    fn correlate(&self, payload: &[u8]) -> Result<Option<String>, serde_json::Error> {
        match &self.correlate {
            Some(correlate) => Ok(Some(correlate(&serde_json::from_slice::<E>(payload)?))),
            None => Ok(None),
        }
    }

    fn apply(
        &self,
        saga: &S,
        state: &mut S::State,
        payload: &[u8],
        step: &mut Step<'_>,
    ) -> Result<Result<(), S::Error>, serde_json::Error> {
        let event = serde_json::from_slice::<E>(payload)?;
        Ok((self.transition)(saga, state, event, step))
    }
}
