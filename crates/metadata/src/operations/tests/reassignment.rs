//! Partition reassignments (KIP-455): start, completion by the ISR change
//! that brings the new replicas in sync, cancellation and listing.

use super::election::isr_change;
use super::*;

/// Four live brokers and topic "t" with one partition on [1, 2]; returns
/// the brokers' epochs.
fn two_of_four(world: &mut World) -> Vec<i64> {
    let epochs = world.live_brokers(&[None, None, None, None]);
    world.create_assigned("t", vec![1, 2], BTreeMap::new());
    epochs
}

impl World {
    fn reassign(&mut self, id: i32, target: Option<Vec<i32>>) -> Result<(), MetadataError> {
        let topics = [("t".to_owned(), vec![(id, target)])];
        let (records, mut outcomes) =
            alter_partition_reassignments(&self.image, &topics, true, ElectionDefaults::default());
        self.apply(records);
        outcomes.pop().unwrap().1.pop().unwrap().1
    }
}

#[test]
fn a_reassignment_adds_the_target_replicas_before_removing_the_old_ones() {
    let mut world = World::new();
    two_of_four(&mut world);
    world.reassign(0, Some(vec![3, 2])).unwrap();
    let p = world.partition("t");
    assert_eq!(p.replicas, vec![3, 2, 1]);
    assert_eq!((p.adding_replicas.as_slice(), p.removing_replicas.as_slice()), (&[3][..], &[1][..]));
    assert_eq!((p.leader, p.isr.as_slice()), (1, &[1, 2][..]));
    assert_eq!(p.directories, vec![Uuid::from_u128(1003), Uuid::from_u128(1002), Uuid::from_u128(1001)]);
    let listed = list_partition_reassignments(&world.image, None);
    let ongoing =
        OngoingReassignment { partition: 0, replicas: vec![3, 2, 1], adding: vec![3], removing: vec![1] };
    assert_eq!(listed, vec![("t".to_owned(), vec![ongoing])]);
}

#[test]
fn the_new_replica_joining_the_isr_completes_the_reassignment_and_moves_a_removed_leader() {
    let mut world = World::new();
    let epochs = two_of_four(&mut world);
    world.reassign(0, Some(vec![3, 2])).unwrap();
    let before = world.partition("t");
    let change = isr_change(&world, &[(1, epochs[0]), (2, epochs[1]), (3, epochs[2])]);
    // The leader is the replica being removed: it learns of its successor.
    assert!(matches!(world.alter(1, epochs[0], change), Err(MetadataError::NewLeaderElected)));
    let p = world.partition("t");
    assert_eq!((p.replicas.as_slice(), p.isr.as_slice(), p.leader), (&[3, 2][..], &[2, 3][..], 3));
    assert!(!p.is_reassigning());
    assert_eq!(p.leader_epoch, before.leader_epoch + 1);
    assert!(list_partition_reassignments(&world.image, None).is_empty());
}

#[test]
fn a_reassignment_waits_for_every_added_replica() {
    let mut world = World::new();
    let epochs = two_of_four(&mut world);
    world.reassign(0, Some(vec![3, 4])).unwrap();
    let change = isr_change(&world, &[(1, epochs[0]), (2, epochs[1]), (3, epochs[2])]);
    let p = world.alter(1, epochs[0], change).unwrap();
    assert_eq!((p.replicas.as_slice(), p.isr.as_slice()), (&[3, 4, 1, 2][..], &[1, 2, 3][..]));
    assert!(p.is_reassigning());
    let change = isr_change(&world, &[(1, epochs[0]), (2, epochs[1]), (3, epochs[2]), (4, epochs[3])]);
    assert!(matches!(world.alter(1, epochs[0], change), Err(MetadataError::NewLeaderElected)));
    let p = world.partition("t");
    assert_eq!((p.replicas.as_slice(), p.isr.as_slice(), p.leader), (&[3, 4][..], &[3, 4][..], 3));
}

#[test]
fn reordering_in_sync_replicas_completes_at_once_and_keeps_the_leader() {
    let mut world = World::new();
    two_of_four(&mut world);
    world.reassign(0, Some(vec![2, 1])).unwrap();
    let p = world.partition("t");
    assert_eq!((p.replicas.as_slice(), p.leader, p.is_reassigning()), (&[2, 1][..], 1, false));
}

#[test]
fn cancelling_reverts_to_the_original_replicas() {
    let mut world = World::new();
    let epochs = two_of_four(&mut world);
    world.reassign(0, Some(vec![3, 4])).unwrap();
    let change = isr_change(&world, &[(1, epochs[0]), (2, epochs[1]), (3, epochs[2])]);
    world.alter(1, epochs[0], change).unwrap();
    world.reassign(0, None).unwrap();
    let p = world.partition("t");
    assert_eq!((p.replicas.as_slice(), p.isr.as_slice(), p.leader), (&[1, 2][..], &[1, 2][..], 1));
    assert!(!p.is_reassigning());
    assert_eq!(p.directories, vec![Uuid::from_u128(1001), Uuid::from_u128(1002)]);
    assert!(matches!(world.reassign(0, None), Err(MetadataError::NoReassignmentInProgress)));
}

#[test]
fn bad_targets_get_kafkas_errors() {
    let mut world = World::new();
    two_of_four(&mut world);
    let invalid = |r| matches!(r, Err(MetadataError::InvalidReplicaAssignment(_)));
    assert!(invalid(world.reassign(0, Some(vec![3, 3]))));
    assert!(invalid(world.reassign(0, Some(vec![3, 9]))));
    assert!(invalid(world.reassign(0, Some(vec![]))));
    assert!(matches!(world.reassign(1, Some(vec![3])), Err(MetadataError::UnknownTopic)));
    let topics = [("missing".to_owned(), vec![(0, Some(vec![1]))])];
    let (records, outcomes) =
        alter_partition_reassignments(&world.image, &topics, true, ElectionDefaults::default());
    assert!(records.is_empty());
    assert!(matches!(outcomes[0].1[0].1, Err(MetadataError::UnknownTopic)));
    let topics = [("t".to_owned(), vec![(0, Some(vec![3]))])];
    let (records, outcomes) =
        alter_partition_reassignments(&world.image, &topics, false, ElectionDefaults::default());
    assert!(records.is_empty());
    assert!(matches!(outcomes[0].1[0].1, Err(MetadataError::InvalidReplicationFactor(_))));
    assert!(!world.partition("t").is_reassigning());
}

#[test]
fn listing_names_only_reassigning_partitions_of_known_topics() {
    let mut world = World::new();
    two_of_four(&mut world);
    world.reassign(0, Some(vec![3, 4])).unwrap();
    let named = [("t".to_owned(), vec![0, 5]), ("missing".to_owned(), vec![0])];
    let listed = list_partition_reassignments(&world.image, Some(&named));
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].1.iter().map(|o| o.partition).collect::<Vec<_>>(), vec![0]);
}

#[test]
fn a_kept_replication_factor_is_the_ongoing_reassignments_target() {
    let mut world = World::new();
    two_of_four(&mut world);
    world.reassign(0, Some(vec![3, 4])).unwrap();
    let keep = |world: &World, target: Vec<i32>| {
        let topics = [("t".to_owned(), vec![(0, Some(target))])];
        let (_, mut outcomes) =
            alter_partition_reassignments(&world.image, &topics, false, ElectionDefaults::default());
        outcomes.pop().unwrap().1.pop().unwrap().1
    };
    let refused = keep(&world, vec![3, 4, 1]);
    assert!(
        matches!(&refused, Err(MetadataError::InvalidReplicationFactor(m)) if m.ends_with("from 2 to 3")),
        "{refused:?}"
    );
    assert!(keep(&world, vec![1, 3]).is_ok());
}
