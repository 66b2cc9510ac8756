//! One log segment: `<base offset>.log` with its `.index`, `.timeindex`
//! and, once a transaction aborts in it, `.txnindex`.
//!
//! Appends go to the end of the file with vectored writes (the rewritten
//! batch header, then the producer's bytes untouched). Reads return file
//! slices so the caller chooses how to move the bytes (copy or `sendfile`).

use std::fs::{File, OpenOptions};
use std::io::{IoSlice, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;

use crate::batch::{self, BatchHeader, HEADER_LEN};
use crate::error::{Result, StorageError};
use crate::index::{OffsetIndex, TimeIndex};
use crate::txn_index::{TransactionIndex, TXN_INDEX_SUFFIX};

/// Names a segment file the way Kafka does: the base offset in 20 digits.
pub fn file_name(base_offset: i64, suffix: &str) -> String {
    format!("{base_offset:020}{suffix}")
}

/// Per-segment settings taken from the log config.
#[derive(Debug, Clone, Copy)]
pub struct SegmentConfig {
    pub index_interval_bytes: usize,
    pub max_index_bytes: usize,
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

/// A byte range of a segment file holding whole batches.
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

#[derive(Debug)]
pub struct LogSegment {
    base_offset: i64,
    log_path: PathBuf,
    file: Arc<File>,
    size: u64,
    next_offset: i64,
    index: OffsetIndex,
    time_index: TimeIndex,
    txn_index: TransactionIndex,
    config: SegmentConfig,
    bytes_since_last_index_entry: usize,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    created_at_ms: i64,
}

impl LogSegment {
    /// Creates the files of a new, empty segment.
    pub fn create(dir: &Path, base_offset: i64, config: SegmentConfig, now_ms: i64) -> Result<Self> {
        Self::create_with_suffix(dir, base_offset, "", config, now_ms)
    }

    /// Creates a new, empty segment whose file names carry `suffix` after
    /// the usual one (`.log.cleaned`, ...): the cleaner's not-yet-live output.
    pub fn create_with_suffix(
        dir: &Path,
        base_offset: i64,
        suffix: &str,
        config: SegmentConfig,
        now_ms: i64,
    ) -> Result<Self> {
        for kind in [".log", ".index", ".timeindex", TXN_INDEX_SUFFIX] {
            let path = dir.join(file_name(base_offset, &format!("{kind}{suffix}")));
            if path.exists() {
                std::fs::remove_file(&path)?;
            }
        }
        Self::open_with_suffix(dir, base_offset, suffix, config, now_ms)
    }

    /// Opens a segment's files as they are on disk; [`Self::load_state`] or
    /// [`Self::recover`] then reads the log to learn its end.
    pub fn open(dir: &Path, base_offset: i64, config: SegmentConfig, now_ms: i64) -> Result<Self> {
        Self::open_with_suffix(dir, base_offset, "", config, now_ms)
    }

    fn open_with_suffix(
        dir: &Path,
        base_offset: i64,
        suffix: &str,
        config: SegmentConfig,
        now_ms: i64,
    ) -> Result<Self> {
        let path = |kind: &str| dir.join(file_name(base_offset, &format!("{kind}{suffix}")));
        let log_path = path(".log");
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&log_path)?;
        let size = file.metadata()?.len();
        std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0))?;
        let index = OffsetIndex::open(&path(".index"), base_offset, config.max_index_bytes)?;
        let time_index = TimeIndex::open(&path(".timeindex"), base_offset, config.max_index_bytes)?;
        let txn_index = TransactionIndex::open(&path(TXN_INDEX_SUFFIX))?;
        Ok(Self {
            base_offset,
            log_path,
            file: Arc::new(file),
            size,
            next_offset: base_offset,
            index,
            time_index,
            txn_index,
            config,
            bytes_since_last_index_entry: 0,
            max_timestamp: -1,
            offset_of_max_timestamp: base_offset,
            created_at_ms: now_ms,
        })
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// The offset after the last batch appended.
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }

    pub fn offset_of_max_timestamp(&self) -> i64 {
        self.offset_of_max_timestamp
    }

    pub fn created_at_ms(&self) -> i64 {
        self.created_at_ms
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    pub fn index(&self) -> &OffsetIndex {
        &self.index
    }

    pub fn time_index(&self) -> &TimeIndex {
        &self.time_index
    }

    pub fn txn_index(&self) -> &TransactionIndex {
        &self.txn_index
    }

    pub fn txn_index_mut(&mut self) -> &mut TransactionIndex {
        &mut self.txn_index
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
        self.file.read_exact_at(&mut buf, position)?;
        Ok(batch::end_txn_marker(&buf))
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    pub fn indexes_full(&self) -> bool {
        self.index.is_full() || self.time_index.is_full()
    }

    /// Loads the end offset and max timestamp of a cleanly closed segment:
    /// trusts its indexes and scans only past the last index entry.
    pub fn load_state(&mut self) -> Result<()> {
        self.index
            .sanity_check(self.size)
            .and_then(|_| self.time_index.sanity_check())
            .map_err(StorageError::CorruptRecord)?;
        let start = self.index.last().map_or(0, |entry| u64::from(entry.position));
        if let Some(entry) = self.time_index.last() {
            self.max_timestamp = entry.timestamp;
            self.offset_of_max_timestamp = entry.offset;
        }
        let mut position = start;
        while let Some(header) = self.header_at(position)? {
            self.observe(&header);
            position += header.size as u64;
        }
        if position != self.size {
            return Err(StorageError::CorruptRecord(format!(
                "{} ends with a partial batch",
                self.log_path.display()
            )));
        }
        Ok(())
    }

    fn observe(&mut self, header: &BatchHeader) {
        self.next_offset = header.next_offset();
        if header.max_timestamp > self.max_timestamp {
            self.max_timestamp = header.max_timestamp;
            self.offset_of_max_timestamp = header.last_offset();
        }
    }

    /// Reads the header of the batch at `position`, if a whole header is there.
    pub fn header_at(&self, position: u64) -> Result<Option<BatchHeader>> {
        if position + HEADER_LEN as u64 > self.size {
            return Ok(None);
        }
        let mut buf = [0u8; HEADER_LEN];
        self.file.read_exact_at(&mut buf, position)?;
        BatchHeader::parse(&buf).map(Some)
    }

    /// Appends batches whose offsets follow this segment's end.
    pub fn append(&mut self, batches: &[PreparedBatch<'_>]) -> Result<()> {
        let mut position = self.size;
        for batch in batches {
            self.index_batch(position, batch.size(), batch.last_offset, batch.max_timestamp);
            position += batch.size() as u64;
        }
        let mut slices: Vec<IoSlice<'_>> =
            batches.iter().flat_map(|b| [IoSlice::new(&b.header), IoSlice::new(b.body)]).collect();
        write_all_vectored(&self.file, &mut slices)?;
        self.size = position;
        if let Some(last) = batches.last() {
            self.next_offset = last.last_offset + 1;
        }
        Ok(())
    }

    /// Finds the batch holding `offset` (or the first one after it), scanning
    /// from the nearest index entry. Returns its position and header.
    pub fn translate_offset(&self, offset: i64) -> Result<Option<(u64, BatchHeader)>> {
        let mut position = u64::from(self.index.lookup(offset).position);
        while let Some(header) = self.header_at(position)? {
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
        let Some((start, first)) = self.translate_offset(offset)? else {
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
            header = self.header_at(end)?;
        }
        let len = (end - start) as usize;
        Ok(Some(FileSlice { file: self.file.clone(), position: start, len, end_offset }))
    }

    /// The first record with a timestamp `>= timestamp`, as (timestamp, offset).
    pub fn find_offset_by_timestamp(&self, timestamp: i64, from_offset: i64) -> Result<Option<(i64, i64)>> {
        let indexed = self.time_index.lookup(timestamp);
        let start_offset = indexed.offset.max(from_offset);
        let mut position = u64::from(self.index.lookup(start_offset).position);
        while let Some(header) = self.header_at(position)? {
            if header.max_timestamp >= timestamp && header.last_offset() >= from_offset {
                let records = self.decode_batch(position, header.size)?;
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
        if self.max_timestamp < 0 {
            return Ok(None);
        }
        let Some((position, header)) = self.translate_offset(self.offset_of_max_timestamp)? else {
            return Ok(None);
        };
        let records = self.decode_batch(position, header.size)?;
        Ok(records
            .into_iter()
            .find(|(ts, _)| *ts == self.max_timestamp)
            .or(Some((self.max_timestamp, self.offset_of_max_timestamp))))
    }

    /// (timestamp, offset) of each record in the batch at `position`.
    fn decode_batch(&self, position: u64, size: usize) -> Result<Vec<(i64, i64)>> {
        let mut buf = vec![0u8; size];
        self.file.read_exact_at(&mut buf, position)?;
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

    /// Rescans the whole file: verifies every batch, rebuilds both indexes and
    /// truncates at the first batch that is partial or fails its checks.
    pub fn recover(&mut self, max_batch_bytes: usize) -> Result<RecoveryReport> {
        self.index.reset()?;
        self.time_index.reset()?;
        self.index.resize(self.config.max_index_bytes)?;
        self.time_index.resize(self.config.max_index_bytes)?;
        self.bytes_since_last_index_entry = 0;
        self.max_timestamp = -1;
        self.offset_of_max_timestamp = self.base_offset;
        self.next_offset = self.base_offset;
        let file_len = self.file.metadata()?.len();
        self.size = file_len;
        let mut position = 0u64;
        let mut batches = 0;
        let mut expected_offset = self.base_offset;
        while let Some(header) = self.read_valid_batch(position, file_len, max_batch_bytes, expected_offset) {
            self.index_batch(position, header.size, header.last_offset(), header.max_timestamp);
            expected_offset = header.next_offset();
            self.next_offset = expected_offset;
            position += header.size as u64;
            batches += 1;
        }
        let truncated = file_len - position;
        if truncated > 0 {
            self.file.set_len(position)?;
            let mut file = &*self.file;
            std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(position))?;
        }
        self.size = position;
        self.txn_index.truncate_to(self.next_offset)?;
        Ok(RecoveryReport { valid_bytes: position, truncated_bytes: truncated, batches })
    }

    /// The header of the batch at `position` if the whole batch is there and
    /// passes its checks.
    fn read_valid_batch(
        &self,
        position: u64,
        file_len: u64,
        max: usize,
        expected: i64,
    ) -> Option<BatchHeader> {
        let mut head = [0u8; batch::LOG_OVERHEAD];
        if position + head.len() as u64 > file_len {
            return None;
        }
        self.file.read_exact_at(&mut head, position).ok()?;
        let size = batch::batch_size(&head)?.ok()?;
        if size > max.max(HEADER_LEN) || position + size as u64 > file_len {
            return None;
        }
        let mut buf = vec![0u8; size];
        self.file.read_exact_at(&mut buf, position).ok()?;
        let header = batch::verify_stored(&buf).ok()?;
        (header.base_offset >= expected).then_some(header)
    }

    /// Index bookkeeping for one batch at `position`: Kafka's rule of an entry
    /// (for the batch's last offset) once `index.interval.bytes` have passed.
    fn index_batch(&mut self, position: u64, size: usize, last_offset: i64, max_timestamp: i64) {
        if max_timestamp > self.max_timestamp {
            self.max_timestamp = max_timestamp;
            self.offset_of_max_timestamp = last_offset;
        }
        if self.bytes_since_last_index_entry > self.config.index_interval_bytes {
            self.index.append(last_offset, position as u32);
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp);
            self.bytes_since_last_index_entry = 0;
        }
        self.bytes_since_last_index_entry += size;
    }

    /// Prepares an inactive segment: indexes shrink to their entries and the
    /// last max timestamp is recorded, as Kafka does at roll.
    pub fn on_roll(&mut self) -> Result<()> {
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp);
        self.index.trim()?;
        self.time_index.trim()
    }

    /// Readies a segment loaded from disk to take appends again.
    pub fn make_active(&mut self) -> Result<()> {
        self.index.resize(self.config.max_index_bytes)?;
        self.time_index.resize(self.config.max_index_bytes)
    }

    /// Forces the log and index bytes to disk.
    pub fn flush(&self) -> Result<()> {
        self.file.sync_data()?;
        self.index.flush()?;
        self.time_index.flush()?;
        self.txn_index.flush()
    }

    /// A handle that stays valid for flushing outside the log lock.
    pub fn file(&self) -> Arc<File> {
        self.file.clone()
    }

    /// Closes cleanly: indexes trimmed so the next start trusts them.
    pub fn close(&mut self) -> Result<()> {
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp);
        self.index.trim()?;
        self.time_index.trim()
    }

    /// The segment's files; the transaction index only once written.
    fn paths(&self) -> Vec<PathBuf> {
        let mut paths =
            vec![self.log_path.clone(), self.index.path().to_owned(), self.time_index.path().to_owned()];
        if self.txn_index.path().exists() {
            paths.push(self.txn_index.path().to_owned());
        }
        paths
    }

    /// Renames the segment's files with `suffix` appended and closes them;
    /// readers holding the file keep reading it. Returns the new paths.
    pub fn rename_to(self, suffix: &str) -> Result<Vec<PathBuf>> {
        let paths = self.paths();
        drop(self);
        let mut renamed = Vec::with_capacity(paths.len());
        for path in paths {
            let mut target = path.clone().into_os_string();
            target.push(suffix);
            std::fs::rename(&path, &target)?;
            renamed.push(target.into());
        }
        Ok(renamed)
    }

    /// Removes the segment's files.
    pub fn delete(self) -> Result<()> {
        let paths = self.paths();
        drop(self);
        for path in paths {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        Ok(())
    }
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
