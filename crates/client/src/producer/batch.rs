//! RecordBatch v2, built one record at a time.
//!
//! Records are encoded straight into the batch's buffer as they are sent
//! (as Java's `MemoryRecordsBuilder` does), so the producer holds no
//! per-record structs and knows each batch's exact size for `batch.size`.
//! Sealing writes the 61-byte header and, for a codec, compresses the
//! records section with `kafka-protocol`'s compressors.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Gzip, Snappy, Zstd};
use kafka_protocol::records::Compression;

use crate::error::{Error, Result};

/// Bytes before the first record: base offset through record count.
pub const BATCH_HEADER_BYTES: usize = 61;
const MAGIC: i8 = 2;
/// Offset of the attributes field, where the CRC'd region begins.
const ATTRIBUTES_AT: usize = 21;

/// A record header: a key and a possibly null value.
pub type Header<'a> = (&'a str, Option<&'a [u8]>);

/// Who wrote a batch, for idempotence; `NONE` without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdentity {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

impl ProducerIdentity {
    pub const NONE: Self = Self { producer_id: -1, producer_epoch: -1 };
}

/// An open batch: room for the header, then the encoded records.
#[derive(Debug)]
pub struct BatchBuilder {
    /// `BATCH_HEADER_BYTES` reserved for the header, then the records, so
    /// an uncompressed batch is sealed in place without a copy.
    buffer: BytesMut,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
}

impl BatchBuilder {
    pub fn with_capacity(bytes: usize) -> Self {
        Self::from_buffer(BytesMut::with_capacity(bytes.max(BATCH_HEADER_BYTES)))
    }

    /// A builder writing into a recycled buffer.
    pub fn from_buffer(mut buffer: BytesMut) -> Self {
        buffer.clear();
        buffer.put_bytes(0, BATCH_HEADER_BYTES);
        Self { buffer, count: 0, base_timestamp: 0, max_timestamp: i64::MIN }
    }

    /// The buffer, unless sealing already took it.
    pub fn take_buffer(&mut self) -> Option<BytesMut> {
        (self.buffer.capacity() > 0).then(|| std::mem::take(&mut self.buffer))
    }

    pub fn record_count(&self) -> i32 {
        self.count
    }

    /// The uncompressed size of the batch so far, header included.
    pub fn size_bytes(&self) -> usize {
        self.buffer.len()
    }

    /// The bytes `append` would add for this record.
    pub fn record_size(
        &self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> usize {
        let base = if self.count == 0 { timestamp } else { self.base_timestamp };
        encoded_record_size(timestamp - base, self.count, key, value, headers)
    }

    /// Appends one record; its offset delta is the number already in.
    pub fn append(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) {
        if self.count == 0 {
            self.base_timestamp = timestamp;
        }
        self.max_timestamp = self.max_timestamp.max(timestamp);
        let timestamp_delta = timestamp - self.base_timestamp;
        let body = body_size(timestamp_delta, self.count, key, value, headers);
        let out = &mut self.buffer;
        out.reserve(varint_size(body as i64) + body);
        put_varint(out, body as i64);
        out.put_i8(0); // record attributes: unused in v2
        put_varint(out, timestamp_delta);
        put_varint(out, i64::from(self.count));
        put_nullable_bytes(out, key);
        put_nullable_bytes(out, value);
        put_varint(out, headers.len() as i64);
        for (name, value) in headers {
            put_nullable_bytes(out, Some(name.as_bytes()));
            put_nullable_bytes(out, *value);
        }
        self.count += 1;
    }

    /// The finished batch: header, CRC and (compressed) records. Takes the
    /// buffer: a builder is sealed once (a retry resends the sealed bytes).
    pub fn seal(
        &mut self,
        compression: Compression,
        identity: ProducerIdentity,
        base_sequence: i32,
    ) -> Result<Bytes> {
        let mut batch = match compression {
            Compression::None => std::mem::take(&mut self.buffer),
            codec => {
                let mut out = BytesMut::with_capacity(self.buffer.len() / 2 + BATCH_HEADER_BYTES);
                out.put_bytes(0, BATCH_HEADER_BYTES);
                compress_into(&mut out, &self.buffer[BATCH_HEADER_BYTES..], codec)?;
                out
            }
        };
        self.write_header(&mut batch, compression, identity, base_sequence);
        Ok(batch.freeze())
    }

    /// Fills the reserved header bytes, the CRC last since it covers them.
    fn write_header(
        &self,
        batch: &mut BytesMut,
        compression: Compression,
        identity: ProducerIdentity,
        base_sequence: i32,
    ) {
        let batch_length = (batch.len() - 12) as i32;
        let mut header = &mut batch[..BATCH_HEADER_BYTES];
        header.put_i64(0); // base offset: the broker assigns it
        header.put_i32(batch_length);
        header.put_i32(-1); // partition leader epoch: the broker sets it
        header.put_i8(MAGIC);
        header.put_u32(0); // CRC, filled in below
        header.put_i16(compression as i16); // attributes: codec, CreateTime, not transactional
        header.put_i32(self.count - 1); // last offset delta
        header.put_i64(self.base_timestamp);
        header.put_i64(self.max_timestamp);
        header.put_i64(identity.producer_id);
        header.put_i16(identity.producer_epoch);
        header.put_i32(base_sequence);
        header.put_i32(self.count);
        let crc = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
    }
}

/// The bytes of one encoded record, length prefix included.
pub fn encoded_record_size(
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header<'_>],
) -> usize {
    let body = body_size(timestamp_delta, offset_delta, key, value, headers);
    varint_size(body as i64) + body
}

fn body_size(
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header<'_>],
) -> usize {
    let headers_size: usize = headers
        .iter()
        .map(|(name, value)| nullable_bytes_size(Some(name.as_bytes())) + nullable_bytes_size(*value))
        .sum();
    1 + varint_size(timestamp_delta)
        + varint_size(i64::from(offset_delta))
        + nullable_bytes_size(key)
        + nullable_bytes_size(value)
        + varint_size(headers.len() as i64)
        + headers_size
}

/// A sealed batch under a new producer identity and base sequence, its
/// CRC recomputed: how a retry goes out after an epoch bump.
pub fn restamp(sealed: &[u8], identity: ProducerIdentity, base_sequence: i32) -> Bytes {
    let mut batch = BytesMut::from(sealed);
    batch[43..51].copy_from_slice(&identity.producer_id.to_be_bytes());
    batch[51..53].copy_from_slice(&identity.producer_epoch.to_be_bytes());
    batch[53..57].copy_from_slice(&base_sequence.to_be_bytes());
    let crc = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    batch.freeze()
}

fn compress_into(out: &mut BytesMut, records: &[u8], compression: Compression) -> Result<()> {
    let copy = |buf: &mut BytesMut| {
        buf.put_slice(records);
        Ok(())
    };
    let result = match compression {
        Compression::None => copy(out),
        Compression::Gzip => Gzip::compress(out, copy),
        Compression::Snappy => Snappy::compress(out, copy),
        Compression::Lz4 => lz4_fast(out, records).map_err(Into::into),
        Compression::Zstd => Zstd::compress(out, copy),
    };
    result.map_err(|e| Error::InvalidRequest(format!("{compression:?} compression failed: {e}")))
}

/// An LZ4 frame of independent 64 KiB blocks in LZ4's fast mode, the
/// default of the Java client and librdkafka. (Levels of 3 and up select
/// the high-compression mode, several times slower to write.)
fn lz4_fast(out: &mut BytesMut, records: &[u8]) -> std::io::Result<()> {
    let mut encoder =
        lz4::EncoderBuilder::new().level(0).block_mode(lz4::BlockMode::Independent).build(out.writer())?;
    std::io::Write::write_all(&mut encoder, records)?;
    encoder.finish().1
}

/// Parses `compression.type` (Kafka's names).
pub fn parse_compression(name: &str) -> Result<Compression> {
    match name.trim().to_ascii_lowercase().as_str() {
        "none" | "uncompressed" => Ok(Compression::None),
        "gzip" => Ok(Compression::Gzip),
        "snappy" => Ok(Compression::Snappy),
        "lz4" => Ok(Compression::Lz4),
        "zstd" => Ok(Compression::Zstd),
        other => Err(Error::Config(format!(
            "compression.type={other} is not one of none, gzip, snappy, lz4, zstd"
        ))),
    }
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn varint_size(value: i64) -> usize {
    let bits = 64 - (zigzag(value) | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

fn put_varint(out: &mut BytesMut, value: i64) {
    let mut v = zigzag(value);
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

fn nullable_bytes_size(bytes: Option<&[u8]>) -> usize {
    match bytes {
        None => varint_size(-1),
        Some(b) => varint_size(b.len() as i64) + b.len(),
    }
}

fn put_nullable_bytes(out: &mut BytesMut, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i64);
            out.put_slice(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::indexmap::IndexMap;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    /// Timestamps do not decrease here: kafka-protocol takes the smallest
    /// as base timestamp, Java (and we) the first; both are valid v2.
    fn sample(builder: &mut BatchBuilder) {
        builder.append(1_700_000_000_000, Some(b"k1"), Some(b"v1"), &[]);
        builder.append(1_700_000_000_010, None, Some(&[7u8; 300]), &[("h", Some(b"x")), ("n", None)]);
        builder.append(1_700_000_000_500, Some(b""), None, &[]);
    }

    fn reference_records() -> Vec<Record> {
        let record = |offset: i64,
                      timestamp,
                      key: Option<&[u8]>,
                      value: Option<&[u8]>,
                      headers: IndexMap<StrBytes, Option<Bytes>>| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: 9,
            producer_epoch: 2,
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: 40 + offset as i32,
            timestamp,
            key: key.map(Bytes::copy_from_slice),
            value: value.map(Bytes::copy_from_slice),
            headers,
        };
        let mut headers = IndexMap::new();
        headers.insert(StrBytes::from_static_str("h"), Some(Bytes::from_static(b"x")));
        headers.insert(StrBytes::from_static_str("n"), None);
        vec![
            record(0, 1_700_000_000_000, Some(b"k1"), Some(b"v1"), IndexMap::new()),
            record(1, 1_700_000_000_010, None, Some(&[7u8; 300]), headers),
            record(2, 1_700_000_000_500, Some(b""), None, IndexMap::new()),
        ]
    }

    #[test]
    fn uncompressed_batch_is_byte_for_byte_what_kafka_protocol_encodes() {
        let mut builder = BatchBuilder::with_capacity(1024);
        sample(&mut builder);
        let size = builder.size_bytes();
        let ours = builder
            .seal(Compression::None, ProducerIdentity { producer_id: 9, producer_epoch: 2 }, 40)
            .unwrap();
        assert_eq!(ours.len(), size);

        let mut theirs = BytesMut::new();
        let options = RecordEncodeOptions { version: 2, compression: Compression::None };
        RecordBatchEncoder::encode(&mut theirs, &reference_records(), &options).unwrap();
        assert_eq!(&ours[..], &theirs[..]);
    }

    #[test]
    fn every_codec_round_trips_through_the_decoder() {
        for compression in
            [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd]
        {
            let mut builder = BatchBuilder::with_capacity(16);
            sample(&mut builder);
            let mut sealed = builder.seal(compression, ProducerIdentity::NONE, -1).unwrap();
            let set = RecordBatchDecoder::decode(&mut sealed).unwrap();
            assert_eq!(set.compression, compression);
            let got: Vec<_> =
                set.records.iter().map(|r| (r.offset, r.timestamp, r.key.clone(), r.value.clone())).collect();
            let want: Vec<_> =
                reference_records().into_iter().map(|r| (r.offset, r.timestamp, r.key, r.value)).collect();
            assert_eq!(got, want, "{compression:?}");
            assert_eq!(set.records[1].headers.len(), 2);
        }
    }

    #[test]
    fn record_size_predicts_the_append() {
        let mut builder = BatchBuilder::with_capacity(16);
        for i in 0..200i64 {
            let value = vec![1u8; i as usize];
            let predicted =
                builder.record_size(1000 + i * 37, Some(b"key"), Some(&value), &[("a", Some(b"b"))]);
            let before = builder.size_bytes();
            builder.append(1000 + i * 37, Some(b"key"), Some(&value), &[("a", Some(b"b"))]);
            assert_eq!(builder.size_bytes() - before, predicted);
        }
    }

    #[test]
    fn varints_are_zigzag() {
        for (value, size) in [(0i64, 1), (-1, 1), (63, 1), (64, 2), (-65, 2), (i64::MAX, 10), (i64::MIN, 10)]
        {
            let mut out = BytesMut::new();
            put_varint(&mut out, value);
            assert_eq!((out.len(), varint_size(value)), (size, size), "{value}");
        }
    }

    #[test]
    fn restamping_rewrites_identity_and_sequence_under_a_valid_crc() {
        let mut builder = BatchBuilder::with_capacity(256);
        builder.append(1, Some(b"k"), Some(b"v"), &[]);
        let sealed = builder
            .seal(Compression::None, ProducerIdentity { producer_id: 7, producer_epoch: 0 }, 40)
            .unwrap();
        let identity = ProducerIdentity { producer_id: 7, producer_epoch: 1 };
        let restamped = restamp(&sealed, identity, 0);
        assert_eq!(&restamped[43..51], &7i64.to_be_bytes());
        assert_eq!(&restamped[51..53], &1i16.to_be_bytes());
        assert_eq!(&restamped[53..57], &0i32.to_be_bytes());
        assert_eq!(&restamped[17..21], &crc32c::crc32c(&restamped[ATTRIBUTES_AT..]).to_be_bytes());
        assert_eq!(restamped[57..], sealed[57..], "records untouched");
    }
}
