//! [`Checkpoint`]: how far a shard's records are done.

use std::cmp::Ordering;

/// How far a shard is read and settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checkpoint {
    /// Every record up to and including this sequence number is settled
    /// (a decimal number of up to 128 digits, as Kinesis writes them).
    At(String),
    /// The shard is closed and every record of it is settled: its
    /// children may be read.
    ShardEnd,
}

impl Checkpoint {
    /// How the two compare along the shard: sequence numbers by numeric
    /// value, [`Checkpoint::ShardEnd`] after all of them.
    pub fn position_cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Self::ShardEnd, Self::ShardEnd) => Ordering::Equal,
            (Self::ShardEnd, Self::At(_)) => Ordering::Greater,
            (Self::At(_), Self::ShardEnd) => Ordering::Less,
            (Self::At(a), Self::At(b)) => {
                let (a, b) = (a.trim_start_matches('0'), b.trim_start_matches('0'));
                a.len().cmp(&b.len()).then_with(|| a.cmp(b))
            }
        }
    }

    /// Whether the shard is finished (read and settled to its end).
    pub fn is_shard_end(&self) -> bool {
        matches!(self, Self::ShardEnd)
    }
}

/// What became of a checkpoint write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointWrite {
    /// Written.
    Written,
    /// Not written: the writer does not hold the shard's lease (it was
    /// taken; the new owner goes on from the last checkpoint).
    NotOwner,
    /// Not written: it is behind the stored checkpoint, which stays.
    Behind,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_compare_by_value_and_shard_end_comes_last() {
        let at = |s: &str| Checkpoint::At(s.to_owned());
        assert_eq!(at("9").position_cmp(&at("10")), Ordering::Less);
        assert_eq!(
            at("49590338271490256608559692538361571095921575989136588898").position_cmp(&at(
                "49590338271490256608559692540925702759324208523137515618"
            )),
            Ordering::Less
        );
        assert_eq!(at("007").position_cmp(&at("7")), Ordering::Equal);
        assert_eq!(
            Checkpoint::ShardEnd.position_cmp(&at("99999")),
            Ordering::Greater
        );
        assert!(Checkpoint::ShardEnd.is_shard_end() && !at("1").is_shard_end());
    }
}
