//! [`Batched`]: a [`BatchHandler`] as a [`Handler`].

use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::BatchHandler;
use super::batcher::{Limits, Pending, run, run_batches};
use super::items::BatchItem;
use crate::handler::{Failure, FailureKind, Handler, Invocation, Outcome};
use crate::retry::RetryPolicy;
use crate::store::DedupStore;

/// The batcher stopped before it answered (the consumer is going away).
#[derive(Debug, thiserror::Error)]
#[error("the batcher stopped before this message's batch ran")]
struct BatcherGone;

/// Runs a [`BatchHandler`] as a [`Handler`]: see the [module docs](super).
///
/// ```no_run
/// # use consumer_core::batch::{Batch, BatchHandler, Batched};
/// # use consumer_core::{BoxError, MemoryStore, MemoryTx, RetryPolicy};
/// # use std::time::Duration;
/// struct Record;
///
/// impl BatchHandler<MemoryStore> for Record {
///     type Message = serde_json::Value;
///     fn name(&self) -> &'static str { "record" }
///     fn retry_policy(&self) -> RetryPolicy { RetryPolicy::default() }
///     async fn handle_batch(
///         &self,
///         batch: &mut Batch<serde_json::Value>,
///         _tx: &mut MemoryTx,
///     ) -> Result<(), BoxError> {
///         for (i, item) in batch.iter() {
///             let _ = (i, item.message());
///         }
///         Ok(())
///     }
/// }
///
/// let handler = Batched::new(Record)
///     .with_max_batch(50)
///     .with_max_wait(Duration::from_millis(5));
/// # let _: &dyn std::any::Any = &handler;
/// ```
pub struct Batched<H: BatchHandler<S>, S: DedupStore> {
    handler: Arc<H>,
    limits: Limits,
    queue: OnceLock<mpsc::Sender<Pending<H::Message>>>,
    _store: PhantomData<fn() -> S>,
}

impl<H: BatchHandler<S>, S: DedupStore> Batched<H, S> {
    /// `handler` in batches of up to 64 messages, or what arrived within
    /// 5 ms of the first, 4 batches running at once.
    pub fn new(handler: H) -> Self {
        Self {
            handler: Arc::new(handler),
            limits: Limits {
                max_batch: 64,
                max_wait: Duration::from_millis(5),
                max_concurrent: 4,
            },
            queue: OnceLock::new(),
            _store: PhantomData,
        }
    }

    /// Most messages per batch (at least 1). Keep it at or below 64 on
    /// PostgreSQL when the handler uses savepoints of its own: past 64
    /// subtransactions in one transaction PostgreSQL slows down.
    pub fn with_max_batch(mut self, n: usize) -> Self {
        self.limits.max_batch = n.max(1);
        self
    }

    /// How long a batch waits for more messages after its first.
    pub fn with_max_wait(mut self, wait: Duration) -> Self {
        self.limits.max_wait = wait;
        self
    }

    /// Most batches running at once, each in a transaction (and a pooled
    /// connection) of its own (default 4; at least 1).
    pub fn with_max_concurrent_batches(mut self, n: usize) -> Self {
        self.limits.max_concurrent = n.max(1);
        self
    }

    /// The batcher's queue, started on first use with `store`.
    fn queue(&self, store: &S) -> &mpsc::Sender<Pending<H::Message>> {
        self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::channel(self.limits.max_batch.saturating_mul(4).max(16));
            tokio::spawn(run_batches(
                Arc::clone(&self.handler),
                store.clone(),
                rx,
                self.limits,
            ));
            tx
        })
    }
}

impl<H: BatchHandler<S>, S: DedupStore> Handler<S> for Batched<H, S> {
    fn name(&self) -> &'static str {
        self.handler.name()
    }

    fn retry_policy(&self) -> RetryPolicy {
        self.handler.retry_policy()
    }

    fn circuit_policy(&self) -> Option<crate::handler::CircuitPolicy> {
        self.handler.circuit_policy()
    }

    fn event_types(&self) -> &'static [&'static str] {
        self.handler.event_types()
    }

    fn payload_type(&self) -> Option<crate::describe::PayloadType> {
        self.handler.payload_type()
    }

    async fn handle(&self, invocation: &mut Invocation<'_, S>) -> Outcome {
        let message = match crate::__private::DecodableMessage::decode(invocation) {
            Ok(m) => m,
            Err(poison) => return poison,
        };
        let mut context = invocation.context().clone();
        let key = self.handler.idempotency_key(&message, &context);
        context.set_idempotency_key(key.clone());
        invocation.context.set_idempotency_key(key.clone());
        let (reply, outcome) = oneshot::channel();
        let pending = Pending {
            item: BatchItem {
                message,
                context,
                // The lane runs this inside the delivery's span.
                trace: crate::trace::current(),
            },
            key,
            reply,
        };
        if invocation.envelope().attempt > 1 {
            // A retry runs alone: a message that failed never takes a
            // batch down twice.
            run(&*self.handler, invocation.store, vec![pending]).await;
        } else if let Err(mpsc::error::SendError(pending)) =
            self.queue(invocation.store).send(pending).await
        {
            run(&*self.handler, invocation.store, vec![pending]).await;
        }
        outcome
            .await
            .unwrap_or_else(|_| Outcome::Failed(Failure::new(FailureKind::Transient, BatcherGone)))
    }
}
