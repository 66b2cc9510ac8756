use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::kraft_records::{
    BrokerFeature, FenceBrokerRecord, NoOpRecord, RemoveTopicRecord, UnfenceBrokerRecord,
    UnregisterBrokerRecord,
};
use crate::loader::{encode_record, snapshot_content, MetadataLoader};

fn topic_id() -> Uuid {
    Uuid::from_u128(0xabc)
}

fn broker_record(id: i32, epoch: i64) -> RegisterBrokerRecord {
    RegisterBrokerRecord {
        broker_id: id,
        incarnation_id: Uuid::from_u128(id as u128),
        broker_epoch: epoch,
        end_points: vec![BrokerEndpoint {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 9092,
            security_protocol: 0,
            ..Default::default()
        }],
        features: vec![BrokerFeature {
            name: "metadata.version".into(),
            min_supported_version: 7,
            max_supported_version: 27,
            ..Default::default()
        }],
        rack: Some("r1".into()),
        fenced: true,
        log_dirs: vec![Uuid::from_u128(77)],
        ..Default::default()
    }
}

/// An image holding one of everything Strom keeps.
fn rich_image() -> MetadataImage {
    let records: Vec<MetadataRecord> = vec![
        FeatureLevelRecord { name: "metadata.version".into(), feature_level: 27, ..Default::default() }
            .into(),
        broker_record(1, 1).into(),
        broker_record(2, 2).into(),
        BrokerRegistrationChangeRecord { broker_id: 1, broker_epoch: 1, fenced: -1, ..Default::default() }
            .into(),
        BrokerRegistrationChangeRecord {
            broker_id: 2,
            broker_epoch: 2,
            in_controlled_shutdown: 1,
            ..Default::default()
        }
        .into(),
        RegisterControllerRecord {
            controller_id: 3000,
            incarnation_id: Uuid::from_u128(9),
            end_points: vec![ControllerEndpoint {
                name: "CONTROLLER".into(),
                host: "h".into(),
                port: 9093,
                ..Default::default()
            }],
            ..Default::default()
        }
        .into(),
        TopicRecord { name: "orders".into(), topic_id: topic_id(), ..Default::default() }.into(),
        PartitionRecord {
            partition_id: 0,
            topic_id: topic_id(),
            replicas: vec![1, 2],
            isr: vec![1, 2],
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 0,
            directories: vec![Uuid::from_u128(77), Uuid::from_u128(77)],
            ..Default::default()
        }
        .into(),
        config_record(RESOURCE_TOPIC, "orders", "retention.ms", Some("1000")).into(),
        config_record(RESOURCE_BROKER, "", "log.retention.ms", Some("5")).into(),
        config_record(RESOURCE_BROKER, "1", "message.max.bytes", Some("2048")).into(),
        ProducerIdsRecord { broker_id: 1, broker_epoch: 1, next_producer_id: 2000, ..Default::default() }
            .into(),
        crate::image::acl_record(Uuid::from_u128(5), &reader_acl()).into(),
    ];
    let mut image = MetadataImage::empty();
    for record in records {
        image.apply(record);
        image.last_offset += 1;
    }
    image
}

fn reader_acl() -> crate::acl::Acl {
    use crate::acl::{operation, pattern, permission, resource};
    crate::acl::Acl {
        resource_type: resource::TOPIC,
        resource_name: "orders".into(),
        pattern_type: pattern::LITERAL,
        principal: "User:alice".into(),
        host: "*".into(),
        operation: operation::READ,
        permission: permission::ALLOW,
    }
}

#[test]
fn acl_records_add_and_remove_entries_by_id() {
    let mut image = rich_image();
    assert_eq!(image.acls().get(&Uuid::from_u128(5)), Some(&reader_acl()));
    image.apply(
        crate::kraft_records::RemoveAccessControlEntryRecord { id: Uuid::from_u128(5), ..Default::default() }
            .into(),
    );
    assert!(image.acls().is_empty());
}

#[test]
fn every_record_type_replays_into_the_image() {
    let mut image = rich_image();
    assert_eq!(image.metadata_version(), 27);
    let broker = &image.brokers[&1];
    assert_eq!((broker.epoch, broker.fenced, broker.rack.as_deref()), (1, false, Some("r1")));
    assert_eq!(broker.endpoint("PLAINTEXT").map(|e| e.port), Some(9092));
    assert_eq!(broker.log_dirs, vec![Uuid::from_u128(77)]);
    assert_eq!(broker.features, vec![FeatureRange { name: "metadata.version".into(), min: 7, max: 27 }]);
    assert!(image.brokers[&2].in_controlled_shutdown && image.brokers[&2].fenced);
    assert_eq!(image.live_brokers().map(|b| b.id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(image.controllers[&3000].endpoints[0].port, 9093);
    assert_eq!(image.topic("orders").unwrap().configs["retention.ms"], "1000");
    assert_eq!(image.broker_configs("")["log.retention.ms"], "5");
    assert_eq!(image.next_producer_id, 2000);

    let change = PartitionChangeRecord {
        partition_id: 0,
        topic_id: topic_id(),
        isr: Some(vec![1]),
        leader: 2,
        ..Default::default()
    };
    image.apply(change.into());
    let p = &image.topic("orders").unwrap().partitions[&0];
    assert_eq!((p.leader, p.isr.as_slice(), p.leader_epoch, p.partition_epoch), (2, &[1][..], 1, 1));
    let isr_only = PartitionChangeRecord {
        partition_id: 0,
        topic_id: topic_id(),
        isr: Some(vec![1, 2]),
        ..Default::default()
    };
    image.apply(isr_only.into());
    let p = &image.topic("orders").unwrap().partitions[&0];
    assert_eq!(
        (p.leader, p.leader_epoch, p.partition_epoch),
        (2, 1, 2),
        "the leader epoch stays without a new leader"
    );

    // The pre-3.3 fencing records still apply, for a broker's current epoch only.
    image.apply(FenceBrokerRecord { id: 1, epoch: 1, ..Default::default() }.into());
    assert!(image.brokers[&1].fenced);
    image.apply(UnfenceBrokerRecord { id: 1, epoch: 0, ..Default::default() }.into());
    assert!(image.brokers[&1].fenced, "another epoch's record changes nothing");
    image.apply(UnfenceBrokerRecord { id: 1, epoch: 1, ..Default::default() }.into());
    assert!(!image.brokers[&1].fenced);

    image.apply(UnregisterBrokerRecord { broker_id: 2, broker_epoch: 2, ..Default::default() }.into());
    assert!(!image.brokers.contains_key(&2));
    image.apply(RemoveTopicRecord { topic_id: topic_id(), ..Default::default() }.into());
    assert!(image.topic("orders").is_none() && image.topic_by_id(&topic_id()).is_none());
    image.apply(config_record(RESOURCE_BROKER, "1", "message.max.bytes", None).into());
    assert!(image.broker_configs("1").is_empty());
    image.apply(
        FeatureLevelRecord { name: "metadata.version".into(), feature_level: 0, ..Default::default() }.into(),
    );
    assert_eq!(image.metadata_version(), 0);
    let before = image.clone();
    image.apply(NoOpRecord::default().into());
    assert_eq!(image, before, "a NoOpRecord changes nothing");
}

#[test]
fn an_image_written_as_a_snapshot_reads_back_equal() {
    let image = rich_image();
    let mut rebuilt = MetadataImage::empty();
    snapshot_records(&image).into_iter().for_each(|r| rebuilt.apply(r));
    rebuilt.last_offset = image.last_offset;
    assert_eq!(rebuilt, image);

    let loader = MetadataLoader::new();
    let end_offset = (image.last_offset + 1) as u64;
    loader.load_snapshot(end_offset, &snapshot_content(&image)).unwrap();
    assert_eq!(*loader.image(), image);
    assert_eq!(*loader.applied_offset().borrow(), image.last_offset);
}

#[test]
fn the_loader_applies_each_batch_once_and_refuses_an_unreadable_one_whole() {
    let loader = MetadataLoader::new();
    let topic: MetadataRecord =
        TopicRecord { name: "a".into(), topic_id: topic_id(), ..Default::default() }.into();
    let feature: MetadataRecord =
        FeatureLevelRecord { name: "metadata.version".into(), feature_level: 27, ..Default::default() }
            .into();
    loader.apply_batch(0, 0, &[encode_record(&feature), encode_record(&topic)]).unwrap();
    let published = loader.image();
    assert_eq!(published.last_offset, 1);
    loader.apply_batch(0, 0, &[encode_record(&feature), encode_record(&topic)]).unwrap();
    assert!(Arc::ptr_eq(&published, &loader.image()), "a batch handed over twice is applied once");

    let removal: MetadataRecord = RemoveTopicRecord { topic_id: topic_id(), ..Default::default() }.into();
    let unknown = Bytes::from_static(&[1, 99, 0]);
    let refused = loader.apply_batch(2, 0, &[encode_record(&removal), unknown]).unwrap_err();
    assert!(matches!(refused, crate::MetadataError::UnreadableRecord { offset: 3, .. }), "{refused}");
    assert!(loader.image().topic("a").is_some(), "nothing of the refused batch applied");
    assert_eq!(*loader.applied_offset().borrow(), 1);
}
