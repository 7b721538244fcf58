//! The shard graph: which shards of a stream may be read now.
//!
//! A split or a merge closes its parent shards (they get an ending
//! sequence number) and opens children that name them
//! (`ParentShardId`, and for a merge `AdjacentParentShardId`). A key's
//! records move to a child, so a key keeps its order only if a child is
//! read after **every** parent is finished: closed and checkpointed to its
//! end ([`SHARD_END`](crate::lease::Checkpoint::ShardEnd)). A parent that
//! `ListShards` no longer lists has expired past the stream's retention:
//! nothing of it is left to read, so it counts as finished.
//!
//! Everything here is a pure function of `ListShards`' answer and of which
//! shards are finished, so the rule is tested without a stream.

use std::collections::HashSet;

/// What the graph needs of one shard from `ListShards`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardInfo {
    /// `ShardId`.
    pub id: String,
    /// `ParentShardId`: the shard it was split from, or one of the two it
    /// was merged from.
    pub parent: Option<String>,
    /// `AdjacentParentShardId`: the other shard of a merge.
    pub adjacent_parent: Option<String>,
    /// `SequenceNumberRange.EndingSequenceNumber`: set once the shard is
    /// closed (by a split or a merge).
    pub ending_sequence_number: Option<String>,
}

impl ShardInfo {
    /// An open shard without parents (as a new stream's are).
    pub fn open(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            parent: None,
            adjacent_parent: None,
            ending_sequence_number: None,
        }
    }

    /// Whether the shard is closed: no record will be added to it.
    pub fn is_closed(&self) -> bool {
        self.ending_sequence_number.is_some()
    }

    /// Its parents: none, one (a split) or two (a merge).
    pub fn parents(&self) -> impl Iterator<Item = &str> {
        self.parent
            .as_deref()
            .into_iter()
            .chain(self.adjacent_parent.as_deref())
    }
}

impl From<&aws_sdk_kinesis::types::Shard> for ShardInfo {
    fn from(shard: &aws_sdk_kinesis::types::Shard) -> Self {
        Self {
            id: shard.shard_id().to_owned(),
            parent: shard.parent_shard_id().map(str::to_owned),
            adjacent_parent: shard.adjacent_parent_shard_id().map(str::to_owned),
            ending_sequence_number: shard
                .sequence_number_range()
                .and_then(|r| r.ending_sequence_number())
                .map(str::to_owned),
        }
    }
}

/// Whether a shard may be read now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Every parent is finished (or it has none): read it.
    Read,
    /// These parents (still listed) are not finished yet: reading the
    /// shard now could put a key's later records before its earlier ones.
    Wait {
        /// The unfinished parents.
        parents: Vec<String>,
    },
    /// The shard itself is finished: nothing is left to read in it.
    Finished,
}

/// Each listed shard's [`Readiness`], in `shards`' order, given which
/// shards are finished (`is_finished`: closed and checkpointed to their
/// end).
pub fn readiness(
    shards: &[ShardInfo],
    is_finished: impl Fn(&str) -> bool,
) -> Vec<(String, Readiness)> {
    let listed: HashSet<&str> = shards.iter().map(|s| s.id.as_str()).collect();
    shards
        .iter()
        .map(|shard| {
            let state = if is_finished(&shard.id) {
                Readiness::Finished
            } else {
                let parents: Vec<String> = shard
                    .parents()
                    .filter(|p| listed.contains(p) && !is_finished(p))
                    .map(str::to_owned)
                    .collect();
                if parents.is_empty() {
                    Readiness::Read
                } else {
                    Readiness::Wait { parents }
                }
            };
            (shard.id.clone(), state)
        })
        .collect()
}

/// The ids of the shards that may be read now.
pub fn readable(shards: &[ShardInfo], is_finished: impl Fn(&str) -> bool) -> Vec<String> {
    readiness(shards, is_finished)
        .into_iter()
        .filter(|(_, r)| *r == Readiness::Read)
        .map(|(id, _)| id)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(id: &str) -> ShardInfo {
        ShardInfo {
            ending_sequence_number: Some("4960".to_owned()),
            ..ShardInfo::open(id)
        }
    }

    fn child(id: &str, parent: &str, adjacent: Option<&str>) -> ShardInfo {
        ShardInfo {
            parent: Some(parent.to_owned()),
            adjacent_parent: adjacent.map(str::to_owned),
            ..ShardInfo::open(id)
        }
    }

    fn finished(ids: &'static [&'static str]) -> impl Fn(&str) -> bool {
        move |id| ids.contains(&id)
    }

    #[test]
    fn a_new_streams_shards_are_all_readable() {
        let shards = [ShardInfo::open("s-0"), ShardInfo::open("s-1")];
        assert_eq!(readable(&shards, finished(&[])), ["s-0", "s-1"]);
    }

    #[test]
    fn after_a_split_the_children_wait_until_the_parent_is_finished() {
        let shards = [
            closed("s-0"),
            child("s-2", "s-0", None),
            child("s-3", "s-0", None),
        ];
        assert_eq!(
            readiness(&shards, finished(&[])),
            [
                ("s-0".to_owned(), Readiness::Read),
                (
                    "s-2".to_owned(),
                    Readiness::Wait {
                        parents: vec!["s-0".to_owned()]
                    }
                ),
                (
                    "s-3".to_owned(),
                    Readiness::Wait {
                        parents: vec!["s-0".to_owned()]
                    }
                ),
            ]
        );
        assert_eq!(readable(&shards, finished(&["s-0"])), ["s-2", "s-3"]);
        assert_eq!(
            readiness(&shards, finished(&["s-0"]))[0].1,
            Readiness::Finished
        );
    }

    #[test]
    fn after_a_merge_the_child_waits_for_both_parents() {
        let shards = [
            closed("s-0"),
            closed("s-1"),
            child("s-2", "s-0", Some("s-1")),
        ];
        assert_eq!(readable(&shards, finished(&[])), ["s-0", "s-1"]);
        assert_eq!(
            readiness(&shards, finished(&["s-0"]))[2].1,
            Readiness::Wait {
                parents: vec!["s-1".to_owned()]
            }
        );
        assert_eq!(readable(&shards, finished(&["s-0", "s-1"])), ["s-2"]);
    }

    #[test]
    fn parents_expired_past_retention_and_no_longer_listed_count_as_finished() {
        let shards = [child("s-2", "s-0", None), child("s-4", "s-1", Some("s-3"))];
        assert_eq!(readable(&shards, finished(&[])), ["s-2", "s-4"]);
    }

    #[test]
    fn a_grandchild_waits_for_its_parent_which_waits_for_its_own() {
        let shards = [
            closed("s-0"),
            ShardInfo {
                ending_sequence_number: Some("9".to_owned()),
                ..child("s-1", "s-0", None)
            },
            child("s-2", "s-1", None),
        ];
        assert_eq!(readable(&shards, finished(&[])), ["s-0"]);
        assert_eq!(readable(&shards, finished(&["s-0"])), ["s-1"]);
        assert_eq!(readable(&shards, finished(&["s-0", "s-1"])), ["s-2"]);
    }
}
