//! [`Invocation`]: one attempt in progress, as `#[handler]` drives it.

use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::codecs::Codecs;
use super::{DecodeError, Failure, FailureKind, MessageContext, Outcome};
use super::{codec_failure, store_failure};
use crate::envelope::Envelope;
use crate::error::{BoxError, Error};
use crate::store::{Claim, DedupStore};

/// The store refused to hold a message's dedup key (too long for its
/// index, say): poison, since it will refuse it on every attempt.
#[derive(Debug, thiserror::Error)]
#[error("the store refuses this message's dedup key, and will on every attempt: {0}")]
struct KeyRefused(#[source] Error);

/// What a claim means for the attempt: a store that refuses the key
/// itself makes the message poison; any other failure may heal (a
/// database that does not answer is waited for, see
/// [`STORE_UNAVAILABLE`](super::STORE_UNAVAILABLE)).
fn claimed<T>(claim: Result<Claim<T>, Error>) -> Result<T, Outcome> {
    match claim {
        Ok(Claim::Fresh(tx)) => Ok(tx),
        Ok(Claim::Duplicate) => Err(Outcome::Duplicate),
        Err(e) if e.is_refused_input() => Err(Outcome::Failed(Failure::new(
            FailureKind::Poison,
            KeyRefused(e),
        ))),
        Err(e) => Err(Outcome::Failed(store_failure::classify(e))),
    }
}

/// One attempt in progress: what `#[handler]`'s expansion drives.
pub struct Invocation<'a, S> {
    pub(crate) envelope: &'a Arc<Envelope>,
    pub(crate) store: &'a S,
    pub(crate) codecs: &'a Codecs,
    pub(crate) context: MessageContext,
}

impl<'a, S: DedupStore> Invocation<'a, S> {
    pub(crate) fn new(
        envelope: &'a Arc<Envelope>,
        store: &'a S,
        codecs: &'a Codecs,
        handler: &'static str,
    ) -> Self {
        Self {
            envelope,
            store,
            codecs,
            context: MessageContext::new(Arc::clone(envelope), handler),
        }
    }

    /// The delivery, shared (a handler that keeps it clones the `Arc`).
    pub fn envelope(&self) -> &Arc<Envelope> {
        self.envelope
    }

    /// The context handed to the handler.
    pub fn context(&self) -> &MessageContext {
        &self.context
    }

    /// Decodes the payload as JSON; a failure is a poison pill.
    pub fn decode<M: DeserializeOwned>(&self) -> Result<M, Outcome> {
        serde_json::from_slice(&self.envelope.payload).map_err(|source| {
            Outcome::Failed(Failure::new(
                FailureKind::Poison,
                DecodeError {
                    type_name: std::any::type_name::<M>(),
                    source,
                },
            ))
        })
    }

    /// Decodes the payload with the consumer's codec `C`
    /// (`#[handler(codec = ..)]`): a payload the codec refuses is a poison
    /// pill, dead-lettered with the codec's reason (the schema id in it); a
    /// registry that does not answer holds the message in its lane and
    /// tries again until it does, never dead-lettering it; anything else
    /// goes through the handler's retry policy.
    pub async fn decode_with<C: consumer_codec::Decode<M>, M>(&self) -> Result<M, Outcome> {
        let Some(codec) = self.codecs.get::<C>() else {
            // A consumer checks its handlers' codecs before it starts.
            return Err(Outcome::Failed(codec_failure::missing::<C>()));
        };
        codec
            .decode(&self.envelope.payload)
            .await
            .map_err(|e| Outcome::Failed(codec_failure::classify::<C, M>(e)))
    }

    /// Begins the transaction and claims `key` in it. `Err(Outcome)` for a
    /// duplicate or a store that failed.
    pub async fn begin(&mut self, key: String) -> Result<S::Tx, Outcome> {
        let claim = self
            .store
            .claim(self.context.handler, &key, &self.envelope.id)
            .await;
        self.context.idempotency_key = Some(key);
        claimed(claim)
    }

    /// [`Invocation::begin`] on the message id, without copying it: the
    /// context's idempotency key then falls back to the id.
    pub async fn begin_on_message_id(&mut self) -> Result<S::Tx, Outcome> {
        self.context.idempotency_key = None;
        let id = &self.envelope.id;
        claimed(self.store.claim(self.context.handler, id, id).await)
    }

    /// Commits; a failed commit is transient (nothing was written, or, if
    /// the connection broke after the server committed, the next attempt
    /// finds the dedup row).
    pub async fn commit(&self, tx: S::Tx) -> Outcome {
        match self.store.commit(tx).await {
            Ok(()) => Outcome::Processed,
            Err(e) => Outcome::Failed(store_failure::classify(e)),
        }
    }

    /// Rolls back and classifies the handler's error: terminal as the
    /// handler says, else transient (waiting for the database when that is
    /// what failed under the handler, see
    /// [`STORE_UNAVAILABLE`](super::STORE_UNAVAILABLE)).
    pub async fn fail<E: Into<BoxError>>(&self, tx: S::Tx, terminal: bool, error: E) -> Outcome {
        if let Err(e) = self.store.rollback(tx).await {
            // The connection is gone; the server rolls back on its own.
            tracing::debug!(target: "consumer::runtime", error = %e, "rollback failed");
        }
        if terminal {
            return Outcome::Failed(Failure::new(FailureKind::Terminal, error));
        }
        Outcome::Failed(store_failure::classify_handler_error(error.into()))
    }
}
