//! The records inside a RecordBatch v2, read in place.
//!
//! The append and fetch paths never look inside a batch. Two things do: the
//! key check of produce requests to compacted topics, and the log cleaner.
//! Both walk the records of a (decompressed) batch body without allocating
//! per record; the cleaner copies the records it keeps byte for byte.
//!
//! A record is `length` (varint) followed by `attributes` (int8),
//! `timestampDelta` (varlong), `offsetDelta` (varint), `keyLength` (varint,
//! -1 for null), `key`, `valueLength` (varint, -1 for null), `value` and the
//! headers.

use std::borrow::Cow;
use std::io::Read;

use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};

use crate::batch::{read_varint, BatchHeader, HEADER_LEN};
use crate::error::{Result, StorageError};

/// One record of a batch body, borrowed from it.
#[derive(Debug, Clone, Copy)]
pub struct RawRecord<'a> {
    /// The whole record, its length prefix included.
    pub bytes: &'a [u8],
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    /// False for a tombstone (a null value).
    pub has_value: bool,
    /// Where `offsetDelta` starts within `bytes`.
    offset_delta_at: usize,
    attributes: u8,
}

impl RawRecord<'_> {
    /// Writes this record with another timestamp delta (when the batch's base
    /// timestamp changes); every other byte is kept.
    pub fn write_with_timestamp_delta(&self, timestamp_delta: i64, out: &mut Vec<u8>) {
        let mut body = Vec::with_capacity(self.bytes.len() + 10);
        body.push(self.attributes);
        write_varint(timestamp_delta, &mut body);
        body.extend_from_slice(&self.bytes[self.offset_delta_at..]);
        write_varint(body.len() as i64, out);
        out.extend_from_slice(&body);
    }
}

/// Iterates the records of an uncompressed batch body.
pub struct RawRecords<'a> {
    rest: &'a [u8],
}

impl<'a> RawRecords<'a> {
    pub fn new(body: &'a [u8]) -> Self {
        Self { rest: body }
    }
}

impl<'a> Iterator for RawRecords<'a> {
    type Item = Result<RawRecord<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match parse_record(self.rest) {
            Ok((record, used)) => {
                self.rest = &self.rest[used..];
                Some(Ok(record))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

fn invalid(what: &str) -> StorageError {
    StorageError::InvalidRecord(format!("malformed record: {what}"))
}

/// A varint at `buf[*at..]`, advancing `at` past it.
fn take_varint(buf: &[u8], at: &mut usize, what: &str) -> Result<i64> {
    let (value, used) = read_varint(buf.get(*at..).unwrap_or_default()).ok_or_else(|| invalid(what))?;
    *at += used;
    Ok(value)
}

/// A length-prefixed field: `None` for length -1, else its bytes.
fn take_bytes<'a>(buf: &'a [u8], at: &mut usize, what: &str) -> Result<Option<&'a [u8]>> {
    let length = take_varint(buf, at, what)?;
    if length == -1 {
        return Ok(None);
    }
    let length = usize::try_from(length).map_err(|_| invalid(what))?;
    let end = at.checked_add(length).filter(|end| *end <= buf.len()).ok_or_else(|| invalid(what))?;
    let bytes = &buf[*at..end];
    *at = end;
    Ok(Some(bytes))
}

/// Parses the record at the start of `buf`; returns it and its total size.
fn parse_record(buf: &[u8]) -> Result<(RawRecord<'_>, usize)> {
    let mut at = 0;
    let length = take_varint(buf, &mut at, "record length")?;
    let length = usize::try_from(length).map_err(|_| invalid("negative record length"))?;
    let end = at.checked_add(length).filter(|end| *end <= buf.len()).ok_or_else(|| invalid("overrun"))?;
    let bytes = &buf[..end];
    let attributes = *bytes.get(at).ok_or_else(|| invalid("attributes"))?;
    at += 1;
    let timestamp_delta = take_varint(bytes, &mut at, "timestamp delta")?;
    let offset_delta_at = at;
    let offset_delta = take_varint(bytes, &mut at, "offset delta")?;
    let offset_delta = i32::try_from(offset_delta).map_err(|_| invalid("offset delta"))?;
    let key = take_bytes(bytes, &mut at, "key")?;
    let has_value = take_bytes(bytes, &mut at, "value")?.is_some();
    let record =
        RawRecord { bytes, timestamp_delta, offset_delta, key, has_value, offset_delta_at, attributes };
    Ok((record, end))
}

/// Appends `value` as a zig-zag varint (Kafka's `varint` and `varlong`).
pub fn write_varint(value: i64, out: &mut Vec<u8>) {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    while raw >= 0x80 {
        out.push((raw as u8 & 0x7f) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
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

/// The records of `batch`, decompressed when the batch is compressed (at
/// most [`MAX_DECOMPRESSED_BYTES`]).
pub fn records_body<'a>(batch: &'a [u8], header: &BatchHeader) -> Result<Cow<'a, [u8]>> {
    let body = &batch[HEADER_LEN..];
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

/// Kafka's check for compacted topics: every record of a data batch must
/// have a key (INVALID_RECORD otherwise). Compressed batches are
/// decompressed for it.
pub fn check_keys(batch: &[u8], header: &BatchHeader) -> Result<()> {
    if header.is_control() {
        return Ok(());
    }
    let body = records_body(batch, header)?;
    for record in RawRecords::new(&body) {
        if record?.key.is_none() {
            return Err(StorageError::InvalidRecord(
                "compacted topic cannot accept a record without a key".into(),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{encode_records, verify_stored};
    use kafka_protocol::records::Compression;

    fn entries() -> Vec<(Option<bytes::Bytes>, Option<bytes::Bytes>, i64)> {
        vec![
            (Some("a".into()), Some("1".into()), 100),
            (Some("bb".into()), None, 90),
            (None, Some(vec![7u8; 300].into()), 1_000_000),
        ]
    }

    #[test]
    fn walks_the_records_of_every_codec() {
        for codec in
            [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd]
        {
            let batch = encode_records(entries(), codec);
            let header = verify_stored(&batch).unwrap();
            let body = records_body(&batch, &header).unwrap();
            let records: Vec<_> = RawRecords::new(&body).map(Result::unwrap).collect();
            assert_eq!(records.len(), 3, "{codec:?}");
            assert_eq!(records[0].key, Some(&b"a"[..]));
            assert!(records[0].has_value);
            assert_eq!(records[1].key, Some(&b"bb"[..]));
            assert!(!records[1].has_value, "tombstone");
            assert_eq!(records[2].key, None);
            let offsets: Vec<i32> = records.iter().map(|r| r.offset_delta).collect();
            assert_eq!(offsets, [0, 1, 2]);
            let timestamps: Vec<i64> =
                records.iter().map(|r| header.base_timestamp + r.timestamp_delta).collect();
            assert_eq!(timestamps, [100, 90, 1_000_000]);
            assert!(check_keys(&batch, &header).is_err(), "keyless record refused");
        }
    }

    #[test]
    fn compression_round_trips() {
        let raw: Vec<u8> = (0..5000u32).flat_map(|i| i.to_be_bytes()).collect();
        let template = verify_stored(&encode_records(entries(), Compression::None)).unwrap();
        for codec in 0..=4 {
            let mut batch = vec![0u8; HEADER_LEN];
            compress_into(codec, &raw, &mut batch).unwrap();
            let header = BatchHeader { attributes: codec, ..template };
            assert_eq!(records_body(&batch, &header).unwrap().as_ref(), &raw[..], "codec {codec}");
        }
    }

    #[test]
    fn a_decompression_bomb_is_refused_without_inflating_it() {
        let zeros = vec![0u8; MAX_DECOMPRESSED_BYTES + 1];
        let template = verify_stored(&encode_records(entries(), Compression::None)).unwrap();
        for codec in 1..=4 {
            let mut batch = vec![0u8; HEADER_LEN];
            compress_into(codec, &zeros, &mut batch).unwrap();
            assert!(batch.len() < MAX_DECOMPRESSED_BYTES / 10, "codec {codec} compresses zeros");
            let header = BatchHeader { attributes: codec, ..template };
            let refused = records_body(&batch, &header);
            assert!(matches!(refused, Err(StorageError::InvalidRecord(_))), "codec {codec}: {refused:?}");
        }
    }

    #[test]
    fn rewritten_timestamp_delta_keeps_the_rest() {
        let batch = encode_records(entries(), Compression::None);
        let header = verify_stored(&batch).unwrap();
        let record = RawRecords::new(&batch[HEADER_LEN..]).next().unwrap().unwrap();
        let mut out = Vec::new();
        record.write_with_timestamp_delta(-123_456_789, &mut out);
        let (again, used) = parse_record(&out).unwrap();
        assert_eq!(used, out.len());
        assert_eq!(again.timestamp_delta, -123_456_789);
        assert_eq!(again.offset_delta, record.offset_delta);
        assert_eq!(again.key, record.key);
        assert_eq!(again.has_value, record.has_value);
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
    fn malformed_records_are_errors_not_panics() {
        for bytes in [&[0x01][..], &[0x7f, 0, 0], &[0x06, 0, 0, 0, 0x03], &[0x04, 0, 0, 0, 0x10]] {
            assert!(RawRecords::new(bytes).any(|r| r.is_err()), "{bytes:?}");
        }
    }
}
