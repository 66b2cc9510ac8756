//! The log of one partition: an ordered run of segments.
//!
//! Appends validate each batch's header (size, magic, CRC, record count)
//! and Kafka's per-record rules (keys on compacted logs, the KIP-937
//! timestamp window) where that needs no decompression or a rule demands
//! it, assign offsets and the records' max timestamp by rewriting the header
//! in place, and write the batch bytes as received. A segment never grows
//! past the positions its index can hold. Reads find the segment by binary search over base offsets,
//! then the batch through the sparse index and a short scan.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use crate::batch::{self, BatchHeader, Batches, HeaderRewrite, TimestampType, HEADER_LEN};
use crate::error::{Result, StorageError};
use crate::file_cache::FileCache;
use crate::leader_epoch::LeaderEpochCache;
use crate::producer_state::{AppendOrigin, BatchMetadata, CompletedTxn, ProducedBatch, ProducerCheck};
use crate::records::{RecordRules, TimestampWindow};
use crate::segment::{self, FileSlice, LogSegment, PreparedBatch, RecoveryReport, SegmentConfig};
use crate::txn_index::AbortedTxn;

mod epochs;
mod follower;
mod producers;
mod retention;
#[cfg(test)]
mod txn_tests;

pub use retention::{Deleted, DELETED_SUFFIX};

/// The settings of one log, from broker defaults and topic overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`
    pub segment_bytes: u64,
    /// `segment.ms`
    pub segment_ms: i64,
    /// `index.interval.bytes`
    pub index_interval_bytes: usize,
    /// `segment.index.bytes`
    pub max_index_bytes: usize,
    /// `max.message.bytes`
    pub max_message_bytes: usize,
    /// `message.timestamp.type`
    pub timestamp_type: TimestampType,
    /// `flush.messages`
    pub flush_interval_messages: u64,
    /// `flush.ms`
    pub flush_interval_ms: i64,
    /// `cleanup.policy`
    pub cleanup_policy: CleanupPolicy,
    /// `retention.ms`; negative keeps segments forever.
    pub retention_ms: i64,
    /// `retention.bytes`; negative means no size limit.
    pub retention_bytes: i64,
    /// `file.delete.delay.ms`: how long a deleted segment stays as `.deleted`.
    pub file_delete_delay_ms: i64,
    /// `delete.retention.ms`: how long the cleaner keeps tombstones.
    pub delete_retention_ms: i64,
    /// `min.cleanable.dirty.ratio`
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`
    pub max_compaction_lag_ms: i64,
    /// `message.timestamp.before.max.ms`: how far in the past a CreateTime
    /// timestamp may lie.
    pub timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`: how far in the future a CreateTime
    /// timestamp may lie.
    pub timestamp_after_max_ms: i64,
}

/// `cleanup.policy`: `delete`, `compact`, both, or neither (an empty list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

impl CleanupPolicy {
    pub const DELETE: Self = Self { delete: true, compact: false };
}

impl std::str::FromStr for CleanupPolicy {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let mut policy = Self { delete: false, compact: false };
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item {
                "delete" => policy.delete = true,
                "compact" => policy.compact = true,
                other => return Err(format!("expected a list of delete, compact; got {other:?}")),
            }
        }
        Ok(policy)
    }
}

/// Kafka 4's `message.timestamp.after.max.ms` default: one hour (KIP-1030).
pub const DEFAULT_TIMESTAMP_AFTER_MAX_MS: i64 = 3_600_000;

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 60 * 60 * 1000,
            index_interval_bytes: 4096,
            max_index_bytes: 10 * 1024 * 1024,
            max_message_bytes: 1_048_588,
            timestamp_type: TimestampType::CreateTime,
            flush_interval_messages: u64::MAX,
            flush_interval_ms: i64::MAX,
            cleanup_policy: CleanupPolicy::DELETE,
            retention_ms: 7 * 24 * 60 * 60 * 1000,
            retention_bytes: -1,
            file_delete_delay_ms: 60_000,
            delete_retention_ms: 24 * 60 * 60 * 1000,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: DEFAULT_TIMESTAMP_AFTER_MAX_MS,
        }
    }
}

impl LogConfig {
    /// Small segments and indexes, so tests roll often.
    #[cfg(test)]
    pub(crate) fn small(segment_bytes: u64) -> Self {
        Self { segment_bytes, index_interval_bytes: 256, max_index_bytes: 1024, ..Self::default() }
    }

    pub(crate) fn segment_config(&self) -> SegmentConfig {
        SegmentConfig {
            index_interval_bytes: self.index_interval_bytes,
            max_index_bytes: self.max_index_bytes,
            files: FileCache::shared(),
        }
    }
}

/// The outcome of one append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub first_offset: i64,
    pub last_offset: i64,
    /// The stamped time when the log uses LogAppendTime, else -1.
    pub log_append_time: i64,
    /// Records written: 0 when the append retried a batch already in the log.
    pub records: u64,
    pub bytes: usize,
}

/// What opening a log found on disk.
#[derive(Debug, Default)]
pub struct LoadReport {
    pub segments: usize,
    pub recovered_segments: usize,
    pub truncated_bytes: u64,
    pub deleted_segments: usize,
}

#[derive(Debug)]
pub struct Log {
    dir: PathBuf,
    config: LogConfig,
    segments: BTreeMap<i64, LogSegment>,
    log_start_offset: i64,
    recovery_point: i64,
    unflushed_messages: u64,
    last_flush_ms: i64,
    producers: producers::Producers,
    /// Set once a panic poisoned the lock around this log; see
    /// [`crate::manager::lock_log`].
    offline: bool,
    leader_epochs: LeaderEpochCache,
}

/// The base offset encoded in a segment file name, if it is one.
fn parse_segment_name(name: &str, suffix: &str) -> Option<i64> {
    let digits = name.strip_suffix(suffix)?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok())?
}

/// A segment as listed in the log's directory.
#[derive(Debug)]
struct FoundSegment {
    base_offset: i64,
    has_indexes: bool,
}

/// The segments in `dir`, by base offset, from one pass over its entries
/// (the directory is created when missing). Leftover `.tmp` files go; if a
/// cleaner swap or a retention deletion was interrupted, it is finished first
/// and the dir listed again.
fn list_segments(dir: &Path) -> Result<Vec<FoundSegment>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir)?;
            return Ok(Vec::new());
        }
        Err(e) => return Err(e.into()),
    };
    let (mut logs, mut indexes, mut time_indexes) = (Vec::new(), Vec::new(), Vec::new());
    let mut interrupted = false;
    for entry in entries {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(base) = parse_segment_name(name, ".log") {
            logs.push(base);
        } else if let Some(base) = parse_segment_name(name, ".index") {
            indexes.push(base);
        } else if let Some(base) = parse_segment_name(name, ".timeindex") {
            time_indexes.push(base);
        } else if name.ends_with(".tmp") {
            std::fs::remove_file(dir.join(name))?;
        } else if crate::cleaner::swap::is_leftover(name) {
            interrupted = true;
        }
    }
    if interrupted {
        crate::cleaner::swap::complete_interrupted_swaps(dir)?;
        return list_segments(dir);
    }
    logs.sort_unstable();
    indexes.sort_unstable();
    time_indexes.sort_unstable();
    Ok(logs
        .into_iter()
        .map(|base| FoundSegment {
            base_offset: base,
            has_indexes: indexes.binary_search(&base).is_ok() && time_indexes.binary_search(&base).is_ok(),
        })
        .collect())
}

/// Whether a compressed batch must be decompressed to apply `rules`: the
/// header's timestamps bound its records' only when it is honest.
fn must_open(header: &BatchHeader, rules: &RecordRules) -> bool {
    // Under LogAppendTime the broker's clock replaces the header's value anyway.
    let impossible_max = rules.timestamps.is_some() && header.max_timestamp < header.base_timestamp;
    let window_needs_records = rules.timestamps.is_some_and(|window| {
        window.before_max_ms != i64::MAX
            || !window.allows(header.base_timestamp)
            || !window.allows(header.max_timestamp)
    });
    rules.keys_required || impossible_max || window_needs_records
}

impl Log {
    /// Opens the log in `dir`, creating it when absent. After an unclean
    /// shutdown every segment from the recovery point on is rescanned and
    /// truncated to its valid prefix. After a clean one only the active
    /// segment is read: the others open, and map their indexes, when used.
    pub fn open(
        dir: &Path,
        config: LogConfig,
        recovery_point: i64,
        log_start_offset: i64,
        clean_shutdown: bool,
        now_ms: i64,
    ) -> Result<(Self, LoadReport)> {
        let found = list_segments(dir)?;
        let mut report = LoadReport::default();
        let mut log = Self {
            dir: dir.to_owned(),
            config,
            segments: BTreeMap::new(),
            log_start_offset: 0,
            recovery_point,
            unflushed_messages: 0,
            last_flush_ms: now_ms,
            producers: Default::default(),
            offline: false,
            leader_epochs: LeaderEpochCache::empty(dir),
        };
        let recover_from =
            found.iter().rev().map(|s| s.base_offset).find(|b| *b <= recovery_point).unwrap_or(i64::MIN);
        let mut truncated = false;
        for (i, segment) in found.iter().enumerate() {
            let base = segment.base_offset;
            if truncated {
                // Everything after a torn segment is unreachable: drop it.
                segment::remove_segment_files(&dir.join(segment::file_name(base, ".log")))?;
                report.deleted_segments += 1;
                continue;
            }
            let last = i + 1 == found.len();
            let has_indexes = segment.has_indexes;
            let mut segment = log.load_segment(base, last, now_ms)?;
            // A segment that never took an append has no indexes yet.
            let indexes_lost = !has_indexes && !segment.is_empty();
            let must_recover = indexes_lost || (!clean_shutdown && base >= recover_from);
            let loaded = !must_recover && (!last || segment.load_state().is_ok());
            if !loaded {
                let RecoveryReport { truncated_bytes, .. } = segment.recover(usize::MAX)?;
                report.recovered_segments += 1;
                report.truncated_bytes += truncated_bytes;
                truncated = truncated_bytes > 0 && !last;
                if truncated_bytes > 0 {
                    // Counted in the start-up summary; the detail is for debugging.
                    tracing::debug!(
                        segment = %segment.log_path().display(),
                        truncated_bytes,
                        "truncated an invalid tail found during recovery"
                    );
                }
                if !last && !truncated {
                    segment.unload_indexes()?;
                }
            }
            log.segments.insert(base, segment);
        }
        if log.segments.is_empty() {
            let base = log_start_offset.max(0);
            log.segments.insert(base, LogSegment::create(dir, base, log.config.segment_config(), now_ms)?);
        }
        // Segments are contiguous: each inactive one ends where the next begins.
        let bases: Vec<i64> = log.segments.keys().copied().collect();
        for (base, next) in bases.iter().zip(bases.iter().skip(1)) {
            log.segments.get_mut(base).expect("listed").set_next_offset(*next);
        }
        log.active_mut().activate()?;
        let first_base = *log.segments.keys().next().expect("one segment");
        log.log_start_offset = log_start_offset.clamp(first_base, log.log_end_offset());
        log.recovery_point = log.recovery_point.min(log.log_end_offset());
        if !clean_shutdown {
            log.recovery_point = log.recovery_point.min(recover_from.max(first_base));
        }
        log.load_producer_state(if clean_shutdown { i64::MAX } else { recovery_point })?;
        log.load_leader_epochs()?;
        report.segments = log.segments.len();
        Ok((log, report))
    }

    /// The segment at `base` as found on disk: the last one opened for
    /// appends, the others touching nothing but their size.
    fn load_segment(&self, base: i64, last: bool, now_ms: i64) -> Result<LogSegment> {
        let config = self.config.segment_config();
        if last {
            return LogSegment::open(&self.dir, base, config, now_ms);
        }
        let size = std::fs::metadata(self.dir.join(segment::file_name(base, ".log")))?.len();
        Ok(LogSegment::inactive(&self.dir, base, config, size, now_ms))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Marks the log offline; true only the first time, so it is reported once.
    pub(crate) fn take_offline(&mut self) -> bool {
        !std::mem::replace(&mut self.offline, true)
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// New settings take effect at the next roll or append.
    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    /// The offset the next appended record gets (LEO).
    pub fn log_end_offset(&self) -> i64 {
        self.active().next_offset()
    }

    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }

    pub fn segments(&self) -> impl Iterator<Item = &LogSegment> {
        self.segments.values()
    }

    /// Bytes of all segments.
    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(LogSegment::size).sum()
    }

    fn active(&self) -> &LogSegment {
        self.segments.values().next_back().expect("a log always has a segment")
    }

    fn active_mut(&mut self) -> &mut LogSegment {
        self.segments.values_mut().next_back().expect("a log always has a segment")
    }

    /// Validates `records` (whole v2 batches from a producer), assigns offsets
    /// and appends them. Nothing is written unless every batch is valid.
    pub fn append(&mut self, records: &[u8], leader_epoch: i32, now_ms: i64) -> Result<AppendInfo> {
        self.append_as(records, leader_epoch, now_ms, AppendOrigin::Client)
    }

    /// [`Self::append`] for `origin`: the coordinator may write control batches.
    pub fn append_as(
        &mut self,
        records: &[u8],
        leader_epoch: i32,
        now_ms: i64,
        origin: AppendOrigin,
    ) -> Result<AppendInfo> {
        let batches = self.validate(records, origin, now_ms)?;
        let log_append_time = (self.config.timestamp_type == TimestampType::LogAppendTime).then_some(now_ms);
        let first_offset = self.log_end_offset();
        let producer_updates =
            match self.producers.state.check(&batches, first_offset, log_append_time, origin)? {
                ProducerCheck::Append(updates) => updates,
                ProducerCheck::Duplicate(batch) => return Ok(self.duplicate_append(batch)),
            };
        let mut next_offset = first_offset;
        let mut prepared = Vec::with_capacity(batches.len());
        let mut rest = records;
        for ProducedBatch { header, .. } in &batches {
            let (raw, tail) = rest.split_at(header.size);
            rest = tail;
            let mut new_header: [u8; HEADER_LEN] = raw[..HEADER_LEN].try_into().expect("validated");
            let rewrite = HeaderRewrite {
                base_offset: next_offset,
                partition_leader_epoch: leader_epoch,
                log_append_time,
                records_max_timestamp: header.max_timestamp,
            };
            let max_timestamp = batch::rewrite_header(&mut new_header, raw, rewrite);
            let last_offset = next_offset + i64::from(header.last_offset_delta);
            prepared.push(PreparedBatch {
                header: new_header,
                body: &raw[HEADER_LEN..],
                last_offset,
                max_timestamp,
            });
            next_offset = last_offset + 1;
        }
        let bytes = records.len();
        let first_timestamp = prepared.first().map_or(-1, |b| b.max_timestamp);
        self.maybe_roll(bytes, next_offset - 1, first_timestamp, now_ms)?;
        // Before the data, as Kafka does: the checkpoint never lacks an epoch the log holds.
        self.leader_epochs.observe(leader_epoch, first_offset)?;
        self.active_mut().append(&prepared)?;
        let completed = self.producers.state.apply(producer_updates);
        self.index_aborted(&completed)?;
        let appended = (next_offset - first_offset) as u64;
        self.unflushed_messages += appended;
        if self.unflushed_messages >= self.config.flush_interval_messages {
            self.flush(now_ms)?;
        }
        Ok(AppendInfo {
            first_offset,
            last_offset: next_offset - 1,
            log_append_time: log_append_time.unwrap_or(-1),
            records: appended,
            bytes,
        })
    }

    /// The answer to a retried batch: where it was first written.
    fn duplicate_append(&self, batch: BatchMetadata) -> AppendInfo {
        let log_append_time = self.config.timestamp_type == TimestampType::LogAppendTime;
        AppendInfo {
            first_offset: batch.first_offset,
            last_offset: batch.last_offset,
            log_append_time: if log_append_time { batch.timestamp } else { -1 },
            records: 0,
            bytes: 0,
        }
    }

    /// Indexes the aborted transactions among `completed` in the active
    /// segment, with the last stable offset their end leaves.
    fn index_aborted(&mut self, completed: &[CompletedTxn]) -> Result<()> {
        for txn in completed.iter().filter(|t| t.aborted) {
            let entry = self.aborted_entry(txn);
            self.active_mut().txn_index_mut()?.append(entry)?;
        }
        Ok(())
    }

    /// Kafka's `lastStableOffset(completedTxn)`: the first offset of the
    /// earliest transaction still open, else the offset after the marker.
    fn aborted_entry(&self, txn: &CompletedTxn) -> AbortedTxn {
        let last_stable_offset = self.producers.state.first_unstable_offset().unwrap_or(txn.last_offset + 1);
        AbortedTxn {
            producer_id: txn.producer_id,
            first_offset: txn.first_offset,
            last_offset: txn.last_offset,
            last_stable_offset,
        }
    }

    /// The last stable offset (LSO): the first offset of the earliest open
    /// transaction, else `high_watermark`; read_committed reads stop there.
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        let unstable = self.producers.state.first_unstable_offset().unwrap_or(high_watermark);
        unstable.min(high_watermark).max(self.log_start_offset)
    }

    /// Kafka's `collectAbortedTransactions`: the aborted transactions that
    /// overlap `[start_offset, upper_bound_offset)`, from the segment holding
    /// `start_offset` on, until an entry proves later ones cannot overlap.
    pub fn collect_aborted_transactions(
        &self,
        start_offset: i64,
        upper_bound_offset: i64,
    ) -> Result<Vec<AbortedTxn>> {
        let first = self.segments.range(..=start_offset).next_back().map_or(start_offset, |(base, _)| *base);
        let mut aborted = Vec::new();
        for segment in self.segments.range(first..).map(|(_, s)| s) {
            let search = segment.txn_index()?.collect(start_offset, upper_bound_offset);
            aborted.extend(search.aborted);
            if search.complete {
                break;
            }
        }
        Ok(aborted)
    }

    /// Kafka's checks of a produced record set. Headers always; records
    /// only where that costs no decompression, or a rule or an impossible
    /// header needs them (see [`Self::check_records`]).
    fn validate(&self, records: &[u8], origin: AppendOrigin, now_ms: i64) -> Result<Vec<ProducedBatch>> {
        let mut batches = Batches::new(records);
        let mut headers = Vec::new();
        for raw in batches.by_ref() {
            let raw = raw?;
            if raw.len() > self.config.max_message_bytes {
                return Err(StorageError::RecordTooLarge {
                    size: raw.len(),
                    max: self.config.max_message_bytes,
                });
            }
            let mut header = BatchHeader::parse(raw)?;
            if header.magic != batch::MAGIC_V2 {
                return Err(StorageError::InvalidRecord(format!(
                    "produce requests may only carry magic v2 batches, got v{}",
                    header.magic
                )));
            }
            if batch::compute_crc(raw) != header.crc {
                return Err(StorageError::CorruptRecord("batch CRC mismatch".into()));
            }
            if header.records_count <= 0 || header.last_offset_delta != header.records_count - 1 {
                return Err(StorageError::InvalidRecord(format!(
                    "batch declares {} records but an offset range of {}",
                    header.records_count,
                    i64::from(header.last_offset_delta) + 1
                )));
            }
            let producerless_raft_batch = origin == AppendOrigin::Raft && header.producer_id < 0;
            if header.is_control()
                && !producerless_raft_batch
                && (origin == AppendOrigin::Client || header.producer_id < 0)
            {
                return Err(StorageError::InvalidRecord(
                    "control records come from the transaction coordinator, for a producer".into(),
                ));
            }
            header.max_timestamp = self.check_records(raw, &header, now_ms)?;
            let marker = header.is_control().then(|| batch::end_txn_marker(raw)).flatten();
            headers.push(ProducedBatch { header, marker });
        }
        if !batches.remaining().is_empty() {
            if let Some(size) = batch::batch_size(batches.remaining()).and_then(|s| s.ok()) {
                if size > self.config.max_message_bytes {
                    return Err(StorageError::RecordTooLarge { size, max: self.config.max_message_bytes });
                }
            }
            return Err(StorageError::CorruptRecord("record set ends with a partial batch".into()));
        }
        if headers.is_empty() {
            return Err(StorageError::CorruptRecord("empty record set".into()));
        }
        Ok(headers)
    }

    /// Kafka's per-record rules for this log at `now_ms`.
    fn record_rules(&self, header: &BatchHeader, now_ms: i64) -> RecordRules {
        let create_time = self.config.timestamp_type == TimestampType::CreateTime;
        RecordRules {
            keys_required: self.config.cleanup_policy.compact && !header.is_control(),
            timestamps: create_time.then_some(TimestampWindow {
                now_ms,
                before_max_ms: self.config.timestamp_before_max_ms,
                after_max_ms: self.config.timestamp_after_max_ms,
            }),
        }
    }

    /// Checks the records of one batch and returns the max timestamp its
    /// header is to carry: the records' own, as Kafka stores it. Records of
    /// an uncompressed batch are walked anyway. A compressed batch is
    /// opened only when a rule needs every record (keys, a past bound) or
    /// its header cannot be right (max timestamp below the base, as old
    /// Sarama writes -1); otherwise its header is trusted, so the common
    /// path stays decompression-free.
    fn check_records(&self, raw: &[u8], header: &BatchHeader, now_ms: i64) -> Result<i64> {
        let rules = self.record_rules(header, now_ms);
        if header.compression() != 0 && !must_open(header, &rules) {
            return Ok(header.max_timestamp);
        }
        let body = crate::records::records_body(raw, header)?;
        crate::records::check_records(&body, header, rules)
    }

    fn maybe_roll(
        &mut self,
        bytes: usize,
        last_offset: i64,
        _first_timestamp: i64,
        now_ms: i64,
    ) -> Result<()> {
        let active = self.active();
        if active.is_empty() {
            return Ok(());
        }
        // Whatever segment.bytes says, a segment stops where its index can reach.
        let segment_bytes = self.config.segment_bytes.min(segment::MAX_SEGMENT_BYTES);
        let full = active.size() + bytes as u64 > segment_bytes;
        let aged = now_ms - active.created_at_ms() > self.config.segment_ms;
        let overflow = last_offset - active.base_offset() > i64::from(i32::MAX);
        if full || aged || overflow || active.indexes_full()? {
            self.roll(now_ms)?;
        }
        Ok(())
    }

    /// Starts a new active segment at the log end offset.
    pub fn roll(&mut self, now_ms: i64) -> Result<()> {
        let base = self.log_end_offset();
        if self.active().base_offset() == base {
            return Ok(());
        }
        let segment = LogSegment::create(&self.dir, base, self.config.segment_config(), now_ms)?;
        self.snapshot_producer_state_unsynced()?;
        self.active_mut().on_roll()?;
        self.segments.insert(base, segment);
        tracing::debug!(dir = %self.dir.display(), base, "rolled segment");
        Ok(())
    }

    /// Reads whole batches from `offset`, at most `max_bytes` (but at least
    /// one batch with `min_one_batch`), never at or past `max_offset` (the
    /// high watermark). `None` when there is nothing to read yet.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_batch: bool,
    ) -> Result<Option<FileSlice>> {
        let log_end = self.log_end_offset();
        if offset < self.log_start_offset || offset > log_end {
            return Err(StorageError::OffsetOutOfRange { offset, log_start: self.log_start_offset, log_end });
        }
        if offset >= max_offset {
            return Ok(None);
        }
        let first = self.segments.range(..=offset).next_back().map_or(offset, |(base, _)| *base);
        for segment in self.segments.range(first..).map(|(_, s)| s) {
            let max_position = self.position_of(segment, max_offset)?;
            if let Some(slice) = segment.read(offset, max_bytes, max_position, min_one_batch)? {
                if slice.len > 0 {
                    return Ok(Some(slice));
                }
            }
            if segment.next_offset() >= max_offset {
                break;
            }
        }
        Ok(None)
    }

    /// Position in `segment` where data at `offset` and after begins.
    fn position_of(&self, segment: &LogSegment, offset: i64) -> Result<u64> {
        if offset >= segment.next_offset() {
            return Ok(segment.size());
        }
        Ok(segment.translate_offset(offset)?.map_or(segment.size(), |(position, _)| position))
    }

    /// Kafka's ListOffsets by timestamp: the first record whose timestamp is
    /// at least `timestamp`, as (timestamp, offset).
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(i64, i64)>> {
        for segment in self.segments.values() {
            if segment.max_timestamp()? < timestamp {
                continue;
            }
            if let Some(found) = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The record with the largest timestamp (the first such), as (timestamp, offset).
    pub fn offset_of_max_timestamp(&self) -> Result<Option<(i64, i64)>> {
        let mut best: Option<(i64, &LogSegment)> = None;
        for segment in self.segments.values() {
            let max_timestamp = segment.max_timestamp()?;
            if best.is_none_or(|(b, _)| max_timestamp > b) {
                best = Some((max_timestamp, segment));
            }
        }
        match best {
            Some((_, segment)) => segment.offset_of_largest_timestamp(),
            None => Ok(None),
        }
    }

    /// Whether `flush.ms` has passed since the last flush with data unflushed.
    pub fn flush_due(&self, now_ms: i64) -> bool {
        self.unflushed_messages > 0 && now_ms - self.last_flush_ms >= self.config.flush_interval_ms
    }

    /// Forces the segments rolled since the last flush to disk and moves the
    /// recovery point to the active segment's start: Kafka schedules this
    /// at every roll, so neither a clean shutdown nor a crash recovery has
    /// every rolled segment to go through.
    pub fn flush_rolled(&mut self) -> Result<()> {
        let active_base = self.active().base_offset();
        if self.recovery_point >= active_base {
            return Ok(());
        }
        let from = self.segments.range(..=self.recovery_point).next_back().map_or(0, |(base, _)| *base);
        for segment in self.segments.range(from..active_base).map(|(_, s)| s) {
            segment.flush()?;
        }
        self.sync_producer_snapshots()?;
        self.recovery_point = active_base;
        Ok(())
    }

    /// Forces every segment past the recovery point to disk and advances the
    /// recovery point to the log end.
    pub fn flush(&mut self, now_ms: i64) -> Result<()> {
        let log_end = self.log_end_offset();
        if self.recovery_point >= log_end && self.unflushed_messages == 0 {
            return Ok(());
        }
        let from = self.segments.range(..=self.recovery_point).next_back().map_or(0, |(base, _)| *base);
        for segment in self.segments.range(from..).map(|(_, s)| s) {
            segment.flush()?;
        }
        self.sync_producer_snapshots()?;
        self.recovery_point = log_end;
        self.unflushed_messages = 0;
        self.last_flush_ms = now_ms;
        Ok(())
    }

    /// Flushes and trims indexes so the next start can skip recovery. The
    /// log must not be appended to afterwards.
    pub fn close(&mut self, now_ms: i64) -> Result<()> {
        self.flush(now_ms)?;
        self.snapshot_producer_state()?;
        for segment in self.segments.values_mut() {
            segment.close()?;
        }
        Ok(())
    }

    /// Removes every file of the log and its directory.
    pub fn delete(self) -> Result<()> {
        let dir = self.dir.clone();
        drop(self);
        std::fs::remove_dir_all(dir)?;
        Ok(())
    }

    /// Every record from the log start up to `max_offset`, decoded: for the
    /// small internal logs the broker replays at start. Batches emptied by
    /// the cleaner are stepped over by their header.
    pub fn read_records(&self, max_offset: i64) -> Result<Vec<kafka_protocol::records::Record>> {
        let mut records = Vec::new();
        let mut offset = self.log_start_offset;
        while offset < max_offset {
            let Some(slice) = self.read(offset, 1 << 20, max_offset, true)? else { break };
            let bytes = slice.read()?;
            let last_header =
                Batches::new(&bytes).filter_map(|raw| BatchHeader::parse(raw.ok()?).ok()).last();
            let Some(next) = last_header.map(|h| h.next_offset()).filter(|next| *next > offset) else {
                break;
            };
            offset = next;
            records.extend(batch::decode_records(bytes)?.into_iter().filter(|r| r.offset < max_offset));
        }
        Ok(records)
    }

    /// The segments by base offset, for the cleaner's swap.
    pub(crate) fn segment_map(&self) -> &BTreeMap<i64, LogSegment> {
        &self.segments
    }

    pub(crate) fn segment_map_mut(&mut self) -> &mut BTreeMap<i64, LogSegment> {
        &mut self.segments
    }

    /// The segment holding `offset`, for tools.
    pub fn segment_for(&self, offset: i64) -> Option<&LogSegment> {
        self.segments.range((Bound::Unbounded, Bound::Included(offset))).next_back().map(|(_, s)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::test_support::batch;
    use kafka_protocol::records::Compression;
    use proptest::prelude::*;

    fn small_config() -> LogConfig {
        LogConfig::small(4096)
    }

    fn open(dir: &Path, config: LogConfig, clean: bool) -> Log {
        Log::open(dir, config, 0, 0, clean, 0).unwrap().0
    }

    /// Appends `batches` batches of 1..=5 records, returns (base offset, batch bytes).
    fn fill(log: &mut Log, batches: usize) -> Vec<(i64, usize)> {
        (0..batches)
            .map(|i| {
                let bytes = batch(1 + i % 5, 1_000 + 10 * i as i64, Compression::None);
                let info = log.append(&bytes, 0, 0).unwrap();
                (info.first_offset, info.records as usize)
            })
            .collect()
    }

    /// Offsets of every batch read back from `from`, by repeated reads.
    fn read_all(log: &Log, from: i64) -> Vec<i64> {
        let mut offsets = Vec::new();
        let mut next = from;
        while let Some(slice) = log.read(next, 1500, log.log_end_offset(), true).unwrap() {
            let bytes = slice.read().unwrap();
            for raw in Batches::new(&bytes) {
                let header = batch::verify_stored(raw.unwrap()).unwrap();
                offsets.push(header.base_offset);
                next = header.next_offset();
            }
        }
        offsets
    }

    #[test]
    fn given_appends_when_read_should_return_every_batch_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), small_config(), true);
        let written = fill(&mut log, 200);
        assert!(log.segments().count() > 3, "small segments roll");
        let bases: Vec<i64> = written.iter().map(|(base, _)| *base).collect();
        assert_eq!(read_all(&log, 0), bases);
        let total: usize = written.iter().map(|(_, n)| n).sum();
        assert_eq!(log.log_end_offset(), total as i64);
    }

    #[test]
    fn given_offset_inside_a_batch_when_read_should_start_at_that_batch() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), small_config(), true);
        let written = fill(&mut log, 100);
        for window in written.windows(2) {
            let (base, next) = (window[0].0, window[1].0);
            for offset in base..next {
                let slice = log.read(offset, 1, log.log_end_offset(), true).unwrap().unwrap();
                let header = batch::verify_stored(&slice.read().unwrap()).unwrap();
                assert_eq!(header.base_offset, base);
            }
        }
    }

    #[test]
    fn read_beyond_log_end_is_out_of_range() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), small_config(), true);
        fill(&mut log, 3);
        let end = log.log_end_offset();
        assert!(log.read(end, 100, end, true).unwrap().is_none());
        assert!(matches!(log.read(end + 1, 100, end, true), Err(StorageError::OffsetOutOfRange { .. })));
    }

    #[test]
    fn rejects_oversized_corrupt_and_inconsistent_batches() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), LogConfig { max_message_bytes: 200, ..small_config() }, true);
        let big = batch(20, 0, Compression::None);
        assert!(matches!(log.append(&big, 0, 0), Err(StorageError::RecordTooLarge { .. })));
        let mut corrupt = batch(1, 0, Compression::None);
        let last = corrupt.len() - 1;
        corrupt[last] ^= 1;
        assert!(matches!(log.append(&corrupt, 0, 0), Err(StorageError::CorruptRecord(_))));
        let mut lying = batch(2, 0, Compression::None);
        lying[batch::RECORDS_COUNT + 3] = 3;
        let crc = batch::compute_crc(&lying);
        lying[batch::CRC..batch::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(log.append(&lying, 0, 0), Err(StorageError::InvalidRecord(_))));
        let partial = &batch(1, 0, Compression::None)[..30];
        assert!(log.append(partial, 0, 0).is_err());
        assert_eq!(log.log_end_offset(), 0, "nothing written");
    }

    #[test]
    fn finds_offsets_by_timestamp() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), small_config(), true);
        let mut expected = Vec::new();
        for i in 0..50 {
            let bytes = batch(3, 10_000 + 100 * i, Compression::Gzip);
            let info = log.append(&bytes, 0, 0).unwrap();
            expected.push((10_000 + 100 * i, info.first_offset));
        }
        for (timestamp, offset) in &expected {
            assert_eq!(log.offset_for_timestamp(*timestamp).unwrap(), Some((*timestamp, *offset)));
            assert_eq!(log.offset_for_timestamp(timestamp + 1).unwrap(), Some((timestamp + 1, offset + 1)));
        }
        assert_eq!(log.offset_for_timestamp(1_000_000).unwrap(), None);
        let last = expected.last().unwrap();
        assert_eq!(log.offset_of_max_timestamp().unwrap(), Some((last.0 + 2, last.1 + 2)));
    }

    #[test]
    fn clean_reopen_restores_end_offset_and_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), small_config(), true);
        let written = fill(&mut log, 120);
        let end = log.log_end_offset();
        log.close(0).unwrap();
        drop(log);
        let (log, report) = Log::open(dir.path(), small_config(), end, 0, true, 0).unwrap();
        assert_eq!(report.recovered_segments, 0);
        assert_eq!(log.log_end_offset(), end);
        let bases: Vec<i64> = written.iter().map(|(base, _)| *base).collect();
        assert_eq!(read_all(&log, 0), bases);
    }

    #[test]
    fn missing_or_corrupt_indexes_are_rebuilt_on_clean_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), small_config(), true);
        let written = fill(&mut log, 120);
        let end = log.log_end_offset();
        log.close(0).unwrap();
        drop(log);
        let first = crate::segment::file_name(0, ".index");
        std::fs::remove_file(dir.path().join(&first)).unwrap();
        let second_base = written
            .iter()
            .map(|(b, _)| *b)
            .find(|b| dir.path().join(crate::segment::file_name(*b, ".log")).exists() && *b > 0)
            .unwrap();
        let garbage: Vec<u8> = (0..64u8).rev().collect();
        std::fs::write(dir.path().join(crate::segment::file_name(second_base, ".index")), garbage).unwrap();
        let (log, report) = Log::open(dir.path(), small_config(), end, 0, true, 0).unwrap();
        assert_eq!(report.recovered_segments, 1, "the missing index; the corrupt one is found when read");
        assert_eq!(report.truncated_bytes, 0);
        let bases: Vec<i64> = written.iter().map(|(base, _)| *base).collect();
        assert_eq!(read_all(&log, 0), bases);
        assert!(log.segments().all(|s| s.index().unwrap().sanity_check(s.size()).is_ok()));
    }

    #[test]
    fn given_old_active_segment_when_append_should_roll_and_trim_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { segment_ms: 1_000, segment_bytes: 1 << 20, ..small_config() };
        let mut log = Log::open(dir.path(), config, 0, 0, true, 0).unwrap().0;
        for i in 0..20 {
            log.append(&batch(3, 1_000 + i, Compression::None), 0, 10).unwrap();
        }
        assert_eq!(log.segments().count(), 1, "young segment: no roll");
        log.append(&batch(1, 5_000, Compression::None), 0, 1_011).unwrap();
        assert_eq!(log.segments().count(), 2, "past segment.ms: rolled");
        let rolled = log.segments().next().unwrap();
        let index_len = std::fs::metadata(rolled.index().unwrap().path()).unwrap().len();
        assert_eq!(
            index_len,
            rolled.index().unwrap().entries() as u64 * 8,
            "rolled index trimmed to its entries"
        );
        assert!(rolled.index().unwrap().entries() > 0);
        let active = log.segments().last().unwrap();
        assert_eq!(
            std::fs::metadata(active.index().unwrap().path()).unwrap().len(),
            1024,
            "active index preallocated"
        );
    }

    #[test]
    fn flush_messages_advances_the_recovery_point() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { flush_interval_messages: 5, ..small_config() };
        let mut log = Log::open(dir.path(), config, 0, 0, true, 0).unwrap().0;
        log.append(&batch(3, 0, Compression::None), 0, 0).unwrap();
        assert_eq!(log.recovery_point(), 0);
        log.append(&batch(3, 0, Compression::None), 0, 0).unwrap();
        assert_eq!(log.recovery_point(), 6, "flushed once 5 messages were unflushed");
        let config = LogConfig { flush_interval_ms: 100, ..small_config() };
        let mut log = Log::open(&dir.path().join("timed"), config, 0, 0, true, 0).unwrap().0;
        log.append(&batch(2, 0, Compression::None), 0, 0).unwrap();
        assert!(!log.flush_due(50));
        assert!(log.flush_due(100));
    }

    #[test]
    fn flushing_rolled_segments_moves_the_recovery_point_to_the_active_segment() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), small_config(), true);
        fill(&mut log, 100);
        let active_base = log.segments().last().unwrap().base_offset();
        assert!(active_base > 0 && log.recovery_point() == 0);
        log.flush_rolled().unwrap();
        assert_eq!(log.recovery_point(), active_base);
        log.flush_rolled().unwrap();
        assert_eq!(log.recovery_point(), active_base, "nothing rolled since");
        // A crash now recovers only the active segment.
        drop(log);
        let (_, report) = Log::open(dir.path(), small_config(), active_base, 0, false, 0).unwrap();
        assert_eq!(report.recovered_segments, 1);
    }

    #[test]
    fn log_append_time_stamps_the_batch() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { timestamp_type: TimestampType::LogAppendTime, ..small_config() };
        let mut log = open(dir.path(), config, true);
        let info = log.append(&batch(2, 5, Compression::None), 0, 777).unwrap();
        assert_eq!(info.log_append_time, 777);
        let bytes = log.read(0, 1000, log.log_end_offset(), true).unwrap().unwrap().read().unwrap();
        let header = batch::verify_stored(&bytes).unwrap();
        assert_eq!(header.max_timestamp, 777);
        assert_eq!(header.timestamp_type(), TimestampType::LogAppendTime);
    }

    #[test]
    fn a_log_rolls_before_its_segment_outgrows_the_index_whatever_segment_bytes_says() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { segment_bytes: 5_000_000_000, ..small_config() };
        let mut log = open(dir.path(), config, true);
        log.append(&batch(1, 1_000, Compression::None), 0, 0).unwrap();
        log.active_mut().set_size_for_test(segment::MAX_SEGMENT_BYTES - 10);
        let info = log.append(&batch(3, 1_001, Compression::None), 0, 0).unwrap();
        assert_eq!(log.segments().count(), 2, "rolled at the index limit");
        assert_eq!(log.active().base_offset(), info.first_offset);
        assert_eq!(read_all(&log, info.first_offset), [info.first_offset]);
    }

    /// `bytes` with another max timestamp in its header (CRC fixed), as
    /// producers that write -1 there send it.
    fn with_max_timestamp(mut bytes: Vec<u8>, max_timestamp: i64) -> Vec<u8> {
        bytes[batch::MAX_TIMESTAMP..batch::MAX_TIMESTAMP + 8].copy_from_slice(&max_timestamp.to_be_bytes());
        let crc = batch::compute_crc(&bytes);
        bytes[batch::CRC..batch::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        bytes
    }

    /// The max timestamp each stored batch carries, checking its CRC.
    fn stored_max_timestamps(log: &Log) -> Vec<i64> {
        let bytes = log.read(0, usize::MAX, log.log_end_offset(), true).unwrap().unwrap().read().unwrap();
        Batches::new(&bytes).map(|raw| batch::verify_stored(raw.unwrap()).unwrap().max_timestamp).collect()
    }

    #[test]
    fn stored_max_timestamp_comes_from_the_records() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), small_config(), true);
        // Records at 1000..1002; headers claim -1 (impossible) or 1001 (plausible).
        let cases = [
            (Compression::None, -1, 1_002),
            (Compression::None, 1_001, 1_002),
            (Compression::Lz4, -1, 1_002),
            (Compression::Zstd, 900, 1_002),
            (Compression::Gzip, 1_001, 1_001),
        ];
        for (codec, claimed, _) in cases {
            log.append(&with_max_timestamp(batch(3, 1_000, codec), claimed), 0, 0).unwrap();
        }
        let expected: Vec<i64> = cases.iter().map(|(_, _, stored)| *stored).collect();
        assert_eq!(stored_max_timestamps(&log), expected, "a plausible compressed header is trusted");
        assert_eq!(log.offset_for_timestamp(1_002).unwrap(), Some((1_002, 2)));
        assert_eq!(log.offset_of_max_timestamp().unwrap(), Some((1_002, 2)));
    }

    #[test]
    fn timestamps_outside_the_window_are_refused_by_record() {
        let dir = tempfile::tempdir().unwrap();
        let now = 1_000_000;
        let config =
            LogConfig { timestamp_before_max_ms: 1_000, timestamp_after_max_ms: 500, ..small_config() };
        let mut log = open(dir.path(), config, true);
        for codec in [Compression::None, Compression::Snappy] {
            let records = [(now - 1_001, "old"), (now, "fine"), (now + 501, "future"), (-1, "none")];
            let entries = records.map(|(ts, value)| (Some("k".into()), Some(value.into()), ts));
            let refused = log.append(&batch::encode_records(entries, codec), 0, now).unwrap_err();
            let StorageError::RejectedRecords { invalid_timestamp: true, errors, .. } = refused else {
                panic!("{codec:?}: {refused:?}")
            };
            assert_eq!(errors.iter().map(|e| e.batch_index).collect::<Vec<_>>(), [0, 2], "{codec:?}");
            assert!(errors[1].message.contains(&(now + 501).to_string()), "{}", errors[1].message);
        }
        assert_eq!(log.log_end_offset(), 0, "nothing appended");
        log.append(&batch(3, now - 1_000, Compression::Lz4), 0, now).unwrap();
        let config = LogConfig { timestamp_type: TimestampType::LogAppendTime, ..log.config().clone() };
        log.set_config(config);
        log.append(&batch(1, 0, Compression::None), 0, now).unwrap();
    }

    #[test]
    fn keyless_records_on_a_compacted_log_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let compact = CleanupPolicy { delete: false, compact: true };
        let mut log = open(dir.path(), LogConfig { cleanup_policy: compact, ..small_config() }, true);
        let entries = [(Some("a"), 10), (None, 11), (Some("c"), 12), (None, 13)]
            .map(|(key, ts)| (key.map(Into::into), Some("v".into()), ts));
        let refused = log.append(&batch::encode_records(entries, Compression::Gzip), 0, 0).unwrap_err();
        let StorageError::RejectedRecords { invalid_timestamp: false, errors, .. } = &refused else {
            panic!("{refused:?}")
        };
        assert_eq!(errors.iter().map(|e| e.batch_index).collect::<Vec<_>>(), [1, 3]);
        assert!(refused.to_string().starts_with("2 record(s) rejected"), "{refused}");

        let many = 3 * crate::records::MAX_NAMED_RECORD_ERRORS;
        let keyless = (0..many).map(|i| (None, Some("v".into()), i as i64));
        let refused = log.append(&batch::encode_records(keyless, Compression::Zstd), 0, 0).unwrap_err();
        let StorageError::RejectedRecords { rejected, errors, .. } = &refused else { panic!("{refused:?}") };
        assert_eq!(
            (*rejected, errors.len()),
            (many, crate::records::MAX_NAMED_RECORD_ERRORS),
            "named, then counted"
        );
    }

    /// Writes a log, damages the last segment at `cut` (truncate, or flip a
    /// byte), then checks recovery keeps exactly the batches before the damage.
    fn recover_after_damage(batches: usize, cut_permille: u64, flip: bool) {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), LogConfig { segment_bytes: 1 << 20, ..small_config() }, true);
        let written = fill(&mut log, batches);
        drop(log);
        let path = dir.path().join(crate::segment::file_name(0, ".log"));
        let len = std::fs::metadata(&path).unwrap().len();
        let mut at = len * cut_permille / 1000;
        let mut ends = Vec::new();
        let mut position = 0u64;
        for i in 0..written.len() {
            position += batch(1 + i % 5, 0, Compression::None).len() as u64;
            ends.push(position);
        }
        if flip {
            // The base offset and leader epoch lie outside the CRC, as in
            // Kafka: a flip there is undetectable, so damage the CRC instead.
            let start = ends.iter().rev().find(|end| **end <= at).copied().unwrap_or(0);
            if matches!(at - start, 0..8 | 12..16) {
                at = start + batch::CRC as u64;
            }
            let mut bytes = std::fs::read(&path).unwrap();
            bytes[at as usize] ^= 0x5a;
            std::fs::write(&path, bytes).unwrap();
        } else {
            std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(at).unwrap();
        }
        let intact = ends.iter().take_while(|end| **end <= at).count();
        let (log, _) = Log::open(dir.path(), small_config(), 0, 0, false, 0).unwrap();
        let expected: Vec<i64> = written.iter().take(intact).map(|(base, _)| *base).collect();
        assert_eq!(read_all(&log, 0), expected);
        let expected_end = written.get(intact).map_or(log.log_end_offset(), |(base, _)| *base);
        assert_eq!(log.log_end_offset(), expected_end);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn recovery_from_a_cut_keeps_exactly_the_valid_prefix(batches in 1usize..60, cut in 0u64..1000) {
            recover_after_damage(batches, cut, false);
        }

        #[test]
        fn recovery_from_a_flipped_byte_keeps_exactly_the_valid_prefix(batches in 1usize..60, at in 0u64..1000) {
            recover_after_damage(batches, at, true);
        }

        #[test]
        fn index_lookup_agrees_with_a_linear_scan(batches in 1usize..150, probe in 0i64..400) {
            let dir = tempfile::tempdir().unwrap();
            let mut log = open(dir.path(), LogConfig { index_interval_bytes: 100, ..small_config() }, true);
            let written = fill(&mut log, batches);
            let end = log.log_end_offset();
            let probe = probe % (end + 1);
            let linear = written.iter().rev().find(|(base, _)| *base <= probe).map(|(base, _)| *base);
            let via_index = log
                .read(probe, 1, end, true)
                .unwrap()
                .map(|slice| batch::verify_stored(&slice.read().unwrap()).unwrap().base_offset);
            prop_assert_eq!(via_index, if probe == end { None } else { linear });
        }
    }
}
