//! [`KinesisSourceBuilder`]: how a [`KinesisSource`] reads, and where its
//! dead letters go.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use consumer_backend::{Channel, Publisher};
use tokio::sync::mpsc;

use super::KinesisSource;
use super::dead_letter::{LetterSink, PublisherSink};
use super::lease_loop::LeaseLoop;
use super::reader::{MIN_CALL_INTERVAL, Reading};
use super::stats::KinesisStats;
use crate::client::IteratorStart;
use crate::connection::KinesisClient;
use crate::error::{Error, Result};
use crate::lease::LeaseStore;
use crate::publisher::KinesisPublisher;
use crate::stream_name::StreamName;

/// How long a lease lasts unless renewed, by default (the KCL's failover
/// time): a crashed instance's shards wait this long for another.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(10);
/// How long a caught-up reader waits between `GetRecords` calls, by
/// default.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How often moved checkpoints are written, by default.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// The most records of one shard read and not settled, by default.
pub const DEFAULT_MAX_UNSETTLED: usize = 1000;
/// Records handed out and not yet taken by the runtime, at most.
const HAND_OUT: usize = 128;

enum LetterPlace {
    None,
    Stream(String),
    Sink(Arc<dyn LetterSink>),
}

/// Builds a [`KinesisSource`]: [`KinesisSource::builder`], the `with_*`
/// settings, then [`connect`](Self::connect).
#[must_use]
pub struct KinesisSourceBuilder<S> {
    client: KinesisClient,
    stream: String,
    store: S,
    owner: Option<String>,
    lease_duration: Duration,
    poll_interval: Duration,
    checkpoint_interval: Duration,
    max_unsettled: usize,
    batch_size: i32,
    initial: IteratorStart,
    letters: LetterPlace,
}

impl<S> std::fmt::Debug for KinesisSourceBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KinesisSourceBuilder")
            .field("stream", &self.stream)
            .field("owner", &self.owner)
            .field("lease_duration", &self.lease_duration)
            .finish_non_exhaustive()
    }
}

impl<S: LeaseStore> KinesisSourceBuilder<S> {
    pub(super) fn new(client: KinesisClient, stream: String, store: S) -> Self {
        Self {
            client,
            stream,
            store,
            owner: None,
            lease_duration: DEFAULT_LEASE_DURATION,
            poll_interval: DEFAULT_POLL_INTERVAL,
            checkpoint_interval: DEFAULT_CHECKPOINT_INTERVAL,
            max_unsettled: DEFAULT_MAX_UNSETTLED,
            batch_size: 10_000,
            initial: IteratorStart::TrimHorizon,
            letters: LetterPlace::None,
        }
    }

    /// The name this instance holds leases under (default: the process id
    /// and a random suffix). Two live instances must not share one.
    pub fn with_owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// How long a lease lasts unless renewed (default
    /// [`DEFAULT_LEASE_DURATION`], at least 1 s); leases are renewed every
    /// third of it.
    pub fn with_lease_duration(mut self, d: Duration) -> Self {
        self.lease_duration = d.max(Duration::from_secs(1));
        self
    }

    /// How long a caught-up reader waits between `GetRecords` calls
    /// (default [`DEFAULT_POLL_INTERVAL`]; at least
    /// [`MIN_CALL_INTERVAL`], Kinesis's five calls a second per shard).
    pub fn with_poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = d.max(MIN_CALL_INTERVAL);
        self
    }

    /// How often moved checkpoints are written (default
    /// [`DEFAULT_CHECKPOINT_INTERVAL`]): what a crash replays, at most.
    pub fn with_checkpoint_interval(mut self, d: Duration) -> Self {
        self.checkpoint_interval = d.max(Duration::from_millis(10));
        self
    }

    /// The most records of one shard read and not settled (default
    /// [`DEFAULT_MAX_UNSETTLED`], at least 1); a full shard's reader waits.
    pub fn with_max_unsettled_per_shard(mut self, n: usize) -> Self {
        self.max_unsettled = n.max(1);
        self
    }

    /// The most records one `GetRecords` call asks for (1 to 10 000, the
    /// default).
    pub fn with_batch_size(mut self, n: u16) -> Self {
        self.batch_size = i32::from(n).clamp(1, 10_000);
        self
    }

    /// Where a shard without a checkpoint starts: its oldest record
    /// ([`IteratorStart::TrimHorizon`], the default, and what a child
    /// shard always uses) or what arrives from now on
    /// ([`IteratorStart::Latest`]).
    pub fn with_initial_position(mut self, start: IteratorStart) -> Self {
        self.initial = match start {
            IteratorStart::AfterSequence(_) => IteratorStart::TrimHorizon,
            other => other,
        };
        self
    }

    /// Dead letters go to the Kinesis stream `stream`, through a
    /// [`KinesisPublisher`] on the source's client (key and envelope kept).
    pub fn with_dead_letter_stream(mut self, stream: impl Into<String>) -> Self {
        self.letters = LetterPlace::Stream(stream.into());
        self
    }

    /// Dead letters go to `destination` through `publisher`: an SQS queue
    /// through `consumer-sqs`'s publisher, say. The publisher's refusal
    /// (its error's kind) decides what the runtime does next.
    pub fn with_dead_letter_publisher<P: Publisher>(
        mut self,
        publisher: P,
        destination: impl Into<String>,
    ) -> Self {
        self.letters = LetterPlace::Sink(Arc::new(PublisherSink {
            publisher,
            destination: destination.into(),
        }));
        self
    }

    /// Checks the names and that the stream answers `ListShards`; nothing
    /// is read before the first `recv`.
    pub async fn connect(self) -> Result<KinesisSource<S>> {
        let stream = StreamName::parse(self.stream)?;
        let api = self.client.api();
        api.list_shards(stream.as_str())
            .await
            .map_err(|source| Error::Kinesis {
                operation: "ListShards",
                stream: stream.to_string(),
                source,
            })?;
        let letters: Option<Arc<dyn LetterSink>> = match self.letters {
            LetterPlace::None => None,
            LetterPlace::Stream(name) => {
                let name = StreamName::parse(name)?;
                let publisher = KinesisPublisher::builder(self.client.clone()).build();
                Some(Arc::new(PublisherSink {
                    publisher,
                    destination: name.to_string(),
                }))
            }
            LetterPlace::Sink(sink) => Some(sink),
        };
        let owner = self
            .owner
            .unwrap_or_else(|| format!("{}-{:08x}", std::process::id(), rand::random::<u32>()));
        let stats = KinesisStats::default();
        let (tx, rx) = mpsc::channel(HAND_OUT);
        let reading = Arc::new(Reading {
            api,
            channel: Channel::from(stream.as_str()),
            stream,
            tx,
            letters,
            observer: stats.observer.clone(),
            poll_interval: self.poll_interval,
            batch_size: self.batch_size,
            max_unsettled: self.max_unsettled,
            held: Mutex::default(),
            max_body: AtomicUsize::new(usize::MAX),
        });
        let lease_loop = LeaseLoop::new(
            Arc::new(self.store),
            Arc::clone(&reading),
            owner.clone(),
            self.lease_duration,
            self.checkpoint_interval,
            self.initial,
        );
        tracing::info!(target: "consumer::kinesis", stream = %reading.stream, owner = %owner, "consuming");
        Ok(KinesisSource {
            reading,
            rx,
            idle: Some(lease_loop),
            running: None,
            stats,
            owner,
            close_timeout: self.lease_duration,
        })
    }
}
