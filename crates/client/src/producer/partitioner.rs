//! Choosing a partition, exactly as the Java client does, so that keyed
//! records land where Java (and librdkafka's `murmur2_random`) put them.
//!
//! - A record with a key goes to `toPositive(murmur2(key)) % numPartitions`.
//! - A record without a key sticks to one partition until about
//!   `batch.size` bytes have gone there, then moves to another partition
//!   chosen at random among those with a leader (KIP-480/KIP-794): batches
//!   fill up instead of spreading one record per partition.

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`).
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, byte) in tail.iter().enumerate().rev() {
            h ^= u32::from(*byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Java's `Utils.toPositive`: clears the sign bit (not `abs`, which
/// overflows on `i32::MIN`).
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// The partition of a keyed record.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    to_positive(murmur2(key)) % partitions
}

/// The sticky choice for keyless records of one topic.
#[derive(Debug)]
pub struct StickyPartitioner {
    current: Option<i32>,
    bytes_in_current: usize,
    random: XorShift,
}

impl StickyPartitioner {
    pub fn new(seed: u64) -> Self {
        Self { current: None, bytes_in_current: 0, random: XorShift(seed | 1) }
    }

    /// The partition for the next keyless record of `record_bytes`, given
    /// which partitions currently have a leader. Switches once `batch_size`
    /// bytes have gone to the current one.
    pub fn partition(
        &mut self,
        available: &[i32],
        partitions: i32,
        record_bytes: usize,
        batch_size: usize,
    ) -> i32 {
        let current = match self.current {
            Some(p) if self.bytes_in_current < batch_size && p < partitions => p,
            previous => {
                self.bytes_in_current = 0;
                self.next_partition(previous, available, partitions)
            }
        };
        self.current = Some(current);
        self.bytes_in_current += record_bytes;
        current
    }

    /// A random partition different from `previous` where possible,
    /// preferring those with a leader.
    fn next_partition(&mut self, previous: Option<i32>, available: &[i32], partitions: i32) -> i32 {
        let pick_from = |n: usize, random: &mut XorShift| (random.next() % n as u64) as usize;
        if available.len() > 1 || (available.len() == 1 && partitions == 1) {
            let mut choice = available[pick_from(available.len(), &mut self.random)];
            if Some(choice) == previous && available.len() > 1 {
                choice = available
                    [(available.iter().position(|p| *p == choice).unwrap_or(0) + 1) % available.len()];
            }
            return choice;
        }
        if let [only] = available {
            return *only;
        }
        pick_from(partitions.max(1) as usize, &mut self.random) as i32
    }
}

/// A tiny PRNG: sticky partitioning needs spread, not cryptography.
#[derive(Debug)]
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors of Kafka's `UtilsTest.testMurmur2` plus librdkafka's.
    #[test]
    fn murmur2_matches_the_java_client() {
        let cases: &[(&[u8], i32)] = &[
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
            (b"abc", 479_470_107),
            (b"string-f-24-chars-length", 124_730_809),
            (b"string-fo-25-chars-length", 1_269_511_650),
            (b"string-foo-26-chars-length", 119_165_628),
            (b"string-last-27-chars-length", 1_089_971_754),
            (b"kafka", -798_503_068),
            (b"1", -1_993_445_489),
            (b"12", 126_087_238),
            (b"123", -267_702_483),
            (b"1234", -1_614_185_708),
            (b"12345", -1_188_365_604),
        ];
        for (key, expected) in cases {
            assert_eq!(murmur2(key), *expected, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn keyed_partition_is_positive_modulo() {
        assert_eq!(to_positive(i32::MIN), 0);
        assert_eq!(to_positive(-1), i32::MAX);
        // murmur2("foobar") = -790332482 -> toPositive = 1357151166.
        assert_eq!(partition_for_key(b"foobar", 7), 1_357_151_166 % 7);
        for partitions in 1..20 {
            assert!((0..partitions).contains(&partition_for_key(b"21", partitions)));
        }
    }

    #[test]
    fn sticky_partition_holds_for_a_batch_then_moves() {
        let mut sticky = StickyPartitioner::new(42);
        let available = [0, 1, 2, 3];
        let first = sticky.partition(&available, 4, 100, 1000);
        for _ in 0..9 {
            assert_eq!(sticky.partition(&available, 4, 100, 1000), first, "still inside the first batch");
        }
        let next = sticky.partition(&available, 4, 100, 1000);
        assert_ne!(next, first, "a full batch moves the sticky partition");
    }

    #[test]
    fn sticky_partition_prefers_partitions_with_a_leader() {
        let mut sticky = StickyPartitioner::new(7);
        for _ in 0..50 {
            assert_eq!(sticky.partition(&[2], 4, 1000, 100), 2);
        }
        let mut spread = StickyPartitioner::new(7);
        let seen: std::collections::BTreeSet<i32> =
            (0..200).map(|_| spread.partition(&[], 3, 1000, 100)).collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), [0, 1, 2], "no leader known: any partition");
    }
}
