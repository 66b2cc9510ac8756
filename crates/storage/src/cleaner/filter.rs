//! What a cleaning keeps of each batch, and the batches it writes.
//!
//! Kafka's cleaner filter: a record stays when it lies past the offset map's
//! range or is the latest of its key, and a tombstone only until its batch's
//! delete horizon. A batch whose records all stay is copied byte for byte;
//! otherwise it is re-encoded with the records that stay, keeping its base
//! and last offset, producer fields, codec and flags. A batch emptied of
//! records still stays, as a bare header, when it is the last of its
//! producer or of the round.

use std::collections::HashMap;

use super::OffsetMap;
use crate::batch::{self, BatchHeader, TimestampType, HEADER_LEN, LOG_OVERHEAD};
use crate::error::Result;
use crate::records::{self, RecordView, Records};

/// Attribute bit 6: the batch's base timestamp is its delete horizon.
pub(super) const DELETE_HORIZON_BIT: i16 = 0x40;
/// The attribute bits an emptied batch keeps: timestamp type, transactional, control.
const EMPTY_BATCH_ATTRIBUTES: i16 = 0x08 | 0x10 | 0x20;

/// What decides, record by record, what a cleaning keeps.
pub(super) struct Retention<'a> {
    pub map: &'a OffsetMap,
    /// Producer id → last offset of its last batch in the mapped section.
    pub last_batch_of_producer: &'a HashMap<i64, i64>,
    /// The first uncleanable offset: the round's last batch ends there.
    pub upper_bound: i64,
    pub now_ms: i64,
    pub delete_retention_ms: i64,
}

impl Retention<'_> {
    /// Whether a batch emptied of records must still be written: the last
    /// batch of a producer (its sequence and epoch), or of the round (the
    /// log's last offset).
    fn keeps_empty(&self, header: &BatchHeader) -> bool {
        let last_of_producer = header.producer_id >= 0
            && self
                .last_batch_of_producer
                .get(&header.producer_id)
                .is_none_or(|last| *last == header.last_offset());
        last_of_producer || header.next_offset() == self.upper_bound
    }

    fn keeps(&self, record: &RecordView<'_>, offset: i64, keep_tombstones: bool) -> bool {
        if offset > self.map.latest_offset() {
            return true;
        }
        // Records without a key cannot be compacted; Kafka drops them.
        let Some(key) = record.key else { return false };
        let latest = self.map.get(key).unwrap_or(-1);
        offset >= latest && (record.value.is_some() || keep_tombstones)
    }
}

fn put_i16(buf: &mut [u8], at: usize, value: i16) {
    buf[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

fn put_i32(buf: &mut [u8], at: usize, value: i32) {
    buf[at..at + 4].copy_from_slice(&value.to_be_bytes());
}

fn put_i64(buf: &mut [u8], at: usize, value: i64) {
    buf[at..at + 8].copy_from_slice(&value.to_be_bytes());
}

/// Sets the length and CRC of the batch occupying `batch`.
fn seal(batch: &mut [u8]) {
    put_i32(batch, batch::LENGTH, (batch.len() - LOG_OVERHEAD) as i32);
    let crc = batch::compute_crc(batch);
    batch[batch::CRC..batch::CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// A batch without records that keeps `header`'s offsets and producer
/// fields, as Kafka writes one.
fn write_empty_batch(header: &BatchHeader, raw: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&raw[..HEADER_LEN]);
    let batch = &mut out[start..];
    put_i16(batch, batch::ATTRIBUTES, header.attributes & EMPTY_BATCH_ATTRIBUTES);
    put_i64(batch, batch::BASE_TIMESTAMP, header.max_timestamp);
    put_i32(batch, batch::RECORDS_COUNT, 0);
    seal(batch);
}

/// `raw` with only `kept` of its records, re-encoded with the batch's codec.
/// With `new_horizon` the base timestamp becomes the delete horizon and the
/// record timestamp deltas move to match.
fn write_retained(
    header: &BatchHeader,
    raw: &[u8],
    kept: &[RecordView<'_>],
    new_horizon: Option<i64>,
    scratch: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Result<()> {
    let base_timestamp = new_horizon.unwrap_or(header.base_timestamp);
    scratch.clear();
    let mut max_timestamp = i64::MIN;
    for record in kept {
        let timestamp = header.base_timestamp.saturating_add(record.timestamp_delta);
        max_timestamp = max_timestamp.max(timestamp);
        if new_horizon.is_some() {
            record.write_with_timestamp_delta(timestamp.wrapping_sub(base_timestamp), scratch);
        } else {
            scratch.extend_from_slice(record.bytes);
        }
    }
    if header.timestamp_type() == TimestampType::LogAppendTime {
        max_timestamp = header.max_timestamp;
    }
    let start = out.len();
    out.extend_from_slice(&raw[..HEADER_LEN]);
    if let Err(e) = records::compress_into(header.compression(), scratch, out) {
        out.truncate(start);
        return Err(e);
    }
    let batch = &mut out[start..];
    let attributes = header.attributes | if new_horizon.is_some() { DELETE_HORIZON_BIT } else { 0 };
    put_i16(batch, batch::ATTRIBUTES, attributes);
    put_i64(batch, batch::BASE_TIMESTAMP, base_timestamp);
    put_i64(batch, batch::MAX_TIMESTAMP, max_timestamp);
    put_i32(batch, batch::RECORDS_COUNT, kept.len() as i32);
    seal(batch);
    Ok(())
}

/// Writes to `out` what `retention` keeps of one batch. Returns the records
/// read and kept.
pub(super) fn filter_batch(
    raw: &[u8],
    header: &BatchHeader,
    retention: &Retention<'_>,
    scratch: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Result<(u64, u64)> {
    let count = u64::try_from(header.records_count).unwrap_or(0);
    // Transaction markers stay (Kafka removes them once their transaction's
    // data is gone; this cleaner keeps that data).
    if header.is_control() {
        out.extend_from_slice(raw);
        return Ok((count, count));
    }
    let horizon = (header.attributes & DELETE_HORIZON_BIT != 0).then_some(header.base_timestamp);
    let keep_tombstones = horizon.is_none_or(|h| retention.now_ms < h);
    let body = records::records_body(raw, header)?;
    let mut kept = Vec::new();
    let mut read = 0u64;
    let mut tombstones = false;
    for record in Records::new(&body) {
        let record = record?;
        read += 1;
        let offset = header.base_offset + i64::from(record.offset_delta);
        if retention.keeps(&record, offset, keep_tombstones) {
            tombstones |= record.value.is_none();
            kept.push(record);
        }
    }
    if kept.is_empty() {
        if retention.keeps_empty(header) {
            write_empty_batch(header, raw, out);
        }
        return Ok((read, 0));
    }
    let new_horizon = (tombstones && horizon.is_none())
        .then(|| retention.now_ms.saturating_add(retention.delete_retention_ms));
    if kept.len() as u64 == read && new_horizon.is_none() {
        out.extend_from_slice(raw);
    } else {
        write_retained(header, raw, &kept, new_horizon, scratch, out)?;
    }
    Ok((read, kept.len() as u64))
}
