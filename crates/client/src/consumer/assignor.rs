//! The partition assignors a consumer-group leader runs, named and behaving
//! as Kafka's Java assignors, so a group can mix our consumers with Java,
//! librdkafka and kafka-python ones whoever is the leader.
//!
//! - [`RangeAssignor`] (`range`): per topic, the subscribed members in
//!   Java's order (static members by `group.instance.id` first, then the
//!   rest by member id) get contiguous ranges; the first `n % members` get
//!   one extra partition.
//! - [`RoundRobinAssignor`] (`roundrobin`): every subscribed partition,
//!   sorted by topic then partition, is dealt to the members in that order,
//!   skipping members not subscribed to its topic.
//! - [`CooperativeStickyAssignor`] (`cooperative-sticky`) and
//!   [`StickyAssignor`] (`sticky`, eager): balanced assignments that keep
//!   each member's partitions where balance allows. The cooperative one
//!   reads ownership from the subscription's `owned_partitions`, and leaves
//!   a partition that changes hands out of its new owner's assignment: the
//!   old owner revokes it, the group rebalances again, and only then does
//!   the new owner get it. So no partition is ever consumed by two members.
//!
//! Every assignor is a pure function of the topics' partition counts and
//! the members' subscriptions; nothing here touches the network.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet};

use bytes::{BufMut, Bytes};

use super::protocol::{Assignment, Reader, Subscription, TopicPartition, Writer, DEFAULT_GENERATION};
use crate::error::Result;

/// How a group moves partitions between members (Java's `RebalanceProtocol`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RebalanceProtocol {
    /// Every member revokes everything before each rebalance.
    Eager,
    /// Members keep their partitions through a rebalance and revoke only
    /// the ones that move.
    Cooperative,
}

/// One group member as the leader sees it in the JoinGroup response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub subscription: Subscription,
}

impl Member {
    /// A member from its JoinGroup entry (`metadata` is its subscription bytes).
    pub fn decode(member_id: String, group_instance_id: Option<String>, metadata: &[u8]) -> Result<Self> {
        Ok(Self { member_id, group_instance_id, subscription: Subscription::decode(metadata)? })
    }
}

/// A partition assignment strategy (`partition.assignment.strategy`).
pub trait Assignor: Send + Sync {
    /// The protocol name sent in JoinGroup.
    fn name(&self) -> &'static str;

    fn protocol(&self) -> RebalanceProtocol;

    /// One assignment per member (every member gets an entry, possibly
    /// empty). `partitions_per_topic` holds the partition count of every
    /// subscribed topic the metadata knows; other topics are absent and
    /// their subscribers get nothing of them. Member ids are unique.
    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &[Member],
    ) -> BTreeMap<String, Assignment>;

    /// The subscription user data this assignor wants a member to send,
    /// given what it owns and the generation it got it in.
    fn subscription_user_data(&self, _owned: &[TopicPartition], _generation: i32) -> Option<Bytes> {
        None
    }
}

/// The assignor for a `partition.assignment.strategy` entry: a protocol
/// name or the Java class name users copy from Java configs.
pub fn by_name(name: &str) -> Option<Box<dyn Assignor>> {
    const JAVA_PACKAGE: &str = "org.apache.kafka.clients.consumer.";
    let name = name.trim();
    match name.strip_prefix(JAVA_PACKAGE).unwrap_or(name) {
        "range" | "RangeAssignor" => Some(Box::new(RangeAssignor)),
        "roundrobin" | "RoundRobinAssignor" => Some(Box::new(RoundRobinAssignor)),
        "cooperative-sticky" | "CooperativeStickyAssignor" => Some(Box::new(CooperativeStickyAssignor)),
        "sticky" | "StickyAssignor" => Some(Box::new(StickyAssignor)),
        _ => None,
    }
}

/// Kafka's `RangeAssignor`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RangeAssignor;

/// Kafka's `RoundRobinAssignor`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RoundRobinAssignor;

/// Kafka's `CooperativeStickyAssignor`.
#[derive(Clone, Copy, Debug, Default)]
pub struct CooperativeStickyAssignor;

/// Kafka's (eager) `StickyAssignor`.
#[derive(Clone, Copy, Debug, Default)]
pub struct StickyAssignor;

impl Assignor for RangeAssignor {
    fn name(&self) -> &'static str {
        "range"
    }

    fn protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Eager
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &[Member],
    ) -> BTreeMap<String, Assignment> {
        let members = MemberTopics::sorted(members, partitions_per_topic);
        let mut lists = vec![Vec::new(); members.len()];
        for (topic, &count) in partitions_per_topic {
            let consumers: Vec<usize> =
                (0..members.len()).filter(|&i| members.subscribes(i, topic)).collect();
            if consumers.is_empty() {
                continue;
            }
            let count = count.max(0) as usize;
            let (per_member, extra) = (count / consumers.len(), count % consumers.len());
            for (rank, &member) in consumers.iter().enumerate() {
                let start = per_member * rank + rank.min(extra);
                let len = per_member + usize::from(rank < extra);
                lists[member].extend((start..start + len).map(|p| partition(topic, p)));
            }
        }
        members.into_assignments(lists)
    }
}

impl Assignor for RoundRobinAssignor {
    fn name(&self) -> &'static str {
        "roundrobin"
    }

    fn protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Eager
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &[Member],
    ) -> BTreeMap<String, Assignment> {
        let members = MemberTopics::sorted(members, partitions_per_topic);
        let mut lists = vec![Vec::new(); members.len()];
        let mut topics: Vec<&str> = members.topics.iter().flatten().copied().collect();
        topics.sort_by(|a, b| java_cmp(a, b));
        topics.dedup();
        let mut next = 0;
        for topic in topics {
            for p in 0..partitions_per_topic[topic].max(0) as usize {
                // The topic came from a subscription, so someone takes it.
                let Some(member) = (0..members.len())
                    .map(|k| (next + k) % members.len())
                    .find(|&i| members.subscribes(i, topic))
                else {
                    break;
                };
                lists[member].push(partition(topic, p));
                next = (member + 1) % members.len();
            }
        }
        members.into_assignments(lists)
    }
}

impl Assignor for CooperativeStickyAssignor {
    fn name(&self) -> &'static str {
        "cooperative-sticky"
    }

    fn protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Cooperative
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &[Member],
    ) -> BTreeMap<String, Assignment> {
        let mut round = StickyRound::new(partitions_per_topic, members, cooperative_claim);
        round.assign_all();
        round.withhold_transfers();
        round.into_assignments()
    }

    /// Java's `CooperativeStickyAssignor` writes the generation as an i32,
    /// read by leaders that predate the subscription's generation field.
    fn subscription_user_data(&self, _owned: &[TopicPartition], generation: i32) -> Option<Bytes> {
        Some(Bytes::copy_from_slice(&generation.to_be_bytes()))
    }
}

impl Assignor for StickyAssignor {
    fn name(&self) -> &'static str {
        "sticky"
    }

    fn protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Eager
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &[Member],
    ) -> BTreeMap<String, Assignment> {
        let mut round = StickyRound::new(partitions_per_topic, members, sticky_claim);
        round.assign_all();
        round.into_assignments()
    }

    /// An eager member owns nothing when it joins, so its previous
    /// assignment travels in the user data (Java's StickyAssignor v1
    /// layout); nothing before its first assignment.
    fn subscription_user_data(&self, owned: &[TopicPartition], generation: i32) -> Option<Bytes> {
        if owned.is_empty() && generation < 0 {
            return None;
        }
        encode_sticky_user_data(owned, generation).ok()
    }
}

/// What a member claims to own, and the generation the claim is from.
struct Claim {
    partitions: BTreeSet<TopicPartition>,
    generation: i32,
}

/// Java's `CooperativeStickyAssignor.memberData`: owned partitions from the
/// subscription; the generation from its field (v2+), else from user data.
fn cooperative_claim(member: &Member) -> Claim {
    let subscription = &member.subscription;
    let generation = if subscription.generation_id >= 0 {
        subscription.generation_id
    } else {
        user_data_generation(subscription.user_data.as_deref())
    };
    Claim { partitions: subscription.owned_partitions.iter().cloned().collect(), generation }
}

/// The generation in cooperative-sticky user data: Java's 4-byte i32, or
/// the trailing generation of the sticky layout librdkafka writes for both
/// sticky assignors. Anything else has no generation.
fn user_data_generation(user_data: Option<&[u8]>) -> i32 {
    match user_data {
        Some(&[a, b, c, d]) => i32::from_be_bytes([a, b, c, d]),
        Some(bytes) => {
            decode_sticky_user_data(bytes).map_or(DEFAULT_GENERATION, |(_, generation)| generation)
        }
        None => DEFAULT_GENERATION,
    }
}

/// Java's `StickyAssignor.memberData`: the previous assignment and its
/// generation, from the user data only.
fn sticky_claim(member: &Member) -> Claim {
    let decoded = member.subscription.user_data.as_deref().and_then(decode_sticky_user_data);
    let (partitions, generation) = decoded.unwrap_or_default();
    Claim { partitions: partitions.into_iter().collect(), generation }
}

/// StickyAssignor user data v1: `[topic [partition]] generation`.
fn encode_sticky_user_data(owned: &[TopicPartition], generation: i32) -> Result<Bytes> {
    let mut writer = Writer::headless();
    writer.topic_partitions(owned)?;
    writer.buf.put_i32(generation);
    Ok(writer.buf.freeze())
}

/// StickyAssignor user data v1, or v0 (no generation); `None` if garbage.
fn decode_sticky_user_data(bytes: &[u8]) -> Option<(Vec<TopicPartition>, i32)> {
    let mut reader = Reader::new(bytes, "sticky assignor user data");
    let partitions = reader.topic_partitions().ok()?;
    let generation = if reader.remaining() >= 4 { reader.i32().ok()? } else { DEFAULT_GENERATION };
    Some((partitions, generation))
}

/// One sticky assignment in the making. Members are indexed in Java's
/// member order, so every tie breaks the same way on every run.
struct StickyRound<'a> {
    members: MemberTopics<'a>,
    partitions_per_topic: &'a BTreeMap<String, i32>,
    /// Topic -> the members subscribed to it.
    subscribers: BTreeMap<&'a str, Vec<usize>>,
    claims: Vec<Claim>,
    assigned: Vec<BTreeSet<TopicPartition>>,
}

impl<'a> StickyRound<'a> {
    fn new(
        partitions_per_topic: &'a BTreeMap<String, i32>,
        members: &'a [Member],
        claim_of: fn(&Member) -> Claim,
    ) -> Self {
        let members = MemberTopics::sorted(members, partitions_per_topic);
        let claims = members.members.iter().map(|member| claim_of(member)).collect();
        let mut subscribers: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, topics) in members.topics.iter().enumerate() {
            for &topic in topics {
                subscribers.entry(topic).or_default().push(i);
            }
        }
        let assigned = vec![BTreeSet::new(); members.len()];
        Self { members, partitions_per_topic, subscribers, claims, assigned }
    }

    fn assign_all(&mut self) {
        self.keep_winning_claims();
        self.assign_unowned();
        self.balance();
    }

    /// Each member keeps what it claims, unless the partition is gone, the
    /// member no longer subscribes to its topic, or another member claims
    /// it too: then the newer generation wins, and a tie means neither keeps
    /// it (Kafka's rule for two owners in one generation).
    fn keep_winning_claims(&mut self) {
        let mut best: BTreeMap<&TopicPartition, (i32, Vec<usize>)> = BTreeMap::new();
        for (member, claim) in self.claims.iter().enumerate() {
            for tp in claim.partitions.iter().filter(|tp| self.can_take(member, tp)) {
                let (generation, owners) = best.entry(tp).or_insert((claim.generation, Vec::new()));
                match claim.generation.cmp(generation) {
                    Ordering::Greater => (*generation, *owners) = (claim.generation, vec![member]),
                    Ordering::Equal => owners.push(member),
                    Ordering::Less => {}
                }
            }
        }
        for (tp, (_, owners)) in best {
            if let [owner] = owners[..] {
                self.assigned[owner].insert(tp.clone());
            }
        }
    }

    fn can_take(&self, member: usize, tp: &TopicPartition) -> bool {
        let count = self.partitions_per_topic.get(&tp.topic).copied().unwrap_or(0);
        self.members.subscribes(member, &tp.topic) && (0..count).contains(&tp.partition)
    }

    /// Partitions nobody kept go, the most constrained first (fewest
    /// subscribers), each to its least loaded subscriber.
    fn assign_unowned(&mut self) {
        let taken: BTreeSet<&TopicPartition> = self.assigned.iter().flatten().collect();
        let mut unowned = Vec::new();
        for (&topic, subscribers) in &self.subscribers {
            let count = self.partitions_per_topic[topic].max(0) as usize;
            let free = (0..count).map(|p| partition(topic, p)).filter(|tp| !taken.contains(tp));
            unowned.extend(free.map(|tp| (subscribers.len(), tp)));
        }
        unowned.sort_unstable();
        for (_, tp) in unowned {
            let subscribers = &self.subscribers[tp.topic.as_str()];
            let least_loaded = subscribers.iter().copied().min_by_key(|&i| (self.assigned[i].len(), i));
            if let Some(member) = least_loaded {
                self.assigned[member].insert(tp);
            }
        }
    }

    /// Moves partitions, one at a time, from a member to one that has at
    /// least two fewer and could take it, until no such move is left (Java's
    /// definition of balanced). Each move lowers the sum of squared counts by
    /// at least 2, which bounds the loop.
    fn balance(&mut self) {
        let total: usize = self.assigned.iter().map(BTreeSet::len).sum();
        for _ in 0..=total * total / 2 {
            let Some((from, to, tp)) = self.find_move() else { return };
            self.assigned[from].remove(&tp);
            self.assigned[to].insert(tp);
        }
        debug_assert!(false, "balancing did not converge");
    }

    /// A move from the most loaded member that has one.
    fn find_move(&self) -> Option<(usize, usize, TopicPartition)> {
        let fewest = self.assigned.iter().map(BTreeSet::len).min()?;
        let mut donors: Vec<usize> = (0..self.assigned.len()).collect();
        donors.sort_by_key(|&i| (Reverse(self.assigned[i].len()), i));
        donors
            .into_iter()
            .take_while(|&donor| self.assigned[donor].len() > fewest + 1)
            .find_map(|donor| self.move_from(donor))
    }

    /// The donor's best move: a partition it did not own before if it can
    /// (so owned ones stay put), to the least loaded member that can take it.
    fn move_from(&self, donor: usize) -> Option<(usize, usize, TopicPartition)> {
        let donor_count = self.assigned[donor].len();
        let held: Vec<&TopicPartition> = self.assigned[donor].iter().collect();
        let mut best: Option<((bool, usize, usize), &TopicPartition)> = None;
        for same_topic in held.chunk_by(|a, b| a.topic == b.topic) {
            let subscribers = &self.subscribers[same_topic[0].topic.as_str()];
            let recipient = subscribers
                .iter()
                .copied()
                .filter(|&i| i != donor && self.assigned[i].len() + 1 < donor_count)
                .min_by_key(|&i| (self.assigned[i].len(), i));
            let Some(recipient) = recipient else { continue };
            let not_owned = same_topic.iter().rev().find(|tp| !self.claims[donor].partitions.contains(tp));
            let (only_owned, tp) = match not_owned {
                Some(tp) => (false, *tp),
                None => (true, *same_topic.last().expect("chunks are not empty")),
            };
            let key = (only_owned, self.assigned[recipient].len(), recipient);
            if best.as_ref().is_none_or(|(best_key, _)| key < *best_key) {
                best = Some((key, tp));
            }
        }
        best.map(|((_, _, recipient), tp)| (donor, recipient, tp.clone()))
    }

    /// The cooperative rule: a partition another member claims is left out
    /// of its new owner's assignment until the claimant has revoked it.
    fn withhold_transfers(&mut self) {
        let mut claimants: BTreeMap<&TopicPartition, Vec<usize>> = BTreeMap::new();
        for (member, claim) in self.claims.iter().enumerate() {
            for tp in &claim.partitions {
                claimants.entry(tp).or_default().push(member);
            }
        }
        for (member, assigned) in self.assigned.iter_mut().enumerate() {
            assigned.retain(|tp| {
                let claimed_by_other =
                    claimants.get(tp).is_some_and(|owners| owners.iter().any(|&owner| owner != member));
                self.claims[member].partitions.contains(tp) || !claimed_by_other
            });
        }
    }

    fn into_assignments(self) -> BTreeMap<String, Assignment> {
        let lists = self.assigned.into_iter().map(|set| set.into_iter().collect()).collect();
        self.members.into_assignments(lists)
    }
}

/// Members in Java's order, with the subscribed topics the metadata knows.
struct MemberTopics<'a> {
    members: Vec<&'a Member>,
    topics: Vec<BTreeSet<&'a str>>,
}

impl<'a> MemberTopics<'a> {
    fn sorted(members: &'a [Member], partitions_per_topic: &BTreeMap<String, i32>) -> Self {
        let members: Vec<&Member> = java_member_order(members).into_iter().map(|i| &members[i]).collect();
        let topics = members
            .iter()
            .map(|member| {
                let topics = member.subscription.topics.iter().map(String::as_str);
                topics.filter(|topic| partitions_per_topic.contains_key(*topic)).collect()
            })
            .collect();
        Self { members, topics }
    }

    fn len(&self) -> usize {
        self.members.len()
    }

    fn subscribes(&self, member: usize, topic: &str) -> bool {
        self.topics[member].contains(topic)
    }

    /// One assignment per member, partitions sorted, from lists in member order.
    fn into_assignments(self, lists: Vec<Vec<TopicPartition>>) -> BTreeMap<String, Assignment> {
        self.members
            .into_iter()
            .zip(lists)
            .map(|(member, mut partitions)| {
                partitions.sort_unstable();
                (member.member_id.clone(), Assignment::new(partitions))
            })
            .collect()
    }
}

fn partition(topic: &str, partition: usize) -> TopicPartition {
    // Partition counts are i32, so every index below one fits.
    TopicPartition::new(topic, i32::try_from(partition).unwrap_or(i32::MAX))
}

/// Indices of `members` in Java's `MemberInfo` order: static members first,
/// by `group.instance.id`, then dynamic ones by member id.
fn java_member_order(members: &[Member]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&members[a], &members[b]);
        let by_instance = match (&a.group_instance_id, &b.group_instance_id) {
            (Some(a), Some(b)) => java_cmp(a, b),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        by_instance.then_with(|| java_cmp(&a.member_id, &b.member_id))
    });
    order
}

/// Java's `String.compareTo`: by UTF-16 code unit, which differs from
/// Rust's byte order for characters beyond the Basic Multilingual Plane.
fn java_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}
