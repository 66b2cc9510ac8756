use super::*;
use crate::placement::SplitMix64;

mod election;
mod elr;
mod reassignment;

const CLUSTER: &str = "MkU3OEVBNTcwNTJENDM2Qg";
const SESSION_MS: i64 = 9_000;

/// A controller's view for tests: the image, the heartbeats and a placer.
struct World {
    image: MetadataImage,
    heartbeats: BrokerHeartbeats,
    placer: StripedReplicaPlacer,
}

impl World {
    fn new() -> Self {
        let mut image = MetadataImage::empty();
        image.features.insert("metadata.version".into(), 27);
        Self {
            image,
            heartbeats: BrokerHeartbeats::new(SESSION_MS),
            placer: StripedReplicaPlacer::new(SplitMix64::new(7)),
        }
    }

    /// Applies `records` as the loader would, one offset each.
    fn apply(&mut self, records: Vec<MetadataRecord>) {
        for record in records {
            self.image.apply(record);
            self.image.last_offset += 1;
        }
    }

    fn registration(id: i32, rack: Option<&str>) -> BrokerRegistration {
        BrokerRegistration {
            broker_id: id,
            cluster_id: CLUSTER.into(),
            incarnation_id: Uuid::from_u128(id as u128 + 100),
            endpoints: vec![Endpoint {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9092,
                security_protocol: 0,
            }],
            features: vec![
                FeatureRange { name: "metadata.version".into(), min: 20, max: 27 },
                FeatureRange { name: "eligible.leader.replicas.version".into(), min: 0, max: 1 },
            ],
            rack: rack.map(str::to_owned),
            log_dirs: vec![Uuid::from_u128(id as u128 + 1000)],
            previous_broker_epoch: -1,
        }
    }

    /// Registers broker `id`; returns its epoch.
    fn register(&mut self, request: &BrokerRegistration, now_ms: i64) -> Result<i64, MetadataError> {
        let epoch = self.image.last_offset + 1;
        let records = register_broker(&self.image, CLUSTER, request, &self.heartbeats, now_ms, epoch)?;
        self.apply(records);
        self.heartbeats.touch(request.broker_id, now_ms);
        Ok(epoch)
    }

    fn heartbeat(&mut self, id: i32, epoch: i64, now_ms: i64) -> Result<HeartbeatReply, MetadataError> {
        let request = BrokerHeartbeat {
            broker_id: id,
            broker_epoch: epoch,
            current_metadata_offset: self.image.last_offset,
            want_fence: false,
            want_shut_down: false,
        };
        self.send(request, now_ms)
    }

    fn send(&mut self, request: BrokerHeartbeat, now_ms: i64) -> Result<HeartbeatReply, MetadataError> {
        let (records, reply) = broker_heartbeat(
            &self.image,
            &request,
            &mut self.heartbeats,
            now_ms,
            ElectionDefaults::default(),
        )?;
        self.apply(records);
        Ok(reply)
    }

    /// Registers and unfences each broker; returns their epochs.
    fn live_brokers(&mut self, racks: &[Option<&str>]) -> Vec<i64> {
        let mut epochs = Vec::new();
        for (id, rack) in (1..).zip(racks) {
            let epoch = self.register(&Self::registration(id, *rack), 0).unwrap();
            assert!(!self.heartbeat(id, epoch, 0).unwrap().is_fenced);
            epochs.push(epoch);
        }
        epochs
    }

    fn create(
        &mut self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
    ) -> Result<TopicImage, MetadataError> {
        let topic = NewTopic { name: name.into(), partitions, replication_factor, ..Default::default() };
        let (records, created) = create_topic(&self.image, &topic, &mut self.placer, 10_000)?;
        self.apply(records);
        Ok(created)
    }
}

#[test]
fn topics_are_spread_over_three_brokers_and_their_racks() {
    let mut world = World::new();
    world.live_brokers(&[Some("a"), Some("a"), Some("b")]);
    let topic = world.create("orders", 6, 2).unwrap();
    assert_eq!(world.image.topic("orders"), Some(&topic));
    let mut leaders = BTreeMap::new();
    for p in topic.partitions.values() {
        assert_eq!(p.replicas.len(), 2);
        assert_ne!(p.replicas[0], p.replicas[1]);
        assert_eq!(p.isr, p.replicas, "every replica is active");
        assert_eq!(p.leader, p.replicas[0]);
        let racks: Vec<_> = p.replicas.iter().map(|r| world.image.brokers[r].rack.clone()).collect();
        assert_ne!(racks[0], racks[1], "both racks hold a replica of {p:?}");
        let directories: Vec<Uuid> = p.replicas.iter().map(|r| Uuid::from_u128(*r as u128 + 1000)).collect();
        assert_eq!(p.directories, directories, "each replica on its broker's only log dir");
        *leaders.entry(p.leader).or_insert(0) += 1;
    }
    assert_eq!(leaders.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3], "{leaders:?}");

    let racks_none = world.create("spread", 3, 1).unwrap();
    let mut led: Vec<i32> = racks_none.partitions.values().map(|p| p.leader).collect();
    led.sort_unstable();
    assert_eq!(led, vec![1, 2, 3], "three partitions of RF 1 land on three brokers");
}

#[test]
fn replication_above_the_registered_brokers_is_refused() {
    let mut world = World::new();
    let refused = world.create("t", 1, 1).unwrap_err();
    assert!(matches!(refused, MetadataError::InvalidReplicationFactor(_)), "no broker: {refused}");
    world.live_brokers(&[None, None, None]);
    let refused = world.create("t", 1, 4).unwrap_err();
    assert!(matches!(refused, MetadataError::InvalidReplicationFactor(_)), "{refused}");
    world.create("t", 1, 3).unwrap();
}

#[test]
fn manual_assignments_are_checked_by_the_placement_validator() {
    let mut world = World::new();
    world.live_brokers(&[None, None]);
    let topic =
        |assignments: Vec<(i32, Vec<i32>)>| NewTopic { name: "m".into(), assignments, ..Default::default() };
    let refused = create_topic(&world.image, &topic(vec![(0, vec![7])]), &mut world.placer, 100).unwrap_err();
    assert!(
        matches!(&refused, MetadataError::InvalidReplicaAssignment(m) if m.contains("broker 7")),
        "{refused}"
    );
    let refused = create_topic(&world.image, &topic(vec![(1, vec![1])]), &mut world.placer, 100).unwrap_err();
    assert!(matches!(refused, MetadataError::InvalidReplicaAssignment(_)), "{refused}");
    let (records, created) =
        create_topic(&world.image, &topic(vec![(0, vec![2, 1]), (1, vec![1, 2])]), &mut world.placer, 100)
            .unwrap();
    world.apply(records);
    assert_eq!(created.partitions[&0].replicas, vec![2, 1]);
    assert_eq!(created.partitions[&0].leader, 2);

    let refused =
        create_partitions(&world.image, "m", 3, Some(&[vec![1]]), &mut world.placer, 100).unwrap_err();
    assert!(matches!(refused, MetadataError::InvalidReplicaAssignment(_)), "replication factor 2: {refused}");
    let (records, grown) =
        create_partitions(&world.image, "m", 3, Some(&[vec![1, 2]]), &mut world.placer, 100).unwrap();
    world.apply(records);
    assert_eq!(grown.partitions[&2].replicas, vec![1, 2]);
    assert_eq!(world.image.topic("m").unwrap().partitions.len(), 3);
}

#[test]
fn registration_checks_the_cluster_id_features_and_live_duplicates() {
    let mut world = World::new();
    let mut other_cluster = World::registration(1, None);
    other_cluster.cluster_id = "another".into();
    assert!(matches!(world.register(&other_cluster, 0), Err(MetadataError::InconsistentClusterId(_))));

    let mut too_old = World::registration(1, None);
    too_old.features[0].max = 26;
    let refused = world.register(&too_old, 0).unwrap_err();
    assert!(
        matches!(&refused, MetadataError::UnsupportedVersion(m) if m.contains("version 27 of metadata.version"))
    );
    too_old.features.clear();
    assert!(matches!(world.register(&too_old, 0), Err(MetadataError::UnsupportedVersion(_))));

    let first = World::registration(1, None);
    let epoch = world.register(&first, 0).unwrap();
    assert_eq!(world.image.brokers[&1].epoch, epoch);
    assert!(world.image.brokers[&1].fenced, "a broker registers fenced");

    let mut second = first.clone();
    second.incarnation_id = Uuid::from_u128(999);
    let refused = world.register(&second, SESSION_MS).unwrap_err();
    assert!(matches!(refused, MetadataError::DuplicateBrokerRegistration(_)), "{refused}");
    let retry = world.register(&first, SESSION_MS).unwrap();
    assert!(retry > epoch, "the same incarnation registers again with a new epoch");
    let taken_over = world.register(&second, 3 * SESSION_MS).unwrap();
    assert_eq!(world.image.brokers[&1].epoch, taken_over, "a new incarnation after the session expired");
    assert_eq!(world.image.brokers[&1].incarnation_id, second.incarnation_id);
}

#[test]
fn heartbeats_refuse_unknown_brokers_and_stale_epochs() {
    let mut world = World::new();
    assert!(matches!(world.heartbeat(1, 0, 0), Err(MetadataError::BrokerIdNotRegistered(1))));
    let epoch = world.register(&World::registration(1, None), 0).unwrap();
    assert!(matches!(world.heartbeat(1, epoch + 1, 0), Err(MetadataError::StaleBrokerEpoch(_))));
    assert!(matches!(
        allocate_producer_ids(&world.image, 1, epoch + 1),
        Err(MetadataError::StaleBrokerEpoch(_))
    ));
    assert!(matches!(allocate_producer_ids(&world.image, 2, 0), Err(MetadataError::StaleBrokerEpoch(_))));
    let (records, block) = allocate_producer_ids(&world.image, 1, epoch).unwrap();
    world.apply(records);
    assert_eq!(block, 0..PRODUCER_ID_BLOCK_SIZE);
    assert_eq!(allocate_producer_ids(&world.image, 1, epoch).unwrap().1.start, PRODUCER_ID_BLOCK_SIZE);
}

#[test]
fn a_broker_is_unfenced_only_once_caught_up_to_its_registration() {
    let mut world = World::new();
    let epoch = world.register(&World::registration(1, None), 0).unwrap();
    let behind = BrokerHeartbeat {
        broker_id: 1,
        broker_epoch: epoch,
        current_metadata_offset: epoch - 1,
        want_fence: false,
        want_shut_down: false,
    };
    let reply = world.send(behind, 10).unwrap();
    assert_eq!(reply, HeartbeatReply { is_caught_up: false, is_fenced: true, should_shut_down: false });
    assert!(world.image.brokers[&1].fenced);
    let reply = world.send(BrokerHeartbeat { current_metadata_offset: epoch, ..behind }, 20).unwrap();
    assert_eq!(reply, HeartbeatReply { is_caught_up: true, is_fenced: false, should_shut_down: false });
    assert!(!world.image.brokers[&1].fenced);
    assert_eq!(world.image.live_brokers().count(), 1);
}

#[test]
fn fencing_follows_the_session_timeout_on_a_fake_clock() {
    let mut world = World::new();
    let epochs = world.live_brokers(&[None, None]);
    world.create("t", 2, 1).unwrap();
    let led_by_1 = |image: &MetadataImage| {
        image
            .topic("t")
            .unwrap()
            .partitions
            .values()
            .filter(|p| p.replicas == [1])
            .cloned()
            .collect::<Vec<_>>()
    };
    let before = led_by_1(&world.image);
    assert_eq!(before.len(), 1);

    // Broker 2 keeps heartbeating; broker 1 stops at t=0.
    for now in [3_000, 6_000, SESSION_MS] {
        world.heartbeat(2, epochs[1], now).unwrap();
        let records =
            fence_expired_brokers(&world.image, &mut world.heartbeats, now, ElectionDefaults::default());
        assert!(records.is_empty(), "no session has expired at {now} ms");
    }
    world.heartbeat(2, epochs[1], SESSION_MS + 1).unwrap();
    let records = fence_expired_brokers(
        &world.image,
        &mut world.heartbeats,
        SESSION_MS + 1,
        ElectionDefaults::default(),
    );
    world.apply(records);
    assert!(world.image.brokers[&1].fenced);
    assert!(!world.image.brokers[&2].fenced);
    let fenced = led_by_1(&world.image);
    assert_eq!(fenced[0].leader, NO_LEADER, "its partition has no leader");
    assert_eq!(fenced[0].isr, vec![1], "the last in-sync replica stays in the ISR");
    assert_eq!(fenced[0].leader_epoch, before[0].leader_epoch + 1);
    assert_eq!(fenced[0].partition_epoch, before[0].partition_epoch + 1);

    // It comes back: unfenced at once (caught up), leading again.
    let reply = world.heartbeat(1, epochs[0], SESSION_MS + 2).unwrap();
    assert!(!reply.is_fenced);
    let back = led_by_1(&world.image);
    assert_eq!(back[0].leader, 1);
    assert_eq!(back[0].leader_epoch, before[0].leader_epoch + 2);
}

#[test]
fn controlled_shutdown_moves_leadership_away_then_lets_the_broker_stop_once_the_others_have_seen_it() {
    let mut world = World::new();
    let epochs = world.live_brokers(&[None, None]);
    world.create("t", 4, 2).unwrap();
    let shut_down = |world: &World| BrokerHeartbeat {
        broker_id: 1,
        broker_epoch: epochs[0],
        current_metadata_offset: world.image.last_offset,
        want_fence: false,
        want_shut_down: true,
    };
    let reply = world.send(shut_down(&world), 1).unwrap();
    assert!(!reply.should_shut_down && !reply.is_fenced, "{reply:?}");
    assert!(world.image.brokers[&1].in_controlled_shutdown);
    for p in world.image.topic("t").unwrap().partitions.values() {
        assert_eq!(p.leader, 2, "{p:?}");
        assert_eq!(p.isr, vec![2], "{p:?}");
    }
    assert_eq!(world.image.live_brokers().map(|b| b.id).collect::<Vec<_>>(), vec![2]);
    let refused = world.create("more", 1, 2).unwrap_err();
    assert!(matches!(refused, MetadataError::InvalidReplicationFactor(_)), "{refused}");
    // The controller notes the offset of the shutdown records; broker 2
    // has not reported applying them yet.
    world.heartbeats.note_shutdown_offset(1, world.image.last_offset);
    assert!(!world.send(shut_down(&world), 2).unwrap().should_shut_down);
    world.heartbeat(2, epochs[1], 3).unwrap();
    let reply = world.send(shut_down(&world), 4).unwrap();
    assert!(reply.should_shut_down && reply.is_fenced, "{reply:?}");
    assert!(world.image.brokers[&1].fenced);
}

#[test]
fn a_fenced_broker_asking_to_stop_may_stop_at_once() {
    let mut world = World::new();
    let epoch = world.register(&World::registration(1, None), 0).unwrap();
    let request = BrokerHeartbeat {
        broker_id: 1,
        broker_epoch: epoch,
        current_metadata_offset: -1,
        want_fence: false,
        want_shut_down: true,
    };
    assert!(world.send(request, 1).unwrap().should_shut_down);
}

#[test]
fn unregistering_removes_the_broker_and_its_leaderships() {
    let mut world = World::new();
    world.live_brokers(&[None, None]);
    world.create("t", 2, 2).unwrap();
    assert!(matches!(
        unregister_broker(&world.image, 9, ElectionDefaults::default()),
        Err(MetadataError::BrokerIdNotRegistered(9))
    ));
    let records = unregister_broker(&world.image, 1, ElectionDefaults::default()).unwrap();
    world.apply(records);
    assert!(!world.image.brokers.contains_key(&1));
    for p in world.image.topic("t").unwrap().partitions.values() {
        assert_eq!((p.leader, p.isr.as_slice()), (2, &[2][..]), "{p:?}");
    }
}

#[test]
fn controllers_register_their_endpoints() {
    let mut world = World::new();
    let controller = ControllerImage {
        id: 3000,
        incarnation_id: Uuid::from_u128(5),
        endpoints: vec![Endpoint {
            name: "CONTROLLER".into(),
            host: "h".into(),
            port: 9093,
            security_protocol: 0,
        }],
        features: vec![FeatureRange { name: "metadata.version".into(), min: 7, max: 27 }],
    };
    world.apply(register_controller(&controller));
    assert_eq!(world.image.controllers[&3000], controller);
}

#[test]
fn topic_names_follow_kafkas_rules() {
    for name in ["", ".", "..", "a/b", "__cluster_metadata", &"x".repeat(250)] {
        assert!(matches!(validate_topic_name(name), Err(MetadataError::InvalidTopic(_))), "{name}");
    }
    validate_topic_name(&"x".repeat(249)).unwrap();
}
