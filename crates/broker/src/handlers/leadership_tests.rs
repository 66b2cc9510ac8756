//! Answers for partitions this broker does not lead: a single node plays a
//! cluster by registering a second broker (id 2) in its own metadata and
//! placing partitions on it.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, FindCoordinatorRequest, GroupId, MetadataRequest, OffsetFetchRequest, ProduceRequest,
    RequestHeader,
};
use strom_metadata::controller::SUPPORTED_FEATURES;
use strom_metadata::{block_on, BrokerHeartbeat, BrokerRegistration, Endpoint, FeatureRange, NewTopic};

use super::{str_bytes, topic_name};
use crate::config::BrokerConfig;
use crate::dispatch::RequestContext;
use crate::group::{CommitEntry, OFFSETS_TOPIC};
use crate::server::Broker;

pub(crate) const OTHER: i32 = 2;
pub(crate) const OTHER_PORT: u16 = 9999;

/// A single node with broker 2 registered and unfenced beside it.
pub(crate) fn broker_with_another(dir: &std::path::Path) -> Arc<Broker> {
    let overrides = [
        ("log.dirs".to_owned(), dir.display().to_string()),
        ("offsets.topic.num.partitions".to_owned(), "1".to_owned()),
    ];
    let broker = Broker::open(BrokerConfig::from_properties("", &overrides).unwrap()).unwrap();
    let registration = BrokerRegistration {
        broker_id: OTHER,
        cluster_id: broker.controller().cluster_id().to_owned(),
        incarnation_id: uuid::Uuid::new_v4(),
        endpoints: vec![Endpoint {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: OTHER_PORT,
            security_protocol: 0,
        }],
        features: SUPPORTED_FEATURES
            .iter()
            .map(|(name, min, max)| FeatureRange { name: (*name).into(), min: *min, max: *max })
            .collect(),
        rack: None,
        log_dirs: Vec::new(),
        previous_broker_epoch: -1,
    };
    let now = strom_storage::now_ms();
    let epoch = block_on(broker.controller().register_broker(registration, now)).unwrap();
    heartbeat(&broker, OTHER, epoch, now);
    broker
}

pub(crate) fn heartbeat(broker: &Broker, id: i32, epoch: i64, now_ms: i64) {
    let request = BrokerHeartbeat {
        broker_id: id,
        broker_epoch: epoch,
        current_metadata_offset: broker.controller().image().last_offset,
        want_fence: false,
        want_shut_down: false,
    };
    block_on(broker.controller().broker_heartbeat(request, now_ms)).unwrap();
}

/// Topic `name` with partition `p` placed on `placement[p]`.
pub(crate) fn place(broker: &Broker, name: &str, placement: &[i32]) {
    let assignments = placement.iter().enumerate().map(|(p, &b)| (p as i32, vec![b])).collect();
    let topic = NewTopic { name: name.into(), assignments, ..Default::default() };
    block_on(broker.controller().create_topic_with_logs(topic, false, broker.replicas())).unwrap();
}

pub(crate) fn ctx(broker: &Broker, api_key: ApiKey, api_version: i16) -> RequestContext<'_> {
    let header =
        RequestHeader::default().with_request_api_key(api_key as i16).with_request_api_version(api_version);
    RequestContext::new(
        broker,
        api_key,
        header,
        "/127.0.0.1".into(),
        "PLAINTEXT".into(),
        "User:ANONYMOUS".into(),
    )
}

fn produce(broker: &Broker, version: i16, partition: i32) -> kafka_protocol::messages::ProduceResponse {
    let batch = strom_storage::batch::encode_batch(&[(None, Some(bytes::Bytes::from_static(b"v")))], 0);
    let data = PartitionProduceData::default().with_index(partition).with_records(Some(batch));
    let topic = TopicProduceData::default().with_name(topic_name("t")).with_partition_data(vec![data]);
    let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(1000).with_topic_data(vec![topic]);
    let ctx = ctx(broker, ApiKey::Produce, version);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(super::produce::handle(&ctx, request)).response
}

#[test]
fn a_produce_to_a_partition_led_elsewhere_names_the_leader_and_its_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker_with_another(dir.path());
    place(&broker, "t", &[broker.config().node_id, OTHER]);

    let refused = produce(&broker, 10, 1);
    let answer = &refused.responses[0].partition_responses[0];
    assert_eq!(answer.error_code, ResponseError::NotLeaderOrFollower.code());
    let epoch = broker.controller().image().topic("t").unwrap().partitions[&1].leader_epoch;
    assert_eq!((answer.current_leader.leader_id.0, answer.current_leader.leader_epoch), (OTHER, epoch));
    let endpoints: Vec<_> =
        refused.node_endpoints.iter().map(|e| (e.node_id.0, e.host.to_string(), e.port)).collect();
    assert_eq!(endpoints, [(OTHER, "127.0.0.1".to_owned(), i32::from(OTHER_PORT))]);

    let before_hints = produce(&broker, 9, 1);
    assert_eq!(
        before_hints.responses[0].partition_responses[0].error_code,
        ResponseError::NotLeaderOrFollower.code()
    );
    assert!(before_hints.node_endpoints.is_empty());
    let led = produce(&broker, 10, 0);
    assert_eq!(led.responses[0].partition_responses[0].error_code, 0);
    assert!(led.node_endpoints.is_empty());

    block_on(broker.controller().unregister_broker(OTHER)).unwrap();
    let leaderless = produce(&broker, 10, 1);
    let answer = &leaderless.responses[0].partition_responses[0];
    assert_eq!(answer.error_code, ResponseError::NotLeaderOrFollower.code());
    assert_eq!((answer.current_leader.leader_id.0, answer.current_leader.leader_epoch), (-1, epoch + 1));
    assert!(leaderless.node_endpoints.is_empty());
}

#[test]
fn metadata_names_each_leader_and_a_leaderless_partition_with_its_offline_replica() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker_with_another(dir.path());
    let node = broker.config().node_id;
    place(&broker, "t", &[node, OTHER]);
    let describe = || {
        let request = MetadataRequest::default().with_topics(None);
        let response = block_on(super::metadata::handle(&ctx(&broker, ApiKey::Metadata, 12), request));
        let brokers: Vec<i32> = response.brokers.iter().map(|b| b.node_id.0).collect();
        let partitions = response.topics[0]
            .partitions
            .iter()
            .map(|p| {
                (p.error_code, p.leader_id.0, p.offline_replicas.iter().map(|b| b.0).collect::<Vec<_>>())
            })
            .collect::<Vec<_>>();
        (brokers, partitions)
    };
    assert_eq!(describe(), (vec![node, OTHER], vec![(0, node, vec![]), (0, OTHER, vec![])]));

    block_on(broker.controller().unregister_broker(OTHER)).unwrap();

    let leaderless = (ResponseError::LeaderNotAvailable.code(), -1, vec![OTHER]);
    assert_eq!(describe(), (vec![node], vec![(0, node, vec![]), leaderless]));
}

fn find_group_coordinator(broker: &Broker, group: &str) -> (i16, i32, i32) {
    let request =
        FindCoordinatorRequest::default().with_key_type(0).with_coordinator_keys(vec![str_bytes(group)]);
    let response =
        block_on(super::groups::find_coordinator(&ctx(broker, ApiKey::FindCoordinator, 4), request));
    let found = &response.coordinators[0];
    (found.error_code, found.node_id.0, found.port)
}

fn fetch_offsets_error(broker: &Broker, group: &str) -> i16 {
    let request = OffsetFetchRequest::default().with_group_id(GroupId(str_bytes(group)));
    super::offsets::fetch(&ctx(broker, ApiKey::OffsetFetch, 7), request).error_code
}

#[test]
fn the_coordinator_is_the_leader_of_the_groups_partition_and_others_answer_not_coordinator() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker_with_another(dir.path());
    place(&broker, OFFSETS_TOPIC, &[OTHER]);

    assert_eq!(find_group_coordinator(&broker, "g"), (0, OTHER, i32::from(OTHER_PORT)));
    assert_eq!(fetch_offsets_error(&broker, "g"), ResponseError::NotCoordinator.code());

    block_on(broker.controller().unregister_broker(OTHER)).unwrap();
    let (error, ..) = find_group_coordinator(&broker, "g");
    assert_eq!(error, ResponseError::CoordinatorNotAvailable.code());
}

#[test]
fn groups_are_unloaded_when_leadership_moves_away_and_loaded_again_when_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker_with_another(dir.path());
    let node = broker.config().node_id;
    place(&broker, "t", &[node]);
    place(&broker, OFFSETS_TOPIC, &[node]);
    assert_eq!(find_group_coordinator(&broker, "g").1, node);
    let entry = CommitEntry { topic: "t".into(), partition: 0, offset: 7, leader_epoch: -1, metadata: None };
    assert_eq!(block_on(broker.groups().commit(&*broker, "g", -1, "", None, &[entry])), [None]);
    let committed = |broker: &Broker| {
        broker
            .groups()
            .fetch_offsets("g", None)
            .into_iter()
            .map(|(_, _, v)| v.map(|v| v.offset))
            .collect::<Vec<_>>()
    };
    assert_eq!(committed(&broker), [Some(7)]);

    // Every broker misses its session: this one leads nothing any more.
    let later = strom_storage::now_ms() + 3_600_000;
    block_on(broker.controller().fence_expired_brokers(later)).unwrap();
    assert_eq!(fetch_offsets_error(&broker, "g"), ResponseError::NotCoordinator.code());
    assert!(committed(&broker).is_empty(), "the group's state left with the leadership");

    heartbeat(&broker, node, broker.broker_epoch(), later);
    assert_eq!(fetch_offsets_error(&broker, "g"), 0);
    assert_eq!(committed(&broker), [Some(7)], "loaded back from __consumer_offsets");
}

#[test]
fn a_group_commits_offsets_of_partitions_led_by_other_brokers() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker_with_another(dir.path());
    place(&broker, "t", &[OTHER]);
    place(&broker, OFFSETS_TOPIC, &[broker.config().node_id]);
    let entry =
        |partition| CommitEntry { topic: "t".into(), partition, offset: 3, leader_epoch: -1, metadata: None };

    let outcomes = block_on(broker.groups().commit(&*broker, "g", -1, "", None, &[entry(0), entry(1)]));

    assert_eq!(outcomes, [None, Some(ResponseError::UnknownTopicOrPartition)]);
}
