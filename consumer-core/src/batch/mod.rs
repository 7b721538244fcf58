//! Batched consumption: one transaction and one multi-row dedup claim for
//! many messages, and still one outcome per message.
//!
//! A [`BatchHandler`] receives the decoded, fresh messages of a batch and
//! the batch's transaction; [`Batched`] turns it into a [`Handler`] that
//! any consumer or router runs, so everything else (lanes, retries, dead
//! letters, settle fallbacks, spans, metrics) is the one-message path's.
//!
//! * **Collecting.** Each key's lane hands its next delivery to the
//!   handler's batcher, which runs a batch when it holds
//!   [`max_batch`](Batched::with_max_batch) messages or
//!   [`max_wait`](Batched::with_max_wait) after the first arrived. A lane
//!   waits for its delivery's outcome before handing over the next one, so a
//!   batch holds at most one message per key: each key stays in order within
//!   and across batches. Run the consumer with `with_max_in_flight` at least
//!   the batch size, or batches never fill. Up to
//!   [`max_concurrent_batches`](Batched::with_max_concurrent_batches) run at
//!   once, each in its own transaction; none holds two messages of one key.
//! * **Claiming.** One transaction, one `INSERT … ON CONFLICT DO NOTHING
//!   RETURNING` of every key ([`DedupStore::claim_batch`]), rows in key order
//!   so batches that share keys cannot deadlock. Duplicates are acked
//!   without reaching the handler; two messages of one batch with the same
//!   idempotency key are never claimed together (the second goes to the next
//!   batch, where it is a duplicate if the first committed).
//! * **One outcome per message.** The handler marks the messages that failed
//!   ([`Batch::fail`], [`Batch::fail_terminal`]) or fails the whole batch.
//!   Either way the transaction rolls back; the marked messages get their
//!   failure, and the others run again in a new transaction without them.
//!   A failure the handler does not attribute (an `Err`, a panic) splits the
//!   batch in halves, each run on its own, down to single messages, which
//!   get the failure (terminal where [`BatchHandler::is_terminal`] says so,
//!   else transient): at most `2n - 1` transactions for `n` messages.
//! * **Isolation.** A message that failed is retried (or dead-lettered) as
//!   the one-message path says, and its retries run alone, in a batch of
//!   one: a failing message never takes others down with it twice, and is
//!   never re-batched with them forever.
//! * **Poison** (a payload that does not decode) never enters a batch.

mod batcher;
mod handler;
mod items;

pub use handler::Batched;
pub use items::{Batch, BatchItem};

use std::future::Future;

use crate::error::BoxError;
use crate::handler::{Handler, MessageContext};
use crate::retry::RetryPolicy;
use crate::store::DedupStore;

/// A handler of batches: implement it, and run it as
/// [`Batched::new(handler)`](Batched::new).
pub trait BatchHandler<S: DedupStore>: Send + Sync + 'static {
    /// The message type payloads decode into (JSON): any
    /// `serde::de::DeserializeOwned` type (the bound is implemented for
    /// each). It is the macro's diagnostic trait, so `#[handler(batch)]` on
    /// a type that is not `Deserialize` reports one error that names the
    /// fix.
    type Message: crate::__private::DecodableMessage + Send + Sync + 'static;

    /// Stable name: scopes dedup rows, names the handler in dead letters.
    fn name(&self) -> &'static str;

    /// How failed messages are retried (one at a time; see the module docs).
    fn retry_policy(&self) -> RetryPolicy;

    /// This handler's own circuit, as [`Handler::circuit_policy`]
    /// (each message's outcome counts, as for a handler of one message).
    fn circuit_policy(&self) -> Option<crate::handler::CircuitPolicy> {
        None
    }

    /// The CloudEvents types a [`Router`](crate::Router) sends this handler.
    fn event_types(&self) -> &'static [&'static str] {
        &[]
    }

    /// The message type, for the service's AsyncAPI document. The default
    /// names [`Message`](Self::Message) without a schema (the document is
    /// then refused, naming it); return
    /// `Some(PayloadType::of::<Self::Message>())` (feature `asyncapi`) for a
    /// type that implements `schemars::JsonSchema`.
    fn payload_type(&self) -> Option<crate::describe::PayloadType> {
        Some(crate::describe::PayloadType::without_schema::<Self::Message>())
    }

    /// The key a message is deduplicated on (default: its message id).
    fn idempotency_key(&self, message: &Self::Message, context: &MessageContext) -> String {
        let _ = message;
        context.message_id().to_owned()
    }

    /// Whether `error`, returned by [`handle_batch`](Self::handle_batch)
    /// for a batch of one message, fails that message for good (dead-lettered
    /// without retry) rather than transiently (retried). Default: never.
    /// `#[handler(batch, terminal = ..)]` matches the pattern here.
    fn is_terminal(&self, error: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
        let _ = error;
        false
    }

    /// Handles the fresh messages of one batch in `tx`, the transaction
    /// that holds their dedup rows. `Ok` commits, unless a message was
    /// marked failed; `Err` fails the batch (see the module docs).
    fn handle_batch(
        &self,
        batch: &mut Batch<Self::Message>,
        tx: &mut S::Tx,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;
}

// `Batched` is a `Handler`: checked here so a change that breaks it fails
// this crate's build, not a user's.
#[allow(dead_code)]
fn batched_is_a_handler<S: DedupStore, H: BatchHandler<S>>(h: Batched<H, S>) -> impl Handler<S> {
    h
}
