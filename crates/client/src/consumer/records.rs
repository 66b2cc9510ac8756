//! Reading RecordBatch v2 as a Fetch response carries it.
//!
//! A partition's `records` field is a run of whole batches, possibly cut
//! short at the end (the broker stops at `partition_max_bytes`), so the
//! reader stops quietly at a partial batch. Records come out as slices of
//! the response buffer (or of the decompressed batch): no copy per record.

use std::sync::Arc;

use bytes::{Buf, Bytes};
use kafka_protocol::compression::{Decompressor, Gzip, Snappy, Zstd};

use crate::error::{Error, Result};

/// Bytes before the first record: base offset through record count.
const HEADER_BYTES: usize = 61;
/// Base offset (8) and length (4): what precedes the length-counted part.
const LOG_OVERHEAD: usize = 12;

/// How a record's timestamp was set (`message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// A record as the consumer hands it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    pub timestamp_type: TimestampType,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    /// The leader epoch the batch was written in, -1 if unknown.
    pub leader_epoch: i32,
}

/// The fixed header of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub record_count: i32,
}

impl BatchHeader {
    pub fn last_offset(&self) -> i64 {
        self.base_offset.wrapping_add(i64::from(self.last_offset_delta))
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }

    fn codec(&self) -> i16 {
        self.attributes & 0x7
    }

    fn timestamp_type(&self) -> TimestampType {
        if self.attributes & 0x8 != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }
}

/// One whole batch: its header and its raw bytes (header included).
#[derive(Debug, Clone)]
pub struct Batch {
    pub header: BatchHeader,
    bytes: Bytes,
}

fn corrupt(reason: impl Into<String>) -> Error {
    Error::Protocol { addr: "fetch".into(), reason: reason.into() }
}

/// Splits `data` into whole batches; a partial batch at the end is left.
pub struct Batches {
    data: Bytes,
}

impl Batches {
    pub fn new(data: Bytes) -> Self {
        Self { data }
    }
}

impl Iterator for Batches {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        if self.data.len() < LOG_OVERHEAD {
            return None;
        }
        let length = i32::from_be_bytes(self.data[8..12].try_into().expect("4 bytes"));
        let Ok(total) = usize::try_from(length).map(|l| l + LOG_OVERHEAD) else {
            self.data.clear();
            return Some(Err(corrupt(format!("negative batch length {length}"))));
        };
        if self.data.len() < total {
            return None;
        }
        let bytes = self.data.split_to(total);
        Some(parse_header(&bytes).map(|header| Batch { header, bytes }))
    }
}

fn parse_header(bytes: &[u8]) -> Result<BatchHeader> {
    if bytes.len() < HEADER_BYTES {
        return Err(corrupt(format!("batch of {} bytes is shorter than its header", bytes.len())));
    }
    let magic = bytes[16] as i8;
    if magic != 2 {
        return Err(corrupt(format!("message format v{magic} is not supported (only v2)")));
    }
    let mut header = &bytes[..HEADER_BYTES];
    let base_offset = header.get_i64();
    header.advance(4);
    let partition_leader_epoch = header.get_i32();
    header.advance(5); // magic, crc
    Ok(BatchHeader {
        base_offset,
        partition_leader_epoch,
        attributes: header.get_i16(),
        last_offset_delta: header.get_i32(),
        base_timestamp: header.get_i64(),
        max_timestamp: header.get_i64(),
        producer_id: header.get_i64(),
        record_count: {
            header.advance(6); // producer epoch, base sequence
            header.get_i32()
        },
    })
}

impl Batch {
    /// Checks the CRC-32C over attributes through the end of the batch.
    pub fn check_crc(&self) -> Result<()> {
        let stored = u32::from_be_bytes(self.bytes[17..21].try_into().expect("4 bytes"));
        let computed = crc32c::crc32c(&self.bytes[21..]);
        if stored != computed {
            return Err(corrupt(format!(
                "batch at offset {} fails its CRC (stored {stored:#x}, computed {computed:#x})",
                self.header.base_offset
            )));
        }
        Ok(())
    }

    /// For a control batch, whether its marker is a COMMIT (else ABORT).
    pub fn is_commit_marker(&self) -> bool {
        // The single control record's key: version i16, then type i16 (1 = COMMIT).
        self.records(Arc::from(""), -1)
            .ok()
            .and_then(|mut records| records.next())
            .and_then(|r| r.ok())
            .is_some_and(|record| {
                record.key.as_deref().is_some_and(|key| key.len() >= 4 && key[2..4] == [0, 1])
            })
    }

    /// The batch's records, decompressed if need be.
    pub fn records(&self, topic: Arc<str>, partition: i32) -> Result<RecordIter> {
        let body = self.bytes.slice(HEADER_BYTES..);
        let body = match self.header.codec() {
            0 => body,
            1 => decompress::<Gzip>(body)?,
            2 => decompress::<Snappy>(body)?,
            3 => lz4_frame(&body)?,
            4 => decompress::<Zstd>(body)?,
            other => return Err(corrupt(format!("unknown compression codec {other}"))),
        };
        Ok(RecordIter {
            body,
            header: self.header,
            remaining: self.header.record_count.max(0),
            topic,
            partition,
        })
    }
}

fn decompress<D: Decompressor<Bytes, Buf = Bytes>>(mut body: Bytes) -> Result<Bytes> {
    D::decompress(&mut body, |out| Ok(std::mem::take(out)))
        .map_err(|e| corrupt(format!("cannot decompress batch: {e}")))
}

/// Decodes an LZ4 frame straight into one buffer (the common codec on
/// the consume path, so it skips the generic decompressor's extra copy).
fn lz4_frame(body: &[u8]) -> Result<Bytes> {
    let fail = |e: std::io::Error| corrupt(format!("cannot decompress lz4 batch: {e}"));
    let mut decoder = lz4::Decoder::new(body).map_err(fail)?;
    let mut out = Vec::with_capacity(body.len().saturating_mul(2));
    std::io::Read::read_to_end(&mut decoder, &mut out).map_err(fail)?;
    Ok(Bytes::from(out))
}

/// The records of one batch.
pub struct RecordIter {
    body: Bytes,
    header: BatchHeader,
    remaining: i32,
    topic: Arc<str>,
    partition: i32,
}

impl RecordIter {
    fn read_record(&mut self) -> Result<ConsumerRecord> {
        let length =
            usize::try_from(varint(&mut self.body)?).map_err(|_| corrupt("negative record length"))?;
        if self.body.len() < length {
            return Err(corrupt("record runs past its batch"));
        }
        let mut record = self.body.split_to(length);
        let _attributes = take(&mut record, 1)?;
        let timestamp_delta = varlong(&mut record)?;
        let offset_delta = varint(&mut record)?;
        let key = nullable_bytes(&mut record)?;
        let value = nullable_bytes(&mut record)?;
        let header_count = varint(&mut record)?;
        let mut headers = Vec::with_capacity(usize::try_from(header_count).unwrap_or(0).min(64));
        for _ in 0..header_count.max(0) {
            let name = nullable_bytes(&mut record)?.ok_or_else(|| corrupt("null header key"))?;
            let name = String::from_utf8(name.to_vec()).map_err(|_| corrupt("header key is not UTF-8"))?;
            headers.push((name, nullable_bytes(&mut record)?));
        }
        let header = &self.header;
        let timestamp = match header.timestamp_type() {
            TimestampType::LogAppendTime => header.max_timestamp,
            TimestampType::CreateTime => header.base_timestamp.wrapping_add(timestamp_delta),
        };
        Ok(ConsumerRecord {
            topic: self.topic.clone(),
            partition: self.partition,
            offset: header.base_offset.wrapping_add(i64::from(offset_delta)),
            timestamp,
            timestamp_type: header.timestamp_type(),
            key,
            value,
            headers,
            leader_epoch: header.partition_leader_epoch,
        })
    }
}

impl Iterator for RecordIter {
    type Item = Result<ConsumerRecord>;

    fn next(&mut self) -> Option<Result<ConsumerRecord>> {
        if self.remaining <= 0 {
            return None;
        }
        self.remaining -= 1;
        let record = self.read_record();
        if record.is_err() {
            self.remaining = 0;
        }
        Some(record)
    }
}

fn take(buf: &mut Bytes, n: usize) -> Result<Bytes> {
    if buf.len() < n {
        return Err(corrupt("record is truncated"));
    }
    Ok(buf.split_to(n))
}

fn varlong(buf: &mut Bytes) -> Result<i64> {
    let mut raw = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *buf.first().ok_or_else(|| corrupt("varint is truncated"))?;
        buf.advance(1);
        raw |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
    }
    Err(corrupt("varint is longer than 10 bytes"))
}

fn varint(buf: &mut Bytes) -> Result<i32> {
    i32::try_from(varlong(buf)?).map_err(|_| corrupt("varint out of range"))
}

fn nullable_bytes(buf: &mut Bytes) -> Result<Option<Bytes>> {
    match varint(buf)? {
        -1 => Ok(None),
        n if n < 0 => Err(corrupt(format!("negative length {n}"))),
        n => take(buf, n as usize).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producer::batch::{BatchBuilder, ProducerIdentity};
    use kafka_protocol::records::Compression;

    fn batch(base_offset: i64, compression: Compression, values: &[&str]) -> Bytes {
        let mut builder = BatchBuilder::with_capacity(1024);
        for (i, value) in values.iter().enumerate() {
            let headers: &[(&str, Option<&[u8]>)] = &[("h", Some(b"v")), ("n", None)];
            builder.append(1_000 + i as i64, Some(b"k"), Some(value.as_bytes()), headers);
        }
        let mut bytes =
            bytes::BytesMut::from(&builder.seal(compression, ProducerIdentity::NONE, -1).unwrap()[..]);
        bytes[..8].copy_from_slice(&base_offset.to_be_bytes());
        bytes.freeze()
    }

    fn values(data: Bytes) -> Vec<(i64, String)> {
        Batches::new(data)
            .flat_map(|batch| {
                let batch = batch.unwrap();
                batch.check_crc().unwrap();
                batch.records(Arc::from("t"), 0).unwrap().map(|r| {
                    let r = r.unwrap();
                    assert_eq!(r.key.as_deref(), Some(&b"k"[..]));
                    assert_eq!(r.headers, [("h".into(), Some(Bytes::from_static(b"v"))), ("n".into(), None)]);
                    (r.offset, String::from_utf8(r.value.unwrap().to_vec()).unwrap())
                })
            })
            .collect()
    }

    #[test]
    fn reads_every_codec_and_stops_at_a_partial_batch() {
        for codec in
            [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd]
        {
            let mut data = batch(10, codec, &["a", "b"]).to_vec();
            data.extend_from_slice(&batch(12, codec, &["c"]));
            let whole = values(Bytes::from(data.clone()));
            assert_eq!(whole, [(10, "a".into()), (11, "b".into()), (12, "c".into())], "{codec:?}");
            data.truncate(data.len() - 3);
            assert_eq!(values(Bytes::from(data)).len(), 2, "{codec:?}: the cut batch is left out");
        }
    }

    #[test]
    fn damage_is_an_error_never_a_panic() {
        let good = batch(0, Compression::None, &["value"]);
        let mut flipped = good.to_vec();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        let damaged = Batches::new(Bytes::from(flipped)).next().unwrap().unwrap();
        assert!(damaged.check_crc().is_err());
        for cut in HEADER_BYTES..good.len() {
            // A record section shorter than it claims, with a consistent length field.
            let mut short = good[..cut].to_vec();
            short[8..12].copy_from_slice(&((cut - LOG_OVERHEAD) as i32).to_be_bytes());
            let batch = Batches::new(Bytes::from(short)).next().unwrap().unwrap();
            let records: Vec<_> = batch.records(Arc::from("t"), 0).unwrap().collect();
            assert!(records.iter().any(|r| r.is_err()), "cut at {cut}");
        }
        let mut old = good.to_vec();
        old[16] = 1;
        assert!(Batches::new(Bytes::from(old)).next().unwrap().is_err(), "magic 1 is refused");
    }
}
