//! Settling in batches: deletes go out as `DeleteMessageBatch` and
//! releases as `ChangeMessageVisibilityBatch`, ten entries a call.
//!
//! A task per kind gathers up to ten entries, waiting at most its linger
//! after the first (deletes: 5 ms, so a busy consumer fills its calls;
//! releases: none), with up to four calls in flight. A call that fails as a whole is tried again
//! when its failure can heal; a call that fails for some entries tries
//! again only those whose failure can heal (SQS's own, throttling), and
//! answers the others at once. Each entry has [`TRIES`] tries, with
//! backoff, before its error goes to the acker.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, mpsc, oneshot};

use consumer_backend::observe::{Happened, SourceObserver};

use crate::client::{ApiError, BatchOutcome, EntryFailure, ReceiptEntry, SqsApi, VisibilityEntry};
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
    open: Arc<Open>,
}

/// Entries queued or in a call, and a wake-up when none is left.
#[derive(Default)]
struct Open {
    entries: AtomicUsize,
    none_left: Notify,
}

impl Open {
    fn done(&self, n: usize) {
        if self.entries.fetch_sub(n, Ordering::SeqCst) == n {
            self.none_left.notify_waiters();
        }
    }
}

impl Calls {
    /// Starts the task for `queue_url`, gathering each call's entries for
    /// at most `linger`; it ends when every `Calls` clone is dropped and
    /// the queue is empty. Deletes are emitted to `observer`.
    pub(super) fn start(
        api: Arc<dyn SqsApi>,
        queue_url: String,
        queue: String,
        linger: Duration,
        observer: SourceObserver,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let open = Arc::<Open>::default();
        let task = Task {
            api,
            url: Arc::from(queue_url),
            queue: Arc::from(queue),
            observer,
            open: Arc::clone(&open),
        };
        tokio::spawn(run(task, linger, rx));
        Self { tx, open }
    }

    fn queue(&self, receipt: String, op: Op, reply: Reply) -> bool {
        self.open.entries.fetch_add(1, Ordering::SeqCst);
        if self.tx.send((receipt, op, reply)).is_err() {
            self.open.done(1);
            return false;
        }
        true
    }

    /// Queues `op` on the message with `receipt`; resolves once SQS
    /// confirmed it or it failed for good.
    pub(super) async fn call(&self, receipt: String, op: Op) -> Result<(), Error> {
        let (reply, answer) = oneshot::channel();
        if !self.queue(receipt, op, reply) {
            return Err(Error::Closed);
        }
        answer.await.unwrap_or(Err(Error::Closed))
    }

    /// Queues `op` without waiting for the answer.
    pub(super) fn send(&self, receipt: String, op: Op) {
        let (reply, _) = oneshot::channel();
        self.queue(receipt, op, reply);
    }

    /// Resolves once every entry queued so far is settled.
    pub(super) async fn flush(&self) {
        loop {
            let none_left = self.open.none_left.notified();
            tokio::pin!(none_left);
            none_left.as_mut().enable();
            if self.open.entries.load(Ordering::SeqCst) == 0 {
                return;
            }
            none_left.await;
        }
    }
}

/// What every call of one task shares.
#[derive(Clone)]
struct Task {
    api: Arc<dyn SqsApi>,
    url: Arc<str>,
    queue: Arc<str>,
    observer: SourceObserver,
    open: Arc<Open>,
}

async fn run(task: Task, linger: Duration, mut rx: mpsc::UnboundedReceiver<(String, Op, Reply)>) {
    let slots = Arc::new(Semaphore::new(CONCURRENT_CALLS));
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        let until = tokio::time::Instant::now() + linger;
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) if linger.is_zero() => break,
                Err(_) => match tokio::time::timeout_at(until, rx.recv()).await {
                    Ok(Some(next)) => batch.push(next),
                    Ok(None) | Err(_) => break,
                },
            }
        }
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let task = task.clone();
        tokio::spawn(async move {
            let n = batch.len();
            settle(&task, batch).await;
            task.open.done(n);
            drop(slot);
        });
    }
}

/// One entry still to settle: its id in the call, its receipt handle,
/// what to do, and who waits for the answer.
type Entry = (String, String, Op, Reply);

/// One batch, tried until every entry succeeded or failed for good.
async fn settle(task: &Task, batch: Vec<(String, Op, Reply)>) {
    let mut open: Vec<Entry> = batch
        .into_iter()
        .enumerate()
        .map(|(i, (receipt, op, reply))| (i.to_string(), receipt, op, reply))
        .collect();
    for attempt in 1..=TRIES {
        let last = attempt == TRIES;
        let failures = match calls_once(task, &open).await {
            Ok(failures) => failures,
            Err(e) if e.is_retriable() && !last => {
                tracing::debug!(target: "consumer::sqs", error = %e, attempt, "settle call failed; trying again");
                tokio::time::sleep(backoff(attempt)).await;
                continue;
            }
            Err(e) => {
                fail_all(task, open, e);
                return;
            }
        };
        let retry = answer(task, open, failures, last);
        if retry.is_empty() {
            return;
        }
        tracing::debug!(target: "consumer::sqs", entries = retry.len(), attempt, "some settle entries failed; trying those again");
        tokio::time::sleep(backoff(attempt)).await;
        open = retry;
    }
}

/// One try of `open`: its deletes in one call, then its visibility changes
/// in another (not tried once the first failed as a whole). The entries
/// that failed, each with its call's operation; `Err` when a call failed
/// as a whole.
async fn calls_once(
    task: &Task,
    open: &[Entry],
) -> Result<Vec<(&'static str, EntryFailure)>, Error> {
    let (api, url, queue) = (&*task.api, &*task.url, &*task.queue);
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
    let mut note = |operation: &'static str, answer: Result<BatchOutcome, ApiError>| {
        let outcome = answer.map_err(Error::sqs(operation, queue))?;
        failures.extend(outcome.failed.into_iter().map(|f| (operation, f)));
        Ok::<_, Error>(())
    };
    if !deletes.is_empty() {
        note("DeleteMessageBatch", api.delete_batch(url, deletes).await)?;
    }
    if !changes.is_empty() {
        note(
            "ChangeMessageVisibilityBatch",
            api.change_visibility_batch(url, changes).await,
        )?;
    }
    Ok(failures)
}

/// Answers every entry with `e`, the error of a call that failed for good:
/// the first gets it as it is, the others a copy of its kind and text.
fn fail_all(task: &Task, open: Vec<Entry>, e: Error) {
    let text = e.to_string();
    let kind = e.kind();
    let mut first = Some(e);
    for (_, _, op, reply) in open {
        let err = first.take().unwrap_or_else(|| Error::Sqs {
            operation: "settle",
            queue: task.queue.to_string(),
            source: crate::client::ApiError::new(kind, text.clone()),
        });
        if op == Op::Delete {
            task.observer.emit(Happened::AckFailed { error: &err });
        }
        let _ = reply.send(Err(err));
    }
}

/// Answers each entry of a try whose calls went through: done, or its
/// failure; returns those whose failure can heal, to try again (none on
/// the `last` try).
fn answer(
    task: &Task,
    open: Vec<Entry>,
    mut failures: Vec<(&'static str, EntryFailure)>,
    last: bool,
) -> Vec<Entry> {
    let mut retry = Vec::new();
    for (id, receipt, op, reply) in open {
        let Some(i) = failures.iter().position(|(_, f)| f.id == id) else {
            if op == Op::Delete {
                task.observer.emit(Happened::Acked);
            }
            let _ = reply.send(Ok(()));
            continue;
        };
        let (operation, failure) = failures.swap_remove(i);
        let error = Error::Entry {
            operation,
            queue: task.queue.to_string(),
            failure,
        };
        if error.is_retriable() && !last {
            retry.push((id, receipt, op, reply));
        } else {
            if op == Op::Delete {
                task.observer.emit(Happened::AckFailed { error: &error });
            }
            let _ = reply.send(Err(error));
        }
    }
    retry
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(50u64 << attempt.min(6))
}
