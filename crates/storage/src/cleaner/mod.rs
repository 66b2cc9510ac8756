//! The log cleaner: compaction of `cleanup.policy=compact` logs, after
//! Kafka's `LogCleaner`.
//!
//! Cleaner threads (driven by the broker) each own a [`Cleaner`] and call
//! [`crate::LogManager::clean_dirtiest`] in a loop. One round:
//!
//! 1. **Choose** ([`CleanerManager`]): for every compacted log, the dirty
//!    section runs from the first dirty offset (the `cleaner-offset-checkpoint`
//!    of its log dir, else the log start) to the first uncleanable offset (the
//!    active segment, or the first segment holding records younger than
//!    `min.compaction.lag.ms`). The log with the largest dirty ratio (dirty
//!    bytes / total bytes) above `min.cleanable.dirty.ratio` is cleaned, or one
//!    whose oldest dirty record is older than `max.compaction.lag.ms`.
//! 2. **Map**: the dirty section is read into an [`OffsetMap`] (key hash →
//!    latest offset) bounded by `log.cleaner.dedupe.buffer.size` / threads.
//!    If it fills, this round cleans up to the offset it reached.
//! 3. **Copy**: the segments from the log start up to there, grouped so a
//!    group fits in `segment.bytes` and the index size, are copied into one
//!    `.cleaned` segment per group, keeping a record when it is the latest for
//!    its key or lies past the map's range. Offsets never change: a batch
//!    keeps its base offset, last offset, producer fields, codec and flags,
//!    and is written byte for byte when all its records stay, else re-encoded
//!    with the records that stay. Tombstones stay until `delete.retention.ms`
//!    after the first cleaning that kept them: that cleaning stamps the batch
//!    with its delete horizon (the base timestamp, attribute bit 6, as Kafka
//!    does since KIP-534) and later ones drop them once it has passed.
//!    Control batches stay, and so does the last batch of each producer and
//!    of the round, emptied of records if need be.
//! 4. **Swap** ([`swap`]): under the log lock, and only if the segments are
//!    still the ones copied, the cleaned segment replaces them crash-safely.
//!    Reading and writing happen without the lock: appends never wait on a
//!    cleaning.
//! 5. **Checkpoint**: the end of the cleaned section becomes the log's first
//!    dirty offset in `cleaner-offset-checkpoint`.
//!
//! Not done yet: Kafka's cleaning of transactions (aborted transactional
//! data is kept and markers are never removed; the swap carries the
//! replaced segments' `.txnindex` entries to the new segment, so
//! read_committed fetches still skip the aborted data), and
//! `log.cleaner.io.max.bytes.per.second` throttling.

mod filter;
mod manager;
pub mod offset_map;
pub(crate) mod swap;

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::batch::{self, BatchHeader, Batches, HEADER_LEN};
use crate::error::{Result, StorageError};
use crate::records::{self, Records};
use crate::segment::{LogSegment, PreparedBatch};
use crate::SharedLog;

use filter::{filter_batch, Retention};
use manager::LogToClean;
pub use manager::{CleanerManager, LogEntry};
pub use offset_map::OffsetMap;

/// Kafka's name for the file holding each log's first dirty offset.
pub const CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";

/// One cleaner thread's budget.
#[derive(Debug, Clone, Copy)]
pub struct CleanerSettings {
    /// Memory for the offset map (`log.cleaner.dedupe.buffer.size` / threads).
    pub offset_map_bytes: usize,
    /// Size of each read and write buffer (`log.cleaner.io.buffer.size` / threads / 2).
    pub io_buffer_bytes: usize,
}

/// What one cleaning did, for the log line and for measurement.
#[derive(Debug, Default, Clone)]
pub struct CleanerStats {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_read: u64,
    pub records_written: u64,
    pub map_bytes_read: u64,
    pub map_records_read: u64,
    /// Distinct keys in the offset map, and the bytes the map took.
    pub map_keys: usize,
    pub map_bytes: usize,
    pub map_elapsed: Duration,
    pub elapsed: Duration,
}

/// Why a cleaning stopped short.
#[derive(Debug)]
enum CleanError {
    /// Shutdown began, the log went away or its segments changed under us.
    Aborted(&'static str),
    Failed(StorageError),
}

impl From<StorageError> for CleanError {
    fn from(e: StorageError) -> Self {
        Self::Failed(e)
    }
}

impl From<std::io::Error> for CleanError {
    fn from(e: std::io::Error) -> Self {
        Self::Failed(e.into())
    }
}

type CleanResult<T> = std::result::Result<T, CleanError>;

/// What may end a cleaning early.
struct Checks<'a> {
    stop: &'a dyn Fn() -> bool,
    registered: &'a dyn Fn() -> bool,
}

impl Checks<'_> {
    fn check(&self) -> CleanResult<()> {
        if (self.stop)() {
            return Err(CleanError::Aborted("shutting down"));
        }
        Ok(())
    }
}

/// A segment as captured under the log lock. The cleaner reads it outside
/// the lock through a descriptor of its own, not one of the file cache's:
/// one segment at a time, closed when read.
#[derive(Debug, Clone)]
struct SegmentSnapshot {
    base: i64,
    /// The live segment's identity: a segment swapped in since has another.
    id: u64,
    path: PathBuf,
    size: u64,
    index_bytes: u64,
    time_index_bytes: u64,
    /// Where batches at or past the first dirty offset begin.
    dirty_position: u64,
    modified: Option<SystemTime>,
}

impl SegmentSnapshot {
    /// Whether `segment` is still the segment captured.
    fn is(&self, segment: &LogSegment) -> bool {
        segment.id() == self.id && segment.size() == self.size
    }

    /// Opens the segment's `.log` for reading. One deleted since the
    /// snapshot (retention renames it away) ends the cleaning.
    fn open(&self) -> CleanResult<File> {
        match File::open(&self.path) {
            Ok(file) => Ok(file),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(CleanError::Aborted("a segment was deleted during cleaning"))
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// The segments below `first_uncleanable`, the log dir and config.
fn snapshot(
    shared: &SharedLog,
    first_dirty: i64,
    first_uncleanable: i64,
) -> Result<(Vec<SegmentSnapshot>, PathBuf, crate::LogConfig)> {
    let log = crate::manager::lock_log(shared)?;
    let mut segments = Vec::new();
    for segment in log.segment_map().range(..first_uncleanable).map(|(_, s)| s) {
        let dirty_position = if segment.next_offset() <= first_dirty {
            segment.size()
        } else if segment.base_offset() >= first_dirty {
            0
        } else {
            segment.translate_offset(first_dirty)?.map_or(segment.size(), |(position, _)| position)
        };
        let (index_bytes, time_index_bytes) = segment.index_bytes()?;
        segments.push(SegmentSnapshot {
            base: segment.base_offset(),
            id: segment.id(),
            path: segment.log_path().to_owned(),
            size: segment.size(),
            index_bytes,
            time_index_bytes,
            dirty_position,
            modified: std::fs::metadata(segment.log_path()).and_then(|m| m.modified()).ok(),
        });
    }
    Ok((segments, log.dir().to_owned(), log.config().clone()))
}

/// Kafka's `groupSegmentsBySize`: runs of segments whose sizes and index
/// sizes add up to at most one segment's, within an int's offset range.
fn group_by_size(
    segments: &[SegmentSnapshot],
    max_bytes: u64,
    max_index_bytes: u64,
    first_uncleanable: i64,
) -> Vec<Range<usize>> {
    let last_offset_bound = |i: usize| segments.get(i + 1).map_or(first_uncleanable, |next| next.base) - 1;
    let mut groups = Vec::new();
    let mut next = 0;
    while next < segments.len() {
        let start = next;
        let (mut bytes, mut index, mut time_index) =
            (segments[start].size, segments[start].index_bytes, segments[start].time_index_bytes);
        next += 1;
        while let Some(segment) = segments.get(next) {
            let fits = bytes + segment.size <= max_bytes
                && index + segment.index_bytes <= max_index_bytes
                && time_index + segment.time_index_bytes <= max_index_bytes
                && (segment.size == 0
                    || last_offset_bound(next) - segments[start].base <= i64::from(i32::MAX));
            if !fits {
                break;
            }
            bytes += segment.size;
            index += segment.index_bytes;
            time_index += segment.time_index_bytes;
            next += 1;
        }
        groups.push(start..next);
    }
    groups
}

/// A retained batch in the output buffer.
struct Written {
    range: Range<usize>,
    last_offset: i64,
    max_timestamp: i64,
}

/// One cleaner thread's working state: its buffers and last statistics.
#[derive(Debug)]
pub struct Cleaner {
    settings: CleanerSettings,
    read_buffer: Vec<u8>,
    write_buffer: Vec<u8>,
    scratch: Vec<u8>,
    pub last_stats: CleanerStats,
}

impl Cleaner {
    pub fn new(settings: CleanerSettings) -> Self {
        Self {
            settings,
            read_buffer: Vec::new(),
            write_buffer: Vec::new(),
            scratch: Vec::new(),
            last_stats: CleanerStats::default(),
        }
    }

    /// Kafka's `doClean`: returns the end of the cleaned section.
    fn clean(&mut self, target: &LogToClean, now_ms: i64, checks: &Checks<'_>) -> CleanResult<i64> {
        let started = Instant::now();
        self.last_stats = CleanerStats::default();
        let (segments, dir, config) = snapshot(&target.log, target.first_dirty, target.first_uncleanable)?;
        let span = usize::try_from(target.first_uncleanable - target.first_dirty).unwrap_or(usize::MAX);
        let slots =
            OffsetMap::slots_for_bytes(self.settings.offset_map_bytes).min(OffsetMap::slots_for_keys(span));
        let mut map = OffsetMap::with_max_slots(slots);
        let mut producers = HashMap::new();
        self.build_offset_map(&segments, target, &mut map, &mut producers, checks)?;
        self.last_stats.map_elapsed = started.elapsed();
        self.last_stats.map_keys = map.len();
        self.last_stats.map_bytes = map.size_bytes();
        let end_offset = map.latest_offset() + 1;
        let retention = Retention {
            map: &map,
            last_batch_of_producer: &producers,
            upper_bound: target.first_uncleanable,
            now_ms,
            delete_retention_ms: config.delete_retention_ms,
        };
        let to_clean = segments.iter().take_while(|s| s.base < end_offset).count();
        let groups = group_by_size(
            &segments[..to_clean],
            config.segment_bytes,
            config.max_index_bytes as u64,
            target.first_uncleanable,
        );
        for group in groups {
            let group = &segments[group];
            self.clean_group(target, &dir, &config, group, &retention, checks)?;
        }
        self.last_stats.elapsed = started.elapsed();
        Ok(end_offset)
    }

    /// Kafka's `buildOffsetMap`: maps the keys of the dirty section until
    /// the map is full.
    fn build_offset_map(
        &mut self,
        segments: &[SegmentSnapshot],
        target: &LogToClean,
        map: &mut OffsetMap,
        producers: &mut HashMap<i64, i64>,
        checks: &Checks<'_>,
    ) -> CleanResult<()> {
        map.update_latest_offset(target.first_dirty - 1);
        let dirty: Vec<&SegmentSnapshot> = segments.iter().filter(|s| s.dirty_position < s.size).collect();
        for (i, segment) in dirty.iter().enumerate() {
            let mut full = false;
            let mut stats = (0u64, 0u64);
            let file = segment.open()?;
            let mut buffer = std::mem::take(&mut self.read_buffer);
            let walked = for_each_batch(
                &file,
                segment.dirty_position..segment.size,
                &mut buffer,
                self.settings.io_buffer_bytes,
                checks,
                |raw, header| {
                    stats.0 += raw.len() as u64;
                    if header.last_offset() < target.first_dirty {
                        return Ok(true);
                    }
                    if header.producer_id >= 0 {
                        producers.insert(header.producer_id, header.last_offset());
                    }
                    if !header.is_control() {
                        let body = records::records_body(raw, header)?;
                        for record in Records::new(&body) {
                            let record = record?;
                            stats.1 += 1;
                            let offset = header.base_offset + i64::from(record.offset_delta);
                            let Some(key) = record.key.filter(|_| offset >= target.first_dirty) else {
                                continue;
                            };
                            if !map.put(key, offset) {
                                full = true;
                                return Ok(false);
                            }
                        }
                    }
                    map.update_latest_offset(header.last_offset());
                    Ok(true)
                },
            );
            self.read_buffer = buffer;
            walked?;
            self.last_stats.map_bytes_read += stats.0;
            self.last_stats.map_records_read += stats.1;
            if full {
                return Ok(());
            }
            let next_start = dirty.get(i + 1).map_or(target.first_uncleanable, |next| next.base);
            map.update_latest_offset(next_start - 1);
        }
        Ok(())
    }

    /// Kafka's `cleanSegments`: copies a group into one `.cleaned` segment
    /// and swaps it in.
    fn clean_group(
        &mut self,
        target: &LogToClean,
        dir: &Path,
        config: &crate::LogConfig,
        group: &[SegmentSnapshot],
        retention: &Retention<'_>,
        checks: &Checks<'_>,
    ) -> CleanResult<()> {
        let base = group[0].base;
        let outcome = self.copy_and_swap(target, dir, config, group, retention, checks);
        if outcome.is_err() {
            swap::remove_cleaned(dir, base);
        }
        outcome
    }

    fn copy_and_swap(
        &mut self,
        target: &LogToClean,
        dir: &Path,
        config: &crate::LogConfig,
        group: &[SegmentSnapshot],
        retention: &Retention<'_>,
        checks: &Checks<'_>,
    ) -> CleanResult<()> {
        let base = group[0].base;
        let mut cleaned = LogSegment::create_with_suffix(
            dir,
            base,
            swap::CLEANED_SUFFIX,
            config.segment_config(),
            retention.now_ms,
        )?;
        for segment in group {
            self.copy_segment(segment, &mut cleaned, retention, checks)?;
        }
        cleaned.on_roll()?;
        cleaned.flush()?;
        // Keep the last modified time of the originals, as Kafka does.
        if let Some(modified) = group.last().and_then(|s| s.modified) {
            cleaned.file()?.set_modified(modified)?;
        }
        drop(cleaned);
        crate::failpoint::reach(crate::failpoint::CLEANER_COPY_WRITTEN);
        checks.check()?;
        let mut log = crate::manager::lock_log(&target.log)?;
        if !(checks.registered)() {
            return Err(CleanError::Aborted("the log was deleted"));
        }
        let unchanged = group.iter().all(|s| log.segment_map().get(&s.base).is_some_and(|live| s.is(live)));
        if !unchanged {
            return Err(CleanError::Aborted("segments changed during cleaning"));
        }
        let replaced: Vec<i64> = group.iter().map(|s| s.base).collect();
        swap::replace_segments(&mut log, base, &replaced, retention.now_ms)?;
        Ok(())
    }

    /// Kafka's `cleanInto`: copies the records `retention` keeps from one
    /// segment to the end of `cleaned`.
    fn copy_segment(
        &mut self,
        segment: &SegmentSnapshot,
        cleaned: &mut LogSegment,
        retention: &Retention<'_>,
        checks: &Checks<'_>,
    ) -> CleanResult<()> {
        let file = segment.open()?;
        let mut buffer = std::mem::take(&mut self.read_buffer);
        let mut out = std::mem::take(&mut self.write_buffer);
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut written: Vec<Written> = Vec::new();
        let mut stats = CleanerStats::default();
        let io_buffer_bytes = self.settings.io_buffer_bytes;
        let walked =
            for_each_batch(&file, 0..segment.size, &mut buffer, io_buffer_bytes, checks, |raw, header| {
                stats.bytes_read += raw.len() as u64;
                let start = out.len();
                let records = filter_batch(raw, header, retention, &mut scratch, &mut out)?;
                stats.records_read += records.0;
                stats.records_written += records.1;
                if out.len() > start {
                    let retained = BatchHeader::parse(&out[start..])?;
                    stats.bytes_written += (out.len() - start) as u64;
                    written.push(Written {
                        range: start..out.len(),
                        last_offset: retained.last_offset(),
                        max_timestamp: retained.max_timestamp,
                    });
                }
                if out.len() >= io_buffer_bytes {
                    append_written(&mut out, &mut written, cleaned)?;
                }
                Ok(true)
            })
            .and_then(|()| Ok(append_written(&mut out, &mut written, cleaned)?));
        self.read_buffer = buffer;
        out.clear();
        self.write_buffer = out;
        self.scratch = scratch;
        let stats_total = &mut self.last_stats;
        stats_total.bytes_read += stats.bytes_read;
        stats_total.bytes_written += stats.bytes_written;
        stats_total.records_read += stats.records_read;
        stats_total.records_written += stats.records_written;
        walked
    }
}

/// Appends the batches collected in `out` to `cleaned` and empties `out`.
fn append_written(out: &mut Vec<u8>, written: &mut Vec<Written>, cleaned: &mut LogSegment) -> Result<()> {
    {
        let prepared: Vec<PreparedBatch<'_>> = written
            .iter()
            .map(|w| PreparedBatch {
                header: out[w.range.start..w.range.start + HEADER_LEN].try_into().expect("a whole header"),
                body: &out[w.range.start + HEADER_LEN..w.range.end],
                last_offset: w.last_offset,
                max_timestamp: w.max_timestamp,
            })
            .collect();
        cleaned.append(&prepared)?;
    }
    out.clear();
    written.clear();
    Ok(())
}

/// Reads the batches of `file` in `range` through `buffer` (chunks of
/// `chunk_bytes`, grown for a larger batch), checking each batch's CRC and
/// calling `f` until it returns false.
fn for_each_batch(
    file: &File,
    range: Range<u64>,
    buffer: &mut Vec<u8>,
    chunk_bytes: usize,
    checks: &Checks<'_>,
    mut f: impl FnMut(&[u8], &BatchHeader) -> Result<bool>,
) -> CleanResult<()> {
    let mut position = range.start;
    let mut want = chunk_bytes.max(HEADER_LEN);
    while position < range.end {
        checks.check()?;
        let len = want.min(usize::try_from(range.end - position).unwrap_or(usize::MAX));
        buffer.resize(len, 0);
        file.read_exact_at(buffer, position)?;
        let mut batches = Batches::new(buffer);
        let mut consumed = 0;
        for raw in batches.by_ref() {
            let raw = raw?;
            let header = batch::verify_stored(raw)?;
            consumed += raw.len();
            if !f(raw, &header)? {
                return Ok(());
            }
        }
        if consumed == 0 {
            // A batch larger than the buffer, or a torn one.
            let size = batch::batch_size(batches.remaining()).transpose()?.unwrap_or(0);
            if size <= len || position + size as u64 > range.end {
                return Err(
                    StorageError::CorruptRecord(format!("partial batch at position {position}")).into()
                );
            }
            want = size;
            continue;
        }
        want = chunk_bytes.max(HEADER_LEN);
        position += consumed as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
