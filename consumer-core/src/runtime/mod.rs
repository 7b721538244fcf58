//! The consumer loop: take deliveries, hand them to per-key lanes, drain on
//! shutdown.
//!
//! * A semaphore of `max_in_flight` permits bounds the deliveries held at
//!   once (queued in a lane, running, or waiting for an in-place retry);
//!   when none is free the loop stops taking from the source, which is the
//!   backpressure.
//! * Each partition key has at most one lane task at a time (`lanes`),
//!   which runs the key's deliveries strictly in arrival order; different
//!   keys run in parallel.
//! * Each delivery runs attempts until it is settled (`attempt`); the
//!   settle steps and their fallbacks are in `settle`.
//! * Each handler has a circuit (`circuit`): when different messages in a
//!   row fail transiently, it opens, the loop stops taking deliveries, and
//!   held ones wait without spending attempts until a probe succeeds.
//! * Shutdown stops taking deliveries, lets running attempts finish (up to
//!   the shutdown timeout), and releases everything else unsettled: queued
//!   deliveries and in-place retries that are waiting. Released deliveries
//!   are redelivered by the broker; nothing is lost.

mod attempt;
mod check;
pub(crate) mod circuit;
mod held;
mod lanes;
mod limits;
pub(crate) mod observe;
mod pause;
mod permits;
mod settle;
mod worker;

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use opentelemetry::metrics::Meter;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

pub use crate::handler::CircuitPolicy;
pub use attempt::InputError;
pub use limits::HandlerLimit;

use crate::envelope::Envelope;
use crate::error::Error;
use crate::handler::{Codecs, Handler};
use crate::metrics::consumer::ConsumerMetrics;
use crate::retry::RetryPolicy;
use crate::router::{OneHandler, Router, Routes};
use crate::source::Source;
use crate::stats::Stats;
use crate::store::DedupStore;
use crate::store::held::OnDeadLetter;
use crate::trace::SpanScope;
use consumer_codec::Codec;
use held::HeldSource;
use lanes::LaneTable;
use permits::{next_permit, refill_batch};

/// The source a consumer reads: the broker's, with the drain of released
/// held keys.
type Held<Src, S> = HeldSource<Src, S>;
/// Its acker.
type HeldAcker<Src, S> = held::HeldAcker<<Src as Source>::Acker, S>;
/// A running consumer's parts: its source, and what its lanes share.
type Parts<Src, S, R> = (Held<Src, S>, Worker<S, R, HeldAcker<Src, S>>);
use observe::{Happened, Observer};
use settle::Settler;
use worker::Worker;

/// The largest payload a consumer takes unless told otherwise.
const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

/// Backoff for settle steps (dead letter, retry copy) and source errors.
const STEP_BACKOFF: RetryPolicy =
    RetryPolicy::exponential(Duration::from_millis(50), Duration::from_secs(5), u32::MAX);

/// Runs a handler, or a [`Router`] of handlers, over one
/// source with one store.
///
/// ```no_run
/// # async fn demo<S, H>(source: S, store: consumer_core::SqliteStore, handler: H)
/// # where S: consumer_core::source::Source, H: consumer_core::Handler<consumer_core::SqliteStore> {
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
pub struct Consumer<Src, S, R> {
    source: Src,
    store: S,
    routes: R,
    max_in_flight: usize,
    max_payload_bytes: usize,
    shutdown_timeout: Duration,
    settle_timeout: Duration,
    held_key_lease: Duration,
    circuit: CircuitPolicy,
    pause_poll: Duration,
    limits: Vec<(&'static str, HandlerLimit)>,
    codecs: Codecs,
    stats: Arc<Stats>,
    meter: Option<Meter>,
    #[cfg(feature = "testing")]
    tap: Option<Arc<dyn observe::tap::Tap>>,
}

impl<Src, S, H> Consumer<Src, S, OneHandler<H>>
where
    Src: Source,
    S: DedupStore,
    H: Handler<S>,
{
    /// A consumer of one handler, which takes every delivery, with the
    /// defaults: 256 deliveries in flight, payloads up to 1 MiB, 30 s to
    /// finish running work at shutdown, 30 s for a settle step that can
    /// heal.
    pub fn new(source: Src, store: S, handler: H) -> Self {
        Self::routed(source, store, OneHandler(handler))
    }
}

impl<Src, S> Consumer<Src, S, Router<S>>
where
    Src: Source,
    S: DedupStore,
{
    /// A consumer of a [`Router`]: its handlers share this consumer's lanes,
    /// so the events of one key are handled in order whatever their types.
    /// The defaults are [`Consumer::new`]'s.
    pub fn router(source: Src, store: S, router: Router<S>) -> Self {
        Self::routed(source, store, router)
    }
}

impl<Src, S, R> Consumer<Src, S, R>
where
    Src: Source,
    S: DedupStore,
    R: Routes<S>,
{
    /// A consumer of any [`Routes`].
    ///
    /// The source is told the largest body taken and every handler's retry
    /// policy now (what it
    /// describes and declares may depend on them: a RabbitMQ topology sizes
    /// its delay queues to the longest delay); what it refuses is reported
    /// by [`run_until`](Self::run_until), before the first delivery.
    pub fn routed(mut source: Src, store: S, routes: R) -> Self {
        for handler in routes.handlers() {
            for policy in handler.retry_policies() {
                let _ = source.accept_retry_policy(&policy);
            }
        }
        source.limit_body(DEFAULT_MAX_PAYLOAD_BYTES);
        Self {
            source,
            store,
            routes,
            max_in_flight: 256,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            shutdown_timeout: Duration::from_secs(30),
            settle_timeout: Duration::from_secs(30),
            held_key_lease: held::LEASE,
            circuit: CircuitPolicy::off(),
            pause_poll: pause::POLL,
            limits: Vec::new(),
            codecs: Codecs::default(),
            stats: Arc::default(),
            meter: None,
            #[cfg(feature = "testing")]
            tap: None,
        }
    }

    /// Tells `tap` every event this consumer emits (the test kit's
    /// listener).
    #[cfg(feature = "testing")]
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // the kit runs on SQLite
    pub(crate) fn with_tap(mut self, tap: Arc<dyn observe::tap::Tap>) -> Self {
        self.tap = Some(tap);
        self
    }

    /// Most deliveries held at once (the memory bound).
    pub fn with_max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n.clamp(1, Semaphore::MAX_PERMITS);
        self
    }

    /// Payloads larger than this are dead-lettered as poison unread. The
    /// source is told at once: a structured-mode CloudEvent whose body is
    /// larger is not parsed, and is dead-lettered as too large too.
    pub fn with_max_payload_bytes(mut self, n: usize) -> Self {
        self.max_payload_bytes = n;
        self.source.limit_body(n);
        self
    }

    /// How long shutdown waits for running attempts before abandoning them
    /// unsettled (the broker redelivers them).
    pub fn with_shutdown_timeout(mut self, t: Duration) -> Self {
        self.shutdown_timeout = t;
        self
    }

    /// How long a settle step (a dead letter, a retry copy, the
    /// dead-letter table) keeps trying, with backoff, while its failure can
    /// heal (a broker or database that is down) before it takes its
    /// fallback; failures that cannot heal take it at once. Default 30 s.
    pub fn with_settle_timeout(mut self, t: Duration) -> Self {
        self.settle_timeout = t;
        self
    }

    /// How long this consumer keeps a released held key it drains without
    /// renewing its lease (it renews it every third of this while a
    /// drained message runs): a consumer that dies mid-drain leaves the key
    /// to another, or to itself restarted, this long after. Default 30 s.
    /// Only for handlers that hold keys
    /// ([`OnDeadLetter::HoldKey`]).
    pub fn with_held_key_lease(mut self, lease: Duration) -> Self {
        self.held_key_lease = lease.max(Duration::from_millis(100));
        self
    }

    /// When a handler's circuit opens and for how long, for the handlers
    /// without a policy of their own (`#[handler(circuit = ..)]`):
    /// [`CircuitPolicy::default()`] opens after 5 different messages in a
    /// row failed transiently. Off unless set here or on the handler, in
    /// this release ([`CircuitPolicy::off()`]): every failure then goes
    /// through the retry policy alone.
    pub fn with_circuit(mut self, policy: CircuitPolicy) -> Self {
        self.circuit = policy;
        self
    }

    /// How often this consumer reads which handlers an operator paused
    /// (`consumer pause`, the service's admin endpoint; see
    /// [`PausedHandlers`](crate::store::paused::PausedHandlers)): a pause
    /// or a resume takes effect within this. Default 1 s (at least 10 ms):
    /// one small query a second per consumer.
    pub fn with_pause_poll(mut self, every: Duration) -> Self {
        self.pause_poll = every.max(Duration::from_millis(10));
        self
    }

    /// Limits handler `name`'s attempts: how many at once, how many per
    /// period (see [`HandlerLimit`]). A delivery waiting for its handler's
    /// turn keeps its lane, its in-flight permit and its attempt; the
    /// consumer refuses to start when no handler has that name. Set again,
    /// a handler's limit replaces the one before.
    pub fn with_handler_limit(mut self, name: &'static str, limit: HandlerLimit) -> Self {
        self.limits.retain(|(n, _)| *n != name);
        self.limits.push((name, limit));
        self
    }

    /// Adds a payload codec (Avro, Protobuf, JSON Schema: see
    /// [`consumer_codec`]) for the handlers that name its type
    /// (`#[handler(codec = avro)]`); one of the same type is replaced. The
    /// consumer refuses to start when a handler names a codec it lacks.
    pub fn with_codec<C: Codec>(mut self, codec: C) -> Self {
        self.codecs.insert(codec);
        self
    }

    /// Where this consumer's instruments come from (see
    /// [`metrics`](crate::metrics)); by default the global meter provider's,
    /// as installed when `run_until` starts.
    pub fn with_meter(mut self, meter: Meter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// Live counters; clone the `Arc` before `run_until`.
    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    /// What the service's AsyncAPI document says of this consumer.
    pub(crate) fn describe(&self, name: String) -> crate::describe::PartDescription {
        crate::describe::PartDescription::Consumer {
            name,
            system: self.source.system(),
            channels: self.source.channels().map(Box::new),
            handlers: self
                .routes
                .handlers()
                .into_iter()
                .flat_map(|h| h.describe())
                .collect(),
        }
    }

    /// Consumes until `shutdown` completes or the source closes, then drains.
    ///
    /// Fails at once, before taking a delivery, when the store's retention
    /// is shorter than a handler's longest retry window or when the source
    /// cannot serve a handler's retry mode; later only on a source error
    /// that is not retriable.
    pub async fn run_until<F>(mut self, shutdown: F) -> Result<(), Error>
    where
        F: Future<Output = ()> + Send,
    {
        self.check()?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let max_in_flight = self.max_in_flight;
        let shutdown_timeout = self.shutdown_timeout;
        let pause_poll = self.pause_poll;
        let (mut source, worker) = self.into_worker(Stopping(stop_rx));
        let worker = Arc::new(worker);
        let watching = worker.watch_pauses(pause_poll).await;
        let permits = Arc::new(Semaphore::new(max_in_flight));
        let mut lanes: JoinSet<()> = JoinSet::new();
        worker.observer.emit(Happened::Running);
        let result = dispatch(
            &mut source,
            &worker,
            &permits,
            &mut lanes,
            refill_batch(max_in_flight),
            shutdown,
        )
        .await;

        // The stop first: whoever sees the consumer draining must find its
        // lanes stopping (nothing queued starts after that).
        let _ = stop_tx.send(true);
        worker.observer.emit(Happened::Draining);
        let all = u32::try_from(max_in_flight).unwrap_or(u32::MAX);
        let drained = tokio::time::timeout(shutdown_timeout, permits.acquire_many(all)).await;
        if drained.is_err() {
            let in_flight = worker.observer.stats().snapshot().in_flight;
            worker
                .observer
                .emit(Happened::ShutdownTimedOut { in_flight });
            lanes.abort_all();
        }
        worker.lanes.close_idle_lanes();
        while lanes.join_next().await.is_some() {}
        // Awaited, not only aborted: the task holds the instruments, whose
        // series must be gone when `run_until` returns.
        watching.abort();
        let _ = watching.await;
        drop(worker);
        source.close().await;
        result
    }

    /// The source, and what the lane tasks share: the routes, the settle
    /// loop, the lanes, the instruments.
    fn into_worker(self, stopping: Stopping) -> Parts<Src, S, R> {
        let names = self.routes.handlers().iter().map(|h| h.name()).collect();
        let holding: Vec<&'static str> = self
            .routes
            .handlers()
            .into_iter()
            .filter(|h| h.on_dead_letter() == OnDeadLetter::HoldKey)
            .map(|h| h.name())
            .collect();
        let source = self.source;
        let meter = self.meter.unwrap_or_else(crate::metrics::global_meter);
        let metrics = Arc::new(ConsumerMetrics::new(
            &meter,
            source.system(),
            source.consumer_group(),
            source.server(),
            source.gauges(),
        ));
        let spans = SpanScope {
            system: source.system(),
            group: source.consumer_group().map(Box::from),
            server: source.server().map(|(a, p)| (Box::from(a), p)),
        };
        let observer = Observer::new(metrics, self.stats);
        #[cfg(feature = "testing")]
        let observer = observer.with_tap(self.tap);
        let source = HeldSource::new(
            source,
            self.store.clone(),
            holding,
            self.max_payload_bytes,
            self.held_key_lease,
            observer.clone(),
        );
        let settler = Settler {
            store: self.store.clone(),
            observer: observer.clone(),
            spans: spans.clone(),
            timeout: self.settle_timeout,
            stopping: stopping.clone(),
        };
        let worker = Worker {
            routes: self.routes,
            store: self.store,
            settler,
            lanes: LaneTable::default(),
            observer,
            spans,
            max_payload_bytes: self.max_payload_bytes,
            circuits: circuit::Circuits::new(self.circuit),
            pauses: Arc::new(pause::Pauses::new(names)),
            limits: limits::Limits::new(&self.limits),
            codecs: self.codecs,
            stopping,
        };
        (source, worker)
    }
}

/// Takes deliveries, each with an in-flight permit, and hands them to their
/// key's lane until `shutdown` completes, the source ends, or it fails for
/// good; retriable source errors are retried with backoff.
async fn dispatch<Src, S, R, F>(
    source: &mut Src,
    worker: &Arc<Worker<S, R, Src::Acker>>,
    permits: &Arc<Semaphore>,
    lanes: &mut JoinSet<()>,
    batch: u32,
    shutdown: F,
) -> Result<(), Error>
where
    Src: Source,
    S: DedupStore,
    R: Routes<S>,
    F: Future<Output = ()> + Send,
{
    tokio::pin!(shutdown);
    let mut source_errors = 0u32;
    // Permits taken for deliveries not received yet (see `next_permit`);
    // dropped on return, as the drain waits for every permit.
    let mut reserve: Option<OwnedSemaphorePermit> = None;
    loop {
        // An open circuit: take nothing until its probe is due; every
        // handler paused: nothing until one is resumed.
        if worker.circuits.any_open() || worker.pauses.all_paused() {
            tokio::select! {
                biased;
                () = &mut shutdown => return Ok(()),
                () = worker.until_taking() => {}
            }
        }
        let permit = tokio::select! {
            biased;
            () = &mut shutdown => return Ok(()),
            p = next_permit(permits, &mut reserve, batch) => match p {
                Ok(p) => p,
                Err(_) => return Ok(()),
            },
        };
        // The delivery is handed to its lane where the source's future
        // yields it, rather than taken out through `select!` and a
        // `match`.
        let mut permit = Some(permit);
        let recv = source.recv();
        tokio::pin!(recv);
        let received = std::future::poll_fn(|cx| {
            if shutdown.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(false));
            }
            match recv.as_mut().poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Ok(Some((envelope, acker)))) => {
                    if let Some(permit) = permit.take() {
                        hand_over(worker, lanes, envelope, acker, permit);
                    }
                    Poll::Ready(Ok(true))
                }
                Poll::Ready(Ok(None)) => Poll::Ready(Ok(false)),
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            }
        })
        .await;
        match received {
            Ok(true) => source_errors = 0,
            Ok(false) => return Ok(()),
            Err(e) if e.is_retriable() => {
                source_errors = source_errors.saturating_add(1);
                let delay = jitter(&STEP_BACKOFF, source_errors);
                worker
                    .observer
                    .emit(Happened::SourceFailed { error: &e, delay });
                tokio::select! {
                    () = &mut shutdown => return Ok(()),
                    () = tokio::time::sleep(delay) => {}
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Hands a delivery, with its in-flight permit, to its key's lane: queued
/// behind the lane's running delivery, or given to an idle lane task, or
/// to a new one.
fn hand_over<S, R, A>(
    worker: &Arc<Worker<S, R, A>>,
    lanes: &mut JoinSet<()>,
    envelope: Arc<Envelope>,
    acker: A,
    permit: OwnedSemaphorePermit,
) where
    S: DedupStore,
    R: Routes<S>,
    A: crate::source::Acker,
{
    worker.observer.emit(Happened::Received(&envelope));
    let job = Job {
        envelope,
        acker,
        received: Instant::now(),
        _permit: permit,
    };
    if let Some((lane, first)) = worker.lanes.enqueue(job)
        && let Some((lane, first)) = worker.lanes.hand_to_idle(lane, first)
    {
        // Lane tasks end only at shutdown (or in a panic outside the
        // handler's guard): reaping the ended ones where a task is added
        // keeps the set bounded without a look at it per delivery.
        while lanes.try_join_next().is_some() {}
        lanes.spawn(Arc::clone(worker).run_lanes(lane, first));
    }
}

/// How the runtime finished with a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// Settled: acked (processed, a duplicate, or its retry copy or dead
    /// letter confirmed).
    Settled,
    /// Released: given back to the broker unsettled, to be delivered again.
    Released,
}

/// One delivery held by the runtime, with its in-flight permit.
struct Job<A> {
    envelope: Arc<Envelope>,
    acker: A,
    received: Instant,
    _permit: OwnedSemaphorePermit,
}

/// Whether shutdown began, for what must not start after it.
#[derive(Clone)]
struct Stopping(watch::Receiver<bool>);

impl Stopping {
    fn has_begun(&self) -> bool {
        *self.0.borrow()
    }

    /// Completes when shutdown begins.
    async fn begun(&self) {
        let mut stop = self.0.clone();
        let _ = stop.wait_for(|s| *s).await;
    }

    /// Sleeps; `false` when shutdown began first.
    async fn sleep_unless_stopping(&self, delay: Duration) -> bool {
        let mut stop = self.0.clone();
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

#[cfg(test)]
mod tests;
