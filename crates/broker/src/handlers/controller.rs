//! The controller's own APIs, answered by the active controller (the
//! quorum leader) and refused with NOT_CONTROLLER elsewhere: broker
//! registration and heartbeats, UnregisterBroker, ControllerRegistration,
//! AllocateProducerIds and AlterPartition.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_response::{self, PartitionData};
use kafka_protocol::messages::{
    AllocateProducerIdsRequest, AllocateProducerIdsResponse, AlterPartitionRequest, AlterPartitionResponse,
    BrokerHeartbeatRequest, BrokerHeartbeatResponse, BrokerId, BrokerRegistrationRequest,
    BrokerRegistrationResponse, ControllerRegistrationRequest, ControllerRegistrationResponse, ProducerId,
    UnregisterBrokerRequest, UnregisterBrokerResponse,
};
use strom_metadata::acl::operation;
use strom_metadata::{
    BrokerHeartbeat, BrokerRegistration, ControllerImage, Endpoint, FeatureRange, IsrChange, MetadataError,
};

use super::str_bytes;
use crate::dispatch::RequestContext;
use crate::error::metadata_error;

fn code(result: &Result<impl Sized, MetadataError>) -> i16 {
    result.as_ref().err().map_or(0, |e| metadata_error(e).code())
}

fn message(result: &Result<impl Sized, MetadataError>) -> Option<kafka_protocol::protocol::StrBytes> {
    result.as_ref().err().map(|e| str_bytes(&e.to_string()))
}

pub async fn broker_registration(
    ctx: &RequestContext<'_>,
    request: BrokerRegistrationRequest,
) -> BrokerRegistrationResponse {
    let registration = BrokerRegistration {
        broker_id: request.broker_id.0,
        cluster_id: request.cluster_id.to_string(),
        incarnation_id: request.incarnation_id,
        endpoints: request
            .listeners
            .iter()
            .map(|l| Endpoint {
                name: l.name.to_string(),
                host: l.host.to_string(),
                port: l.port,
                security_protocol: l.security_protocol,
            })
            .collect(),
        features: request
            .features
            .iter()
            .map(|f| FeatureRange {
                name: f.name.to_string(),
                min: f.min_supported_version,
                max: f.max_supported_version,
            })
            .collect(),
        rack: request.rack.as_ref().map(ToString::to_string),
        log_dirs: request.log_dirs.clone(),
        previous_broker_epoch: request.previous_broker_epoch,
    };
    let result = ctx.controller().register_broker(registration, strom_storage::now_ms()).await;
    BrokerRegistrationResponse::default()
        .with_error_code(code(&result))
        .with_broker_epoch(*result.as_ref().unwrap_or(&-1))
}

pub async fn broker_heartbeat(
    ctx: &RequestContext<'_>,
    request: BrokerHeartbeatRequest,
) -> BrokerHeartbeatResponse {
    let heartbeat = BrokerHeartbeat {
        broker_id: request.broker_id.0,
        broker_epoch: request.broker_epoch,
        current_metadata_offset: request.current_metadata_offset,
        want_fence: request.want_fence,
        want_shut_down: request.want_shut_down,
    };
    let result = ctx.controller().broker_heartbeat(heartbeat, strom_storage::now_ms()).await;
    let response = BrokerHeartbeatResponse::default().with_error_code(code(&result));
    match result {
        Ok(reply) => response
            .with_is_caught_up(reply.is_caught_up)
            .with_is_fenced(reply.is_fenced)
            .with_should_shut_down(reply.should_shut_down),
        Err(_) => response.with_is_fenced(true),
    }
}

pub async fn unregister_broker(
    ctx: &RequestContext<'_>,
    request: UnregisterBrokerRequest,
) -> UnregisterBrokerResponse {
    let result = ctx.controller().unregister_broker(request.broker_id.0).await;
    UnregisterBrokerResponse::default().with_error_code(code(&result)).with_error_message(message(&result))
}

pub async fn controller_registration(
    ctx: &RequestContext<'_>,
    request: ControllerRegistrationRequest,
) -> ControllerRegistrationResponse {
    let controller = ControllerImage {
        id: request.controller_id,
        incarnation_id: request.incarnation_id,
        endpoints: request
            .listeners
            .iter()
            .map(|l| Endpoint {
                name: l.name.to_string(),
                host: l.host.to_string(),
                port: l.port,
                security_protocol: l.security_protocol,
            })
            .collect(),
        features: request
            .features
            .iter()
            .map(|f| FeatureRange {
                name: f.name.to_string(),
                min: f.min_supported_version,
                max: f.max_supported_version,
            })
            .collect(),
    };
    let result = ctx.controller().register_controller(controller).await;
    ControllerRegistrationResponse::default()
        .with_error_code(code(&result))
        .with_error_message(message(&result))
}

pub async fn allocate_producer_ids(
    ctx: &RequestContext<'_>,
    request: AllocateProducerIdsRequest,
) -> AllocateProducerIdsResponse {
    let result = ctx.controller().allocate_producer_ids(request.broker_id.0, request.broker_epoch).await;
    let response = AllocateProducerIdsResponse::default().with_error_code(code(&result));
    match result {
        Ok(block) => response
            .with_producer_id_start(ProducerId(block.start))
            .with_producer_id_len((block.end - block.start) as i32),
        Err(_) => response.with_producer_id_start(ProducerId(-1)),
    }
}

/// AlterPartition (KIP-497, KIP-903): a partition leader's new ISRs. v2
/// names each ISR member without its broker epoch (not checked).
pub async fn alter_partition(
    ctx: &RequestContext<'_>,
    request: AlterPartitionRequest,
) -> AlterPartitionResponse {
    // Only brokers change ISRs: Kafka's controller asks for CLUSTER_ACTION.
    if !ctx.authorize_cluster(operation::CLUSTER_ACTION) {
        return AlterPartitionResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let changes: Vec<IsrChange> = request
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| isr_change(t.topic_id, p)))
        .collect();
    let controller = &ctx.controller();
    let results = match controller.alter_partition(request.broker_id.0, request.broker_epoch, &changes).await
    {
        Ok(results) => results,
        Err(e) => return AlterPartitionResponse::default().with_error_code(metadata_error(&e).code()),
    };
    let mut results = results.into_iter();
    let topics = request.topics.iter().map(|t| {
        let partitions = t.partitions.iter().zip(&mut results).map(|(p, result)| {
            let answer = PartitionData::default().with_partition_index(p.partition_index);
            match result {
                Ok(now) => answer
                    .with_leader_id(BrokerId(now.leader))
                    .with_leader_epoch(now.leader_epoch)
                    .with_isr(now.isr.into_iter().map(BrokerId).collect())
                    .with_leader_recovery_state(now.leader_recovery_state)
                    .with_partition_epoch(now.partition_epoch),
                Err(e) => answer.with_error_code(metadata_error(&e).code()),
            }
        });
        alter_partition_response::TopicData::default()
            .with_topic_id(t.topic_id)
            .with_partitions(partitions.collect())
    });
    AlterPartitionResponse::default().with_topics(topics.collect())
}

fn isr_change(
    topic_id: uuid::Uuid,
    p: &kafka_protocol::messages::alter_partition_request::PartitionData,
) -> IsrChange {
    let with_epochs = p.new_isr_with_epochs.iter().map(|b| (b.broker_id.0, b.broker_epoch));
    let without = p.new_isr.iter().map(|b| (b.0, -1));
    IsrChange {
        topic_id,
        partition: p.partition_index,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: with_epochs.chain(without).collect(),
        leader_recovery_state: p.leader_recovery_state,
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::alter_partition_request::{BrokerState, PartitionData, TopicData};
    use kafka_protocol::messages::ApiKey;
    use strom_metadata::block_on;

    use super::*;
    use crate::handlers::leadership_tests::{broker_with_another, ctx, OTHER};

    fn request(
        leader: i32,
        epoch: i64,
        topic_id: uuid::Uuid,
        partition_epoch: i32,
        isr: &[(i32, i64)],
    ) -> AlterPartitionRequest {
        let isr = isr
            .iter()
            .map(|(id, e)| BrokerState::default().with_broker_id(BrokerId(*id)).with_broker_epoch(*e));
        let partition = PartitionData::default()
            .with_partition_index(0)
            .with_leader_epoch(0)
            .with_partition_epoch(partition_epoch)
            .with_new_isr_with_epochs(isr.collect());
        let topic = TopicData::default().with_topic_id(topic_id).with_partitions(vec![partition]);
        AlterPartitionRequest::default()
            .with_broker_id(BrokerId(leader))
            .with_broker_epoch(epoch)
            .with_topics(vec![topic])
    }

    #[test]
    fn alter_partition_answers_the_new_isr_and_epochs_or_kafkas_error_per_partition() {
        let dir = tempfile::tempdir().unwrap();
        let broker = broker_with_another(dir.path());
        let topic = strom_metadata::NewTopic {
            name: "t".into(),
            assignments: vec![(0, vec![1, OTHER])],
            ..Default::default()
        };
        block_on(broker.controller().create_topic(topic, false)).unwrap();
        let image = broker.controller().image();
        let (id, epochs) =
            (image.topic("t").unwrap().id, (image.brokers[&1].epoch, image.brokers[&OTHER].epoch));
        let ctx = ctx(&broker, ApiKey::AlterPartition, 3);
        let answer = |r| block_on(alter_partition(&ctx, r));

        let shrunk = answer(request(1, epochs.0, id, 0, &[(1, epochs.0)]));
        let p = &shrunk.topics[0].partitions[0];
        assert_eq!((shrunk.error_code, p.error_code), (0, 0));
        assert_eq!(
            (p.leader_id, p.isr.as_slice(), p.leader_epoch, p.partition_epoch),
            (BrokerId(1), &[BrokerId(1)][..], 0, 1)
        );
        let code = |r: AlterPartitionResponse| r.topics[0].partitions[0].error_code;
        let stale = answer(request(1, epochs.0, id, 0, &[(1, epochs.0)]));
        assert_eq!(code(stale), ResponseError::InvalidUpdateVersion.code());
        let ineligible = answer(request(1, epochs.0, id, 1, &[(1, epochs.0), (OTHER, epochs.1 + 1)]));
        assert_eq!(code(ineligible), ResponseError::IneligibleReplica.code());
        let unknown = answer(request(1, epochs.0, uuid::Uuid::from_u128(5), 1, &[(1, epochs.0)]));
        assert_eq!(code(unknown), ResponseError::UnknownTopicId.code());
        let stale_sender = answer(request(1, epochs.0 + 100, id, 1, &[(1, epochs.0)]));
        assert_eq!(stale_sender.error_code, ResponseError::StaleBrokerEpoch.code());
        let grown = answer(request(1, epochs.0, id, 1, &[(1, epochs.0), (OTHER, epochs.1)]));
        assert_eq!(grown.topics[0].partitions[0].isr, vec![BrokerId(1), BrokerId(OTHER)]);
    }
}
