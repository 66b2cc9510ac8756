//! Replication on a single node playing a cluster, with broker 2
//! registered beside it: as leader, broker 2's fetches go to the Fetch
//! handler as a follower's; as follower, the fetcher's answers are applied
//! to a partition broker 2 leads.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, ProduceRequest, ProduceResponse};
use strom_metadata::{block_on, NewTopic};

use super::leadership_tests::{broker_with_another, ctx, OTHER};
use super::topic_name;
use crate::group::{CommitEntry, OFFSETS_TOPIC};
use crate::server::Broker;

const LOCAL: i32 = 1;

/// Topic `r` with one partition led here and followed by broker 2.
fn replicated(dir: &std::path::Path) -> Arc<Broker> {
    replicated_with(dir, &[])
}

fn replicated_with(dir: &std::path::Path, configs: &[(&str, &str)]) -> Arc<Broker> {
    let broker = broker_with_another(dir);
    let topic = NewTopic {
        name: "r".into(),
        assignments: vec![(0, vec![LOCAL, OTHER])],
        configs: configs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Default::default()
    };
    block_on(broker.controller().create_topic_with_logs(topic, false, broker.replicas())).unwrap();
    assert!(broker.replicas().partition("r", 0).unwrap().is_leader());
    broker
}

async fn produce(broker: &Broker, acks: i16, timeout_ms: i32) -> ProduceResponse {
    let batch = strom_storage::batch::encode_batch(&[(None, Some(bytes::Bytes::from_static(b"v")))], 0);
    let data = PartitionProduceData::default().with_index(0).with_records(Some(batch));
    let topic = TopicProduceData::default().with_name(topic_name("r")).with_partition_data(vec![data]);
    let request =
        ProduceRequest::default().with_acks(acks).with_timeout_ms(timeout_ms).with_topic_data(vec![topic]);
    super::produce::handle(&ctx(broker, ApiKey::Produce, 9), request).await.response
}

/// A fetch by follower 2 from `offset` whose last batch had `last_fetched_epoch`.
async fn follower_fetch(broker: &Broker, offset: i64, last_fetched_epoch: i32) -> (i16, i64, i32, i64) {
    follower_fetch_from(broker, "r", offset, last_fetched_epoch).await
}

/// [`follower_fetch`] of partition 0 of `topic`.
async fn follower_fetch_from(
    broker: &Broker,
    topic: &str,
    offset: i64,
    last_fetched_epoch: i32,
) -> (i16, i64, i32, i64) {
    let topic_id = broker.replicas().topic(topic).unwrap().id;
    let partition = FetchPartition::default()
        .with_partition(0)
        .with_fetch_offset(offset)
        .with_last_fetched_epoch(last_fetched_epoch)
        .with_partition_max_bytes(1 << 20);
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_replica_state(ReplicaState::default().with_replica_id(BrokerId(OTHER)).with_replica_epoch(1))
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default().with_topic_id(topic_id).with_partitions(vec![partition])]);
    let reply = super::fetch::handle(&ctx(broker, ApiKey::Fetch, 15), request).await;
    let answer = &reply.response.responses[0].partitions[0];
    (
        answer.error_code,
        answer.high_watermark,
        answer.diverging_epoch.epoch,
        answer.diverging_epoch.end_offset,
    )
}

#[tokio::test]
async fn acks_all_waits_until_the_follower_has_fetched_past_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let broker = replicated(dir.path());
    let partition = broker.replicas().partition("r", 0).unwrap();

    let timed_out = produce(&broker, -1, 50).await;
    assert_eq!(
        timed_out.responses[0].partition_responses[0].error_code,
        ResponseError::RequestTimedOut.code()
    );
    assert_eq!((partition.log_end_offset(), partition.high_watermark()), (1, 0), "appended, not committed");

    let acked = produce(&broker, 1, 1_000).await;
    assert_eq!(acked.responses[0].partition_responses[0].error_code, 0, "acks=1 does not wait");

    let waiting = produce(&broker, -1, 10_000);
    let follower = async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        // The follower reads the leader's log end, past the high watermark.
        assert_eq!(follower_fetch(&broker, 0, -1).await, (0, 0, -1, -1));
        follower_fetch(&broker, 3, 0).await
    };
    let (answer, fetched) = tokio::join!(waiting, follower);
    assert_eq!(answer.responses[0].partition_responses[0].error_code, 0);
    assert_eq!(answer.responses[0].partition_responses[0].base_offset, 2);
    assert_eq!(fetched.1, 3, "the follower holding 3 moves the high watermark to 3");
    assert_eq!(partition.high_watermark(), 3);
}

#[tokio::test]
async fn an_offset_commit_is_answered_and_visible_once_the_follower_has_it() {
    let dir = tempfile::tempdir().unwrap();
    let broker = replicated(dir.path());
    // One `__consumer_offsets` partition (as the test broker is set up),
    // led here and followed by broker 2.
    let topic = NewTopic {
        name: OFFSETS_TOPIC.into(),
        assignments: vec![(0, vec![LOCAL, OTHER])],
        ..Default::default()
    };
    block_on(broker.controller().create_topic_with_logs(topic, false, broker.replicas())).unwrap();
    let offsets = broker.replicas().partition(OFFSETS_TOPIC, 0).unwrap();
    let committed = || {
        let offsets = broker.groups().fetch_offsets("g", None).into_iter();
        offsets.map(|(_, _, v)| v.map(|v| v.offset)).collect::<Vec<_>>()
    };
    let entry = CommitEntry { topic: "r".into(), partition: 0, offset: 7, leader_epoch: -1, metadata: None };

    let commit = broker.groups().commit(&*broker, "g", -1, "", None, std::slice::from_ref(&entry));
    tokio::pin!(commit);
    let early = tokio::time::timeout(Duration::from_millis(50), &mut commit).await;
    assert!(early.is_err(), "no answer before the follower holds the commit");
    assert_eq!((offsets.log_end_offset(), offsets.high_watermark()), (1, 0), "appended, not committed");
    // Reading the group takes the groups lock: the waiting commit does not hold it.
    assert!(committed().iter().all(Option::is_none), "a commit is invisible until acknowledged");

    assert_eq!(follower_fetch_from(&broker, OFFSETS_TOPIC, 1, 0).await.1, 1);
    assert_eq!(commit.await, [None]);
    assert_eq!(committed(), [Some(7)]);
}

#[tokio::test]
async fn a_follower_with_a_suffix_the_leader_lacks_is_told_where_to_truncate() {
    let dir = tempfile::tempdir().unwrap();
    let broker = replicated(dir.path());
    for _ in 0..2 {
        produce(&broker, 1, 1_000).await;
    }
    let epoch = broker.replicas().partition("r", 0).unwrap().leader_epoch();
    assert_eq!(follower_fetch(&broker, 2, epoch).await.2, -1, "the same history: no divergence");
    // The follower holds offsets 2..5 of this epoch, which ends at 2 here.
    let (error, _, diverging_epoch, end_offset) = follower_fetch(&broker, 5, epoch).await;
    assert_eq!((error, diverging_epoch, end_offset), (0, epoch, 2));
    let partition = broker.replicas().partition("r", 0).unwrap();
    let recorded = partition.replica_set().follower(OTHER).unwrap().log_end_offset;
    assert_eq!(recorded, 2, "a diverged follower's fetch offset is not recorded");
    // An epoch newer than any here cannot be placed.
    let (error, ..) = follower_fetch(&broker, 2, epoch + 1).await;
    assert_eq!(error, ResponseError::OffsetOutOfRange.code());
}

#[tokio::test]
async fn acks_all_is_refused_when_the_isr_is_smaller_than_min_insync_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let broker = replicated_with(dir.path(), &[("min.insync.replicas", "3")]);
    let refused = produce(&broker, -1, 1_000).await;
    assert_eq!(
        refused.responses[0].partition_responses[0].error_code,
        ResponseError::NotEnoughReplicas.code()
    );
    let partition = broker.replicas().partition("r", 0).unwrap();
    assert_eq!(partition.log_end_offset(), 0, "refused before the append");
}

/// The follower's side: partition `f` led by broker 2 and followed here,
/// fed answers as the leader would send them.
#[test]
fn a_follower_appends_its_leaders_batches_and_truncates_where_they_diverge() {
    use kafka_protocol::messages::fetch_response::{EpochEndOffset, PartitionData};
    let dir = tempfile::tempdir().unwrap();
    let broker = broker_with_another(dir.path());
    let topic =
        NewTopic { name: "f".into(), assignments: vec![(0, vec![OTHER, LOCAL])], ..Default::default() };
    block_on(broker.controller().create_topic_with_logs(topic, false, broker.replicas())).unwrap();
    let partition = broker.replicas().partition("f", 0).unwrap();
    assert!(!partition.is_leader());

    let leader_dir = tempfile::tempdir().unwrap();
    let config = strom_storage::LogConfig::default();
    let mut leader = strom_storage::Log::open(leader_dir.path(), config, 0, 0, true, 0).unwrap().0;
    for epoch in [0, 0, 3] {
        let batch = strom_storage::batch::encode_batch(&[(None, Some(bytes::Bytes::from_static(b"v")))], 0);
        leader.append(&batch, epoch, 0).unwrap();
    }
    let records = leader.read(0, 1 << 20, 3, true).unwrap().unwrap().read().unwrap();

    let answer = PartitionData::default().with_records(Some(records)).with_high_watermark(2);
    assert!(crate::replication::fetcher::apply_partition(&partition, answer));
    assert_eq!((partition.log_end_offset(), partition.high_watermark()), (3, 2));
    assert_eq!(partition.latest_log_epoch(), 3, "the leader's epochs kept");

    // The leader's epoch 0 ends at 1: everything from 1 on goes.
    let diverged = PartitionData::default()
        .with_diverging_epoch(EpochEndOffset::default().with_epoch(0).with_end_offset(1))
        .with_high_watermark(1);
    assert!(crate::replication::fetcher::apply_partition(&partition, diverged));
    assert_eq!(
        (partition.log_end_offset(), partition.high_watermark(), partition.latest_log_epoch()),
        (1, 1, 0)
    );
}
