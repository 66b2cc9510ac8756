//! Placeholder until the consumer protocol codec lands.

use bytes::{Buf, BufMut};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as WireTp;
use kafka_protocol::messages::{ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::error::{Error, Result};

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

#[derive(Debug, Clone, Default)]
pub struct Subscription {
    pub topics: Vec<String>,
    pub user_data: Option<Bytes>,
    pub owned_partitions: Vec<TopicPartition>,
    pub generation_id: i32,
    pub rack_id: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Assignment {
    pub partitions: Vec<TopicPartition>,
    pub user_data: Option<Bytes>,
}

fn bad(e: impl std::fmt::Display) -> Error {
    Error::Protocol { addr: "group".into(), reason: e.to_string() }
}

impl Subscription {
    pub fn encode(&self) -> Bytes {
        let s = ConsumerProtocolSubscription::default()
            .with_topics(self.topics.iter().map(|t| StrBytes::from_string(t.clone())).collect());
        let mut out = BytesMut::new();
        out.put_i16(0);
        s.encode(&mut out, 0).unwrap();
        out.freeze()
    }
    pub fn decode(mut bytes: Bytes) -> Result<Self> {
        if bytes.len() < 2 {
            return Err(bad("short"));
        }
        let v = bytes.get_i16().min(3);
        let s = ConsumerProtocolSubscription::decode(&mut bytes, v).map_err(bad)?;
        Ok(Self { topics: s.topics.iter().map(|t| t.to_string()).collect(), ..Default::default() })
    }
}

impl Assignment {
    pub fn encode(&self) -> Bytes {
        let mut by: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
        for tp in &self.partitions {
            by.entry(&tp.topic).or_default().push(tp.partition);
        }
        let a = ConsumerProtocolAssignment::default().with_assigned_partitions(
            by.into_iter()
                .map(|(t, p)| {
                    WireTp::default()
                        .with_topic(TopicName(StrBytes::from_string(t.to_owned())))
                        .with_partitions(p)
                })
                .collect(),
        );
        let mut out = BytesMut::new();
        out.put_i16(0);
        a.encode(&mut out, 0).unwrap();
        out.freeze()
    }
    pub fn decode(mut bytes: Bytes) -> Result<Self> {
        if bytes.is_empty() {
            return Ok(Self::default());
        }
        if bytes.len() < 2 {
            return Err(bad("short"));
        }
        let v = bytes.get_i16().min(3);
        let a = ConsumerProtocolAssignment::decode(&mut bytes, v).map_err(bad)?;
        Ok(Self {
            partitions: a
                .assigned_partitions
                .iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(move |p| TopicPartition { topic: t.topic.0.to_string(), partition: *p })
                })
                .collect(),
            user_data: None,
        })
    }
}
