//! KIP-853 voter changes on the leader: AddRaftVoter, RemoveRaftVoter and
//! UpdateRaftVoter (Kafka's `AddVoterHandler`, `RemoveVoterHandler`,
//! `UpdateVoterHandler`), and how a new voter set reaches the leader's
//! bookkeeping.
//!
//! A change is a VotersRecord the leader appends; it is in force from
//! then on, on every node that holds it. Changes go one voter at a time,
//! so any majority of the old set meets any majority of the new one, and
//! one at a time: a leader starts a change only when it has committed an
//! offset in its epoch (which fences the changes of earlier leaders) and
//! the latest VotersRecord is committed. Add and remove answer once their
//! record commits (or time out after `controller.quorum.request.timeout.ms`);
//! update answers as soon as it is appended, as Kafka's does.

use crate::log::{RaftLog, Records};
use crate::message::{Body, ErrorCode, Message};
use crate::node::RaftNode;
use crate::state::{LeaderState, Role, VoterChange};
use crate::voters::{
    BaseSource, Endpoint, ReplicaKey, VoterNode, KRAFT_VERSION_STATIC, SUPPORTED_KRAFT_VERSIONS,
};
use crate::NodeId;

/// An error code and the `ErrorMessage` that explains it.
type Refusal = (ErrorCode, &'static str);

impl<L: RaftLog> RaftNode<L> {
    /// Kafka's `KafkaRaftClient.handleAddVoterRequest` and
    /// `AddVoterHandler`. Kafka first asks the new voter for its
    /// `kraft.version` range with ApiVersions; every Strom node supports
    /// [`SUPPORTED_KRAFT_VERSIONS`], so the leader records that range.
    pub(crate) fn handle_add_voter_request(
        &mut self,
        now: u64,
        from: NodeId,
        correlation_id: u64,
        voter: ReplicaKey,
        listeners: Vec<Endpoint>,
    ) -> Option<Body> {
        let refuse = |(error, message): Refusal| {
            Some(Body::AddRaftVoterResponse { error, error_message: Some(message.to_owned()) })
        };
        if !matches!(self.role, Role::Leader(_)) {
            return refuse((ErrorCode::NotLeaderOrFollower, "this node does not lead the quorum"));
        }
        if voter.directory_id.is_none() || voter.id < 0 {
            return refuse((ErrorCode::InvalidRequest, "the voter to add needs an id and a directory id"));
        }
        if !listeners.iter().any(|endpoint| endpoint.listener == self.config.listener_name) {
            return refuse((
                ErrorCode::InvalidRequest,
                "the voter to add has no endpoint on the quorum's listener",
            ));
        }
        if let Err(refusal) = self.can_change_voters(now) {
            return refuse(refusal);
        }
        if self.voter_set().contains_id(voter.id) {
            return refuse((ErrorCode::DuplicateVoter, "the voter id is already part of the set of voters"));
        }
        if !self.observer_caught_up(now, voter) {
            return refuse((ErrorCode::RequestTimedOut, "the voter to add is not a caught-up observer"));
        }
        let node = VoterNode { key: voter, endpoints: listeners, kraft_versions: SUPPORTED_KRAFT_VERSIONS };
        let voters = self.voter_set().add_voter(node)?;
        let offset = self.append_as_leader(now, Records::Voters(voters));
        self.start_voter_change(now, from, correlation_id, true, offset);
        None
    }

    /// Kafka's `KafkaRaftClient.handleRemoveVoterRequest` and
    /// `RemoveVoterHandler`. A leader may remove itself: it leads until
    /// the change commits, then resigns.
    pub(crate) fn handle_remove_voter_request(
        &mut self,
        now: u64,
        from: NodeId,
        correlation_id: u64,
        voter: ReplicaKey,
    ) -> Option<Body> {
        let refuse = |(error, message): Refusal| {
            Some(Body::RemoveRaftVoterResponse { error, error_message: Some(message.to_owned()) })
        };
        if !matches!(self.role, Role::Leader(_)) {
            return refuse((ErrorCode::NotLeaderOrFollower, "this node does not lead the quorum"));
        }
        if voter.directory_id.is_none() {
            return refuse((ErrorCode::InvalidRequest, "the voter to remove needs an id and a directory id"));
        }
        if let Err(refusal) = self.can_change_voters(now) {
            return refuse(refusal);
        }
        let Some(voters) = self.voter_set().remove_voter(voter) else {
            return refuse((ErrorCode::VoterNotFound, "no such voter, or it is the last one"));
        };
        let offset = self.append_as_leader(now, Records::Voters(voters));
        self.start_voter_change(now, from, correlation_id, false, offset);
        None
    }

    /// Kafka's `KafkaRaftClient.handleUpdateVoterRequest` and
    /// `UpdateVoterHandler`: answered once appended, without waiting for
    /// the commit.
    pub(crate) fn handle_update_voter_request(
        &mut self,
        now: u64,
        current_leader_epoch: i32,
        voter: VoterNode,
    ) -> Body {
        let error = match self.update_voter(now, current_leader_epoch, voter) {
            Ok(()) => ErrorCode::None,
            Err((error, _)) => error,
        };
        let leader_endpoint = self
            .leader_id()
            .and_then(|leader| self.voter_set().get(leader))
            .and_then(|leader| leader.endpoint(&self.config.listener_name))
            .cloned();
        Body::UpdateRaftVoterResponse {
            error,
            leader_epoch: self.epoch,
            leader_id: self.leader_id(),
            leader_endpoint,
        }
    }

    fn update_voter(&mut self, now: u64, current_leader_epoch: i32, voter: VoterNode) -> Result<(), Refusal> {
        if current_leader_epoch < self.epoch {
            return Err((ErrorCode::FencedLeaderEpoch, "older epoch"));
        }
        if current_leader_epoch > self.epoch {
            return Err((ErrorCode::UnknownLeaderEpoch, "newer epoch"));
        }
        if !matches!(self.role, Role::Leader(_)) {
            return Err((ErrorCode::NotLeaderOrFollower, "not the leader"));
        }
        let has_listener = voter.endpoint(&self.config.listener_name).is_some();
        if voter.key.directory_id.is_none() || !has_listener || !voter.kraft_versions.is_valid() {
            return Err((ErrorCode::InvalidRequest, "malformed voter"));
        }
        self.can_change_voters(now)?;
        if !voter.kraft_versions.contains(self.kraft_version()) {
            return Err((ErrorCode::InvalidRequest, "the voter does not support the kraft.version in force"));
        }
        let voters = self.voter_set().update_voter(voter).ok_or((ErrorCode::VoterNotFound, "not a voter"))?;
        self.append_as_leader(now, Records::Voters(voters));
        Ok(())
    }

    // ---- a follower voter's own entry -------------------------------------

    /// When a follower next checks its entry in the voter set: a few fetch
    /// rounds from now (Kafka's `FollowerState.updateVoterPeriodMs`, three
    /// fetch timeouts).
    pub(crate) fn update_voter_deadline(&self, now: u64) -> u64 {
        now.saturating_add(self.config.fetch_timeout_ms.saturating_mul(3))
    }

    /// A follower voter whose entry in the voter set names other endpoints
    /// or `kraft.version`s than it has (it came back on other listeners)
    /// sends UpdateRaftVoter to the leader in place of a Fetch once its
    /// update period is over (Kafka's `pollFollowerAsVoter` with
    /// `VoterSet.voterNodeNeedsUpdate`). Kafka restarts the period whether
    /// or not the request could go; here a request that finds a Fetch in
    /// flight waits for the link rather than for the next period. True
    /// when the leader link is taken by it (or held for it).
    pub(crate) fn maybe_send_update_voter(&mut self, now: u64, leader: NodeId) -> bool {
        let Role::Follower { update_voter_deadline_ms, .. } = self.role else { return false };
        if update_voter_deadline_ms.is_some_and(|deadline| now < deadline) {
            return false;
        }
        let Some(me) = self.stale_voter_entry() else {
            self.set_update_voter_deadline(Some(self.update_voter_deadline(now)));
            return false;
        };
        let body = Body::UpdateRaftVoterRequest {
            current_leader_epoch: self.epoch,
            voter_id: me.key.id,
            voter_directory_id: me.key.directory_id,
            listeners: me.endpoints,
            kraft_versions: me.kraft_versions,
        };
        let next =
            if self.send_request(now, leader, body) { Some(self.update_voter_deadline(now)) } else { None };
        self.set_update_voter_deadline(next);
        true
    }

    /// This node as the voter set should name it, when the set's entry for
    /// it differs: a voter of a dynamic quorum, with endpoints on the
    /// quorum's listener, whose entry has other endpoints or versions.
    fn stale_voter_entry(&self) -> Option<VoterNode> {
        if self.kraft_version() == KRAFT_VERSION_STATIC {
            return None;
        }
        let me = VoterNode {
            key: self.replica_key(),
            endpoints: self.config.endpoints.clone(),
            kraft_versions: SUPPORTED_KRAFT_VERSIONS,
        };
        me.endpoint(&self.config.listener_name)?;
        let entry = self.voter_set().get(me.key.id).filter(|entry| entry.is(me.key))?;
        let same_endpoints = entry.endpoints.len() == me.endpoints.len()
            && me.endpoints.iter().all(|endpoint| entry.endpoints.contains(endpoint));
        let stale = entry.key != me.key || !same_endpoints || entry.kraft_versions != me.kraft_versions;
        stale.then_some(me)
    }

    fn set_update_voter_deadline(&mut self, deadline: Option<u64>) {
        if let Role::Follower { update_voter_deadline_ms, .. } = &mut self.role {
            *update_voter_deadline_ms = deadline;
        }
    }

    /// The checks every voter change shares, in Kafka's order: none under
    /// way, a high watermark in this epoch, `kraft.version` 1, and the
    /// latest VotersRecord committed.
    fn can_change_voters(&mut self, now: u64) -> Result<(), Refusal> {
        self.expire_voter_change(now);
        let one_at_a_time = !self.allows_two_voter_changes();
        let Role::Leader(leader) = &self.role else {
            return Err((ErrorCode::NotLeaderOrFollower, "this node does not lead the quorum"));
        };
        if leader.voter_change.is_some() && one_at_a_time {
            return Err((ErrorCode::RequestTimedOut, "waiting for the previous voter change to commit"));
        }
        let Some(high_watermark) = leader.high_watermark else {
            return Err((
                ErrorCode::RequestTimedOut,
                "waiting for the leader to commit an offset in its epoch",
            ));
        };
        if self.kraft_version() == KRAFT_VERSION_STATIC {
            return Err((ErrorCode::UnsupportedVersion, "kraft.version 0 does not support voter changes"));
        }
        let uncommitted = match self.history.latest_voters_offset() {
            Some(offset) => offset >= high_watermark,
            None => self.history.base_source == BaseSource::Config,
        };
        if uncommitted && one_at_a_time {
            return Err((ErrorCode::RequestTimedOut, "waiting for the latest voter change to commit"));
        }
        Ok(())
    }

    fn start_voter_change(
        &mut self,
        now: u64,
        requester: NodeId,
        correlation_id: u64,
        is_add: bool,
        offset: u64,
    ) {
        let deadline_ms = now.saturating_add(self.config.request_timeout_ms);
        let change = VoterChange { requester, correlation_id, is_add, offset, deadline_ms };
        let Role::Leader(leader) = &mut self.role else { return };
        // Only a planted bug lets a second change start: the first is
        // answered as Kafka's `resetAddVoterHandlerState` does.
        if let Some(previous) = leader.voter_change.replace(change) {
            self.answer_voter_change(&previous, ErrorCode::RequestTimedOut);
        }
    }

    fn answer_voter_change(&mut self, change: &VoterChange, error: ErrorCode) {
        let body = if change.is_add {
            Body::AddRaftVoterResponse { error, error_message: None }
        } else {
            Body::RemoveRaftVoterResponse { error, error_message: None }
        };
        self.send(change.requester, Message { correlation_id: change.correlation_id, body });
    }

    /// A change whose record has not committed in time is answered
    /// REQUEST_TIMED_OUT (Kafka's `LeaderState.maybeExpirePendingOperation`).
    pub(crate) fn expire_voter_change(&mut self, now: u64) {
        let Role::Leader(leader) = &mut self.role else { return };
        if leader.voter_change.as_ref().is_some_and(|change| now >= change.deadline_ms) {
            let change = leader.voter_change.take().expect("a change");
            self.answer_voter_change(&change, ErrorCode::RequestTimedOut);
        }
    }

    /// The high watermark moved: a change whose record it passed is done
    /// (Kafka's `highWatermarkUpdated`), and a leader that the committed
    /// voter set leaves out resigns (also one elected to finish its own
    /// removal, which Kafka's `RemoveVoterHandler` no longer tracks).
    pub(crate) fn voter_change_committed(&mut self) {
        let removed = !self.is_local_voter();
        let voters_offset = self.history.latest_voters_offset();
        let Role::Leader(leader) = &mut self.role else { return };
        let high_watermark = leader.high_watermark.unwrap_or(0);
        if removed && voters_offset.is_some_and(|offset| offset < high_watermark) {
            leader.resign_requested = true;
        }
        if leader.voter_change.as_ref().is_none_or(|change| change.offset >= high_watermark) {
            return;
        }
        let change = leader.voter_change.take().expect("a change");
        self.answer_voter_change(&change, ErrorCode::None);
    }

    /// Leadership ended before the change committed (Kafka's `LeaderState.close`).
    pub(crate) fn answer_voter_change_after_leadership(&mut self, leader: &LeaderState) {
        if let Some(change) = &leader.voter_change {
            self.answer_voter_change(change, ErrorCode::NotLeaderOrFollower);
        }
    }

    /// The leader appended a VotersRecord: track the new voters' offsets
    /// (an added observer keeps its own), announce the epoch to them, and
    /// recompute the high watermark over the new set (Kafka's
    /// `LeaderState.updateVoterAndObserverStates`).
    pub(crate) fn leader_voters_changed(&mut self, now: u64) {
        let voters = self.voter_set().clone();
        let me = self.config.node_id;
        let check_quorum_deadline = self.first_check_quorum_deadline(now);
        let Role::Leader(leader) = &mut self.role else { return };
        let old_offsets = std::mem::take(&mut leader.voter_offsets);
        for voter in voters.nodes().filter(|voter| voter.key.id != me) {
            let id = voter.key.id;
            let offset = match old_offsets.get(&id) {
                Some(offset) => *offset,
                None => {
                    leader.begin_unacked.insert(id);
                    leader.observers.remove(&voter.key).map(|observer| observer.fetch_offset)
                }
            };
            leader.voter_offsets.insert(id, offset);
        }
        leader.begin_unacked.retain(|id| voters.contains_id(*id) && *id != me);
        leader.fetched_voters.retain(|id| voters.contains_id(*id));
        // A lone voter never resigns for want of fetches; a leader that
        // gains company gets a full check-quorum period.
        if check_quorum_deadline == u64::MAX || leader.check_quorum_deadline_ms == u64::MAX {
            leader.check_quorum_deadline_ms = check_quorum_deadline;
        }
        self.update_leader_high_watermark();
    }

    /// Kafka's `LeaderState.appendStartOfEpochControlRecords`: with
    /// `kraft.version` 1, a leader whose voter set came from the bootstrap
    /// configuration rather than the log, or whose own endpoints changed,
    /// writes the `kraft.version` and the voter set after its LeaderChange.
    pub(crate) fn append_start_of_epoch_voters(&mut self, now: u64) {
        let kraft_version = self.kraft_version();
        if kraft_version == KRAFT_VERSION_STATIC {
            return;
        }
        let from_bootstrap =
            self.history.latest_voters_offset().is_none() && self.history.base_source == BaseSource::Config;
        let me = self.replica_key();
        let endpoints_changed = !self.config.endpoints.is_empty()
            && self
                .voter_set()
                .get(me.id)
                .is_some_and(|node| node.is(me) && node.endpoints != self.config.endpoints);
        if !from_bootstrap && !endpoints_changed {
            return;
        }
        let mut voters = self.voter_set().clone();
        if endpoints_changed {
            let node = VoterNode {
                key: me,
                endpoints: self.config.endpoints.clone(),
                kraft_versions: SUPPORTED_KRAFT_VERSIONS,
            };
            voters = voters.update_voter(node).unwrap_or(voters);
        }
        self.append_as_leader(now, Records::KRaftVersion { kraft_version });
        self.append_as_leader(now, Records::Voters(voters));
    }

    #[cfg(test)]
    fn allows_two_voter_changes(&self) -> bool {
        self.bugs.two_voter_changes_in_flight
    }

    #[cfg(not(test))]
    fn allows_two_voter_changes(&self) -> bool {
        false
    }
}
