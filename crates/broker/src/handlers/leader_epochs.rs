//! OffsetForLeaderEpoch (KIP-101, KIP-320): where a leader epoch ends.
//!
//! Followers ask it to find where their log diverges from the leader's;
//! consumers ask it to check that the position they hold (an offset and
//! the epoch of the record before it) still exists after a leader change.
//! The answer comes from the partition log's leader epoch cache. As in
//! Kafka, `replica_id` (v3+) only tells a follower from a consumer; both
//! get the same answer, the log end offset for the current epoch (not the
//! high watermark), and `current_leader_epoch` fences stale or future
//! clients.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_for_leader_epoch_request::OffsetForLeaderPartition;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use crate::dispatch::RequestContext;
use crate::error::storage_error;
use crate::replica::Partition;
use strom_metadata::acl::{operation, resource};

pub fn handle(
    ctx: &RequestContext<'_>,
    request: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    // A follower (replica id set) needs CLUSTER_ACTION, a client DESCRIBE on each topic.
    let follower = request.replica_id.0 >= 0;
    let cluster_action = follower && ctx.authorize_cluster(operation::CLUSTER_ACTION);
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.topic.0.as_str();
            let denied = match follower {
                true => !cluster_action,
                false => !ctx.authorize(operation::DESCRIBE, resource::TOPIC, &topic.topic),
            };
            let partitions = topic
                .partitions
                .iter()
                .map(|p| match ctx.replicas().leader_partition(name, p.partition) {
                    _ if denied => failure(p.partition, ResponseError::TopicAuthorizationFailed),
                    Ok(partition) => end_offset(&partition, p),
                    Err(error) => failure(p.partition, error),
                })
                .collect();
            OffsetForLeaderTopicResult::default().with_topic(topic.topic).with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}

/// Kafka's `Partition.lastOffsetForLeaderEpoch`: the epoch check first,
/// then the cache's answer ((-1, -1) when it knows no such epoch).
fn end_offset(partition: &Partition, request: &OffsetForLeaderPartition) -> EpochEndOffset {
    if let Err(error) = partition.check_current_leader_epoch(request.current_leader_epoch) {
        return failure(request.partition, error);
    }
    match partition.end_offset_for_epoch(request.leader_epoch) {
        Ok((leader_epoch, end_offset)) => EpochEndOffset::default()
            .with_partition(request.partition)
            .with_leader_epoch(leader_epoch)
            .with_end_offset(end_offset),
        Err(e) => failure(request.partition, storage_error(&e)),
    }
}

fn failure(partition: i32, error: ResponseError) -> EpochEndOffset {
    EpochEndOffset::default()
        .with_partition(partition)
        .with_error_code(error.code())
        .with_leader_epoch(-1)
        .with_end_offset(-1)
}
