//! Consumer-group administration: list, describe and delete groups, and
//! read or set their committed offsets (as `kafka-consumer-groups.sh` does).
//! Every group request goes to the group's coordinator, found anew on each
//! attempt so that NOT_COORDINATOR is cured by a retry.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DescribeGroupsRequest, GroupId, ListGroupsRequest, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchRequest,
};

use super::{str_bytes, topic_name, Admin, ItemResult, PartitionResult};
use crate::error::{Error, Result};

/// FindCoordinator's key type for a consumer group.
pub(crate) const GROUP_KEY: i8 = 0;

/// A group as ListGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    pub group_id: String,
    /// `consumer` for consumer groups, empty for groups without members' protocol.
    pub protocol_type: String,
    /// Empty when the broker is older than ListGroups v4.
    pub state: String,
}

/// A member of a described group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// The assignment as the group's leader wrote it: for consumer groups a
    /// `ConsumerProtocolAssignment` behind its i16 version.
    pub assignment: Bytes,
}

impl MemberDescription {
    /// The `(topic, partition)`s a consumer-protocol assignment gives this
    /// member; empty when it has none yet (the group is rebalancing).
    pub fn assigned_partitions(&self) -> Result<Vec<(String, i32)>> {
        let assignment = crate::consumer::protocol::Assignment::decode(&self.assignment)?;
        Ok(assignment.partitions.into_iter().map(|tp| (tp.topic, tp.partition)).collect())
    }
}

/// What DescribeGroups says about one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    pub state: String,
    pub protocol_type: String,
    /// The assignor in use (`range`, `cooperative-sticky`…).
    pub protocol: String,
    pub members: Vec<MemberDescription>,
}

/// Who commits: a member of a generation, or an admin (generation -1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    pub generation: i32,
    pub member_id: String,
    pub instance_id: Option<String>,
}

impl GroupMember {
    /// No member: allowed only while the group has no active members.
    pub fn admin() -> Self {
        Self { generation: -1, member_id: String::new(), instance_id: None }
    }
}

fn group_id(name: &str) -> GroupId {
    GroupId(str_bytes(name))
}

impl Admin {
    /// Every group on every broker, sorted by id.
    pub async fn list_groups(&self) -> Result<Vec<ListedGroup>> {
        let metadata = self.cluster.refresh(Some(&[]), false).await?;
        let mut groups = Vec::new();
        let request = ListGroupsRequest::default();
        for node_id in metadata.brokers.keys() {
            let connection = self.cluster.connection(*node_id).await?;
            let response = self.cluster.with_retries("ListGroups", || connection.send(&request)).await?;
            if let Some(error) = Error::from_code(response.error_code, None) {
                return Err(error);
            }
            groups.extend(response.groups.into_iter().map(|g| ListedGroup {
                group_id: g.group_id.0.to_string(),
                protocol_type: g.protocol_type.to_string(),
                state: g.group_state.to_string(),
            }));
        }
        groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(groups)
    }

    /// DescribeGroups, each asked of its coordinator.
    pub async fn describe_groups(&self, names: &[String]) -> Result<Vec<ItemResult<GroupDescription>>> {
        let mut results = Vec::new();
        for name in names {
            let request = DescribeGroupsRequest::default().with_groups(vec![group_id(name)]);
            let response = self
                .cluster
                .with_retries("DescribeGroups", || async {
                    let response = self.cluster.coordinator(GROUP_KEY, name).await?.send(&request).await?;
                    // A coordinator error for the group is worth another lookup.
                    match response.groups.first().and_then(|g| Error::from_code(g.error_code, None)) {
                        Some(error) if error.is_retriable() => Err(error),
                        _ => Ok(response),
                    }
                })
                .await;
            let result = response.and_then(|response| {
                let group = response.groups.into_iter().next().ok_or_else(|| Error::Protocol {
                    addr: format!("coordinator of {name}"),
                    reason: "DescribeGroups answered no group".into(),
                })?;
                if let Some(error) =
                    Error::from_code(group.error_code, group.error_message.as_ref().map(|m| m.as_str()))
                {
                    return Err(error);
                }
                Ok(GroupDescription {
                    group_id: group.group_id.0.to_string(),
                    state: group.group_state.to_string(),
                    protocol_type: group.protocol_type.to_string(),
                    protocol: group.protocol_data.to_string(),
                    members: group
                        .members
                        .into_iter()
                        .map(|m| MemberDescription {
                            member_id: m.member_id.to_string(),
                            group_instance_id: m.group_instance_id.map(|i| i.to_string()),
                            client_id: m.client_id.to_string(),
                            client_host: m.client_host.to_string(),
                            assignment: m.member_assignment,
                        })
                        .collect(),
                })
            });
            results.push(ItemResult { name: name.clone(), result });
        }
        Ok(results)
    }

    /// DeleteGroups: only empty groups can go (NON_EMPTY_GROUP otherwise).
    pub async fn delete_groups(&self, names: &[String]) -> Result<Vec<ItemResult>> {
        let mut results = Vec::new();
        for name in names {
            let request = DeleteGroupsRequest::default().with_groups_names(vec![group_id(name)]);
            let outcome = self
                .cluster
                .with_retries("DeleteGroups", || async {
                    let response = self.cluster.coordinator(GROUP_KEY, name).await?.send(&request).await?;
                    let code = response.results.first().map_or(0, |r| r.error_code);
                    match Error::from_code(code, None) {
                        Some(error) if error.is_retriable() => Err(error),
                        Some(error) => Ok(Err(error)),
                        None => Ok(Ok(())),
                    }
                })
                .await;
            results.push(ItemResult { name: name.clone(), result: outcome.and_then(|r| r) });
        }
        Ok(results)
    }

    /// The group's committed offsets: for `partitions`, or every partition
    /// it has committed when `None`. An offset of `None` means no commit.
    pub async fn fetch_offsets(
        &self,
        group: &str,
        partitions: Option<&[(String, i32)]>,
    ) -> Result<Vec<PartitionResult<Option<i64>>>> {
        let topics = partitions.map(|partitions| {
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for (topic, partition) in partitions {
                by_topic.entry(topic).or_default().push(*partition);
            }
            by_topic
                .into_iter()
                .map(|(name, indexes)| {
                    OffsetFetchRequestTopic::default()
                        .with_name(topic_name(name))
                        .with_partition_indexes(indexes)
                })
                .collect()
        });
        let request = OffsetFetchRequest::default().with_group_id(group_id(group)).with_topics(topics);
        let response = self
            .cluster
            .with_retries("OffsetFetch", || async {
                let response = self.cluster.coordinator(GROUP_KEY, group).await?.send(&request).await?;
                match Error::from_code(response.error_code, None) {
                    Some(error) => Err(error),
                    None => Ok(response),
                }
            })
            .await?;
        let mut results = Vec::new();
        for topic in response.topics {
            for p in topic.partitions {
                let result = match Error::from_code(p.error_code, None) {
                    Some(error) => Err(error),
                    None => Ok((p.committed_offset >= 0).then_some(p.committed_offset)),
                };
                results.push(PartitionResult {
                    topic: topic.name.0.to_string(),
                    partition: p.partition_index,
                    result,
                });
            }
        }
        Ok(results)
    }

    /// Sets committed offsets as an admin (no generation, no member): the
    /// group must have no active members, as with Java's
    /// `alterConsumerGroupOffsets`.
    pub async fn commit_offsets(
        &self,
        group: &str,
        offsets: &[(String, i32, i64)],
    ) -> Result<Vec<PartitionResult<()>>> {
        self.commit_offsets_as(group, &GroupMember::admin(), offsets).await
    }

    /// Commits offsets as `member` of the group's current generation.
    pub async fn commit_offsets_as(
        &self,
        group: &str,
        member: &GroupMember,
        offsets: &[(String, i32, i64)],
    ) -> Result<Vec<PartitionResult<()>>> {
        let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for (topic, partition, offset) in offsets {
            by_topic.entry(topic).or_default().push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(*partition)
                    .with_committed_offset(*offset)
                    .with_committed_leader_epoch(-1),
            );
        }
        let request = OffsetCommitRequest::default()
            .with_group_id(group_id(group))
            .with_generation_id_or_member_epoch(member.generation)
            .with_member_id(str_bytes(&member.member_id))
            .with_group_instance_id(member.instance_id.as_deref().map(str_bytes))
            .with_retention_time_ms(-1)
            .with_topics(
                by_topic
                    .into_iter()
                    .map(|(name, partitions)| {
                        OffsetCommitRequestTopic::default()
                            .with_name(topic_name(name))
                            .with_partitions(partitions)
                    })
                    .collect(),
            );
        let response = self
            .cluster
            .with_retries("OffsetCommit", || async {
                self.cluster.coordinator(GROUP_KEY, group).await?.send(&request).await
            })
            .await?;
        Ok(response
            .topics
            .into_iter()
            .flat_map(|topic| {
                let name = topic.name.0.to_string();
                topic.partitions.into_iter().map(move |p| PartitionResult {
                    topic: name.clone(),
                    partition: p.partition_index,
                    result: Error::from_code(p.error_code, None).map_or(Ok(()), Err),
                })
            })
            .collect())
    }

    /// OffsetDelete: forget the group's committed offsets of `partitions`.
    /// A group-level refusal (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP…) is the
    /// outer error; GROUP_SUBSCRIBED_TO_TOPIC comes per partition.
    pub async fn delete_offsets(
        &self,
        group: &str,
        partitions: &[(String, i32)],
    ) -> Result<Vec<PartitionResult<()>>> {
        let mut by_topic: BTreeMap<&str, Vec<OffsetDeleteRequestPartition>> = BTreeMap::new();
        for (topic, partition) in partitions {
            by_topic
                .entry(topic)
                .or_default()
                .push(OffsetDeleteRequestPartition::default().with_partition_index(*partition));
        }
        let request = OffsetDeleteRequest::default().with_group_id(group_id(group)).with_topics(
            by_topic
                .into_iter()
                .map(|(name, partitions)| {
                    OffsetDeleteRequestTopic::default()
                        .with_name(topic_name(name))
                        .with_partitions(partitions)
                })
                .collect(),
        );
        let response = self
            .cluster
            .with_retries("OffsetDelete", || async {
                let response = self.cluster.coordinator(GROUP_KEY, group).await?.send(&request).await?;
                match Error::from_code(response.error_code, None) {
                    Some(error) if error.is_retriable() => Err(error),
                    _ => Ok(response),
                }
            })
            .await?;
        if let Some(error) = Error::from_code(response.error_code, None) {
            return Err(error);
        }
        Ok(response
            .topics
            .into_iter()
            .flat_map(|topic| {
                let name = topic.name.0.to_string();
                topic.partitions.into_iter().map(move |p| PartitionResult {
                    topic: name.clone(),
                    partition: p.partition_index,
                    result: Error::from_code(p.error_code, None).map_or(Ok(()), Err),
                })
            })
            .collect())
    }
}
