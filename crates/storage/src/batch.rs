//! RecordBatch v2, read in place.
//!
//! The broker never decodes a batch into records on the fetch path, nor a
//! compressed one on the append path unless a rule needs its records: it
//! reads the fixed 61-byte header, checks it, and rewrites the few fields the
//! broker owns (base offset, partition leader epoch and, when it differs from
//! what the producer wrote, the max timestamp, as Kafka stores it, with the
//! CRC that covers it). Everything else stays byte for byte as the producer
//! sent it.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
};

use crate::error::{Result, StorageError};

/// Offset of `base_offset` (i64).
pub const BASE_OFFSET: usize = 0;
/// Offset of `batch_length` (i32): the bytes that follow this field.
pub const LENGTH: usize = 8;
/// Offset of `partition_leader_epoch` (i32).
pub const PARTITION_LEADER_EPOCH: usize = 12;
/// Offset of `magic` (i8).
pub const MAGIC: usize = 16;
/// Offset of `crc` (u32, CRC-32C of everything from `attributes` on).
pub const CRC: usize = 17;
/// Offset of `attributes` (i16).
pub const ATTRIBUTES: usize = 21;
/// Offset of `last_offset_delta` (i32).
pub const LAST_OFFSET_DELTA: usize = 23;
/// Offset of `base_timestamp` (i64).
pub const BASE_TIMESTAMP: usize = 27;
/// Offset of `max_timestamp` (i64).
pub const MAX_TIMESTAMP: usize = 35;
/// Offset of `producer_id` (i64).
pub const PRODUCER_ID: usize = 43;
/// Offset of `producer_epoch` (i16).
pub const PRODUCER_EPOCH: usize = 51;
/// Offset of `base_sequence` (i32).
pub const BASE_SEQUENCE: usize = 53;
/// Offset of `records_count` (i32).
pub const RECORDS_COUNT: usize = 57;
/// Size of the batch header; records start here.
pub const HEADER_LEN: usize = 61;
/// Size of `base_offset` plus `batch_length`, the part not counted by `batch_length`.
pub const LOG_OVERHEAD: usize = 12;
/// The only record format Strom accepts and stores.
pub const MAGIC_V2: i8 = 2;

const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_BIT: i16 = 0x08;
const TRANSACTIONAL_BIT: i16 = 0x10;
const CONTROL_BIT: i16 = 0x20;
const DELETE_HORIZON_BIT: i16 = 0x40;
/// Sequence of a batch whose producer is not idempotent.
pub const NO_SEQUENCE: i32 = -1;

/// How the broker stamps batch timestamps (`message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    /// Keep the producer's timestamps.
    CreateTime,
    /// Overwrite the batch max timestamp with the broker's clock at append.
    LogAppendTime,
}

impl std::str::FromStr for TimestampType {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "CreateTime" => Ok(Self::CreateTime),
            "LogAppendTime" => Ok(Self::LogAppendTime),
            other => Err(format!("expected CreateTime or LogAppendTime, got {other:?}")),
        }
    }
}

/// The decoded fixed header of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Length of the whole batch including the 12-byte log overhead.
    pub size: usize,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

/// A big-endian integer at `at`; the caller has checked the length.
pub fn i16_at(buf: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([buf[at], buf[at + 1]])
}

/// A big-endian integer at `at`; the caller has checked the length.
pub fn i32_at(buf: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

/// A big-endian integer at `at`; the caller has checked the length.
pub fn i64_at(buf: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

/// Reads the total size of the batch starting at `buf`, from its first 12 bytes.
/// `None` when fewer than 12 bytes are given; an error when the length is too
/// small to hold a header.
pub fn batch_size(buf: &[u8]) -> Option<Result<usize>> {
    if buf.len() < LOG_OVERHEAD {
        return None;
    }
    let length = i32_at(buf, LENGTH);
    if length < (HEADER_LEN - LOG_OVERHEAD) as i32 {
        return Some(Err(StorageError::CorruptRecord(format!(
            "batch length {length} is smaller than a batch header"
        ))));
    }
    Some(Ok(LOG_OVERHEAD + length as usize))
}

impl BatchHeader {
    /// Parses the header of the batch at the start of `buf`, which must hold at
    /// least [`HEADER_LEN`] bytes.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        if buf.len() < HEADER_LEN {
            return Err(StorageError::CorruptRecord(format!(
                "{} bytes cannot hold a record batch header",
                buf.len()
            )));
        }
        let size = batch_size(buf).expect("length checked")?;
        Ok(Self {
            base_offset: i64_at(buf, BASE_OFFSET),
            size,
            partition_leader_epoch: i32_at(buf, PARTITION_LEADER_EPOCH),
            magic: buf[MAGIC] as i8,
            crc: u32::from_be_bytes(buf[CRC..CRC + 4].try_into().expect("4 bytes")),
            attributes: i16_at(buf, ATTRIBUTES),
            last_offset_delta: i32_at(buf, LAST_OFFSET_DELTA),
            base_timestamp: i64_at(buf, BASE_TIMESTAMP),
            max_timestamp: i64_at(buf, MAX_TIMESTAMP),
            producer_id: i64_at(buf, PRODUCER_ID),
            producer_epoch: i16_at(buf, PRODUCER_EPOCH),
            base_sequence: i32_at(buf, BASE_SEQUENCE),
            records_count: i32_at(buf, RECORDS_COUNT),
        })
    }

    /// Wrapping, so that a damaged header read by recovery or `dump-log` cannot panic.
    pub fn last_offset(&self) -> i64 {
        self.base_offset.wrapping_add(i64::from(self.last_offset_delta))
    }

    pub fn next_offset(&self) -> i64 {
        self.last_offset().wrapping_add(1)
    }

    /// The codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    pub fn compression(&self) -> i16 {
        self.attributes & COMPRESSION_MASK
    }

    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & TIMESTAMP_TYPE_BIT != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }

    /// Set by the log cleaner: the base timestamp then holds the time after
    /// which the batch's tombstones and markers may be removed.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & DELETE_HORIZON_BIT != 0).then_some(self.base_timestamp)
    }

    /// The sequence of the last record, wrapping past `i32::MAX` to 0 as Kafka does.
    pub fn last_sequence(&self) -> i32 {
        self.record_sequence(self.last_offset_delta)
    }

    /// The sequence of the record at `offset_delta`, wrapping as Kafka does.
    pub fn record_sequence(&self, offset_delta: i32) -> i32 {
        if self.base_sequence == NO_SEQUENCE {
            return NO_SEQUENCE;
        }
        increment_sequence(self.base_sequence, offset_delta)
    }

    /// The timestamp of the record at `timestamp_delta`: the batch's max
    /// timestamp under LogAppendTime, as Kafka reports it.
    pub fn record_timestamp(&self, timestamp_delta: i64) -> i64 {
        match self.timestamp_type() {
            TimestampType::LogAppendTime => self.max_timestamp,
            TimestampType::CreateTime => self.base_timestamp.wrapping_add(timestamp_delta),
        }
    }
}

/// Kafka's sequence arithmetic: sequences run from 0 to `i32::MAX`, then wrap to 0.
/// Computed in `i64` so that values read from a damaged file cannot overflow.
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    let next = i64::from(sequence) + i64::from(increment);
    let wrapped = if next > i64::from(i32::MAX) { next - i64::from(i32::MAX) - 1 } else { next };
    wrapped as i32
}

/// The inverse of [`increment_sequence`].
pub fn decrement_sequence(sequence: i32, decrement: i32) -> i32 {
    let previous = i64::from(sequence) - i64::from(decrement);
    let wrapped = if previous < 0 { previous + i64::from(i32::MAX) + 1 } else { previous };
    wrapped as i32
}

/// CRC-32C over the part of the batch the CRC field covers.
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[ATTRIBUTES..])
}

/// Checks a stored batch (magic and CRC); used by recovery and `dump-log`.
pub fn verify_stored(batch: &[u8]) -> Result<BatchHeader> {
    let header = BatchHeader::parse(batch)?;
    if header.size != batch.len() {
        return Err(StorageError::CorruptRecord("batch is truncated".into()));
    }
    if header.magic != MAGIC_V2 {
        return Err(StorageError::CorruptRecord(format!("unsupported magic {}", header.magic)));
    }
    if compute_crc(batch) != header.crc {
        return Err(StorageError::CorruptRecord(format!(
            "CRC mismatch in batch at base offset {}",
            header.base_offset
        )));
    }
    if header.last_offset_delta < 0 {
        return Err(StorageError::CorruptRecord("negative last offset delta".into()));
    }
    Ok(header)
}

/// Walks a buffer of whole batches, yielding each batch's bytes.
pub struct Batches<'a> {
    buf: &'a [u8],
}

impl<'a> Batches<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    /// Bytes not yet yielded; non-empty after the iterator ends when the buffer
    /// held a partial or corrupt batch.
    pub fn remaining(&self) -> &'a [u8] {
        self.buf
    }
}

impl<'a> Iterator for Batches<'a> {
    type Item = Result<&'a [u8]>;

    fn next(&mut self) -> Option<Self::Item> {
        let size = match batch_size(self.buf)? {
            Ok(size) => size,
            Err(e) => return Some(Err(e)),
        };
        if size > self.buf.len() {
            return None;
        }
        let (batch, rest) = self.buf.split_at(size);
        self.buf = rest;
        Some(Ok(batch))
    }
}

/// Counts the records of an uncompressed batch by walking their length
/// prefixes, checking that they exactly fill the batch.
pub fn count_uncompressed_records(batch: &[u8]) -> Result<usize> {
    let mut rest = &batch[HEADER_LEN..];
    let mut count = 0;
    while !rest.is_empty() {
        let (length, used) =
            read_varint(rest).ok_or_else(|| StorageError::InvalidRecord("truncated record length".into()))?;
        let length = usize::try_from(length)
            .map_err(|_| StorageError::InvalidRecord(format!("negative record length {length}")))?;
        let end = used
            .checked_add(length)
            .filter(|end| *end <= rest.len())
            .ok_or_else(|| StorageError::InvalidRecord("record overruns its batch".into()))?;
        rest = &rest[end..];
        count += 1;
    }
    Ok(count)
}

/// Reads a zig-zag varint (Kafka's `varint`), returning the value and the bytes used.
pub fn read_varint(buf: &[u8]) -> Option<(i64, usize)> {
    let (raw, used) = read_uvarint(buf)?;
    Some((((raw >> 1) as i64) ^ -((raw & 1) as i64), used))
}

/// Reads an unsigned varint (Kafka's `unsigned_varint`, seven bits a byte,
/// low bits first) of at most ten bytes, returning the value and the bytes
/// used; `None` if `buf` ends first. Readers of a shorter kind bound `buf`.
pub fn read_uvarint(buf: &[u8]) -> Option<(u64, usize)> {
    let mut value: u64 = 0;
    for (i, byte) in buf.iter().take(10).enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// What the broker writes over a producer's batch header before storing it.
#[derive(Debug, Clone, Copy)]
pub struct HeaderRewrite {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    /// The LogAppendTime to stamp, if the log uses it.
    pub log_append_time: Option<i64>,
    /// Otherwise, the largest timestamp of the batch's records, which Kafka
    /// stores whatever the producer wrote there.
    pub records_max_timestamp: i64,
}

/// Rewrites the broker-owned fields of `header` (the first [`HEADER_LEN`]
/// bytes of `batch`, copied) in place; returns the new max timestamp.
/// `batch` is the original batch, used to recompute the CRC when the
/// timestamp changes.
pub fn rewrite_header(header: &mut [u8; HEADER_LEN], batch: &[u8], rewrite: HeaderRewrite) -> i64 {
    header[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&rewrite.base_offset.to_be_bytes());
    header[PARTITION_LEADER_EPOCH..PARTITION_LEADER_EPOCH + 4]
        .copy_from_slice(&rewrite.partition_leader_epoch.to_be_bytes());
    let attributes = i16_at(header, ATTRIBUTES);
    let (max_timestamp, attributes) = match rewrite.log_append_time {
        Some(now) => (now, attributes | TIMESTAMP_TYPE_BIT),
        None => (rewrite.records_max_timestamp, attributes),
    };
    if max_timestamp == i64_at(header, MAX_TIMESTAMP) && attributes == i16_at(header, ATTRIBUTES) {
        return max_timestamp;
    }
    header[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    header[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&max_timestamp.to_be_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&header[ATTRIBUTES..]), &batch[HEADER_LEN..]);
    header[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    max_timestamp
}

/// Encodes key/value pairs as one uncompressed batch, for records the broker
/// writes itself (metadata, group offsets). Offsets start at 0; the log
/// assigns the real ones on append.
pub fn encode_batch(entries: &[(Option<Bytes>, Option<Bytes>)], timestamp_ms: i64) -> Bytes {
    let records = entries.iter().map(|(key, value)| (key.clone(), value.clone(), timestamp_ms));
    encode_records(records, Compression::None)
}

/// Encodes (key, value, timestamp) triples as one uncompressed
/// transactional batch of `producer_id` at `epoch`, without sequence: the
/// broker's own writes inside a producer's transaction (TxnOffsetCommit).
pub fn encode_transactional(
    entries: impl IntoIterator<Item = (Option<Bytes>, Option<Bytes>, i64)>,
    producer_id: i64,
    epoch: i16,
) -> Bytes {
    let records: Vec<Record> = entries
        .into_iter()
        .enumerate()
        .map(|(i, (key, value, timestamp))| Record {
            transactional: true,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch: epoch,
            timestamp_type: kafka_protocol::records::TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32 - 1,
            timestamp,
            key,
            value,
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encoding into memory cannot fail");
    buf.freeze()
}

/// Encodes (key, value, timestamp) triples as one batch with `compression`.
pub fn encode_records(
    entries: impl IntoIterator<Item = (Option<Bytes>, Option<Bytes>, i64)>,
    compression: Compression,
) -> Bytes {
    let records: Vec<Record> = entries
        .into_iter()
        .enumerate()
        .map(|(i, (key, value, timestamp))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: kafka_protocol::records::TimestampType::Creation,
            offset: i as i64,
            // The encoder splits batches where offset minus sequence changes.
            sequence: i as i32 - 1,
            timestamp,
            key,
            value,
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression };
    RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encoding into memory cannot fail");
    buf.freeze()
}

/// What a transaction marker (a control batch) ends its transaction with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    Abort,
    Commit,
}

impl ControlType {
    /// The record key Kafka writes: version 0, then the type (0 abort, 1 commit).
    pub fn key(self) -> [u8; 4] {
        [0, 0, 0, if self == Self::Commit { 1 } else { 0 }]
    }

    fn from_key(key: &[u8]) -> Option<Self> {
        match key {
            [_, _, 0, 0, ..] => Some(Self::Abort),
            [_, _, 0, 1, ..] => Some(Self::Commit),
            _ => None,
        }
    }
}

/// What a transaction marker says: how the transaction ended, and the epoch
/// of the coordinator that wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxnMarker {
    pub control: ControlType,
    pub coordinator_epoch: i32,
}

/// The marker in the control batch `raw` (whole, uncompressed as Kafka
/// writes markers), read from its first record. `None` for anything else.
pub fn end_txn_marker(raw: &[u8]) -> Option<EndTxnMarker> {
    let header = BatchHeader::parse(raw).ok()?;
    if !header.is_control() || header.compression() != 0 {
        return None;
    }
    let mut rest = raw.get(HEADER_LEN..)?;
    // Record: length, attributes (one byte), timestamp delta, offset delta,
    // key length, key, value length, value.
    let (_, used) = read_varint(rest)?;
    rest = rest.get(used + 1..)?;
    for _ in 0..2 {
        let (_, used) = read_varint(rest)?;
        rest = rest.get(used..)?;
    }
    let (key_len, used) = read_varint(rest)?;
    let key_end = used + usize::try_from(key_len).ok()?;
    let control = ControlType::from_key(rest.get(used..key_end)?)?;
    rest = rest.get(key_end..)?;
    let (value_len, used) = read_varint(rest)?;
    // Value: version (int16), coordinator epoch (int32).
    let coordinator_epoch = match rest.get(used..used + usize::try_from(value_len).unwrap_or(0)) {
        Some(value) if value.len() >= 6 => i32::from_be_bytes(value[2..6].try_into().expect("4 bytes")),
        _ => -1,
    };
    Some(EndTxnMarker { control, coordinator_epoch })
}

/// A transaction marker of `producer_id` at `epoch`, as the coordinator
/// writes it: one control record whose value is version 0 and the
/// coordinator epoch.
pub fn encode_marker(
    control: ControlType,
    producer_id: i64,
    epoch: i16,
    coordinator_epoch: i32,
    timestamp_ms: i64,
) -> Bytes {
    let mut value = BytesMut::with_capacity(6);
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    let record = Record {
        transactional: true,
        control: true,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id,
        producer_epoch: epoch,
        timestamp_type: kafka_protocol::records::TimestampType::Creation,
        offset: 0,
        sequence: NO_SEQUENCE,
        timestamp: timestamp_ms,
        key: Some(Bytes::copy_from_slice(&control.key())),
        value: Some(value.freeze()),
        headers: Default::default(),
    };
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut buf, &[record], &options).expect("encoding into memory cannot fail");
    buf.freeze()
}

/// Decodes every record of a buffer of whole batches.
pub fn decode_records(mut bytes: Bytes) -> Result<Vec<Record>> {
    let mut records = Vec::new();
    while !bytes.is_empty() {
        let set = RecordBatchDecoder::decode(&mut bytes)
            .map_err(|e| StorageError::CorruptRecord(format!("undecodable batch: {e}")))?;
        records.extend(set.records);
    }
    Ok(records)
}

#[cfg(test)]
pub(crate) mod test_support {
    use kafka_protocol::records::Compression;

    /// Encodes one batch of `count` records with consecutive timestamps.
    pub fn batch(count: usize, first_timestamp: i64, compression: Compression) -> Vec<u8> {
        let records = (0..count).map(|i| {
            let key = Some(format!("key-{i}").into_bytes().into());
            let value = Some(vec![b'v'; 10 + i % 7].into());
            (key, value, first_timestamp + i as i64)
        });
        super::encode_records(records, compression).to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::batch;
    use super::*;
    use kafka_protocol::records::Compression;

    #[test]
    fn parses_an_encoded_batch() {
        let bytes = batch(3, 1_000, Compression::None);
        let header = verify_stored(&bytes).unwrap();
        assert_eq!(header.records_count, 3);
        assert_eq!(header.last_offset_delta, 2);
        assert_eq!(header.max_timestamp, 1_002);
        assert_eq!(count_uncompressed_records(&bytes).unwrap(), 3);
    }

    #[test]
    fn flipped_byte_fails_the_crc() {
        let mut bytes = batch(3, 1_000, Compression::None);
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        assert!(verify_stored(&bytes).is_err());
    }

    #[test]
    fn log_append_time_rewrite_keeps_the_crc_valid() {
        let bytes = batch(2, 5, Compression::Lz4);
        let mut header: [u8; HEADER_LEN] = bytes[..HEADER_LEN].try_into().unwrap();
        let rewrite = HeaderRewrite {
            base_offset: 42,
            partition_leader_epoch: 7,
            log_append_time: Some(99),
            records_max_timestamp: 6,
        };
        assert_eq!(rewrite_header(&mut header, &bytes, rewrite), 99);
        let mut stored = header.to_vec();
        stored.extend_from_slice(&bytes[HEADER_LEN..]);
        let parsed = verify_stored(&stored).unwrap();
        assert_eq!(parsed.base_offset, 42);
        assert_eq!(parsed.partition_leader_epoch, 7);
        assert_eq!(parsed.timestamp_type(), TimestampType::LogAppendTime);
        assert_eq!(parsed.max_timestamp, 99);
    }

    #[test]
    fn sequences_wrap_at_i32_max_like_kafka() {
        assert_eq!(increment_sequence(5, 3), 8);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(decrement_sequence(1, 3), i32::MAX - 1);
        assert_eq!(decrement_sequence(8, 3), 5);
        let mut header = BatchHeader::parse(&batch(3, 0, Compression::None)).unwrap();
        assert_eq!(header.last_sequence(), NO_SEQUENCE, "no producer, no sequence");
        header.base_sequence = i32::MAX;
        assert_eq!(header.last_sequence(), 1);
    }

    #[test]
    fn varints_round_trip_kafka_zigzag() {
        assert_eq!(read_varint(&[0x00]), Some((0, 1)));
        assert_eq!(read_varint(&[0x01]), Some((-1, 1)));
        assert_eq!(read_varint(&[0x02]), Some((1, 1)));
        assert_eq!(read_varint(&[0x96, 0x01]), Some((75, 2)));
        assert_eq!(read_varint(&[0x80]), None);
    }

    #[test]
    fn unsigned_varints_read_seven_bits_a_byte() {
        assert_eq!(read_uvarint(&[0x00, 0xff]), Some((0, 1)));
        assert_eq!(read_uvarint(&[0x96, 0x01]), Some((150, 2)));
        assert_eq!(read_uvarint(&[0xff, 0xff, 0xff, 0xff, 0x0f]), Some((u64::from(u32::MAX), 5)));
        assert_eq!(read_uvarint(&[0xff; 9]), None, "ends inside the varint");
        assert_eq!(read_uvarint(&[0xff; 11]), None, "longer than ten bytes");
    }
}
