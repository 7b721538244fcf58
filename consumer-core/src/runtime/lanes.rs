//! Per-key lanes: each partition key's deliveries run one at a time, in
//! arrival order; different keys run in parallel.
//!
//! A lane exists while its key has deliveries queued or running: the first
//! delivery of an idle key starts a lane, which takes the key's next
//! delivery until none is left. A delivery without a key gets a lane of its
//! own (its id).
//!
//! Lane tasks outlive their lanes: a task whose key ran out of deliveries
//! waits, idle, to be handed the next key that starts a lane, so a key
//! that comes back costs a wake-up rather than a task spawned and joined.
//! There are never more lane tasks than lanes ever ran at once (at most
//! `max_in_flight`, each holding a permit while it runs); the idle ones end
//! at shutdown, once the running ones drained. Lanes are found by a keyed hash of the key (SipHash with a
//! random key, so producers cannot aim at collisions): two keys whose
//! 64-bit hashes collide would share a lane, which costs parallelism, never
//! order.

use std::collections::hash_map::{Entry, RandomState};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::{Mutex, PoisonError};

use tokio::sync::Notify;

use super::Job;
use crate::envelope::Envelope;

/// Queued jobs by lane id (the keyed hash of their partition key): one
/// hash per delivery, and no copy of the key.
type Queues<A> = HashMap<u64, VecDeque<Job<A>>, BuildHasherDefault<LaneIdHasher>>;

/// The lanes' queues, and the emptied queues of lanes that ended, kept for
/// the next lanes to start: keys come and go all the time, and a queue
/// allocated and grown afresh for each new lane costs more than the rest
/// of the hand-over.
struct Lanes<A> {
    queues: Queues<A>,
    spare: Vec<VecDeque<Job<A>>>,
}

impl<A> Default for Lanes<A> {
    fn default() -> Self {
        Self {
            queues: Queues::default(),
            spare: Vec::new(),
        }
    }
}

/// Spare queues kept at most, and the largest capacity kept (a queue a
/// backlog grew is let go): a bound on what the spares hold.
const MAX_SPARE: usize = 256;
const MAX_SPARE_CAPACITY: usize = 16;

/// Hashes a lane id, already a keyed hash, as itself.
#[derive(Default)]
struct LaneIdHasher(u64);

impl Hasher for LaneIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Lanes started and handed to idle lane tasks, and the tasks waiting.
struct IdleLanes<A> {
    /// Handed over, not picked up yet.
    handed: VecDeque<(u64, Job<A>)>,
    /// Idle tasks not handed a lane yet.
    waiting: usize,
    /// Shutdown drained: idle tasks end.
    closed: bool,
}

impl<A> Default for IdleLanes<A> {
    fn default() -> Self {
        Self {
            handed: VecDeque::new(),
            waiting: 0,
            closed: false,
        }
    }
}

/// The lanes of one consumer: each key's queued jobs, and the lane tasks
/// that wait, idle, to be handed a lane.
pub(super) struct LaneTable<A> {
    lanes: Mutex<Lanes<A>>,
    /// Lane tasks whose key ran out of deliveries, waiting for another key.
    idle: Mutex<IdleLanes<A>>,
    /// Wakes an idle lane task handed a key.
    idle_wake: Notify,
    /// Hashes partition keys into lane ids.
    lane_keys: RandomState,
}

impl<A> Default for LaneTable<A> {
    fn default() -> Self {
        Self {
            lanes: Mutex::new(Lanes::default()),
            idle: Mutex::new(IdleLanes::default()),
            idle_wake: Notify::new(),
            lane_keys: RandomState::new(),
        }
    }
}

fn lane_key(envelope: &Envelope) -> &str {
    envelope.key.as_deref().unwrap_or(&envelope.id)
}

impl<A> LaneTable<A> {
    /// Queues `job` behind its key's lane, or returns it with its lane id
    /// when the key has no lane and one must be started.
    pub(super) fn enqueue(&self, job: Job<A>) -> Option<(u64, Job<A>)> {
        let lane = self.lane_keys.hash_one(lane_key(&job.envelope));
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        let Lanes { queues, spare } = &mut *lanes;
        match queues.entry(lane) {
            Entry::Occupied(mut queue) => {
                queue.get_mut().push_back(job);
                None
            }
            Entry::Vacant(slot) => {
                slot.insert(spare.pop().unwrap_or_default());
                Some((lane, job))
            }
        }
    }

    /// Hands a started lane to an idle lane task, or returns it when none
    /// waits and a task must be spawned.
    pub(super) fn hand_to_idle(&self, lane: u64, first: Job<A>) -> Option<(u64, Job<A>)> {
        {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            if idle.waiting == 0 || idle.closed {
                return Some((lane, first));
            }
            idle.waiting -= 1;
            idle.handed.push_back((lane, first));
        }
        self.idle_wake.notify_one();
        None
    }

    /// Ends the idle lane tasks (and those that go idle from now on).
    pub(super) fn close_idle_lanes(&self) {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .closed = true;
        self.idle_wake.notify_waiters();
    }

    /// Waits, idle, to be handed a lane; `None` once closed.
    pub(super) async fn next_lane(&self) -> Option<(u64, Job<A>)> {
        loop {
            let woken = self.idle_wake.notified();
            tokio::pin!(woken);
            {
                let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(handed) = idle.handed.pop_front() {
                    return Some(handed);
                }
                if idle.closed {
                    return None;
                }
                idle.waiting += 1;
                // Registered before the lock is let go: a hand-over or the
                // close that follows wakes this task.
                woken.as_mut().enable();
            }
            woken.await;
        }
    }

    /// The lane's next job; `None` when its queue is empty, which ends the
    /// lane (the key's next delivery starts a new one).
    pub(super) fn next_in_lane(&self, lane: u64) -> Option<Job<A>> {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        let Lanes { queues, spare } = &mut *lanes;
        match queues.entry(lane) {
            Entry::Occupied(mut queue) => {
                let next = queue.get_mut().pop_front();
                if next.is_none() {
                    let emptied = queue.remove();
                    if spare.len() < MAX_SPARE && emptied.capacity() <= MAX_SPARE_CAPACITY {
                        spare.push(emptied);
                    }
                }
                next
            }
            Entry::Vacant(_) => None,
        }
    }
}
