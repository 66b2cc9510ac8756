//! The node: its public API, role transitions and timers.
//!
//! Every entry point (`handle`, `append`, `resign`) updates the state, then
//! runs `RaftNode::poll`, which fires expired timers and sends whatever
//! requests the current role owes (Kafka's `pollCurrentState`). Effects are
//! queued as [`Action`]s, drained with [`RaftNode::take_actions`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use crate::config::{ConfigError, QuorumConfig};
use crate::log::{Batch, OffsetAndEpoch, RaftLog, Records};
use crate::message::{Body, Message};
use crate::requests::Requests;
use crate::rng::SplitMix64;
use crate::state::{ElectionState, LeaderState, Role, RoleName, Tally};
use crate::voters::{ControlHistory, ReplicaKey, VoterSet};
use crate::NodeId;

/// Something that happened to the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A request or response arrived.
    Receive {
        /// The sender's node id (as the connection authenticated it).
        from: NodeId,
        /// What it sent.
        message: Message,
    },
    /// Time passed; timers due at or before `now` fire.
    Tick,
    /// Every log write issued before `FlushLog { flush_id }` is durable.
    Persisted {
        /// The id of the completed `FlushLog`.
        flush_id: u64,
    },
}

/// Something the driver must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send a message.
    Send {
        /// The receiver's node id.
        to: NodeId,
        /// What to send.
        message: Message,
    },
    /// Write these batches at the end of the log (not yet durable).
    AppendLog {
        /// Contiguous batches starting at the log's end.
        batches: Vec<Batch>,
    },
    /// Remove the log from `offset` on.
    TruncateLog {
        /// The new log end, a batch boundary.
        offset: u64,
    },
    /// Make every write so far durable, then report `Event::Persisted`.
    FlushLog {
        /// Echoed by `Event::Persisted`.
        flush_id: u64,
    },
    /// Write `quorum-state` durably before performing any later action:
    /// a vote or epoch must never be forgotten once acted upon.
    PersistQuorumState(ElectionState),
    /// Write a snapshot the state machine took durably (Kafka freezes
    /// `<offset>-<epoch>.checkpoint`: write, fsync, rename).
    WriteSnapshot {
        /// End offset and epoch.
        snapshot_id: OffsetAndEpoch,
        /// The state below the end offset.
        content: Bytes,
    },
    /// Move the log start to `offset`, a durable snapshot's end offset:
    /// segments wholly below it may be deleted.
    DeleteLogBefore {
        /// The new log start.
        offset: u64,
    },
    /// Atomically and durably, before any later action: write the snapshot
    /// fetched from the leader, empty the log and start it at the
    /// snapshot's end offset. A half-fetched snapshot never reaches disk.
    InstallSnapshot {
        /// End offset and epoch.
        snapshot_id: OffsetAndEpoch,
        /// The state below the end offset.
        content: Bytes,
    },
}

/// Why an append was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendError {
    /// Only the leader appends (Kafka's `NotLeaderException`).
    NotLeader,
    /// A batch needs at least one record.
    Empty,
    /// The batch is larger than `batch_max_bytes`.
    TooLarge,
}

/// Test-only deliberate bugs, to prove the simulation's checks can fail.
#[cfg(test)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Bugs {
    /// Grant votes without comparing logs.
    pub vote_ignores_log: bool,
    /// Let a new leader commit without a record of its own epoch.
    pub commit_without_own_epoch: bool,
    /// Record a granted pre-vote as a vote.
    pub pre_vote_binds: bool,
    /// Accept a snapshot above the high watermark.
    pub snapshot_above_high_watermark: bool,
    /// Start a voter change while the previous one has not committed.
    pub two_voter_changes_in_flight: bool,
}

/// One member of the quorum: a voter or an observer.
#[derive(Debug)]
pub struct RaftNode<L> {
    pub(crate) config: QuorumConfig,
    pub(crate) log: L,
    pub(crate) rng: SplitMix64,
    pub(crate) epoch: i32,
    pub(crate) role: Role,
    pub(crate) high_watermark: Option<u64>,
    /// The voter sets and `kraft.version`s in the log (KIP-853).
    pub(crate) history: ControlHistory,
    /// The log is durable below this offset.
    pub(crate) flushed_offset: u64,
    /// Flushes issued and not yet reported: (flush id, log end at the time).
    pub(crate) pending_flushes: VecDeque<(u64, u64)>,
    next_flush_id: u64,
    /// Consecutive elections this node started without a leader emerging.
    pub(crate) election_retries: u32,
    /// Role changes so far, to notice one during a poll.
    transitions: u64,
    /// Diverging epochs refused because they would cut committed records.
    pub(crate) refused_truncations: u64,
    /// Snapshots fetched from the leader that failed their checks.
    pub(crate) refused_snapshots: u64,
    persisted: ElectionState,
    pub(crate) requests: Requests,
    actions: Vec<Action>,
    #[cfg(test)]
    pub(crate) bugs: Bugs,
}

impl<L: RaftLog> RaftNode<L> {
    /// Starts a node from what survived on disk: its recovered log and its
    /// `quorum-state` (None when never written). `seed` drives election
    /// jitter. A configuration the quorum cannot run with is refused.
    pub fn new(
        config: QuorumConfig,
        log: L,
        stored: Option<ElectionState>,
        seed: u64,
        now: u64,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let stored = stored.unwrap_or_default();
        let flushed_offset = log.end_offset();
        let history = crate::snapshot::recover_history(&config, &log);
        let mut node = Self {
            config,
            log,
            rng: SplitMix64::new(seed),
            epoch: stored.epoch,
            role: Role::Unattached { voted: None, election_deadline_ms: 0 },
            high_watermark: None,
            history,
            flushed_offset,
            pending_flushes: VecDeque::new(),
            next_flush_id: 0,
            election_retries: 0,
            transitions: 0,
            refused_truncations: 0,
            refused_snapshots: 0,
            persisted: stored,
            requests: Requests::default(),
            actions: Vec::new(),
            #[cfg(test)]
            bugs: Bugs::default(),
        };
        node.restore_role(stored, now);
        if node.config.is_voter() && node.config.voters.len() == 1 {
            // A lone voter has no one to wait for: it stands at once
            // (Kafka's `KafkaRaftClient.initialize`).
            node.become_prospective(now);
        }
        node.poll(now);
        Ok(node)
    }

    /// The starting role from `quorum-state` (Kafka's `QuorumState.initialize`).
    fn restore_role(&mut self, stored: ElectionState, now: u64) {
        let me = self.config.node_id;
        let election_deadline_ms = self.random_election_deadline(now);
        if self.log.last_epoch() > stored.epoch {
            // The state file is behind the log (lost or older): trust the log.
            let epoch = self.log.last_epoch();
            self.set_role(epoch, Role::Unattached { voted: None, election_deadline_ms });
        } else if stored.leader_id == Some(me) && self.can_campaign() {
            // A leader never leads the same epoch twice.
            let unacked = self.other_voters().collect();
            let role = Role::Resigned { unacked, preferred_successors: Vec::new(), election_deadline_ms };
            self.set_role(stored.epoch, role);
        } else if stored.voted_id == Some(me) && stored.leader_id.is_none() && self.can_campaign() {
            // Kafka resumes its election as Candidate in the same epoch. Here
            // the log flushes asynchronously, so the Vote requests it sent may
            // have advertised a tail the crash tore off, and voters re-grant a
            // vote to the candidate they voted for without comparing logs: it
            // probes again with pre-votes from its recovered log instead.
            let role = Role::Prospective {
                voted: Some(me),
                leader: None,
                tally: Tally::default(),
                election_deadline_ms,
            };
            self.set_role(stored.epoch, role);
        } else if let Some(leader) = stored.leader_id.filter(|id| *id != me) {
            let fetch_deadline_ms = now.saturating_add(self.config.fetch_timeout_ms);
            let role = Role::Follower {
                leader,
                voted: stored.voted_id,
                fetch_deadline_ms,
                has_fetched: false,
                snapshot_fetch: None,
                update_voter_deadline_ms: Some(self.update_voter_deadline(now)),
            };
            self.set_role(stored.epoch, role);
        } else {
            self.set_role(stored.epoch, Role::Unattached { voted: stored.voted_id, election_deadline_ms });
        }
    }

    /// Feeds one event at time `now` (milliseconds of a monotonic clock).
    pub fn handle(&mut self, now: u64, event: Event) {
        match event {
            Event::Receive { from, message } => self.receive(now, from, message),
            Event::Tick => {}
            Event::Persisted { flush_id } => self.on_persisted(flush_id),
        }
        self.poll(now);
    }

    /// Appends records as a new batch in the leader's epoch; returns the
    /// offset of the last record. The batch commits once the high watermark
    /// passes it.
    pub fn append(&mut self, now: u64, records: Vec<Bytes>) -> Result<u64, AppendError> {
        if !matches!(self.role, Role::Leader(_)) {
            return Err(AppendError::NotLeader);
        }
        if records.is_empty() {
            return Err(AppendError::Empty);
        }
        if records.iter().map(Bytes::len).sum::<usize>() > self.config.batch_max_bytes {
            return Err(AppendError::TooLarge);
        }
        let last_offset = self.append_as_leader(now, Records::Data(records));
        self.poll(now);
        Ok(last_offset)
    }

    /// Steps down gracefully (before shutdown): the leader resigns and asks
    /// the most caught-up voters to take over first.
    pub fn resign(&mut self, now: u64) {
        if let Role::Leader(leader) = &self.role {
            let successors = Self::voters_by_descending_offset(leader);
            self.become_resigned(now, successors);
        }
        self.poll(now);
    }

    /// The actions queued since the last call, in the order to perform them.
    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    /// When `Event::Tick` must be delivered next, at the latest.
    pub fn next_deadline(&self) -> u64 {
        let role_deadline = match &self.role {
            Role::Unattached { election_deadline_ms, .. } if self.can_campaign() => *election_deadline_ms,
            Role::Unattached { .. } => u64::MAX,
            Role::Prospective { election_deadline_ms, .. } => *election_deadline_ms,
            Role::Candidate { backoff_until_ms: Some(until), .. } => *until,
            Role::Candidate { election_deadline_ms, .. } => *election_deadline_ms,
            Role::Follower { fetch_deadline_ms, update_voter_deadline_ms, .. } => {
                (*fetch_deadline_ms).min(update_voter_deadline_ms.unwrap_or(u64::MAX))
            }
            Role::Resigned { election_deadline_ms, .. } => *election_deadline_ms,
            Role::Leader(leader) => {
                // Asked of every node before each simulated event: kept
                // free of iterator chains, which a debug build copies around.
                let parked = leader.parked.values().map(|fetch| fetch.deadline_ms).min().unwrap_or(u64::MAX);
                let change = leader.voter_change.as_ref().map_or(u64::MAX, |change| change.deadline_ms);
                parked.min(change).min(leader.begin_epoch_deadline_ms).min(leader.check_quorum_deadline_ms)
            }
        };
        role_deadline.min(self.requests.next_deadline())
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.config.node_id
    }

    /// The current epoch.
    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    /// The current role.
    pub fn role(&self) -> RoleName {
        self.role.name()
    }

    /// The leader of the current epoch, if known.
    pub fn leader_id(&self) -> Option<NodeId> {
        self.election_state().leader_id
    }

    /// The high watermark: records below it are committed.
    pub fn high_watermark(&self) -> Option<u64> {
        self.high_watermark
    }

    /// How many times a leader asked this node to truncate committed
    /// records and was refused: nonzero means a broken quorum, to alert on.
    pub fn refused_truncations(&self) -> u64 {
        self.refused_truncations
    }

    /// How many snapshots fetched from the leader were damaged (a CRC, a
    /// missing footer) and thrown away: nonzero is worth an alert.
    pub fn refused_snapshots(&self) -> u64 {
        self.refused_snapshots
    }

    /// Whether a snapshot is being pulled from the leader.
    pub fn is_fetching_snapshot(&self) -> bool {
        matches!(self.role, Role::Follower { snapshot_fetch: Some(_), .. })
    }

    /// The voter set in force: the latest in the log, committed or not
    /// (with `kraft.version` 0, the static voters).
    pub fn voter_set(&self) -> &VoterSet {
        self.history.latest_voters()
    }

    /// The `kraft.version` in force.
    pub fn kraft_version(&self) -> i16 {
        self.history.kraft_version()
    }

    /// This node's replica key: its id and directory id.
    pub fn replica_key(&self) -> ReplicaKey {
        ReplicaKey::new(self.config.node_id, self.config.directory_id)
    }

    /// The log as the core sees it.
    pub fn log(&self) -> &L {
        &self.log
    }

    /// The `quorum-state` this node's role implies.
    pub fn election_state(&self) -> ElectionState {
        let me = Some(self.config.node_id);
        let (leader_id, voted_id) = match &self.role {
            Role::Unattached { voted, .. } => (None, *voted),
            Role::Prospective { voted, leader, .. } => (*leader, *voted),
            Role::Candidate { .. } => (None, me),
            Role::Leader(_) | Role::Resigned { .. } => (me, me),
            Role::Follower { leader, voted, .. } => (Some(*leader), *voted),
        };
        ElectionState { epoch: self.epoch, leader_id, voted_id }
    }

    fn receive(&mut self, now: u64, from: NodeId, message: Message) {
        let Message { correlation_id, body } = message;
        if body.is_request() {
            self.handle_request(now, from, correlation_id, body);
        } else if self.requests.complete(from, correlation_id) {
            self.handle_response(now, from, body);
        }
    }

    fn handle_request(&mut self, now: u64, from: NodeId, correlation_id: u64, body: Body) {
        let response = match body {
            Body::VoteRequest {
                replica_epoch,
                candidate_id,
                last_position,
                pre_vote,
                candidate_directory_id: _,
                voter_directory_id,
            } => {
                let vote = crate::election::VoteParams {
                    replica_epoch,
                    candidate_id,
                    last_position,
                    pre_vote,
                    voter_directory_id,
                };
                self.handle_vote_request(now, from, vote)
            }
            Body::BeginQuorumEpochRequest { leader_epoch, leader_id, voter_directory_id } => {
                self.handle_begin_quorum_epoch_request(now, from, leader_epoch, leader_id, voter_directory_id)
            }
            Body::EndQuorumEpochRequest {
                leader_epoch,
                leader_id,
                preferred_successors,
                preferred_candidate_directory_ids,
            } => {
                let successors: Vec<ReplicaKey> = preferred_successors
                    .iter()
                    .enumerate()
                    .map(|(index, id)| {
                        ReplicaKey::new(*id, preferred_candidate_directory_ids.get(index).copied().flatten())
                    })
                    .collect();
                self.handle_end_quorum_epoch_request(now, from, leader_epoch, leader_id, &successors)
            }
            Body::FetchRequest {
                replica_id,
                current_leader_epoch,
                fetch_offset,
                last_fetched_epoch,
                max_wait_ms,
                replica_directory_id,
            } => {
                let fetch = crate::replication::FetchParams {
                    replica: ReplicaKey::new(replica_id, replica_directory_id),
                    current_leader_epoch,
                    fetch_offset,
                    last_fetched_epoch,
                    max_wait_ms,
                };
                self.handle_fetch_request(now, from, correlation_id, fetch)
            }
            Body::FetchSnapshotRequest {
                replica_id,
                current_leader_epoch,
                snapshot_id,
                position,
                max_bytes,
                replica_directory_id,
            } => {
                let fetch = crate::snapshot::FetchSnapshotParams {
                    replica_id,
                    current_leader_epoch,
                    snapshot_id,
                    position,
                    max_bytes,
                    replica_directory_id,
                };
                Some(self.handle_fetch_snapshot_request(now, from, fetch))
            }
            Body::AddRaftVoterRequest { voter_id, voter_directory_id, listeners, .. } => {
                let voter = ReplicaKey::new(voter_id, voter_directory_id);
                self.handle_add_voter_request(now, from, correlation_id, voter, listeners)
            }
            Body::RemoveRaftVoterRequest { voter_id, voter_directory_id } => {
                let voter = ReplicaKey::new(voter_id, voter_directory_id);
                self.handle_remove_voter_request(now, from, correlation_id, voter)
            }
            Body::UpdateRaftVoterRequest {
                current_leader_epoch,
                voter_id,
                voter_directory_id,
                listeners,
                kraft_versions,
            } => {
                let voter = crate::voters::VoterNode {
                    key: ReplicaKey::new(voter_id, voter_directory_id),
                    endpoints: listeners,
                    kraft_versions,
                };
                Some(self.handle_update_voter_request(now, current_leader_epoch, voter))
            }
            _ => None,
        };
        if let Some(body) = response {
            self.send(from, Message { correlation_id, body });
        }
    }

    fn handle_response(&mut self, now: u64, from: NodeId, body: Body) {
        match body {
            Body::VoteResponse { error, leader_epoch, leader_id, vote_granted } => {
                self.handle_vote_response(now, from, error, leader_epoch, leader_id, vote_granted)
            }
            Body::BeginQuorumEpochResponse { error, leader_epoch, leader_id } => {
                self.handle_begin_quorum_epoch_response(now, from, error, leader_epoch, leader_id)
            }
            Body::EndQuorumEpochResponse { error, leader_epoch, leader_id } => {
                self.handle_end_quorum_epoch_response(now, from, error, leader_epoch, leader_id)
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
                let response = crate::replication::FetchResult {
                    error,
                    leader_epoch,
                    leader_id,
                    high_watermark,
                    diverging_epoch,
                    snapshot_id,
                    batches,
                };
                self.handle_fetch_response(now, from, response)
            }
            Body::UpdateRaftVoterResponse { error, leader_epoch, leader_id, .. } => {
                // Nothing else to learn: the new endpoints arrive with the
                // VotersRecord (Kafka's `handleUpdateVoterResponse`).
                self.handle_common_response(now, from, error, leader_epoch, leader_id);
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
                let chunk = crate::snapshot::SnapshotChunk {
                    error,
                    leader_epoch,
                    leader_id,
                    snapshot_id,
                    size,
                    position,
                    bytes,
                };
                self.handle_fetch_snapshot_response(now, from, chunk)
            }
            _ => {}
        }
    }

    /// Fires timers and sends what the role owes; a role entered on the
    /// way is polled too, so it sends its first requests at once.
    pub(crate) fn poll(&mut self, now: u64) {
        // Each pass either settles or changes role on an expired timer or a
        // completed count; real chains are at most three long.
        for _ in 0..8 {
            let transitions = self.transitions;
            self.poll_role(now);
            if transitions == self.transitions {
                return;
            }
        }
    }

    fn poll_role(&mut self, now: u64) {
        self.requests.expire(now);
        match &self.role {
            Role::Unattached { .. } => self.poll_unattached(now),
            Role::Prospective { .. } => self.poll_prospective(now),
            Role::Candidate { .. } => self.poll_candidate(now),
            Role::Leader(_) => self.poll_leader(now),
            Role::Follower { .. } => self.poll_follower(now),
            Role::Resigned { .. } => self.poll_resigned(now),
        }
    }

    fn poll_unattached(&mut self, now: u64) {
        let Role::Unattached { election_deadline_ms, .. } = self.role else { return };
        if !self.can_campaign() {
            // An observer looks for the leader by fetching from any voter
            // (Kafka's `pollUnattachedAsObserver`).
            self.fetch_from_any_voter(now);
        } else if now >= election_deadline_ms {
            self.become_prospective(now);
        }
    }

    fn poll_follower(&mut self, now: u64) {
        let Role::Follower { leader, fetch_deadline_ms, .. } = self.role else { return };
        if now < fetch_deadline_ms {
            if !self.maybe_send_update_voter(now, leader) {
                self.maybe_send_fetch(now, leader);
            }
        } else if self.can_campaign() {
            self.become_prospective(now);
        } else {
            // An observer that lost its leader asks any voter who leads now
            // (Kafka's `pollFollowerAsObserver`).
            self.set_role(self.epoch, Role::Unattached { voted: None, election_deadline_ms: u64::MAX });
            self.fetch_from_any_voter(now);
        }
    }

    fn poll_resigned(&mut self, now: u64) {
        let Role::Resigned { unacked, preferred_successors, election_deadline_ms } = &self.role else {
            return;
        };
        if now >= *election_deadline_ms {
            if self.can_campaign() {
                self.become_prospective(now);
            } else {
                // Kafka's `pollResigned`: a leader removed from the voter
                // set moves to a new epoch as an observer, so fetchers stop
                // naming it their leader.
                self.become_unattached(now, self.epoch + 1);
            }
            return;
        }
        let body = Body::EndQuorumEpochRequest {
            leader_epoch: self.epoch,
            leader_id: self.config.node_id,
            preferred_successors: preferred_successors.clone(),
            preferred_candidate_directory_ids: preferred_successors
                .iter()
                .map(|id| self.voter_directory_id(*id))
                .collect(),
        };
        for to in unacked.clone() {
            self.send_request(now, to, body.clone());
        }
    }

    // ---- transitions -------------------------------------------------

    /// Enters `role` in `epoch`: forgets outstanding requests, answers
    /// parked fetches when leadership ends, and persists the election state
    /// when it changed (before any later action, so before any reply).
    pub(crate) fn set_role(&mut self, epoch: i32, role: Role) {
        debug_assert!(epoch >= self.epoch, "epochs never decrease");
        let old = std::mem::replace(&mut self.role, role);
        self.epoch = epoch;
        self.transitions += 1;
        if let Role::Leader(leader) = old {
            self.answer_voter_change_after_leadership(&leader);
            self.answer_parked_after_leadership(*leader);
        }
        self.requests.reset();
        self.persist_election_state();
    }

    /// Queues a `quorum-state` write when the election state changed.
    pub(crate) fn persist_election_state(&mut self) {
        let state = self.election_state();
        if state != self.persisted {
            self.persisted = state;
            self.actions.push(Action::PersistQuorumState(state));
        }
    }

    /// The vote this node cast in the current epoch (kept across roles).
    pub(crate) fn voted_in_epoch(&self) -> Option<NodeId> {
        self.election_state().voted_id
    }

    pub(crate) fn become_unattached(&mut self, now: u64, epoch: i32) {
        let voted = if epoch == self.epoch { self.voted_in_epoch() } else { None };
        // Kafka's `QuorumState.transitionToUnattached`: a voter already
        // counting down to an election keeps its deadline on learning a newer
        // epoch, so a stream of new epochs cannot hold its election off.
        let running = match &self.role {
            Role::Unattached { election_deadline_ms, .. }
            | Role::Candidate { election_deadline_ms, .. }
            | Role::Resigned { election_deadline_ms, .. } => Some(*election_deadline_ms),
            Role::Prospective { election_deadline_ms, .. } if epoch > self.epoch => {
                Some(*election_deadline_ms)
            }
            _ => None,
        };
        let election_deadline_ms = match running {
            Some(deadline) => deadline,
            None => self.random_election_deadline(now),
        };
        self.set_role(epoch, Role::Unattached { voted, election_deadline_ms });
    }

    pub(crate) fn become_follower(&mut self, now: u64, epoch: i32, leader: NodeId) {
        if leader == self.config.node_id {
            return; // only a restart makes a node learn it led; it then resigns
        }
        let voted = if epoch == self.epoch { self.voted_in_epoch() } else { None };
        let fetch_deadline_ms = now.saturating_add(self.config.fetch_timeout_ms);
        self.election_retries = 0;
        let role = Role::Follower {
            leader,
            voted,
            fetch_deadline_ms,
            has_fetched: false,
            snapshot_fetch: None,
            update_voter_deadline_ms: Some(self.update_voter_deadline(now)),
        };
        self.set_role(epoch, role);
    }

    pub(crate) fn become_resigned(&mut self, now: u64, preferred_successors: Vec<NodeId>) {
        let unacked = self.other_voters().collect();
        let election_deadline_ms = self.random_election_deadline(now);
        self.set_role(self.epoch, Role::Resigned { unacked, preferred_successors, election_deadline_ms });
    }

    pub(crate) fn become_leader(&mut self, now: u64) {
        let others: BTreeSet<NodeId> = self.other_voters().collect();
        let leader = LeaderState {
            observers: BTreeMap::new(),
            voter_change: None,
            resign_requested: false,
            epoch_start_offset: self.log.end_offset(),
            high_watermark: None,
            voter_offsets: others.iter().map(|id| (*id, None)).collect(),
            begin_unacked: others,
            begin_epoch_deadline_ms: now.saturating_add(self.config.fetch_timeout_ms / 2),
            check_quorum_deadline_ms: self.first_check_quorum_deadline(now),
            fetched_voters: BTreeSet::new(),
            parked: BTreeMap::new(),
        };
        self.election_retries = 0;
        self.set_role(self.epoch, Role::Leader(Box::new(leader)));
        // Kafka's leader opens its epoch with a LeaderChange control record,
        // which it must commit before exposing anything (`LeaderState`).
        let voters = self.voter_set().ids().collect();
        self.append_as_leader(now, Records::LeaderChange { leader_id: self.config.node_id, voters });
        self.append_start_of_epoch_voters(now);
    }

    /// A lone voter is its own majority and never resigns for want of
    /// fetches (Kafka's `LeaderState.timeUntilCheckQuorumExpires`): its
    /// timer must not fall due, or the driver would tick it in a loop.
    pub(crate) fn first_check_quorum_deadline(&self, now: u64) -> u64 {
        if self.voter_set().len() == 1 && self.is_local_voter() {
            u64::MAX
        } else {
            now.saturating_add(self.check_quorum_timeout_ms())
        }
    }

    /// Kafka's `LeaderState`: 1.5 times the fetch timeout tolerates some
    /// network and I/O delay before a leader gives up on its majority.
    pub(crate) fn check_quorum_timeout_ms(&self) -> u64 {
        self.config.fetch_timeout_ms.saturating_mul(3) / 2
    }

    // ---- helpers ------------------------------------------------------

    pub(crate) fn other_voters(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.voter_set().ids().filter(move |id| *id != self.config.node_id)
    }

    /// Whether this node votes in the voter set in force.
    pub(crate) fn is_local_voter(&self) -> bool {
        self.voter_set().is_voter(self.replica_key())
    }

    /// Whether this node may run for election: a voter, or a voter of the
    /// previous set whose removal has not committed here (Raft's
    /// dissertation, 4.2.2: it may hold the only copy of that record, and
    /// without it the remaining voters cannot elect anyone).
    pub(crate) fn can_campaign(&self) -> bool {
        self.is_local_voter() || self.removal_uncommitted()
    }

    fn removal_uncommitted(&self) -> bool {
        let Some(offset) = self.history.latest_voters_offset() else { return false };
        offset >= self.high_watermark.unwrap_or(0)
            && self.history.before(offset).1.is_voter(self.replica_key())
    }

    /// `now` plus a timeout drawn from `[t, 2t)` (Kafka's `QuorumState.randomElectionTimeoutMs`).
    pub(crate) fn random_election_deadline(&mut self, now: u64) -> u64 {
        let timeout = self.config.election_timeout_ms;
        now.saturating_add(timeout.saturating_add(self.rng.below(timeout)))
    }

    pub(crate) fn send(&mut self, to: NodeId, message: Message) {
        self.actions.push(Action::Send { to, message });
    }

    /// Sends a request unless one is already in flight to `to` or `to` is
    /// backing off.
    pub(crate) fn send_request(&mut self, now: u64, to: NodeId, body: Body) -> bool {
        if !self.requests.can_send(to, now) {
            return false;
        }
        let correlation_id = self.requests.start(to, now, self.config.request_timeout_ms);
        self.send(to, Message { correlation_id, body });
        true
    }

    pub(crate) fn back_off(&mut self, to: NodeId, now: u64) {
        self.requests.back_off(to, now, self.config.retry_backoff_ms);
    }

    pub(crate) fn push_action(&mut self, action: Action) {
        self.actions.push(action);
    }

    /// Asks the driver to make the log durable up to its current end.
    pub(crate) fn request_flush(&mut self) {
        let end = self.log.end_offset();
        if end <= self.flushed_offset || self.pending_flushes.back().is_some_and(|(_, offset)| *offset == end)
        {
            return;
        }
        self.next_flush_id += 1;
        self.pending_flushes.push_back((self.next_flush_id, end));
        self.actions.push(Action::FlushLog { flush_id: self.next_flush_id });
    }

    /// Truncates the log (and what counts as flushed or pending) to `offset`.
    pub(crate) fn truncate_log(&mut self, offset: u64) {
        self.log.truncate_to(offset);
        let end = self.log.end_offset();
        self.history.truncate_from(end);
        self.flushed_offset = self.flushed_offset.min(end);
        for (_, pending) in &mut self.pending_flushes {
            *pending = (*pending).min(end);
        }
        self.actions.push(Action::TruncateLog { offset: end });
    }

    fn on_persisted(&mut self, flush_id: u64) {
        while let Some(&(id, offset)) = self.pending_flushes.front() {
            if id > flush_id {
                break;
            }
            self.pending_flushes.pop_front();
            self.flushed_offset = self.flushed_offset.max(offset);
        }
        if matches!(self.role, Role::Leader(_)) {
            self.update_leader_high_watermark();
        }
    }
}
