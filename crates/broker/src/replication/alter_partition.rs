//! AlterPartition (KIP-497): the leader asks the active controller to
//! change a partition's ISR, naming the leader and partition epochs it
//! builds on and each member's broker epoch (KIP-903). Until the answer the
//! proposal is pending and the leader counts the maximal ISR.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_request::{BrokerState, PartitionData, TopicData};
use kafka_protocol::messages::{AlterPartitionRequest, AlterPartitionResponse, BrokerId};
use uuid::Uuid;

use crate::controller_link::ControllerLink;
use crate::replica::{IsrProposal, Partition};

/// The version sent: topic ids and the members' broker epochs.
const ALTER_PARTITION_VERSION: i16 = 3;
/// How long one proposal looks for an active controller before it is
/// given up (and proposed afresh by the next check).
const ALTER_PARTITION_TIMEOUT: Duration = Duration::from_secs(10);
/// Kafka's `LeaderRecoveryState.RECOVERED`.
const RECOVERED: i8 = 0;

/// Sends `proposal` for `partition` of topic `topic_id` and applies the answer.
pub async fn send(
    link: Arc<ControllerLink>,
    broker_id: i32,
    broker_epoch: i64,
    topic_id: Uuid,
    partition: Arc<Partition>,
    proposal: IsrProposal,
) {
    let request = request(broker_id, broker_epoch, topic_id, partition.tp.partition, &proposal);
    let not_controller = |r: &AlterPartitionResponse| r.error_code == ResponseError::NotController.code();
    let answer = link.send(&request, ALTER_PARTITION_VERSION, ALTER_PARTITION_TIMEOUT, not_controller).await;
    let response = match answer {
        Ok(response) => response,
        Err(e) => {
            tracing::warn!(partition = %partition.tp, "ISR change not sent: {e}");
            return partition.finish_isr_change(None);
        }
    };
    let answered = response
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .find(|p| p.partition_index == partition.tp.partition);
    let error = ResponseError::try_from_code(response.error_code)
        .or_else(|| answered.and_then(|p| ResponseError::try_from_code(p.error_code)));
    match (error, answered) {
        (None, Some(answer)) => {
            let isr = answer.isr.iter().map(|id| id.0).collect::<Vec<_>>();
            tracing::info!(partition = %partition.tp, ?isr, partition_epoch = answer.partition_epoch, "ISR changed");
            partition.finish_isr_change(Some((isr, answer.partition_epoch)));
        }
        // Kafka waits for the metadata that made the proposal stale.
        (
            Some(
                e @ (ResponseError::InvalidUpdateVersion
                | ResponseError::FencedLeaderEpoch
                | ResponseError::NewLeaderElected
                | ResponseError::UnknownTopicOrPartition),
            ),
            _,
        ) => {
            tracing::info!(partition = %partition.tp, "ISR change refused ({e:?}): waiting for newer metadata");
        }
        (error, _) => {
            tracing::warn!(partition = %partition.tp, ?error, "ISR change refused: back to the committed ISR");
            partition.finish_isr_change(None);
        }
    }
}

fn request(
    broker_id: i32,
    broker_epoch: i64,
    topic_id: Uuid,
    partition: i32,
    proposal: &IsrProposal,
) -> AlterPartitionRequest {
    let members = proposal
        .isr
        .iter()
        .map(|(id, epoch)| BrokerState::default().with_broker_id(BrokerId(*id)).with_broker_epoch(*epoch))
        .collect();
    let data = PartitionData::default()
        .with_partition_index(partition)
        .with_leader_epoch(proposal.leader_epoch)
        .with_new_isr_with_epochs(members)
        .with_leader_recovery_state(RECOVERED)
        .with_partition_epoch(proposal.partition_epoch);
    AlterPartitionRequest::default()
        .with_broker_id(BrokerId(broker_id))
        .with_broker_epoch(broker_epoch)
        .with_topics(vec![TopicData::default().with_topic_id(topic_id).with_partitions(vec![data])])
}
