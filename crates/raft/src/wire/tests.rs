//! Round trips through `kafka-protocol`'s encoding at every version, and
//! the malformed messages that must come back as errors.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::{Decodable, Encodable};
use proptest::prelude::*;

use super::*;
use crate::log::Records;
use crate::voters::SUPPORTED_KRAFT_VERSIONS;

const CLUSTER: &str = "MkU3OEVBNTcwNTJENDM2Qk";

/// Batches of data records only, length-prefixed: enough to see that the
/// bytes travel through untouched.
struct TestCodec;

impl RecordsCodec for TestCodec {
    fn encode(&self, batches: &[Batch]) -> Bytes {
        let mut out = BytesMut::new();
        for batch in batches {
            let Records::Data(records) = &batch.records else {
                panic!("the test codec carries data batches only");
            };
            out.put_u64(batch.base_offset);
            out.put_i32(batch.epoch);
            out.put_u32(records.len() as u32);
            for record in records {
                out.put_u32(record.len() as u32);
                out.put_slice(record);
            }
        }
        out.freeze()
    }

    fn decode(&self, mut records: Bytes) -> Result<Vec<Batch>, WireError> {
        let short = || WireError::Records("short".into());
        let mut batches = Vec::new();
        while records.has_remaining() {
            if records.remaining() < 16 {
                return Err(short());
            }
            let base_offset = records.get_u64();
            let epoch = records.get_i32();
            let mut data = Vec::new();
            for _ in 0..records.get_u32() {
                let len = records.try_get_u32().map_err(|_| short())? as usize;
                if records.remaining() < len {
                    return Err(short());
                }
                data.push(records.split_to(len));
            }
            batches.push(Batch { base_offset, epoch, records: Records::Data(data) });
        }
        Ok(batches)
    }
}

fn reencode<M: Encodable + Decodable>(message: &M, version: i16) -> M {
    let mut buf = BytesMut::new();
    message.encode(&mut buf, version).expect("encodes");
    let mut bytes = buf.freeze();
    let decoded = M::decode(&mut bytes, version).expect("decodes");
    assert!(bytes.is_empty(), "trailing bytes at v{version}");
    decoded
}

fn request_round_trip(body: &Body, version: i16) -> Body {
    let wire = match request_to_wire(body, CLUSTER, 7, version).unwrap() {
        WireRequest::Vote(m) => WireRequest::Vote(reencode(&m, version)),
        WireRequest::BeginQuorumEpoch(m) => WireRequest::BeginQuorumEpoch(reencode(&m, version)),
        WireRequest::EndQuorumEpoch(m) => WireRequest::EndQuorumEpoch(reencode(&m, version)),
        WireRequest::Fetch(m) => WireRequest::Fetch(reencode(&m, version)),
        WireRequest::FetchSnapshot(m) => WireRequest::FetchSnapshot(reencode(&m, version)),
        WireRequest::AddRaftVoter(m) => WireRequest::AddRaftVoter(reencode(&m, version)),
        WireRequest::RemoveRaftVoter(m) => WireRequest::RemoveRaftVoter(reencode(&m, version)),
        WireRequest::UpdateRaftVoter(m) => WireRequest::UpdateRaftVoter(reencode(&m, version)),
    };
    request_from_wire(&wire, CLUSTER, version).unwrap()
}

fn response_round_trip(body: &Body, version: i16) -> Body {
    let wire = match response_to_wire(body, version, &TestCodec).unwrap() {
        WireResponse::Vote(m) => WireResponse::Vote(reencode(&m, version)),
        WireResponse::BeginQuorumEpoch(m) => WireResponse::BeginQuorumEpoch(reencode(&m, version)),
        WireResponse::EndQuorumEpoch(m) => WireResponse::EndQuorumEpoch(reencode(&m, version)),
        WireResponse::Fetch(m) => WireResponse::Fetch(reencode(&m, version)),
        WireResponse::FetchSnapshot(m) => WireResponse::FetchSnapshot(reencode(&m, version)),
        WireResponse::AddRaftVoter(m) => WireResponse::AddRaftVoter(reencode(&m, version)),
        WireResponse::RemoveRaftVoter(m) => WireResponse::RemoveRaftVoter(reencode(&m, version)),
        WireResponse::UpdateRaftVoter(m) => WireResponse::UpdateRaftVoter(reencode(&m, version)),
    };
    response_from_wire(&wire, version, &TestCodec).unwrap()
}

fn offset() -> impl Strategy<Value = u64> {
    0..=i64::MAX as u64
}

fn position() -> impl Strategy<Value = OffsetAndEpoch> {
    (offset(), 0..=i32::MAX).prop_map(|(offset, epoch)| OffsetAndEpoch::new(offset, epoch))
}

fn node() -> impl Strategy<Value = NodeId> {
    0..=i32::MAX
}

fn error() -> impl Strategy<Value = ErrorCode> {
    prop::sample::select(vec![
        ErrorCode::None,
        ErrorCode::NotLeaderOrFollower,
        ErrorCode::InvalidRequest,
        ErrorCode::FencedLeaderEpoch,
        ErrorCode::UnknownLeaderEpoch,
        ErrorCode::InconsistentVoterSet,
        ErrorCode::SnapshotNotFound,
        ErrorCode::PositionOutOfRange,
        ErrorCode::RequestTimedOut,
        ErrorCode::UnsupportedVersion,
        ErrorCode::InvalidVoterKey,
        ErrorCode::DuplicateVoter,
        ErrorCode::VoterNotFound,
    ])
}

fn directory() -> impl Strategy<Value = Option<Uuid>> {
    prop::option::of(any::<u128>().prop_filter("not the zero uuid", |id| *id != 0).prop_map(Uuid::from_u128))
}

fn endpoints() -> impl Strategy<Value = Vec<Endpoint>> {
    let endpoint = ("[A-Z]{1,10}", "[a-z0-9.]{0,20}", 1..=u16::MAX)
        .prop_map(|(listener, host, port)| Endpoint { listener, host, port });
    prop::collection::vec(endpoint, 0..3)
}

/// What survives a round trip at `version`: the directory ids of versions
/// that carry none are dropped.
fn visible_at(body: &Body, version: i16) -> Body {
    let mut body = body.clone();
    match &mut body {
        Body::VoteRequest { candidate_directory_id, voter_directory_id, .. } if version < 1 => {
            *candidate_directory_id = None;
            *voter_directory_id = None;
        }
        Body::BeginQuorumEpochRequest { voter_directory_id, .. } if version < 1 => *voter_directory_id = None,
        Body::FetchRequest { replica_directory_id, .. } if version < 17 => *replica_directory_id = None,
        Body::FetchSnapshotRequest { replica_directory_id, .. } if version < 1 => {
            *replica_directory_id = None
        }
        Body::EndQuorumEpochRequest { preferred_candidate_directory_ids, .. } if version < 1 => {
            preferred_candidate_directory_ids.clear()
        }
        _ => {}
    }
    body
}

fn batches() -> impl Strategy<Value = Vec<Batch>> {
    let record = prop::collection::vec(any::<u8>(), 0..16).prop_map(Bytes::from);
    let batch = (offset(), any::<i32>(), prop::collection::vec(record, 1..4)).prop_map(
        |(base_offset, epoch, records)| Batch { base_offset, epoch, records: Records::Data(records) },
    );
    prop::collection::vec(batch, 0..4)
}

fn request() -> impl Strategy<Value = Body> {
    prop_oneof![
        (any::<i32>(), node(), position(), any::<bool>(), directory(), directory()).prop_map(
            |(
                replica_epoch,
                candidate_id,
                last_position,
                pre_vote,
                candidate_directory_id,
                voter_directory_id,
            )| {
                Body::VoteRequest {
                    replica_epoch,
                    candidate_id,
                    last_position,
                    pre_vote,
                    candidate_directory_id,
                    voter_directory_id,
                }
            }
        ),
        (any::<i32>(), node(), directory()).prop_map(|(leader_epoch, leader_id, voter_directory_id)| {
            Body::BeginQuorumEpochRequest { leader_epoch, leader_id, voter_directory_id }
        }),
        (any::<i32>(), node(), prop::collection::vec((node(), directory()), 0..5)).prop_map(
            |(leader_epoch, leader_id, candidates)| Body::EndQuorumEpochRequest {
                leader_epoch,
                leader_id,
                preferred_successors: candidates.iter().map(|(id, _)| *id).collect(),
                preferred_candidate_directory_ids: candidates
                    .iter()
                    .map(|(_, directory)| *directory)
                    .collect(),
            }
        ),
        (node(), any::<i32>(), offset(), any::<i32>(), 0..=i32::MAX as u64, directory()).prop_map(
            |(
                replica_id,
                current_leader_epoch,
                fetch_offset,
                last_fetched_epoch,
                max_wait_ms,
                replica_directory_id,
            )| {
                Body::FetchRequest {
                    replica_id,
                    current_leader_epoch,
                    fetch_offset,
                    last_fetched_epoch,
                    max_wait_ms,
                    replica_directory_id,
                }
            }
        ),
        (node(), any::<i32>(), position(), offset(), 0..=i32::MAX as usize, directory()).prop_map(
            |(replica_id, current_leader_epoch, snapshot_id, position, max_bytes, replica_directory_id)| {
                Body::FetchSnapshotRequest {
                    replica_id,
                    current_leader_epoch,
                    snapshot_id,
                    position,
                    max_bytes,
                    replica_directory_id,
                }
            }
        ),
        (0..=i32::MAX as u64, node(), directory(), endpoints()).prop_map(
            |(timeout_ms, voter_id, voter_directory_id, listeners)| Body::AddRaftVoterRequest {
                timeout_ms,
                voter_id,
                voter_directory_id,
                listeners,
            }
        ),
        (node(), directory()).prop_map(|(voter_id, voter_directory_id)| Body::RemoveRaftVoterRequest {
            voter_id,
            voter_directory_id
        }),
        (any::<i32>(), node(), directory(), endpoints(), any::<i16>(), any::<i16>()).prop_map(
            |(current_leader_epoch, voter_id, voter_directory_id, listeners, min, max)| {
                Body::UpdateRaftVoterRequest {
                    current_leader_epoch,
                    voter_id,
                    voter_directory_id,
                    listeners,
                    kraft_versions: VersionRange { min, max },
                }
            }
        ),
    ]
}

fn leader() -> impl Strategy<Value = Option<NodeId>> {
    prop::option::of(node())
}

fn response() -> impl Strategy<Value = Body> {
    prop_oneof![
        (error(), any::<i32>(), leader(), any::<bool>()).prop_map(
            |(error, leader_epoch, leader_id, vote_granted)| Body::VoteResponse {
                error,
                leader_epoch,
                leader_id,
                vote_granted,
            }
        ),
        (error(), any::<i32>(), leader()).prop_map(|(error, leader_epoch, leader_id)| {
            Body::BeginQuorumEpochResponse { error, leader_epoch, leader_id }
        }),
        (error(), any::<i32>(), leader()).prop_map(|(error, leader_epoch, leader_id)| {
            Body::EndQuorumEpochResponse { error, leader_epoch, leader_id }
        }),
        (
            (error(), any::<i32>(), leader()),
            prop::option::of(offset()),
            prop::option::of(position()),
            prop::option::of(position()),
            batches(),
        )
            .prop_map(
                |(
                    (error, leader_epoch, leader_id),
                    high_watermark,
                    diverging_epoch,
                    snapshot_id,
                    batches,
                )| Body::FetchResponse {
                    error,
                    leader_epoch,
                    leader_id,
                    high_watermark,
                    diverging_epoch,
                    snapshot_id,
                    batches,
                }
            ),
        (
            (error(), any::<i32>(), leader()),
            position(),
            offset(),
            offset(),
            prop::collection::vec(any::<u8>(), 0..64),
        )
            .prop_map(|((error, leader_epoch, leader_id), snapshot_id, size, position, bytes)| {
                Body::FetchSnapshotResponse {
                    error,
                    leader_epoch,
                    leader_id,
                    snapshot_id,
                    size,
                    position,
                    bytes: Bytes::from(bytes),
                }
            }),
        (error(), prop::option::of("[ -~]{0,40}"))
            .prop_map(|(error, error_message)| Body::AddRaftVoterResponse { error, error_message }),
        (error(), prop::option::of("[ -~]{0,40}"))
            .prop_map(|(error, error_message)| Body::RemoveRaftVoterResponse { error, error_message }),
        (error(), any::<i32>(), leader(), prop::option::of(("[a-z0-9.]{1,20}", 1..=u16::MAX))).prop_map(
            |(error, leader_epoch, leader_id, endpoint)| Body::UpdateRaftVoterResponse {
                error,
                leader_epoch,
                leader_id,
                // The wire names no listener: it is the request's.
                leader_endpoint: endpoint.map(|(host, port)| Endpoint {
                    listener: String::new(),
                    host,
                    port
                }),
            }
        ),
    ]
}

proptest! {
    #[test]
    fn requests_round_trip_at_every_version(body in request()) {
        for version in supported_versions(&body) {
            if matches!(body, Body::VoteRequest { pre_vote: true, .. }) && version < 2 {
                continue;
            }
            prop_assert_eq!(&request_round_trip(&body, version), &visible_at(&body, version), "v{}", version);
        }
    }

    #[test]
    fn responses_round_trip_at_every_version(body in response()) {
        for version in supported_versions(&body) {
            prop_assert_eq!(&response_round_trip(&body, version), &body, "v{}", version);
        }
    }
}

fn vote_response() -> VoteResponse {
    let body = Body::VoteResponse {
        error: ErrorCode::None,
        leader_epoch: 3,
        leader_id: Some(1),
        vote_granted: true,
    };
    match response_to_wire(&body, 2, &TestCodec).unwrap() {
        WireResponse::Vote(response) => response,
        other => panic!("not a vote response: {other:?}"),
    }
}

fn fetch_response() -> FetchResponse {
    let body = Body::FetchResponse {
        error: ErrorCode::None,
        leader_epoch: 3,
        leader_id: Some(1),
        high_watermark: Some(10),
        diverging_epoch: None,
        snapshot_id: None,
        batches: Vec::new(),
    };
    match response_to_wire(&body, 17, &TestCodec).unwrap() {
        WireResponse::Fetch(response) => response,
        other => panic!("not a fetch response: {other:?}"),
    }
}

fn read_vote(response: VoteResponse) -> Result<Body, WireError> {
    response_from_wire(&WireResponse::Vote(response), 2, &TestCodec)
}

fn read_fetch(response: FetchResponse) -> Result<Body, WireError> {
    response_from_wire(&WireResponse::Fetch(response), 17, &TestCodec)
}

#[test]
fn responses_for_another_partition_are_errors() {
    assert!(read_vote(vote_response()).is_ok());

    let mut no_topics = vote_response();
    no_topics.topics.clear();
    assert_eq!(read_vote(no_topics), Err(WireError::WrongPartition));

    let mut other_topic = vote_response();
    other_topic.topics[0].topic_name = TopicName(StrBytes::from_static_str("orders"));
    assert_eq!(read_vote(other_topic), Err(WireError::WrongPartition));

    let mut other_partition = vote_response();
    other_partition.topics[0].partitions[0].partition_index = 1;
    assert_eq!(read_vote(other_partition), Err(WireError::WrongPartition));

    let mut no_partitions = vote_response();
    no_partitions.topics[0].partitions.clear();
    assert_eq!(read_vote(no_partitions), Err(WireError::WrongPartition));

    let mut two_partitions = vote_response();
    let copy = two_partitions.topics[0].partitions[0].clone();
    two_partitions.topics[0].partitions.push(copy);
    assert_eq!(read_vote(two_partitions), Err(WireError::WrongPartition));

    let mut two_topics = vote_response();
    let copy = two_topics.topics[0].clone();
    two_topics.topics.push(copy);
    assert_eq!(read_vote(two_topics), Err(WireError::WrongPartition));

    let mut other_topic_id = fetch_response();
    other_topic_id.responses[0].topic_id = Uuid::from_u128(2);
    assert_eq!(read_fetch(other_topic_id), Err(WireError::WrongPartition));
}

#[test]
fn malformed_responses_are_errors() {
    let mut top_level = fetch_response();
    top_level.error_code = 104;
    assert_eq!(read_fetch(top_level), Err(WireError::TopLevelError(104)));

    let mut unknown_code = vote_response();
    unknown_code.topics[0].partitions[0].error_code = 3;
    assert_eq!(read_vote(unknown_code), Err(WireError::UnknownErrorCode(3)));

    let mut bad_high_watermark = fetch_response();
    bad_high_watermark.responses[0].partitions[0].high_watermark = -5;
    assert_eq!(read_fetch(bad_high_watermark), Err(WireError::InvalidField("HighWatermark")));

    let mut half_diverging = fetch_response();
    half_diverging.responses[0].partitions[0].diverging_epoch.end_offset = 4;
    assert_eq!(read_fetch(half_diverging), Err(WireError::InvalidField("DivergingEpoch")));

    let mut torn_records = fetch_response();
    torn_records.responses[0].partitions[0].records = Some(Bytes::from_static(&[0, 1, 2]));
    assert!(matches!(read_fetch(torn_records), Err(WireError::Records(_))));

    assert!(matches!(
        response_from_wire(&WireResponse::Vote(vote_response()), 3, &TestCodec),
        Err(WireError::UnsupportedVersion { api: "Vote", version: 3 })
    ));
}

#[test]
fn requests_are_checked() {
    let vote = Body::VoteRequest {
        replica_epoch: 2,
        candidate_id: 1,
        last_position: OffsetAndEpoch::new(5, 1),
        pre_vote: true,
        candidate_directory_id: Some(Uuid::from_u128(11)),
        voter_directory_id: None,
    };
    assert_eq!(request_to_wire(&vote, CLUSTER, 2, 1), Err(WireError::InvalidField("PreVote")));
    let wire = request_to_wire(&vote, CLUSTER, 2, 2).unwrap();
    assert_eq!(request_from_wire(&wire, "another-cluster", 2), Err(WireError::InconsistentClusterId));
    let WireRequest::Vote(mut anonymous) = wire else {
        panic!("not a vote request");
    };
    anonymous.cluster_id = None;
    assert_eq!(request_from_wire(&WireRequest::Vote(anonymous), CLUSTER, 2), Ok(vote));

    let fetch = Body::FetchRequest {
        replica_id: 1,
        current_leader_epoch: 2,
        fetch_offset: 5,
        last_fetched_epoch: 1,
        max_wait_ms: 500,
        replica_directory_id: Some(Uuid::from_u128(11)),
    };
    let WireRequest::Fetch(mut negative) = request_to_wire(&fetch, CLUSTER, 2, 17).unwrap() else {
        panic!("not a fetch request");
    };
    negative.topics[0].partitions[0].fetch_offset = -1;
    assert_eq!(
        request_from_wire(&WireRequest::Fetch(negative), CLUSTER, 17),
        Err(WireError::InvalidField("FetchOffset"))
    );
    assert!(matches!(
        request_to_wire(&fetch, CLUSTER, 2, 12),
        Err(WireError::UnsupportedVersion { api: "Fetch", version: 12 })
    ));
    assert_eq!(response_to_wire(&fetch, 17, &TestCodec), Err(WireError::WrongDirection));
}

#[test]
fn metadata_topic_id_is_kafkas() {
    // `AAAAAAAAAAAAAAAAAAAAAQ` in unpadded base64: fifteen zero bytes, then 1.
    assert_eq!(METADATA_TOPIC_ID.as_bytes(), &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
}

fn one_of_each_request() -> Vec<Body> {
    vec![
        Body::VoteRequest {
            replica_epoch: 2,
            candidate_id: 1,
            last_position: OffsetAndEpoch::new(5, 1),
            pre_vote: false,
            candidate_directory_id: Some(Uuid::from_u128(11)),
            voter_directory_id: Some(Uuid::from_u128(12)),
        },
        Body::BeginQuorumEpochRequest { leader_epoch: 2, leader_id: 1, voter_directory_id: None },
        Body::EndQuorumEpochRequest {
            leader_epoch: 2,
            leader_id: 1,
            preferred_successors: vec![3, 2],
            preferred_candidate_directory_ids: vec![Some(Uuid::from_u128(13)), None],
        },
        Body::FetchRequest {
            replica_id: 3,
            current_leader_epoch: 2,
            fetch_offset: 5,
            last_fetched_epoch: 1,
            max_wait_ms: 500,
            replica_directory_id: None,
        },
        Body::FetchSnapshotRequest {
            replica_id: 3,
            current_leader_epoch: 2,
            snapshot_id: OffsetAndEpoch::new(5, 1),
            position: 0,
            max_bytes: 1024,
            replica_directory_id: Some(Uuid::from_u128(13)),
        },
    ]
}

fn one_of_each_response() -> Vec<Body> {
    vec![
        Body::VoteResponse { error: ErrorCode::None, leader_epoch: 2, leader_id: None, vote_granted: true },
        Body::BeginQuorumEpochResponse { error: ErrorCode::None, leader_epoch: 2, leader_id: Some(1) },
        Body::EndQuorumEpochResponse { error: ErrorCode::None, leader_epoch: 2, leader_id: Some(1) },
        Body::FetchResponse {
            error: ErrorCode::None,
            leader_epoch: 2,
            leader_id: Some(1),
            high_watermark: None,
            diverging_epoch: Some(OffsetAndEpoch::new(4, 1)),
            snapshot_id: None,
            batches: Vec::new(),
        },
        Body::FetchSnapshotResponse {
            error: ErrorCode::None,
            leader_epoch: 2,
            leader_id: Some(1),
            snapshot_id: OffsetAndEpoch::new(5, 1),
            size: 10,
            position: 0,
            bytes: Bytes::from_static(b"chunk"),
        },
    ]
}

/// Moves the request's only partition to partition 1.
fn move_request_partition(request: &mut WireRequest) {
    match request {
        WireRequest::Vote(m) => m.topics[0].partitions[0].partition_index = 1,
        WireRequest::BeginQuorumEpoch(m) => m.topics[0].partitions[0].partition_index = 1,
        WireRequest::EndQuorumEpoch(m) => m.topics[0].partitions[0].partition_index = 1,
        WireRequest::Fetch(m) => m.topics[0].partitions[0].partition = 1,
        WireRequest::FetchSnapshot(m) => m.topics[0].partitions[0].partition = 1,
        WireRequest::AddRaftVoter(_) | WireRequest::RemoveRaftVoter(_) | WireRequest::UpdateRaftVoter(_) => {
            unreachable!("voter changes name no partition")
        }
    }
}

/// Drops the response's only topic.
fn drop_response_topic(response: &mut WireResponse) {
    match response {
        WireResponse::Vote(m) => m.topics.clear(),
        WireResponse::BeginQuorumEpoch(m) => m.topics.clear(),
        WireResponse::EndQuorumEpoch(m) => m.topics.clear(),
        WireResponse::Fetch(m) => m.responses.clear(),
        WireResponse::FetchSnapshot(m) => m.topics.clear(),
        WireResponse::AddRaftVoter(_)
        | WireResponse::RemoveRaftVoter(_)
        | WireResponse::UpdateRaftVoter(_) => {
            unreachable!("voter changes name no partition")
        }
    }
}

/// Moves the response's only partition to partition 1.
fn move_response_partition(response: &mut WireResponse) {
    match response {
        WireResponse::Vote(m) => m.topics[0].partitions[0].partition_index = 1,
        WireResponse::BeginQuorumEpoch(m) => m.topics[0].partitions[0].partition_index = 1,
        WireResponse::EndQuorumEpoch(m) => m.topics[0].partitions[0].partition_index = 1,
        WireResponse::Fetch(m) => m.responses[0].partitions[0].partition_index = 1,
        WireResponse::FetchSnapshot(m) => m.topics[0].partitions[0].index = 1,
        WireResponse::AddRaftVoter(_)
        | WireResponse::RemoveRaftVoter(_)
        | WireResponse::UpdateRaftVoter(_) => {
            unreachable!("voter changes name no partition")
        }
    }
}

#[test]
fn every_request_names_exactly_our_partition() {
    for body in one_of_each_request() {
        let version = *supported_versions(&body).end();
        let mut wire = request_to_wire(&body, CLUSTER, 2, version).unwrap();
        assert_eq!(request_from_wire(&wire, CLUSTER, version).as_ref(), Ok(&body));
        move_request_partition(&mut wire);
        assert_eq!(request_from_wire(&wire, CLUSTER, version), Err(WireError::WrongPartition), "{body:?}");
    }
}

#[test]
fn every_response_names_exactly_our_partition() {
    for body in one_of_each_response() {
        let version = *supported_versions(&body).end();
        let wire = response_to_wire(&body, version, &TestCodec).unwrap();
        assert_eq!(response_from_wire(&wire, version, &TestCodec).as_ref(), Ok(&body));
        for mutate in [drop_response_topic, move_response_partition] {
            let mut broken = wire.clone();
            mutate(&mut broken);
            assert_eq!(
                response_from_wire(&broken, version, &TestCodec),
                Err(WireError::WrongPartition),
                "{body:?}"
            );
        }
    }
}

#[test]
fn every_message_refuses_versions_outside_its_range() {
    for body in one_of_each_request() {
        let beyond = supported_versions(&body).end() + 1;
        assert!(matches!(
            request_to_wire(&body, CLUSTER, 2, beyond),
            Err(WireError::UnsupportedVersion { .. })
        ));
        assert_eq!(response_to_wire(&body, beyond - 1, &TestCodec), Err(WireError::WrongDirection));
    }
    for body in one_of_each_response() {
        let beyond = supported_versions(&body).end() + 1;
        assert!(matches!(
            response_to_wire(&body, beyond, &TestCodec),
            Err(WireError::UnsupportedVersion { .. })
        ));
        assert_eq!(request_to_wire(&body, CLUSTER, 2, beyond - 1), Err(WireError::WrongDirection));
    }
}

fn voter_change_requests() -> Vec<Body> {
    let listeners = vec![Endpoint { listener: "CONTROLLER".into(), host: "127.0.0.1".into(), port: 9093 }];
    vec![
        Body::AddRaftVoterRequest {
            timeout_ms: 30_000,
            voter_id: 4,
            voter_directory_id: Some(Uuid::from_u128(14)),
            listeners: listeners.clone(),
        },
        Body::RemoveRaftVoterRequest { voter_id: 2, voter_directory_id: Some(Uuid::from_u128(12)) },
        Body::UpdateRaftVoterRequest {
            current_leader_epoch: 3,
            voter_id: 2,
            voter_directory_id: Some(Uuid::from_u128(12)),
            listeners,
            kraft_versions: SUPPORTED_KRAFT_VERSIONS,
        },
    ]
}

#[test]
fn voter_changes_check_cluster_and_version() {
    for body in voter_change_requests() {
        let wire = request_to_wire(&body, CLUSTER, 1, 0).unwrap();
        assert_eq!(request_from_wire(&wire, CLUSTER, 0).as_ref(), Ok(&body));
        assert_eq!(request_from_wire(&wire, "another-cluster", 0), Err(WireError::InconsistentClusterId));
        assert!(matches!(request_from_wire(&wire, CLUSTER, 1), Err(WireError::UnsupportedVersion { .. })));
        assert!(matches!(request_to_wire(&body, CLUSTER, 1, 1), Err(WireError::UnsupportedVersion { .. })));
    }
}

#[test]
fn a_listener_without_a_port_is_refused() {
    let body = &voter_change_requests()[0];
    let WireRequest::AddRaftVoter(mut request) = request_to_wire(body, CLUSTER, 1, 0).unwrap() else {
        panic!("not an AddRaftVoter request");
    };
    request.listeners[0].port = 0;
    assert_eq!(
        request_from_wire(&WireRequest::AddRaftVoter(request), CLUSTER, 0),
        Err(WireError::InvalidField("Listeners"))
    );
}

#[test]
fn an_unknown_leader_endpoint_is_kafkas_empty_host_and_port_minus_one() {
    let body = Body::UpdateRaftVoterResponse {
        error: ErrorCode::NotLeaderOrFollower,
        leader_epoch: 3,
        leader_id: None,
        leader_endpoint: None,
    };
    let WireResponse::UpdateRaftVoter(wire) = response_to_wire(&body, 0, &TestCodec).unwrap() else {
        panic!("not an UpdateRaftVoter response");
    };
    assert_eq!((wire.current_leader.host.as_str(), wire.current_leader.port), ("", -1));
    assert_eq!(wire.current_leader.leader_id, BrokerId(-1));
    assert_eq!(response_from_wire(&WireResponse::UpdateRaftVoter(wire), 0, &TestCodec), Ok(body));
}

proptest! {
    #[test]
    fn voter_sets_round_trip_as_voters_records(
        voters in prop::collection::btree_map(0..=i32::MAX, (directory(), endpoints(), 0..=1i16), 1..6)
    ) {
        let voters = VoterSet::new(voters.into_iter().map(|(id, (directory_id, endpoints, max))| VoterNode {
            key: ReplicaKey::new(id, directory_id),
            endpoints,
            kraft_versions: VersionRange { min: 0, max },
        }));
        prop_assert_eq!(decode_voters_record(encode_voters_record(&voters)), Ok(voters));
    }
}

#[test]
fn an_empty_or_torn_voters_record_is_refused() {
    assert_eq!(
        decode_voters_record(encode_voters_record(&VoterSet::default())),
        Err(WireError::InvalidField("Voters"))
    );
    let bytes = encode_voters_record(&VoterSet::from_ids([1, 2]));
    assert!(matches!(decode_voters_record(bytes.slice(..bytes.len() - 3)), Err(WireError::Records(_))));
}
