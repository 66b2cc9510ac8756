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
//! Not done yet: transactions (aborted transactional data is kept and
//! markers are never removed, since nothing writes a transaction index yet),
//! and `log.cleaner.io.max.bytes.per.second` throttling.

pub mod offset_map;
pub(crate) mod swap;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::batch::{self, BatchHeader, Batches, TimestampType, HEADER_LEN, LOG_OVERHEAD};
use crate::checkpoint::OffsetCheckpoint;
use crate::error::{Result, StorageError};
use crate::log::Log;
use crate::records::{self, RawRecord, RawRecords};
use crate::segment::{LogSegment, PreparedBatch};
use crate::{SharedLog, TopicPartition};

pub use offset_map::OffsetMap;

/// Kafka's name for the file holding each log's first dirty offset.
pub const CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";

/// Attribute bit 6: the batch's base timestamp is its delete horizon.
const DELETE_HORIZON_BIT: i16 = 0x40;
/// The attribute bits an emptied batch keeps: timestamp type, transactional, control.
const EMPTY_BATCH_ATTRIBUTES: i16 = 0x08 | 0x10 | 0x20;

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

/// A log chosen for cleaning and the range to clean.
#[derive(Debug)]
struct LogToClean {
    tp: TopicPartition,
    dir: usize,
    log: SharedLog,
    first_dirty: i64,
    first_uncleanable: i64,
    clean_bytes: u64,
    cleanable_bytes: u64,
    /// `max.compaction.lag.ms` has passed for its oldest dirty record.
    overdue: bool,
    /// The checkpointed first dirty offset was outside the log.
    reset_checkpoint: bool,
}

impl LogToClean {
    fn dirty_ratio(&self) -> f64 {
        let total = self.clean_bytes + self.cleanable_bytes;
        if total == 0 {
            0.0
        } else {
            self.cleanable_bytes as f64 / total as f64
        }
    }

    fn is_due(&self, min_ratio: f64) -> bool {
        (self.overdue && self.cleanable_bytes > 0) || self.dirty_ratio() > min_ratio
    }
}

/// The state cleaner threads share: logs being cleaned, logs that failed,
/// and each log's first dirty offset (persisted per log dir).
#[derive(Debug)]
pub struct CleanerManager {
    dirs: Vec<PathBuf>,
    state: Mutex<ManagerState>,
}

#[derive(Debug)]
struct ManagerState {
    in_progress: HashSet<TopicPartition>,
    uncleanable: HashSet<TopicPartition>,
    first_dirty: Vec<BTreeMap<TopicPartition, i64>>,
}

/// A registered log as the manager hands it over: partition, dir index, log.
pub type LogEntry = (TopicPartition, usize, SharedLog);

impl CleanerManager {
    /// Reads the `cleaner-offset-checkpoint` of every dir; an unreadable
    /// one counts as empty (the logs get cleaned from their start again).
    pub fn new(dirs: &[PathBuf]) -> Self {
        let first_dirty = dirs
            .iter()
            .map(|dir| {
                OffsetCheckpoint::new(dir.join(CHECKPOINT_FILE)).read().unwrap_or_else(|e| {
                    tracing::warn!("ignoring {CHECKPOINT_FILE} in {}: {e}", dir.display());
                    BTreeMap::new()
                })
            })
            .collect();
        let state = ManagerState { in_progress: HashSet::new(), uncleanable: HashSet::new(), first_dirty };
        Self { dirs: dirs.to_vec(), state: Mutex::new(state) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ManagerState> {
        self.state.lock().expect("cleaner state lock")
    }

    /// The checkpointed first dirty offset of `tp`.
    pub fn first_dirty_offset(&self, tp: &TopicPartition) -> Option<i64> {
        self.lock().first_dirty.iter().find_map(|m| m.get(tp).copied())
    }

    /// Forgets a deleted log, so a new log of the same name starts dirty.
    pub fn forget(&self, tp: &TopicPartition, dir: usize) -> Result<()> {
        let mut state = self.lock();
        state.uncleanable.remove(tp);
        if state.first_dirty[dir].remove(tp).is_some() {
            OffsetCheckpoint::new(self.dirs[dir].join(CHECKPOINT_FILE)).write(&state.first_dirty[dir])?;
        }
        Ok(())
    }

    fn set_first_dirty(&self, tp: &TopicPartition, dir: usize, offset: i64, live: &[LogEntry]) -> Result<()> {
        let mut state = self.lock();
        state.first_dirty[dir].insert(tp.clone(), offset);
        state.first_dirty[dir].retain(|tp, _| live.iter().any(|(t, _, _)| t == tp));
        OffsetCheckpoint::new(self.dirs[dir].join(CHECKPOINT_FILE)).write(&state.first_dirty[dir])?;
        Ok(())
    }

    /// Picks the dirtiest due log among `logs` and marks it in progress.
    fn grab_dirtiest(&self, logs: &[LogEntry], now_ms: i64) -> Option<LogToClean> {
        let (busy, first_dirty) = {
            let state = self.lock();
            let busy: HashSet<TopicPartition> = state.in_progress.union(&state.uncleanable).cloned().collect();
            (busy, state.first_dirty.clone())
        };
        // Logs are locked one at a time, without the manager lock: a swap
        // holds a log lock and may need the manager.
        let dirtiest = logs
            .iter()
            .filter(|(tp, _, _)| !busy.contains(tp))
            .filter_map(|(tp, dir, log)| {
                let checkpoint = first_dirty[*dir].get(tp).copied();
                let (candidate, min_ratio) = assess(tp, *dir, log, checkpoint, now_ms)?;
                candidate.is_due(min_ratio).then_some(candidate)
            })
            .max_by(|a, b| a.dirty_ratio().total_cmp(&b.dirty_ratio()))?;
        self.lock().in_progress.insert(dirtiest.tp.clone()).then_some(dirtiest)
    }

    /// Cleans the dirtiest due log among `logs`; returns whether one was
    /// due. `registered` tells whether a log is still the live one for its
    /// partition; `stop` ends the cleaning early (shutdown).
    pub fn clean_dirtiest(
        &self,
        logs: &[LogEntry],
        cleaner: &mut Cleaner,
        registered: &dyn Fn(&TopicPartition, &SharedLog) -> bool,
        stop: &dyn Fn() -> bool,
        now_ms: i64,
    ) -> Result<bool> {
        let Some(target) = self.grab_dirtiest(logs, now_ms) else { return Ok(false) };
        if target.reset_checkpoint {
            self.set_first_dirty(&target.tp, target.dir, target.first_dirty, logs)?;
        }
        let checks = Checks { stop, registered: &|| registered(&target.tp, &target.log) };
        let outcome = cleaner.clean(&target, now_ms, &checks);
        let recorded = match outcome {
            Ok(end_offset) => {
                log_stats(&target, end_offset, &cleaner.last_stats);
                self.set_first_dirty(&target.tp, target.dir, end_offset, logs)
            }
            Err(CleanError::Aborted(why)) => {
                tracing::info!(partition = %target.tp, "cleaning aborted: {why}");
                Ok(())
            }
            Err(CleanError::Failed(e)) if !registered(&target.tp, &target.log) => {
                tracing::debug!(partition = %target.tp, "cleaning of a removed log failed: {e}");
                Ok(())
            }
            Err(CleanError::Failed(e)) => {
                tracing::warn!(partition = %target.tp, "cleaning failed; the log is marked uncleanable: {e}");
                self.lock().uncleanable.insert(target.tp.clone());
                Ok(())
            }
        };
        self.lock().in_progress.remove(&target.tp);
        recorded.map(|()| true)
    }
}

fn log_stats(target: &LogToClean, end_offset: i64, stats: &CleanerStats) {
    let mb = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let secs = stats.elapsed.as_secs_f64().max(1e-9);
    tracing::info!(
        partition = %target.tp,
        dirty = format!("[{}, {end_offset})", target.first_dirty),
        read_mb = format!("{:.1}", mb(stats.bytes_read)),
        written_mb = format!("{:.1}", mb(stats.bytes_written)),
        records_read = stats.records_read,
        records_written = stats.records_written,
        map_keys = stats.map_keys,
        mb_per_s = format!("{:.1}", mb(stats.bytes_read) / secs),
        "cleaned log"
    );
}

/// The segments overlapping `[from, to)`.
fn overlapping(log: &Log, from: i64, to: i64) -> impl Iterator<Item = &LogSegment> {
    let segments = log.segment_map();
    let first = segments.range(..=from).next_back().map_or(i64::MIN, |(base, _)| *base);
    segments.range(first..to.max(first)).map(|(_, s)| s)
}

/// Kafka's `cleanableOffsets` and `LogToClean`: the dirty range of one log
/// and its sizes, with the log's `min.cleanable.dirty.ratio`.
fn assess(
    tp: &TopicPartition,
    dir: usize,
    shared: &SharedLog,
    checkpoint: Option<i64>,
    now_ms: i64,
) -> Option<(LogToClean, f64)> {
    let log = shared.lock().expect("log lock");
    let config = log.config();
    if !config.cleanup_policy.compact {
        return None;
    }
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    let (first_dirty, reset_checkpoint) = match checkpoint {
        Some(offset) if (start..=end).contains(&offset) => (offset, false),
        Some(_) => (start, true),
        None => (start, false),
    };
    let active_base = log.segment_map().keys().next_back().copied().unwrap_or(end);
    let dirty_inactive = || overlapping(&log, first_dirty, active_base);
    let lag_start = now_ms.saturating_sub(config.min_compaction_lag_ms.max(0));
    let too_young = (config.min_compaction_lag_ms > 0)
        .then(|| dirty_inactive().find(|s| s.max_timestamp() > lag_start).map(LogSegment::base_offset))
        .flatten();
    let first_uncleanable = too_young.unwrap_or(active_base).min(active_base).max(first_dirty);
    let uncleanable_base =
        log.segment_map().range(..=first_uncleanable).next_back().map_or(first_uncleanable, |(b, _)| *b);
    let cleanable_bytes =
        overlapping(&log, first_dirty.min(uncleanable_base), uncleanable_base).map(LogSegment::size).sum();
    let clean_bytes = log.segment_map().range(..first_dirty).map(|(_, s)| s.size()).sum();
    let overdue = config.max_compaction_lag_ms < i64::MAX && {
        let deadline = now_ms.saturating_sub(config.max_compaction_lag_ms.max(0));
        dirty_inactive()
            .filter_map(|s| s.header_at(0).ok().flatten())
            .map(|h| h.max_timestamp)
            .filter(|ts| *ts > 0)
            .min()
            .is_some_and(|earliest| earliest < deadline)
    };
    let candidate = LogToClean {
        tp: tp.clone(),
        dir,
        log: shared.clone(),
        first_dirty,
        first_uncleanable,
        clean_bytes,
        cleanable_bytes,
        overdue,
        reset_checkpoint,
    };
    (clean_bytes + cleanable_bytes > 0).then_some((candidate, config.min_cleanable_dirty_ratio))
}

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

/// A segment as captured under the log lock; its file stays readable
/// whatever happens to the log meanwhile.
#[derive(Debug, Clone)]
struct SegmentSnapshot {
    base: i64,
    file: Arc<File>,
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
        Arc::ptr_eq(&segment.file(), &self.file) && segment.size() == self.size
    }
}

/// The segments below `first_uncleanable`, the log dir and config.
fn snapshot(
    shared: &SharedLog,
    first_dirty: i64,
    first_uncleanable: i64,
) -> Result<(Vec<SegmentSnapshot>, PathBuf, crate::LogConfig)> {
    let log = shared.lock().expect("log lock");
    let mut segments = Vec::new();
    for segment in log.segment_map().range(..first_uncleanable).map(|(_, s)| s) {
        let dirty_position = if segment.next_offset() <= first_dirty {
            segment.size()
        } else if segment.base_offset() >= first_dirty {
            0
        } else {
            segment.translate_offset(first_dirty)?.map_or(segment.size(), |(position, _)| position)
        };
        segments.push(SegmentSnapshot {
            base: segment.base_offset(),
            file: segment.file(),
            size: segment.size(),
            index_bytes: segment.index().entries() as u64 * 8,
            time_index_bytes: segment.time_index().entries() as u64 * 12,
            dirty_position,
            modified: segment.file().metadata().and_then(|m| m.modified()).ok(),
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
    let last_offset_bound =
        |i: usize| segments.get(i + 1).map_or(first_uncleanable, |next| next.base) - 1;
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

/// What decides, record by record, what a cleaning keeps.
struct Retention<'a> {
    map: &'a OffsetMap,
    /// Producer id → last offset of its last batch in the mapped section.
    last_batch_of_producer: &'a HashMap<i64, i64>,
    /// The first uncleanable offset: the round's last batch ends there.
    upper_bound: i64,
    now_ms: i64,
    delete_retention_ms: i64,
}

impl Retention<'_> {
    /// Whether a batch emptied of records must still be written: the last
    /// batch of a producer (its sequence and epoch), or of the round (the
    /// log's last offset).
    fn keeps_empty(&self, header: &BatchHeader) -> bool {
        let last_of_producer = header.producer_id >= 0
            && self.last_batch_of_producer.get(&header.producer_id).is_none_or(|last| *last == header.last_offset());
        last_of_producer || header.next_offset() == self.upper_bound
    }

    fn keeps(&self, record: &RawRecord<'_>, offset: i64, keep_tombstones: bool) -> bool {
        if offset > self.map.latest_offset() {
            return true;
        }
        // Records without a key cannot be compacted; Kafka drops them.
        let Some(key) = record.key else { return false };
        let latest = self.map.get(key).unwrap_or(-1);
        offset >= latest && (record.has_value || keep_tombstones)
    }
}

fn put_i16(buf: &mut [u8], at: usize, value: i16) {
    buf[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

fn put_i32(buf: &mut [u8], at: usize, value: i32) {
    buf[at..at + 4].copy_from_slice(&value.to_be_bytes());
}

fn put_i64(buf: &mut [u8], at: usize, value: i64) {
    buf[at..at + 8].copy_from_slice(&value.to_be_bytes());
}

/// Sets the length and CRC of the batch occupying `batch`.
fn seal(batch: &mut [u8]) {
    put_i32(batch, batch::LENGTH, (batch.len() - LOG_OVERHEAD) as i32);
    let crc = batch::compute_crc(batch);
    batch[batch::CRC..batch::CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// A batch without records that keeps `header`'s offsets and producer
/// fields, as Kafka writes one.
fn write_empty_batch(header: &BatchHeader, raw: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&raw[..HEADER_LEN]);
    let batch = &mut out[start..];
    put_i16(batch, batch::ATTRIBUTES, header.attributes & EMPTY_BATCH_ATTRIBUTES);
    put_i64(batch, batch::BASE_TIMESTAMP, header.max_timestamp);
    put_i32(batch, batch::RECORDS_COUNT, 0);
    seal(batch);
}

/// `raw` with only `kept` of its records, re-encoded with the batch's codec.
/// With `new_horizon` the base timestamp becomes the delete horizon and the
/// record timestamp deltas move to match.
fn write_retained(
    header: &BatchHeader,
    raw: &[u8],
    kept: &[RawRecord<'_>],
    new_horizon: Option<i64>,
    scratch: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Result<()> {
    let base_timestamp = new_horizon.unwrap_or(header.base_timestamp);
    scratch.clear();
    let mut max_timestamp = i64::MIN;
    for record in kept {
        let timestamp = header.base_timestamp.saturating_add(record.timestamp_delta);
        max_timestamp = max_timestamp.max(timestamp);
        if new_horizon.is_some() {
            record.write_with_timestamp_delta(timestamp.wrapping_sub(base_timestamp), scratch);
        } else {
            scratch.extend_from_slice(record.bytes);
        }
    }
    if header.timestamp_type() == TimestampType::LogAppendTime {
        max_timestamp = header.max_timestamp;
    }
    let start = out.len();
    out.extend_from_slice(&raw[..HEADER_LEN]);
    if let Err(e) = records::compress_into(header.compression(), scratch, out) {
        out.truncate(start);
        return Err(e);
    }
    let batch = &mut out[start..];
    let attributes = header.attributes | if new_horizon.is_some() { DELETE_HORIZON_BIT } else { 0 };
    put_i16(batch, batch::ATTRIBUTES, attributes);
    put_i64(batch, batch::BASE_TIMESTAMP, base_timestamp);
    put_i64(batch, batch::MAX_TIMESTAMP, max_timestamp);
    put_i32(batch, batch::RECORDS_COUNT, kept.len() as i32);
    seal(batch);
    Ok(())
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
        let slots = OffsetMap::slots_for_bytes(self.settings.offset_map_bytes).min(OffsetMap::slots_for_keys(span));
        let mut map = OffsetMap::with_slots(slots);
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
        let groups =
            group_by_size(&segments[..to_clean], config.segment_bytes, config.max_index_bytes as u64, target.first_uncleanable);
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
            let mut buffer = std::mem::take(&mut self.read_buffer);
            let walked = for_each_batch(
                &segment.file,
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
                        for record in RawRecords::new(&body) {
                            let record = record?;
                            stats.1 += 1;
                            let offset = header.base_offset + i64::from(record.offset_delta);
                            let Some(key) = record.key.filter(|_| offset >= target.first_dirty) else { continue };
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
        let mut cleaned =
            LogSegment::create_with_suffix(dir, base, swap::CLEANED_SUFFIX, config.segment_config(), retention.now_ms)?;
        for segment in group {
            self.copy_segment(segment, &mut cleaned, retention, checks)?;
        }
        cleaned.on_roll()?;
        cleaned.flush()?;
        // Keep the last modified time of the originals, as Kafka does.
        if let Some(modified) = group.last().and_then(|s| s.modified) {
            cleaned.file().set_modified(modified)?;
        }
        drop(cleaned);
        checks.check()?;
        let mut log = target.log.lock().expect("log lock");
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
        let mut buffer = std::mem::take(&mut self.read_buffer);
        let mut out = std::mem::take(&mut self.write_buffer);
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut written: Vec<Written> = Vec::new();
        let mut stats = CleanerStats::default();
        let io_buffer_bytes = self.settings.io_buffer_bytes;
        let walked = for_each_batch(&segment.file, 0..segment.size, &mut buffer, io_buffer_bytes, checks, |raw, header| {
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

/// Writes to `out` what `retention` keeps of one batch. Returns the records
/// read and kept.
fn filter_batch(
    raw: &[u8],
    header: &BatchHeader,
    retention: &Retention<'_>,
    scratch: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Result<(u64, u64)> {
    let count = u64::try_from(header.records_count).unwrap_or(0);
    // Transaction markers stay: nothing tracks transactions yet.
    if header.is_control() {
        out.extend_from_slice(raw);
        return Ok((count, count));
    }
    let horizon = (header.attributes & DELETE_HORIZON_BIT != 0).then_some(header.base_timestamp);
    let keep_tombstones = horizon.is_none_or(|h| retention.now_ms < h);
    let body = records::records_body(raw, header)?;
    let mut kept = Vec::new();
    let mut read = 0u64;
    let mut tombstones = false;
    for record in RawRecords::new(&body) {
        let record = record?;
        read += 1;
        let offset = header.base_offset + i64::from(record.offset_delta);
        if retention.keeps(&record, offset, keep_tombstones) {
            tombstones |= !record.has_value;
            kept.push(record);
        }
    }
    if kept.is_empty() {
        if retention.keeps_empty(header) {
            write_empty_batch(header, raw, out);
        }
        return Ok((read, 0));
    }
    let new_horizon = (tombstones && horizon.is_none())
        .then(|| retention.now_ms.saturating_add(retention.delete_retention_ms));
    if kept.len() as u64 == read && new_horizon.is_none() {
        out.extend_from_slice(raw);
    } else {
        write_retained(header, raw, &kept, new_horizon, scratch, out)?;
    }
    Ok((read, kept.len() as u64))
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
                return Err(StorageError::CorruptRecord(format!("partial batch at position {position}")).into());
            }
            want = size;
            continue;
        }
        want = chunk_bytes.max(HEADER_LEN);
        position += consumed as u64;
    }
    Ok(())
}
