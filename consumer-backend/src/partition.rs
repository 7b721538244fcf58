//! Which partition a key belongs to: the same answer in every process,
//! every release and every backend.
//!
//! The hash is Kafka's default partitioner (murmur2 of the key's bytes, made
//! positive, modulo the partition count), as the Java client and
//! librdkafka's `murmur2` partitioner compute it. The RabbitMQ publishers
//! use it to pick a partition queue and the in-memory broker to pick a
//! partition, so a key lands on the same partition number on Kafka,
//! RabbitMQ and in memory. It is part of the wire contract: changing it
//! moves keys between partitions and breaks their order.

/// The partition of `key` among `partitions` (at least one): murmur2 as
/// Kafka computes it, made positive, modulo the count.
///
/// ```
/// use consumer_backend::partition::partition_for;
/// assert_eq!(partition_for(b"order-17", 1), 0);
/// assert!(partition_for(b"order-17", 8) < 8);
/// ```
pub fn partition_for(key: &[u8], partitions: u32) -> u32 {
    (murmur2(key) & 0x7fff_ffff) % partitions.max(1)
}

/// Kafka's murmur2 (seed `0x9747b28c`), as `org.apache.kafka.common.utils.Utils`
/// computes it, with Java's wrapping arithmetic.
pub fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    // Java's `seed ^ length` on an int: the length wraps like Java's.
    let mut h: u32 = 0x9747_b28c ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        if tail.len() >= 3 {
            h ^= u32::from(tail[2]) << 16;
        }
        if tail.len() >= 2 {
            h ^= u32::from(tail[1]) << 8;
        }
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors of Kafka's `UtilsTest.testMurmur2`, as Java's signed ints.
    #[test]
    fn murmur2_is_kafkas() {
        let cases: [(&[u8], i32); 7] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (&[12, 42, 56, 24, 109, 111], 274_204_207),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (input, want) in cases {
            assert_eq!(murmur2(input) as i32, want, "{input:?}");
        }
    }

    #[test]
    fn partitions_are_in_range_and_stable() {
        assert_eq!(
            partition_for(b"21", 1 << 31),
            (-973_932_308i32 as u32) & 0x7fff_ffff
        );
        for n in [1, 2, 3, 7, 64] {
            for key in ["a", "order-1", "", "ünïcode"] {
                let p = partition_for(key.as_bytes(), n);
                assert!(p < n);
                assert_eq!(p, partition_for(key.as_bytes(), n));
            }
        }
        assert_eq!(partition_for(b"x", 0), 0, "no partitions is one partition");
    }
}
