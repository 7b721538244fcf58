//! [`ErasedHandler`]: handlers of different types in one router.

use std::future::Future;
use std::pin::Pin;

use crate::handler::CircuitPolicy;
use crate::handler::{Handler, Invocation, Outcome};
use crate::retry::RetryPolicy;
use crate::store::DedupStore;

/// A [`Handler`] behind a pointer: what a [`Router`](super::Router) holds.
/// Every `Handler` is one; its attempt future is boxed (one allocation per
/// delivery, the price of holding handlers of different types).
pub trait ErasedHandler<S: DedupStore>: Send + Sync + 'static {
    /// [`Handler::name`].
    fn name(&self) -> &'static str;
    /// [`Handler::retry_policy`].
    fn retry_policy(&self) -> RetryPolicy;
    /// [`Handler::event_types`].
    fn event_types(&self) -> &[&'static str];
    /// [`Handler::retry_policies`].
    fn retry_policies(&self) -> Vec<RetryPolicy>;
    /// [`Handler::describe`].
    fn describe(&self) -> Vec<crate::describe::HandlerDescription>;
    /// [`Handler::payload_type`].
    fn payload_type(&self) -> Option<crate::describe::PayloadType>;
    /// [`Handler::on_dead_letter`].
    fn on_dead_letter(&self) -> crate::handler::OnDeadLetter;
    /// [`Handler::circuit_policy`].
    fn circuit_policy(&self) -> Option<CircuitPolicy>;
    /// [`Handler::codec`].
    fn codec(&self) -> Option<crate::handler::CodecNeed>;
    /// [`Handler::handle`], boxed.
    fn handle_boxed<'a>(
        &'a self,
        invocation: &'a mut Invocation<'_, S>,
    ) -> Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>;
}

impl<S: DedupStore, H: Handler<S>> ErasedHandler<S> for H {
    fn name(&self) -> &'static str {
        Handler::name(self)
    }

    fn retry_policy(&self) -> RetryPolicy {
        Handler::retry_policy(self)
    }

    fn event_types(&self) -> &[&'static str] {
        Handler::event_types(self)
    }

    fn retry_policies(&self) -> Vec<RetryPolicy> {
        Handler::retry_policies(self)
    }

    fn describe(&self) -> Vec<crate::describe::HandlerDescription> {
        Handler::describe(self)
    }

    fn payload_type(&self) -> Option<crate::describe::PayloadType> {
        Handler::payload_type(self)
    }

    fn on_dead_letter(&self) -> crate::handler::OnDeadLetter {
        Handler::on_dead_letter(self)
    }

    fn circuit_policy(&self) -> Option<CircuitPolicy> {
        Handler::circuit_policy(self)
    }

    fn codec(&self) -> Option<crate::handler::CodecNeed> {
        Handler::codec(self)
    }

    fn handle_boxed<'a>(
        &'a self,
        invocation: &'a mut Invocation<'_, S>,
    ) -> Pin<Box<dyn Future<Output = Outcome> + Send + 'a>> {
        Box::pin(self.handle(invocation))
    }
}

impl<S: DedupStore> Handler<S> for dyn ErasedHandler<S> {
    fn name(&self) -> &'static str {
        ErasedHandler::name(self)
    }

    fn retry_policy(&self) -> RetryPolicy {
        ErasedHandler::retry_policy(self)
    }

    fn event_types(&self) -> &[&'static str] {
        ErasedHandler::event_types(self)
    }

    fn retry_policies(&self) -> Vec<RetryPolicy> {
        ErasedHandler::retry_policies(self)
    }

    fn describe(&self) -> Vec<crate::describe::HandlerDescription> {
        ErasedHandler::describe(self)
    }

    fn payload_type(&self) -> Option<crate::describe::PayloadType> {
        ErasedHandler::payload_type(self)
    }

    fn on_dead_letter(&self) -> crate::handler::OnDeadLetter {
        ErasedHandler::on_dead_letter(self)
    }

    fn circuit_policy(&self) -> Option<CircuitPolicy> {
        ErasedHandler::circuit_policy(self)
    }

    fn codec(&self) -> Option<crate::handler::CodecNeed> {
        ErasedHandler::codec(self)
    }

    // An async fn, not the box itself: it holds the two borrows apart,
    // where the box's one lifetime would have to be their intersection.
    async fn handle(&self, invocation: &mut Invocation<'_, S>) -> Outcome {
        self.handle_boxed(invocation).await
    }
}
