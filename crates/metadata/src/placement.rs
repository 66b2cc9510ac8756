//! Replica placement: which brokers hold the replicas of new partitions.
//!
//! [`StripedReplicaPlacer`] is Kafka's striped, rack-aware placer, step for
//! step, so a Strom controller places replicas where a Kafka controller with
//! the same random sequence would:
//!
//! - the racks (brokers without a rack share one) are taken round robin from
//!   a random starting rack that moves on by one per partition, which gives
//!   the "striped" pattern; within a rack the brokers are taken round robin
//!   from a random start as well;
//! - the leader (first replica) is always an unfenced broker; a fenced broker
//!   is only taken as a follower, once its rack has no unfenced broker left
//!   for the partition; brokers in controlled shutdown are never used;
//! - after as many partitions as there are unfenced brokers, the racks and
//!   brokers are shuffled so that the same replica sets do not repeat.
//!
//! Without racks every run of as many partitions as unfenced brokers is led
//! by each of them once. With racks, spreading over racks comes first: as in
//! Kafka, leaders can then be uneven (one broker of a rack may lead each time
//! its rack does), and racks of unequal size get unequal shares.
//!
//! The randomness comes from a [`RandomSource`] drawn exactly as Kafka draws
//! from `java.util.Random`, so Kafka's own test sequences replay here.
//!
//! Manual assignments (CreateTopics and CreatePartitions with explicit broker
//! lists) are checked by [`validate_topic_assignments`] and
//! [`validate_new_partition_assignments`] with the rules, error codes and
//! messages of Kafka's `ReplicationControlManager`.
//!
//! Placement allocates one list per partition: the caller bounds the count
//! (`controller.max.partitions.per.request`) before asking.

use std::collections::BTreeMap;

use crate::controller::MetadataError;

/// Where a registered broker stands, as far as placement cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerState {
    /// Heartbeating and caught up: may lead new partitions.
    Unfenced,
    /// Registered but not (or no longer) heartbeating: may only follow.
    Fenced,
    /// Shutting down: gets no new replicas at all.
    ControlledShutdown,
}

/// A registered broker as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredBroker {
    pub id: i32,
    /// `broker.rack`, if set.
    pub rack: Option<String>,
    pub state: BrokerState,
}

impl RegisteredBroker {
    fn is_usable(&self) -> bool {
        self.state != BrokerState::ControlledShutdown
    }

    fn is_active(&self) -> bool {
        self.state == BrokerState::Unfenced
    }
}

/// A source of random 64-bit words. Placement uses the top 31 bits of each
/// word as `java.util.Random` uses its `next(31)`.
pub trait RandomSource {
    fn next_u64(&mut self) -> u64;
}

/// SplitMix64: a tiny, well-mixed generator, reproducible from its seed.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }
}

impl RandomSource for SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A uniform index below `bound`, drawn as `java.util.Random::nextInt(bound)`
/// draws it (including its rejection of the biased top range), so that the
/// same words give Kafka's choices.
fn next_index(random: &mut impl RandomSource, bound: usize) -> usize {
    debug_assert!(bound > 0, "an index below 0 was asked for");
    let bound = i32::try_from(bound).unwrap_or(i32::MAX).max(1);
    let mut next31 = || (random.next_u64() >> 33) as i32;
    let max = bound - 1;
    let mut word = next31();
    if bound & max == 0 {
        return ((i64::from(bound) * i64::from(word)) >> 31) as usize;
    }
    // A rejection needs a word in the last, partial bucket of [0, 2^31): the
    // chance is below bound / 2^31 per draw, so the loop ends at once in practice.
    loop {
        let index = word % bound;
        if word.wrapping_sub(index).wrapping_add(max) >= 0 {
            return index as usize;
        }
        word = next31();
    }
}

/// Shuffles as `java.util.Collections::shuffle` does on a list.
fn shuffle<T>(items: &mut [T], random: &mut impl RandomSource) {
    for last in (1..items.len()).rev() {
        items.swap(last, next_index(random, last + 1));
    }
}

/// Brokers taken round robin from a random start, each at most once per
/// iteration epoch (one epoch per partition).
#[derive(Debug, Default)]
struct BrokerList {
    brokers: Vec<i32>,
    /// How many brokers this epoch has taken.
    taken: usize,
    /// Where this epoch's round starts.
    offset: usize,
    epoch: usize,
}

impl BrokerList {
    fn initialize(&mut self, random: &mut impl RandomSource) {
        if !self.brokers.is_empty() {
            self.brokers.sort_unstable();
            self.offset = next_index(random, self.brokers.len());
        }
    }

    /// The next broker of `epoch`, if it has any left. A new epoch starts a
    /// new round one position further on.
    fn next(&mut self, epoch: usize) -> Option<i32> {
        if self.brokers.is_empty() {
            return None;
        }
        if self.epoch != epoch {
            self.epoch = epoch;
            self.taken = 0;
            self.offset = (self.offset + 1) % self.brokers.len();
        }
        if self.taken >= self.brokers.len() {
            return None;
        }
        let broker = self.brokers[(self.taken + self.offset) % self.brokers.len()];
        self.taken += 1;
        Some(broker)
    }
}

/// One rack's brokers, unfenced ones kept apart so they are taken first.
#[derive(Debug, Default)]
struct Rack {
    fenced: BrokerList,
    unfenced: BrokerList,
}

impl Rack {
    fn initialize(&mut self, random: &mut impl RandomSource) {
        self.fenced.initialize(random);
        self.unfenced.initialize(random);
    }

    fn shuffle(&mut self, random: &mut impl RandomSource) {
        shuffle(&mut self.fenced.brokers, random);
        shuffle(&mut self.unfenced.brokers, random);
    }

    /// The next broker of `epoch`: an unfenced one while any is left.
    fn next(&mut self, epoch: usize) -> Option<i32> {
        self.unfenced.next(epoch).or_else(|| self.fenced.next(epoch))
    }
}

/// The racks of the usable brokers, taken round robin; the state of one
/// placement request.
#[derive(Debug)]
struct RackList {
    /// By rack name, no rack first. Initializing and shuffling draw random
    /// numbers rack by rack in this order, where Kafka draws them in its
    /// hash map's order: the same for the racks of Kafka's tests, and
    /// otherwise only a different draw for each rack, not a different
    /// algorithm.
    racks: Vec<Rack>,
    /// The round-robin order: indexes into `racks`, by name at first.
    order: Vec<usize>,
    total_brokers: usize,
    unfenced_brokers: usize,
    epoch: usize,
    /// Where the next partition's rack round starts, in `order`.
    offset: usize,
}

impl RackList {
    fn new(brokers: &[RegisteredBroker], random: &mut impl RandomSource) -> Self {
        let mut by_rack: BTreeMap<Option<&str>, Rack> = BTreeMap::new();
        let (mut total_brokers, mut unfenced_brokers) = (0, 0);
        for broker in brokers.iter().filter(|b| b.is_usable()) {
            let rack = by_rack.entry(broker.rack.as_deref()).or_default();
            let list = if broker.is_active() { &mut rack.unfenced } else { &mut rack.fenced };
            list.brokers.push(broker.id);
            total_brokers += 1;
            unfenced_brokers += usize::from(broker.is_active());
        }
        let mut racks: Vec<Rack> = by_rack.into_values().collect();
        for rack in &mut racks {
            rack.initialize(random);
        }
        let offset = if racks.is_empty() { 0 } else { next_index(random, racks.len()) };
        let order = (0..racks.len()).collect();
        Self { racks, order, total_brokers, unfenced_brokers, epoch: 0, offset }
    }

    /// The replicas of the next partition, leader first.
    fn place(
        &mut self,
        replication_factor: i32,
        random: &mut impl RandomSource,
    ) -> Result<Vec<i32>, MetadataError> {
        check_positive(replication_factor)?;
        check_enough_brokers(replication_factor, self.total_brokers)?;
        check_any_unfenced(self.unfenced_brokers)?;
        // After as many partitions as unfenced brokers, reshuffle so the same
        // sets do not come round again; with a single unfenced broker every
        // epoch must stay new, or its list would stay used up.
        if self.epoch == self.unfenced_brokers && self.unfenced_brokers > 1 {
            self.shuffle(random);
            self.epoch = 0;
        }
        if self.offset == self.order.len() {
            self.offset = 0;
        }
        // Kafka searches until it finds an unfenced broker; one is always
        // left, since the last partition's leader list starts a new round in
        // this epoch. The bound turns a broken invariant into an error.
        let count = self.order.len();
        let (leader_index, leader) = (0..count)
            .map(|step| (self.offset + step) % count)
            .find_map(|index| self.racks[self.order[index]].unfenced.next(self.epoch).map(|b| (index, b)))
            .ok_or_else(all_fenced)?;
        let mut replicas = Vec::with_capacity(replication_factor as usize);
        replicas.push(leader);
        // Followers continue round robin from the partition's first rack,
        // passing over the leader's rack once.
        let mut rack_index = self.offset;
        let mut skip = Some(leader_index);
        for _ in 1..replication_factor {
            let follower = self
                .next_follower(&mut rack_index, &mut skip)
                .ok_or_else(|| too_few_brokers(replication_factor, self.total_brokers))?;
            replicas.push(follower);
        }
        self.epoch += 1;
        self.offset += 1;
        Ok(replicas)
    }

    /// The next broker from the racks from `rack_index` on. Every rack is
    /// tried once (twice for a skipped one) before giving up: a rack that
    /// had nothing left on one visit has nothing left on the next.
    fn next_follower(&mut self, rack_index: &mut usize, skip: &mut Option<usize>) -> Option<i32> {
        let count = self.order.len();
        for _ in 0..=count {
            let index = *rack_index;
            *rack_index = (index + 1) % count;
            if *skip == Some(index) {
                *skip = None;
                continue;
            }
            if let Some(broker) = self.racks[self.order[index]].next(self.epoch) {
                return Some(broker);
            }
        }
        None
    }

    fn shuffle(&mut self, random: &mut impl RandomSource) {
        shuffle(&mut self.order, random);
        for rack in &mut self.racks {
            rack.shuffle(random);
        }
    }
}

fn check_positive(replication_factor: i32) -> Result<(), MetadataError> {
    if replication_factor <= 0 {
        return Err(MetadataError::InvalidReplicationFactor(format!(
            "Invalid replication factor {replication_factor}: the replication factor must be positive."
        )));
    }
    Ok(())
}

fn check_enough_brokers(replication_factor: i32, total_brokers: usize) -> Result<(), MetadataError> {
    if replication_factor as usize > total_brokers {
        return Err(too_few_brokers(replication_factor, total_brokers));
    }
    Ok(())
}

fn too_few_brokers(replication_factor: i32, total_brokers: usize) -> MetadataError {
    MetadataError::InvalidReplicationFactor(format!(
        "The target replication factor of {replication_factor} cannot be reached because only \
         {total_brokers} broker(s) are registered."
    ))
}

fn check_any_unfenced(unfenced_brokers: usize) -> Result<(), MetadataError> {
    if unfenced_brokers == 0 {
        return Err(all_fenced());
    }
    Ok(())
}

fn all_fenced() -> MetadataError {
    MetadataError::InvalidReplicationFactor("All brokers are currently fenced.".into())
}

/// Kafka's striped replica placer. It keeps its random source across
/// requests, as the controller keeps one placer.
#[derive(Debug)]
pub struct StripedReplicaPlacer<R = SplitMix64> {
    random: R,
}

impl<R: RandomSource> StripedReplicaPlacer<R> {
    pub fn new(random: R) -> Self {
        Self { random }
    }

    /// Replicas for `partitions` new partitions, leader first, over the
    /// usable `brokers`. CreatePartitions reports its errors as they are.
    pub fn place(
        &mut self,
        brokers: &[RegisteredBroker],
        partitions: usize,
        replication_factor: i16,
    ) -> Result<Vec<Vec<i32>>, MetadataError> {
        let replication_factor = i32::from(replication_factor);
        let mut racks = RackList::new(brokers, &mut self.random);
        check_positive(replication_factor)?;
        check_any_unfenced(racks.unfenced_brokers)?;
        check_enough_brokers(replication_factor, racks.total_brokers)?;
        (0..partitions).map(|_| racks.place(replication_factor, &mut self.random)).collect()
    }

    /// [`place`](Self::place) for CreateTopics, whose messages say which
    /// replication factor could not be met.
    pub fn place_topic(
        &mut self,
        brokers: &[RegisteredBroker],
        partitions: usize,
        replication_factor: i16,
    ) -> Result<Vec<Vec<i32>>, MetadataError> {
        self.place(brokers, partitions, replication_factor).map_err(|e| match e {
            MetadataError::InvalidReplicationFactor(reason) => MetadataError::InvalidReplicationFactor(
                format!("Unable to replicate the partition {replication_factor} time(s): {reason}"),
            ),
            other => other,
        })
    }
}

/// The manual assignments of a CreateTopics topic, given as (partition index,
/// broker ids), checked as Kafka checks them; the replica lists by partition.
/// The caller has already refused a partition count or replication factor
/// other than -1 beside them (INVALID_REQUEST); a topic without assignments
/// is placed by [`StripedReplicaPlacer::place_topic`] instead.
pub fn validate_topic_assignments(
    brokers: &[RegisteredBroker],
    assignments: &[(i32, Vec<i32>)],
) -> Result<Vec<Vec<i32>>, MetadataError> {
    let registered = by_id(brokers);
    let mut partitions: BTreeMap<i32, &[i32]> = BTreeMap::new();
    let mut replication_factor = None;
    for (partition, replicas) in assignments {
        if partitions.contains_key(partition) {
            return Err(invalid_assignment(format!(
                "Found multiple manual partition assignments for partition {partition}"
            )));
        }
        validate_manual_replicas(&registered, replicas, replication_factor)?;
        replication_factor = Some(replicas.len());
        check_any_active(&registered, replicas, *partition)?;
        partitions.insert(*partition, replicas);
    }
    // The indexes are distinct, so they are 0..n exactly when they are
    // 0..n in order.
    if partitions.keys().enumerate().any(|(expected, index)| i64::from(*index) != expected as i64) {
        return Err(invalid_assignment("partitions should be a consecutive 0-based integer sequence".into()));
    }
    Ok(partitions.into_values().map(<[i32]>::to_vec).collect())
}

/// The manual assignments of CreatePartitions: one broker list per new
/// partition (numbered from `first_partition`), each as long as the topic's
/// replication factor.
pub fn validate_new_partition_assignments(
    brokers: &[RegisteredBroker],
    first_partition: i32,
    additional: i32,
    replication_factor: usize,
    assignments: &[Vec<i32>],
) -> Result<(), MetadataError> {
    if i64::from(additional) != assignments.len() as i64 {
        return Err(invalid_assignment(format!(
            "Attempted to add {additional} additional partition(s), but only {} assignment(s) \
             were specified.",
            assignments.len()
        )));
    }
    let registered = by_id(brokers);
    for (partition, replicas) in (i64::from(first_partition)..).zip(assignments) {
        validate_manual_replicas(&registered, replicas, Some(replication_factor))?;
        check_any_active(&registered, replicas, partition)?;
    }
    Ok(())
}

/// A reassignment's target replicas (KIP-455): not empty, registered
/// brokers only, each once.
pub fn validate_reassignment_replicas(
    brokers: &[RegisteredBroker],
    replicas: &[i32],
) -> Result<(), MetadataError> {
    validate_manual_replicas(&by_id(brokers), replicas, None)
}

fn by_id(brokers: &[RegisteredBroker]) -> BTreeMap<i32, &RegisteredBroker> {
    brokers.iter().map(|broker| (broker.id, broker)).collect()
}

/// One partition's broker list: not empty, registered brokers only, each
/// once, as long as the other partitions' lists.
fn validate_manual_replicas(
    registered: &BTreeMap<i32, &RegisteredBroker>,
    replicas: &[i32],
    replication_factor: Option<usize>,
) -> Result<(), MetadataError> {
    if replicas.is_empty() {
        return Err(invalid_assignment(
            "The manual partition assignment includes an empty replica list.".into(),
        ));
    }
    // Sorted, as Kafka reports the lowest offending id first.
    let mut sorted = replicas.to_vec();
    sorted.sort_unstable();
    let mut previous = None;
    for broker in sorted {
        if !registered.contains_key(&broker) {
            return Err(invalid_assignment(format!(
                "The manual partition assignment includes broker {broker}, but no such broker is \
                 registered."
            )));
        }
        if previous == Some(broker) {
            return Err(invalid_assignment(format!(
                "The manual partition assignment includes the broker {broker} more than once."
            )));
        }
        previous = Some(broker);
    }
    match replication_factor {
        Some(expected) if expected != replicas.len() => Err(invalid_assignment(format!(
            "The manual partition assignment includes a partition with {} replica(s), but this is \
             not consistent with previous partitions, which have {expected} replica(s).",
            replicas.len()
        ))),
        _ => Ok(()),
    }
}

/// A partition needs one replica that can join its ISR at once.
fn check_any_active(
    registered: &BTreeMap<i32, &RegisteredBroker>,
    replicas: &[i32],
    partition: impl std::fmt::Display,
) -> Result<(), MetadataError> {
    if replicas.iter().any(|id| registered.get(id).is_some_and(|b| b.is_active())) {
        return Ok(());
    }
    Err(invalid_assignment(format!(
        "All brokers specified in the manual partition assignment for partition {partition} are \
         fenced or in controlled shutdown."
    )))
}

fn invalid_assignment(message: String) -> MetadataError {
    MetadataError::InvalidReplicaAssignment(message)
}

#[cfg(test)]
mod tests;
