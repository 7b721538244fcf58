//! Consuming an SQS queue ([`SqsSource`]), settling each delivery
//! ([`SqsAcker`]), and the counters of both ([`SqsStats`]).

mod acker;
mod calls;
mod gauges;
mod ledger;
mod stats;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use consumer_backend::{
    Channel, Envelope, Message, Origin, RetryMode, RetryPolicy, Source, SourceChannels,
    SourceGauges, names,
};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

pub use acker::{SqsAcker, VISIBILITY_CAP};
pub use stats::{SqsStats, SqsStatsSnapshot};

use crate::attributes;
use crate::client::{ApiError, ReceiveRequest, ReceivedMessage, SendEntry, SqsApi};
use crate::connection::SqsClient;
use crate::error::{Error, Result};
use crate::topology::{Resolved, Topology};
use calls::{Calls, Op};
use consumer_backend::observe::{Happened, Release, SourceObserver};
use ledger::{Entry, Ledger};

/// How long a delete call waits for more acks to fill its batch.
const DELETE_LINGER: Duration = Duration::from_millis(5);

/// The most messages this source holds received and unsettled, by default.
pub const DEFAULT_MAX_UNSETTLED: usize = 100;

/// Consumes one SQS queue (FIFO or standard).
///
/// * **Receiving**: `ReceiveMessage` with long polling (20 s by default),
///   ten messages a call, every system attribute
///   (`ApproximateReceiveCount`, `MessageGroupId`, `SentTimestamp`, ...)
///   and every message attribute. A receive that fails and is tried again
///   sends the same `ReceiveRequestAttemptId` (FIFO queues), so SQS returns
///   the messages the lost answer held instead of hiding them until their
///   visibility ends. The source holds at most
///   [`with_max_unsettled`](SqsSourceBuilder::with_max_unsettled) messages
///   received and unsettled (default 100; SQS stops returning messages of
///   a FIFO queue at 20 000 in flight, of a standard one at 120 000, across
///   all consumers).
/// * **Order**: on a FIFO queue the partition key is the `MessageGroupId`
///   (or the `ce_partitionkey` attribute, when the key had to be hashed into
///   a group id), so the runtime's per-key lanes run a group in order and
///   groups in parallel, within the runtime's in-flight bound. A standard
///   queue promises no order at all: SQS may deliver in any order and more
///   than once; dedup still makes each message run once.
/// * **Visibility**: messages are received invisible for
///   [`with_visibility_timeout`](SqsSourceBuilder::with_visibility_timeout)
///   (default 30 s), and a task extends every message held (waiting in the
///   source, queued in a lane, running, or waiting for an in-place retry)
///   before its visibility ends, up to SQS's cap of 12 h from its receive.
/// * **Attempts**: a delivery's attempt number is the `x-consumer-attempt`
///   attribute (1 without one) plus the receives before this one
///   (`ApproximateReceiveCount` - 1), less the times this source released
///   the message itself. A crash counts as an attempt, as does a release
///   by another process (its shutdown); the store's failure count, which
///   the runtime also reads, is exact.
/// * **Retries** in mode `in_place` hold the message (invisible, extended)
///   while its lane waits; in mode `redeliver` they are served by
///   visibility: the message's visibility becomes the retry's delay and it
///   stays on the queue, and on a FIFO queue its group stays blocked behind
///   it, so the group's order holds. See [`SqsAcker`].
/// * **Message id**: `ce_id`; else SQS's `MessageId`, the same on every
///   receive of the message (a message moved by a redrive gets a new one).
pub struct SqsSource {
    shared: Arc<Shared>,
    pending: Option<JoinHandle<std::result::Result<Vec<ReceivedMessage>, ApiError>>>,
    attempt_id: Option<String>,
    heartbeat: JoinHandle<()>,
    depth_interval: Duration,
    channel: Channel,
    /// The largest body whose attributes are read ([`Source::limit_body`]).
    max_body: usize,
}

impl std::fmt::Debug for SqsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsSource")
            .field("queue", &self.shared.queues.queue.name())
            .field("fifo", &self.shared.queues.fifo)
            .finish_non_exhaustive()
    }
}

/// What a source shares with its ackers and tasks.
pub(crate) struct Shared {
    api: Arc<dyn SqsApi>,
    pub(crate) queues: Resolved,
    ledger: Mutex<Ledger>,
    changed: Notify,
    observer: SourceObserver,
    deletes: Calls,
    releases: Calls,
    visibility: Duration,
    wait: Duration,
    max_unsettled: usize,
    max_letter_bytes: usize,
}

impl Shared {
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn counts(&self, ledger: &Ledger) {
        self.observer.emit(Happened::Holding {
            in_flight: ledger.len() as u64,
            waiting: ledger.waiting() as u64,
        });
    }

    /// The delivery is settled: it leaves the ledger.
    fn leave(&self, token: u64) {
        let mut l = self.ledger();
        l.remove(token);
        self.counts(&l);
        drop(l);
        self.changed.notify_one();
    }

    /// Remembers that this source gives the delivery back.
    fn count_release(&self, token: u64) {
        let mut l = self.ledger();
        let id = l.message_id(token);
        if let Some(id) = id {
            l.count_release(&id);
        }
    }

    /// The delivery was retried by visibility: it leaves, and its group's
    /// waiting messages are given back without running.
    async fn park(&self, token: u64) {
        let siblings = {
            let mut l = self.ledger();
            let s = l.park(token);
            self.counts(&l);
            s
        };
        self.changed.notify_one();
        if siblings.is_empty() {
            return;
        }
        self.observer.emit(Happened::Released {
            count: siblings.len() as u64,
            why: Release::GroupRetried,
        });
        let calls: Vec<_> = siblings
            .into_iter()
            .map(|r| self.releases.call(r, Op::Visibility(0)))
            .collect();
        for c in calls {
            if let Err(e) = c.await {
                self.observer.emit(Happened::ReleaseFailed {
                    why: Release::GroupRetried,
                    error: &e,
                });
            }
        }
    }

    /// Sends a dead letter to the dead-letter queue, in `group` on a FIFO
    /// queue.
    async fn send_letter(&self, letter: &Message, group: Option<&str>) -> Result<()> {
        let packed = attributes::pack(&letter.headers, &letter.payload);
        let q = &self.queues;
        let size = packed.size();
        if size > self.max_letter_bytes {
            return Err(Error::TooLarge {
                size,
                limit: self.max_letter_bytes,
                queue: q.dead_letter.to_string(),
            });
        }
        let (group_id, dedup) = if q.dead_letter.is_fifo() {
            let id = letter
                .headers
                .get(names::ID)
                .ok()
                .flatten()
                .unwrap_or_default()
                .to_owned();
            let group = crate::names::group_id(group.unwrap_or(&id)).into_owned();
            let mut digest_input = packed.body.as_bytes().to_vec();
            for (n, v) in &packed.attributes {
                digest_input.extend_from_slice(n.as_bytes());
                digest_input.extend_from_slice(v.bytes());
            }
            (Some(group), Some(crate::names::sha256_hex(&digest_input)))
        } else {
            (None, None)
        };
        let entry = SendEntry {
            id: "0".to_owned(),
            body: packed.body,
            attributes: packed.attributes,
            group_id,
            deduplication_id: dedup,
        };
        let outcome = self
            .api
            .send_batch(&q.dead_letter_url, vec![entry])
            .await
            .map_err(Error::sqs("SendMessageBatch", q.dead_letter.name()))?;
        if let Some(failure) = outcome.failed.into_iter().next() {
            return Err(Error::Entry {
                operation: "SendMessageBatch",
                queue: q.dead_letter.to_string(),
                failure,
            });
        }
        self.observer.emit(Happened::DeadLettered);
        Ok(())
    }
}

/// Builds an [`SqsSource`]: [`SqsSource::builder`], then
/// [`connect`](Self::connect).
#[derive(Debug)]
#[must_use]
pub struct SqsSourceBuilder {
    client: SqsClient,
    topology: Topology,
    visibility: Duration,
    wait: Duration,
    max_unsettled: usize,
    max_letter_bytes: Option<usize>,
    depth_interval: Duration,
}

impl SqsSourceBuilder {
    /// How long a received message stays invisible before the source
    /// extends it (default 30 s; at least 2 s). A message held longer is
    /// extended by this much each time, up to 12 h from its receive; a
    /// process that dies leaves its messages invisible this long.
    pub fn with_visibility_timeout(mut self, t: Duration) -> Self {
        self.visibility = t.clamp(Duration::from_secs(2), VISIBILITY_CAP);
        self
    }

    /// How long a receive waits for messages (long polling; default 20 s,
    /// SQS's most; 0 polls).
    pub fn with_wait_time(mut self, t: Duration) -> Self {
        self.wait = t.min(Duration::from_secs(20));
        self
    }

    /// The most messages held received and unsettled (default
    /// [`DEFAULT_MAX_UNSETTLED`], at least 10).
    pub fn with_max_unsettled(mut self, n: usize) -> Self {
        self.max_unsettled = n.max(10);
        self
    }

    /// The largest dead letter sent, body and attributes counted as SQS
    /// counts them (default: the dead-letter queue's `MaximumMessageSize`).
    /// A larger one is refused as too large, and the runtime sends it
    /// without its payload and keeps it whole in the store's table.
    pub fn with_max_message_bytes(mut self, n: usize) -> Self {
        self.max_letter_bytes = Some(n);
        self
    }

    /// How often the queue counts behind the metrics are read (default
    /// 15 s).
    pub fn with_depth_interval(mut self, every: Duration) -> Self {
        self.depth_interval = every.max(Duration::from_millis(10));
        self
    }

    /// Finds (or creates) the queues, checks them, and starts the
    /// visibility task; no message is received before the first `recv`.
    pub async fn connect(self) -> Result<SqsSource> {
        let api = self.client.api();
        let queues = self.topology.resolve(&*api).await?;
        let observer = SqsStats::default().observer;
        let deletes = Calls::start(
            Arc::clone(&api),
            queues.queue_url.clone(),
            queues.queue.to_string(),
            DELETE_LINGER,
            observer.clone(),
        );
        let releases = Calls::start(
            Arc::clone(&api),
            queues.queue_url.clone(),
            queues.queue.to_string(),
            Duration::ZERO,
            observer.clone(),
        );
        let shared = Arc::new(Shared {
            max_letter_bytes: self
                .max_letter_bytes
                .unwrap_or(queues.dead_letter_max_bytes),
            api,
            ledger: Mutex::default(),
            changed: Notify::new(),
            observer,
            deletes,
            releases,
            visibility: self.visibility,
            wait: self.wait,
            max_unsettled: self.max_unsettled,
            queues,
        });
        let heartbeat = tokio::spawn(heartbeat(Arc::downgrade(&shared)));
        tracing::info!(
            target: "consumer::sqs",
            queue = %shared.queues.queue,
            fifo = shared.queues.fifo,
            dead_letter_queue = %shared.queues.dead_letter,
            max_receive_count = shared.queues.max_receive_count,
            "consuming"
        );
        Ok(SqsSource {
            max_body: usize::MAX,
            channel: Channel::from(shared.queues.queue.name()),
            shared,
            pending: None,
            attempt_id: None,
            heartbeat,
            depth_interval: self.depth_interval,
        })
    }
}

/// Extends the visibility of every message held, a third of the timeout
/// before it ends. A call that fails is tried again after
/// [`EXTENSION_RETRY`] rather than a whole tick later, so that one lost
/// call leaves most of the remaining third to the next.
async fn heartbeat(shared: std::sync::Weak<Shared>) {
    loop {
        let Some(s) = shared.upgrade() else { return };
        let every = s.visibility / 3;
        let mut failed = false;
        let due = s.ledger().due_for_extension(
            Instant::now(),
            s.visibility * 2 / 3,
            s.visibility,
            VISIBILITY_CAP,
        );
        for chunk in due.chunks(10) {
            let entries: Vec<crate::client::VisibilityEntry> = chunk
                .iter()
                .enumerate()
                .map(
                    |(i, (_, receipt, seconds))| crate::client::VisibilityEntry {
                        id: i.to_string(),
                        receipt_handle: receipt.clone(),
                        seconds: *seconds,
                    },
                )
                .collect();
            let n = entries.len() as u64;
            match s
                .api
                .change_visibility_batch(&s.queues.queue_url, entries)
                .await
            {
                Ok(o) => {
                    let failed = o.failed.len() as u64;
                    s.observer.emit(Happened::Extended { count: n - failed });
                    for f in o.failed {
                        s.observer.emit(Happened::ExtensionRefused {
                            code: &f.code,
                            message: &f.message,
                        });
                    }
                }
                Err(e) => {
                    failed = true;
                    s.observer.emit(Happened::ExtensionsFailed {
                        count: n,
                        error: &e,
                    });
                    // Let the next tick try these again.
                    let mut l = s.ledger();
                    for (token, _, _) in chunk {
                        l.expire_now(*token);
                    }
                }
            }
        }
        drop(s);
        tokio::time::sleep(if failed {
            every.min(EXTENSION_RETRY)
        } else {
            every
        })
        .await;
    }
}

/// How soon a failed visibility extension is tried again.
const EXTENSION_RETRY: Duration = Duration::from_millis(250);

impl SqsSource {
    /// A source reading `topology`'s queue through `client`.
    pub fn builder(client: SqsClient, topology: Topology) -> SqsSourceBuilder {
        SqsSourceBuilder {
            client,
            topology,
            visibility: Duration::from_secs(30),
            wait: Duration::from_secs(20),
            max_unsettled: DEFAULT_MAX_UNSETTLED,
            max_letter_bytes: None,
            depth_interval: Duration::from_secs(15),
        }
    }

    /// Counters; clone it before handing the source to the consumer.
    pub fn stats(&self) -> SqsStats {
        SqsStats {
            observer: self.shared.observer.clone(),
        }
    }

    /// The queue read.
    pub fn queue(&self) -> &str {
        self.shared.queues.queue.name()
    }

    /// The dead-letter queue letters go to.
    pub fn dead_letter_queue(&self) -> &str {
        self.shared.queues.dead_letter.name()
    }

    /// The queue's redrive `maxReceiveCount`.
    pub fn max_receive_count(&self) -> u32 {
        self.shared.queues.max_receive_count
    }

    fn start_receive(&mut self, max: usize) {
        let s = Arc::clone(&self.shared);
        let attempt_id = if s.queues.fifo {
            Some(
                self.attempt_id
                    .get_or_insert_with(|| uuid::Uuid::new_v4().simple().to_string())
                    .clone(),
            )
        } else {
            None
        };
        let max = i32::try_from(max.min(10)).unwrap_or(10);
        self.pending = Some(tokio::spawn(async move {
            s.api
                .receive(ReceiveRequest {
                    queue_url: &s.queues.queue_url,
                    max,
                    wait_seconds: i32::try_from(s.wait.as_secs()).unwrap_or(20),
                    visibility_seconds: ledger::secs(s.visibility),
                    attempt_id: attempt_id.as_deref(),
                })
                .await
        }));
    }

    /// Turns received messages into waiting entries.
    fn admit(&mut self, messages: Vec<ReceivedMessage>) {
        let now = Instant::now();
        let s = &self.shared;
        let mut l = s.ledger();
        for m in messages {
            let rc = m.receive_count();
            s.observer.emit(Happened::Received {
                count: 1,
                redelivered: rc > 1,
            });
            let attributes::Unpacked {
                headers,
                payload,
                defects,
            } = attributes::unpack(&m.body, &m.attributes);
            let group_id = m.group_id().map(str::to_owned);
            let key = headers
                .get(names::PARTITION_KEY)
                .ok()
                .flatten()
                .map(str::to_owned)
                .or_else(|| group_id.clone());
            let origin = Origin {
                channel: self.channel.clone(),
                position: m.message_id.clone().into(),
                ..Origin::default()
            };
            let message_id = m.message_id.clone();
            let mut envelope = Envelope::from_parts_within(
                self.max_body,
                payload,
                headers,
                key.clone(),
                origin,
                || message_id.clone(),
            );
            envelope.defects.extend(defects);
            let earlier = rc
                .saturating_sub(1)
                .saturating_sub(l.releases_of(&m.message_id));
            envelope.attempt = envelope.attempt.saturating_add(earlier);
            l.add(Entry {
                receipt: m.receipt_handle,
                message_id: m.message_id,
                group: group_id.clone().or(key),
                group_id,
                received: now,
                visible_until: now + s.visibility,
                envelope: Some(Arc::new(envelope)),
            });
        }
        s.counts(&l);
    }
}

impl Source for SqsSource {
    type Acker = SqsAcker;

    fn limit_body(&mut self, max_bytes: usize) {
        self.max_body = max_bytes;
    }

    fn system(&self) -> &'static str {
        "aws_sqs"
    }

    fn gauges(&self) -> Option<Arc<dyn SourceGauges>> {
        Some(gauges::SqsGauges::start(
            Arc::clone(&self.shared.api),
            self.shared.queues.clone(),
            self.depth_interval,
        ))
    }

    fn channels(&self) -> Option<SourceChannels> {
        Some(crate::asyncapi::source_channels(&self.shared.queues))
    }

    fn check_redelivery(&self, longest_delay: Duration) -> std::result::Result<(), String> {
        if longest_delay > VISIBILITY_CAP {
            return Err(format!(
                "retries may wait up to {longest_delay:?}, but SQS keeps a message invisible at most 12 h from its receive: lower the handler's max_delay to 12 h or less"
            ));
        }
        Ok(())
    }

    fn accept_retry_policy(&mut self, policy: &RetryPolicy) -> std::result::Result<(), String> {
        let q = &self.shared.queues;
        let attempts = policy.max_attempts();
        let receives = q.max_receive_count;
        if policy.mode() == RetryMode::Redeliver && attempts > 1 {
            self.check_redelivery(policy.longest_delay())?;
            // Each attempt is a receive; on a FIFO queue each retry of an
            // earlier message of the group also gives up to nine held
            // messages back (a receive each): 10 x attempts leaves room.
            let needed = if q.fifo {
                attempts.saturating_mul(10)
            } else {
                attempts.saturating_add(1)
            };
            if receives < needed {
                return Err(format!(
                    "the redrive policy of `{}` moves a message to `{}` after {receives} receives, but in mode redeliver each of up to {attempts} attempts is a receive (and on a FIFO queue each retry of an earlier message of its group gives it back once more): raise maxReceiveCount to at least {needed} (Topology::with_max_receive_count for a queue this source creates), or retry in place",
                    q.queue, q.dead_letter
                ));
            }
            self.shared.ledger().gate = q.fifo;
        } else if receives <= attempts {
            return Err(format!(
                "the redrive policy of `{}` moves a message to `{}` after {receives} receives, not above the handler's {attempts} attempts: raise maxReceiveCount above {attempts}, so that the framework dead-letters with context first",
                q.queue, q.dead_letter
            ));
        }
        Ok(())
    }

    async fn recv(
        &mut self,
    ) -> std::result::Result<Option<(Arc<Envelope>, SqsAcker)>, consumer_backend::Error> {
        loop {
            let ready = {
                let mut l = self.shared.ledger();
                let r = l.take_ready();
                self.shared.counts(&l);
                r.map(|t| (t, l.len()))
            };
            if let Some(((token, envelope, receipt, group_id, received), _)) = ready {
                let acker = SqsAcker {
                    shared: Arc::clone(&self.shared),
                    token,
                    receipt,
                    group_id,
                    key: envelope.key.clone(),
                    received,
                    settled: false,
                    parked: false,
                };
                return Ok(Some((envelope, acker)));
            }
            let room = self
                .shared
                .max_unsettled
                .saturating_sub(self.shared.ledger().len());
            if self.pending.is_none() && room > 0 {
                self.start_receive(room);
            }
            let shared = Arc::clone(&self.shared);
            let changed = shared.changed.notified();
            tokio::pin!(changed);
            match self.pending.as_mut() {
                Some(pending) => {
                    tokio::select! {
                        r = pending => {
                            self.pending = None;
                            match r {
                                Ok(Ok(messages)) => {
                                    self.attempt_id = None;
                                    self.admit(messages);
                                }
                                Ok(Err(e)) => {
                                    let e = Error::sqs("ReceiveMessage", self.shared.queues.queue.name())(e);
                                    self.shared.observer.emit(Happened::ReceiveFailed {
                                        at: self.shared.queues.queue.name(),
                                        operation: "ReceiveMessage",
                                        error: &e,
                                        throttled: false,
                                        retry_in: None,
                                    });
                                    if !e.is_retriable() {
                                        self.attempt_id = None;
                                    }
                                    return Err(e.into());
                                }
                                Err(join) => {
                                    return Err(consumer_backend::Error::broker(
                                        consumer_backend::BrokerErrorKind::Unavailable,
                                        format!("the SQS receive task of `{}` ended: {join}", self.shared.queues.queue),
                                        None,
                                    ));
                                }
                            }
                        }
                        () = &mut changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }

    async fn close(mut self) {
        self.heartbeat.abort();
        if let Some(pending) = self.pending.take() {
            // What a receive in flight takes comes back when its visibility
            // ends; one that already returned is given back now.
            if pending.is_finished() {
                if let Ok(Ok(messages)) = pending.await {
                    self.admit(messages);
                }
            } else {
                pending.abort();
            }
        }
        let waiting = self.shared.ledger().drain_waiting();
        self.shared.observer.emit(Happened::Released {
            count: waiting.len() as u64,
            why: Release::Closing,
        });
        let calls: Vec<_> = waiting
            .into_iter()
            .map(|r| self.shared.releases.call(r, Op::Visibility(0)))
            .collect();
        for c in calls {
            if let Err(e) = c.await {
                self.shared.observer.emit(Happened::ReleaseFailed {
                    why: Release::Closing,
                    error: &e,
                });
            }
        }
        self.shared.deletes.flush().await;
        let l = self.shared.ledger();
        self.shared.counts(&l);
    }
}
