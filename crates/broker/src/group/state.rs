//! One consumer group under the classic protocol: Kafka's state machine.
//!
//! ```text
//! Empty ──join──▶ PreparingRebalance ──all joined──▶ CompletingRebalance ──leader syncs──▶ Stable
//!   ▲                  ▲    │ last member leaves           │ member change                 │
//!   └──────────────────┼────┘                              ▼                               │
//!                      └────────────── member joins, leaves or expires ◀───────────────────┘
//! ```
//!
//! Pure logic: no I/O and no clocks of its own. Requests that must wait (a
//! join until the rebalance completes, a follower's sync until the leader's)
//! park a oneshot sender on their member; the state machine answers them.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use tokio::sync::oneshot;

use super::codec::{GroupValue, MemberValue, OffsetValue};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name Kafka reports in ListGroups and DescribeGroups.
    pub fn name(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::PreparingRebalance => "PreparingRebalance",
            Self::CompletingRebalance => "CompletingRebalance",
            Self::Stable => "Stable",
            Self::Dead => "Dead",
        }
    }
}

/// What a completed join tells one member.
#[derive(Debug, Clone)]
pub struct JoinResult {
    pub error: Option<ResponseError>,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Every member's metadata, for the leader only.
    pub members: Vec<(String, Option<String>, Bytes)>,
    /// A rejoining static leader learns the members but must not reassign.
    pub skip_assignment: bool,
}

impl JoinResult {
    pub fn error(error: ResponseError, member_id: &str) -> Self {
        Self {
            error: Some(error),
            generation: -1,
            protocol_type: None,
            protocol: None,
            leader: String::new(),
            member_id: member_id.to_owned(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

/// What a completed sync tells one member.
#[derive(Debug, Clone)]
pub struct SyncResult {
    pub error: Option<ResponseError>,
    pub assignment: Bytes,
}

#[derive(Debug)]
pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    pub join_waiter: Option<oneshot::Sender<JoinResult>>,
    pub sync_waiter: Option<oneshot::Sender<SyncResult>>,
    pub heartbeat_deadline: Instant,
}

impl Member {
    pub fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols.iter().find(|(name, _)| name == protocol).map(|(_, m)| m.clone()).unwrap_or_default()
    }

    fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(name, _)| name == protocol)
    }
}

/// The group's knobs, from broker config.
#[derive(Debug, Clone, Copy)]
pub struct GroupLimits {
    pub initial_rebalance_delay: Duration,
    pub max_size: usize,
}

#[derive(Debug)]
pub struct Group {
    pub id: String,
    pub state: GroupState,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub members: Vec<Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, not yet joined.
    pub pending: HashSet<String>,
    pub static_members: HashMap<String, String>,
    pub offsets: HashMap<(String, i32), OffsetValue>,
    /// Where in `__consumer_offsets` the batch that wrote each applied
    /// offset starts: commits are acknowledged out of order, and an older
    /// batch must not overwrite a newer one (Kafka's `olderThan`).
    pub offset_batches: HashMap<(String, i32), i64>,
    /// Offsets committed inside transactions not yet ended, by producer id:
    /// they become offsets when the commit marker is written.
    pub pending_txn_offsets: HashMap<i64, HashMap<(String, i32), OffsetValue>>,
    /// When the current rebalance phase gives up on silent members.
    pub phase_deadline: Option<Instant>,
    /// While set, a new group waits for more members before completing its
    /// first join (`group.initial.rebalance.delay.ms`).
    pub initial_delay_until: Option<Instant>,
    pub state_timestamp_ms: i64,
    /// The generation last written to `__consumer_offsets`.
    pub persisted_generation: i32,
    /// Set when the group speaks the KIP-848 consumer protocol.
    pub consumer: Option<super::consumer::ConsumerGroup>,
}

impl Group {
    pub fn new(id: &str) -> Self {
        Self {
            id: id.to_owned(),
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: Vec::new(),
            pending: HashSet::new(),
            static_members: HashMap::new(),
            offsets: HashMap::new(),
            offset_batches: HashMap::new(),
            pending_txn_offsets: HashMap::new(),
            phase_deadline: None,
            initial_delay_until: None,
            state_timestamp_ms: -1,
            persisted_generation: 0,
            consumer: None,
        }
    }

    pub fn member(&self, id: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    pub fn member_mut(&mut self, id: &str) -> Option<&mut Member> {
        self.members.iter_mut().find(|m| m.id == id)
    }

    /// No members under either protocol.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.consumer.as_ref().is_none_or(|c| c.members.is_empty())
    }

    /// `classic` or `consumer`, as ListGroups reports it.
    pub fn group_type(&self) -> &'static str {
        if self.consumer.is_some() {
            "consumer"
        } else {
            "classic"
        }
    }

    pub fn state_name(&self) -> &'static str {
        match &self.consumer {
            Some(consumer) => consumer.state_name(),
            None => self.state.name(),
        }
    }

    /// Whether `protocols` can join: same protocol type and, once the group
    /// has members, at least one protocol every member supports.
    pub fn accepts(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if protocols.is_empty() || protocol_type.is_empty() {
            return false;
        }
        if self.members.is_empty() {
            return true;
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(name, _)| self.members.iter().all(|m| m.supports(name)))
    }

    /// Adds a member and starts (or continues) a rebalance.
    pub fn add_member(&mut self, member: Member, protocol_type: &str, limits: GroupLimits, now: Instant) {
        if self.members.is_empty() {
            self.protocol_type = Some(protocol_type.to_owned());
        }
        if let Some(instance) = &member.instance_id {
            self.static_members.insert(instance.clone(), member.id.clone());
        }
        self.pending.remove(&member.id);
        self.members.push(member);
        self.prepare_rebalance(limits, now);
    }

    /// Moves to PreparingRebalance: members must rejoin within the largest
    /// rebalance timeout. Followers waiting on a sync are told to rejoin.
    pub fn prepare_rebalance(&mut self, limits: GroupLimits, now: Instant) {
        if self.state == GroupState::CompletingRebalance {
            for member in &mut self.members {
                if let Some(waiter) = member.sync_waiter.take() {
                    let _ = waiter.send(SyncResult {
                        error: Some(ResponseError::RebalanceInProgress),
                        assignment: Bytes::new(),
                    });
                }
            }
        }
        if self.state == GroupState::Empty {
            self.initial_delay_until = Some(now + limits.initial_rebalance_delay);
        }
        if self.state != GroupState::PreparingRebalance {
            let timeout = self.members.iter().map(|m| m.rebalance_timeout).max().unwrap_or_default();
            self.phase_deadline = Some(now + timeout);
        }
        self.state = GroupState::PreparingRebalance;
    }

    /// Completes the join once every member has rejoined (or at the deadline,
    /// dropping those that did not), starting a new generation.
    pub fn maybe_complete_join(&mut self, now: Instant, force: bool) -> bool {
        if self.state != GroupState::PreparingRebalance {
            return false;
        }
        if self.initial_delay_until.is_some_and(|until| now < until) && !force {
            return false;
        }
        let all_joined = self.members.iter().all(|m| m.join_waiter.is_some()) && self.pending.is_empty();
        if !all_joined && !force {
            return false;
        }
        self.initial_delay_until = None;
        let silent: Vec<String> =
            self.members.iter().filter(|m| m.join_waiter.is_none()).map(|m| m.id.clone()).collect();
        for id in silent {
            self.remove_member(&id);
        }
        self.pending.clear();
        self.generation += 1;
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.protocol = None;
            self.leader = None;
            self.phase_deadline = None;
            return true;
        }
        self.protocol = self.select_protocol();
        if self.leader.as_ref().is_none_or(|l| self.member(l).is_none()) {
            self.leader = Some(self.members[0].id.clone());
        }
        self.state = GroupState::CompletingRebalance;
        let timeout = self.members.iter().map(|m| m.rebalance_timeout).max().unwrap_or_default();
        self.phase_deadline = Some(now + timeout);
        let protocol = self.protocol.clone().unwrap_or_default();
        let leader = self.leader.clone().unwrap_or_default();
        let everyone: Vec<(String, Option<String>, Bytes)> = self
            .members
            .iter()
            .map(|m| (m.id.clone(), m.instance_id.clone(), m.metadata(&protocol)))
            .collect();
        for member in &mut self.members {
            member.heartbeat_deadline = now + member.session_timeout;
            if let Some(waiter) = member.join_waiter.take() {
                let _ = waiter.send(JoinResult {
                    error: None,
                    generation: self.generation,
                    protocol_type: self.protocol_type.clone(),
                    protocol: Some(protocol.clone()),
                    leader: leader.clone(),
                    member_id: member.id.clone(),
                    members: if member.id == leader { everyone.clone() } else { Vec::new() },
                    skip_assignment: false,
                });
            }
        }
        true
    }

    /// Kafka's vote: each member names its most preferred protocol among
    /// those all members support; the most named wins.
    pub(super) fn select_protocol(&self) -> Option<String> {
        let candidates: Vec<&String> = self.members[0]
            .protocols
            .iter()
            .map(|(name, _)| name)
            .filter(|name| self.members.iter().all(|m| m.supports(name)))
            .collect();
        let mut votes: Vec<(&String, usize)> = candidates.iter().map(|c| (*c, 0)).collect();
        for member in &self.members {
            if let Some((name, _)) = member.protocols.iter().find(|(name, _)| candidates.contains(&name)) {
                if let Some(vote) = votes.iter_mut().find(|(c, _)| *c == name) {
                    vote.1 += 1;
                }
            }
        }
        let best = votes.iter().map(|(_, n)| *n).max()?;
        votes.into_iter().find(|(_, n)| *n == best).map(|(name, _)| name.clone())
    }

    /// The leader's assignments, held until their record is acknowledged
    /// ([`Self::complete_sync`] then hands them out).
    pub fn set_assignments(&mut self, assignments: HashMap<String, Bytes>) {
        for member in &mut self.members {
            member.assignment = assignments.get(&member.id).cloned().unwrap_or_default();
        }
    }

    /// The stored assignment is acknowledged: every waiting member gets
    /// its part and the group is stable.
    pub fn complete_sync(&mut self) {
        for member in &mut self.members {
            if let Some(waiter) = member.sync_waiter.take() {
                let _ = waiter.send(SyncResult { error: None, assignment: member.assignment.clone() });
            }
        }
        self.state = GroupState::Stable;
        self.phase_deadline = None;
    }

    /// The assignment could not be stored: the members waiting for it get
    /// `error` and the group rebalances (Kafka's
    /// `resetAndPropagateAssignmentError`).
    pub fn fail_sync(&mut self, error: ResponseError, limits: GroupLimits, now: Instant) {
        for member in &mut self.members {
            member.assignment = Bytes::new();
            if let Some(waiter) = member.sync_waiter.take() {
                let _ = waiter.send(SyncResult { error: Some(error), assignment: Bytes::new() });
            }
        }
        self.prepare_rebalance(limits, now);
    }

    /// Applies acknowledged offsets written by the batch at `batch_offset`,
    /// skipping any a later batch has already set.
    pub fn apply_offsets(&mut self, offsets: Vec<((String, i32), OffsetValue)>, batch_offset: i64) {
        for (key, value) in offsets {
            if self.offset_batches.get(&key).is_some_and(|applied| *applied > batch_offset) {
                continue;
            }
            self.offset_batches.insert(key.clone(), batch_offset);
            self.offsets.insert(key, value);
        }
    }

    /// Offsets older than the retention, in a group with no members (a
    /// group with members keeps its offsets however old).
    pub fn expired_offsets(&self, now_ms: i64, retention_ms: i64) -> Vec<(String, i32)> {
        if !self.is_empty() {
            return Vec::new();
        }
        let mut expired: Vec<(String, i32)> = self
            .offsets
            .iter()
            .filter(|(_, v)| now_ms - v.commit_timestamp_ms > retention_ms)
            .map(|(k, _)| k.clone())
            .collect();
        expired.sort();
        expired
    }

    /// Whether the member id belongs to a static instance other than
    /// `instance_id` claims: an old incarnation, to be fenced.
    pub fn is_fenced(&self, member_id: &str, instance_id: Option<&str>) -> bool {
        instance_id.is_some_and(|i| self.static_members.get(i).is_some_and(|m| m != member_id))
    }

    /// Removes a member, answering anything it waits on.
    pub fn remove_member(&mut self, id: &str) -> Option<Member> {
        let index = self.members.iter().position(|m| m.id == id)?;
        let mut member = self.members.remove(index);
        if let Some(waiter) = member.join_waiter.take() {
            let _ = waiter.send(JoinResult::error(ResponseError::UnknownMemberId, id));
        }
        if let Some(waiter) = member.sync_waiter.take() {
            let _ = waiter
                .send(SyncResult { error: Some(ResponseError::UnknownMemberId), assignment: Bytes::new() });
        }
        if let Some(instance) = &member.instance_id {
            if self.static_members.get(instance).is_some_and(|m| m == id) {
                self.static_members.remove(instance);
            }
        }
        if self.leader.as_deref() == Some(id) {
            self.leader = self.members.first().map(|m| m.id.clone());
        }
        Some(member)
    }

    /// After members left: rebalance the rest, or become Empty.
    pub fn on_members_left(&mut self, limits: GroupLimits, now: Instant) {
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => self.prepare_rebalance(limits, now),
            GroupState::PreparingRebalance => {}
            GroupState::Empty | GroupState::Dead => return,
        }
        if self.members.is_empty() {
            self.maybe_complete_join(now, true);
        } else {
            self.maybe_complete_join(now, false);
        }
    }

    /// Timers: expired sessions, rebalance phases past their deadline and the
    /// end of the initial delay. Returns whether the group changed.
    pub fn tick(&mut self, limits: GroupLimits, now: Instant) -> bool {
        // A member waiting in a join is alive; any other must keep heartbeating.
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.join_waiter.is_none() && m.heartbeat_deadline <= now)
            .map(|m| m.id.clone())
            .collect();
        let mut changed = false;
        for id in &expired {
            tracing::info!(group = %self.id, member = %id, "member session expired");
            self.remove_member(id);
            changed = true;
        }
        if changed {
            self.on_members_left(limits, now);
        }
        let past_deadline = self.phase_deadline.is_some_and(|d| d <= now);
        match self.state {
            GroupState::PreparingRebalance => {
                let delay_over = self.initial_delay_until.is_some_and(|d| d <= now);
                if delay_over {
                    self.initial_delay_until = None;
                }
                changed |= self.maybe_complete_join(now, past_deadline) || delay_over;
            }
            GroupState::CompletingRebalance if past_deadline => {
                // The leader never synced: start over without the silent members.
                let silent: Vec<String> =
                    self.members.iter().filter(|m| m.sync_waiter.is_none()).map(|m| m.id.clone()).collect();
                for id in &silent {
                    self.remove_member(id);
                }
                self.prepare_rebalance(limits, now);
                self.maybe_complete_join(now, self.members.is_empty());
                changed = true;
            }
            _ => {}
        }
        changed
    }

    /// The stored form of the group, written after each completed rebalance.
    pub fn to_value(&self, now_ms: i64) -> GroupValue {
        let protocol = self.protocol.clone().unwrap_or_default();
        GroupValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            state_timestamp_ms: now_ms,
            members: self
                .members
                .iter()
                .map(|m| MemberValue {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout.as_millis() as i32,
                    session_timeout_ms: m.session_timeout.as_millis() as i32,
                    subscription: m.metadata(&protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// Restores a group from its stored form: Stable with its members, who
    /// must heartbeat within their session timeout to stay.
    pub fn restore(&mut self, value: GroupValue, now: Instant) {
        self.generation = value.generation;
        self.persisted_generation = value.generation;
        self.protocol_type = Some(value.protocol_type).filter(|p| !p.is_empty());
        self.protocol = value.protocol.clone();
        self.leader = value.leader;
        self.state_timestamp_ms = value.state_timestamp_ms;
        self.static_members.clear();
        let protocol = value.protocol.unwrap_or_default();
        self.members = value
            .members
            .into_iter()
            .map(|m| Member {
                id: m.member_id,
                instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                session_timeout: Duration::from_millis(m.session_timeout_ms.max(0) as u64),
                rebalance_timeout: Duration::from_millis(m.rebalance_timeout_ms.max(0) as u64),
                protocols: vec![(protocol.clone(), m.subscription)],
                assignment: m.assignment,
                join_waiter: None,
                sync_waiter: None,
                heartbeat_deadline: now + Duration::from_millis(m.session_timeout_ms.max(0) as u64),
            })
            .collect();
        for member in &self.members {
            if let Some(instance) = &member.instance_id {
                self.static_members.insert(instance.clone(), member.id.clone());
            }
        }
        self.state = if self.members.is_empty() { GroupState::Empty } else { GroupState::Stable };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: GroupLimits = GroupLimits { initial_rebalance_delay: Duration::ZERO, max_size: 100 };

    fn member(id: &str, now: Instant) -> (Member, oneshot::Receiver<JoinResult>) {
        let (tx, rx) = oneshot::channel();
        let member = Member {
            id: id.into(),
            instance_id: None,
            client_id: "c".into(),
            client_host: "h".into(),
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(30),
            protocols: vec![
                ("range".into(), Bytes::from(id.to_owned())),
                ("roundrobin".into(), Bytes::new()),
            ],
            assignment: Bytes::new(),
            join_waiter: Some(tx),
            sync_waiter: None,
            heartbeat_deadline: now + Duration::from_secs(10),
        };
        (member, rx)
    }

    #[test]
    fn given_two_members_when_both_join_should_complete_with_one_leader() {
        let now = Instant::now();
        let mut group = Group::new("g");
        let (a, mut a_rx) = member("a", now);
        let (b, mut b_rx) = member("b", now);
        group.add_member(a, "consumer", LIMITS, now);
        group.add_member(b, "consumer", LIMITS, now);
        assert!(group.maybe_complete_join(now, false));
        assert_eq!(group.state, GroupState::CompletingRebalance);
        let (a, b) = (a_rx.try_recv().unwrap(), b_rx.try_recv().unwrap());
        assert_eq!(a.generation, 1);
        assert_eq!(a.leader, "a");
        assert_eq!(a.protocol.as_deref(), Some("range"));
        assert_eq!(a.members.len(), 2, "the leader sees every member");
        assert!(b.members.is_empty());

        let (tx, mut rx) = oneshot::channel();
        group.member_mut("b").unwrap().sync_waiter = Some(tx);
        group.set_assignments(HashMap::from([("b".to_owned(), Bytes::from_static(b"p0"))]));
        assert!(rx.try_recv().is_err(), "no assignment before its record is acknowledged");
        group.complete_sync();
        assert_eq!(group.state, GroupState::Stable);
        assert_eq!(rx.try_recv().unwrap().assignment, Bytes::from_static(b"p0"));
    }

    #[test]
    fn an_offset_acknowledged_late_does_not_overwrite_a_later_commit() {
        let value = |offset| OffsetValue {
            offset,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 0,
        };
        let key = ("t".to_owned(), 0);
        let mut group = Group::new("g");
        group.apply_offsets(vec![(key.clone(), value(20))], 5);
        group.apply_offsets(vec![(key.clone(), value(10))], 3);
        assert_eq!(group.offsets[&key].offset, 20, "the batch at 3 was written before the one at 5");
        group.apply_offsets(vec![(key.clone(), value(30))], 8);
        assert_eq!(group.offsets[&key].offset, 30);
    }

    #[test]
    fn a_failed_assignment_write_answers_the_waiting_members_and_rebalances() {
        let now = Instant::now();
        let mut group = Group::new("g");
        let (a, _a_rx) = member("a", now);
        group.add_member(a, "consumer", LIMITS, now);
        group.maybe_complete_join(now, false);
        let (tx, mut rx) = oneshot::channel();
        group.member_mut("a").unwrap().sync_waiter = Some(tx);
        group.set_assignments(HashMap::from([("a".to_owned(), Bytes::from_static(b"p0"))]));
        group.fail_sync(ResponseError::CoordinatorNotAvailable, LIMITS, now);
        let answer = rx.try_recv().unwrap();
        assert_eq!(
            (answer.error, answer.assignment),
            (Some(ResponseError::CoordinatorNotAvailable), Bytes::new())
        );
        assert_eq!(group.state, GroupState::PreparingRebalance);
        assert!(group.member("a").unwrap().assignment.is_empty());
    }

    #[test]
    fn given_stable_group_when_session_expires_should_rebalance_without_the_member() {
        let now = Instant::now();
        let mut group = Group::new("g");
        let (a, _a_rx) = member("a", now);
        let (b, _b_rx) = member("b", now);
        group.add_member(a, "consumer", LIMITS, now);
        group.add_member(b, "consumer", LIMITS, now);
        group.maybe_complete_join(now, false);
        group.complete_sync();
        group.member_mut("a").unwrap().heartbeat_deadline = now + Duration::from_secs(60);
        let later = now + Duration::from_secs(11);
        assert!(group.tick(LIMITS, later));
        assert!(group.member("b").is_none());
        assert_eq!(group.state, GroupState::PreparingRebalance);
        // "a" rejoins and the generation moves on.
        let (tx, mut rx) = oneshot::channel();
        group.member_mut("a").unwrap().join_waiter = Some(tx);
        assert!(group.maybe_complete_join(later, false));
        assert_eq!(rx.try_recv().unwrap().generation, 2);
    }

    #[test]
    fn members_that_do_not_rejoin_are_dropped_at_the_deadline() {
        let now = Instant::now();
        let mut group = Group::new("g");
        let (a, _a) = member("a", now);
        let (b, _b) = member("b", now);
        group.add_member(a, "consumer", LIMITS, now);
        group.add_member(b, "consumer", LIMITS, now);
        group.maybe_complete_join(now, false);
        group.complete_sync();
        let (c, mut c_rx) = member("c", now);
        group.add_member(c, "consumer", LIMITS, now);
        assert!(!group.maybe_complete_join(now, false), "a and b have not rejoined yet");
        group.tick(LIMITS, now + Duration::from_secs(31));
        assert_eq!(group.members.len(), 1);
        assert_eq!(c_rx.try_recv().unwrap().leader, "c");
    }

    #[test]
    fn only_old_offsets_of_empty_groups_expire() {
        let now = Instant::now();
        let mut group = Group::new("g");
        let offset = |ts| OffsetValue {
            offset: 1,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: ts,
        };
        group.offsets.insert(("t".into(), 0), offset(1_000));
        group.offsets.insert(("t".into(), 1), offset(9_000));
        assert_eq!(group.expired_offsets(10_000, 5_000), vec![("t".to_owned(), 0)]);
        let (a, _a) = member("a", now);
        group.add_member(a, "consumer", LIMITS, now);
        assert!(group.expired_offsets(10_000, 5_000).is_empty(), "members keep their offsets");
    }

    #[test]
    fn incompatible_protocols_are_refused() {
        let now = Instant::now();
        let mut group = Group::new("g");
        let (a, _a) = member("a", now);
        group.add_member(a, "consumer", LIMITS, now);
        assert!(!group.accepts("consumer", &[("sticky".into(), Bytes::new())]));
        assert!(!group.accepts("connect", &[("range".into(), Bytes::new())]));
        assert!(group.accepts("consumer", &[("range".into(), Bytes::new())]));
    }
}
