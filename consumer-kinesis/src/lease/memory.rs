//! [`MemoryLeaseStore`]: leases and checkpoints in memory, for tests and
//! for a single process that may lose them when it stops.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use super::{Checkpoint, CheckpointWrite, Lease, LeaseStore};

#[derive(Debug)]
struct Entry {
    lease: Lease,
    checkpoint: Option<Checkpoint>,
}

/// Leases and checkpoints in memory, shared by the clones of an `Arc`;
/// every method is atomic under one lock, its clock the system's.
#[derive(Debug, Default)]
pub struct MemoryLeaseStore {
    shards: Mutex<BTreeMap<String, Entry>>,
}

impl MemoryLeaseStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies `change` to the shard's lease under the lock and stores
    /// what it returns.
    fn update(
        &self,
        shard_id: &str,
        change: impl FnOnce(&Lease) -> Option<Lease>,
    ) -> Option<Lease> {
        let mut shards = self.shards.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = shards.get_mut(shard_id)?;
        let next = change(&entry.lease)?;
        entry.lease = next.clone();
        Some(next)
    }
}

impl LeaseStore for MemoryLeaseStore {
    type Error = Infallible;

    async fn ensure(&self, shard_ids: &[String]) -> Result<(), Infallible> {
        let mut shards = self.shards.lock().unwrap_or_else(PoisonError::into_inner);
        for id in shard_ids {
            shards.entry(id.clone()).or_insert_with(|| Entry {
                lease: Lease::unowned(id.clone()),
                checkpoint: None,
            });
        }
        Ok(())
    }

    async fn leases(&self) -> Result<Vec<Lease>, Infallible> {
        let shards = self.shards.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(shards.values().map(|e| e.lease.clone()).collect())
    }

    async fn take(
        &self,
        shard_id: &str,
        owner: &str,
        seen_counter: u64,
        until: SystemTime,
        steal: bool,
    ) -> Result<Option<Lease>, Infallible> {
        let now = SystemTime::now();
        Ok(self.update(shard_id, |l| {
            l.taken(owner, seen_counter, until, now, steal)
        }))
    }

    async fn renew(
        &self,
        shard_id: &str,
        owner: &str,
        until: SystemTime,
    ) -> Result<Option<Lease>, Infallible> {
        let now = SystemTime::now();
        Ok(self.update(shard_id, |l| l.renewed(owner, until, now)))
    }

    async fn release(&self, shard_id: &str, owner: &str) -> Result<bool, Infallible> {
        Ok(self.update(shard_id, |l| l.released(owner)).is_some())
    }

    async fn checkpoint(
        &self,
        shard_id: &str,
        owner: &str,
        checkpoint: Checkpoint,
    ) -> Result<CheckpointWrite, Infallible> {
        let now = SystemTime::now();
        let mut shards = self.shards.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = shards.get_mut(shard_id) else {
            return Ok(CheckpointWrite::NotOwner);
        };
        if !entry.lease.is_held_by(owner, now) {
            return Ok(CheckpointWrite::NotOwner);
        }
        if entry
            .checkpoint
            .as_ref()
            .is_some_and(|c| checkpoint.position_cmp(c).is_lt())
        {
            return Ok(CheckpointWrite::Behind);
        }
        entry.checkpoint = Some(checkpoint);
        Ok(CheckpointWrite::Written)
    }

    async fn checkpoint_of(&self, shard_id: &str) -> Result<Option<Checkpoint>, Infallible> {
        let shards = self.shards.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(shards.get(shard_id).and_then(|e| e.checkpoint.clone()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::lease::balance;

    fn shards(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("shardId-{i:012}")).collect()
    }

    async fn rebalance(store: &MemoryLeaseStore, me: &str, until: SystemTime) {
        let leases = store.leases().await.expect("in memory");
        let moves = balance::moves(&leases, me, SystemTime::now());
        for l in moves.take {
            store
                .take(&l.shard_id, me, l.counter, until, false)
                .await
                .expect("in memory");
        }
        if let Some(l) = moves.steal {
            store
                .take(&l.shard_id, me, l.counter, until, true)
                .await
                .expect("in memory");
        }
    }

    fn held_by(leases: &[Lease], owner: &str) -> usize {
        let now = SystemTime::now();
        leases.iter().filter(|l| l.is_held_by(owner, now)).count()
    }

    #[tokio::test]
    async fn three_instances_converge_on_fair_shares_and_a_dead_ones_leases_move() {
        let store = MemoryLeaseStore::new();
        store.ensure(&shards(4)).await.expect("in memory");
        let later = SystemTime::now() + Duration::from_secs(60);
        rebalance(&store, "a", later).await;
        assert_eq!(held_by(&store.leases().await.expect("mem"), "a"), 4);
        for _ in 0..3 {
            for me in ["b", "c"] {
                rebalance(&store, me, later).await;
            }
        }
        let leases = store.leases().await.expect("in memory");
        let counts: Vec<usize> = ["a", "b", "c"]
            .iter()
            .map(|o| held_by(&leases, o))
            .collect();
        assert_eq!(counts.iter().sum::<usize>(), 4);
        assert!(counts.iter().all(|c| (1..=2).contains(c)), "{counts:?}");
        // c stops renewing: its leases expire and the others take them.
        for l in leases.iter().filter(|l| l.owner.as_deref() == Some("c")) {
            store
                .take(&l.shard_id, "c", l.counter, SystemTime::now(), true)
                .await
                .expect("in memory");
        }
        for me in ["a", "b"] {
            rebalance(&store, me, later).await;
        }
        let leases = store.leases().await.expect("in memory");
        assert_eq!((held_by(&leases, "a"), held_by(&leases, "b")), (2, 2));
    }

    #[tokio::test]
    async fn only_the_owner_checkpoints_and_never_backwards() {
        let store = MemoryLeaseStore::new();
        let shard = "shardId-000000000000";
        store.ensure(&[shard.to_owned()]).await.expect("in memory");
        let until = SystemTime::now() + Duration::from_secs(60);
        let lease = store
            .take(shard, "a", 0, until, false)
            .await
            .expect("in memory")
            .expect("a free lease");
        assert!(
            store
                .take(shard, "b", 0, until, false)
                .await
                .expect("mem")
                .is_none()
        );
        let at = |s: &str| Checkpoint::At(s.to_owned());
        assert_eq!(
            store.checkpoint(shard, "b", at("5")).await.expect("mem"),
            CheckpointWrite::NotOwner
        );
        assert_eq!(
            store.checkpoint(shard, "a", at("10")).await.expect("mem"),
            CheckpointWrite::Written
        );
        assert_eq!(
            store.checkpoint(shard, "a", at("9")).await.expect("mem"),
            CheckpointWrite::Behind
        );
        assert_eq!(
            store
                .checkpoint(shard, "a", Checkpoint::ShardEnd)
                .await
                .expect("mem"),
            CheckpointWrite::Written
        );
        assert_eq!(
            store.checkpoint_of(shard).await.expect("mem"),
            Some(Checkpoint::ShardEnd)
        );
        let renewed = store
            .renew(shard, "a", until)
            .await
            .expect("mem")
            .expect("held");
        assert_eq!(renewed.counter, lease.counter + 1);
        assert!(store.release(shard, "a").await.expect("mem"));
        assert!(
            store.renew(shard, "a", until).await.expect("mem").is_none(),
            "released"
        );
        assert_eq!(
            store
                .checkpoint(shard, "a", Checkpoint::ShardEnd)
                .await
                .expect("mem"),
            CheckpointWrite::NotOwner
        );
    }
}
