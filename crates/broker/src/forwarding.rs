//! Admin writes a KRaft broker receives go to the active controller, as
//! Kafka 4's brokers forward them: CreateTopics, DeleteTopics,
//! CreatePartitions, AlterConfigs, IncrementalAlterConfigs, CreateAcls and
//! DeleteAcls. Each is wrapped in an Envelope (KIP-590) with its client's
//! principal and address, so the controller authorizes the client, not
//! this broker, and sent over the node's
//! [`ControllerLink`](crate::controller_link), which retries at the new
//! controller on NOT_CONTROLLER or a lost connection; the inner answer goes
//! back to the client unchanged.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{DefaultPrincipalData, EnvelopeRequest, EnvelopeResponse, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

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
/// where the local controller refuses with NOT_CONTROLLER).
pub async fn forward<R>(ctx: &RequestContext<'_>, request: &R) -> Option<R::Response>
where
    R: Request,
    R::Response: ResponseErrors,
{
    let link = ctx.broker.controller_link()?;
    // A controller listener's requests (an Envelope's inner one among them)
    // are this controller's to answer, as Kafka's ControllerApis does.
    if link.is_active() || ctx.on_controller_listener() {
        return None;
    }
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
    let answer = link.send(&envelope, ENVELOPE_VERSION, FORWARD_TIMEOUT, not_controller).await;
    match answer.map_err(|e| e.to_string()).and_then(|r| unwrap::<R>(&r, version)) {
        Ok(response) => Some(response),
        Err(e) => {
            tracing::warn!(api = ?R::KEY, "cannot forward to the active controller: {e}");
            None
        }
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
