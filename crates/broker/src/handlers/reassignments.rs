//! AlterPartitionReassignments and ListPartitionReassignments (KIP-455),
//! run by the active controller (brokers forward both). Altering needs
//! ALTER on the cluster, listing DESCRIBE on the cluster, as in Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};
use strom_metadata::acl::operation;
use strom_metadata::operations::{OngoingReassignment, ReassignmentTarget, TopicReassignments};
use strom_metadata::MetadataError;

use super::{str_bytes, topic_name};
use crate::dispatch::RequestContext;
use crate::error::metadata_error;

pub async fn alter(
    ctx: &RequestContext<'_>,
    request: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    if !ctx.authorize_cluster(operation::ALTER) {
        return alter_failed(&request, ResponseError::ClusterAuthorizationFailed, None);
    }
    let topics: Vec<(String, Vec<ReassignmentTarget>)> = request
        .topics
        .iter()
        .map(|t| {
            let targets = t.partitions.iter().map(|p| {
                let replicas = p.replicas.as_ref().map(|r| r.iter().map(|id| id.0).collect());
                (p.partition_index, replicas)
            });
            (t.name.to_string(), targets.collect())
        })
        .collect();
    // v0 has no such field: the replication factor may change.
    let allow_rf_change = ctx.api_version == 0 || request.allow_replication_factor_change;
    match ctx.controller().alter_partition_reassignments(&topics, allow_rf_change).await {
        Ok(outcomes) => AlterPartitionReassignmentsResponse::default()
            .with_allow_replication_factor_change(allow_rf_change)
            .with_responses(outcomes.into_iter().map(topic_response).collect()),
        Err(e) => alter_failed(&request, metadata_error(&e), Some(e.to_string())),
    }
}

fn topic_response((topic, partitions): TopicReassignments) -> ReassignableTopicResponse {
    let partition = |(id, outcome): (i32, Result<(), MetadataError>)| {
        let response = ReassignablePartitionResponse::default().with_partition_index(id);
        match outcome {
            Ok(()) => response,
            Err(e) => response
                .with_error_code(metadata_error(&e).code())
                .with_error_message(Some(str_bytes(&e.to_string()))),
        }
    };
    ReassignableTopicResponse::default()
        .with_name(topic_name(&topic))
        .with_partitions(partitions.into_iter().map(partition).collect())
}

/// The whole request refused with `error`, on every partition it names.
pub fn alter_failed(
    request: &AlterPartitionReassignmentsRequest,
    error: ResponseError,
    message: Option<String>,
) -> AlterPartitionReassignmentsResponse {
    let message = message.as_deref().map(str_bytes);
    let topics = request.topics.iter().map(|t| {
        let partitions = t.partitions.iter().map(|p| {
            ReassignablePartitionResponse::default()
                .with_partition_index(p.partition_index)
                .with_error_code(error.code())
                .with_error_message(message.clone())
        });
        ReassignableTopicResponse::default().with_name(t.name.clone()).with_partitions(partitions.collect())
    });
    let topics = topics.collect();
    AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(request.allow_replication_factor_change)
        .with_error_code(error.code())
        .with_error_message(message)
        .with_responses(topics)
}

pub async fn list(
    ctx: &RequestContext<'_>,
    request: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    if !ctx.authorize_cluster(operation::DESCRIBE) {
        return list_failed(ResponseError::ClusterAuthorizationFailed);
    }
    let named: Option<Vec<(String, Vec<i32>)>> = request
        .topics
        .as_ref()
        .map(|topics| topics.iter().map(|t| (t.name.to_string(), t.partition_indexes.clone())).collect());
    match ctx.controller().list_partition_reassignments(named.as_deref()).await {
        Ok(topics) => ListPartitionReassignmentsResponse::default()
            .with_topics(topics.into_iter().map(ongoing_topic).collect()),
        Err(e) => list_failed(metadata_error(&e)),
    }
}

fn ongoing_topic((topic, partitions): (String, Vec<OngoingReassignment>)) -> OngoingTopicReassignment {
    let ids = |ids: Vec<i32>| ids.into_iter().map(BrokerId).collect();
    let partition = |o: OngoingReassignment| {
        OngoingPartitionReassignment::default()
            .with_partition_index(o.partition)
            .with_replicas(ids(o.replicas))
            .with_adding_replicas(ids(o.adding))
            .with_removing_replicas(ids(o.removing))
    };
    OngoingTopicReassignment::default()
        .with_name(topic_name(&topic))
        .with_partitions(partitions.into_iter().map(partition).collect())
}

pub fn list_failed(error: ResponseError) -> ListPartitionReassignmentsResponse {
    ListPartitionReassignmentsResponse::default().with_error_code(error.code())
}
