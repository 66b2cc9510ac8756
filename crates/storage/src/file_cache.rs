//! A bounded cache of open segment files.
//!
//! A broker may host tens of thousands of segments; a descriptor for each
//! would exhaust `RLIMIT_NOFILE`. Active segments hold their own `.log` file
//! (every append needs it), as in Kafka; inactive segments borrow theirs from
//! this cache, which keeps at most `capacity` open and closes the least
//! recently used one (approximated by the CLOCK algorithm) to make room.
//!
//! Files are handed out as `Arc<File>`: a read in flight (a `FileSlice`
//! waiting for `sendfile`) keeps its descriptor valid after eviction, and the
//! descriptor closes when the last holder lets go.
//!
//! The broker uses one cache for the whole process ([`FileCache::shared`])
//! because the descriptor limit it protects is per process.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Kept open when the broker config does not say otherwise
/// (`log.segment.open.files.max`).
pub const DEFAULT_CAPACITY: usize = 1024;

/// Open files keyed by the id of the segment they belong to.
#[derive(Debug)]
pub struct FileCache {
    capacity: AtomicUsize,
    clock: Mutex<Clock>,
}

/// CLOCK: a ring of slots, each with a referenced bit set on every hit; the
/// hand clears bits until it finds a slot not used since its last pass.
#[derive(Debug, Default)]
struct Clock {
    slots: Vec<Slot>,
    by_id: HashMap<u64, usize>,
    hand: usize,
}

#[derive(Debug)]
struct Slot {
    id: u64,
    file: Arc<File>,
    referenced: bool,
}

impl FileCache {
    /// A cache keeping at most `capacity` files open (at least one).
    pub fn new(capacity: usize) -> Self {
        Self { capacity: AtomicUsize::new(capacity.max(1)), clock: Mutex::new(Clock::default()) }
    }

    /// The cache every log of the process uses.
    pub fn shared() -> &'static FileCache {
        static SHARED: OnceLock<FileCache> = OnceLock::new();
        SHARED.get_or_init(|| FileCache::new(DEFAULT_CAPACITY))
    }

    /// A key no other segment of the process has.
    pub fn next_id() -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    pub fn capacity(&self) -> usize {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Changes the bound, closing files at once if it shrinks.
    pub fn set_capacity(&self, capacity: usize) {
        let capacity = capacity.max(1);
        self.capacity.store(capacity, Ordering::Relaxed);
        let mut evicted = Vec::new();
        let mut clock = self.lock();
        while clock.slots.len() > capacity {
            evicted.push(clock.evict());
        }
        drop(clock);
        drop(evicted);
    }

    /// Files currently held by the cache.
    pub fn len(&self) -> usize {
        self.lock().slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The open file of segment `id`, opening `path` (read-write) on a miss.
    pub fn get_or_open(&self, id: u64, path: &Path) -> io::Result<Arc<File>> {
        if let Some(file) = self.get(id) {
            return Ok(file);
        }
        // Opened outside the lock: other segments' hits need not wait on it.
        let file = Arc::new(OpenOptions::new().read(true).write(true).open(path)?);
        Ok(self.insert(id, file))
    }

    /// The cached file of segment `id`, marked as recently used.
    pub fn get(&self, id: u64) -> Option<Arc<File>> {
        let mut clock = self.lock();
        let slot = *clock.by_id.get(&id)?;
        let slot = &mut clock.slots[slot];
        slot.referenced = true;
        Some(slot.file.clone())
    }

    /// Caches `file` as segment `id`'s, evicting another if full. Returns the
    /// file now cached: an earlier one for the same id wins.
    pub fn insert(&self, id: u64, file: Arc<File>) -> Arc<File> {
        let mut clock = self.lock();
        if let Some(&slot) = clock.by_id.get(&id) {
            return clock.slots[slot].file.clone();
        }
        let slot = Slot { id, file: file.clone(), referenced: true };
        let evicted = if clock.slots.len() >= self.capacity() {
            Some(clock.replace_victim(slot))
        } else {
            let index = clock.slots.len();
            clock.slots.push(slot);
            clock.by_id.insert(id, index);
            None
        };
        drop(clock);
        // The close(2) of an evicted file happens outside the lock.
        drop(evicted);
        file
    }

    /// Closes segment `id`'s file (unless a reader still holds it), as when
    /// the segment is deleted or becomes active.
    pub fn remove(&self, id: u64) {
        let removed = self.lock().remove(id);
        drop(removed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Clock> {
        self.clock.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Clock {
    /// The slot under the hand once it finds one not referenced since its
    /// last pass, clearing bits on the way: at most one turn of the ring.
    fn victim(&mut self) -> usize {
        loop {
            self.hand %= self.slots.len();
            let slot = &mut self.slots[self.hand];
            if !slot.referenced {
                return self.hand;
            }
            slot.referenced = false;
            self.hand += 1;
        }
    }

    /// Puts `slot` in the victim's place; the ring keeps its order.
    fn replace_victim(&mut self, slot: Slot) -> Arc<File> {
        let index = self.victim();
        self.by_id.insert(slot.id, index);
        let old = std::mem::replace(&mut self.slots[index], slot);
        self.by_id.remove(&old.id);
        self.hand = index + 1;
        old.file
    }

    fn evict(&mut self) -> Option<Arc<File>> {
        if self.slots.is_empty() {
            return None;
        }
        let victim = self.victim();
        let id = self.slots[victim].id;
        self.remove(id)
    }

    fn remove(&mut self, id: u64) -> Option<Arc<File>> {
        let index = self.by_id.remove(&id)?;
        let slot = self.slots.swap_remove(index);
        if let Some(moved) = self.slots.get(index) {
            self.by_id.insert(moved.id, index);
        }
        Some(slot.file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn files(dir: &Path, count: usize) -> Vec<std::path::PathBuf> {
        (0..count)
            .map(|i| {
                let path = dir.join(format!("{i}.log"));
                std::fs::write(&path, format!("segment {i}")).unwrap();
                path
            })
            .collect()
    }

    fn read(file: &File) -> String {
        let mut buf = vec![0u8; 64];
        let n = file.read_at(&mut buf, 0).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn given_more_files_than_capacity_when_opened_should_stay_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path(), 10);
        let cache = FileCache::new(3);
        for (id, path) in paths.iter().enumerate() {
            cache.get_or_open(id as u64, path).unwrap();
            assert!(cache.len() <= 3);
        }
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn evicted_files_reopen_with_the_same_contents() {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path(), 8);
        let cache = FileCache::new(2);
        for round in 0..3 {
            for (id, path) in paths.iter().enumerate() {
                let file = cache.get_or_open(id as u64, path).unwrap();
                assert_eq!(read(&file), format!("segment {id}"), "round {round}");
            }
        }
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn a_held_file_outlives_its_eviction() {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path(), 3);
        let cache = FileCache::new(1);
        let held = cache.get_or_open(0, &paths[0]).unwrap();
        cache.get_or_open(1, &paths[1]).unwrap();
        assert!(cache.get(0).is_none(), "evicted");
        assert_eq!(Arc::strong_count(&held), 1, "only the reader holds it now");
        assert_eq!(read(&held), "segment 0");
    }

    #[test]
    fn recently_used_files_survive_eviction() {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path(), 5);
        let cache = FileCache::new(3);
        for id in 0..3 {
            cache.get_or_open(id, &paths[id as usize]).unwrap();
        }
        // Every file was used once: the hand clears all bits and takes 0.
        cache.get_or_open(3, &paths[3]).unwrap();
        assert!(cache.get(0).is_none());
        cache.get(1);
        cache.get_or_open(4, &paths[4]).unwrap();
        assert!(cache.get(1).is_some(), "1 was used since the hand last passed");
        assert!(cache.get(2).is_none(), "2 was not");
    }

    #[test]
    fn removed_and_shrunk_entries_close() {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path(), 4);
        let cache = FileCache::new(4);
        for (id, path) in paths.iter().enumerate() {
            cache.get_or_open(id as u64, path).unwrap();
        }
        cache.remove(2);
        assert!(cache.get(2).is_none());
        assert_eq!(cache.len(), 3);
        cache.set_capacity(1);
        assert_eq!(cache.len(), 1);
        for (id, path) in paths.iter().enumerate() {
            assert_eq!(read(&cache.get_or_open(id as u64, path).unwrap()), format!("segment {id}"));
        }
    }
}
