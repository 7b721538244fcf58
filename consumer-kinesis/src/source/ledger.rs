//! The checkpoint ledger of one shard: the records read and not yet
//! settled, and the checkpoint that is safe to write.
//!
//! Records of one shard settle out of order (different keys run in
//! parallel), but the checkpoint only moves past a record once it and
//! every earlier record of the shard are settled (the Kafka source's
//! offset rule): a crash then replays from the checkpoint, and dedup
//! absorbs what had settled after it.
//!
//! A record given back unsettled (a release, an acker dropped at
//! shutdown) blocks the checkpoint; once nothing of the shard is held by
//! the runtime any more, the reader starts again from the checkpoint
//! ([`Ledger::rewind`]) under a new epoch, so the record is delivered
//! again and a late settle of the old epoch moves nothing.

use std::collections::VecDeque;
use std::time::SystemTime;

use crate::client::IteratorStart;
use crate::lease::Checkpoint;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Handed out (or about to be), not settled.
    Held,
    /// Settled: acked, or dead-lettered and acked.
    Done,
    /// Given back unsettled: read again after a rewind.
    Released,
}

#[derive(Debug)]
struct Slot {
    sequence_number: String,
    arrival: Option<SystemTime>,
    state: State,
}

/// One shard's records in flight, in the shard's order; see the module
/// docs.
#[derive(Debug)]
pub(crate) struct Ledger {
    epoch: u64,
    /// The index of `slots[0]`.
    front: u64,
    slots: VecDeque<Slot>,
    /// Records held by the runtime (neither done nor released).
    held: usize,
    /// The last sequence number settled with every earlier one.
    settled: Option<String>,
    /// The last sequence number read.
    last_read: Option<String>,
    /// Where the session started reading (from the stored checkpoint).
    start: IteratorStart,
    /// A record was given back: read again from the checkpoint.
    released: bool,
    /// The shard is closed and every record of it was read.
    end_read: bool,
}

impl Ledger {
    /// An empty ledger for a session that starts reading at `start`.
    pub(crate) fn new(start: IteratorStart) -> Self {
        Self {
            epoch: 0,
            front: 0,
            slots: VecDeque::new(),
            held: 0,
            settled: None,
            last_read: None,
            start,
            released: false,
            end_read: false,
        }
    }

    /// The current epoch: settles of an earlier one move nothing.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Records read and not settled.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Records a record just read (Kinesis took it at `arrival`); its
    /// index, for its acker.
    pub(crate) fn admit(&mut self, sequence_number: &str, arrival: Option<SystemTime>) -> u64 {
        let index = self.front + self.slots.len() as u64;
        self.slots.push_back(Slot {
            sequence_number: sequence_number.to_owned(),
            arrival,
            state: State::Held,
        });
        self.held += 1;
        self.last_read = Some(sequence_number.to_owned());
        index
    }

    /// The record at `index` of `epoch` is settled; whether the safe
    /// checkpoint moved.
    pub(crate) fn settle(&mut self, epoch: u64, index: u64) -> bool {
        if !self.mark(epoch, index, State::Done) {
            return false;
        }
        let mut moved = false;
        while self.slots.front().is_some_and(|s| s.state == State::Done) {
            if let Some(slot) = self.slots.pop_front() {
                self.settled = Some(slot.sequence_number);
                self.front += 1;
                moved = true;
            }
        }
        moved
    }

    /// The record at `index` of `epoch` was given back unsettled.
    pub(crate) fn release(&mut self, epoch: u64, index: u64) {
        if self.mark(epoch, index, State::Released) {
            self.released = true;
        }
    }

    fn mark(&mut self, epoch: u64, index: u64, state: State) -> bool {
        if epoch != self.epoch || index < self.front {
            return false;
        }
        let Ok(at) = usize::try_from(index - self.front) else {
            return false;
        };
        match self.slots.get_mut(at) {
            Some(slot) if slot.state == State::Held => {
                slot.state = state;
                self.held -= 1;
                true
            }
            _ => false,
        }
    }

    /// Whether the reader should read again from the checkpoint: a record
    /// was given back and the runtime holds nothing of the shard.
    pub(crate) fn needs_rewind(&self) -> bool {
        self.released && self.held == 0
    }

    /// Forgets everything after the checkpoint under a new epoch; where to
    /// read from now.
    pub(crate) fn rewind(&mut self) -> IteratorStart {
        self.epoch += 1;
        self.front = 0;
        self.slots.clear();
        self.released = false;
        self.end_read = false;
        self.last_read = self.settled.clone();
        self.resume_at()
    }

    /// Where a new iterator goes on from: after the last record read, or
    /// where the session started.
    pub(crate) fn resume_at(&self) -> IteratorStart {
        self.last_read
            .clone()
            .map_or_else(|| self.start.clone(), IteratorStart::AfterSequence)
    }

    /// When Kinesis took the oldest record read and not settled.
    pub(crate) fn oldest_arrival(&self) -> Option<SystemTime> {
        self.slots
            .iter()
            .find(|s| s.state != State::Done)
            .and_then(|s| s.arrival)
    }

    /// The closed shard was read to its end.
    pub(crate) fn end_read(&mut self) {
        self.end_read = true;
    }

    /// Whether the closed shard was read to its end.
    pub(crate) fn is_end_read(&self) -> bool {
        self.end_read
    }

    /// The checkpoint that is safe to write: [`Checkpoint::ShardEnd`] once
    /// a closed shard is read and settled to its end, else the last
    /// record settled with every earlier one.
    pub(crate) fn safe_checkpoint(&self) -> Option<Checkpoint> {
        if self.end_read && self.slots.is_empty() {
            return Some(Checkpoint::ShardEnd);
        }
        self.settled.clone().map(Checkpoint::At)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Option<Checkpoint> {
        Some(Checkpoint::At(s.to_owned()))
    }

    #[test]
    fn the_checkpoint_never_passes_an_unsettled_record() {
        let mut l = Ledger::new(IteratorStart::TrimHorizon);
        let (a, b, c) = (
            l.admit("10", None),
            l.admit("20", None),
            l.admit("30", None),
        );
        assert_eq!(l.safe_checkpoint(), None);
        assert!(!l.settle(0, c), "30 settles before 10 and 20");
        assert!(!l.settle(0, b));
        assert_eq!(l.safe_checkpoint(), None);
        assert!(l.settle(0, a));
        assert_eq!(l.safe_checkpoint(), at("30"));
        assert_eq!(l.len(), 0);
        assert!(!l.settle(0, a), "a second settle moves nothing");
    }

    #[test]
    fn a_released_record_is_read_again_once_nothing_is_held() {
        let mut l = Ledger::new(IteratorStart::AfterSequence("5".to_owned()));
        let (a, b, c) = (
            l.admit("10", None),
            l.admit("20", None),
            l.admit("30", None),
        );
        l.settle(0, a);
        l.release(0, b);
        assert!(!l.needs_rewind(), "30 is still held");
        l.settle(0, c);
        assert!(l.needs_rewind());
        assert_eq!(l.safe_checkpoint(), at("10"));
        assert_eq!(l.rewind(), IteratorStart::AfterSequence("10".to_owned()));
        assert_eq!((l.epoch(), l.len()), (1, 0));
        assert!(!l.settle(0, c), "a settle of the old epoch is ignored");
        let again = l.admit("20", None);
        assert!(l.settle(1, again));
        assert_eq!(l.safe_checkpoint(), at("20"));
    }

    #[test]
    fn a_rewind_before_anything_settled_starts_where_the_session_did() {
        let mut l = Ledger::new(IteratorStart::AfterSequence("5".to_owned()));
        let a = l.admit("10", None);
        l.release(0, a);
        assert_eq!(l.rewind(), IteratorStart::AfterSequence("5".to_owned()));
    }

    #[test]
    fn a_closed_shard_ends_once_read_and_settled_to_its_end() {
        let mut l = Ledger::new(IteratorStart::TrimHorizon);
        let a = l.admit("10", None);
        l.end_read();
        assert_eq!(l.safe_checkpoint(), None);
        l.settle(0, a);
        assert_eq!(l.safe_checkpoint(), Some(Checkpoint::ShardEnd));
        let mut empty = Ledger::new(IteratorStart::TrimHorizon);
        empty.end_read();
        assert_eq!(empty.safe_checkpoint(), Some(Checkpoint::ShardEnd));
    }
}
