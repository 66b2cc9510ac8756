//! DescribeQuorum: the state of the metadata quorum (`__cluster_metadata`-0).
//!
//! Strom runs as a quorum of one: this node is the leader and the only
//! voter, and there are no observers. The answer has the shape Kafka's
//! quorum leader gives (`KafkaRaftClient.handleDescribeQuorumRequest`,
//! `LeaderState.describeQuorum`), so `kafka-metadata-quorum.sh` reads it.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::{BrokerId, DescribeQuorumRequest, DescribeQuorumResponse};
use strom_metadata::controller::METADATA_LEADER_EPOCH;
use uuid::Uuid;

use super::str_bytes;
use crate::dispatch::RequestContext;
use crate::meta_properties::{parse_uuid, MetaProperties, META_PROPERTIES};

const METADATA_TOPIC: &str = "__cluster_metadata";
const METADATA_PARTITION: i32 = 0;

pub fn describe(ctx: &RequestContext<'_>, request: DescribeQuorumRequest) -> DescribeQuorumResponse {
    if !asks_for_the_metadata_partition(&request) {
        return unknown_partitions(request);
    }
    let broker = ctx.broker;
    let node_id = broker.config.node_id;
    let end_offset = broker.controller.applied_end_offset();
    // Kafka's leader reports itself as fetching and caught up right now.
    let now = strom_storage::now_ms();
    let mut voter =
        ReplicaState::default().with_replica_id(BrokerId(node_id)).with_log_end_offset(end_offset);
    if ctx.api_version >= 1 {
        voter = voter.with_last_fetch_timestamp(now).with_last_caught_up_timestamp(now);
    }
    if ctx.api_version >= 2 {
        voter = voter.with_replica_directory_id(metadata_directory_id(ctx));
    }
    let partition = PartitionData::default()
        .with_partition_index(METADATA_PARTITION)
        .with_leader_id(BrokerId(node_id))
        .with_leader_epoch(METADATA_LEADER_EPOCH)
        .with_high_watermark(end_offset)
        .with_current_voters(vec![voter]);
    let topic = TopicData::default()
        .with_topic_name(super::topic_name(METADATA_TOPIC))
        .with_partitions(vec![partition]);
    let response = DescribeQuorumResponse::default().with_topics(vec![topic]);
    if ctx.api_version < 2 {
        return response;
    }
    response.with_nodes(vec![Node::default()
        .with_node_id(BrokerId(node_id))
        .with_listeners(voter_listeners(ctx))])
}

/// Kafka answers only a request for exactly `__cluster_metadata`-0.
fn asks_for_the_metadata_partition(request: &DescribeQuorumRequest) -> bool {
    match request.topics.as_slice() {
        [topic] => {
            topic.topic_name.as_str() == METADATA_TOPIC
                && matches!(topic.partitions.as_slice(), [p] if p.partition_index == METADATA_PARTITION)
        }
        _ => false,
    }
}

/// UNKNOWN_TOPIC_OR_PARTITION on every partition asked for, as Kafka's
/// `DescribeQuorumRequest.getPartitionLevelErrorResponse` answers.
fn unknown_partitions(request: DescribeQuorumRequest) -> DescribeQuorumResponse {
    let code = ResponseError::UnknownTopicOrPartition.code();
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    PartitionData::default().with_partition_index(p.partition_index).with_error_code(code)
                })
                .collect();
            TopicData::default().with_topic_name(topic.topic_name).with_partitions(partitions)
        })
        .collect();
    DescribeQuorumResponse::default().with_topics(topics)
}

/// The directory id in the metadata log dir's `meta.properties`; the zero
/// uuid (Kafka's "no directory id") if it has none.
fn metadata_directory_id(ctx: &RequestContext<'_>) -> Uuid {
    let path = ctx.broker.config.metadata_log_dir.join(META_PROPERTIES);
    std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| MetaProperties::parse(&text, &path).ok())
        .and_then(|meta| parse_uuid(&meta.directory_id))
        .map_or(Uuid::nil(), Uuid::from_bytes)
}

/// The voter's endpoints: its controller listeners on a KRaft node, else
/// the listener the request came in on.
fn voter_listeners(ctx: &RequestContext<'_>) -> Vec<Listener> {
    let config = &ctx.broker.config;
    let controllers = config.kraft.controller_listeners(&config.listeners);
    let endpoints: Vec<(String, String, u16)> = if controllers.is_empty() {
        config
            .advertised_endpoint(&ctx.listener)
            .map(|(host, port)| (ctx.listener.to_string(), host, port))
            .into_iter()
            .collect()
    } else {
        controllers.iter().map(|l| (l.name.clone(), l.host.clone(), l.port)).collect()
    };
    endpoints
        .into_iter()
        .map(|(name, host, port)| {
            Listener::default().with_name(str_bytes(&name)).with_host(str_bytes(&host)).with_port(port)
        })
        .collect()
}
