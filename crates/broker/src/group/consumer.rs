//! Consumer groups under the KIP-848 protocol (`group.protocol=consumer`).
//!
//! Members only heartbeat. The coordinator owns the assignment: when the
//! group epoch moves (a member joins, leaves or changes its subscription), a
//! server-side assignor (`uniform` or `range`) computes a target assignment,
//! and each member is reconciled towards its target one heartbeat at a time:
//! partitions it must give up are revoked first, and partitions still held by
//! another member are handed over only once released, so no partition is
//! ever owned by two members.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

/// A partition, by topic id.
pub type Tp = (Uuid, i32);

/// The topics the assignor may hand out: name → (id, partition count).
pub type TopicsView = HashMap<String, (Uuid, i32)>;

pub const DEFAULT_ASSIGNOR: &str = "uniform";
pub const ASSIGNORS: &[&str] = &["uniform", "range"];

#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub subscribed: Vec<String>,
    pub rebalance_timeout: Duration,
    /// What the member owns, as far as the coordinator knows.
    pub assigned: BTreeSet<Tp>,
    /// Partitions the member was told to give up and has not confirmed.
    pub revoking: BTreeSet<Tp>,
    pub revoke_deadline: Option<Instant>,
    pub session_deadline: Instant,
    /// The assignment last sent, to send only changes.
    pub last_sent: Option<BTreeSet<Tp>>,
}

/// A heartbeat, decoded.
pub struct Heartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub subscribed: Option<Vec<String>>,
    pub assignor: Option<String>,
    pub owned: Option<BTreeSet<Tp>>,
}

/// What a heartbeat answers.
#[derive(Debug)]
pub struct HeartbeatReply {
    pub member_id: String,
    pub member_epoch: i32,
    pub assignment: Option<BTreeSet<Tp>>,
}

#[derive(Debug, Default)]
pub struct ConsumerGroup {
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: BTreeMap<String, ConsumerMember>,
    pub target: HashMap<String, BTreeSet<Tp>>,
}

impl ConsumerGroup {
    /// KIP-848's group states.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.assignment_epoch < self.epoch {
            "Assigning"
        } else if self.members.values().any(|m| m.epoch != self.assignment_epoch || !m.revoking.is_empty()) {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// Handles one heartbeat; `session_timeout` is the group's.
    pub fn heartbeat(
        &mut self,
        request: Heartbeat,
        topics: &TopicsView,
        session_timeout: Duration,
        now: Instant,
    ) -> Result<HeartbeatReply, ResponseError> {
        if let Some(assignor) = &request.assignor {
            if !ASSIGNORS.contains(&assignor.as_str()) {
                return Err(ResponseError::UnsupportedAssignor);
            }
        }
        match request.member_epoch {
            0 => self.join(&request, now, session_timeout)?,
            // A static member leaving to restart keeps its partitions until
            // its session ends or its instance rejoins (KIP-848).
            -2 if self.members.get(&request.member_id).is_some_and(|m| m.instance_id.is_some()) => {
                let member = self.members.get_mut(&request.member_id).expect("present");
                member.session_deadline = now + session_timeout;
                return Ok(HeartbeatReply {
                    member_id: request.member_id,
                    member_epoch: request.member_epoch,
                    assignment: None,
                });
            }
            -1 | -2 => {
                if self.members.remove(&request.member_id).is_some() {
                    self.target.remove(&request.member_id);
                    self.epoch += 1;
                }
                return Ok(HeartbeatReply {
                    member_id: request.member_id,
                    member_epoch: request.member_epoch,
                    assignment: None,
                });
            }
            epoch => {
                let member = self.members.get(&request.member_id).ok_or(ResponseError::UnknownMemberId)?;
                let retried = epoch == member.previous_epoch
                    && request.owned.as_ref().is_some_and(|owned| owned.is_subset(&member.assigned));
                if epoch != member.epoch && !retried {
                    return Err(ResponseError::FencedMemberEpoch);
                }
            }
        }
        let member_id = request.member_id.clone();
        let member = self.members.get_mut(&member_id).expect("joined or checked above");
        member.session_deadline = now + session_timeout;
        if let Some(subscribed) = request.subscribed {
            let mut subscribed = subscribed;
            subscribed.sort();
            subscribed.dedup();
            if subscribed != member.subscribed {
                member.subscribed = subscribed;
                self.epoch += 1;
            }
        }
        if let Some(assignor) = request.assignor {
            self.assignor = assignor;
        }
        if let Some(owned) = &request.owned {
            if member.revoking.iter().all(|tp| !owned.contains(tp)) {
                member.revoking.clear();
                member.revoke_deadline = None;
            }
        }
        if self.assignment_epoch < self.epoch {
            self.compute_target(topics);
        }
        self.reconcile(&member_id, now);
        let member = self.members.get_mut(&member_id).expect("present");
        let changed = member.last_sent.as_ref() != Some(&member.assigned);
        let assignment = changed.then(|| member.assigned.clone());
        if changed {
            member.last_sent = Some(member.assigned.clone());
        }
        Ok(HeartbeatReply { member_id, member_epoch: member.epoch, assignment })
    }

    fn join(
        &mut self,
        request: &Heartbeat,
        now: Instant,
        session_timeout: Duration,
    ) -> Result<(), ResponseError> {
        if request.member_id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        let Some(subscribed) = &request.subscribed else {
            return Err(ResponseError::InvalidRequest);
        };
        if let Some(instance) = &request.instance_id {
            // A static member replacing its previous incarnation takes over
            // its assignment; a live one with the same id is refused.
            let previous = self
                .members
                .values()
                .find(|m| m.instance_id.as_ref() == Some(instance))
                .map(|m| m.id.clone());
            if let Some(previous) = previous.filter(|p| *p != request.member_id) {
                let old = self.members.remove(&previous).expect("found");
                if let Some(target) = self.target.remove(&previous) {
                    self.target.insert(request.member_id.clone(), target);
                }
                let mut member = old;
                member.id = request.member_id.clone();
                member.last_sent = None;
                member.session_deadline = now + session_timeout;
                self.members.insert(request.member_id.clone(), member);
                return Ok(());
            }
        }
        let mut subscribed = subscribed.clone();
        subscribed.sort();
        subscribed.dedup();
        let member = ConsumerMember {
            id: request.member_id.clone(),
            instance_id: request.instance_id.clone(),
            rack_id: request.rack_id.clone(),
            client_id: request.client_id.clone(),
            client_host: request.client_host.clone(),
            epoch: 0,
            previous_epoch: -1,
            subscribed,
            rebalance_timeout: Duration::from_millis(request.rebalance_timeout_ms.max(0) as u64),
            assigned: BTreeSet::new(),
            revoking: BTreeSet::new(),
            revoke_deadline: None,
            session_deadline: now + session_timeout,
            last_sent: None,
        };
        // A rejoin of a known member id starts it afresh: it lost what it had.
        self.members.insert(request.member_id.clone(), member);
        self.epoch += 1;
        Ok(())
    }

    /// Runs the assignor over every member's subscription.
    fn compute_target(&mut self, topics: &TopicsView) {
        let assignor = if self.assignor.is_empty() { DEFAULT_ASSIGNOR } else { &self.assignor };
        self.target = if assignor == "range" {
            assign_range(&self.members, topics)
        } else {
            assign_uniform(&self.members, &self.target, topics)
        };
        self.assignment_epoch = self.epoch;
    }

    /// Moves one member towards its target: first revoke what it must give
    /// up, then take what others have released.
    fn reconcile(&mut self, member_id: &str, now: Instant) {
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let held_by_others: BTreeSet<Tp> = self
            .members
            .values()
            .filter(|m| m.id != member_id)
            .flat_map(|m| m.assigned.iter().chain(m.revoking.iter()).copied())
            .collect();
        let assignment_epoch = self.assignment_epoch;
        let member = self.members.get_mut(member_id).expect("present");
        if !member.revoking.is_empty() {
            return;
        }
        let to_revoke: BTreeSet<Tp> = member.assigned.difference(&target).copied().collect();
        if !to_revoke.is_empty() {
            member.assigned.retain(|tp| target.contains(tp));
            member.revoking = to_revoke;
            member.revoke_deadline = Some(now + member.rebalance_timeout);
            return;
        }
        member.assigned.extend(target.iter().filter(|tp| !held_by_others.contains(tp)).copied());
        if member.epoch != assignment_epoch {
            member.previous_epoch = member.epoch;
            member.epoch = assignment_epoch;
        }
    }

    /// Expires silent members and members that never finished revoking.
    pub fn tick(&mut self, now: Instant) -> bool {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| m.session_deadline <= now || m.revoke_deadline.is_some_and(|d| d <= now))
            .map(|m| m.id.clone())
            .collect();
        for id in &gone {
            tracing::info!(member = %id, "consumer group member expired");
            self.members.remove(id);
            self.target.remove(id);
        }
        if !gone.is_empty() {
            self.epoch += 1;
        }
        !gone.is_empty()
    }
}

/// Every partition of the topics anyone subscribes to, sorted.
fn subscribed_partitions(
    members: &BTreeMap<String, ConsumerMember>,
    topics: &TopicsView,
) -> Vec<(String, Tp)> {
    let names: BTreeSet<&String> = members.values().flat_map(|m| m.subscribed.iter()).collect();
    names
        .into_iter()
        .filter_map(|name| topics.get(name).map(|t| (name, *t)))
        .flat_map(|(name, (id, count))| (0..count).map(move |p| (name.clone(), (id, p))))
        .collect()
}

/// Balanced and sticky: members keep what they had up to their fair share,
/// the rest goes to the least loaded eligible member.
fn assign_uniform(
    members: &BTreeMap<String, ConsumerMember>,
    previous: &HashMap<String, BTreeSet<Tp>>,
    topics: &TopicsView,
) -> HashMap<String, BTreeSet<Tp>> {
    let mut target: HashMap<String, BTreeSet<Tp>> =
        members.keys().map(|id| (id.clone(), BTreeSet::new())).collect();
    let partitions = subscribed_partitions(members, topics);
    if members.is_empty() {
        return target;
    }
    let quota = partitions.len().div_ceil(members.len());
    let mut unassigned = Vec::new();
    for (topic, tp) in partitions {
        let keeper = members.values().find(|m| {
            previous.get(&m.id).is_some_and(|p| p.contains(&tp))
                && m.subscribed.contains(&topic)
                && target[&m.id].len() < quota
        });
        match keeper {
            Some(m) => {
                target.get_mut(&m.id).expect("member").insert(tp);
            }
            None => unassigned.push((topic, tp)),
        }
    }
    for (topic, tp) in unassigned {
        let least = members
            .values()
            .filter(|m| m.subscribed.contains(&topic))
            .min_by_key(|m| (target[&m.id].len(), m.id.clone()));
        if let Some(m) = least {
            target.get_mut(&m.id).expect("member").insert(tp);
        }
    }
    target
}

/// Kafka's range assignor: per topic, contiguous ranges over the sorted
/// subscribers, the first `partitions % members` getting one more.
fn assign_range(
    members: &BTreeMap<String, ConsumerMember>,
    topics: &TopicsView,
) -> HashMap<String, BTreeSet<Tp>> {
    let mut target: HashMap<String, BTreeSet<Tp>> =
        members.keys().map(|id| (id.clone(), BTreeSet::new())).collect();
    let names: BTreeSet<&String> = members.values().flat_map(|m| m.subscribed.iter()).collect();
    for name in names {
        let Some((id, count)) = topics.get(name) else { continue };
        let subscribers: Vec<&String> =
            members.values().filter(|m| m.subscribed.contains(name)).map(|m| &m.id).collect();
        let (per, extra) = (*count as usize / subscribers.len(), *count as usize % subscribers.len());
        let mut next = 0;
        for (i, member) in subscribers.iter().enumerate() {
            let take = per + usize::from(i < extra);
            let share = (next..next + take).map(|p| (*id, p as i32));
            target.get_mut(*member).expect("member").extend(share);
            next += take;
        }
    }
    target
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: Duration = Duration::from_secs(45);

    fn heartbeat(
        id: &str,
        epoch: i32,
        subscribed: Option<&[&str]>,
        owned: Option<BTreeSet<Tp>>,
    ) -> Heartbeat {
        Heartbeat {
            member_id: id.into(),
            member_epoch: epoch,
            instance_id: None,
            rack_id: None,
            client_id: "c".into(),
            client_host: "h".into(),
            rebalance_timeout_ms: 60_000,
            subscribed: subscribed.map(|s| s.iter().map(|t| t.to_string()).collect()),
            assignor: None,
            owned,
        }
    }

    fn topics() -> (TopicsView, Uuid) {
        let id = Uuid::new_v4();
        (HashMap::from([("t".to_owned(), (id, 6))]), id)
    }

    #[test]
    fn a_static_member_leaving_to_restart_keeps_its_partitions_until_its_session_ends() {
        let (topics, _) = topics();
        let mut group = ConsumerGroup::default();
        let now = Instant::now();
        let joining = Heartbeat { instance_id: Some("i".into()), ..heartbeat("a", 0, Some(&["t"]), None) };
        let owned = group.heartbeat(joining, &topics, SESSION, now).unwrap().assignment.unwrap();
        let leaving = Heartbeat { instance_id: Some("i".into()), ..heartbeat("a", -2, None, None) };
        assert_eq!(group.heartbeat(leaving, &topics, SESSION, now).unwrap().member_epoch, -2);
        let later = now + SESSION / 2;
        let b = group.heartbeat(heartbeat("b", 0, Some(&["t"]), None), &topics, SESSION, later).unwrap();
        assert!(b.assignment.unwrap().is_empty(), "the leaving static member still owns its partitions");
        assert!(!group.tick(later), "its session still runs");
        let expired = now + SESSION + Duration::from_secs(1);
        assert!(group.tick(expired), "then it expires");
        let beat = heartbeat("b", b.member_epoch, None, Some(BTreeSet::new()));
        let b = group.heartbeat(beat, &topics, SESSION, expired).unwrap();
        assert_eq!(b.assignment.unwrap(), owned, "and the other member takes its partitions");
        let dynamic = heartbeat("b", -1, None, None);
        assert_eq!(group.heartbeat(dynamic, &topics, SESSION, expired).unwrap().member_epoch, -1);
        assert!(!group.members.contains_key("b"), "a dynamic member leaves at once");
    }

    #[test]
    fn a_lone_member_gets_every_partition() {
        let (topics, _) = topics();
        let mut group = ConsumerGroup::default();
        let now = Instant::now();
        let reply = group.heartbeat(heartbeat("a", 0, Some(&["t"]), None), &topics, SESSION, now).unwrap();
        assert_eq!(reply.member_epoch, 1);
        assert_eq!(reply.assignment.unwrap().len(), 6);
        assert_eq!(group.state_name(), "Stable");
    }

    #[test]
    fn a_second_member_waits_for_the_first_to_revoke() {
        let (topics, _) = topics();
        let mut group = ConsumerGroup::default();
        let now = Instant::now();
        let a = group.heartbeat(heartbeat("a", 0, Some(&["t"]), None), &topics, SESSION, now).unwrap();
        let a_owned = a.assignment.unwrap();
        let b = group.heartbeat(heartbeat("b", 0, Some(&["t"]), None), &topics, SESSION, now).unwrap();
        assert_eq!(b.member_epoch, 2);
        assert!(b.assignment.unwrap().is_empty(), "a still owns everything");
        // a is told to keep three partitions (revoking the others), at its old epoch.
        let a = group.heartbeat(heartbeat("a", 1, None, Some(a_owned)), &topics, SESSION, now).unwrap();
        assert_eq!(a.member_epoch, 1);
        let kept = a.assignment.unwrap();
        assert_eq!(kept.len(), 3);
        // a confirms the revocation and moves to the new epoch.
        let a = group.heartbeat(heartbeat("a", 1, None, Some(kept.clone())), &topics, SESSION, now).unwrap();
        assert_eq!(a.member_epoch, 2);
        let b =
            group.heartbeat(heartbeat("b", 2, None, Some(BTreeSet::new())), &topics, SESSION, now).unwrap();
        let b_owned = b.assignment.unwrap();
        assert_eq!(b_owned.len(), 3);
        assert!(b_owned.is_disjoint(&kept));
        assert_eq!(group.state_name(), "Stable");
    }

    #[test]
    fn stale_epochs_are_fenced_and_strangers_unknown() {
        let (topics, _) = topics();
        let mut group = ConsumerGroup::default();
        let now = Instant::now();
        group.heartbeat(heartbeat("a", 0, Some(&["t"]), None), &topics, SESSION, now).unwrap();
        let err = group.heartbeat(heartbeat("a", 7, None, None), &topics, SESSION, now).unwrap_err();
        assert_eq!(err, ResponseError::FencedMemberEpoch);
        let err = group.heartbeat(heartbeat("zz", 1, None, None), &topics, SESSION, now).unwrap_err();
        assert_eq!(err, ResponseError::UnknownMemberId);
    }

    #[test]
    fn range_assigns_contiguous_ranges() {
        let (topics, id) = topics();
        let now = Instant::now();
        let mut members = BTreeMap::new();
        for name in ["a", "b", "c", "d"] {
            let mut group = ConsumerGroup::default();
            group.join(&heartbeat(name, 0, Some(&["t"]), None), now, SESSION).unwrap();
            members.extend(group.members);
        }
        let target = assign_range(&members, &topics);
        assert_eq!(target["a"], BTreeSet::from([(id, 0), (id, 1)]));
        assert_eq!(target["b"], BTreeSet::from([(id, 2), (id, 3)]));
        assert_eq!(target["c"], BTreeSet::from([(id, 4)]));
        assert_eq!(target["d"], BTreeSet::from([(id, 5)]));
    }

    #[test]
    fn silent_members_expire() {
        let (topics, _) = topics();
        let mut group = ConsumerGroup::default();
        let now = Instant::now();
        group.heartbeat(heartbeat("a", 0, Some(&["t"]), None), &topics, SESSION, now).unwrap();
        assert!(group.tick(now + SESSION + Duration::from_secs(1)));
        assert!(group.members.is_empty());
    }
}
