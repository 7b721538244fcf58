//! Many handlers over one source: a [`Router`] dispatches each delivery by
//! its CloudEvents `type` to the handler that takes it.
//!
//! The router runs in one consumer, so all its handlers share one set of
//! lanes: the events of one aggregate (one partition key) are handled in
//! order whatever their types, and different keys run in parallel. Each
//! handler keeps its own name (its dedup scope), its retry policy and its
//! terminal errors.
//!
//! ```
//! # use consumer_core::{Handler, MemoryStore, Router};
//! # fn demo<A, B>(placed: A, paid: B) -> Result<(), consumer_core::Error>
//! # where A: Handler<MemoryStore>, B: Handler<MemoryStore> {
//! let router = Router::builder("orders")
//!     .route(placed)   // takes the types its `#[handler(event_type = ..)]` names
//!     .route(paid)
//!     .build()?;       // refuses two handlers for one type
//! # let _: Router<MemoryStore> = router;
//! # Ok(())
//! # }
//! ```
//!
//! * A delivery whose type no handler takes is dead-lettered as poison on
//!   its first attempt, with a reason that names its type and the types the
//!   router handles; with [`RouterBuilder::ignore_unknown_types`] it is
//!   acked and counted instead (for topics several services share).
//! * A delivery without a type goes to the handler registered with
//!   [`RouterBuilder::default_route`], and is an unknown type otherwise.
//! * A handler takes the types listed in its `#[handler(event_type = ..)]`
//!   (by default the name of its message type): several types when the
//!   list has several. CloudEvents carry the type beside the data, not in
//!   it, so a list is what can say which types one handler takes without
//!   changing the payloads; the handler reads the type from its context.

mod erased;
mod routes;

pub use erased::ErasedHandler;
pub use routes::{OneHandler, Route, Routes, UnknownEventType};

use crate::envelope::Envelope;
use crate::error::Error;
use crate::handler::Handler;
use crate::store::DedupStore;

/// What a router does with a delivery whose type no handler takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownTypes {
    /// Dead-letter it as poison on its first attempt (the default).
    DeadLetter,
    /// Ack it and count it (`StatsSnapshot::unknown_types_ignored`).
    Ignore,
}

/// Many handlers over one source; see the module docs.
pub struct Router<S: DedupStore> {
    name: &'static str,
    /// `router:<name>`: the scope of the dead-letter marks of unknown
    /// types, apart from the handlers' own (a handler may share the
    /// router's name, here or in another consumer of the same store).
    unknown_scope: String,
    handlers: Vec<Box<dyn ErasedHandler<S>>>,
    /// `(event type, handler index)`, in registration order: a linear scan
    /// over a few types costs less than hashing the type.
    by_type: Vec<(&'static str, usize)>,
    default: Option<usize>,
    unknown: UnknownTypes,
}

impl<S: DedupStore> std::fmt::Debug for Router<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("name", &self.name)
            .field("types", &self.by_type)
            .field("default", &self.default.map(|i| self.handlers[i].name()))
            .field("unknown", &self.unknown)
            .finish()
    }
}

impl<S: DedupStore> Router<S> {
    /// A router named `name`: what logs call it; dead letters of unknown
    /// types are filed under `router:<name>` (their dedup scope), apart
    /// from the handlers' own scopes.
    pub fn builder(name: &'static str) -> RouterBuilder<S> {
        RouterBuilder {
            name,
            handlers: Vec::new(),
            unknown: UnknownTypes::DeadLetter,
        }
    }

    /// The router's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Every event type a handler takes, in registration order.
    pub fn event_types(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.by_type.iter().map(|(t, _)| *t)
    }

    fn find(&self, kind: Option<&str>) -> Option<usize> {
        match kind {
            Some(kind) => self
                .by_type
                .iter()
                .find(|(t, _)| *t == kind)
                .map(|(_, i)| *i),
            None => self.default,
        }
    }
}

/// Builds a [`Router`]: refuses, at [`RouterBuilder::build`], a router
/// without handlers, two handlers for one type, two handlers of one name,
/// and a handler that names no type.
pub struct RouterBuilder<S: DedupStore> {
    name: &'static str,
    handlers: Vec<(Box<dyn ErasedHandler<S>>, bool)>,
    unknown: UnknownTypes,
}

impl<S: DedupStore> RouterBuilder<S> {
    /// Adds a handler for the types it names (`#[handler(event_type = ..)]`).
    #[must_use]
    pub fn route<H: Handler<S>>(mut self, handler: H) -> Self {
        self.handlers.push((Box::new(handler), false));
        self
    }

    /// Adds a handler that also takes the deliveries without a type.
    #[must_use]
    pub fn default_route<H: Handler<S>>(mut self, handler: H) -> Self {
        self.handlers.push((Box::new(handler), true));
        self
    }

    /// Acks and counts deliveries whose type no handler takes, instead of
    /// dead-lettering them.
    #[must_use]
    pub fn ignore_unknown_types(mut self) -> Self {
        self.unknown = UnknownTypes::Ignore;
        self
    }

    /// The router; `Err` for no handler at all, two handlers of one type or
    /// one name, two defaults, or a handler that names no type and is not
    /// the default.
    pub fn build(self) -> Result<Router<S>, Error> {
        if self.handlers.is_empty() {
            return Err(Error::Config(format!(
                "router `{}` has no handler, so no delivery can reach one: add one with `route` or `default_route`",
                self.name
            )));
        }
        let mut by_type: Vec<(&'static str, usize)> = Vec::new();
        let mut handlers: Vec<Box<dyn ErasedHandler<S>>> = Vec::with_capacity(self.handlers.len());
        let mut default: Option<usize> = None;
        for (index, (handler, is_default)) in self.handlers.into_iter().enumerate() {
            if let Some(same) = handlers.iter().find(|h| h.name() == handler.name()) {
                return Err(Error::Config(format!(
                    "router `{}`: two handlers are named `{}`; names scope the dedup rows, so give one `#[handler(name = ..)]`",
                    self.name,
                    same.name()
                )));
            }
            if is_default {
                if let Some(first) = default {
                    let first = &handlers[first];
                    return Err(Error::Config(format!(
                        "router `{}`: `{}` and `{}` are both the default route; keep one",
                        self.name,
                        first.name(),
                        handler.name()
                    )));
                }
                default = Some(index);
            } else if handler.event_types().is_empty() {
                return Err(Error::Config(format!(
                    "router `{}`: handler `{}` names no event type: give it `#[handler(event_type = \"..\")]`, or add it with `default_route`",
                    self.name,
                    handler.name()
                )));
            }
            for kind in handler.event_types() {
                if let Some((_, first)) = by_type.iter().find(|(t, _)| t == kind) {
                    let first = &handlers[*first];
                    return Err(Error::Config(format!(
                        "router `{}`: handlers `{}` and `{}` both take event type `{kind}`; one type has one handler per router",
                        self.name,
                        first.name(),
                        handler.name()
                    )));
                }
                by_type.push((kind, index));
            }
            handlers.push(handler);
        }
        Ok(Router {
            name: self.name,
            unknown_scope: format!("router:{}", self.name),
            handlers,
            by_type,
            default,
            unknown: self.unknown,
        })
    }
}

impl<S: DedupStore> Routes<S> for Router<S> {
    type Handler = dyn ErasedHandler<S>;

    fn route(&self, envelope: &Envelope) -> Route<'_, Self::Handler> {
        match self.find(envelope.kind.as_deref()) {
            Some(i) => Route::To(&*self.handlers[i]),
            None if self.unknown == UnknownTypes::Ignore => Route::Ignore,
            None => Route::Unknown {
                router: &self.unknown_scope,
                error: UnknownEventType {
                    router: self.name,
                    kind: envelope.kind.clone(),
                    handled: self.by_type.iter().map(|(t, _)| *t).collect(),
                },
            },
        }
    }

    fn handlers(&self) -> Vec<&Self::Handler> {
        self.handlers.iter().map(|h| &**h).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handler::{Invocation, Outcome};
    use crate::retry::RetryPolicy;
    use crate::store::MemoryStore;

    struct Takes(&'static str, &'static [&'static str]);

    impl Handler<MemoryStore> for Takes {
        fn name(&self) -> &'static str {
            self.0
        }

        fn retry_policy(&self) -> RetryPolicy {
            RetryPolicy::DEFAULT
        }

        fn event_types(&self) -> &'static [&'static str] {
            self.1
        }

        async fn handle(&self, _: &mut Invocation<'_, MemoryStore>) -> Outcome {
            Outcome::Processed
        }
    }

    fn envelope(kind: Option<&str>) -> Envelope {
        let mut headers = crate::envelope::Headers::new();
        if let Some(k) = kind {
            headers.insert(crate::envelope::names::TYPE, k);
        }
        Envelope::from_parts(
            bytes::Bytes::new(),
            headers,
            None,
            crate::envelope::Origin::default(),
            || "id".into(),
        )
    }

    fn routed_to(router: &Router<MemoryStore>, kind: Option<&str>) -> Option<&'static str> {
        match router.route(&envelope(kind)) {
            Route::To(h) => Some(ErasedHandler::name(h)),
            _ => None,
        }
    }

    #[test]
    fn each_type_goes_to_its_handler_and_a_list_takes_several() {
        let router = Router::builder("orders")
            .route(Takes("placed", &["OrderPlaced"]))
            .route(Takes("money", &["OrderPaid", "OrderRefunded"]))
            .build()
            .expect("valid");
        assert_eq!(routed_to(&router, Some("OrderPlaced")), Some("placed"));
        assert_eq!(routed_to(&router, Some("OrderRefunded")), Some("money"));
        match router.route(&envelope(Some("OrderShipped"))) {
            Route::Unknown { router, error } => {
                assert_eq!(router, "router:orders");
                let text = error.to_string();
                assert!(text.contains("`OrderShipped`"), "{text}");
                assert!(
                    text.contains("OrderPlaced, OrderPaid, OrderRefunded"),
                    "{text}"
                );
            }
            _ => panic!("an unknown type"),
        }
        assert!(matches!(
            router.route(&envelope(None)),
            Route::Unknown { .. }
        ));
    }

    #[test]
    fn the_default_route_takes_what_has_no_type_and_unknown_types_can_be_ignored() {
        let router = Router::builder("orders")
            .route(Takes("placed", &["OrderPlaced"]))
            .default_route(Takes("untyped", &[]))
            .ignore_unknown_types()
            .build()
            .expect("valid");
        assert_eq!(routed_to(&router, None), Some("untyped"));
        assert!(matches!(
            router.route(&envelope(Some("Other"))),
            Route::Ignore
        ));
    }

    #[test]
    fn two_handlers_of_one_type_one_name_or_no_type_are_refused_when_built() {
        let err = Router::<MemoryStore>::builder("orders")
            .route(Takes("a", &["OrderPlaced"]))
            .route(Takes("b", &["OrderPaid", "OrderPlaced"]))
            .build()
            .expect_err("one type, two handlers");
        assert!(
            err.to_string()
                .contains("`a` and `b` both take event type `OrderPlaced`"),
            "{err}"
        );
        let err = Router::<MemoryStore>::builder("orders")
            .route(Takes("a", &["X"]))
            .route(Takes("a", &["Y"]))
            .build()
            .expect_err("one name, two handlers");
        assert!(
            err.to_string().contains("two handlers are named `a`"),
            "{err}"
        );
        let err = Router::<MemoryStore>::builder("orders")
            .route(Takes("a", &[]))
            .build()
            .expect_err("no type");
        assert!(err.to_string().contains("names no event type"), "{err}");
        let err = Router::<MemoryStore>::builder("orders")
            .default_route(Takes("a", &[]))
            .default_route(Takes("b", &[]))
            .build()
            .expect_err("two defaults");
        assert!(err.to_string().contains("both the default route"), "{err}");
    }

    #[test]
    fn a_router_without_handlers_is_refused_when_built() {
        let err = Router::<MemoryStore>::builder("orders")
            .ignore_unknown_types()
            .build()
            .expect_err("no handler");
        assert!(matches!(err, Error::Config(_)), "{err:?}");
        assert!(
            err.to_string().contains("router `orders` has no handler"),
            "{err}"
        );
    }

    #[test]
    fn unknown_types_are_filed_apart_from_a_handler_named_like_the_router() {
        let router = Router::builder("orders")
            .route(Takes("orders", &["OrderPlaced"]))
            .build()
            .expect("a handler may share the router's name");
        let Route::Unknown { router: scope, .. } = router.route(&envelope(Some("OrderPaid")))
        else {
            panic!("an unknown type");
        };
        assert_eq!(scope, "router:orders");
        assert_eq!(router.name(), "orders");
    }
}
