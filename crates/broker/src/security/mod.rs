//! Listener security as Kafka configures it: each listener's security
//! protocol (`listener.security.protocol.map`), TLS for `SSL` and
//! `SASL_SSL`, SASL for `SASL_PLAINTEXT` and `SASL_SSL`.
//!
//! - [`settings`] reads a listener's keys, `listener.name.<name>.<key>`
//!   winning over the plain `<key>`;
//! - [`tls`] builds the rustls server config from the key and trust stores
//!   (PEM or PKCS12), reloads it when their files change, and names the
//!   peer of a TLS connection from its certificate through [`principal`]'s
//!   `ssl.principal.mapping.rules`;
//! - [`sasl`] runs SaslHandshake / SaslAuthenticate on a connection before
//!   any other request (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER), and their
//!   re-authentication (KIP-368).
//!
//! - [`client`] is the other end, for this node's own links to other
//!   nodes: TLS and SASL as the link's listener is configured.
//!
//! - [`authorizer`] decides each request's actions against the ACLs of
//!   the metadata image (Kafka's StandardAuthorizer rules).
//!
//! [`ListenerSecurity`] is what a listener's accept loop hands each
//! connection (built once at start, before the disk is touched);
//! [`Session`] is what a connection knows about its peer, and its
//! principal (`User:<name>`, `User:ANONYMOUS` when unauthenticated)
//! reaches every handler as `RequestContext::principal`, for the
//! authorizer. SCRAM credentials come from the metadata image through
//! [`sasl::scram::ImageScramCredentials`], bound once the log is open.

pub mod authorizer;
pub mod client;
pub mod principal;
pub mod sasl;
pub mod settings;
pub mod tls;

use std::sync::Arc;

use crate::config::BrokerConfig;
use settings::ListenerSettings;

/// Kafka's security protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Self::Plaintext,
            "SSL" => Self::Ssl,
            "SASL_PLAINTEXT" => Self::SaslPlaintext,
            "SASL_SSL" => Self::SaslSsl,
            _ => return None,
        })
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    pub fn uses_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

/// A listener's security: how its connections are encrypted and who they
/// must prove to be.
pub struct ListenerSecurity {
    pub name: Arc<str>,
    pub protocol: SecurityProtocol,
    pub tls: Option<Arc<tls::ReloadingAcceptor>>,
    pub sasl: Option<Arc<sasl::SaslConfig>>,
    /// `connections.max.idle.ms`: a connection that sends nothing this
    /// long is closed.
    pub max_idle: std::time::Duration,
}

impl ListenerSecurity {
    /// The security of listener `name`, from the broker's config; SASL
    /// listeners find SCRAM credentials in `scram`.
    pub fn from_config(
        config: &BrokerConfig,
        name: &str,
        scram: &Arc<dyn sasl::scram::ScramCredentials>,
    ) -> Result<Self, String> {
        let protocol = config.security_protocol(name).ok_or_else(|| {
            format!("no security protocol defined for listener {name} in listener.security.protocol.map")
        })?;
        let settings = ListenerSettings::new(&config.provided, name);
        let tls = if protocol.uses_tls() {
            Some(Arc::new(tls::ReloadingAcceptor::new(&tls_settings(protocol, &settings))?))
        } else {
            None
        };
        let sasl = if protocol.uses_sasl() {
            let static_jaas = static_jaas_file()?;
            let sasl = sasl::SaslConfig::from_settings(&settings, static_jaas.as_ref())?;
            Some(Arc::new(sasl.with_scram_credentials(scram.clone())))
        } else {
            None
        };
        let max_idle = max_idle(&settings)?;
        Ok(Self { name: Arc::from(name), protocol, tls, sasl, max_idle })
    }
}

/// Kafka's default `connections.max.idle.ms`: ten minutes.
const DEFAULT_MAX_IDLE_MS: i64 = 600_000;

/// The listener's `connections.max.idle.ms` (its `listener.name.<l>.`
/// form first). Kafka takes -1 for "never"; so does any negative value here.
fn max_idle(settings: &ListenerSettings) -> Result<std::time::Duration, String> {
    let ms = settings.millis("connections.max.idle.ms", DEFAULT_MAX_IDLE_MS)?;
    let ms = u64::try_from(ms).unwrap_or(u64::MAX / 4);
    Ok(std::time::Duration::from_millis(ms))
}

/// A TLS listener's settings. On `SASL_SSL` only the listener's own
/// `ssl.client.auth` asks for client certificates (KIP-684): the
/// broker-wide one was meant for `SSL` listeners.
fn tls_settings(protocol: SecurityProtocol, settings: &ListenerSettings) -> ListenerSettings {
    match protocol {
        SecurityProtocol::SaslSsl => settings.listener_only("ssl.client.auth"),
        _ => settings.clone(),
    }
}

/// Kafka's static JAAS file, as its start scripts hand it to the JVM:
/// `-Djava.security.auth.login.config=PATH` in `KAFKA_OPTS`. Its
/// `KafkaServer` sections serve mechanisms without a
/// `listener.name.<l>.<mechanism>.sasl.jaas.config`.
pub(crate) fn static_jaas_file() -> Result<Option<sasl::jaas::JaasFile>, String> {
    let Ok(options) = std::env::var("KAFKA_OPTS") else { return Ok(None) };
    let property = "-Djava.security.auth.login.config=";
    let Some(path) = options.split_whitespace().find_map(|option| option.strip_prefix(property)) else {
        return Ok(None);
    };
    // `==PATH` tells Java to use this file only; either way it is the one.
    let path = path.trim_start_matches('=').trim_matches('"');
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("java.security.auth.login.config in KAFKA_OPTS: cannot read {path}: {e}"))?;
    sasl::jaas::parse_file(&text).map(Some).map_err(|e| format!("JAAS file {path}: {e}"))
}

/// Kafka's principal of a client that did not authenticate.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// What a connection knows about its peer: the principal the authorizer
/// will check (`User:<name>`), as Kafka's `KafkaPrincipal` prints it.
#[derive(Debug, Clone)]
pub struct Session {
    pub principal: Arc<str>,
    /// Set when a quota throttles the client (KIP-219).
    pub mute: Arc<crate::quota::ChannelMute>,
}

impl Default for Session {
    fn default() -> Self {
        Self { principal: Arc::from(ANONYMOUS), mute: Arc::default() }
    }
}

/// Whether `key` is one of the security keys this module reads (so the
/// config does not warn about it as unknown).
pub fn is_security_key(key: &str) -> bool {
    const PREFIXES: &[&str] = &["ssl.", "sasl.", "listener.name."];
    PREFIXES.iter().any(|p| key.starts_with(p))
        || matches!(
            key,
            "connections.max.reauth.ms" | "connections.max.idle.ms" | "security.inter.broker.protocol"
        )
}
