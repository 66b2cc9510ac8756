//! SASL on a connection, as Kafka's `SaslServerAuthenticator`.
//!
//! A client of a `SASL_PLAINTEXT` or `SASL_SSL` listener may send
//! ApiVersions once, then must send SaslHandshake (v0-v1) naming one of the
//! listener's `sasl.enabled.mechanisms`; anything else before the
//! authentication completes closes the connection. After a v1 handshake
//! the mechanism's messages travel in SaslAuthenticate requests (v0-v2);
//! after a v0 handshake they travel as bare size-prefixed tokens, which
//! Kafka still accepts. A failed authentication is answered with
//! SASL_AUTHENTICATION_FAILED and a message saying why (KIP-152), then the
//! connection is closed.
//!
//! With `connections.max.reauth.ms` > 0 (or a token that expires), the
//! SaslAuthenticate answer carries the session's lifetime (KIP-368): the
//! client re-authenticates on the same connection with a new SaslHandshake
//! before it ends, and the broker closes a connection whose session
//! expired when its next request arrives. Re-authentication keeps the
//! mechanism and the principal.
//!
//! Mechanisms: [`plain`], [`scram`] (SCRAM-SHA-256 and SCRAM-SHA-512, their
//! credentials from a [`scram::ScramCredentials`] store) and [`oauth`]
//! (OAUTHBEARER); their JAAS options are read by [`jaas`]. [`client`] is
//! the other side, for this node's own links to other nodes.

pub mod client;
pub mod http_get;
pub mod jaas;
pub mod jwks_endpoint;
pub mod oauth;
pub mod plain;
pub mod scram;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ApiKey, RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::settings::ListenerSettings;
use rustls::RootCertStore;
use scram::{InMemoryScramCredentials, ScramCredentials, ScramMechanism};

/// Kafka's bound on a SASL message from a client that has not yet
/// authenticated (`sasl.server.max.receive.size`).
pub const MAX_RECEIVE_SIZE_DEFAULT: usize = 524_288;

/// The mechanisms Strom serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    Plain,
    ScramSha256,
    ScramSha512,
    OAuthBearer,
}

impl Mechanism {
    pub const ALL: [Mechanism; 4] = [Self::Plain, Self::ScramSha256, Self::ScramSha512, Self::OAuthBearer];

    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
            Self::OAuthBearer => "OAUTHBEARER",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Kafka's login module class for the mechanism.
    fn login_module(self) -> &'static str {
        match self {
            Self::Plain => "org.apache.kafka.common.security.plain.PlainLoginModule",
            Self::ScramSha256 | Self::ScramSha512 => {
                "org.apache.kafka.common.security.scram.ScramLoginModule"
            }
            Self::OAuthBearer => "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
        }
    }
}

/// One step of a mechanism's exchange.
#[derive(Debug)]
pub enum Step {
    /// Send this to the client and wait for its next message.
    Challenge(Vec<u8>),
    /// Authenticated as `user`: send `response`, the session may last
    /// `lifetime_ms` at most (a token's expiry).
    Done { response: Vec<u8>, user: String, lifetime_ms: Option<i64> },
}

/// A failed authentication and why (KIP-152). As in Kafka, the client is
/// told the reason of a refusal it can act on (a wrong PLAIN password, an
/// authorization id that is not the user), but only the mechanism when the
/// reason could reveal more, such as whether a SCRAM user exists.
#[derive(Debug)]
pub struct Failure {
    pub mechanism: Mechanism,
    /// Why, for the broker's log (and the client's ears if `told`).
    pub message: String,
    pub told: bool,
}

impl Failure {
    /// A refusal whose reason the client is told (Kafka's
    /// `SaslAuthenticationException`).
    pub fn new(mechanism: Mechanism, message: String) -> Self {
        Self { mechanism, message, told: true }
    }

    /// A refusal the client learns only the mechanism of (Kafka's
    /// `SaslException`); `reason` goes to the log.
    pub fn invalid_credentials(mechanism: Mechanism, reason: impl Into<String>) -> Self {
        Self { mechanism, message: reason.into(), told: false }
    }

    /// What the client is told.
    fn client_message(&self, reauthenticating: bool) -> String {
        if self.told {
            return self.message.clone();
        }
        let during = if reauthenticating { "re-authentication" } else { "authentication" };
        let name = self.mechanism.name();
        format!("Authentication failed during {during} due to invalid credentials with SASL mechanism {name}")
    }
}

/// The server side of one mechanism's exchange.
pub trait MechanismServer: Send {
    fn step(&mut self, message: &[u8]) -> Result<Step, Failure>;
}

/// A listener's SASL settings.
pub struct SaslConfig {
    enabled: Vec<Mechanism>,
    plain_users: Arc<BTreeMap<String, String>>,
    scram: Arc<dyn ScramCredentials>,
    oauth: Option<Arc<oauth::Validator>>,
    /// `connections.max.reauth.ms` per mechanism (0: no limit).
    max_reauth_ms: BTreeMap<&'static str, i64>,
    /// `sasl.server.max.receive.size`.
    pub max_receive_size: usize,
}

impl SaslConfig {
    /// The SASL settings of a listener; `static_jaas` is the JAAS file, if
    /// any, for mechanisms without their own `sasl.jaas.config`.
    pub fn from_settings(
        settings: &ListenerSettings,
        static_jaas: Option<&jaas::JaasFile>,
    ) -> Result<Self, String> {
        let names = settings.list("sasl.enabled.mechanisms");
        if names.is_empty() {
            return Err(format!(
                "listener {} uses SASL: set sasl.enabled.mechanisms (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER; Kafka's default GSSAPI is not served)",
                settings.listener()
            ));
        }
        let mut config = Self {
            enabled: Vec::new(),
            plain_users: Arc::default(),
            scram: Arc::new(InMemoryScramCredentials::default()),
            oauth: None,
            max_reauth_ms: BTreeMap::new(),
            max_receive_size: number(settings, "sasl.server.max.receive.size", MAX_RECEIVE_SIZE_DEFAULT)?,
        };
        for name in &names {
            let mechanism = Mechanism::parse(name).ok_or_else(|| {
                format!("{}: mechanism {name} is not served", settings.name_of("sasl.enabled.mechanisms"))
            })?;
            let jaas = jaas_entry(settings, mechanism, static_jaas)?;
            match mechanism {
                Mechanism::Plain => config.plain_users = Arc::new(plain_users(settings, jaas)),
                // SCRAM credentials live in the metadata log, as in Kafka:
                // the login module's options name only the inter-broker
                // client's own login.
                Mechanism::ScramSha256 | Mechanism::ScramSha512 => {}
                Mechanism::OAuthBearer => {
                    let options = jaas.map(|j| j.options).unwrap_or_default();
                    config.oauth = Some(Arc::new(oauth_validator(settings, &options)?));
                }
            }
            let reauth_ms = match settings.get_for_mechanism(name, "connections.max.reauth.ms") {
                None => 0,
                Some(raw) => {
                    raw.parse().map_err(|_| format!("connections.max.reauth.ms: {raw:?} is not a number"))?
                }
            };
            config.max_reauth_ms.insert(mechanism.name(), reauth_ms);
            config.enabled.push(mechanism);
        }
        Ok(config)
    }

    /// Replaces where SCRAM credentials come from (none until then): the
    /// broker gives the metadata image's store (KIP-554).
    pub fn with_scram_credentials(mut self, store: Arc<dyn ScramCredentials>) -> Self {
        self.scram = store;
        self
    }

    fn server(&self, mechanism: Mechanism) -> Box<dyn MechanismServer> {
        match mechanism {
            Mechanism::Plain => Box::new(plain::PlainServer::new(self.plain_users.clone())),
            Mechanism::ScramSha256 => {
                Box::new(scram::ScramServer::new(ScramMechanism::Sha256, self.scram.clone()))
            }
            Mechanism::ScramSha512 => {
                Box::new(scram::ScramServer::new(ScramMechanism::Sha512, self.scram.clone()))
            }
            Mechanism::OAuthBearer => {
                Box::new(oauth::OAuthServer::new(self.oauth.clone().expect("set when enabled")))
            }
        }
    }

    /// PLAIN's users, when the listener serves PLAIN.
    pub fn plain_users(&self) -> Option<Arc<BTreeMap<String, String>>> {
        self.enabled.contains(&Mechanism::Plain).then(|| self.plain_users.clone())
    }

    /// The SCRAM mechanisms the listener serves and where their credentials are.
    pub fn scram(&self) -> (Vec<ScramMechanism>, Arc<dyn ScramCredentials>) {
        let mechanisms = self.enabled.iter().filter_map(|m| ScramMechanism::of(*m)).collect();
        (mechanisms, self.scram.clone())
    }

    fn mechanism_names(&self) -> Vec<StrBytes> {
        self.enabled.iter().map(|m| StrBytes::from_static_str(m.name())).collect()
    }
}

/// A mechanism's `sasl.jaas.config`, if set.
/// A mechanism's JAAS login module, found as Kafka finds it: the
/// listener's `listener.name.<l>.<mechanism>.sasl.jaas.config`, else the
/// mechanism's module in the static JAAS file's `<l>.KafkaServer` section,
/// else in its `KafkaServer` section. An unprefixed `sasl.jaas.config` is
/// ignored with a warning, as Kafka ignores it.
pub(crate) fn jaas_entry(
    settings: &ListenerSettings,
    mechanism: Mechanism,
    static_jaas: Option<&jaas::JaasFile>,
) -> Result<Option<jaas::JaasEntry>, String> {
    let key = format!(
        "listener.name.{}.{}.sasl.jaas.config",
        settings.listener(),
        mechanism.name().to_ascii_lowercase()
    );
    if let Some(text) = settings.get_exact(&key) {
        return jaas::parse(text).map(Some).map_err(|e| format!("{key}: {e}"));
    }
    if settings.get("sasl.jaas.config").is_some() {
        tracing::warn!(listener = settings.listener(), "sasl.jaas.config must be prefixed with listener.name.<listener>.<mechanism>. on a broker; ignoring it");
    }
    let Some(file) = static_jaas else { return Ok(None) };
    let listener_section = format!("{}.KafkaServer", settings.listener());
    let section = file.get(&listener_section).or_else(|| file.get("KafkaServer"));
    let module = mechanism.login_module();
    Ok(section.and_then(|entries| entries.iter().find(|e| e.login_module == module)).cloned())
}

/// PLAIN's users: the PlainLoginModule's `user_<name>="<password>"` options.
fn plain_users(settings: &ListenerSettings, jaas: Option<jaas::JaasEntry>) -> BTreeMap<String, String> {
    let users = jaas.map(|j| j.users()).unwrap_or_default();
    if users.is_empty() {
        tracing::warn!(
            listener = settings.listener(),
            "PLAIN is enabled but its sasl.jaas.config names no user_<name> entries: every login will fail"
        );
    }
    users
}

fn number(settings: &ListenerSettings, key: &str, default: usize) -> Result<usize, String> {
    match settings.get(key) {
        None => Ok(default),
        Some(raw) => raw.parse().map_err(|_| format!("{}: {raw:?} is not a number", settings.name_of(key))),
    }
}

/// The JWKS `url` names: an HTTP(S) endpoint, fetched now and refreshed,
/// or a file.
fn jwks(
    settings: &ListenerSettings,
    jaas: &BTreeMap<String, String>,
    url: &str,
) -> Result<oauth::Jwks, String> {
    let Some(endpoint) = http_get::HttpUrl::parse(url) else {
        let path = url.strip_prefix("file://").or_else(|| url.strip_prefix("file:")).unwrap_or(url);
        return oauth::Jwks::file(std::path::Path::new(path));
    };
    let endpoint = endpoint?;
    let tls = match endpoint.https {
        true => Some(http_get::tls_connector(jwks_trust(settings, jaas)?)?),
        false => None,
    };
    let millis = |key: &str, default: i64| -> Result<Duration, String> {
        let name = format!("sasl.oauthbearer.jwks.endpoint.{key}");
        let ms = match settings.get_for_mechanism("OAUTHBEARER", &name) {
            None => default,
            Some(raw) => raw
                .parse()
                .ok()
                .filter(|ms: &i64| *ms >= 0)
                .ok_or_else(|| format!("{name}: {raw:?} is not a non-negative number of milliseconds"))?,
        };
        Ok(Duration::from_millis(ms as u64))
    };
    let policy = jwks_endpoint::RefreshPolicy {
        refresh: millis("refresh.ms", 3_600_000)?.max(Duration::from_millis(1)),
        retry_backoff: millis("retry.backoff.ms", 100)?,
        retry_backoff_max: millis("retry.backoff.max.ms", 10_000)?,
    };
    let endpoint = jwks_endpoint::EndpointJwks::start(endpoint, tls, policy)?;
    Ok(oauth::Jwks::endpoint(endpoint))
}

/// The CAs an https JWKS endpoint must chain to. Kafka reads them from the
/// client `ssl.truststore.*` options of the OAUTHBEARER JAAS entry (with
/// the JVM's default trust store when they are absent); Strom reads the
/// same options, and without them the system's CA bundle.
fn jwks_trust(settings: &ListenerSettings, jaas: &BTreeMap<String, String>) -> Result<RootCertStore, String> {
    let pairs: Vec<(&str, &str)> = jaas
        .iter()
        .filter(|(key, _)| key.starts_with("ssl.truststore."))
        .map(|(key, value)| (key.as_str(), value.as_str()))
        .collect();
    let options = ListenerSettings::from_pairs(settings.listener(), &pairs);
    match crate::security::tls::trust_roots(&options)? {
        Some(roots) => Ok(roots),
        None => crate::security::tls::system_roots(),
    }
}

/// OAUTHBEARER's validator: signed JWTs when a JWKS is configured, else
/// unsecured tokens.
fn oauth_validator(
    settings: &ListenerSettings,
    jaas: &BTreeMap<String, String>,
) -> Result<oauth::Validator, String> {
    let key = |name: &str| settings.get_for_mechanism("OAUTHBEARER", name);
    let Some(url) = key("sasl.oauthbearer.jwks.endpoint.url") else {
        return Ok(oauth::Validator::Unsecured(oauth::UnsecuredOptions::from_jaas(jaas)?));
    };
    let keys = jwks(settings, jaas, url).map_err(|e| format!("sasl.oauthbearer.jwks.endpoint.url: {e}"))?;
    let skew_s: i64 = match key("sasl.oauthbearer.clock.skew.seconds") {
        None => 30,
        Some(raw) => raw
            .parse()
            .map_err(|_| format!("sasl.oauthbearer.clock.skew.seconds: {raw:?} is not a number"))?,
    };
    let list = |name: &str| -> Vec<String> {
        key(name)
            .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
            .unwrap_or_default()
    };
    Ok(oauth::Validator::Signed(oauth::SignedOptions {
        keys,
        expected_audience: list("sasl.oauthbearer.expected.audience"),
        expected_issuer: key("sasl.oauthbearer.expected.issuer").map(str::to_owned),
        scope_claim: key("sasl.oauthbearer.scope.claim.name").unwrap_or("scope").to_owned(),
        sub_claim: key("sasl.oauthbearer.sub.claim.name").unwrap_or("sub").to_owned(),
        clock_skew_ms: skew_s.saturating_mul(1000),
    }))
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// What the connection does with a frame.
#[derive(Debug)]
pub enum Action {
    /// Serve it as any request.
    Dispatch(Bytes),
    /// Write this answer (already size-prefixed) and read on.
    Reply(Bytes),
    /// Write this answer, then close the connection.
    ReplyAndClose(Bytes, String),
    /// Close the connection at once.
    Close(String),
}

enum State {
    /// Before the handshake; `versions_seen` once ApiVersions was answered.
    Handshake { versions_seen: bool },
    /// Inside a mechanism's exchange; `raw` after a v0 handshake.
    Authenticating { mechanism: Mechanism, server: Box<dyn MechanismServer>, raw: bool },
    /// Authenticated; the session ends at `expires` if set.
    Authenticated { mechanism: Mechanism, expires: Option<Instant> },
    /// A failure was answered; nothing more is read.
    Failed,
}

/// One connection's SASL state.
pub struct SaslConnection {
    config: Arc<SaslConfig>,
    state: State,
    /// Set once authenticated; kept through re-authentications.
    pub principal: Option<String>,
    /// The mechanism and principal of the session being re-authenticated.
    reauthenticating: Option<Mechanism>,
}

impl SaslConnection {
    pub fn new(config: Arc<SaslConfig>) -> Self {
        Self {
            config,
            state: State::Handshake { versions_seen: false },
            principal: None,
            reauthenticating: None,
        }
    }

    /// Whether the client has authenticated (and is not re-authenticating).
    pub fn is_authenticated(&self) -> bool {
        matches!(self.state, State::Authenticated { .. })
    }

    /// The largest frame to accept now: bounded by
    /// `sasl.server.max.receive.size` until authenticated.
    pub fn max_frame_bytes(&self, otherwise: usize) -> usize {
        match self.state {
            State::Authenticated { .. } => otherwise,
            _ => self.config.max_receive_size.min(otherwise),
        }
    }

    /// Decides what to do with one frame.
    pub fn on_frame(&mut self, frame: Bytes) -> Action {
        if let State::Authenticating { raw: true, .. } = self.state {
            return self.raw_token(&frame);
        }
        let Some(api_key) = peek_api_key(&frame) else {
            return Action::Close("a frame too short for a request header".into());
        };
        match (&self.state, api_key) {
            // KIP-368: a handshake on an authenticated connection starts
            // re-authentication, whatever the session's expiry.
            (State::Authenticated { .. }, ApiKey::SaslHandshake) => self.handshake(frame, true),
            (State::Authenticated { expires: Some(at), .. }, _) if Instant::now() >= *at => {
                Action::Close("the SASL session expired without re-authentication".into())
            }
            (State::Authenticated { .. }, _) => Action::Dispatch(frame),
            (State::Handshake { versions_seen: false }, ApiKey::ApiVersions) => {
                // A version we do not speak is answered with the versions we
                // do, and the client may ask again (Kafka stays put too).
                let version = i16::from_be_bytes([frame[2], frame[3]]);
                let served = crate::apis::served_versions(ApiKey::ApiVersions);
                let versions_seen = served.is_some_and(|range| range.min <= version && version <= range.max);
                self.state = State::Handshake { versions_seen };
                Action::Dispatch(frame)
            }
            (State::Handshake { .. }, ApiKey::SaslHandshake) => self.handshake(frame, false),
            (State::Handshake { .. }, other) => {
                Action::Close(format!("Unexpected Kafka request of type {other:?} during SASL handshake."))
            }
            (State::Authenticating { .. }, ApiKey::SaslAuthenticate) => self.authenticate(frame),
            (State::Authenticating { .. }, other) => Action::Close(format!(
                "Unexpected Kafka request of type {other:?} during SASL authentication."
            )),
            (State::Failed, _) => Action::Close("authentication already failed".into()),
        }
    }

    fn handshake(&mut self, frame: Bytes, reauthenticating: bool) -> Action {
        let Ok((header, request)) = decode::<SaslHandshakeRequest>(frame, ApiKey::SaslHandshake, 0..=1)
        else {
            return Action::Close("malformed SaslHandshake request".into());
        };
        let mut response = SaslHandshakeResponse::default().with_mechanisms(self.config.mechanism_names());
        let requested =
            Mechanism::parse(request.mechanism.as_str()).filter(|m| self.config.enabled.contains(m));
        let previous = match &self.state {
            State::Authenticated { mechanism, .. } => Some(*mechanism),
            _ => None,
        };
        let Some(mechanism) = requested else {
            response.error_code = ResponseError::UnsupportedSaslMechanism.code();
            let reason = format!("Unsupported SASL mechanism {}", request.mechanism.as_str());
            self.state = State::Failed;
            return Action::ReplyAndClose(encode(&header, ApiKey::SaslHandshake, &response), reason);
        };
        if reauthenticating && previous != Some(mechanism) {
            response.error_code = ResponseError::IllegalSaslState.code();
            self.state = State::Failed;
            let reason = format!(
                "SASL mechanism cannot change from {previous:?} to {mechanism:?} during re-authentication"
            );
            return Action::ReplyAndClose(encode(&header, ApiKey::SaslHandshake, &response), reason);
        }
        self.reauthenticating = reauthenticating.then_some(mechanism);
        let raw = header.request_api_version == 0;
        self.state = State::Authenticating { mechanism, server: self.config.server(mechanism), raw };
        Action::Reply(encode(&header, ApiKey::SaslHandshake, &response))
    }

    fn authenticate(&mut self, frame: Bytes) -> Action {
        let Ok((header, request)) = decode::<SaslAuthenticateRequest>(frame, ApiKey::SaslAuthenticate, 0..=2)
        else {
            return Action::Close("malformed SaslAuthenticate request".into());
        };
        let mut response = SaslAuthenticateResponse::default();
        let result = self.step(&request.auth_bytes);
        match result {
            Ok(Evaluated::Challenge(bytes)) => {
                response.auth_bytes = bytes.into();
                Action::Reply(encode(&header, ApiKey::SaslAuthenticate, &response))
            }
            Ok(Evaluated::Done { response: bytes, lifetime_ms }) => {
                response.auth_bytes = bytes.into();
                response.session_lifetime_ms = lifetime_ms;
                Action::Reply(encode(&header, ApiKey::SaslAuthenticate, &response))
            }
            Err(failure) => {
                let told = failure.client_message(self.reauthenticating.is_some());
                response.error_code = ResponseError::SaslAuthenticationFailed.code();
                response.error_message = Some(StrBytes::from_string(told));
                let reason =
                    format!("{} authentication failed: {}", failure.mechanism.name(), failure.message);
                Action::ReplyAndClose(encode(&header, ApiKey::SaslAuthenticate, &response), reason)
            }
        }
    }

    /// A v0 handshake's token: bare size-prefixed bytes both ways; a
    /// failure can only close the connection.
    fn raw_token(&mut self, token: &Bytes) -> Action {
        match self.step(token) {
            Ok(Evaluated::Challenge(bytes) | Evaluated::Done { response: bytes, .. }) => {
                let mut framed = BytesMut::with_capacity(4 + bytes.len());
                framed.put_i32(bytes.len() as i32);
                framed.put_slice(&bytes);
                Action::Reply(framed.freeze())
            }
            Err(failure) => Action::Close(format!(
                "{} authentication failed: {}",
                failure.mechanism.name(),
                failure.message
            )),
        }
    }

    /// Runs the mechanism on one message, completing the session when it
    /// is done.
    fn step(&mut self, message: &[u8]) -> Result<Evaluated, Failure> {
        let State::Authenticating { mechanism, server, .. } = &mut self.state else {
            unreachable!("step runs while authenticating")
        };
        let mechanism = *mechanism;
        let outcome = server.step(message);
        let (response, user, token_lifetime_ms) = match outcome {
            Ok(Step::Challenge(bytes)) => return Ok(Evaluated::Challenge(bytes)),
            Ok(Step::Done { response, user, lifetime_ms }) => (response, user, lifetime_ms),
            Err(failure) => {
                self.state = State::Failed;
                return Err(failure);
            }
        };
        let principal = format!("User:{user}");
        if self.reauthenticating.is_some() && self.principal.as_deref() != Some(principal.as_str()) {
            self.state = State::Failed;
            let previous = self.principal.as_deref().unwrap_or_default();
            return Err(Failure::new(
                mechanism,
                format!("Cannot change principals during re-authentication from {previous} to {principal}"),
            ));
        }
        let lifetime_ms = self.session_lifetime_ms(mechanism, token_lifetime_ms);
        // A lifetime past what the clock can count (a token expiring in a
        // billion years) is no limit at all.
        let expires = (lifetime_ms > 0 || token_lifetime_ms.is_some())
            .then(|| Instant::now().checked_add(std::time::Duration::from_millis(lifetime_ms.max(0) as u64)))
            .flatten();
        self.state = State::Authenticated { mechanism, expires };
        self.principal = Some(principal);
        self.reauthenticating = None;
        Ok(Evaluated::Done { response, lifetime_ms })
    }

    /// KIP-368's session lifetime: the shorter of `connections.max.reauth.ms`
    /// and the credential's own lifetime, 0 when neither applies.
    fn session_lifetime_ms(&self, mechanism: Mechanism, token_lifetime_ms: Option<i64>) -> i64 {
        let max_reauth = self.config.max_reauth_ms.get(mechanism.name()).copied().unwrap_or(0);
        match (token_lifetime_ms, max_reauth > 0) {
            (None, false) => 0,
            (None, true) => max_reauth,
            (Some(token), false) => token.max(0),
            (Some(token), true) => token.min(max_reauth).max(0),
        }
    }
}

enum Evaluated {
    Challenge(Vec<u8>),
    Done { response: Vec<u8>, lifetime_ms: i64 },
}

fn peek_api_key(frame: &[u8]) -> Option<ApiKey> {
    if frame.len() < 8 {
        return None;
    }
    ApiKey::try_from(i16::from_be_bytes([frame[0], frame[1]])).ok()
}

/// Decodes a SASL request's header and body, its version within `versions`.
fn decode<T: Decodable>(
    mut frame: Bytes,
    api_key: ApiKey,
    versions: std::ops::RangeInclusive<i16>,
) -> Result<(RequestHeader, T), ()> {
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    if !versions.contains(&version) {
        return Err(());
    }
    let header =
        RequestHeader::decode(&mut frame, api_key.request_header_version(version)).map_err(|_| ())?;
    let body = T::decode(&mut frame, version).map_err(|_| ())?;
    Ok((header, body))
}

/// A size-prefixed response frame.
fn encode<T: Encodable>(header: &RequestHeader, api_key: ApiKey, body: &T) -> Bytes {
    let version = header.request_api_version;
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    let response_header = ResponseHeader::default().with_correlation_id(header.correlation_id);
    // Encoding our own well-formed structs at a version the request used
    // cannot fail; an empty frame would at worst confuse the client.
    let _ = response_header.encode(&mut buf, api_key.response_header_version(version));
    let _ = body.encode(&mut buf, version);
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    buf.freeze()
}

#[cfg(test)]
mod tests;
