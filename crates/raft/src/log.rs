//! The replicated log as the core sees it: record batches, each with its
//! offset range and the epoch of the leader that appended it.
//!
//! [`RaftLog`] is what the core reads and keeps in step with the disk
//! actions it emits; [`MemoryLog`] implements it for the simulation (and for
//! a small metadata log held in memory).
//!
//! Snapshots (KIP-630): the state machine above the core snapshots its state
//! at a committed offset; the snapshot is named by its end offset and the
//! epoch of the record before it (Kafka's `<offset>-<epoch>.checkpoint`).
//! The log may then drop everything below the snapshot: its start offset
//! moves up, and an empty log's end position is the snapshot's id. The log
//! keeps the latest snapshot only (Kafka keeps older ones until retention
//! deletes them).

use bytes::Bytes;

use crate::voters::VoterSet;
use crate::NodeId;

/// An offset paired with the epoch of the record before it, the position
/// Kafka compares logs by (`OffsetAndEpoch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OffsetAndEpoch {
    /// The epoch; compared first, hence the field order.
    pub epoch: i32,
    /// The offset.
    pub offset: u64,
}

impl OffsetAndEpoch {
    /// A position.
    pub fn new(offset: u64, epoch: i32) -> Self {
        Self { epoch, offset }
    }
}

/// What a batch carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Records {
    /// Records appended by the quorum's user (the controller).
    Data(Vec<Bytes>),
    /// The control record a new leader appends first in its epoch (Kafka's
    /// `LeaderChangeMessage`), so it can commit a record of its own epoch.
    LeaderChange { leader_id: NodeId, voters: Vec<NodeId> },
    /// KIP-853's `KRaftVersionRecord`: the `kraft.version` in force from here.
    KRaftVersion { kraft_version: i16 },
    /// KIP-853's `VotersRecord`: the voter set in force from here, as soon
    /// as it is appended (committed or not).
    Voters(VoterSet),
}

/// A record batch: `base_offset ..= last_offset()`, appended in `epoch`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Batch {
    /// Offset of the first record.
    pub base_offset: u64,
    /// Epoch of the leader that appended the batch.
    pub epoch: i32,
    /// The records.
    pub records: Records,
}

impl Batch {
    /// Records in the batch (never zero).
    pub fn record_count(&self) -> u64 {
        match &self.records {
            Records::Data(records) => records.len() as u64,
            Records::LeaderChange { .. } | Records::KRaftVersion { .. } | Records::Voters(_) => 1,
        }
    }

    /// The offset after the batch.
    pub fn next_offset(&self) -> u64 {
        self.base_offset + self.record_count()
    }

    /// Bytes of payload, for fetch and batch size limits.
    pub fn size_bytes(&self) -> usize {
        match &self.records {
            Records::Data(records) => records.iter().map(Bytes::len).sum(),
            Records::LeaderChange { voters, .. } => 8 + 4 * voters.len(),
            Records::KRaftVersion { .. } => 2,
            Records::Voters(voters) => voters.nodes().map(|voter| 32 + 32 * voter.endpoints.len()).sum(),
        }
    }
}

/// The log the core reads. Mutations mirror the disk actions the core emits
/// (append, truncate); durability is reported separately.
pub trait RaftLog {
    /// The first offset held (0 until a snapshot lets the front go).
    fn start_offset(&self) -> u64;

    /// The offset after the last batch; the start offset when there is none.
    fn end_offset(&self) -> u64;

    /// The epoch of the last batch; with none, the snapshot's epoch, else 0
    /// (Kafka's `KafkaMetadataLog.lastFetchedEpoch`).
    fn last_epoch(&self) -> i32;

    /// The latest snapshot's id: its end offset and epoch.
    fn latest_snapshot(&self) -> Option<OffsetAndEpoch>;

    /// The size of the snapshot `id` and up to `max_bytes` of it from
    /// `position`; None if the log does not hold that snapshot.
    fn read_snapshot(&self, id: OffsetAndEpoch, position: u64, max_bytes: usize) -> Option<(u64, Bytes)>;

    /// Records a snapshot of the state below `id.offset` (a batch boundary).
    fn create_snapshot(&mut self, id: OffsetAndEpoch, content: Bytes);

    /// Drops every batch below the latest snapshot: the start offset moves
    /// to its end offset.
    fn delete_before_snapshot(&mut self);

    /// Replaces the whole log with a snapshot fetched from the leader: no
    /// batches, start offset = `id.offset`.
    fn install_snapshot(&mut self, id: OffsetAndEpoch, content: Bytes);

    /// The end position of the log: end offset and last epoch.
    fn end_position(&self) -> OffsetAndEpoch {
        OffsetAndEpoch::new(self.end_offset(), self.last_epoch())
    }

    /// The largest epoch `<= epoch` in the log and the offset where it ends
    /// (Kafka's `endOffsetForEpoch`); below the first batch, the snapshot's
    /// id (`KafkaMetadataLog.endOffsetForEpoch`), else `(0, 0)`.
    fn end_offset_for_epoch(&self, epoch: i32) -> OffsetAndEpoch;

    /// Batches from `offset` (a batch boundary), whole, up to about
    /// `max_bytes` but at least one.
    fn read(&self, offset: u64, max_bytes: usize) -> Vec<Batch>;

    /// Appends a batch starting at `end_offset()`.
    fn append(&mut self, batch: Batch);

    /// Removes every batch at or past `offset`; `offset` must be a batch
    /// boundary, not below the start offset.
    fn truncate_to(&mut self, offset: u64);
}

/// A snapshot held by a [`MemoryLog`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// End offset and epoch.
    pub id: OffsetAndEpoch,
    /// The state machine's state below `id.offset`, opaque to the core.
    pub content: Bytes,
}

/// A log in memory, ordered by offset, with its latest snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryLog {
    start_offset: u64,
    /// The epoch of the record before `start_offset`: the epoch of the
    /// snapshot the start moved to (which a newer snapshot may follow).
    start_epoch: i32,
    snapshot: Option<Snapshot>,
    batches: Vec<Batch>,
}

impl MemoryLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every batch, oldest first.
    pub fn batches(&self) -> &[Batch] {
        &self.batches
    }

    /// The latest snapshot.
    pub fn snapshot(&self) -> Option<&Snapshot> {
        self.snapshot.as_ref()
    }

    /// The batch holding `offset`, if any.
    pub fn batch_at(&self, offset: u64) -> Option<&Batch> {
        let index = self.batches.partition_point(|batch| batch.next_offset() <= offset);
        self.batches.get(index).filter(|batch| batch.base_offset <= offset)
    }
}

impl RaftLog for MemoryLog {
    fn start_offset(&self) -> u64 {
        self.start_offset
    }

    fn end_offset(&self) -> u64 {
        self.batches.last().map_or(self.start_offset, Batch::next_offset)
    }

    fn last_epoch(&self) -> i32 {
        match self.batches.last() {
            Some(batch) => batch.epoch,
            None => self.start_epoch,
        }
    }

    fn latest_snapshot(&self) -> Option<OffsetAndEpoch> {
        self.snapshot.as_ref().map(|snapshot| snapshot.id)
    }

    fn read_snapshot(&self, id: OffsetAndEpoch, position: u64, max_bytes: usize) -> Option<(u64, Bytes)> {
        let snapshot = self.snapshot.as_ref().filter(|snapshot| snapshot.id == id)?;
        let size = snapshot.content.len();
        let from = usize::try_from(position).unwrap_or(usize::MAX).min(size);
        let to = from.saturating_add(max_bytes).min(size);
        Some((size as u64, snapshot.content.slice(from..to)))
    }

    fn create_snapshot(&mut self, id: OffsetAndEpoch, content: Bytes) {
        self.snapshot = Some(Snapshot { id, content });
    }

    fn delete_before_snapshot(&mut self) {
        let Some(id) = self.latest_snapshot().filter(|id| id.offset > self.start_offset) else { return };
        let first_kept = self.batches.partition_point(|batch| batch.next_offset() <= id.offset);
        self.batches.drain(..first_kept);
        self.start_offset = id.offset;
        self.start_epoch = id.epoch;
    }

    fn install_snapshot(&mut self, id: OffsetAndEpoch, content: Bytes) {
        self.batches.clear();
        self.start_offset = id.offset;
        self.start_epoch = id.epoch;
        self.snapshot = Some(Snapshot { id, content });
    }

    fn end_offset_for_epoch(&self, epoch: i32) -> OffsetAndEpoch {
        // The first batch of a larger epoch starts where `epoch` ends.
        let index = self.batches.partition_point(|batch| batch.epoch <= epoch);
        match index.checked_sub(1).map(|last| &self.batches[last]) {
            Some(batch) => OffsetAndEpoch::new(batch.next_offset(), batch.epoch),
            // Below the first batch the log begins with the snapshot.
            None => OffsetAndEpoch::new(self.start_offset, self.start_epoch),
        }
    }

    fn read(&self, offset: u64, max_bytes: usize) -> Vec<Batch> {
        let first = self.batches.partition_point(|batch| batch.base_offset < offset);
        let mut bytes = 0;
        let mut out = Vec::new();
        for batch in &self.batches[first..] {
            if !out.is_empty() && bytes + batch.size_bytes() > max_bytes {
                break;
            }
            bytes += batch.size_bytes();
            out.push(batch.clone());
        }
        out
    }

    fn append(&mut self, batch: Batch) {
        assert_eq!(batch.base_offset, self.end_offset(), "appends must be contiguous");
        assert!(batch.epoch >= self.last_epoch(), "epochs in a log never decrease");
        self.batches.push(batch);
    }

    fn truncate_to(&mut self, offset: u64) {
        assert!(offset >= self.start_offset, "truncation below the log start");
        let keep = self.batches.partition_point(|batch| batch.next_offset() <= offset);
        self.batches.truncate(keep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base_offset: u64, epoch: i32, count: usize) -> Batch {
        let records = Records::Data(vec![Bytes::from_static(b"x"); count]);
        Batch { base_offset, epoch, records }
    }

    fn log_with(batches: &[(i32, usize)]) -> MemoryLog {
        let mut log = MemoryLog::new();
        for (epoch, count) in batches {
            log.append(batch(log.end_offset(), *epoch, *count));
        }
        log
    }

    #[test]
    fn end_offset_for_epoch_finds_the_largest_epoch_not_above() {
        let log = log_with(&[(1, 2), (1, 1), (3, 4), (5, 1)]);
        assert_eq!(log.end_offset_for_epoch(0), OffsetAndEpoch::new(0, 0));
        assert_eq!(log.end_offset_for_epoch(1), OffsetAndEpoch::new(3, 1));
        assert_eq!(log.end_offset_for_epoch(2), OffsetAndEpoch::new(3, 1));
        assert_eq!(log.end_offset_for_epoch(4), OffsetAndEpoch::new(7, 3));
        assert_eq!(log.end_offset_for_epoch(9), OffsetAndEpoch::new(8, 5));
    }

    #[test]
    fn read_returns_whole_batches_and_at_least_one() {
        let log = log_with(&[(1, 2), (1, 3), (2, 1)]);
        assert_eq!(log.read(2, 1).len(), 1);
        assert_eq!(log.read(0, 100).len(), 3);
        assert!(log.read(6, 100).is_empty());
    }

    #[test]
    fn a_log_emptied_by_a_snapshot_ends_at_the_snapshot() {
        let mut log = log_with(&[(1, 2), (3, 1), (3, 2)]);
        log.create_snapshot(OffsetAndEpoch::new(3, 3), Bytes::from_static(b"state"));
        log.delete_before_snapshot();
        assert_eq!((log.start_offset(), log.end_position()), (3, OffsetAndEpoch::new(5, 3)));
        assert_eq!(log.end_offset_for_epoch(2), OffsetAndEpoch::new(3, 3), "below the log: the snapshot");
        log.install_snapshot(OffsetAndEpoch::new(9, 4), Bytes::from_static(b"newer state"));
        assert_eq!((log.start_offset(), log.end_position()), (9, OffsetAndEpoch::new(9, 4)));
        assert_eq!(log.end_offset_for_epoch(4), OffsetAndEpoch::new(9, 4));
        let read = log.read_snapshot(OffsetAndEpoch::new(9, 4), 6, 3);
        assert_eq!(read, Some((11, Bytes::from_static(b"sta"))));
        assert_eq!(log.read_snapshot(OffsetAndEpoch::new(3, 3), 0, 3), None);
    }

    #[test]
    fn truncate_keeps_batches_below_the_offset() {
        let mut log = log_with(&[(1, 2), (1, 3), (2, 1)]);
        log.truncate_to(5);
        assert_eq!(log.end_position(), OffsetAndEpoch::new(5, 1));
        assert!(log.batch_at(4).is_some() && log.batch_at(5).is_none());
    }
}
