//! Scenario tests of the core's rules, driven by hand: messages are
//! delivered at once and in order, flushes complete at once, and only the
//! nodes a test ticks see time pass.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use uuid::Uuid;

use crate::log::{Batch, MemoryLog, OffsetAndEpoch, RaftLog, Records};
use crate::message::{Body, ErrorCode, Message};
use crate::node::{Action, Event, RaftNode};
use crate::state::{ElectionState, RoleName};
use crate::voters::{Endpoint, ReplicaKey, VoterNode, VoterSet, SUPPORTED_KRAFT_VERSIONS};
use crate::{NodeId, QuorumConfig};

const ELECTION_TIMEOUT_MAX_MS: u64 = 2 * 1_000;
/// Who sends voter changes in these tests (no node has this id).
const ADMIN: NodeId = 0;
const FETCH_MAX_WAIT_MS: u64 = 500;
/// `controller.quorum.fetch.timeout.ms`'s default, which the tests keep.
const FETCH_TIMEOUT_MS: u64 = 2_000;

struct Harness {
    nodes: BTreeMap<NodeId, RaftNode<MemoryLog>>,
    inbox: VecDeque<(NodeId, NodeId, Message)>,
    /// Every action performed, in order, for assertions.
    performed: Vec<(NodeId, Action)>,
    /// Each node's clock: only `tick` moves it.
    clocks: BTreeMap<NodeId, u64>,
    /// Answers sent to the administrator (any id that is not a node).
    admin_answers: Vec<Message>,
}

fn log_of(epochs: &[i32]) -> MemoryLog {
    let mut log = MemoryLog::new();
    for (index, epoch) in epochs.iter().enumerate() {
        let records = Records::Data(vec![Bytes::from(format!("record {index}"))]);
        log.append(Batch { base_offset: log.end_offset(), epoch: *epoch, records });
    }
    log
}

/// Node `id`'s state machine snapshot below `offset`.
fn state_below(id: NodeId, offset: u64) -> crate::SnapshotState {
    crate::SnapshotState {
        records: vec![Bytes::from(format!("node {id}'s state below {offset}"))],
        last_contained_log_timestamp_ms: 1_000 + offset as i64,
        timestamp_ms: 2_000,
    }
}

impl Harness {
    /// Voters 1..=count, each with the log whose batch epochs are given.
    fn new(logs: &[&[i32]]) -> Self {
        let voters: Vec<NodeId> = (1..=logs.len() as NodeId).collect();
        let mut harness = Self {
            nodes: BTreeMap::new(),
            inbox: VecDeque::new(),
            performed: Vec::new(),
            clocks: BTreeMap::new(),
            admin_answers: Vec::new(),
        };
        for (index, epochs) in logs.iter().enumerate() {
            let id = voters[index];
            let log = log_of(epochs);
            let stored = ElectionState { epoch: log.last_epoch(), ..ElectionState::default() };
            let node = RaftNode::new(QuorumConfig::new(id, voters.clone()), log, Some(stored), id as u64, 0)
                .unwrap();
            harness.nodes.insert(id, node);
            harness.clocks.insert(id, 0);
            harness.collect(id);
        }
        harness
    }

    /// Nodes 1..=`nodes` of a `kraft.version` 1 quorum bootstrapped with
    /// voters 1..=`voters`; the others start as observers.
    fn dynamic(voters: NodeId, nodes: NodeId) -> Self {
        let mut harness = Self {
            nodes: BTreeMap::new(),
            inbox: VecDeque::new(),
            performed: Vec::new(),
            clocks: BTreeMap::new(),
            admin_answers: Vec::new(),
        };
        let bootstrap = VoterSet::new((1..=voters).map(voter_node));
        for id in 1..=nodes {
            let mut config = QuorumConfig::dynamic(id, directory(id), bootstrap.clone());
            config.endpoints = voter_node(id).endpoints;
            let node = RaftNode::new(config, MemoryLog::new(), None, id as u64, 0).unwrap();
            harness.nodes.insert(id, node);
            harness.clocks.insert(id, 0);
            harness.collect(id);
        }
        harness
    }

    fn node(&self, id: NodeId) -> &RaftNode<MemoryLog> {
        &self.nodes[&id]
    }

    /// The administrator sends `body` to `to`; returns the answer if one
    /// came at once (other messages stay queued).
    fn admin(&mut self, to: NodeId, body: Body) -> Option<Body> {
        let message = Message { correlation_id: 77, body };
        self.handle(to, Event::Receive { from: ADMIN, message });
        let answer = self.inbox.iter().position(|(_, receiver, _)| *receiver == ADMIN);
        answer.and_then(|index| self.inbox.remove(index)).map(|(_, _, message)| message.body)
    }

    /// Performs `id`'s actions; a flush completes at once, which may queue more.
    fn collect(&mut self, id: NodeId) {
        loop {
            let actions = self.nodes.get_mut(&id).unwrap().take_actions();
            if actions.is_empty() {
                return;
            }
            for action in actions {
                match &action {
                    Action::Send { to, message } => self.inbox.push_back((id, *to, message.clone())),
                    Action::FlushLog { flush_id } => {
                        let event = Event::Persisted { flush_id: *flush_id };
                        self.nodes.get_mut(&id).unwrap().handle(self.clocks[&id], event);
                    }
                    _ => {}
                }
                self.performed.push((id, action));
            }
        }
    }

    fn handle(&mut self, id: NodeId, event: Event) {
        self.nodes.get_mut(&id).unwrap().handle(self.clocks[&id], event);
        self.collect(id);
    }

    /// Delivers messages until none is left (bounded), dropping those to
    /// or from `cut`.
    fn deliver(&mut self, cut: &[NodeId]) {
        self.deliver_where(|from, to, _| !cut.contains(&to) && !cut.contains(&from));
    }

    /// Delivers messages until none is left (bounded), dropping those
    /// `keep` refuses.
    fn deliver_where(&mut self, keep: impl Fn(NodeId, NodeId, &Body) -> bool) {
        for _ in 0..10_000 {
            let Some((from, to, message)) = self.inbox.pop_front() else { return };
            if !self.nodes.contains_key(&to) {
                self.admin_answers.push(message);
            } else if keep(from, to, &message.body) {
                self.handle(to, Event::Receive { from, message });
            }
        }
        panic!("messages kept flowing");
    }

    /// Moves the clock and ticks `id`.
    fn tick(&mut self, id: NodeId, now: u64) {
        self.clocks.insert(id, now);
        self.handle(id, Event::Tick);
    }

    /// Node `id` times out and wins an election with everyone reachable.
    fn elect(&mut self, id: NodeId) {
        self.tick(id, self.clocks[&id] + ELECTION_TIMEOUT_MAX_MS);
        self.deliver(&[]);
        assert_eq!(self.node(id).role(), RoleName::Leader);
    }

    /// A round of replication: every clock moves past the fetch max wait,
    /// so parked fetches are answered and followers fetch again.
    fn fetch_round(&mut self) {
        self.fetch_round_without(&[]);
    }

    /// A round of replication among all but `cut`, which hear nothing.
    fn fetch_round_without(&mut self, cut: &[NodeId]) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().filter(|id| !cut.contains(id)).collect();
        for id in ids {
            self.tick(id, self.clocks[&id] + FETCH_MAX_WAIT_MS);
        }
        self.deliver(cut);
    }

    /// Fetch rounds (bounded) until `id`'s high watermark reaches `offset`.
    fn replicate_until(&mut self, id: NodeId, offset: u64, cut: &[NodeId]) {
        for _ in 0..20 {
            if self.node(id).high_watermark() >= Some(offset) {
                return;
            }
            self.fetch_round_without(cut);
        }
        panic!("node {id}'s high watermark never reached {offset}");
    }

    /// Node `id` snapshots at `snapshot_id` and drops its log below it.
    fn snapshot_and_delete(&mut self, id: NodeId, snapshot_id: OffsetAndEpoch) {
        let now = self.clocks[&id];
        let state = state_below(id, snapshot_id.offset);
        let node = self.nodes.get_mut(&id).unwrap();
        node.create_snapshot(now, snapshot_id, state).unwrap();
        assert!(node.delete_before_snapshot(now));
        self.collect(id);
        assert_eq!(self.node(id).log().start_offset(), snapshot_id.offset);
    }

    /// Sends `body` to `to` as `from` and returns the answer `to` sends back.
    fn request(&mut self, from: NodeId, to: NodeId, body: Body) -> Body {
        self.inbox.clear();
        let message = Message { correlation_id: 99, body };
        self.handle(to, Event::Receive { from, message });
        let answer = self.inbox.iter().find(|(sender, receiver, message)| {
            *sender == to && *receiver == from && message.correlation_id == 99
        });
        let body = answer.expect("an answer").2.body.clone();
        self.inbox.clear();
        body
    }

    /// The leader `id` appends one record.
    fn append(&mut self, id: NodeId, record: &'static str) {
        let now = self.clocks[&id];
        self.nodes.get_mut(&id).unwrap().append(now, vec![Bytes::from_static(record.as_bytes())]).unwrap();
        self.collect(id);
    }

    /// The messages `id` sent, in order.
    fn sent_by(&self, id: NodeId) -> impl Iterator<Item = &Body> {
        self.performed.iter().filter_map(move |(from, action)| match action {
            Action::Send { message, .. } if *from == id => Some(&message.body),
            _ => None,
        })
    }
}

#[test]
fn an_election_persists_the_vote_before_asking_and_commits_the_leader_change() {
    let mut harness = Harness::new(&[&[], &[], &[]]);
    harness.elect(1);
    let (leader, epoch) = (harness.node(1), harness.node(1).epoch());
    assert_eq!(epoch, 1);
    assert_eq!(
        leader.log().batches()[0].records,
        Records::LeaderChange { leader_id: 1, voters: vec![1, 2, 3] }
    );
    let persisted_vote = harness.performed.iter().position(|(id, action)| {
        *id == 1 && matches!(action, Action::PersistQuorumState(state) if state.voted_id == Some(1) && state.epoch == 1)
    });
    let first_vote_request = harness.performed.iter().position(|(id, action)| {
        *id == 1 && matches!(action, Action::Send { message, .. } if matches!(message.body, Body::VoteRequest { pre_vote: false, .. }))
    });
    assert!(persisted_vote.expect("vote persisted") < first_vote_request.expect("vote requested"));
    harness.fetch_round();
    assert_eq!(harness.node(1).high_watermark(), Some(1));
    assert_eq!(harness.node(2).log().batches(), harness.node(1).log().batches());
}

#[test]
fn a_granted_vote_is_durable_before_the_response() {
    let mut harness = Harness::new(&[&[], &[], &[]]);
    let request = Body::VoteRequest {
        replica_epoch: 1,
        candidate_id: 3,
        last_position: OffsetAndEpoch::new(0, 0),
        pre_vote: false,
        candidate_directory_id: None,
        voter_directory_id: None,
    };
    harness.handle(1, Event::Receive { from: 3, message: Message { correlation_id: 7, body: request } });
    let actions: Vec<&Action> = harness.performed.iter().filter(|(id, _)| *id == 1).map(|(_, a)| a).collect();
    let persist =
        actions.iter().position(|a| matches!(a, Action::PersistQuorumState(s) if s.voted_id == Some(3)));
    let reply = actions.iter().position(|a| {
        matches!(a, Action::Send { message, .. } if matches!(message.body, Body::VoteResponse { vote_granted: true, .. }))
    });
    assert!(persist.expect("vote persisted") < reply.expect("vote granted"));
    assert_eq!(
        harness.node(1).election_state(),
        ElectionState { epoch: 1, leader_id: None, voted_id: Some(3) }
    );
}

#[test]
fn a_voter_rejects_a_candidate_whose_log_is_behind() {
    let mut harness = Harness::new(&[&[1, 2], &[1], &[1, 2]]);
    // Node 2's log ends in epoch 1: the others refuse it, pre-vote and vote.
    harness.tick(2, ELECTION_TIMEOUT_MAX_MS);
    harness.deliver(&[]);
    assert_ne!(harness.node(2).role(), RoleName::Leader);
    assert_eq!(harness.node(1).epoch(), 2, "a rejected pre-vote changes no one's epoch");
    harness.elect(1);
    assert_eq!(harness.node(1).epoch(), 3);
}

#[test]
fn a_follower_truncates_exactly_the_divergent_suffix() {
    // Node 2 holds two uncommitted batches of epoch 2 that the others never saw.
    let mut harness = Harness::new(&[&[1, 1, 1, 3], &[1, 1, 1, 2, 2], &[1, 1, 1, 3]]);
    harness.elect(1);
    harness.fetch_round();
    harness.fetch_round();
    let truncations: Vec<u64> = harness
        .performed
        .iter()
        .filter_map(|(id, action)| match action {
            Action::TruncateLog { offset } if *id == 2 => Some(*offset),
            _ => None,
        })
        .collect();
    assert_eq!(truncations, vec![3], "only the epoch-2 suffix goes");
    assert_eq!(harness.node(2).log().batches(), harness.node(1).log().batches());
    assert_eq!(harness.node(2).high_watermark(), Some(5));
}

#[test]
fn the_high_watermark_waits_for_a_record_of_the_leaders_own_epoch() {
    let mut harness = Harness::new(&[&[1, 1], &[1, 1], &[1]]);
    harness.tick(1, ELECTION_TIMEOUT_MAX_MS);
    harness.deliver_where(|_, _, body| !matches!(body, Body::FetchRequest { .. }));
    assert_eq!(harness.node(1).role(), RoleName::Leader);
    // Node 2 reports it holds the old epoch's records, not the LeaderChange.
    let fetch = |offset, epoch| Body::FetchRequest {
        replica_id: 2,
        current_leader_epoch: 2,
        fetch_offset: offset,
        last_fetched_epoch: epoch,
        max_wait_ms: 0,
        replica_directory_id: None,
    };
    harness.inbox.clear();
    harness.handle(1, Event::Receive { from: 2, message: Message { correlation_id: 1, body: fetch(2, 1) } });
    assert_eq!(harness.node(1).high_watermark(), None, "old-epoch records alone do not commit");
    harness.handle(1, Event::Receive { from: 2, message: Message { correlation_id: 2, body: fetch(3, 2) } });
    assert_eq!(harness.node(1).high_watermark(), Some(3));
}

#[test]
fn a_leader_that_a_majority_stops_fetching_from_resigns() {
    let mut harness = Harness::new(&[&[], &[], &[]]);
    harness.elect(1);
    harness.fetch_round();
    let started = harness.clocks[&1];
    // 1.5 × controller.quorum.fetch.timeout.ms without a fetch.
    harness.tick(1, started + 2_999);
    assert_eq!(harness.node(1).role(), RoleName::Leader);
    harness.tick(1, started + 3_000);
    assert_eq!(harness.node(1).role(), RoleName::Resigned);
    let end_epoch_sent = harness.inbox.iter().any(|(from, _, message)| {
        *from == 1 && matches!(message.body, Body::EndQuorumEpochRequest { leader_epoch: 1, .. })
    });
    assert!(end_epoch_sent);
}

#[test]
fn a_follower_that_hears_from_its_leader_rejects_pre_votes() {
    let mut harness = Harness::new(&[&[], &[], &[]]);
    harness.elect(1);
    harness.fetch_round();
    // Node 3 is cut off from the leader and times out; node 2 still fetches.
    harness.tick(3, harness.clocks[&3] + 2_000);
    assert_eq!(harness.node(3).role(), RoleName::Prospective);
    harness.deliver(&[1]);
    assert_eq!(harness.node(3).epoch(), 1, "no election disturbs a healthy quorum");
    assert_eq!(harness.node(2).role(), RoleName::Follower);
}

#[test]
fn a_resigning_leader_hands_over_to_its_first_preferred_successor() {
    let mut harness = Harness::new(&[&[], &[], &[]]);
    harness.elect(1);
    harness.fetch_round();
    let now = harness.clocks[&1];
    harness.nodes.get_mut(&1).unwrap().resign(now);
    harness.collect(1);
    harness.deliver(&[]);
    // Both followers are equally caught up, so node 2 comes first; its
    // fetch timeout is cut to zero and it wins without any clock moving.
    let named_successors = harness.performed.iter().any(|(from, action)| {
        *from == 1
            && matches!(action, Action::Send { message, .. }
                if matches!(&message.body, Body::EndQuorumEpochRequest { preferred_successors, .. }
                    if preferred_successors == &[2, 3]))
    });
    assert!(named_successors);
    assert_eq!(harness.node(2).role(), RoleName::Leader);
    assert_eq!(harness.node(2).epoch(), 2);
    assert_eq!(harness.node(3).leader_id(), Some(2));
}

#[test]
fn a_restarted_leader_does_not_lead_its_epoch_again() {
    let voters = [1, 2, 3];
    let stored = ElectionState { epoch: 4, leader_id: Some(1), voted_id: Some(1) };
    let node = RaftNode::new(QuorumConfig::new(1, voters), log_of(&[4]), Some(stored), 1, 0).unwrap();
    assert_eq!(node.role(), RoleName::Resigned);
    assert_eq!(node.epoch(), 4);
}

#[test]
fn a_follower_refuses_to_truncate_committed_records() {
    let mut harness = Harness::new(&[&[], &[], &[]]);
    harness.elect(1);
    let now = harness.clocks[&1];
    harness.nodes.get_mut(&1).unwrap().append(now, vec![Bytes::from_static(b"committed")]).unwrap();
    harness.collect(1);
    harness.deliver(&[]);
    harness.fetch_round();
    let before = harness.node(2).log().batches().to_vec();
    assert_eq!(harness.node(2).high_watermark(), Some(2));
    let in_flight_fetch = harness
        .performed
        .iter()
        .rev()
        .find_map(|(id, action)| match action {
            Action::Send { message, .. } if *id == 2 && matches!(message.body, Body::FetchRequest { .. }) => {
                Some(message.correlation_id)
            }
            _ => None,
        })
        .unwrap();
    let broken = Body::FetchResponse {
        error: crate::ErrorCode::None,
        leader_epoch: 1,
        leader_id: Some(1),
        high_watermark: None,
        diverging_epoch: Some(OffsetAndEpoch::new(0, 0)),
        snapshot_id: None,
        batches: Vec::new(),
    };
    let message = Message { correlation_id: in_flight_fetch, body: broken };
    harness.handle(2, Event::Receive { from: 1, message });
    assert_eq!(harness.node(2).log().batches(), &before[..]);
    assert_eq!(harness.node(2).refused_truncations(), 1);
}

#[test]
fn a_configuration_without_voters_is_refused() {
    let error = RaftNode::new(QuorumConfig::new(1, []), MemoryLog::new(), None, 1, 0).unwrap_err();
    assert_eq!(error.to_string(), "controller.quorum.voters must name at least one voter");
}

#[test]
fn a_lone_voter_leader_owes_no_check_quorum_tick() {
    // With one voter there is no majority to lose (Kafka's
    // `LeaderState.timeUntilCheckQuorumExpires`), so its timer must not sit
    // in the past and make the driver tick in a loop.
    let mut harness = Harness::new(&[&[]]);
    harness.elect(1);
    let later = harness.clocks[&1] + 10_000;
    harness.tick(1, later);
    assert_eq!(harness.node(1).role(), RoleName::Leader);
    assert!(harness.node(1).next_deadline() > later, "a deadline already past is owed");
}

#[test]
fn election_retries_start_over_after_a_round_that_ends_unattached() {
    // Kafka's `QuorumState`: a new election continues the retry count only
    // when it follows a lost election; otherwise it starts at one, so the
    // backoff does not keep growing across unrelated elections.
    let mut harness = Harness::new(&[&[], &[], &[]]);
    let pre_votes_only =
        |_: NodeId, _: NodeId, body: &Body| !matches!(body, Body::VoteRequest { pre_vote: false, .. });
    // Node 1 wins its pre-votes but no vote arrives: its election stalls,
    // backs off, and it runs again, continuing the count.
    harness.tick(1, 2_000);
    harness.deliver_where(pre_votes_only);
    assert_eq!((harness.node(1).role(), harness.node(1).epoch()), (RoleName::Candidate, 1));
    harness.tick(1, 4_000);
    harness.tick(1, 5_100);
    harness.deliver_where(pre_votes_only);
    assert_eq!((harness.node(1).role(), harness.node(1).epoch()), (RoleName::Candidate, 2));
    assert_eq!(harness.node(1).election_retries, 2);
    // Cut off, it backs off again, loses its pre-vote round and waits unattached.
    harness.tick(1, 7_100);
    harness.tick(1, 7_500);
    harness.deliver(&[1]);
    harness.tick(1, 9_500);
    assert_eq!(harness.node(1).role(), RoleName::Unattached);
    // The next election is a first try again.
    harness.tick(1, 11_500);
    harness.deliver_where(pre_votes_only);
    assert_eq!((harness.node(1).role(), harness.node(1).epoch()), (RoleName::Candidate, 3));
    assert_eq!(harness.node(1).election_retries, 1);
}

#[test]
fn a_newer_epoch_keeps_the_election_timer_running() {
    // Kafka's `QuorumState.transitionToUnattached`: a voter already counting
    // down to an election (unattached, candidate, resigned) keeps its
    // deadline when it learns of a newer epoch; only a vote it grants, or
    // leaving a leader, draws a new one.
    let mut harness = Harness::new(&[&[], &[], &[]]);
    let deadline = harness.node(3).next_deadline();
    harness.clocks.insert(3, 500);
    let pre_vote = Body::VoteRequest {
        replica_epoch: 4,
        candidate_id: 2,
        last_position: OffsetAndEpoch::new(0, 0),
        pre_vote: true,
        candidate_directory_id: None,
        voter_directory_id: None,
    };
    harness.handle(3, Event::Receive { from: 2, message: Message { correlation_id: 1, body: pre_vote } });
    assert_eq!((harness.node(3).role(), harness.node(3).epoch()), (RoleName::Unattached, 4));
    assert_eq!(harness.node(3).next_deadline(), deadline);
}

#[test]
fn a_prospective_that_grants_a_vote_restarts_its_election_timer() {
    // Kafka's `QuorumState.prospectiveAddVotedState`: the candidate it
    // voted for has at least its chance of winning, so it waits a new
    // randomised election timeout rather than run into that election.
    let stored = ElectionState { epoch: 1, ..ElectionState::default() };
    let mut node =
        RaftNode::new(QuorumConfig::new(3, [1, 2, 3]), MemoryLog::new(), Some(stored), 3, 0).unwrap();
    node.handle(ELECTION_TIMEOUT_MAX_MS, Event::Tick);
    let deadline_of = |node: &RaftNode<MemoryLog>| match node.role {
        crate::state::Role::Prospective { election_deadline_ms, .. } => election_deadline_ms,
        _ => panic!("not prospective: {:?}", node.role()),
    };
    let before = deadline_of(&node);
    let vote_at = before - 1;
    let vote = Body::VoteRequest {
        replica_epoch: 1,
        candidate_id: 2,
        last_position: OffsetAndEpoch::new(0, 0),
        pre_vote: false,
        candidate_directory_id: None,
        voter_directory_id: None,
    };
    node.handle(vote_at, Event::Receive { from: 2, message: Message { correlation_id: 7, body: vote } });
    assert_eq!(node.election_state().voted_id, Some(2));
    assert!(deadline_of(&node) >= vote_at + 1_000, "the election timer was not restarted");
}

#[test]
fn a_node_no_longer_a_voter_does_not_resume_its_election() {
    // Its quorum-state says it voted for itself, but the voters now
    // configured leave it out: it starts as an observer would.
    let stored = ElectionState { epoch: 2, leader_id: None, voted_id: Some(4) };
    let mut node =
        RaftNode::new(QuorumConfig::new(4, [1, 2, 3]), MemoryLog::new(), Some(stored), 4, 0).unwrap();
    assert_eq!(node.role(), RoleName::Unattached);
    let asks_for_votes = node.take_actions().into_iter().any(|action| {
        matches!(action, Action::Send { message: Message { body: Body::VoteRequest { .. }, .. }, .. })
    });
    assert!(!asks_for_votes);
}

fn fetch_from(replica_id: NodeId, epoch: i32, fetch_offset: u64, last_fetched_epoch: i32) -> Body {
    Body::FetchRequest {
        replica_id,
        current_leader_epoch: epoch,
        fetch_offset,
        last_fetched_epoch,
        max_wait_ms: 0,
        replica_directory_id: None,
    }
}

#[test]
fn a_lagging_follower_catches_up_through_the_leaders_snapshot() {
    // Node 3 hears nothing while the others commit and the leader
    // snapshots and drops the front of its log.
    let mut harness = Harness::new(&[&[1, 1, 1], &[1, 1, 1], &[]]);
    harness.nodes.get_mut(&3).unwrap().config.fetch_snapshot_max_bytes = 4;
    harness.tick(1, ELECTION_TIMEOUT_MAX_MS);
    harness.deliver(&[3]);
    assert_eq!((harness.node(1).role(), harness.node(1).epoch()), (RoleName::Leader, 2));
    harness.replicate_until(1, 4, &[3]);
    let snapshot_id = OffsetAndEpoch::new(4, 2);
    harness.snapshot_and_delete(1, snapshot_id);
    let now = harness.clocks[&1];
    harness.nodes.get_mut(&1).unwrap().append(now, vec![Bytes::from_static(b"after the snapshot")]).unwrap();
    harness.collect(1);
    harness.replicate_until(1, 5, &[3]);
    // Node 3 rejoins: it learns the leader, fetches from offset 0, is sent
    // the snapshot's id, pulls it in chunks, installs it and fetches on.
    for _ in 0..6 {
        harness.fetch_round();
    }
    let (leader, follower) = (harness.node(1), harness.node(3));
    assert_eq!(follower.log().snapshot(), leader.log().snapshot());
    assert_eq!(follower.log().start_offset(), 4);
    assert_eq!(follower.log().batches(), leader.log().batches());
    assert_eq!(follower.high_watermark(), Some(5));
    let installs: Vec<&Action> = harness
        .performed
        .iter()
        .filter(|(id, action)| *id == 3 && matches!(action, Action::InstallSnapshot { .. }))
        .map(|(_, action)| action)
        .collect();
    assert!(matches!(installs[..], [Action::InstallSnapshot { snapshot_id: id, .. }] if *id == snapshot_id));
    let size = leader.log().snapshot().unwrap().content.len();
    let chunks = harness.sent_by(3).filter(|body| matches!(body, Body::FetchSnapshotRequest { .. })).count();
    assert_eq!(chunks, size.div_ceil(4), "one FetchSnapshot per 4-byte chunk");
    let resumed = harness
        .sent_by(3)
        .any(|body| matches!(body, Body::FetchRequest { fetch_offset: 4, last_fetched_epoch: 2, .. }));
    assert!(resumed, "the fetch after the install carries the snapshot's end offset and epoch");
}

#[test]
fn a_damaged_snapshot_from_the_leader_is_never_installed() {
    let mut harness = Harness::new(&[&[1, 1, 1], &[1, 1, 1], &[]]);
    harness.nodes.get_mut(&3).unwrap().config.fetch_snapshot_max_bytes = 64;
    harness.tick(1, ELECTION_TIMEOUT_MAX_MS);
    harness.deliver(&[3]);
    harness.replicate_until(1, 4, &[3]);
    let snapshot_id = OffsetAndEpoch::new(4, 2);
    harness.snapshot_and_delete(1, snapshot_id);
    let good = harness.node(1).log().snapshot().unwrap().content.clone();
    let mut damaged = good.to_vec();
    damaged[good.len() / 2] ^= 0x40;
    harness.nodes.get_mut(&1).unwrap().log.create_snapshot(snapshot_id, damaged.into());
    for _ in 0..6 {
        harness.fetch_round();
    }
    let follower = harness.node(3);
    assert!(follower.refused_snapshots() >= 1);
    assert_eq!(follower.log().snapshot(), None);
    assert!(!harness
        .performed
        .iter()
        .any(|(id, action)| *id == 3 && matches!(action, Action::InstallSnapshot { .. })));
    // Once the leader serves an intact file, the follower installs it.
    harness.nodes.get_mut(&1).unwrap().log.create_snapshot(snapshot_id, good.clone());
    for _ in 0..6 {
        harness.fetch_round();
    }
    assert_eq!(harness.node(3).log().snapshot().map(|s| s.content.clone()), Some(good));
}

#[test]
fn a_fetch_below_the_log_start_is_answered_with_the_snapshot_id() {
    let mut harness = Harness::new(&[&[1, 1, 1], &[1, 1, 1], &[1, 1, 1]]);
    harness.elect(1);
    harness.replicate_until(1, 4, &[]);
    let snapshot_id = OffsetAndEpoch::new(4, 2);
    harness.snapshot_and_delete(1, snapshot_id);
    // Below the start, and at the start with another epoch than the snapshot's.
    for (offset, epoch) in [(2, 1), (4, 1)] {
        match harness.request(2, 1, fetch_from(2, 2, offset, epoch)) {
            Body::FetchResponse { snapshot_id: Some(id), diverging_epoch: None, batches, .. } => {
                assert_eq!(id, snapshot_id);
                assert!(batches.is_empty());
            }
            other => panic!("fetch at ({offset}, {epoch}): {other:?}"),
        }
    }
    // At the start with the snapshot's epoch the log validates the fetch.
    let at_start = harness.request(2, 1, fetch_from(2, 2, 4, 2));
    assert!(matches!(at_start, Body::FetchResponse { snapshot_id: None, diverging_epoch: None, .. }));
    // FetchSnapshot: Kafka's errors for an unknown snapshot or position.
    let fetch_snapshot = |snapshot_id, position| Body::FetchSnapshotRequest {
        replica_id: 2,
        current_leader_epoch: 2,
        snapshot_id,
        position,
        max_bytes: 1 << 20,
        replica_directory_id: None,
    };
    let size = harness.node(1).log().snapshot().unwrap().content.len() as u64;
    let error_of = |body: Body| match body {
        Body::FetchSnapshotResponse { error, .. } => error,
        other => panic!("{other:?}"),
    };
    let unknown = harness.request(2, 1, fetch_snapshot(OffsetAndEpoch::new(3, 1), 0));
    assert_eq!(error_of(unknown), crate::ErrorCode::SnapshotNotFound);
    let past_end = harness.request(2, 1, fetch_snapshot(snapshot_id, size));
    assert_eq!(error_of(past_end), crate::ErrorCode::PositionOutOfRange);
    match harness.request(2, 1, fetch_snapshot(snapshot_id, 1)) {
        Body::FetchSnapshotResponse {
            error: crate::ErrorCode::None,
            size: total,
            position: 1,
            bytes,
            ..
        } => {
            assert_eq!((total, bytes.len() as u64), (size, size - 1));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_log_diverging_at_the_snapshot_boundary_truncates_to_the_snapshot() {
    // Node 3 holds two uncommitted epoch-2 batches past offset 4; the
    // leader's log now starts at its snapshot (4, 2), so the epoch-2 end
    // it can name is the snapshot's (Kafka's `endOffsetForEpoch`).
    let mut harness = Harness::new(&[&[1, 1, 1, 2], &[1, 1, 1, 2], &[1, 1, 1, 2, 2, 2]]);
    harness.tick(1, ELECTION_TIMEOUT_MAX_MS);
    harness.deliver(&[3]);
    assert_eq!((harness.node(1).role(), harness.node(1).epoch()), (RoleName::Leader, 3));
    harness.replicate_until(1, 5, &[3]);
    harness.snapshot_and_delete(1, OffsetAndEpoch::new(4, 2));
    match harness.request(3, 1, fetch_from(3, 3, 6, 2)) {
        Body::FetchResponse { diverging_epoch, snapshot_id: None, .. } => {
            assert_eq!(diverging_epoch, Some(OffsetAndEpoch::new(4, 2)));
        }
        other => panic!("{other:?}"),
    }
    for _ in 0..6 {
        harness.fetch_round();
    }
    let truncations: Vec<u64> = harness
        .performed
        .iter()
        .filter_map(|(id, action)| match action {
            Action::TruncateLog { offset } if *id == 3 => Some(*offset),
            _ => None,
        })
        .collect();
    assert_eq!(truncations, vec![4], "only what lies past the snapshot goes");
    assert_eq!(harness.node(3).log().batches()[4..], harness.node(1).log().batches()[..]);
    assert_eq!(harness.node(3).high_watermark(), Some(5));
}

#[test]
fn a_log_emptied_by_a_snapshot_asks_for_votes_from_the_snapshot() {
    let mut log = MemoryLog::new();
    log.install_snapshot(OffsetAndEpoch::new(10, 3), Bytes::from_static(b"state"));
    let stored = ElectionState { epoch: 3, ..ElectionState::default() };
    let mut node = RaftNode::new(QuorumConfig::new(1, [1, 2, 3]), log, Some(stored), 1, 0).unwrap();
    node.handle(ELECTION_TIMEOUT_MAX_MS, Event::Tick);
    let asked = node.take_actions().into_iter().find_map(|action| match action {
        Action::Send { message: Message { body: Body::VoteRequest { last_position, .. }, .. }, .. } => {
            Some(last_position)
        }
        _ => None,
    });
    assert_eq!(asked, Some(OffsetAndEpoch::new(10, 3)));
}

#[test]
fn snapshots_are_taken_only_at_committed_batch_ends() {
    use crate::SnapshotError;
    let mut harness = Harness::new(&[&[1, 1, 3], &[1, 1, 3], &[1, 1, 3]]);
    harness.elect(1);
    harness.replicate_until(1, 4, &[]);
    let now = harness.clocks[&1];
    let leader = harness.nodes.get_mut(&1).unwrap();
    leader.append(now, vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")]).unwrap();
    let mut create = |offset, epoch| {
        leader.create_snapshot(now, OffsetAndEpoch::new(offset, epoch), state_below(1, offset))
    };
    assert_eq!(create(6, 4), Err(SnapshotError::AboveHighWatermark));
    assert_eq!(create(3, 1), Err(SnapshotError::InvalidId), "offset 3 ends an epoch-3 batch");
    assert_eq!(create(2, 3), Err(SnapshotError::InvalidId), "offset 2 ends an epoch-1 batch");
    assert_eq!(create(0, 0), Err(SnapshotError::NotNewer));
    assert_eq!(create(2, 1), Ok(()));
    assert_eq!(create(2, 1), Err(SnapshotError::NotNewer));
    assert!(leader.delete_before_snapshot(now));
    assert!(!leader.delete_before_snapshot(now), "the start is at the snapshot already");
    assert_eq!(leader.log().start_offset(), 2);
}

#[test]
fn a_half_fetched_snapshot_is_dropped_when_the_follower_moves_on() {
    let mut harness = Harness::new(&[&[1, 1, 1], &[1, 1, 1], &[]]);
    harness.nodes.get_mut(&3).unwrap().config.fetch_snapshot_max_bytes = 4;
    harness.tick(1, ELECTION_TIMEOUT_MAX_MS);
    harness.deliver(&[3]);
    harness.replicate_until(1, 4, &[3]);
    harness.snapshot_and_delete(1, OffsetAndEpoch::new(4, 2));
    // Node 3 follows, is sent the snapshot id and gets its first chunk only.
    harness.inbox.clear();
    let begin = Body::BeginQuorumEpochRequest { leader_epoch: 2, leader_id: 1, voter_directory_id: None };
    harness.handle(3, Event::Receive { from: 1, message: Message { correlation_id: 1, body: begin } });
    let chunks = std::cell::Cell::new(0);
    harness.deliver_where(|_, _, body| match body {
        Body::FetchSnapshotResponse { .. } => {
            chunks.set(chunks.get() + 1);
            chunks.get() == 1
        }
        _ => true,
    });
    assert!(harness.node(3).is_fetching_snapshot());
    // A new epoch: the partial snapshot goes, nothing was installed.
    let newer = Body::BeginQuorumEpochRequest { leader_epoch: 3, leader_id: 2, voter_directory_id: None };
    harness.request(2, 3, newer);
    assert!(!harness.node(3).is_fetching_snapshot());
    assert_eq!((harness.node(3).log().start_offset(), harness.node(3).log().snapshot()), (0, None));
    assert!(!harness.performed.iter().any(|(_, action)| matches!(action, Action::InstallSnapshot { .. })));
}

// ---- KIP-853: dynamic voters -------------------------------------------

fn directory(id: NodeId) -> Uuid {
    Uuid::from_u128(0xd1 << 32 | id as u128)
}

fn voter_node(id: NodeId) -> VoterNode {
    let endpoints =
        vec![Endpoint { listener: "CONTROLLER".into(), host: "127.0.0.1".into(), port: 9000 + id as u16 }];
    VoterNode {
        key: ReplicaKey::new(id, Some(directory(id))),
        endpoints,
        kraft_versions: SUPPORTED_KRAFT_VERSIONS,
    }
}

fn add_voter(id: NodeId) -> Body {
    let node = voter_node(id);
    Body::AddRaftVoterRequest {
        timeout_ms: 30_000,
        voter_id: id,
        voter_directory_id: node.key.directory_id,
        listeners: node.endpoints,
    }
}

fn remove_voter(id: NodeId) -> Body {
    Body::RemoveRaftVoterRequest { voter_id: id, voter_directory_id: Some(directory(id)) }
}

fn error_of(answer: Option<Body>) -> (ErrorCode, Option<String>) {
    match answer {
        Some(Body::AddRaftVoterResponse { error, error_message })
        | Some(Body::RemoveRaftVoterResponse { error, error_message }) => (error, error_message),
        Some(Body::UpdateRaftVoterResponse { error, .. }) => (error, None),
        other => panic!("not a voter change answer: {other:?}"),
    }
}

/// Node 1 leads a committed epoch of a bootstrapped quorum, and every
/// other node (observers too) follows it, caught up.
fn dynamic_quorum(voters: NodeId, nodes: NodeId) -> Harness {
    let mut harness = Harness::dynamic(voters, nodes);
    harness.elect(1);
    let end = harness.node(1).log().end_offset();
    harness.replicate_until(1, end, &[]);
    for id in voters + 1..=nodes {
        // An observer finds the leader by fetching from any voter.
        harness.tick(id, harness.clocks[&id] + FETCH_MAX_WAIT_MS);
        harness.deliver(&[]);
    }
    harness.fetch_round();
    harness.fetch_round();
    harness
}

#[test]
fn a_bootstrapped_leader_writes_the_voter_set_after_its_leader_change() {
    let harness = dynamic_quorum(3, 3);
    let records: Vec<&Records> = harness.node(1).log().batches().iter().map(|batch| &batch.records).collect();
    let bootstrap = VoterSet::new((1..=3).map(voter_node));
    assert_eq!(
        records,
        [
            &Records::LeaderChange { leader_id: 1, voters: vec![1, 2, 3] },
            &Records::KRaftVersion { kraft_version: 1 },
            &Records::Voters(bootstrap.clone()),
        ]
    );
    assert_eq!(harness.node(1).high_watermark(), Some(3));
    assert_eq!((harness.node(2).voter_set(), harness.node(2).kraft_version()), (&bootstrap, 1));
}

#[test]
fn an_added_voter_is_answered_once_its_voters_record_commits() {
    let mut harness = dynamic_quorum(3, 4);
    assert_eq!(harness.admin(1, add_voter(4)), None, "answered before the change committed");
    assert!(harness.node(1).voter_set().contains_id(4), "in force at once on the leader");
    let offset = harness.node(1).log().end_offset();
    for _ in 0..5 {
        harness.fetch_round();
        if !harness.admin_answers.is_empty() {
            break;
        }
    }
    assert!(harness.node(1).high_watermark() >= Some(offset));
    let answer = harness.admin_answers.pop().map(|message| message.body);
    assert_eq!(error_of(answer).0, ErrorCode::None);
    for id in 1..=4 {
        assert_eq!(harness.node(id).voter_set().ids().collect::<Vec<_>>(), [1, 2, 3, 4], "node {id}");
    }
    // The new voter counts: with two voters cut off, nothing commits.
    harness.append(1, "after the change");
    let before = harness.node(1).high_watermark();
    harness.fetch_round_without(&[3, 4]);
    assert_eq!(harness.node(1).high_watermark(), before);
    harness.replicate_until(1, harness.node(1).log().end_offset(), &[4]);
}

#[test]
fn voter_changes_go_one_at_a_time() {
    let mut harness = dynamic_quorum(3, 4);
    // Voters 2 and 3 hear nothing: the removal of 3 cannot commit.
    assert_eq!(harness.admin(1, remove_voter(3)), None);
    harness.deliver(&[2, 3]);
    let (error, message) = error_of(harness.admin(1, add_voter(4)));
    assert_eq!(error, ErrorCode::RequestTimedOut);
    assert_eq!(message.as_deref(), Some("waiting for the previous voter change to commit"));
    // controller.quorum.request.timeout.ms later the first is given up on...
    harness.admin_answers.clear();
    harness.tick(1, harness.clocks[&1] + 2_000);
    harness.deliver(&[2, 3]);
    assert_eq!(error_of(harness.admin_answers.pop().map(|m| m.body)).0, ErrorCode::RequestTimedOut);
    // ...but its record still holds the voter set until it commits.
    let (error, message) = error_of(harness.admin(1, add_voter(4)));
    assert_eq!(error, ErrorCode::RequestTimedOut);
    assert_eq!(message.as_deref(), Some("waiting for the latest voter change to commit"));
}

#[test]
fn voter_changes_refuse_what_kafka_refuses() {
    let mut harness = dynamic_quorum(3, 5);
    let mut no_directory = add_voter(4);
    if let Body::AddRaftVoterRequest { voter_directory_id, .. } = &mut no_directory {
        *voter_directory_id = None;
    }
    let mut no_listener = add_voter(4);
    if let Body::AddRaftVoterRequest { listeners, .. } = &mut no_listener {
        listeners[0].listener = "PLAINTEXT".into();
    }
    let mut wrong_directory = remove_voter(2);
    if let Body::RemoveRaftVoterRequest { voter_directory_id, .. } = &mut wrong_directory {
        *voter_directory_id = Some(directory(9));
    }
    let cases = [
        (2, add_voter(4), ErrorCode::NotLeaderOrFollower),
        (1, no_directory, ErrorCode::InvalidRequest),
        (1, no_listener, ErrorCode::InvalidRequest),
        (1, add_voter(2), ErrorCode::DuplicateVoter),
        (1, wrong_directory, ErrorCode::VoterNotFound),
        (1, remove_voter(5), ErrorCode::VoterNotFound),
    ];
    for (to, body, expected) in cases {
        let described = format!("{body:?}");
        assert_eq!(error_of(harness.admin(to, body)).0, expected, "{described}");
    }
    // An observer the leader has not seen fetch is not caught up.
    let mut harness = Harness::dynamic(3, 4);
    harness.elect(1);
    harness.replicate_until(1, harness.node(1).log().end_offset(), &[4]);
    let (error, message) = error_of(harness.admin(1, add_voter(4)));
    assert_eq!(
        (error, message.as_deref()),
        (ErrorCode::RequestTimedOut, Some("the voter to add is not a caught-up observer"))
    );
}

#[test]
fn static_voters_cannot_change() {
    let mut harness = Harness::new(&[&[], &[], &[]]);
    harness.elect(1);
    harness.fetch_round();
    assert_eq!(error_of(harness.admin(1, remove_voter(3))).0, ErrorCode::UnsupportedVersion);
}

#[test]
fn a_leader_that_removes_itself_resigns_once_the_change_commits() {
    let mut harness = dynamic_quorum(3, 3);
    assert_eq!(harness.admin(1, remove_voter(1)), None);
    assert_eq!(harness.node(1).role(), RoleName::Leader, "it leads until the change commits");
    harness.fetch_round();
    assert_eq!(error_of(harness.admin_answers.pop().map(|m| m.body)).0, ErrorCode::None);
    assert_eq!(harness.node(1).role(), RoleName::Resigned);
    // After its election timeout it is an observer in a newer epoch (Kafka's
    // `pollResigned`), and the remaining voters elect one of themselves.
    harness.tick(1, harness.clocks[&1] + ELECTION_TIMEOUT_MAX_MS);
    assert_eq!((harness.node(1).role(), harness.node(1).epoch()), (RoleName::Unattached, 2));
    harness.deliver(&[]);
    harness.elect(2);
    assert_eq!(harness.node(2).voter_set().ids().collect::<Vec<_>>(), [2, 3]);
}

#[test]
fn a_voter_whose_removal_has_not_committed_may_still_be_elected() {
    // Voters 1 and 2; leader 1 appends its own removal and resigns before
    // node 2 has it. Node 2 needs node 1's vote, which its longer log
    // refuses; node 1 holds the only copy of the removal and may still
    // run (Raft's dissertation, 4.2.2), or the quorum would be stuck.
    let mut harness = dynamic_quorum(2, 2);
    assert_eq!(harness.admin(1, remove_voter(1)), None);
    harness.inbox.clear();
    harness.nodes.get_mut(&1).unwrap().resign(harness.clocks[&1]);
    harness.collect(1);
    harness.deliver(&[]);
    assert!(!harness.node(1).voter_set().contains_id(1));
    assert!(harness.node(2).voter_set().contains_id(1));
    assert_ne!(harness.node(2).role(), RoleName::Leader);
    harness.performed.clear();
    harness.tick(1, harness.clocks[&1] + ELECTION_TIMEOUT_MAX_MS);
    harness.deliver(&[]);
    // It led epoch 2 for a voter set without itself, committed its
    // removal there, resigned, and node 2 took over.
    let led = ElectionState { epoch: 2, leader_id: Some(1), voted_id: Some(1) };
    assert!(harness.performed.contains(&(1, Action::PersistQuorumState(led))));
    assert_eq!((harness.node(2).role(), harness.node(2).epoch()), (RoleName::Leader, 3));
    assert_eq!(harness.node(2).voter_set().ids().collect::<Vec<_>>(), [2]);
}

#[test]
fn update_voter_is_answered_as_soon_as_it_is_appended() {
    let mut harness = dynamic_quorum(3, 3);
    let mut moved = voter_node(2);
    moved.endpoints[0].port = 19_092;
    let body = Body::UpdateRaftVoterRequest {
        current_leader_epoch: 1,
        voter_id: 2,
        voter_directory_id: moved.key.directory_id,
        listeners: moved.endpoints.clone(),
        kraft_versions: SUPPORTED_KRAFT_VERSIONS,
    };
    let answer = harness.admin(1, body.clone());
    let leader_endpoint = Some(voter_node(1).endpoints[0].clone());
    assert_eq!(
        answer,
        Some(Body::UpdateRaftVoterResponse {
            error: ErrorCode::None,
            leader_epoch: 1,
            leader_id: Some(1),
            leader_endpoint
        })
    );
    assert_eq!(harness.node(1).voter_set().get(2), Some(&moved));
    // Another update waits for that one to commit.
    assert_eq!(error_of(harness.admin(1, body)).0, ErrorCode::RequestTimedOut);
}

#[test]
fn a_follower_voter_back_on_other_listeners_tells_the_leader_with_update_raft_voter() {
    let mut harness = dynamic_quorum(3, 3);
    let moved = VoterNode {
        endpoints: vec![Endpoint { listener: "CONTROLLER".into(), host: "127.0.0.9".into(), port: 9999 }],
        ..voter_node(2)
    };
    // Node 2 restarts on a new listener: its entry in the voter set is stale.
    harness.nodes.get_mut(&2).unwrap().config.endpoints = moved.endpoints.clone();
    let updates_sent = |harness: &Harness| {
        harness.sent_by(2).filter(|body| matches!(body, Body::UpdateRaftVoterRequest { .. })).count()
    };
    // A few fetch rounds, within the update period, change nothing.
    harness.fetch_round();
    assert_eq!(updates_sent(&harness), 0);
    // Past the update period (three fetch timeouts of fetching), node 2 sends
    // UpdateRaftVoter in place of a Fetch, and the leader takes it in.
    for _ in 0..(3 * FETCH_TIMEOUT_MS / FETCH_MAX_WAIT_MS + 2) {
        harness.fetch_round();
    }
    assert_eq!(updates_sent(&harness), 1);
    let sent = harness.sent_by(2).find(|body| matches!(body, Body::UpdateRaftVoterRequest { .. })).cloned();
    assert_eq!(
        sent,
        Some(Body::UpdateRaftVoterRequest {
            current_leader_epoch: harness.node(1).epoch(),
            voter_id: 2,
            voter_directory_id: Some(directory(2)),
            listeners: moved.endpoints.clone(),
            kraft_versions: SUPPORTED_KRAFT_VERSIONS,
        })
    );
    for id in 1..=3 {
        assert_eq!(harness.node(id).voter_set().get(2), Some(&moved), "node {id}");
    }
    // Once the voter set is right, the next periods send nothing more.
    for _ in 0..(6 * FETCH_TIMEOUT_MS / FETCH_MAX_WAIT_MS) {
        harness.fetch_round();
    }
    assert_eq!(updates_sent(&harness), 1);
    assert_eq!(harness.node(2).role(), RoleName::Follower);
}

#[test]
fn a_voter_whose_entry_is_right_never_sends_update_raft_voter() {
    let mut harness = dynamic_quorum(3, 3);
    for _ in 0..(6 * FETCH_TIMEOUT_MS / FETCH_MAX_WAIT_MS) {
        harness.fetch_round();
    }
    let updates = (2..=3)
        .flat_map(|id| harness.sent_by(id))
        .filter(|body| matches!(body, Body::UpdateRaftVoterRequest { .. }))
        .count();
    assert_eq!(updates, 0);
}

#[test]
fn a_snapshot_carries_the_voter_set_past_the_log_start() {
    let mut harness = dynamic_quorum(3, 4);
    harness.admin(1, add_voter(4));
    harness.append(1, "state");
    let end = harness.node(1).log().end_offset();
    harness.replicate_until(1, end, &[]);
    let snapshot_id = harness.node(1).log().end_position();
    harness.snapshot_and_delete(1, snapshot_id);
    let snapshot = harness.node(1).log().snapshot().unwrap().content.clone();
    let checkpoint = crate::checkpoint::Checkpoint::decode(&snapshot).unwrap();
    assert_eq!(checkpoint.records, state_below(1, snapshot_id.offset).records);
    assert_eq!(
        (checkpoint.kraft_version, checkpoint.voters.as_ref()),
        (1, Some(harness.node(1).voter_set()))
    );
    // Restarted from the snapshot alone, node 1 knows voter 4.
    let mut config = QuorumConfig::dynamic(1, directory(1), VoterSet::new((1..=3).map(voter_node)));
    config.endpoints = voter_node(1).endpoints;
    let restarted = RaftNode::new(config, harness.node(1).log().clone(), None, 1, 0).unwrap();
    assert!(restarted.log().batches().is_empty());
    assert_eq!(restarted.voter_set().ids().collect::<Vec<_>>(), [1, 2, 3, 4]);
}

#[test]
fn a_vote_meant_for_another_directory_is_refused() {
    let mut harness = Harness::dynamic(3, 3);
    let vote = Body::VoteRequest {
        replica_epoch: 1,
        candidate_id: 2,
        last_position: OffsetAndEpoch::new(0, 0),
        pre_vote: false,
        candidate_directory_id: Some(directory(2)),
        voter_directory_id: Some(directory(9)),
    };
    let answer = harness.request(2, 1, vote);
    assert!(matches!(
        answer,
        Body::VoteResponse { error: ErrorCode::InvalidVoterKey, vote_granted: false, .. }
    ));
    assert_eq!(harness.node(1).election_state().voted_id, None);
}

#[test]
fn a_preferred_successor_is_named_by_its_directory_too() {
    let end_epoch = |directory_id| Body::EndQuorumEpochRequest {
        leader_epoch: 1,
        leader_id: 1,
        preferred_successors: vec![2],
        preferred_candidate_directory_ids: vec![Some(directory_id)],
    };
    for (directory_id, stands_at_once) in [(directory(2), true), (directory(9), false)] {
        let mut harness = dynamic_quorum(3, 3);
        let now = harness.clocks[&2];
        let answer = harness.request(1, 2, end_epoch(directory_id));
        assert!(matches!(answer, Body::EndQuorumEpochResponse { error: ErrorCode::None, .. }));
        // The first preferred successor stands at once; a node the leader
        // did not mean waits the longest backoff.
        let stood = harness.node(2).role() == RoleName::Prospective || harness.node(2).epoch() > 1;
        assert_eq!(stood, stands_at_once, "{directory_id}");
        if !stands_at_once {
            assert_eq!(harness.node(2).next_deadline(), now + 1_000);
        }
    }
}
