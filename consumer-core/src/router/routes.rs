//! [`Routes`]: what a consumer runs, one handler or a [`Router`](super::Router).

use crate::envelope::Envelope;
use crate::handler::Handler;
use crate::store::DedupStore;

/// Which handler takes each delivery. A single [`Handler`] takes every
/// delivery; a [`Router`](super::Router) picks one by event type.
pub trait Routes<S: DedupStore>: Send + Sync + 'static {
    /// The handlers routed to.
    type Handler: Handler<S> + ?Sized;

    /// Where `envelope` goes.
    fn route(&self, envelope: &Envelope) -> Route<'_, Self::Handler>;

    /// Every handler, for the checks a consumer makes before it starts.
    fn handlers(&self) -> Vec<&Self::Handler>;
}

/// Where a delivery goes.
pub enum Route<'a, H: ?Sized> {
    /// To this handler.
    To(&'a H),
    /// Nowhere: ack it and count it.
    Ignore,
    /// Nowhere: dead-letter it as poison, filed under `router`.
    Unknown {
        /// The name the dead letter is filed under and its dead-letter
        /// mark is scoped by: for a [`Router`](super::Router),
        /// `router:<name>`, so a handler named like the router keeps its
        /// own marks.
        router: &'a str,
        /// Why.
        error: UnknownEventType,
    },
}

/// No handler of a router takes a delivery's event type.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "no handler of router `{router}` takes event type {}; it handles: {}",
    kind.as_deref().map_or_else(|| "(none: the message has no ce_type and the router no default route)".to_owned(), |k| format!("`{k}`")),
    handled.join(", ")
)]
pub struct UnknownEventType {
    /// The router.
    pub router: &'static str,
    /// The delivery's type, if it had one.
    pub kind: Option<String>,
    /// The types the router handles.
    pub handled: Vec<&'static str>,
}

/// One handler taking every delivery: what [`Consumer::new`](crate::Consumer::new)
/// runs.
#[derive(Debug, Clone)]
pub struct OneHandler<H>(pub H);

impl<S: DedupStore, H: Handler<S>> Routes<S> for OneHandler<H> {
    type Handler = H;

    fn route(&self, _: &Envelope) -> Route<'_, H> {
        Route::To(&self.0)
    }

    fn handlers(&self) -> Vec<&H> {
        vec![&self.0]
    }
}
