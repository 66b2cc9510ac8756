//! A state machine's snapshot as a Kafka checkpoint file, as Kafka's
//! `RecordsSnapshotWriter` lays it out: a control batch with the
//! SnapshotHeaderRecord, the records in data batches at offsets from 0,
//! then a control batch with the SnapshotFooterRecord. Reading keeps the
//! data records and skips the control ones.

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{SnapshotFooterRecord, SnapshotHeaderRecord};
use kafka_protocol::records::RecordBatchDecoder;
use strom_raft::log::{Batch, Records};

use crate::codec::{control_value, encode_batch, encode_control_batch};
use crate::WireError;

const SNAPSHOT_HEADER: i16 = 3;
const SNAPSHOT_FOOTER: i16 = 4;
/// Records per data batch, as Kafka's writer bounds its batches.
const RECORDS_PER_BATCH: usize = 1000;

/// The checkpoint content of `records`, stamped `epoch` and `timestamp_ms`.
pub fn snapshot_bytes(records: &[Bytes], epoch: i32, timestamp_ms: i64) -> Bytes {
    let header =
        SnapshotHeaderRecord::default().with_version(0).with_last_contained_log_timestamp(timestamp_ms);
    let mut out = BytesMut::new();
    out.extend_from_slice(&encode_control_batch(
        0,
        epoch,
        &[(SNAPSHOT_HEADER, control_value(&header, 0))],
        timestamp_ms,
    ));
    let mut offset = 1u64;
    for chunk in records.chunks(RECORDS_PER_BATCH) {
        let batch = Batch { base_offset: offset, epoch, records: Records::Data(chunk.to_vec()) };
        out.extend_from_slice(&encode_batch(&batch, timestamp_ms));
        offset += chunk.len() as u64;
    }
    let footer = control_value(&SnapshotFooterRecord::default().with_version(0), 0);
    out.extend_from_slice(&encode_control_batch(
        offset as i64,
        epoch,
        &[(SNAPSHOT_FOOTER, footer)],
        timestamp_ms,
    ));
    out.freeze()
}

/// The data records of checkpoint content, in order.
pub fn snapshot_records(mut content: Bytes) -> Result<Vec<Bytes>, WireError> {
    let mut records = Vec::new();
    while content.has_remaining() {
        let set = RecordBatchDecoder::decode(&mut content).map_err(|e| WireError::Records(e.to_string()))?;
        records.extend(set.records.into_iter().filter(|r| !r.control).map(|r| r.value.unwrap_or_default()));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_a_checkpoint_round_trip() {
        let records: Vec<Bytes> = (0..2500).map(|i| Bytes::from(format!("r{i}"))).collect();
        let content = snapshot_bytes(&records, 3, 7);
        assert_eq!(snapshot_records(content).unwrap(), records);
        assert!(snapshot_records(snapshot_bytes(&[], 1, 1)).unwrap().is_empty());
    }
}
