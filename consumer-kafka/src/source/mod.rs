//! The consuming side: [`KafkaSource`], its settle glue [`KafkaAcker`], and
//! [`KafkaStats`].
//!
//! # How offsets stay safe
//!
//! One thread owns the librdkafka consumer and polls it, and builds each
//! record's envelope there. It hands records to the runtime in batches:
//! after the first record of a poll, whatever librdkafka already has
//! queued (up to 64 records, never past a partition that filled up), in
//! one send, so the runtime is woken once a batch rather than once a
//! record. Every record it
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
//! A static member with a given id
//! ([`KafkaSourceBuilder::with_static_membership`]) commits the same way on
//! close but does not leave the group: its partitions stay its own for
//! `session.timeout.ms`, for the same instance to take back at once when it
//! restarts, and wait that long if it does not. A member with a derived id
//! (the default: host name and slot) leaves on close, as a dynamic one
//! does, and takes its partitions back at once only after a crash.
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
//! and it stays pending so the committed offset does not pass it. A copy is
//! never due later than the longest retry delay of the source's handlers
//! after it was written (its timestamp): one whose header says later (year
//! 9999) is taken as due then, with a warning, instead of pausing its
//! partition for years.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use consumer_backend::observe::Happened;
use consumer_backend::{Envelope, Source};
use rdkafka::producer::FutureProducer;
use tokio::sync::mpsc;

use crate::error::Error;
use crate::topics::Topics;
use ledger::{Ledger, Tp};

mod acker;
mod builder;
mod due;
mod gauges;
mod instance_id;
mod leave;
mod ledger;
mod poller;
mod rebalance;
mod stats;

pub use acker::KafkaAcker;
pub use builder::{CONSUMER_DEFAULTS, KafkaSourceBuilder, SETTLE_PRODUCER_DEFAULTS};
pub use instance_id::MEMBERSHIP_ENV;
pub use stats::{KafkaStats, KafkaStatsSnapshot, PartitionStats};

/// Header of a retry copy: when it is due (RFC 3339). The framework's own
/// name, kept here for compatibility.
pub const DUE: &str = consumer_backend::names::DUE;

/// A Kafka consumer-group member as a [`Source`].
///
/// It serves retries through the broker (`mode = redeliver`) when its
/// [`Topics`] have a retry topic; without one, a consumer whose handler
/// asks for them refuses to start.
///
/// ```no_run
/// use consumer_kafka::{KafkaSource, Topics};
///
/// # async fn demo() -> Result<(), consumer_backend::Error> {
/// let topics = Topics::new("orders")?;
/// topics.create("127.0.0.1:9092", 6, 1).await?;
/// let source = KafkaSource::builder("127.0.0.1:9092", "billing", topics)
///     .with_property("session.timeout.ms", "10000")
///     .with_max_per_partition(128)
///     .connect()
///     .await?;
/// # drop(source); Ok(())
/// # }
/// ```
pub struct KafkaSource {
    /// Batches of records from the poll thread (one send per poll round).
    rx: mpsc::UnboundedReceiver<Vec<Delivery>>,
    /// The rest of the batch being handed out.
    batch: VecDeque<Delivery>,
    link: Arc<Link>,
    /// Reports the poll thread's end (and its result).
    thread: Option<tokio::sync::oneshot::Receiver<Result<(), Error>>>,
    close_timeout: Duration,
    /// The largest body whose attributes the poll thread reads
    /// (`Source::limit_body`).
    max_body: Arc<AtomicUsize>,
    group: String,
    /// The `group.instance.id` it joined with (given or derived).
    instance_id: Option<String>,
    /// The first bootstrap broker, for `server.address`/`server.port`.
    server: Option<(String, u16)>,
}

impl fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSource")
            .field("topics", &self.link.topics)
            .finish_non_exhaustive()
    }
}

impl KafkaSource {
    /// The topics this source works with.
    pub fn topics(&self) -> &Topics {
        &self.link.topics
    }

    /// The `group.instance.id` this member joined its group with: the one
    /// given ([`KafkaSourceBuilder::with_static_membership`] or the
    /// property), the one derived from the host name and a slot (the
    /// default), or `None` for a dynamic member.
    pub fn instance_id(&self) -> Option<&str> {
        self.instance_id.as_deref()
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
            Ok(Err(_)) => Err(Error::PollThread("panicked")),
            Err(_) => {
                self.link.shared.observer.emit(Happened::CloseTimedOut {
                    timeout: self.close_timeout,
                });
                Ok(())
            }
        }
    }
}

impl Source for KafkaSource {
    type Acker = KafkaAcker;

    fn limit_body(&mut self, max_bytes: usize) {
        self.max_body.store(max_bytes, Ordering::Relaxed);
    }

    fn system(&self) -> &'static str {
        "kafka"
    }

    fn consumer_group(&self) -> Option<&str> {
        Some(&self.group)
    }

    fn channels(&self) -> Option<consumer_backend::SourceChannels> {
        Some(crate::asyncapi::source_channels(
            &self.link.topics,
            &self.group,
        ))
    }

    fn server(&self) -> Option<(&str, u16)> {
        self.server
            .as_ref()
            .map(|(host, port)| (host.as_str(), *port))
    }

    fn gauges(&self) -> Option<Arc<dyn consumer_backend::SourceGauges>> {
        Some(Arc::new(gauges::KafkaGauges {
            shared: Arc::clone(&self.link.shared),
            topic: Arc::from(self.link.topics.topic()),
        }))
    }

    fn check_redelivery(&self, longest_delay: Duration) -> Result<(), String> {
        // A retry copy waits on the retry topic for as long as it has to,
        // and never longer than the longest delay of any handler here.
        let ms = u64::try_from(longest_delay.as_millis()).unwrap_or(u64::MAX);
        self.link
            .shared
            .longest_retry_delay_ms
            .fetch_max(ms, Ordering::Relaxed);
        match self.link.topics.retry_topic() {
            Some(_) => Ok(()),
            None => Err(format!(
                "topic `{}` has no retry topic, so retries cannot go back through Kafka: \
                 keep the retry topic `Topics::new` derives (`{}.retry`), or use retry mode `in_place`",
                self.link.topics.topic(),
                self.link.topics.topic()
            )),
        }
    }

    async fn recv(
        &mut self,
    ) -> Result<Option<(Arc<Envelope>, KafkaAcker)>, consumer_backend::Error> {
        loop {
            let Some(d) = self.batch.pop_front() else {
                let Some(batch) = self.rx.recv().await else {
                    // The poll thread ended: closed, or a fatal client error.
                    return match self.stop_thread().await {
                        Ok(()) => Ok(None),
                        Err(e) => Err(e.into()),
                    };
                };
                let done = std::mem::replace(&mut self.batch, VecDeque::from(batch));
                self.link.shared.give_back(Vec::from(done));
                continue;
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
                let acker = KafkaAcker::new(Arc::clone(&self.link), d.tp, d.offset, d.epoch);
                return Ok(Some((d.envelope, acker)));
            }
            // Fetched before its partition was revoked: the next owner
            // reads it from the committed offset.
        }
    }

    async fn close(mut self) {
        if let Err(e) = self.stop_thread().await {
            tracing::warn!(target: "consumer::kafka", error = %e, "consumer closed with an error");
        }
    }
}

impl Drop for KafkaSource {
    fn drop(&mut self) {
        // Stops the poll thread if `close` was never called (it commits and
        // leaves the group on its own; a static member only commits).
        self.link.shared.closing.store(true, Ordering::SeqCst);
    }
}

/// What the source, its ackers and the poll thread share.
struct Link {
    shared: Arc<Ledger>,
    producer: FutureProducer<crate::tracing_context::TracingContext>,
    topics: Arc<Topics>,
}

struct Delivery {
    envelope: Arc<Envelope>,
    tp: Tp,
    offset: i64,
    epoch: u64,
}
