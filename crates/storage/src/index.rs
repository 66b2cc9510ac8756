//! Sparse, memory-mapped offset and time indexes (`.index`, `.timeindex`).
//!
//! Both are Kafka's format: fixed-size big-endian entries relative to the
//! segment's base offset, appended in increasing order, preallocated to
//! `log.index.size.max.bytes` while the segment is active and trimmed to their
//! entries when it rolls, so a trimmed file's length tells its entry count.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use memmap2::MmapMut;

use crate::error::Result;

/// Stores into a mapping land on whole pages; one not yet backed by disk
/// blocks raises SIGBUS on a full disk instead of an error.
const PAGE_BYTES: usize = 4096;

/// The mmap'd file under both index kinds. The descriptor is closed once the
/// file is mapped, as Kafka does: a broker with many segments would otherwise
/// hold two more per segment. Resizes reopen the file.
#[derive(Debug)]
struct IndexFile {
    path: PathBuf,
    mmap: Option<MmapMut>,
    entry_size: usize,
    entries: usize,
    /// Bytes from the start known to sit on allocated blocks, so stores
    /// below it cannot fault on a full disk.
    backed_bytes: usize,
}

impl IndexFile {
    /// Maps an existing index, or creates an empty one. Its entries are the
    /// whole entries the file holds.
    fn open(path: &Path, entry_size: usize) -> Result<Self> {
        let file = Self::open_file(path)?;
        let len = file.metadata()?.len() as usize;
        let entries = len / entry_size;
        let mut index = Self { path: path.to_owned(), mmap: None, entry_size, entries, backed_bytes: 0 };
        index.remap(&file, len)?;
        index.backed_bytes = round_up_to_page(entries * entry_size).min(len);
        Ok(index)
    }

    fn open_file(path: &Path) -> std::io::Result<File> {
        OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)
    }

    fn remap(&mut self, file: &File, len: usize) -> Result<()> {
        self.mmap = None;
        if len > 0 {
            // SAFETY: the file is ours alone (one index per segment, opened by
            // one log under its lock), so nothing truncates it while mapped.
            #[allow(unsafe_code)]
            let mmap = unsafe { MmapMut::map_mut(file)? };
            // Entries are touched one page at a time, in order: readahead on
            // a fault only reads pages of the sparse file nobody needs yet.
            mmap.advise(memmap2::Advice::Random)?;
            self.mmap = Some(mmap);
        }
        Ok(())
    }

    fn mapped_len(&self) -> usize {
        self.mmap.as_ref().map_or(0, |m| m.len())
    }

    /// Sets the file's length and maps it again.
    fn set_len(&mut self, len: usize) -> Result<()> {
        self.mmap = None;
        let file = Self::open_file(&self.path)?;
        file.set_len(len as u64)?;
        self.backed_bytes = self.backed_bytes.min(len);
        self.remap(&file, len)
    }

    fn capacity(&self) -> usize {
        self.mapped_len() / self.entry_size
    }

    fn is_full(&self) -> bool {
        self.entries >= self.capacity()
    }

    fn entry(&self, i: usize) -> &[u8] {
        let at = i * self.entry_size;
        &self.mmap.as_ref().expect("entry of a non-empty index")[at..at + self.entry_size]
    }

    fn push(&mut self, entry: &[u8]) -> Result<()> {
        debug_assert!(!self.is_full(), "caller checks is_full");
        let at = self.entries * self.entry_size;
        let end = at + self.entry_size;
        if end > self.backed_bytes {
            self.back_pages(end)?;
        }
        let mmap = self.mmap.as_mut().expect("non-full index is mapped");
        mmap[at..end].copy_from_slice(entry);
        self.entries += 1;
        Ok(())
    }

    /// Allocates the pages up to `end` by writing the zeros they hold, so a
    /// full disk fails this write with ENOSPC rather than the store that
    /// follows with SIGBUS. Once per page: every 512 offset entries.
    fn back_pages(&mut self, end: usize) -> Result<()> {
        let target = round_up_to_page(end).min(self.mapped_len());
        let zeros = vec![0u8; target - self.backed_bytes];
        Self::open_file(&self.path)?.write_all_at(&zeros, self.backed_bytes as u64)?;
        self.backed_bytes = target;
        Ok(())
    }

    /// Largest entry index whose key is `<= target`, by binary search.
    fn floor(&self, target: i64, key: impl Fn(&[u8]) -> i64) -> Option<usize> {
        let (mut lo, mut hi) = (0, self.entries);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if key(self.entry(mid)) <= target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.checked_sub(1)
    }

    /// Grows or shrinks the file to hold `max_bytes` (rounded down to whole entries).
    fn resize(&mut self, max_bytes: usize) -> Result<()> {
        let len = (max_bytes / self.entry_size).max(self.entries) * self.entry_size;
        if len == self.mapped_len() {
            return Ok(());
        }
        self.set_len(len)
    }

    /// Shrinks the file to exactly its entries, as done when a segment rolls.
    /// Nothing is forced to disk here, on the append path: the entries stay
    /// in the page cache the map shares with the file, and the flush of the
    /// rolled segment syncs them; if a crash loses the new length, the index
    /// fails its sanity check on load and is rebuilt.
    fn trim(&mut self) -> Result<()> {
        let len = self.entries * self.entry_size;
        if len == self.mapped_len() {
            return Ok(());
        }
        self.set_len(len)
    }

    fn flush(&self) -> Result<()> {
        if let Some(mmap) = &self.mmap {
            crate::fsync::sync_mmap(mmap)?;
        }
        Ok(())
    }

    /// Drops every entry by cutting the file, which is cheaper than zeroing
    /// a preallocated map.
    fn clear(&mut self) -> Result<()> {
        self.entries = 0;
        if self.mapped_len() == 0 {
            return Ok(());
        }
        self.set_len(0)
    }

    /// Forgets entries past `entries`, zeroing only the ones that were
    /// written, so a preallocated index costs nothing to truncate.
    fn truncate_entries(&mut self, entries: usize) {
        let old = self.entries;
        self.entries = old.min(entries);
        let (start, end) = (self.entries * self.entry_size, old * self.entry_size);
        if let Some(mmap) = self.mmap.as_mut() {
            mmap[start..end].fill(0);
        }
    }
}

fn round_up_to_page(bytes: usize) -> usize {
    bytes.div_ceil(PAGE_BYTES) * PAGE_BYTES
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

fn i64_at(buf: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

/// Maps offsets to file positions: 4-byte relative offset, 4-byte position.
#[derive(Debug)]
pub struct OffsetIndex {
    base_offset: i64,
    inner: IndexFile,
}

/// One offset index entry, in absolute terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetPosition {
    pub offset: i64,
    pub position: u32,
}

impl OffsetPosition {
    /// Decodes one stored entry of the index of the segment at `base_offset`.
    pub fn decode(raw: &[u8], base_offset: i64) -> Self {
        Self { offset: base_offset + i64::from(u32_at(raw, 0)), position: u32_at(raw, 4) }
    }

    /// The load-time rule for an entry after `previous` in the index of a
    /// log of `log_len` bytes: within the log, offsets increasing, positions
    /// not decreasing.
    pub fn check_follows(
        &self,
        previous: Option<&Self>,
        log_len: u64,
    ) -> std::result::Result<(), &'static str> {
        if u64::from(self.position) > log_len {
            return Err("points past the end of the log");
        }
        if previous.is_some_and(|p| p.offset >= self.offset || p.position > self.position) {
            return Err("is out of order");
        }
        Ok(())
    }
}

impl OffsetIndex {
    /// Bytes per entry: 4-byte relative offset, 4-byte position.
    pub const ENTRY: usize = 8;

    /// Maps the index at `path`, creating it empty when missing.
    pub fn open(path: &Path, base_offset: i64) -> Result<Self> {
        Ok(Self { base_offset, inner: IndexFile::open(path, Self::ENTRY)? })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub fn entries(&self) -> usize {
        self.inner.entries
    }

    pub fn is_full(&self) -> bool {
        self.inner.is_full()
    }

    pub fn entry(&self, i: usize) -> OffsetPosition {
        OffsetPosition::decode(self.inner.entry(i), self.base_offset)
    }

    pub fn last(&self) -> Option<OffsetPosition> {
        self.inner.entries.checked_sub(1).map(|i| self.entry(i))
    }

    /// Adds an entry; offsets must increase. Returns false when full.
    pub fn append(&mut self, offset: i64, position: u32) -> Result<bool> {
        if self.inner.is_full() {
            return Ok(false);
        }
        debug_assert!(self.last().is_none_or(|last| last.offset < offset));
        let mut entry = [0u8; Self::ENTRY];
        entry[..4].copy_from_slice(&((offset - self.base_offset) as u32).to_be_bytes());
        entry[4..].copy_from_slice(&position.to_be_bytes());
        self.inner.push(&entry)?;
        Ok(true)
    }

    /// The entry with the largest offset `<= offset`, or the segment start.
    pub fn lookup(&self, offset: i64) -> OffsetPosition {
        let relative = offset - self.base_offset;
        self.inner
            .floor(relative, |e| i64::from(u32_at(e, 0)))
            .map(|i| self.entry(i))
            .unwrap_or(OffsetPosition { offset: self.base_offset, position: 0 })
    }

    /// Drops entries at or beyond `offset`.
    pub fn truncate_to(&mut self, offset: i64) {
        let keep = self.inner.floor(offset - self.base_offset - 1, |e| i64::from(u32_at(e, 0)));
        self.inner.truncate_entries(keep.map_or(0, |i| i + 1));
    }

    pub fn reset(&mut self) -> Result<()> {
        self.inner.clear()
    }

    pub fn trim(&mut self) -> Result<()> {
        self.inner.trim()
    }

    pub fn resize(&mut self, max_bytes: usize) -> Result<()> {
        self.inner.resize(max_bytes)
    }

    pub fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    /// Kafka's sanity check: whole entries, increasing, within the segment.
    pub fn sanity_check(&self, file_len: u64) -> std::result::Result<(), String> {
        let mut previous: Option<OffsetPosition> = None;
        for i in 0..self.entries() {
            let entry = self.entry(i);
            entry
                .check_follows(previous.as_ref(), file_len)
                .map_err(|reason| format!("entry {i} {reason}"))?;
            previous = Some(entry);
        }
        Ok(())
    }
}

/// Maps timestamps to offsets: 8-byte timestamp, 4-byte relative offset.
#[derive(Debug)]
pub struct TimeIndex {
    base_offset: i64,
    inner: IndexFile,
}

/// One time index entry, in absolute terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    pub timestamp: i64,
    pub offset: i64,
}

impl TimestampOffset {
    /// Decodes one stored entry of the time index of the segment at `base_offset`.
    pub fn decode(raw: &[u8], base_offset: i64) -> Self {
        Self { timestamp: i64_at(raw, 0), offset: base_offset + i64::from(u32_at(raw, 8)) }
    }

    /// The load-time rule for an entry after `previous` in the time index of
    /// the segment at `base_offset`: timestamps increasing, offsets not
    /// decreasing and within the segment.
    pub fn check_follows(
        &self,
        previous: Option<&Self>,
        base_offset: i64,
    ) -> std::result::Result<(), &'static str> {
        if self.offset < base_offset {
            return Err("is before the segment");
        }
        if previous.is_some_and(|p| p.timestamp >= self.timestamp || p.offset > self.offset) {
            return Err("is out of order");
        }
        Ok(())
    }
}

impl TimeIndex {
    /// Bytes per entry: 8-byte timestamp, 4-byte relative offset.
    pub const ENTRY: usize = 12;

    /// Maps the index at `path`, creating it empty when missing.
    pub fn open(path: &Path, base_offset: i64) -> Result<Self> {
        Ok(Self { base_offset, inner: IndexFile::open(path, Self::ENTRY)? })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub fn entries(&self) -> usize {
        self.inner.entries
    }

    pub fn is_full(&self) -> bool {
        self.inner.is_full()
    }

    pub fn entry(&self, i: usize) -> TimestampOffset {
        TimestampOffset::decode(self.inner.entry(i), self.base_offset)
    }

    pub fn last(&self) -> Option<TimestampOffset> {
        self.inner.entries.checked_sub(1).map(|i| self.entry(i))
    }

    /// Adds an entry when its timestamp is larger than the last one's, as
    /// Kafka does; a full index drops the entry.
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64) -> Result<()> {
        if self.inner.is_full() || self.last().is_some_and(|last| last.timestamp >= timestamp) {
            return Ok(());
        }
        let mut entry = [0u8; Self::ENTRY];
        entry[..8].copy_from_slice(&timestamp.to_be_bytes());
        entry[8..].copy_from_slice(&((offset - self.base_offset) as u32).to_be_bytes());
        self.inner.push(&entry)
    }

    /// The entry with the largest timestamp `<= timestamp`, or the segment start.
    pub fn lookup(&self, timestamp: i64) -> TimestampOffset {
        self.inner
            .floor(timestamp, |e| i64_at(e, 0))
            .map(|i| self.entry(i))
            .unwrap_or(TimestampOffset { timestamp: -1, offset: self.base_offset })
    }

    /// Drops entries pointing at or beyond `offset`.
    pub fn truncate_to(&mut self, offset: i64) {
        let keep = (0..self.entries()).take_while(|&i| self.entry(i).offset < offset).count();
        self.inner.truncate_entries(keep);
    }

    pub fn reset(&mut self) -> Result<()> {
        self.inner.clear()
    }

    pub fn trim(&mut self) -> Result<()> {
        self.inner.trim()
    }

    pub fn resize(&mut self, max_bytes: usize) -> Result<()> {
        self.inner.resize(max_bytes)
    }

    pub fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    /// Timestamps and offsets must both increase.
    pub fn sanity_check(&self) -> std::result::Result<(), String> {
        let mut previous: Option<TimestampOffset> = None;
        for i in 0..self.entries() {
            let entry = self.entry(i);
            entry
                .check_follows(previous.as_ref(), self.base_offset)
                .map_err(|reason| format!("entry {i} {reason}"))?;
            previous = Some(entry);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_entries_when_lookup_should_return_floor() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = OffsetIndex::open(&dir.path().join("0.index"), 100).unwrap();
        index.resize(80).unwrap();
        for (offset, position) in [(105, 10), (110, 20), (120, 40)] {
            assert!(index.append(offset, position).unwrap());
        }
        assert_eq!(index.lookup(99).position, 0);
        assert_eq!(index.lookup(104).position, 0);
        assert_eq!(index.lookup(105).position, 10);
        assert_eq!(index.lookup(119).position, 20);
        assert_eq!(index.lookup(500).position, 40);
    }

    #[test]
    fn given_full_index_when_append_should_refuse() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = OffsetIndex::open(&dir.path().join("0.index"), 0).unwrap();
        assert!(index.is_full(), "an empty file has no room until resized");
        index.resize(16).unwrap();
        assert!(index.append(1, 1).unwrap());
        assert!(index.append(2, 2).unwrap());
        assert!(index.is_full());
        assert!(!index.append(3, 3).unwrap());
    }

    #[test]
    fn trimmed_index_reopens_with_its_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.timeindex");
        let mut index = TimeIndex::open(&path, 0).unwrap();
        index.resize(1200).unwrap();
        index.maybe_append(10, 1).unwrap();
        index.maybe_append(5, 2).unwrap(); // not larger: skipped
        index.maybe_append(20, 3).unwrap();
        index.trim().unwrap();
        drop(index);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 24);
        let index = TimeIndex::open(&path, 0).unwrap();
        assert_eq!(index.entries(), 2);
        assert_eq!(index.lookup(15), TimestampOffset { timestamp: 10, offset: 1 });
        assert!(index.sanity_check().is_ok());
    }

    #[test]
    fn truncate_drops_entries_at_and_after_offset() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = OffsetIndex::open(&dir.path().join("0.index"), 0).unwrap();
        index.resize(80).unwrap();
        for offset in [5, 10, 15] {
            index.append(offset, offset as u32 * 10).unwrap();
        }
        index.truncate_to(10);
        assert_eq!(index.entries(), 1);
        assert_eq!(index.last().unwrap().offset, 5);
    }

    #[test]
    fn appends_back_each_page_before_storing_into_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.index");
        let mut index = OffsetIndex::open(&path, 0).unwrap();
        index.resize(3 * PAGE_BYTES).unwrap();
        let blocks = |path: &Path| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(path).unwrap().blocks()
        };
        assert_eq!(blocks(&path), 0, "preallocation is sparse");
        index.append(1, 1).unwrap();
        let one_page = blocks(&path);
        assert!(one_page > 0, "the first page is allocated before the store");
        for offset in 2..=(PAGE_BYTES / OffsetIndex::ENTRY) as i64 {
            index.append(offset, offset as u32).unwrap();
        }
        assert_eq!(blocks(&path), one_page, "a full page needs no more blocks");
        index.append(10_000, 10_000).unwrap();
        assert!(blocks(&path) > one_page, "the next page is allocated when reached");
        assert_eq!(index.lookup(10_000).position, 10_000);
    }

    #[test]
    fn an_open_index_holds_no_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.index");
        let mut index = OffsetIndex::open(&path, 0).unwrap();
        index.resize(80).unwrap();
        index.append(3, 30).unwrap();
        let fds = std::fs::read_dir("/proc/self/fd").unwrap();
        let open =
            fds.filter_map(|e| std::fs::read_link(e.unwrap().path()).ok()).any(|target| target == path);
        assert!(!open, "only the mapping remains");
    }
}
