//! A dedup store in process memory.
//!
//! Same claim semantics as the SQL stores (a key claimed by an open
//! transaction blocks a second claim until that transaction ends, then the
//! second sees a duplicate or claims it), but nothing survives the process:
//! use it for tests, benchmarks and demos, never where a restart must not
//! reprocess messages. Memory grows with every key until [`MemoryStore::purge`].

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use time::OffsetDateTime;
use tokio::sync::Notify;

use super::{Claim, DedupStore, FailureRecord};

mod held;
mod paused;
use crate::dead_letter::DeadLetter;
use crate::error::Error;

/// An in-memory [`DedupStore`]; clones share the same keys.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    state: Mutex<State>,
    released: Notify,
}

#[derive(Debug, Default)]
struct State {
    /// `handler \0 key` → claimed by an open transaction (`None`) or
    /// committed at that instant.
    keys: HashMap<String, Option<Instant>>,
    attempts: HashMap<String, Attempts>,
    /// The dead-letter table: letters the broker refused, and why.
    dead_letters: Vec<(DeadLetter, String)>,
    /// Held keys (`handler \0 key`), with their parked messages.
    holds: HashMap<String, held::Hold>,
    /// Paused handlers, by name.
    paused: std::collections::BTreeMap<String, crate::store::paused::PausedHandler>,
}

#[derive(Debug, Clone, Copy)]
struct Attempts {
    count: u32,
    first_failure: OffsetDateTime,
    dead_lettered: bool,
}

fn slot(handler: &str, key: &str) -> String {
    let mut s = String::with_capacity(handler.len() + key.len() + 1);
    s.push_str(handler);
    s.push('\0');
    s.push_str(key);
    s
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets committed keys older than `age`; returns how many went.
    pub fn purge(&self, age: Duration) -> usize {
        let mut state = self.lock();
        let before = state.keys.len();
        let now = Instant::now();
        state
            .keys
            .retain(|_, at| at.is_none_or(|t| now.duration_since(t) < age));
        before - state.keys.len()
    }

    /// Committed keys held.
    pub fn len(&self) -> usize {
        self.lock().keys.values().filter(|v| v.is_some()).count()
    }

    /// The dead-letter table: letters the broker refused for good, with
    /// why, oldest first.
    pub fn dead_letters(&self) -> Vec<(DeadLetter, String)> {
        self.lock().dead_letters.clone()
    }

    /// Whether no key is committed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn finish(&self, slot: &str, commit: bool) {
        {
            let mut state = self.lock();
            if commit {
                if let Some(at) = state.keys.get_mut(slot) {
                    *at = Some(Instant::now());
                }
            } else {
                state.keys.remove(slot);
            }
        }
        self.inner.released.notify_waiters();
    }
}

/// The "transaction" of a [`MemoryStore`]: holds the claim until committed;
/// dropping it rolls the claim back.
#[derive(Debug)]
pub struct MemoryTx {
    store: MemoryStore,
    slot: String,
    /// The other keys of a batch's transaction (empty otherwise: no
    /// allocation on the one-message path).
    more: Vec<String>,
    done: bool,
}

impl MemoryTx {
    fn end(&mut self, commit: bool) {
        self.done = true;
        self.store.finish(&self.slot, commit);
        for slot in &self.more {
            self.store.finish(slot, commit);
        }
    }
}

impl Drop for MemoryTx {
    fn drop(&mut self) {
        if !self.done {
            self.end(false);
        }
    }
}

impl DedupStore for MemoryStore {
    type Tx = MemoryTx;

    async fn claim(
        &self,
        handler: &str,
        key: &str,
        _message_id: &str,
    ) -> Result<Claim<MemoryTx>, Error> {
        let mut slot = slot(handler, key);
        loop {
            let released = self.inner.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            {
                let mut state = self.lock();
                // One lookup (one hash of the slot) whatever the outcome.
                match state.keys.entry(slot) {
                    Entry::Occupied(o) if o.get().is_some() => return Ok(Claim::Duplicate),
                    // Another transaction holds it: wait.
                    Entry::Occupied(o) => slot = o.key().clone(),
                    Entry::Vacant(v) => {
                        let slot = v.key().clone();
                        v.insert(None);
                        return Ok(Claim::Fresh(MemoryTx {
                            store: self.clone(),
                            slot,
                            more: Vec::new(),
                            done: false,
                        }));
                    }
                }
            }
            released.await;
        }
    }

    /// Claims the keys one by one in key order (waiting, as `claim` does,
    /// for a key another transaction holds), into one transaction.
    async fn claim_batch(
        &self,
        handler: &str,
        claims: &[(&str, &str)],
    ) -> Result<(MemoryTx, Vec<bool>), Error> {
        let mut order: Vec<usize> = (0..claims.len()).collect();
        order.sort_by(|a, b| claims[*a].0.cmp(claims[*b].0));
        let mut fresh = vec![false; claims.len()];
        let mut slots: Vec<String> = Vec::new();
        for i in order {
            let (key, id) = claims[i];
            if let Claim::Fresh(mut tx) = self.claim(handler, key, id).await? {
                tx.done = true;
                slots.push(std::mem::take(&mut tx.slot));
                fresh[i] = true;
            }
        }
        let mut slots = slots.into_iter();
        let tx = MemoryTx {
            store: self.clone(),
            slot: slots.next().unwrap_or_default(),
            more: slots.collect(),
            done: false,
        };
        Ok((tx, fresh))
    }

    async fn commit(&self, mut tx: MemoryTx) -> Result<(), Error> {
        tx.end(true);
        Ok(())
    }

    async fn rollback(&self, mut tx: MemoryTx) -> Result<(), Error> {
        tx.end(false);
        Ok(())
    }

    async fn record_failure(
        &self,
        handler: &str,
        message_id: &str,
        _error: &str,
    ) -> Result<FailureRecord, Error> {
        let mut state = self.lock();
        let a = state
            .attempts
            .entry(slot(handler, message_id))
            .or_insert(Attempts {
                count: 0,
                first_failure: OffsetDateTime::now_utc(),
                dead_lettered: false,
            });
        a.count += 1;
        Ok(FailureRecord {
            attempts: a.count,
            first_failure: a.first_failure,
        })
    }

    async fn clear_failures(&self, handler: &str, message_id: &str) -> Result<(), Error> {
        self.lock().attempts.remove(&slot(handler, message_id));
        Ok(())
    }

    async fn was_dead_lettered(&self, handler: &str, message_id: &str) -> Result<bool, Error> {
        Ok(self
            .lock()
            .attempts
            .get(&slot(handler, message_id))
            .is_some_and(|a| a.dead_lettered))
    }

    async fn mark_dead_lettered(
        &self,
        handler: &str,
        message_id: &str,
        _error: &str,
    ) -> Result<(), Error> {
        self.lock()
            .attempts
            .entry(slot(handler, message_id))
            .or_insert(Attempts {
                count: 1,
                first_failure: OffsetDateTime::now_utc(),
                dead_lettered: false,
            })
            .dead_lettered = true;
        Ok(())
    }

    async fn store_dead_letter(&self, letter: &DeadLetter, refusal: &str) -> Result<bool, Error> {
        let mut state = self.lock();
        let a = state
            .attempts
            .entry(slot(&letter.handler, &letter.message_id))
            .or_insert(Attempts {
                count: 1,
                first_failure: letter.first_failure,
                dead_lettered: false,
            });
        if a.dead_lettered {
            return Ok(false);
        }
        a.dead_lettered = true;
        state
            .dead_letters
            .push((letter.clone(), refusal.to_owned()));
        Ok(true)
    }

    fn retention(&self) -> Duration {
        Duration::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_claim_waits_for_the_open_transaction_then_sees_the_outcome() {
        let store = MemoryStore::new();
        let Ok(Claim::Fresh(tx)) = store.claim("h", "k", "m").await else {
            panic!("first claim is fresh");
        };
        let second = tokio::spawn({
            let store = store.clone();
            async move { matches!(store.claim("h", "k", "m").await, Ok(Claim::Duplicate)) }
        });
        tokio::task::yield_now().await;
        assert!(
            !second.is_finished(),
            "the second claim waits for the first transaction"
        );
        store.commit(tx).await.expect("commit");
        assert!(
            second.await.expect("join"),
            "after the commit it is a duplicate"
        );

        let Ok(Claim::Fresh(tx)) = store.claim("h", "k2", "m").await else {
            panic!("fresh");
        };
        drop(tx); // rolled back
        assert!(matches!(
            store.claim("h", "k2", "m").await,
            Ok(Claim::Fresh(_))
        ));
        assert!(
            matches!(store.claim("other", "k", "m").await, Ok(Claim::Fresh(_))),
            "scoped by handler"
        );
    }
}
