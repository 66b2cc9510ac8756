//! The KIP-848 consumer group APIs: ConsumerGroupHeartbeat and
//! ConsumerGroupDescribe.

use std::collections::BTreeSet;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member, TopicPartitions as DescribedPartitions,
};
use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
};

use strom_metadata::controller::GROUP_VERSION_FEATURE;

use super::{str_bytes, topic_name, AUTHORIZED_OPERATIONS_OMITTED};
use crate::dispatch::RequestContext;
use crate::group::consumer::{Heartbeat, Tp, DEFAULT_ASSIGNOR};

pub fn heartbeat(
    ctx: &RequestContext<'_>,
    request: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    // The protocol is on while `group.version` is finalized at 1 or more.
    let enabled = ctx.controller().image().features.get(GROUP_VERSION_FEATURE).is_some_and(|l| *l >= 1);
    if !enabled {
        return ConsumerGroupHeartbeatResponse::default()
            .with_error_code(ResponseError::UnsupportedVersion.code());
    }
    if !super::groups::may_read_group(ctx, &request.group_id) {
        return ConsumerGroupHeartbeatResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    // Subscribing needs DESCRIBE on every topic named (KIP-848).
    let hidden: Vec<&str> = (request.subscribed_topic_names.iter().flatten())
        .map(|t| t.0.as_str())
        .filter(|t| {
            !ctx.authorize(strom_metadata::acl::operation::DESCRIBE, strom_metadata::acl::resource::TOPIC, t)
        })
        .collect();
    if !hidden.is_empty() {
        return ConsumerGroupHeartbeatResponse::default()
            .with_error_code(ResponseError::TopicAuthorizationFailed.code())
            .with_error_message(Some(str_bytes(&format!("Topics not authorized: {}", hidden.join(", ")))));
    }
    let owned = request
        .topic_partitions
        .as_ref()
        .map(|topics| topics.iter().flat_map(|t| t.partitions.iter().map(|p| (t.topic_id, *p))).collect());
    // v0 clients let the coordinator name them on their first heartbeat.
    let member_id = if request.member_id.is_empty() && request.member_epoch == 0 {
        uuid::Uuid::new_v4().simple().to_string()
    } else {
        request.member_id.to_string()
    };
    let heartbeat = Heartbeat {
        member_id,
        member_epoch: request.member_epoch,
        instance_id: request.instance_id.as_ref().map(|s| s.to_string()),
        rack_id: request.rack_id.as_ref().map(|s| s.to_string()),
        client_id: ctx.header.client_id.as_ref().map(|s| s.to_string()).unwrap_or_default(),
        client_host: ctx.client_host.clone(),
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        subscribed: request
            .subscribed_topic_names
            .as_ref()
            .map(|names| names.iter().map(|n| n.to_string()).collect()),
        assignor: request.server_assignor.as_ref().map(|s| s.to_string()),
        owned,
    };
    let host = ctx.coordinator_host();
    if request.subscribed_topic_regex.as_ref().is_some_and(|r| !r.is_empty()) {
        return ConsumerGroupHeartbeatResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(str_bytes("regular expression subscriptions are not supported")));
    }
    let beat = ctx
        .groups()
        .check_coordinator(host, &request.group_id)
        .and_then(|()| ctx.groups().consumer_heartbeat(host, request.group_id.as_str(), heartbeat));
    match beat {
        Ok(reply) => ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(str_bytes(&reply.member_id)))
            .with_member_epoch(reply.member_epoch)
            .with_heartbeat_interval_ms(strom_metadata::group_config::int_setting(
                ctx.controller().image().group_configs(&request.group_id),
                "consumer.heartbeat.interval.ms",
                ctx.groups().config().consumer_heartbeat_interval_ms,
            ))
            .with_assignment(
                reply.assignment.map(|a| Assignment::default().with_topic_partitions(by_topic(&a))),
            ),
        Err(error) => ConsumerGroupHeartbeatResponse::default()
            .with_error_code(error.code())
            .with_member_id(Some(request.member_id))
            .with_member_epoch(request.member_epoch),
    }
}

fn by_topic(partitions: &BTreeSet<Tp>) -> Vec<TopicPartitions> {
    let mut topics: Vec<TopicPartitions> = Vec::new();
    for (id, partition) in partitions {
        match topics.last_mut() {
            Some(t) if t.topic_id == *id => t.partitions.push(*partition),
            _ => topics.push(TopicPartitions::default().with_topic_id(*id).with_partitions(vec![*partition])),
        }
    }
    topics
}

pub fn describe(
    ctx: &RequestContext<'_>,
    request: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let image = ctx.controller().image();
    let described = |partitions: &BTreeSet<Tp>| {
        let topics = by_topic(partitions)
            .into_iter()
            .map(|t| {
                let name = image.topic_by_id(&t.topic_id).map(|t| t.name.clone()).unwrap_or_default();
                DescribedPartitions::default()
                    .with_topic_id(t.topic_id)
                    .with_topic_name(topic_name(&name))
                    .with_partitions(t.partitions)
            })
            .collect();
        DescribedAssignment::default().with_topic_partitions(topics)
    };
    let groups = request
        .group_ids
        .iter()
        .map(|id| {
            let operations = match request.include_authorized_operations {
                true => ctx.authorized_operations(strom_metadata::acl::resource::GROUP, id),
                false => AUTHORIZED_OPERATIONS_OMITTED,
            };
            let base =
                DescribedGroup::default().with_group_id(id.clone()).with_authorized_operations(operations);
            if !ctx.authorize(
                strom_metadata::acl::operation::DESCRIBE,
                strom_metadata::acl::resource::GROUP,
                id,
            ) {
                return base.with_error_code(ResponseError::GroupAuthorizationFailed.code());
            }
            if let Err(error) = ctx.groups().check_coordinator(ctx.coordinator_host(), id) {
                return base.with_error_code(error.code());
            }
            let Some(group) = ctx.groups().describe_consumer_group(id.as_str()) else {
                return base
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(str_bytes("no consumer group with this id")));
            };
            let members = group
                .members
                .values()
                .map(|m| {
                    let target = group.target.get(&m.id).cloned().unwrap_or_default();
                    Member::default()
                        .with_member_id(str_bytes(&m.id))
                        .with_instance_id(m.instance_id.as_deref().map(str_bytes))
                        .with_rack_id(m.rack_id.as_deref().map(str_bytes))
                        .with_member_epoch(m.epoch)
                        .with_client_id(str_bytes(&m.client_id))
                        .with_client_host(str_bytes(&m.client_host))
                        .with_subscribed_topic_names(m.subscribed.iter().map(|t| topic_name(t)).collect())
                        .with_assignment(described(&m.assigned))
                        .with_target_assignment(described(&target))
                })
                .collect();
            let assignor = if group.assignor.is_empty() { DEFAULT_ASSIGNOR } else { &group.assignor };
            base.with_group_state(str_bytes(group.state_name()))
                .with_group_epoch(group.epoch)
                .with_assignment_epoch(group.assignment_epoch)
                .with_assignor_name(str_bytes(assignor))
                .with_members(members)
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}
