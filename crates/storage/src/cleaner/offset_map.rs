//! The cleaner's offset map: key → latest offset, in a fixed amount of memory.
//!
//! Like Kafka's `SkimpyOffsetMap`, it stores a 128-bit hash of each key
//! rather than the key, so a slot is 24 bytes whatever the key size: the
//! hash (two SipHash-1-3 with keys drawn per map) and the offset. Open
//! addressing with linear probing; the map reports itself full at
//! [`LOAD_FACTOR`] of its slots (Kafka's `log.cleaner.io.buffer.load.factor`),
//! which keeps probe chains short. Two keys sharing a 128-bit hash would be
//! taken for one key; with random hash keys per map the odds are
//! negligible.

use std::hash::{BuildHasher, Hasher, RandomState};

/// Bytes per slot: a 128-bit key hash and an 8-byte offset.
pub const SLOT_BYTES: usize = 24;
/// The share of slots that may be used before the map counts as full.
pub const LOAD_FACTOR: f64 = 0.9;

/// A slot: the key hash, then the offset plus one (0 marks an empty slot,
/// so a zeroed allocation is an empty map).
type Slot = [u64; 3];

pub struct OffsetMap {
    slots: Vec<Slot>,
    entries: usize,
    max_entries: usize,
    latest_offset: i64,
    hash_keys: [RandomState; 2],
}

impl std::fmt::Debug for OffsetMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffsetMap")
            .field("slots", &self.slots.len())
            .field("entries", &self.entries)
            .field("latest_offset", &self.latest_offset)
            .finish()
    }
}

impl OffsetMap {
    /// An empty map of `slots` slots (`slots * SLOT_BYTES` bytes). The
    /// memory comes zeroed from the allocator, so pages never touched stay
    /// unbacked.
    pub fn with_slots(slots: usize) -> Self {
        let slots = slots.max(1);
        Self {
            slots: vec![[0; 3]; slots],
            entries: 0,
            max_entries: ((slots as f64 * LOAD_FACTOR) as usize).max(1),
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

    /// Bytes of slot memory.
    pub fn size_bytes(&self) -> usize {
        self.slots.len() * SLOT_BYTES
    }

    /// The share of the usable slots in use.
    pub fn utilization(&self) -> f64 {
        self.entries as f64 / self.max_entries as f64
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

    /// Records `offset` as the latest for `key`. Returns false, changing
    /// nothing, when the key is new and the map is full.
    pub fn put(&mut self, key: &[u8], offset: i64) -> bool {
        let hash = self.hash(key);
        let at = self.find(hash);
        if self.slots[at][2] == 0 {
            if self.entries >= self.max_entries {
                return false;
            }
            self.entries += 1;
        }
        self.slots[at] = [hash[0], hash[1], offset as u64 + 1];
        self.latest_offset = self.latest_offset.max(offset);
        true
    }

    /// The latest offset recorded for `key`.
    pub fn get(&self, key: &[u8]) -> Option<i64> {
        let slot = self.slots[self.find(self.hash(key))];
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
        let mut map = OffsetMap::with_slots(10);
        for i in 0..9 {
            assert!(map.put(format!("k{i}").as_bytes(), i));
        }
        assert!(!map.put(b"new", 100), "9 of 10 slots is the load factor");
        assert_eq!(map.get(b"new"), None);
        assert!(map.put(b"k3", 50), "known keys still update");
        assert_eq!(map.get(b"k3"), Some(50));
        assert_eq!(map.latest_offset(), 50);
        assert_eq!(map.len(), 9);
    }

    #[test]
    fn empty_and_zero_length_keys_are_keys() {
        let mut map = OffsetMap::with_slots(4);
        assert_eq!(map.get(b""), None);
        assert!(map.put(b"", 0));
        assert_eq!(map.get(b""), Some(0));
    }

    proptest! {
        #[test]
        fn agrees_with_a_hash_map(keys in proptest::collection::vec(0u16..300, 1..2000)) {
            let mut map = OffsetMap::with_slots(200);
            let mut model = HashMap::new();
            for (offset, key) in keys.iter().enumerate() {
                let key = key.to_be_bytes();
                if map.put(&key, offset as i64) {
                    model.insert(key, offset as i64);
                } else {
                    prop_assert!(!model.contains_key(&key));
                    prop_assert_eq!(model.len(), 180);
                }
            }
            for key in 0u16..300 {
                let key = key.to_be_bytes();
                prop_assert_eq!(map.get(&key), model.get(&key).copied());
            }
        }
    }
}
