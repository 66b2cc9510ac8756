//! Transaction administration (KIP-664), what `kafka-transactions.sh` is
//! built on: list the transactional ids every coordinator knows, describe
//! one at its coordinator, read a partition's producers at its leader, and
//! abort a transaction its coordinator has lost track of (a "hanging"
//! transaction) by writing the abort marker at the leader directly.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use kafka_protocol::messages::{
    ApiKey, DescribeProducersRequest, DescribeTransactionsRequest, ListTransactionsRequest, ProducerId,
    TransactionalId, WriteTxnMarkersRequest,
};

use super::{str_bytes, topic_name, Admin, ItemResult, PartitionResult};
use crate::error::{Error, KafkaCode, Result};

/// FindCoordinator's key type for a transactional id.
const TRANSACTION_KEY: i8 = 1;

/// ListTransactions' filters; the defaults list everything.
#[derive(Debug, Clone, Default)]
pub struct ListTransactionsFilter {
    /// State names (`Ongoing`, `PrepareCommit`…); empty: any state.
    pub states: Vec<String>,
    /// Producer ids; empty: any producer.
    pub producer_ids: Vec<i64>,
    /// Only transactions running longer than this (ms); needs
    /// ListTransactions v1.
    pub min_duration_ms: Option<i64>,
    /// A regular expression the whole transactional id must match
    /// (KIP-1152); needs ListTransactions v2.
    pub transactional_id_pattern: Option<String>,
}

/// A transactional id as ListTransactions reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionListing {
    pub transactional_id: String,
    /// The broker that coordinates it.
    pub coordinator_id: i32,
    pub producer_id: i64,
    pub state: String,
}

/// What DescribeTransactions says about one transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionDescription {
    pub coordinator_id: i32,
    pub state: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    /// -1 when no transaction is running.
    pub start_time_ms: i64,
    /// The partitions in the transaction, or still awaiting its markers.
    pub partitions: Vec<(String, i32)>,
}

/// One producer a partition's leader knows (DescribeProducers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerState {
    pub producer_id: i64,
    pub producer_epoch: i32,
    pub last_sequence: i32,
    pub last_timestamp_ms: i64,
    /// -1 when no marker has been written for it.
    pub coordinator_epoch: i32,
    /// The first offset of its open transaction in the partition, if any.
    pub current_txn_start_offset: Option<i64>,
}

/// Kafka's `AbortTransactionSpec`: which transaction's marker to write where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbortTransactionSpec {
    pub topic: String,
    pub partition: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
}

fn kafka_error(code: i16, message: Option<String>) -> Option<Error> {
    KafkaCode::from_code(code).map(|code| Error::Kafka { code, message })
}

impl Admin {
    /// ListTransactions on every broker (each coordinates its own ids),
    /// sorted by transactional id.
    pub async fn list_transactions(
        &self,
        filter: &ListTransactionsFilter,
    ) -> Result<Vec<TransactionListing>> {
        let metadata = self.cluster.refresh(Some(&[]), false).await?;
        let mut listed = Vec::new();
        for &node_id in metadata.brokers.keys() {
            let connection = self.cluster.connection(node_id).await?;
            let request =
                list_request(filter, connection.version(ApiKey::ListTransactions)?, connection.addr())?;
            let response =
                self.cluster.with_retries("ListTransactions", || connection.send(&request)).await?;
            if let Some(error) = kafka_error(response.error_code, None) {
                return Err(error);
            }
            listed.extend(response.transaction_states.into_iter().map(|t| TransactionListing {
                transactional_id: t.transactional_id.0.to_string(),
                coordinator_id: node_id,
                producer_id: t.producer_id.0,
                state: t.transaction_state.to_string(),
            }));
        }
        listed.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        Ok(listed)
    }

    /// DescribeTransactions, each id asked of its coordinator.
    pub async fn describe_transactions(
        &self,
        transactional_ids: &[String],
    ) -> Result<Vec<ItemResult<TransactionDescription>>> {
        let mut results = Vec::new();
        for id in transactional_ids {
            let result = self
                .cluster
                .with_retries("DescribeTransactions", || async {
                    let coordinator_id = self.cluster.coordinator_id(TRANSACTION_KEY, id).await?;
                    let coordinator = self.cluster.connection(coordinator_id).await?;
                    let request = DescribeTransactionsRequest::default()
                        .with_transactional_ids(vec![TransactionalId(str_bytes(id))]);
                    let response = coordinator.send(&request).await?;
                    let state =
                        response.transaction_states.into_iter().next().ok_or_else(|| Error::Protocol {
                            addr: coordinator.addr().to_owned(),
                            reason: "DescribeTransactions answered no transactional id".into(),
                        })?;
                    // NOT_COORDINATOR and the like are retried after another lookup.
                    if let Some(error) = kafka_error(state.error_code, None) {
                        return Err(error);
                    }
                    let partitions = state
                        .topics
                        .iter()
                        .flat_map(|t| t.partitions.iter().map(|p| (t.topic.0.to_string(), *p)))
                        .collect();
                    Ok(TransactionDescription {
                        coordinator_id,
                        state: state.transaction_state.to_string(),
                        producer_id: state.producer_id.0,
                        producer_epoch: state.producer_epoch,
                        timeout_ms: state.transaction_timeout_ms,
                        start_time_ms: state.transaction_start_time_ms,
                        partitions,
                    })
                })
                .await;
            results.push(ItemResult { name: id.clone(), result });
        }
        Ok(results)
    }

    /// DescribeProducers of each partition, asked of its leader (or of
    /// `broker_id`, to read one replica's state).
    pub async fn describe_producers(
        &self,
        partitions: &[(String, i32)],
        broker_id: Option<i32>,
    ) -> Result<Vec<PartitionResult<Vec<ProducerState>>>> {
        let by_broker = match broker_id {
            Some(id) => {
                BTreeMap::from([(id, partitions.iter().map(|(t, p)| (t.as_str(), *p, ())).collect())])
            }
            None => self.group_by_leader(partitions.iter().map(|(t, p)| (t.as_str(), *p, ()))).await?,
        };
        let mut results = Vec::new();
        for (node_id, partitions) in by_broker {
            let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for (topic, partition, ()) in &partitions {
                topics.entry(topic).or_default().push(*partition);
            }
            let request = DescribeProducersRequest::default().with_topics(
                topics
                    .into_iter()
                    .map(|(name, indexes)| {
                        TopicRequest::default().with_name(topic_name(name)).with_partition_indexes(indexes)
                    })
                    .collect(),
            );
            let connection = self.cluster.connection(node_id).await?;
            let response =
                self.cluster.with_retries("DescribeProducers", || connection.send(&request)).await?;
            for topic in response.topics {
                for p in topic.partitions {
                    let message = p.error_message.as_ref().map(|m| m.to_string());
                    let result = match kafka_error(p.error_code, message) {
                        Some(error) => Err(error),
                        None => Ok(p.active_producers.iter().map(producer_state).collect()),
                    };
                    results.push(PartitionResult {
                        topic: topic.name.0.to_string(),
                        partition: p.partition_index,
                        result,
                    });
                }
            }
        }
        Ok(results)
    }

    /// Aborts a transaction at one partition: WriteTxnMarkers to its leader
    /// with an ABORT marker for the producer, as Kafka's `abortTransaction`.
    pub async fn abort_transaction(&self, spec: &AbortTransactionSpec) -> Result<()> {
        let by_leader =
            self.group_by_leader(std::iter::once((spec.topic.as_str(), spec.partition, ()))).await?;
        let leader = *by_leader.keys().next().expect("one partition, one leader");
        let marker = WritableTxnMarker::default()
            .with_producer_id(ProducerId(spec.producer_id))
            .with_producer_epoch(spec.producer_epoch)
            .with_transaction_result(false)
            .with_coordinator_epoch(spec.coordinator_epoch)
            .with_topics(vec![WritableTxnMarkerTopic::default()
                .with_name(topic_name(&spec.topic))
                .with_partition_indexes(vec![spec.partition])]);
        let request = WriteTxnMarkersRequest::default().with_markers(vec![marker]);
        let connection = self.cluster.connection(leader).await?;
        let response = self.cluster.with_retries("WriteTxnMarkers", || connection.send(&request)).await?;
        let codes: BTreeSet<i16> = response
            .markers
            .iter()
            .flat_map(|m| m.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)))
            .collect();
        match codes.into_iter().find_map(|code| kafka_error(code, None)) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

/// The ListTransactions request for a broker speaking `version`: a filter
/// the broker cannot apply is refused rather than silently dropped.
fn list_request(
    filter: &ListTransactionsFilter,
    version: i16,
    addr: &str,
) -> Result<ListTransactionsRequest> {
    let needed = if filter.transactional_id_pattern.is_some() {
        2
    } else {
        i16::from(filter.min_duration_ms.is_some())
    };
    if version < needed {
        return Err(Error::Protocol {
            addr: addr.to_owned(),
            reason: format!(
                "the broker's ListTransactions v{version} cannot apply this filter (v{needed} needed)"
            ),
        });
    }
    Ok(ListTransactionsRequest::default()
        .with_state_filters(filter.states.iter().map(|s| str_bytes(s)).collect())
        .with_producer_id_filters(filter.producer_ids.iter().map(|p| ProducerId(*p)).collect())
        .with_duration_filter(filter.min_duration_ms.unwrap_or(-1))
        .with_transactional_id_pattern(filter.transactional_id_pattern.as_deref().map(str_bytes)))
}

fn producer_state(p: &kafka_protocol::messages::describe_producers_response::ProducerState) -> ProducerState {
    ProducerState {
        producer_id: p.producer_id.0,
        producer_epoch: p.producer_epoch,
        last_sequence: p.last_sequence,
        last_timestamp_ms: p.last_timestamp,
        coordinator_epoch: p.coordinator_epoch,
        current_txn_start_offset: (p.current_txn_start_offset >= 0).then_some(p.current_txn_start_offset),
    }
}
