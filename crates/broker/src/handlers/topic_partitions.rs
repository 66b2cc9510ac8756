//! DescribeTopicPartitions (KIP-966): topics and their partitions from the
//! published image, with eligible leader replicas, a page at a time.
//!
//! Topics are answered in name order from the request's cursor on, at most
//! `ResponsePartitionLimit` partitions (capped by Kafka's
//! `max.request.partition.size.limit`) per answer; `NextCursor` names where
//! the next page starts. As in Metadata, the principal sees only topics it
//! may describe.

use std::collections::BTreeSet;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse};
use strom_metadata::acl::{operation, resource};
use strom_metadata::TopicImage;
use uuid::Uuid;

use super::metadata::{broker_ids, PartitionState};
use super::{topic_name, AUTHORIZED_OPERATIONS_OMITTED};
use crate::dispatch::RequestContext;

/// Kafka's `max.request.partition.size.limit` default: the most partitions
/// one answer carries, whatever the request asks.
const PARTITION_LIMIT_MAX: i32 = 2000;

pub fn handle(
    ctx: &RequestContext<'_>,
    request: DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    match describe(ctx, &request) {
        Ok(response) => response,
        Err(message) => refused(&request, ResponseError::InvalidRequest, &message),
    }
}

fn describe(
    ctx: &RequestContext<'_>,
    request: &DescribeTopicPartitionsRequest,
) -> Result<DescribeTopicPartitionsResponse, String> {
    let image = ctx.controller().image();
    let (cursor_topic, cursor_partition) = request
        .cursor
        .as_ref()
        .map_or((String::new(), 0), |c| (c.topic_name.0.to_string(), c.partition_index));
    if cursor_partition < 0 {
        return Err("the cursor's partition index must not be negative".into());
    }
    let all_topics = request.topics.is_empty();
    // Sorted and without duplicates, from the cursor's topic on.
    let names: BTreeSet<String> = if all_topics {
        image.topics().map(|t| t.name.clone()).collect()
    } else {
        request.topics.iter().map(|t| t.name.0.to_string()).collect()
    };
    let names: Vec<String> = names.into_iter().filter(|name| *name >= cursor_topic).collect();
    if request.cursor.is_some() && !names.contains(&cursor_topic) {
        return Err(format!("the topic list must contain the cursor's topic {cursor_topic}"));
    }

    // Unauthorized topics are left out of a listing, and refused when named,
    // before anything says whether they exist.
    let (authorized, unauthorized): (Vec<String>, Vec<String>) =
        names.into_iter().partition(|name| ctx.authorize(operation::DESCRIBE, resource::TOPIC, name));
    let mut response = DescribeTopicPartitionsResponse::default();
    let mut remaining = request.response_partition_limit.clamp(1, PARTITION_LIMIT_MAX) as usize;
    for name in authorized {
        if remaining == 0 {
            response.next_cursor = Some(Cursor::default().with_topic_name(topic_name(&name)));
            break;
        }
        let Some(topic) = image.topic(&name) else {
            if !all_topics {
                response.topics.push(absent_topic(&name));
            }
            continue;
        };
        let first = if name == cursor_topic { cursor_partition } else { 0 };
        let (described, next) = describe_topic(ctx, topic, first, remaining);
        remaining -= described.partitions.len();
        response.topics.push(described);
        if let Some(next) = next {
            response.next_cursor =
                Some(Cursor::default().with_topic_name(topic_name(&name)).with_partition_index(next));
            break;
        }
    }
    for topic in &mut response.topics {
        if let Some(name) = topic.name.as_ref().filter(|_| topic.error_code == 0) {
            topic.topic_authorized_operations = ctx.authorized_operations(resource::TOPIC, &name.0);
        }
    }
    if !all_topics {
        let refused =
            unauthorized.iter().map(|name| topic_error(name, ResponseError::TopicAuthorizationFailed));
        response.topics.extend(refused);
    }
    Ok(response)
}

/// The topic's partitions from `first` on, at most `limit` of them, and the
/// index of the next one when some were left out.
fn describe_topic(
    ctx: &RequestContext<'_>,
    topic: &TopicImage,
    first: i32,
    limit: usize,
) -> (DescribeTopicPartitionsResponseTopic, Option<i32>) {
    let hosted = ctx.replicas().topic(&topic.name);
    let (image, node_id) = (ctx.controller().image(), ctx.config().node_id);
    let listener = ctx.listener.to_string();
    let mut wanted = topic.partitions.range(first..);
    let partitions = wanted
        .by_ref()
        .take(limit)
        .map(|(index, p)| {
            let state = PartitionState::new(&image, node_id, hosted.as_deref(), &listener, *index, p);
            DescribeTopicPartitionsResponsePartition::default()
                .with_error_code(state.error_code())
                .with_partition_index(*index)
                .with_leader_id(BrokerId(state.leader))
                .with_leader_epoch(p.leader_epoch)
                .with_replica_nodes(broker_ids(&p.replicas))
                .with_isr_nodes(broker_ids(&p.isr))
                .with_eligible_leader_replicas(Some(broker_ids(&p.elr)))
                .with_last_known_elr(Some(broker_ids(&p.last_known_elr)))
                .with_offline_replicas(broker_ids(&state.offline))
        })
        .collect();
    let next = wanted.next().map(|(index, _)| *index);
    let described = DescribeTopicPartitionsResponseTopic::default()
        .with_name(Some(topic_name(&topic.name)))
        .with_topic_id(topic.id)
        .with_is_internal(topic.is_internal())
        .with_partitions(partitions);
    (described, next)
}

/// A named topic the image lacks: unknown, or invalid when its name could
/// never be a topic's.
fn absent_topic(name: &str) -> DescribeTopicPartitionsResponseTopic {
    let error = match strom_metadata::controller::validate_topic_name(name) {
        Ok(()) => ResponseError::UnknownTopicOrPartition,
        Err(_) => ResponseError::InvalidTopicException,
    };
    topic_error(name, error)
}

fn topic_error(name: &str, error: ResponseError) -> DescribeTopicPartitionsResponseTopic {
    DescribeTopicPartitionsResponseTopic::default()
        .with_name(Some(topic_name(name)))
        .with_topic_id(Uuid::nil())
        .with_error_code(error.code())
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

/// A request refused as a whole: each topic it named carries the error, as
/// Kafka's error response for this API does.
fn refused(
    request: &DescribeTopicPartitionsRequest,
    error: ResponseError,
    message: &str,
) -> DescribeTopicPartitionsResponse {
    tracing::debug!("DescribeTopicPartitions refused: {message}");
    let topics = request.topics.iter().map(|t| topic_error(&t.name.0, error)).collect();
    DescribeTopicPartitionsResponse::default().with_topics(topics)
}
