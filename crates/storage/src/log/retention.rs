//! Retention: deleting whole segments the log no longer keeps.
//!
//! Three limits each mark a prefix of the segments for deletion: age
//! (`retention.ms`, by a segment's largest timestamp), size
//! (`retention.bytes`, oldest first until the log fits) and the log start
//! offset (moved by DeleteRecords). Only segments wholly below the high
//! watermark go, and never the active one. A deleted segment's files are
//! renamed `.deleted` first, so reads in flight finish on their open handles,
//! and removed after `file.delete.delay.ms`.

use std::path::PathBuf;

use super::Log;
use crate::error::{Result, StorageError};
use crate::segment::LogSegment;

/// The suffix of a segment file waiting for its delayed removal.
pub const DELETED_SUFFIX: &str = ".deleted";

/// What one retention pass removed.
#[derive(Debug, Default)]
pub struct Deleted {
    pub segments: usize,
    pub bytes: u64,
    /// The renamed files, to remove once `file.delete.delay.ms` has passed.
    pub files: Vec<PathBuf>,
}

impl Log {
    /// Deletes the oldest segments that breach retention or lie wholly below
    /// the log start offset. Segments reaching `high_watermark` stay.
    pub fn delete_retained_segments(&mut self, high_watermark: i64, now_ms: i64) -> Result<Deleted> {
        let deletable = self.deletable_segments(high_watermark);
        let mut doomed = self.below_log_start(&deletable);
        if self.config.cleanup_policy.delete {
            doomed = doomed.max(self.past_retention_time(&deletable, now_ms)?);
            doomed = doomed.max(self.past_retention_size(&deletable));
        }
        let mut deleted = Deleted::default();
        for base in deletable.into_iter().take(doomed) {
            let segment = self.segments.remove(&base).expect("listed segment");
            deleted.segments += 1;
            deleted.bytes += segment.size();
            deleted.files.extend(segment.rename_to(DELETED_SUFFIX)?);
        }
        if deleted.segments > 0 {
            let first_base = *self.segments.keys().next().expect("the active segment stays");
            self.log_start_offset = self.log_start_offset.max(first_base);
            self.recovery_point = self.recovery_point.max(first_base);
            self.leader_epochs.truncate_from_start(self.log_start_offset)?;
            deleted.files.extend(self.retire_producer_snapshots(first_base)?);
            tracing::info!(dir = %self.dir.display(), segments = deleted.segments, bytes = deleted.bytes,
                log_start_offset = self.log_start_offset, "deleted segments past retention");
        }
        Ok(deleted)
    }

    /// Moves the log start offset up to `offset` (DeleteRecords); records
    /// below it become unreadable at once, their segments go at the next
    /// retention pass. Returns the new log start offset.
    pub fn advance_log_start_offset(&mut self, offset: i64) -> Result<i64> {
        let log_end = self.log_end_offset();
        if offset > log_end {
            return Err(StorageError::OffsetOutOfRange { offset, log_start: self.log_start_offset, log_end });
        }
        self.log_start_offset = self.log_start_offset.max(offset);
        self.leader_epochs.truncate_from_start(self.log_start_offset)?;
        Ok(self.log_start_offset)
    }

    /// Base offsets of the inactive segments wholly below `high_watermark`, oldest first.
    fn deletable_segments(&self, high_watermark: i64) -> Vec<i64> {
        let mut bases = Vec::new();
        let mut segments = self.segments.values().peekable();
        while let (Some(segment), Some(next)) = (segments.next(), segments.peek()) {
            if next.base_offset() > high_watermark {
                break;
            }
            bases.push(segment.base_offset());
        }
        bases
    }

    /// How many leading segments end at or below the log start offset.
    fn below_log_start(&self, deletable: &[i64]) -> usize {
        let next_bases = self.segments.keys().skip(1);
        deletable.iter().zip(next_bases).take_while(|(_, next)| **next <= self.log_start_offset).count()
    }

    /// How many leading segments are older than `retention.ms`.
    fn past_retention_time(&self, deletable: &[i64], now_ms: i64) -> Result<usize> {
        let retention_ms = self.config.retention_ms;
        if retention_ms < 0 {
            return Ok(0);
        }
        let mut expired = 0;
        for base in deletable {
            if now_ms - self.segments[base].largest_timestamp()? <= retention_ms {
                break;
            }
            expired += 1;
        }
        Ok(expired)
    }

    /// How many leading segments must go for the log to fit `retention.bytes`.
    fn past_retention_size(&self, deletable: &[i64]) -> usize {
        let retention_bytes = self.config.retention_bytes;
        if retention_bytes < 0 {
            return 0;
        }
        let mut excess = self.size_bytes() as i64 - retention_bytes;
        deletable
            .iter()
            .take_while(|base| {
                let size = self.segments[*base].size() as i64;
                let breach = excess - size >= 0;
                if breach {
                    excess -= size;
                }
                breach
            })
            .count()
    }
}

impl LogSegment {
    /// The timestamp retention ages a segment by: its largest record
    /// timestamp, or the file's modification time when it has none.
    /// Segments loaded from disk learn it from their time index on first use.
    pub fn largest_timestamp(&self) -> Result<i64> {
        let max_timestamp = self.max_timestamp()?;
        if max_timestamp >= 0 {
            return Ok(max_timestamp);
        }
        Ok(std::fs::metadata(self.log_path())
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as i64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::test_support::batch;
    use crate::log::LogConfig;
    use kafka_protocol::records::Compression;
    use std::path::Path;

    fn config() -> LogConfig {
        LogConfig::small(2048)
    }

    /// A log with `batches` one-record batches stamped `timestamp + i`.
    fn log_with(dir: &Path, config: LogConfig, batches: usize, timestamp: i64) -> Log {
        let mut log = Log::open(dir, config, 0, 0, true, 0).unwrap().0;
        for i in 0..batches {
            log.append(&batch(1, timestamp + i as i64, Compression::None), 0, 0).unwrap();
        }
        log
    }

    fn files_with_suffix(dir: &Path, suffix: &str) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(suffix))
            .count()
    }

    #[test]
    fn size_retention_keeps_the_newest_segments_that_fit() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { retention_bytes: 5000, ..config() };
        let mut log = log_with(dir.path(), config, 200, 1_000);
        let before = log.segments().count();
        let end = log.log_end_offset();
        let deleted = log.delete_retained_segments(end, 2_000).unwrap();
        assert!(deleted.segments > 0 && deleted.segments < before);
        // Kafka's rule: delete while the log stays at or above the limit
        // without the segment, so it may exceed it by less than one segment.
        let first_size = log.segments().next().unwrap().size();
        assert!(log.size_bytes() < 5000 + first_size, "log too big: {}", log.size_bytes());
        let first = log.segments().next().unwrap().base_offset();
        assert_eq!(log.log_start_offset(), first);
        assert_eq!(log.log_end_offset(), end, "the log end never moves");
        assert_eq!(files_with_suffix(dir.path(), ".log.deleted"), deleted.segments);
        assert!(log.read(first - 1, 100, end, true).is_err(), "below the log start is out of range");
        assert!(log.read(first, 100, end, true).unwrap().is_some());
    }

    #[test]
    fn time_retention_deletes_old_segments_but_never_the_active_one() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { retention_ms: 1_000, ..config() };
        let mut log = log_with(dir.path(), config, 100, 10_000);
        let end = log.log_end_offset();
        assert_eq!(log.delete_retained_segments(end, 10_500).unwrap().segments, 0, "nothing aged yet");
        let deleted = log.delete_retained_segments(end, 1_000_000).unwrap();
        assert_eq!(log.segments().count(), 1, "only the active segment remains");
        assert!(deleted.segments > 0);
        assert_eq!(log.log_start_offset(), log.segments().next().unwrap().base_offset());
    }

    #[test]
    fn nothing_at_or_above_the_high_watermark_is_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { retention_ms: 0, ..config() };
        let mut log = log_with(dir.path(), config, 100, 10);
        let second_base = log.segments().nth(1).unwrap().base_offset();
        let deleted = log.delete_retained_segments(second_base, 1_000_000).unwrap();
        assert_eq!(deleted.segments, 1, "only the segment below the high watermark");
    }

    #[test]
    fn delete_records_moves_the_log_start_and_retention_removes_what_lies_below() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { retention_ms: -1, ..config() };
        let mut log = log_with(dir.path(), config, 100, 10);
        let end = log.log_end_offset();
        let third_base = log.segments().nth(2).unwrap().base_offset();
        assert_eq!(log.advance_log_start_offset(third_base + 1).unwrap(), third_base + 1);
        assert_eq!(log.advance_log_start_offset(1).unwrap(), third_base + 1, "never moves back");
        assert!(log.advance_log_start_offset(end + 1).is_err());
        let deleted = log.delete_retained_segments(end, 0).unwrap();
        assert_eq!(deleted.segments, 2);
        assert_eq!(log.log_start_offset(), third_base + 1);
    }

    #[test]
    fn files_left_as_deleted_are_removed_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { retention_bytes: 0, ..config() };
        let mut log = log_with(dir.path(), config.clone(), 100, 10);
        let end = log.log_end_offset();
        let deleted = log.delete_retained_segments(end, 0).unwrap();
        assert!(deleted.files.iter().all(|f| f.exists()));
        let start = log.log_start_offset();
        log.close(0).unwrap();
        drop(log);
        let reopened = Log::open(dir.path(), config, end, start, true, 0).unwrap().0;
        assert_eq!(files_with_suffix(dir.path(), DELETED_SUFFIX), 0);
        assert_eq!((reopened.log_start_offset(), reopened.log_end_offset()), (start, end));
    }

    #[test]
    fn unlimited_retention_deletes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { retention_ms: -1, retention_bytes: -1, ..config() };
        let mut log = log_with(dir.path(), config, 100, 10);
        let end = log.log_end_offset();
        assert_eq!(log.delete_retained_segments(end, i64::MAX / 2).unwrap().segments, 0);
    }

    #[test]
    fn compact_only_logs_ignore_time_and_size_limits() {
        let dir = tempfile::tempdir().unwrap();
        let policy = "compact".parse().unwrap();
        let config = LogConfig { retention_ms: 0, retention_bytes: 0, cleanup_policy: policy, ..config() };
        let mut log = log_with(dir.path(), config, 100, 10);
        let end = log.log_end_offset();
        assert_eq!(log.delete_retained_segments(end, 1_000_000).unwrap().segments, 0);
    }
}
