//! What a publish still has to send, one queue per key, and how the next
//! `PutRecords` calls are cut from it.
//!
//! A call holds at most one record per key, and a key's next record is
//! offered only once the one before it is stored: Kinesis handles the
//! records of one `PutRecords` call independently, so two records of a key
//! in one call could be stored out of order when the first fails. A key
//! whose front record failed waits (its backoff) while other keys go on.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use crate::client::PutEntry;

/// The most records one `PutRecords` call carries.
pub const MAX_RECORDS_PER_CALL: usize = 500;
/// The most bytes (data and partition keys) one `PutRecords` call carries.
pub const MAX_BYTES_PER_CALL: usize = 5 * 1024 * 1024;
/// The most bytes (data and partition key) of one record.
pub const MAX_RECORD_BYTES: usize = 1024 * 1024;

/// One record on its way: its index in the publish, its key's queue and
/// how many times it was sent.
#[derive(Debug, Clone)]
pub struct Pending {
    /// Its index in the publish's batch.
    pub index: usize,
    /// The ordering key (a keyless message has a key of its own).
    pub key: String,
    /// The record.
    pub entry: PutEntry,
    /// Calls it was in so far.
    pub attempts: u32,
}

#[derive(Debug)]
struct KeyQueue {
    records: VecDeque<Pending>,
    /// The queue's front record may not be sent before this.
    ready_at: Option<Instant>,
}

/// The records still to send, queued by key in the publish's order.
#[derive(Debug, Default)]
pub struct Plan {
    queues: HashMap<String, KeyQueue>,
    /// Keys in the order they first appeared, so calls are filled fairly
    /// and deterministically.
    order: Vec<String>,
}

impl Plan {
    /// Queues `pending` behind its key's earlier records.
    pub fn push(&mut self, pending: Pending) {
        let queue = self.queues.entry(pending.key.clone()).or_insert_with(|| {
            self.order.push(pending.key.clone());
            KeyQueue {
                records: VecDeque::new(),
                ready_at: None,
            }
        });
        queue.records.push_back(pending);
    }

    /// Whether nothing is left to send.
    pub fn is_empty(&self) -> bool {
        self.queues.values().all(|q| q.records.is_empty())
    }

    /// The calls to make now: the front record of every key that is ready
    /// at `now`, at most [`MAX_RECORDS_PER_CALL`] records and
    /// [`MAX_BYTES_PER_CALL`] bytes a call. The records leave their queues
    /// until [`Plan::retry`] puts one back.
    pub fn next_wave(&mut self, now: Instant) -> Vec<Vec<Pending>> {
        let mut calls: Vec<Vec<Pending>> = Vec::new();
        let mut bytes = 0;
        for key in &self.order {
            let Some(queue) = self.queues.get_mut(key) else {
                continue;
            };
            if queue.ready_at.is_some_and(|at| at > now) {
                continue;
            }
            let Some(pending) = queue.records.pop_front() else {
                continue;
            };
            queue.ready_at = None;
            let size = pending.entry.size();
            match calls.last_mut() {
                Some(call)
                    if call.len() < MAX_RECORDS_PER_CALL && bytes + size <= MAX_BYTES_PER_CALL =>
                {
                    bytes += size;
                    call.push(pending);
                }
                _ => {
                    bytes = size;
                    calls.push(vec![pending]);
                }
            }
        }
        calls
    }

    /// Puts `pending` back at the front of its key's queue, not to be sent
    /// before `at`.
    pub fn retry(&mut self, pending: Pending, at: Instant) {
        let queue = self
            .queues
            .entry(pending.key.clone())
            .or_insert_with(|| KeyQueue {
                records: VecDeque::new(),
                ready_at: None,
            });
        queue.ready_at = Some(at);
        queue.records.push_front(pending);
    }

    /// Takes out every record still queued for `key`: its earlier record
    /// failed for good, so they must not be sent after it.
    pub fn abandon(&mut self, key: &str) -> Vec<Pending> {
        self.queues
            .remove(key)
            .map(|q| q.records.into())
            .unwrap_or_default()
    }

    /// When the earliest waiting key is ready, if every key left waits.
    pub fn next_ready(&self) -> Option<Instant> {
        self.queues
            .values()
            .filter(|q| !q.records.is_empty())
            .filter_map(|q| q.ready_at)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;

    fn pending(index: usize, key: &str, bytes: usize) -> Pending {
        Pending {
            index,
            key: key.to_owned(),
            entry: PutEntry {
                partition_key: key.to_owned(),
                data: Bytes::from(vec![0; bytes]),
            },
            attempts: 0,
        }
    }

    fn indices(calls: &[Vec<Pending>]) -> Vec<Vec<usize>> {
        calls
            .iter()
            .map(|c| c.iter().map(|p| p.index).collect())
            .collect()
    }

    #[test]
    fn a_call_holds_one_record_per_key_and_the_next_follows_once_stored() {
        let mut plan = Plan::default();
        for (i, key) in ["a", "b", "a", "c", "a"].into_iter().enumerate() {
            plan.push(pending(i, key, 10));
        }
        let now = Instant::now();
        assert_eq!(indices(&plan.next_wave(now)), vec![vec![0, 1, 3]]);
        assert_eq!(indices(&plan.next_wave(now)), vec![vec![2]]);
        assert_eq!(indices(&plan.next_wave(now)), vec![vec![4]]);
        assert!(plan.is_empty());
    }

    #[test]
    fn calls_stay_within_500_records_and_5_mib() {
        let mut plan = Plan::default();
        for i in 0..1_200 {
            plan.push(pending(i, &format!("k{i}"), 10));
        }
        let calls = plan.next_wave(Instant::now());
        let sizes: Vec<usize> = calls.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![500, 500, 200]);

        let mut plan = Plan::default();
        for i in 0..7 {
            plan.push(pending(i, &format!("k{i}"), MAX_RECORD_BYTES - 10));
        }
        let calls = plan.next_wave(Instant::now());
        assert_eq!(calls.iter().map(Vec::len).collect::<Vec<_>>(), vec![5, 2]);
    }

    #[test]
    fn a_retried_record_waits_with_its_key_while_other_keys_go_on() {
        let mut plan = Plan::default();
        for (i, key) in ["a", "a", "b", "b"].into_iter().enumerate() {
            plan.push(pending(i, key, 1));
        }
        let now = Instant::now();
        let mut wave = plan.next_wave(now).remove(0);
        assert_eq!(wave.iter().map(|p| p.index).collect::<Vec<_>>(), vec![0, 2]);
        let failed = wave.remove(0);
        let later = now + Duration::from_millis(50);
        plan.retry(failed, later);
        assert_eq!(indices(&plan.next_wave(now)), vec![vec![3]]);
        assert!(plan.next_wave(now).is_empty());
        assert_eq!(plan.next_ready(), Some(later));
        assert_eq!(indices(&plan.next_wave(later)), vec![vec![0]]);
        assert_eq!(indices(&plan.next_wave(later)), vec![vec![1]]);
        assert!(plan.is_empty());
    }

    #[test]
    fn abandoning_a_key_takes_its_later_records_out() {
        let mut plan = Plan::default();
        for (i, key) in ["a", "a", "a", "b"].into_iter().enumerate() {
            plan.push(pending(i, key, 1));
        }
        let _first = plan.next_wave(Instant::now());
        let held: Vec<usize> = plan.abandon("a").iter().map(|p| p.index).collect();
        assert_eq!(held, vec![1, 2]);
        assert!(plan.is_empty());
    }
}
