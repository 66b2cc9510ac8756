use bytes::{BufMut, BytesMut};

use super::*;
use crate::voters::{Endpoint, ReplicaKey, VersionRange, VoterNode};

fn voters() -> VoterSet {
    VoterSet::new([VoterNode {
        key: ReplicaKey::new(1, Some(uuid::Uuid::from_u128(0x1234))),
        endpoints: vec![Endpoint { listener: "CONTROLLER".into(), host: "127.0.0.1".into(), port: 9093 }],
        kraft_versions: VersionRange { min: 0, max: 1 },
    }])
}

fn checkpoint(records: Vec<Bytes>) -> Checkpoint {
    Checkpoint { last_contained_log_timestamp_ms: 99, kraft_version: 1, voters: Some(voters()), records }
}

#[test]
fn a_checkpoint_survives_a_round_trip() {
    let records: Vec<Bytes> = (0..2500).map(|i| Bytes::from(format!("record {i}"))).collect();
    for written in [checkpoint(records), checkpoint(Vec::new())] {
        assert_eq!(Checkpoint::decode(&written.encode(3, 7)).unwrap(), written);
    }
    let static_quorum = Checkpoint { kraft_version: 0, voters: None, ..checkpoint(vec![Bytes::from("x")]) };
    assert_eq!(Checkpoint::decode(&static_quorum.encode(3, 7)).unwrap(), static_quorum);
}

#[test]
fn records_past_the_batch_limit_start_a_new_batch() {
    let big = Bytes::from(vec![7u8; BATCH_MAX_BYTES / 2 + 1]);
    let written = checkpoint(vec![big.clone(), big.clone(), big]);
    let mut content = written.encode(3, 7);
    let mut batches = 0;
    while !content.is_empty() {
        RecordBatchDecoder::decode(&mut content).unwrap();
        batches += 1;
    }
    assert_eq!(batches, 5, "header, three data batches, footer");
    assert_eq!(Checkpoint::decode(&written.encode(3, 7)).unwrap(), written);
}

#[test]
fn every_flipped_byte_is_refused() {
    let content = checkpoint(vec![Bytes::from("a"), Bytes::from("bc")]).encode(2, 5);
    for at in 0..content.len() {
        let mut damaged = content.to_vec();
        damaged[at] ^= 0x01;
        let damaged = Bytes::from(damaged);
        // A flip in a base offset or length shows as a gap or a short file,
        // anywhere else as a CRC or magic mismatch.
        assert!(Checkpoint::decode(&damaged).is_err(), "flip at byte {at} undetected");
    }
}

#[test]
fn every_truncation_is_refused() {
    let content = checkpoint(vec![Bytes::from("a"), Bytes::from("bc")]).encode(2, 5);
    for len in 0..content.len() {
        let error = Checkpoint::decode(&content.slice(..len)).unwrap_err();
        assert!(!error.to_string().is_empty());
    }
}

#[test]
fn a_file_without_its_header_is_refused() {
    let data = data_batch(0, 1, &[Bytes::from("a")], 0);
    let footer = control_batch(1, 1, &[(SNAPSHOT_FOOTER, Bytes::from_static(&[0, 0, 0]))], 0);
    let error = Checkpoint::decode(&[data, footer].concat().into()).unwrap_err();
    assert!(error.to_string().contains("SnapshotHeaderRecord"), "{error}");
    let error = Checkpoint::decode(&Bytes::from_static(b"SKRH\0\0\0\x02\0\x01state")).unwrap_err();
    assert!(error.to_string().starts_with("invalid snapshot"), "{error}");
}

#[test]
fn a_file_ending_at_a_batch_boundary_before_the_footer_is_refused() {
    let content = checkpoint(vec![Bytes::from("a")]).encode(2, 5);
    let mut rest = content.clone();
    RecordBatchDecoder::decode(&mut rest).unwrap();
    RecordBatchDecoder::decode(&mut rest).unwrap();
    let without_footer = content.slice(..content.len() - rest.len());
    let error = Checkpoint::decode(&without_footer).unwrap_err();
    assert!(error.to_string().contains("truncated"), "{error}");
}

// ---- golden bytes, assembled from Kafka's record batch v2 layout ----------

fn zigzag(buf: &mut Vec<u8>, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        buf.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// One record: length, attributes 0, timestamp delta 0, offset delta,
/// key, value, no headers.
fn record(offset_delta: i64, key: Option<&[u8]>, value: &[u8]) -> Vec<u8> {
    let mut body = vec![0u8];
    zigzag(&mut body, 0);
    zigzag(&mut body, offset_delta);
    match key {
        Some(key) => {
            zigzag(&mut body, key.len() as i64);
            body.extend_from_slice(key);
        }
        None => zigzag(&mut body, -1),
    }
    zigzag(&mut body, value.len() as i64);
    body.extend_from_slice(value);
    zigzag(&mut body, 0);
    let mut out = Vec::new();
    zigzag(&mut out, body.len() as i64);
    out.extend_from_slice(&body);
    out
}

/// A batch as `MemoryRecordsBuilder` lays it out: no producer, create
/// time, uncompressed; attributes bit 5 for a control batch.
fn batch(base_offset: i64, epoch: i32, control: bool, timestamp: i64, records: &[Vec<u8>]) -> Vec<u8> {
    let mut after_crc = BytesMut::new();
    after_crc.put_i16(if control { 0x20 } else { 0 });
    after_crc.put_i32(records.len() as i32 - 1);
    after_crc.put_i64(timestamp);
    after_crc.put_i64(timestamp);
    after_crc.put_i64(-1);
    after_crc.put_i16(-1);
    after_crc.put_i32(-1);
    after_crc.put_i32(records.len() as i32);
    records.iter().for_each(|r| after_crc.put_slice(r));
    let mut out = BytesMut::new();
    out.put_i64(base_offset);
    out.put_i32(4 + 1 + 4 + after_crc.len() as i32);
    out.put_i32(epoch);
    out.put_i8(2);
    out.put_u32(crc32c::crc32c(&after_crc));
    out.put_slice(&after_crc);
    out.to_vec()
}

#[test]
fn the_file_is_byte_for_byte_what_kafkas_snapshot_writer_lays_out() {
    let written = Checkpoint {
        last_contained_log_timestamp_ms: 0x0102,
        kraft_version: 1,
        voters: Some(voters()),
        records: vec![Bytes::from_static(b"r0"), Bytes::from_static(b"r1")],
    };
    let (epoch, now) = (7, 1_700_000_000_000);
    // Control keys: key version 0, then the control type.
    let key = |control_type: u8| [0, 0, 0, control_type];
    // SnapshotHeaderRecord v0: Version, LastContainedLogTimestamp, no tags.
    let header = [&0i16.to_be_bytes()[..], &0x0102i64.to_be_bytes(), &[0]].concat();
    // KRaftVersionRecord v0: Version, KRaftVersion, no tags.
    let kraft_version = [0, 0, 0, 1, 0];
    // VotersRecord v0: Version, one voter (compact array length 2): id,
    // directory id, one endpoint (name, host as compact strings, uint16
    // port, no tags), KRaftVersionFeature (min, max, no tags), no tags.
    let mut voters = vec![0, 0, 2, 0, 0, 0, 1];
    voters.extend_from_slice(&0x1234u128.to_be_bytes());
    voters.push(2);
    voters.push(11);
    voters.extend_from_slice(b"CONTROLLER");
    voters.push(10);
    voters.extend_from_slice(b"127.0.0.1");
    voters.extend_from_slice(&9093u16.to_be_bytes());
    voters.push(0);
    voters.extend_from_slice(&[0, 0, 0, 1, 0]);
    voters.push(0);
    voters.push(0);
    // SnapshotFooterRecord v0: Version, no tags.
    let footer = [0, 0, 0];
    let expected = [
        batch(
            0,
            epoch,
            true,
            now,
            &[
                record(0, Some(&key(3)), &header),
                record(1, Some(&key(5)), &kraft_version),
                record(2, Some(&key(6)), &voters),
            ],
        ),
        batch(3, epoch, false, now, &[record(0, None, b"r0"), record(1, None, b"r1")]),
        batch(5, epoch, true, now, &[record(0, Some(&key(4)), &footer)]),
    ]
    .concat();
    assert_eq!(written.encode(epoch, now).to_vec(), expected);
    assert_eq!(Checkpoint::decode(&expected.into()).unwrap(), written);
}
