//! The leader epochs of a log and truncation from the end.
//!
//! At open the cache comes from `leader-epoch-checkpoint`, cut to the
//! offsets the log still holds; when the file is missing or damaged it is
//! rebuilt from the leader epochs in the batch headers. Truncating the log
//! (a follower dropping the suffix where it diverged from its leader) keeps
//! the segments, their indexes, the producer state and the epochs in step.

use super::Log;
use crate::error::{Result, StorageError};
use crate::leader_epoch::LeaderEpochCache;
use crate::segment::LogSegment;

impl Log {
    /// The leader epochs of this log.
    pub fn leader_epochs(&self) -> &LeaderEpochCache {
        &self.leader_epochs
    }

    /// OffsetForLeaderEpoch: the largest epoch at or below `epoch` and the
    /// offset where it ends (the log end for the latest epoch); (-1, -1)
    /// when unknown.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.leader_epochs.end_offset_for(epoch, self.log_end_offset())
    }

    /// Kafka's `maybeAssignEpochStartOffset`: a new leader's epoch begins
    /// at its log end offset, before it appends anything, so followers
    /// asking for the end of an earlier epoch find where it ends here.
    pub fn assign_leader_epoch_start(&mut self, epoch: i32) -> Result<()> {
        let log_end = self.log_end_offset();
        if self.leader_epochs.latest_epoch().is_some_and(|latest| latest >= epoch) {
            return Ok(());
        }
        self.leader_epochs.assign(epoch, log_end).map(drop)
    }

    pub(super) fn load_leader_epochs(&mut self) -> Result<()> {
        match LeaderEpochCache::read(&self.dir) {
            Ok(Some(cache)) => {
                self.leader_epochs = cache;
                // A crash may have cut batches the checkpoint had seen begin.
                self.leader_epochs.truncate_from_end(self.log_end_offset())?;
                self.leader_epochs.truncate_from_start(self.log_start_offset)
            }
            Ok(None) => self.rebuild_leader_epochs(false),
            Err(StorageError::Io(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                tracing::warn!(dir = %self.dir.display(), "rebuilding the leader epoch cache: {e}");
                self.rebuild_leader_epochs(true)
            }
            Err(e) => Err(e),
        }
    }

    /// Rebuilds the cache from every batch header from the log start on,
    /// then writes it once. A damaged file is always replaced; a missing one
    /// only if an epoch is known, so a new empty log costs no write.
    fn rebuild_leader_epochs(&mut self, replace: bool) -> Result<()> {
        let mut cache = LeaderEpochCache::empty(&self.dir);
        for segment in self.segments.values() {
            let Some((mut position, _)) = segment.translate_offset(self.log_start_offset)? else { continue };
            while let Some(header) = segment.header_at(position)? {
                let start_offset = header.base_offset.max(self.log_start_offset);
                cache.observe_unwritten(header.partition_leader_epoch, start_offset);
                position += header.size as u64;
            }
        }
        if replace || !cache.entries().is_empty() {
            cache.persist()?;
        }
        self.leader_epochs = cache;
        Ok(())
    }

    /// Removes every record from the batch holding `offset` on, as Kafka's
    /// `truncateTo`: later segments go, the one holding it is cut and its
    /// indexes rebuilt, the producer state is rebuilt up to the new end and
    /// leader epochs starting past it are forgotten. Returns the new log end.
    pub fn truncate_to(&mut self, offset: i64) -> Result<i64> {
        let log_end = self.log_end_offset();
        if offset >= log_end {
            return Ok(log_end);
        }
        if offset < self.log_start_offset {
            return Err(StorageError::OffsetOutOfRange { offset, log_start: self.log_start_offset, log_end });
        }
        let kept = *self.segments.range(..=offset).next_back().expect("the log start lies in a segment").0;
        let doomed: Vec<i64> = self.segments.range(kept + 1..).map(|(base, _)| *base).collect();
        for base in doomed {
            self.segments.remove(&base).expect("listed").delete()?;
        }
        let segment = self.segments.get_mut(&kept).expect("kept");
        segment.truncate_to(offset)?;
        let new_end = self.log_end_offset();
        self.recovery_point = self.recovery_point.min(new_end);
        self.producers = Default::default();
        self.load_producer_state(new_end)?;
        self.leader_epochs.truncate_from_end(new_end)?;
        tracing::info!(dir = %self.dir.display(), offset, log_end = new_end, "truncated the log");
        Ok(new_end)
    }

    /// Kafka's `truncateFullyAndStartAt`: drops every record and restarts
    /// the log empty at `offset`, with its log start at `log_start_offset`
    /// (not below `offset`). A follower does this when its whole log lies
    /// below its leader's log start (retention or DeleteRecords ran while
    /// it was away).
    pub fn truncate_fully_and_start_at(
        &mut self,
        offset: i64,
        log_start_offset: i64,
        now_ms: i64,
    ) -> Result<()> {
        for (_, segment) in std::mem::take(&mut self.segments) {
            segment.delete()?;
        }
        let segment = LogSegment::create(&self.dir, offset, self.config.segment_config(), now_ms)?;
        self.segments.insert(offset, segment);
        self.active_mut().activate()?;
        self.log_start_offset = log_start_offset.max(offset);
        self.recovery_point = offset;
        self.reset_producer_state()?;
        // Every epoch starts at or above 0: none is kept.
        self.leader_epochs.truncate_from_end(0)?;
        tracing::info!(dir = %self.dir.display(), offset, "truncated the whole log and restarted it");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::test_support::batch;
    use crate::leader_epoch::{EpochEntry, CHECKPOINT_FILE};
    use crate::log::LogConfig;
    use crate::producer_state::test_support::idempotent_batch;
    use kafka_protocol::records::Compression;
    use std::path::Path;

    fn config() -> LogConfig {
        LogConfig::small(2048)
    }

    fn open(dir: &Path, log_start: i64, clean: bool) -> Log {
        Log::open(dir, config(), 0, log_start, clean, 0).unwrap().0
    }

    /// 30 one-record batches at epoch 0, 30 at epoch 3, 30 at epoch 5.
    fn log_with_three_epochs(dir: &Path) -> Log {
        let mut log = open(dir, 0, true);
        for epoch in [0, 3, 5] {
            for i in 0..30 {
                log.append(&batch(1, 1_000 + i, Compression::None), epoch, 0).unwrap();
            }
        }
        assert!(log.segments().count() > 3, "epochs span several segments");
        log
    }

    fn pairs(log: &Log) -> Vec<(i32, i64)> {
        log.leader_epochs().entries().iter().map(|e| (e.epoch, e.start_offset)).collect()
    }

    fn checkpoint_text(dir: &Path) -> String {
        std::fs::read_to_string(dir.join(CHECKPOINT_FILE)).unwrap()
    }

    #[test]
    fn appends_record_each_new_epoch_in_the_checkpoint_beside_the_segments() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = log_with_three_epochs(dir.path());
        assert_eq!(pairs(&log), [(0, 0), (3, 30), (5, 60)]);
        assert_eq!(checkpoint_text(dir.path()), "0\n3\n0 0\n3 30\n5 60\n");
        assert_eq!(log.end_offset_for_epoch(3), (3, 60));
        assert_eq!(log.end_offset_for_epoch(4), (3, 60));
        assert_eq!(log.end_offset_for_epoch(5), (5, 90));
        assert_eq!(log.end_offset_for_epoch(6), (-1, -1));
        log.close(0).unwrap();
        drop(log);
        let log = Log::open(dir.path(), config(), 90, 0, true, 0).unwrap().0;
        assert_eq!(pairs(&log), [(0, 0), (3, 30), (5, 60)], "read back at open");
    }

    #[test]
    fn a_missing_or_damaged_checkpoint_is_rebuilt_from_the_batches() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_with_three_epochs(dir.path());
        drop(log);
        std::fs::remove_file(dir.path().join(CHECKPOINT_FILE)).unwrap();
        let log = open(dir.path(), 0, true);
        assert_eq!(pairs(&log), [(0, 0), (3, 30), (5, 60)]);
        assert_eq!(checkpoint_text(dir.path()), "0\n3\n0 0\n3 30\n5 60\n", "written again");
        drop(log);
        std::fs::write(dir.path().join(CHECKPOINT_FILE), "0\n3\n0 0\n3 3").unwrap();
        let log = open(dir.path(), 0, false);
        assert_eq!(pairs(&log), [(0, 0), (3, 30), (5, 60)]);
        assert_eq!(checkpoint_text(dir.path()), "0\n3\n0 0\n3 30\n5 60\n");
    }

    #[test]
    fn an_empty_new_log_writes_no_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), 0, true);
        assert!(log.leader_epochs().entries().is_empty());
        assert!(!dir.path().join(CHECKPOINT_FILE).exists());
    }

    #[test]
    fn epochs_past_the_recovered_log_end_are_dropped_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_with_three_epochs(dir.path());
        drop(log);
        // As if a crash lost the batches of epoch 7 after its entry was written.
        std::fs::write(dir.path().join(CHECKPOINT_FILE), "0\n4\n0 0\n3 30\n5 60\n7 90\n").unwrap();
        let log = open(dir.path(), 0, false);
        assert_eq!(pairs(&log), [(0, 0), (3, 30), (5, 60)]);
        assert_eq!(checkpoint_text(dir.path()), "0\n3\n0 0\n3 30\n5 60\n");
    }

    #[test]
    fn moving_the_log_start_truncates_the_epochs_from_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = log_with_three_epochs(dir.path());
        log.advance_log_start_offset(40).unwrap();
        assert_eq!(pairs(&log), [(3, 40), (5, 60)]);
        let deleted = log.delete_retained_segments(90, 0).unwrap();
        assert!(deleted.segments > 0);
        assert_eq!(checkpoint_text(dir.path()), "0\n2\n3 40\n5 60\n");
        drop(log);
        std::fs::remove_file(dir.path().join(CHECKPOINT_FILE)).unwrap();
        let log = open(dir.path(), 40, true);
        assert_eq!(pairs(&log), [(3, 40), (5, 60)], "a rebuild starts at the log start");
    }

    #[test]
    fn truncation_keeps_segments_indexes_producers_and_epochs_in_step() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), 0, true);
        let mut sequence = 0;
        for epoch in [0, 3, 5] {
            for _ in 0..20 {
                log.append(&idempotent_batch(7, 0, sequence, 2), epoch, 0).unwrap();
                sequence += 2;
            }
        }
        let segments_before = log.segments().count();
        // The middle of epoch 3, inside a batch: the whole batch goes.
        assert_eq!(log.truncate_to(51).unwrap(), 50);
        assert!(log.segments().count() < segments_before, "later segments removed");
        assert_eq!(pairs(&log), [(0, 0), (3, 40)]);
        assert_eq!(log.end_offset_for_epoch(3), (3, 50));
        assert!(log.read(50, 100, 50, true).unwrap().is_none());
        assert!(log.read(48, 100, 50, true).unwrap().is_some());
        // The producer forgot the truncated batches: sequence 50 is new again, not a retry.
        let again = log.append(&idempotent_batch(7, 0, 50, 2), 6, 0).unwrap();
        assert_eq!((again.first_offset, again.records), (50, 2));
        assert_eq!(pairs(&log), [(0, 0), (3, 40), (6, 50)]);
        let end = log.log_end_offset();
        log.close(0).unwrap();
        drop(log);
        for clean in [true, false] {
            let reopened = Log::open(dir.path(), config(), end, 0, clean, 0).unwrap().0;
            assert_eq!(reopened.log_end_offset(), 52);
            assert_eq!(reopened.leader_epochs().entries()[2], EpochEntry { epoch: 6, start_offset: 50 });
            assert!(reopened.segments().all(|s| s.index().unwrap().sanity_check(s.size()).is_ok()));
        }
    }

    #[test]
    fn truncation_to_the_log_start_empties_the_log_and_past_the_end_does_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = log_with_three_epochs(dir.path());
        assert_eq!(log.truncate_to(500).unwrap(), 90);
        assert_eq!(pairs(&log), [(0, 0), (3, 30), (5, 60)]);
        assert_eq!(log.truncate_to(0).unwrap(), 0);
        assert_eq!(log.segments().count(), 1);
        assert!(pairs(&log).is_empty());
        assert_eq!(log.append(&batch(2, 0, Compression::None), 9, 0).unwrap().first_offset, 0);
        log.advance_log_start_offset(1).unwrap();
        assert!(matches!(log.truncate_to(0), Err(StorageError::OffsetOutOfRange { .. })));
    }

    #[test]
    fn truncating_fully_restarts_an_empty_log_at_the_given_offset() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = log_with_three_epochs(dir.path());
        log.truncate_fully_and_start_at(500, 500, 0).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset(), log.segments().count()), (500, 500, 1));
        assert!(pairs(&log).is_empty(), "no epoch survives");
        assert!(log.read(500, 1 << 20, 600, true).unwrap().is_none(), "nothing to read");
        let appended = log.append(&batch(2, 1_000, Compression::None), 7, 0).unwrap();
        assert_eq!(appended.first_offset, 500);
        assert_eq!(pairs(&log), [(7, 500)]);
        log.close(0).unwrap();
        drop(log);
        let log = Log::open(dir.path(), config(), 502, 500, true, 0).unwrap().0;
        assert_eq!((log.log_start_offset(), log.log_end_offset(), log.segments().count()), (500, 502, 1));
    }
}
