//! Leadership on failures, AlterPartition and ElectLeaders.

use super::*;
use crate::image::RESOURCE_BROKER;

/// Three live brokers and topic "t" with one partition on all three,
/// replicas in order [1, 2, 3]; returns the brokers' epochs.
fn three_replicas(world: &mut World) -> Vec<i64> {
    let epochs = world.live_brokers(&[None, None, None]);
    world.create_assigned("t", vec![1, 2, 3], BTreeMap::new());
    epochs
}

impl World {
    pub(super) fn create_assigned(
        &mut self,
        name: &str,
        replicas: Vec<i32>,
        configs: BTreeMap<String, String>,
    ) {
        let topic =
            NewTopic { name: name.into(), assignments: vec![(0, replicas)], configs, ..Default::default() };
        let (records, _) = create_topic(&self.image, &topic, &mut self.placer, 10_000).unwrap();
        self.apply(records);
    }

    pub(super) fn partition(&self, name: &str) -> PartitionImage {
        self.image.topic(name).unwrap().partitions[&0].clone()
    }

    fn fence_broker(&mut self, id: i32) {
        let broker = self.image.brokers[&id].clone();
        let records = fence(&self.image, &broker, ElectionDefaults::default());
        self.apply(records);
    }

    fn unfence_broker(&mut self, id: i32) {
        let broker = self.image.brokers[&id].clone();
        let records = unfence(&self.image, &broker, ElectionDefaults::default());
        self.apply(records);
    }

    pub(super) fn alter(
        &mut self,
        broker: i32,
        epoch: i64,
        change: IsrChange,
    ) -> Result<PartitionImage, MetadataError> {
        let (records, mut results) =
            alter_partition(&self.image, broker, epoch, &[change], ElectionDefaults::default())?;
        self.apply(records);
        results.pop().unwrap()
    }

    fn elect(&mut self, election: i8, named: Option<&[(String, Vec<i32>)]>) -> Vec<TopicElections> {
        let (records, outcomes) =
            elect_leaders(&self.image, election, named, ElectionDefaults::default()).unwrap();
        self.apply(records);
        outcomes
    }
}

/// An AlterPartition entry for "t"-0 from the partition as it stands.
pub(super) fn isr_change(world: &World, isr: &[(i32, i64)]) -> IsrChange {
    let p = world.partition("t");
    IsrChange {
        topic_id: world.image.topic("t").unwrap().id,
        partition: 0,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: isr.to_vec(),
        leader_recovery_state: 0,
    }
}

fn unclean_topic() -> BTreeMap<String, String> {
    BTreeMap::from([(UNCLEAN_LEADER_ELECTION_ENABLE.to_owned(), "true".to_owned())])
}

#[test]
fn a_new_replicated_partition_is_led_by_its_first_replica_with_every_live_replica_in_sync() {
    let mut world = World::new();
    three_replicas(&mut world);
    let p = world.partition("t");
    assert_eq!((p.leader, p.isr.as_slice(), p.leader_epoch, p.partition_epoch), (1, &[1, 2, 3][..], 0, 0));
    assert_eq!(p.directories, vec![Uuid::from_u128(1001), Uuid::from_u128(1002), Uuid::from_u128(1003)]);
    let topic = world.create("placed", 6, 3).unwrap();
    for p in topic.partitions.values() {
        assert_eq!(p.replicas.len(), 3);
        assert_eq!(p.isr, p.replicas);
        assert_eq!(p.leader, p.replicas[0]);
    }
}

#[test]
fn fencing_the_leader_elects_the_next_in_sync_replica_with_a_new_leader_epoch() {
    let mut world = World::new();
    three_replicas(&mut world);
    world.fence_broker(1);
    let p = world.partition("t");
    assert_eq!((p.leader, p.isr.as_slice()), (2, &[2, 3][..]));
    assert_eq!((p.leader_epoch, p.partition_epoch), (1, 1));
    // A follower leaving changes the ISR, not the leader or its epoch.
    world.fence_broker(3);
    let p = world.partition("t");
    assert_eq!((p.leader, p.isr.as_slice(), p.leader_epoch, p.partition_epoch), (2, &[2][..], 1, 2));
}

#[test]
fn the_last_in_sync_replica_stays_in_the_isr_and_leads_again_when_unfenced() {
    let mut world = World::new();
    three_replicas(&mut world);
    world.fence_broker(2);
    world.fence_broker(3);
    world.fence_broker(1);
    let p = world.partition("t");
    assert_eq!((p.leader, p.isr.as_slice(), p.leader_epoch), (NO_LEADER, &[1][..], 1));
    // An out-of-sync replica returning does not lead without unclean election.
    world.unfence_broker(2);
    assert_eq!(world.partition("t").leader, NO_LEADER);
    world.unfence_broker(1);
    let p = world.partition("t");
    assert_eq!((p.leader, p.isr.as_slice(), p.leader_epoch), (1, &[1][..], 2));
}

#[test]
fn with_unclean_election_enabled_an_out_of_sync_replica_leads_and_recovers() {
    let mut world = World::new();
    world.live_brokers(&[None, None]);
    world.create_assigned("t", vec![1, 2], unclean_topic());
    world.fence_broker(2);
    world.fence_broker(1);
    assert_eq!(world.partition("t").leader, NO_LEADER);
    world.unfence_broker(2);
    let p = world.partition("t");
    assert_eq!((p.leader, p.isr.as_slice(), p.leader_recovery_state), (2, &[2][..], 1));
}

#[test]
fn the_cluster_wide_default_enables_unclean_election_unless_the_topic_disables_it() {
    let mut world = World::new();
    world.live_brokers(&[None, None]);
    world
        .apply(vec![config_record(RESOURCE_BROKER, "", UNCLEAN_LEADER_ELECTION_ENABLE, Some("true")).into()]);
    world.create_assigned("t", vec![1, 2], BTreeMap::new());
    let off = BTreeMap::from([(UNCLEAN_LEADER_ELECTION_ENABLE.to_owned(), "false".to_owned())]);
    world.create_assigned("safe", vec![1, 2], off);
    world.fence_broker(2);
    world.fence_broker(1);
    world.unfence_broker(2);
    assert_eq!(world.partition("t").leader, 2);
    assert_eq!(world.partition("safe").leader, NO_LEADER);
}

#[test]
fn alter_partition_shrinks_and_expands_the_isr_and_answers_the_new_partition_epoch() {
    let mut world = World::new();
    let epochs = three_replicas(&mut world);
    let shrunk = world.alter(1, epochs[0], isr_change(&world, &[(1, epochs[0]), (2, epochs[1])])).unwrap();
    assert_eq!((shrunk.isr.as_slice(), shrunk.leader_epoch, shrunk.partition_epoch), (&[1, 2][..], 0, 1));
    assert_eq!(world.partition("t"), shrunk);
    let all = [(1, -1), (2, epochs[1]), (3, epochs[2])];
    let grown = world.alter(1, epochs[0], isr_change(&world, &all)).unwrap();
    assert_eq!((grown.isr.as_slice(), grown.partition_epoch), (&[1, 2, 3][..], 2));
    // The same ISR again changes nothing and answers the partition as it is.
    let same = world.alter(1, epochs[0], isr_change(&world, &all)).unwrap();
    assert_eq!(same.partition_epoch, 2);
}

#[test]
fn alter_partition_refuses_stale_epochs_and_requests_not_from_the_leader() {
    let mut world = World::new();
    let epochs = three_replicas(&mut world);
    let isr = [(1, epochs[0]), (2, epochs[1])];
    let mut stale = isr_change(&world, &isr);
    world.alter(1, epochs[0], isr_change(&world, &isr)).unwrap();
    assert!(matches!(world.alter(1, epochs[0], stale.clone()), Err(MetadataError::InvalidUpdateVersion(_))));
    stale.partition_epoch = 5;
    assert!(matches!(world.alter(1, epochs[0], stale.clone()), Err(MetadataError::NotController { .. })));
    world.fence_broker(3);
    world.fence_broker(1);
    let mut old_leader = isr_change(&world, &[(1, epochs[0]), (2, epochs[1])]);
    old_leader.leader_epoch -= 1;
    assert!(matches!(world.alter(2, epochs[1], old_leader), Err(MetadataError::FencedLeaderEpoch(_))));
    let not_leader = isr_change(&world, &[(2, epochs[1])]);
    assert!(matches!(world.alter(3, epochs[2], not_leader), Err(MetadataError::InvalidRequest(_))));
    let stale_sender = isr_change(&world, &[(2, epochs[1])]);
    assert!(matches!(world.alter(2, epochs[1] + 1, stale_sender), Err(MetadataError::StaleBrokerEpoch(_))));
}

#[test]
fn alter_partition_refuses_ineligible_replicas_and_invalid_isrs() {
    let mut world = World::new();
    let epochs = three_replicas(&mut world);
    world.fence_broker(3);
    let cases: [(&[(i32, i64)], &str); 6] = [
        (&[(1, epochs[0]), (3, epochs[2])], "fenced"),
        (&[(1, epochs[0]), (2, epochs[1] - 1)], "stale broker epoch"),
        (&[(1, epochs[0]), (9, -1)], "not a replica"),
        (&[(2, epochs[1])], "without the leader"),
        (&[(1, epochs[0]), (1, epochs[0])], "duplicate"),
        (&[], "empty"),
    ];
    for (isr, why) in cases {
        let refused = world.alter(1, epochs[0], isr_change(&world, isr)).unwrap_err();
        let expected = match why {
            "fenced" | "stale broker epoch" => matches!(refused, MetadataError::IneligibleReplica(_)),
            _ => matches!(refused, MetadataError::InvalidRequest(_)),
        };
        assert!(expected, "{why}: {refused}");
    }
    let mut shutting_down = World::new();
    let epochs = three_replicas(&mut shutting_down);
    let request = BrokerHeartbeat {
        broker_id: 2,
        broker_epoch: epochs[1],
        current_metadata_offset: shutting_down.image.last_offset,
        want_fence: false,
        want_shut_down: true,
    };
    shutting_down.send(request, 1).unwrap();
    let change = isr_change(&shutting_down, &[(1, epochs[0]), (2, epochs[1])]);
    assert!(matches!(shutting_down.alter(1, epochs[0], change), Err(MetadataError::IneligibleReplica(_))));
    let mut unknown = isr_change(&shutting_down, &[(1, epochs[0])]);
    unknown.topic_id = Uuid::from_u128(77);
    assert!(matches!(shutting_down.alter(1, epochs[0], unknown), Err(MetadataError::UnknownTopicId)));
}

#[test]
fn a_preferred_election_moves_leadership_back_to_the_first_replica() {
    let mut world = World::new();
    three_replicas(&mut world);
    let named = [("t".to_owned(), vec![0])];
    let outcome = world.elect(ELECTION_PREFERRED, Some(&named));
    assert!(matches!(outcome[0].1[0], (0, Err(MetadataError::ElectionNotNeeded))));
    world.fence_broker(1);
    let outcome = world.elect(ELECTION_PREFERRED, Some(&named));
    assert!(matches!(outcome[0].1[0], (0, Err(MetadataError::PreferredLeaderNotAvailable(_)))));
    world.unfence_broker(1);
    // Back, but out of the ISR until the leader adds it: still not preferred-electable.
    assert_eq!(world.partition("t").leader, 2);
    let epochs: Vec<i64> = (1..=3).map(|id| world.image.brokers[&id].epoch).collect();
    let all = [(1, epochs[0]), (2, epochs[1]), (3, epochs[2])];
    world.alter(2, epochs[1], isr_change(&world, &all)).unwrap();
    let before = world.partition("t").leader_epoch;
    let outcome = world.elect(ELECTION_PREFERRED, None);
    assert!(matches!(outcome[0].1.as_slice(), [(0, Ok(()))]), "{outcome:?}");
    let p = world.partition("t");
    assert_eq!((p.leader, p.leader_epoch), (1, before + 1));
    // Electing everything again leaves out what needs no election.
    assert!(world.elect(ELECTION_PREFERRED, None)[0].1.is_empty());
}

#[test]
fn an_unclean_election_needs_a_leaderless_partition_and_a_live_replica() {
    let mut world = World::new();
    world.live_brokers(&[None, None]);
    world.create_assigned("t", vec![1, 2], BTreeMap::new());
    let named = [("t".to_owned(), vec![0, 5]), ("gone".to_owned(), vec![0])];
    let outcome = world.elect(ELECTION_UNCLEAN, Some(&named));
    assert!(matches!(outcome[0].1[0], (0, Err(MetadataError::ElectionNotNeeded))));
    assert!(matches!(outcome[0].1[1], (5, Err(MetadataError::UnknownTopic))));
    assert!(matches!(outcome[1].1[0], (0, Err(MetadataError::UnknownTopic))));
    world.fence_broker(2);
    world.fence_broker(1);
    let outcome = world.elect(ELECTION_UNCLEAN, Some(&named[..1]));
    assert!(matches!(outcome[0].1[0], (0, Err(MetadataError::EligibleLeadersNotAvailable(_)))));
    // Broker 2 returns out of sync: only an unclean election lets it lead.
    let broker = world.image.brokers[&2].clone();
    world.apply(vec![BrokerRegistrationChangeRecord {
        broker_id: 2,
        broker_epoch: broker.epoch,
        fenced: -1,
        ..Default::default()
    }
    .into()]);
    assert_eq!(world.partition("t").leader, NO_LEADER);
    let outcome = world.elect(ELECTION_UNCLEAN, Some(&named[..1]));
    assert!(matches!(outcome[0].1[0], (0, Ok(()))), "{outcome:?}");
    let p = world.partition("t");
    assert_eq!((p.leader, p.isr.as_slice(), p.leader_recovery_state), (2, &[2][..], 1));
    assert!(matches!(
        elect_leaders(&world.image, 7, None, ElectionDefaults::default()),
        Err(MetadataError::InvalidRequest(_))
    ));
}

#[test]
fn balancing_returns_leadership_to_in_sync_preferred_replicas_only() {
    let mut world = World::new();
    let epochs = three_replicas(&mut world);
    assert!(
        balance_partition_leaders(&world.image, ElectionDefaults::default()).is_empty(),
        "balanced already"
    );
    world.fence_broker(1);
    world.unfence_broker(1);
    assert_eq!(world.partition("t").leader, 2);
    assert!(
        balance_partition_leaders(&world.image, ElectionDefaults::default()).is_empty(),
        "the preferred replica is not in sync"
    );
    let all = [(1, epochs[0]), (2, epochs[1]), (3, epochs[2])];
    world.alter(2, epochs[1], isr_change(&world, &all)).unwrap();
    let records = balance_partition_leaders(&world.image, ElectionDefaults::default());
    assert_eq!(records.len(), 1);
    world.apply(records);
    let p = world.partition("t");
    assert_eq!((p.leader, p.leader_epoch, p.isr.as_slice()), (1, 2, &[1, 2, 3][..]));
}

#[test]
fn brokers_whose_sessions_expire_together_never_inherit_each_others_leaderships() {
    let mut world = World::new();
    let epochs = three_replicas(&mut world);
    world.heartbeat(3, epochs[2], SESSION_MS + 1).unwrap();
    let records = fence_expired_brokers(
        &world.image,
        &mut world.heartbeats,
        SESSION_MS + 2,
        ElectionDefaults::default(),
    );
    world.apply(records);
    assert!(world.image.brokers[&1].fenced && world.image.brokers[&2].fenced);
    // Led by 2 after 1 went, then by 3 after 2 went: never by a fenced broker.
    let p = world.partition("t");
    assert_eq!((p.leader, p.isr.as_slice(), p.leader_epoch), (3, &[3][..], 2));
}

#[test]
fn unclean_election_is_resolved_from_topic_node_cluster_then_static_config() {
    let mut world = World::new();
    world.live_brokers(&[None]);
    world.create_assigned("t", vec![1], BTreeMap::new());
    let topic = world.image.topic("t").unwrap().clone();
    let on = ElectionDefaults { node_id: 7, unclean_leader_election_enable: true, min_insync_replicas: 1 };
    assert_eq!(failover_election(&world.image, &topic, ElectionDefaults::default()), Election::Online);
    assert_eq!(failover_election(&world.image, &topic, on), Election::Unclean, "the static config");
    world.apply(vec![
        config_record(RESOURCE_BROKER, "", UNCLEAN_LEADER_ELECTION_ENABLE, Some("false")).into()
    ]);
    assert_eq!(failover_election(&world.image, &topic, on), Election::Online, "the cluster default");
    world.apply(vec![
        config_record(RESOURCE_BROKER, "7", UNCLEAN_LEADER_ELECTION_ENABLE, Some("true")).into()
    ]);
    assert_eq!(failover_election(&world.image, &topic, on), Election::Unclean, "the controller node's");
    let other_node = ElectionDefaults { node_id: 8, ..on };
    assert_eq!(failover_election(&world.image, &topic, other_node), Election::Online);
    world.apply(vec![
        config_record(RESOURCE_TOPIC, "t", UNCLEAN_LEADER_ELECTION_ENABLE, Some("false")).into()
    ]);
    let topic = world.image.topic("t").unwrap().clone();
    assert_eq!(failover_election(&world.image, &topic, on), Election::Online, "the topic's");
}
