//! Envelope (KIP-590): an admin write a broker forwards to the active
//! controller, wrapped with its client's principal and address. Only a
//! principal with CLUSTER_ACTION on the cluster (the brokers) may send
//! one; the inner request is then served as its client sent it, and its
//! response (header and body) goes back inside the EnvelopeResponse.
//! Errors of the envelope itself (refused, malformed) are the envelope's
//! error code; the inner request's own errors stay in its response.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;

use bytes::{Buf, Bytes};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{DefaultPrincipalData, EnvelopeRequest, EnvelopeResponse};
use kafka_protocol::protocol::Decodable;
use strom_metadata::acl::operation;

use crate::apis;
use crate::dispatch::{encode_response_payload, parse_frame, Answer, Parsed, RequestContext};

pub async fn handle(ctx: &RequestContext<'_>, request: EnvelopeRequest) -> EnvelopeResponse {
    match serve_inner(ctx, request).await {
        Ok(payload) => EnvelopeResponse::default().with_response_data(Some(payload)),
        Err(error) => EnvelopeResponse::default().with_error_code(error.code()),
    }
}

async fn serve_inner(ctx: &RequestContext<'_>, request: EnvelopeRequest) -> Result<Bytes, ResponseError> {
    if !ctx.authorize_cluster(operation::CLUSTER_ACTION) {
        return Err(ResponseError::ClusterAuthorizationFailed);
    }
    // Kafka serves Envelope on controller listeners only.
    if !ctx.on_controller_listener() {
        return Err(ResponseError::InvalidRequest);
    }
    let principal = request
        .request_principal
        .as_ref()
        .and_then(|bytes| decode_principal(bytes.clone()))
        .ok_or(ResponseError::PrincipalDeserializationFailure)?;
    let client_ip = client_ip(&request.client_host_address).ok_or(ResponseError::InvalidRequest)?;
    let Ok(Parsed::Request { api_key, header, request: inner, .. }) = parse_frame(request.request_data)
    else {
        return Err(ResponseError::InvalidRequest);
    };
    if !apis::is_forwarded(api_key) {
        return Err(ResponseError::InvalidRequest);
    }
    let inner_ctx = ctx.inner(api_key, header, format!("/{client_ip}"), principal.into());
    let mut answer = route_boxed(&inner_ctx, *inner).await;
    // A throttle the inner request earned (controller mutation quotas) is
    // its client's: it goes back in the inner response.
    let throttle_ms = inner_ctx.throttle.get();
    if throttle_ms > 0 {
        answer.body.raise_throttle_time_ms(throttle_ms.min(i32::MAX as u64) as i32);
    }
    encode_response_payload(&inner_ctx, answer.body.as_ref()).map_err(|e| {
        tracing::warn!("cannot encode an enveloped {api_key:?} response: {e}");
        ResponseError::UnknownServerError
    })
}

/// The inner request's route, boxed: routing an Envelope routes again.
fn route_boxed<'a>(
    ctx: &'a RequestContext<'a>,
    request: apis::Request,
) -> Pin<Box<dyn Future<Output = Answer> + Send + 'a>> {
    Box::pin(apis::route(ctx, request))
}

/// `Type:name` from Kafka's serialized principal: a version, then
/// DefaultPrincipalData at that version.
fn decode_principal(mut bytes: Bytes) -> Option<String> {
    if bytes.remaining() < 2 {
        return None;
    }
    let version = bytes.get_i16();
    let data = DefaultPrincipalData::decode(&mut bytes, version).ok()?;
    Some(format!("{}:{}", data._type.as_str(), data.name.as_str()))
}

/// The client's address: 4 bytes of IPv4 or 16 of IPv6.
fn client_ip(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forwarded_principal_reads_back_as_its_client_principal() {
        let bytes = crate::forwarding::encode_principal("User:alice:x").unwrap();
        assert_eq!(decode_principal(bytes).as_deref(), Some("User:alice:x"));
        assert_eq!(decode_principal(Bytes::from_static(&[0])), None);
    }

    #[test]
    fn client_addresses_are_four_or_sixteen_bytes() {
        assert_eq!(client_ip(&[127, 0, 0, 1]), Some(IpAddr::from([127, 0, 0, 1])));
        assert!(client_ip(&[0u8; 16]).is_some_and(|ip| ip.is_ipv6()));
        assert_eq!(client_ip(&[1, 2, 3]), None);
    }
}
