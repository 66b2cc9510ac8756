//! Admin writes a KRaft broker receives go to the active controller, as
//! Kafka 4's brokers forward them: CreateTopics, DeleteTopics,
//! CreatePartitions, AlterConfigs, IncrementalAlterConfigs, CreateAcls,
//! DeleteAcls, AlterClientQuotas, AlterUserScramCredentials, ElectLeaders,
//! AlterPartitionReassignments and ListPartitionReassignments. Each is wrapped in an Envelope (KIP-590) with its client's
//! principal and address, so the controller authorizes the client, not
//! this broker, and sent over the node's
//! [`ControllerLink`](crate::controller_link), which retries at the new
//! controller on NOT_CONTROLLER or a lost connection; the inner answer goes
//! back to the client unchanged.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use uuid::Uuid;

use crate::dispatch::RequestContext;
use crate::response_errors::ResponseErrors;

/// How long a forwarded request may look for an active controller.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);
/// The Envelope and DefaultPrincipalData versions sent.
const ENVELOPE_VERSION: i16 = 0;
const PRINCIPAL_VERSION: i16 = 0;

/// Whether `response` refuses a request as not sent to the active controller.
pub fn is_not_controller(response: &impl ResponseErrors) -> bool {
    let mut refused = false;
    response.visit_errors(&mut |_, code| refused |= code == ResponseError::NotController.code());
    refused
}

/// The active controller's answer to `request`, when this node is a KRaft
/// node that is not the active controller; None to answer it here (a
/// single node, the active controller, a request to a controller
/// listener, or no controller found in time,
/// where the local controller refuses with NOT_CONTROLLER). An envelope
/// the controller refuses fails the request with UNKNOWN_SERVER_ERROR.
pub async fn forward<R>(ctx: &RequestContext<'_>, request: &R) -> Option<R::Response>
where
    R: Request + FailedForward,
    R::Response: ResponseErrors,
{
    if !forwards(ctx) {
        return None;
    }
    let link = ctx.controller().link()?;
    let envelope = match envelope(ctx, request) {
        Ok(envelope) => envelope,
        Err(e) => {
            tracing::warn!(api = ?R::KEY, "cannot envelope a forwarded request: {e}");
            return None;
        }
    };
    let version = ctx.api_version;
    let not_controller = |r: &EnvelopeResponse| {
        r.error_code == ResponseError::NotController.code()
            || unwrap::<R>(r, version).is_ok_and(|inner| is_not_controller(&inner))
    };
    let answer = match link.send(&envelope, ENVELOPE_VERSION, FORWARD_TIMEOUT, not_controller).await {
        Ok(answer) => answer,
        Err(e) => {
            tracing::warn!(api = ?R::KEY, "cannot forward to the active controller: {e}");
            return None;
        }
    };
    match unwrap::<R>(&answer, version) {
        Ok(response) => Some(response),
        // As Kafka's ForwardingManager: a refused envelope is this broker's
        // fault, not the client's, so the client sees UNKNOWN_SERVER_ERROR.
        Err(e) => {
            tracing::warn!(api = ?R::KEY, "the active controller did not serve a forwarded request: {e}");
            let error = match ResponseError::try_from_code(answer.error_code) {
                Some(ResponseError::UnsupportedVersion) => ResponseError::UnsupportedVersion,
                _ => ResponseError::UnknownServerError,
            };
            Some(request.failed(error))
        }
    }
}

/// Whether this node sends its admin writes to the active controller: a
/// KRaft broker that is not the active controller, serving a client. A
/// controller listener's requests (an Envelope's inner one among them) are
/// this controller's to answer, as Kafka's ControllerApis does.
pub fn forwards(ctx: &RequestContext<'_>) -> bool {
    ctx.controller().link().is_some_and(|link| !link.is_active()) && !ctx.on_controller_listener()
}

/// A forwarded request's response failing every item of it with one error.
pub trait FailedForward: Request {
    fn failed(&self, error: ResponseError) -> Self::Response;
}

impl FailedForward for CreateTopicsRequest {
    fn failed(&self, error: ResponseError) -> CreateTopicsResponse {
        let topics = self
            .topics
            .iter()
            .map(|t| CreatableTopicResult::default().with_name(t.name.clone()).with_error_code(error.code()));
        CreateTopicsResponse::default().with_topics(topics.collect())
    }
}

impl FailedForward for DeleteTopicsRequest {
    fn failed(&self, error: ResponseError) -> DeleteTopicsResponse {
        let by_name = self.topic_names.iter().map(|name| (Some(name.clone()), Uuid::nil()));
        let by_state = self.topics.iter().map(|t| (t.name.clone(), t.topic_id));
        let responses = by_name.chain(by_state).map(|(name, id)| {
            DeletableTopicResult::default().with_name(name).with_topic_id(id).with_error_code(error.code())
        });
        DeleteTopicsResponse::default().with_responses(responses.collect())
    }
}

impl FailedForward for CreatePartitionsRequest {
    fn failed(&self, error: ResponseError) -> CreatePartitionsResponse {
        let results = self.topics.iter().map(|t| {
            CreatePartitionsTopicResult::default().with_name(t.name.clone()).with_error_code(error.code())
        });
        CreatePartitionsResponse::default().with_results(results.collect())
    }
}

impl FailedForward for AlterConfigsRequest {
    fn failed(&self, error: ResponseError) -> AlterConfigsResponse {
        let responses = self.resources.iter().map(|r| {
            alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone())
                .with_error_code(error.code())
        });
        AlterConfigsResponse::default().with_responses(responses.collect())
    }
}

impl FailedForward for IncrementalAlterConfigsRequest {
    fn failed(&self, error: ResponseError) -> IncrementalAlterConfigsResponse {
        let responses = self.resources.iter().map(|r| {
            incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone())
                .with_error_code(error.code())
        });
        IncrementalAlterConfigsResponse::default().with_responses(responses.collect())
    }
}

impl FailedForward for AlterUserScramCredentialsRequest {
    fn failed(&self, error: ResponseError) -> AlterUserScramCredentialsResponse {
        crate::handlers::scram::failed(self, error)
    }
}

impl FailedForward for AlterClientQuotasRequest {
    fn failed(&self, error: ResponseError) -> AlterClientQuotasResponse {
        crate::handlers::quotas::failed(self, error)
    }
}

impl FailedForward for CreateAclsRequest {
    fn failed(&self, error: ResponseError) -> CreateAclsResponse {
        let results =
            self.creations.iter().map(|_| AclCreationResult::default().with_error_code(error.code()));
        CreateAclsResponse::default().with_results(results.collect())
    }
}

impl FailedForward for DeleteAclsRequest {
    fn failed(&self, error: ResponseError) -> DeleteAclsResponse {
        let results =
            self.filters.iter().map(|_| DeleteAclsFilterResult::default().with_error_code(error.code()));
        DeleteAclsResponse::default().with_filter_results(results.collect())
    }
}

impl FailedForward for AlterPartitionReassignmentsRequest {
    fn failed(&self, error: ResponseError) -> AlterPartitionReassignmentsResponse {
        crate::handlers::reassignments::alter_failed(self, error, None)
    }
}

impl FailedForward for ListPartitionReassignmentsRequest {
    fn failed(&self, error: ResponseError) -> ListPartitionReassignmentsResponse {
        crate::handlers::reassignments::list_failed(error)
    }
}

impl FailedForward for ElectLeadersRequest {
    fn failed(&self, error: ResponseError) -> ElectLeadersResponse {
        ElectLeadersResponse::default().with_error_code(error.code())
    }
}

impl FailedForward for UpdateFeaturesRequest {
    fn failed(&self, error: ResponseError) -> UpdateFeaturesResponse {
        crate::handlers::features::failed(error, None)
    }
}

/// The client's request (its header and body, as it sent them) in an
/// Envelope with its principal and address.
fn envelope<R: Request>(ctx: &RequestContext<'_>, request: &R) -> Result<EnvelopeRequest, String> {
    let mut data = BytesMut::new();
    ctx.header.encode(&mut data, R::header_version(ctx.api_version)).map_err(|e| e.to_string())?;
    request.encode(&mut data, ctx.api_version).map_err(|e| e.to_string())?;
    let address: std::net::IpAddr =
        ctx.client_address().parse().map_err(|e| format!("client address: {e}"))?;
    let address = match address {
        std::net::IpAddr::V4(ip) => Bytes::copy_from_slice(&ip.octets()),
        std::net::IpAddr::V6(ip) => Bytes::copy_from_slice(&ip.octets()),
    };
    Ok(EnvelopeRequest::default()
        .with_request_data(data.freeze())
        .with_request_principal(Some(encode_principal(&ctx.principal)?))
        .with_client_host_address(address))
}

/// `Type:name` as Kafka serializes a principal: a version, then
/// DefaultPrincipalData.
pub(crate) fn encode_principal(principal: &str) -> Result<Bytes, String> {
    let (kind, name) =
        principal.split_once(':').ok_or_else(|| format!("principal {principal} has no type"))?;
    let data = DefaultPrincipalData::default()
        .with_type(StrBytes::from_string(kind.to_owned()))
        .with_name(StrBytes::from_string(name.to_owned()));
    let mut bytes = BytesMut::new();
    bytes.put_i16(PRINCIPAL_VERSION);
    data.encode(&mut bytes, PRINCIPAL_VERSION).map_err(|e| e.to_string())?;
    Ok(bytes.freeze())
}

/// The inner response of an EnvelopeResponse; an error for an envelope the
/// controller refused.
fn unwrap<R: Request>(envelope: &EnvelopeResponse, version: i16) -> Result<R::Response, String> {
    if envelope.error_code != 0 {
        return Err(format!(
            "the envelope was refused: {}",
            crate::response_errors::error_name(envelope.error_code)
        ));
    }
    let mut data = envelope.response_data.clone().ok_or("the envelope carries no response")?;
    ResponseHeader::decode(&mut data, R::Response::header_version(version)).map_err(|e| e.to_string())?;
    R::Response::decode(&mut data, version).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::topic_name;

    #[test]
    fn a_failed_forward_fails_every_item_of_the_request() {
        let request =
            DeleteTopicsRequest::default().with_topic_names(vec![topic_name("a")]).with_topics(vec![
                delete_topics_request::DeleteTopicState::default().with_topic_id(Uuid::from_u128(7)),
            ]);
        let response = request.failed(ResponseError::UnknownServerError);
        let codes: Vec<_> = response.responses.iter().map(|r| r.error_code).collect();
        assert_eq!(codes, [ResponseError::UnknownServerError.code(); 2]);
        assert_eq!(response.responses[1].topic_id, Uuid::from_u128(7));
        let acls = CreateAclsRequest::default().with_creations(vec![Default::default(); 3]);
        assert_eq!(acls.failed(ResponseError::UnsupportedVersion).results.len(), 3);
    }

    #[test]
    fn a_refused_envelope_has_no_inner_response() {
        let refused =
            EnvelopeResponse::default().with_error_code(ResponseError::ClusterAuthorizationFailed.code());
        assert!(unwrap::<CreateTopicsRequest>(&refused, 7).is_err());
    }
}
