//! [`KinesisStats`]: in-process counters of a
//! [`KinesisSource`](super::KinesisSource).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters of a [`KinesisSource`](super::KinesisSource); clone it
/// before handing the source to the consumer, read it with
/// [`snapshot`](Self::snapshot).
#[derive(Clone, Debug, Default)]
pub struct KinesisStats {
    pub(super) inner: Arc<StatsInner>,
}

#[derive(Debug, Default)]
pub(crate) struct StatsInner {
    pub(crate) received: AtomicU64,
    pub(crate) get_records_calls: AtomicU64,
    pub(crate) throttled: AtomicU64,
    pub(crate) read_errors: AtomicU64,
    pub(crate) iterators_renewed: AtomicU64,
    pub(crate) rewinds: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) dead_letters: AtomicU64,
    pub(crate) checkpoints: AtomicU64,
    pub(crate) leases_taken: AtomicU64,
    pub(crate) leases_lost: AtomicU64,
    pub(crate) shards_ended: AtomicU64,
    pub(crate) leases_held: AtomicU64,
    pub(crate) millis_behind_latest: AtomicU64,
}

impl StatsInner {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
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
        let i = &self.inner;
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        KinesisStatsSnapshot {
            received: n(&i.received),
            get_records_calls: n(&i.get_records_calls),
            throttled: n(&i.throttled),
            read_errors: n(&i.read_errors),
            iterators_renewed: n(&i.iterators_renewed),
            rewinds: n(&i.rewinds),
            released: n(&i.released),
            dead_letters: n(&i.dead_letters),
            checkpoints: n(&i.checkpoints),
            leases_taken: n(&i.leases_taken),
            leases_lost: n(&i.leases_lost),
            shards_ended: n(&i.shards_ended),
            leases_held: n(&i.leases_held),
            millis_behind_latest: n(&i.millis_behind_latest),
        }
    }
}
