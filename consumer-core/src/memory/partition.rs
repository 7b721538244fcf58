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
    /// Delivered and not settled, in offset order.
    pub(super) unacked: Unacked,
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

/// Deliveries not settled, in offset order, found by binary search (a
/// delivery is nearly always taken after the ones still unacked). One
/// settled among others leaves a hole rather than shifting the later ones
/// over (the keys of a partition settle out of order); holes at either end
/// go at once, and the rest once they outnumber what is held.
#[derive(Debug, Default)]
pub(super) struct Unacked {
    slots: VecDeque<(u64, Option<Stored>)>,
    held: usize,
}

impl Unacked {
    /// Deliveries held.
    pub(super) fn len(&self) -> usize {
        self.held
    }

    fn hold(&mut self, stored: Stored) {
        let offset = stored.offset;
        self.held += 1;
        if self.slots.back().is_none_or(|(last, _)| *last < offset) {
            self.slots.push_back((offset, Some(stored)));
            return;
        }
        // A redelivery of a released one goes back to its offset, or to
        // the hole it left.
        let at = self.slots.partition_point(|(o, _)| *o < offset);
        match self.slots.get_mut(at) {
            Some((o, slot)) if *o == offset && slot.is_none() => *slot = Some(stored),
            _ => self.slots.insert(at, (offset, Some(stored))),
        }
    }

    fn take(&mut self, offset: u64) -> Option<Stored> {
        let at = self.slots.binary_search_by_key(&offset, |(o, _)| *o).ok()?;
        let stored = self.slots.get_mut(at)?.1.take()?;
        self.held -= 1;
        while self.slots.front().is_some_and(|(_, s)| s.is_none()) {
            self.slots.pop_front();
        }
        while self.slots.back().is_some_and(|(_, s)| s.is_none()) {
            self.slots.pop_back();
        }
        // One delivery held long (a retry in place) must not keep a hole
        // for every delivery settled after it.
        if self.slots.len() > 2 * self.held + 64 {
            self.slots.retain(|(_, s)| s.is_some());
        }
        Some(stored)
    }

    /// Every delivery held, in offset order; none is held after.
    pub(super) fn take_all(&mut self) -> impl Iterator<Item = Stored> + use<> {
        self.held = 0;
        std::mem::take(&mut self.slots)
            .into_iter()
            .filter_map(|(_, s)| s)
    }

    /// The first delivery held (never a hole: those at the front go at
    /// once).
    fn front(&self) -> Option<&Stored> {
        self.slots.front().and_then(|(_, s)| s.as_ref())
    }
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
        self.unacked.hold(stored);
    }

    /// The unacked delivery at `offset`, no longer held; `None` when it
    /// was settled already (or given back by its source).
    pub(super) fn take_unacked(&mut self, offset: u64) -> Option<Stored> {
        self.unacked.take(offset)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(offset: u64) -> Stored {
        Stored {
            offset,
            message: Message::raw(offset.to_string().into_bytes()),
            at: Instant::now(),
        }
    }

    #[test]
    fn settles_out_of_order_leave_holes_that_a_redelivery_fills_and_the_ends_drop() {
        let mut u = Unacked::default();
        for offset in 0..5 {
            u.hold(stored(offset));
        }
        assert!(u.take(2).is_some());
        assert!(u.take(2).is_none(), "settled once");
        assert_eq!(u.len(), 4);
        // Released, then delivered again: back in its hole.
        u.hold(stored(2));
        assert_eq!(u.len(), 5);
        assert!(u.take(0).is_some());
        assert_eq!(u.front().map(|s| s.offset), Some(1));
        assert!(u.take(4).is_some());
        assert!(u.take(3).is_some());
        assert_eq!(u.slots.len(), 2, "holes at either end go at once");
        let left: Vec<u64> = u.take_all().map(|s| s.offset).collect();
        assert_eq!(left, [1, 2]);
        assert_eq!(u.len(), 0);
    }

    #[test]
    fn one_delivery_held_long_does_not_keep_a_hole_per_later_settle() {
        let mut u = Unacked::default();
        for offset in 0..=1_000 {
            u.hold(stored(offset));
        }
        // 0 and 1 000 stay held; everything between settles.
        for offset in 1..1_000 {
            assert!(u.take(offset).is_some());
            assert!(u.slots.len() <= 2 * u.len() + 64 + 1, "{}", u.slots.len());
        }
        assert_eq!(u.len(), 2);
        let left: Vec<u64> = u.take_all().map(|s| s.offset).collect();
        assert_eq!(left, [0, 1_000]);
    }
}
