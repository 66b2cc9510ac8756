//! InitProducerId: a producer id and epoch for an idempotent or
//! transactional producer.
//!
//! As in Kafka, a request without a transactional id always gets a fresh
//! producer id at epoch 0, even when it names its current id and epoch
//! (KIP-360): an idempotent producer bumps its epoch on its own, and the
//! partitions accept the new epoch when it starts at sequence 0. A
//! transactional id goes to the transaction coordinator, which keeps the
//! id's producer id and bumps its epoch, fencing older producers.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::dispatch::RequestContext;
use crate::error::metadata_error;

const NO_PRODUCER_ID: i64 = -1;
const NO_PRODUCER_EPOCH: i16 = -1;

pub async fn handle(ctx: &RequestContext<'_>, request: InitProducerIdRequest) -> InitProducerIdResponse {
    if let Some(error) = request_error(&request) {
        return error_response(error);
    }
    if let Some(error) = denial(ctx, request.transactional_id.as_ref().map(|t| t.as_str())) {
        return error_response(error);
    }
    if let Some(transactional_id) = &request.transactional_id {
        let given = request.producer_id.0 != NO_PRODUCER_ID;
        let expected = given.then_some((request.producer_id.0, request.producer_epoch));
        let outcome = ctx.transactions().init_producer_id(
            ctx.coordinator_host(),
            transactional_id.as_str(),
            request.transaction_timeout_ms,
            expected,
        );
        return match outcome.await {
            Ok((id, epoch)) => {
                InitProducerIdResponse::default().with_producer_id(ProducerId(id)).with_producer_epoch(epoch)
            }
            Err(error) => error_response(super::transactions::fenced_for(error, ctx.api_version, 4)),
        };
    }
    match ctx.producer_ids().next_id_async(|| ctx.controller().allocate_producer_ids_at_active()).await {
        Ok(id) => InitProducerIdResponse::default().with_producer_id(ProducerId(id)).with_producer_epoch(0),
        Err(e) => {
            tracing::error!("cannot reserve producer ids: {e}");
            error_response(metadata_error(&e))
        }
    }
}

/// A transactional id needs WRITE on it; an idempotent producer needs
/// IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679).
fn denial(ctx: &RequestContext<'_>, transactional_id: Option<&str>) -> Option<ResponseError> {
    use strom_metadata::acl::{operation, resource};
    match transactional_id {
        Some(id) => (!ctx.authorize(operation::WRITE, resource::TRANSACTIONAL_ID, id))
            .then_some(ResponseError::TransactionalIdAuthorizationFailed),
        None => (!ctx.authorize_cluster(operation::IDEMPOTENT_WRITE)
            && !ctx.authorize_any(operation::WRITE, resource::TOPIC))
        .then_some(ResponseError::ClusterAuthorizationFailed),
    }
}

/// Kafka's checks before an id is handed out.
fn request_error(request: &InitProducerIdRequest) -> Option<ResponseError> {
    // An id and an epoch come together or not at all.
    let given = (request.producer_id.0 != NO_PRODUCER_ID, request.producer_epoch != NO_PRODUCER_EPOCH);
    if given.0 != given.1 {
        return Some(ResponseError::InvalidRequest);
    }
    match &request.transactional_id {
        None => None,
        Some(id) if id.0.is_empty() => Some(ResponseError::InvalidRequest),
        Some(_) => None,
    }
}

fn error_response(error: ResponseError) -> InitProducerIdResponse {
    InitProducerIdResponse::default()
        .with_error_code(error.code())
        .with_producer_id(ProducerId(NO_PRODUCER_ID))
        .with_producer_epoch(NO_PRODUCER_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::TransactionalId;

    use crate::handlers::str_bytes;

    fn request(transactional_id: Option<&str>, producer_id: i64, epoch: i16) -> InitProducerIdRequest {
        InitProducerIdRequest::default()
            .with_transactional_id(transactional_id.map(|t| TransactionalId(str_bytes(t))))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch)
    }

    #[test]
    fn requests_are_checked_as_kafka_checks_them() {
        assert_eq!(request_error(&request(None, -1, -1)), None);
        assert_eq!(request_error(&request(None, 42, 3)), None, "a re-init gets a new id");
        assert_eq!(request_error(&request(None, 42, -1)), Some(ResponseError::InvalidRequest));
        assert_eq!(request_error(&request(None, -1, 0)), Some(ResponseError::InvalidRequest));
        assert_eq!(request_error(&request(Some(""), -1, -1)), Some(ResponseError::InvalidRequest));
        assert_eq!(request_error(&request(Some("tx"), -1, -1)), None);
    }
}
