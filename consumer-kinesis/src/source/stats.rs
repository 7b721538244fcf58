//! [`KinesisStats`]: the counters of a [`KinesisSource`](super::KinesisSource),
//! as its [`SourceObserver`] counts them, read as Kinesis names them.

use consumer_backend::observe::{Broker, Counter, Level, SourceObserver};

/// Live counters of a [`KinesisSource`](super::KinesisSource); clone it
/// before handing the source to the consumer, read it with
/// [`snapshot`](Self::snapshot).
#[derive(Clone, Debug)]
pub struct KinesisStats {
    pub(super) observer: SourceObserver,
}

impl Default for KinesisStats {
    fn default() -> Self {
        Self {
            observer: SourceObserver::new(Broker::Kinesis),
        }
    }
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KinesisStatsSnapshot {
    /// Records read and handed to the runtime.
    pub received: u64,
    /// `GetRecords` calls made.
    pub get_records_calls: u64,
    /// Calls Kinesis throttled (`ProvisionedThroughputExceededException`);
    /// each backs the shard's reader off.
    pub throttled: u64,
    /// Other failed reads (each backs off and tries again).
    pub read_errors: u64,
    /// Iterators obtained again: expired, or about to.
    pub iterators_renewed: u64,
    /// Shards read again from their checkpoint after a record was given
    /// back unsettled.
    pub rewinds: u64,
    /// Records given back unsettled.
    pub released: u64,
    /// Dead letters the destination confirmed.
    pub dead_letters: u64,
    /// Checkpoints written to the lease store.
    pub checkpoints: u64,
    /// Leases taken (free, expired, or from an instance over its share).
    pub leases_taken: u64,
    /// Leases lost to another instance or to expiry.
    pub leases_lost: u64,
    /// Closed shards read and checkpointed to their end.
    pub shards_ended: u64,
    /// Leases held now.
    pub leases_held: u64,
    /// The largest `MillisBehindLatest` of the last reads: the lag signal.
    pub millis_behind_latest: u64,
}

impl KinesisStats {
    /// The counters now.
    pub fn snapshot(&self) -> KinesisStatsSnapshot {
        let s = self.observer.snapshot();
        KinesisStatsSnapshot {
            received: s.get(Counter::Received),
            get_records_calls: s.get(Counter::Polls),
            throttled: s.get(Counter::Throttled),
            read_errors: s.get(Counter::ReceiveErrors),
            iterators_renewed: s.get(Counter::IteratorsRenewed),
            rewinds: s.get(Counter::Rewinds),
            released: s.get(Counter::Released),
            dead_letters: s.get(Counter::DeadLetters),
            checkpoints: s.get(Counter::Checkpoints),
            leases_taken: s.get(Counter::LeasesTaken),
            leases_lost: s.get(Counter::LeasesLost),
            shards_ended: s.get(Counter::ShardsEnded),
            leases_held: s.level(Level::LeasesHeld),
            millis_behind_latest: s.level(Level::MillisBehindLatest),
        }
    }
}
