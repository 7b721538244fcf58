//! Leases and checkpoints: which instance reads a shard, and how far its
//! records are done.
//!
//! Kinesis acknowledges nothing per record: a reader owns a shard and
//! checkpoints a sequence number. As the KCL does (but in the store's
//! database rather than DynamoDB), each shard has
//!
//! * a [`Lease`]: its owner, when it expires, and a counter that every
//!   change increments. A lease that is not renewed before it expires may
//!   be taken by another instance; a take or a renewal names the counter
//!   it saw, so of two instances racing for a lease exactly one wins.
//! * a [`Checkpoint`]: the last sequence number whose record is settled,
//!   or [`Checkpoint::ShardEnd`] once a closed shard is read to its end
//!   (what lets its children be read, see [`shards`](crate::shards)).
//!   Only the lease's owner writes it, and it never moves back.
//!
//! Instances share the shards fairly ([`balance`]): one holding fewer than
//! its share takes an expired lease, or a surplus one from an instance
//! holding more, so a new instance gets work without waiting for a crash.
//!
//! [`LeaseStore`] is what a store implements; [`MemoryLeaseStore`] keeps
//! them in memory (tests, a single process). The transitions themselves
//! are [`Lease`]'s methods, so every store applies the same rules.

pub mod balance;
mod checkpoint;
mod memory;

use std::future::Future;
use std::time::SystemTime;

pub use checkpoint::{Checkpoint, CheckpointWrite};
pub use memory::MemoryLeaseStore;

/// One shard's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The shard.
    pub shard_id: String,
    /// The instance holding it, if any.
    pub owner: Option<String>,
    /// When it ends unless renewed.
    pub expires_at: SystemTime,
    /// Incremented by every take, renewal and release.
    pub counter: u64,
}

impl Lease {
    /// A lease nobody holds yet.
    pub fn unowned(shard_id: impl Into<String>) -> Self {
        Self {
            shard_id: shard_id.into(),
            owner: None,
            expires_at: SystemTime::UNIX_EPOCH,
            counter: 0,
        }
    }

    /// Whether an instance holds it at `now`.
    pub fn is_held_at(&self, now: SystemTime) -> bool {
        self.owner.is_some() && self.expires_at > now
    }

    /// Whether `owner` holds it at `now`.
    pub fn is_held_by(&self, owner: &str, now: SystemTime) -> bool {
        self.is_held_at(now) && self.owner.as_deref() == Some(owner)
    }

    /// `owner` takes it until `until`, if the lease is still as seen
    /// (`seen_counter`) and, unless `steal`, free at `now`; `None` when
    /// another instance changed it first or it is held.
    #[must_use]
    pub fn taken(
        &self,
        owner: &str,
        seen_counter: u64,
        until: SystemTime,
        now: SystemTime,
        steal: bool,
    ) -> Option<Self> {
        if self.counter != seen_counter || (!steal && self.is_held_at(now)) {
            return None;
        }
        Some(self.changed(Some(owner), until))
    }

    /// Renewed until `until`, if `owner` still holds it at `now`; `None`
    /// when it was lost (taken, released, or expired).
    #[must_use]
    pub fn renewed(&self, owner: &str, until: SystemTime, now: SystemTime) -> Option<Self> {
        self.is_held_by(owner, now)
            .then(|| self.changed(Some(owner), until))
    }

    /// Released by `owner` (free for anyone at once), if `owner` is its
    /// owner.
    #[must_use]
    pub fn released(&self, owner: &str) -> Option<Self> {
        (self.owner.as_deref() == Some(owner)).then(|| self.changed(None, SystemTime::UNIX_EPOCH))
    }

    fn changed(&self, owner: Option<&str>, expires_at: SystemTime) -> Self {
        Self {
            shard_id: self.shard_id.clone(),
            owner: owner.map(str::to_owned),
            expires_at,
            counter: self.counter.wrapping_add(1),
        }
    }
}

/// Where leases and checkpoints are kept: in memory
/// ([`MemoryLeaseStore`]) or, later, the store's database. Every method
/// applies [`Lease`]'s transitions atomically.
pub trait LeaseStore: Send + Sync + 'static {
    /// Why the store itself failed (a database error); losing a race is
    /// not an error but an answer (`None`, `false`).
    type Error: std::error::Error + Send + Sync + 'static;

    /// Creates an unowned lease for each shard that has none.
    fn ensure(&self, shard_ids: &[String]) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Every lease, by shard id.
    fn leases(&self) -> impl Future<Output = Result<Vec<Lease>, Self::Error>> + Send;

    /// [`Lease::taken`], stored; the lease as taken, or `None`.
    fn take(
        &self,
        shard_id: &str,
        owner: &str,
        seen_counter: u64,
        until: SystemTime,
        steal: bool,
    ) -> impl Future<Output = Result<Option<Lease>, Self::Error>> + Send;

    /// [`Lease::renewed`], stored; the lease as renewed, or `None` when it
    /// was lost.
    fn renew(
        &self,
        shard_id: &str,
        owner: &str,
        until: SystemTime,
    ) -> impl Future<Output = Result<Option<Lease>, Self::Error>> + Send;

    /// [`Lease::released`], stored; whether `owner` held it.
    fn release(
        &self,
        shard_id: &str,
        owner: &str,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Writes `checkpoint` for the shard if `owner` holds its lease and it
    /// does not move back.
    fn checkpoint(
        &self,
        shard_id: &str,
        owner: &str,
        checkpoint: Checkpoint,
    ) -> impl Future<Output = Result<CheckpointWrite, Self::Error>> + Send;

    /// The shard's checkpoint, if one was written.
    fn checkpoint_of(
        &self,
        shard_id: &str,
    ) -> impl Future<Output = Result<Option<Checkpoint>, Self::Error>> + Send;
}

/// A shared store: the instances of one process (and a test that reads
/// the checkpoints) hold the same leases.
impl<T: LeaseStore> LeaseStore for std::sync::Arc<T> {
    type Error = T::Error;

    fn ensure(&self, shard_ids: &[String]) -> impl Future<Output = Result<(), Self::Error>> + Send {
        T::ensure(self, shard_ids)
    }

    fn leases(&self) -> impl Future<Output = Result<Vec<Lease>, Self::Error>> + Send {
        T::leases(self)
    }

    fn take(
        &self,
        shard_id: &str,
        owner: &str,
        seen_counter: u64,
        until: SystemTime,
        steal: bool,
    ) -> impl Future<Output = Result<Option<Lease>, Self::Error>> + Send {
        T::take(self, shard_id, owner, seen_counter, until, steal)
    }

    fn renew(
        &self,
        shard_id: &str,
        owner: &str,
        until: SystemTime,
    ) -> impl Future<Output = Result<Option<Lease>, Self::Error>> + Send {
        T::renew(self, shard_id, owner, until)
    }

    fn release(
        &self,
        shard_id: &str,
        owner: &str,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        T::release(self, shard_id, owner)
    }

    fn checkpoint(
        &self,
        shard_id: &str,
        owner: &str,
        checkpoint: Checkpoint,
    ) -> impl Future<Output = Result<CheckpointWrite, Self::Error>> + Send {
        T::checkpoint(self, shard_id, owner, checkpoint)
    }

    fn checkpoint_of(
        &self,
        shard_id: &str,
    ) -> impl Future<Output = Result<Option<Checkpoint>, Self::Error>> + Send {
        T::checkpoint_of(self, shard_id)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn a_free_lease_is_taken_once_and_a_stale_view_loses() {
        let lease = Lease::unowned("s-0");
        let a = lease
            .taken("a", 0, at(110), at(100), false)
            .expect("a free lease is taken");
        assert_eq!((a.owner.as_deref(), a.counter), (Some("a"), 1));
        assert!(lease.taken("b", 0, at(110), at(100), false).is_some());
        assert!(
            a.taken("b", 0, at(110), at(100), false).is_none(),
            "b saw counter 0, it is 1"
        );
        assert!(
            a.taken("b", 1, at(110), at(105), false).is_none(),
            "held until 110"
        );
        let b = a
            .taken("b", 1, at(130), at(120), false)
            .expect("expired at 110, taken at 120");
        assert_eq!(b.owner.as_deref(), Some("b"));
    }

    #[test]
    fn a_lease_is_renewed_only_while_held_and_released_only_by_its_owner() {
        let held = Lease::unowned("s-0")
            .taken("a", 0, at(110), at(100), false)
            .expect("free");
        let renewed = held.renewed("a", at(120), at(105)).expect("held at 105");
        assert_eq!((renewed.expires_at, renewed.counter), (at(120), 2));
        assert!(
            held.renewed("a", at(130), at(115)).is_none(),
            "expired at 110"
        );
        assert!(held.renewed("b", at(120), at(105)).is_none(), "not b's");
        assert!(renewed.released("b").is_none());
        let free = renewed.released("a").expect("a's");
        assert!(!free.is_held_at(at(105)));
        assert!(
            free.taken("b", free.counter, at(130), at(106), false)
                .is_some()
        );
    }

    #[test]
    fn a_surplus_lease_is_stolen_only_when_asked() {
        let held = Lease::unowned("s-0")
            .taken("a", 0, at(110), at(100), false)
            .expect("free");
        assert!(held.taken("b", 1, at(120), at(105), false).is_none());
        let stolen = held.taken("b", 1, at(120), at(105), true).expect("steal");
        assert_eq!(stolen.owner.as_deref(), Some("b"));
        assert!(stolen.renewed("a", at(130), at(106)).is_none(), "a lost it");
    }
}
