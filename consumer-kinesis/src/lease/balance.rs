//! Fair shares: which leases an instance takes this round.
//!
//! Every instance runs the same rule on the same table, so they converge
//! without talking to each other: the instances are the owners of leases
//! held now, the caller included; each one's share is
//! `ceil(shards / instances)`. An instance holding fewer than its share
//! takes free or expired leases first and, when there are none, one lease
//! of the instance holding the most, if that one holds more than its
//! share: one at a time, so leases do not bounce between instances.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use super::Lease;

/// What an instance should take this round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Moves {
    /// Free or expired leases, as seen (take them with their counter).
    pub take: Vec<Lease>,
    /// A lease to take from an instance holding more than its share.
    pub steal: Option<Lease>,
}

/// `ceil(shards / instances)` (every shard when there is no instance).
pub fn fair_share(shards: usize, instances: usize) -> usize {
    shards.div_ceil(instances.max(1))
}

/// What `me` should take of `leases` at `now` to reach its share.
pub fn moves(leases: &[Lease], me: &str, now: SystemTime) -> Moves {
    let mut held: BTreeMap<&str, Vec<&Lease>> = BTreeMap::new();
    for lease in leases.iter().filter(|l| l.is_held_at(now)) {
        if let Some(owner) = lease.owner.as_deref() {
            held.entry(owner).or_default().push(lease);
        }
    }
    let instances: BTreeSet<&str> = held.keys().copied().chain([me]).collect();
    let share = fair_share(leases.len(), instances.len());
    let mine = held.get(me).map_or(0, Vec::len);
    let Some(wanted) = share.checked_sub(mine).filter(|w| *w > 0) else {
        return Moves::default();
    };
    let mut free: Vec<&Lease> = leases.iter().filter(|l| !l.is_held_at(now)).collect();
    free.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
    let take: Vec<Lease> = free.into_iter().take(wanted).cloned().collect();
    let steal = if take.is_empty() {
        held.iter()
            .filter(|(owner, _)| **owner != me)
            .max_by_key(|(owner, leases)| (leases.len(), std::cmp::Reverse(**owner)))
            .filter(|(_, leases)| leases.len() > share)
            .and_then(|(_, leases)| leases.iter().min_by(|a, b| a.shard_id.cmp(&b.shard_id)))
            .map(|l| (*l).clone())
    } else {
        None
    };
    Moves { take, steal }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn lease(shard: &str, owner: Option<&str>, until: u64) -> Lease {
        Lease {
            shard_id: shard.to_owned(),
            owner: owner.map(str::to_owned),
            expires_at: at(until),
            counter: 3,
        }
    }

    fn ids(leases: &[Lease]) -> Vec<&str> {
        leases.iter().map(|l| l.shard_id.as_str()).collect()
    }

    #[test]
    fn the_share_is_the_ceiling() {
        assert_eq!(fair_share(4, 3), 2);
        assert_eq!(fair_share(3, 3), 1);
        assert_eq!(fair_share(5, 0), 5);
    }

    #[test]
    fn a_lone_instance_takes_every_free_and_expired_lease() {
        let leases = [
            lease("s-1", None, 0),
            lease("s-0", Some("gone"), 50),
            lease("s-2", None, 0),
        ];
        let m = moves(&leases, "a", at(100));
        assert_eq!(ids(&m.take), ["s-0", "s-1", "s-2"]);
        assert_eq!(m.steal, None);
    }

    #[test]
    fn a_new_instance_steals_one_surplus_lease_at_a_time() {
        let leases = [
            lease("s-0", Some("a"), 200),
            lease("s-1", Some("a"), 200),
            lease("s-2", Some("a"), 200),
            lease("s-3", Some("a"), 200),
        ];
        let m = moves(&leases, "b", at(100));
        assert!(m.take.is_empty());
        assert_eq!(m.steal.map(|l| l.shard_id), Some("s-0".to_owned()));
        // a at its share (2 of 4 for 2 instances) gives nothing more.
        let balanced = [
            lease("s-0", Some("b"), 200),
            lease("s-1", Some("b"), 200),
            lease("s-2", Some("a"), 200),
            lease("s-3", Some("a"), 200),
        ];
        assert_eq!(moves(&balanced, "b", at(100)), Moves::default());
        assert_eq!(
            moves(&balanced, "c", at(100)),
            Moves::default(),
            "3 instances: share 2, nobody over it"
        );
    }

    #[test]
    fn an_instance_at_its_share_takes_nothing_even_if_leases_are_free() {
        let leases = [
            lease("s-0", Some("a"), 200),
            lease("s-1", Some("b"), 200),
            lease("s-2", None, 0),
        ];
        // 3 shards, 2 instances: share 2; a holds 1, so it may take s-2.
        assert_eq!(ids(&moves(&leases, "a", at(100)).take), ["s-2"]);
        let leases = [lease("s-0", Some("a"), 200), lease("s-1", None, 0)];
        // 2 shards, a alone: share 2.
        assert_eq!(ids(&moves(&leases, "a", at(100)).take), ["s-1"]);
        let leases = [lease("s-0", Some("a"), 200), lease("s-1", Some("b"), 200)];
        assert_eq!(moves(&leases, "a", at(100)), Moves::default());
    }
}
