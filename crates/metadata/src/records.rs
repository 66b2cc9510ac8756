//! Metadata records: the entries of the metadata log.
//!
//! Each record value is framed like Kafka's metadata records: a frame version,
//! a record type and a record version (unsigned varints), then the fields.
//! New fields go in new record versions; decoding rejects what it does not
//! know rather than guessing.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use uuid::Uuid;

const FRAME_VERSION: u32 = 0;

/// One change to the cluster metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataRecord {
    /// The cluster's identity, written once when the log is created.
    Cluster { cluster_id: String },
    /// A new topic.
    Topic { name: String, topic_id: Uuid },
    /// A partition of a topic with its replica assignment.
    Partition { topic_id: Uuid, partition: i32, replicas: Vec<i32>, leader: i32, leader_epoch: i32 },
    /// A topic config set (`Some`) or removed (`None`), written with the topic.
    TopicConfig { topic_id: Uuid, name: String, value: Option<String> },
    /// A config of any resource set (`Some`) or removed (`None`), like KRaft's
    /// ConfigRecord: `resource_type` is Kafka's (2 topic, 4 broker) and a
    /// broker resource is named by its node id, or "" for the cluster default.
    Config { resource_type: i8, resource_name: String, name: String, value: Option<String> },
    /// A topic and all its partitions removed.
    RemoveTopic { topic_id: Uuid },
    /// A block of producer ids handed to a broker: ids below
    /// `next_producer_id` are taken (Kafka's ProducerIdsRecord).
    ProducerIds { broker_id: i32, broker_epoch: i64, next_producer_id: i64 },
}

/// A record value that does not decode.
#[derive(Debug, thiserror::Error)]
#[error("malformed metadata record: {0}")]
pub struct DecodeError(pub &'static str);

impl MetadataRecord {
    fn type_id(&self) -> u32 {
        match self {
            Self::Cluster { .. } => 0,
            Self::Topic { .. } => 2,
            Self::Partition { .. } => 3,
            Self::TopicConfig { .. } | Self::Config { .. } => 4,
            Self::RemoveTopic { .. } => 9,
            Self::ProducerIds { .. } => 15,
        }
    }

    /// Record type 4 is KRaft's ConfigRecord: version 0 names a topic by id,
    /// version 1 any resource by type and name.
    fn version(&self) -> u32 {
        match self {
            Self::Config { .. } => 1,
            _ => 0,
        }
    }

    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::new();
        put_uvarint(&mut buf, FRAME_VERSION);
        put_uvarint(&mut buf, self.type_id());
        put_uvarint(&mut buf, self.version());
        match self {
            Self::Cluster { cluster_id } => put_str(&mut buf, cluster_id),
            Self::Topic { name, topic_id } => {
                put_str(&mut buf, name);
                buf.put_slice(topic_id.as_bytes());
            }
            Self::Partition { topic_id, partition, replicas, leader, leader_epoch } => {
                buf.put_slice(topic_id.as_bytes());
                buf.put_i32(*partition);
                put_uvarint(&mut buf, replicas.len() as u32);
                replicas.iter().for_each(|r| buf.put_i32(*r));
                buf.put_i32(*leader);
                buf.put_i32(*leader_epoch);
            }
            Self::TopicConfig { topic_id, name, value } => {
                buf.put_slice(topic_id.as_bytes());
                put_str(&mut buf, name);
                put_optional_str(&mut buf, value.as_deref());
            }
            Self::Config { resource_type, resource_name, name, value } => {
                buf.put_i8(*resource_type);
                put_str(&mut buf, resource_name);
                put_str(&mut buf, name);
                put_optional_str(&mut buf, value.as_deref());
            }
            Self::RemoveTopic { topic_id } => buf.put_slice(topic_id.as_bytes()),
            Self::ProducerIds { broker_id, broker_epoch, next_producer_id } => {
                buf.put_i32(*broker_id);
                buf.put_i64(*broker_epoch);
                buf.put_i64(*next_producer_id);
            }
        }
        buf.freeze()
    }

    pub fn decode(mut buf: &[u8]) -> Result<Self, DecodeError> {
        if get_uvarint(&mut buf)? != FRAME_VERSION {
            return Err(DecodeError("unknown frame version"));
        }
        let type_id = get_uvarint(&mut buf)?;
        let version = get_uvarint(&mut buf)?;
        let known_version = if type_id == 4 { version <= 1 } else { version == 0 };
        if !known_version {
            return Err(DecodeError("unknown record version"));
        }
        let record = match type_id {
            0 => Self::Cluster { cluster_id: get_str(&mut buf)? },
            2 => Self::Topic { name: get_str(&mut buf)?, topic_id: get_uuid(&mut buf)? },
            3 => {
                let topic_id = get_uuid(&mut buf)?;
                let partition = get_i32(&mut buf)?;
                let count = get_uvarint(&mut buf)? as usize;
                if count > buf.remaining() / 4 {
                    return Err(DecodeError("replica count exceeds the record"));
                }
                let replicas = (0..count).map(|_| get_i32(&mut buf)).collect::<Result<_, _>>()?;
                let leader = get_i32(&mut buf)?;
                let leader_epoch = get_i32(&mut buf)?;
                Self::Partition { topic_id, partition, replicas, leader, leader_epoch }
            }
            4 if version == 0 => {
                let topic_id = get_uuid(&mut buf)?;
                let name = get_str(&mut buf)?;
                let value = get_optional_str(&mut buf)?;
                Self::TopicConfig { topic_id, name, value }
            }
            4 => {
                let resource_type = get_u8(&mut buf)? as i8;
                let resource_name = get_str(&mut buf)?;
                let name = get_str(&mut buf)?;
                let value = get_optional_str(&mut buf)?;
                Self::Config { resource_type, resource_name, name, value }
            }
            9 => Self::RemoveTopic { topic_id: get_uuid(&mut buf)? },
            15 => Self::ProducerIds {
                broker_id: get_i32(&mut buf)?,
                broker_epoch: get_i64(&mut buf)?,
                next_producer_id: get_i64(&mut buf)?,
            },
            _ => return Err(DecodeError("unknown record type")),
        };
        if buf.has_remaining() {
            return Err(DecodeError("trailing bytes"));
        }
        Ok(record)
    }
}

fn put_uvarint(buf: &mut BytesMut, mut value: u32) {
    while value >= 0x80 {
        buf.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    buf.put_u8(value as u8);
}

fn get_uvarint(buf: &mut &[u8]) -> Result<u32, DecodeError> {
    let mut value = 0u32;
    for shift in (0..35).step_by(7) {
        let byte = get_u8(buf)?;
        value |= u32::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(DecodeError("varint too long"))
}

fn put_str(buf: &mut BytesMut, s: &str) {
    put_uvarint(buf, s.len() as u32);
    buf.put_slice(s.as_bytes());
}

fn get_str(buf: &mut &[u8]) -> Result<String, DecodeError> {
    let len = get_uvarint(buf)? as usize;
    if len > buf.remaining() {
        return Err(DecodeError("string exceeds the record"));
    }
    let (s, rest) = buf.split_at(len);
    *buf = rest;
    String::from_utf8(s.to_vec()).map_err(|_| DecodeError("string is not UTF-8"))
}

fn put_optional_str(buf: &mut BytesMut, s: Option<&str>) {
    buf.put_u8(s.is_some().into());
    if let Some(s) = s {
        put_str(buf, s);
    }
}

fn get_optional_str(buf: &mut &[u8]) -> Result<Option<String>, DecodeError> {
    match get_u8(buf)? {
        0 => Ok(None),
        _ => get_str(buf).map(Some),
    }
}

fn get_u8(buf: &mut &[u8]) -> Result<u8, DecodeError> {
    if buf.is_empty() {
        return Err(DecodeError("record is truncated"));
    }
    Ok(buf.get_u8())
}

fn get_i32(buf: &mut &[u8]) -> Result<i32, DecodeError> {
    if buf.remaining() < 4 {
        return Err(DecodeError("record is truncated"));
    }
    Ok(buf.get_i32())
}

fn get_i64(buf: &mut &[u8]) -> Result<i64, DecodeError> {
    if buf.remaining() < 8 {
        return Err(DecodeError("record is truncated"));
    }
    Ok(buf.get_i64())
}

fn get_uuid(buf: &mut &[u8]) -> Result<Uuid, DecodeError> {
    if buf.remaining() < 16 {
        return Err(DecodeError("record is truncated"));
    }
    let (id, rest) = buf.split_at(16);
    *buf = rest;
    Ok(Uuid::from_slice(id).expect("16 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_kind_round_trips() {
        let id = Uuid::new_v4();
        let records = [
            MetadataRecord::Cluster { cluster_id: "abc".into() },
            MetadataRecord::Topic { name: "orders".into(), topic_id: id },
            MetadataRecord::Partition {
                topic_id: id,
                partition: 3,
                replicas: vec![1, 2],
                leader: 1,
                leader_epoch: 4,
            },
            MetadataRecord::TopicConfig {
                topic_id: id,
                name: "retention.ms".into(),
                value: Some("1000".into()),
            },
            MetadataRecord::TopicConfig { topic_id: id, name: "retention.ms".into(), value: None },
            MetadataRecord::Config {
                resource_type: 4,
                resource_name: String::new(),
                name: "log.retention.ms".into(),
                value: Some("60000".into()),
            },
            MetadataRecord::Config {
                resource_type: 2,
                resource_name: "orders".into(),
                name: "segment.bytes".into(),
                value: None,
            },
            MetadataRecord::RemoveTopic { topic_id: id },
            MetadataRecord::ProducerIds { broker_id: 1, broker_epoch: -1, next_producer_id: 5_000 },
        ];
        for record in records {
            assert_eq!(MetadataRecord::decode(&record.encode()).unwrap(), record);
        }
    }

    #[test]
    fn truncated_records_fail_to_decode() {
        let records = [
            MetadataRecord::Topic { name: "orders".into(), topic_id: Uuid::new_v4() },
            MetadataRecord::Config {
                resource_type: 2,
                resource_name: "orders".into(),
                name: "cleanup.policy".into(),
                value: Some("compact".into()),
            },
        ];
        for encoded in records.iter().map(MetadataRecord::encode) {
            for len in 0..encoded.len() {
                assert!(MetadataRecord::decode(&encoded[..len]).is_err());
            }
        }
    }

    #[test]
    fn unknown_versions_are_refused() {
        let mut encoded = MetadataRecord::Cluster { cluster_id: "abc".into() }.encode().to_vec();
        encoded[2] = 1;
        assert!(MetadataRecord::decode(&encoded).is_err());
        let mut encoded = MetadataRecord::Config {
            resource_type: 4,
            resource_name: "1".into(),
            name: "message.max.bytes".into(),
            value: None,
        }
        .encode()
        .to_vec();
        encoded[2] = 2;
        assert!(MetadataRecord::decode(&encoded).is_err());
    }
}
