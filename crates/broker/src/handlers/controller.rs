//! The controller's own APIs, answered by the active controller (the
//! quorum leader) and refused with NOT_CONTROLLER elsewhere: broker
//! registration and heartbeats, UnregisterBroker, ControllerRegistration
//! and AllocateProducerIds.

use kafka_protocol::messages::{
    AllocateProducerIdsRequest, AllocateProducerIdsResponse, BrokerHeartbeatRequest, BrokerHeartbeatResponse,
    BrokerRegistrationRequest, BrokerRegistrationResponse, ControllerRegistrationRequest,
    ControllerRegistrationResponse, ProducerId, UnregisterBrokerRequest, UnregisterBrokerResponse,
};
use strom_metadata::{
    BrokerHeartbeat, BrokerRegistration, ControllerImage, Endpoint, FeatureRange, MetadataError,
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
    };
    let result = ctx.broker.controller.register_broker(registration, strom_storage::now_ms()).await;
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
    let result = ctx.broker.controller.broker_heartbeat(heartbeat, strom_storage::now_ms()).await;
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
    let result = ctx.broker.controller.unregister_broker(request.broker_id.0).await;
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
    let result = ctx.broker.controller.register_controller(controller).await;
    ControllerRegistrationResponse::default()
        .with_error_code(code(&result))
        .with_error_message(message(&result))
}

pub async fn allocate_producer_ids(
    ctx: &RequestContext<'_>,
    request: AllocateProducerIdsRequest,
) -> AllocateProducerIdsResponse {
    let result = ctx.broker.controller.allocate_producer_ids(request.broker_id.0, request.broker_epoch).await;
    let response = AllocateProducerIdsResponse::default().with_error_code(code(&result));
    match result {
        Ok(block) => response
            .with_producer_id_start(ProducerId(block.start))
            .with_producer_id_len((block.end - block.start) as i32),
        Err(_) => response.with_producer_id_start(ProducerId(-1)),
    }
}
