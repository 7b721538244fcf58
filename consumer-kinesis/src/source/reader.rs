//! The reader of one held shard: `GetRecords` in a loop, within the
//! per-shard call limit, each record entered in the shard's ledger and
//! handed to the runtime.
//!
//! * **Pacing**: Kinesis allows five `GetRecords` calls a second per
//!   shard, shared by every reader of it. After a call that found the
//!   reader behind (`MillisBehindLatest` above zero) the next one follows
//!   after [`MIN_CALL_INTERVAL`]; caught up, after the poll interval.
//! * **Throttling** (`ProvisionedThroughputExceededException`) and other
//!   failures that heal back the reader off (full jitter, growing up to
//!   [`MAX_BACKOFF`]); one that does not heal (the stream deleted, rights
//!   missing) goes to the runtime through `recv`, and the reader stops.
//! * **Iterators** last five minutes: one older than [`ITERATOR_REFRESH`]
//!   (a reader held back by a full ledger) is obtained again before use,
//!   and an expired one (`ExpiredIteratorException`) too, after the last
//!   record read (or from the session's start).
//! * **Bound**: at most `max_unsettled` records of the shard read and not
//!   settled. A full reader waits until settles made room for a call worth
//!   making (half the bound, or a batch if smaller), or for a poll
//!   interval when a slow record holds the room small: a call is one of
//!   five a second, and one that reads a handful of records wastes it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use consumer_backend::{Channel, Envelope, RetryPolicy};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::acker::KinesisAcker;
use super::dead_letter::LetterSink;
use super::record::envelope_of;
use super::session::Session;
use crate::client::{ApiError, KinesisApi, RecordsPage, is_expired_iterator, is_throttled};
use crate::error::Error;
use crate::stream_name::StreamName;
use consumer_backend::observe::{Happened, SourceObserver};

/// The least time between two `GetRecords` calls on a shard: Kinesis
/// allows five a second per shard.
pub const MIN_CALL_INTERVAL: Duration = Duration::from_millis(200);
/// The longest a reader backs off after failed calls.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// An iterator older than this is obtained again before use (they expire
/// after five minutes).
pub const ITERATOR_REFRESH: Duration = Duration::from_secs(4 * 60);

const BACKOFF: RetryPolicy = RetryPolicy::exponential(MIN_CALL_INTERVAL, MAX_BACKOFF, u32::MAX);

/// What the runtime receives through `recv`.
pub(crate) type Delivery = Result<(Arc<Envelope>, KinesisAcker), consumer_backend::Error>;

/// What every reader of a source shares.
pub(crate) struct Reading {
    pub(crate) api: Arc<dyn KinesisApi>,
    pub(crate) stream: StreamName,
    pub(crate) channel: Channel,
    pub(crate) tx: mpsc::Sender<Delivery>,
    pub(crate) letters: Option<Arc<dyn LetterSink>>,
    pub(crate) observer: SourceObserver,
    pub(crate) poll_interval: Duration,
    pub(crate) batch_size: i32,
    pub(crate) max_unsettled: usize,
    /// The largest body whose attributes are read
    /// ([`Source::limit_body`](consumer_backend::Source::limit_body)).
    pub(crate) max_body: AtomicUsize,
    /// The shards held now, for the gauges (the lease loop keeps it).
    pub(crate) held: Mutex<BTreeMap<String, Arc<Session>>>,
}

/// Reads `session`'s shard until it is read to its end, the runtime is
/// gone, or a failure that does not heal; the lease loop aborts it when
/// the lease ends.
pub(crate) async fn read(reading: Arc<Reading>, session: Arc<Session>) {
    let mut reader = Reader {
        reading,
        session,
        iterator: None,
        failures: 0,
        short_since: None,
        last_call: None,
    };
    reader.run().await;
}

/// The room a reader at its bound waits for before it calls again: half
/// the bound, or a batch when that is smaller.
fn low_water(reading: &Reading) -> usize {
    let batch = usize::try_from(reading.batch_size).unwrap_or(1);
    (reading.max_unsettled / 2).clamp(1, batch.max(1))
}

enum Next {
    Go,
    Stop,
}

struct Reader {
    reading: Arc<Reading>,
    session: Arc<Session>,
    /// The iterator for the next call, and when it was obtained.
    iterator: Option<(String, Instant)>,
    failures: u32,
    /// Since when the room has been under the low water mark.
    short_since: Option<Instant>,
    /// When the last `GetRecords` call began: the next one waits from
    /// there, not from when its records were handed out.
    last_call: Option<Instant>,
}

impl Reader {
    async fn run(&mut self) {
        loop {
            let room = {
                let mut ledger = self.session.ledger();
                if ledger.needs_rewind() {
                    ledger.rewind();
                    self.iterator = None;
                    self.reading.observer.emit(Happened::Rewound);
                }
                if ledger.is_end_read() {
                    return;
                }
                self.reading.max_unsettled.saturating_sub(ledger.len())
            };
            if room < low_water(&self.reading) {
                let short_since = *self.short_since.get_or_insert_with(Instant::now);
                if room == 0 || short_since.elapsed() < self.reading.poll_interval {
                    let changed = self.session.changed.notified();
                    let _ = tokio::time::timeout(self.reading.poll_interval, changed).await;
                    continue;
                }
            }
            self.short_since = None;
            let Some(iterator) = self.iterator().await else {
                return;
            };
            let limit = i32::try_from(room)
                .unwrap_or(i32::MAX)
                .min(self.reading.batch_size);
            self.reading.observer.emit(Happened::Polled);
            self.last_call = Some(Instant::now());
            let next = match self.reading.api.get_records(&iterator, limit).await {
                Ok(page) => self.hand_out(page).await,
                Err(e) => self.failed("GetRecords", e).await,
            };
            if let Next::Stop = next {
                return;
            }
        }
    }

    /// The iterator to call with: the last one while fresh, else a new one
    /// after the last record read. `None` when the reader must stop.
    async fn iterator(&mut self) -> Option<String> {
        loop {
            if let Some((it, at)) = &self.iterator
                && at.elapsed() < ITERATOR_REFRESH
            {
                return Some(it.clone());
            }
            if self.iterator.take().is_some() {
                self.reading.observer.emit(Happened::IteratorRenewed);
            }
            let start = self.session.ledger().resume_at();
            let got = self
                .reading
                .api
                .shard_iterator(self.reading.stream.as_str(), &self.session.shard_id, &start)
                .await;
            match got {
                Ok(it) => {
                    self.iterator = Some((it.clone(), Instant::now()));
                    return Some(it);
                }
                Err(e) => {
                    if let Next::Stop = self.failed("GetShardIterator", e).await {
                        return None;
                    }
                }
            }
        }
    }

    /// Enters `page`'s records in the ledger and hands them out, in order.
    async fn hand_out(&mut self, page: RecordsPage) -> Next {
        self.failures = 0;
        let observer = &self.reading.observer;
        let behind = page.millis_behind_latest.unwrap_or(0);
        let behind_ms = u64::try_from(behind).unwrap_or(0);
        observer.emit(Happened::BehindLatest(Duration::from_millis(behind_ms)));
        self.session
            .millis_behind
            .store(behind_ms, Ordering::Relaxed);
        let got_any = !page.records.is_empty();
        for record in &page.records {
            let (epoch, index) = {
                let mut ledger = self.session.ledger();
                (
                    ledger.epoch(),
                    ledger.admit(&record.sequence_number, record.arrival),
                )
            };
            let envelope = envelope_of(
                &self.reading.channel,
                &self.session.shard_id,
                record,
                self.reading.max_body.load(Ordering::Relaxed),
            );
            let acker = KinesisAcker {
                session: Arc::clone(&self.session),
                epoch,
                index,
                letters: self.reading.letters.clone(),
                observer: observer.clone(),
                settled: false,
            };
            observer.emit(Happened::Received {
                count: 1,
                redelivered: false,
            });
            if self
                .reading
                .tx
                .send(Ok((Arc::new(envelope), acker)))
                .await
                .is_err()
            {
                return Next::Stop;
            }
        }
        match page.next_iterator {
            Some(it) => self.iterator = Some((it, Instant::now())),
            None => {
                self.session.ledger().end_read();
                self.session.changed.notify_one();
                return Next::Stop;
            }
        }
        let pause = if got_any && behind > 0 {
            MIN_CALL_INTERVAL
        } else {
            self.reading.poll_interval
        };
        let since = self.last_call.unwrap_or_else(Instant::now);
        tokio::time::sleep_until(since + pause).await;
        Next::Go
    }

    /// A call failed: an expired iterator is obtained again, a failure
    /// that heals backs off, one that does not goes to the runtime.
    async fn failed(&mut self, operation: &'static str, e: ApiError) -> Next {
        if is_expired_iterator(&e) {
            self.iterator = None;
            self.reading.observer.emit(Happened::IteratorRenewed);
            return Next::Go;
        }
        if !e.kind().is_retriable() {
            let error = Error::Kinesis {
                operation,
                stream: self.reading.stream.to_string(),
                source: e,
            };
            tracing::error!(target: "consumer::kinesis", shard = %self.session.shard_id, error = %error, "the shard's reader stops");
            let _ = self.reading.tx.send(Err(error.into())).await;
            return Next::Stop;
        }
        self.failures = self.failures.saturating_add(1);
        let delay = BACKOFF
            .delay(self.failures, &mut rand::rng())
            .max(MIN_CALL_INTERVAL);
        self.reading.observer.emit(Happened::ReceiveFailed {
            at: &self.session.shard_id,
            operation,
            error: &e,
            throttled: is_throttled(&e),
            retry_in: Some(delay),
        });
        tokio::time::sleep(delay).await;
        Next::Go
    }
}
