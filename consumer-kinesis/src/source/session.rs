//! [`Session`]: one shard while this instance holds its lease: its ledger,
//! and the signal its reader waits on.

use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use tokio::sync::Notify;

use super::ledger::Ledger;
use crate::client::IteratorStart;

/// One shard held by this instance, shared by its reader, its ackers and
/// the lease loop. A new lease on the shard is a new session, so nothing
/// settled under an earlier one moves a checkpoint.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) shard_id: String,
    ledger: Mutex<Ledger>,
    /// Something settled or was given back.
    pub(crate) changed: Notify,
    /// When the lease ends unless renewed, as this instance last stored it.
    held_until: Mutex<SystemTime>,
    /// `MillisBehindLatest` of the shard's last read.
    pub(crate) millis_behind: AtomicU64,
}

impl Session {
    pub(crate) fn new(shard_id: String, start: IteratorStart, held_until: SystemTime) -> Self {
        Self {
            shard_id,
            ledger: Mutex::new(Ledger::new(start)),
            changed: Notify::new(),
            held_until: Mutex::new(held_until),
            millis_behind: AtomicU64::new(0),
        }
    }

    pub(crate) fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The record at `index` of `epoch` is settled.
    pub(crate) fn settle(&self, epoch: u64, index: u64) {
        self.ledger().settle(epoch, index);
        self.changed.notify_one();
    }

    /// The record at `index` of `epoch` was given back unsettled.
    pub(crate) fn release(&self, epoch: u64, index: u64) {
        self.ledger().release(epoch, index);
        self.changed.notify_one();
    }

    pub(crate) fn held_until(&self) -> SystemTime {
        *self
            .held_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn renewed(&self, until: SystemTime) {
        *self
            .held_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = until;
    }
}
