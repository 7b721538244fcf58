//! The offset ledger: per assigned partition, the records pending and the
//! position that is safe to commit.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use consumer_backend::observe::{Broker, SourceObserver};

use super::Delivery;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tp {
    pub(super) topic: Arc<str>,
    pub(super) partition: i32,
}

/// Hashes the partition, the topic's length and its last eight bytes, not
/// every byte of the name: a consumer's topics are its topic and the
/// topics derived from it by a suffix (`.retry`), which these tell apart,
/// and `Eq` still compares whole names. Hashing whole names cost a word
/// per eight bytes on each of the three lookups a record makes.
impl std::hash::Hash for Tp {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let name = self.topic.as_bytes();
        let mut tail = [0u8; 8];
        let end = &name[name.len().saturating_sub(8)..];
        tail[..end.len()].copy_from_slice(end);
        state.write_u64(u64::from_le_bytes(tail));
        state.write_usize(name.len());
        state.write_i32(self.partition);
    }
}

/// Hashes [`Tp`]s for the partition map, which is looked up three times
/// per record (receipt, hand-out and settle). Its keys are the consumer's
/// own topics and the partitions the group assigned, nothing a producer
/// chooses, so it needs no defence against aimed collisions (SipHash's
/// cost): a multiply-rotate over 8-byte words, as rustc's `FxHasher` does.
#[derive(Default)]
pub(super) struct TpHasher(u64);

impl TpHasher {
    pub(super) fn add(&mut self, word: u64) {
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

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
}

/// What the source's poll thread, its ackers and its rebalance callbacks
/// share: each partition's records in flight (the lowest unfinished offset
/// is what may be committed), and the observer they emit through.
pub(super) struct Ledger {
    pub(super) state: Mutex<State>,
    /// Signalled when a record of a revoking partition settles.
    pub(super) settled: Condvar,
    /// Signalled when a full partition is back to three quarters.
    pub(super) room: Condvar,
    /// Something settled: positions may have moved, paused partitions may resume.
    pub(super) dirty: AtomicBool,
    pub(super) closing: AtomicBool,
    /// The consumer is closed: it has left its group.
    pub(super) closed: AtomicBool,
    /// What the poll thread, the rebalance callbacks and the source emit
    /// through; its counters are what [`KafkaStats`](super::KafkaStats)
    /// and the gauges read.
    pub(super) observer: SourceObserver,
    /// The longest delay a handler of this source gives a retry copy, in
    /// milliseconds (the runtime says so before the first delivery): a
    /// retry record is never due later than that after it was written.
    pub(super) longest_retry_delay_ms: AtomicU64,
    /// Emptied batches the source gives back for the poll thread to fill
    /// again: a batch is tens of kilobytes, and allocating one per batch on
    /// the poll thread and freeing it on a runtime thread cost more than
    /// the hand-over saved.
    pub(super) spare: Mutex<Vec<Vec<Delivery>>>,
}

/// Emptied batches kept for reuse, at most.
const SPARE_BATCHES: usize = 4;

impl Default for Ledger {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            settled: Condvar::new(),
            room: Condvar::new(),
            dirty: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            observer: SourceObserver::new(Broker::Kafka),
            longest_retry_delay_ms: AtomicU64::new(0),
            spare: Mutex::default(),
        }
    }
}

impl Ledger {
    /// An empty batch with room for `capacity` records.
    pub(super) fn batch(&self, capacity: usize) -> Vec<Delivery> {
        self.spare
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(capacity))
    }

    /// Keeps an emptied batch for [`batch`](Self::batch).
    pub(super) fn give_back(&self, mut batch: Vec<Delivery>) {
        batch.clear();
        let mut spare = self.spare.lock().unwrap_or_else(PoisonError::into_inner);
        if spare.len() < SPARE_BATCHES {
            spare.push(batch);
        }
    }
}

impl Ledger {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
pub(super) struct State {
    pub(super) partitions: HashMap<Tp, Partition, BuildHasherDefault<TpHasher>>,
    pub(super) next_epoch: u64,
}

pub(super) struct Partition {
    pub(super) epoch: u64,
    /// Received and not settled (handed out, queued, or parked), by
    /// offset, with when each was produced (its timestamp, in Unix
    /// milliseconds; the time of receipt when it has none).
    pub(super) pending: BTreeMap<i64, i64>,
    /// The offset after the last record received.
    pub(super) next: Option<i64>,
    /// The position last stored for commit.
    pub(super) stored: Option<i64>,
    /// Held by the runtime (handed out by `recv`, not settled).
    pub(super) taken: usize,
    pub(super) released: u64,
    pub(super) paused: bool,
    /// Reached `max_per_partition` records pending (not paused yet).
    pub(super) full: bool,
    /// `pending` at or below which a full partition has room again.
    pub(super) low_water: usize,
    pub(super) parked: Option<Parked>,
    pub(super) revoking: bool,
    pub(super) high_watermark: Option<i64>,
    pub(super) committed: Option<i64>,
}

pub(super) struct Parked {
    pub(super) delivery: Delivery,
    pub(super) due: Instant,
}

impl Partition {
    pub(super) fn new(epoch: u64) -> Self {
        Self {
            epoch,
            pending: BTreeMap::new(),
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

    /// When the oldest record pending was produced (Unix milliseconds).
    pub(super) fn oldest_pending_ms(&self) -> Option<i64> {
        self.pending.values().min().copied()
    }

    /// The offset to commit: the lowest unfinished record, or the one after
    /// the last received.
    pub(super) fn position(&self) -> Option<i64> {
        self.pending
            .first_key_value()
            .map(|(o, _)| *o)
            .or(self.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_found_by_name_whatever_string_holds_it() {
        let mut map: HashMap<Tp, i32, BuildHasherDefault<TpHasher>> = HashMap::default();
        let tp = |topic: &str, partition| Tp {
            topic: Arc::from(topic),
            partition,
        };
        for (i, (topic, partition)) in [
            ("orders", 0),
            ("orders", 1),
            ("orders.retry", 0),
            ("orders.dlt", 0),
            ("billing", 0),
            ("a", 0),
            ("", 0),
        ]
        .into_iter()
        .enumerate()
        {
            map.insert(tp(topic, partition), i32::try_from(i).unwrap_or(-1));
        }
        assert_eq!(map.len(), 7);
        assert_eq!(map.get(&tp("orders", 1)), Some(&1));
        assert_eq!(map.get(&tp("orders.retry", 0)), Some(&2));
        assert_eq!(map.get(&tp("", 0)), Some(&6));
        assert_eq!(map.get(&tp("orders", 2)), None);
        assert_eq!(map.get(&tp("xorders", 0)), None);
    }

    #[test]
    fn position_is_the_lowest_unfinished_record() {
        let mut p = Partition::new(1);
        assert_eq!(p.position(), None, "nothing received: nothing to commit");
        for o in [10, 11, 12, 15] {
            p.pending.insert(o, 0);
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
}
