//! Deterministic ids for what a saga writes: the id of a command is a
//! function of the saga, the version its transition wrote and its place in
//! that transition; the id of an undo command, of the step and the round
//! of compensation. The same command written again has the same id, so
//! the receiver's dedup (on the CloudEvents `id`) absorbs it.
//!
//! The ids are UUIDv8 (RFC 9562 "custom"): the first 16 bytes of a
//! SHA-256 of the parts, each followed by a NUL (the parts are text).

use sha2::{Digest, Sha256};

/// The namespace of every id below, so another scheme hashing the same
/// parts cannot collide with ours.
const NAMESPACE: &str = "consumer.saga.v1";

fn hash(parts: &[&str]) -> uuid::Uuid {
    let mut h = Sha256::new();
    h.update(NAMESPACE.as_bytes());
    h.update([0]);
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    let digest = h.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

/// The `n`-th command, event or timeout written by the transition that
/// wrote `version` of saga `saga_type`/`saga_id`.
pub(super) fn written(saga_type: &str, saga_id: &str, version: i64, n: u32) -> uuid::Uuid {
    hash(&[
        saga_type,
        saga_id,
        "v",
        itoa::Buffer::new().format(version),
        itoa::Buffer::new().format(n),
    ])
}

/// The undo command of step `index` of the compensation log, sent in
/// round `round` (1, then one more each time an operator resumes it).
pub(super) fn undo(saga_type: &str, saga_id: &str, index: usize, round: u32) -> uuid::Uuid {
    hash(&[
        saga_type,
        saga_id,
        "undo",
        itoa::Buffer::new().format(index),
        itoa::Buffer::new().format(round),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_parts_give_the_same_id_and_any_other_part_another() {
        let a = written("order", "o-1", 3, 0);
        assert_eq!(a, written("order", "o-1", 3, 0));
        assert_eq!(a.get_version_num(), 8);
        for other in [
            written("order", "o-1", 3, 1),
            written("order", "o-1", 4, 0),
            written("order", "o-2", 3, 0),
            written("orders", "o-1", 3, 0),
            // The separator keeps "ab" + "c" apart from "a" + "bc".
            written("orde", "ro-1", 3, 0),
            undo("order", "o-1", 3, 0),
            undo("order", "o-1", 0, 1),
        ] {
            assert_ne!(a, other);
        }
        assert_eq!(undo("order", "o-1", 0, 1), undo("order", "o-1", 0, 1));
        assert_ne!(undo("order", "o-1", 0, 1), undo("order", "o-1", 0, 2));
    }
}
