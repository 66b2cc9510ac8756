//! The quorum's messages as `kafka-protocol` structs, both ways.
//!
//! Every [`Body`] maps onto one of Kafka's KRaft messages, nested the way the
//! wire nests them: one topic, `__cluster_metadata` (by name, or in Fetch by
//! Kafka's fixed metadata topic id `AAAAAAAAAAAAAAAAAAAAAQ`), one partition,
//! 0. Requests carry the cluster id. Reading a message checks what the core
//! no longer sees: the version, the cluster id, that the message names
//! exactly our topic and partition (Kafka's `RaftUtil.hasValidTopicPartition`),
//! and that numbers fit the core's types; any miss is a [`WireError`], never
//! a panic.
//!
//! Versions are those Kafka 4.1 speaks on its controller listener: Vote 0-2
//! (v2: KIP-996 pre-vote), BeginQuorumEpoch 0-1, EndQuorumEpoch 0-1 (v1:
//! KIP-853 preferred candidates), Fetch 13-18 (13: topic ids, which
//! `KafkaRaftClient` fetches by; 15: `ReplicaState`; 17: directory ids;
//! 18: the fetcher's high watermark, sent as "unknown")
//! and FetchSnapshot 0-1; and KIP-853's AddRaftVoter, RemoveRaftVoter and
//! UpdateRaftVoter at v0, the versions `kafka-protocol` 0.18 has. Directory
//! ids travel where a version carries them (Kafka's zero uuid is "none"),
//! EndQuorumEpoch's preferred candidates included;
//! the leader endpoints of BeginQuorumEpoch and EndQuorumEpoch v1 are sent
//! empty, as the core does not read them.
//!
//! [`encode_voters_record`] and [`decode_voters_record`] give a voter set
//! as Kafka's `VotersRecord` v0, for snapshot headers and log codecs.
//!
//! Fetch's `Records` stay opaque here: a [`RecordsCodec`] turns batches into
//! bytes and back.

use std::ops::RangeInclusive;

use bytes::Bytes;
use kafka_protocol::messages::{
    add_raft_voter_request, begin_quorum_epoch_request, begin_quorum_epoch_response,
    end_quorum_epoch_request, end_quorum_epoch_response, fetch_request, fetch_response,
    fetch_snapshot_request, fetch_snapshot_response, update_raft_voter_request, update_raft_voter_response,
    vote_request, vote_response, voters_record, AddRaftVoterRequest, AddRaftVoterResponse,
    BeginQuorumEpochRequest, BeginQuorumEpochResponse, BrokerId, EndQuorumEpochRequest,
    EndQuorumEpochResponse, FetchRequest, FetchResponse, FetchSnapshotRequest, FetchSnapshotResponse,
    RemoveRaftVoterRequest, RemoveRaftVoterResponse, TopicName, UpdateRaftVoterRequest,
    UpdateRaftVoterResponse, VoteRequest, VoteResponse, VotersRecord,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use uuid::Uuid;

use crate::log::{Batch, OffsetAndEpoch};
use crate::message::{Body, ErrorCode};
use crate::voters::{Endpoint, ReplicaKey, VersionRange, VoterNode, VoterSet};
use crate::NodeId;

/// The metadata log's topic.
pub const METADATA_TOPIC: &str = "__cluster_metadata";
/// Its only partition.
pub const METADATA_PARTITION: i32 = 0;
/// Kafka's fixed id of the metadata topic (`Topic.METADATA_TOPIC_ID`,
/// `AAAAAAAAAAAAAAAAAAAAAQ` in base64).
pub const METADATA_TOPIC_ID: Uuid = Uuid::from_u128(1);
/// The fetch size `KafkaRaftClient` asks for (`MAX_FETCH_SIZE_BYTES`, 8 MiB).
pub const MAX_FETCH_BYTES: i32 = 8 * 1024 * 1024;

/// Vote versions: v1 adds KIP-853 directory ids, v2 KIP-996 pre-vote.
pub const VOTE_VERSIONS: RangeInclusive<i16> = 0..=2;
/// BeginQuorumEpoch versions: v1 adds KIP-853 endpoints.
pub const BEGIN_QUORUM_EPOCH_VERSIONS: RangeInclusive<i16> = 0..=1;
/// EndQuorumEpoch versions: v1 replaces successors with candidates.
pub const END_QUORUM_EPOCH_VERSIONS: RangeInclusive<i16> = 0..=1;
/// Fetch versions that name the metadata topic by id, as KRaft does (v18,
/// KIP-1166, adds the fetcher's high watermark, which this core does not
/// read: it is sent as "unknown").
pub const FETCH_VERSIONS: RangeInclusive<i16> = 13..=18;
/// FetchSnapshot versions: v1 adds KIP-853 directory ids.
pub const FETCH_SNAPSHOT_VERSIONS: RangeInclusive<i16> = 0..=1;
/// AddRaftVoter versions (Kafka 4.1 also has v1, `AckWhenCommitted`,
/// which `kafka-protocol` 0.18 lacks).
pub const ADD_RAFT_VOTER_VERSIONS: RangeInclusive<i16> = 0..=0;
/// RemoveRaftVoter versions.
pub const REMOVE_RAFT_VOTER_VERSIONS: RangeInclusive<i16> = 0..=0;
/// UpdateRaftVoter versions.
pub const UPDATE_RAFT_VOTER_VERSIONS: RangeInclusive<i16> = 0..=0;

/// A KRaft request as `kafka-protocol` has it.
#[derive(Debug, Clone, PartialEq)]
pub enum WireRequest {
    /// `Vote`.
    Vote(VoteRequest),
    /// `BeginQuorumEpoch`.
    BeginQuorumEpoch(BeginQuorumEpochRequest),
    /// `EndQuorumEpoch`.
    EndQuorumEpoch(EndQuorumEpochRequest),
    /// `Fetch` of `__cluster_metadata`.
    Fetch(FetchRequest),
    /// `FetchSnapshot`.
    FetchSnapshot(FetchSnapshotRequest),
    /// `AddRaftVoter`.
    AddRaftVoter(AddRaftVoterRequest),
    /// `RemoveRaftVoter`.
    RemoveRaftVoter(RemoveRaftVoterRequest),
    /// `UpdateRaftVoter`.
    UpdateRaftVoter(UpdateRaftVoterRequest),
}

/// A KRaft response as `kafka-protocol` has it.
#[derive(Debug, Clone, PartialEq)]
pub enum WireResponse {
    /// `Vote`.
    Vote(VoteResponse),
    /// `BeginQuorumEpoch`.
    BeginQuorumEpoch(BeginQuorumEpochResponse),
    /// `EndQuorumEpoch`.
    EndQuorumEpoch(EndQuorumEpochResponse),
    /// `Fetch` of `__cluster_metadata`.
    Fetch(FetchResponse),
    /// `FetchSnapshot`.
    FetchSnapshot(FetchSnapshotResponse),
    /// `AddRaftVoter`.
    AddRaftVoter(AddRaftVoterResponse),
    /// `RemoveRaftVoter`.
    RemoveRaftVoter(RemoveRaftVoterResponse),
    /// `UpdateRaftVoter`.
    UpdateRaftVoter(UpdateRaftVoterResponse),
}

/// Why a message cannot be converted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The version is outside the ones this mapping speaks.
    UnsupportedVersion {
        /// The message's name.
        api: &'static str,
        /// The version asked for.
        version: i16,
    },
    /// A response where a request was expected, or the reverse.
    WrongDirection,
    /// The request names another cluster (`INCONSISTENT_CLUSTER_ID`).
    InconsistentClusterId,
    /// The message does not name exactly `__cluster_metadata` partition 0.
    WrongPartition,
    /// A top-level error code: the whole request failed.
    TopLevelError(i16),
    /// A partition error code the quorum does not know.
    UnknownErrorCode(i16),
    /// A field's value does not fit (a negative offset, a too large size),
    /// or this version cannot carry it (pre-vote below Vote v2).
    InvalidField(&'static str),
    /// The records codec rejected the bytes.
    Records(String),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::UnsupportedVersion { api, version } => {
                write!(f, "{api} version {version} is not supported")
            }
            WireError::WrongDirection => write!(f, "a request and a response were mixed up"),
            WireError::InconsistentClusterId => write!(f, "the message is for another cluster"),
            WireError::WrongPartition => {
                write!(f, "the message does not name exactly {METADATA_TOPIC}-0")
            }
            WireError::TopLevelError(code) => write!(f, "the request failed with error {code}"),
            WireError::UnknownErrorCode(code) => write!(f, "unexpected error code {code}"),
            WireError::InvalidField(field) => write!(f, "field {field} is out of range"),
            WireError::Records(why) => write!(f, "bad records: {why}"),
        }
    }
}

impl std::error::Error for WireError {}

/// Turns Fetch's record batches into `Records` bytes and back; the batch
/// format lives with the log, not here.
pub trait RecordsCodec {
    /// The batches as bytes.
    fn encode(&self, batches: &[Batch]) -> Bytes;
    /// The batches in the bytes.
    fn decode(&self, records: Bytes) -> Result<Vec<Batch>, WireError>;
}

/// The versions of the message that carries `body`.
pub fn supported_versions(body: &Body) -> RangeInclusive<i16> {
    match body {
        Body::VoteRequest { .. } | Body::VoteResponse { .. } => VOTE_VERSIONS,
        Body::BeginQuorumEpochRequest { .. } | Body::BeginQuorumEpochResponse { .. } => {
            BEGIN_QUORUM_EPOCH_VERSIONS
        }
        Body::EndQuorumEpochRequest { .. } | Body::EndQuorumEpochResponse { .. } => END_QUORUM_EPOCH_VERSIONS,
        Body::FetchRequest { .. } | Body::FetchResponse { .. } => FETCH_VERSIONS,
        Body::FetchSnapshotRequest { .. } | Body::FetchSnapshotResponse { .. } => FETCH_SNAPSHOT_VERSIONS,
        Body::AddRaftVoterRequest { .. } | Body::AddRaftVoterResponse { .. } => ADD_RAFT_VOTER_VERSIONS,
        Body::RemoveRaftVoterRequest { .. } | Body::RemoveRaftVoterResponse { .. } => {
            REMOVE_RAFT_VOTER_VERSIONS
        }
        Body::UpdateRaftVoterRequest { .. } | Body::UpdateRaftVoterResponse { .. } => {
            UPDATE_RAFT_VOTER_VERSIONS
        }
    }
}

/// A directory id as the wire carries it: Kafka's zero uuid is "none".
fn directory_to_wire(directory_id: Option<Uuid>) -> Uuid {
    directory_id.unwrap_or(Uuid::nil())
}

fn directory_from_wire(directory_id: Uuid) -> Option<Uuid> {
    (!directory_id.is_nil()).then_some(directory_id)
}

fn str_bytes(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

fn optional_message(message: &Option<String>) -> Option<StrBytes> {
    message.as_deref().map(str_bytes)
}

/// Endpoints from a message's listeners; a port of 0 is refused.
fn endpoints_from_wire<'a>(
    listeners: impl Iterator<Item = (&'a StrBytes, &'a StrBytes, u16)>,
) -> Result<Vec<Endpoint>, WireError> {
    listeners
        .map(|(name, host, port)| {
            if port == 0 || name.is_empty() {
                return Err(WireError::InvalidField("Listeners"));
            }
            Ok(Endpoint { listener: name.to_string(), host: host.to_string(), port })
        })
        .collect()
}

/// A voter set as Kafka's `VotersRecord` v0 (the record in the log and at
/// the front of a snapshot).
pub fn voters_record(voters: &VoterSet) -> VotersRecord {
    let voters = voters
        .nodes()
        .map(|voter| {
            voters_record::Voter::default()
                .with_voter_id(BrokerId(voter.key.id))
                .with_voter_directory_id(directory_to_wire(voter.key.directory_id))
                .with_endpoints(
                    voter
                        .endpoints
                        .iter()
                        .map(|endpoint| {
                            voters_record::Endpoint::default()
                                .with_name(str_bytes(&endpoint.listener))
                                .with_host(str_bytes(&endpoint.host))
                                .with_port(endpoint.port)
                        })
                        .collect(),
                )
                .with_k_raft_version_feature(
                    voters_record::KRaftVersionFeature::default()
                        .with_min_supported_version(voter.kraft_versions.min)
                        .with_max_supported_version(voter.kraft_versions.max),
                )
        })
        .collect();
    VotersRecord::default().with_version(0).with_voters(voters)
}

/// A `VotersRecord` as a voter set; refused if it names no voter or the
/// same id twice.
pub fn voter_set_from_record(record: &VotersRecord) -> Result<VoterSet, WireError> {
    let mut nodes = Vec::with_capacity(record.voters.len());
    for voter in &record.voters {
        let endpoints = endpoints_from_wire(voter.endpoints.iter().map(|e| (&e.name, &e.host, e.port)))?;
        let feature = &voter.k_raft_version_feature;
        nodes.push(VoterNode {
            key: ReplicaKey::from_wire(voter.voter_id.0, voter.voter_directory_id),
            endpoints,
            kraft_versions: VersionRange {
                min: feature.min_supported_version,
                max: feature.max_supported_version,
            },
        });
    }
    let voters = VoterSet::new(nodes);
    if voters.is_empty() || voters.len() != record.voters.len() {
        return Err(WireError::InvalidField("Voters"));
    }
    Ok(voters)
}

/// A voter set encoded as a `VotersRecord` v0.
pub fn encode_voters_record(voters: &VoterSet) -> Bytes {
    let mut out = bytes::BytesMut::new();
    voters_record(voters).encode(&mut out, 0).expect("a voter set always encodes");
    out.freeze()
}

/// A voter set from the bytes of a `VotersRecord` v0.
pub fn decode_voters_record(bytes: Bytes) -> Result<VoterSet, WireError> {
    let record = crate::record_batch::decode_control_value::<VotersRecord>(bytes)
        .map_err(|error| WireError::Records(format!("VotersRecord: {error}")))?;
    voter_set_from_record(&record)
}

fn check_version(api: &'static str, range: RangeInclusive<i16>, version: i16) -> Result<(), WireError> {
    if range.contains(&version) {
        Ok(())
    } else {
        Err(WireError::UnsupportedVersion { api, version })
    }
}

fn topic_name() -> TopicName {
    TopicName(StrBytes::from_static_str(METADATA_TOPIC))
}

fn is_metadata_topic(name: &TopicName) -> bool {
    name.0.as_str() == METADATA_TOPIC
}

/// The one partition of the one topic, if both are ours.
fn only_partition<'a, T, P>(
    topics: &'a [T],
    is_ours: impl Fn(&T) -> bool,
    partitions: impl Fn(&'a T) -> &'a [P],
    index: impl Fn(&P) -> i32,
) -> Result<&'a P, WireError> {
    let [topic] = topics else {
        return Err(WireError::WrongPartition);
    };
    match partitions(topic) {
        [partition] if is_ours(topic) && index(partition) == METADATA_PARTITION => Ok(partition),
        _ => Err(WireError::WrongPartition),
    }
}

/// A request without a cluster id is accepted, as Kafka does
/// (`KafkaRaftClient.hasValidClusterId`).
fn check_cluster_id(theirs: &Option<StrBytes>, ours: &str) -> Result<(), WireError> {
    match theirs {
        Some(id) if id.as_str() != ours => Err(WireError::InconsistentClusterId),
        _ => Ok(()),
    }
}

/// The receiving voter's id, in the versions that carry it (KIP-853).
fn voter_id(destination: NodeId, version: i16, since: i16) -> BrokerId {
    BrokerId(if version >= since { destination } else { -1 })
}

fn leader_to_wire(leader: Option<NodeId>) -> BrokerId {
    BrokerId(leader.unwrap_or(-1))
}

fn leader_from_wire(leader: BrokerId) -> Option<NodeId> {
    (leader.0 >= 0).then_some(leader.0)
}

fn to_i64(value: u64, field: &'static str) -> Result<i64, WireError> {
    i64::try_from(value).map_err(|_| WireError::InvalidField(field))
}

fn to_i32<T: TryInto<i32>>(value: T, field: &'static str) -> Result<i32, WireError> {
    value.try_into().map_err(|_| WireError::InvalidField(field))
}

fn to_u64(value: i64, field: &'static str) -> Result<u64, WireError> {
    u64::try_from(value).map_err(|_| WireError::InvalidField(field))
}

/// A position that is absent when both halves are negative (Kafka's -1
/// defaults for `DivergingEpoch` and `SnapshotId`).
fn optional_position(
    end_offset: i64,
    epoch: i32,
    field: &'static str,
) -> Result<Option<OffsetAndEpoch>, WireError> {
    if end_offset < 0 && epoch < 0 {
        return Ok(None);
    }
    if epoch < 0 {
        return Err(WireError::InvalidField(field));
    }
    Ok(Some(OffsetAndEpoch::new(to_u64(end_offset, field)?, epoch)))
}

fn error_from_wire(code: i16) -> Result<ErrorCode, WireError> {
    ErrorCode::from_code(code).ok_or(WireError::UnknownErrorCode(code))
}

fn check_top_level(code: i16) -> Result<(), WireError> {
    match code {
        0 => Ok(()),
        code => Err(WireError::TopLevelError(code)),
    }
}

/// `body` as the request Kafka sends to `destination` at `version`.
pub fn request_to_wire(
    body: &Body,
    cluster_id: &str,
    destination: NodeId,
    version: i16,
) -> Result<WireRequest, WireError> {
    let cluster_id = Some(StrBytes::from_string(cluster_id.to_owned()));
    Ok(match body {
        Body::VoteRequest {
            replica_epoch,
            candidate_id,
            last_position,
            pre_vote,
            candidate_directory_id,
            voter_directory_id,
        } => {
            check_version("Vote", VOTE_VERSIONS, version)?;
            if *pre_vote && version < 2 {
                return Err(WireError::InvalidField("PreVote"));
            }
            let partition = vote_request::PartitionData::default()
                .with_partition_index(METADATA_PARTITION)
                .with_replica_epoch(*replica_epoch)
                .with_replica_id(BrokerId(*candidate_id))
                .with_last_offset_epoch(last_position.epoch)
                .with_last_offset(to_i64(last_position.offset, "LastOffset")?)
                .with_pre_vote(*pre_vote)
                .with_replica_directory_id(directory_to_wire(*candidate_directory_id))
                .with_voter_directory_id(directory_to_wire(*voter_directory_id));
            WireRequest::Vote(
                VoteRequest::default()
                    .with_cluster_id(cluster_id)
                    .with_voter_id(voter_id(destination, version, 1))
                    .with_topics(vec![vote_request::TopicData::default()
                        .with_topic_name(topic_name())
                        .with_partitions(vec![partition])]),
            )
        }
        Body::BeginQuorumEpochRequest { leader_epoch, leader_id, voter_directory_id } => {
            check_version("BeginQuorumEpoch", BEGIN_QUORUM_EPOCH_VERSIONS, version)?;
            let partition = begin_quorum_epoch_request::PartitionData::default()
                .with_partition_index(METADATA_PARTITION)
                .with_leader_id(BrokerId(*leader_id))
                .with_leader_epoch(*leader_epoch)
                .with_voter_directory_id(directory_to_wire(*voter_directory_id));
            WireRequest::BeginQuorumEpoch(
                BeginQuorumEpochRequest::default()
                    .with_cluster_id(cluster_id)
                    .with_voter_id(voter_id(destination, version, 1))
                    .with_topics(vec![begin_quorum_epoch_request::TopicData::default()
                        .with_topic_name(topic_name())
                        .with_partitions(vec![partition])]),
            )
        }
        Body::EndQuorumEpochRequest {
            leader_epoch,
            leader_id,
            preferred_successors,
            preferred_candidate_directory_ids,
        } => {
            check_version("EndQuorumEpoch", END_QUORUM_EPOCH_VERSIONS, version)?;
            let partition = end_quorum_epoch_request::PartitionData::default()
                .with_partition_index(METADATA_PARTITION)
                .with_leader_id(BrokerId(*leader_id))
                .with_leader_epoch(*leader_epoch);
            // v1 (KIP-853) replaces the ids with ids and directory ids.
            let partition = if version == 0 {
                partition.with_preferred_successors(preferred_successors.clone())
            } else {
                partition.with_preferred_candidates(
                    preferred_successors
                        .iter()
                        .enumerate()
                        .map(|(index, id)| {
                            let directory_id =
                                preferred_candidate_directory_ids.get(index).copied().flatten();
                            end_quorum_epoch_request::ReplicaInfo::default()
                                .with_candidate_id(BrokerId(*id))
                                .with_candidate_directory_id(directory_to_wire(directory_id))
                        })
                        .collect(),
                )
            };
            WireRequest::EndQuorumEpoch(
                EndQuorumEpochRequest::default().with_cluster_id(cluster_id).with_topics(vec![
                    end_quorum_epoch_request::TopicData::default()
                        .with_topic_name(topic_name())
                        .with_partitions(vec![partition]),
                ]),
            )
        }
        Body::FetchRequest {
            replica_id,
            current_leader_epoch,
            fetch_offset,
            last_fetched_epoch,
            max_wait_ms,
            replica_directory_id,
        } => {
            check_version("Fetch", FETCH_VERSIONS, version)?;
            let partition = fetch_request::FetchPartition::default()
                .with_replica_directory_id(directory_to_wire(*replica_directory_id))
                .with_partition(METADATA_PARTITION)
                .with_current_leader_epoch(*current_leader_epoch)
                .with_fetch_offset(to_i64(*fetch_offset, "FetchOffset")?)
                .with_last_fetched_epoch(*last_fetched_epoch)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(MAX_FETCH_BYTES);
            let request = FetchRequest::default().with_cluster_id(cluster_id);
            // v15 moved the fetcher's id into `ReplicaState` (KIP-903).
            let request = if version >= 15 {
                request.with_replica_state(
                    fetch_request::ReplicaState::default()
                        .with_replica_id(BrokerId(*replica_id))
                        .with_replica_epoch(-1),
                )
            } else {
                request.with_replica_id(BrokerId(*replica_id))
            };
            WireRequest::Fetch(
                request
                    .with_max_wait_ms(to_i32(*max_wait_ms, "MaxWaitMs")?)
                    .with_max_bytes(MAX_FETCH_BYTES)
                    // A full fetch outside any fetch session, as KRaft sends.
                    .with_session_epoch(-1)
                    .with_topics(vec![fetch_request::FetchTopic::default()
                        .with_topic_id(METADATA_TOPIC_ID)
                        .with_partitions(vec![partition])]),
            )
        }
        Body::FetchSnapshotRequest {
            replica_id,
            current_leader_epoch,
            snapshot_id,
            position,
            max_bytes,
            replica_directory_id,
        } => {
            check_version("FetchSnapshot", FETCH_SNAPSHOT_VERSIONS, version)?;
            let partition = fetch_snapshot_request::PartitionSnapshot::default()
                .with_replica_directory_id(directory_to_wire(*replica_directory_id))
                .with_partition(METADATA_PARTITION)
                .with_current_leader_epoch(*current_leader_epoch)
                .with_snapshot_id(
                    fetch_snapshot_request::SnapshotId::default()
                        .with_end_offset(to_i64(snapshot_id.offset, "SnapshotId")?)
                        .with_epoch(snapshot_id.epoch),
                )
                .with_position(to_i64(*position, "Position")?);
            WireRequest::FetchSnapshot(
                FetchSnapshotRequest::default()
                    .with_cluster_id(cluster_id)
                    .with_replica_id(BrokerId(*replica_id))
                    .with_max_bytes(to_i32(*max_bytes, "MaxBytes")?)
                    .with_topics(vec![fetch_snapshot_request::TopicSnapshot::default()
                        .with_name(topic_name())
                        .with_partitions(vec![partition])]),
            )
        }
        Body::AddRaftVoterRequest { timeout_ms, voter_id, voter_directory_id, listeners } => {
            check_version("AddRaftVoter", ADD_RAFT_VOTER_VERSIONS, version)?;
            let listeners = listeners
                .iter()
                .map(|endpoint| {
                    add_raft_voter_request::Listener::default()
                        .with_name(str_bytes(&endpoint.listener))
                        .with_host(str_bytes(&endpoint.host))
                        .with_port(endpoint.port)
                })
                .collect();
            WireRequest::AddRaftVoter(
                AddRaftVoterRequest::default()
                    .with_cluster_id(cluster_id)
                    .with_timeout_ms(to_i32(*timeout_ms, "TimeoutMs")?)
                    .with_voter_id(*voter_id)
                    .with_voter_directory_id(directory_to_wire(*voter_directory_id))
                    .with_listeners(listeners),
            )
        }
        Body::RemoveRaftVoterRequest { voter_id, voter_directory_id } => {
            check_version("RemoveRaftVoter", REMOVE_RAFT_VOTER_VERSIONS, version)?;
            WireRequest::RemoveRaftVoter(
                RemoveRaftVoterRequest::default()
                    .with_cluster_id(cluster_id)
                    .with_voter_id(*voter_id)
                    .with_voter_directory_id(directory_to_wire(*voter_directory_id)),
            )
        }
        Body::UpdateRaftVoterRequest {
            current_leader_epoch,
            voter_id,
            voter_directory_id,
            listeners,
            kraft_versions,
        } => {
            check_version("UpdateRaftVoter", UPDATE_RAFT_VOTER_VERSIONS, version)?;
            let listeners = listeners
                .iter()
                .map(|endpoint| {
                    update_raft_voter_request::Listener::default()
                        .with_name(str_bytes(&endpoint.listener))
                        .with_host(str_bytes(&endpoint.host))
                        .with_port(endpoint.port)
                })
                .collect();
            WireRequest::UpdateRaftVoter(
                UpdateRaftVoterRequest::default()
                    .with_cluster_id(cluster_id)
                    .with_current_leader_epoch(*current_leader_epoch)
                    .with_voter_id(*voter_id)
                    .with_voter_directory_id(directory_to_wire(*voter_directory_id))
                    .with_listeners(listeners)
                    .with_k_raft_version_feature(
                        update_raft_voter_request::KRaftVersionFeature::default()
                            .with_min_supported_version(kraft_versions.min)
                            .with_max_supported_version(kraft_versions.max),
                    ),
            )
        }
        _ => return Err(WireError::WrongDirection),
    })
}

/// The request Kafka sent at `version`, checked against our `cluster_id`.
pub fn request_from_wire(request: &WireRequest, cluster_id: &str, version: i16) -> Result<Body, WireError> {
    match request {
        WireRequest::Vote(request) => {
            check_version("Vote", VOTE_VERSIONS, version)?;
            check_cluster_id(&request.cluster_id, cluster_id)?;
            let partition = only_partition(
                &request.topics,
                |t| is_metadata_topic(&t.topic_name),
                |t| &t.partitions,
                |p| p.partition_index,
            )?;
            Ok(Body::VoteRequest {
                replica_epoch: partition.replica_epoch,
                candidate_id: partition.replica_id.0,
                last_position: OffsetAndEpoch::new(
                    to_u64(partition.last_offset, "LastOffset")?,
                    partition.last_offset_epoch,
                ),
                pre_vote: partition.pre_vote,
                candidate_directory_id: directory_from_wire(partition.replica_directory_id),
                voter_directory_id: directory_from_wire(partition.voter_directory_id),
            })
        }
        WireRequest::BeginQuorumEpoch(request) => {
            check_version("BeginQuorumEpoch", BEGIN_QUORUM_EPOCH_VERSIONS, version)?;
            check_cluster_id(&request.cluster_id, cluster_id)?;
            let partition = only_partition(
                &request.topics,
                |t| is_metadata_topic(&t.topic_name),
                |t| &t.partitions,
                |p| p.partition_index,
            )?;
            Ok(Body::BeginQuorumEpochRequest {
                leader_epoch: partition.leader_epoch,
                leader_id: partition.leader_id.0,
                voter_directory_id: directory_from_wire(partition.voter_directory_id),
            })
        }
        WireRequest::EndQuorumEpoch(request) => {
            check_version("EndQuorumEpoch", END_QUORUM_EPOCH_VERSIONS, version)?;
            check_cluster_id(&request.cluster_id, cluster_id)?;
            let partition = only_partition(
                &request.topics,
                |t| is_metadata_topic(&t.topic_name),
                |t| &t.partitions,
                |p| p.partition_index,
            )?;
            let (preferred_successors, preferred_candidate_directory_ids) = if version == 0 {
                (partition.preferred_successors.clone(), Vec::new())
            } else {
                let candidates = &partition.preferred_candidates;
                (
                    candidates.iter().map(|candidate| candidate.candidate_id.0).collect(),
                    candidates
                        .iter()
                        .map(|candidate| directory_from_wire(candidate.candidate_directory_id))
                        .collect(),
                )
            };
            Ok(Body::EndQuorumEpochRequest {
                leader_epoch: partition.leader_epoch,
                leader_id: partition.leader_id.0,
                preferred_successors,
                preferred_candidate_directory_ids,
            })
        }
        WireRequest::Fetch(request) => {
            check_version("Fetch", FETCH_VERSIONS, version)?;
            check_cluster_id(&request.cluster_id, cluster_id)?;
            let partition = only_partition(
                &request.topics,
                |t| t.topic_id == METADATA_TOPIC_ID,
                |t| &t.partitions,
                |p| p.partition,
            )?;
            let replica_id =
                if version >= 15 { request.replica_state.replica_id } else { request.replica_id };
            Ok(Body::FetchRequest {
                replica_id: replica_id.0,
                current_leader_epoch: partition.current_leader_epoch,
                fetch_offset: to_u64(partition.fetch_offset, "FetchOffset")?,
                last_fetched_epoch: partition.last_fetched_epoch,
                max_wait_ms: to_u64(request.max_wait_ms.into(), "MaxWaitMs")?,
                replica_directory_id: directory_from_wire(partition.replica_directory_id),
            })
        }
        WireRequest::FetchSnapshot(request) => {
            check_version("FetchSnapshot", FETCH_SNAPSHOT_VERSIONS, version)?;
            check_cluster_id(&request.cluster_id, cluster_id)?;
            let partition = only_partition(
                &request.topics,
                |t| is_metadata_topic(&t.name),
                |t| &t.partitions,
                |p| p.partition,
            )?;
            Ok(Body::FetchSnapshotRequest {
                replica_id: request.replica_id.0,
                current_leader_epoch: partition.current_leader_epoch,
                snapshot_id: OffsetAndEpoch::new(
                    to_u64(partition.snapshot_id.end_offset, "SnapshotId")?,
                    partition.snapshot_id.epoch,
                ),
                position: to_u64(partition.position, "Position")?,
                max_bytes: usize::try_from(request.max_bytes)
                    .map_err(|_| WireError::InvalidField("MaxBytes"))?,
                replica_directory_id: directory_from_wire(partition.replica_directory_id),
            })
        }
        WireRequest::AddRaftVoter(request) => {
            check_version("AddRaftVoter", ADD_RAFT_VOTER_VERSIONS, version)?;
            check_cluster_id(&request.cluster_id, cluster_id)?;
            Ok(Body::AddRaftVoterRequest {
                timeout_ms: to_u64(request.timeout_ms.into(), "TimeoutMs")?,
                voter_id: request.voter_id,
                voter_directory_id: directory_from_wire(request.voter_directory_id),
                listeners: endpoints_from_wire(request.listeners.iter().map(|l| (&l.name, &l.host, l.port)))?,
            })
        }
        WireRequest::RemoveRaftVoter(request) => {
            check_version("RemoveRaftVoter", REMOVE_RAFT_VOTER_VERSIONS, version)?;
            check_cluster_id(&request.cluster_id, cluster_id)?;
            Ok(Body::RemoveRaftVoterRequest {
                voter_id: request.voter_id,
                voter_directory_id: directory_from_wire(request.voter_directory_id),
            })
        }
        WireRequest::UpdateRaftVoter(request) => {
            check_version("UpdateRaftVoter", UPDATE_RAFT_VOTER_VERSIONS, version)?;
            check_cluster_id(&request.cluster_id, cluster_id)?;
            let feature = &request.k_raft_version_feature;
            Ok(Body::UpdateRaftVoterRequest {
                current_leader_epoch: request.current_leader_epoch,
                voter_id: request.voter_id,
                voter_directory_id: directory_from_wire(request.voter_directory_id),
                listeners: endpoints_from_wire(request.listeners.iter().map(|l| (&l.name, &l.host, l.port)))?,
                kraft_versions: VersionRange {
                    min: feature.min_supported_version,
                    max: feature.max_supported_version,
                },
            })
        }
    }
}

/// `body` as the response Kafka sends at `version`.
pub fn response_to_wire(
    body: &Body,
    version: i16,
    codec: &impl RecordsCodec,
) -> Result<WireResponse, WireError> {
    Ok(match body {
        Body::VoteResponse { error, leader_epoch, leader_id, vote_granted } => {
            check_version("Vote", VOTE_VERSIONS, version)?;
            let partition = vote_response::PartitionData::default()
                .with_partition_index(METADATA_PARTITION)
                .with_error_code(error.code())
                .with_leader_id(leader_to_wire(*leader_id))
                .with_leader_epoch(*leader_epoch)
                .with_vote_granted(*vote_granted);
            WireResponse::Vote(VoteResponse::default().with_topics(vec![
                vote_response::TopicData::default()
                    .with_topic_name(topic_name())
                    .with_partitions(vec![partition]),
            ]))
        }
        Body::BeginQuorumEpochResponse { error, leader_epoch, leader_id } => {
            check_version("BeginQuorumEpoch", BEGIN_QUORUM_EPOCH_VERSIONS, version)?;
            let partition = begin_quorum_epoch_response::PartitionData::default()
                .with_partition_index(METADATA_PARTITION)
                .with_error_code(error.code())
                .with_leader_id(leader_to_wire(*leader_id))
                .with_leader_epoch(*leader_epoch);
            WireResponse::BeginQuorumEpoch(BeginQuorumEpochResponse::default().with_topics(vec![
                begin_quorum_epoch_response::TopicData::default()
                    .with_topic_name(topic_name())
                    .with_partitions(vec![partition]),
            ]))
        }
        Body::EndQuorumEpochResponse { error, leader_epoch, leader_id } => {
            check_version("EndQuorumEpoch", END_QUORUM_EPOCH_VERSIONS, version)?;
            let partition = end_quorum_epoch_response::PartitionData::default()
                .with_partition_index(METADATA_PARTITION)
                .with_error_code(error.code())
                .with_leader_id(leader_to_wire(*leader_id))
                .with_leader_epoch(*leader_epoch);
            WireResponse::EndQuorumEpoch(EndQuorumEpochResponse::default().with_topics(vec![
                end_quorum_epoch_response::TopicData::default()
                    .with_topic_name(topic_name())
                    .with_partitions(vec![partition]),
            ]))
        }
        Body::FetchResponse {
            error,
            leader_epoch,
            leader_id,
            high_watermark,
            diverging_epoch,
            snapshot_id,
            batches,
        } => {
            check_version("Fetch", FETCH_VERSIONS, version)?;
            let high_watermark = match high_watermark {
                Some(offset) => to_i64(*offset, "HighWatermark")?,
                None => -1,
            };
            let diverging = match diverging_epoch {
                Some(position) => fetch_response::EpochEndOffset::default()
                    .with_epoch(position.epoch)
                    .with_end_offset(to_i64(position.offset, "DivergingEpoch")?),
                None => fetch_response::EpochEndOffset::default(),
            };
            let snapshot = match snapshot_id {
                Some(position) => fetch_response::SnapshotId::default()
                    .with_epoch(position.epoch)
                    .with_end_offset(to_i64(position.offset, "SnapshotId")?),
                None => fetch_response::SnapshotId::default(),
            };
            let partition = fetch_response::PartitionData::default()
                .with_partition_index(METADATA_PARTITION)
                .with_error_code(error.code())
                .with_high_watermark(high_watermark)
                .with_diverging_epoch(diverging)
                .with_current_leader(
                    fetch_response::LeaderIdAndEpoch::default()
                        .with_leader_id(leader_to_wire(*leader_id))
                        .with_leader_epoch(*leader_epoch),
                )
                .with_snapshot_id(snapshot)
                .with_records(Some(codec.encode(batches)));
            WireResponse::Fetch(FetchResponse::default().with_responses(vec![
                fetch_response::FetchableTopicResponse::default()
                    .with_topic_id(METADATA_TOPIC_ID)
                    .with_partitions(vec![partition]),
            ]))
        }
        Body::FetchSnapshotResponse {
            error,
            leader_epoch,
            leader_id,
            snapshot_id,
            size,
            position,
            bytes,
        } => {
            check_version("FetchSnapshot", FETCH_SNAPSHOT_VERSIONS, version)?;
            let partition = fetch_snapshot_response::PartitionSnapshot::default()
                .with_index(METADATA_PARTITION)
                .with_error_code(error.code())
                .with_snapshot_id(
                    fetch_snapshot_response::SnapshotId::default()
                        .with_end_offset(to_i64(snapshot_id.offset, "SnapshotId")?)
                        .with_epoch(snapshot_id.epoch),
                )
                .with_current_leader(
                    fetch_snapshot_response::LeaderIdAndEpoch::default()
                        .with_leader_id(leader_to_wire(*leader_id))
                        .with_leader_epoch(*leader_epoch),
                )
                .with_size(to_i64(*size, "Size")?)
                .with_position(to_i64(*position, "Position")?)
                .with_unaligned_records(bytes.clone());
            WireResponse::FetchSnapshot(FetchSnapshotResponse::default().with_topics(vec![
                fetch_snapshot_response::TopicSnapshot::default()
                    .with_name(topic_name())
                    .with_partitions(vec![partition]),
            ]))
        }
        Body::AddRaftVoterResponse { error, error_message } => {
            check_version("AddRaftVoter", ADD_RAFT_VOTER_VERSIONS, version)?;
            WireResponse::AddRaftVoter(
                AddRaftVoterResponse::default()
                    .with_error_code(error.code())
                    .with_error_message(optional_message(error_message)),
            )
        }
        Body::RemoveRaftVoterResponse { error, error_message } => {
            check_version("RemoveRaftVoter", REMOVE_RAFT_VOTER_VERSIONS, version)?;
            WireResponse::RemoveRaftVoter(
                RemoveRaftVoterResponse::default()
                    .with_error_code(error.code())
                    .with_error_message(optional_message(error_message)),
            )
        }
        Body::UpdateRaftVoterResponse { error, leader_epoch, leader_id, leader_endpoint } => {
            check_version("UpdateRaftVoter", UPDATE_RAFT_VOTER_VERSIONS, version)?;
            // Kafka's `RaftUtil.updateVoterResponse`: an unknown leader
            // endpoint is an empty host and port -1.
            let (host, port) = match leader_endpoint {
                Some(endpoint) => (str_bytes(&endpoint.host), i32::from(endpoint.port)),
                None => (StrBytes::default(), -1),
            };
            WireResponse::UpdateRaftVoter(
                UpdateRaftVoterResponse::default().with_error_code(error.code()).with_current_leader(
                    update_raft_voter_response::CurrentLeader::default()
                        .with_leader_id(leader_to_wire(*leader_id))
                        .with_leader_epoch(*leader_epoch)
                        .with_host(host)
                        .with_port(port),
                ),
            )
        }
        _ => return Err(WireError::WrongDirection),
    })
}

/// The response Kafka sent at `version`.
pub fn response_from_wire(
    response: &WireResponse,
    version: i16,
    codec: &impl RecordsCodec,
) -> Result<Body, WireError> {
    match response {
        WireResponse::Vote(response) => {
            check_version("Vote", VOTE_VERSIONS, version)?;
            check_top_level(response.error_code)?;
            let partition = only_partition(
                &response.topics,
                |t| is_metadata_topic(&t.topic_name),
                |t| &t.partitions,
                |p| p.partition_index,
            )?;
            Ok(Body::VoteResponse {
                error: error_from_wire(partition.error_code)?,
                leader_epoch: partition.leader_epoch,
                leader_id: leader_from_wire(partition.leader_id),
                vote_granted: partition.vote_granted,
            })
        }
        WireResponse::BeginQuorumEpoch(response) => {
            check_version("BeginQuorumEpoch", BEGIN_QUORUM_EPOCH_VERSIONS, version)?;
            check_top_level(response.error_code)?;
            let partition = only_partition(
                &response.topics,
                |t| is_metadata_topic(&t.topic_name),
                |t| &t.partitions,
                |p| p.partition_index,
            )?;
            Ok(Body::BeginQuorumEpochResponse {
                error: error_from_wire(partition.error_code)?,
                leader_epoch: partition.leader_epoch,
                leader_id: leader_from_wire(partition.leader_id),
            })
        }
        WireResponse::EndQuorumEpoch(response) => {
            check_version("EndQuorumEpoch", END_QUORUM_EPOCH_VERSIONS, version)?;
            check_top_level(response.error_code)?;
            let partition = only_partition(
                &response.topics,
                |t| is_metadata_topic(&t.topic_name),
                |t| &t.partitions,
                |p| p.partition_index,
            )?;
            Ok(Body::EndQuorumEpochResponse {
                error: error_from_wire(partition.error_code)?,
                leader_epoch: partition.leader_epoch,
                leader_id: leader_from_wire(partition.leader_id),
            })
        }
        WireResponse::Fetch(response) => {
            check_version("Fetch", FETCH_VERSIONS, version)?;
            check_top_level(response.error_code)?;
            let partition = only_partition(
                &response.responses,
                |t| t.topic_id == METADATA_TOPIC_ID,
                |t| &t.partitions,
                |p| p.partition_index,
            )?;
            let high_watermark = match partition.high_watermark {
                -1 => None,
                offset => Some(to_u64(offset, "HighWatermark")?),
            };
            let diverging = &partition.diverging_epoch;
            let snapshot = &partition.snapshot_id;
            let records = partition.records.clone().unwrap_or_default();
            Ok(Body::FetchResponse {
                error: error_from_wire(partition.error_code)?,
                leader_epoch: partition.current_leader.leader_epoch,
                leader_id: leader_from_wire(partition.current_leader.leader_id),
                high_watermark,
                diverging_epoch: optional_position(diverging.end_offset, diverging.epoch, "DivergingEpoch")?,
                snapshot_id: optional_position(snapshot.end_offset, snapshot.epoch, "SnapshotId")?,
                batches: codec.decode(records)?,
            })
        }
        WireResponse::FetchSnapshot(response) => {
            check_version("FetchSnapshot", FETCH_SNAPSHOT_VERSIONS, version)?;
            check_top_level(response.error_code)?;
            let partition = only_partition(
                &response.topics,
                |t| is_metadata_topic(&t.name),
                |t| &t.partitions,
                |p| p.index,
            )?;
            let error = error_from_wire(partition.error_code)?;
            // An error answer's snapshot fields carry no meaning (Kafka may
            // leave them at -1): read them as zero rather than reject it.
            let offset = |value: i64, field| match error {
                ErrorCode::None => to_u64(value, field),
                _ => Ok(value.max(0) as u64),
            };
            Ok(Body::FetchSnapshotResponse {
                error,
                leader_epoch: partition.current_leader.leader_epoch,
                leader_id: leader_from_wire(partition.current_leader.leader_id),
                snapshot_id: OffsetAndEpoch::new(
                    offset(partition.snapshot_id.end_offset, "SnapshotId")?,
                    partition.snapshot_id.epoch,
                ),
                size: offset(partition.size, "Size")?,
                position: offset(partition.position, "Position")?,
                bytes: partition.unaligned_records.clone(),
            })
        }
        WireResponse::AddRaftVoter(response) => {
            check_version("AddRaftVoter", ADD_RAFT_VOTER_VERSIONS, version)?;
            Ok(Body::AddRaftVoterResponse {
                error: error_from_wire(response.error_code)?,
                error_message: response.error_message.as_ref().map(|message| message.to_string()),
            })
        }
        WireResponse::RemoveRaftVoter(response) => {
            check_version("RemoveRaftVoter", REMOVE_RAFT_VOTER_VERSIONS, version)?;
            Ok(Body::RemoveRaftVoterResponse {
                error: error_from_wire(response.error_code)?,
                error_message: response.error_message.as_ref().map(|message| message.to_string()),
            })
        }
        WireResponse::UpdateRaftVoter(response) => {
            check_version("UpdateRaftVoter", UPDATE_RAFT_VOTER_VERSIONS, version)?;
            let leader = &response.current_leader;
            // The response names no listener: the endpoint is on the one
            // the request went to, which only the caller knows.
            let leader_endpoint = match u16::try_from(leader.port) {
                Ok(port) if port > 0 && !leader.host.is_empty() => {
                    Some(Endpoint { listener: String::new(), host: leader.host.to_string(), port })
                }
                _ => None,
            };
            Ok(Body::UpdateRaftVoterResponse {
                error: error_from_wire(response.error_code)?,
                leader_epoch: leader.leader_epoch,
                leader_id: leader_from_wire(leader.leader_id),
                leader_endpoint,
            })
        }
    }
}

#[cfg(test)]
mod tests;
