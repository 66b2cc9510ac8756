//! Kafka's `StripedReplicaPlacerTest` cases with Kafka's own test random
//! sequence (so the expected placements are Kafka's), the manual assignment
//! rules, and properties of the placer over random clusters.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

/// Kafka's `MockRandom` (seed 17): a linear congruential sequence whose
/// words, drawn as `java.util.Random` draws them, give the placements
/// Kafka's tests expect.
struct KafkaMockRandom {
    state: u64,
}

impl KafkaMockRandom {
    fn new() -> Self {
        Self { state: 17 }
    }
}

impl RandomSource for KafkaMockRandom {
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(3_037_000_493);
        self.state
    }
}

fn broker(id: i32, rack: Option<&str>, state: BrokerState) -> RegisteredBroker {
    RegisteredBroker { id, rack: rack.map(str::to_owned), state }
}

fn unfenced(id: i32) -> RegisteredBroker {
    broker(id, None, BrokerState::Unfenced)
}

fn fenced(id: i32) -> RegisteredBroker {
    broker(id, None, BrokerState::Fenced)
}

fn in_rack(id: i32, rack: &str, is_fenced: bool) -> RegisteredBroker {
    let state = if is_fenced { BrokerState::Fenced } else { BrokerState::Unfenced };
    broker(id, Some(rack), state)
}

fn message(result: Result<impl std::fmt::Debug, MetadataError>) -> String {
    match result.expect_err("placement should have been refused") {
        MetadataError::InvalidReplicationFactor(message) => format!("INVALID_REPLICATION_FACTOR {message}"),
        MetadataError::InvalidReplicaAssignment(message) => format!("INVALID_REPLICA_ASSIGNMENT {message}"),
        other => format!("unexpected error {other:?}"),
    }
}

/// A rack list over `brokers` with Kafka's test randomness, and that randomness.
fn rack_list(brokers: &[RegisteredBroker]) -> (RackList, KafkaMockRandom) {
    let mut random = KafkaMockRandom::new();
    let racks = RackList::new(brokers, &mut random);
    (racks, random)
}

fn place_kafka(
    brokers: &[RegisteredBroker],
    partitions: usize,
    replication_factor: i16,
) -> Result<Vec<Vec<i32>>, MetadataError> {
    StripedReplicaPlacer::new(KafkaMockRandom::new()).place(brokers, partitions, replication_factor)
}

#[test]
fn broker_list_takes_each_broker_once_per_epoch_starting_one_further_each_epoch() {
    let mut empty = BrokerList::default();
    assert_eq!(empty.next(1), None);
    let mut brokers = BrokerList { brokers: vec![0, 1, 2, 3], ..BrokerList::default() };
    let epoch0: Vec<_> = (0..6).map(|_| brokers.next(0)).collect();
    assert_eq!(epoch0, [Some(0), Some(1), Some(2), Some(3), None, None]);
    let epoch1: Vec<_> = (0..5).map(|_| brokers.next(1)).collect();
    assert_eq!(epoch1, [Some(1), Some(2), Some(3), Some(0), None]);
}

#[test]
fn avoids_the_fenced_broker_on_a_single_rack_when_it_can() {
    let (mut racks, mut random) = rack_list(&[unfenced(3), fenced(1), unfenced(0), unfenced(4), unfenced(2)]);
    assert_eq!((racks.total_brokers, racks.unfenced_brokers, racks.racks.len()), (5, 4, 1));
    assert!(racks.place(0, &mut random).is_err());
    assert!(racks.place(-1, &mut random).is_err());
    let placed: Vec<_> = (0..5).map(|_| racks.place(4, &mut random).unwrap()).collect();
    assert_eq!(placed, [[3, 4, 0, 2], [4, 0, 2, 3], [0, 2, 3, 4], [2, 3, 4, 0], [0, 4, 3, 2]]);
}

#[test]
fn many_partitions_on_a_single_unfenced_broker() {
    assert_eq!(place_kafka(&[unfenced(0), fenced(1)], 3, 1).unwrap(), [[0], [0], [0]]);
}

#[test]
fn uses_the_fenced_broker_as_a_follower_when_it_must() {
    let (mut racks, mut random) = rack_list(&[unfenced(3), fenced(1), unfenced(2)]);
    assert_eq!((racks.total_brokers, racks.unfenced_brokers), (3, 2));
    let placed: Vec<_> = (0..4).map(|_| racks.place(3, &mut random).unwrap()).collect();
    assert_eq!(placed, [[3, 2, 1], [2, 3, 1], [3, 2, 1], [2, 3, 1]]);
}

#[test]
fn stripes_over_several_racks() {
    let (mut racks, mut random) = rack_list(&[
        in_rack(11, "1", false),
        in_rack(10, "1", false),
        in_rack(30, "3", false),
        in_rack(31, "3", false),
        in_rack(21, "2", false),
        in_rack(20, "2", true),
    ]);
    assert_eq!((racks.total_brokers, racks.unfenced_brokers, racks.racks.len()), (6, 5, 3));
    let placed: Vec<_> = (0..3).map(|_| racks.place(4, &mut random).unwrap()).collect();
    assert_eq!(placed, [[11, 21, 31, 10], [21, 30, 10, 20], [31, 11, 21, 30]]);
}

#[test]
fn racks_with_only_fenced_brokers_never_lead() {
    let (mut racks, mut random) = rack_list(&[
        in_rack(11, "1", false),
        in_rack(10, "1", false),
        in_rack(30, "3", true),
        in_rack(31, "3", true),
        in_rack(20, "2", true),
        in_rack(21, "2", true),
        in_rack(41, "4", false),
        in_rack(40, "4", true),
    ]);
    assert_eq!((racks.total_brokers, racks.unfenced_brokers, racks.racks.len()), (8, 3, 4));
    let placed: Vec<_> = (0..3).map(|_| racks.place(4, &mut random).unwrap()).collect();
    assert_eq!(placed, [[41, 11, 21, 30], [10, 20, 31, 41], [41, 21, 30, 11]]);
}

#[test]
fn refuses_when_every_broker_is_fenced() {
    let brokers = [in_rack(11, "1", true), in_rack(10, "1", true)];
    assert_eq!(
        message(place_kafka(&brokers, 1, 1)),
        "INVALID_REPLICATION_FACTOR All brokers are currently fenced."
    );
    // The placer looks for an unfenced broker before counting brokers.
    assert_eq!(
        message(place_kafka(&[fenced(0), fenced(1)], 1, 3)),
        "INVALID_REPLICATION_FACTOR All brokers are currently fenced."
    );
    let (mut racks, mut random) = rack_list(&[fenced(0), fenced(1), fenced(2)]);
    assert_eq!(
        message(racks.place(3, &mut random)),
        "INVALID_REPLICATION_FACTOR All brokers are currently fenced."
    );
}

#[test]
fn refuses_a_replication_factor_above_the_registered_brokers() {
    let brokers = [in_rack(11, "1", false), in_rack(10, "1", false)];
    let expected = "INVALID_REPLICATION_FACTOR The target replication factor of 3 cannot be reached because \
                    only 2 broker(s) are registered.";
    assert_eq!(message(place_kafka(&brokers, 1, 3)), expected);
    let (mut racks, mut random) = rack_list(&brokers);
    assert_eq!(message(racks.place(3, &mut random)), expected);
}

#[test]
fn refuses_a_replication_factor_below_one() {
    let brokers = [in_rack(11, "1", false), in_rack(10, "1", false)];
    assert_eq!(
        message(place_kafka(&brokers, 1, 0)),
        "INVALID_REPLICATION_FACTOR Invalid replication factor 0: the replication factor must be positive."
    );
    let (mut racks, mut random) = rack_list(&brokers);
    assert_eq!(
        message(racks.place(-1, &mut random)),
        "INVALID_REPLICATION_FACTOR Invalid replication factor -1: the replication factor must be positive."
    );
}

#[test]
fn places_a_topic_as_kafka_does() {
    let placed = place_kafka(&[unfenced(0), unfenced(3), unfenced(2), unfenced(1)], 5, 3).unwrap();
    assert_eq!(placed, [[2, 3, 0], [3, 0, 1], [0, 1, 2], [1, 2, 3], [1, 0, 2]]);
}

#[test]
fn spreads_replica_sets_as_kafka_does() {
    let placed = place_kafka(&[unfenced(0), unfenced(1), unfenced(2), unfenced(3)], 200, 2).unwrap();
    let mut counts: BTreeMap<Vec<i32>, usize> = BTreeMap::new();
    for replicas in placed {
        *counts.entry(replicas).or_default() += 1;
    }
    let expected = [
        ([0, 1], 14),
        ([0, 2], 22),
        ([0, 3], 14),
        ([1, 0], 17),
        ([1, 2], 17),
        ([1, 3], 16),
        ([2, 0], 13),
        ([2, 1], 17),
        ([2, 3], 20),
        ([3, 0], 20),
        ([3, 1], 19),
        ([3, 2], 11),
    ];
    let expected: BTreeMap<Vec<i32>, usize> = expected.into_iter().map(|(r, n)| (r.to_vec(), n)).collect();
    assert_eq!(counts, expected);
}

#[test]
fn brokers_in_controlled_shutdown_get_no_replicas() {
    let brokers = [unfenced(0), broker(1, None, BrokerState::ControlledShutdown), unfenced(2)];
    let placed = place_kafka(&brokers, 10, 2).unwrap();
    assert!(placed.iter().flatten().all(|id| *id != 1), "{placed:?}");
    assert!(place_kafka(&brokers, 1, 3).is_err());
}

#[test]
fn create_topics_messages_name_the_replication_factor() {
    let mut placer = StripedReplicaPlacer::new(SplitMix64::new(7));
    assert_eq!(
        message(placer.place_topic(&[unfenced(0)], 1, 2)),
        "INVALID_REPLICATION_FACTOR Unable to replicate the partition 2 time(s): The target replication factor \
         of 2 cannot be reached because only 1 broker(s) are registered."
    );
    assert_eq!(
        message(placer.place_topic(&[fenced(0)], 1, 1)),
        "INVALID_REPLICATION_FACTOR Unable to replicate the partition 1 time(s): All brokers are currently fenced."
    );
}

fn cluster() -> Vec<RegisteredBroker> {
    vec![unfenced(1), unfenced(2), fenced(3), broker(4, None, BrokerState::ControlledShutdown)]
}

fn topic_assignments(assignments: &[(i32, &[i32])]) -> Result<Vec<Vec<i32>>, MetadataError> {
    let owned: Vec<(i32, Vec<i32>)> = assignments.iter().map(|(p, r)| (*p, r.to_vec())).collect();
    validate_topic_assignments(&cluster(), &owned)
}

#[test]
fn manual_topic_assignments_come_back_in_partition_order() {
    let replicas = topic_assignments(&[(1, &[2, 3]), (0, &[3, 1]), (2, &[4, 1])]).unwrap();
    assert_eq!(replicas, [vec![3, 1], vec![2, 3], vec![4, 1]]);
}

#[test]
fn manual_topic_assignments_follow_kafkas_rules() {
    let refused = |assignments: &[(i32, &[i32])]| message(topic_assignments(assignments));
    assert_eq!(
        refused(&[(0, &[1]), (0, &[2])]),
        "INVALID_REPLICA_ASSIGNMENT Found multiple manual partition assignments for partition 0"
    );
    assert_eq!(
        refused(&[(0, &[])]),
        "INVALID_REPLICA_ASSIGNMENT The manual partition assignment includes an empty replica list."
    );
    assert_eq!(
        refused(&[(0, &[9, 1, 7])]),
        "INVALID_REPLICA_ASSIGNMENT The manual partition assignment includes broker 7, but no such broker \
         is registered."
    );
    assert_eq!(
        refused(&[(0, &[2, 1, 2])]),
        "INVALID_REPLICA_ASSIGNMENT The manual partition assignment includes the broker 2 more than once."
    );
    assert_eq!(
        refused(&[(0, &[1, 2]), (1, &[1])]),
        "INVALID_REPLICA_ASSIGNMENT The manual partition assignment includes a partition with 1 replica(s), \
         but this is not consistent with previous partitions, which have 2 replica(s)."
    );
    assert_eq!(
        refused(&[(0, &[3, 4])]),
        "INVALID_REPLICA_ASSIGNMENT All brokers specified in the manual partition assignment for partition 0 \
         are fenced or in controlled shutdown."
    );
    let gap = "INVALID_REPLICA_ASSIGNMENT partitions should be a consecutive 0-based integer sequence";
    assert_eq!(refused(&[(0, &[1]), (2, &[2])]), gap);
    assert_eq!(refused(&[(1, &[1])]), gap);
    assert_eq!(refused(&[(-1, &[1])]), gap);
    assert_eq!(refused(&[(0, &[1]), (i32::MAX, &[2])]), gap);
}

#[test]
fn manual_partition_assignments_follow_kafkas_rules() {
    let refused = |additional: i32, assignments: &[&[i32]]| {
        let owned: Vec<Vec<i32>> = assignments.iter().map(|r| r.to_vec()).collect();
        message(validate_new_partition_assignments(&cluster(), 3, additional, 2, &owned))
    };
    assert_eq!(
        refused(2, &[&[1, 2]]),
        "INVALID_REPLICA_ASSIGNMENT Attempted to add 2 additional partition(s), but only 1 assignment(s) \
         were specified."
    );
    assert_eq!(
        refused(1, &[&[1]]),
        "INVALID_REPLICA_ASSIGNMENT The manual partition assignment includes a partition with 1 replica(s), \
         but this is not consistent with previous partitions, which have 2 replica(s)."
    );
    assert_eq!(
        refused(2, &[&[1, 2], &[3, 4]]),
        "INVALID_REPLICA_ASSIGNMENT All brokers specified in the manual partition assignment for partition 4 \
         are fenced or in controlled shutdown."
    );
    assert_eq!(
        refused(1, &[&[1, 8]]),
        "INVALID_REPLICA_ASSIGNMENT The manual partition assignment includes broker 8, but no such broker \
         is registered."
    );
    let owned = vec![vec![2, 3], vec![1, 4]];
    assert!(validate_new_partition_assignments(&cluster(), 3, 2, 2, &owned).is_ok());
}

/// A cluster of up to 12 brokers, each with one of 4 racks (or none: all or
/// nothing, as `broker.rack` must be set everywhere or nowhere) and a state.
fn arb_cluster() -> impl Strategy<Value = Vec<RegisteredBroker>> {
    let state = prop_oneof![
        6 => Just(BrokerState::Unfenced),
        2 => Just(BrokerState::Fenced),
        1 => Just(BrokerState::ControlledShutdown),
    ];
    (any::<bool>(), proptest::collection::vec((0..4u8, state), 1..12)).prop_map(|(racked, brokers)| {
        brokers
            .into_iter()
            .enumerate()
            .map(|(id, (rack, state))| RegisteredBroker {
                id: id as i32 * 10,
                rack: racked.then(|| format!("rack-{rack}")),
                state,
            })
            .collect()
    })
}

fn usable(brokers: &[RegisteredBroker]) -> BTreeMap<i32, &RegisteredBroker> {
    brokers.iter().filter(|b| b.is_usable()).map(|b| (b.id, b)).collect()
}

proptest! {
    #[test]
    fn placement_succeeds_exactly_when_kafka_allows_it_and_uses_each_broker_once(
        brokers in arb_cluster(), partitions in 1..40usize, replication_factor in 1..7i16, seed: u64,
    ) {
        let usable = usable(&brokers);
        let any_unfenced = usable.values().any(|b| b.is_active());
        let placed = StripedReplicaPlacer::new(SplitMix64::new(seed)).place(&brokers, partitions, replication_factor);
        let allowed = any_unfenced && replication_factor as usize <= usable.len();
        prop_assert_eq!(placed.is_ok(), allowed, "{:?}", placed);
        let Ok(placed) = placed else { return Ok(()) };
        prop_assert_eq!(placed.len(), partitions);
        for replicas in &placed {
            let distinct: BTreeSet<_> = replicas.iter().collect();
            prop_assert_eq!(distinct.len(), replication_factor as usize, "{:?}", replicas);
            prop_assert!(replicas.iter().all(|id| usable.contains_key(id)), "{:?}", replicas);
            prop_assert!(usable[&replicas[0]].is_active(), "fenced leader in {:?}", replicas);
        }
    }

    #[test]
    fn without_racks_fenced_brokers_are_used_only_when_unfenced_ones_run_out(
        brokers in arb_cluster(), partitions in 1..40usize, replication_factor in 1..7i16, seed: u64,
    ) {
        let brokers: Vec<RegisteredBroker> = brokers.into_iter().map(|b| RegisteredBroker { rack: None, ..b }).collect();
        let usable = usable(&brokers);
        let unfenced_count = usable.values().filter(|b| b.is_active()).count();
        let mut placer = StripedReplicaPlacer::new(SplitMix64::new(seed));
        let Ok(placed) = placer.place(&brokers, partitions, replication_factor) else { return Ok(()) };
        for replicas in &placed {
            let unfenced_replicas = replicas.iter().filter(|id| usable[*id].is_active()).count();
            prop_assert_eq!(unfenced_replicas, unfenced_count.min(replication_factor as usize), "{:?}", replicas);
        }
    }

    #[test]
    fn each_partition_spans_as_many_racks_as_it_can(
        brokers in arb_cluster(), partitions in 1..40usize, replication_factor in 1..7i16, seed: u64,
    ) {
        let usable = usable(&brokers);
        let racks: BTreeSet<_> = usable.values().map(|b| &b.rack).collect();
        let mut placer = StripedReplicaPlacer::new(SplitMix64::new(seed));
        let Ok(placed) = placer.place(&brokers, partitions, replication_factor) else { return Ok(()) };
        for replicas in &placed {
            let spanned: BTreeSet<_> = replicas.iter().map(|id| &usable[id].rack).collect();
            prop_assert_eq!(spanned.len(), racks.len().min(replication_factor as usize), "{:?}", replicas);
        }
    }

    #[test]
    fn leaders_spread_evenly_over_the_unfenced_brokers_of_one_rack(
        brokers in arb_cluster(), partitions in 1..60usize, replication_factor in 1..4i16, seed: u64,
    ) {
        let brokers: Vec<RegisteredBroker> = brokers.into_iter().map(|b| RegisteredBroker { rack: None, ..b }).collect();
        let leaders: Vec<i32> = brokers.iter().filter(|b| b.is_active()).map(|b| b.id).collect();
        let mut placer = StripedReplicaPlacer::new(SplitMix64::new(seed));
        let Ok(placed) = placer.place(&brokers, partitions, replication_factor) else { return Ok(()) };
        let mut led: BTreeMap<i32, usize> = leaders.iter().map(|id| (*id, 0)).collect();
        for replicas in &placed {
            *led.get_mut(&replicas[0]).expect("leader is an unfenced broker") += 1;
        }
        // Every run of as many partitions as unfenced brokers leads on each once.
        let fewest = led.values().min().copied().unwrap_or(0);
        let most = led.values().max().copied().unwrap_or(0);
        prop_assert!(most - fewest <= 1, "{:?}", led);
    }

    #[test]
    fn the_same_seed_gives_the_same_placement(
        brokers in arb_cluster(), partitions in 1..40usize, replication_factor in 1..7i16, seed: u64,
    ) {
        let mut first = StripedReplicaPlacer::new(SplitMix64::new(seed));
        let mut second = StripedReplicaPlacer::new(SplitMix64::new(seed));
        for _ in 0..3 {
            prop_assert_eq!(
                format!("{:?}", first.place(&brokers, partitions, replication_factor)),
                format!("{:?}", second.place(&brokers, partitions, replication_factor))
            );
        }
    }
}
