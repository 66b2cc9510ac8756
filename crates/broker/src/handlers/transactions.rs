//! The transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
//! TxnOffsetCommit, WriteTxnMarkers, and the admin views
//! DescribeTransactions, ListTransactions and DescribeProducers.
//!
//! Clients older than KIP-588 do not know PRODUCER_FENCED: as Kafka does,
//! they get INVALID_PRODUCER_EPOCH instead ([`fenced_for`]).

use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::describe_transactions_response::{self, TopicData};
use kafka_protocol::messages::list_transactions_response;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    DescribeProducersRequest, DescribeProducersResponse, DescribeTransactionsRequest,
    DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse, ListTransactionsRequest,
    ListTransactionsResponse, ProducerId, TransactionalId, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
    WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};

use super::{str_bytes, topic_name};
use crate::coordinator_host::CoordinatorHost;
use crate::dispatch::RequestContext;
use crate::group::{CommitEntry, TxnCommit, OFFSETS_TOPIC};
use crate::internal_topic;
use crate::replica::ReplicaManager;
use crate::txn::state::{TxnPartition, TxnResult, TxnState};
use crate::txn::{self, TxnMarker};
use strom_metadata::acl::{operation, resource};
use strom_storage::batch::BatchHeader;

fn code(error: Option<ResponseError>) -> i16 {
    error.map_or(0, |e| e.code())
}

/// PRODUCER_FENCED exists from these versions on (KIP-588); older clients
/// get INVALID_PRODUCER_EPOCH.
pub fn fenced_for(error: ResponseError, version: i16, first_version: i16) -> ResponseError {
    if error == ResponseError::ProducerFenced && version < first_version {
        ResponseError::InvalidProducerEpoch
    } else {
        error
    }
}

/// The (topic, partition) pairs of a request, and whether the metadata
/// knows all of them.
fn resolve(replicas: &ReplicaManager, topics: &[AddPartitionsToTxnTopic]) -> (Vec<TxnPartition>, bool) {
    let mut partitions = Vec::new();
    let mut all_known = true;
    for topic in topics {
        for index in &topic.partitions {
            // Any broker may lead it: the metadata says it exists.
            all_known &= replicas.knows(topic.name.as_str(), *index);
            partitions.push((topic.name.to_string(), *index));
        }
    }
    (partitions, all_known)
}

/// Kafka's per-partition answer to AddPartitionsToTxn: the coordinator's
/// error for all, or, when some partition is unknown, UNKNOWN_TOPIC_OR_PARTITION
/// for those and OPERATION_NOT_ATTEMPTED for the rest.
async fn add_or_verify(
    broker: &dyn CoordinatorHost,
    version: i16,
    transactional_id: &str,
    producer_id: i64,
    epoch: i16,
    verify_only: bool,
    topics: &[AddPartitionsToTxnTopic],
) -> Vec<AddPartitionsToTxnTopicResult> {
    let (partitions, all_known) = resolve(broker.replicas(), topics);
    let errors: Vec<Option<ResponseError>> = if !all_known {
        partitions
            .iter()
            .map(|(t, p)| match broker.replicas().knows(t, *p) {
                false => Some(ResponseError::UnknownTopicOrPartition),
                true => Some(ResponseError::OperationNotAttempted),
            })
            .collect()
    } else if verify_only {
        broker.transactions().verify_partitions(broker, transactional_id, producer_id, epoch, &partitions)
    } else {
        let outcome = broker
            .transactions()
            .add_partitions(broker, transactional_id, producer_id, epoch, &partitions)
            .await;
        vec![outcome.err().map(|e| fenced_for(e, version, 2)); partitions.len()]
    };
    let mut errors = errors.into_iter();
    topics
        .iter()
        .map(|topic| {
            let results = topic
                .partitions
                .iter()
                .map(|index| {
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(*index)
                        .with_partition_error_code(code(errors.next().flatten()))
                })
                .collect();
            AddPartitionsToTxnTopicResult::default()
                .with_name(topic.name.clone())
                .with_results_by_partition(results)
        })
        .collect()
}

/// A client's AddPartitionsToTxn refused as Kafka refuses it: every
/// partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED without WRITE on the
/// transactional id; else, when some topic lacks WRITE, its partitions
/// TOPIC_AUTHORIZATION_FAILED and the others OPERATION_NOT_ATTEMPTED.
fn add_denied(
    ctx: &RequestContext<'_>,
    transactional_id: &str,
    topics: &[AddPartitionsToTxnTopic],
) -> Option<Vec<AddPartitionsToTxnTopicResult>> {
    let may_write = |topic: &str| ctx.authorize(operation::WRITE, resource::TOPIC, topic);
    let txn_denied = !ctx.authorize(operation::WRITE, resource::TRANSACTIONAL_ID, transactional_id);
    if !txn_denied && topics.iter().all(|t| may_write(&t.name)) {
        return None;
    }
    let results = topics.iter().map(|topic| {
        let error = match () {
            _ if txn_denied => ResponseError::TransactionalIdAuthorizationFailed,
            _ if !may_write(&topic.name) => ResponseError::TopicAuthorizationFailed,
            _ => ResponseError::OperationNotAttempted,
        };
        let results = topic.partitions.iter().map(|index| {
            AddPartitionsToTxnPartitionResult::default()
                .with_partition_index(*index)
                .with_partition_error_code(error.code())
        });
        AddPartitionsToTxnTopicResult::default()
            .with_name(topic.name.clone())
            .with_results_by_partition(results.collect())
    });
    Some(results.collect())
}

/// The error for a transactional client without WRITE on its
/// transactional id, or then without READ on `group`.
fn txn_denied(
    ctx: &RequestContext<'_>,
    transactional_id: &str,
    group: Option<&str>,
) -> Option<ResponseError> {
    if !ctx.authorize(operation::WRITE, resource::TRANSACTIONAL_ID, transactional_id) {
        return Some(ResponseError::TransactionalIdAuthorizationFailed);
    }
    group.filter(|g| !super::groups::may_read_group(ctx, g)).map(|_| ResponseError::GroupAuthorizationFailed)
}

pub async fn add_partitions(
    ctx: &RequestContext<'_>,
    request: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    let broker = ctx.coordinator_host();
    if ctx.api_version < 4 {
        let txn_id = request.v3_and_below_transactional_id.as_str();
        if let Some(results) = add_denied(ctx, txn_id, &request.v3_and_below_topics) {
            return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
        }
        let results = add_or_verify(
            broker,
            ctx.api_version,
            request.v3_and_below_transactional_id.as_str(),
            request.v3_and_below_producer_id.0,
            request.v3_and_below_producer_epoch,
            false,
            &request.v3_and_below_topics,
        )
        .await;
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
    }
    // v4+: the brokers' batched form, each transaction added or verified.
    if !ctx.authorize_cluster(operation::CLUSTER_ACTION) {
        return AddPartitionsToTxnResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let mut results = Vec::with_capacity(request.transactions.len());
    for txn in &request.transactions {
        let topic_results = add_or_verify(
            broker,
            ctx.api_version,
            txn.transactional_id.as_str(),
            txn.producer_id.0,
            txn.producer_epoch,
            txn.verify_only,
            &txn.topics,
        )
        .await;
        results.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(txn.transactional_id.clone())
                .with_topic_results(topic_results),
        );
    }
    AddPartitionsToTxnResponse::default().with_results_by_transaction(results)
}

pub async fn add_offsets(
    ctx: &RequestContext<'_>,
    request: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    let broker = ctx.coordinator_host();
    if let Some(error) = txn_denied(ctx, &request.transactional_id, Some(&request.group_id)) {
        return AddOffsetsToTxnResponse::default().with_error_code(error.code());
    }
    let partition = (OFFSETS_TOPIC.to_owned(), broker.groups().partition_for(request.group_id.as_str()));
    // Created as FindCoordinator would, so the marker has a partition to land in.
    let outcome = match internal_topic::create(ctx, &broker.groups().offsets_topic()).await {
        Ok(()) => {
            let (id, producer) = (request.transactional_id.as_str(), request.producer_id.0);
            broker
                .transactions()
                .add_partitions(broker, id, producer, request.producer_epoch, &[partition])
                .await
        }
        Err(error) => Err(error),
    };
    let error = outcome.err().map(|e| fenced_for(e, ctx.api_version, 2));
    AddOffsetsToTxnResponse::default().with_error_code(code(error))
}

pub async fn end(ctx: &RequestContext<'_>, request: EndTxnRequest) -> EndTxnResponse {
    let result = if request.committed { TxnResult::Commit } else { TxnResult::Abort };
    let outcome = match txn_denied(ctx, &request.transactional_id, None) {
        Some(error) => Err(error),
        None => {
            ctx.transactions()
                .end_txn(
                    ctx.coordinator_host(),
                    request.transactional_id.as_str(),
                    request.producer_id.0,
                    request.producer_epoch,
                    result,
                )
                .await
        }
    };
    let error = outcome.err().map(|e| fenced_for(e, ctx.api_version, 2));
    EndTxnResponse::default()
        .with_error_code(code(error))
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
}

pub async fn txn_offset_commit(
    ctx: &RequestContext<'_>,
    request: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    let broker = ctx.coordinator_host();
    let entries: Vec<CommitEntry> = request
        .topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(|p| CommitEntry {
                topic: topic.name.to_string(),
                partition: p.partition_index,
                offset: p.committed_offset,
                leader_epoch: if ctx.api_version >= 2 { p.committed_leader_epoch } else { -1 },
                metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
            })
        })
        .collect();
    let coordinator = broker.groups().check_coordinator(broker, &request.group_id);
    let denied = txn_denied(ctx, &request.transactional_id, Some(&request.group_id));
    let topic_denied = |topic: &str| !ctx.authorize(operation::READ, resource::TOPIC, topic);
    let outcomes = if denied.is_some() {
        vec![denied; entries.len()]
    } else if entries.iter().any(|e| topic_denied(&e.topic)) {
        // Kafka commits nothing then: each refused topic's partitions say why.
        let answer = |e: &CommitEntry| match topic_denied(&e.topic) {
            true => Some(ResponseError::TopicAuthorizationFailed),
            false => Some(ResponseError::OperationNotAttempted),
        };
        entries.iter().map(answer).collect()
    } else if request.group_id.is_empty() {
        vec![Some(ResponseError::InvalidGroupId); entries.len()]
    } else if let Err(error) = coordinator {
        vec![Some(error); entries.len()]
    } else {
        let commit = TxnCommit {
            group_id: request.group_id.to_string(),
            producer_id: request.producer_id.0,
            producer_epoch: request.producer_epoch,
            generation: if ctx.api_version >= 3 { request.generation_id } else { -1 },
            member_id: if ctx.api_version >= 3 { request.member_id.to_string() } else { String::new() },
            instance_id: request.group_instance_id.as_ref().map(|i| i.to_string()),
        };
        let verify = verify_offsets_in_txn(broker, &request);
        let outcomes = broker.groups().commit_in_txn(broker, &commit, &entries, verify).await;
        outcomes.into_iter().map(|o| o.map(|e| fenced_for(e, ctx.api_version, 3))).collect()
    };
    let mut outcomes = outcomes.into_iter();
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code(outcomes.next().flatten()))
                })
                .collect();
            TxnOffsetCommitResponseTopic::default().with_name(topic.name.clone()).with_partitions(partitions)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

/// The group's `__consumer_offsets` partition must be in the producer's
/// transaction (AddOffsetsToTxn first), as Kafka's verification demands.
async fn verify_offsets_in_txn(
    broker: &dyn CoordinatorHost,
    request: &TxnOffsetCommitRequest,
) -> Result<(), ResponseError> {
    let partition = (OFFSETS_TOPIC.to_owned(), broker.groups().partition_for(request.group_id.as_str()));
    // One round trip when the transaction coordinator is another broker.
    let (producer_id, epoch) = (request.producer_id.0, request.producer_epoch);
    // Kafka's mapping: a transaction coordinator that cannot answer yet is
    // this group coordinator being unavailable, which the client retries
    // (NOT_COORDINATOR would send it looking for another group coordinator).
    verify_in_txn(broker, request.transactional_id.as_str(), producer_id, epoch, &partition).await.map_err(
        |e| match e {
            ResponseError::TransactionAbortable => ResponseError::InvalidTxnState,
            ResponseError::CoordinatorLoadInProgress | ResponseError::NotCoordinator => {
                ResponseError::CoordinatorNotAvailable
            }
            other => other,
        },
    )
}

/// WriteTxnMarkers: the markers of transaction coordinators on other
/// brokers (and of tools), each answered once the partition's ISR holds it
/// (`request.timeout.ms`), as Kafka appends them with acks=-1.
pub async fn write_markers(
    ctx: &RequestContext<'_>,
    request: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let cluster_action = ctx.authorize_cluster(operation::CLUSTER_ACTION);
    let mut writes = Vec::new();
    for marker in &request.markers {
        let txn_marker = TxnMarker {
            producer_id: marker.producer_id.0,
            producer_epoch: marker.producer_epoch,
            coordinator_epoch: marker.coordinator_epoch,
            result: if marker.transaction_result { TxnResult::Commit } else { TxnResult::Abort },
        };
        for topic in &marker.topics {
            let partitions = topic.partition_indexes.iter().map(|index| (topic.name.to_string(), *index));
            writes.extend(partitions.map(|tp| (txn_marker, tp)));
        }
    }
    let mut errors = match cluster_action {
        true => {
            let timeout = Duration::from_millis(ctx.transactions().config().request_timeout_ms);
            txn::write_markers(ctx.coordinator_host(), &writes, timeout).await
        }
        false => vec![Some(ResponseError::ClusterAuthorizationFailed); writes.len()],
    }
    .into_iter();
    let markers = request
        .markers
        .into_iter()
        .map(|marker| {
            let topics = marker
                .topics
                .into_iter()
                .map(|topic| {
                    let partitions = topic
                        .partition_indexes
                        .iter()
                        .map(|index| {
                            WritableTxnMarkerPartitionResult::default()
                                .with_partition_index(*index)
                                .with_error_code(code(errors.next().flatten()))
                        })
                        .collect();
                    WritableTxnMarkerTopicResult::default().with_name(topic.name).with_partitions(partitions)
                })
                .collect();
            WritableTxnMarkerResult::default().with_producer_id(marker.producer_id).with_topics(topics)
        })
        .collect();
    WriteTxnMarkersResponse::default().with_markers(markers)
}

pub fn describe(
    ctx: &RequestContext<'_>,
    request: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let states = request
        .transactional_ids
        .iter()
        .map(|id| {
            let base =
                describe_transactions_response::TransactionState::default().with_transactional_id(id.clone());
            let described = match ctx.authorize(operation::DESCRIBE, resource::TRANSACTIONAL_ID, id) {
                true => ctx
                    .transactions()
                    .check_coordinator(ctx.coordinator_host(), id)
                    .and_then(|()| ctx.transactions().describe(id.as_str())),
                false => Err(ResponseError::TransactionalIdAuthorizationFailed),
            };
            match described {
                Err(error) => base
                    .with_error_code(error.code())
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
                Ok(metadata) => {
                    let mut topics: Vec<TopicData> = Vec::new();
                    for (topic, partition) in &metadata.partitions {
                        match topics.last_mut() {
                            Some(t) if t.topic.as_str() == topic.as_str() => t.partitions.push(*partition),
                            _ => topics.push(
                                TopicData::default()
                                    .with_topic(topic_name(topic))
                                    .with_partitions(vec![*partition]),
                            ),
                        }
                    }
                    base.with_transaction_state(str_bytes(metadata.state.name()))
                        .with_transaction_timeout_ms(metadata.timeout_ms)
                        .with_transaction_start_time_ms(metadata.start_timestamp_ms)
                        .with_producer_id(ProducerId(metadata.producer_id))
                        .with_producer_epoch(metadata.producer_epoch)
                        .with_topics(topics)
                }
            }
        })
        .collect();
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

pub fn list(ctx: &RequestContext<'_>, request: ListTransactionsRequest) -> ListTransactionsResponse {
    let mut states = Vec::new();
    let mut unknown = Vec::new();
    for filter in &request.state_filters {
        match TxnState::from_name(filter.as_str()) {
            Some(state) => states.push(state),
            None => unknown.push(filter.clone()),
        }
    }
    let producer_ids: Vec<i64> = request.producer_id_filters.iter().map(|p| p.0).collect();
    let min_duration_ms = if ctx.api_version >= 1 { request.duration_filter } else { -1 };
    let pattern = request.transactional_id_pattern.as_ref().filter(|p| ctx.api_version >= 2 && !p.is_empty());
    let pattern = match pattern.map(|p| IdPattern::compile(p.as_str())).transpose() {
        Ok(pattern) => pattern,
        Err(error) => {
            tracing::debug!("ListTransactions refused a transactional id pattern: {error}");
            return ListTransactionsResponse::default()
                .with_error_code(ResponseError::InvalidRegularExpression.code());
        }
    };
    let listed = ctx
        .transactions()
        .list(&states, &producer_ids, min_duration_ms)
        .into_iter()
        .filter(|t| pattern.as_ref().is_none_or(|p| p.matches(&t.transactional_id)))
        .filter(|t| ctx.authorize(operation::DESCRIBE, resource::TRANSACTIONAL_ID, &t.transactional_id))
        .map(|t| {
            list_transactions_response::TransactionState::default()
                .with_transactional_id(TransactionalId(str_bytes(&t.transactional_id)))
                .with_producer_id(ProducerId(t.producer_id))
                .with_transaction_state(str_bytes(t.state.name()))
        })
        .collect();
    ListTransactionsResponse::default().with_unknown_state_filters(unknown).with_transaction_states(listed)
}

/// The longest transactional id pattern ListTransactions compiles.
const ID_PATTERN_MAX_BYTES: usize = 1024;
/// What one compiled pattern may take.
const ID_PATTERN_SIZE_LIMIT_BYTES: usize = 256 * 1024;
/// The cache of its lazy DFA (regex's default).
const ID_PATTERN_DFA_LIMIT_BYTES: usize = 2 * 1024 * 1024;
/// The deepest nesting of groups and repetitions a pattern may use.
const ID_PATTERN_NEST_LIMIT: u32 = 32;

/// A ListTransactions v2 transactional id pattern (KIP-1152). Kafka compiles
/// it with RE2/J, whose syntax the `regex` crate shares, and keeps the ids it
/// matches whole. Both engines run in time linear in the id, whatever the
/// pattern, and neither recurses; the bounds above cap what a pattern costs
/// to compile and to hold.
struct IdPattern(regex::Regex);

impl IdPattern {
    fn compile(pattern: &str) -> Result<Self, String> {
        if pattern.len() > ID_PATTERN_MAX_BYTES {
            return Err(format!("{} bytes, more than {ID_PATTERN_MAX_BYTES}", pattern.len()));
        }
        let build = |pattern: &str| {
            regex::RegexBuilder::new(pattern)
                .size_limit(ID_PATTERN_SIZE_LIMIT_BYTES)
                .dfa_size_limit(ID_PATTERN_DFA_LIMIT_BYTES)
                .nest_limit(ID_PATTERN_NEST_LIMIT)
                .build()
        };
        // Alone first: anchoring inside a group would accept `a)|(b`.
        build(pattern).map_err(|e| e.to_string())?;
        build(&format!("^(?:{pattern})$")).map(Self).map_err(|e| e.to_string())
    }

    /// Java's `Matcher.matches`: the whole id, not a part of it.
    fn matches(&self, transactional_id: &str) -> bool {
        self.0.is_match(transactional_id)
    }
}

pub fn describe_producers(
    ctx: &RequestContext<'_>,
    request: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let partitions = topic
                .partition_indexes
                .iter()
                .map(|index| {
                    let base = PartitionResponse::default().with_partition_index(*index);
                    if !ctx.authorize(operation::READ, resource::TOPIC, &topic.name) {
                        return base.with_error_code(ResponseError::TopicAuthorizationFailed.code());
                    }
                    let partition = match ctx.replicas().leader_partition(topic.name.as_str(), *index) {
                        Ok(partition) => partition,
                        Err(error) => return base.with_error_code(error.code()),
                    };
                    let mut producers = partition.producers();
                    producers.sort_by_key(|(id, _)| *id);
                    let active = producers
                        .into_iter()
                        .map(|(id, entry)| {
                            ProducerState::default()
                                .with_producer_id(ProducerId(id))
                                .with_producer_epoch(i32::from(entry.epoch))
                                .with_last_sequence(entry.last_batch().map_or(-1, |b| b.last_seq))
                                .with_last_timestamp(entry.last_timestamp)
                                .with_coordinator_epoch(entry.coordinator_epoch)
                                .with_current_txn_start_offset(entry.current_txn_first_offset.unwrap_or(-1))
                        })
                        .collect();
                    base.with_active_producers(active)
                })
                .collect();
            TopicResponse::default().with_name(topic.name.clone()).with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}

/// Whether `partition` is in the ongoing transaction of `transactional_id`,
/// by this broker's coordinator or, when another broker coordinates the
/// id, by that one's answer.
async fn verify_in_txn(
    broker: &dyn CoordinatorHost,
    transactional_id: &str,
    producer_id: i64,
    epoch: i16,
    partition: &TxnPartition,
) -> Result<(), ResponseError> {
    let coordinator = broker.transactions();
    if !coordinator.config().partition_verification {
        return Ok(());
    }
    match coordinator.check_coordinator(broker, transactional_id) {
        Ok(()) => coordinator.verify_produce(transactional_id, producer_id, epoch, partition),
        Err(ResponseError::NotCoordinator) => {
            crate::txn::peers::verify_at_coordinator(broker, transactional_id, producer_id, epoch, partition)
                .await
        }
        // Loading: the id's state is not here yet, ask again.
        Err(error) => Err(error),
    }
}

/// KIP-890 verification of a transactional produce: the coordinator's word
/// (asked over the network when it is another broker) that `partition`
/// belongs to the ongoing transaction of the batch's producer, with its errors mapped as Kafka's partition leader maps them
/// for the producer: TRANSACTION_ABORTABLE only from Produce v11 on
/// (INVALID_TXN_STATE before), and retriable coordinator errors as
/// NOT_ENOUGH_REPLICAS, which every client retries.
pub async fn verify_transactional_produce(
    broker: &dyn CoordinatorHost,
    produce_version: i16,
    transactional_id: &str,
    batch: &BatchHeader,
    partition: &TxnPartition,
) -> Result<(), ResponseError> {
    let (producer_id, epoch) = (batch.producer_id, batch.producer_epoch);
    verify_in_txn(broker, transactional_id, producer_id, epoch, partition).await.map_err(|e| match e {
        ResponseError::TransactionAbortable if produce_version < 11 => ResponseError::InvalidTxnState,
        ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch,
        ResponseError::ConcurrentTransactions
        | ResponseError::CoordinatorLoadInProgress
        | ResponseError::CoordinatorNotAvailable
        | ResponseError::NotCoordinator => ResponseError::NotEnoughReplicas,
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, id: &str) -> bool {
        IdPattern::compile(pattern).unwrap().matches(id)
    }

    #[test]
    fn patterns_match_whole_ids() {
        assert!(matches("tx-.*", "tx-1"));
        assert!(matches(".*", ""));
        assert!(!matches("tx-.*", "my-tx-1"));
        assert!(matches("app\\.tx-1+", "app.tx-111"));
        assert!(!matches("app\\.tx", "appXtx"));
        assert!(matches("^a.c$", "abc"));
        assert!(matches("a|ab", "ab"), "any alternative may match the whole id");
        assert!(matches("(orders|audit)-[0-9]+", "audit-42"));
        assert!(matches("\\w+-\\d", "tx-7"));
    }

    #[test]
    fn bad_and_oversized_patterns_are_refused() {
        for bad in ["a)|(b", "(", "[z-a]", "a{2,1}", "(?<=a)b"] {
            assert!(IdPattern::compile(bad).is_err(), "{bad}");
        }
        let too_long = "a".repeat(ID_PATTERN_MAX_BYTES + 1);
        assert!(IdPattern::compile(&too_long).is_err());
        let too_deep = format!("{}a{}", "(".repeat(40), ")".repeat(40));
        assert!(IdPattern::compile(&too_deep).is_err());
        let too_big = "(?:a{100}){100}";
        assert!(IdPattern::compile(too_big).is_err(), "its program exceeds the size limit");
    }

    #[test]
    fn hostile_patterns_are_matched_without_recursion_or_backtracking() {
        // Patterns of these atoms made the old matcher recurse once per atom
        // (40 KB of them overflowed a worker's stack) or backtrack without end.
        let ids: Vec<String> = (0..1_000).map(|i| format!("{}{i}", "a".repeat(60))).collect();
        for (atom, count) in [("a*", 500), ("a?", 500), ("(a|aa)*", 140), (".?", 100)] {
            let pattern = IdPattern::compile(&format!("{}b", atom.repeat(count))).unwrap();
            assert!(ids.iter().all(|id| !pattern.matches(id)), "{atom}");
            let pattern = IdPattern::compile(&format!("{}[0-9]+", atom.repeat(count))).unwrap();
            assert!(ids.iter().all(|id| pattern.matches(id)), "{atom}");
        }
        let stack_breaker = ".?".repeat(20_000);
        assert!(IdPattern::compile(&stack_breaker).is_err());
    }

    #[test]
    fn old_clients_hear_invalid_producer_epoch() {
        assert_eq!(fenced_for(ResponseError::ProducerFenced, 1, 2), ResponseError::InvalidProducerEpoch);
        assert_eq!(fenced_for(ResponseError::ProducerFenced, 2, 2), ResponseError::ProducerFenced);
        assert_eq!(fenced_for(ResponseError::InvalidTxnState, 0, 2), ResponseError::InvalidTxnState);
    }
}
