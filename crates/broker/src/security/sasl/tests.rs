//! The connection's SASL state machine, driven by encoded frames.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, MetadataRequest, RequestHeader, SaslAuthenticateRequest,
    SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::*;

fn config(pairs: &[(&str, &str)]) -> Arc<SaslConfig> {
    Arc::new(SaslConfig::from_settings(&ListenerSettings::from_pairs("SASL_PLAINTEXT", pairs), None).unwrap())
}

fn plain_config(reauth_ms: &str) -> Arc<SaslConfig> {
    config(&[
        ("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256"),
        (
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="secret" user_bob="builder";"#,
        ),
        ("connections.max.reauth.ms", reauth_ms),
    ])
}

fn frame<T: Encodable>(api_key: ApiKey, version: i16, body: &T) -> Bytes {
    let header = RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("test")));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, api_key.request_header_version(version)).unwrap();
    body.encode(&mut buf, version).unwrap();
    buf.freeze()
}

fn handshake(mechanism: &str, version: i16) -> Bytes {
    frame(
        ApiKey::SaslHandshake,
        version,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.into())),
    )
}

fn authenticate(token: &[u8], version: i16) -> Bytes {
    frame(
        ApiKey::SaslAuthenticate,
        version,
        &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(token)),
    )
}

/// Decodes a size-prefixed response frame's body.
fn response<T: Decodable>(answer: &Bytes, api_key: ApiKey, version: i16) -> T {
    let mut body = answer.slice(4..);
    assert_eq!(i32::from_be_bytes(answer[..4].try_into().unwrap()) as usize, body.len());
    let correlation_id = body.get_i32_be();
    assert_eq!(correlation_id, 7);
    if api_key.response_header_version(version) >= 1 {
        assert_eq!(body.get_u8_tagged(), 0);
    }
    T::decode(&mut body, version).unwrap()
}

trait Get {
    fn get_i32_be(&mut self) -> i32;
    fn get_u8_tagged(&mut self) -> u8;
}

impl Get for Bytes {
    fn get_i32_be(&mut self) -> i32 {
        let value = i32::from_be_bytes(self[..4].try_into().unwrap());
        *self = self.slice(4..);
        value
    }
    fn get_u8_tagged(&mut self) -> u8 {
        let value = self[0];
        *self = self.slice(1..);
        value
    }
}

fn reply(action: Action) -> Bytes {
    match action {
        Action::Reply(bytes) => bytes,
        other => panic!("expected a reply, got {other:?}"),
    }
}

#[test]
fn plain_over_sasl_authenticate_records_the_principal() {
    let mut connection = SaslConnection::new(plain_config("0"));
    assert!(matches!(
        connection.on_frame(frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())),
        Action::Dispatch(_)
    ));
    let answer = reply(connection.on_frame(handshake("PLAIN", 1)));
    let handshake_response: SaslHandshakeResponse = response(&answer, ApiKey::SaslHandshake, 1);
    assert_eq!(handshake_response.error_code, 0);
    assert_eq!(handshake_response.mechanisms.len(), 2);
    let answer = reply(connection.on_frame(authenticate(b"\0alice\0secret", 2)));
    let auth: SaslAuthenticateResponse = response(&answer, ApiKey::SaslAuthenticate, 2);
    assert_eq!((auth.error_code, auth.session_lifetime_ms), (0, 0));
    assert_eq!(connection.principal.as_deref(), Some("User:alice"));
    assert!(matches!(
        connection.on_frame(frame(ApiKey::Metadata, 12, &MetadataRequest::default())),
        Action::Dispatch(_)
    ));
}

#[test]
fn a_wrong_password_gets_kip_152s_message_and_the_connection_closes() {
    let mut connection = SaslConnection::new(plain_config("0"));
    reply(connection.on_frame(handshake("PLAIN", 1)));
    let Action::ReplyAndClose(answer, _) = connection.on_frame(authenticate(b"\0alice\0wrong", 1)) else {
        panic!()
    };
    let auth: SaslAuthenticateResponse = response(&answer, ApiKey::SaslAuthenticate, 1);
    assert_eq!(auth.error_code, ResponseError::SaslAuthenticationFailed.code());
    assert_eq!(auth.error_message.unwrap().as_str(), "Authentication failed: Invalid username or password");
    assert!(connection.principal.is_none());
}

#[test]
fn requests_before_authentication_close_the_connection() {
    let metadata = || frame(ApiKey::Metadata, 12, &MetadataRequest::default());
    let mut fresh = SaslConnection::new(plain_config("0"));
    assert!(
        matches!(fresh.on_frame(metadata()), Action::Close(reason) if reason.contains("during SASL handshake"))
    );
    let mut mid = SaslConnection::new(plain_config("0"));
    reply(mid.on_frame(handshake("PLAIN", 1)));
    assert!(
        matches!(mid.on_frame(metadata()), Action::Close(reason) if reason.contains("during SASL authentication"))
    );
    let mut twice = SaslConnection::new(plain_config("0"));
    let versions = || frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    assert!(matches!(twice.on_frame(versions()), Action::Dispatch(_)));
    assert!(matches!(twice.on_frame(versions()), Action::Close(_)));
    // An ApiVersions of a version too new is answered and may be retried.
    let mut too_new = BytesMut::from(&versions()[..]);
    too_new[2..4].copy_from_slice(&99i16.to_be_bytes());
    let mut fresh = SaslConnection::new(plain_config("0"));
    assert!(matches!(fresh.on_frame(too_new.freeze()), Action::Dispatch(_)));
    assert!(matches!(fresh.on_frame(versions()), Action::Dispatch(_)));
    assert!(matches!(fresh.on_frame(handshake("PLAIN", 1)), Action::Reply(_)));
}

#[test]
fn an_unknown_mechanism_is_refused_with_the_enabled_ones() {
    let mut connection = SaslConnection::new(plain_config("0"));
    let Action::ReplyAndClose(answer, _) = connection.on_frame(handshake("GSSAPI", 1)) else { panic!() };
    let refused: SaslHandshakeResponse = response(&answer, ApiKey::SaslHandshake, 1);
    assert_eq!(refused.error_code, ResponseError::UnsupportedSaslMechanism.code());
    let names: Vec<&str> = refused.mechanisms.iter().map(|m| m.as_str()).collect();
    assert_eq!(names, ["PLAIN", "SCRAM-SHA-256"]);
}

#[test]
fn a_v0_handshake_switches_to_raw_tokens() {
    let mut connection = SaslConnection::new(plain_config("0"));
    reply(connection.on_frame(handshake("PLAIN", 0)));
    let answer = reply(connection.on_frame(Bytes::from_static(b"\0bob\0builder")));
    assert_eq!(&answer[..], &[0, 0, 0, 0]);
    assert_eq!(connection.principal.as_deref(), Some("User:bob"));
    let mut refused = SaslConnection::new(plain_config("0"));
    reply(refused.on_frame(handshake("PLAIN", 0)));
    assert!(matches!(refused.on_frame(Bytes::from_static(b"\0bob\0nope")), Action::Close(_)));
}

#[test]
fn sessions_expire_and_re_authentication_keeps_the_principal() {
    let mut connection = SaslConnection::new(plain_config("60000"));
    reply(connection.on_frame(handshake("PLAIN", 1)));
    let auth: SaslAuthenticateResponse = response(
        &reply(connection.on_frame(authenticate(b"\0alice\0secret", 2))),
        ApiKey::SaslAuthenticate,
        2,
    );
    assert_eq!(auth.session_lifetime_ms, 60_000);
    // Re-authentication as the same user succeeds…
    reply(connection.on_frame(handshake("PLAIN", 1)));
    reply(connection.on_frame(authenticate(b"\0alice\0secret", 2)));
    assert!(connection.is_authenticated());
    // …as another user fails.
    reply(connection.on_frame(handshake("PLAIN", 1)));
    let Action::ReplyAndClose(answer, _) = connection.on_frame(authenticate(b"\0bob\0builder", 2)) else {
        panic!()
    };
    let refused: SaslAuthenticateResponse = response(&answer, ApiKey::SaslAuthenticate, 2);
    assert!(refused.error_message.unwrap().contains("Cannot change principals"));

    let mut expired = SaslConnection::new(plain_config("1"));
    reply(expired.on_frame(handshake("PLAIN", 1)));
    reply(expired.on_frame(authenticate(b"\0alice\0secret", 2)));
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    let metadata = || frame(ApiKey::Metadata, 12, &MetadataRequest::default());
    loop {
        match expired.on_frame(metadata()) {
            Action::Close(reason) => {
                assert!(reason.contains("expired"));
                break;
            }
            _ => assert!(Instant::now() < deadline, "the session never expired"),
        }
    }
}

#[test]
fn garbage_frames_close_without_panicking() {
    let frames: Vec<Bytes> = vec![
        Bytes::new(),
        Bytes::from_static(&[0, 17]),
        Bytes::from_static(&[0, 17, 0, 1, 0, 0, 0, 1]),
        Bytes::from_static(&[0, 17, 0, 9, 0, 0, 0, 1, 0, 0]),
        Bytes::from_static(&[0x7f, 0x7f, 0, 0, 0, 0, 0, 0]),
    ];
    for garbage in frames {
        let mut connection = SaslConnection::new(plain_config("0"));
        assert!(matches!(connection.on_frame(garbage.clone()), Action::Close(_)), "{garbage:?}");
        let mut authenticating = SaslConnection::new(plain_config("0"));
        reply(authenticating.on_frame(handshake("SCRAM-SHA-256", 1)));
        let mut truncated = BytesMut::new();
        truncated.put_slice(&authenticate(b"n,,n=alice,r=abc", 2)[..12]);
        assert!(matches!(authenticating.on_frame(truncated.freeze()), Action::Close(_)));
    }
}

#[test]
fn unserved_mechanisms_and_missing_settings_are_config_errors() {
    let settings = |pairs: &[(&str, &str)]| {
        SaslConfig::from_settings(&ListenerSettings::from_pairs("L", pairs), None).err()
    };
    assert!(settings(&[]).unwrap().contains("sasl.enabled.mechanisms"));
    assert!(settings(&[("sasl.enabled.mechanisms", "GSSAPI")]).unwrap().contains("GSSAPI"));
    let broken = [("sasl.enabled.mechanisms", "PLAIN"), ("listener.name.l.plain.sasl.jaas.config", "Broken")];
    assert!(settings(&broken).unwrap().contains("listener.name.l.plain.sasl.jaas.config"));
}

#[test]
fn scram_refusals_name_only_the_mechanism() {
    let mut connection = SaslConnection::new(plain_config("0"));
    reply(connection.on_frame(handshake("SCRAM-SHA-256", 1)));
    let Action::ReplyAndClose(answer, reason) = connection.on_frame(authenticate(b"n,,n=nobody,r=abc", 2))
    else {
        panic!()
    };
    let refused: SaslAuthenticateResponse = response(&answer, ApiKey::SaslAuthenticate, 2);
    assert_eq!(
        refused.error_message.unwrap().as_str(),
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
    );
    // The log says why; the client does not learn that the user is unknown.
    assert!(reason.contains("unknown user"), "{reason}");
}

#[test]
fn a_token_that_never_expires_does_not_overflow_the_clock() {
    let oauth = config(&[("sasl.enabled.mechanisms", "OAUTHBEARER")]);
    for exp in ["1e300", "9223372036854775807", "1e18"] {
        let claims = format!(r#"{{"sub":"alice","exp":{exp}}}"#);
        let token = format!("{}.{}.", b64(r#"{"alg":"none"}"#), b64(&claims));
        let mut connection = SaslConnection::new(oauth.clone());
        reply(connection.on_frame(handshake("OAUTHBEARER", 1)));
        let message = format!("n,,\x01auth=Bearer {token}\x01\x01");
        let answer = reply(connection.on_frame(authenticate(message.as_bytes(), 2)));
        let auth: SaslAuthenticateResponse = response(&answer, ApiKey::SaslAuthenticate, 2);
        assert_eq!(auth.error_code, 0, "{exp}");
        assert!(auth.session_lifetime_ms > 0);
        assert!(matches!(
            connection.on_frame(frame(ApiKey::Metadata, 12, &MetadataRequest::default())),
            Action::Dispatch(_)
        ));
    }
}

fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

#[test]
fn scram_credentials_come_from_the_store_given() {
    use scram::{InMemoryScramCredentials, ScramMechanism};
    let settings = ListenerSettings::from_pairs("L", &[("sasl.enabled.mechanisms", "SCRAM-SHA-512")]);
    let mut store = InMemoryScramCredentials::default();
    store.add_password(ScramMechanism::Sha512, "carol", "secret");
    let config = SaslConfig::from_settings(&settings, None).unwrap().with_scram_credentials(Arc::new(store));
    let mut connection = SaslConnection::new(Arc::new(config));
    reply(connection.on_frame(handshake("SCRAM-SHA-512", 1)));
    let first: SaslAuthenticateResponse = response(
        &reply(connection.on_frame(authenticate(b"n,,n=carol,r=abc", 2))),
        ApiKey::SaslAuthenticate,
        2,
    );
    assert_eq!(first.error_code, 0, "carol is in the store");
    assert!(first.auth_bytes.starts_with(b"r=abc"));
}

#[test]
fn logins_come_from_the_static_jaas_file_when_the_listener_has_none() {
    let file = jaas::parse_file(
        r#"KafkaServer { org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="a"; };
           sasl_plaintext.KafkaServer {
               org.apache.kafka.common.security.plain.PlainLoginModule required user_bob="b";
           };"#,
    )
    .unwrap();
    let settings = ListenerSettings::from_pairs("SASL_PLAINTEXT", &[("sasl.enabled.mechanisms", "PLAIN")]);
    let config = Arc::new(SaslConfig::from_settings(&settings, Some(&file)).unwrap());
    let login = |token: &'static [u8]| {
        let mut connection = SaslConnection::new(config.clone());
        reply(connection.on_frame(handshake("PLAIN", 1)));
        matches!(connection.on_frame(authenticate(token, 2)), Action::Reply(_))
    };
    // The listener's own section wins over KafkaServer.
    assert!(login(b"\0bob\0b"));
    assert!(!login(b"\0alice\0a"));
    // A listener's sasl.jaas.config wins over the file.
    let own = ListenerSettings::from_pairs(
        "SASL_PLAINTEXT",
        &[
            ("sasl.enabled.mechanisms", "PLAIN"),
            (
                "listener.name.sasl_plaintext.plain.sasl.jaas.config",
                r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_carol="c";"#,
            ),
        ],
    );
    let config = Arc::new(SaslConfig::from_settings(&own, Some(&file)).unwrap());
    let mut connection = SaslConnection::new(config);
    reply(connection.on_frame(handshake("PLAIN", 1)));
    assert!(matches!(connection.on_frame(authenticate(b"\0carol\0c", 2)), Action::Reply(_)));
}
