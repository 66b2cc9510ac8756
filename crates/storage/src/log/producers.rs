//! The producer state of a log: loaded at open, snapshotted at roll and
//! clean close, expired on the broker's schedule.
//!
//! The snapshot taken at a roll, on the request path, is written but not
//! forced to disk; the next flush forces it before moving the recovery point
//! past it, as Kafka defers it to its scheduler, so an append never waits
//! for an fsync it did not ask for (`flush.messages`). Only a snapshot at or
//! below the recovery point is trusted after a crash, and that one is synced.
//!
//! At open the state comes from the newest snapshot at or below the offset
//! known durable (the log end after a clean shutdown, the recovery point
//! after a crash), then from the headers of every batch between it and the
//! log end. Snapshots lie beside the segments as `<offset>.snapshot`; the
//! ones outside the log go, and besides the newest at or below the recovery
//! point only the [`SNAPSHOTS_KEPT`] newest stay.

use std::path::{Path, PathBuf};

use super::{parse_segment_name, Log, DELETED_SUFFIX};
use crate::checkpoint::{replace_unsynced, sync_parent, write_atomically};
use crate::error::Result;
use crate::producer_state::{ProducerState, SNAPSHOT_SUFFIX};
use crate::segment::file_name;

/// Newest snapshots kept besides the one recovery after a crash starts from.
pub const SNAPSHOTS_KEPT: usize = 2;

/// A log's producers and the offset of the snapshot that reproduces them.
#[derive(Debug, Default)]
pub(super) struct Producers {
    pub(super) state: ProducerState,
    /// The offset of a snapshot on disk that holds exactly this state, so
    /// writing another one there would be wasted.
    persisted_at: Option<i64>,
    /// Snapshots written at a roll and not yet forced to disk.
    unsynced: Vec<std::fs::File>,
}

fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(file_name(offset, SNAPSHOT_SUFFIX))
}

/// Offsets of the snapshot files in `dir`, ascending.
fn list_snapshots(dir: &Path) -> Result<Vec<i64>> {
    let mut offsets = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        if let Some(offset) = name.to_str().and_then(|name| parse_segment_name(name, SNAPSHOT_SUFFIX)) {
            offsets.push(offset);
        }
    }
    offsets.sort_unstable();
    Ok(offsets)
}

fn remove_snapshot(dir: &Path, offset: i64) -> Result<()> {
    match std::fs::remove_file(snapshot_path(dir, offset)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

impl Log {
    /// The producers this partition knows.
    pub fn producer_state(&self) -> &ProducerState {
        &self.producers.state
    }

    /// Forgets every producer and snapshot, for a log that restarts empty
    /// (Kafka's `ProducerStateManager.truncateFullyAndStartAt`).
    pub(super) fn reset_producer_state(&mut self) -> Result<()> {
        for offset in list_snapshots(&self.dir)? {
            remove_snapshot(&self.dir, offset)?;
        }
        self.producers = Default::default();
        Ok(())
    }

    /// Builds the producer state at open: the newest readable snapshot at or
    /// below `durable_offset`, then the batches after it.
    pub(super) fn load_producer_state(&mut self, durable_offset: i64) -> Result<()> {
        let log_end = self.log_end_offset();
        let first_base = self.first_segment_base();
        let mut start = None;
        for offset in list_snapshots(&self.dir)?.into_iter().rev() {
            let usable = (first_base..=durable_offset.min(log_end)).contains(&offset);
            if !usable || start.is_some() {
                if offset > log_end || offset < first_base {
                    remove_snapshot(&self.dir, offset)?;
                }
                continue;
            }
            match std::fs::read(snapshot_path(&self.dir, offset))
                .map_err(Into::into)
                .and_then(|b| ProducerState::decode_snapshot(&b))
            {
                Ok(state) => {
                    self.producers.state = state;
                    start = Some(offset);
                }
                Err(e) => {
                    tracing::warn!(dir = %self.dir.display(), offset, "ignoring a producer snapshot: {e}");
                    remove_snapshot(&self.dir, offset)?;
                }
            }
        }
        let from = start.unwrap_or(first_base);
        self.replay_producer_batches(from)?;
        // An empty log needs no snapshot to be rebuilt.
        self.producers.persisted_at = if from == log_end { Some(log_end) } else { None };
        Ok(())
    }

    fn first_segment_base(&self) -> i64 {
        *self.segments.keys().next().expect("a log always has a segment")
    }

    /// Feeds the producer state every batch from `from` to the log end.
    /// Aborts found on the way are indexed in their segment unless already
    /// there: a crash may have lost the index entry of a durable marker.
    fn replay_producer_batches(&mut self, from: i64) -> Result<()> {
        let first = self.segments.range(..=from).next_back().map_or(from, |(base, _)| *base);
        let bases: Vec<i64> = self.segments.range(first..).map(|(base, _)| *base).collect();
        for base in bases {
            let mut aborted = Vec::new();
            let segment = &self.segments[&base];
            let Some((mut position, _)) = segment.translate_offset(from)? else { continue };
            while let Some(header) = segment.header_at(position)? {
                let marker = segment.end_txn_marker_at(position, &header)?;
                if let Some(txn) = self.producers.state.replay(&header, marker).filter(|t| t.aborted) {
                    aborted.push(self.aborted_entry(&txn));
                }
                position += header.size as u64;
            }
            let segment = self.segments.get_mut(&base).expect("listed above");
            for entry in aborted {
                segment.txn_index_mut()?.ensure(entry)?;
            }
        }
        Ok(())
    }

    /// Writes the producer state at the log end, forced to disk, unless a
    /// snapshot there already holds it, and prunes old snapshots.
    pub(super) fn snapshot_producer_state(&mut self) -> Result<()> {
        self.sync_producer_snapshots()?;
        let offset = self.log_end_offset();
        if self.producers.persisted_at == Some(offset) {
            return Ok(());
        }
        write_atomically(&snapshot_path(&self.dir, offset), &self.producers.state.encode_snapshot())?;
        self.producers.persisted_at = Some(offset);
        self.prune_producer_snapshots()
    }

    /// [`Self::snapshot_producer_state`] for a roll: written, not yet forced
    /// to disk; [`Self::sync_producer_snapshots`] does that off the request
    /// path.
    pub(super) fn snapshot_producer_state_unsynced(&mut self) -> Result<()> {
        let offset = self.log_end_offset();
        if self.producers.persisted_at == Some(offset) {
            return Ok(());
        }
        let file =
            replace_unsynced(&snapshot_path(&self.dir, offset), &self.producers.state.encode_snapshot())?;
        self.producers.unsynced.push(file);
        self.producers.persisted_at = Some(offset);
        self.prune_producer_snapshots()
    }

    /// Forces the snapshots written at rolls to disk, with their directory entries.
    pub(super) fn sync_producer_snapshots(&mut self) -> Result<()> {
        if self.producers.unsynced.is_empty() {
            return Ok(());
        }
        for file in &self.producers.unsynced {
            crate::fsync::sync_all(file)?;
        }
        sync_parent(&snapshot_path(&self.dir, 0))?;
        self.producers.unsynced.clear();
        Ok(())
    }

    /// How many snapshots written at rolls wait to be forced to disk.
    pub fn unsynced_producer_snapshots(&self) -> usize {
        self.producers.unsynced.len()
    }

    /// Keeps the newest snapshot at or below the recovery point (where a
    /// restart after a crash begins) and the [`SNAPSHOTS_KEPT`] newest.
    fn prune_producer_snapshots(&self) -> Result<()> {
        let offsets = list_snapshots(&self.dir)?;
        let recovery_start = offsets.iter().rev().find(|o| **o <= self.recovery_point).copied();
        let newest = offsets.len().saturating_sub(SNAPSHOTS_KEPT);
        for (i, offset) in offsets.iter().enumerate() {
            if i < newest && Some(*offset) != recovery_start {
                remove_snapshot(&self.dir, *offset)?;
            }
        }
        Ok(())
    }

    /// Renames the snapshots of segments deleted below `first_base` with the
    /// deletion suffix; returns the renamed files, for delayed removal.
    pub(super) fn retire_producer_snapshots(&self, first_base: i64) -> Result<Vec<PathBuf>> {
        let mut renamed = Vec::new();
        for offset in list_snapshots(&self.dir)?.into_iter().filter(|o| *o < first_base) {
            let path = snapshot_path(&self.dir, offset);
            let mut target = path.clone().into_os_string();
            target.push(DELETED_SUFFIX);
            std::fs::rename(&path, &target)?;
            renamed.push(target.into());
        }
        Ok(renamed)
    }

    /// Forgets producers idle longer than `expiration_ms`; returns how many.
    pub fn remove_expired_producers(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let removed = self.producers.state.remove_expired(now_ms, expiration_ms);
        if removed > 0 {
            self.producers.persisted_at = None;
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::LogConfig;
    use crate::producer_state::test_support::idempotent_batch;
    use crate::producer_state::{increment_sequence, BatchMetadata, BATCHES_RETAINED};
    use crate::StorageError;
    use proptest::prelude::*;

    fn config() -> LogConfig {
        LogConfig::small(2048)
    }

    fn snapshots(dir: &Path) -> Vec<i64> {
        list_snapshots(dir).unwrap()
    }

    /// Appends batches of 2 records from producers 1..=3 in turn; returns the
    /// first offset of each.
    fn produce(log: &mut Log, batches: i32) -> Vec<i64> {
        (0..batches)
            .map(|i| {
                let producer = i64::from(i % 3 + 1);
                let bytes = idempotent_batch(producer, 0, (i / 3) * 2, 2);
                log.append(&bytes, 0, 0).unwrap().first_offset
            })
            .collect()
    }

    #[test]
    fn a_roll_waits_for_no_fsync_and_the_next_flush_forces_its_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config(), 0, 0, true, 0).unwrap().0;
        // An epoch's first append writes the leader epoch checkpoint (synced
        // once per epoch); counted from after it.
        let plain = crate::batch::encode_batch(&[(None, Some(bytes::Bytes::from_static(b"v")))], 0);
        log.append(&plain, 0, 0).unwrap();
        let before = crate::fsync::syncs_on_this_thread();
        produce(&mut log, 60);
        assert!(log.segments().count() > 2, "the appends rolled");
        assert_eq!(crate::fsync::syncs_on_this_thread(), before, "appends and rolls force nothing to disk");
        assert!(log.unsynced_producer_snapshots() > 0);
        assert!(!snapshots(dir.path()).is_empty());

        log.flush_rolled().unwrap();
        assert!(crate::fsync::syncs_on_this_thread() > before);
        assert_eq!(log.unsynced_producer_snapshots(), 0);
    }

    #[test]
    fn a_retry_is_answered_with_the_original_offsets_and_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config(), 0, 0, true, 0).unwrap().0;
        let first = log.append(&idempotent_batch(5, 0, 0, 3), 0, 0).unwrap();
        let retry = log.append(&idempotent_batch(5, 0, 0, 3), 0, 0).unwrap();
        assert_eq!(
            (retry.first_offset, retry.last_offset, retry.records),
            (first.first_offset, first.last_offset, 0)
        );
        assert_eq!(log.log_end_offset(), 3);
        let gap = log.append(&idempotent_batch(5, 0, 4, 1), 0, 0);
        assert!(matches!(gap, Err(StorageError::OutOfOrderSequence(_))));
        let stale = log.append(&idempotent_batch(5, -1, 3, 1), 0, 0);
        assert!(matches!(stale, Err(StorageError::InvalidProducerEpoch(_))));
        assert_eq!(log.log_end_offset(), 3, "refused batches leave the log untouched");
    }

    #[test]
    fn a_retry_reports_the_first_append_time_under_log_append_time() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { timestamp_type: crate::batch::TimestampType::LogAppendTime, ..config() };
        let mut log = Log::open(dir.path(), config, 0, 0, true, 0).unwrap().0;
        assert_eq!(log.append(&idempotent_batch(5, 0, 0, 1), 0, 777).unwrap().log_append_time, 777);
        let retry = log.append(&idempotent_batch(5, 0, 0, 1), 0, 999).unwrap();
        assert_eq!((retry.first_offset, retry.log_append_time, retry.records), (0, 777, 0));
    }

    #[test]
    fn rolls_and_clean_close_write_snapshots_that_reopen_restores() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config(), 0, 0, true, 0).unwrap().0;
        produce(&mut log, 60);
        assert!(log.segments().count() > 2);
        assert!(!snapshots(dir.path()).is_empty(), "a roll writes a snapshot");
        assert!(snapshots(dir.path()).len() <= SNAPSHOTS_KEPT + 1, "snapshots are bounded");
        let before = log.producer_state().clone();
        let end = log.log_end_offset();
        log.close(0).unwrap();
        drop(log);
        assert_eq!(snapshots(dir.path()).last(), Some(&end), "clean close snapshots at the log end");
        let log = Log::open(dir.path(), config(), end, 0, true, 0).unwrap().0;
        for id in 1..=3 {
            let (was, now) = (before.get(id).unwrap(), log.producer_state().get(id).unwrap());
            assert_eq!(now.epoch, was.epoch);
            assert_eq!(now.last_batch(), was.last_batch(), "the snapshot keeps the last batch");
        }
    }

    #[test]
    fn after_a_crash_the_state_is_rebuilt_from_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config(), 0, 0, true, 0).unwrap().0;
        produce(&mut log, 40);
        let before = log.producer_state().clone();
        let retried = idempotent_batch(1, 0, 24, 2);
        let original = log.append(&retried, 0, 0).unwrap();
        drop(log);
        let (mut log, _) = Log::open(dir.path(), config(), 0, 0, false, 0).unwrap();
        assert_eq!(log.producer_state().get(2), before.get(2), "every remembered batch is rebuilt");
        let retry = log.append(&retried, 0, 0).unwrap();
        assert_eq!((retry.first_offset, retry.records), (original.first_offset, 0));
    }

    #[test]
    fn retention_retires_the_snapshots_of_deleted_segments() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { retention_bytes: 0, ..config() };
        let mut log = Log::open(dir.path(), config.clone(), 0, 0, true, 0).unwrap().0;
        produce(&mut log, 80);
        let end = log.log_end_offset();
        log.flush(0).unwrap();
        let deleted = log.delete_retained_segments(end, 0).unwrap();
        let first_base = log.segments().next().unwrap().base_offset();
        assert!(snapshots(dir.path()).iter().all(|o| *o >= first_base));
        assert!(deleted.files.iter().any(|f| f.to_string_lossy().ends_with(".snapshot.deleted")));
        assert!(log.producer_state().get(1).is_some(), "producers outlive their segments");
    }

    #[test]
    fn a_corrupt_snapshot_is_ignored_and_the_log_rescanned() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config(), 0, 0, true, 0).unwrap().0;
        produce(&mut log, 9);
        let end = log.log_end_offset();
        log.close(0).unwrap();
        drop(log);
        std::fs::write(snapshot_path(dir.path(), end), b"garbage").unwrap();
        let log = Log::open(dir.path(), config(), end, 0, true, 0).unwrap().0;
        let last = log.producer_state().get(3).unwrap().last_batch().copied();
        assert_eq!(
            last,
            Some(BatchMetadata {
                first_seq: 4,
                last_seq: 5,
                first_offset: 16,
                last_offset: 17,
                timestamp: 1_001
            })
        );
        assert!(
            !snapshots(dir.path()).contains(&end)
                || std::fs::read(snapshot_path(dir.path(), end)).unwrap() != b"garbage"
        );
    }

    /// One step of a producer in the property test.
    #[derive(Debug, Clone)]
    enum Step {
        Next { producer: i64, records: usize },
        Retry { producer: i64, back: usize },
        Gap { producer: i64, skip: i32 },
        Bump { producer: i64, sequence: i32 },
        Stale { producer: i64 },
    }

    fn step() -> impl Strategy<Value = Step> {
        let producer = 0i64..3;
        prop_oneof![
            4 => (producer.clone(), 1usize..4).prop_map(|(producer, records)| Step::Next { producer, records }),
            2 => (producer.clone(), 0usize..8).prop_map(|(producer, back)| Step::Retry { producer, back }),
            1 => (producer.clone(), 1i32..3).prop_map(|(producer, skip)| Step::Gap { producer, skip }),
            1 => (producer.clone(), prop_oneof![Just(0), Just(3)]).prop_map(|(producer, sequence)| Step::Bump { producer, sequence }),
            1 => producer.prop_map(|producer| Step::Stale { producer }),
        ]
    }

    /// An accepted batch as the model sees it: (producer, epoch, first seq, last seq, first offset, last offset).
    type Accepted = (i64, i16, i32, i32, i64, i64);

    /// What the model expects of a step, and the batch it sends.
    #[derive(Debug, PartialEq)]
    enum Expect {
        Append,
        Duplicate(i64, i64),
        OutOfOrder,
        StaleEpoch,
    }

    /// Producer `p` starts at a sequence near `i32::MAX` when odd, so wrap-around is exercised.
    fn start_sequence(producer: i64) -> i32 {
        if producer % 2 == 1 {
            i32::MAX - 4
        } else {
            0
        }
    }

    /// The model's verdict on `step` given the accepted history, with the
    /// batch to send. A reopen from a snapshot after `reloaded` accepted
    /// batches remembers only each producer's last batch before it.
    fn model(step: &Step, history: &[Accepted], reloaded: usize) -> Option<(Expect, i64, i16, i32, usize)> {
        let producer = match step {
            Step::Next { producer, .. } | Step::Retry { producer, .. } | Step::Gap { producer, .. } => {
                *producer
            }
            Step::Bump { producer, .. } | Step::Stale { producer } => *producer,
        };
        let mine: Vec<&Accepted> = history.iter().filter(|a| a.0 == producer).collect();
        let last = mine.last().copied();
        let epoch = last.map_or(0, |a| a.1);
        let next = last.map_or(start_sequence(producer), |a| increment_sequence(a.3, 1));
        let known = last.is_some();
        Some(match step {
            Step::Next { records, .. } => (Expect::Append, producer, epoch, next, *records),
            Step::Gap { skip, .. } => {
                let expect = if known { Expect::OutOfOrder } else { Expect::Append };
                (expect, producer, epoch, increment_sequence(next, *skip), 1)
            }
            Step::Bump { sequence, .. } => {
                let expect = if known && *sequence != 0 { Expect::OutOfOrder } else { Expect::Append };
                (expect, producer, epoch + 1, *sequence, 1)
            }
            Step::Stale { .. } => {
                if !known || epoch == 0 {
                    return None;
                }
                (Expect::StaleEpoch, producer, epoch - 1, 0, 1)
            }
            Step::Retry { back, .. } => {
                let same_epoch: Vec<&&Accepted> = mine.iter().rev().take_while(|a| a.1 == epoch).collect();
                let target = same_epoch.get(*back)?;
                let records = (target.5 - target.4 + 1) as usize;
                let last_before_reload = history[..reloaded].iter().rev().find(|a| a.0 == producer);
                let forgotten = target.4 < history.get(reloaded).map_or(i64::MAX, |a| a.4)
                    && last_before_reload.is_some_and(|a| a.4 != target.4);
                let expect = if *back < BATCHES_RETAINED && !forgotten {
                    Expect::Duplicate(target.4, target.5)
                } else {
                    Expect::OutOfOrder
                };
                (expect, producer, epoch, target.2, records)
            }
        })
    }

    /// The state the model expects from the surviving history: each
    /// producer's trailing run of one epoch, at most five batches.
    fn expected_batches(history: &[Accepted], producer: i64) -> Vec<(i32, i32, i64, i64)> {
        let mine: Vec<&Accepted> = history.iter().filter(|a| a.0 == producer).collect();
        let Some(last) = mine.last() else { return Vec::new() };
        let run: Vec<_> = mine.iter().rev().take_while(|a| a.1 == last.1).take(BATCHES_RETAINED).collect();
        run.into_iter().rev().map(|a| (a.2, a.3, a.4, a.5)).collect()
    }

    fn actual_batches(log: &Log, producer: i64) -> Vec<(i32, i32, i64, i64)> {
        let entry = log.producer_state().get(producer);
        entry.map_or(Vec::new(), |e| {
            e.batches().iter().map(|b| (b.first_seq, b.last_seq, b.first_offset, b.last_offset)).collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]

        /// Every step gets the model's verdict; then the log is cut at a
        /// random point after a crash and the rebuilt state matches the
        /// batches that survived (a clean close in between leaves a snapshot
        /// holding only each producer's last batch).
        #[test]
        fn producer_rules_hold_and_survive_a_crash(
            steps in proptest::collection::vec(step(), 1..60),
            close_after in 0usize..60,
            cut_permille in 0u64..=1000,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let config = LogConfig { segment_bytes: 1 << 20, ..config() };
            let mut log = Log::open(dir.path(), config.clone(), 0, 0, true, 0).unwrap().0;
            let mut history: Vec<Accepted> = Vec::new();
            let mut snapshot_at = None;
            let mut reloaded = 0;
            for (i, step) in steps.iter().enumerate() {
                if i == close_after {
                    log.close(0).unwrap();
                    snapshot_at = Some((log.log_end_offset(), history.len()));
                    reloaded = history.len();
                    let end = log.log_end_offset();
                    drop(log);
                    log = Log::open(dir.path(), config.clone(), end, 0, true, 0).unwrap().0;
                }
                let Some((expect, producer, epoch, sequence, records)) = model(step, &history, reloaded) else { continue };
                let end = log.log_end_offset();
                let outcome = log.append(&idempotent_batch(producer, epoch, sequence, records), 0, 0);
                let got = match outcome {
                    Ok(info) if info.records == 0 => Expect::Duplicate(info.first_offset, info.last_offset),
                    Ok(info) => {
                        let last_seq = increment_sequence(sequence, records as i32 - 1);
                        history.push((producer, epoch, sequence, last_seq, info.first_offset, info.last_offset));
                        Expect::Append
                    }
                    Err(StorageError::OutOfOrderSequence(_)) => Expect::OutOfOrder,
                    Err(StorageError::InvalidProducerEpoch(_)) => Expect::StaleEpoch,
                    Err(e) => panic!("unexpected error {e}"),
                };
                prop_assert_eq!(&got, &expect, "step {} {:?}", i, step);
                if got != Expect::Append {
                    prop_assert_eq!(log.log_end_offset(), end, "a refused or duplicate batch writes nothing");
                }
            }
            let snapshot_offset = snapshot_at.map_or(0, |(offset, _)| offset);
            drop(log);
            let path = dir.path().join(file_name(0, ".log"));
            let len = std::fs::metadata(&path).unwrap().len();
            std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len * cut_permille / 1000).unwrap();
            let log = Log::open(dir.path(), config, snapshot_offset, 0, false, 0).unwrap().0;
            let end = log.log_end_offset();
            let survived: Vec<Accepted> = history.iter().filter(|a| a.5 < end).copied().collect();
            // A snapshot used for the rebuild keeps one batch per producer.
            let from_snapshot = snapshot_at.is_some_and(|(offset, _)| offset <= end && offset > 0);
            for producer in 0..3 {
                let mut expected = expected_batches(&survived, producer);
                if from_snapshot {
                    let (offset, count) = snapshot_at.unwrap();
                    let before: Vec<Accepted> = history[..count].to_vec();
                    let mut rebuilt: Vec<Accepted> = expected_batches(&before, producer).last().map(|b| {
                        let epoch = before.iter().rev().find(|a| a.0 == producer).unwrap().1;
                        (producer, epoch, b.0, b.1, b.2, b.3)
                    }).into_iter().collect();
                    rebuilt.extend(survived.iter().filter(|a| a.4 >= offset).copied());
                    expected = expected_batches(&rebuilt, producer);
                }
                prop_assert_eq!(actual_batches(&log, producer), expected, "producer {}", producer);
            }
        }
    }

    #[test]
    fn expired_producers_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config(), 0, 0, true, 0).unwrap().0;
        produce(&mut log, 3);
        assert_eq!(log.remove_expired_producers(1_001 + 99, 100), 0);
        assert_eq!(log.remove_expired_producers(1_001 + 100, 100), 3);
        assert!(log.producer_state().is_empty());
        // Unknown again, so any sequence is taken.
        log.append(&idempotent_batch(1, 0, 50, 1), 0, 0).unwrap();
    }
}
