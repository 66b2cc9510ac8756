//! Partition reassignments (KIP-455), as Java's
//! `Admin.alterPartitionReassignments` and `listPartitionReassignments`
//! send them: both go to the controller.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, ListPartitionReassignmentsRequest,
};

use super::{timeout_ms, topic_name, Admin, PartitionResult};
use crate::error::{Error, Result};

/// A partition's ongoing reassignment: all its replicas now, and those
/// being added and removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionReassignment {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<i32>,
    pub adding_replicas: Vec<i32>,
    pub removing_replicas: Vec<i32>,
}

impl Admin {
    /// AlterPartitionReassignments: moves each `(topic, partition)` to its
    /// replicas, or cancels its reassignment when they are `None`. Without
    /// `allow_replication_factor_change` (KIP-860) a target must keep the
    /// partition's replication factor.
    pub async fn alter_partition_reassignments(
        &self,
        targets: &[(String, i32, Option<Vec<i32>>)],
        allow_replication_factor_change: bool,
    ) -> Result<Vec<PartitionResult<()>>> {
        let mut by_topic: BTreeMap<&str, Vec<ReassignablePartition>> = BTreeMap::new();
        for (topic, partition, replicas) in targets {
            let replicas = replicas.as_ref().map(|r| r.iter().copied().map(BrokerId).collect());
            let partition =
                ReassignablePartition::default().with_partition_index(*partition).with_replicas(replicas);
            by_topic.entry(topic).or_default().push(partition);
        }
        let topics = by_topic.into_iter().map(|(t, partitions)| {
            ReassignableTopic::default().with_name(topic_name(t)).with_partitions(partitions)
        });
        let request = AlterPartitionReassignmentsRequest::default()
            .with_timeout_ms(timeout_ms(&self.cluster))
            .with_allow_replication_factor_change(allow_replication_factor_change)
            .with_topics(topics.collect());
        let response = self.to_controller("AlterPartitionReassignments", &request).await?;
        if let Some(e) =
            Error::from_code(response.error_code, response.error_message.as_ref().map(|m| m.as_str()))
        {
            return Err(e);
        }
        let results = response.responses.into_iter().flat_map(|topic| {
            topic.partitions.into_iter().map(move |p| PartitionResult {
                topic: topic.name.0.to_string(),
                partition: p.partition_index,
                result: Error::from_code(p.error_code, p.error_message.as_ref().map(|m| m.as_str()))
                    .map_or(Ok(()), Err),
            })
        });
        Ok(results.collect())
    }

    /// ListPartitionReassignments: the ongoing reassignments of
    /// `partitions`, or of every partition when `None`.
    pub async fn list_partition_reassignments(
        &self,
        partitions: Option<&[(String, i32)]>,
    ) -> Result<Vec<PartitionReassignment>> {
        let topics = partitions.map(|partitions| {
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for (topic, partition) in partitions {
                by_topic.entry(topic).or_default().push(*partition);
            }
            by_topic
                .into_iter()
                .map(|(t, ids)| {
                    ListPartitionReassignmentsTopics::default()
                        .with_name(topic_name(t))
                        .with_partition_indexes(ids)
                })
                .collect()
        });
        let request = ListPartitionReassignmentsRequest::default()
            .with_timeout_ms(timeout_ms(&self.cluster))
            .with_topics(topics);
        let response = self.to_controller("ListPartitionReassignments", &request).await?;
        if let Some(e) =
            Error::from_code(response.error_code, response.error_message.as_ref().map(|m| m.as_str()))
        {
            return Err(e);
        }
        let ids = |ids: Vec<BrokerId>| ids.into_iter().map(|id| id.0).collect();
        let listed = response.topics.into_iter().flat_map(|topic| {
            topic.partitions.into_iter().map(move |p| PartitionReassignment {
                topic: topic.name.0.to_string(),
                partition: p.partition_index,
                replicas: ids(p.replicas),
                adding_replicas: ids(p.adding_replicas),
                removing_replicas: ids(p.removing_replicas),
            })
        });
        Ok(listed.collect())
    }
}
