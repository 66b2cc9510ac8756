//! SaslHandshake and SaslAuthenticate reaching the handlers: on a listener
//! without SASL, or on a connection that already authenticated without
//! starting a re-authentication. Kafka answers both with ILLEGAL_SASL_STATE;
//! the exchange itself is run by [`crate::security::sasl`] before requests
//! reach dispatch.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};

use crate::dispatch::RequestContext;
use crate::handlers::str_bytes;

pub fn handshake(_ctx: &RequestContext<'_>, _request: SaslHandshakeRequest) -> SaslHandshakeResponse {
    SaslHandshakeResponse::default().with_error_code(ResponseError::IllegalSaslState.code())
}

pub fn authenticate(
    _ctx: &RequestContext<'_>,
    _request: SaslAuthenticateRequest,
) -> SaslAuthenticateResponse {
    SaslAuthenticateResponse::default()
        .with_error_code(ResponseError::IllegalSaslState.code())
        .with_error_message(Some(str_bytes(
            "SaslAuthenticate request received after successful authentication",
        )))
}
