//! Records of `__consumer_offsets`, in Kafka's key and value schemas, so the
//! topic reads the same to Kafka's tools and to ours.
//!
//! Keys: version 1 is an offset commit (group, topic, partition), version 2
//! the group's metadata. Values: offset commits are written as v3, group
//! metadata as v3. A null value is a tombstone.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use strom_storage::batch::read_uvarint;

/// A committed offset, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

/// One member in the stored group metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberValue {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Bytes,
    pub assignment: Bytes,
}

/// A group's membership after a completed rebalance, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub state_timestamp_ms: i64,
    pub members: Vec<MemberValue>,
}

/// What a record key names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKey {
    Offset { group: String, topic: String, partition: i32 },
    Group { group: String },
}

#[derive(Debug, thiserror::Error)]
#[error("malformed __consumer_offsets record: {0}")]
pub struct CodecError(&'static str);

const OFFSET_KEY_VERSION: i16 = 1;
const GROUP_KEY_VERSION: i16 = 2;
const OFFSET_VALUE_VERSION: i16 = 3;
const GROUP_VALUE_VERSION: i16 = 3;

impl RecordKey {
    pub fn group(&self) -> &str {
        match self {
            Self::Offset { group, .. } | Self::Group { group } => group,
        }
    }

    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::new();
        match self {
            Self::Offset { group, topic, partition } => {
                buf.put_i16(OFFSET_KEY_VERSION);
                put_string(&mut buf, group);
                put_string(&mut buf, topic);
                buf.put_i32(*partition);
            }
            Self::Group { group } => {
                buf.put_i16(GROUP_KEY_VERSION);
                put_string(&mut buf, group);
            }
        }
        buf.freeze()
    }

    pub fn decode(mut buf: &[u8]) -> Result<Self, CodecError> {
        match get_i16(&mut buf)? {
            0 | 1 => Ok(Self::Offset {
                group: get_string(&mut buf)?,
                topic: get_string(&mut buf)?,
                partition: get_i32(&mut buf)?,
            }),
            2 => Ok(Self::Group { group: get_string(&mut buf)? }),
            _ => Err(CodecError("unknown key version")),
        }
    }
}

impl OffsetValue {
    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_i16(OFFSET_VALUE_VERSION);
        buf.put_i64(self.offset);
        buf.put_i32(self.leader_epoch);
        put_string(&mut buf, &self.metadata);
        buf.put_i64(self.commit_timestamp_ms);
        buf.freeze()
    }

    /// Reads values v0 to v3 (v4 adds only tagged fields, which are skipped).
    pub fn decode(mut buf: &[u8]) -> Result<Self, CodecError> {
        let version = get_i16(&mut buf)?;
        let offset = get_i64(&mut buf)?;
        let leader_epoch = if version >= 3 { get_i32(&mut buf)? } else { -1 };
        let metadata = if version >= 4 { get_compact_string(&mut buf)? } else { get_string(&mut buf)? };
        let commit_timestamp_ms = get_i64(&mut buf)?;
        Ok(Self { offset, leader_epoch, metadata, commit_timestamp_ms })
    }
}

impl GroupValue {
    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_i16(GROUP_VALUE_VERSION);
        put_string(&mut buf, &self.protocol_type);
        buf.put_i32(self.generation);
        put_nullable_string(&mut buf, self.protocol.as_deref());
        put_nullable_string(&mut buf, self.leader.as_deref());
        buf.put_i64(self.state_timestamp_ms);
        buf.put_i32(self.members.len() as i32);
        for member in &self.members {
            put_string(&mut buf, &member.member_id);
            put_nullable_string(&mut buf, member.group_instance_id.as_deref());
            put_string(&mut buf, &member.client_id);
            put_string(&mut buf, &member.client_host);
            buf.put_i32(member.rebalance_timeout_ms);
            buf.put_i32(member.session_timeout_ms);
            put_bytes(&mut buf, &member.subscription);
            put_bytes(&mut buf, &member.assignment);
        }
        buf.freeze()
    }

    /// Reads values v1 to v3.
    pub fn decode(mut buf: &[u8]) -> Result<Self, CodecError> {
        let version = get_i16(&mut buf)?;
        if !(1..=3).contains(&version) {
            return Err(CodecError("unsupported group value version"));
        }
        let protocol_type = get_string(&mut buf)?;
        let generation = get_i32(&mut buf)?;
        let protocol = get_nullable_string(&mut buf)?;
        let leader = get_nullable_string(&mut buf)?;
        let state_timestamp_ms = if version >= 2 { get_i64(&mut buf)? } else { -1 };
        let count = get_i32(&mut buf)?;
        if count < 0 || count as usize > buf.len() {
            return Err(CodecError("member count exceeds the record"));
        }
        let mut members = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let member_id = get_string(&mut buf)?;
            let group_instance_id = if version >= 3 { get_nullable_string(&mut buf)? } else { None };
            let client_id = get_string(&mut buf)?;
            let client_host = get_string(&mut buf)?;
            let rebalance_timeout_ms = get_i32(&mut buf)?;
            let session_timeout_ms = get_i32(&mut buf)?;
            let subscription = get_bytes(&mut buf)?;
            let assignment = get_bytes(&mut buf)?;
            members.push(MemberValue {
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                subscription,
                assignment,
            });
        }
        Ok(Self { protocol_type, generation, protocol, leader, state_timestamp_ms, members })
    }
}

fn put_string(buf: &mut BytesMut, s: &str) {
    buf.put_i16(s.len() as i16);
    buf.put_slice(s.as_bytes());
}

fn put_nullable_string(buf: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(buf, s),
        None => buf.put_i16(-1),
    }
}

fn put_bytes(buf: &mut BytesMut, b: &[u8]) {
    buf.put_i32(b.len() as i32);
    buf.put_slice(b);
}

fn need(buf: &[u8], n: usize) -> Result<(), CodecError> {
    if buf.len() < n {
        Err(CodecError("record is truncated"))
    } else {
        Ok(())
    }
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

fn take_utf8(buf: &mut &[u8], len: usize) -> Result<String, CodecError> {
    need(buf, len)?;
    let (s, rest) = buf.split_at(len);
    *buf = rest;
    String::from_utf8(s.to_vec()).map_err(|_| CodecError("string is not UTF-8"))
}

fn get_string(buf: &mut &[u8]) -> Result<String, CodecError> {
    let len = get_i16(buf)?;
    if len < 0 {
        return Err(CodecError("null where a string is required"));
    }
    take_utf8(buf, len as usize)
}

fn get_compact_string(buf: &mut &[u8]) -> Result<String, CodecError> {
    // Kafka's `unsigned_varint` holds an int: at most five bytes.
    let (len, used) = read_uvarint(&buf[..buf.len().min(5)])
        .ok_or(CodecError("varint truncated or longer than five bytes"))?;
    buf.advance(used);
    take_utf8(buf, len.checked_sub(1).ok_or(CodecError("null compact string"))? as usize)
}

fn get_nullable_string(buf: &mut &[u8]) -> Result<Option<String>, CodecError> {
    let len = get_i16(buf)?;
    if len < 0 {
        return Ok(None);
    }
    take_utf8(buf, len as usize).map(Some)
}

fn get_bytes(buf: &mut &[u8]) -> Result<Bytes, CodecError> {
    let len = get_i32(buf)?;
    if len < 0 {
        return Ok(Bytes::new());
    }
    need(buf, len as usize)?;
    let (b, rest) = buf.split_at(len as usize);
    *buf = rest;
    Ok(Bytes::copy_from_slice(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_round_trip() {
        let key = RecordKey::Offset { group: "g".into(), topic: "t".into(), partition: 4 };
        assert_eq!(RecordKey::decode(&key.encode()).unwrap(), key);
        let key = RecordKey::Group { group: "g".into() };
        assert_eq!(RecordKey::decode(&key.encode()).unwrap(), key);
        let offset =
            OffsetValue { offset: 42, leader_epoch: 3, metadata: "m".into(), commit_timestamp_ms: 7 };
        assert_eq!(OffsetValue::decode(&offset.encode()).unwrap(), offset);
        let group = GroupValue {
            protocol_type: "consumer".into(),
            generation: 5,
            protocol: Some("range".into()),
            leader: Some("m1".into()),
            state_timestamp_ms: 9,
            members: vec![MemberValue {
                member_id: "m1".into(),
                group_instance_id: Some("i1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 300_000,
                session_timeout_ms: 45_000,
                subscription: Bytes::from_static(b"sub"),
                assignment: Bytes::from_static(b"asg"),
            }],
        };
        assert_eq!(GroupValue::decode(&group.encode()).unwrap(), group);
    }

    #[test]
    fn offset_commit_key_matches_kafkas_bytes() {
        let key = RecordKey::Offset { group: "g".into(), topic: "t".into(), partition: 1 };
        assert_eq!(key.encode().as_ref(), &[0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 1]);
    }

    #[test]
    fn truncated_values_fail() {
        let offset =
            OffsetValue { offset: 1, leader_epoch: -1, metadata: String::new(), commit_timestamp_ms: 0 };
        let bytes = offset.encode();
        for len in 0..bytes.len() {
            assert!(OffsetValue::decode(&bytes[..len]).is_err());
        }
    }
}
