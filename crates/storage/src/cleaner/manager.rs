//! Choosing what to clean: the dirty range of each compacted log, the
//! dirtiest due log, and the `cleaner-offset-checkpoint` of each log dir.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use super::{Checks, CleanError, Cleaner, CleanerStats, CHECKPOINT_FILE};
use crate::checkpoint::OffsetCheckpoint;
use crate::error::Result;
use crate::log::Log;
use crate::manager::LogDir;
use crate::segment::LogSegment;
use crate::{SharedLog, TopicPartition};

/// A log chosen for cleaning and the range to clean.
#[derive(Debug)]
pub(super) struct LogToClean {
    pub(super) tp: TopicPartition,
    pub(super) dir: usize,
    pub(super) log: SharedLog,
    pub(super) first_dirty: i64,
    pub(super) first_uncleanable: i64,
    pub(super) clean_bytes: u64,
    pub(super) cleanable_bytes: u64,
    /// `max.compaction.lag.ms` has passed for its oldest dirty record.
    pub(super) overdue: bool,
    /// The checkpointed first dirty offset was outside the log.
    pub(super) reset_checkpoint: bool,
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
    dirs: Vec<Arc<LogDir>>,
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
    pub fn new(dirs: &[Arc<LogDir>]) -> Self {
        let first_dirty = dirs
            .iter()
            .map(|dir| {
                OffsetCheckpoint::new(dir.path().join(CHECKPOINT_FILE)).read().unwrap_or_else(|e| {
                    tracing::warn!("ignoring {CHECKPOINT_FILE} in {}: {e}", dir.path().display());
                    BTreeMap::new()
                })
            })
            .collect();
        let state = ManagerState { in_progress: HashSet::new(), uncleanable: HashSet::new(), first_dirty };
        Self { dirs: dirs.to_vec(), state: Mutex::new(state) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ManagerState> {
        // Sets and maps changed one insert or removal at a time: usable
        // through a poisoning.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The checkpointed first dirty offset of `tp`.
    pub fn first_dirty_offset(&self, tp: &TopicPartition) -> Option<i64> {
        self.lock().first_dirty.iter().find_map(|m| m.get(tp).copied())
    }

    /// Partitions whose cleaning failed; they are skipped until restart.
    pub fn uncleanable_partitions(&self) -> Vec<TopicPartition> {
        self.lock().uncleanable.iter().cloned().collect()
    }

    /// Forgets a deleted log, so a new log of the same name starts dirty.
    pub fn forget(&self, tp: &TopicPartition, dir: usize) -> Result<()> {
        let mut state = self.lock();
        state.uncleanable.remove(tp);
        if state.first_dirty[dir].remove(tp).is_some() {
            self.write_checkpoint(dir, &state.first_dirty[dir])?;
        }
        Ok(())
    }

    /// Writes dir `dir`'s checkpoint, unless the dir is offline; a disk
    /// failure takes it offline.
    fn write_checkpoint(&self, dir: usize, first_dirty: &BTreeMap<TopicPartition, i64>) -> Result<()> {
        let log_dir = &self.dirs[dir];
        log_dir.check()?;
        let written = OffsetCheckpoint::new(log_dir.path().join(CHECKPOINT_FILE)).write(first_dirty);
        log_dir.guard(written.map_err(Into::into))
    }

    fn set_first_dirty(&self, tp: &TopicPartition, dir: usize, offset: i64, live: &[LogEntry]) -> Result<()> {
        let live: HashSet<&TopicPartition> = live.iter().map(|(tp, _, _)| tp).collect();
        let mut state = self.lock();
        state.first_dirty[dir].insert(tp.clone(), offset);
        state.first_dirty[dir].retain(|tp, _| live.contains(tp));
        self.write_checkpoint(dir, &state.first_dirty[dir])
    }

    /// Picks the dirtiest due log among `logs` and marks it in progress.
    fn grab_dirtiest(&self, logs: &[LogEntry], now_ms: i64) -> Option<LogToClean> {
        let (busy, first_dirty) = {
            let state = self.lock();
            let busy: HashSet<TopicPartition> =
                state.in_progress.union(&state.uncleanable).cloned().collect();
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
        let recorded = if target.reset_checkpoint {
            self.set_first_dirty(&target.tp, target.dir, target.first_dirty, logs)
        } else {
            Ok(())
        }
        .and_then(|()| self.clean_and_record(&target, logs, cleaner, registered, stop, now_ms));
        self.lock().in_progress.remove(&target.tp);
        recorded.map(|()| true)
    }

    /// Cleans `target` and records how far it is clean; an abort records
    /// nothing, a failure marks the log uncleanable.
    fn clean_and_record(
        &self,
        target: &LogToClean,
        logs: &[LogEntry],
        cleaner: &mut Cleaner,
        registered: &dyn Fn(&TopicPartition, &SharedLog) -> bool,
        stop: &dyn Fn() -> bool,
        now_ms: i64,
    ) -> Result<()> {
        let checks = Checks { stop, registered: &|| registered(&target.tp, &target.log) };
        match cleaner.clean(target, now_ms, &checks) {
            Ok(end_offset) => {
                log_stats(target, end_offset, &cleaner.last_stats);
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
            Err(CleanError::Failed(e)) if e.is_disk_failure() => {
                // The disk failed, not the log: its dir goes offline.
                self.dirs[target.dir].fail(&e);
                Err(e)
            }
            Err(CleanError::Failed(e)) => {
                tracing::warn!(partition = %target.tp, "cleaning failed; the log is marked uncleanable: {e}");
                self.lock().uncleanable.insert(target.tp.clone());
                Ok(())
            }
        }
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
    let log = crate::manager::lock_log(shared).ok()?;
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
        .then(|| {
            // A segment whose time index cannot be read counts as too young.
            let young = |s: &&LogSegment| s.max_timestamp().map_or(true, |ts| ts > lag_start);
            dirty_inactive().find(young).map(LogSegment::base_offset)
        })
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
