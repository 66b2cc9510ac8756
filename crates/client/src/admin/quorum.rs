//! The metadata quorum: DescribeQuorum of `__cluster_metadata`-0, as Java's
//! `Admin.describeMetadataQuorum` reads it into a `QuorumInfo`; and KIP-853's
//! voter changes, as `Admin.addRaftVoter` and `Admin.removeRaftVoter` send
//! them.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::describe_quorum_response::{self, ReplicaState};
use kafka_protocol::messages::{
    add_raft_voter_request, AddRaftVoterRequest, DescribeQuorumRequest, RemoveRaftVoterRequest,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::{topic_name, Admin};
use crate::error::{Error, Result};

/// The metadata log's topic; its one partition is 0.
pub const METADATA_TOPIC: &str = "__cluster_metadata";

/// One voter or observer of the quorum, as its leader sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct QuorumReplica {
    pub replica_id: i32,
    /// The zero uuid where the broker does not say (before v2).
    pub directory_id: Uuid,
    pub log_end_offset: i64,
    /// `None` where the broker does not say (v0, or -1 on the wire).
    pub last_fetch_timestamp: Option<i64>,
    pub last_caught_up_timestamp: Option<i64>,
}

/// A listener of a quorum node: `name://host:port`.
#[derive(Debug, Clone, PartialEq)]
pub struct QuorumEndpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for QuorumEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // IPv6 hosts in brackets, as Kafka's RaftVoterEndpoint prints them.
        if self.host.contains(':') {
            write!(f, "{}://[{}]:{}", self.name, self.host, self.port)
        } else {
            write!(f, "{}://{}:{}", self.name, self.host, self.port)
        }
    }
}

/// What the quorum leader says of the metadata quorum.
#[derive(Debug, Clone, PartialEq)]
pub struct QuorumInfo {
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub high_watermark: i64,
    pub voters: Vec<QuorumReplica>,
    pub observers: Vec<QuorumReplica>,
    /// Each quorum node's endpoints, by node id (v2; empty before).
    pub nodes: BTreeMap<i32, Vec<QuorumEndpoint>>,
}

impl Admin {
    /// DescribeQuorum of the metadata partition, asked of any broker.
    pub async fn describe_quorum(&self) -> Result<QuorumInfo> {
        let request = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
            .with_topic_name(topic_name(METADATA_TOPIC))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
        let cluster = self.cluster();
        let response = cluster
            .with_retries("DescribeQuorum", || async { cluster.any_connection().await?.send(&request).await })
            .await?;
        quorum_info(response)
    }

    /// Makes the observer `voter_id` with metadata directory `directory_id`
    /// a voter reached at `endpoints`; Ok once the change commits.
    pub async fn add_raft_voter(
        &self,
        voter_id: i32,
        directory_id: Uuid,
        endpoints: &[QuorumEndpoint],
    ) -> Result<()> {
        let str_bytes = |s: &str| StrBytes::from_string(s.to_owned());
        let listeners = endpoints
            .iter()
            .map(|e| {
                add_raft_voter_request::Listener::default()
                    .with_name(str_bytes(&e.name))
                    .with_host(str_bytes(&e.host))
                    .with_port(e.port)
            })
            .collect();
        // No cluster id: the leader checks none (Kafka's Admin sends null).
        let request = AddRaftVoterRequest::default()
            .with_cluster_id(None)
            .with_timeout_ms(
                i32::try_from(self.cluster().config().request_timeout.as_millis()).unwrap_or(i32::MAX),
            )
            .with_voter_id(voter_id)
            .with_voter_directory_id(directory_id)
            .with_listeners(listeners);
        let cluster = self.cluster();
        cluster
            .with_retries("AddRaftVoter", || async {
                let response = cluster.any_connection().await?.send(&request).await?;
                Error::from_code(response.error_code, response.error_message.as_deref()).map_or(Ok(()), Err)
            })
            .await
    }

    /// Removes the voter `voter_id` with metadata directory `directory_id`;
    /// Ok once the change commits.
    pub async fn remove_raft_voter(&self, voter_id: i32, directory_id: Uuid) -> Result<()> {
        let request = RemoveRaftVoterRequest::default()
            .with_cluster_id(None)
            .with_voter_id(voter_id)
            .with_voter_directory_id(directory_id);
        let cluster = self.cluster();
        cluster
            .with_retries("RemoveRaftVoter", || async {
                let response = cluster.any_connection().await?.send(&request).await?;
                Error::from_code(response.error_code, response.error_message.as_deref()).map_or(Ok(()), Err)
            })
            .await
    }
}

fn quorum_info(response: kafka_protocol::messages::DescribeQuorumResponse) -> Result<QuorumInfo> {
    let message = |m: &Option<kafka_protocol::protocol::StrBytes>| m.as_ref().map(|m| m.to_string());
    if let Some(error) = Error::from_code(response.error_code, message(&response.error_message).as_deref()) {
        return Err(error);
    }
    let partition = match response.topics.as_slice() {
        [topic] if topic.topic_name.as_str() == METADATA_TOPIC => match topic.partitions.as_slice() {
            [partition] if partition.partition_index == 0 => partition,
            _ => return Err(unexpected("not one partition 0 of the metadata topic")),
        },
        _ => return Err(unexpected("not the metadata topic alone")),
    };
    if let Some(error) = Error::from_code(partition.error_code, message(&partition.error_message).as_deref())
    {
        return Err(error);
    }
    let nodes = response.nodes.iter().map(|node| (node.node_id.0, endpoints(&node.listeners))).collect();
    Ok(QuorumInfo {
        leader_id: partition.leader_id.0,
        leader_epoch: partition.leader_epoch,
        high_watermark: partition.high_watermark,
        voters: partition.current_voters.iter().map(replica).collect(),
        observers: partition.observers.iter().map(replica).collect(),
        nodes,
    })
}

fn unexpected(what: &str) -> Error {
    Error::Protocol { addr: "DescribeQuorum".to_owned(), reason: format!("the answer is for {what}") }
}

fn replica(state: &ReplicaState) -> QuorumReplica {
    let known = |timestamp: i64| (timestamp != -1).then_some(timestamp);
    QuorumReplica {
        replica_id: state.replica_id.0,
        directory_id: state.replica_directory_id,
        log_end_offset: state.log_end_offset,
        last_fetch_timestamp: known(state.last_fetch_timestamp),
        last_caught_up_timestamp: known(state.last_caught_up_timestamp),
    }
}

fn endpoints(listeners: &[describe_quorum_response::Listener]) -> Vec<QuorumEndpoint> {
    listeners
        .iter()
        .map(|l| QuorumEndpoint { name: l.name.to_string(), host: l.host.to_string(), port: l.port })
        .collect()
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::describe_quorum_response::{
        PartitionData as AnsweredPartition, TopicData as AnsweredTopic,
    };
    use kafka_protocol::messages::{BrokerId, DescribeQuorumResponse};

    use super::*;

    fn answer(topic: &str, partition: AnsweredPartition) -> DescribeQuorumResponse {
        DescribeQuorumResponse::default().with_topics(vec![AnsweredTopic::default()
            .with_topic_name(topic_name(topic))
            .with_partitions(vec![partition])])
    }

    #[test]
    fn a_partition_error_is_the_operations_error() {
        let refused = AnsweredPartition::default().with_error_code(3);
        let error = quorum_info(answer(METADATA_TOPIC, refused)).unwrap_err();
        assert!(matches!(error, Error::Kafka { code, .. } if code.code() == 3), "{error}");
    }

    #[test]
    fn an_answer_for_another_topic_is_refused() {
        let error = quorum_info(answer("other", AnsweredPartition::default())).unwrap_err();
        assert!(matches!(error, Error::Protocol { .. }), "{error}");
    }

    #[test]
    fn unknown_timestamps_are_none() {
        let voter = ReplicaState::default().with_replica_id(BrokerId(1)).with_log_end_offset(5);
        let partition = AnsweredPartition::default()
            .with_leader_id(BrokerId(1))
            .with_high_watermark(5)
            .with_current_voters(vec![voter]);
        let info = quorum_info(answer(METADATA_TOPIC, partition)).unwrap();
        assert_eq!(info.voters[0].last_fetch_timestamp, None);
        assert_eq!((info.leader_id, info.high_watermark, info.voters[0].log_end_offset), (1, 5, 5));
    }
}
