//! Raft batches as Kafka record batches (RecordBatch v2), the one format
//! used both in Fetch responses and in the `__cluster_metadata-0` segments.
//!
//! One raft batch is one record batch: its base offset, its partition
//! leader epoch the batch's epoch, each record's value the opaque bytes the
//! controller appended. A LeaderChange is a control batch of one record,
//! key = control type 2 and value = Kafka's `LeaderChangeMessage` (version
//! 0), as `MemoryRecords.withLeaderChangeMessage` writes it. KIP-853's
//! `KRaftVersionRecord` (control type 5) and `VotersRecord` (type 6) are
//! control batches of one record the same way.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::leader_change_message::Voter;
use kafka_protocol::messages::{BrokerId, KRaftVersionRecord, LeaderChangeMessage};
use kafka_protocol::protocol::{Decodable, Encodable};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strom_raft::wire::{self, RecordsCodec, WireError};
use strom_raft::{Batch, Records};

/// `ControlRecordType.LEADER_CHANGE`.
const LEADER_CHANGE_TYPE: i16 = 2;
/// `ControlRecordUtils.LEADER_CHANGE_CURRENT_VERSION`.
const LEADER_CHANGE_VERSION: i16 = 0;
/// `ControlRecordType.KRAFT_VERSION`.
pub const KRAFT_VERSION_TYPE: i16 = 5;
/// `ControlRecordType.KRAFT_VOTERS`.
pub const KRAFT_VOTERS_TYPE: i16 = 6;

/// The codec for Kafka's record batches.
#[derive(Debug, Clone, Copy, Default)]
pub struct KafkaRecords;

impl RecordsCodec for KafkaRecords {
    fn encode(&self, batches: &[Batch]) -> Bytes {
        let mut buf = BytesMut::new();
        for batch in batches {
            buf.extend_from_slice(&encode_batch(batch, 0));
        }
        buf.freeze()
    }

    fn decode(&self, records: Bytes) -> Result<Vec<Batch>, WireError> {
        decode_batches(records)
    }
}

/// One raft batch as a record batch stamped with `timestamp_ms`.
pub fn encode_batch(batch: &Batch, timestamp_ms: i64) -> Bytes {
    let base = batch.base_offset as i64;
    let record = |offset: i64, key: Option<Bytes>, value: Bytes, control: bool| Record {
        transactional: false,
        control,
        delete_horizon: false,
        partition_leader_epoch: batch.epoch,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset,
        // The encoder starts a new batch wherever offset minus sequence
        // changes; this keeps one batch with base sequence -1 (none).
        sequence: (offset - base) as i32 - 1,
        timestamp: timestamp_ms,
        key,
        value: Some(value),
        headers: Default::default(),
    };
    let records: Vec<Record> = match &batch.records {
        Records::Data(values) => values
            .iter()
            .enumerate()
            .map(|(i, value)| record(base + i as i64, None, value.clone(), false))
            .collect(),
        Records::LeaderChange { leader_id, voters } => {
            let key = control_key(LEADER_CHANGE_TYPE);
            vec![record(base, Some(key), leader_change_value(*leader_id, voters), true)]
        }
        Records::KRaftVersion { kraft_version } => {
            let message = KRaftVersionRecord::default().with_k_raft_version(*kraft_version);
            let value = control_value(&message, 0);
            vec![record(base, Some(control_key(KRAFT_VERSION_TYPE)), value, true)]
        }
        Records::Voters(voters) => {
            let mut value = BytesMut::new();
            value.put_i16(0);
            value.extend_from_slice(&wire::encode_voters_record(voters));
            vec![record(base, Some(control_key(KRAFT_VOTERS_TYPE)), value.freeze(), true)]
        }
    };
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encoding into memory cannot fail");
    buf.freeze()
}

/// A control batch at `base_offset` in `epoch` of `(control type, value)`
/// records, as Kafka writes KRaft's control records (the value is the
/// message's version, then the message).
pub fn encode_control_batch(
    base_offset: i64,
    epoch: i32,
    records: &[(i16, Bytes)],
    timestamp_ms: i64,
) -> Bytes {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (control_type, value))| Record {
            transactional: false,
            control: true,
            delete_horizon: false,
            partition_leader_epoch: epoch,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: base_offset + i as i64,
            sequence: i as i32 - 1,
            timestamp: timestamp_ms,
            key: Some(control_key(*control_type)),
            value: Some(value.clone()),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encoding into memory cannot fail");
    buf.freeze()
}

/// A control record's value: the message's version, then the message.
pub fn control_value(message: &impl Encodable, version: i16) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    message.encode(&mut buf, version).expect("encoding into memory cannot fail");
    buf.freeze()
}

/// The batches in `bytes` (whole record batches).
pub fn decode_batches(mut bytes: Bytes) -> Result<Vec<Batch>, WireError> {
    let mut batches = Vec::new();
    while bytes.has_remaining() {
        let set = RecordBatchDecoder::decode(&mut bytes).map_err(|e| WireError::Records(e.to_string()))?;
        let Some(first) = set.records.first() else { continue };
        let base_offset =
            u64::try_from(first.offset).map_err(|_| WireError::Records("negative offset".into()))?;
        let epoch = first.partition_leader_epoch;
        let records = if first.control {
            control_records_from(first)?
        } else {
            Records::Data(set.records.iter().map(|r| r.value.clone().unwrap_or_default()).collect())
        };
        batches.push(Batch { base_offset, epoch, records });
    }
    Ok(batches)
}

fn control_key(control_type: i16) -> Bytes {
    let mut key = BytesMut::with_capacity(4);
    key.put_i16(0);
    key.put_i16(control_type);
    key.freeze()
}

fn leader_change_value(leader_id: i32, voters: &[i32]) -> Bytes {
    let voters: Vec<Voter> = voters.iter().map(|id| Voter::default().with_voter_id(*id)).collect();
    let message = LeaderChangeMessage::default()
        .with_version(LEADER_CHANGE_VERSION)
        .with_leader_id(BrokerId(leader_id))
        .with_voters(voters.clone())
        .with_granting_voters(voters);
    let mut buf = BytesMut::new();
    buf.put_i16(LEADER_CHANGE_VERSION);
    message.encode(&mut buf, LEADER_CHANGE_VERSION).expect("encoding into memory cannot fail");
    buf.freeze()
}

/// The raft records a control batch's first record stands for.
fn control_records_from(record: &Record) -> Result<Records, WireError> {
    let bad = |why: &str| WireError::Records(format!("control record: {why}"));
    let mut key = record.key.clone().ok_or_else(|| bad("no key"))?;
    if key.len() < 4 {
        return Err(bad("short key"));
    }
    key.advance(2);
    let control_type = key.get_i16();
    let mut value = record.value.clone().ok_or_else(|| bad("no value"))?;
    if value.len() < 2 {
        return Err(bad("short value"));
    }
    let version = value.get_i16();
    match control_type {
        LEADER_CHANGE_TYPE => {
            let message =
                LeaderChangeMessage::decode(&mut value, version).map_err(|e| bad(&e.to_string()))?;
            let voters = message.voters.iter().map(|voter| voter.voter_id).collect();
            Ok(Records::LeaderChange { leader_id: message.leader_id.0, voters })
        }
        KRAFT_VERSION_TYPE => {
            let message = KRaftVersionRecord::decode(&mut value, version).map_err(|e| bad(&e.to_string()))?;
            Ok(Records::KRaftVersion { kraft_version: message.k_raft_version })
        }
        KRAFT_VOTERS_TYPE if version == 0 => Ok(Records::Voters(wire::decode_voters_record(value)?)),
        _ => Err(bad(&format!("unknown control type {control_type} (version {version})"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_and_leader_change_batches_survive_a_round_trip() {
        let batches = vec![
            Batch {
                base_offset: 0,
                epoch: 1,
                records: Records::LeaderChange { leader_id: 2, voters: vec![1, 2, 3] },
            },
            Batch {
                base_offset: 1,
                epoch: 1,
                records: Records::Data(vec![Bytes::from_static(b"a"), Bytes::from_static(b"bc")]),
            },
        ];
        let bytes = KafkaRecords.encode(&batches);
        assert_eq!(KafkaRecords.decode(bytes).unwrap(), batches);
    }

    #[test]
    fn kraft_version_and_voters_batches_are_kafkas_control_records() {
        let voter = strom_raft::VoterNode {
            key: strom_raft::ReplicaKey::new(3, Some(uuid::Uuid::from_u128(7))),
            endpoints: vec![strom_raft::Endpoint {
                listener: "CONTROLLER".into(),
                host: "h".into(),
                port: 9,
            }],
            kraft_versions: strom_raft::VersionRange { min: 0, max: 1 },
        };
        let batches = vec![
            Batch { base_offset: 0, epoch: 1, records: Records::KRaftVersion { kraft_version: 1 } },
            Batch { base_offset: 1, epoch: 1, records: Records::Voters(strom_raft::VoterSet::new([voter])) },
        ];
        let mut bytes = KafkaRecords.encode(&batches);
        assert_eq!(KafkaRecords.decode(bytes.clone()).unwrap(), batches);
        let first = RecordBatchDecoder::decode(&mut bytes).unwrap();
        let second = RecordBatchDecoder::decode(&mut bytes).unwrap();
        let key_type = |set: &kafka_protocol::records::RecordSet| set.records[0].key.as_ref().unwrap()[3];
        assert!(first.records[0].control && second.records[0].control);
        assert_eq!((key_type(&first), key_type(&second)), (5, 6));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(KafkaRecords.decode(Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 1])).is_err());
    }
}
