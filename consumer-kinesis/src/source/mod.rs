//! Consuming a Kinesis stream: [`KinesisSource`], its settle glue
//! [`KinesisAcker`], and [`KinesisStats`].
//!
//! # How it reads
//!
//! Kinesis acknowledges nothing per record: an instance holds a shard's
//! lease, reads the shard in order and checkpoints a sequence number, as
//! the KCL does, with leases and checkpoints in a [`LeaseStore`] rather
//! than DynamoDB.
//!
//! * **Leases** (the lease loop): every `lease_duration / 3` the source
//!   lists the shards, renews its leases and takes its fair share
//!   ([`balance`](crate::lease::balance)) of the shards that may be read
//!   now, free or expired leases first, then one from an instance over its
//!   share. A lease it fails to renew stops its shard's reader; on
//!   [`close`](Source::close) it releases every lease. A stolen shard is
//!   read after a third of the lease duration (and a checkpoint interval),
//!   the time its previous owner takes to notice and stop; a record that
//!   owner still runs after that is the one window in which a steal can
//!   put a key out of order (dedup absorbs what both read).
//! * **Reading** (a reader per held shard): `GetRecords` within the
//!   per-shard limit, backing off when throttled, iterators obtained again
//!   before they expire; see [`MIN_CALL_INTERVAL`].
//! * **Order**: each record goes to the runtime with its partition key as
//!   key (or the key its envelope carries), so the runtime's lanes run a
//!   key in order and different keys of a shard in parallel.
//! * **Checkpoints**: a shard's checkpoint moves past a record only once
//!   it and every earlier record of the shard are settled (acked, or
//!   dead-lettered and acked), written every checkpoint interval; a
//!   SIGKILL replays from it, and dedup absorbs what had settled after it.
//! * **Resharding**: a child shard is read only once its parents are read
//!   and settled to their end ([`shards`](crate::shards)); the parent's
//!   lease then ends.
//! * **Retries** happen in place: the key's lane waits and the shard's
//!   checkpoint cannot pass the record. A handler retrying through the
//!   broker (`redeliver`) is refused at start.
//! * **Dead letters** go to the configured destination (a Kinesis stream,
//!   an SQS queue); without one, or when it refuses, the runtime's chain
//!   takes over (the store's dead-letter table).

mod acker;
mod builder;
mod checkpoints;
mod dead_letter;
mod gauges;
mod lease_loop;
mod ledger;
mod reader;
mod record;
mod session;
mod stats;

use std::sync::Arc;
use std::time::Duration;

use consumer_backend::{Envelope, Source, SourceGauges};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use acker::KinesisAcker;
pub use builder::{
    DEFAULT_CHECKPOINT_INTERVAL, DEFAULT_LEASE_DURATION, DEFAULT_MAX_UNSETTLED,
    DEFAULT_POLL_INTERVAL, KinesisSourceBuilder,
};
pub use reader::{ITERATOR_REFRESH, MAX_BACKOFF, MIN_CALL_INTERVAL};
pub use record::{position_of, shard_and_sequence};
pub use stats::{KinesisStats, KinesisStatsSnapshot};

use crate::connection::KinesisClient;
use crate::lease::{LeaseStore, MemoryLeaseStore};
use lease_loop::LeaseLoop;
use reader::{Delivery, Reading};

/// Reads a Kinesis stream as one of the instances sharing it; see the
/// module docs.
///
/// ```no_run
/// use consumer_kinesis::{KinesisClient, KinesisSource};
/// use consumer_kinesis::lease::MemoryLeaseStore;
///
/// # async fn demo() -> consumer_kinesis::Result<()> {
/// let client = KinesisClient::local("http://127.0.0.1:4566");
/// let source = KinesisSource::builder(client, "orders", MemoryLeaseStore::new())
///     .with_dead_letter_stream("orders-dead-letters")
///     .connect()
///     .await?;
/// # drop(source); Ok(())
/// # }
/// ```
pub struct KinesisSource<S: LeaseStore = MemoryLeaseStore> {
    reading: Arc<Reading>,
    rx: mpsc::Receiver<Delivery>,
    /// The lease loop, until the first `recv` starts it.
    idle: Option<LeaseLoop<S>>,
    running: Option<(watch::Sender<bool>, JoinHandle<()>)>,
    stats: KinesisStats,
    owner: String,
    close_timeout: Duration,
}

impl<S: LeaseStore> std::fmt::Debug for KinesisSource<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KinesisSource")
            .field("stream", &self.reading.stream.as_str())
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl KinesisSource<MemoryLeaseStore> {
    /// A source reading `stream` through `client`, its leases and
    /// checkpoints in `store` (shared by every instance reading the stream
    /// as one application).
    pub fn builder<S: LeaseStore>(
        client: KinesisClient,
        stream: impl Into<String>,
        store: S,
    ) -> KinesisSourceBuilder<S> {
        KinesisSourceBuilder::new(client, stream.into(), store)
    }
}

impl<S: LeaseStore> KinesisSource<S> {
    /// The stream read.
    pub fn stream(&self) -> &str {
        self.reading.stream.as_str()
    }

    /// The name this instance holds leases under.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Live counters: clone before handing the source to the consumer.
    pub fn stats(&self) -> KinesisStats {
        self.stats.clone()
    }

    fn start(&mut self) {
        if let Some(lease_loop) = self.idle.take() {
            let (stop, stopped) = watch::channel(false);
            let handle = tokio::spawn(lease_loop.run(stopped));
            self.running = Some((stop, handle));
        }
    }
}

/// Dropped without [`close`](Source::close) (a crash, a panic): the lease
/// loop stops at once and gives nothing back; the leases expire after
/// their duration and other instances take them, from the last
/// checkpoints.
impl<S: LeaseStore> Drop for KinesisSource<S> {
    fn drop(&mut self) {
        if let Some((_, handle)) = self.running.take() {
            handle.abort();
        }
    }
}

impl<S: LeaseStore> Source for KinesisSource<S> {
    type Acker = KinesisAcker;

    fn system(&self) -> &'static str {
        "aws_kinesis"
    }

    fn gauges(&self) -> Option<Arc<dyn SourceGauges>> {
        Some(Arc::new(gauges::KinesisGauges {
            reading: Arc::clone(&self.reading),
            stream: Arc::from(self.stream()),
        }))
    }

    fn limit_body(&mut self, max_bytes: usize) {
        self.reading
            .max_body
            .store(max_bytes, std::sync::atomic::Ordering::Relaxed);
    }

    fn check_redelivery(&self, _longest_delay: Duration) -> Result<(), String> {
        Err(format!(
            "Kinesis has no per-record redelivery, so the source of stream `{}` cannot retry through the broker: set the handler's retry mode to `in_place` (the key's lane waits and the shard's checkpoint stays below the record)",
            self.stream()
        ))
    }

    async fn recv(
        &mut self,
    ) -> Result<Option<(Arc<Envelope>, KinesisAcker)>, consumer_backend::Error> {
        self.start();
        match self.rx.recv().await {
            Some(Ok(delivery)) => Ok(Some(delivery)),
            Some(Err(e)) => Err(e),
            None => Ok(None),
        }
    }

    async fn close(mut self) {
        // Records handed out but never taken go back (released), so the
        // last checkpoints stop below them.
        self.rx.close();
        while let Ok(delivery) = self.rx.try_recv() {
            drop(delivery);
        }
        if let Some((stop, handle)) = self.running.take() {
            let _ = stop.send(true);
            if tokio::time::timeout(self.close_timeout, handle)
                .await
                .is_err()
            {
                tracing::warn!(target: "consumer::kinesis", stream = %self.reading.stream, "the lease loop did not finish closing in time; its leases expire instead");
            }
        }
    }
}
