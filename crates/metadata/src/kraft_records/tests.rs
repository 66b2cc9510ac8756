//! Round trips, Kafka's encoding checked by hand, hostile input, and the
//! generated code kept in step with the schemas.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use uuid::Uuid;

use super::*;

/// Arbitrary field values drawn from fuzzer-style entropy bytes (zeros once
/// they run out), so proptest shrinks a failing record by shrinking bytes.
pub(crate) struct Gen<'a> {
    entropy: &'a [u8],
}

impl<'a> Gen<'a> {
    fn new(entropy: &'a [u8]) -> Self {
        Self { entropy }
    }

    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0; N];
        let n = N.min(self.entropy.len());
        out[..n].copy_from_slice(&self.entropy[..n]);
        self.entropy = &self.entropy[n..];
        out
    }

    fn small(&mut self, bound: u8) -> usize {
        usize::from(self.take::<1>()[0] % bound)
    }

    pub fn i8(&mut self) -> i8 {
        i8::from_be_bytes(self.take())
    }
    pub fn i16(&mut self) -> i16 {
        i16::from_be_bytes(self.take())
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.take())
    }
    pub fn i32(&mut self) -> i32 {
        i32::from_be_bytes(self.take())
    }
    pub fn i64(&mut self) -> i64 {
        i64::from_be_bytes(self.take())
    }
    /// Finite, so that a round trip compares equal.
    pub fn f64(&mut self) -> f64 {
        f64::from(self.i32()) / 8.0
    }
    pub fn bool(&mut self) -> bool {
        self.take::<1>()[0] & 1 == 1
    }
    pub fn uuid(&mut self) -> Uuid {
        Uuid::from_bytes(self.take())
    }
    /// Short strings with multi-byte characters among them.
    pub fn string(&mut self) -> String {
        const ALPHABET: [char; 6] = ['a', 'Z', '-', '.', 'é', '日'];
        (0..self.small(6)).map(|_| ALPHABET[self.small(6)]).collect()
    }
    pub fn bytes(&mut self) -> Bytes {
        (0..self.small(6)).map(|_| self.take::<1>()[0]).collect()
    }
    pub fn vec<T>(&mut self, mut element: impl FnMut(&mut Self) -> T) -> Vec<T> {
        (0..self.small(4)).map(|_| element(self)).collect()
    }
    pub fn nullable<T>(&mut self, allowed: bool, value: impl FnOnce(&mut Self) -> T) -> Option<T> {
        match allowed && self.small(4) == 0 {
            true => None,
            false => Some(value(self)),
        }
    }
    /// Unknown tagged fields above the schema's tags, ascending, as a decoder keeps them.
    pub fn unknown_tagged_fields(&mut self, first_free_tag: u32) -> Vec<RawTaggedField> {
        let mut tag = first_free_tag;
        let count = if self.small(4) == 0 { 1 + self.small(2) } else { 0 };
        (0..count)
            .map(|_| {
                tag += self.small(3) as u32;
                let field = RawTaggedField { tag, data: self.bytes() };
                tag += 1;
                field
            })
            .collect()
    }
}

fn encode(record: &MetadataRecord, version: i16) -> Vec<u8> {
    let mut out = BytesMut::new();
    record.encode_frame(version, &mut out).unwrap();
    out.to_vec()
}

/// Every version of every record type, with up to 64 entropy bytes each.
fn any_record() -> impl Strategy<Value = (MetadataRecord, i16)> {
    (
        proptest::sample::select(RECORD_TYPES.to_vec()),
        any::<u16>(),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(record_type, pick, entropy)| {
            let (_, lowest, highest) = MetadataRecord::schema(record_type).unwrap();
            let version = lowest + (pick % (highest - lowest + 1) as u16) as i16;
            (MetadataRecord::arbitrary(record_type, &mut Gen::new(&entropy), version), version)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn every_record_round_trips_at_its_versions((record, version) in any_record()) {
        let bytes = encode(&record, version);
        let (decoded, decoded_version) = MetadataRecord::decode_frame(&bytes).unwrap();
        prop_assert_eq!(decoded_version, version);
        prop_assert_eq!(&decoded, &record);
        prop_assert_eq!(encode(&decoded, version), bytes);
    }

    #[test]
    fn every_truncation_is_an_error((record, version) in any_record()) {
        let bytes = encode(&record, version);
        for len in 0..bytes.len() {
            prop_assert!(MetadataRecord::decode_frame(&bytes[..len]).is_err(), "prefix of {} bytes decoded", len);
        }
    }

    #[test]
    fn corrupted_records_never_panic(
        (record, version) in any_record(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = encode(&record, version);
        for (at, value) in flips {
            let len = bytes.len();
            bytes[at % len] = value;
        }
        let _ = MetadataRecord::decode_frame(&bytes);
    }

    #[test]
    fn random_bodies_never_panic(record_type in 0u8..30, version in 0u8..4, body in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut bytes = vec![1, record_type, version];
        bytes.extend(body);
        let _ = MetadataRecord::decode_frame(&bytes);
    }
}

fn topic_id() -> Uuid {
    Uuid::from_bytes([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15])
}

/// Checked by hand against Kafka's spec (Kafka ships no encoded metadata
/// records among its test resources): frame version 1, type 2, version 0;
/// Name as a compact string (length + 1 = 4, "foo"); TopicId as 16 bytes; an
/// empty tagged-field section.
#[test]
fn topic_record_is_encoded_as_kafka_does() {
    let record =
        MetadataRecord::from(TopicRecord { name: "foo".into(), topic_id: topic_id(), ..Default::default() });
    let mut expected = vec![0x01, 0x02, 0x00, 0x04, b'f', b'o', b'o'];
    expected.extend(topic_id().as_bytes());
    expected.push(0x00);
    assert_eq!(encode(&record, 0), expected);
}

/// PartitionChangeRecord keeps all but two fields in tagged fields, written
/// only when they differ from their defaults and in ascending tag order:
/// tag 0 Isr (size 9: compact length 3, two int32s), tag 1 Leader (size 4),
/// tag 8 Directories (v1+, size 17: compact length 2, one uuid).
#[test]
fn partition_change_record_writes_only_set_tagged_fields_in_tag_order() {
    let record = MetadataRecord::from(PartitionChangeRecord {
        partition_id: 1,
        topic_id: topic_id(),
        isr: Some(vec![1, 2]),
        leader: 2,
        directories: Some(vec![topic_id()]),
        ..Default::default()
    });
    let mut expected = vec![0x01, 0x05, 0x01, 0, 0, 0, 1];
    expected.extend(topic_id().as_bytes());
    expected
        .extend([0x03, 0x00, 0x09, 0x03, 0, 0, 0, 1, 0, 0, 0, 2, 0x01, 0x04, 0, 0, 0, 2, 0x08, 0x11, 0x02]);
    expected.extend(topic_id().as_bytes());
    assert_eq!(encode(&record, 1), expected);

    // Nothing changed: no tagged field at all.
    let unchanged =
        MetadataRecord::from(PartitionChangeRecord { topic_id: topic_id(), ..Default::default() });
    let mut expected = vec![0x01, 0x05, 0x01, 0xff, 0xff, 0xff, 0xff];
    expected.extend(topic_id().as_bytes());
    expected.push(0x00);
    assert_eq!(encode(&unchanged, 1), expected);
}

/// Value sizes Kafka itself printed: `kafka-dump-log.sh
/// --cluster-metadata-decoder` on a Kafka 3.7 metadata log, as published in
/// Strimzi's blog post on KRaft migration (2024-03-22). The topic id's value
/// does not change a size.
#[test]
fn encoded_sizes_match_kafkas_dump_log() {
    let topic = TopicRecord { name: "my-topic".into(), topic_id: topic_id(), ..Default::default() };
    assert_eq!(encode(&topic.into(), 0).len(), 29);
    let config = ConfigRecord {
        resource_type: 2,
        resource_name: "my-topic".into(),
        name: "retention.ms".into(),
        value: Some("100000".into()),
        ..Default::default()
    };
    assert_eq!(encode(&config.into(), 0).len(), 34);
    let partition = PartitionRecord {
        partition_id: 0,
        topic_id: topic_id(),
        replicas: vec![5, 3, 4],
        isr: vec![5, 3, 4],
        leader: 5,
        leader_epoch: 0,
        partition_epoch: 0,
        directories: vec![topic_id(); 3],
        ..Default::default()
    };
    assert_eq!(encode(&partition.into(), 1).len(), 113);
}

#[test]
fn defaults_are_kafkas() {
    let partition = PartitionRecord::default();
    assert_eq!(
        (partition.partition_id, partition.leader, partition.leader_epoch, partition.partition_epoch),
        (-1, -1, -1, -1)
    );
    assert_eq!(partition.eligible_leader_replicas, None);
    let change = PartitionChangeRecord::default();
    assert_eq!((change.leader, change.leader_recovery_state, change.isr.clone()), (-2, -1, None));
    assert!(RegisterBrokerRecord::default().fenced);
}

#[test]
fn frame_errors_match_kafkas() {
    let decode = MetadataRecord::decode_frame;
    assert_eq!(decode(&[0x00, 0x02, 0x00]), Err(DecodeError::UnknownFrameVersion(0)));
    assert_eq!(decode(&[0x0f]), Err(DecodeError::UnknownFrameVersion(15)));
    assert_eq!(decode(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x80]), Err(DecodeError::VarintTooLong));
    assert_eq!(decode(&[0x01, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80]), Err(DecodeError::VarintTooLong));
    assert_eq!(
        decode(&[0x01, 0x08, 0xff, 0xff, 0xff, 0x7f, 0x80]),
        Err(DecodeError::FrameValueTooLarge("version"))
    );
    assert_eq!(decode(&[0x01, 0xff, 0x7f, 0x00, 0x80]), Err(DecodeError::UnknownRecordType(0x3fff)));
    assert_eq!(decode(&[0x01, 0x06, 0x00, 0x00]), Err(DecodeError::UnknownRecordType(6)));
    assert_eq!(
        decode(&[0x01, 0x02, 0x01]),
        Err(DecodeError::UnsupportedVersion { record: "TopicRecord", version: 1 })
    );
    assert_eq!(decode(&[0x01, 0x00, 0x00, 0x80]), Err(DecodeError::Truncated));
    assert_eq!(
        decode(&[0x01, 0x14, 0x00, 0x00, 0xaa]),
        Err(DecodeError::TrailingBytes { record_type: 20, len: 1 })
    );
    assert_eq!(decode(&[0x01, 0x14, 0x00, 0x00]), Ok((NoOpRecord::default().into(), 0)));
}

#[test]
fn declared_lengths_beyond_the_input_are_rejected_before_allocating() {
    // PartitionRecord v0: partition id, topic id, then Replicas claiming 2^31 - 2 elements.
    let mut bytes = vec![0x01, 0x03, 0x00, 0, 0, 0, 0];
    bytes.extend([0; 16]);
    bytes.extend([0xff, 0xff, 0xff, 0xff, 0x07]);
    assert_eq!(
        MetadataRecord::decode_frame(&bytes),
        Err(DecodeError::LengthBeyondInput {
            field: "PartitionRecord.Replicas",
            len: 0x7fff_fffe,
            remaining: 0
        })
    );
}

#[test]
fn an_array_needs_room_for_its_smallest_elements() {
    // PartitionRecord v0 whose Replicas claims 3 int32s with 11 bytes left.
    let mut bytes = vec![0x01, 0x03, 0x00, 0, 0, 0, 0];
    bytes.extend([0; 16]);
    bytes.push(0x04);
    bytes.extend([0; 11]);
    assert_eq!(
        MetadataRecord::decode_frame(&bytes),
        Err(DecodeError::LengthBeyondInput { field: "PartitionRecord.Replicas", len: 3, remaining: 11 })
    );
}

#[test]
fn null_in_a_non_nullable_field_is_an_error() {
    assert_eq!(
        MetadataRecord::decode_frame(&[0x01, 0x02, 0x00, 0x00]),
        Err(DecodeError::NullField("TopicRecord.Name"))
    );
    let record =
        MetadataRecord::from(PartitionChangeRecord { directories: Some(vec![]), ..Default::default() });
    assert!(MetadataRecord::decode_frame(&encode(&record, 1)).is_ok());
}

#[test]
fn strings_are_limited_like_kafkas() {
    let long = MetadataRecord::from(TopicRecord { name: "x".repeat(0x8000), ..Default::default() });
    assert_eq!(
        long.encode_frame(0, &mut BytesMut::new()),
        Err(EncodeError::TooLong { field: "TopicRecord.Name", len: 0x8000, max: 0x7fff })
    );
    let mut bytes = vec![0x01, 0x02, 0x00, 0x81, 0x80, 0x02];
    bytes.extend(vec![b'x'; 0x8000]);
    assert_eq!(
        MetadataRecord::decode_frame(&bytes),
        Err(DecodeError::StringTooLong { field: "TopicRecord.Name", len: 0x8000 })
    );
    let invalid_utf8 = [0x01, 0x02, 0x00, 0x02, 0xff];
    assert_eq!(
        MetadataRecord::decode_frame(&invalid_utf8),
        Err(DecodeError::InvalidUtf8("TopicRecord.Name"))
    );
}

#[test]
fn fields_a_version_lacks_must_hold_their_defaults() {
    let zk =
        MetadataRecord::from(RegisterBrokerRecord { is_migrating_zk_broker: true, ..Default::default() });
    assert_eq!(
        zk.encode_frame(1, &mut BytesMut::new()),
        Err(EncodeError::NonDefaultField { field: "RegisterBrokerRecord.IsMigratingZkBroker", version: 1 })
    );
    let log_dirs =
        MetadataRecord::from(RegisterBrokerRecord { log_dirs: vec![topic_id()], ..Default::default() });
    let mut out = BytesMut::from(&b"kept"[..]);
    assert_eq!(
        log_dirs.encode_frame(2, &mut out),
        Err(EncodeError::NonDefaultField { field: "RegisterBrokerRecord.LogDirs", version: 2 })
    );
    assert_eq!(&out[..], b"kept", "a failed encode leaves the buffer as it was");
    assert!(log_dirs.encode_frame(3, &mut out).is_ok());
    assert_eq!(
        zk.encode_frame(4, &mut BytesMut::new()),
        Err(EncodeError::UnsupportedVersion { record: "RegisterBrokerRecord", version: 4 })
    );
}

#[test]
fn unknown_tagged_fields_are_kept_and_known_tags_checked_by_version() {
    // TopicRecord v0 with two unknown tags, 7 and 3, in that order.
    let mut bytes = vec![0x01, 0x02, 0x00, 0x01];
    bytes.extend(topic_id().as_bytes());
    bytes.extend([0x02, 0x07, 0x01, 0xaa, 0x03, 0x00]);
    let (record, _) = MetadataRecord::decode_frame(&bytes).unwrap();
    let MetadataRecord::Topic(topic) = &record else { panic!("decoded {record:?}") };
    let tags: Vec<u32> = topic.unknown_tagged_fields.iter().map(|f| f.tag).collect();
    assert_eq!(tags, [7, 3]);
    // Written back in ascending tag order, as Kafka's RawTaggedFieldWriter does.
    assert_eq!(&encode(&record, 0)[bytes.len() - 6..], [0x02, 0x03, 0x00, 0x07, 0x01, 0xaa]);

    // PartitionRecord v1 carrying tag 1 (EligibleLeaderReplicas, tagged from v2).
    let mut v1 = encode(&PartitionRecord::default().into(), 1);
    let empty_section = v1.pop();
    assert_eq!(empty_section, Some(0));
    v1.extend([0x01, 0x01, 0x01, 0x01]);
    assert_eq!(MetadataRecord::decode_frame(&v1), Err(DecodeError::TagNotValid { tag: 1, version: 1 }));
}

#[test]
fn a_tagged_field_size_must_match_its_value() {
    // PartitionChangeRecord v0 whose Leader (tag 1, an int32) claims 5 bytes.
    let mut bytes = vec![0x01, 0x05, 0x00, 0, 0, 0, 0];
    bytes.extend([0; 16]);
    bytes.extend([0x01, 0x01, 0x05, 0, 0, 0, 3, 0]);
    assert_eq!(
        MetadataRecord::decode_frame(&bytes),
        Err(DecodeError::TaggedFieldTooLong { field: "PartitionChangeRecord.Leader", unread: 1 })
    );
}

#[test]
fn every_kafka_record_type_is_generated() {
    let expected =
        [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 14, 15, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28];
    assert_eq!(RECORD_TYPES, expected);
    assert_eq!(MetadataRecord::from(ClearElrRecord::default()).record_type(), 28);
}

#[test]
fn generated_code_matches_the_schemas() {
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let generated = strom_metadata_codegen::generate(&crate_dir.join("schemas")).unwrap();
    let checked_in = std::fs::read_to_string(crate_dir.join(strom_metadata_codegen::GENERATED_PATH)).unwrap();
    if let Some((line, (want, have))) =
        generated.lines().zip(checked_in.lines()).enumerate().find(|(_, (want, have))| want != have)
    {
        panic!(
            "{} is stale at line {}:\n  generated:  {want}\n  checked in: {have}\nrun `cargo run -p strom-metadata-codegen`",
            strom_metadata_codegen::GENERATED_PATH,
            line + 1
        );
    }
    assert_eq!(generated.len(), checked_in.len(), "run `cargo run -p strom-metadata-codegen`");
}
