//! The consumer loop: per-key lanes, bounded in-flight work, retries,
//! dead letters, settling, and graceful shutdown.
//!
//! * A semaphore of `max_in_flight` permits bounds the deliveries held at
//!   once (queued in a lane, running, or waiting for an in-place retry);
//!   when none is free the loop stops taking from the source, which is the
//!   backpressure.
//! * Each partition key has at most one lane task at a time, which runs the
//!   key's deliveries strictly in arrival order; different keys run in
//!   parallel. A delivery without a key gets a lane of its own (its id).
//!   Lanes are found by a keyed hash of the key (SipHash with a random
//!   key, so producers cannot aim at collisions): two keys whose 64-bit
//!   hashes collide would share a lane, which costs parallelism, never
//!   order.
//! * Shutdown stops taking deliveries, lets running attempts finish (up to
//!   the shutdown timeout), and releases everything else unsettled: queued
//!   deliveries and in-place retries that are waiting. Released deliveries
//!   are redelivered by the broker; nothing is lost.

use std::collections::hash_map::{Entry, RandomState};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use time::OffsetDateTime;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::dead_letter::{DeadLetter, DeadLetterKind};
use crate::envelope::{Envelope, HeaderError};
use crate::error::{BoxError, Error};
use crate::handler::{Failure, FailureKind, Handler, Invocation, Outcome};
use crate::retry::{RetryMode, RetryPolicy};
use crate::source::{Acker, DeadLettered, Redelivery, Source};
use crate::stats::{Counter, Stats};
use crate::store::{DedupStore, FailureRecord};
use crate::trace;

/// Backoff for settle steps (dead letter, retry copy) and source errors.
const STEP_BACKOFF: RetryPolicy =
    RetryPolicy::exponential(Duration::from_millis(50), Duration::from_secs(5), u32::MAX);

/// Input rejected before the handler runs: always a poison pill.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// Headers present but malformed.
    #[error("malformed headers: {}", join(.0))]
    MalformedHeaders(Vec<HeaderError>),
    /// Payload over the configured limit.
    #[error("payload of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
}

fn join(errors: &[HeaderError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The handler panicked: a bug, classified terminal.
#[derive(Debug, thiserror::Error)]
#[error("handler panicked: {0}")]
pub struct HandlerPanicked(String);

/// Runs one handler over one source with one store.
///
/// ```no_run
/// # async fn demo<S, H>(source: S, store: consumer_core::SqliteStore, handler: H)
/// # where S: consumer_core::Source, H: consumer_core::Handler<consumer_core::SqliteStore> {
/// use consumer_core::Consumer;
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// # drop(stop);
/// Consumer::new(source, store, handler)
///     .with_max_in_flight(512)
///     .run_until(async { let _ = stopped.await; })
///     .await
///     .expect("consumer failed");
/// # }
/// ```
pub struct Consumer<Src, S, H> {
    source: Src,
    store: S,
    handler: H,
    max_in_flight: usize,
    max_payload_bytes: usize,
    shutdown_timeout: Duration,
    stats: Arc<Stats>,
}

impl<Src, S, H> Consumer<Src, S, H>
where
    Src: Source,
    S: DedupStore,
    H: Handler<S>,
{
    /// A consumer with the defaults: 256 deliveries in flight, payloads up
    /// to 1 MiB, 30 s to finish running work at shutdown.
    pub fn new(source: Src, store: S, handler: H) -> Self {
        Self {
            source,
            store,
            handler,
            max_in_flight: 256,
            max_payload_bytes: 1024 * 1024,
            shutdown_timeout: Duration::from_secs(30),
            stats: Arc::default(),
        }
    }

    /// Most deliveries held at once (the memory bound).
    pub fn with_max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n.clamp(1, Semaphore::MAX_PERMITS);
        self
    }

    /// Payloads larger than this are dead-lettered as poison unread.
    pub fn with_max_payload_bytes(mut self, n: usize) -> Self {
        self.max_payload_bytes = n;
        self
    }

    /// How long shutdown waits for running attempts before abandoning them
    /// unsettled (the broker redelivers them).
    pub fn with_shutdown_timeout(mut self, t: Duration) -> Self {
        self.shutdown_timeout = t;
        self
    }

    /// Live counters; clone the `Arc` before `run_until`.
    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    /// Consumes until `shutdown` completes or the source closes, then drains.
    ///
    /// Fails at once when the store's retention is shorter than the
    /// handler's longest retry window, and later only on a source error
    /// that is not retriable.
    pub async fn run_until<F>(self, shutdown: F) -> Result<(), Error>
    where
        F: Future<Output = ()> + Send,
    {
        let policy = self.handler.retry_policy();
        if self.store.retention() <= policy.max_window() {
            return Err(Error::RetentionTooShort {
                handler: self.handler.name().to_owned(),
                retention: self.store.retention(),
                window: policy.max_window(),
            });
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut source = self.source;
        let shared = Arc::new(Shared {
            system: source.system(),
            store: self.store,
            handler: self.handler,
            stats: self.stats,
            max_payload_bytes: self.max_payload_bytes,
            lanes: Mutex::new(Lanes::default()),
            lane_keys: RandomState::new(),
            stop: stop_rx,
        });
        let permits = Arc::new(Semaphore::new(self.max_in_flight));
        let mut lanes: JoinSet<()> = JoinSet::new();
        let mut source_errors = 0u32;
        tokio::pin!(shutdown);

        let result = loop {
            while lanes.try_join_next().is_some() {}
            let permit = tokio::select! {
                biased;
                () = &mut shutdown => break Ok(()),
                p = Arc::clone(&permits).acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break Ok(()),
                },
            };
            let next = tokio::select! {
                biased;
                () = &mut shutdown => break Ok(()),
                r = source.recv() => r,
            };
            match next {
                Ok(Some((envelope, acker))) => {
                    source_errors = 0;
                    shared.stats.incr(Counter::Received);
                    shared.stats.enter();
                    let job = Job {
                        envelope: Arc::new(envelope),
                        acker,
                        received: Instant::now(),
                        _permit: permit,
                    };
                    if let Some((lane, first)) = shared.enqueue(job) {
                        lanes.spawn(Arc::clone(&shared).run_lane(lane, first));
                    }
                }
                Ok(None) => break Ok(()),
                Err(e) if e.is_retriable() => {
                    source_errors = source_errors.saturating_add(1);
                    let delay = jitter(&STEP_BACKOFF, source_errors);
                    tracing::warn!(target: "consumer", error = %e, ?delay, "source failed; trying again");
                    tokio::select! {
                        () = &mut shutdown => break Ok(()),
                        () = tokio::time::sleep(delay) => {}
                    }
                }
                Err(e) => break Err(e),
            }
        };

        shared.stats.set_draining();
        let _ = stop_tx.send(true);
        let all = u32::try_from(self.max_in_flight).unwrap_or(u32::MAX);
        let drained = tokio::time::timeout(self.shutdown_timeout, permits.acquire_many(all)).await;
        if drained.is_err() {
            tracing::error!(
                target: "consumer",
                in_flight = shared.stats.snapshot().in_flight,
                "shutdown timeout: abandoning running attempts unsettled; the broker will redeliver them"
            );
            lanes.abort_all();
        }
        while lanes.join_next().await.is_some() {}
        drop(shared);
        source.close().await;
        result
    }
}

struct Job<A> {
    envelope: Arc<Envelope>,
    acker: A,
    received: Instant,
    _permit: OwnedSemaphorePermit,
}

struct Shared<S, H, A> {
    system: &'static str,
    store: S,
    handler: H,
    stats: Arc<Stats>,
    max_payload_bytes: usize,
    lanes: Mutex<Lanes<A>>,
    /// Hashes partition keys into lane ids.
    lane_keys: RandomState,
    stop: watch::Receiver<bool>,
}

/// Queued jobs by lane id (the keyed hash of their partition key): one
/// hash per delivery, and no copy of the key.
type Lanes<A> = HashMap<u64, VecDeque<Job<A>>, BuildHasherDefault<LaneIdHasher>>;

/// Hashes a lane id, already a keyed hash, as itself.
#[derive(Default)]
struct LaneIdHasher(u64);

impl Hasher for LaneIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

impl<S, H, A> Shared<S, H, A>
where
    S: DedupStore,
    H: Handler<S>,
    A: Acker,
{
    /// Queues `job` behind its key's lane, or returns it with its lane id
    /// when the key has no lane and one must be started.
    fn enqueue(&self, job: Job<A>) -> Option<(u64, Job<A>)> {
        let lane = self.lane_keys.hash_one(lane_key(&job.envelope));
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        match lanes.entry(lane) {
            Entry::Occupied(mut queue) => {
                queue.get_mut().push_back(job);
                None
            }
            Entry::Vacant(slot) => {
                slot.insert(VecDeque::new());
                Some((lane, job))
            }
        }
    }

    async fn run_lane(self: Arc<Self>, lane: u64, first: Job<A>) {
        let mut job = first;
        loop {
            if *self.stop.borrow() {
                self.release(job.acker).await;
                self.stats.leave(None);
            } else {
                let received = job.received;
                self.process(job.envelope, job.acker).await;
                self.stats.leave(Some(received.elapsed()));
            }
            let next = {
                let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
                match lanes.entry(lane) {
                    Entry::Occupied(mut queue) => {
                        let next = queue.get_mut().pop_front();
                        if next.is_none() {
                            queue.remove();
                        }
                        next
                    }
                    Entry::Vacant(_) => None,
                }
            };
            match next {
                Some(j) => job = j,
                None => return,
            }
        }
    }

    /// Runs attempts until the delivery is settled or released.
    async fn process(&self, mut envelope: Arc<Envelope>, mut acker: A) {
        let name = self.handler.name();
        let policy = self.handler.retry_policy();
        let mut failed_here = false;
        loop {
            let outcome = match self.precheck(&envelope) {
                Err(e) => Outcome::Failed(Failure::new(FailureKind::Poison, e)),
                Ok(()) => self.attempt(&envelope).await,
            };
            let failure = match outcome {
                Outcome::Processed => {
                    self.stats.incr(Counter::Processed);
                    if (failed_here || envelope.attempt > 1)
                        && let Err(e) = self.store.clear_failures(name, &envelope.id).await
                    {
                        tracing::debug!(target: "consumer", error = %e, "could not clear failure records; purge will");
                    }
                    return self.ack(acker).await;
                }
                Outcome::Duplicate => {
                    self.stats.incr(Counter::Duplicates);
                    tracing::debug!(target: "consumer", message_id = %envelope.id, "duplicate delivery skipped");
                    return self.ack(acker).await;
                }
                Outcome::Failed(f) => f,
            };
            let kind = match failure.kind {
                FailureKind::Poison => Some(DeadLetterKind::Poison),
                FailureKind::Terminal => Some(DeadLetterKind::Terminal),
                FailureKind::Transient => None,
            };
            if let Some(kind) = kind {
                return self
                    .dead_letter(
                        &envelope,
                        acker,
                        kind,
                        failure.error,
                        envelope.attempt,
                        None,
                    )
                    .await;
            }

            failed_here = true;
            let record = self.record_failure(&envelope, &failure.error).await;
            if !policy.should_retry(record.attempts) {
                return self
                    .dead_letter(
                        &envelope,
                        acker,
                        DeadLetterKind::Exhausted,
                        failure.error,
                        record.attempts,
                        Some(record.first_failure),
                    )
                    .await;
            }
            let delay = jitter(&policy, record.attempts);
            self.stats.incr(Counter::Retries);
            tracing::warn!(
                target: "consumer",
                handler = name,
                message_id = %envelope.id,
                attempt = record.attempts,
                ?delay,
                error = %failure.error,
                "transient failure; retrying"
            );
            let retry = Redelivery {
                attempt: record.attempts + 1,
                delay,
                first_failure: record.first_failure,
            };
            match policy.mode() {
                RetryMode::InPlace => {
                    if !self.sleep_unless_stopping(delay).await {
                        return self.release(acker).await;
                    }
                    let mut next = Envelope::clone(&envelope);
                    next.attempt = retry.attempt;
                    next.first_failure = Some(retry.first_failure);
                    envelope = Arc::new(next);
                }
                RetryMode::Redeliver => {
                    let mut step = 0;
                    loop {
                        match acker.schedule_retry(&envelope, &retry).await {
                            Ok(()) => return self.ack(acker).await,
                            Err(e) => {
                                self.stats.incr(Counter::SettleErrors);
                                step += 1;
                                tracing::warn!(target: "consumer", error = %e, "could not schedule the retry; trying again");
                                if !self
                                    .sleep_unless_stopping(jitter(&STEP_BACKOFF, step))
                                    .await
                                {
                                    return self.release(acker).await;
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    fn precheck(&self, envelope: &Envelope) -> Result<(), InputError> {
        if !envelope.defects.is_empty() {
            return Err(InputError::MalformedHeaders(envelope.defects.clone()));
        }
        if envelope.payload.len() > self.max_payload_bytes {
            return Err(InputError::TooLarge {
                size: envelope.payload.len(),
                limit: self.max_payload_bytes,
            });
        }
        Ok(())
    }

    async fn attempt(&self, envelope: &Arc<Envelope>) -> Outcome {
        let span = trace::consume_span(envelope, self.handler.name(), self.system);
        let mut invocation = Invocation::new(envelope, &self.store, self.handler.name());
        let run = CatchUnwind {
            inner: self.handler.handle(&mut invocation),
        }
        .instrument(span);
        match run.await {
            Ok(outcome) => outcome,
            Err(panic) => Outcome::Failed(Failure::new(FailureKind::Terminal, panic)),
        }
    }

    async fn record_failure(&self, envelope: &Envelope, error: &BoxError) -> FailureRecord {
        let name = self.handler.name();
        match self
            .store
            .record_failure(name, &envelope.id, &error.to_string())
            .await
        {
            Ok(r) => FailureRecord {
                attempts: r.attempts.max(envelope.attempt),
                first_failure: r.first_failure,
            },
            Err(e) => {
                // The count still travels with the message (in-memory attempt
                // number, header on redelivery); only a crash now resets it.
                tracing::warn!(target: "consumer", error = %e, "could not record the failed attempt");
                FailureRecord {
                    attempts: envelope.attempt,
                    first_failure: envelope
                        .first_failure
                        .unwrap_or_else(OffsetDateTime::now_utc),
                }
            }
        }
    }

    async fn dead_letter(
        &self,
        envelope: &Envelope,
        mut acker: A,
        kind: DeadLetterKind,
        error: BoxError,
        attempts: u32,
        first_failure: Option<OffsetDateTime>,
    ) {
        let name = self.handler.name();
        let dl = DeadLetter::new(kind, &*error, envelope, name, attempts, first_failure);
        tracing::error!(
            target: "consumer",
            handler = name,
            message_id = %envelope.id,
            origin = %envelope.origin,
            kind = %kind,
            attempts,
            error = %dl.error,
            "dead-lettering message"
        );
        let mut step = 0;
        loop {
            match self.try_dead_letter(&dl, &mut acker).await {
                Ok((first_time, how)) => {
                    if first_time {
                        self.stats.incr(match kind {
                            DeadLetterKind::Poison => Counter::DeadPoison,
                            DeadLetterKind::Terminal => Counter::DeadTerminal,
                            DeadLetterKind::Exhausted => Counter::DeadExhausted,
                        });
                    }
                    return match how {
                        DeadLettered::Published => self.ack(acker).await,
                        // Already settled by the broker's own dead-lettering.
                        DeadLettered::SettledByBroker => drop(acker),
                    };
                }
                Err(e) => {
                    self.stats.incr(Counter::SettleErrors);
                    step += 1;
                    tracing::warn!(target: "consumer", error = %e, "could not dead-letter; trying again");
                    if !self
                        .sleep_unless_stopping(jitter(&STEP_BACKOFF, step))
                        .await
                    {
                        return self.release(acker).await;
                    }
                }
            }
        }
    }

    /// Marks, publishes, then commits the mark: a crash before the commit
    /// dead-letters again on redelivery (at least once); after it, the
    /// redelivery finds the mark and is acked without a second dead letter.
    async fn try_dead_letter(
        &self,
        dl: &DeadLetter,
        acker: &mut A,
    ) -> Result<(bool, DeadLettered), Error> {
        let Some(mark) = self
            .store
            .begin_dead_letter(&dl.handler, &dl.message_id, &dl.error)
            .await?
        else {
            tracing::info!(target: "consumer", message_id = %dl.message_id, "already dead-lettered; acking the redelivery");
            return Ok((false, DeadLettered::Published));
        };
        let how = acker.dead_letter(dl).await?;
        if how == DeadLettered::SettledByBroker {
            tracing::error!(
                target: "consumer",
                message_id = %dl.message_id,
                "dead-letter publish kept failing; the broker dead-lettered the original without its context"
            );
        }
        self.store.commit_dead_letter(mark).await?;
        Ok((true, how))
    }

    async fn ack(&self, acker: A) {
        if let Err(e) = acker.ack().await {
            self.stats.incr(Counter::SettleErrors);
            tracing::warn!(target: "consumer", error = %e, "ack failed; the broker will redeliver and dedup will skip it");
        }
    }

    async fn release(&self, acker: A) {
        self.stats.incr(Counter::Released);
        if let Err(e) = acker.release().await {
            tracing::warn!(target: "consumer", error = %e, "release failed; the broker redelivers unsettled deliveries");
        }
    }

    /// Sleeps; `false` when shutdown began first.
    async fn sleep_unless_stopping(&self, delay: Duration) -> bool {
        let mut stop = self.stop.clone();
        tokio::select! {
            () = tokio::time::sleep(delay) => true,
            _ = stop.wait_for(|s| *s) => false,
        }
    }
}

/// A delay drawn from the thread's RNG, dropped before any `.await`.
fn jitter(policy: &RetryPolicy, failed_attempt: u32) -> Duration {
    policy.delay(failed_attempt, &mut rand::rng())
}

fn lane_key(envelope: &Envelope) -> &str {
    envelope.key.as_deref().unwrap_or(&envelope.id)
}

pin_project_lite::pin_project! {
    /// Turns a panic inside the handler's future into an error, so one bad
    /// message cannot take its lane (and every later message of its key) down.
    struct CatchUnwind<F> {
        #[pin]
        inner: F,
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.project().inner;
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".to_owned());
                Poll::Ready(Err(Box::new(HandlerPanicked(msg))))
            }
        }
    }
}
