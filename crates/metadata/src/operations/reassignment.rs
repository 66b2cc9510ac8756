//! Partition reassignments (KIP-455), as Kafka's `ReplicationControlManager`
//! runs them: a reassignment first writes the target replicas together
//! with the current ones (adding and removing replicas marked), the new
//! replicas' brokers create their logs and catch up, and the ISR change
//! that brings the last of them in sync also completes it (see
//! [`PartitionChange`]): the removed replicas leave the assignment and the
//! ISR, and a removed leader hands leadership to a replica that stays.

use uuid::Uuid;

use super::{
    default_directory, failover_election, is_active, placement_brokers, Election, ElectionDefaults,
    PartitionChange,
};
use crate::controller::MetadataError;
use crate::image::{MetadataImage, PartitionImage, TopicImage};
use crate::kraft_records::{MetadataRecord, PartitionChangeRecord};
use crate::placement::validate_reassignment_replicas;

/// One partition of an AlterPartitionReassignments request: its target
/// replicas, or `None` to cancel its reassignment.
pub type ReassignmentTarget = (i32, Option<Vec<i32>>);

/// One topic's outcome: per partition, `Ok` or why it was refused.
pub type TopicReassignments = (String, Vec<(i32, Result<(), MetadataError>)>);

/// A partition's ongoing reassignment, as ListPartitionReassignments
/// reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OngoingReassignment {
    pub partition: i32,
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

/// AlterPartitionReassignments: the records of the accepted changes and,
/// per named partition, whether it was accepted. Without
/// `allow_replication_factor_change` (KIP-860) a target must keep the
/// partition's replication factor.
pub fn alter_partition_reassignments(
    image: &MetadataImage,
    topics: &[(String, Vec<ReassignmentTarget>)],
    allow_replication_factor_change: bool,
    defaults: ElectionDefaults,
) -> (Vec<MetadataRecord>, Vec<TopicReassignments>) {
    let mut records = Vec::new();
    let outcomes = topics
        .iter()
        .map(|(name, partitions)| {
            let outcomes = partitions.iter().map(|(id, target)| {
                let outcome =
                    reassign(image, name, *id, target.as_deref(), allow_replication_factor_change, defaults)
                        .map(|record| records.extend(record.map(MetadataRecord::from)));
                (*id, outcome)
            });
            (name.clone(), outcomes.collect())
        })
        .collect();
    (records, outcomes)
}

/// One partition's reassignment or its cancellation (`target` `None`).
fn reassign(
    image: &MetadataImage,
    name: &str,
    id: i32,
    target: Option<&[i32]>,
    allow_replication_factor_change: bool,
    defaults: ElectionDefaults,
) -> Result<Option<PartitionChangeRecord>, MetadataError> {
    let topic = image.topic(name).ok_or(MetadataError::UnknownTopic)?;
    let partition = topic.partitions.get(&id).ok_or(MetadataError::UnknownTopic)?;
    match target {
        None => cancel(image, topic, id, partition, defaults),
        Some(target) => change(image, topic.id, id, partition, target, allow_replication_factor_change),
    }
}

/// Kafka's `changePartitionReassignment`: the target replicas first, then
/// the current ones leaving; a target that needs no new replica completes
/// at once.
fn change(
    image: &MetadataImage,
    topic_id: Uuid,
    id: i32,
    partition: &PartitionImage,
    target: &[i32],
    allow_replication_factor_change: bool,
) -> Result<Option<PartitionChangeRecord>, MetadataError> {
    validate_reassignment_replicas(&placement_brokers(image), target)?;
    // KIP-860 compares with the replicas the partition is headed for: an
    // ongoing reassignment's target.
    let headed_for = partition.replicas.len() - partition.removing_replicas.len();
    if !allow_replication_factor_change && headed_for != target.len() {
        return Err(MetadataError::InvalidReplicationFactor(format!(
            "The replication factor is changed from {headed_for} to {}",
            target.len()
        )));
    }
    // As Kafka, a reassignment over an ongoing one starts from all the
    // replicas the partition has now.
    let current = &partition.replicas;
    let removing = sorted_difference(current, target);
    let adding = sorted_difference(target, current);
    let mut replicas = target.to_vec();
    replicas.extend(&removing);
    let directory = |r: i32| default_directory(image, r);
    Ok(PartitionChange::new(topic_id, id, partition)
        .with_assignment(replicas, adding, removing, &directory)
        .build(|r| is_active(image, r)))
}

/// Kafka's `cancelPartitionReassignment` with `PartitionReassignmentRevert`:
/// the replicas being added leave, the ones being removed stay. When only
/// added replicas are in sync, reverting needs an unclean election.
fn cancel(
    image: &MetadataImage,
    topic: &TopicImage,
    id: i32,
    partition: &PartitionImage,
    defaults: ElectionDefaults,
) -> Result<Option<PartitionChangeRecord>, MetadataError> {
    if !partition.is_reassigning() {
        return Err(MetadataError::NoReassignmentInProgress);
    }
    let replicas = original_replicas(partition);
    let mut isr: Vec<i32> =
        partition.isr.iter().copied().filter(|r| !partition.adding_replicas.contains(r)).collect();
    let election = failover_election(image, topic, defaults);
    if isr.is_empty() {
        if election != Election::Unclean {
            return Err(MetadataError::InvalidReplicaAssignment(format!(
                "Unable to revert partition assignment for {}:{id} because it would require an \
                 unclean leader election.",
                topic.name
            )));
        }
        isr.extend(replicas.first());
    }
    let directory = |r: i32| default_directory(image, r);
    Ok(PartitionChange::new(topic.id, id, partition)
        .with_election(election)
        .with_target_isr(isr)
        .with_assignment(replicas, Vec::new(), Vec::new(), &directory)
        .build(|r| is_active(image, r)))
}

/// The replicas a partition had before its ongoing reassignment, if any.
fn original_replicas(partition: &PartitionImage) -> Vec<i32> {
    partition.replicas.iter().copied().filter(|r| !partition.adding_replicas.contains(r)).collect()
}

/// The members of `a` not in `b`, ascending, as Kafka's `TreeSet` orders them.
fn sorted_difference(a: &[i32], b: &[i32]) -> Vec<i32> {
    let mut difference: Vec<i32> = a.iter().copied().filter(|r| !b.contains(r)).collect();
    difference.sort_unstable();
    difference.dedup();
    difference
}

/// ListPartitionReassignments: the ongoing reassignments of the named
/// partitions (unknown topics and partitions are left out), or of every
/// partition when `topics` is `None`. Topics without one are left out.
pub fn list_partition_reassignments(
    image: &MetadataImage,
    topics: Option<&[(String, Vec<i32>)]>,
) -> Vec<(String, Vec<OngoingReassignment>)> {
    let ongoing = |topic: &TopicImage, ids: &mut dyn Iterator<Item = i32>| {
        let found: Vec<OngoingReassignment> = ids
            .filter_map(|id| {
                let p = topic.partitions.get(&id).filter(|p| p.is_reassigning())?;
                Some(OngoingReassignment {
                    partition: id,
                    replicas: p.replicas.clone(),
                    adding: p.adding_replicas.clone(),
                    removing: p.removing_replicas.clone(),
                })
            })
            .collect();
        (!found.is_empty()).then(|| (topic.name.clone(), found))
    };
    match topics {
        None => image.topics().filter_map(|t| ongoing(t, &mut t.partitions.keys().copied())).collect(),
        Some(named) => named
            .iter()
            .filter_map(|(name, ids)| ongoing(image.topic(name)?, &mut ids.iter().copied()))
            .collect(),
    }
}
