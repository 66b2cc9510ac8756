//! Elections: pre-vote (KIP-996), Vote, BeginQuorumEpoch, EndQuorumEpoch,
//! and how any message's epoch and leader move a node between roles.

use uuid::Uuid;

use crate::log::{OffsetAndEpoch, RaftLog};
use crate::message::{Body, ErrorCode};
use crate::node::RaftNode;
use crate::state::{Role, Tally};
use crate::voters::KRAFT_VERSION_STATIC;
use crate::NodeId;

/// The fields of a Vote request the voter reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct VoteParams {
    pub replica_epoch: i32,
    pub candidate_id: NodeId,
    pub last_position: OffsetAndEpoch,
    pub pre_vote: bool,
    pub voter_directory_id: Option<Uuid>,
}

/// Kafka's `KafkaRaftClient.RETRY_BACKOFF_BASE_MS` for election backoff.
const ELECTION_BACKOFF_BASE_MS: u64 = 100;

impl<L: RaftLog> RaftNode<L> {
    pub(crate) fn become_prospective(&mut self, now: u64) {
        if !matches!(self.role, Role::Candidate { .. }) {
            // Kafka's `QuorumState`: the retry count (and so the backoff)
            // only grows across elections lost one after another.
            self.election_retries = 0;
        }
        let voted = self.voted_in_epoch();
        let leader = self.leader_id().filter(|id| *id != self.config.node_id);
        let mut tally = Tally::default();
        tally.granted.insert(self.config.node_id);
        let election_deadline_ms = self.random_election_deadline(now);
        self.set_role(self.epoch, Role::Prospective { voted, leader, tally, election_deadline_ms });
        self.count_pre_votes(now);
    }

    fn become_candidate(&mut self, now: u64) {
        let mut tally = Tally::default();
        tally.granted.insert(self.config.node_id);
        let election_deadline_ms = self.random_election_deadline(now);
        self.election_retries += 1;
        self.set_role(
            self.epoch + 1,
            Role::Candidate { tally, election_deadline_ms, backoff_until_ms: None },
        );
        self.count_votes(now);
    }

    /// A prospective that cannot win goes back to its leader if it had one,
    /// otherwise waits unattached (Kafka's `QuorumState` transitions).
    fn prospective_lost(&mut self, now: u64) {
        match self.leader_id() {
            Some(leader) => self.become_follower(now, self.epoch, leader),
            None => self.become_unattached(now, self.epoch),
        }
    }

    pub(crate) fn poll_prospective(&mut self, now: u64) {
        let Role::Prospective { tally, election_deadline_ms, .. } = &self.role else { return };
        if now >= *election_deadline_ms {
            self.prospective_lost(now);
            return;
        }
        let pending: Vec<NodeId> = self.other_voters().filter(|id| !tally.has_answered(*id)).collect();
        for to in pending {
            let body = self.vote_request(self.epoch, true, to);
            self.send_request(now, to, body);
        }
    }

    pub(crate) fn poll_candidate(&mut self, now: u64) {
        let Role::Candidate { tally, election_deadline_ms, backoff_until_ms } = &self.role else { return };
        match backoff_until_ms {
            Some(until) if now >= *until => return self.become_prospective(now),
            Some(_) => return,
            None if now >= *election_deadline_ms => {
                self.start_election_backoff(now);
                // A backoff drawn as zero is over at once.
                return self.poll_candidate(now);
            }
            None => {}
        }
        let pending: Vec<NodeId> = self.other_voters().filter(|id| !tally.has_answered(*id)).collect();
        for to in pending {
            let body = self.vote_request(self.epoch, false, to);
            self.send_request(now, to, body);
        }
    }

    fn vote_request(&self, replica_epoch: i32, pre_vote: bool, to: NodeId) -> Body {
        Body::VoteRequest {
            replica_epoch,
            candidate_id: self.config.node_id,
            last_position: self.log.end_position(),
            pre_vote,
            candidate_directory_id: self.config.directory_id,
            voter_directory_id: self.voter_directory_id(to),
        }
    }

    /// The directory id the voter set in force gives `voter`.
    pub(crate) fn voter_directory_id(&self, voter: NodeId) -> Option<Uuid> {
        self.voter_set().get(voter).and_then(|node| node.key.directory_id)
    }

    /// Votes for this node among the voter set in force, and the rejections
    /// a majority can no longer outweigh.
    fn tally_counts(&self, tally: &Tally) -> (bool, bool) {
        let voters = self.voter_set();
        let granted = tally.granted.iter().filter(|id| voters.contains_id(**id)).count();
        let rejected = tally.rejected.iter().filter(|id| voters.contains_id(**id)).count();
        let majority = voters.majority();
        (granted >= majority, rejected >= voters.len() + 1 - majority)
    }

    /// A lost or stalled election waits a random, growing backoff before
    /// the next try (Kafka's `binaryExponentialElectionBackoffMs`).
    fn start_election_backoff(&mut self, now: u64) {
        let exponent = self.election_retries.saturating_sub(1).min(20);
        let slots = 2u64 << exponent;
        let backoff =
            (ELECTION_BACKOFF_BASE_MS * self.rng.below(slots)).min(self.config.election_backoff_max_ms);
        if let Role::Candidate { backoff_until_ms, .. } = &mut self.role {
            *backoff_until_ms = Some(now.saturating_add(backoff));
        }
    }

    fn count_pre_votes(&mut self, now: u64) {
        let Role::Prospective { tally, .. } = &self.role else { return };
        let (won, lost) = self.tally_counts(tally);
        if won {
            self.become_candidate(now);
        } else if lost {
            self.prospective_lost(now);
        }
    }

    fn count_votes(&mut self, now: u64) {
        let Role::Candidate { tally, backoff_until_ms, .. } = &self.role else { return };
        let (won, lost) = self.tally_counts(tally);
        if won {
            self.become_leader(now);
        } else if lost && backoff_until_ms.is_none() {
            // Gridlocked: back off now rather than wait out the election
            // timeout (Kafka's `handleVoteResponse`).
            self.start_election_backoff(now);
        }
    }

    // ---- Vote --------------------------------------------------------

    pub(crate) fn handle_vote_request(&mut self, now: u64, from: NodeId, vote: VoteParams) -> Option<Body> {
        let VoteParams { replica_epoch, candidate_id, last_position, pre_vote, voter_directory_id } = vote;
        let error = self.validate_vote_request(from, replica_epoch, candidate_id, last_position, pre_vote);
        if error != ErrorCode::None {
            return Some(self.vote_response(error, false));
        }
        if !self.is_addressed_to_me(voter_directory_id) {
            return Some(self.vote_response(ErrorCode::InvalidVoterKey, false));
        }
        if replica_epoch > self.epoch {
            // KIP-996 as Kafka implements it: a pre-vote from a newer epoch
            // moves the receiver to that epoch too, then counts only logs.
            self.become_unattached(now, replica_epoch);
        }
        let up_to_date = last_position >= self.log.end_position() || self.vote_ignores_log();
        let granted = self.can_grant_vote(candidate_id, up_to_date, pre_vote);
        if granted && (!pre_vote || self.pre_vote_binds()) {
            self.record_vote(now, candidate_id);
        }
        Some(self.vote_response(ErrorCode::None, granted))
    }

    fn validate_vote_request(
        &self,
        from: NodeId,
        replica_epoch: i32,
        candidate_id: NodeId,
        last_position: OffsetAndEpoch,
        pre_vote: bool,
    ) -> ErrorCode {
        // A candidate's log ends in an older epoch than the one it runs
        // for; a prospective's may end in its current epoch.
        let epoch_too_new =
            if pre_vote { last_position.epoch > replica_epoch } else { last_position.epoch >= replica_epoch };
        if candidate_id != from || last_position.epoch < 0 || epoch_too_new {
            ErrorCode::InvalidRequest
        } else if self.kraft_version() == KRAFT_VERSION_STATIC
            && (!self.is_local_voter() || !self.voter_set().contains_id(candidate_id))
        {
            // Static voters check membership; with `kraft.version` 1 the
            // local voter set may lag the candidate's, and Kafka checks only
            // that the request is meant for this replica.
            ErrorCode::InconsistentVoterSet
        } else if replica_epoch < self.epoch {
            ErrorCode::FencedLeaderEpoch
        } else {
            ErrorCode::None
        }
    }

    /// Whether a request naming this node's directory is meant for it
    /// (Kafka's `isValidVoterKey`): an absent directory id matches any.
    fn is_addressed_to_me(&self, voter_directory_id: Option<Uuid>) -> bool {
        voter_directory_id.is_none() || voter_directory_id == self.config.directory_id
    }

    /// Whether the role may grant this vote (Kafka's `EpochState.canGrantVote`).
    fn can_grant_vote(&self, candidate_id: NodeId, up_to_date: bool, pre_vote: bool) -> bool {
        match &self.role {
            Role::Unattached { voted, .. } => match voted {
                _ if pre_vote => up_to_date,
                Some(voted) => *voted == candidate_id,
                None => up_to_date,
            },
            // `unattachedOrProspectiveCanGrantVote`: a prospective that still
            // knows its epoch's leader binds no vote to anyone else.
            Role::Prospective { voted, leader, .. } => match (voted, leader) {
                _ if pre_vote => up_to_date,
                (Some(voted), _) => *voted == candidate_id,
                (None, Some(_)) => false,
                (None, None) => up_to_date,
            },
            // A candidate voted for itself, but a pre-vote binds nothing.
            Role::Candidate { .. } => pre_vote && up_to_date,
            // `FollowerState`: a follower that has heard from its leader
            // rejects pre-votes, so a partitioned voter cannot disrupt it.
            Role::Follower { has_fetched, .. } => pre_vote && !has_fetched && up_to_date,
            Role::Leader(_) | Role::Resigned { .. } => false,
        }
    }

    fn record_vote(&mut self, now: u64, candidate_id: NodeId) {
        let election_deadline = self.random_election_deadline(now);
        // The candidate has at least this node's chance of winning: give it a
        // full election timeout (Kafka's `unattachedAddVotedState` and
        // `prospectiveAddVotedState`).
        match &mut self.role {
            Role::Unattached { voted: voted @ None, election_deadline_ms }
            | Role::Prospective { voted: voted @ None, election_deadline_ms, .. } => {
                *voted = Some(candidate_id);
                *election_deadline_ms = election_deadline;
            }
            _ => return,
        }
        // Durable before the response that follows it.
        self.persist_election_state();
    }

    fn vote_response(&self, error: ErrorCode, vote_granted: bool) -> Body {
        Body::VoteResponse { error, leader_epoch: self.epoch, leader_id: self.leader_id(), vote_granted }
    }

    pub(crate) fn handle_vote_response(
        &mut self,
        now: u64,
        from: NodeId,
        error: ErrorCode,
        leader_epoch: i32,
        leader_id: Option<NodeId>,
        vote_granted: bool,
    ) {
        if self.handle_common_response(now, from, error, leader_epoch, leader_id) {
            return;
        }
        if error != ErrorCode::None {
            return;
        }
        match &mut self.role {
            Role::Prospective { tally, .. } => {
                let _ = if vote_granted { tally.granted.insert(from) } else { tally.rejected.insert(from) };
                self.count_pre_votes(now);
            }
            Role::Candidate { tally, .. } => {
                let _ = if vote_granted { tally.granted.insert(from) } else { tally.rejected.insert(from) };
                self.count_votes(now);
            }
            _ => {}
        }
    }

    // ---- BeginQuorumEpoch / EndQuorumEpoch ------------------------------

    /// Checks a voter-only request from a leader (Kafka's `validateVoterOnlyRequest`).
    fn validate_leader_announcement(&self, from: NodeId, leader_epoch: i32, leader_id: NodeId) -> ErrorCode {
        if leader_id != from {
            ErrorCode::InvalidRequest
        } else if self.kraft_version() == KRAFT_VERSION_STATIC && !self.voter_set().contains_id(leader_id) {
            // As for votes: a dynamic voter set here may lag the leader's.
            ErrorCode::InconsistentVoterSet
        } else if leader_epoch < self.epoch {
            ErrorCode::FencedLeaderEpoch
        } else if leader_epoch == self.epoch && self.leader_id().is_some_and(|known| known != leader_id) {
            // Two leaders in one epoch cannot happen; refuse rather than follow.
            ErrorCode::InvalidRequest
        } else {
            ErrorCode::None
        }
    }

    pub(crate) fn handle_begin_quorum_epoch_request(
        &mut self,
        now: u64,
        from: NodeId,
        leader_epoch: i32,
        leader_id: NodeId,
        voter_directory_id: Option<Uuid>,
    ) -> Option<Body> {
        let mut error = self.validate_leader_announcement(from, leader_epoch, leader_id);
        if error == ErrorCode::None && !self.is_addressed_to_me(voter_directory_id) {
            error = ErrorCode::InvalidVoterKey;
        }
        if error == ErrorCode::None {
            self.maybe_transition(now, leader_epoch, Some(leader_id));
        }
        Some(Body::BeginQuorumEpochResponse { error, leader_epoch: self.epoch, leader_id: self.leader_id() })
    }

    pub(crate) fn handle_end_quorum_epoch_request(
        &mut self,
        now: u64,
        from: NodeId,
        leader_epoch: i32,
        leader_id: NodeId,
        preferred_successors: &[crate::voters::ReplicaKey],
    ) -> Option<Body> {
        let error = self.validate_leader_announcement(from, leader_epoch, leader_id);
        if error == ErrorCode::None {
            self.maybe_transition(now, leader_epoch, Some(leader_id));
            let backoff = self.end_epoch_election_backoff(preferred_successors);
            if let Role::Follower { leader, fetch_deadline_ms, has_fetched, .. } = &mut self.role {
                if *leader == leader_id {
                    // Preferred successors time out first, in order. The
                    // leader said it is gone, so this follower no longer
                    // shields it from pre-votes: a successor can win at once.
                    *fetch_deadline_ms = now.saturating_add(backoff);
                    *has_fetched = false;
                }
            }
        }
        Some(Body::EndQuorumEpochResponse { error, leader_epoch: self.epoch, leader_id: self.leader_id() })
    }

    /// Kafka's `strictExponentialElectionBackoffMs`: the first preferred
    /// successor starts at once, later ones wait exponentially longer,
    /// everyone else the maximum.
    fn end_epoch_election_backoff(&self, preferred_successors: &[crate::voters::ReplicaKey]) -> u64 {
        let max = self.config.election_backoff_max_ms;
        // A candidate named with a directory id is this replica only if the
        // directory is ours (Kafka matches `ReplicaKey`s).
        let me = self.replica_key();
        let position = preferred_successors.iter().position(|key| {
            key.id == me.id && (key.directory_id.is_none() || key.directory_id == me.directory_id)
        });
        match position {
            Some(0) => 0,
            Some(position) => {
                let shift = (preferred_successors.len() - 1).min(63) as u32;
                let base = max >> shift;
                (base << (position - 1).min(63)).min(max)
            }
            None => max,
        }
    }

    pub(crate) fn handle_begin_quorum_epoch_response(
        &mut self,
        now: u64,
        from: NodeId,
        error: ErrorCode,
        leader_epoch: i32,
        leader_id: Option<NodeId>,
    ) {
        if self.handle_common_response(now, from, error, leader_epoch, leader_id) {
            return;
        }
        if let (ErrorCode::None, Role::Leader(leader)) = (error, &mut self.role) {
            leader.begin_unacked.remove(&from);
        }
    }

    pub(crate) fn handle_end_quorum_epoch_response(
        &mut self,
        now: u64,
        from: NodeId,
        error: ErrorCode,
        leader_epoch: i32,
        leader_id: Option<NodeId>,
    ) {
        if self.handle_common_response(now, from, error, leader_epoch, leader_id) {
            return;
        }
        if let (ErrorCode::None, Role::Resigned { unacked, .. }) = (error, &mut self.role) {
            unacked.remove(&from);
        }
    }

    // ---- epochs and leaders learnt from any message ------------------

    /// Moves to a newer epoch, or follows a newly learnt leader of this one
    /// (Kafka's `maybeTransition`).
    pub(crate) fn maybe_transition(&mut self, now: u64, epoch: i32, leader_id: Option<NodeId>) {
        if epoch > self.epoch {
            match leader_id {
                Some(leader) if leader != self.config.node_id => self.become_follower(now, epoch, leader),
                _ => self.become_unattached(now, epoch),
            }
        } else if epoch == self.epoch && self.leader_id().is_none() {
            if let Some(leader) = leader_id {
                self.become_follower(now, epoch, leader);
            }
        }
    }

    /// The epoch handling every response shares (Kafka's
    /// `maybeHandleCommonResponse`); true when the response is consumed.
    /// An error holds requests to `from` back for `retry.backoff.ms`, so a
    /// node that keeps answering errors is not asked in a tight loop (a
    /// transition forgets the backoff: the node has news to act on).
    pub(crate) fn handle_common_response(
        &mut self,
        now: u64,
        from: NodeId,
        error: ErrorCode,
        epoch: i32,
        leader_id: Option<NodeId>,
    ) -> bool {
        if error != ErrorCode::None {
            self.back_off(from, now);
        }
        if epoch < self.epoch || error == ErrorCode::UnknownLeaderEpoch {
            true
        } else if epoch > self.epoch
            || error == ErrorCode::FencedLeaderEpoch
            || error == ErrorCode::NotLeaderOrFollower
        {
            self.maybe_transition(now, epoch, leader_id);
            true
        } else if leader_id.is_some() && self.leader_id().is_none() {
            // Learn the leader; a successful response (an observer's first
            // fetch) is still processed in the new role.
            self.maybe_transition(now, epoch, leader_id);
            error != ErrorCode::None
        } else {
            false
        }
    }

    #[cfg(test)]
    fn vote_ignores_log(&self) -> bool {
        self.bugs.vote_ignores_log
    }

    #[cfg(not(test))]
    fn vote_ignores_log(&self) -> bool {
        false
    }

    #[cfg(test)]
    fn pre_vote_binds(&self) -> bool {
        self.bugs.pre_vote_binds
    }

    #[cfg(not(test))]
    fn pre_vote_binds(&self) -> bool {
        false
    }
}
