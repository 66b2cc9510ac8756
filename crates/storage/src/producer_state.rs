//! Producer state: what lets a partition accept each idempotent batch once.
//!
//! For every producer id seen in the log the state keeps its epoch and the
//! metadata (sequence range, offset range, timestamp) of its last five
//! batches, as Kafka's `ProducerStateManager` does. A produced batch is
//! checked against it before anything is written:
//!
//! - a retry of one of the five remembered batches (same epoch and sequence
//!   range) is a duplicate: it is answered with the original offsets and not
//!   written again;
//! - an epoch older than the producer's is INVALID_PRODUCER_EPOCH;
//! - a new epoch must start at sequence 0, and within an epoch each batch must
//!   follow the last one's sequence (wrapping from `i32::MAX` to 0), else
//!   OUT_OF_ORDER_SEQUENCE_NUMBER;
//! - a producer the partition does not know (new, expired, or whose batches
//!   retention deleted) may start at any sequence: Kafka's rule since KIP-360.
//!
//! The state is persisted in Kafka's producer snapshot format
//! (`<20-digit offset>.snapshot`: version, CRC-32C, one entry per producer
//! holding its last batch only) and rebuilt from batch headers past the
//! snapshot; the `Log` glue lives in `log/producers.rs`.
//!
//! Transactions: a producer's first transactional batch opens its
//! transaction (the entry remembers its first offset, and the state keeps
//! the open transactions by first offset, so the earliest one bounds the
//! last stable offset); the marker the coordinator writes ends it, moves the
//! producer to the marker's epoch and reports the completed transaction, so
//! the log can index it when it was aborted. A non-transactional batch from
//! a producer with an open transaction is INVALID_TXN_STATE, as in Kafka.

use std::collections::{BTreeMap, HashMap};

use crate::batch::{BatchHeader, EndTxnMarker};
use crate::error::{Result, StorageError};

/// The producer id of a batch written without idempotence.
pub const NO_PRODUCER_ID: i64 = -1;
/// The epoch of a producer the partition has no state for.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// The sequence of a producer with no batch remembered.
pub const NO_SEQUENCE: i32 = -1;
/// Batches remembered per producer for duplicate detection (Kafka's value).
pub const BATCHES_RETAINED: usize = 5;
/// The suffix of producer snapshot files.
pub const SNAPSHOT_SUFFIX: &str = ".snapshot";

const SNAPSHOT_VERSION: i16 = 1;
/// Version (i16) and CRC (u32) precede the entries the CRC covers.
const SNAPSHOT_ENTRIES_AT: usize = 6;
const SNAPSHOT_ENTRY_LEN: usize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;

/// `sequence + increment`, wrapping past `i32::MAX` to 0 as Kafka's sequences do.
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

/// `sequence - decrement`, the inverse of [`increment_sequence`].
pub fn decrement_sequence(sequence: i32, decrement: i32) -> i32 {
    if sequence < decrement {
        i32::MAX - (decrement - sequence) + 1
    } else {
        sequence - decrement
    }
}

fn in_sequence(last: i32, next: i32) -> bool {
    i64::from(next) == i64::from(last) + 1 || (next == 0 && last == i32::MAX)
}

/// Where one batch of a producer landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchMetadata {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    /// The batch's max timestamp as stored (the append time under LogAppendTime).
    pub timestamp: i64,
}

/// What a partition knows of one producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerEntry {
    pub epoch: i16,
    /// The last batches of the current epoch, oldest first.
    batches: [BatchMetadata; BATCHES_RETAINED],
    batch_count: usize,
    /// Timestamp of the last batch: expiry counts idle time from it.
    pub last_timestamp: i64,
    /// Epoch of the transaction coordinator that wrote this producer's last
    /// marker; -1 before any.
    pub coordinator_epoch: i32,
    /// First offset of the producer's open transaction, if one is open.
    pub current_txn_first_offset: Option<i64>,
}

impl ProducerEntry {
    fn empty() -> Self {
        Self {
            epoch: NO_PRODUCER_EPOCH,
            batches: [BatchMetadata::default(); BATCHES_RETAINED],
            batch_count: 0,
            last_timestamp: -1,
            coordinator_epoch: -1,
            current_txn_first_offset: None,
        }
    }

    /// The remembered batches of the current epoch, oldest first.
    pub fn batches(&self) -> &[BatchMetadata] {
        &self.batches[..self.batch_count]
    }

    pub fn last_batch(&self) -> Option<&BatchMetadata> {
        self.batches().last()
    }

    fn last_seq(&self) -> i32 {
        self.last_batch().map_or(NO_SEQUENCE, |b| b.last_seq)
    }

    fn find_duplicate(&self, epoch: i16, first_seq: i32, last_seq: i32) -> Option<BatchMetadata> {
        if epoch != self.epoch {
            return None;
        }
        self.batches().iter().find(|b| b.first_seq == first_seq && b.last_seq == last_seq).copied()
    }

    /// Records a batch; a new epoch forgets the batches of the old one.
    fn add_batch(&mut self, epoch: i16, batch: BatchMetadata) {
        if epoch != self.epoch {
            self.epoch = epoch;
            self.batch_count = 0;
        }
        if self.batch_count == BATCHES_RETAINED {
            self.batches.rotate_left(1);
            self.batch_count -= 1;
        }
        self.batches[self.batch_count] = batch;
        self.batch_count += 1;
        self.last_timestamp = batch.timestamp;
    }

    /// A marker ends the open transaction; a newer epoch (a fenced or timed
    /// out producer) becomes the producer's and forgets the old batches.
    fn end_txn(&mut self, epoch: i16, marker: EndTxnMarker, timestamp: i64) {
        if epoch != self.epoch {
            self.epoch = epoch;
            self.batch_count = 0;
        }
        self.current_txn_first_offset = None;
        self.coordinator_epoch = marker.coordinator_epoch;
        self.last_timestamp = timestamp;
    }
}

/// A transaction a marker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The marker's offset.
    pub last_offset: i64,
    pub aborted: bool,
}

/// A validated batch as the producer state checks it: its header and, for
/// a control batch, the marker it holds.
#[derive(Debug, Clone, Copy)]
pub struct ProducedBatch {
    pub header: BatchHeader,
    pub marker: Option<EndTxnMarker>,
}

impl From<BatchHeader> for ProducedBatch {
    fn from(header: BatchHeader) -> Self {
        Self { header, marker: None }
    }
}

/// The outcome of checking a record set against the producer state.
#[derive(Debug)]
pub enum ProducerCheck {
    /// Append the batches, then [`ProducerState::apply`] these updates.
    Append(PendingUpdates),
    /// The record set retries a batch already in the log: nothing is written
    /// and the original batch's offsets are the answer.
    Duplicate(BatchMetadata),
}

/// Producer entries as they will be once a checked record set is written,
/// and the transactions its markers end.
#[derive(Debug, Default)]
pub struct PendingUpdates {
    entries: Vec<(i64, ProducerEntry)>,
    completed: Vec<CompletedTxn>,
}

/// The producers of one partition.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ProducerState {
    producers: HashMap<i64, ProducerEntry>,
    /// Open transactions: first offset → producer id.
    ongoing: BTreeMap<i64, i64>,
}

/// A batch's producer fields, as the state needs them.
#[derive(Debug, Clone, Copy)]
struct ProducerBatch {
    producer_id: i64,
    epoch: i16,
    first_seq: i32,
    last_seq: i32,
}

impl ProducerBatch {
    fn of(header: &BatchHeader) -> Self {
        Self {
            producer_id: header.producer_id,
            epoch: header.producer_epoch,
            first_seq: header.base_sequence,
            last_seq: increment_sequence(header.base_sequence, header.last_offset_delta),
        }
    }
}

impl ProducerState {
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Every producer, for DescribeProducers.
    pub fn producers(&self) -> impl Iterator<Item = (i64, &ProducerEntry)> {
        self.producers.iter().map(|(id, entry)| (*id, entry))
    }

    /// The first offset of the earliest open transaction: nothing from it on
    /// is stable yet.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.keys().next().copied()
    }

    /// Opens or closes `producer_id`'s entry in the open transactions.
    fn track_txn(&mut self, producer_id: i64, was: Option<i64>, now: Option<i64>) {
        if was == now {
            return;
        }
        if let Some(first) = was {
            self.ongoing.remove(&first);
        }
        if let Some(first) = now {
            self.ongoing.insert(first, producer_id);
        }
    }

    /// Checks a producer's record set (headers already validated, offsets
    /// from `first_offset` on) against the state. Nothing changes until the
    /// returned updates are applied. As in Kafka, the first duplicate found
    /// answers for the whole record set.
    pub fn check(
        &self,
        batches: &[ProducedBatch],
        first_offset: i64,
        log_append_time: Option<i64>,
        origin: AppendOrigin,
    ) -> Result<ProducerCheck> {
        let mut pending = PendingUpdates::default();
        let mut next_offset = first_offset;
        for ProducedBatch { header, marker } in batches {
            let batch_first_offset = next_offset;
            next_offset += i64::from(header.last_offset_delta) + 1;
            if header.producer_id == NO_PRODUCER_ID {
                continue;
            }
            if origin == AppendOrigin::Coordinator && header.is_control() {
                let marker = marker.ok_or_else(|| {
                    StorageError::InvalidRecord("control batch without a transaction marker".into())
                })?;
                let committed = self.producers.get(&header.producer_id);
                let entry = pending.entry(header.producer_id, committed);
                check_epoch(ProducerBatch::of(header), entry)?;
                check_coordinator_epoch(&marker, entry)?;
                let completed = CompletedTxn {
                    producer_id: header.producer_id,
                    first_offset: entry.current_txn_first_offset.unwrap_or(batch_first_offset),
                    last_offset: batch_first_offset,
                    aborted: marker.control == crate::batch::ControlType::Abort,
                };
                let timestamp = log_append_time.unwrap_or(header.max_timestamp);
                entry.end_txn(header.producer_epoch, marker, timestamp);
                pending.completed.push(completed);
                continue;
            }
            if origin == AppendOrigin::Coordinator {
                // The broker writing inside a producer's transaction
                // (transactional offsets): epoch and transaction checks,
                // no sequences.
                let committed = self.producers.get(&header.producer_id);
                let entry = pending.entry(header.producer_id, committed);
                check_epoch(ProducerBatch::of(header), entry)?;
                if header.producer_epoch != entry.epoch {
                    entry.epoch = header.producer_epoch;
                    entry.batch_count = 0;
                }
                check_transactional(header, entry, batch_first_offset)?;
                entry.last_timestamp = log_append_time.unwrap_or(header.max_timestamp);
                continue;
            }
            validate_producer_fields(header)?;
            let batch = ProducerBatch::of(header);
            let committed = self.producers.get(&batch.producer_id);
            if let Some(duplicate) =
                committed.and_then(|e| e.find_duplicate(batch.epoch, batch.first_seq, batch.last_seq))
            {
                return Ok(ProducerCheck::Duplicate(duplicate));
            }
            let entry = pending.entry(batch.producer_id, committed);
            check_epoch(batch, entry)?;
            check_sequence(batch, committed, entry)?;
            check_transactional(header, entry, batch_first_offset)?;
            entry.add_batch(
                batch.epoch,
                BatchMetadata {
                    first_seq: batch.first_seq,
                    last_seq: batch.last_seq,
                    first_offset: batch_first_offset,
                    last_offset: next_offset - 1,
                    timestamp: log_append_time.unwrap_or(header.max_timestamp),
                },
            );
        }
        Ok(ProducerCheck::Append(pending))
    }

    /// Makes the updates of a written record set part of the state; returns
    /// the transactions its markers ended.
    pub fn apply(&mut self, updates: PendingUpdates) -> Vec<CompletedTxn> {
        for (producer_id, entry) in updates.entries {
            let was = self.producers.get(&producer_id).and_then(|e| e.current_txn_first_offset);
            self.track_txn(producer_id, was, entry.current_txn_first_offset);
            self.producers.insert(producer_id, entry);
        }
        updates.completed
    }

    /// Takes in a batch read back from the log, unchecked: the log is the
    /// truth, as for Kafka's appends from replication. `marker` is the
    /// marker of a control batch. Returns the transaction a marker ended.
    pub fn replay(&mut self, header: &BatchHeader, marker: Option<EndTxnMarker>) -> Option<CompletedTxn> {
        if header.producer_id == NO_PRODUCER_ID {
            return None;
        }
        let producer_id = header.producer_id;
        let entry = self.producers.entry(producer_id).or_insert_with(ProducerEntry::empty);
        let was = entry.current_txn_first_offset;
        if header.is_control() {
            let marker = marker?;
            let completed = CompletedTxn {
                producer_id,
                first_offset: was.unwrap_or(header.base_offset),
                last_offset: header.base_offset,
                aborted: marker.control == crate::batch::ControlType::Abort,
            };
            entry.end_txn(header.producer_epoch, marker, header.max_timestamp);
            self.track_txn(producer_id, was, None);
            return Some(completed);
        }
        if header.is_transactional() && was.is_none() {
            entry.current_txn_first_offset = Some(header.base_offset);
        }
        let now = entry.current_txn_first_offset;
        if header.base_sequence < 0 {
            // The broker's own write in a transaction: no sequences to keep.
            if header.producer_epoch != entry.epoch {
                entry.epoch = header.producer_epoch;
                entry.batch_count = 0;
            }
            entry.last_timestamp = header.max_timestamp;
            self.track_txn(producer_id, was, now);
            return None;
        }
        let batch = ProducerBatch::of(header);
        entry.add_batch(
            batch.epoch,
            BatchMetadata {
                first_seq: batch.first_seq,
                last_seq: batch.last_seq,
                first_offset: header.base_offset,
                last_offset: header.last_offset(),
                timestamp: header.max_timestamp,
            },
        );
        self.track_txn(producer_id, was, now);
        None
    }

    /// Forgets producers idle for `expiration_ms` (`producer.id.expiration.ms`)
    /// with no open transaction. Returns how many were removed.
    pub fn remove_expired(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, entry| {
            entry.current_txn_first_offset.is_some()
                || now_ms.saturating_sub(entry.last_timestamp) < expiration_ms
        });
        before - self.producers.len()
    }

    /// Kafka's snapshot file contents: version, CRC-32C of the rest, then
    /// each producer (by id) with its last batch.
    pub fn encode_snapshot(&self) -> Vec<u8> {
        let sorted: BTreeMap<_, _> = self.producers.iter().collect();
        let mut buf = Vec::with_capacity(SNAPSHOT_ENTRIES_AT + 4 + sorted.len() * SNAPSHOT_ENTRY_LEN);
        buf.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        buf.extend_from_slice(&[0; 4]);
        buf.extend_from_slice(&(sorted.len() as i32).to_be_bytes());
        for (producer_id, entry) in sorted {
            let last = entry.last_batch();
            buf.extend_from_slice(&producer_id.to_be_bytes());
            buf.extend_from_slice(&entry.epoch.to_be_bytes());
            buf.extend_from_slice(&last.map_or(NO_SEQUENCE, |b| b.last_seq).to_be_bytes());
            buf.extend_from_slice(&last.map_or(-1, |b| b.last_offset).to_be_bytes());
            let offset_delta = last.map_or(0, |b| (b.last_offset - b.first_offset) as i32);
            buf.extend_from_slice(&offset_delta.to_be_bytes());
            buf.extend_from_slice(&entry.last_timestamp.to_be_bytes());
            buf.extend_from_slice(&entry.coordinator_epoch.to_be_bytes());
            buf.extend_from_slice(&entry.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
        }
        let crc = crc32c::crc32c(&buf[SNAPSHOT_ENTRIES_AT..]);
        buf[2..SNAPSHOT_ENTRIES_AT].copy_from_slice(&crc.to_be_bytes());
        buf
    }

    /// Reads a snapshot written by [`Self::encode_snapshot`] (or by Kafka).
    pub fn decode_snapshot(bytes: &[u8]) -> Result<Self> {
        let corrupt = |why: &str| StorageError::CorruptRecord(format!("producer snapshot: {why}"));
        if bytes.len() < SNAPSHOT_ENTRIES_AT + 4 {
            return Err(corrupt("too short"));
        }
        let mut reader = Reader(bytes);
        if reader.i16() != SNAPSHOT_VERSION {
            return Err(corrupt("unknown version"));
        }
        if reader.u32() != crc32c::crc32c(&bytes[SNAPSHOT_ENTRIES_AT..]) {
            return Err(corrupt("CRC mismatch"));
        }
        let count = usize::try_from(reader.i32()).map_err(|_| corrupt("negative entry count"))?;
        if reader.0.len() != count.saturating_mul(SNAPSHOT_ENTRY_LEN) {
            return Err(corrupt("entry count does not match the file size"));
        }
        let mut state = Self { producers: HashMap::with_capacity(count), ongoing: BTreeMap::new() };
        for _ in 0..count {
            let (producer_id, entry) = reader.snapshot_entry();
            state.track_txn(producer_id, None, entry.current_txn_first_offset);
            state.producers.insert(producer_id, entry);
        }
        Ok(state)
    }
}

impl PendingUpdates {
    /// The entry a batch of `producer_id` updates: the one earlier batches of
    /// this record set updated, else a copy of the committed one.
    fn entry(&mut self, producer_id: i64, committed: Option<&ProducerEntry>) -> &mut ProducerEntry {
        let index = match self.entries.iter().position(|(id, _)| *id == producer_id) {
            Some(index) => index,
            None => {
                self.entries.push((producer_id, committed.copied().unwrap_or_else(ProducerEntry::empty)));
                self.entries.len() - 1
            }
        };
        &mut self.entries[index].1
    }
}

/// Who is appending: a producer, or the broker itself writing control
/// batches (transaction markers), which clients may not write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOrigin {
    Client,
    Coordinator,
    /// The metadata quorum writing its own batches, which carry no producer;
    /// its control batches are KRaft's (LeaderChange), not transaction markers.
    Raft,
}

/// Kafka's checks of the producer fields of a client batch.
fn validate_producer_fields(header: &BatchHeader) -> Result<()> {
    if header.is_control() {
        return Err(StorageError::InvalidRecord("clients may not write control records".into()));
    }
    if header.base_sequence < 0 {
        return Err(StorageError::InvalidRecord(format!(
            "invalid sequence number {} in a batch of producer {}",
            header.base_sequence, header.producer_id
        )));
    }
    Ok(())
}

/// A transactional batch opens its producer's transaction if none is open;
/// a plain one may not come while one is.
fn check_transactional(header: &BatchHeader, entry: &mut ProducerEntry, first_offset: i64) -> Result<()> {
    match (header.is_transactional(), entry.current_txn_first_offset) {
        (true, None) => entry.current_txn_first_offset = Some(first_offset),
        (false, Some(_)) => {
            return Err(StorageError::InvalidTxnState(format!(
                "expected a transactional write from producer {}",
                header.producer_id
            )))
        }
        _ => {}
    }
    Ok(())
}

/// Kafka's `checkCoordinatorEpoch`: a marker from a coordinator older than
/// the one that wrote this producer's last marker is refused.
fn check_coordinator_epoch(marker: &EndTxnMarker, entry: &ProducerEntry) -> Result<()> {
    if marker.coordinator_epoch < entry.coordinator_epoch {
        return Err(StorageError::CoordinatorFenced(format!(
            "marker coordinator epoch {} is older than the last seen {}",
            marker.coordinator_epoch, entry.coordinator_epoch
        )));
    }
    Ok(())
}

fn check_epoch(batch: ProducerBatch, entry: &ProducerEntry) -> Result<()> {
    if batch.epoch < entry.epoch {
        return Err(StorageError::InvalidProducerEpoch(format!(
            "epoch {} of producer {} is older than its current epoch {}",
            batch.epoch, batch.producer_id, entry.epoch
        )));
    }
    Ok(())
}

/// Kafka's `ProducerAppendInfo.checkSequence`: `committed` is the state
/// before this record set, `entry` includes its earlier batches.
fn check_sequence(
    batch: ProducerBatch,
    committed: Option<&ProducerEntry>,
    entry: &ProducerEntry,
) -> Result<()> {
    if batch.epoch != entry.epoch {
        if batch.first_seq != 0 && entry.epoch != NO_PRODUCER_EPOCH {
            return Err(StorageError::OutOfOrderSequence(format!(
                "producer {} starts epoch {} at sequence {}, not 0",
                batch.producer_id, batch.epoch, batch.first_seq
            )));
        }
        return Ok(());
    }
    // A producer with no state (its batches expired or deleted) may go on
    // from any sequence.
    let known = committed.is_some_and(|c| c.epoch != NO_PRODUCER_EPOCH);
    let last_seq = entry.last_seq();
    if known && !in_sequence(last_seq, batch.first_seq) {
        return Err(StorageError::OutOfOrderSequence(format!(
            "producer {} sent sequence {} after {}",
            batch.producer_id, batch.first_seq, last_seq
        )));
    }
    Ok(())
}

/// Big-endian reads from a buffer whose length was checked up front.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        head.try_into().expect("length checked")
    }

    fn i16(&mut self) -> i16 {
        i16::from_be_bytes(self.take())
    }

    fn i32(&mut self) -> i32 {
        i32::from_be_bytes(self.take())
    }

    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take())
    }

    fn i64(&mut self) -> i64 {
        i64::from_be_bytes(self.take())
    }

    fn snapshot_entry(&mut self) -> (i64, ProducerEntry) {
        let producer_id = self.i64();
        let epoch = self.i16();
        let last_seq = self.i32();
        let last_offset = self.i64();
        let offset_delta = self.i32();
        let timestamp = self.i64();
        let coordinator_epoch = self.i32();
        let current_txn_first_offset = self.i64();
        let mut entry = ProducerEntry {
            epoch,
            coordinator_epoch,
            current_txn_first_offset: (current_txn_first_offset >= 0).then_some(current_txn_first_offset),
            ..ProducerEntry::empty()
        };
        if last_offset >= 0 {
            let batch = BatchMetadata {
                first_seq: decrement_sequence(last_seq, offset_delta),
                last_seq,
                first_offset: last_offset - i64::from(offset_delta),
                last_offset,
                timestamp,
            };
            entry.add_batch(epoch, batch);
        }
        entry.last_timestamp = timestamp;
        (producer_id, entry)
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use crate::batch::test_support::batch;
    use crate::batch::{self, BASE_SEQUENCE, PRODUCER_EPOCH, PRODUCER_ID};
    use kafka_protocol::records::Compression;

    /// A batch of `count` records from producer `producer_id` at `epoch`,
    /// starting at sequence `sequence`, with a valid CRC.
    pub fn idempotent_batch(producer_id: i64, epoch: i16, sequence: i32, count: usize) -> Vec<u8> {
        let mut bytes = batch(count, 1_000, Compression::None);
        bytes[PRODUCER_ID..PRODUCER_ID + 8].copy_from_slice(&producer_id.to_be_bytes());
        bytes[PRODUCER_EPOCH..PRODUCER_EPOCH + 2].copy_from_slice(&epoch.to_be_bytes());
        bytes[BASE_SEQUENCE..BASE_SEQUENCE + 4].copy_from_slice(&sequence.to_be_bytes());
        let crc = batch::compute_crc(&bytes);
        bytes[batch::CRC..batch::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        bytes
    }

    /// [`idempotent_batch`] with the transactional attribute set.
    pub fn transactional_batch(producer_id: i64, epoch: i16, sequence: i32, count: usize) -> Vec<u8> {
        let mut bytes = idempotent_batch(producer_id, epoch, sequence, count);
        bytes[batch::ATTRIBUTES + 1] |= 0x10;
        let crc = batch::compute_crc(&bytes);
        bytes[batch::CRC..batch::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::idempotent_batch;
    use super::*;

    fn header(producer_id: i64, epoch: i16, sequence: i32, count: usize) -> BatchHeader {
        BatchHeader::parse(&idempotent_batch(producer_id, epoch, sequence, count)).unwrap()
    }

    /// Checks and applies one batch at `offset`; returns the check's outcome.
    fn append(state: &mut ProducerState, offset: i64, batch: BatchHeader) -> Result<Option<BatchMetadata>> {
        match state.check(&[batch.into()], offset, None, AppendOrigin::Client)? {
            ProducerCheck::Append(updates) => {
                state.apply(updates);
                Ok(None)
            }
            ProducerCheck::Duplicate(found) => Ok(Some(found)),
        }
    }

    #[test]
    fn sequences_wrap_at_i32_max() {
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(increment_sequence(5, 3), 8);
        assert_eq!(decrement_sequence(1, 3), i32::MAX - 1);
        assert_eq!(decrement_sequence(8, 3), 5);
        assert!(in_sequence(i32::MAX, 0));
        assert!(!in_sequence(i32::MAX, 1));
    }

    #[test]
    fn given_a_retry_of_a_remembered_batch_when_checked_should_return_its_offsets() {
        let mut state = ProducerState::default();
        assert_eq!(append(&mut state, 0, header(7, 0, 0, 3)).unwrap(), None);
        assert_eq!(append(&mut state, 3, header(7, 0, 3, 2)).unwrap(), None);
        let duplicate = append(&mut state, 5, header(7, 0, 0, 3)).unwrap().unwrap();
        assert_eq!((duplicate.first_offset, duplicate.last_offset), (0, 2));
        // Same first sequence, different range: not a duplicate, and out of order.
        assert!(matches!(
            append(&mut state, 5, header(7, 0, 3, 1)),
            Err(StorageError::OutOfOrderSequence(_))
        ));
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let mut state = ProducerState::default();
        for i in 0..6 {
            append(&mut state, i64::from(i), header(1, 0, i, 1)).unwrap();
        }
        assert_eq!(state.get(1).unwrap().batches().len(), BATCHES_RETAINED);
        assert!(matches!(
            append(&mut state, 6, header(1, 0, 0, 1)),
            Err(StorageError::OutOfOrderSequence(_))
        ));
        assert_eq!(append(&mut state, 6, header(1, 0, 1, 1)).unwrap().unwrap().first_offset, 1);
    }

    #[test]
    fn gaps_and_stale_epochs_are_refused() {
        let mut state = ProducerState::default();
        append(&mut state, 0, header(1, 2, 0, 1)).unwrap();
        assert!(matches!(
            append(&mut state, 1, header(1, 2, 2, 1)),
            Err(StorageError::OutOfOrderSequence(_))
        ));
        assert!(matches!(
            append(&mut state, 1, header(1, 1, 1, 1)),
            Err(StorageError::InvalidProducerEpoch(_))
        ));
        assert!(matches!(
            append(&mut state, 1, header(1, 3, 5, 1)),
            Err(StorageError::OutOfOrderSequence(_))
        ));
        assert_eq!(append(&mut state, 1, header(1, 3, 0, 1)).unwrap(), None, "a new epoch starts at 0");
        assert_eq!(state.get(1).unwrap().batches().len(), 1, "the old epoch's batches are forgotten");
    }

    #[test]
    fn unknown_producers_may_start_anywhere() {
        let mut state = ProducerState::default();
        assert_eq!(append(&mut state, 0, header(9, 0, 42, 2)).unwrap(), None);
        assert_eq!(append(&mut state, 2, header(9, 0, 44, 1)).unwrap(), None);
    }

    #[test]
    fn a_batch_crossing_i32_max_wraps() {
        let mut state = ProducerState::default();
        append(&mut state, 0, header(1, 0, i32::MAX - 1, 3)).unwrap();
        // Sequences MAX - 1, MAX, 0.
        assert_eq!(state.get(1).unwrap().last_batch().unwrap().last_seq, 0);
        assert!(matches!(
            append(&mut state, 3, header(1, 0, 2, 1)),
            Err(StorageError::OutOfOrderSequence(_))
        ));
        assert_eq!(append(&mut state, 3, header(1, 0, 1, 1)).unwrap(), None);
    }

    #[test]
    fn negative_sequences_and_control_batches_are_invalid() {
        let state = ProducerState::default();
        assert!(matches!(
            state.check(&[header(1, 0, -1, 1).into()], 0, None, AppendOrigin::Client),
            Err(StorageError::InvalidRecord(_))
        ));
        let mut control = header(1, 0, 0, 1);
        control.attributes |= 0x20;
        assert!(matches!(
            state.check(&[control.into()], 0, None, AppendOrigin::Client),
            Err(StorageError::InvalidRecord(_))
        ));
        assert!(
            matches!(
                state.check(&[control.into()], 0, None, AppendOrigin::Coordinator),
                Err(StorageError::InvalidRecord(_))
            ),
            "a control batch must hold a marker"
        );
        let marker = EndTxnMarker { control: crate::batch::ControlType::Commit, coordinator_epoch: 0 };
        assert!(matches!(
            state.check(
                &[ProducedBatch { header: control, marker: Some(marker) }],
                0,
                None,
                AppendOrigin::Coordinator
            ),
            Ok(ProducerCheck::Append(_))
        ));
    }

    #[test]
    fn batches_of_one_record_set_are_checked_in_order() {
        let state = ProducerState::default();
        let ok = [header(1, 0, 0, 2), header(1, 0, 2, 1), header(2, 0, 0, 1)];
        let ProducerCheck::Append(updates) =
            state.check(&ok.map(Into::into), 10, Some(77), AppendOrigin::Client).unwrap()
        else {
            panic!()
        };
        let mut state = state;
        state.apply(updates);
        let last = *state.get(1).unwrap().last_batch().unwrap();
        assert_eq!(
            last,
            BatchMetadata { first_seq: 2, last_seq: 2, first_offset: 12, last_offset: 12, timestamp: 77 }
        );
        let gapped = [header(1, 0, 3, 1), header(1, 0, 5, 1)];
        assert!(matches!(
            state.check(&gapped.map(Into::into), 13, None, AppendOrigin::Client),
            Err(StorageError::OutOfOrderSequence(_))
        ));
    }

    #[test]
    fn expiry_removes_idle_producers_only() {
        let mut state = ProducerState::default();
        append(&mut state, 0, header(1, 0, 0, 1)).unwrap();
        let timestamp = state.get(1).unwrap().last_timestamp;
        assert_eq!(state.remove_expired(timestamp + 99, 100), 0);
        assert_eq!(state.remove_expired(timestamp + 100, 100), 1);
        assert!(state.is_empty());
    }

    #[test]
    fn snapshots_keep_each_producers_last_batch() {
        let mut state = ProducerState::default();
        append(&mut state, 0, header(1, 0, 0, 3)).unwrap();
        append(&mut state, 3, header(1, 0, 3, 4)).unwrap();
        append(&mut state, 7, header(2, 5, i32::MAX, 2)).unwrap();
        let bytes = state.encode_snapshot();
        assert_eq!(bytes.len(), 6 + 4 + 2 * SNAPSHOT_ENTRY_LEN);
        let loaded = ProducerState::decode_snapshot(&bytes).unwrap();
        let one = loaded.get(1).unwrap();
        assert_eq!(
            one.batches(),
            &[BatchMetadata { first_seq: 3, last_seq: 6, first_offset: 3, last_offset: 6, timestamp: 1_003 }]
        );
        let two = loaded.get(2).unwrap();
        assert_eq!(
            (two.epoch, two.last_batch().unwrap().first_seq, two.last_batch().unwrap().last_seq),
            (5, i32::MAX, 0)
        );
        for at in [0, 3, 7, bytes.len() - 1] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 1;
            assert!(ProducerState::decode_snapshot(&damaged).is_err(), "flip at {at} undetected");
        }
        assert!(ProducerState::decode_snapshot(&bytes[..bytes.len() - 1]).is_err());
    }
}
