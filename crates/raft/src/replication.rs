//! Replication: followers and observers pull with Fetch; the leader checks
//! each fetch position against its log, answers a diverging epoch where the
//! logs part (or its snapshot's id where its log no longer reaches), parks fetches that find nothing new, and moves the high
//! watermark once a majority of voters has the data and one record of its
//! own epoch is committed. Check-quorum lives here too.

use crate::log::{Batch, OffsetAndEpoch, RaftLog, Records};
use crate::message::{Body, ErrorCode, Message};
use crate::node::{Action, RaftNode};
use crate::state::{LeaderState, ObserverState, ParkedFetch, Role};
use crate::voters::ReplicaKey;
use crate::NodeId;

/// Observers the leader tracks at most; past this the stalest is forgotten.
const OBSERVERS_MAX: usize = 256;
/// An observer that has not fetched for this long is forgotten (Kafka's
/// `LeaderState.OBSERVER_SESSION_TIMEOUT_MS`).
const OBSERVER_SESSION_TIMEOUT_MS: u64 = 300_000;
/// An observer counts as caught up for AddRaftVoter if it caught up with
/// the leader and fetched within this long (Kafka's `isReplicaCaughtUp`).
const CAUGHT_UP_WINDOW_MS: u64 = 3_600_000;

/// The fields of a Fetch request the leader reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FetchParams {
    pub replica: ReplicaKey,
    pub current_leader_epoch: i32,
    pub fetch_offset: u64,
    pub last_fetched_epoch: i32,
    pub max_wait_ms: u64,
}

/// The fields of a Fetch response the fetcher reads.
#[derive(Debug, Clone)]
pub(crate) struct FetchResult {
    pub error: ErrorCode,
    pub leader_epoch: i32,
    pub leader_id: Option<NodeId>,
    pub high_watermark: Option<u64>,
    pub diverging_epoch: Option<OffsetAndEpoch>,
    pub snapshot_id: Option<OffsetAndEpoch>,
    pub batches: Vec<Batch>,
}

/// What the leader makes of a fetch position (Kafka's `ValidOffsetAndEpoch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FetchPosition {
    Valid,
    /// The logs part: truncate to here.
    Diverging(OffsetAndEpoch),
    /// Below what the log can validate: fetch this snapshot.
    Snapshot(OffsetAndEpoch),
}

impl<L: RaftLog> RaftNode<L> {
    // ---- leader side ---------------------------------------------------

    pub(crate) fn poll_leader(&mut self, now: u64) {
        self.expire_voter_change(now);
        let Role::Leader(leader) = &self.role else { return };
        if now >= leader.check_quorum_deadline_ms || leader.resign_requested {
            // Kafka's `pollLeader`: a leader that a majority stopped
            // fetching from may be partitioned away, and one removed from
            // the voter set has no business leading it; either steps down.
            let successors = Self::voters_by_descending_offset(leader);
            self.become_resigned(now, successors);
            return;
        }
        if now >= leader.begin_epoch_deadline_ms {
            // `LeaderState`: the epoch is re-announced every half fetch
            // timeout, so voters that missed it find their leader.
            let others = self.other_voters().collect();
            let next_deadline_ms = now.saturating_add(self.config.fetch_timeout_ms / 2);
            if let Role::Leader(leader) = &mut self.role {
                leader.begin_unacked = others;
                leader.begin_epoch_deadline_ms = next_deadline_ms;
            }
        }
        let Role::Leader(leader) = &self.role else { return };
        let unacked: Vec<NodeId> = leader.begin_unacked.iter().copied().collect();
        let expired: Vec<NodeId> =
            leader.parked.iter().filter(|(_, fetch)| now >= fetch.deadline_ms).map(|(id, _)| *id).collect();
        for replica in expired {
            self.complete_parked_fetch(replica);
        }
        for to in unacked {
            let body = Body::BeginQuorumEpochRequest {
                leader_epoch: self.epoch,
                leader_id: self.config.node_id,
                voter_directory_id: self.voter_directory_id(to),
            };
            self.send_request(now, to, body);
        }
    }

    /// Appends a batch in the current epoch; returns its last offset. A
    /// VotersRecord takes effect at once (Kafka's `LeaderState.updateLocalState`).
    pub(crate) fn append_as_leader(&mut self, now: u64, records: Records) -> u64 {
        let batch = Batch { base_offset: self.log.end_offset(), epoch: self.epoch, records };
        let last_offset = batch.next_offset() - 1;
        self.log.append(batch.clone());
        self.history.on_append(&batch);
        let changes_voters = matches!(batch.records, Records::Voters(_));
        self.push_action(Action::AppendLog { batches: vec![batch] });
        self.request_flush();
        if changes_voters {
            self.leader_voters_changed(now);
        }
        self.complete_all_parked_fetches();
        last_offset
    }

    pub(crate) fn handle_fetch_request(
        &mut self,
        now: u64,
        from: NodeId,
        correlation_id: u64,
        fetch: FetchParams,
    ) -> Option<Body> {
        let error = self.validate_fetch(from, &fetch);
        if error != ErrorCode::None {
            return Some(self.empty_fetch_response(error, None));
        }
        self.note_voter_fetch(now, fetch.replica);
        match self.validate_position(fetch.fetch_offset, fetch.last_fetched_epoch) {
            FetchPosition::Valid => {}
            FetchPosition::Diverging(diverging) => {
                return Some(self.empty_fetch_response(ErrorCode::None, Some(diverging)));
            }
            FetchPosition::Snapshot(snapshot_id) => return Some(self.snapshot_fetch_response(snapshot_id)),
        }
        if self.voter_set().is_voter(fetch.replica) {
            if let Role::Leader(leader) = &mut self.role {
                leader.voter_offsets.insert(fetch.replica.id, Some(fetch.fetch_offset));
            }
            self.update_leader_high_watermark();
        } else {
            self.note_observer_fetch(now, fetch.replica, fetch.fetch_offset);
        }
        let response = self.fetch_response_from(fetch.fetch_offset);
        let nothing_new = matches!(&response, Body::FetchResponse { batches, .. } if batches.is_empty());
        if nothing_new && fetch.max_wait_ms > 0 && self.park_fetch(now, correlation_id, &fetch) {
            return None;
        }
        Some(response)
    }

    /// Kafka's `validateLeaderOnlyRequest` plus the fetch's own fields.
    fn validate_fetch(&self, from: NodeId, fetch: &FetchParams) -> ErrorCode {
        let error = self.validate_leader_request(from, fetch.replica.id, fetch.current_leader_epoch);
        if error != ErrorCode::None {
            error
        } else if fetch.last_fetched_epoch < 0 || fetch.last_fetched_epoch > self.epoch {
            ErrorCode::InvalidRequest
        } else {
            ErrorCode::None
        }
    }

    /// Kafka's `validateLeaderOnlyRequest`, for Fetch and FetchSnapshot.
    pub(crate) fn validate_leader_request(&self, from: NodeId, replica_id: NodeId, epoch: i32) -> ErrorCode {
        if replica_id != from || replica_id == self.config.node_id {
            ErrorCode::InvalidRequest
        } else if epoch < self.epoch {
            ErrorCode::FencedLeaderEpoch
        } else if epoch > self.epoch {
            ErrorCode::UnknownLeaderEpoch
        } else if !matches!(self.role, Role::Leader(_)) {
            ErrorCode::NotLeaderOrFollower
        } else {
            ErrorCode::None
        }
    }

    /// Whether the fetcher's log agrees with ours at its position (Kafka's
    /// `KafkaMetadataLog.validateOffsetAndEpoch`). Below the log start, or
    /// at it with another epoch than the snapshot's, or with an epoch older
    /// than the snapshot's, the log cannot tell: the fetcher gets the
    /// snapshot. Otherwise it diverges where its last epoch ends in our log.
    fn validate_position(&self, fetch_offset: u64, last_fetched_epoch: i32) -> FetchPosition {
        let start = self.log.start_offset();
        if fetch_offset == 0 && start == 0 {
            return FetchPosition::Valid;
        }
        if let Some(snapshot) = self.log.latest_snapshot() {
            if fetch_offset < start
                || (fetch_offset == start && last_fetched_epoch != snapshot.epoch)
                || last_fetched_epoch < snapshot.epoch
            {
                return FetchPosition::Snapshot(snapshot);
            }
        }
        let end = self.log.end_offset_for_epoch(last_fetched_epoch);
        if end.epoch != last_fetched_epoch || end.offset < fetch_offset {
            FetchPosition::Diverging(end)
        } else {
            FetchPosition::Valid
        }
    }

    /// Check-quorum bookkeeping (Kafka's `updateCheckQuorumForFollowingVoter`)
    /// and the BeginQuorumEpoch acknowledgement a fetch implies.
    pub(crate) fn note_voter_fetch(&mut self, now: u64, replica: ReplicaKey) {
        let timeout = self.check_quorum_timeout_ms();
        // The leader counts itself, while it votes.
        let needed = self.voter_set().majority() - usize::from(self.is_local_voter());
        if !self.voter_set().is_voter(replica) {
            return;
        }
        let Role::Leader(leader) = &mut self.role else { return };
        leader.begin_unacked.remove(&replica.id);
        leader.fetched_voters.insert(replica.id);
        if leader.fetched_voters.len() >= needed {
            leader.fetched_voters.clear();
            leader.check_quorum_deadline_ms = now.saturating_add(timeout);
        }
    }

    fn park_fetch(&mut self, now: u64, correlation_id: u64, fetch: &FetchParams) -> bool {
        let wait = fetch.max_wait_ms.min(self.config.fetch_max_wait_ms);
        let max = self.config.parked_fetches_max;
        let Role::Leader(leader) = &mut self.role else { return false };
        if leader.parked.len() >= max && !leader.parked.contains_key(&fetch.replica.id) {
            return false;
        }
        let parked =
            ParkedFetch { correlation_id, fetch_offset: fetch.fetch_offset, deadline_ms: now + wait };
        leader.parked.insert(fetch.replica.id, parked);
        true
    }

    /// Batches from `fetch_offset`; the snapshot's id if the log start has
    /// passed it since the fetch was parked.
    fn fetch_response_from(&self, fetch_offset: u64) -> Body {
        if let Some(snapshot_id) =
            self.log.latest_snapshot().filter(|_| fetch_offset < self.log.start_offset())
        {
            return self.snapshot_fetch_response(snapshot_id);
        }
        let mut response = self.empty_fetch_response(ErrorCode::None, None);
        if let Body::FetchResponse { batches, .. } = &mut response {
            *batches = self.log.read(fetch_offset, self.config.fetch_max_bytes);
        }
        response
    }

    fn snapshot_fetch_response(&self, snapshot_id: OffsetAndEpoch) -> Body {
        let mut response = self.empty_fetch_response(ErrorCode::None, None);
        if let Body::FetchResponse { snapshot_id: id, .. } = &mut response {
            *id = Some(snapshot_id);
        }
        response
    }

    fn empty_fetch_response(&self, error: ErrorCode, diverging_epoch: Option<OffsetAndEpoch>) -> Body {
        let high_watermark = match &self.role {
            Role::Leader(leader) => leader.high_watermark,
            _ => None,
        };
        Body::FetchResponse {
            error,
            leader_epoch: self.epoch,
            leader_id: self.leader_id(),
            high_watermark,
            diverging_epoch,
            snapshot_id: None,
            batches: Vec::new(),
        }
    }

    fn complete_parked_fetch(&mut self, replica: NodeId) {
        let Role::Leader(leader) = &mut self.role else { return };
        if let Some(parked) = leader.parked.remove(&replica) {
            let body = self.fetch_response_from(parked.fetch_offset);
            self.send(replica, Message { correlation_id: parked.correlation_id, body });
        }
    }

    /// New data or a new high watermark: every parked fetch has news.
    fn complete_all_parked_fetches(&mut self) {
        let Role::Leader(leader) = &self.role else { return };
        let replicas: Vec<NodeId> = leader.parked.keys().copied().collect();
        for replica in replicas {
            self.complete_parked_fetch(replica);
        }
    }

    /// Leadership ended: parked fetchers learn the new epoch and leader.
    pub(crate) fn answer_parked_after_leadership(&mut self, leader: LeaderState) {
        for (replica, parked) in leader.parked {
            let body = self.empty_fetch_response(ErrorCode::NotLeaderOrFollower, None);
            self.send(replica, Message { correlation_id: parked.correlation_id, body });
        }
    }

    /// Kafka's `LeaderState.maybeUpdateHighWatermark`: the offset a
    /// majority of voters (the leader by its flushed offset) has reached,
    /// once it passes the epoch's start, so a record of this epoch commits.
    pub(crate) fn update_leader_high_watermark(&mut self) {
        let me = self.replica_key();
        let flushed = self.flushed_offset;
        let own_epoch_optional = self.commits_without_own_epoch();
        let Role::Leader(leader) = &mut self.role else { return };
        let voters = self.history.latest_voters();
        let mut offsets: Vec<Option<u64>> = voters
            .nodes()
            .map(|voter| {
                if voter.is(me) {
                    Some(flushed)
                } else {
                    leader.voter_offsets.get(&voter.key.id).copied().flatten()
                }
            })
            .collect();
        offsets.sort_unstable_by(|a, b| b.cmp(a));
        let Some(candidate) = offsets[voters.len() / 2] else { return };
        // A smaller voter set may compute a smaller offset: the high
        // watermark never goes back (Kafka's `maybeUpdateHighWatermark`).
        let raises = leader.high_watermark.is_none_or(|current| candidate > current);
        let past_epoch_start = candidate > leader.epoch_start_offset || own_epoch_optional;
        if past_epoch_start && raises {
            leader.high_watermark = Some(candidate);
            self.high_watermark = Some(candidate);
            self.complete_all_parked_fetches();
            self.voter_change_committed();
        }
    }

    /// Kafka's `ReplicaState.updateFollowerState` for a fetching observer:
    /// it is caught up when it reaches the leader's log end, or the end the
    /// leader had at its previous fetch.
    fn note_observer_fetch(&mut self, now: u64, replica: ReplicaKey, fetch_offset: u64) {
        let leader_end = self.log.end_offset();
        let Role::Leader(leader) = &mut self.role else { return };
        leader
            .observers
            .retain(|_, state| now.saturating_sub(state.last_fetch_ms) < OBSERVER_SESSION_TIMEOUT_MS);
        if leader.observers.len() >= OBSERVERS_MAX && !leader.observers.contains_key(&replica) {
            let stalest =
                leader.observers.iter().min_by_key(|(_, state)| state.last_fetch_ms).map(|(key, _)| *key);
            stalest.map(|key| leader.observers.remove(&key));
        }
        let state = leader.observers.entry(replica).or_insert(ObserverState {
            fetch_offset,
            last_fetch_ms: now,
            leader_end_at_last_fetch: 0,
            last_caught_up_ms: None,
        });
        if fetch_offset >= leader_end {
            state.last_caught_up_ms = Some(now);
        } else if state.leader_end_at_last_fetch > 0 && fetch_offset >= state.leader_end_at_last_fetch {
            state.last_caught_up_ms = Some(state.last_fetch_ms);
        }
        state.fetch_offset = fetch_offset;
        state.last_fetch_ms = now;
        state.leader_end_at_last_fetch = leader_end;
    }

    /// Whether the observer `replica` may become a voter now (Kafka's
    /// `LeaderState.isReplicaCaughtUp`).
    pub(crate) fn observer_caught_up(&self, now: u64, replica: ReplicaKey) -> bool {
        let Role::Leader(leader) = &self.role else { return false };
        leader.observers.get(&replica).is_some_and(|state| {
            state.last_caught_up_ms.is_some() && now.saturating_sub(state.last_fetch_ms) < CAUGHT_UP_WINDOW_MS
        })
    }

    /// Other voters, most caught up first (Kafka's
    /// `nonLeaderVotersByDescendingFetchOffset`).
    pub(crate) fn voters_by_descending_offset(leader: &LeaderState) -> Vec<NodeId> {
        let mut voters: Vec<(Option<u64>, NodeId)> =
            leader.voter_offsets.iter().map(|(id, offset)| (*offset, *id)).collect();
        voters.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        voters.into_iter().map(|(_, id)| id).collect()
    }

    #[cfg(test)]
    fn commits_without_own_epoch(&self) -> bool {
        self.bugs.commit_without_own_epoch
    }

    #[cfg(not(test))]
    fn commits_without_own_epoch(&self) -> bool {
        false
    }

    // ---- fetcher side --------------------------------------------------

    /// Fetches from `leader` once the log is durable to its end: a voter
    /// must flush before its fetch offset counts toward the high watermark
    /// (Kafka's `appendAsFollower` flushes for the same reason).
    pub(crate) fn maybe_send_fetch(&mut self, now: u64, leader: NodeId) {
        if let Some(body) = self.fetch_snapshot_request() {
            self.send_request(now, leader, body);
            return;
        }
        if self.flushed_offset < self.log.end_offset() {
            self.request_flush();
            return;
        }
        let body = self.fetch_request();
        self.send_request(now, leader, body);
    }

    pub(crate) fn fetch_from_any_voter(&mut self, now: u64) {
        if self.requests.any_in_flight(now) || self.flushed_offset < self.log.end_offset() {
            return;
        }
        // Kafka's observers ask `controller.quorum.bootstrap.servers`, whom
        // a stale voter set (a replaced disk's bootstrap one) cannot hide.
        let me = self.config.node_id;
        let voters: Vec<NodeId> = if self.config.bootstrap_servers.is_empty() {
            self.other_voters().collect()
        } else {
            self.config.bootstrap_servers.iter().copied().filter(|id| *id != me).collect()
        };
        if voters.is_empty() {
            return;
        }
        let to = voters[self.rng.below(voters.len() as u64) as usize];
        let body = self.fetch_request();
        self.send_request(now, to, body);
    }

    fn fetch_request(&self) -> Body {
        Body::FetchRequest {
            replica_id: self.config.node_id,
            current_leader_epoch: self.epoch,
            fetch_offset: self.log.end_offset(),
            last_fetched_epoch: self.log.last_epoch(),
            max_wait_ms: self.config.fetch_max_wait_ms,
            replica_directory_id: self.config.directory_id,
        }
    }

    pub(crate) fn handle_fetch_response(&mut self, now: u64, from: NodeId, response: FetchResult) {
        if self.handle_common_response(now, from, response.error, response.leader_epoch, response.leader_id) {
            return;
        }
        if response.error != ErrorCode::None {
            return;
        }
        let fetch_timeout = self.config.fetch_timeout_ms;
        let Role::Follower { leader, fetch_deadline_ms, has_fetched, .. } = &mut self.role else { return };
        if *leader != from {
            return;
        }
        *fetch_deadline_ms = now.saturating_add(fetch_timeout);
        *has_fetched = true;
        if let Some(diverging) = response.diverging_epoch {
            if !self.truncate_to_end_offset(diverging) {
                self.back_off(from, now);
            }
            return;
        }
        if let Some(snapshot_id) = response.snapshot_id {
            if !self.start_snapshot_fetch(snapshot_id) {
                self.back_off(from, now);
            }
            return;
        }
        if !response.batches.is_empty() {
            if !self.fetched_batches_fit(&response.batches, response.leader_epoch) {
                self.back_off(from, now);
                return;
            }
            for batch in &response.batches {
                self.log.append(batch.clone());
                self.history.on_append(batch);
            }
            self.push_action(Action::AppendLog { batches: response.batches });
            self.request_flush();
        }
        if let Some(leader_high_watermark) = response.high_watermark {
            // Kafka's `updateFollowerHighWatermark`: never past our own log.
            let high_watermark = leader_high_watermark.min(self.log.end_offset());
            if self.high_watermark.is_none_or(|current| high_watermark > current) {
                self.high_watermark = Some(high_watermark);
            }
        }
    }

    /// Whether fetched batches continue our log: contiguous, non-empty,
    /// epochs non-decreasing and not past the leader's. Anything else is a
    /// corrupt response, dropped rather than written.
    fn fetched_batches_fit(&self, batches: &[Batch], leader_epoch: i32) -> bool {
        let mut next_offset = self.log.end_offset();
        let mut last_epoch = self.log.last_epoch();
        for batch in batches {
            let fits = batch.base_offset == next_offset
                && batch.record_count() > 0
                && batch.epoch >= last_epoch
                && batch.epoch <= leader_epoch;
            if !fits {
                return false;
            }
            next_offset = batch.next_offset();
            last_epoch = batch.epoch;
        }
        true
    }

    /// Cuts the divergent suffix exactly (Kafka's `truncateToEndOffset`):
    /// to where the shared epoch ends in both logs. Committed records are
    /// never cut: like `KafkaMetadataLog`, a truncation below the high
    /// watermark or the log start is refused (false), as only a broken
    /// leader can ask it.
    fn truncate_to_end_offset(&mut self, diverging: OffsetAndEpoch) -> bool {
        let local = self.log.end_offset_for_epoch(diverging.epoch);
        let offset =
            if local.epoch == diverging.epoch { local.offset.min(diverging.offset) } else { local.offset };
        if offset < self.high_watermark.unwrap_or(0).max(self.log.start_offset()) {
            self.refused_truncations += 1;
            return false;
        }
        if offset < self.log.end_offset() {
            self.truncate_log(offset);
        }
        true
    }
}
