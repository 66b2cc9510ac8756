//! Kafka's record batches (v2) as KRaft writes them, for the metadata log
//! and its snapshots: data batches of opaque record values and control
//! batches of KRaft's control records.
//!
//! A control record's key is Kafka's `ControlRecordType` key v0 (version,
//! then type, both int16); its value is the message alone, serialized at
//! its version 0, whose own first field is that version
//! (`MessageUtil.toByteBuffer`, read back by `ControlRecordUtils`).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::{Decodable, Encodable};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

/// `ControlRecordType.LEADER_CHANGE`.
pub const LEADER_CHANGE: i16 = 2;
/// `ControlRecordType.SNAPSHOT_HEADER`.
pub const SNAPSHOT_HEADER: i16 = 3;
/// `ControlRecordType.SNAPSHOT_FOOTER`.
pub const SNAPSHOT_FOOTER: i16 = 4;
/// `ControlRecordType.KRAFT_VERSION`.
pub const KRAFT_VERSION: i16 = 5;
/// `ControlRecordType.KRAFT_VOTERS`.
pub const KRAFT_VOTERS: i16 = 6;

/// The version every KRaft control message is written at
/// (`ControlRecordUtils.*_CURRENT_VERSION`).
pub const CONTROL_MESSAGE_VERSION: i16 = 0;

/// A data batch at `base_offset` in `epoch` holding `values`.
pub fn data_batch(base_offset: u64, epoch: i32, values: &[Bytes], timestamp_ms: i64) -> Bytes {
    let records = values.iter().cloned().map(|value| (None, value));
    encode(base_offset, epoch, false, records, timestamp_ms)
}

/// A control batch at `base_offset` in `epoch` of `(control type, value)`
/// records.
pub fn control_batch(base_offset: u64, epoch: i32, records: &[(i16, Bytes)], timestamp_ms: i64) -> Bytes {
    let records =
        records.iter().map(|(control_type, value)| (Some(control_key(*control_type)), value.clone()));
    encode(base_offset, epoch, true, records, timestamp_ms)
}

/// A control record's value: the message at [`CONTROL_MESSAGE_VERSION`].
pub fn control_value(message: &impl Encodable) -> Bytes {
    let mut buf = BytesMut::new();
    message.encode(&mut buf, CONTROL_MESSAGE_VERSION).expect("encoding into memory cannot fail");
    buf.freeze()
}

/// A control record's message, read at [`CONTROL_MESSAGE_VERSION`]; bytes
/// left after it mean another layout (or damage), never a message.
pub fn decode_control_value<M: Decodable>(mut value: Bytes) -> Result<M, String> {
    let message = M::decode(&mut value, CONTROL_MESSAGE_VERSION).map_err(|e| e.to_string())?;
    if value.has_remaining() {
        return Err(format!("{} bytes after the message", value.remaining()));
    }
    Ok(message)
}

/// The control type a control record's key names (None: no valid key).
pub fn control_type(record: &Record) -> Option<i16> {
    let mut key = record.key.clone().filter(|key| key.len() >= 4)?;
    let version = key.get_i16();
    (version >= 0).then(|| key.get_i16())
}

fn control_key(control_type: i16) -> Bytes {
    let mut key = BytesMut::with_capacity(4);
    key.put_i16(0);
    key.put_i16(control_type);
    key.freeze()
}

/// One uncompressed batch with no producer (id, epoch and base sequence
/// -1) and create-time timestamps, as `MemoryRecordsBuilder` writes KRaft's.
fn encode(
    base_offset: u64,
    epoch: i32,
    control: bool,
    records: impl Iterator<Item = (Option<Bytes>, Bytes)>,
    timestamp_ms: i64,
) -> Bytes {
    let base = base_offset as i64;
    let records: Vec<Record> = records
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional: false,
            control,
            delete_horizon: false,
            partition_leader_epoch: epoch,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: base + i as i64,
            // The encoder starts a new batch wherever offset minus sequence
            // changes; this keeps one batch with base sequence -1 (none).
            sequence: i as i32 - 1,
            timestamp: timestamp_ms,
            key,
            value: Some(value),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encoding into memory cannot fail");
    buf.freeze()
}
