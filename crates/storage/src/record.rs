//! The records inside a stored batch, for tools that look at each record
//! (`strom dump-log`, the log cleaner).
//!
//! The broker's hot path never gets here: it moves batches whole. Unlike
//! kafka-protocol's decoder, this reader keeps what Kafka keeps (duplicate
//! header keys, header keys that are not UTF-8, null versus empty) and does
//! not insist on a valid batch CRC, so a damaged batch can still be inspected.

use std::borrow::Cow;

use bytes::Bytes;
use kafka_protocol::compression::{Decompressor, Gzip, Lz4, Snappy, Zstd};

use crate::batch::{read_varint, BatchHeader, HEADER_LEN};
use crate::error::{Result, StorageError};

/// One record header: a key and a value that may be null.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader<'a> {
    pub key: &'a [u8],
    pub value: Option<&'a [u8]>,
}

/// One record, borrowed from its (decompressed) batch data. Offsets and
/// timestamps are deltas; [`BatchHeader`] turns them into absolute values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<RecordHeader<'a>>,
}

/// The records part of a whole stored batch, decompressed if the batch is.
pub fn records_data<'a>(batch: &'a [u8], header: &BatchHeader) -> Result<Cow<'a, [u8]>> {
    let mut compressed = batch
        .get(HEADER_LEN..header.size)
        .ok_or_else(|| StorageError::CorruptRecord("batch is shorter than its length field".into()))?;
    let take = |out: &mut Bytes| Ok(std::mem::take(out));
    let decompressed = match header.compression() {
        0 => return Ok(Cow::Borrowed(compressed)),
        1 => Gzip::decompress(&mut compressed, take),
        2 => Snappy::decompress(&mut compressed, take),
        3 => Lz4::decompress(&mut compressed, take),
        4 => Zstd::decompress(&mut compressed, take),
        other => return Err(StorageError::CorruptRecord(format!("unknown compression codec {other}"))),
    };
    decompressed
        .map(|bytes| Cow::Owned(Vec::from(bytes)))
        .map_err(|e| StorageError::CorruptRecord(format!("cannot decompress the records: {e:#}")))
}

/// Walks the records of a batch's (decompressed) data: exactly `count`
/// records that must fill the data exactly. After an error it yields nothing.
pub struct RecordIter<'a> {
    rest: &'a [u8],
    remaining: usize,
    failed: bool,
}

impl<'a> RecordIter<'a> {
    pub fn new(data: &'a [u8], count: usize) -> Self {
        Self { rest: data, remaining: count, failed: false }
    }

    fn next_record(&mut self) -> Result<RecordView<'a>> {
        let mut reader = Reader { buf: self.rest };
        let length = reader.length("record length")?.unwrap_or(0);
        let body = reader.bytes(length, "record")?;
        self.rest = reader.buf;
        let mut reader = Reader { buf: body };
        let record = reader.record()?;
        if !reader.buf.is_empty() {
            return Err(corrupt(format!(
                "record declares {length} bytes but its fields end {} bytes early",
                reader.buf.len()
            )));
        }
        Ok(record)
    }
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<RecordView<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = match (self.remaining, self.rest.is_empty()) {
            (0, true) => return None,
            (0, false) => Err(corrupt(format!("{} bytes follow the last declared record", self.rest.len()))),
            (left, true) => Err(corrupt(format!("the batch data ends {left} records early"))),
            _ => self.next_record(),
        };
        self.remaining = self.remaining.saturating_sub(1);
        self.failed = item.is_err();
        Some(item)
    }
}

fn corrupt(message: String) -> StorageError {
    StorageError::CorruptRecord(message)
}

/// Reads Kafka's record fields off the front of a slice.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self, what: &str) -> Result<i64> {
        let (value, used) = read_varint(self.buf).ok_or_else(|| corrupt(format!("truncated {what}")))?;
        self.buf = &self.buf[used..];
        Ok(value)
    }

    fn varint32(&mut self, what: &str) -> Result<i32> {
        let value = self.varint(what)?;
        i32::try_from(value).map_err(|_| corrupt(format!("{what} {value} is out of range")))
    }

    /// A length that may be -1 for null.
    fn length(&mut self, what: &str) -> Result<Option<usize>> {
        match self.varint32(what)? {
            -1 => Ok(None),
            n => usize::try_from(n).map(Some).map_err(|_| corrupt(format!("negative {what} {n}"))),
        }
    }

    fn bytes(&mut self, len: usize, what: &str) -> Result<&'a [u8]> {
        if len > self.buf.len() {
            return Err(corrupt(format!("{what} of {len} bytes overruns its batch")));
        }
        let (bytes, rest) = self.buf.split_at(len);
        self.buf = rest;
        Ok(bytes)
    }

    fn nullable_bytes(&mut self, what: &str) -> Result<Option<&'a [u8]>> {
        match self.length(what)? {
            None => Ok(None),
            Some(len) => self.bytes(len, what).map(Some),
        }
    }

    fn record(&mut self) -> Result<RecordView<'a>> {
        let attributes = self.bytes(1, "record attributes")?[0] as i8;
        let timestamp_delta = self.varint("timestamp delta")?;
        let offset_delta = self.varint32("offset delta")?;
        let key = self.nullable_bytes("key")?;
        let value = self.nullable_bytes("value")?;
        let count = self.varint32("header count")?;
        let count = usize::try_from(count).map_err(|_| corrupt(format!("negative header count {count}")))?;
        // Each header takes at least two bytes: bound the allocation by the data.
        let mut headers = Vec::with_capacity(count.min(self.buf.len() / 2));
        for _ in 0..count {
            let key_len =
                self.length("header key length")?.ok_or_else(|| corrupt("null header key".into()))?;
            let key = self.bytes(key_len, "header key")?;
            let value = self.nullable_bytes("header value")?;
            headers.push(RecordHeader { key, value });
        }
        Ok(RecordView { attributes, timestamp_delta, offset_delta, key, value, headers })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{verify_stored, BatchHeader};
    use bytes::BytesMut;
    use kafka_protocol::indexmap::IndexMap;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    fn record(
        offset: i64,
        key: Option<&str>,
        value: Option<&str>,
        headers: &[(&str, Option<&str>)],
    ) -> Record {
        Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: 7,
            producer_epoch: 1,
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: offset as i32,
            timestamp: 1_000 + offset,
            key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value: value.map(|v| Bytes::copy_from_slice(v.as_bytes())),
            headers: headers
                .iter()
                .map(|(k, v)| {
                    (StrBytes::from_string(k.to_string()), v.map(|v| Bytes::copy_from_slice(v.as_bytes())))
                })
                .collect::<IndexMap<_, _>>(),
        }
    }

    fn encode(records: &[Record], compression: Compression) -> Vec<u8> {
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(&mut buf, records, &RecordEncodeOptions { version: 2, compression })
            .unwrap();
        buf.to_vec()
    }

    type MaybeBytes = Option<Vec<u8>>;
    /// key, value, offset delta, timestamp delta, headers.
    type Owned = (MaybeBytes, MaybeBytes, i32, i64, Vec<(Vec<u8>, MaybeBytes)>);

    fn decoded(batch: &[u8]) -> Vec<Owned> {
        let header = BatchHeader::parse(batch).unwrap();
        let data = records_data(batch, &header).unwrap();
        RecordIter::new(&data, header.records_count as usize)
            .map(|view| {
                let view = view.unwrap();
                let headers =
                    view.headers.iter().map(|h| (h.key.to_vec(), h.value.map(<[u8]>::to_vec))).collect();
                let owned = |b: Option<&[u8]>| b.map(<[u8]>::to_vec);
                (owned(view.key), owned(view.value), view.offset_delta, view.timestamp_delta, headers)
            })
            .collect()
    }

    #[test]
    fn every_codec_yields_the_same_records() {
        let records = [
            record(0, Some("k0"), Some("v0"), &[("h", Some("x")), ("n", None)]),
            record(1, None, Some(""), &[]),
            record(2, Some("k2"), None, &[]),
        ];
        for compression in
            [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd]
        {
            let batch = encode(&records, compression);
            verify_stored(&batch).unwrap();
            let views = decoded(&batch);
            let bytes = |s: &str| Some(s.as_bytes().to_vec());
            let headers = vec![(b"h".to_vec(), bytes("x")), (b"n".to_vec(), None)];
            assert_eq!(
                views,
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
        let batch = encode(&[record(0, Some("key"), Some("value"), &[])], Compression::None);
        let header = BatchHeader::parse(&batch).unwrap();
        let data = &batch[HEADER_LEN..];
        for cut in 0..data.len() {
            let results: Vec<_> = RecordIter::new(&data[..cut], 1).collect();
            assert!(results.last().unwrap().is_err(), "cut at {cut}");
        }
        let extra: Vec<_> = RecordIter::new(data, 0).collect();
        assert!(extra[0].is_err(), "bytes after the declared records");
        assert_eq!(RecordIter::new(data, header.records_count as usize).count(), 1);
    }

    #[test]
    fn damaged_compressed_data_is_an_error() {
        let mut batch = encode(&[record(0, Some("k"), Some("v"), &[])], Compression::Lz4);
        let header = BatchHeader::parse(&batch).unwrap();
        batch[HEADER_LEN + 2..].fill(0xAB);
        assert!(records_data(&batch, &header).is_err());
    }
}
