//! The records inside a RecordBatch v2, read in place.
//!
//! The fetch path never looks inside a batch. Three things do: the record
//! checks of produce requests (keys on compacted topics, timestamps and the
//! max timestamp Kafka stores, walked in place for uncompressed batches),
//! the log cleaner and `strom dump-log`. They walk the records of a (decompressed) batch
//! body without allocating per record: the cleaner copies the records it
//! keeps byte for byte, and headers are parsed only when asked for. Like
//! Kafka, the reader keeps duplicate header keys, header keys that are not
//! UTF-8, and null apart from empty; it ignores the batch CRC, so a damaged
//! batch can still be inspected.
//!
//! A record is `length` (varint) followed by `attributes` (int8),
//! `timestampDelta` (varlong), `offsetDelta` (varint), `keyLength` (varint,
//! -1 for null), `key`, `valueLength` (varint, -1 for null), `value`,
//! `headerCount` (varint) and the headers, each a `headerKeyLength`
//! (varint), `headerKey`, `headerValueLength` (varint, -1 for null) and
//! `headerValue`.

use std::borrow::Cow;
use std::io::Read;

use bytes::BufMut;
use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};

use crate::batch::{read_varint, BatchHeader, HEADER_LEN};
use crate::error::{RecordError, Result, StorageError};

/// One record header: a key and a value that may be null.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader<'a> {
    pub key: &'a [u8],
    pub value: Option<&'a [u8]>,
}

/// One record, borrowed from its (decompressed) batch body. Offsets and
/// timestamps are deltas; [`BatchHeader`] turns them into absolute values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// The whole record, its length prefix included.
    pub bytes: &'a [u8],
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    /// `None` for a tombstone.
    pub value: Option<&'a [u8]>,
    /// Where `offsetDelta` starts within `bytes`.
    offset_delta_at: usize,
    /// Where `headerCount` starts within `bytes`.
    headers_at: usize,
}

impl<'a> RecordView<'a> {
    /// The record's headers, which must end exactly where the record does.
    pub fn headers(&self) -> Result<Vec<RecordHeader<'a>>> {
        let mut cursor = Cursor { buf: self.bytes, at: self.headers_at };
        let count = cursor.size("header count")?;
        // Each header takes at least two bytes: bound the allocation by the data.
        let mut headers = Vec::with_capacity(count.min(cursor.left() / 2));
        for _ in 0..count {
            let key =
                cursor.nullable_bytes("header key")?.ok_or_else(|| invalid("null header key".into()))?;
            let value = cursor.nullable_bytes("header value")?;
            headers.push(RecordHeader { key, value });
        }
        if cursor.left() > 0 {
            return Err(invalid(format!("the record's fields end {} bytes before its end", cursor.left())));
        }
        Ok(headers)
    }

    /// Writes this record with another timestamp delta (when the batch's base
    /// timestamp changes); every other byte is kept.
    pub fn write_with_timestamp_delta(&self, timestamp_delta: i64, out: &mut Vec<u8>) {
        let mut body = Vec::with_capacity(self.bytes.len() + 10);
        body.push(self.attributes as u8);
        write_varint(timestamp_delta, &mut body);
        body.extend_from_slice(&self.bytes[self.offset_delta_at..]);
        write_varint(body.len() as i64, out);
        out.extend_from_slice(&body);
    }
}

/// Walks the records of an uncompressed batch body. After an error it
/// yields nothing.
pub struct Records<'a> {
    rest: &'a [u8],
    /// With [`Records::counted`], how many records are still to come.
    expected: Option<usize>,
}

impl<'a> Records<'a> {
    /// Every record up to the end of `body`.
    pub fn new(body: &'a [u8]) -> Self {
        Self { rest: body, expected: None }
    }

    /// Exactly `count` records (the batch's declared count) that must fill
    /// `body`: fewer records or bytes after the last one are an error.
    pub fn counted(body: &'a [u8], count: usize) -> Self {
        Self { rest: body, expected: Some(count) }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<RecordView<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let parsed = match (self.expected, self.rest.is_empty()) {
            (None | Some(0), true) => return None,
            (Some(0), false) => {
                Err(invalid(format!("{} bytes follow the last declared record", self.rest.len())))
            }
            (Some(left), true) => Err(invalid(format!("the batch data ends {left} records early"))),
            (_, false) => parse_record(self.rest),
        };
        match &parsed {
            Ok(record) => {
                self.rest = &self.rest[record.bytes.len()..];
                self.expected = self.expected.map(|left| left - 1);
            }
            Err(_) => {
                self.rest = &[];
                self.expected = self.expected.map(|_| 0);
            }
        }
        Some(parsed)
    }
}

fn invalid(message: String) -> StorageError {
    StorageError::InvalidRecord(message)
}

/// Reads Kafka's record fields from `buf`, starting at `at`.
struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> usize {
        self.buf.len() - self.at
    }

    fn varint(&mut self, what: &str) -> Result<i64> {
        let (value, used) =
            read_varint(&self.buf[self.at..]).ok_or_else(|| invalid(format!("truncated {what}")))?;
        self.at += used;
        Ok(value)
    }

    fn varint32(&mut self, what: &str) -> Result<i32> {
        let value = self.varint(what)?;
        i32::try_from(value).map_err(|_| invalid(format!("{what} {value} is out of range")))
    }

    /// A length or count, which may not be negative.
    fn size(&mut self, what: &str) -> Result<usize> {
        let value = self.varint32(what)?;
        non_negative(value, what)
    }

    fn bytes(&mut self, len: usize, what: &str) -> Result<&'a [u8]> {
        if len > self.left() {
            return Err(invalid(format!("{what} of {len} bytes overruns its batch")));
        }
        let bytes = &self.buf[self.at..self.at + len];
        self.at += len;
        Ok(bytes)
    }

    /// Length-prefixed bytes: `None` for length -1.
    fn nullable_bytes(&mut self, what: &str) -> Result<Option<&'a [u8]>> {
        match self.varint32(what)? {
            -1 => Ok(None),
            len => self.bytes(non_negative(len, what)?, what).map(Some),
        }
    }
}

fn non_negative(value: i32, what: &str) -> Result<usize> {
    usize::try_from(value).map_err(|_| invalid(format!("negative {what} {value}")))
}

/// Parses the record at the start of `buf`, up to its headers.
fn parse_record(buf: &[u8]) -> Result<RecordView<'_>> {
    let mut cursor = Cursor { buf, at: 0 };
    let length = cursor.size("record length")?;
    let body_at = cursor.at;
    cursor.bytes(length, "record")?;
    let mut cursor = Cursor { buf: &buf[..cursor.at], at: body_at };
    let attributes = cursor.bytes(1, "record attributes")?[0] as i8;
    let timestamp_delta = cursor.varint("timestamp delta")?;
    let offset_delta_at = cursor.at;
    let offset_delta = cursor.varint32("offset delta")?;
    let key = cursor.nullable_bytes("key")?;
    let value = cursor.nullable_bytes("value")?;
    Ok(RecordView {
        bytes: cursor.buf,
        attributes,
        timestamp_delta,
        offset_delta,
        key,
        value,
        offset_delta_at,
        headers_at: cursor.at,
    })
}

/// Appends `value` as a zig-zag varint (Kafka's `varint` and `varlong`).
pub fn write_varint(value: i64, out: &mut Vec<u8>) {
    write_uvarint(((value << 1) ^ (value >> 63)) as u64, out);
}

/// Appends `value` as an unsigned varint (Kafka's `unsigned_varint`).
pub fn write_uvarint(mut value: u64, out: &mut impl BufMut) {
    while value >= 0x80 {
        out.put_u8((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

/// The bytes [`write_uvarint`] takes for `value`.
pub fn uvarint_len(value: u64) -> usize {
    let significant_bits = 64 - value.leading_zeros() as usize;
    significant_bits.div_ceil(7).max(1)
}

fn codec_error(e: impl std::fmt::Display) -> StorageError {
    StorageError::CorruptRecord(format!("undecodable batch body: {e}"))
}

/// The most a batch body may decompress to: a few hundred bytes of zstd can
/// claim gigabytes, and the broker must not allocate them for a client.
pub const MAX_DECOMPRESSED_BYTES: usize = 64 << 20;

fn too_large() -> StorageError {
    StorageError::InvalidRecord(format!("batch decompresses to more than {MAX_DECOMPRESSED_BYTES} bytes"))
}

/// Reads `reader` to its end, refusing more than [`MAX_DECOMPRESSED_BYTES`].
fn read_bounded(reader: impl Read) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    reader.take(MAX_DECOMPRESSED_BYTES as u64 + 1).read_to_end(&mut out).map_err(codec_error)?;
    if out.len() > MAX_DECOMPRESSED_BYTES {
        return Err(too_large());
    }
    Ok(out)
}

/// Kafka's snappy: xerial's framing (a 16-byte header, then length-prefixed
/// raw blocks), or a bare raw block, as Kafka's reader accepts both.
fn snappy_bounded(body: &[u8]) -> Result<Vec<u8>> {
    const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
    let blocks: Vec<&[u8]> = match body.strip_prefix(XERIAL_MAGIC) {
        None => vec![body],
        Some(rest) => {
            let mut rest = rest.get(8..).ok_or_else(|| codec_error("truncated snappy header"))?;
            let mut blocks = Vec::new();
            while let Some((length, tail)) = rest.split_first_chunk::<4>() {
                let length = u32::from_be_bytes(*length) as usize;
                let block = tail.get(..length).ok_or_else(|| codec_error("truncated snappy block"))?;
                blocks.push(block);
                rest = &tail[length..];
            }
            blocks
        }
    };
    let mut total = 0usize;
    for block in &blocks {
        total = total.saturating_add(snap::raw::decompress_len(block).map_err(codec_error)?);
    }
    if total > MAX_DECOMPRESSED_BYTES {
        return Err(too_large());
    }
    let mut out = vec![0u8; total];
    let mut at = 0;
    for block in blocks {
        at += snap::raw::Decoder::new().decompress(block, &mut out[at..]).map_err(codec_error)?;
    }
    out.truncate(at);
    Ok(out)
}

/// The records of the whole stored batch `batch`, decompressed when the
/// batch is compressed (at most [`MAX_DECOMPRESSED_BYTES`]).
pub fn records_body<'a>(batch: &'a [u8], header: &BatchHeader) -> Result<Cow<'a, [u8]>> {
    let body = batch
        .get(HEADER_LEN..header.size)
        .ok_or_else(|| StorageError::CorruptRecord("batch is shorter than its length field".into()))?;
    let decompressed = match header.compression() {
        0 => return Ok(Cow::Borrowed(body)),
        1 => read_bounded(flate2::read::MultiGzDecoder::new(body))?,
        2 => snappy_bounded(body)?,
        3 => read_bounded(lz4::Decoder::new(body).map_err(codec_error)?)?,
        4 => read_bounded(zstd::stream::read::Decoder::with_buffer(body).map_err(codec_error)?)?,
        other => return Err(StorageError::CorruptRecord(format!("unknown compression codec {other}"))),
    };
    Ok(Cow::Owned(decompressed))
}

/// Appends `records` compressed with `codec` (the batch attribute's id).
pub fn compress_into(codec: i16, records: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let fill = |tmp: &mut bytes::BytesMut| {
        tmp.extend_from_slice(records);
        Ok(())
    };
    let compressed = match codec {
        0 => {
            out.extend_from_slice(records);
            Ok(())
        }
        1 => Gzip::compress(out, fill),
        2 => Snappy::compress(out, fill),
        3 => Lz4::compress(out, fill),
        4 => Zstd::compress(out, fill),
        other => return Err(StorageError::CorruptRecord(format!("unknown compression codec {other}"))),
    };
    compressed.map_err(codec_error)
}

/// The clock window CreateTime timestamps must fall in (KIP-937's
/// `message.timestamp.before.max.ms` and `after.max.ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampWindow {
    pub now_ms: i64,
    pub before_max_ms: i64,
    pub after_max_ms: i64,
}

impl TimestampWindow {
    /// Whether `timestamp` is within the window; -1 (no timestamp) always is.
    pub fn allows(&self, timestamp: i64) -> bool {
        let age = i128::from(self.now_ms) - i128::from(timestamp);
        timestamp == NO_TIMESTAMP
            || (age <= i128::from(self.before_max_ms) && -age <= i128::from(self.after_max_ms))
    }

    fn describe(&self) -> String {
        let low = self.now_ms.saturating_sub(self.before_max_ms);
        let high = self.now_ms.saturating_add(self.after_max_ms);
        format!("[{low}, {high}]")
    }
}

/// A record's timestamp when it has none.
const NO_TIMESTAMP: i64 = -1;

/// Kafka's per-record rules for a produced data batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRules {
    /// A compacted topic needs a key on every record.
    pub keys_required: bool,
    /// The window CreateTime timestamps must fall in; `None` when the log
    /// stamps LogAppendTime instead.
    pub timestamps: Option<TimestampWindow>,
}

/// The most refused records one produce response names. Kafka names them
/// all, but a few KB of zstd can hold millions of keyless records: the
/// rest are counted, and clients fail them as part of a refused batch.
pub const MAX_NAMED_RECORD_ERRORS: usize = 1000;

/// Walks the `records_count` records of `body` (the batch's records,
/// decompressed) under `rules`, as Kafka's validator does: returns their
/// largest timestamp, or the records refused, each with its index and reason.
pub fn check_records(body: &[u8], header: &BatchHeader, rules: RecordRules) -> Result<i64> {
    let count = usize::try_from(header.records_count).unwrap_or(0);
    let mut max_timestamp = NO_TIMESTAMP;
    let (mut errors, mut rejected, mut invalid_timestamp) = (Vec::new(), 0, false);
    for (index, record) in Records::counted(body, count).enumerate() {
        let record = record?;
        let timestamp = header.base_timestamp.wrapping_add(record.timestamp_delta);
        max_timestamp = max_timestamp.max(timestamp);
        let missing_key = rules.keys_required && record.key.is_none();
        let outside = rules.timestamps.filter(|window| !missing_key && !window.allows(timestamp));
        if !missing_key && outside.is_none() {
            continue;
        }
        rejected += 1;
        invalid_timestamp |= outside.is_some();
        if errors.len() < MAX_NAMED_RECORD_ERRORS {
            let message = match outside {
                Some(window) => {
                    format!("timestamp {timestamp} is outside the accepted range {}", window.describe())
                }
                None => "a compacted topic cannot accept a record without a key".to_owned(),
            };
            errors.push(RecordError { batch_index: index as i32, message });
        }
    }
    match rejected {
        0 => Ok(max_timestamp),
        _ => Err(StorageError::RejectedRecords { invalid_timestamp, rejected, errors }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{decode_records, encode_records, verify_stored};
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{Compression, RecordBatchEncoder, RecordEncodeOptions};

    const CODECS: [Compression; 5] =
        [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];

    fn entries() -> Vec<(Option<Bytes>, Option<Bytes>, i64)> {
        vec![
            (Some("a".into()), Some("1".into()), 100),
            (Some("bb".into()), None, 90),
            (None, Some(vec![7u8; 300].into()), 1_000_000),
        ]
    }

    /// A batch whose first record has a header `h=x` and a null header `n`.
    fn batch_with_headers(compression: Compression) -> Vec<u8> {
        let entries = [
            (Some("k0".into()), Some("v0".into()), 1_000),
            (None, Some("".into()), 1_001),
            (Some("k2".into()), None, 1_002),
        ];
        let mut records = decode_records(encode_records(entries, Compression::None)).unwrap();
        records[0].headers.insert(StrBytes::from_static_str("h"), Some("x".into()));
        records[0].headers.insert(StrBytes::from_static_str("n"), None);
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression })
            .unwrap();
        buf.to_vec()
    }

    type MaybeBytes = Option<Vec<u8>>;
    /// key, value, offset delta, timestamp delta, headers.
    type Owned = (MaybeBytes, MaybeBytes, i32, i64, Vec<(Vec<u8>, MaybeBytes)>);

    fn decoded(batch: &[u8]) -> Vec<Owned> {
        let header = BatchHeader::parse(batch).unwrap();
        let body = records_body(batch, &header).unwrap();
        Records::counted(&body, header.records_count as usize)
            .map(|view| {
                let view = view.unwrap();
                let headers = view.headers().unwrap();
                let headers = headers.iter().map(|h| (h.key.to_vec(), h.value.map(<[u8]>::to_vec))).collect();
                let owned = |b: Option<&[u8]>| b.map(<[u8]>::to_vec);
                (owned(view.key), owned(view.value), view.offset_delta, view.timestamp_delta, headers)
            })
            .collect()
    }

    #[test]
    fn walks_the_records_of_every_codec() {
        for codec in CODECS {
            let batch = encode_records(entries(), codec);
            let header = verify_stored(&batch).unwrap();
            let body = records_body(&batch, &header).unwrap();
            let records: Vec<_> = Records::new(&body).map(Result::unwrap).collect();
            assert_eq!(records.len(), 3, "{codec:?}");
            assert_eq!(records[0].key, Some(&b"a"[..]));
            assert!(records[0].value.is_some());
            assert_eq!(records[1].key, Some(&b"bb"[..]));
            assert!(records[1].value.is_none(), "tombstone");
            assert_eq!(records[2].key, None);
            let offsets: Vec<i32> = records.iter().map(|r| r.offset_delta).collect();
            assert_eq!(offsets, [0, 1, 2]);
            let timestamps: Vec<i64> =
                records.iter().map(|r| header.base_timestamp + r.timestamp_delta).collect();
            assert_eq!(timestamps, [100, 90, 1_000_000]);
            let rules = RecordRules { keys_required: true, timestamps: None };
            let refused = check_records(&body, &header, rules).unwrap_err();
            let StorageError::RejectedRecords { invalid_timestamp: false, errors, .. } = refused else {
                panic!("{codec:?}: {refused:?}")
            };
            assert_eq!(errors.iter().map(|e| e.batch_index).collect::<Vec<_>>(), [2], "the keyless record");
        }
    }

    #[test]
    fn every_codec_yields_the_same_records_and_headers() {
        for compression in CODECS {
            let batch = batch_with_headers(compression);
            verify_stored(&batch).unwrap();
            let bytes = |s: &str| Some(s.as_bytes().to_vec());
            let headers = vec![(b"h".to_vec(), bytes("x")), (b"n".to_vec(), None)];
            assert_eq!(
                decoded(&batch),
                [
                    (bytes("k0"), bytes("v0"), 0, 0, headers),
                    (None, bytes(""), 1, 1, vec![]),
                    (bytes("k2"), None, 2, 2, vec![]),
                ],
                "{compression:?}"
            );
        }
    }

    #[test]
    fn a_record_overrunning_its_batch_is_an_error_not_a_panic() {
        let batch = encode_records([(Some("key".into()), Some("value".into()), 1_000)], Compression::None);
        let header = BatchHeader::parse(&batch).unwrap();
        let body = &batch[HEADER_LEN..];
        for cut in 0..body.len() {
            let results: Vec<_> = Records::counted(&body[..cut], 1).collect();
            assert!(results.last().unwrap().is_err(), "cut at {cut}");
        }
        let extra: Vec<_> = Records::counted(body, 0).collect();
        assert!(extra[0].is_err(), "bytes after the declared records");
        assert_eq!(Records::counted(body, header.records_count as usize).count(), 1);
    }

    #[test]
    fn headers_must_end_where_their_record_does() {
        // attributes, timestamp delta, offset delta, null key, null value, no headers.
        let exact = [0x0c, 0, 0, 0, 0x01, 0x01, 0];
        let record = Records::counted(&exact, 1).next().unwrap().unwrap();
        assert_eq!(record.headers().unwrap(), []);
        let padded = [0x0e, 0, 0, 0, 0x01, 0x01, 0, 0xAA];
        let record = Records::counted(&padded, 1).next().unwrap().unwrap();
        assert!(record.headers().is_err(), "a byte after the headers");
    }

    #[test]
    fn damaged_compressed_data_is_an_error() {
        let mut batch = encode_records(entries(), Compression::Lz4).to_vec();
        let header = BatchHeader::parse(&batch).unwrap();
        batch[HEADER_LEN + 2..].fill(0xAB);
        assert!(records_body(&batch, &header).is_err());
    }

    /// A header for `batch`, a header followed by records compressed with `codec`.
    fn header_for(batch: &[u8], codec: i16) -> BatchHeader {
        let template = verify_stored(&encode_records(entries(), Compression::None)).unwrap();
        BatchHeader { attributes: codec, size: batch.len(), ..template }
    }

    #[test]
    fn compression_round_trips() {
        let raw: Vec<u8> = (0..5000u32).flat_map(|i| i.to_be_bytes()).collect();
        for codec in 0..=4 {
            let mut batch = vec![0u8; HEADER_LEN];
            compress_into(codec, &raw, &mut batch).unwrap();
            let header = header_for(&batch, codec);
            assert_eq!(records_body(&batch, &header).unwrap().as_ref(), &raw[..], "codec {codec}");
        }
    }

    #[test]
    fn a_decompression_bomb_is_refused_without_inflating_it() {
        let zeros = vec![0u8; MAX_DECOMPRESSED_BYTES + 1];
        for codec in 1..=4 {
            let mut batch = vec![0u8; HEADER_LEN];
            compress_into(codec, &zeros, &mut batch).unwrap();
            assert!(batch.len() < MAX_DECOMPRESSED_BYTES / 10, "codec {codec} compresses zeros");
            let header = header_for(&batch, codec);
            let refused = records_body(&batch, &header);
            assert!(matches!(refused, Err(StorageError::InvalidRecord(_))), "codec {codec}: {refused:?}");
        }
    }

    #[test]
    fn rewritten_timestamp_delta_keeps_the_rest() {
        let batch = encode_records(entries(), Compression::None);
        let header = verify_stored(&batch).unwrap();
        let record = Records::new(&batch[HEADER_LEN..]).next().unwrap().unwrap();
        let mut out = Vec::new();
        record.write_with_timestamp_delta(-123_456_789, &mut out);
        let again = parse_record(&out).unwrap();
        assert_eq!(again.bytes.len(), out.len());
        assert_eq!(again.timestamp_delta, -123_456_789);
        assert_eq!(again.offset_delta, record.offset_delta);
        assert_eq!(again.key, record.key);
        assert_eq!(again.value, record.value);
        assert_eq!(header.records_count, 3);
    }

    #[test]
    fn varints_round_trip() {
        for value in [0i64, 1, -1, 63, -64, 64, 300, -300, i32::MAX as i64, i64::MIN, i64::MAX] {
            let mut out = Vec::new();
            write_varint(value, &mut out);
            assert_eq!(read_varint(&out), Some((value, out.len())), "{value}");
        }
    }

    #[test]
    fn unsigned_varints_round_trip_with_their_length() {
        for value in [0u64, 1, 127, 128, 16_383, 16_384, u64::from(u32::MAX), u64::MAX] {
            let mut out = Vec::new();
            write_uvarint(value, &mut out);
            assert_eq!(uvarint_len(value), out.len(), "{value}");
            assert_eq!(crate::batch::read_uvarint(&out), Some((value, out.len())), "{value}");
        }
    }

    #[test]
    fn malformed_records_are_errors_not_panics() {
        for bytes in [&[0x01][..], &[0x7f, 0, 0], &[0x06, 0, 0, 0, 0x03], &[0x04, 0, 0, 0, 0x10]] {
            assert!(Records::new(bytes).any(|r| r.is_err()), "{bytes:?}");
        }
    }
}
