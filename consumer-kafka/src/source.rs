//! The consuming side: [`KafkaSource`], its settle glue [`KafkaAcker`], and
//! [`KafkaMetrics`].
//!
//! # How offsets stay safe
//!
//! One thread owns the librdkafka consumer and polls it. Every record it
//! hands to the runtime is recorded as *pending* in its partition; settling
//! (ack, retry copy confirmed, dead letter confirmed) removes it. A
//! partition's position, the offset stored for commit, is its lowest pending
//! offset, or the offset after the last record received when nothing is
//! pending. Records finish out of order (different keys of one partition
//! run in parallel), but the committed offset never passes one that has not
//! finished, so a crash or a rebalance redelivers it (and dedup skips what
//! had finished after it). Offsets are stored with
//! `enable.auto.offset.store=false` and committed by librdkafka's
//! auto-commit of stored offsets, and synchronously on revoke and close.
//! `close` waits for the final commit and the group leave at most the
//! close timeout: a coordinator out of reach does not hold a shutdown (the
//! poll thread finishes on its own; what it could not commit comes again,
//! and dedup skips it).
//!
//! # Bounded work, without stopping the poll
//!
//! When a partition has `max_per_partition` records pending, the poll
//! thread stops taking records (librdkafka keeps fetching into its own
//! queue, bounded by `queued.max.messages.kbytes`) until that partition is
//! back to three quarters, serving offset stores meanwhile. A fast handler
//! drains it within milliseconds. If it stays full for the stall limit
//! (`with_max_poll_stall`, 1 s: one stuck key, say), the partition is
//! paused instead and polling goes on for the others; librdkafka discards
//! what it had prefetched for a paused partition and fetches it again on
//! resume (at half), which is why pausing is the fallback, not the rule.
//! So the poll loop never stops for longer than the stall limit, far below
//! `max.poll.interval.ms`, and one slow key pauses only its partition.
//!
//! # Rebalances
//!
//! On revoke, the revoked partitions stop handing out records (those
//! already fetched are dropped), the callback waits up to the revoke timeout
//! for the records the runtime holds to settle, stores and commits the
//! final positions synchronously (skipped when the assignment was lost: the
//! partitions may already belong to another member), then lets librdkafka
//! release them. Anything settled later is ignored; the new owner gets it
//! again and dedup makes that harmless. On assign, partitions start with a
//! fresh epoch, so settlements from an earlier assignment cannot move the
//! new position.
//!
//! # Retries through the retry topic
//!
//! The consumer subscribes to the retry topic too. A retry copy carries its
//! due time (`x-consumer-due`); a copy that is not due yet is *parked*: its
//! partition is paused until then (no thread waits, other partitions flow),
//! and it stays pending so the committed offset does not pass it.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use consumer_core::envelope::{format_time, names};
use consumer_core::{
    Acker, DeadLetter, DeadLettered, Envelope, Error, Message, Redelivery, Source,
};
use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::Message as _;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::util::Timeout;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::sync::mpsc;

use crate::error;
use crate::headers::{self, to_kafka_headers};
use crate::topics::Topics;

/// Header of a retry copy: when it is due (RFC 3339).
pub const DUE: &str = "x-consumer-due";

/// Properties set on the consumer unless overridden with
/// [`KafkaSourceBuilder::with_property`].
pub const CONSUMER_DEFAULTS: &[(&str, &str)] = &[
    ("enable.auto.commit", "true"),
    ("enable.auto.offset.store", "false"),
    ("auto.commit.interval.ms", "1000"),
    ("auto.offset.reset", "earliest"),
    ("partition.assignment.strategy", "cooperative-sticky"),
    ("statistics.interval.ms", "1000"),
];

/// Properties set on the producer of retry copies and dead letters unless
/// overridden with [`KafkaSourceBuilder::with_producer_property`].
pub const SETTLE_PRODUCER_DEFAULTS: &[(&str, &str)] = &[
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("message.timeout.ms", "30000"),
    ("linger.ms", "1"),
];

/// Properties the source needs and the builder refuses to change.
const CONSUMER_FIXED: &[(&str, &str)] = &[("enable.auto.offset.store", "false")];

/// Configures and starts a [`KafkaSource`].
#[derive(Debug, Clone)]
#[must_use]
pub struct KafkaSourceBuilder {
    brokers: String,
    group_id: String,
    topics: Topics,
    consumer: Vec<(String, String)>,
    producer: Vec<(String, String)>,
    max_per_partition: usize,
    revoke_timeout: Duration,
    max_poll_stall: Duration,
    close_timeout: Duration,
}

impl KafkaSourceBuilder {
    /// Any librdkafka consumer property (`session.timeout.ms`,
    /// `fetch.max.bytes`, security settings, ...). `enable.auto.offset.store`
    /// stays `false`: the source stores offsets itself.
    pub fn with_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.consumer.push((key.into(), value.into()));
        self
    }

    /// Any librdkafka producer property for the producer that writes retry
    /// copies and dead letters (`batch.num.messages`, security, ...).
    pub fn with_producer_property(
        mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        self.producer.push((key.into(), value.into()));
        self
    }

    /// Records pending in one partition before the poll thread holds off
    /// (default 256). See the module docs.
    pub fn with_max_per_partition(mut self, n: usize) -> Self {
        self.max_per_partition = n.max(1);
        self
    }

    /// How long the poll thread holds off while a partition is full before
    /// it pauses that partition and polls on (default 1 s; keep it far
    /// below `max.poll.interval.ms`).
    pub fn with_max_poll_stall(mut self, t: Duration) -> Self {
        self.max_poll_stall = t;
        self
    }

    /// How long a revoke waits for the revoked partitions' records to settle
    /// before giving them up (default 10 s; keep it well under
    /// `max.poll.interval.ms`, the poll thread waits in the callback).
    pub fn with_revoke_timeout(mut self, t: Duration) -> Self {
        self.revoke_timeout = t;
        self
    }

    /// How long `close` waits for the final offset commit and for leaving
    /// the group (default 10 s). A coordinator that cannot be reached
    /// within it does not hold the shutdown: what was not committed is
    /// delivered again to the partitions' next owner, and dedup skips it.
    pub fn with_close_timeout(mut self, t: Duration) -> Self {
        self.close_timeout = t;
        self
    }

    /// Creates the consumer and the settle producer, subscribes, and starts
    /// the poll thread. Topics are not created (see [`Topics::create`]).
    pub fn connect(self) -> Result<KafkaSource, Error> {
        let mut cc = ClientConfig::new();
        cc.set("bootstrap.servers", &self.brokers)
            .set("group.id", &self.group_id);
        for (k, v) in CONSUMER_DEFAULTS {
            cc.set(*k, *v);
        }
        for (k, v) in &self.consumer {
            cc.set(k, v);
        }
        for (k, v) in CONSUMER_FIXED {
            cc.set(*k, *v);
        }
        let mut pc = ClientConfig::new();
        pc.set("bootstrap.servers", &self.brokers);
        for (k, v) in SETTLE_PRODUCER_DEFAULTS {
            pc.set(*k, *v);
        }
        for (k, v) in &self.producer {
            pc.set(k, v);
        }
        let producer: FutureProducer = pc
            .create()
            .map_err(|e| error::config("creating the settle producer", e))?;

        let shared = Arc::new(Shared::default());
        let context = Ctx {
            shared: Arc::clone(&shared),
            revoke_timeout: self.revoke_timeout,
        };
        let consumer: BaseConsumer<Ctx> = cc
            .create_with_context(context)
            .map_err(|e| error::config("creating the consumer", e))?;
        consumer
            .subscribe(&self.topics.subscribed())
            .map_err(|e| error::broker("subscribing", e))?;

        let topics = Arc::new(self.topics);
        let (tx, rx) = mpsc::unbounded_channel();
        let poller = Poller {
            consumer,
            shared: Arc::clone(&shared),
            tx,
            topics: Arc::clone(&topics),
            max_per_partition: self.max_per_partition,
            max_poll_stall: self.max_poll_stall,
            interned: Vec::new(),
        };
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let ended = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("consumer-kafka-poll".to_owned())
            .spawn(move || {
                // Returns once the consumer is closed (it has left the group).
                let result = poller.run();
                ended.closed.store(true, Ordering::SeqCst);
                let _ = done_tx.send(result);
            })
            .map_err(|e| error::config("starting the poll thread", e))?;
        tracing::info!(target: "consumer_kafka", %topics, group = %self.group_id, brokers = %self.brokers, "consuming");
        Ok(KafkaSource {
            rx,
            link: Arc::new(Link {
                shared,
                producer,
                topics,
            }),
            thread: Some(done),
            close_timeout: self.close_timeout,
        })
    }
}

/// A Kafka consumer-group member as a [`Source`].
///
/// ```no_run
/// use consumer_kafka::{KafkaSource, Topics};
///
/// # async fn demo() -> Result<(), consumer_core::Error> {
/// let topics = Topics::new("orders")?;
/// topics.create("127.0.0.1:9092", 6, 1).await?;
/// let source = KafkaSource::builder("127.0.0.1:9092", "billing", topics)
///     .with_property("session.timeout.ms", "10000")
///     .with_max_per_partition(128)
///     .connect()?;
/// # drop(source); Ok(())
/// # }
/// ```
pub struct KafkaSource {
    rx: mpsc::UnboundedReceiver<Delivery>,
    link: Arc<Link>,
    /// Reports the poll thread's end (and its result).
    thread: Option<tokio::sync::oneshot::Receiver<Result<(), Error>>>,
    close_timeout: Duration,
}

impl fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSource")
            .field("topics", &self.link.topics)
            .finish_non_exhaustive()
    }
}

impl KafkaSource {
    /// A builder with the safe defaults ([`CONSUMER_DEFAULTS`],
    /// [`SETTLE_PRODUCER_DEFAULTS`], 256 pending records per partition,
    /// 10 s revoke timeout).
    pub fn builder(
        brokers: impl Into<String>,
        group_id: impl Into<String>,
        topics: Topics,
    ) -> KafkaSourceBuilder {
        KafkaSourceBuilder {
            brokers: brokers.into(),
            group_id: group_id.into(),
            topics,
            consumer: Vec::new(),
            producer: Vec::new(),
            max_per_partition: 256,
            revoke_timeout: Duration::from_secs(10),
            max_poll_stall: Duration::from_secs(1),
            close_timeout: Duration::from_secs(10),
        }
    }

    /// Live counters and per-partition lag.
    pub fn metrics(&self) -> KafkaMetrics {
        KafkaMetrics {
            shared: Arc::clone(&self.link.shared),
        }
    }

    /// The topics this source works with.
    pub fn topics(&self) -> &Topics {
        &self.link.topics
    }

    /// Stops the poll thread and waits for it: the final commit and the
    /// group leave, bounded by the close timeout. Past it the thread is
    /// left to finish on its own (librdkafka gives a coordinator that does
    /// not answer up to `session.timeout.ms`); nothing waits for it.
    async fn stop_thread(&mut self) -> Result<(), Error> {
        self.link.shared.closing.store(true, Ordering::SeqCst);
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        match tokio::time::timeout(self.close_timeout, thread).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(Error::broker("the poll thread panicked", false, None)),
            Err(_) => {
                self.link
                    .shared
                    .close_timeouts
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    target: "consumer_kafka",
                    timeout = ?self.close_timeout,
                    "close timeout: the consumer could not leave its group in time (coordinator unreachable?); the group notices after session.timeout.ms"
                );
                Ok(())
            }
        }
    }
}

impl Source for KafkaSource {
    type Acker = KafkaAcker;

    fn system(&self) -> &'static str {
        "kafka"
    }

    async fn recv(&mut self) -> Result<Option<(Envelope, KafkaAcker)>, Error> {
        loop {
            let Some(d) = self.rx.recv().await else {
                // The poll thread ended: closed, or a fatal client error.
                return match self.stop_thread().await {
                    Ok(()) => Ok(None),
                    Err(e) => Err(e),
                };
            };
            let live = {
                let mut state = self.link.shared.lock();
                match state.partitions.get_mut(&d.tp) {
                    Some(p) if p.epoch == d.epoch && !p.revoking => {
                        p.taken += 1;
                        true
                    }
                    _ => false,
                }
            };
            if live {
                let acker = KafkaAcker {
                    link: Arc::clone(&self.link),
                    tp: d.tp,
                    offset: d.offset,
                    epoch: d.epoch,
                    settled: false,
                };
                return Ok(Some((d.envelope, acker)));
            }
            // Fetched before its partition was revoked: the next owner
            // reads it from the committed offset.
        }
    }

    async fn close(mut self) {
        if let Err(e) = self.stop_thread().await {
            tracing::warn!(target: "consumer_kafka", error = %e, "consumer closed with an error");
        }
    }
}

impl Drop for KafkaSource {
    fn drop(&mut self) {
        // Stops the poll thread if `close` was never called (it commits and
        // leaves the group on its own).
        self.link.shared.closing.store(true, Ordering::SeqCst);
    }
}

/// What the source, its ackers and the poll thread share.
struct Link {
    shared: Arc<Shared>,
    producer: FutureProducer,
    topics: Arc<Topics>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Tp {
    topic: Arc<str>,
    partition: i32,
}

/// Hashes [`Tp`]s for the partition map, which is looked up twice per
/// record (receipt and settle). Its keys are the consumer's own topics and
/// the partitions the group assigned, nothing a producer chooses, so it
/// needs no defence against aimed collisions (SipHash's cost): a
/// multiply-rotate over 8-byte words, as rustc's `FxHasher` does.
#[derive(Default)]
struct TpHasher(u64);

impl TpHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for TpHasher {
    fn finish(&self) -> u64 {
        // The multiply leaves the low bits weakest; the table indexes by them.
        self.0.rotate_left(26)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_i32(&mut self, n: i32) {
        self.add(u64::from(n.cast_unsigned()));
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

struct Delivery {
    envelope: Envelope,
    tp: Tp,
    offset: i64,
    epoch: u64,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when a record of a revoking partition settles.
    settled: Condvar,
    /// Signalled when a full partition is back to three quarters.
    room: Condvar,
    /// Something settled: positions may have moved, paused partitions may resume.
    dirty: AtomicBool,
    closing: AtomicBool,
    /// The consumer is closed: it has left its group.
    closed: AtomicBool,
    delivered: AtomicU64,
    assigns: AtomicU64,
    revokes: AtomicU64,
    revoke_timeouts: AtomicU64,
    lost: AtomicU64,
    commit_failures: AtomicU64,
    close_timeouts: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
struct State {
    partitions: HashMap<Tp, Partition, BuildHasherDefault<TpHasher>>,
    next_epoch: u64,
}

struct Partition {
    epoch: u64,
    /// Received and not settled (handed out, queued, or parked).
    pending: BTreeSet<i64>,
    /// The offset after the last record received.
    next: Option<i64>,
    /// The position last stored for commit.
    stored: Option<i64>,
    /// Held by the runtime (handed out by `recv`, not settled).
    taken: usize,
    released: u64,
    paused: bool,
    /// Reached `max_per_partition` records pending (not paused yet).
    full: bool,
    /// `pending` at or below which a full partition has room again.
    low_water: usize,
    parked: Option<Parked>,
    revoking: bool,
    high_watermark: Option<i64>,
    committed: Option<i64>,
}

struct Parked {
    delivery: Delivery,
    due: Instant,
}

impl Partition {
    fn new(epoch: u64) -> Self {
        Self {
            epoch,
            pending: BTreeSet::new(),
            next: None,
            stored: None,
            taken: 0,
            released: 0,
            paused: false,
            full: false,
            low_water: 0,
            parked: None,
            revoking: false,
            high_watermark: None,
            committed: None,
        }
    }

    /// The offset to commit: the lowest unfinished record, or the one after
    /// the last received.
    fn position(&self) -> Option<i64> {
        self.pending.first().copied().or(self.next)
    }
}

/// The consumer's context: rebalance callbacks (run on the poll thread),
/// statistics and librdkafka's logs.
struct Ctx {
    shared: Arc<Shared>,
    revoke_timeout: Duration,
}

impl ClientContext for Ctx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "consumer_kafka::librdkafka", facility = fac, "{message}");
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "consumer_kafka::librdkafka", facility = fac, "{message}");
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "consumer_kafka::librdkafka", facility = fac, "{message}");
            }
            RDKafkaLogLevel::Debug => {
                tracing::debug!(target: "consumer_kafka::librdkafka", facility = fac, "{message}");
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(target: "consumer_kafka", %error, reason, "client error (librdkafka retries by itself)");
    }

    fn stats(&self, statistics: Statistics) {
        let mut state = self.shared.lock();
        for (tp, p) in &mut state.partitions {
            if let Some(s) = statistics
                .topics
                .get(&*tp.topic)
                .and_then(|t| t.partitions.get(&tp.partition))
            {
                if s.hi_offset >= 0 {
                    p.high_watermark = Some(s.hi_offset);
                }
                if s.committed_offset >= 0 {
                    p.committed = Some(s.committed_offset);
                }
            }
        }
    }
}

impl ConsumerContext for Ctx {
    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        // Auto-commits only (librdkafka reports the others to their caller).
        if let Err(e) = &result {
            if matches!(
                e,
                KafkaError::ConsumerCommit(rdkafka::types::RDKafkaErrorCode::NoOffset)
            ) {
                // Nothing new to commit.
                return;
            }
            self.shared.commit_failures.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(target: "consumer_kafka", error = %e, offsets = offsets.count(), "auto-commit failed (the next one carries the same offsets)");
        }
    }

    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                self.shared.assigns.fetch_add(1, Ordering::Relaxed);
                let mut state = self.shared.lock();
                for e in tpl.elements() {
                    state.next_epoch += 1;
                    let tp = Tp {
                        topic: Arc::from(e.topic()),
                        partition: e.partition(),
                    };
                    let epoch = state.next_epoch;
                    state.partitions.insert(tp, Partition::new(epoch));
                }
                tracing::info!(target: "consumer_kafka", partitions = tpl.count(), "partitions assigned");
            }
            Rebalance::Revoke(tpl) => {
                self.shared.revokes.fetch_add(1, Ordering::Relaxed);
                self.revoke(consumer, tpl);
            }
            Rebalance::Error(e) => {
                tracing::warn!(target: "consumer_kafka", error = %e, "rebalance error");
            }
        }
    }
}

impl Ctx {
    fn revoke(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        let lost = consumer.assignment_lost();
        let targets: Vec<Tp> = tpl
            .elements()
            .iter()
            .map(|e| Tp {
                topic: Arc::from(e.topic()),
                partition: e.partition(),
            })
            .collect();
        let mut state = self.shared.lock();
        for tp in &targets {
            if let Some(p) = state.partitions.get_mut(tp) {
                p.revoking = true;
                p.parked = None;
            }
        }
        let deadline = Instant::now() + self.revoke_timeout;
        let held = |s: &State| {
            targets
                .iter()
                .filter_map(|tp| s.partitions.get(tp))
                .map(|p| p.taken)
                .sum::<usize>()
        };
        while !lost && held(&state) > 0 {
            let now = Instant::now();
            if now >= deadline {
                self.shared.revoke_timeouts.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    target: "consumer_kafka",
                    held = held(&state),
                    timeout = ?self.revoke_timeout,
                    "revoke timeout: giving up partitions with records still running; the next owner gets them again"
                );
                break;
            }
            state = self
                .shared
                .settled
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let mut commit = TopicPartitionList::new();
        for tp in &targets {
            if let Some(p) = state.partitions.remove(tp)
                && let Some(pos) = p.position()
                && p.stored.is_none_or(|s| s <= pos)
            {
                let _ = commit.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(pos));
            }
        }
        drop(state);
        if lost {
            self.shared.lost.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(target: "consumer_kafka", partitions = targets.len(), "assignment lost: not committing (another member may own the partitions)");
            return;
        }
        if self.shared.closing.load(Ordering::SeqCst) {
            // Leaving the group on close: the final commit already covered
            // these positions (or could not reach the coordinator, and a
            // second attempt would wait another `session.timeout.ms`).
            tracing::info!(target: "consumer_kafka", partitions = targets.len(), "partitions released on close");
            return;
        }
        if commit.count() > 0 {
            if let Err(e) = consumer.store_offsets(&commit) {
                tracing::debug!(target: "consumer_kafka", error = %e, "could not store final offsets");
            }
            if let Err(e) = consumer.commit(&commit, CommitMode::Sync) {
                self.shared.commit_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(target: "consumer_kafka", error = %e, "commit on revoke failed; the next owner may see finished records again (dedup skips them)");
            }
        }
        tracing::info!(target: "consumer_kafka", partitions = targets.len(), "partitions revoked");
    }
}

/// Owns the consumer; runs on its own thread.
struct Poller {
    consumer: BaseConsumer<Ctx>,
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<Delivery>,
    topics: Arc<Topics>,
    max_per_partition: usize,
    max_poll_stall: Duration,
    interned: Vec<Arc<str>>,
}

/// Positions are stored at most this often while records flow.
const STORE_EVERY: Duration = Duration::from_millis(5);

impl Poller {
    fn run(mut self) -> Result<(), Error> {
        let mut last_housekeeping = Instant::now();
        let mut waiting = false;
        let result = loop {
            if self.shared.closing.load(Ordering::SeqCst) || self.tx.is_closed() {
                break Ok(());
            }
            self.wait_for_room();
            let timeout = if waiting {
                Duration::from_millis(5)
            } else {
                Duration::from_millis(100)
            };
            let idle = match self.consumer.poll(timeout) {
                None => true,
                Some(Ok(record)) => {
                    let tp = Tp {
                        topic: intern(&mut self.interned, record.topic()),
                        partition: record.partition(),
                    };
                    self.take(tp, &record);
                    false
                }
                Some(Err(e)) => {
                    if let Some((code, reason)) = self.consumer.client().fatal_error() {
                        break Err(Error::broker(
                            format!("fatal Kafka client error {code}: {reason}"),
                            false,
                            None,
                        ));
                    }
                    tracing::warn!(target: "consumer_kafka", error = %e, "poll error (librdkafka retries by itself)");
                    true
                }
            };
            if idle
                || waiting
                || (self.shared.dirty.load(Ordering::Relaxed)
                    && last_housekeeping.elapsed() >= STORE_EVERY)
            {
                waiting = self.housekeeping();
                last_housekeeping = Instant::now();
            }
        };
        self.housekeeping();
        self.commit_all();
        // Dropping the consumer closes it: it leaves the group, running the
        // revoke callback, which commits again (nothing is held by then).
        result
    }

    /// Holds off polling while a partition is full (see the module docs),
    /// storing offsets meanwhile; pauses the partitions still full after
    /// the stall limit.
    fn wait_for_room(&self) {
        let mut started: Option<Instant> = None;
        loop {
            let mut pause = TopicPartitionList::new();
            {
                let mut state = self.shared.lock();
                let mut full = false;
                for (tp, p) in &mut state.partitions {
                    if !p.full {
                        continue;
                    }
                    if p.paused || p.revoking || p.pending.len() <= p.low_water {
                        p.full = false;
                    } else if started.is_some_and(|t| t.elapsed() >= self.max_poll_stall) {
                        p.full = false;
                        p.paused = true;
                        pause.add_partition(&tp.topic, tp.partition);
                    } else {
                        full = true;
                    }
                }
                if full && !self.shared.closing.load(Ordering::SeqCst) {
                    started.get_or_insert_with(Instant::now);
                    // Woken by the settle that makes room; the timeout
                    // bounds the wait for the stall check and offset stores.
                    drop(
                        self.shared
                            .room
                            .wait_timeout(state, Duration::from_millis(5))
                            .unwrap_or_else(PoisonError::into_inner),
                    );
                } else if pause.count() == 0 {
                    return;
                }
            }
            if pause.count() > 0 {
                tracing::debug!(target: "consumer_kafka", partitions = pause.count(), "partitions stayed full past the stall limit: pausing them");
                if let Err(e) = self.consumer.pause(&pause) {
                    tracing::warn!(target: "consumer_kafka", error = %e, "could not pause a partition");
                }
                return;
            }
            if self.shared.dirty.load(Ordering::Relaxed) {
                self.housekeeping();
            }
        }
    }

    /// Records one fetched record as pending and hands it out (or parks it).
    fn take(&self, tp: Tp, record: &rdkafka::message::BorrowedMessage<'_>) {
        let offset = record.offset();
        let envelope = headers::envelope_of(record, &tp.topic);
        let due = if self.topics.retry_topic() == Some(&*tp.topic) {
            due_in(&envelope)
        } else {
            None
        };
        let pause;
        {
            let mut state = self.shared.lock();
            let Some(p) = state.partitions.get_mut(&tp) else {
                return;
            };
            if p.revoking {
                return;
            }
            p.pending.insert(offset);
            p.next = Some(offset + 1);
            let delivery = Delivery {
                envelope,
                epoch: p.epoch,
                tp: tp.clone(),
                offset,
            };
            match due {
                Some(wait) if !wait.is_zero() => {
                    p.parked = Some(Parked {
                        delivery,
                        due: Instant::now() + wait,
                    });
                    pause = !p.paused;
                }
                _ => {
                    self.shared.delivered.fetch_add(1, Ordering::Relaxed);
                    let _ = self.tx.send(delivery);
                    pause = false;
                    if !p.paused && p.pending.len() >= self.max_per_partition {
                        p.full = true;
                        p.low_water = self.max_per_partition * 3 / 4;
                    }
                }
            }
            if pause {
                p.paused = true;
            }
        }
        if pause {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&tp.topic, tp.partition);
            if let Err(e) = self.consumer.pause(&tpl) {
                tracing::warn!(target: "consumer_kafka", error = %e, "could not pause a partition");
            }
        }
    }

    /// Stores moved positions, releases parked records that are due,
    /// resumes partitions with room again. Returns whether a partition is
    /// paused or parked (then the loop polls more often).
    fn housekeeping(&self) -> bool {
        self.shared.dirty.store(false, Ordering::Relaxed);
        let now = Instant::now();
        let mut store = TopicPartitionList::new();
        let mut resume = TopicPartitionList::new();
        let mut waiting = false;
        {
            let mut state = self.shared.lock();
            for (tp, p) in &mut state.partitions {
                if p.revoking {
                    continue;
                }
                if let Some(pos) = p.position()
                    && p.stored != Some(pos)
                {
                    let _ =
                        store.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(pos));
                    p.stored = Some(pos);
                }
                if p.parked.as_ref().is_some_and(|k| k.due <= now)
                    && let Some(parked) = p.parked.take()
                {
                    self.shared.delivered.fetch_add(1, Ordering::Relaxed);
                    let _ = self.tx.send(parked.delivery);
                }
                if p.paused && p.parked.is_none() && p.pending.len() <= self.max_per_partition / 2 {
                    p.paused = false;
                    resume.add_partition(&tp.topic, tp.partition);
                }
                waiting |= p.paused;
            }
        }
        if store.count() > 0
            && let Err(e) = self.consumer.store_offsets(&store)
        {
            tracing::debug!(target: "consumer_kafka", error = %e, "could not store offsets (partition no longer assigned?)");
        }
        if resume.count() > 0
            && let Err(e) = self.consumer.resume(&resume)
        {
            tracing::warn!(target: "consumer_kafka", error = %e, "could not resume partitions");
        }
        waiting
    }

    /// Commits every assigned partition's position synchronously (close).
    /// librdkafka holds a commit for up to `session.timeout.ms` while the
    /// coordinator is out of reach; `KafkaSource::close` stops waiting for
    /// this thread after the close timeout.
    fn commit_all(&self) {
        let mut tpl = TopicPartitionList::new();
        {
            let state = self.shared.lock();
            for (tp, p) in &state.partitions {
                if let Some(pos) = p.position() {
                    let _ = tpl.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(pos));
                }
            }
        }
        if tpl.count() > 0
            && let Err(e) = self.consumer.commit(&tpl, CommitMode::Sync)
        {
            self.shared.commit_failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(target: "consumer_kafka", error = %e, "final commit failed; finished records may be delivered again (dedup skips them)");
        }
    }
}

/// The shared name of `topic` (a consumer reads two or three topics).
fn intern(interned: &mut Vec<Arc<str>>, topic: &str) -> Arc<str> {
    if let Some(t) = interned.iter().find(|t| &***t == topic) {
        return Arc::clone(t);
    }
    let t: Arc<str> = Arc::from(topic);
    interned.push(Arc::clone(&t));
    t
}

/// How long until a retry copy is due; `None` without a (valid) due header.
fn due_in(envelope: &Envelope) -> Option<Duration> {
    let raw = envelope.headers.get(DUE).ok().flatten()?;
    let due = OffsetDateTime::parse(raw, &Rfc3339).ok()?;
    let wait = due - OffsetDateTime::now_utc();
    Some(wait.try_into().unwrap_or(Duration::ZERO))
}

/// Settles one Kafka record.
///
/// * `ack`: the record is done; its partition's position moves past it
///   once every earlier record is done too.
/// * `schedule_retry`: produces a copy (same id and key, attempt, first
///   failure and due time in headers) to the retry topic and waits for its
///   delivery report; the runtime acks afterwards.
/// * `dead_letter`: produces the dead letter (original key, payload and
///   headers plus the `x-dlq-*` context) to the dead-letter topic with
///   `acks=all` and waits for its delivery report.
/// * `release`, or dropped unsettled: the record stays pending, so the
///   committed offset stays below it and the partition's next owner (after
///   a restart or rebalance) receives it again.
pub struct KafkaAcker {
    link: Arc<Link>,
    tp: Tp,
    offset: i64,
    epoch: u64,
    settled: bool,
}

impl fmt::Debug for KafkaAcker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaAcker")
            .field("topic", &self.tp.topic)
            .field("partition", &self.tp.partition)
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

impl KafkaAcker {
    fn settle(&mut self, done: bool) {
        if self.settled {
            return;
        }
        self.settled = true;
        let shared = &self.link.shared;
        let mut state = shared.lock();
        if let Some(p) = state.partitions.get_mut(&self.tp)
            && p.epoch == self.epoch
        {
            p.taken = p.taken.saturating_sub(1);
            if done {
                p.pending.remove(&self.offset);
                if p.full && p.pending.len() == p.low_water {
                    shared.room.notify_one();
                }
            } else {
                p.released += 1;
            }
            if p.revoking {
                shared.settled.notify_all();
            }
        }
        drop(state);
        shared.dirty.store(true, Ordering::Relaxed);
    }

    async fn produce(&self, topic: &str, message: &Message) -> Result<(), Error> {
        let mut record = FutureRecord::<str, [u8]>::to(topic)
            .payload(&message.payload[..])
            .headers(to_kafka_headers(message));
        if let Some(key) = &message.key {
            record = record.key(key.as_str());
        }
        match self
            .link
            .producer
            .send(record, Timeout::After(Duration::from_secs(5)))
            .await
        {
            Ok(_) => Ok(()),
            Err((e, _)) => Err(error::broker(&format!("producing to {topic}"), e)),
        }
    }
}

impl Acker for KafkaAcker {
    async fn ack(mut self) -> Result<(), Error> {
        self.settle(true);
        Ok(())
    }

    async fn release(mut self) -> Result<(), Error> {
        self.settle(false);
        Ok(())
    }

    async fn dead_letter(&mut self, dead_letter: &DeadLetter) -> Result<DeadLettered, Error> {
        let topic = self.link.topics.dead_letter_topic().to_owned();
        self.produce(&topic, &dead_letter.to_message()).await?;
        Ok(DeadLettered::Published)
    }

    async fn schedule_retry(
        &mut self,
        envelope: &Envelope,
        retry: &Redelivery,
    ) -> Result<(), Error> {
        let Some(topic) = self.link.topics.retry_topic().map(str::to_owned) else {
            return Err(Error::Config(format!(
                "handler asks for retries through the broker, but {} has no retry topic",
                self.link.topics.topic()
            )));
        };
        let mut h = envelope.headers.clone();
        headers::pin_id(&mut h, envelope);
        h.insert(names::ATTEMPT, retry.attempt.to_string());
        h.insert(names::FIRST_FAILURE, format_time(retry.first_failure));
        h.insert(DUE, format_time(OffsetDateTime::now_utc() + retry.delay));
        let copy = Message {
            key: envelope.key.clone(),
            headers: h,
            payload: envelope.payload.clone(),
        };
        self.produce(&topic, &copy).await
    }
}

impl Drop for KafkaAcker {
    fn drop(&mut self) {
        self.settle(false);
    }
}

/// Counters and per-partition lag of one [`KafkaSource`].
#[derive(Clone)]
pub struct KafkaMetrics {
    shared: Arc<Shared>,
}

impl fmt::Debug for KafkaMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.snapshot(), f)
    }
}

/// One assigned partition.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionMetrics {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The offset stored for commit (lowest unfinished), if any record came.
    pub position: Option<i64>,
    /// The last committed offset librdkafka reported.
    pub committed: Option<i64>,
    /// The high watermark librdkafka reported (every `statistics.interval.ms`).
    pub high_watermark: Option<i64>,
    /// Records pending: received and not settled.
    pub pending: usize,
    /// Whether the partition is paused (full window, or a parked retry).
    pub paused: bool,
    /// Whether a retry copy waits for its due time.
    pub parked: bool,
}

impl PartitionMetrics {
    /// Records behind the high watermark: `high_watermark - position` (or
    /// the committed offset before any record came).
    pub fn lag(&self) -> Option<i64> {
        let hw = self.high_watermark?;
        let pos = self.position.or(self.committed)?;
        Some((hw - pos).max(0))
    }
}

/// A reading of [`KafkaMetrics`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KafkaMetricsSnapshot {
    /// Records handed to the runtime.
    pub delivered: u64,
    /// Assignments received (one per rebalance this member took part in).
    pub rebalances: u64,
    /// Revocations received.
    pub revocations: u64,
    /// Revokes that gave partitions up with records still running.
    pub revoke_timeouts: u64,
    /// Assignments lost (session timeout): nothing committed for them.
    pub lost_assignments: u64,
    /// Offset commits that failed or went unanswered (auto-commits, on
    /// revoke, on close).
    pub commit_failures: u64,
    /// Closes that returned before the consumer had left its group.
    pub close_timeouts: u64,
    /// The consumer has closed and left its group (after a close timeout,
    /// this turns true later, once librdkafka gives up or gets through).
    pub closed: bool,
    /// Records the runtime holds (handed out, not settled).
    pub in_flight: usize,
    /// Retry copies waiting for their due time.
    pub parked: usize,
    /// Records released unsettled (redelivered after a restart or rebalance).
    pub released: u64,
    /// Assigned partitions, sorted by topic and partition.
    pub partitions: Vec<PartitionMetrics>,
}

impl KafkaMetricsSnapshot {
    /// The sum of the partitions' lags.
    pub fn total_lag(&self) -> i64 {
        self.partitions
            .iter()
            .filter_map(PartitionMetrics::lag)
            .sum()
    }
}

impl KafkaMetrics {
    /// A consistent reading.
    pub fn snapshot(&self) -> KafkaMetricsSnapshot {
        let s = &self.shared;
        let state = s.lock();
        let mut partitions: Vec<PartitionMetrics> = state
            .partitions
            .iter()
            .map(|(tp, p)| PartitionMetrics {
                topic: tp.topic.to_string(),
                partition: tp.partition,
                position: p.position(),
                committed: p.committed,
                high_watermark: p.high_watermark,
                pending: p.pending.len(),
                paused: p.paused,
                parked: p.parked.is_some(),
            })
            .collect();
        partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        KafkaMetricsSnapshot {
            delivered: s.delivered.load(Ordering::Relaxed),
            rebalances: s.assigns.load(Ordering::Relaxed),
            revocations: s.revokes.load(Ordering::Relaxed),
            revoke_timeouts: s.revoke_timeouts.load(Ordering::Relaxed),
            lost_assignments: s.lost.load(Ordering::Relaxed),
            commit_failures: s.commit_failures.load(Ordering::Relaxed),
            close_timeouts: s.close_timeouts.load(Ordering::Relaxed),
            closed: s.closed.load(Ordering::SeqCst),
            in_flight: state.partitions.values().map(|p| p.taken).sum(),
            parked: state
                .partitions
                .values()
                .filter(|p| p.parked.is_some())
                .count(),
            released: state.partitions.values().map(|p| p.released).sum(),
            partitions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use consumer_core::{Headers, Origin};

    #[test]
    fn position_is_the_lowest_unfinished_record() {
        let mut p = Partition::new(1);
        assert_eq!(p.position(), None, "nothing received: nothing to commit");
        for o in [10, 11, 12, 15] {
            p.pending.insert(o);
            p.next = Some(o + 1);
        }
        assert_eq!(p.position(), Some(10));
        // Later records finish first: the position stays.
        p.pending.remove(&12);
        p.pending.remove(&15);
        assert_eq!(p.position(), Some(10));
        p.pending.remove(&10);
        assert_eq!(p.position(), Some(11));
        // Everything done: after the last record, across offset gaps.
        p.pending.remove(&11);
        assert_eq!(p.position(), Some(16));
    }

    fn envelope_with(headers: Headers) -> Envelope {
        Envelope::from_parts(
            bytes::Bytes::new(),
            headers,
            None,
            Origin::default(),
            || "id".to_owned(),
        )
    }

    #[test]
    fn due_time_is_read_from_the_retry_copy() {
        let mut h = Headers::new();
        h.insert(
            DUE,
            format_time(OffsetDateTime::now_utc() + Duration::from_secs(60)),
        );
        let wait = due_in(&envelope_with(h)).expect("a due time");
        assert!(wait > Duration::from_secs(50) && wait <= Duration::from_secs(60));

        let mut past = Headers::new();
        past.insert(DUE, "2020-01-01T00:00:00Z");
        assert_eq!(due_in(&envelope_with(past)), Some(Duration::ZERO));

        let mut bad = Headers::new();
        bad.insert(DUE, "tomorrow");
        assert_eq!(
            due_in(&envelope_with(bad)),
            None,
            "an unreadable due time delivers now"
        );
        assert_eq!(due_in(&envelope_with(Headers::new())), None);
    }
}
