//! KIP-630 snapshot files (`<offset>-<epoch>.checkpoint`) in Kafka's own
//! layout, as `RecordsSnapshotWriter` writes them, so Kafka's tools
//! (`kafka-dump-log.sh --cluster-metadata-decoder`) and JVM nodes read
//! ours and we read theirs:
//!
//! 1. a control batch at offset 0 holding the SnapshotHeaderRecord and,
//!    from `kraft.version` 1, the KRaftVersionRecord and the VotersRecord
//!    in force at the snapshot's end offset;
//! 2. data batches with the state machine's records, offsets continuing;
//! 3. a control batch with the SnapshotFooterRecord.
//!
//! Every batch is in the snapshot's epoch. Reading checks every batch's
//! CRC, that offsets run on from 0 without a gap and epochs agree, that
//! the header comes first and the footer last: a damaged or torn file is an error, never
//! state.

use bytes::Bytes;
use kafka_protocol::messages::{
    KRaftVersionRecord, SnapshotFooterRecord, SnapshotHeaderRecord, VotersRecord,
};
use kafka_protocol::records::{Record, RecordBatchDecoder};

use crate::record_batch::{
    control_batch, control_type, control_value, data_batch, decode_control_value, CONTROL_MESSAGE_VERSION,
    KRAFT_VERSION, KRAFT_VOTERS, SNAPSHOT_FOOTER, SNAPSHOT_HEADER,
};
use crate::voters::VoterSet;

/// The most record bytes per data batch (Kafka's
/// `KafkaRaftClient.MAX_BATCH_SIZE_BYTES`, which its snapshot writer uses).
const BATCH_MAX_BYTES: usize = 8 * 1024 * 1024;

/// What a snapshot file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The SnapshotHeaderRecord's `LastContainedLogTimestamp`.
    pub last_contained_log_timestamp_ms: i64,
    /// The `kraft.version` in force at the end offset (0 when absent).
    pub kraft_version: i16,
    /// The voter set in force there (`kraft.version` 1 only).
    pub voters: Option<VoterSet>,
    /// The state machine's records, in order.
    pub records: Vec<Bytes>,
}

/// Why a snapshot file was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointError(String);

impl std::fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid snapshot: {}", self.0)
    }
}

impl std::error::Error for CheckpointError {}

fn invalid(why: impl Into<String>) -> CheckpointError {
    CheckpointError(why.into())
}

fn bad(what: &str, error: impl std::fmt::Display) -> CheckpointError {
    invalid(format!("{what}: {error}"))
}

impl Checkpoint {
    /// The file's bytes, every batch in `epoch` and stamped `timestamp_ms`.
    pub fn encode(&self, epoch: i32, timestamp_ms: i64) -> Bytes {
        let header = SnapshotHeaderRecord::default()
            .with_version(CONTROL_MESSAGE_VERSION)
            .with_last_contained_log_timestamp(self.last_contained_log_timestamp_ms);
        let mut control = vec![(SNAPSHOT_HEADER, control_value(&header))];
        if self.kraft_version >= 1 {
            let version = KRaftVersionRecord::default()
                .with_version(CONTROL_MESSAGE_VERSION)
                .with_k_raft_version(self.kraft_version);
            control.push((KRAFT_VERSION, control_value(&version)));
            if let Some(voters) = &self.voters {
                control.push((KRAFT_VOTERS, control_value(&crate::wire::voters_record(voters))));
            }
        }
        let mut out = control_batch(0, epoch, &control, timestamp_ms).to_vec();
        let mut offset = control.len() as u64;
        for batch in data_batches(&self.records) {
            out.extend_from_slice(&data_batch(offset, epoch, batch, timestamp_ms));
            offset += batch.len() as u64;
        }
        let footer = SnapshotFooterRecord::default().with_version(CONTROL_MESSAGE_VERSION);
        out.extend_from_slice(&control_batch(
            offset,
            epoch,
            &[(SNAPSHOT_FOOTER, control_value(&footer))],
            timestamp_ms,
        ));
        out.into()
    }

    /// Reads a snapshot file, refusing anything but a whole, intact one.
    pub fn decode(content: &Bytes) -> Result<Self, CheckpointError> {
        let mut reader = Reader::default();
        let mut rest = content.clone();
        while !rest.is_empty() {
            let position = content.len() - rest.len();
            let batch = RecordBatchDecoder::decode(&mut rest)
                .map_err(|e| invalid(format!("the batch at byte {position}: {e}")))?;
            if batch.records.is_empty() {
                return Err(invalid(format!("the batch at byte {position} holds no record")));
            }
            batch.records.iter().try_for_each(|record| reader.read(record))?;
        }
        reader.finish()
    }
}

/// The records split into batches of at most [`BATCH_MAX_BYTES`] (a larger
/// record gets a batch of its own).
fn data_batches(records: &[Bytes]) -> Vec<&[Bytes]> {
    let mut batches = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, record) in records.iter().enumerate() {
        if i > start && bytes + record.len() > BATCH_MAX_BYTES {
            batches.push(&records[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += record.len();
    }
    if start < records.len() {
        batches.push(&records[start..]);
    }
    batches
}

/// Reads a snapshot record by record.
#[derive(Default)]
struct Reader {
    epoch: Option<i32>,
    next_offset: i64,
    header: Option<SnapshotHeaderRecord>,
    footer: bool,
    kraft_version: i16,
    voters: Option<VoterSet>,
    records: Vec<Bytes>,
}

impl Reader {
    fn read(&mut self, record: &Record) -> Result<(), CheckpointError> {
        // The partition leader epoch lies outside the batch CRC: every batch
        // must carry the snapshot's.
        let epoch = *self.epoch.get_or_insert(record.partition_leader_epoch);
        if record.partition_leader_epoch != epoch {
            return Err(invalid(format!(
                "epoch {} at offset {} in an epoch-{epoch} snapshot",
                record.partition_leader_epoch, record.offset
            )));
        }
        if record.offset != self.next_offset {
            return Err(invalid(format!("offset {} where {} was due", record.offset, self.next_offset)));
        }
        if self.footer {
            return Err(invalid(format!("a record at offset {} after the footer", record.offset)));
        }
        self.next_offset += 1;
        let value =
            record.value.clone().ok_or_else(|| invalid(format!("no value at offset {}", record.offset)))?;
        if !record.control {
            if self.header.is_none() {
                return Err(invalid("the first record is not a SnapshotHeaderRecord"));
            }
            self.records.push(value);
            return Ok(());
        }
        let control_type = control_type(record)
            .ok_or_else(|| invalid(format!("a control record without a key at offset {}", record.offset)))?;
        if self.header.is_none() != (control_type == SNAPSHOT_HEADER) {
            return Err(invalid(format!("control type {control_type} at offset {}", record.offset)));
        }
        self.read_control(control_type, value)
    }

    fn read_control(&mut self, control_type: i16, value: Bytes) -> Result<(), CheckpointError> {
        match control_type {
            SNAPSHOT_HEADER => {
                let header = decode_control_value::<SnapshotHeaderRecord>(value)
                    .map_err(|e| bad("SnapshotHeaderRecord", e))?;
                self.header = Some(header);
            }
            SNAPSHOT_FOOTER => {
                decode_control_value::<SnapshotFooterRecord>(value)
                    .map_err(|e| bad("SnapshotFooterRecord", e))?;
                self.footer = true;
            }
            KRAFT_VERSION => {
                let record = decode_control_value::<KRaftVersionRecord>(value)
                    .map_err(|e| bad("KRaftVersionRecord", e))?;
                self.kraft_version = record.k_raft_version;
            }
            KRAFT_VOTERS => {
                let record =
                    decode_control_value::<VotersRecord>(value).map_err(|e| bad("VotersRecord", e))?;
                let voters = crate::wire::voter_set_from_record(&record)
                    .map_err(|e| invalid(format!("VotersRecord: {e}")))?;
                self.voters = Some(voters);
            }
            // Kafka's readers skip control types they do not know.
            _ => {}
        }
        Ok(())
    }

    fn finish(self) -> Result<Checkpoint, CheckpointError> {
        let header = self.header.ok_or_else(|| invalid("empty"))?;
        if !self.footer {
            return Err(invalid("no SnapshotFooterRecord: the file is truncated"));
        }
        Ok(Checkpoint {
            last_contained_log_timestamp_ms: header.last_contained_log_timestamp,
            kraft_version: self.kraft_version,
            voters: self.voters.filter(|_| self.kraft_version >= 1),
            records: self.records,
        })
    }
}

#[cfg(test)]
mod tests;
