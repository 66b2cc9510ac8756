//! The quorum's messages.
//!
//! One variant per KRaft request and response, with the fields of Kafka's
//! schemas (`VoteRequest`, `BeginQuorumEpochRequest`, `EndQuorumEpochRequest`,
//! `FetchRequest`, KIP-630's `FetchSnapshotRequest` and their responses,
//! single partition `__cluster_metadata`)
//! that the protocol logic reads. [`crate::wire`] maps them 1:1 onto
//! `kafka-protocol`'s structs; keeping that mapping out of the core keeps the
//! core free of topic/partition nesting, cluster ids and versions, which are
//! checked there before a message gets here.
//!
//! KIP-853 adds directory ids to Vote, BeginQuorumEpoch, Fetch and
//! FetchSnapshot, and the three requests that change the voter set
//! (AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter). Those come from
//! administrators rather than from quorum nodes: the `from` of their
//! `Event::Receive` is whatever id the driver routes the response back by.

use bytes::Bytes;

use uuid::Uuid;

use crate::log::{Batch, OffsetAndEpoch};
use crate::voters::{Endpoint, VersionRange};
use crate::NodeId;

/// Kafka's error codes that the quorum answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// 0
    None,
    /// 6: the receiver does not lead this epoch.
    NotLeaderOrFollower,
    /// 7: a voter change could not be made in time, or another is under way.
    RequestTimedOut,
    /// 35: the cluster's `kraft.version` cannot change voters.
    UnsupportedVersion,
    /// 42: a field is out of range.
    InvalidRequest,
    /// 74: the request's epoch is older than the receiver's.
    FencedLeaderEpoch,
    /// 75: the request's epoch is newer than the receiver's.
    UnknownLeaderEpoch,
    /// 94: the sender or receiver of a voter-only request is not a voter.
    InconsistentVoterSet,
    /// 98: the requested snapshot is not held (any more).
    SnapshotNotFound,
    /// 99: the requested position is not within the snapshot.
    PositionOutOfRange,
    /// 125: the request names another replica than the receiver.
    InvalidVoterKey,
    /// 126: the voter to add already votes.
    DuplicateVoter,
    /// 127: the voter to remove or update does not vote.
    VoterNotFound,
}

impl ErrorCode {
    /// The code on the wire.
    pub fn code(self) -> i16 {
        match self {
            ErrorCode::None => 0,
            ErrorCode::NotLeaderOrFollower => 6,
            ErrorCode::RequestTimedOut => 7,
            ErrorCode::UnsupportedVersion => 35,
            ErrorCode::InvalidRequest => 42,
            ErrorCode::FencedLeaderEpoch => 74,
            ErrorCode::UnknownLeaderEpoch => 75,
            ErrorCode::InconsistentVoterSet => 94,
            ErrorCode::SnapshotNotFound => 98,
            ErrorCode::PositionOutOfRange => 99,
            ErrorCode::InvalidVoterKey => 125,
            ErrorCode::DuplicateVoter => 126,
            ErrorCode::VoterNotFound => 127,
        }
    }

    /// The code read off the wire, if the quorum knows it.
    pub fn from_code(code: i16) -> Option<Self> {
        [
            ErrorCode::None,
            ErrorCode::NotLeaderOrFollower,
            ErrorCode::RequestTimedOut,
            ErrorCode::UnsupportedVersion,
            ErrorCode::InvalidRequest,
            ErrorCode::FencedLeaderEpoch,
            ErrorCode::UnknownLeaderEpoch,
            ErrorCode::InconsistentVoterSet,
            ErrorCode::SnapshotNotFound,
            ErrorCode::PositionOutOfRange,
            ErrorCode::InvalidVoterKey,
            ErrorCode::DuplicateVoter,
            ErrorCode::VoterNotFound,
        ]
        .into_iter()
        .find(|error| error.code() == code)
    }
}

/// A message between two nodes. Responses echo their request's
/// correlation id; a response that answers no outstanding request is
/// dropped, which makes duplicated and late responses harmless.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Matches a response to its request.
    pub correlation_id: u64,
    /// The request or response.
    pub body: Body,
}

/// Every KRaft request and response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// `Vote` (v2: KIP-996 `PreVote`).
    VoteRequest {
        /// `ReplicaEpoch`: the candidate's epoch, or a prospective's current epoch.
        replica_epoch: i32,
        /// `ReplicaId`: who asks.
        candidate_id: NodeId,
        /// `LastOffsetEpoch` and `LastOffset`: the end of the asker's log.
        last_position: OffsetAndEpoch,
        /// `PreVote`: a non-binding probe that changes no state.
        pre_vote: bool,
        /// `CandidateDirectoryId` (v1+).
        candidate_directory_id: Option<Uuid>,
        /// `VoterDirectoryId` (v1+): the receiver's directory as the
        /// candidate's voter set has it.
        voter_directory_id: Option<Uuid>,
    },
    /// The answer to a Vote.
    VoteResponse {
        /// `ErrorCode`.
        error: ErrorCode,
        /// `LeaderEpoch`: the responder's epoch.
        leader_epoch: i32,
        /// `LeaderId`: the responder's known leader.
        leader_id: Option<NodeId>,
        /// `VoteGranted`.
        vote_granted: bool,
    },
    /// `BeginQuorumEpoch`: a new leader announces itself.
    BeginQuorumEpochRequest {
        /// `LeaderEpoch`.
        leader_epoch: i32,
        /// `LeaderId`.
        leader_id: NodeId,
        /// `VoterDirectoryId` (v1+): the receiver's directory as the
        /// leader's voter set has it.
        voter_directory_id: Option<Uuid>,
    },
    /// The answer to BeginQuorumEpoch.
    BeginQuorumEpochResponse {
        /// `ErrorCode`.
        error: ErrorCode,
        /// `LeaderEpoch`: the responder's epoch.
        leader_epoch: i32,
        /// `LeaderId`: the responder's known leader.
        leader_id: Option<NodeId>,
    },
    /// `EndQuorumEpoch`: a leader resigns, naming preferred successors.
    EndQuorumEpochRequest {
        /// `LeaderEpoch`.
        leader_epoch: i32,
        /// `LeaderId`.
        leader_id: NodeId,
        /// `PreferredSuccessors`: voters by descending fetch offset.
        preferred_successors: Vec<NodeId>,
        /// `PreferredCandidates[].CandidateDirectoryId` (v1+): the
        /// directory of each preferred successor, in the same order (None,
        /// or missing at the end, when unknown).
        preferred_candidate_directory_ids: Vec<Option<Uuid>>,
    },
    /// The answer to EndQuorumEpoch.
    EndQuorumEpochResponse {
        /// `ErrorCode`.
        error: ErrorCode,
        /// `LeaderEpoch`: the responder's epoch.
        leader_epoch: i32,
        /// `LeaderId`: the responder's known leader.
        leader_id: Option<NodeId>,
    },
    /// `Fetch` of `__cluster_metadata` by a follower or observer.
    FetchRequest {
        /// `ReplicaId` (`ReplicaState.ReplicaId` in v15+).
        replica_id: NodeId,
        /// `CurrentLeaderEpoch`.
        current_leader_epoch: i32,
        /// `FetchOffset`: the fetcher's (flushed) log end offset.
        fetch_offset: u64,
        /// `LastFetchedEpoch`: the epoch of the record before `fetch_offset`.
        last_fetched_epoch: i32,
        /// `MaxWaitMs`: how long the leader may park the fetch.
        max_wait_ms: u64,
        /// `ReplicaDirectoryId` (v17+): with the replica id, the key the
        /// leader tracks the fetcher by (and adds it as a voter by).
        replica_directory_id: Option<Uuid>,
    },
    /// The answer to a Fetch.
    FetchResponse {
        /// `ErrorCode` (partition level).
        error: ErrorCode,
        /// `CurrentLeader.LeaderEpoch`.
        leader_epoch: i32,
        /// `CurrentLeader.LeaderId`.
        leader_id: Option<NodeId>,
        /// `HighWatermark` (-1 on the wire when unknown).
        high_watermark: Option<u64>,
        /// `DivergingEpoch`: set when the fetcher's log diverges; the
        /// fetcher truncates to it and fetches again.
        diverging_epoch: Option<OffsetAndEpoch>,
        /// `SnapshotId` (KIP-630): set when the fetch position lies below
        /// the leader's log start, or cannot be validated against its log;
        /// the fetcher pulls this snapshot with FetchSnapshot.
        snapshot_id: Option<OffsetAndEpoch>,
        /// `Records`: batches from the fetch offset.
        batches: Vec<Batch>,
    },
    /// `FetchSnapshot` (KIP-630): a chunk of the leader's snapshot.
    FetchSnapshotRequest {
        /// `ReplicaId`.
        replica_id: NodeId,
        /// `CurrentLeaderEpoch`.
        current_leader_epoch: i32,
        /// `SnapshotId`: `EndOffset` and `Epoch`.
        snapshot_id: OffsetAndEpoch,
        /// `Position`: the byte position to read from.
        position: u64,
        /// `MaxBytes`.
        max_bytes: usize,
        /// `ReplicaDirectoryId` (v1+).
        replica_directory_id: Option<Uuid>,
    },
    /// The answer to FetchSnapshot.
    FetchSnapshotResponse {
        /// `ErrorCode` (partition level).
        error: ErrorCode,
        /// `CurrentLeader.LeaderEpoch`.
        leader_epoch: i32,
        /// `CurrentLeader.LeaderId`.
        leader_id: Option<NodeId>,
        /// `SnapshotId`.
        snapshot_id: OffsetAndEpoch,
        /// `Size`: the snapshot's total size in bytes.
        size: u64,
        /// `Position`: where `bytes` starts.
        position: u64,
        /// `UnalignedRecords`: the chunk.
        bytes: Bytes,
    },
    /// `AddRaftVoter` (KIP-853): make a caught-up observer a voter.
    AddRaftVoterRequest {
        /// `TimeoutMs`.
        timeout_ms: u64,
        /// `VoterId`.
        voter_id: NodeId,
        /// `VoterDirectoryId`: required.
        voter_directory_id: Option<Uuid>,
        /// `Listeners`: where the new voter takes quorum traffic.
        listeners: Vec<Endpoint>,
    },
    /// The answer to AddRaftVoter, once the change commits (or fails).
    AddRaftVoterResponse {
        /// `ErrorCode`.
        error: ErrorCode,
        /// `ErrorMessage`.
        error_message: Option<String>,
    },
    /// `RemoveRaftVoter` (KIP-853).
    RemoveRaftVoterRequest {
        /// `VoterId`.
        voter_id: NodeId,
        /// `VoterDirectoryId`: required.
        voter_directory_id: Option<Uuid>,
    },
    /// The answer to RemoveRaftVoter, once the change commits (or fails).
    RemoveRaftVoterResponse {
        /// `ErrorCode`.
        error: ErrorCode,
        /// `ErrorMessage`.
        error_message: Option<String>,
    },
    /// `UpdateRaftVoter` (KIP-853): a voter's new endpoints and versions.
    UpdateRaftVoterRequest {
        /// `CurrentLeaderEpoch`.
        current_leader_epoch: i32,
        /// `VoterId`.
        voter_id: NodeId,
        /// `VoterDirectoryId`: required.
        voter_directory_id: Option<Uuid>,
        /// `Listeners`.
        listeners: Vec<Endpoint>,
        /// `KRaftVersionFeature`: the `kraft.version`s the voter supports.
        kraft_versions: VersionRange,
    },
    /// The answer to UpdateRaftVoter, sent as soon as the change is appended.
    UpdateRaftVoterResponse {
        /// `ErrorCode`.
        error: ErrorCode,
        /// `CurrentLeader.LeaderEpoch`.
        leader_epoch: i32,
        /// `CurrentLeader.LeaderId`.
        leader_id: Option<NodeId>,
        /// `CurrentLeader.Host` and `Port`: the leader on the quorum's listener.
        leader_endpoint: Option<Endpoint>,
    },
}

impl Body {
    /// Whether this is a request (as opposed to a response).
    pub fn is_request(&self) -> bool {
        matches!(
            self,
            Body::VoteRequest { .. }
                | Body::BeginQuorumEpochRequest { .. }
                | Body::EndQuorumEpochRequest { .. }
                | Body::FetchRequest { .. }
                | Body::FetchSnapshotRequest { .. }
                | Body::AddRaftVoterRequest { .. }
                | Body::RemoveRaftVoterRequest { .. }
                | Body::UpdateRaftVoterRequest { .. }
        )
    }
}
