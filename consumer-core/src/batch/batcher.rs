//! The batcher: collects what the lanes hand over, runs batches, splits
//! the ones that fail, and answers each message with its own outcome.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::Instrument;

use super::BatchHandler;
use super::items::{Batch, BatchItem};
use crate::handler::CatchUnwind;
use crate::handler::{Failure, FailureKind, Outcome};
use crate::store::DedupStore;

/// A message waiting for its batch, and where its outcome goes.
pub(super) struct Pending<M> {
    pub(super) item: BatchItem<M>,
    pub(super) key: String,
    pub(super) reply: oneshot::Sender<Outcome>,
}

/// A store or commit failure shared by every message of a batch.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct BatchFailed(String);

fn failed(kind: FailureKind, error: impl Into<crate::error::BoxError>) -> Outcome {
    Outcome::Failed(Failure::new(kind, error))
}

/// How batches are collected and run.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) max_batch: usize,
    pub(super) max_wait: Duration,
    pub(super) max_concurrent: usize,
}

/// Runs batches of what arrives on `rx` (up to `limits.max_concurrent` at
/// once, each on its own transaction) until every sender is gone.
pub(super) async fn run_batches<S, H>(
    handler: Arc<H>,
    store: S,
    mut rx: mpsc::Receiver<Pending<H::Message>>,
    limits: Limits,
) where
    S: DedupStore,
    H: BatchHandler<S>,
{
    let Limits {
        max_batch,
        max_wait,
        max_concurrent,
    } = limits;
    let running = Arc::new(tokio::sync::Semaphore::new(max_concurrent.max(1)));
    // Messages whose idempotency key was already in the batch being built:
    // they open the next one.
    let mut carried: VecDeque<Pending<H::Message>> = VecDeque::new();
    loop {
        let first = match carried.pop_front() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        // A wait past what the clock can count is no deadline: the batch
        // waits to be full (`with_max_wait(Duration::MAX)` must not overflow).
        let deadline = Instant::now().checked_add(max_wait);
        let mut keys: HashSet<String> = HashSet::new();
        keys.insert(first.key.clone());
        let mut batch = vec![first];
        let mut later: VecDeque<Pending<H::Message>> = VecDeque::new();
        while batch.len() < max_batch {
            let next = match carried.pop_front() {
                Some(p) => p,
                None => match next_within(deadline, &mut rx).await {
                    Some(p) => p,
                    None => break,
                },
            };
            if keys.insert(next.key.clone()) {
                batch.push(next);
            } else {
                later.push_back(next);
            }
        }
        later.extend(carried);
        carried = later;
        // Batches run side by side: a lane hands over one delivery at a
        // time, so no two running batches hold messages of one key.
        let Ok(permit) = Arc::clone(&running).acquire_owned().await else {
            return;
        };
        let (handler, store) = (Arc::clone(&handler), store.clone());
        tokio::spawn(async move {
            run(&*handler, &store, batch).await;
            drop(permit);
        });
    }
}

/// The next message handed over before `deadline` (`None`: no deadline),
/// or `None` when the deadline passed or the lanes are gone.
async fn next_within<P>(deadline: Option<Instant>, rx: &mut mpsc::Receiver<P>) -> Option<P> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, rx.recv())
            .await
            .ok()
            .flatten(),
        None => rx.recv().await,
    }
}

/// Runs `items` as one batch; see the module docs of [`batch`](super).
pub(super) fn run<'a, S, H>(
    handler: &'a H,
    store: &'a S,
    items: Vec<Pending<H::Message>>,
) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>
where
    S: DedupStore,
    H: BatchHandler<S>,
{
    Box::pin(async move {
        let Some((mut tx, fresh, replies)) = claim(handler.name(), store, items).await else {
            return;
        };
        if fresh.is_empty() {
            let _ = store.commit(tx).await;
            return;
        }
        let span = crate::trace::batch_span(handler.name(), fresh.iter().map(|i| &i.trace));
        let mut batch = Batch::new(fresh);
        let result = CatchUnwind::new(handler.handle_batch(&mut batch, &mut tx))
            .instrument(span.clone())
            .await;
        match &result {
            Ok(Ok(())) if !batch.any_failed() => {}
            Ok(Ok(())) => crate::trace::record_error(&span, "message_failed"),
            Ok(Err(_)) => crate::trace::record_error(&span, "batch_failed"),
            Err(_) => crate::trace::record_error(&span, "panic"),
        }
        drop(span);
        conclude(handler, store, tx, batch, replies, result).await;
    })
}

/// Where each fresh message's outcome goes, with its key.
type Replies = Vec<(String, oneshot::Sender<Outcome>)>;

/// Claims every message's key in one transaction: the transaction, the
/// fresh messages and where their outcomes go; duplicates are answered.
/// `None` (everyone answered) when there is nothing to run or the claim
/// failed.
async fn claim<S: DedupStore, M>(
    handler: &str,
    store: &S,
    items: Vec<Pending<M>>,
) -> Option<(S::Tx, Vec<BatchItem<M>>, Replies)> {
    if items.is_empty() {
        return None;
    }
    let claims: Vec<(&str, &str)> = items
        .iter()
        .map(|p| (p.key.as_str(), p.item.context.message_id()))
        .collect();
    let (tx, fresh) = match store.claim_batch(handler, &claims).await {
        Ok(c) => c,
        Err(e) => {
            let e = e.to_string();
            for p in items {
                let _ = p
                    .reply
                    .send(failed(FailureKind::Transient, BatchFailed(e.clone())));
            }
            return None;
        }
    };
    let mut batch_items = Vec::with_capacity(items.len());
    let mut replies = Vec::with_capacity(items.len());
    for (p, fresh) in items.into_iter().zip(fresh) {
        if fresh {
            batch_items.push(p.item);
            replies.push((p.key, p.reply));
        } else {
            let _ = p.reply.send(Outcome::Duplicate);
        }
    }
    Some((tx, batch_items, replies))
}

/// What the handler's result means for each message: all processed (the
/// commit), some failed (they get their failure, the others run again),
/// or a failure not attributed (split, down to the message that fails).
async fn conclude<S, H>(
    handler: &H,
    store: &S,
    tx: S::Tx,
    batch: Batch<H::Message>,
    replies: Replies,
    result: Result<Result<(), crate::error::BoxError>, crate::error::BoxError>,
) where
    S: DedupStore,
    H: BatchHandler<S>,
{
    let Batch {
        items,
        failed: marks,
    } = batch;
    match result {
        Ok(Ok(())) if !marks.iter().any(Option::is_some) => commit(store, tx, replies).await,
        // Some marked failed: they get their failure, the others run
        // again without them.
        Ok(Ok(())) => {
            rollback(store, tx).await;
            let mut again = Vec::new();
            for ((item, mark), (key, reply)) in items.into_iter().zip(marks).zip(replies) {
                match mark {
                    Some((kind, error)) => {
                        let _ = reply.send(failed(kind, error));
                    }
                    None => again.push(Pending { item, key, reply }),
                }
            }
            run(handler, store, again).await;
        }
        // Not attributed: a single message gets the failure (a panic is
        // a bug: terminal, as on the one-message path); more are split.
        Ok(Err(_)) | Err(_) if items.len() > 1 => {
            rollback(store, tx).await;
            let mut rest: Vec<Pending<H::Message>> = items
                .into_iter()
                .zip(replies)
                .map(|(item, (key, reply))| Pending { item, key, reply })
                .collect();
            let second = rest.split_off(rest.len() / 2);
            run(handler, store, rest).await;
            run(handler, store, second).await;
        }
        Ok(Err(error)) => {
            rollback(store, tx).await;
            let kind = if handler.is_terminal(&*error) {
                FailureKind::Terminal
            } else {
                FailureKind::Transient
            };
            if let Some((_, reply)) = replies.into_iter().next() {
                let _ = reply.send(failed(kind, error));
            }
        }
        Err(panic) => {
            rollback(store, tx).await;
            if let Some((_, reply)) = replies.into_iter().next() {
                let _ = reply.send(failed(FailureKind::Terminal, panic));
            }
        }
    }
}

/// Commits the batch: every message processed, or every one failed
/// (transient) with the commit's error.
async fn commit<S: DedupStore>(store: &S, tx: S::Tx, replies: Replies) {
    match store.commit(tx).await {
        Ok(()) => {
            for (_, reply) in replies {
                let _ = reply.send(Outcome::Processed);
            }
        }
        Err(e) => {
            let e = e.to_string();
            for (_, reply) in replies {
                let _ = reply.send(failed(FailureKind::Transient, BatchFailed(e.clone())));
            }
        }
    }
}

async fn rollback<S: DedupStore>(store: &S, tx: S::Tx) {
    if let Err(e) = store.rollback(tx).await {
        // The connection is gone; the server rolls back on its own.
        tracing::debug!(target: "consumer::runtime", error = %e, "batch rollback failed");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::batch::{Batch, BatchHandler, Batched};
    use crate::envelope::Message;
    use crate::error::BoxError;
    use crate::memory::MemoryBroker;
    use crate::retry::RetryPolicy;
    use crate::runtime::Consumer;
    use crate::store::{MemoryStore, MemoryTx};

    /// Records the size of each batch it runs.
    struct Sizes(Arc<Mutex<Vec<usize>>>);

    impl BatchHandler<MemoryStore> for Sizes {
        type Message = serde_json::Value;

        fn name(&self) -> &'static str {
            "sizes"
        }

        fn retry_policy(&self) -> RetryPolicy {
            RetryPolicy::none()
        }

        async fn handle_batch(
            &self,
            batch: &mut Batch<serde_json::Value>,
            _: &mut MemoryTx,
        ) -> Result<(), BoxError> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(batch.len());
            Ok(())
        }
    }

    /// `with_max_wait(Duration::MAX)` used to overflow the batch's
    /// deadline; it now means "wait until the batch is full".
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_max_wait_past_what_the_clock_counts_waits_for_a_full_batch() {
        let broker = MemoryBroker::new(1);
        for key in ["a", "b", "c"] {
            broker
                .publish("t", Message::raw(&b"{}"[..]).with_key(key))
                .await
                .expect("publish");
        }
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let handler = Batched::new(Sizes(Arc::clone(&sizes)))
            .with_max_batch(3)
            .with_max_wait(Duration::MAX);
        let drained = broker.clone();
        let run = Consumer::new(broker.source("t"), MemoryStore::new(), handler)
            .run_until(async move { drained.wait_drained("t").await });
        tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .expect("the batch ran once full, within 60 s")
            .expect("consumer");
        assert_eq!(*sizes.lock().expect("sizes"), [3]);
    }
}
