//! The transaction module's requests to other brokers, through the
//! inter-broker listener (`inter.broker.listener.name`, secured as
//! configured): WriteTxnMarkers from the coordinator ([`super::markers`])
//! and, from a partition leader, the KIP-890 check that a transactional
//! produce's partition is in its transaction when the coordinator is on
//! another broker ([`verify_at_coordinator`], AddPartitionsToTxn with
//! `verify_only`, as Kafka's `AddPartitionsToTxnManager` sends it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, ProducerId, TopicName, TransactionalId};
use kafka_protocol::protocol::{Request, StrBytes};
use strom_metadata::MetadataImage;
use strom_quorum::channel::Channel;

use super::state::TxnPartition;
use super::TRANSACTION_STATE_TOPIC;
use crate::coordinator_host::CoordinatorHost;
use crate::locks::lock_recovering;

/// How long one request may wait for its answer (Kafka's
/// `request.timeout.ms` default).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a produce waits for its verification: the client's own
/// request is waiting behind it.
const VERIFY_TIMEOUT: Duration = Duration::from_secs(5);
/// The AddPartitionsToTxn version a partition leader sends (Kafka 4's).
const VERIFY_VERSION: i16 = 5;

/// The open channels to other brokers, by broker id.
#[derive(Default)]
pub struct Peers {
    open: Mutex<HashMap<i32, Arc<Channel>>>,
}

impl Peers {
    /// Sends `request` at `version` to broker `id`, found in `image` by its
    /// inter-broker endpoint. A failed connection is forgotten so the next
    /// request reconnects.
    pub async fn send<R: Request>(
        &self,
        host: &dyn CoordinatorHost,
        image: &MetadataImage,
        id: i32,
        request: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<R::Response, String> {
        let address = host
            .inter_broker_address(image, id)
            .ok_or_else(|| format!("broker {id} has no inter-broker endpoint"))?;
        let channel = self.channel(host, id, &address).await?;
        channel.send(request, version, timeout).await.map_err(|e| {
            lock_recovering(&self.open, "broker channels").remove(&id);
            e.to_string()
        })
    }

    /// A channel to broker `id` at `address`, reusing an open one.
    async fn channel(
        &self,
        host: &dyn CoordinatorHost,
        id: i32,
        address: &str,
    ) -> Result<Arc<Channel>, String> {
        let cached = lock_recovering(&self.open, "broker channels").get(&id).cloned();
        if let Some(channel) = cached.filter(|c| !c.is_closed() && c.address() == address) {
            return Ok(channel);
        }
        let connector = host.inter_broker_connector();
        let client_id = format!("broker-{}-txn", host.node_id());
        let channel = Arc::new(
            connector.connect(address, &client_id, REQUEST_TIMEOUT).await.map_err(|e| e.to_string())?,
        );
        lock_recovering(&self.open, "broker channels").insert(id, channel.clone());
        Ok(channel)
    }
}

/// Asks the coordinator of `transactional_id` on another broker whether
/// `partition` is in the producer's ongoing transaction;
/// COORDINATOR_NOT_AVAILABLE when no answer comes, which the produce
/// answers with a retriable error.
pub async fn verify_at_coordinator(
    host: &dyn CoordinatorHost,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    partition: &TxnPartition,
) -> Result<(), ResponseError> {
    let image = host.replicas().image();
    let state_partition = host.transactions().partition_for(transactional_id);
    let coordinator = image
        .topic(TRANSACTION_STATE_TOPIC)
        .and_then(|t| t.partitions.get(&state_partition))
        .map(|p| p.leader)
        .filter(|leader| *leader >= 0 && *leader != host.node_id())
        .ok_or(ResponseError::CoordinatorNotAvailable)?;
    let request = verify_request(transactional_id, producer_id, producer_epoch, partition);
    let peers = &host.transactions().peers;
    let sent = peers.send(host, &image, coordinator, &request, VERIFY_VERSION, VERIFY_TIMEOUT);
    let response = sent.await.map_err(|e| {
        tracing::info!(transactional_id, coordinator, "verifying a transactional produce failed: {e}");
        ResponseError::CoordinatorNotAvailable
    })?;
    if let Some(error) = ResponseError::try_from_code(response.error_code) {
        return Err(error);
    }
    let answer = response
        .results_by_transaction
        .iter()
        .filter(|r| r.transactional_id.as_str() == transactional_id)
        .flat_map(|r| &r.topic_results)
        .filter(|t| t.name.as_str() == partition.0)
        .flat_map(|t| &t.results_by_partition)
        .find(|p| p.partition_index == partition.1)
        .ok_or(ResponseError::CoordinatorNotAvailable)?;
    ResponseError::try_from_code(answer.partition_error_code).map_or(Ok(()), Err)
}

fn verify_request(
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    (topic, index): &TxnPartition,
) -> AddPartitionsToTxnRequest {
    let topic = AddPartitionsToTxnTopic::default()
        .with_name(TopicName(StrBytes::from_string(topic.clone())))
        .with_partitions(vec![*index]);
    let transaction = AddPartitionsToTxnTransaction::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(transactional_id.to_owned())))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(producer_epoch)
        .with_verify_only(true)
        .with_topics(vec![topic]);
    AddPartitionsToTxnRequest::default().with_transactions(vec![transaction])
}
