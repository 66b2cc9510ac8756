//! The replicated log as the core sees it: record batches, each with its
//! offset range and the epoch of the leader that appended it.
//!
//! [`RaftLog`] is what the core reads and keeps in step with the disk
//! actions it emits; [`MemoryLog`] implements it for the simulation (and for
//! a small metadata log held in memory). Snapshots (KIP-630) will add a log
//! start offset above zero and a snapshot id: [`RaftLog::start_offset`] is
//! that seam.

use bytes::Bytes;

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
            Records::LeaderChange { .. } => 1,
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
        }
    }
}

/// The log the core reads. Mutations mirror the disk actions the core emits
/// (append, truncate); durability is reported separately.
pub trait RaftLog {
    /// The first offset held (0 until snapshots truncate the front).
    fn start_offset(&self) -> u64 {
        0
    }

    /// The offset after the last batch.
    fn end_offset(&self) -> u64;

    /// The epoch of the last batch, 0 when empty.
    fn last_epoch(&self) -> i32;

    /// The end position of the log: end offset and last epoch.
    fn end_position(&self) -> OffsetAndEpoch {
        OffsetAndEpoch::new(self.end_offset(), self.last_epoch())
    }

    /// The largest epoch `<= epoch` in the log and the offset where it ends
    /// (Kafka's `endOffsetForEpoch`); `(0, 0)`-ish when there is none.
    fn end_offset_for_epoch(&self, epoch: i32) -> OffsetAndEpoch;

    /// Batches from `offset` (a batch boundary), whole, up to about
    /// `max_bytes` but at least one.
    fn read(&self, offset: u64, max_bytes: usize) -> Vec<Batch>;

    /// Appends a batch starting at `end_offset()`.
    fn append(&mut self, batch: Batch);

    /// Removes every batch at or past `offset`; `offset` must be a batch boundary.
    fn truncate_to(&mut self, offset: u64);
}

/// A log in memory, ordered by offset.
#[derive(Debug, Clone, Default)]
pub struct MemoryLog {
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

    /// The batch holding `offset`, if any.
    pub fn batch_at(&self, offset: u64) -> Option<&Batch> {
        let index = self.batches.partition_point(|batch| batch.next_offset() <= offset);
        self.batches.get(index).filter(|batch| batch.base_offset <= offset)
    }
}

impl RaftLog for MemoryLog {
    fn end_offset(&self) -> u64 {
        self.batches.last().map_or(0, Batch::next_offset)
    }

    fn last_epoch(&self) -> i32 {
        self.batches.last().map_or(0, |batch| batch.epoch)
    }

    fn end_offset_for_epoch(&self, epoch: i32) -> OffsetAndEpoch {
        // The first batch of a larger epoch starts where `epoch` ends.
        let index = self.batches.partition_point(|batch| batch.epoch <= epoch);
        match index.checked_sub(1).map(|last| &self.batches[last]) {
            None => OffsetAndEpoch::new(0, 0),
            Some(batch) => OffsetAndEpoch::new(batch.next_offset(), batch.epoch),
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
    fn truncate_keeps_batches_below_the_offset() {
        let mut log = log_with(&[(1, 2), (1, 3), (2, 1)]);
        log.truncate_to(5);
        assert_eq!(log.end_position(), OffsetAndEpoch::new(5, 1));
        assert!(log.batch_at(4).is_some() && log.batch_at(5).is_none());
    }
}
