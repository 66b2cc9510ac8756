//! OffsetCommit, OffsetFetch and OffsetDelete.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest,
    OffsetFetchResponse,
};
use uuid::Uuid;

use super::{str_bytes, topic_name};
use crate::dispatch::RequestContext;
use crate::group::codec::OffsetValue;
use crate::group::{CommitEntry, GroupCoordinator};
use crate::replica::ReplicaManager;
use strom_metadata::acl::{operation, resource};

fn code(error: Option<ResponseError>) -> i16 {
    error.map_or(0, |e| e.code())
}

/// v10 names topics by id; earlier versions by name.
fn resolve(replicas: &ReplicaManager, by_id: bool, name: &str, id: Uuid) -> String {
    if by_id {
        replicas.topic_by_id(&id).map(|t| t.name.clone()).unwrap_or_default()
    } else {
        name.to_owned()
    }
}

pub async fn commit(ctx: &RequestContext<'_>, request: OffsetCommitRequest) -> OffsetCommitResponse {
    let by_id = ctx.api_version >= 10;
    if !super::groups::may_read_group(ctx, &request.group_id) {
        return OffsetCommitResponse::default().with_topics(commit_refused(&request, by_id));
    }
    let mut entries = Vec::new();
    let mut shape = Vec::new();
    for topic in &request.topics {
        let name = resolve(ctx.replicas(), by_id, topic.name.as_str(), topic.topic_id);
        // Committing needs READ on the topic; refused topics commit nothing.
        let denied = !name.is_empty() && !ctx.authorize(operation::READ, resource::TOPIC, &name);
        let indexes: Vec<i32> = topic.partitions.iter().map(|p| p.partition_index).collect();
        shape.push((topic.name.clone(), topic.topic_id, indexes, denied));
        if denied {
            continue;
        }
        for p in &topic.partitions {
            entries.push(CommitEntry {
                topic: name.clone(),
                partition: p.partition_index,
                offset: p.committed_offset,
                leader_epoch: p.committed_leader_epoch,
                metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
            });
        }
    }
    let mut outcomes = ctx
        .groups()
        .commit(
            ctx.coordinator_host(),
            request.group_id.as_str(),
            request.generation_id_or_member_epoch,
            request.member_id.as_str(),
            request.group_instance_id.as_deref(),
            &entries,
        )
        .await
        .into_iter();
    let mut entries = entries.into_iter();
    let topics = shape
        .into_iter()
        .map(|(name, id, indexes, denied)| {
            let partitions = indexes
                .into_iter()
                .map(|index| {
                    if denied {
                        return OffsetCommitResponsePartition::default()
                            .with_partition_index(index)
                            .with_error_code(ResponseError::TopicAuthorizationFailed.code());
                    }
                    let entry = entries.next().expect("one outcome per entry");
                    let error = outcomes.next().flatten();
                    let error = if by_id && entry.topic.is_empty() {
                        Some(ResponseError::UnknownTopicId)
                    } else {
                        error
                    };
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(entry.partition)
                        .with_error_code(code(error))
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(name)
                .with_topic_id(if by_id { id } else { Uuid::nil() })
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// Every partition of the request answered GROUP_AUTHORIZATION_FAILED.
fn commit_refused(request: &OffsetCommitRequest, by_id: bool) -> Vec<OffsetCommitResponseTopic> {
    let refused = ResponseError::GroupAuthorizationFailed.code();
    (request.topics.iter())
        .map(|t| {
            let partitions = t.partitions.iter().map(|p| {
                OffsetCommitResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(refused)
            });
            OffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_topic_id(if by_id { t.topic_id } else { Uuid::nil() })
                .with_partitions(partitions.collect())
        })
        .collect()
}

/// A topic's partitions with their committed offsets, if any.
type TopicOffsets = (String, Vec<(i32, Option<OffsetValue>)>);

/// One group's committed offsets, grouped by topic in request order.
fn fetched(groups: &GroupCoordinator, group: &str, wanted: Option<Vec<(String, i32)>>) -> Vec<TopicOffsets> {
    let offsets = groups.fetch_offsets(group, wanted.as_deref());
    let mut topics: Vec<TopicOffsets> = Vec::new();
    for (topic, partition, value) in offsets {
        match topics.iter_mut().find(|(t, _)| *t == topic) {
            Some((_, partitions)) => partitions.push((partition, value)),
            None => topics.push((topic, vec![(partition, value)])),
        }
    }
    topics
}

/// With `require_stable` (v7+), an offset a transaction has staged but not
/// yet ended is UNSTABLE_OFFSET_COMMIT: the consumer waits and retries.
fn unstable(
    groups: &GroupCoordinator,
    require_stable: bool,
    group: &str,
    topic: &str,
    partition: i32,
) -> bool {
    require_stable && groups.has_pending_txn_offset(group, topic, partition)
}

pub fn fetch(ctx: &RequestContext<'_>, request: OffsetFetchRequest) -> OffsetFetchResponse {
    let coordinator = ctx.groups();
    let require_stable = ctx.api_version >= 7 && request.require_stable;
    let may_describe = |group: &str| ctx.authorize(operation::DESCRIBE, resource::GROUP, group);
    let group_denied = ResponseError::GroupAuthorizationFailed.code();
    if ctx.api_version < 8 && !may_describe(&request.group_id) {
        return OffsetFetchResponse::default().with_error_code(group_denied);
    }
    if ctx.api_version < 8 {
        if let Err(error) = coordinator.check_coordinator(ctx.coordinator_host(), &request.group_id) {
            return OffsetFetchResponse::default().with_error_code(error.code());
        }
        let wanted = request.topics.as_ref().map(|topics| {
            topics.iter().flat_map(|t| t.partition_indexes.iter().map(|p| (t.name.to_string(), *p))).collect()
        });
        let topics = fetched(coordinator, request.group_id.as_str(), wanted)
            .into_iter()
            .map(|(topic, partitions)| {
                let partitions = partitions
                    .into_iter()
                    .map(|(index, value)| {
                        if unstable(coordinator, require_stable, request.group_id.as_str(), &topic, index) {
                            return OffsetFetchResponsePartition::default()
                                .with_partition_index(index)
                                .with_committed_offset(-1)
                                .with_error_code(ResponseError::UnstableOffsetCommit.code());
                        }
                        let (offset, epoch, metadata) = unpack(value);
                        let p = OffsetFetchResponsePartition::default()
                            .with_partition_index(index)
                            .with_committed_offset(offset)
                            .with_metadata(Some(str_bytes(&metadata)));
                        if ctx.api_version >= 5 {
                            p.with_committed_leader_epoch(epoch)
                        } else {
                            p
                        }
                    })
                    .collect();
                OffsetFetchResponseTopic::default().with_name(topic_name(&topic)).with_partitions(partitions)
            })
            .filter_map(|t: OffsetFetchResponseTopic| {
                let name = t.name.to_string();
                let listed = request.topics.is_some();
                let partitions = t.partitions.iter().map(|p| p.partition_index);
                match authorized_topic(ctx, &name, listed, partitions) {
                    None => Some(t),
                    Some(None) => None,
                    Some(Some(refused)) => Some(
                        t.with_partitions(
                            refused
                                .into_iter()
                                .map(|index| {
                                    OffsetFetchResponsePartition::default()
                                        .with_partition_index(index)
                                        .with_committed_offset(-1)
                                        .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                                })
                                .collect(),
                        ),
                    ),
                }
            })
            .collect();
        return OffsetFetchResponse::default().with_topics(topics);
    }
    let by_id = ctx.api_version >= 10;
    let groups = request
        .groups
        .iter()
        .map(|group| {
            if !may_describe(&group.group_id) {
                return OffsetFetchResponseGroup::default()
                    .with_group_id(group.group_id.clone())
                    .with_error_code(group_denied);
            }
            if let Err(error) = coordinator.check_coordinator(ctx.coordinator_host(), &group.group_id) {
                return OffsetFetchResponseGroup::default()
                    .with_group_id(group.group_id.clone())
                    .with_error_code(error.code());
            }
            let wanted = group.topics.as_ref().map(|topics| {
                topics
                    .iter()
                    .flat_map(|t| {
                        let name = resolve(ctx.replicas(), by_id, t.name.as_str(), t.topic_id);
                        t.partition_indexes.iter().map(move |p| (name.clone(), *p))
                    })
                    .collect()
            });
            let topics = fetched(coordinator, group.group_id.as_str(), wanted)
                .into_iter()
                .filter_map(|(topic, partitions)| {
                    let partitions: Vec<OffsetFetchResponsePartitions> = partitions
                        .into_iter()
                        .map(|(index, value)| {
                            if unstable(coordinator, require_stable, group.group_id.as_str(), &topic, index) {
                                return OffsetFetchResponsePartitions::default()
                                    .with_partition_index(index)
                                    .with_committed_offset(-1)
                                    .with_error_code(ResponseError::UnstableOffsetCommit.code());
                            }
                            let (offset, epoch, metadata) = unpack(value);
                            OffsetFetchResponsePartitions::default()
                                .with_partition_index(index)
                                .with_committed_offset(offset)
                                .with_committed_leader_epoch(epoch)
                                .with_metadata(Some(str_bytes(&metadata)))
                        })
                        .collect();
                    let id = if by_id {
                        ctx.replicas().topic(&topic).map_or(Uuid::nil(), |t| t.id)
                    } else {
                        Uuid::nil()
                    };
                    let name = if by_id { topic_name("") } else { topic_name(&topic) };
                    let indexes: Vec<i32> = partitions
                        .iter()
                        .map(|p: &OffsetFetchResponsePartitions| p.partition_index)
                        .collect();
                    let partitions =
                        match authorized_topic(ctx, &topic, group.topics.is_some(), indexes.into_iter()) {
                            None => partitions,
                            Some(None) => return None,
                            Some(Some(refused)) => refused
                                .into_iter()
                                .map(|index| {
                                    OffsetFetchResponsePartitions::default()
                                        .with_partition_index(index)
                                        .with_committed_offset(-1)
                                        .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                                })
                                .collect(),
                        };
                    Some(
                        OffsetFetchResponseTopics::default()
                            .with_name(name)
                            .with_topic_id(id)
                            .with_partitions(partitions),
                    )
                })
                .collect();
            OffsetFetchResponseGroup::default().with_group_id(group.group_id.clone()).with_topics(topics)
        })
        .collect();
    OffsetFetchResponse::default().with_groups(groups)
}

/// `None` if the principal may describe `topic`; otherwise, as Kafka
/// answers, the partitions to refuse when the request listed its topics,
/// or `Some(None)` to leave the topic out of an all-topics fetch.
fn authorized_topic(
    ctx: &RequestContext<'_>,
    topic: &str,
    listed: bool,
    partitions: impl Iterator<Item = i32>,
) -> Option<Option<Vec<i32>>> {
    if ctx.authorize(operation::DESCRIBE, resource::TOPIC, topic) {
        return None;
    }
    Some(listed.then(|| partitions.collect()))
}

/// (offset, leader epoch, metadata), with Kafka's "none committed" values.
fn unpack(value: Option<OffsetValue>) -> (i64, i32, String) {
    value.map_or((-1, -1, String::new()), |v| (v.offset, v.leader_epoch, v.metadata))
}

pub fn delete(ctx: &RequestContext<'_>, request: OffsetDeleteRequest) -> OffsetDeleteResponse {
    if !ctx.authorize(operation::DELETE, resource::GROUP, &request.group_id) {
        return OffsetDeleteResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    // Deleting a topic's offsets needs READ on it; refused topics delete nothing.
    let denied: Vec<bool> =
        request.topics.iter().map(|t| !ctx.authorize(operation::READ, resource::TOPIC, &t.name)).collect();
    let partitions: Vec<(String, i32)> = request
        .topics
        .iter()
        .zip(&denied)
        .filter(|(_, denied)| !**denied)
        .map(|(t, _)| t)
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.to_string(), p.partition_index)))
        .collect();
    let deleted = ctx.groups().check_coordinator(ctx.coordinator_host(), &request.group_id).and_then(|()| {
        ctx.groups().delete_offsets(ctx.coordinator_host(), request.group_id.as_str(), &partitions)
    });
    match deleted {
        Err(error) => OffsetDeleteResponse::default().with_error_code(error.code()),
        Ok(outcomes) => {
            let mut outcomes = outcomes.into_iter();
            let topics = request
                .topics
                .iter()
                .zip(&denied)
                .map(|(t, denied)| {
                    let partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let error = match denied {
                                true => Some(ResponseError::TopicAuthorizationFailed),
                                false => outcomes.next().flatten(),
                            };
                            OffsetDeleteResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code(error))
                        })
                        .collect();
                    OffsetDeleteResponseTopic::default().with_name(t.name.clone()).with_partitions(partitions)
                })
                .collect();
            OffsetDeleteResponse::default().with_topics(topics)
        }
    }
}
