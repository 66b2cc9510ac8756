//! DescribeQuorum: the state of the metadata quorum (`__cluster_metadata`-0).
//!
//! A KRaft node answers from its quorum ([`strom_quorum::Quorum::describe`]):
//! the leader knows every replica's progress, so a node that does not lead
//! forwards the request to the leader's controller endpoint (as Kafka's
//! brokers forward it to the active controller), or answers
//! NOT_LEADER_OR_FOLLOWER naming the leader when it cannot. A node without
//! `process.roles` is a quorum of one: itself the leader and only voter.
//! The answer has the shape Kafka's quorum leader gives
//! (`KafkaRaftClient.handleDescribeQuorumRequest`,
//! `LeaderState.describeQuorum`), so `kafka-metadata-quorum.sh` reads it.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::{BrokerId, DescribeQuorumRequest, DescribeQuorumResponse};
use std::time::Duration;
use strom_metadata::controller::METADATA_LEADER_EPOCH;
use strom_quorum::{QuorumDescription, ReplicaDescription};

use super::str_bytes;
use crate::dispatch::RequestContext;

const METADATA_TOPIC: &str = "__cluster_metadata";
const METADATA_PARTITION: i32 = 0;

/// The client id of a forwarded DescribeQuorum, which is never forwarded again.
const FORWARD_CLIENT_ID: &str = "strom-describe-quorum-forward";
/// How long a forwarded DescribeQuorum may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);

pub async fn describe(ctx: &RequestContext<'_>, request: DescribeQuorumRequest) -> DescribeQuorumResponse {
    if !ctx.authorize_cluster(strom_metadata::acl::operation::DESCRIBE) {
        return DescribeQuorumResponse::default()
            .with_error_code(kafka_protocol::error::ResponseError::ClusterAuthorizationFailed.code());
    }
    if !asks_for_the_metadata_partition(&request) {
        return unknown_partitions(request);
    }
    let Some(quorum) = ctx.quorum() else { return describe_single_node(ctx) };
    let description = quorum.describe();
    if description.is_leader {
        return from_description(ctx, &description);
    }
    let forwarded = ctx.header.client_id.as_deref() == Some(FORWARD_CLIENT_ID);
    if !forwarded && description.leader_id >= 0 {
        match forward_to_leader(ctx, &request, &description).await {
            Ok(response) => return response,
            Err(e) => {
                tracing::debug!(leader = description.leader_id, error = %e, "cannot forward DescribeQuorum")
            }
        }
    }
    not_leader(&description)
}

/// The leader's answer, asked at its controller endpoint.
async fn forward_to_leader(
    ctx: &RequestContext<'_>,
    request: &DescribeQuorumRequest,
    description: &QuorumDescription,
) -> Result<DescribeQuorumResponse, String> {
    let address = leader_address(ctx, description).ok_or("the leader is not a known voter")?;
    let connector = ctx.controller().link().ok_or("not a KRaft node")?.connector();
    let channel =
        connector.connect(&address, FORWARD_CLIENT_ID, FORWARD_TIMEOUT).await.map_err(|e| e.to_string())?;
    channel.send(request, ctx.api_version, FORWARD_TIMEOUT).await.map_err(|e| e.to_string())
}

/// The leader's `host:port` on the quorum's listener, as the voter set has it.
pub(crate) fn leader_address(ctx: &RequestContext<'_>, description: &QuorumDescription) -> Option<String> {
    let listener = ctx.config().kraft.controller_listener_names.first()?;
    let (_, endpoints) = description.voter_endpoints.iter().find(|(id, _)| *id == description.leader_id)?;
    let endpoint = endpoints.iter().find(|e| e.listener.eq_ignore_ascii_case(listener))?;
    Some(format!("{}:{}", endpoint.host, endpoint.port))
}

/// NOT_LEADER_OR_FOLLOWER with the leader this node knows.
fn not_leader(description: &QuorumDescription) -> DescribeQuorumResponse {
    let partition = PartitionData::default()
        .with_partition_index(METADATA_PARTITION)
        .with_error_code(ResponseError::NotLeaderOrFollower.code())
        .with_leader_id(BrokerId(description.leader_id))
        .with_leader_epoch(description.leader_epoch);
    let topic = TopicData::default()
        .with_topic_name(super::topic_name(METADATA_TOPIC))
        .with_partitions(vec![partition]);
    DescribeQuorumResponse::default().with_topics(vec![topic])
}

/// The leader's view, as Kafka's `LeaderState.describeQuorum` reports it.
fn from_description(ctx: &RequestContext<'_>, description: &QuorumDescription) -> DescribeQuorumResponse {
    let version = ctx.api_version;
    let replica = |r: &ReplicaDescription| {
        let mut state = ReplicaState::default()
            .with_replica_id(BrokerId(r.replica_id))
            .with_log_end_offset(r.log_end_offset);
        if version >= 1 {
            state = state
                .with_last_fetch_timestamp(r.last_fetch_timestamp_ms)
                .with_last_caught_up_timestamp(r.last_caught_up_timestamp_ms);
        }
        if version >= 2 {
            // Static voters (kraft.version 0) have no directory id, as in Kafka.
            state = state.with_replica_directory_id(r.directory_id.unwrap_or_default());
        }
        state
    };
    let partition = PartitionData::default()
        .with_partition_index(METADATA_PARTITION)
        .with_leader_id(BrokerId(description.leader_id))
        .with_leader_epoch(description.leader_epoch)
        .with_high_watermark(description.high_watermark)
        .with_current_voters(description.voters.iter().map(replica).collect())
        .with_observers(description.observers.iter().map(replica).collect());
    let topic = TopicData::default()
        .with_topic_name(super::topic_name(METADATA_TOPIC))
        .with_partitions(vec![partition]);
    let response = DescribeQuorumResponse::default().with_topics(vec![topic]);
    if version < 2 {
        return response;
    }
    response.with_nodes(voter_nodes(description))
}

/// Each voter's controller endpoints (DescribeQuorum v2's `Nodes`).
fn voter_nodes(description: &QuorumDescription) -> Vec<Node> {
    let listener = |e: &strom_quorum::Endpoint| {
        Listener::default().with_name(str_bytes(&e.listener)).with_host(str_bytes(&e.host)).with_port(e.port)
    };
    description
        .voter_endpoints
        .iter()
        .map(|(id, endpoints)| {
            Node::default()
                .with_node_id(BrokerId(*id))
                .with_listeners(endpoints.iter().map(listener).collect())
        })
        .collect()
}

/// A node without `process.roles`: the leader and only voter of its own quorum.
fn describe_single_node(ctx: &RequestContext<'_>) -> DescribeQuorumResponse {
    let node_id = ctx.config().node_id;
    let end_offset = ctx.controller().applied_end_offset();
    // Kafka's leader reports itself as fetching and caught up right now.
    let now = strom_storage::now_ms();
    let mut voter =
        ReplicaState::default().with_replica_id(BrokerId(node_id)).with_log_end_offset(end_offset);
    if ctx.api_version >= 1 {
        voter = voter.with_last_fetch_timestamp(now).with_last_caught_up_timestamp(now);
    }
    // A static voter: v2's directory id stays the zero uuid, as in Kafka.
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

/// The voter's endpoints: its controller listeners on a KRaft node, else
/// the listener the request came in on.
fn voter_listeners(ctx: &RequestContext<'_>) -> Vec<Listener> {
    let config = &ctx.config();
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
