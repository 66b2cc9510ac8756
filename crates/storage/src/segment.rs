//! One log segment: `<base offset>.log` with its `.index`, `.timeindex`
//! and, once a transaction aborts in it, `.txnindex`.
//!
//! Appends go to the end of the file with vectored writes (the rewritten
//! batch header, then the producer's bytes untouched). Reads return file
//! slices so the caller chooses how to move the bytes (copy or `sendfile`).
//!
//! A broker may host tens of thousands of segments, so they hold as little as
//! they can: only the active segment keeps its `.log` open; inactive ones
//! borrow a descriptor from the process's [`FileCache`] for each read. Index
//! files are mapped on first use and their descriptors closed once mapped, so
//! start-up maps no index it does not need. The transaction index is read on
//! first use too and holds no descriptor: it is opened only to append.

use std::cell::{Cell, OnceCell};
use std::fs::{File, OpenOptions};
use std::io::{IoSlice, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;

use crate::batch::{self, BatchHeader, HEADER_LEN};
use crate::error::{Result, StorageError};
use crate::file_cache::FileCache;
use crate::index::{OffsetIndex, TimeIndex};
use crate::txn_index::{TransactionIndex, TXN_INDEX_SUFFIX};

/// The files of a segment (the transaction index only once an abort is in it).
pub const SUFFIXES: [&str; 4] = [".log", ".index", ".timeindex", TXN_INDEX_SUFFIX];

/// Names a segment file the way Kafka does: the base offset in 20 digits.
pub fn file_name(base_offset: i64, suffix: &str) -> String {
    format!("{base_offset:020}{suffix}")
}

/// Per-segment settings taken from the log config.
#[derive(Debug, Clone, Copy)]
pub struct SegmentConfig {
    pub index_interval_bytes: usize,
    pub max_index_bytes: usize,
    /// Where inactive segments find an open descriptor of their `.log`.
    pub files: &'static FileCache,
}

/// A batch ready to be written: its rewritten header and the untouched rest.
pub struct PreparedBatch<'a> {
    pub header: [u8; HEADER_LEN],
    pub body: &'a [u8],
    pub last_offset: i64,
    pub max_timestamp: i64,
}

impl PreparedBatch<'_> {
    pub fn size(&self) -> usize {
        HEADER_LEN + self.body.len()
    }
}

/// A byte range of a segment file holding whole batches. It holds the file
/// itself, so the range stays readable after the cache closes its copy.
#[derive(Debug, Clone)]
pub struct FileSlice {
    pub file: Arc<File>,
    pub position: u64,
    pub len: usize,
    /// The offset after the last batch in the slice.
    pub end_offset: i64,
}

impl FileSlice {
    /// Copies the slice into memory.
    pub fn read(&self) -> Result<Bytes> {
        let mut buf = vec![0u8; self.len];
        self.file.read_exact_at(&mut buf, self.position)?;
        Ok(buf.into())
    }
}

/// What recovery found in a segment.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub valid_bytes: u64,
    pub truncated_bytes: u64,
    pub batches: usize,
}

/// The largest timestamp in a segment and the offset of its record.
type MaxTimestamp = (i64, i64);

/// Both indexes of a segment, mapped.
#[derive(Debug)]
struct Indexes {
    offset: OffsetIndex,
    time: TimeIndex,
    /// Grown to `segment.index.bytes` for appends; trimmed again on roll.
    preallocated: bool,
}

/// Where the next index entry is due, carried from batch to batch.
#[derive(Debug, Clone, Copy)]
struct IndexCursor {
    bytes_since_last_entry: usize,
    max_timestamp: MaxTimestamp,
}

impl Indexes {
    fn open(log_path: &Path, base_offset: i64) -> Result<Self> {
        Ok(Self {
            offset: OffsetIndex::open(&sibling_path(log_path, ".index"), base_offset)?,
            time: TimeIndex::open(&sibling_path(log_path, ".timeindex"), base_offset)?,
            preallocated: false,
        })
    }

    fn sanity_check(&self, log_size: u64) -> std::result::Result<(), String> {
        self.offset.sanity_check(log_size).and_then(|_| self.time.sanity_check())
    }

    fn preallocate(&mut self, max_bytes: usize) -> Result<()> {
        if !self.preallocated {
            self.offset.resize(max_bytes)?;
            self.time.resize(max_bytes)?;
            self.preallocated = true;
        }
        Ok(())
    }

    /// Index bookkeeping for one batch at `position`: Kafka's rule of an entry
    /// (for the batch's last offset) once `index.interval.bytes` have passed.
    fn index_batch(
        &mut self,
        cursor: &mut IndexCursor,
        interval_bytes: usize,
        (position, size): (u64, usize),
        last_offset: i64,
        max_timestamp: i64,
    ) -> Result<()> {
        if max_timestamp > cursor.max_timestamp.0 {
            cursor.max_timestamp = (max_timestamp, last_offset);
        }
        if cursor.bytes_since_last_entry > interval_bytes {
            let position = index_position(position)?;
            self.offset.append(last_offset, position)?;
            self.time.maybe_append(cursor.max_timestamp.0, cursor.max_timestamp.1)?;
            cursor.bytes_since_last_entry = 0;
        }
        cursor.bytes_since_last_entry += size;
        Ok(())
    }

    /// Readies the indexes of a segment that takes no more appends: the last
    /// max timestamp recorded and the files trimmed to their entries.
    fn seal(&mut self, max_timestamp: MaxTimestamp) -> Result<()> {
        self.time.maybe_append(max_timestamp.0, max_timestamp.1)?;
        self.offset.trim()?;
        self.time.trim()?;
        self.preallocated = false;
        Ok(())
    }
}

/// What a scan of a segment's log from its start found.
struct Scan {
    indexes: Indexes,
    cursor: IndexCursor,
    valid_bytes: u64,
    next_offset: i64,
    batches: usize,
}

#[derive(Debug)]
pub struct LogSegment {
    /// This segment's key in the file cache.
    id: u64,
    base_offset: i64,
    log_path: PathBuf,
    /// The active segment's own descriptor, opened for appending; inactive
    /// segments use the file cache.
    held: Option<Arc<File>>,
    size: u64,
    next_offset: i64,
    /// Boxed: a log keeps its segments in a B-tree whose nodes hold eleven
    /// of them, even for the one segment most logs have.
    indexes: OnceCell<Box<Indexes>>,
    /// Read on first use: most segments never see an abort.
    txn_index: OnceCell<TransactionIndex>,
    config: SegmentConfig,
    bytes_since_last_index_entry: usize,
    /// Known for segments appended to or scanned; read from the time index on
    /// first use for those loaded from disk.
    max_timestamp: Cell<Option<MaxTimestamp>>,
    created_at_ms: i64,
}

impl LogSegment {
    /// Creates a new, empty, active segment: its `.log` now, its indexes
    /// with the first append (a log nobody writes to costs one file).
    pub fn create(dir: &Path, base_offset: i64, config: SegmentConfig, now_ms: i64) -> Result<Self> {
        Self::create_with_suffix(dir, base_offset, "", config, now_ms)
    }

    /// Creates a new, empty, active segment whose file names carry `suffix`
    /// after the usual one (`.log.cleaned`, ...): the cleaner's not-yet-live
    /// output.
    pub fn create_with_suffix(
        dir: &Path,
        base_offset: i64,
        suffix: &str,
        config: SegmentConfig,
        now_ms: i64,
    ) -> Result<Self> {
        for kind in SUFFIXES {
            remove_if_present(&dir.join(file_name(base_offset, &format!("{kind}{suffix}"))))?;
        }
        let log_path = dir.join(file_name(base_offset, &format!(".log{suffix}")));
        let segment = Self::open_at(log_path, base_offset, config, now_ms)?;
        segment.max_timestamp.set(Some((-1, base_offset)));
        Ok(segment)
    }

    /// Opens the active segment's `.log` as it is on disk; [`Self::load_state`]
    /// or [`Self::recover`] then reads it to learn its end.
    pub fn open(dir: &Path, base_offset: i64, config: SegmentConfig, now_ms: i64) -> Result<Self> {
        Self::open_at(dir.join(file_name(base_offset, ".log")), base_offset, config, now_ms)
    }

    fn open_at(log_path: PathBuf, base_offset: i64, config: SegmentConfig, now_ms: i64) -> Result<Self> {
        let file = open_for_append(&log_path)?;
        let size = file.metadata()?.len();
        let mut segment = Self::inactive_at(log_path, base_offset, config, size, now_ms);
        segment.held = Some(Arc::new(file));
        Ok(segment)
    }

    /// A segment on disk that takes no appends, `size` bytes long. Nothing is
    /// opened or mapped until it is read; [`Log`](crate::Log) sets its end to
    /// the next segment's base offset.
    pub fn inactive(dir: &Path, base_offset: i64, config: SegmentConfig, size: u64, now_ms: i64) -> Self {
        Self::inactive_at(dir.join(file_name(base_offset, ".log")), base_offset, config, size, now_ms)
    }

    fn inactive_at(
        log_path: PathBuf,
        base_offset: i64,
        config: SegmentConfig,
        size: u64,
        now_ms: i64,
    ) -> Self {
        Self {
            id: FileCache::next_id(),
            base_offset,
            log_path,
            held: None,
            size,
            next_offset: base_offset,
            indexes: OnceCell::new(),
            txn_index: OnceCell::new(),
            config,
            bytes_since_last_index_entry: 0,
            max_timestamp: Cell::new(None),
            created_at_ms: now_ms,
        }
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// The offset after the last batch; for an inactive segment loaded from
    /// disk, the next segment's base offset.
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    pub(crate) fn set_next_offset(&mut self, next_offset: i64) {
        self.next_offset = next_offset;
    }

    /// The largest timestamp of the segment's records, -1 if none.
    pub fn max_timestamp(&self) -> Result<i64> {
        Ok(self.max_timestamp_and_offset()?.0)
    }

    /// The offset of the record holding [`Self::max_timestamp`].
    pub fn offset_of_max_timestamp(&self) -> Result<i64> {
        Ok(self.max_timestamp_and_offset()?.1)
    }

    fn max_timestamp_and_offset(&self) -> Result<MaxTimestamp> {
        if let Some(known) = self.max_timestamp.get() {
            return Ok(known);
        }
        let last = self.indexes()?.time.last();
        let known = last.map_or((-1, self.base_offset), |entry| (entry.timestamp, entry.offset));
        self.max_timestamp.set(Some(known));
        Ok(known)
    }

    pub fn created_at_ms(&self) -> i64 {
        self.created_at_ms
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Whether the segment holds its own descriptor (it is the active one).
    pub fn is_active(&self) -> bool {
        self.held.is_some()
    }

    /// This segment's identity: the segment a cleaner swap puts in its place
    /// never shares it.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Bytes of the offset and time index entries: from the mapped indexes,
    /// else from the sealed files' sizes, without mapping them.
    pub(crate) fn index_bytes(&self) -> Result<(u64, u64)> {
        if let Some(indexes) = self.indexes.get() {
            let offset = (indexes.offset.entries() * OffsetIndex::ENTRY) as u64;
            return Ok((offset, (indexes.time.entries() * TimeIndex::ENTRY) as u64));
        }
        let size = |kind| match std::fs::metadata(sibling_path(&self.log_path, kind)) {
            Ok(metadata) => Ok(metadata.len()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e),
        };
        Ok((size(".index")?, size(".timeindex")?))
    }

    /// Whether the indexes are mapped (they are on first use).
    pub fn indexes_loaded(&self) -> bool {
        self.indexes.get().is_some()
    }

    pub fn index(&self) -> Result<&OffsetIndex> {
        Ok(&self.indexes()?.offset)
    }

    pub fn time_index(&self) -> Result<&TimeIndex> {
        Ok(&self.indexes()?.time)
    }

    /// The aborted-transaction index, read on first use.
    pub fn txn_index(&self) -> Result<&TransactionIndex> {
        if let Some(index) = self.txn_index.get() {
            return Ok(index);
        }
        let index = TransactionIndex::open(&sibling_path(&self.log_path, TXN_INDEX_SUFFIX))?;
        Ok(self.txn_index.get_or_init(|| index))
    }

    pub fn txn_index_mut(&mut self) -> Result<&mut TransactionIndex> {
        self.txn_index()?;
        Ok(self.txn_index.get_mut().expect("loaded above"))
    }

    /// The transaction marker of the control batch at `position`.
    pub fn end_txn_marker_at(
        &self,
        position: u64,
        header: &BatchHeader,
    ) -> Result<Option<batch::EndTxnMarker>> {
        if !header.is_control() {
            return Ok(None);
        }
        let mut buf = vec![0u8; header.size];
        self.file()?.read_exact_at(&mut buf, position)?;
        Ok(batch::end_txn_marker(&buf))
    }

    /// Pretends the segment holds `size` bytes, to test the limits near 2 GiB.
    #[cfg(test)]
    pub(crate) fn set_size_for_test(&mut self, size: u64) {
        self.size = size;
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Whether an index has no room for another entry, which forces a roll.
    pub fn indexes_full(&self) -> Result<bool> {
        let indexes = self.indexes()?;
        Ok(indexes.preallocated && (indexes.offset.is_full() || indexes.time.is_full()))
    }

    /// The `.log` file: the active segment's own, else the cache's.
    pub fn file(&self) -> Result<Arc<File>> {
        match &self.held {
            Some(file) => Ok(file.clone()),
            None => Ok(self.config.files.get_or_open(self.id, &self.log_path)?),
        }
    }

    /// The indexes, mapped on first use. An index that fails its sanity
    /// check is rebuilt from the log.
    fn indexes(&self) -> Result<&Indexes> {
        if let Some(indexes) = self.indexes.get() {
            return Ok(indexes);
        }
        let indexes = Indexes::open(&self.log_path, self.base_offset)?;
        let indexes = match indexes.sanity_check(self.size) {
            Ok(()) => indexes,
            Err(reason) => {
                tracing::warn!(segment = %self.log_path.display(), "rebuilding the indexes: {reason}");
                drop(indexes);
                self.rebuild_indexes()?
            }
        };
        Ok(self.indexes.get_or_init(|| Box::new(indexes)))
    }

    /// Indexes built by a scan of the log, sealed unless the segment is active.
    fn rebuild_indexes(&self) -> Result<Indexes> {
        let file = self.file()?;
        let scan = self.scan(&file, self.size, usize::MAX)?;
        if scan.valid_bytes != self.size {
            tracing::warn!(segment = %self.log_path.display(), valid_bytes = scan.valid_bytes,
                "the log holds bytes past its last valid batch");
        }
        let mut indexes = scan.indexes;
        if !self.is_active() {
            indexes.seal(scan.cursor.max_timestamp)?;
        }
        self.max_timestamp.set(Some(scan.cursor.max_timestamp));
        Ok(indexes)
    }

    /// Loaded and grown for appends.
    fn writable_indexes(&mut self) -> Result<&mut Indexes> {
        self.indexes()?;
        let indexes = self.indexes.get_mut().expect("loaded above");
        indexes.preallocate(self.config.max_index_bytes)?;
        Ok(indexes)
    }

    /// Loads the end offset and max timestamp of a cleanly closed active
    /// segment: trusts its indexes and scans only past the last index entry.
    pub fn load_state(&mut self) -> Result<()> {
        if self.size == 0 {
            self.max_timestamp.set(Some((-1, self.base_offset)));
            return Ok(());
        }
        let file = self.file()?;
        let indexes = self.indexes()?;
        let mut position = indexes.offset.last().map_or(0, |entry| u64::from(entry.position));
        let mut max = indexes.time.last().map_or((-1, self.base_offset), |e| (e.timestamp, e.offset));
        let mut next_offset = self.base_offset;
        while let Some(header) = header_in(&file, position, self.size)? {
            next_offset = header.next_offset();
            if header.max_timestamp > max.0 {
                max = (header.max_timestamp, header.last_offset());
            }
            position += header.size as u64;
        }
        if position != self.size {
            return Err(StorageError::CorruptRecord(format!(
                "{} ends with a partial batch",
                self.log_path.display()
            )));
        }
        self.next_offset = next_offset;
        self.max_timestamp.set(Some(max));
        Ok(())
    }

    /// Reads the header of the batch at `position`, if a whole header is there.
    pub fn header_at(&self, position: u64) -> Result<Option<BatchHeader>> {
        header_in(&*self.file()?, position, self.size)
    }

    /// Appends batches whose offsets follow this segment's end. The data is
    /// written before the indexes point at it.
    pub fn append(&mut self, batches: &[PreparedBatch<'_>]) -> Result<()> {
        if self.held.is_none() {
            self.activate()?;
        }
        let file = self.held.clone().expect("activated above");
        let mut cursor = IndexCursor {
            bytes_since_last_entry: self.bytes_since_last_index_entry,
            max_timestamp: self.max_timestamp_and_offset()?,
        };
        let interval = self.config.index_interval_bytes;
        let mut position = self.size;
        let bytes: u64 = batches.iter().map(|b| b.size() as u64).sum();
        if position + bytes > MAX_SEGMENT_BYTES {
            return Err(StorageError::SegmentFull(format!(
                "{} holds {position} bytes and cannot take {bytes} more: positions stop at {MAX_SEGMENT_BYTES}",
                self.log_path().display()
            )));
        }
        let indexes = self.writable_indexes()?;
        let mut slices: Vec<IoSlice<'_>> =
            batches.iter().flat_map(|b| [IoSlice::new(&b.header), IoSlice::new(b.body)]).collect();
        write_all_vectored(&file, &mut slices)?;
        let mut result = Ok(());
        for batch in batches {
            let (size, at) = (batch.size(), position);
            position += size as u64;
            result = result.and_then(|_| {
                indexes.index_batch(&mut cursor, interval, (at, size), batch.last_offset, batch.max_timestamp)
            });
        }
        self.size = position;
        if let Some(last) = batches.last() {
            self.next_offset = last.last_offset + 1;
        }
        self.bytes_since_last_index_entry = cursor.bytes_since_last_entry;
        self.max_timestamp.set(Some(cursor.max_timestamp));
        result
    }

    /// Finds the batch holding `offset` (or the first one after it), scanning
    /// from the nearest index entry. Returns its position and header.
    pub fn translate_offset(&self, offset: i64) -> Result<Option<(u64, BatchHeader)>> {
        self.translate_in(&*self.file()?, offset)
    }

    fn translate_in(&self, file: &File, offset: i64) -> Result<Option<(u64, BatchHeader)>> {
        let mut position = u64::from(self.indexes()?.offset.lookup(offset).position);
        while let Some(header) = header_in(file, position, self.size)? {
            if header.last_offset() >= offset {
                return Ok(Some((position, header)));
            }
            position += header.size as u64;
        }
        Ok(None)
    }

    /// Reads whole batches starting at the one holding `offset`, up to
    /// `max_bytes` and never past `max_position`. With `min_one_batch` the
    /// first batch is returned whole even when larger than `max_bytes`.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        max_position: u64,
        min_one_batch: bool,
    ) -> Result<Option<FileSlice>> {
        let file = self.file()?;
        let Some((start, first)) = self.translate_in(&file, offset)? else {
            return Ok(None);
        };
        if start >= max_position {
            return Ok(None);
        }
        let mut end = start;
        let mut end_offset = first.base_offset;
        let mut header = Some(first);
        while let Some(h) = header {
            let batch_end = end + h.size as u64;
            let fits = batch_end - start <= max_bytes as u64 || (min_one_batch && end == start);
            if batch_end > max_position || !fits {
                break;
            }
            end = batch_end;
            end_offset = h.next_offset();
            header = header_in(&file, end, self.size)?;
        }
        Ok(Some(FileSlice { file, position: start, len: (end - start) as usize, end_offset }))
    }

    /// The first record with a timestamp `>= timestamp`, as (timestamp, offset).
    pub fn find_offset_by_timestamp(&self, timestamp: i64, from_offset: i64) -> Result<Option<(i64, i64)>> {
        let file = self.file()?;
        let indexes = self.indexes()?;
        let indexed = indexes.time.lookup(timestamp);
        let start_offset = indexed.offset.max(from_offset);
        let mut position = u64::from(indexes.offset.lookup(start_offset).position);
        while let Some(header) = header_in(&file, position, self.size)? {
            if header.max_timestamp >= timestamp && header.last_offset() >= from_offset {
                let records = decode_batch(&file, position, header.size)?;
                let found =
                    records.iter().find(|(ts, offset)| *ts >= timestamp && *offset >= from_offset).copied();
                if found.is_some() {
                    return Ok(found);
                }
            }
            position += header.size as u64;
        }
        Ok(None)
    }

    /// The record offset of the largest timestamp in this segment.
    pub fn offset_of_largest_timestamp(&self) -> Result<Option<(i64, i64)>> {
        let (max_timestamp, offset) = self.max_timestamp_and_offset()?;
        if max_timestamp < 0 {
            return Ok(None);
        }
        let file = self.file()?;
        let Some((position, header)) = self.translate_in(&file, offset)? else {
            return Ok(None);
        };
        let records = decode_batch(&file, position, header.size)?;
        Ok(records.into_iter().find(|(ts, _)| *ts == max_timestamp).or(Some((max_timestamp, offset))))
    }

    /// Rescans the whole file: verifies every batch, rebuilds both indexes and
    /// truncates at the first batch that is partial or fails its checks.
    pub fn recover(&mut self, max_batch_bytes: usize) -> Result<RecoveryReport> {
        self.indexes = OnceCell::new();
        let file = self.file()?;
        let file_len = file.metadata()?.len();
        if file_len == 0 {
            // Nothing to verify, nothing to index: the indexes wait for an append.
            self.size = 0;
            self.next_offset = self.base_offset;
            self.bytes_since_last_index_entry = 0;
            self.max_timestamp.set(Some((-1, self.base_offset)));
            let base_offset = self.base_offset;
            self.txn_index_mut()?.truncate_to(base_offset)?;
            return Ok(RecoveryReport::default());
        }
        let scan = self.scan(&file, file_len, max_batch_bytes)?;
        let truncated = file_len - scan.valid_bytes;
        if truncated > 0 {
            file.set_len(scan.valid_bytes)?;
        }
        self.size = scan.valid_bytes;
        self.next_offset = scan.next_offset;
        self.bytes_since_last_index_entry = scan.cursor.bytes_since_last_entry;
        self.max_timestamp.set(Some(scan.cursor.max_timestamp));
        let _ = self.indexes.set(Box::new(scan.indexes));
        let next_offset = self.next_offset;
        self.txn_index_mut()?.truncate_to(next_offset)?;
        Ok(RecoveryReport {
            valid_bytes: scan.valid_bytes,
            truncated_bytes: truncated,
            batches: scan.batches,
        })
    }

    /// Drops the batch holding `offset` and every later one, with their
    /// index entries; the segment takes appends afterwards. Returns the
    /// bytes removed.
    pub fn truncate_to(&mut self, offset: i64) -> Result<u64> {
        self.activate()?;
        let Some((position, _)) = self.translate_offset(offset)? else { return Ok(0) };
        let removed = self.size - position;
        self.file()?.set_len(position)?;
        // Rebuilding the indexes from what is left is simpler than trimming
        // them, and truncation is rare (a follower cutting a divergent tail).
        self.recover(usize::MAX)?;
        Ok(removed)
    }

    /// Builds fresh indexes from the batches of the first `file_len` bytes
    /// that pass their checks.
    fn scan(&self, file: &File, file_len: u64, max_batch_bytes: usize) -> Result<Scan> {
        let mut indexes = Indexes::open(&self.log_path, self.base_offset)?;
        indexes.offset.reset()?;
        indexes.time.reset()?;
        if file_len > 0 {
            indexes.preallocate(self.config.max_index_bytes)?;
        }
        let mut cursor = IndexCursor { bytes_since_last_entry: 0, max_timestamp: (-1, self.base_offset) };
        let (mut position, mut batches, mut next_offset) = (0u64, 0, self.base_offset);
        while let Some(header) = read_valid_batch(file, position, file_len, max_batch_bytes, next_offset) {
            let at = (position, header.size);
            let interval = self.config.index_interval_bytes;
            indexes.index_batch(&mut cursor, interval, at, header.last_offset(), header.max_timestamp)?;
            next_offset = header.next_offset();
            position += header.size as u64;
            batches += 1;
        }
        Ok(Scan { indexes, cursor, valid_bytes: position, next_offset, batches })
    }

    /// Prepares an inactive segment: indexes shrink to their entries, the
    /// last max timestamp is recorded, as Kafka does at roll, and the
    /// descriptor goes to the file cache, where recent segments stay open.
    pub fn on_roll(&mut self) -> Result<()> {
        self.seal()?;
        if let Some(file) = self.held.take() {
            self.config.files.insert(self.id, file);
        }
        Ok(())
    }

    /// Readies a segment to take appends: it holds its own descriptor.
    pub fn activate(&mut self) -> Result<()> {
        if self.held.is_none() {
            self.held = Some(Arc::new(open_for_append(&self.log_path)?));
            self.config.files.remove(self.id);
        }
        Ok(())
    }

    fn seal(&mut self) -> Result<()> {
        if !self.indexes_loaded() {
            // Untouched since loaded: the files are as the last close left them.
            return Ok(());
        }
        let max_timestamp = self.max_timestamp_and_offset()?;
        self.indexes.get_mut().expect("checked above").seal(max_timestamp)
    }

    /// Forces the log and index bytes to disk.
    pub fn flush(&self) -> Result<()> {
        crate::fsync::sync_data(&*self.file()?)?;
        if let Some(indexes) = self.indexes.get() {
            indexes.offset.flush()?;
            indexes.time.flush()?;
        }
        if let Some(txn_index) = self.txn_index.get() {
            txn_index.flush()?;
        }
        Ok(())
    }

    /// Closes cleanly: indexes trimmed so the next start trusts them.
    pub fn close(&mut self) -> Result<()> {
        self.seal()
    }

    /// Unmaps the indexes of a sealed segment until they are used again.
    pub fn unload_indexes(&mut self) -> Result<()> {
        self.seal()?;
        self.indexes = OnceCell::new();
        Ok(())
    }

    /// Renames the segment's files with `suffix` appended and closes them;
    /// readers holding the file keep reading it. Returns the new paths. An
    /// index never created (the segment took no append) is skipped.
    pub fn rename_to(self, suffix: &str) -> Result<Vec<PathBuf>> {
        let paths = SUFFIXES.map(|kind| sibling_path(&self.log_path, kind));
        drop(self);
        let mut renamed = Vec::with_capacity(paths.len());
        for (kind, path) in SUFFIXES.iter().zip(paths) {
            let mut target = path.clone().into_os_string();
            target.push(suffix);
            match std::fs::rename(&path, &target) {
                Ok(()) => renamed.push(target.into()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && *kind != ".log" => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(renamed)
    }

    /// Removes the segment's files.
    pub fn delete(self) -> Result<()> {
        let log_path = self.log_path.clone();
        drop(self);
        remove_segment_files(&log_path)
    }
}

impl Drop for LogSegment {
    fn drop(&mut self) {
        self.config.files.remove(self.id);
    }
}

/// The `kind` file (`.log`, `.index`, `.timeindex`) of the segment whose
/// log is at `log_path`; a suffix after `.log` (`.cleaned`) carries over, so
/// `<base>.log.cleaned` pairs with `<base>.index.cleaned`.
pub fn sibling_path(log_path: &Path, kind: &str) -> PathBuf {
    let name = log_path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let (base, rest) = name.split_at(name.find('.').unwrap_or(name.len()));
    let suffix = rest.strip_prefix(".log").unwrap_or(rest);
    log_path.with_file_name(format!("{base}{kind}{suffix}"))
}

/// Removes the `.log`, `.index` and `.timeindex` of the segment at `log_path`.
pub fn remove_segment_files(log_path: &Path) -> Result<()> {
    for kind in SUFFIXES {
        remove_if_present(&sibling_path(log_path, kind))?;
    }
    Ok(())
}

fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// The active segment's descriptor: every write lands at the end.
fn open_for_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().read(true).append(true).create(true).open(path)
}

/// The most bytes a segment may hold: Kafka's `.index` records positions as
/// a signed 32-bit int, so a batch starting past this could not be indexed
/// (it would wrap, and reads would land mid-batch). The log rolls before a
/// segment gets there; an append that would cross it is refused.
pub const MAX_SEGMENT_BYTES: u64 = i32::MAX as u64;

/// `position` as the `.index` stores it, refused rather than wrapped.
fn index_position(position: u64) -> Result<u32> {
    u32::try_from(position).ok().filter(|p| u64::from(*p) <= MAX_SEGMENT_BYTES).ok_or_else(|| {
        StorageError::SegmentFull(format!(
            "position {position} is past the last indexable {MAX_SEGMENT_BYTES}"
        ))
    })
}

/// The header of the batch at `position` of a `size`-byte log, if a whole
/// header is there.
fn header_in(file: &File, position: u64, size: u64) -> Result<Option<BatchHeader>> {
    if position + HEADER_LEN as u64 > size {
        return Ok(None);
    }
    let mut buf = [0u8; HEADER_LEN];
    file.read_exact_at(&mut buf, position)?;
    BatchHeader::parse(&buf).map(Some)
}

/// (timestamp, offset) of each record in the batch at `position`.
fn decode_batch(file: &File, position: u64, size: usize) -> Result<Vec<(i64, i64)>> {
    let mut buf = vec![0u8; size];
    file.read_exact_at(&mut buf, position)?;
    let header = BatchHeader::parse(&buf)?;
    let mut bytes = Bytes::from(buf);
    let set = RecordBatchDecoder::decode(&mut bytes)
        .map_err(|e| StorageError::CorruptRecord(format!("undecodable batch: {e}")))?;
    let log_append = header.timestamp_type() == batch::TimestampType::LogAppendTime;
    Ok(set
        .records
        .iter()
        .map(|r| (if log_append { header.max_timestamp } else { r.timestamp }, r.offset))
        .collect())
}

/// The header of the batch at `position` if the whole batch is there and
/// passes its checks.
fn read_valid_batch(
    file: &File,
    position: u64,
    file_len: u64,
    max: usize,
    expected: i64,
) -> Option<BatchHeader> {
    let mut head = [0u8; batch::LOG_OVERHEAD];
    if position + head.len() as u64 > file_len {
        return None;
    }
    file.read_exact_at(&mut head, position).ok()?;
    let size = batch::batch_size(&head)?.ok()?;
    if size > max.max(HEADER_LEN) || position + size as u64 > file_len {
        return None;
    }
    let mut buf = vec![0u8; size];
    file.read_exact_at(&mut buf, position).ok()?;
    let header = batch::verify_stored(&buf).ok()?;
    (header.base_offset >= expected).then_some(header)
}

fn write_all_vectored(mut file: &File, mut slices: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        match file.write_vectored(slices) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::test_support::batch;
    use crate::batch::Batches;
    use crate::log::{Log, LogConfig};
    use crate::txn_index::AbortedTxn;
    use kafka_protocol::records::Compression;

    /// A log of many small segments, closed; returns (base, size) of each.
    fn write_segments(dir: &Path) -> Vec<(i64, u64)> {
        let config = LogConfig { segment_bytes: 2048, index_interval_bytes: 256, ..LogConfig::default() };
        let mut log = Log::open(dir, config, 0, 0, true, 0).unwrap().0;
        for i in 0..200 {
            log.append(&batch(1 + i % 4, 1_000 + i as i64, Compression::None), 0, 0).unwrap();
        }
        log.close(0).unwrap();
        log.segments().map(|s| (s.base_offset(), s.size())).collect()
    }

    fn base_offsets(slice: &FileSlice) -> Vec<i64> {
        let bytes = slice.read().unwrap();
        Batches::new(&bytes).map(|raw| batch::verify_stored(raw.unwrap()).unwrap().base_offset).collect()
    }

    #[test]
    fn an_append_past_the_indexable_positions_is_refused_not_wrapped() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { index_interval_bytes: 0, ..LogConfig::default() }.segment_config();
        let mut segment = LogSegment::create(dir.path(), 0, config, 0).unwrap();
        let bytes = batch(2, 1_000, Compression::None);
        fn prepared(bytes: &[u8], last_offset: i64) -> PreparedBatch<'_> {
            PreparedBatch {
                header: bytes[..HEADER_LEN].try_into().unwrap(),
                body: &bytes[HEADER_LEN..],
                last_offset,
                max_timestamp: 1_001,
            }
        }
        segment.append(&[prepared(&bytes, 1)]).unwrap();
        let file_len = std::fs::metadata(segment.log_path()).unwrap().len();
        // As if the segment had grown to just below the limit.
        segment.set_size_for_test(MAX_SEGMENT_BYTES - 10);
        let refused = segment.append(&[prepared(&bytes, 3)]);
        assert!(matches!(refused, Err(StorageError::SegmentFull(_))), "{refused:?}");
        assert_eq!(segment.size(), MAX_SEGMENT_BYTES - 10);
        assert_eq!(std::fs::metadata(segment.log_path()).unwrap().len(), file_len, "nothing written");
        assert!(index_position(MAX_SEGMENT_BYTES).is_ok());
        for past in [MAX_SEGMENT_BYTES + 1, u64::from(u32::MAX) + 1, 5_000_000_000] {
            assert!(matches!(index_position(past), Err(StorageError::SegmentFull(_))), "{past}");
        }
    }

    #[test]
    fn inactive_segments_read_through_a_bounded_cache() {
        let dir = tempfile::tempdir().unwrap();
        let found = write_segments(dir.path());
        assert!(found.len() >= 6, "small segments roll");
        let files: &'static FileCache = Box::leak(Box::new(FileCache::new(2)));
        let config = SegmentConfig { index_interval_bytes: 256, max_index_bytes: 1024, files };
        let segments: Vec<LogSegment> = found
            .iter()
            .map(|(base, size)| LogSegment::inactive(dir.path(), *base, config, *size, 0))
            .collect();
        let first = segments[0].read(0, 1 << 20, u64::MAX, true).unwrap().unwrap();
        let first_offsets = base_offsets(&first);
        for round in 0..3 {
            for (segment, next) in segments.iter().zip(found.iter().skip(1)) {
                let slice = segment.read(segment.base_offset(), 1 << 20, u64::MAX, true).unwrap().unwrap();
                let offsets = base_offsets(&slice);
                assert_eq!(offsets[0], segment.base_offset(), "round {round}");
                assert!(offsets.iter().all(|o| *o < next.0), "round {round}: stays in its segment");
                assert_eq!(slice.len as u64, segment.size());
                assert!(files.len() <= 2, "round {round}: {} files open", files.len());
            }
        }
        assert!(segments.iter().all(|s| !s.is_active()));
        assert_eq!(base_offsets(&first), first_offsets, "a slice outlives its file's eviction");
        drop(segments);
        assert!(files.is_empty(), "dropped segments close their files");
    }

    #[test]
    fn sibling_files_keep_the_suffix_after_the_kind() {
        let log = Path::new("/d/00000000000000000042.log");
        assert_eq!(sibling_path(log, ".index"), Path::new("/d/00000000000000000042.index"));
        let cleaned = Path::new("/d/00000000000000000042.log.cleaned");
        assert_eq!(
            sibling_path(cleaned, ".timeindex"),
            Path::new("/d/00000000000000000042.timeindex.cleaned")
        );
        assert_eq!(sibling_path(cleaned, ".log"), cleaned);
    }

    #[test]
    fn a_suffixed_segment_writes_suffixed_indexes_and_renames_whole() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { index_interval_bytes: 1, ..LogConfig::default() }.segment_config();
        let mut segment = LogSegment::create_with_suffix(dir.path(), 0, ".cleaned", config, 0).unwrap();
        let mut log = Log::open(&dir.path().join("source"), LogConfig::default(), 0, 0, true, 0).unwrap().0;
        for i in 0..3 {
            log.append(&batch(1, 1_000 + i, Compression::None), 0, 0).unwrap();
        }
        let bytes = log.read(0, 1 << 20, 3, true).unwrap().unwrap().read().unwrap();
        let prepared: Vec<PreparedBatch<'_>> = Batches::new(&bytes)
            .map(|raw| {
                let raw = raw.unwrap();
                let header = batch::verify_stored(raw).unwrap();
                PreparedBatch {
                    header: raw[..HEADER_LEN].try_into().unwrap(),
                    body: &raw[HEADER_LEN..],
                    last_offset: header.last_offset(),
                    max_timestamp: header.max_timestamp,
                }
            })
            .collect();
        segment.append(&prepared).unwrap();
        segment.on_roll().unwrap();
        let name = |kind: &str| dir.path().join(file_name(0, kind));
        assert!(segment.index().unwrap().entries() > 0);
        assert!(name(".log.cleaned").exists() && name(".index.cleaned").exists());
        assert!(name(".timeindex.cleaned").exists() && !name(".index").exists());
        assert!(!name(".txnindex.cleaned").exists(), "no abort, no transaction index");
        let abort = AbortedTxn { producer_id: 7, first_offset: 0, last_offset: 2, last_stable_offset: 3 };
        segment.txn_index_mut().unwrap().append(abort).unwrap();
        assert!(name(".txnindex.cleaned").exists() && !name(".txnindex").exists());
        segment.flush().unwrap();
        let renamed = segment.rename_to(".deleted").unwrap();
        let expected: Vec<PathBuf> = [
            ".log.cleaned.deleted",
            ".index.cleaned.deleted",
            ".timeindex.cleaned.deleted",
            ".txnindex.cleaned.deleted",
        ]
        .map(name)
        .into();
        assert_eq!(renamed, expected);
        assert!(renamed.iter().all(|path| path.exists()));
    }

    #[test]
    fn a_clean_reopen_opens_and_maps_only_the_active_segment() {
        let dir = tempfile::tempdir().unwrap();
        let found = write_segments(dir.path());
        let (log, report) = Log::open(dir.path(), LogConfig::default(), i64::MAX, 0, true, 0).unwrap();
        assert_eq!(report.recovered_segments, 0);
        let segments: Vec<&LogSegment> = log.segments().collect();
        let (active, inactive) = segments.split_last().unwrap();
        assert!(active.is_active());
        for (segment, next) in inactive.iter().zip(found.iter().skip(1)) {
            assert!(!segment.is_active() && !segment.indexes_loaded(), "{}", segment.base_offset());
            assert_eq!(segment.next_offset(), next.0, "ends where the next begins");
        }
        let slice = log.read(0, 100, log.log_end_offset(), true).unwrap().unwrap();
        assert_eq!(base_offsets(&slice)[0], 0);
        assert!(inactive[0].indexes_loaded(), "mapped once read");
        assert!(!inactive[1].indexes_loaded());
        assert!(inactive[1].max_timestamp().unwrap() > 0, "learnt from its time index");
    }
}
