//! The aborted-transaction index of a segment: `<base offset>.txnindex`.
//!
//! Kafka's format: one 34-byte entry per transaction aborted by a marker in
//! the segment (version `0` as an int16, producer id, first offset, last
//! offset — the marker's — and the last stable offset once the abort was
//! written), in marker order. A read_committed fetch collects the entries
//! overlapping the range it returns, so the consumer can drop the aborted
//! records. The file is created with its first entry: most segments never
//! see an abort. Entries are few and small, so they are also kept in memory,
//! and the file is opened only to write one: a segment holds no descriptor
//! for its transaction index.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Result, StorageError};

/// The suffix of transaction index files.
pub const TXN_INDEX_SUFFIX: &str = ".txnindex";
const ENTRY_LEN: usize = 34;
const VERSION: i16 = 0;

/// One aborted transaction of one producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The offset of the abort marker.
    pub last_offset: i64,
    /// The partition's last stable offset once the abort was written.
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    fn encode(&self) -> [u8; ENTRY_LEN] {
        let mut buf = [0u8; ENTRY_LEN];
        buf[..2].copy_from_slice(&VERSION.to_be_bytes());
        buf[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        buf[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        buf[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        buf[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        buf
    }

    fn decode(buf: &[u8]) -> Result<Self> {
        let i64_at = |at: usize| i64::from_be_bytes(buf[at..at + 8].try_into().expect("entry length"));
        let version = i16::from_be_bytes([buf[0], buf[1]]);
        if version != VERSION {
            return Err(StorageError::CorruptRecord(format!("transaction index entry of version {version}")));
        }
        Ok(Self {
            producer_id: i64_at(2),
            first_offset: i64_at(10),
            last_offset: i64_at(18),
            last_stable_offset: i64_at(26),
        })
    }
}

/// The aborted transactions a fetch must report, and whether the search
/// may stop here (an entry proved no later abort can overlap the range).
#[derive(Debug, Default)]
pub struct TxnSearch {
    pub aborted: Vec<AbortedTxn>,
    pub complete: bool,
}

#[derive(Debug)]
pub struct TransactionIndex {
    path: PathBuf,
    entries: Vec<AbortedTxn>,
    /// Entries were appended since the last flush.
    unsynced: AtomicBool,
}

impl TransactionIndex {
    /// Reads the index at `path`, if the file exists; a partial entry at the
    /// end (a torn write) is dropped.
    pub fn open(path: &Path) -> Result<Self> {
        let mut entries = Vec::new();
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        for chunk in bytes.chunks_exact(ENTRY_LEN) {
            entries.push(AbortedTxn::decode(chunk)?);
        }
        let mut index = Self { path: path.to_owned(), entries, unsynced: AtomicBool::new(false) };
        if bytes.len() % ENTRY_LEN != 0 {
            index.rewrite()?;
        }
        Ok(index)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }

    /// Appends an entry; its marker must follow the last one's.
    pub fn append(&mut self, entry: AbortedTxn) -> Result<()> {
        if let Some(last) = self.entries.last() {
            if entry.last_offset <= last.last_offset {
                return Err(StorageError::InvalidRecord(format!(
                    "aborted transaction ending at {} does not follow the one ending at {}",
                    entry.last_offset, last.last_offset
                )));
            }
        }
        OpenOptions::new().create(true).append(true).open(&self.path)?.write_all(&entry.encode())?;
        self.unsynced.store(true, Ordering::Release);
        self.entries.push(entry);
        Ok(())
    }

    /// Appends `entry` unless the index already holds its marker: recovery
    /// replays markers whose entries may or may not have reached the disk.
    pub fn ensure(&mut self, entry: AbortedTxn) -> Result<()> {
        if self.entries.iter().any(|e| e.last_offset >= entry.last_offset) {
            return Ok(());
        }
        self.append(entry)
    }

    /// Kafka's `collectAbortedTxns`: the entries whose range meets
    /// `[fetch_offset, upper_bound_offset)`.
    pub fn collect(&self, fetch_offset: i64, upper_bound_offset: i64) -> TxnSearch {
        let mut search = TxnSearch::default();
        for entry in &self.entries {
            if entry.last_offset >= fetch_offset && entry.first_offset < upper_bound_offset {
                search.aborted.push(*entry);
            }
            if entry.last_stable_offset >= upper_bound_offset {
                search.complete = true;
                break;
            }
        }
        search
    }

    /// Drops the entries whose marker is at or past `offset` (the log was
    /// truncated there).
    pub fn truncate_to(&mut self, offset: i64) -> Result<()> {
        let keep = self.entries.iter().take_while(|e| e.last_offset < offset).count();
        if keep == self.entries.len() {
            return Ok(());
        }
        self.entries.truncate(keep);
        self.rewrite()
    }

    /// Forces the entries to disk.
    pub fn flush(&self) -> Result<()> {
        if self.unsynced.swap(false, Ordering::AcqRel) {
            match OpenOptions::new().append(true).open(&self.path) {
                Ok(file) => crate::fsync::sync_data(&file)?,
                // Renamed or deleted with its segment meanwhile.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Writes the in-memory entries over the file (or removes it when none).
    fn rewrite(&mut self) -> Result<()> {
        self.unsynced.store(false, Ordering::Release);
        if self.entries.is_empty() {
            match std::fs::remove_file(&self.path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => return Ok(()),
            }
        }
        let bytes: Vec<u8> = self.entries.iter().flat_map(|e| e.encode()).collect();
        crate::checkpoint::write_atomically(&self.path, &bytes)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(producer_id: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn { producer_id, first_offset: first, last_offset: last, last_stable_offset: lso }
    }

    #[test]
    fn entries_are_kafkas_34_bytes_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.txnindex");
        let mut index = TransactionIndex::open(&path).unwrap();
        assert!(!path.exists(), "created with the first entry only");
        index.append(entry(7, 0, 10, 11)).unwrap();
        index.append(entry(8, 5, 20, 21)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 68);
        assert_eq!(&bytes[..10], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 7]);
        assert!(index.append(entry(9, 0, 20, 21)).is_err(), "markers only move forward");
        drop(index);
        // A torn trailing entry is dropped.
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(&[0, 0, 1]).unwrap();
        let index = TransactionIndex::open(&path).unwrap();
        assert_eq!(index.entries(), &[entry(7, 0, 10, 11), entry(8, 5, 20, 21)]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 68);
    }

    #[test]
    fn collect_finds_overlapping_aborts_and_knows_when_to_stop() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = TransactionIndex::open(&dir.path().join("x.txnindex")).unwrap();
        index.append(entry(1, 0, 5, 6)).unwrap();
        index.append(entry(2, 3, 9, 10)).unwrap();
        index.append(entry(3, 12, 15, 30)).unwrap();
        let found = index.collect(6, 10);
        assert_eq!(found.aborted, vec![entry(2, 3, 9, 10)]);
        assert!(found.complete, "an abort leaving the stable offset at 10 covers the range");
        let found = index.collect(0, 40);
        assert_eq!(found.aborted.len(), 3);
        assert!(!found.complete, "a later segment may hold more");
    }

    #[test]
    fn truncation_and_ensure() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.txnindex");
        let mut index = TransactionIndex::open(&path).unwrap();
        index.append(entry(1, 0, 5, 6)).unwrap();
        index.append(entry(2, 3, 9, 10)).unwrap();
        index.ensure(entry(2, 3, 9, 10)).unwrap();
        assert_eq!(index.entries().len(), 2, "ensure does not repeat an entry");
        index.truncate_to(9).unwrap();
        assert_eq!(index.entries(), &[entry(1, 0, 5, 6)]);
        index.ensure(entry(2, 3, 9, 10)).unwrap();
        assert_eq!(TransactionIndex::open(&path).unwrap().entries().len(), 2);
        index.truncate_to(0).unwrap();
        assert!(!path.exists());
    }
}
