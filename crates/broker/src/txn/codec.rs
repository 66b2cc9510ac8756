//! Records of `__transaction_state`, in Kafka's key and value schemas
//! (`TransactionLogKey` v0, `TransactionLogValue` v0 written, v0 and the
//! flexible v1 read), so Kafka's tools read the topic as ours do. A null
//! value is a tombstone: the transactional id expired.

use std::collections::BTreeSet;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use strom_storage::batch::read_uvarint;

use super::state::{TxnMetadata, TxnState, NO_PRODUCER_EPOCH, NO_PRODUCER_ID};

const KEY_VERSION: i16 = 0;
const VALUE_VERSION: i16 = 0;

#[derive(Debug, thiserror::Error)]
#[error("malformed __transaction_state record: {0}")]
pub struct CodecError(&'static str);

pub fn encode_key(transactional_id: &str) -> Bytes {
    let mut buf = BytesMut::with_capacity(4 + transactional_id.len());
    buf.put_i16(KEY_VERSION);
    put_string(&mut buf, transactional_id);
    buf.freeze()
}

pub fn decode_key(mut buf: &[u8]) -> Result<String, CodecError> {
    match get_i16(&mut buf)? {
        0 => get_string(&mut buf),
        _ => Err(CodecError("unknown key version")),
    }
}

/// The value v0 of `metadata`.
pub fn encode_value(metadata: &TxnMetadata) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(VALUE_VERSION);
    buf.put_i64(metadata.producer_id);
    buf.put_i16(metadata.producer_epoch);
    buf.put_i32(metadata.timeout_ms);
    buf.put_i8(metadata.state.code());
    let by_topic = partitions_by_topic(&metadata.partitions);
    buf.put_i32(by_topic.len() as i32);
    for (topic, partitions) in by_topic {
        put_string(&mut buf, topic);
        buf.put_i32(partitions.len() as i32);
        partitions.iter().for_each(|p| buf.put_i32(*p));
    }
    buf.put_i64(metadata.last_update_timestamp_ms);
    buf.put_i64(metadata.start_timestamp_ms);
    buf.freeze()
}

fn partitions_by_topic(partitions: &BTreeSet<(String, i32)>) -> Vec<(&str, Vec<i32>)> {
    let mut by_topic: Vec<(&str, Vec<i32>)> = Vec::new();
    for (topic, partition) in partitions {
        match by_topic.last_mut() {
            Some((t, ps)) if *t == topic.as_str() => ps.push(*partition),
            _ => by_topic.push((topic, vec![*partition])),
        }
    }
    by_topic
}

/// Reads a value of version 0 or 1 for `transactional_id`.
pub fn decode_value(transactional_id: &str, mut buf: &[u8]) -> Result<TxnMetadata, CodecError> {
    let version = get_i16(&mut buf)?;
    if !(0..=1).contains(&version) {
        return Err(CodecError("unknown value version"));
    }
    let flexible = version >= 1;
    let producer_id = get_i64(&mut buf)?;
    let producer_epoch = get_i16(&mut buf)?;
    let timeout_ms = get_i32(&mut buf)?;
    let state = TxnState::from_code(get_i8(&mut buf)?).ok_or(CodecError("unknown transaction status"))?;
    let mut partitions = BTreeSet::new();
    let topics = get_array_len(&mut buf, flexible)?;
    for _ in 0..topics {
        let topic = if flexible { get_compact_string(&mut buf)? } else { get_string(&mut buf)? };
        let count = get_array_len(&mut buf, flexible)?;
        for _ in 0..count {
            partitions.insert((topic.clone(), get_i32(&mut buf)?));
        }
        if flexible {
            skip_tagged_fields(&mut buf)?;
        }
    }
    let last_update_timestamp_ms = get_i64(&mut buf)?;
    let start_timestamp_ms = get_i64(&mut buf)?;
    Ok(TxnMetadata {
        transactional_id: transactional_id.to_owned(),
        producer_id,
        last_producer_id: NO_PRODUCER_ID,
        producer_epoch,
        last_producer_epoch: NO_PRODUCER_EPOCH,
        timeout_ms,
        state,
        partitions,
        start_timestamp_ms,
        last_update_timestamp_ms,
        pending_state: None,
    })
}

fn put_string(buf: &mut BytesMut, s: &str) {
    buf.put_i16(s.len() as i16);
    buf.put_slice(s.as_bytes());
}

fn need(buf: &[u8], n: usize) -> Result<(), CodecError> {
    if buf.len() < n {
        return Err(CodecError("record is truncated"));
    }
    Ok(())
}

fn get_i8(buf: &mut &[u8]) -> Result<i8, CodecError> {
    need(buf, 1)?;
    Ok(buf.get_i8())
}

fn get_i16(buf: &mut &[u8]) -> Result<i16, CodecError> {
    need(buf, 2)?;
    Ok(buf.get_i16())
}

fn get_i32(buf: &mut &[u8]) -> Result<i32, CodecError> {
    need(buf, 4)?;
    Ok(buf.get_i32())
}

fn get_i64(buf: &mut &[u8]) -> Result<i64, CodecError> {
    need(buf, 8)?;
    Ok(buf.get_i64())
}

/// Kafka's `unsigned_varint`, which holds an int: at most five bytes.
fn get_uvarint(buf: &mut &[u8]) -> Result<u64, CodecError> {
    let (value, used) = read_uvarint(&buf[..buf.len().min(5)])
        .ok_or(CodecError("varint truncated or longer than five bytes"))?;
    buf.advance(used);
    Ok(value)
}

fn take_utf8(buf: &mut &[u8], len: usize) -> Result<String, CodecError> {
    need(buf, len)?;
    let (s, rest) = buf.split_at(len);
    *buf = rest;
    String::from_utf8(s.to_vec()).map_err(|_| CodecError("string is not UTF-8"))
}

fn get_string(buf: &mut &[u8]) -> Result<String, CodecError> {
    let len = usize::try_from(get_i16(buf)?).map_err(|_| CodecError("null string"))?;
    take_utf8(buf, len)
}

fn get_compact_string(buf: &mut &[u8]) -> Result<String, CodecError> {
    let len = get_uvarint(buf)?.checked_sub(1).ok_or(CodecError("null string"))?;
    take_utf8(buf, len as usize)
}

/// An array length (a null array is empty), bounded by the bytes left.
fn get_array_len(buf: &mut &[u8], flexible: bool) -> Result<usize, CodecError> {
    let len = if flexible {
        get_uvarint(buf)?.saturating_sub(1) as usize
    } else {
        usize::try_from(get_i32(buf)?).unwrap_or(0)
    };
    if len > buf.len() {
        return Err(CodecError("array longer than the record"));
    }
    Ok(len)
}

fn skip_tagged_fields(buf: &mut &[u8]) -> Result<(), CodecError> {
    let count = get_uvarint(buf)?;
    for _ in 0..count {
        get_uvarint(buf)?;
        let size = get_uvarint(buf)? as usize;
        need(buf, size)?;
        buf.advance(size);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_varints_hold_at_most_five_bytes() {
        let mut five: &[u8] = &[0xff, 0xff, 0xff, 0xff, 0x0f, 0x2a];
        assert_eq!(get_uvarint(&mut five).unwrap(), u64::from(u32::MAX));
        assert_eq!(five, &[0x2a], "the bytes after the varint are left");
        let mut six: &[u8] = &[0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
        assert!(get_uvarint(&mut six).is_err(), "longer than an int's varint");
        assert!(get_uvarint(&mut &[0x80][..]).is_err(), "truncated");
    }

    fn sample() -> TxnMetadata {
        let mut metadata = TxnMetadata::new("tx-1", 4_000, 60_000, 1_700);
        metadata.producer_epoch = 3;
        metadata.state = TxnState::Ongoing;
        metadata.partitions = [("a".to_owned(), 0), ("a".to_owned(), 2), ("b".to_owned(), 1)].into();
        metadata.start_timestamp_ms = 1_650;
        metadata
    }

    #[test]
    fn key_matches_kafkas_bytes_and_values_round_trip() {
        assert_eq!(encode_key("tx").as_ref(), &[0, 0, 0, 2, b't', b'x']);
        assert_eq!(decode_key(&encode_key("tx-1")).unwrap(), "tx-1");
        let metadata = sample();
        let bytes = encode_value(&metadata);
        assert_eq!(&bytes[..2], &[0, 0], "value version 0");
        assert_eq!(decode_value("tx-1", &bytes).unwrap(), metadata);
        for len in 0..bytes.len() {
            assert!(decode_value("tx-1", &bytes[..len]).is_err(), "truncated at {len}");
        }
    }

    #[test]
    fn flexible_values_are_read() {
        // v1: compact array of one topic "a" with partition 5, then tagged fields.
        let mut buf = BytesMut::new();
        buf.put_i16(1);
        buf.put_i64(9);
        buf.put_i16(2);
        buf.put_i32(1_000);
        buf.put_i8(TxnState::PrepareCommit.code());
        buf.put_u8(2); // one topic
        buf.put_u8(2); // "a"
        buf.put_u8(b'a');
        buf.put_u8(2); // one partition
        buf.put_i32(5);
        buf.put_u8(0); // topic tagged fields
        buf.put_i64(11);
        buf.put_i64(10);
        buf.put_slice(&[1, 0, 8, 0, 0, 0, 0, 0, 0, 0, 8]); // PreviousProducerId = 8
        let metadata = decode_value("x", &buf).unwrap();
        assert_eq!(
            (metadata.producer_id, metadata.producer_epoch, metadata.state),
            (9, 2, TxnState::PrepareCommit)
        );
        assert!(metadata.partitions.contains(&("a".to_owned(), 5)));
        assert_eq!((metadata.last_update_timestamp_ms, metadata.start_timestamp_ms), (11, 10));
    }
}
