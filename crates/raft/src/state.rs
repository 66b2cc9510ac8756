//! The per-role state of a node (Kafka's `EpochState` classes) and the
//! `quorum-state` record that survives restarts (`ElectionState`).

use std::collections::{BTreeMap, BTreeSet};

use crate::log::OffsetAndEpoch;
use crate::voters::ReplicaKey;
use crate::NodeId;

/// What the `quorum-state` file holds: written (durably) before the node
/// acts on a new epoch, vote or leader, and read back at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ElectionState {
    /// The largest epoch this node has seen.
    pub epoch: i32,
    /// The leader of `epoch`, once known.
    pub leader_id: Option<NodeId>,
    /// The candidate this node voted for in `epoch`, if any.
    pub voted_id: Option<NodeId>,
}

/// The name of a role, for callers and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoleName {
    /// No leader known and no election under way.
    Unattached,
    /// Probing with pre-votes whether an election could be won (KIP-996).
    Prospective,
    /// Running an election in a new epoch.
    Candidate,
    /// Leading the epoch.
    Leader,
    /// Fetching from the epoch's leader.
    Follower,
    /// A former leader of the epoch, telling voters it stepped down.
    Resigned,
}

/// Votes collected in one round (pre-vote or election).
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally {
    pub granted: BTreeSet<NodeId>,
    pub rejected: BTreeSet<NodeId>,
}

impl Tally {
    pub fn has_answered(&self, id: NodeId) -> bool {
        self.granted.contains(&id) || self.rejected.contains(&id)
    }
}

/// A Fetch the leader holds until data arrives, the high watermark moves or
/// its wait ends.
#[derive(Debug, Clone)]
pub(crate) struct ParkedFetch {
    pub correlation_id: u64,
    pub fetch_offset: u64,
    pub deadline_ms: u64,
}

/// A snapshot a follower is pulling from its leader (Kafka's
/// `FollowerState.fetchingSnapshot`): the chunks so far, installed at once
/// when the last arrives. Held in memory only, so a crash discards it.
#[derive(Debug, Clone)]
pub(crate) struct SnapshotFetch {
    pub id: OffsetAndEpoch,
    /// The size the leader announced with the first chunk.
    pub size: Option<u64>,
    pub content: Vec<u8>,
}

/// The leader's view of its epoch (Kafka's `LeaderState`).
#[derive(Debug, Clone)]
pub(crate) struct LeaderState {
    /// Where the epoch's first record (the LeaderChange) sits; the high
    /// watermark must pass it before anything is exposed.
    pub epoch_start_offset: u64,
    /// The epoch's high watermark, unknown until a record of the epoch commits.
    pub high_watermark: Option<u64>,
    /// Each other voter's last valid fetch offset.
    pub voter_offsets: BTreeMap<NodeId, Option<u64>>,
    /// Voters yet to acknowledge BeginQuorumEpoch in this round.
    pub begin_unacked: BTreeSet<NodeId>,
    /// When to announce the epoch to every voter again.
    pub begin_epoch_deadline_ms: u64,
    /// When the leader resigns unless a majority has fetched.
    pub check_quorum_deadline_ms: u64,
    /// Voters that fetched since the check-quorum timer was last reset.
    pub fetched_voters: BTreeSet<NodeId>,
    /// Fetches waiting for data, by fetcher.
    pub parked: BTreeMap<NodeId, ParkedFetch>,
    /// Replicas fetching that are not voters, the candidates for
    /// AddRaftVoter (Kafka's `LeaderState.observerStates`).
    pub observers: BTreeMap<ReplicaKey, ObserverState>,
    /// The AddRaftVoter or RemoveRaftVoter under way: one at a time.
    pub voter_change: Option<VoterChange>,
    /// The leader was removed from the voter set and that committed: it
    /// resigns at the next poll (Kafka's `LeaderState.requestResign`).
    pub resign_requested: bool,
}

/// What the leader knows of a fetching observer (Kafka's `ReplicaState`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ObserverState {
    pub fetch_offset: u64,
    pub last_fetch_ms: u64,
    /// The leader's log end when it last fetched.
    pub leader_end_at_last_fetch: u64,
    /// When it last had everything the leader had at the time.
    pub last_caught_up_ms: Option<u64>,
}

/// An AddRaftVoter or RemoveRaftVoter whose VotersRecord is appended and
/// whose answer waits for it to commit (Kafka's `AddVoterHandlerState`,
/// `RemoveVoterHandlerState`).
#[derive(Debug, Clone)]
pub(crate) struct VoterChange {
    pub requester: NodeId,
    pub correlation_id: u64,
    pub is_add: bool,
    /// The VotersRecord's offset: the change commits when the high watermark passes it.
    pub offset: u64,
    pub deadline_ms: u64,
}

/// A node's role and the timers and bookkeeping that go with it.
#[derive(Debug, Clone)]
pub(crate) enum Role {
    Unattached {
        voted: Option<NodeId>,
        election_deadline_ms: u64,
    },
    Prospective {
        voted: Option<NodeId>,
        leader: Option<NodeId>,
        tally: Tally,
        election_deadline_ms: u64,
    },
    Candidate {
        tally: Tally,
        election_deadline_ms: u64,
        backoff_until_ms: Option<u64>,
    },
    Leader(Box<LeaderState>),
    Follower {
        leader: NodeId,
        voted: Option<NodeId>,
        fetch_deadline_ms: u64,
        has_fetched: bool,
        snapshot_fetch: Option<SnapshotFetch>,
        /// When a voter next checks that the voter set holds its own
        /// endpoints (Kafka's update voter period); None: an UpdateRaftVoter
        /// is due and goes out once the link to the leader is free.
        update_voter_deadline_ms: Option<u64>,
    },
    Resigned {
        unacked: BTreeSet<NodeId>,
        preferred_successors: Vec<NodeId>,
        election_deadline_ms: u64,
    },
}

impl Role {
    pub fn name(&self) -> RoleName {
        match self {
            Role::Unattached { .. } => RoleName::Unattached,
            Role::Prospective { .. } => RoleName::Prospective,
            Role::Candidate { .. } => RoleName::Candidate,
            Role::Leader(_) => RoleName::Leader,
            Role::Follower { .. } => RoleName::Follower,
            Role::Resigned { .. } => RoleName::Resigned,
        }
    }
}
