//! The classic consumer protocol's opaque bytes: the member metadata a
//! consumer puts in JoinGroup (its [`Subscription`]) and the assignment the
//! leader hands out through SyncGroup (an [`Assignment`]).
//!
//! Both start with an `i16` version, then the body of Kafka's
//! `ConsumerProtocolSubscription` / `ConsumerProtocolAssignment` (classic,
//! non-flexible encoding):
//!
//! ```text
//! Subscription => version topics user_data owned_partitions generation_id rack_id
//!   topics => [STRING]          user_data => NULLABLE_BYTES
//!   owned_partitions => [topic [partition]]   (v1+)
//!   generation_id => INT32 (v2+)              rack_id => NULLABLE_STRING (v3+)
//! Assignment => version [topic [partition]] user_data
//! ```
//!
//! We write what the Java client writes (`ConsumerProtocol`): version 3 for
//! both, topics sorted, owned partitions sorted and grouped by topic, the
//! generation as -1 when unknown. librdkafka writes version 3 as well. We
//! read versions 0..=3, and a newer version the way Java does: at our
//! highest, its trailing fields ignored (new versions only append fields).
//!
//! Decoding takes bytes from other clients, so it never trusts a length:
//! every array count is checked against the bytes left before anything is
//! allocated, and bad input is an [`Error`], never a panic.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{Error, Result};

/// The highest version of both message bodies this client knows.
pub const HIGHEST_VERSION: i16 = 3;

/// Java's `DEFAULT_GENERATION`: the member has no generation yet.
pub const DEFAULT_GENERATION: i32 = -1;

/// One partition of one topic.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self { topic: topic.into(), partition }
    }
}

/// What a member sends in JoinGroup: the topics it wants and, for the
/// cooperative protocol, what it owns now and since which generation.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Subscription {
    pub topics: Vec<String>,
    /// Assignor-specific bytes (the sticky assignors' previous assignment).
    pub user_data: Option<Bytes>,
    pub owned_partitions: Vec<TopicPartition>,
    /// The generation `owned_partitions` belong to; [`DEFAULT_GENERATION`]
    /// when unknown (and always when decoded from a version below 2).
    pub generation_id: i32,
    /// `client.rack`; an empty rack reads as none, as in Java.
    pub rack_id: Option<String>,
}

/// What the leader gives one member through SyncGroup.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Assignment {
    pub partitions: Vec<TopicPartition>,
    pub user_data: Option<Bytes>,
}

impl Subscription {
    /// A subscription to `topics` that owns nothing.
    pub fn new<T: Into<String>>(topics: impl IntoIterator<Item = T>) -> Self {
        Self {
            topics: topics.into_iter().map(Into::into).collect(),
            user_data: None,
            owned_partitions: Vec::new(),
            generation_id: DEFAULT_GENERATION,
            rack_id: None,
        }
    }

    /// The member metadata bytes, at the version the Java client writes.
    pub fn encode(&self) -> Result<Bytes> {
        self.encode_version(HIGHEST_VERSION)
    }

    /// The member metadata bytes at `version` (a newer version than we know
    /// is written as our highest, as Java does). Fields the version cannot
    /// carry are left out.
    pub fn encode_version(&self, version: i16) -> Result<Bytes> {
        let version = known_version(version, "subscription")?;
        let mut writer = Writer::new(version);
        let mut topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        topics.sort_unstable();
        topics.dedup();
        writer.array_len(topics.len())?;
        for topic in topics {
            writer.string(topic)?;
        }
        writer.nullable_bytes(self.user_data.as_deref())?;
        if version >= 1 {
            writer.topic_partitions(&self.owned_partitions)?;
        }
        if version >= 2 {
            writer.buf.put_i32(self.generation_id);
        }
        if version >= 3 {
            writer.nullable_string(self.rack_id.as_deref())?;
        }
        Ok(writer.buf.freeze())
    }

    /// Reads member metadata of any version.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut reader = Reader::new(bytes, "subscription");
        let version = known_version(reader.i16()?, "subscription")?;
        let topic_count = reader.array_len(STRING_MIN_BYTES)?;
        let mut topics = Vec::with_capacity(topic_count);
        for _ in 0..topic_count {
            topics.push(reader.string()?);
        }
        let user_data = reader.nullable_bytes()?;
        let owned_partitions = if version >= 1 { reader.topic_partitions()? } else { Vec::new() };
        let generation_id = if version >= 2 { reader.i32()? } else { DEFAULT_GENERATION };
        let rack_id = if version >= 3 { reader.nullable_string()? } else { None };
        let rack_id = rack_id.filter(|rack| !rack.is_empty());
        Ok(Self { topics, user_data, owned_partitions, generation_id, rack_id })
    }
}

impl Assignment {
    pub fn new(partitions: Vec<TopicPartition>) -> Self {
        Self { partitions, user_data: None }
    }

    /// The SyncGroup assignment bytes, at the version the Java client writes.
    pub fn encode(&self) -> Result<Bytes> {
        let mut writer = Writer::new(HIGHEST_VERSION);
        writer.topic_partitions(&self.partitions)?;
        writer.nullable_bytes(self.user_data.as_deref())?;
        Ok(writer.buf.freeze())
    }

    /// Reads assignment bytes of any version. An empty buffer is an empty
    /// assignment: the coordinator sends one to members the leader left out.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        if bytes.is_empty() {
            return Ok(Self::default());
        }
        let mut reader = Reader::new(bytes, "assignment");
        known_version(reader.i16()?, "assignment")?;
        let partitions = reader.topic_partitions()?;
        let user_data = reader.nullable_bytes()?;
        Ok(Self { partitions, user_data })
    }
}

/// Smallest encoding of a string (its i16 length) and of an array (its i32
/// count): what bounds a claimed element count by the bytes left.
pub(crate) const STRING_MIN_BYTES: usize = 2;
pub(crate) const ARRAY_MIN_BYTES: usize = 4;

/// Java's version check: negative versions are refused, newer ones are read
/// and written as our highest.
fn known_version(version: i16, what: &str) -> Result<i16> {
    if version < 0 {
        return Err(malformed(what, format!("unsupported version {version}")));
    }
    Ok(version.min(HIGHEST_VERSION))
}

/// Bad consumer-protocol bytes. They reach us relayed by the group
/// coordinator (JoinGroup members, SyncGroup assignment), hence the address.
pub(crate) fn malformed(what: &str, reason: impl std::fmt::Display) -> Error {
    Error::Protocol {
        addr: "group coordinator".to_owned(),
        reason: format!("consumer protocol {what}: {reason}"),
    }
}

/// Writes the classic (non-flexible) encoding, version first.
pub(crate) struct Writer {
    pub(crate) buf: BytesMut,
}

impl Writer {
    pub(crate) fn new(version: i16) -> Self {
        let mut buf = BytesMut::with_capacity(64);
        buf.put_i16(version);
        Self { buf }
    }

    /// A writer with no version header (the sticky assignors' user data).
    pub(crate) fn headless() -> Self {
        Self { buf: BytesMut::with_capacity(64) }
    }

    pub(crate) fn array_len(&mut self, len: usize) -> Result<()> {
        let len = i32::try_from(len).map_err(|_| malformed("encode", "array too long"))?;
        self.buf.put_i32(len);
        Ok(())
    }

    pub(crate) fn string(&mut self, s: &str) -> Result<()> {
        let len = i16::try_from(s.len()).map_err(|_| malformed("encode", "string too long"))?;
        self.buf.put_i16(len);
        self.buf.put_slice(s.as_bytes());
        Ok(())
    }

    fn nullable_string(&mut self, s: Option<&str>) -> Result<()> {
        match s {
            Some(s) => self.string(s),
            None => {
                self.buf.put_i16(-1);
                Ok(())
            }
        }
    }

    fn nullable_bytes(&mut self, bytes: Option<&[u8]>) -> Result<()> {
        let Some(bytes) = bytes else {
            self.buf.put_i32(-1);
            return Ok(());
        };
        self.array_len(bytes.len())?;
        self.buf.put_slice(bytes);
        Ok(())
    }

    /// `[topic [partition]]`, sorted by topic then partition and grouped
    /// by topic, as Java writes owned partitions.
    pub(crate) fn topic_partitions(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        let mut sorted: Vec<&TopicPartition> = partitions.iter().collect();
        sorted.sort_unstable();
        sorted.dedup();
        let groups: Vec<&[&TopicPartition]> = sorted.chunk_by(|a, b| a.topic == b.topic).collect();
        self.array_len(groups.len())?;
        for group in groups {
            self.string(&group[0].topic)?;
            self.array_len(group.len())?;
            for tp in group {
                self.buf.put_i32(tp.partition);
            }
        }
        Ok(())
    }
}

/// Reads the classic encoding from untrusted bytes.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Self { buf, what }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8]> {
        if self.buf.len() < len {
            return Err(malformed(self.what, "truncated"));
        }
        let (head, rest) = self.buf.split_at(len);
        self.buf = rest;
        Ok(head)
    }

    pub(crate) fn i16(&mut self) -> Result<i16> {
        let bytes = self.take(2)?;
        Ok(i16::from_be_bytes([bytes[0], bytes[1]]))
    }

    pub(crate) fn i32(&mut self) -> Result<i32> {
        let bytes = self.take(4)?;
        Ok(i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    /// An array count, refused when null, negative, or larger than the bytes
    /// left could hold at `element_min_bytes` each.
    pub(crate) fn array_len(&mut self, element_min_bytes: usize) -> Result<usize> {
        let len = self.i32()?;
        let len = usize::try_from(len).map_err(|_| malformed(self.what, "null or negative array"))?;
        if len.saturating_mul(element_min_bytes) > self.buf.len() {
            return Err(malformed(self.what, "truncated"));
        }
        Ok(len)
    }

    fn utf8(&mut self, len: usize) -> Result<String> {
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| malformed(self.what, "string is not UTF-8"))
    }

    pub(crate) fn string(&mut self) -> Result<String> {
        self.nullable_string()?.ok_or_else(|| malformed(self.what, "null where a string is required"))
    }

    fn nullable_string(&mut self) -> Result<Option<String>> {
        let len = self.i16()?;
        match usize::try_from(len) {
            Ok(len) => self.utf8(len).map(Some),
            Err(_) => Ok(None),
        }
    }

    fn nullable_bytes(&mut self) -> Result<Option<Bytes>> {
        let len = self.i32()?;
        match usize::try_from(len) {
            Ok(len) => Ok(Some(Bytes::copy_from_slice(self.take(len)?))),
            Err(_) => Ok(None),
        }
    }

    pub(crate) fn topic_partitions(&mut self) -> Result<Vec<TopicPartition>> {
        let topic_count = self.array_len(STRING_MIN_BYTES + ARRAY_MIN_BYTES)?;
        let mut partitions = Vec::new();
        for _ in 0..topic_count {
            let topic = self.string()?;
            let count = self.array_len(4)?;
            partitions.reserve(count);
            for _ in 0..count {
                partitions.push(TopicPartition { topic: topic.clone(), partition: self.i32()? });
            }
        }
        Ok(partitions)
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::consumer_protocol_assignment as assignment_body;
    use kafka_protocol::messages::consumer_protocol_subscription as subscription_body;
    use kafka_protocol::messages::{ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
    use proptest::prelude::*;

    use super::*;

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition::new(topic, partition)
    }

    fn full_subscription() -> Subscription {
        Subscription {
            topics: vec!["orders".into(), "audit".into()],
            user_data: Some(Bytes::from_static(b"\x00\x00\x00\x07")),
            owned_partitions: vec![tp("orders", 2), tp("audit", 0), tp("orders", 0)],
            generation_id: 7,
            rack_id: Some("rack-a".into()),
        }
    }

    /// The same subscription as kafka-protocol (Kafka's message schema)
    /// encodes it at `version`, with the version prefix.
    fn reference_subscription_bytes(subscription: &Subscription, version: i16) -> Vec<u8> {
        let mut topics: Vec<String> = subscription.topics.clone();
        topics.sort();
        let mut owned = subscription.owned_partitions.clone();
        owned.sort();
        let mut body = ConsumerProtocolSubscription::default()
            .with_topics(topics.into_iter().map(StrBytes::from_string).collect())
            .with_user_data(subscription.user_data.clone());
        if version >= 1 {
            let groups = owned.chunk_by(|a, b| a.topic == b.topic).map(|group| {
                subscription_body::TopicPartition::default()
                    .with_topic(TopicName(StrBytes::from_string(group[0].topic.clone())))
                    .with_partitions(group.iter().map(|tp| tp.partition).collect())
            });
            body = body.with_owned_partitions(groups.collect());
        }
        if version >= 2 {
            body = body.with_generation_id(subscription.generation_id);
        }
        if version >= 3 {
            body = body.with_rack_id(subscription.rack_id.clone().map(StrBytes::from_string));
        }
        let mut buf = BytesMut::new();
        buf.put_i16(version);
        body.encode(&mut buf, version).unwrap();
        buf.to_vec()
    }

    #[test]
    fn subscription_is_written_at_version_3_like_java() {
        let subscription = full_subscription();
        let bytes = subscription.encode().unwrap();
        assert_eq!(&bytes[..2], &[0, 3]);
        assert_eq!(bytes.to_vec(), reference_subscription_bytes(&subscription, 3));
    }

    #[test]
    fn each_version_matches_kafkas_schema_and_reads_back() {
        let subscription = full_subscription();
        for version in 0..=3 {
            let bytes = subscription.encode_version(version).unwrap();
            assert_eq!(bytes.to_vec(), reference_subscription_bytes(&subscription, version), "v{version}");
            let decoded = Subscription::decode(&bytes).unwrap();
            assert_eq!(decoded.topics, vec!["audit".to_owned(), "orders".to_owned()]);
            assert_eq!(decoded.user_data, subscription.user_data);
            let owned =
                if version >= 1 { vec![tp("audit", 0), tp("orders", 0), tp("orders", 2)] } else { vec![] };
            assert_eq!(decoded.owned_partitions, owned, "v{version}");
            assert_eq!(decoded.generation_id, if version >= 2 { 7 } else { DEFAULT_GENERATION });
            assert_eq!(decoded.rack_id.as_deref(), (version >= 3).then_some("rack-a"));
        }
    }

    #[test]
    fn kafka_protocol_reads_what_we_write() {
        let bytes = full_subscription().encode().unwrap();
        let mut body = bytes.slice(2..);
        let decoded = ConsumerProtocolSubscription::decode(&mut body, 3).unwrap();
        assert_eq!(decoded.generation_id, 7);
        assert_eq!(decoded.owned_partitions.len(), 2);
        assert!(body.is_empty());
    }

    #[test]
    fn a_newer_version_is_read_at_ours_ignoring_appended_fields() {
        let mut bytes = BytesMut::from(&full_subscription().encode().unwrap()[..]);
        bytes[1] = 9;
        bytes.put_slice(b"some future field");
        let decoded = Subscription::decode(&bytes).unwrap();
        assert_eq!(decoded.generation_id, 7);
        assert_eq!(decoded.rack_id.as_deref(), Some("rack-a"));
        let written = Subscription::new(["t"]).encode_version(9).unwrap();
        assert_eq!(&written[..2], &[0, 3]);
    }

    #[test]
    fn negative_version_and_truncation_are_errors() {
        let mut bytes = full_subscription().encode().unwrap().to_vec();
        for len in 0..bytes.len() {
            assert!(Subscription::decode(&bytes[..len]).is_err(), "prefix of {len} bytes decoded");
        }
        bytes[0] = 0xff;
        assert!(matches!(Subscription::decode(&bytes), Err(Error::Protocol { .. })));
        assert!(Subscription::new(["t"]).encode_version(-1).is_err());
    }

    #[test]
    fn empty_rack_reads_as_none_and_null_user_data_survives() {
        let mut subscription = Subscription::new(["t"]);
        subscription.rack_id = Some(String::new());
        let decoded = Subscription::decode(&subscription.encode().unwrap()).unwrap();
        assert_eq!(decoded.rack_id, None);
        assert_eq!(decoded.user_data, None);
        assert_eq!(decoded.generation_id, DEFAULT_GENERATION);
    }

    #[test]
    fn a_huge_array_count_is_refused_before_allocating() {
        let mut bytes = BytesMut::new();
        bytes.put_i16(1);
        bytes.put_i32(i32::MAX);
        assert!(Subscription::decode(&bytes).is_err());
        let mut bytes = BytesMut::new();
        bytes.put_i16(0);
        bytes.put_i32(i32::MAX);
        assert!(Assignment::decode(&bytes).is_err());
    }

    #[test]
    fn assignment_matches_kafkas_schema_and_reads_back() {
        let assignment = Assignment {
            partitions: vec![tp("b", 1), tp("a", 0), tp("b", 0)],
            user_data: Some(Bytes::from_static(b"hello")),
        };
        let bytes = assignment.encode().unwrap();
        let reference = ConsumerProtocolAssignment::default()
            .with_assigned_partitions(vec![
                assignment_body::TopicPartition::default()
                    .with_topic(TopicName(StrBytes::from_static_str("a")))
                    .with_partitions(vec![0]),
                assignment_body::TopicPartition::default()
                    .with_topic(TopicName(StrBytes::from_static_str("b")))
                    .with_partitions(vec![0, 1]),
            ])
            .with_user_data(Some(Bytes::from_static(b"hello")));
        let mut expected = BytesMut::new();
        expected.put_i16(3);
        reference.encode(&mut expected, 3).unwrap();
        assert_eq!(bytes, expected.freeze());
        let decoded = Assignment::decode(&bytes).unwrap();
        assert_eq!(decoded.partitions, vec![tp("a", 0), tp("b", 0), tp("b", 1)]);
        assert_eq!(decoded.user_data, assignment.user_data);
    }

    #[test]
    fn empty_assignment_bytes_are_an_empty_assignment() {
        assert_eq!(Assignment::decode(&[]).unwrap(), Assignment::default());
        let v0 = [0u8, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(Assignment::decode(&v0).unwrap(), Assignment::default());
    }

    fn topic() -> impl Strategy<Value = String> {
        "[a-z]{1,6}"
    }

    fn subscription() -> impl Strategy<Value = Subscription> {
        (
            prop::collection::btree_set(topic(), 0..5),
            prop::option::of(prop::collection::vec(any::<u8>(), 0..16)),
            prop::collection::btree_set((topic(), 0..50i32), 0..10),
            -1..1000i32,
            prop::option::of("[a-z0-9-]{1,8}"),
        )
            .prop_map(|(topics, user_data, owned, generation_id, rack_id)| Subscription {
                topics: topics.into_iter().collect(),
                user_data: user_data.map(Bytes::from),
                owned_partitions: owned.into_iter().map(|(t, p)| TopicPartition::new(t, p)).collect(),
                generation_id,
                rack_id,
            })
    }

    proptest! {
        #[test]
        fn subscriptions_round_trip(subscription in subscription()) {
            let decoded = Subscription::decode(&subscription.encode().unwrap()).unwrap();
            prop_assert_eq!(decoded, subscription);
        }

        #[test]
        fn assignments_round_trip(
            partitions in prop::collection::btree_set((topic(), 0..50i32), 0..20),
            user_data in prop::option::of(prop::collection::vec(any::<u8>(), 0..16)),
        ) {
            let assignment = Assignment {
                partitions: partitions.into_iter().map(|(t, p)| TopicPartition::new(t, p)).collect(),
                user_data: user_data.map(Bytes::from),
            };
            prop_assert_eq!(Assignment::decode(&assignment.encode().unwrap()).unwrap(), assignment);
        }

        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = Subscription::decode(&bytes);
            let _ = Assignment::decode(&bytes);
        }

        #[test]
        fn corrupted_valid_bytes_never_panic(
            subscription in subscription(),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        ) {
            let mut bytes = subscription.encode().unwrap().to_vec();
            for (at, byte) in flips {
                let at = at.index(bytes.len());
                bytes[at] = byte;
            }
            let _ = Subscription::decode(&bytes);
            let _ = Assignment::decode(&bytes);
        }
    }
}
