//! Eligible leader replicas (KIP-966): how the ELR and last known ELR
//! follow ISR changes, fencing, unclean restarts and elections.

use super::*;
use crate::controller::ELIGIBLE_LEADER_REPLICAS_FEATURE;

const TOPIC: &str = "t";

/// Three live brokers with ELR on and topic "t": one partition on
/// [1, 2, 3] with `min.insync.replicas` = `min_isr`; returns the epochs.
fn world_with_elr(min_isr: &str, extra: &[(&str, &str)]) -> (World, Vec<i64>) {
    let mut world = World::new();
    world.image.features.insert(ELIGIBLE_LEADER_REPLICAS_FEATURE.into(), 1);
    let epochs = world.live_brokers(&[None, None, None]);
    let mut configs = BTreeMap::from([(MIN_INSYNC_REPLICAS.to_owned(), min_isr.to_owned())]);
    configs.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let topic =
        NewTopic { name: TOPIC.into(), assignments: vec![(0, vec![1, 2, 3])], configs, ..Default::default() };
    let (records, _) = create_topic(&world.image, &topic, &mut world.placer, 10_000).unwrap();
    world.apply(records);
    (world, epochs)
}

impl World {
    fn part(&self) -> PartitionImage {
        self.image.topic(TOPIC).unwrap().partitions[&0].clone()
    }

    fn fence_id(&mut self, id: i32) {
        let broker = self.image.brokers[&id].clone();
        let records = fence(&self.image, &broker, ElectionDefaults::default());
        self.apply(records);
    }

    fn unfence_id(&mut self, id: i32) {
        let broker = self.image.brokers[&id].clone();
        let records = unfence(&self.image, &broker, ElectionDefaults::default());
        self.apply(records);
    }

    /// A new incarnation of `id` registering, after a clean shutdown at
    /// its registered epoch or after a crash.
    fn restart(&mut self, id: i32, clean: bool) {
        let mut request = Self::registration(id, None);
        request.incarnation_id = Uuid::new_v4();
        request.previous_broker_epoch = if clean { self.image.brokers[&id].epoch } else { -1 };
        let records = previous_incarnation_shutdown(&self.image, &request, ElectionDefaults::default());
        self.apply(records);
    }

    fn shrink_to(&mut self, leader: i32, isr: &[i32]) -> PartitionImage {
        let p = self.part();
        let change = IsrChange {
            topic_id: self.image.topic(TOPIC).unwrap().id,
            partition: 0,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: isr.iter().map(|r| (*r, -1)).collect(),
            leader_recovery_state: 0,
        };
        let epoch = self.image.brokers[&leader].epoch;
        let (records, mut results) =
            alter_partition(&self.image, leader, epoch, &[change], ElectionDefaults::default()).unwrap();
        self.apply(records);
        results.pop().unwrap().unwrap()
    }
}

fn state(p: &PartitionImage) -> (i32, Vec<i32>, Vec<i32>, Vec<i32>) {
    (p.leader, p.isr.clone(), p.elr.clone(), p.last_known_elr.clone())
}

#[test]
fn replicas_leaving_an_isr_below_min_isr_become_eligible_leaders() {
    let (mut world, _) = world_with_elr("2", &[]);
    // At min ISR nothing is eligible: the ISR holds every committed record.
    world.shrink_to(1, &[1, 2]);
    assert_eq!(state(&world.part()), (1, vec![1, 2], vec![], vec![]));
    // Below it, the member that leaves keeps every committed record.
    let after = world.shrink_to(1, &[1]);
    assert_eq!(state(&after), (1, vec![1], vec![2], vec![]));
    assert_eq!(state(&world.part()), state(&after));
}

#[test]
fn the_isr_growing_back_to_min_isr_empties_the_elr() {
    let (mut world, _) = world_with_elr("2", &[]);
    world.shrink_to(1, &[1, 2]);
    world.shrink_to(1, &[1]);
    world.shrink_to(1, &[1, 3]);
    assert_eq!(state(&world.part()), (1, vec![1, 3], vec![], vec![]));
}

#[test]
fn min_isr_above_the_replication_factor_counts_as_the_replication_factor() {
    let (mut world, _) = world_with_elr("5", &[]);
    // Effective min ISR 3: the first member to leave is already eligible.
    world.shrink_to(1, &[1, 2]);
    assert_eq!(state(&world.part()), (1, vec![1, 2], vec![3], vec![]));
}

#[test]
fn fencing_the_last_isr_member_empties_the_isr_and_remembers_the_last_leader() {
    let (mut world, _) = world_with_elr("2", &[]);
    world.fence_id(2);
    assert_eq!(state(&world.part()), (1, vec![1, 3], vec![], vec![]));
    world.fence_id(3);
    assert_eq!(state(&world.part()), (1, vec![1], vec![3], vec![]));
    world.fence_id(1);
    let p = world.part();
    assert_eq!(state(&p), (NO_LEADER, vec![], vec![1, 3], vec![1]));
    assert_eq!(p.leader_epoch, 1);
}

#[test]
fn an_eligible_replica_that_returns_leads_alone() {
    let (mut world, _) = world_with_elr("2", &[]);
    for id in [2, 3, 1] {
        world.fence_id(id);
    }
    // 2 left while the ISR was at min ISR: it is not eligible.
    world.unfence_id(2);
    assert_eq!(state(&world.part()), (NO_LEADER, vec![], vec![1, 3], vec![1]));
    world.unfence_id(3);
    let p = world.part();
    assert_eq!(state(&p), (3, vec![3], vec![1], vec![]));
    assert_eq!((p.leader_recovery_state, p.leader_epoch), (0, 2));
}

#[test]
fn a_clean_restart_keeps_a_replica_eligible_and_an_unclean_one_removes_it() {
    let (mut world, _) = world_with_elr("2", &[]);
    for id in [2, 3, 1] {
        world.fence_id(id);
    }
    world.restart(3, true);
    assert_eq!(state(&world.part()), (NO_LEADER, vec![], vec![1, 3], vec![1]));
    world.restart(3, false);
    assert_eq!(state(&world.part()), (NO_LEADER, vec![], vec![1], vec![1]));
    world.unfence_id(3);
    assert_eq!(world.part().leader, NO_LEADER, "a crashed replica may miss acknowledged records");
    world.unfence_id(1);
    assert_eq!(state(&world.part()), (1, vec![1], vec![], vec![]));
}

#[test]
fn an_unclean_restart_of_an_isr_member_takes_it_out_of_the_isr_without_making_it_eligible() {
    let (mut world, _) = world_with_elr("2", &[]);
    world.shrink_to(1, &[1, 2]);
    world.restart(2, false);
    assert_eq!(state(&world.part()), (1, vec![1], vec![], vec![]));
}

#[test]
fn with_the_isr_and_elr_empty_the_last_known_leader_leads_again_recovering() {
    let (mut world, _) = world_with_elr("2", &[]);
    for id in [2, 3, 1] {
        world.fence_id(id);
    }
    world.restart(1, false);
    world.restart(3, false);
    assert_eq!(state(&world.part()), (NO_LEADER, vec![], vec![], vec![1]));
    world.unfence_id(2);
    assert_eq!(world.part().leader, NO_LEADER, "2 is neither eligible nor the last leader");
    world.unfence_id(1);
    let p = world.part();
    assert_eq!(state(&p), (1, vec![1], vec![], vec![]));
    assert_eq!(p.leader_recovery_state, 1);
}

#[test]
fn an_unclean_election_empties_the_elr() {
    let (mut world, _) = world_with_elr("2", &[(UNCLEAN_LEADER_ELECTION_ENABLE, "true")]);
    for id in [2, 3, 1] {
        world.fence_id(id);
    }
    // The ISR is emptied with eligible replicas left: no unclean choice yet.
    assert_eq!(state(&world.part()), (NO_LEADER, vec![], vec![1, 3], vec![1]));
    world.unfence_id(2);
    let p = world.part();
    assert_eq!(state(&p), (2, vec![2], vec![], vec![]));
    assert_eq!(p.leader_recovery_state, 1);
}

#[test]
fn elect_leaders_picks_an_eligible_replica_for_a_leaderless_partition() {
    let (mut world, _) = world_with_elr("2", &[]);
    for id in [2, 3, 1] {
        world.fence_id(id);
    }
    // The broker comes back unfenced without the unfencing's election.
    let broker = world.image.brokers[&3].clone();
    world.apply(vec![BrokerRegistrationChangeRecord {
        broker_id: 3,
        broker_epoch: broker.epoch,
        fenced: -1,
        ..Default::default()
    }
    .into()]);
    let (records, outcomes) = elect_leaders(
        &world.image,
        ELECTION_UNCLEAN,
        Some(&[(TOPIC.to_owned(), vec![0])]),
        ElectionDefaults::default(),
    )
    .unwrap();
    world.apply(records);
    assert!(outcomes[0].1[0].1.is_ok());
    assert_eq!(state(&world.part()), (3, vec![3], vec![1], vec![]));
}

#[test]
fn without_the_feature_the_last_isr_member_stays_and_nothing_is_eligible() {
    let (mut world, _) = world_with_elr("2", &[]);
    world.image.features.remove(ELIGIBLE_LEADER_REPLICAS_FEATURE);
    for id in [2, 3, 1] {
        world.fence_id(id);
    }
    assert_eq!(state(&world.part()), (NO_LEADER, vec![1], vec![], vec![]));
}

#[test]
fn the_elr_survives_a_snapshot_and_a_clear_elr_record_empties_it() {
    let (mut world, _) = world_with_elr("2", &[]);
    for id in [2, 3, 1] {
        world.fence_id(id);
    }
    let mut reloaded = MetadataImage::empty();
    for record in crate::image::snapshot_records(&world.image) {
        reloaded.apply(record);
    }
    let p = reloaded.topic(TOPIC).unwrap().partitions[&0].clone();
    assert_eq!(state(&p), (NO_LEADER, vec![], vec![1, 3], vec![1]));
    let epoch = p.partition_epoch;
    reloaded.apply(crate::kraft_records::ClearElrRecord::default().into());
    let p = reloaded.topic(TOPIC).unwrap().partitions[&0].clone();
    assert_eq!(
        (p.elr.as_slice(), p.last_known_elr.as_slice(), p.partition_epoch),
        (&[][..], &[][..], epoch + 1)
    );
}
