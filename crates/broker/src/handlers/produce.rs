//! Produce: validate and append each partition's record set.
//!
//! acks=1 is answered when the append returns; acks=all waits in a
//! purgatory until the high watermark passes the batch (at once with one
//! in-sync replica), or `timeout_ms` passes (REQUEST_TIMED_OUT); acks=0
//! gets no response at all. acks=all needs `min.insync.replicas` in the
//! ISR: NOT_ENOUGH_REPLICAS before the append, and
//! NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below it while the
//! batch waited. Each partition gets one
//! batch, as Kafka demands from Produce v3 on; a transactional batch must go
//! to a partition its transaction added, which the coordinator confirms
//! before the batch opens the transaction there (KIP-890,
//! [`crate::verification`]).

use std::sync::atomic::Ordering;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse};

use super::transactions::verify_transactional_produce;
use super::{str_bytes, LeaderHints};
use crate::controller_channel::ControllerChannel;
use crate::dispatch::{MaybeReply, RequestContext};
use crate::error::storage_error;
use crate::metrics::Metrics;
use crate::quota::QuotaType;
use crate::replica::{ReplicaManager, TopicPartitions, VerifiedAppendError};
use crate::replication::purgatory::{await_appends, AwaitedAppend};
use strom_storage::batch::{BatchHeader, Batches};
use strom_storage::StorageError;

pub async fn handle(ctx: &RequestContext<'_>, request: ProduceRequest) -> MaybeReply<ProduceResponse> {
    let acks = request.acks;
    let transactional_id = request.transactional_id.as_ref().map(|t| t.to_string());
    let throttle_time_ms =
        crate::quota::record_request(ctx, QuotaType::Produce, record_bytes(&request) as f64);
    let mut waits = Vec::new();
    let mut responses: Vec<TopicProduceResponse> = Vec::with_capacity(request.topic_data.len());
    for (at, topic) in request.topic_data.into_iter().enumerate() {
        let response = match produce_denial(ctx, transactional_id.as_deref(), &topic) {
            Some(denied) => denied_topic(topic, denied),
            None => {
                let (response, waiting) = produce_topic(ctx, acks, transactional_id.as_deref(), topic).await;
                waits.extend(waiting.into_iter().map(|(index, wait)| ((at, index), wait)));
                response
            }
        };
        responses.push(response);
    }
    if !waits.is_empty() {
        let timeout = Duration::from_millis(request.timeout_ms.max(0) as u64);
        for ((topic, partition), error) in await_appends(ctx.stopping(), waits, timeout).await {
            responses[topic].partition_responses[partition].error_code = error.code();
        }
    }
    count_failures(ctx.replicas(), ctx.metrics(), &responses);
    if acks == 0 {
        // As Kafka: a failed acks=0 request closes the connection, so the
        // producer refreshes its metadata (a leader may have moved). With
        // no response, the mute alone throttles.
        let failed = responses.iter().flat_map(|t| &t.partition_responses).any(|p| p.error_code != 0);
        let response = ProduceResponse::default().with_responses(responses);
        return MaybeReply { response, send: false, close: failed };
    }
    for partition in responses.iter_mut().flat_map(|t| t.partition_responses.iter_mut()) {
        // Fields this version does not carry go back to their defaults.
        if ctx.api_version < 5 {
            partition.log_start_offset = -1;
        }
        if ctx.api_version < 8 {
            partition.error_message = None;
            partition.record_errors.clear();
        }
        // Clients of v3 and older may not know KAFKA_STORAGE_ERROR; Kafka
        // sends what makes them refresh metadata and retry.
        if ctx.api_version <= 3 && partition.error_code == ResponseError::KafkaStorageError.code() {
            partition.error_code = ResponseError::NotLeaderOrFollower.code();
        }
    }
    let mut response =
        ProduceResponse::default().with_responses(responses).with_throttle_time_ms(throttle_time_ms);
    if ctx.api_version >= FIRST_LEADER_HINT_VERSION {
        add_leader_hints(ctx, &mut response);
    }
    MaybeReply { response, send: true, close: false }
}

/// Produce v10 is the first to carry KIP-951's leader hints.
const FIRST_LEADER_HINT_VERSION: i16 = 10;

/// Names the leader of each partition refused with NOT_LEADER_OR_FOLLOWER,
/// so the client retries there without a metadata round trip (KIP-951).
fn add_leader_hints(ctx: &RequestContext<'_>, response: &mut ProduceResponse) {
    let not_leader = ResponseError::NotLeaderOrFollower.code();
    let mut hints = LeaderHints::new(ctx);
    for topic in &mut response.responses {
        for partition in topic.partition_responses.iter_mut().filter(|p| p.error_code == not_leader) {
            let hint = hints.hint(&topic.name, partition.index);
            partition.current_leader = LeaderIdAndEpoch::default()
                .with_leader_id(BrokerId(hint.leader_id))
                .with_leader_epoch(hint.leader_epoch);
        }
    }
    response.node_endpoints = hints
        .endpoints()
        .into_iter()
        .map(|(id, endpoint, rack)| {
            NodeEndpoint::default()
                .with_node_id(BrokerId(id))
                .with_host(str_bytes(&endpoint.host))
                .with_port(i32::from(endpoint.port))
                .with_rack(rack.as_deref().map(str_bytes))
        })
        .collect();
}

/// Why Kafka refuses to let this request write to `topic`: WRITE on its
/// transactional id, then WRITE on the topic. A topic id this broker does
/// not know is left to the unknown-topic answer.
fn produce_denial(
    ctx: &RequestContext<'_>,
    transactional_id: Option<&str>,
    topic: &TopicProduceData,
) -> Option<ResponseError> {
    use strom_metadata::acl::{operation, resource};
    if let Some(id) = transactional_id {
        if !ctx.authorize(operation::WRITE, resource::TRANSACTIONAL_ID, id) {
            return Some(ResponseError::TransactionalIdAuthorizationFailed);
        }
    }
    let name = if ctx.api_version >= 13 {
        ctx.replicas().topic_by_id(&topic.topic_id)?.name.clone()
    } else {
        topic.name.0.to_string()
    };
    (!ctx.authorize(operation::WRITE, resource::TOPIC, &name))
        .then_some(ResponseError::TopicAuthorizationFailed)
}

fn denied_topic(topic: TopicProduceData, error: ResponseError) -> TopicProduceResponse {
    let partitions =
        topic.partition_data.iter().map(|data| error_response(data.index, error, None)).collect();
    TopicProduceResponse::default()
        .with_name(topic.name)
        .with_topic_id(topic.topic_id)
        .with_partition_responses(partitions)
}

/// The record bytes a Produce carries: what `producer_byte_rate` counts.
fn record_bytes(request: &ProduceRequest) -> usize {
    let partitions = request.topic_data.iter().flat_map(|t| t.partition_data.iter());
    partitions.map(|p| p.records.as_ref().map_or(0, |r| r.len())).sum()
}

async fn produce_topic(
    ctx: &RequestContext<'_>,
    acks: i16,
    transactional_id: Option<&str>,
    topic: TopicProduceData,
) -> (TopicProduceResponse, Vec<(usize, AwaitedAppend)>) {
    // v13 names topics by id; earlier versions by name.
    let replicas = ctx.replicas();
    let (hosted, unknown, named) = if ctx.api_version >= 13 {
        let named = format!("topic id {}", topic.topic_id);
        (replicas.topic_by_id(&topic.topic_id), ResponseError::UnknownTopicId, named)
    } else {
        let named = format!("topic {}", topic.name.0);
        (replicas.topic(topic.name.0.as_str()), ResponseError::UnknownTopicOrPartition, named)
    };
    let mut waits = Vec::new();
    let mut partitions = Vec::with_capacity(topic.partition_data.len());
    for (at, data) in topic.partition_data.into_iter().enumerate() {
        let response = match &hosted {
            None => error_response(data.index, unknown, Some(format!("this broker hosts no {named}"))),
            Some(hosted) => {
                let mut awaited = None;
                let response =
                    produce_partition(ctx, hosted, acks, transactional_id, data, &mut awaited).await;
                waits.extend(awaited.map(|wait| (at, wait)));
                response
            }
        };
        partitions.push(response);
    }
    let response = TopicProduceResponse::default()
        .with_name(topic.name)
        .with_topic_id(topic.topic_id)
        .with_partition_responses(partitions);
    (response, waits)
}

async fn produce_partition(
    ctx: &RequestContext<'_>,
    hosted: &TopicPartitions,
    acks: i16,
    transactional_id: Option<&str>,
    data: PartitionProduceData,
    awaited: &mut Option<AwaitedAppend>,
) -> PartitionProduceResponse {
    let (index, version) = (data.index, ctx.api_version);
    let mut min_insync = 1;
    let partition = match ctx.replicas().leader_partition(&hosted.name, index) {
        Ok(partition) => partition,
        Err(ResponseError::NotLeaderOrFollower) => {
            let message = format!("this broker does not lead partition {index} of topic {}", hosted.name);
            return error_response(index, ResponseError::NotLeaderOrFollower, Some(message));
        }
        Err(error) => {
            let message = format!("topic {} has no partition {index}", hosted.name);
            return error_response(index, error, Some(message));
        }
    };
    if hosted.name == crate::group::OFFSETS_TOPIC || hosted.name == crate::txn::TRANSACTION_STATE_TOPIC {
        let message = format!("cannot append to internal topic {}", hosted.name);
        return error_response(index, ResponseError::InvalidTopicException, Some(message));
    }
    if !matches!(acks, -1..=1) {
        let message = format!("acks must be -1, 0 or 1, not {acks}");
        return error_response(index, ResponseError::InvalidRequiredAcks, Some(message));
    }
    // Only acks=all asks for the in-sync count: keep the lookup off acks=1.
    if acks == -1 {
        min_insync = min_insync_replicas(ctx.controller(), ctx.replicas(), &hosted.name).max(1) as usize;
        let in_sync = partition.isr_size();
        if in_sync < min_insync {
            let message =
                format!("min.insync.replicas is {min_insync} but only {in_sync} replicas are in sync");
            return error_response(index, ResponseError::NotEnoughReplicas, Some(message));
        }
    }
    let records = data.records.unwrap_or_default();
    if let Err(message) = single_batch(&records) {
        return error_response(index, ResponseError::InvalidRecord, Some(message));
    }
    if let Err(message) = check_codecs(version, &records) {
        return error_response(index, ResponseError::UnsupportedCompressionType, Some(message));
    }
    let transactional = BatchHeader::parse(&records).ok().filter(BatchHeader::is_transactional);
    let now = strom_storage::now_ms();
    let appended = match transactional {
        None => partition.append(&records, now).map_err(VerifiedAppendError::from),
        Some(header) => {
            let Some(transactional_id) = transactional_id.filter(|t| !t.is_empty()) else {
                let message = "transactional records need the producer's transactional id".to_owned();
                return error_response(
                    index,
                    ResponseError::TransactionalIdAuthorizationFailed,
                    Some(message),
                );
            };
            let tp = (hosted.name.clone(), index);
            let host = ctx.coordinator_host();
            let verify = verify_transactional_produce(host, version, transactional_id, &header, &tp);
            partition.append_verified(&records, now, header.producer_id, verify).await
        }
    };
    match appended {
        Ok((info, log_start_offset)) => {
            let metrics = ctx.metrics().topic(&hosted.name);
            metrics.bytes_in.fetch_add(info.bytes as u64, Ordering::Relaxed);
            metrics.messages_in.fetch_add(info.records, Ordering::Relaxed);
            // Alone in the ISR, the high watermark has passed the batch already.
            let required_offset = info.last_offset + 1;
            if acks == -1 && partition.high_watermark() < required_offset {
                *awaited = Some(AwaitedAppend::new(partition, required_offset, min_insync));
            }
            PartitionProduceResponse::default()
                .with_index(index)
                .with_base_offset(info.first_offset)
                .with_log_append_time_ms(info.log_append_time)
                .with_log_start_offset(log_start_offset)
        }
        Err(VerifiedAppendError::Unverified(error)) => {
            tracing::debug!(partition = %partition.tp, "transactional produce not verified: {error:?}");
            error_response(index, error, Some(unverified_message(error)))
        }
        Err(VerifiedAppendError::Storage(e)) => {
            tracing::debug!(partition = %partition.tp, "produce rejected: {e}");
            error_response(index, storage_error(&e), Some(e.to_string()))
                .with_record_errors(record_errors(&e))
        }
    }
}

/// Kafka's rule from Produce v3 on (every version served): a partition's
/// record set is exactly one batch, so no batch rides behind another
/// unchecked.
fn single_batch(records: &[u8]) -> Result<(), String> {
    if records.is_empty() {
        return Err("a partition's record set needs one record batch".into());
    }
    let mut batches = Batches::new(records).map_while(Result::ok);
    // A torn or damaged set is the log's to refuse, as CORRUPT_MESSAGE.
    match (batches.next(), batches.next()) {
        (Some(_), Some(_)) => Err("a partition's record set may hold only one record batch".into()),
        _ => Ok(()),
    }
}

/// What the producer reads when the coordinator did not place the
/// partition in its transaction, in Kafka's words.
fn unverified_message(error: ResponseError) -> String {
    match error {
        ResponseError::InvalidTxnState | ResponseError::TransactionAbortable => {
            "Partition was not added to the transaction".to_owned()
        }
        ResponseError::NotEnoughReplicas => {
            "Unable to verify the partition has been added to the transaction".to_owned()
        }
        other => format!("transactional produce refused: {other:?}"),
    }
}

/// Kafka's codec rule: zstd needs Produce v7 (KIP-110), so a client too old
/// to ask for it does not store batches older consumers cannot read.
fn check_codecs(version: i16, records: &[u8]) -> Result<(), String> {
    const ZSTD: i16 = 4;
    const FIRST_ZSTD_VERSION: i16 = 7;
    if version >= FIRST_ZSTD_VERSION {
        return Ok(());
    }
    let zstd = Batches::new(records)
        .map_while(Result::ok)
        .any(|raw| BatchHeader::parse(raw).is_ok_and(|header| header.compression() == ZSTD));
    if zstd {
        return Err(format!(
            "Produce v{version} may not carry zstd batches: v{FIRST_ZSTD_VERSION} is the first"
        ));
    }
    Ok(())
}

/// The records a refused batch was refused for (KIP-467), for clients to
/// fail those alone.
fn record_errors(e: &StorageError) -> Vec<BatchIndexAndErrorMessage> {
    let StorageError::RejectedRecords { errors, .. } = e else { return Vec::new() };
    errors
        .iter()
        .map(|error| {
            BatchIndexAndErrorMessage::default()
                .with_batch_index(error.batch_index)
                .with_batch_index_error_message(Some(str_bytes(&error.message)))
        })
        .collect()
}

/// Counts refused partition appends per topic (dispatch counts the error
/// codes of every API).
fn count_failures(replicas: &ReplicaManager, metrics: &Metrics, responses: &[TopicProduceResponse]) {
    for topic in responses {
        for _refused in topic.partition_responses.iter().filter(|p| p.error_code != 0) {
            if replicas.topic(&topic.name).is_some() {
                metrics.topic(&topic.name).failed_produce_requests.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The topic's `min.insync.replicas`, else the broker's (dynamic or static).
pub(crate) fn min_insync_replicas(
    controller: &ControllerChannel,
    replicas: &ReplicaManager,
    topic: &str,
) -> i32 {
    let image = controller.image();
    let configured = image.topic(topic).and_then(|t| t.configs.get("min.insync.replicas")?.parse().ok());
    configured.unwrap_or_else(|| replicas.config().min_insync_replicas)
}

fn error_response(index: i32, error: ResponseError, message: Option<String>) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(error.code())
        .with_base_offset(-1)
        .with_log_append_time_ms(-1)
        .with_log_start_offset(-1)
        .with_error_message(message.as_deref().map(str_bytes))
}
