//! DeleteRecords: moves partitions' log start offsets forward (KIP-107).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use crate::dispatch::RequestContext;
use crate::error::storage_error;
use crate::replica::DeleteRecordsError;
use strom_metadata::acl::{operation, resource};

pub fn handle(ctx: &RequestContext<'_>, request: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let mut moved = false;
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let denied = !ctx.authorize(operation::DELETE, resource::TOPIC, &topic.name);
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let result =
                        DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
                    if denied {
                        return result
                            .with_low_watermark(-1)
                            .with_error_code(ResponseError::TopicAuthorizationFailed.code());
                    }
                    let partition = match ctx.replicas().leader_partition(&topic.name, p.partition_index) {
                        Ok(partition) => partition,
                        Err(error) => return result.with_low_watermark(-1).with_error_code(error.code()),
                    };
                    match partition.delete_records(p.offset) {
                        Ok(low_watermark) => {
                            moved = true;
                            result.with_low_watermark(low_watermark)
                        }
                        Err(e) => result.with_low_watermark(-1).with_error_code(refusal(&e).code()),
                    }
                })
                .collect();
            DeleteRecordsTopicResult::default().with_name(topic.name).with_partitions(partitions)
        })
        .collect();
    // A deletion the client was told of must not come back after a crash.
    if moved {
        if let Err(e) = ctx.replicas().checkpoint() {
            tracing::error!("checkpoint after DeleteRecords failed: {e}");
        }
    }
    DeleteRecordsResponse::default().with_topics(topics)
}

fn refusal(e: &DeleteRecordsError) -> ResponseError {
    match e {
        DeleteRecordsError::OffsetOutOfRange => ResponseError::OffsetOutOfRange,
        DeleteRecordsError::PolicyViolation => ResponseError::PolicyViolation,
        DeleteRecordsError::Storage(e) => storage_error(e),
    }
}
