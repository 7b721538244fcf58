//! The poll thread: takes records, holds off or pauses full partitions,
//! parks retry copies until due, stores positions.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use consumer_backend::due_in;
use consumer_backend::observe::{Commit, Happened};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message as _;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use tokio::sync::mpsc;

use super::ledger::{Ledger, Parked, Tp};
use super::rebalance::Ctx;
use super::{Delivery, due};
use crate::error::Error;
use crate::headers;
use crate::topics::Topics;

/// Owns the consumer; runs on its own thread.
pub(super) struct Poller {
    consumer: BaseConsumer<Ctx>,
    shared: Arc<Ledger>,
    tx: mpsc::UnboundedSender<Vec<Delivery>>,
    topics: Arc<Topics>,
    max_per_partition: usize,
    max_poll_stall: Duration,
    interned: Vec<Arc<str>>,
    /// The largest body whose attributes are read, as the source was told
    /// (`Source::limit_body`); read at each record.
    max_body: Arc<AtomicUsize>,
    /// The group and derived static id of a member that leaves on close.
    leave: Option<(String, String)>,
}

/// Most records one poll round hands to the runtime at once.
const BATCH: usize = 64;

/// Positions are stored at most this often while records flow.
const STORE_EVERY: Duration = Duration::from_millis(5);

impl Poller {
    pub(super) fn new(
        consumer: BaseConsumer<Ctx>,
        shared: Arc<Ledger>,
        tx: mpsc::UnboundedSender<Vec<Delivery>>,
        topics: Arc<Topics>,
        max_per_partition: usize,
        max_poll_stall: Duration,
        max_body: Arc<AtomicUsize>,
    ) -> Self {
        Self {
            consumer,
            shared,
            tx,
            topics,
            max_per_partition,
            max_poll_stall,
            interned: Vec::new(),
            max_body,
            leave: None,
        }
    }

    /// Leaves `group` on close as the derived static member `id` (see
    /// `leave.rs`), when there is one.
    pub(super) fn leaving_on_close(mut self, leave: Option<(String, String)>) -> Self {
        self.leave = leave;
        self
    }

    pub(super) fn run(mut self) -> Result<(), Error> {
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
            let idle = match self.take_batch(timeout) {
                Ok(taken) => taken == 0,
                Err(e) => break Err(e),
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
        if let (Ok(()), Some((group, id))) = (&result, &self.leave) {
            super::leave::leave_group(&self.consumer, group, id);
        }
        // Dropping the consumer closes it: it leaves the group (unless
        // static), running the revoke callback, which commits again
        // (nothing is held by then).
        result
    }

    /// Holds off polling while a partition is full (see the module docs),
    /// storing offsets meanwhile; pauses the partitions still full after
    /// the stall limit.
    fn wait_for_room(&self) {
        let mut started: Option<Instant> = None;
        loop {
            // Built only when a partition is to be paused: a list is a
            // librdkafka allocation, and this runs before every poll.
            let mut pause: Option<TopicPartitionList> = None;
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
                        pause
                            .get_or_insert_with(TopicPartitionList::new)
                            .add_partition(&tp.topic, tp.partition);
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
                } else if pause.is_none() {
                    return;
                }
            }
            if let Some(pause) = pause {
                tracing::debug!(target: "consumer::kafka", partitions = pause.count(), "partitions stayed full past the stall limit: pausing them");
                if let Err(e) = self.consumer.pause(&pause) {
                    tracing::warn!(target: "consumer::kafka", error = %e, "could not pause a partition");
                }
                return;
            }
            if self.shared.dirty.load(Ordering::Relaxed) {
                self.housekeeping();
            }
        }
    }

    /// Polls up to [`BATCH`] records: the first within `timeout`, the rest
    /// only while librdkafka has them queued already, and hands them to the
    /// source in one send, so the runtime is woken once per batch rather
    /// than once per record. Stops early when a partition fills up (the
    /// next [`wait_for_room`](Self::wait_for_room) holds off) or on an
    /// error. Returns how many records it took.
    fn take_batch(&mut self, timeout: Duration) -> Result<usize, Error> {
        let mut batch = Vec::new();
        let mut polled = 0;
        let mut wait = timeout;
        while polled < BATCH {
            match self.consumer.poll(wait) {
                None => break,
                Some(Ok(record)) => {
                    if polled == 0 {
                        // Not on an idle poll: records come in runs.
                        batch = self.shared.batch(BATCH);
                    }
                    polled += 1;
                    wait = Duration::ZERO;
                    let tp = Tp {
                        topic: intern(&mut self.interned, record.topic()),
                        partition: record.partition(),
                    };
                    if self.take(tp, &record, &mut batch) {
                        break;
                    }
                }
                Some(Err(e)) => {
                    self.hand_out(batch);
                    if let Some((code, reason)) = self.consumer.client().fatal_error() {
                        return Err(Error::Fatal { code, reason });
                    }
                    tracing::warn!(target: "consumer::kafka", error = %e, "poll error (librdkafka retries by itself)");
                    return Ok(0);
                }
            }
        }
        self.hand_out(batch);
        Ok(polled)
    }

    /// Sends `batch` to the source, counted as delivered; nothing for an
    /// empty one.
    fn hand_out(&self, batch: Vec<Delivery>) {
        if !batch.is_empty() {
            self.shared.observer.emit(Happened::Received {
                count: batch.len() as u64,
                redelivered: false,
            });
            let _ = self.tx.send(batch);
        }
    }

    /// Records one fetched record as pending and adds it to `batch` (or
    /// parks it). Returns whether its partition is now full or paused, so
    /// no more should be taken before the runtime makes room.
    fn take(
        &self,
        tp: Tp,
        record: &rdkafka::message::BorrowedMessage<'_>,
        batch: &mut Vec<Delivery>,
    ) -> bool {
        let offset = record.offset();
        let produced_ms = record
            .timestamp()
            .to_millis()
            .filter(|ms| *ms > 0)
            .unwrap_or_else(now_ms);
        let max_body = self.max_body.load(Ordering::Relaxed);
        let envelope = Arc::new(headers::envelope_of(
            record,
            Arc::clone(&tp.topic).into(),
            max_body,
        ));
        let due = if self.topics.retry_topic() == Some(&*tp.topic) {
            due_in(&envelope.headers)
                .map(|said| self.bounded(said, produced_ms, &envelope, &tp, offset))
        } else {
            None
        };
        let (pause, full);
        {
            let mut state = self.shared.lock();
            let Some(p) = state.partitions.get_mut(&tp) else {
                return false;
            };
            if p.revoking {
                return false;
            }
            p.pending.insert(offset, produced_ms);
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
                    batch.push(delivery);
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
            full = p.full || p.paused;
        }
        if pause {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&tp.topic, tp.partition);
            if let Err(e) = self.consumer.pause(&tpl) {
                tracing::warn!(target: "consumer::kafka", error = %e, "could not pause a partition");
            }
        }
        full
    }

    /// How long a retry record whose header says `said` waits: never
    /// longer than the handlers' longest delay after it was written (see
    /// [`due`](super::due)), with a warning when the header said more.
    fn bounded(
        &self,
        said: Duration,
        written_ms: i64,
        envelope: &consumer_backend::Envelope,
        tp: &Tp,
        offset: i64,
    ) -> Duration {
        let longest =
            Duration::from_millis(self.shared.longest_retry_delay_ms.load(Ordering::Relaxed));
        let wait = due::wait(said, written_ms, now_ms(), longest);
        if let due::Wait::Bounded { said, wait } = wait {
            tracing::warn!(
                target: "consumer::kafka",
                topic = %tp.topic,
                partition = tp.partition,
                offset,
                message_id = %envelope.id,
                ?said,
                ?wait,
                ?longest,
                "a retry record is due later than the longest retry delay after it was written; taking it as due then"
            );
        }
        wait.duration()
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
                    self.shared.observer.emit(Happened::Received {
                        count: 1,
                        redelivered: false,
                    });
                    let _ = self.tx.send(vec![parked.delivery]);
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
            tracing::debug!(target: "consumer::kafka", error = %e, "could not store offsets (partition no longer assigned?)");
        }
        if resume.count() > 0
            && let Err(e) = self.consumer.resume(&resume)
        {
            tracing::warn!(target: "consumer::kafka", error = %e, "could not resume partitions");
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
            self.shared.observer.emit(Happened::CommitFailed {
                commit: Commit::Close,
                error: &e,
            });
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

/// Now, in Unix milliseconds.
pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
