//! One partition of a memory-broker topic: ready messages in offset order,
//! deliveries not settled yet, and retries waiting for their due time.

use std::collections::VecDeque;

use tokio::time::Instant;

use crate::envelope::Message;

#[derive(Debug, Default)]
pub(super) struct Partition {
    next_offset: u64,
    /// Ready to deliver, in offset order.
    pub(super) ready: VecDeque<Stored>,
    /// Delivered and not settled, in offset order (found by binary search:
    /// the window is small, and a delivery is nearly always taken after
    /// the ones still unacked and settled in the order it was taken).
    pub(super) unacked: VecDeque<Stored>,
    /// Retries waiting for their due time.
    pub(super) delayed: Vec<(Instant, Message)>,
    /// The source that owns the partition, as a Kafka assignment.
    pub(super) owner: Option<u64>,
}

#[derive(Debug, Clone)]
pub(super) struct Stored {
    pub(super) offset: u64,
    pub(super) message: Message,
    /// When it was appended (for the lag's age).
    pub(super) at: Instant,
}

impl Partition {
    pub(super) fn append(&mut self, message: Message) -> u64 {
        let offset = self.next_offset;
        self.next_offset += 1;
        self.ready.push_back(Stored {
            offset,
            message,
            at: Instant::now(),
        });
        offset
    }

    /// Holds a delivery as unacked until it is settled.
    pub(super) fn hold_unacked(&mut self, stored: Stored) {
        // Nearly always after every unacked one; a redelivery of a
        // released one goes back to its offset.
        if self
            .unacked
            .back()
            .is_none_or(|last| last.offset < stored.offset)
        {
            self.unacked.push_back(stored);
        } else {
            let at = self.unacked.partition_point(|s| s.offset < stored.offset);
            self.unacked.insert(at, stored);
        }
    }

    /// The unacked delivery at `offset`, no longer held; `None` when it
    /// was settled already (or given back by its source).
    pub(super) fn take_unacked(&mut self, offset: u64) -> Option<Stored> {
        let at = self
            .unacked
            .binary_search_by_key(&offset, |s| s.offset)
            .ok()?;
        self.unacked.remove(at)
    }

    /// Puts a delivery back where its offset says, ahead of later messages.
    pub(super) fn requeue(&mut self, stored: Stored) {
        let at = self.ready.partition_point(|s| s.offset < stored.offset);
        self.ready.insert(at, stored);
    }

    /// Appends the retries that are due, as new messages.
    pub(super) fn promote_due(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.delayed.len() {
            if self.delayed[i].0 <= now {
                let (_, message) = self.delayed.swap_remove(i);
                self.append(message);
            } else {
                i += 1;
            }
        }
    }

    /// When the next retry is due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.delayed.iter().map(|(d, _)| *d).min()
    }

    /// When the oldest message not settled (ready or unacked) was appended.
    pub(super) fn oldest(&self) -> Option<Instant> {
        // Offsets are given out in the order of appending, so within each
        // list the first is the oldest.
        let ready = self.ready.front().map(|s| s.at);
        let unacked = self.unacked.front().map(|s| s.at);
        ready.into_iter().chain(unacked).min()
    }

    /// Messages not settled: ready, delayed and unacked.
    pub(super) fn depth(&self) -> usize {
        self.ready.len() + self.delayed.len() + self.unacked.len()
    }
}
