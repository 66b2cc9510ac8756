//! ElectLeaders (KIP-183, KIP-460): preferred and unclean leader
//! elections, run by the active controller (brokers forward the request).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};
use strom_metadata::acl::operation;
use strom_metadata::{MetadataError, TopicElections};

use super::{str_bytes, topic_name};
use crate::dispatch::RequestContext;
use crate::error::metadata_error;

pub async fn handle(ctx: &RequestContext<'_>, request: ElectLeadersRequest) -> ElectLeadersResponse {
    let named: Option<Vec<(String, Vec<i32>)>> = request
        .topic_partitions
        .as_ref()
        .map(|topics| topics.iter().map(|t| (t.topic.to_string(), t.partitions.clone())).collect());
    if !ctx.authorize_cluster(operation::ALTER) {
        return failed(named.as_deref(), ResponseError::ClusterAuthorizationFailed.code());
    }
    // v0 has no election type and asks for preferred leaders.
    let election_type = if ctx.api_version == 0 {
        strom_metadata::operations::ELECTION_PREFERRED
    } else {
        request.election_type
    };
    match ctx.controller().elect_leaders(election_type, named.as_deref()).await {
        Ok(outcomes) => ElectLeadersResponse::default().with_replica_election_results(results(outcomes)),
        Err(e) => failed(named.as_deref(), metadata_error(&e).code()),
    }
}

fn results(outcomes: Vec<TopicElections>) -> Vec<ReplicaElectionResult> {
    let partition = |(id, outcome): (i32, Result<(), MetadataError>)| {
        let result = PartitionResult::default().with_partition_id(id);
        match outcome {
            Ok(()) => result,
            Err(e) => result
                .with_error_code(metadata_error(&e).code())
                .with_error_message(Some(str_bytes(&e.to_string()))),
        }
    };
    outcomes
        .into_iter()
        .map(|(topic, partitions)| {
            ReplicaElectionResult::default()
                .with_topic(topic_name(&topic))
                .with_partition_result(partitions.into_iter().map(partition).collect())
        })
        .collect()
}

/// The whole request refused with `code`, on every partition it names.
fn failed(named: Option<&[(String, Vec<i32>)]>, code: i16) -> ElectLeadersResponse {
    let outcomes = named.unwrap_or_default().iter().map(|(topic, ids)| {
        let partitions =
            ids.iter().map(|id| PartitionResult::default().with_partition_id(*id).with_error_code(code));
        ReplicaElectionResult::default()
            .with_topic(topic_name(topic))
            .with_partition_result(partitions.collect())
    });
    ElectLeadersResponse::default().with_error_code(code).with_replica_election_results(outcomes.collect())
}
