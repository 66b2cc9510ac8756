//! The client side of listener security, for the links this node opens to
//! other nodes, configured as Kafka configures them:
//!
//! - the controller link and the quorum's peer links use the first
//!   listener of `controller.listener.names`, its protocol from
//!   `listener.security.protocol.map` and the SASL mechanism
//!   `sasl.mechanism.controller.protocol`; links from broker to broker use
//!   `inter.broker.listener.name` (else `security.inter.broker.protocol`)
//!   and `sasl.mechanism.inter.broker.protocol`;
//! - TLS reads the listener's `ssl.truststore.*` (the CAs a server
//!   certificate must chain to) and, when set, `ssl.keystore.*` (the
//!   certificate this node shows for mTLS), `listener.name.<l>.ssl.*`
//!   winning as on the server side; the server's name is checked unless
//!   `ssl.endpoint.identification.algorithm` is empty (Kafka's default is
//!   `https`);
//! - SASL logs in with the `username` and `password` of the listener's
//!   login module for the mechanism
//!   (`listener.name.<l>.<mechanism>.sasl.jaas.config`, or the static JAAS
//!   file's `KafkaServer` section), with SaslHandshake v1 and
//!   SaslAuthenticate v2.
//!
//! [`LinkTransport`] does both for a [`Connector`]; a link that cannot
//! authenticate fails its connection with a message naming the link, and
//! its owner retries after a backoff.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use strom_quorum::channel::{BoxFuture, Channel, Connector, LinkSecurity, LinkStream};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::sasl::client::{Next, SaslClient, SaslLogin};
use super::sasl::Mechanism;
use super::settings::ListenerSettings;
use super::{tls, SecurityProtocol};
use crate::config::BrokerConfig;

/// The SaslHandshake and SaslAuthenticate versions a link sends.
const HANDSHAKE_VERSION: i16 = 1;
const AUTHENTICATE_VERSION: i16 = 2;
/// The most messages one SASL exchange may take (SCRAM takes two).
const MAX_SASL_ROUNDS: usize = 4;

/// The connector of the links to controllers (the controller link, the
/// quorum's peers, forwarded quorum requests).
pub fn controller_connector(config: &BrokerConfig) -> Result<Connector, String> {
    let Some(listener) = config.kraft.controller_listener_names.first() else {
        return Ok(Connector::plaintext());
    };
    link_connector(config, "controller", listener, "sasl.mechanism.controller.protocol")
}

/// The connector of the links from broker to broker, through the
/// inter-broker listener.
pub fn inter_broker_connector(config: &BrokerConfig) -> Result<Connector, String> {
    let listener = &config.kraft.inter_broker_listener_name;
    link_connector(config, "inter-broker", listener, "sasl.mechanism.inter.broker.protocol")
}

/// The connector of a link of kind `link` through listener `listener`,
/// SASL with the mechanism `mechanism_key` names.
fn link_connector(
    config: &BrokerConfig,
    link: &'static str,
    listener: &str,
    mechanism_key: &str,
) -> Result<Connector, String> {
    let protocol = config.security_protocol(listener).unwrap_or(SecurityProtocol::Plaintext);
    if protocol == SecurityProtocol::Plaintext {
        return Ok(Connector::plaintext());
    }
    let settings = ListenerSettings::new(&config.provided, listener);
    let in_context = |e: String| format!("the {link} link through listener {listener}: {e}");
    let tls = protocol.uses_tls().then(|| tls_client(&settings)).transpose().map_err(in_context)?;
    let sasl =
        protocol.uses_sasl().then(|| sasl_login(&settings, mechanism_key)).transpose().map_err(in_context)?;
    Ok(Connector::secured(Arc::new(LinkTransport { link, tls, sasl })))
}

/// TLS and SASL of one kind of link.
pub struct LinkTransport {
    link: &'static str,
    tls: Option<TlsClient>,
    sasl: Option<SaslLogin>,
}

impl std::fmt::Debug for LinkTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkTransport")
            .field("link", &self.link)
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl)
            .finish()
    }
}

struct TlsClient {
    connector: TlsConnector,
}

impl LinkSecurity for LinkTransport {
    fn wrap<'a>(
        &'a self,
        stream: TcpStream,
        host: &'a str,
    ) -> BoxFuture<'a, Result<Box<dyn LinkStream>, String>> {
        Box::pin(async move {
            let Some(tls) = &self.tls else { return Ok(Box::new(stream) as Box<dyn LinkStream>) };
            let name =
                ServerName::try_from(host.to_owned()).map_err(|e| format!("server name {host}: {e}"))?;
            let stream = tls
                .connector
                .connect(name, stream)
                .await
                .map_err(|e| format!("{} link: TLS handshake failed: {e}", self.link))?;
            Ok(Box::new(stream) as Box<dyn LinkStream>)
        })
    }

    fn authenticate<'a>(&'a self, channel: &'a Channel) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let Some(login) = &self.sasl else { return Ok(()) };
            authenticate(channel, login).await.map_err(|e| {
                format!("{} link: SASL {} as {}: {e}", self.link, login.mechanism.name(), login.username)
            })
        })
    }
}

/// SaslHandshake, then SaslAuthenticate until the mechanism is done.
async fn authenticate(channel: &Channel, login: &SaslLogin) -> Result<(), String> {
    let timeout = tls::HANDSHAKE_TIMEOUT;
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(login.mechanism.name()));
    let answer = channel.send(&handshake, HANDSHAKE_VERSION, timeout).await.map_err(|e| e.to_string())?;
    if let Some(error) = ResponseError::try_from_code(answer.error_code) {
        let offered: Vec<&str> = answer.mechanisms.iter().map(|m| m.as_str()).collect();
        return Err(format!("SaslHandshake: {error:?} (the server offers {offered:?})"));
    }
    let mut client = SaslClient::new(login)?;
    let mut message = client.first_message(login);
    for _ in 0..MAX_SASL_ROUNDS {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(message.into());
        let answer =
            channel.send(&request, AUTHENTICATE_VERSION, timeout).await.map_err(|e| e.to_string())?;
        if let Some(error) = ResponseError::try_from_code(answer.error_code) {
            let reason = answer.error_message.as_ref().map_or("", |m| m.as_str());
            return Err(format!("{error:?}: {reason}"));
        }
        match client.on_server_message(&answer.auth_bytes)? {
            Next::Send(next) => message = next,
            Next::Done => return Ok(()),
        }
    }
    Err("the SASL exchange did not end".into())
}

/// The link's login: the mechanism `mechanism_key` names and the
/// credentials of its login module on this listener.
fn sasl_login(settings: &ListenerSettings, mechanism_key: &str) -> Result<SaslLogin, String> {
    // Kafka's default is GSSAPI, which Strom does not speak.
    let name = settings.get(mechanism_key).unwrap_or("GSSAPI");
    let mechanism =
        Mechanism::parse(&name.to_ascii_uppercase()).filter(|m| *m != Mechanism::OAuthBearer).ok_or_else(
            || format!("{mechanism_key}={name} is not supported: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
        )?;
    let static_jaas = super::static_jaas_file()?;
    let entry = super::sasl::jaas_entry(settings, mechanism, static_jaas.as_ref())?.ok_or_else(|| {
        format!(
            "no login module for {}: set listener.name.{}.{}.sasl.jaas.config with username and password",
            mechanism.name(),
            settings.listener(),
            mechanism.name().to_ascii_lowercase()
        )
    })?;
    let option = |key: &str| {
        entry
            .options
            .get(key)
            .cloned()
            .ok_or_else(|| format!("the {} login module has no {key}", mechanism.name()))
    };
    Ok(SaslLogin { mechanism, username: option("username")?, password: option("password")? })
}

/// The TLS client config of a listener's links.
fn tls_client(settings: &ListenerSettings) -> Result<TlsClient, String> {
    let mut files = tls::Files::new();
    let roots = tls::trust_store(settings, &mut files)?
        .ok_or("TLS needs a trust store to check servers with: ssl.truststore.location or ssl.truststore.certificates")?;
    let provider = Arc::new(tls::provider(settings)?);
    let versions = tls::protocol_versions(settings)?;
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| format!("trust store: {e}"))?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| format!("{}: {e}", settings.name_of("ssl.enabled.protocols")))?;
    let key = "ssl.endpoint.identification.algorithm";
    let builder = match settings.get_even_empty(key).unwrap_or("https") {
        "" => builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyServerName(verifier))),
        algorithm if algorithm.eq_ignore_ascii_case("https") => builder.with_webpki_verifier(verifier),
        other => {
            return Err(format!(
                "{}: unknown algorithm {other} (https, or empty for none)",
                settings.name_of(key)
            ))
        }
    };
    let config = if tls::has_key_store(settings) {
        let (chain, key) = tls::key_store(settings, &mut files)?;
        builder.with_client_auth_cert(chain, key).map_err(|e| format!("key store: {e}"))?
    } else {
        builder.with_no_client_auth()
    };
    Ok(TlsClient { connector: TlsConnector::from(Arc::new(config)) })
}

/// Kafka's empty `ssl.endpoint.identification.algorithm`: the server's
/// chain is checked against the trust store, its name is not.
#[derive(Debug)]
struct AnyServerName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyServerName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The name is checked after the chain: a name error means the chain passed.
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_login_comes_from_the_listeners_login_module() {
        let jaas = r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="s3cret";"#;
        let settings = ListenerSettings::from_pairs(
            "CONTROLLER",
            &[
                ("sasl.mechanism.controller.protocol", "SCRAM-SHA-512"),
                ("listener.name.controller.scram-sha-512.sasl.jaas.config", jaas),
            ],
        );
        let login = sasl_login(&settings, "sasl.mechanism.controller.protocol").unwrap();
        assert_eq!((login.mechanism, login.username.as_str()), (Mechanism::ScramSha512, "broker"));
        assert_eq!(login.password, "s3cret");
        assert!(!format!("{login:?}").contains("s3cret"));
    }

    #[test]
    fn a_link_without_a_usable_mechanism_or_credentials_is_refused() {
        let none = ListenerSettings::from_pairs("CONTROLLER", &[]);
        assert!(sasl_login(&none, "sasl.mechanism.controller.protocol").unwrap_err().contains("GSSAPI"));
        let plain = ListenerSettings::from_pairs(
            "CONTROLLER",
            &[
                ("sasl.mechanism.controller.protocol", "PLAIN"),
                (
                    "listener.name.controller.plain.sasl.jaas.config",
                    r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_broker="x";"#,
                ),
            ],
        );
        assert!(sasl_login(&plain, "sasl.mechanism.controller.protocol").unwrap_err().contains("username"));
        let no_module =
            ListenerSettings::from_pairs("CONTROLLER", &[("sasl.mechanism.controller.protocol", "PLAIN")]);
        let refused = sasl_login(&no_module, "sasl.mechanism.controller.protocol").unwrap_err();
        assert!(refused.contains("listener.name.controller.plain.sasl.jaas.config"), "{refused}");
    }

    fn config(pairs: &[(&str, &str)]) -> BrokerConfig {
        let text: String = pairs.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        BrokerConfig::from_properties(&text, &[]).unwrap()
    }

    #[test]
    fn links_follow_their_listeners_protocol_and_mechanism() {
        let jaas =
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="b" password="p";"#;
        let base = [
            ("process.roles", "broker,controller"),
            ("node.id", "1"),
            ("controller.quorum.voters", "1@127.0.0.1:9093"),
            ("listeners", "INTERNAL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"),
            ("controller.listener.names", "CONTROLLER"),
            ("listener.security.protocol.map", "INTERNAL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"),
            ("inter.broker.listener.name", "INTERNAL"),
            ("listener.name.internal.plain.sasl.jaas.config", jaas),
        ];
        let plain = |connector: Connector| format!("{connector:?}").contains("security: None");
        assert!(plain(controller_connector(&config(&base)).unwrap()));
        // The inter-broker link authenticates; GSSAPI (Kafka's default) is refused by name.
        let refused = inter_broker_connector(&config(&base)).unwrap_err();
        assert!(refused.contains("inter-broker link through listener INTERNAL"), "{refused}");
        assert!(refused.contains("GSSAPI"), "{refused}");
        let with_mechanism = [&base[..], &[("sasl.mechanism.inter.broker.protocol", "PLAIN")]].concat();
        let secured = inter_broker_connector(&config(&with_mechanism)).unwrap();
        assert!(format!("{secured:?}").contains("username: \"b\""), "{secured:?}");
    }

    #[test]
    fn tls_links_need_a_trust_store() {
        let none = ListenerSettings::from_pairs("CONTROLLER", &[]);
        assert!(tls_client(&none).err().unwrap().contains("trust store"));
    }
}
