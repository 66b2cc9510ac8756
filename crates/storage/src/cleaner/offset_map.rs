//! The cleaner's offset map: key → latest offset, in a bounded amount of memory.
//!
//! Like Kafka's `SkimpyOffsetMap`, it stores a 128-bit hash of each key
//! rather than the key, so a slot is 24 bytes whatever the key size: the
//! hash (two SipHash-1-3 with keys drawn per map) and the offset. Two keys
//! sharing a 128-bit hash would be taken for one; with hash keys drawn per
//! map the odds are negligible.
//!
//! Unlike Kafka's, it does not take its whole budget up front: the slots are
//! split into up to 256 shards (picked by hash) that each start small and
//! double when [`LOAD_FACTOR`] of their slots are used (Kafka's
//! `log.cleaner.io.buffer.load.factor`), so a log with few keys costs little.
//! A shard never grows past its share of the budget; the map is full when a
//! new key lands in a shard at its share. Regrowing one shard at a time keeps
//! the transient overhead to one shard. Open addressing with linear probing.

use std::hash::{BuildHasher, Hasher, RandomState};

/// Bytes per slot: a 128-bit key hash and an 8-byte offset.
pub const SLOT_BYTES: usize = 24;
/// The share of a shard's slots that may be used before it grows.
pub const LOAD_FACTOR: f64 = 0.9;
const MAX_SHARDS: usize = 256;
const INITIAL_SHARD_SLOTS: usize = 16;

/// A slot: the key hash, then the offset plus one (0 marks an empty slot,
/// so zeroed memory is empty).
type Slot = [u64; 3];

#[derive(Default)]
struct Shard {
    slots: Vec<Slot>,
    entries: usize,
}

impl Shard {
    fn with_slots(slots: usize) -> Self {
        Self { slots: vec![[0; 3]; slots], entries: 0 }
    }

    fn max_entries(&self) -> usize {
        (self.slots.len() as f64 * LOAD_FACTOR) as usize
    }

    /// The slot holding `hash`, or the empty slot where it would go.
    fn find(&self, hash: [u64; 2]) -> usize {
        let len = self.slots.len();
        // Lemire's multiply-shift maps the hash onto any table size.
        let mut at = ((u128::from(hash[0]) * len as u128) >> 64) as usize;
        loop {
            let slot = &self.slots[at];
            if slot[2] == 0 || (slot[0] == hash[0] && slot[1] == hash[1]) {
                return at;
            }
            at = if at + 1 == len { 0 } else { at + 1 };
        }
    }

    /// Moves every entry into a table of `slots` slots.
    fn resize(&mut self, slots: usize) {
        let old = std::mem::replace(&mut self.slots, vec![[0; 3]; slots]);
        for slot in old.into_iter().filter(|s| s[2] != 0) {
            let at = self.find([slot[0], slot[1]]);
            self.slots[at] = slot;
        }
    }
}

pub struct OffsetMap {
    shards: Vec<Shard>,
    max_shard_slots: usize,
    entries: usize,
    latest_offset: i64,
    hash_keys: [RandomState; 2],
}

impl std::fmt::Debug for OffsetMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffsetMap")
            .field("shards", &self.shards.len())
            .field("entries", &self.entries)
            .field("size_bytes", &self.size_bytes())
            .field("latest_offset", &self.latest_offset)
            .finish()
    }
}

impl OffsetMap {
    /// An empty map that may grow to `max_slots` slots (`max_slots *
    /// SLOT_BYTES` bytes).
    pub fn with_max_slots(max_slots: usize) -> Self {
        let shards = (max_slots / 64).clamp(1, MAX_SHARDS);
        let max_shard_slots = (max_slots / shards).max(2);
        let initial = INITIAL_SHARD_SLOTS.min(max_shard_slots);
        Self {
            shards: (0..shards).map(|_| Shard::with_slots(initial)).collect(),
            max_shard_slots,
            entries: 0,
            latest_offset: -1,
            hash_keys: [RandomState::new(), RandomState::new()],
        }
    }

    /// Slots that fit in `bytes`.
    pub fn slots_for_bytes(bytes: usize) -> usize {
        bytes / SLOT_BYTES
    }

    /// Slots needed to hold `keys` distinct keys below the load factor.
    pub fn slots_for_keys(keys: usize) -> usize {
        (keys as f64 / LOAD_FACTOR).ceil() as usize + 1
    }

    /// Distinct keys held.
    pub fn len(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Bytes of slot memory in use now.
    pub fn size_bytes(&self) -> usize {
        self.shards.iter().map(|s| s.slots.len()).sum::<usize>() * SLOT_BYTES
    }

    /// The last offset put (or raised to with [`Self::update_latest_offset`]).
    pub fn latest_offset(&self) -> i64 {
        self.latest_offset
    }

    pub fn update_latest_offset(&mut self, offset: i64) {
        self.latest_offset = self.latest_offset.max(offset);
    }

    fn hash(&self, key: &[u8]) -> [u64; 2] {
        self.hash_keys.each_ref().map(|keys| {
            let mut hasher = keys.build_hasher();
            hasher.write(key);
            hasher.finish()
        })
    }

    fn shard_of(&self, hash: [u64; 2]) -> usize {
        ((u128::from(hash[1]) * self.shards.len() as u128) >> 64) as usize
    }

    /// Records `offset` as the latest for `key`. Returns false, changing
    /// nothing, when the key is new and the map is full.
    pub fn put(&mut self, key: &[u8], offset: i64) -> bool {
        let hash = self.hash(key);
        let max_shard_slots = self.max_shard_slots;
        let index = self.shard_of(hash);
        let shard = &mut self.shards[index];
        let mut at = shard.find(hash);
        if shard.slots[at][2] == 0 {
            if shard.entries >= shard.max_entries() {
                let grown = (shard.slots.len() * 2).min(max_shard_slots);
                if grown <= shard.slots.len() || shard.entries >= (grown as f64 * LOAD_FACTOR) as usize {
                    return false;
                }
                shard.resize(grown);
                at = shard.find(hash);
            }
            shard.entries += 1;
            self.entries += 1;
        }
        shard.slots[at] = [hash[0], hash[1], offset as u64 + 1];
        self.latest_offset = self.latest_offset.max(offset);
        true
    }

    /// The latest offset recorded for `key`.
    pub fn get(&self, key: &[u8]) -> Option<i64> {
        let hash = self.hash(key);
        let shard = &self.shards[self.shard_of(hash)];
        let slot = shard.slots[shard.find(hash)];
        (slot[2] != 0).then(|| slot[2] as i64 - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn a_full_map_refuses_new_keys_but_updates_known_ones() {
        let mut map = OffsetMap::with_max_slots(10);
        for i in 0..9 {
            assert!(map.put(format!("k{i}").as_bytes(), i));
        }
        assert!(!map.put(b"new", 100), "9 of 10 slots is the load factor");
        assert_eq!(map.size_bytes(), 10 * SLOT_BYTES);
        assert_eq!(map.get(b"new"), None);
        assert!(map.put(b"k3", 50), "known keys still update");
        assert_eq!(map.get(b"k3"), Some(50));
        assert_eq!(map.latest_offset(), 50);
        assert_eq!(map.len(), 9);
    }

    #[test]
    fn shards_grow_with_the_keys_up_to_the_budget() {
        let mut map = OffsetMap::with_max_slots(1 << 20);
        let initial = map.size_bytes();
        for i in 0..100_000i64 {
            assert!(map.put(&i.to_le_bytes(), i));
        }
        assert!(map.size_bytes() > initial);
        assert!(map.size_bytes() <= (1 << 20) * SLOT_BYTES);
        let per_key = map.size_bytes() as f64 / map.len() as f64;
        assert!((SLOT_BYTES as f64..=2.5 * SLOT_BYTES as f64).contains(&per_key), "{per_key} bytes per key");
        assert!((0..100_000i64).all(|i| map.get(&i.to_le_bytes()) == Some(i)));
    }

    #[test]
    fn empty_and_zero_length_keys_are_keys() {
        let mut map = OffsetMap::with_max_slots(4);
        assert_eq!(map.get(b""), None);
        assert!(map.put(b"", 0));
        assert_eq!(map.get(b""), Some(0));
    }

    proptest! {
        #[test]
        fn agrees_with_a_hash_map(keys in proptest::collection::vec(0u16..300, 1..2000)) {
            let mut map = OffsetMap::with_max_slots(200);
            let mut model = HashMap::new();
            for (offset, key) in keys.iter().enumerate() {
                let key = key.to_be_bytes();
                if map.put(&key, offset as i64) {
                    model.insert(key, offset as i64);
                } else {
                    prop_assert!(!model.contains_key(&key));
                    prop_assert!(model.len() > 100, "full at {} keys", model.len());
                }
            }
            for key in 0u16..300 {
                let key = key.to_be_bytes();
                prop_assert_eq!(map.get(&key), model.get(&key).copied());
            }
        }
    }
}
