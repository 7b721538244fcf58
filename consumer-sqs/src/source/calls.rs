//! Settling in batches: deletes go out as `DeleteMessageBatch` and
//! releases as `ChangeMessageVisibilityBatch`, ten entries a call.
//!
//! A task per kind takes what is queued when it is free (up to ten), so
//! a lone ack goes out at once and a busy consumer fills its calls; up to
//! four calls are in flight. A call that fails as a whole is tried again
//! when its failure can heal; a call that fails for some entries tries
//! again only those whose failure can heal (SQS's own, throttling), and
//! answers the others at once. Each entry has [`TRIES`] tries, with
//! backoff, before its error goes to the acker.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::client::{ReceiptEntry, SqsApi, VisibilityEntry};
use crate::error::Error;

/// Tries per entry.
pub(super) const TRIES: u32 = 4;
/// Calls in flight per kind.
const CONCURRENT_CALLS: usize = 4;
/// Entries per call: SQS's batch limit.
const BATCH: usize = 10;

/// What a settle call does to one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    /// `DeleteMessageBatch`.
    Delete,
    /// `ChangeMessageVisibilityBatch` to this many seconds.
    Visibility(i32),
}

type Reply = oneshot::Sender<Result<(), Error>>;

/// The queue of one kind of settle call.
#[derive(Clone)]
pub(super) struct Calls {
    tx: mpsc::UnboundedSender<(String, Op, Reply)>,
}

impl Calls {
    /// Starts the task for `queue_url`; it ends when every `Calls` clone
    /// is dropped and the queue is empty.
    pub(super) fn start(api: Arc<dyn SqsApi>, queue_url: String, queue: String) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(api, queue_url, queue, rx));
        Self { tx }
    }

    /// Queues `op` on the message with `receipt`; resolves once SQS
    /// confirmed it or it failed for good.
    pub(super) async fn call(&self, receipt: String, op: Op) -> Result<(), Error> {
        let (reply, answer) = oneshot::channel();
        if self.tx.send((receipt, op, reply)).is_err() {
            return Err(Error::Closed);
        }
        answer.await.unwrap_or(Err(Error::Closed))
    }

    /// Queues `op` without waiting for the answer.
    pub(super) fn send(&self, receipt: String, op: Op) {
        let (reply, _) = oneshot::channel();
        let _ = self.tx.send((receipt, op, reply));
    }
}

async fn run(
    api: Arc<dyn SqsApi>,
    queue_url: String,
    queue: String,
    mut rx: mpsc::UnboundedReceiver<(String, Op, Reply)>,
) {
    let slots = Arc::new(Semaphore::new(CONCURRENT_CALLS));
    let (url, queue) = (Arc::<str>::from(queue_url), Arc::<str>::from(queue));
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let (api, url, queue) = (Arc::clone(&api), Arc::clone(&url), Arc::clone(&queue));
        tokio::spawn(async move {
            settle(&*api, &url, &queue, batch).await;
            drop(slot);
        });
    }
}

/// One batch, tried until every entry succeeded or failed for good.
async fn settle(api: &dyn SqsApi, url: &str, queue: &str, batch: Vec<(String, Op, Reply)>) {
    let mut open: Vec<(String, String, Op, Reply)> = batch
        .into_iter()
        .enumerate()
        .map(|(i, (receipt, op, reply))| (i.to_string(), receipt, op, reply))
        .collect();
    for attempt in 1..=TRIES {
        let deletes: Vec<ReceiptEntry> = open
            .iter()
            .filter(|(_, _, op, _)| *op == Op::Delete)
            .map(|(id, receipt, _, _)| ReceiptEntry {
                id: id.clone(),
                receipt_handle: receipt.clone(),
            })
            .collect();
        let changes: Vec<VisibilityEntry> = open
            .iter()
            .filter_map(|(id, receipt, op, _)| match op {
                Op::Visibility(seconds) => Some(VisibilityEntry {
                    id: id.clone(),
                    receipt_handle: receipt.clone(),
                    seconds: *seconds,
                }),
                Op::Delete => None,
            })
            .collect();
        let mut failures = Vec::new();
        let mut call_error = None;
        if !deletes.is_empty() {
            match api.delete_batch(url, deletes).await {
                Ok(o) => failures.extend(o.failed.into_iter().map(|f| ("DeleteMessageBatch", f))),
                Err(e) => call_error = Some(Error::sqs("DeleteMessageBatch", queue)(e)),
            }
        }
        if !changes.is_empty() && call_error.is_none() {
            match api.change_visibility_batch(url, changes).await {
                Ok(o) => failures.extend(
                    o.failed
                        .into_iter()
                        .map(|f| ("ChangeMessageVisibilityBatch", f)),
                ),
                Err(e) => {
                    call_error = Some(Error::sqs("ChangeMessageVisibilityBatch", queue)(e));
                }
            }
        }
        let last = attempt == TRIES;
        if let Some(e) = call_error {
            if e.is_retriable() && !last {
                tracing::debug!(target: "consumer::sqs", error = %e, attempt, "settle call failed; trying again");
                tokio::time::sleep(backoff(attempt)).await;
                continue;
            }
            let text = e.to_string();
            let kind = e.kind();
            let mut first = Some(e);
            for (_, _, _, reply) in open {
                let err = first.take().unwrap_or_else(|| Error::Sqs {
                    operation: "settle",
                    queue: queue.to_owned(),
                    source: crate::client::ApiError::new(kind, text.clone()),
                });
                let _ = reply.send(Err(err));
            }
            return;
        }
        let mut retry = Vec::new();
        for (id, receipt, op, reply) in open {
            match failures.iter().position(|(_, f)| f.id == id) {
                None => {
                    let _ = reply.send(Ok(()));
                }
                Some(i) => {
                    let (operation, failure) = failures.swap_remove(i);
                    let error = Error::Entry {
                        operation,
                        queue: queue.to_owned(),
                        failure,
                    };
                    if error.is_retriable() && !last {
                        retry.push((id, receipt, op, reply));
                    } else {
                        let _ = reply.send(Err(error));
                    }
                }
            }
        }
        if retry.is_empty() {
            return;
        }
        tracing::debug!(target: "consumer::sqs", entries = retry.len(), attempt, "some settle entries failed; trying those again");
        tokio::time::sleep(backoff(attempt)).await;
        open = retry;
    }
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(50u64 << attempt.min(6))
}
