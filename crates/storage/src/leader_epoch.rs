//! The leader epoch cache of one partition log, Kafka's
//! `LeaderEpochFileCache` (KIP-101, KIP-279, KIP-320).
//!
//! Each entry says from which offset a leader epoch's batches begin; epochs
//! and start offsets both strictly increase. The cache answers
//! OffsetForLeaderEpoch: where a given epoch's records end, so a follower
//! or a consumer can find the point where its log diverges from the
//! leader's. It lives beside the segments as `leader-epoch-checkpoint`, in
//! Kafka's text format, rewritten atomically at every change, so the file
//! never lacks an entry for data in the log (a stale tail left by a crash is
//! cut off when the log opens).

use std::path::{Path, PathBuf};

use crate::checkpoint::{format_entries, parse_entries, write_atomically};
use crate::error::{Context, Result};

/// The file name, in the partition's directory.
pub const CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
/// Kafka's `UNDEFINED_EPOCH`: no epoch known.
pub const UNDEFINED_EPOCH: i32 = -1;
/// Kafka's `UNDEFINED_EPOCH_OFFSET`: no end offset known.
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

/// A leader epoch and the offset of its first batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

/// The epochs of one log, persisted to its `leader-epoch-checkpoint`.
#[derive(Debug)]
pub struct LeaderEpochCache {
    path: PathBuf,
    /// Ascending in both epoch and start offset.
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    /// An empty cache for the log in `dir`; nothing is written until it changes.
    pub fn empty(dir: &Path) -> Self {
        Self { path: dir.join(CHECKPOINT_FILE), entries: Vec::new() }
    }

    /// The cache as checkpointed in `dir`: `Ok(None)` when there is no file,
    /// an error when it is malformed or its entries are out of order (the
    /// caller rebuilds it from the log). An empty file, as Kafka creates
    /// with a new log, holds no entries.
    pub fn read(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join(CHECKPOINT_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).at("read", &path),
        };
        let entries = parse_entries(&text, parse_entry);
        match entries.filter(|entries| is_ascending(entries)) {
            Some(entries) => Ok(Some(Self { path, entries })),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("malformed leader epoch checkpoint {}", path.display()),
            )
            .into()),
        }
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The newest epoch, if any.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    /// Records that the batch at `base_offset` carries `epoch`, if that epoch
    /// is newer than every known one, as the append path does. Negative
    /// epochs (batches written without one) are skipped.
    pub fn observe(&mut self, epoch: i32, base_offset: i64) -> Result<()> {
        if self.is_newer(epoch) {
            self.assign(epoch, base_offset)?;
        }
        Ok(())
    }

    /// [`Self::observe`] in memory only, for a rebuild that writes once at
    /// the end. Batches come in log order, so start offsets increase.
    pub fn observe_unwritten(&mut self, epoch: i32, base_offset: i64) {
        if self.is_newer(epoch) {
            self.entries.push(EpochEntry { epoch, start_offset: base_offset });
        }
    }

    fn is_newer(&self, epoch: i32) -> bool {
        epoch >= 0 && self.latest_epoch().is_none_or(|latest| epoch > latest)
    }

    /// Kafka's `assign`: makes `epoch` begin at `start_offset`, first
    /// dropping the newest entries whose epoch or start offset is not below
    /// the new one's, so both stay strictly increasing. Returns whether the
    /// cache changed (and was written).
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> Result<bool> {
        if epoch < 0 || start_offset < 0 {
            return Ok(false);
        }
        let needed =
            self.entries.last().is_none_or(|last| last.epoch != epoch || start_offset < last.start_offset);
        if !needed {
            return Ok(false);
        }
        let keep =
            self.entries.iter().take_while(|e| e.epoch < epoch && e.start_offset < start_offset).count();
        self.entries.truncate(keep);
        self.entries.push(EpochEntry { epoch, start_offset });
        self.persist()?;
        Ok(true)
    }

    /// Drops the epochs that start at or after `end_offset`: the log was
    /// truncated there.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> Result<()> {
        let keep = self.entries.iter().take_while(|e| e.start_offset < end_offset).count();
        if end_offset < 0 || keep == self.entries.len() {
            return Ok(());
        }
        self.entries.truncate(keep);
        self.persist()
    }

    /// Moves the cache's start to `start_offset` (the log start offset
    /// moved): the epochs that start at or before it go but the last of
    /// them, which now starts there.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> Result<()> {
        let covered = self.entries.iter().take_while(|e| e.start_offset <= start_offset).count();
        let Some(last_covered) = covered.checked_sub(1).map(|i| self.entries[i]) else { return Ok(()) };
        if covered == 1 && last_covered.start_offset == start_offset {
            return Ok(());
        }
        self.entries.drain(..covered);
        self.entries.insert(0, EpochEntry { epoch: last_covered.epoch, start_offset });
        self.persist()
    }

    /// Kafka's `endOffsetFor`, the OffsetForLeaderEpoch answer: for the
    /// latest epoch, itself and `log_end_offset`; otherwise the largest
    /// known epoch at or below `requested` and the start offset of the next
    /// one (the requested epoch itself when older than every known epoch).
    /// Undefined, (-1, -1), for an undefined or unknown newer epoch.
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> (i32, i64) {
        const UNDEFINED: (i32, i64) = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        if requested == UNDEFINED_EPOCH {
            return UNDEFINED;
        }
        if self.latest_epoch() == Some(requested) {
            return (requested, log_end_offset);
        }
        let higher = self.entries.partition_point(|e| e.epoch <= requested);
        let Some(next) = self.entries.get(higher) else { return UNDEFINED };
        let floor = higher.checked_sub(1).map_or(requested, |i| self.entries[i].epoch);
        (floor, next.start_offset)
    }

    /// Writes the cache as it is: at every change, and after a rebuild.
    pub fn persist(&self) -> Result<()> {
        let lines: Vec<String> =
            self.entries.iter().map(|e| format!("{} {}", e.epoch, e.start_offset)).collect();
        write_atomically(&self.path, format_entries(&lines).as_bytes()).at("write", &self.path)
    }
}

/// One `epoch offset` line; Kafka splits on any run of whitespace.
fn parse_entry(line: &str) -> Option<EpochEntry> {
    let mut fields = line.split_whitespace();
    let entry =
        EpochEntry { epoch: fields.next()?.parse().ok()?, start_offset: fields.next()?.parse().ok()? };
    fields.next().is_none().then_some(entry)
}

fn is_ascending(entries: &[EpochEntry]) -> bool {
    entries.iter().all(|e| e.epoch >= 0 && e.start_offset >= 0)
        && entries.windows(2).all(|w| w[0].epoch < w[1].epoch && w[0].start_offset < w[1].start_offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache in a fresh dir with `entries` assigned in order.
    fn cache_with(dir: &Path, entries: &[(i32, i64)]) -> LeaderEpochCache {
        let mut cache = LeaderEpochCache::empty(dir);
        for (epoch, start_offset) in entries {
            cache.assign(*epoch, *start_offset).unwrap();
        }
        cache
    }

    fn pairs(cache: &LeaderEpochCache) -> Vec<(i32, i64)> {
        cache.entries().iter().map(|e| (e.epoch, e.start_offset)).collect()
    }

    #[test]
    fn the_checkpoint_is_kafkas_text_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache_with(dir.path(), &[(0, 0), (3, 120), (7, 5_000)]);
        let text = std::fs::read_to_string(dir.path().join(CHECKPOINT_FILE)).unwrap();
        assert_eq!(text, "0\n3\n0 0\n3 120\n7 5000\n");
        let read = LeaderEpochCache::read(dir.path()).unwrap().unwrap();
        assert_eq!(read.entries(), cache.entries());
    }

    #[test]
    fn a_missing_file_is_none_an_empty_one_empty_and_a_damaged_one_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(LeaderEpochCache::read(dir.path()).unwrap().is_none());
        let path = dir.path().join(CHECKPOINT_FILE);
        std::fs::write(&path, "").unwrap();
        assert!(
            LeaderEpochCache::read(dir.path()).unwrap().unwrap().entries().is_empty(),
            "as Kafka creates it"
        );
        // Kafka splits on any whitespace.
        std::fs::write(&path, "0\n1\n2  \t40\n").unwrap();
        assert_eq!(pairs(&LeaderEpochCache::read(dir.path()).unwrap().unwrap()), [(2, 40)]);
        for damaged in
            ["0\n2\n1 10\n", "1\n0\n", "0\n1\n1 x\n", "0\n1\n1 2 3\n", "0\n2\n3 10\n2 20\n", "0\n1\n-4 1\n"]
        {
            std::fs::write(&path, damaged).unwrap();
            assert!(LeaderEpochCache::read(dir.path()).is_err(), "{damaged:?}");
        }
    }

    #[test]
    fn assigning_the_same_epoch_again_keeps_its_first_offset() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = cache_with(dir.path(), &[(2, 6)]);
        assert!(!cache.assign(2, 9).unwrap());
        assert_eq!(pairs(&cache), [(2, 6)]);
        assert_eq!(cache.end_offset_for(2, 20), (2, 20), "the latest epoch ends at the log end");
    }

    #[test]
    fn an_epoch_starting_earlier_than_recorded_drops_the_later_entries() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = cache_with(dir.path(), &[(5, 11), (6, 12), (7, 13)]);
        assert!(cache.assign(7, 12).unwrap());
        assert_eq!(pairs(&cache), [(5, 11), (7, 12)]);
        assert_eq!(cache.end_offset_for(5, 0), (5, 12));
        assert_eq!(cache.end_offset_for(6, 0), (5, 12));
        // Start offsets and epochs both only grow.
        let mut cache = cache_with(dir.path(), &[(2, 6), (3, 9)]);
        cache.assign(4, 7).unwrap();
        assert_eq!(pairs(&cache), [(2, 6), (4, 7)]);
        cache.assign(1, 20).unwrap();
        assert_eq!(pairs(&cache), [(1, 20)]);
    }

    #[test]
    fn end_offsets_follow_kafkas_rules() {
        let dir = tempfile::tempdir().unwrap();
        let empty = LeaderEpochCache::empty(dir.path());
        assert_eq!(empty.end_offset_for(7, 0), (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET), "nothing recorded");
        assert_eq!(empty.end_offset_for(UNDEFINED_EPOCH, 0), (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET));

        let cache = cache_with(dir.path(), &[(0, 10), (2, 13), (4, 17)]);
        assert_eq!(
            cache.end_offset_for(1, 30),
            (0, 13),
            "the largest epoch below, ending where the next starts"
        );
        assert_eq!(cache.end_offset_for(2, 30), (2, 17));
        assert_eq!(cache.end_offset_for(3, 30), (2, 17));
        assert_eq!(cache.end_offset_for(4, 30), (4, 30), "the latest epoch ends at the log end");
        assert_eq!(cache.end_offset_for(5, 30), (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET), "a future epoch");
        assert_eq!(cache.end_offset_for(UNDEFINED_EPOCH, 30), (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET));

        let cache = cache_with(dir.path(), &[(5, 11), (6, 12), (7, 13)]);
        assert_eq!(cache.end_offset_for(4, 0), (4, 11), "older than all: itself and the first start");
    }

    #[test]
    fn truncating_from_the_end_drops_epochs_starting_at_or_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = cache_with(dir.path(), &[(2, 6), (3, 8), (4, 11)]);
        cache.truncate_from_end(9).unwrap();
        assert_eq!(pairs(&cache), [(2, 6), (3, 8)]);
        cache.truncate_from_end(8).unwrap();
        assert_eq!(pairs(&cache), [(2, 6)], "an epoch starting exactly there goes");
        cache.truncate_from_end(-1).unwrap();
        assert_eq!(pairs(&cache), [(2, 6)], "an undefined offset changes nothing");
        assert_eq!(pairs(&LeaderEpochCache::read(dir.path()).unwrap().unwrap()), [(2, 6)], "persisted");
        cache.truncate_from_end(0).unwrap();
        assert!(cache.entries().is_empty());
    }

    #[test]
    fn truncating_from_the_start_keeps_the_epoch_covering_the_new_start() {
        let dir = tempfile::tempdir().unwrap();
        let cases: [(i64, &[(i32, i64)]); 6] = [
            (1, &[(2, 6), (3, 8), (4, 11)]),
            (6, &[(2, 6), (3, 8), (4, 11)]),
            (8, &[(3, 8), (4, 11)]),
            (9, &[(3, 9), (4, 11)]),
            (11, &[(4, 11)]),
            (15, &[(4, 15)]),
        ];
        for (start, expected) in cases {
            let mut cache = cache_with(dir.path(), &[(2, 6), (3, 8), (4, 11)]);
            cache.truncate_from_start(start).unwrap();
            assert_eq!(pairs(&cache), expected, "from {start}");
            assert_eq!(pairs(&LeaderEpochCache::read(dir.path()).unwrap().unwrap()), expected, "persisted");
        }
        let mut cache = cache_with(dir.path(), &[(0, 0), (1, 7), (2, 10)]);
        cache.truncate_from_start(5).unwrap();
        assert_eq!(pairs(&cache), [(0, 5), (1, 7), (2, 10)]);
    }

    #[test]
    fn a_rebuild_from_batches_keeps_each_newer_epochs_first_batch() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = LeaderEpochCache::empty(dir.path());
        for (epoch, offset) in [(-1, 0), (0, 1), (0, 3), (2, 5), (1, 7), (2, 9), (3, 12)] {
            cache.observe_unwritten(epoch, offset);
        }
        assert_eq!(pairs(&cache), [(0, 1), (2, 5), (3, 12)]);
        assert!(!dir.path().join(CHECKPOINT_FILE).exists(), "written by the caller, once");
    }

    #[test]
    fn epochs_observed_from_batches_only_move_forward() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = LeaderEpochCache::empty(dir.path());
        for (epoch, offset) in [(-1, 0), (0, 0), (0, 3), (2, 5), (1, 7), (2, 9), (3, 12)] {
            cache.observe(epoch, offset).unwrap();
        }
        assert_eq!(pairs(&cache), [(0, 0), (2, 5), (3, 12)]);
    }
}
