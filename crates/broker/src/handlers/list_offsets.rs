//! ListOffsets: earliest, latest, max-timestamp and by-timestamp lookups.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_request::ListOffsetsPartition;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::dispatch::RequestContext;
use crate::error::storage_error;
use crate::replica::Partition;
use strom_metadata::acl::{operation, resource};

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const EARLIEST_PENDING_UPLOAD: i64 = -5;
const LATEST_TIERED: i64 = -6;

/// ListOffsets' `isolation_level` (v2+): read_committed sees up to the last stable offset.
const READ_COMMITTED: i8 = 1;

/// Which offsets a LATEST lookup may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Isolation {
    /// A replica (replica id 0 or above) sees the log end, as in Kafka.
    Replica,
    ReadUncommitted,
    ReadCommitted,
}

pub fn handle(ctx: &RequestContext<'_>, request: ListOffsetsRequest) -> ListOffsetsResponse {
    let isolation = match () {
        _ if request.replica_id.0 >= 0 => Isolation::Replica,
        _ if ctx.api_version >= 2 && request.isolation_level == READ_COMMITTED => Isolation::ReadCommitted,
        _ => Isolation::ReadUncommitted,
    };
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.0.as_str();
            // Listing offsets needs DESCRIBE on the topic.
            let denied = !ctx.authorize(operation::DESCRIBE, resource::TOPIC, &topic.name);
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let response = match ctx.replicas().leader_partition(name, p.partition_index) {
                        _ if denied => failure(p.partition_index, ResponseError::TopicAuthorizationFailed),
                        Ok(partition) => list_partition(&partition, p, isolation),
                        Err(error) => failure(p.partition_index, error),
                    };
                    // The leader epoch is reported from v4 on.
                    if ctx.api_version < 4 {
                        response.with_leader_epoch(-1)
                    } else {
                        response
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default().with_name(topic.name).with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

fn list_partition(
    partition: &Partition,
    request: &ListOffsetsPartition,
    isolation: Isolation,
) -> ListOffsetsPartitionResponse {
    let response = ListOffsetsPartitionResponse::default()
        .with_partition_index(request.partition_index)
        .with_leader_epoch(partition.leader_epoch());
    if !partition.is_online() {
        return failure(request.partition_index, ResponseError::KafkaStorageError);
    }
    if let Err(error) = partition.check_current_leader_epoch(request.current_leader_epoch) {
        return failure(request.partition_index, error);
    }
    let found = match request.timestamp {
        LATEST => Ok(Some((
            -1,
            match isolation {
                Isolation::Replica => partition.log_end_offset(),
                Isolation::ReadCommitted => partition.last_stable_offset(),
                Isolation::ReadUncommitted => partition.high_watermark(),
            },
        ))),
        EARLIEST | EARLIEST_LOCAL => Ok(Some((-1, partition.log_start_offset()))),
        EARLIEST_PENDING_UPLOAD | LATEST_TIERED => Ok(Some((-1, -1))),
        MAX_TIMESTAMP => partition.offset_of_max_timestamp(),
        timestamp if timestamp >= 0 => partition.offset_for_timestamp(timestamp),
        _ => return failure(request.partition_index, ResponseError::InvalidRequest),
    };
    match found {
        Ok(Some((timestamp, offset))) => response.with_timestamp(timestamp).with_offset(offset),
        Ok(None) => response.with_timestamp(-1).with_offset(-1),
        Err(e) => failure(request.partition_index, storage_error(&e)),
    }
}

fn failure(partition: i32, error: ResponseError) -> ListOffsetsPartitionResponse {
    ListOffsetsPartitionResponse::default()
        .with_partition_index(partition)
        .with_error_code(error.code())
        .with_timestamp(-1)
        .with_offset(-1)
}
