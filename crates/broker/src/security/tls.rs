//! TLS for `SSL` and `SASL_SSL` listeners, configured with Kafka's keys:
//!
//! - `ssl.keystore.type` `PEM` or `PKCS12` (`JKS`, Kafka's default, is a
//!   Java format: convert it with `keytool -importkeystore`). A PEM key
//!   store is `ssl.keystore.location` (a file holding the key and the
//!   chain) or inline `ssl.keystore.certificate.chain` + `ssl.keystore.key`;
//!   a PKCS12 one is `ssl.keystore.location` with `ssl.keystore.password`
//!   (`ssl.key.password` is tried when that does not open it).
//! - `ssl.truststore.type`, `ssl.truststore.location` /
//!   `ssl.truststore.certificates` / `ssl.truststore.password`: the CAs
//!   client certificates must chain to.
//! - `ssl.client.auth` `none`, `requested` or `required`;
//!   `ssl.principal.mapping.rules` names the client from its certificate.
//! - `ssl.enabled.protocols` (TLSv1.2, TLSv1.3) and `ssl.cipher.suites`
//!   (IANA names, as Java's).
//!
//! The stores' files are checked every `ssl.reload.check.interval.ms`
//! (Strom's own key, 10 s by default); when their content changes, or
//! AlterConfigs set new store keys for the listener on this broker
//! (`listener.name.<l>.ssl.keystore.location` …, as Kafka's dynamic
//! listener configs), the server config is rebuilt and new connections get
//! it, without a restart.
//! A store that no longer loads keeps the previous config and logs why.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use base64::Engine;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use rustls_pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer,
};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::principal::{subject_dn, PrincipalMapper};
use super::settings::ListenerSettings;

/// How long a client has to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the stores' files are checked for changes, by default.
const RELOAD_CHECK_INTERVAL_MS: i64 = 10_000;

/// Whether `key` (without its `listener.name.<l>.` prefix) is a store key
/// AlterConfigs may change.
pub fn is_reconfigurable(key: &str) -> bool {
    strom_metadata::topic_config::LISTENER_STORE_KEYS.contains(&key)
}

pub use strom_metadata::topic_config::is_listener_store_key as is_dynamic_store_key;

/// A listener's TLS acceptor, rebuilt when its stores change.
pub struct ReloadingAcceptor {
    /// The settings of the broker's config file.
    base: ListenerSettings,
    /// The settings the current config was built from (or last tried).
    settings: Mutex<ListenerSettings>,
    current: RwLock<Arc<ServerConfig>>,
    /// The stores' files and the content the current config was built from.
    watched: Mutex<Files>,
    mapper: PrincipalMapper,
    pub reload_interval: Duration,
}

impl ReloadingAcceptor {
    pub fn new(settings: &ListenerSettings) -> Result<Self, String> {
        let (config, watched) = build(settings)?;
        let rules = settings.get("ssl.principal.mapping.rules").unwrap_or("DEFAULT");
        let mapper = PrincipalMapper::parse(rules)
            .map_err(|e| format!("{}: {e}", settings.name_of("ssl.principal.mapping.rules")))?;
        let interval_ms = settings.millis("ssl.reload.check.interval.ms", RELOAD_CHECK_INTERVAL_MS)?.max(10);
        Ok(Self {
            base: settings.clone(),
            settings: Mutex::new(settings.clone()),
            current: RwLock::new(Arc::new(config)),
            watched: Mutex::new(watched),
            mapper,
            reload_interval: Duration::from_millis(interval_ms as u64),
        })
    }

    /// Runs the TLS handshake on an accepted connection, within
    /// [`HANDSHAKE_TIMEOUT`].
    pub async fn accept(&self, stream: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
        let config = self.current.read().unwrap_or_else(|e| e.into_inner()).clone();
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, TlsAcceptor::from(config).accept(stream)).await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out")),
        }
    }

    /// The principal of a TLS client: `User:ANONYMOUS` without a
    /// certificate, else its subject through the mapping rules.
    pub fn principal(&self, stream: &TlsStream<TcpStream>) -> Result<String, String> {
        let Some(leaf) = stream.get_ref().1.peer_certificates().and_then(|chain| chain.first()) else {
            return Ok(super::ANONYMOUS.to_owned());
        };
        let dn = subject_dn(leaf.as_ref())?;
        Ok(format!("User:{}", self.mapper.map(&dn)?))
    }

    /// Rebuilds the config if a store's file changed, or the dynamic store
    /// keys (`dynamic`, this broker's AlterConfigs keys) did; `Ok(true)`
    /// when it did. A change that does not load is not tried again.
    pub fn reload_if_changed(&self, dynamic: &BTreeMap<String, String>) -> Result<bool, String> {
        let mut watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        let wanted = self.base.with_dynamic_stores(dynamic);
        let mut settings = self.settings.lock().unwrap_or_else(|e| e.into_inner());
        let reconfigured = *settings != wanted;
        let changed = watched.iter().any(|(path, seen)| std::fs::read(path).is_ok_and(|now| now != *seen));
        if !changed && !reconfigured {
            return Ok(false);
        }
        *settings = wanted;
        let (config, files) = build(&settings)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
        *watched = files;
        Ok(true)
    }

    /// Whether the listener's stores would load with `dynamic` laid over
    /// its settings: AlterConfigs refuses a change that would not.
    pub fn validate(&self, dynamic: &BTreeMap<String, String>) -> Result<(), String> {
        build(&self.base.with_dynamic_stores(dynamic)).map(drop)
    }

    /// Checks the stores, and this broker's dynamic store keys (read by
    /// `dynamic`), every `reload_interval` until `stop` flips.
    pub async fn watch(
        self: Arc<Self>,
        listener: Arc<str>,
        dynamic: impl Fn() -> BTreeMap<String, String>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(self.reload_interval);
        loop {
            tokio::select! {
                biased;
                _ = crate::shutdown::stopped(&mut stop) => return,
                _ = tick.tick() => {}
            }
            match self.reload_if_changed(&dynamic()) {
                Ok(true) => {
                    tracing::info!(%listener, "TLS key or trust store changed: new connections use the new one")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(%listener, "TLS stores changed but do not load; keeping the previous ones: {e}")
                }
            }
        }
    }
}

/// Files read to build a config, with their content.
pub(super) type Files = Vec<(PathBuf, Vec<u8>)>;

/// The server config and the files it was built from.
fn build(settings: &ListenerSettings) -> Result<(ServerConfig, Files), String> {
    let mut files = Vec::new();
    let (chain, key) = key_store(settings, &mut files)?;
    let roots = trust_store(settings, &mut files)?;
    let provider = Arc::new(provider(settings)?);
    let verifier = client_verifier(settings, roots, provider.clone())?;
    let versions = protocol_versions(settings)?;
    let config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| format!("{}: {e}", settings.name_of("ssl.enabled.protocols")))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| format!("{}: {e}", settings.name_of("ssl.keystore.location")))?;
    Ok((config, files))
}

/// Reads a store's file, remembering it for reloads.
fn read_file(settings: &ListenerSettings, key: &str, files: &mut Files) -> Result<Option<Vec<u8>>, String> {
    let Some(path) = settings.get(key) else { return Ok(None) };
    let bytes =
        std::fs::read(path).map_err(|e| format!("{}: cannot read {path}: {e}", settings.name_of(key)))?;
    files.push((PathBuf::from(path), bytes.clone()));
    Ok(Some(bytes))
}

/// The store formats Strom reads.
#[derive(Debug, Clone, Copy, PartialEq)]
enum StoreType {
    Pem,
    Pkcs12,
}

/// The store type: explicit, else PEM when the file looks like PEM, else
/// PKCS12. Without `bytes`, only checks an explicit type.
fn store_type(settings: &ListenerSettings, prefix: &str, bytes: Option<&[u8]>) -> Result<StoreType, String> {
    let key = format!("{prefix}.type");
    if let Some(explicit) = settings.get(&key) {
        return match explicit.to_ascii_uppercase().as_str() {
            "PEM" => Ok(StoreType::Pem),
            "PKCS12" => Ok(StoreType::Pkcs12),
            "JKS" => Err(format!("{}: JKS is a Java format; convert it to PKCS12 with keytool -importkeystore -deststoretype PKCS12", settings.name_of(&key))),
            other => Err(format!("{}: unknown store type {other}", settings.name_of(&key))),
        };
    }
    let looks_pem = bytes.is_some_and(|b| b.windows(11).any(|w| w == b"-----BEGIN "));
    Ok(if looks_pem { StoreType::Pem } else { StoreType::Pkcs12 })
}

type KeyPair = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// Whether a key store is configured at all (a link's client side may
/// have none: it then shows no certificate).
pub(super) fn has_key_store(settings: &ListenerSettings) -> bool {
    ["ssl.keystore.location", "ssl.keystore.certificate.chain", "ssl.keystore.key"]
        .iter()
        .any(|key| settings.get(key).is_some())
}

/// The key store: inline PEM, else the `ssl.keystore.location` file.
pub(super) fn key_store(settings: &ListenerSettings, files: &mut Files) -> Result<KeyPair, String> {
    // An explicit type Strom cannot read is named before any file is read.
    store_type(settings, "ssl.keystore", None)?;
    let key_password = settings.get("ssl.key.password");
    match (settings.get("ssl.keystore.certificate.chain"), settings.get("ssl.keystore.key")) {
        (Some(chain), Some(key)) => return pem_key_pair(chain.as_bytes(), key.as_bytes(), key_password),
        (None, None) => {}
        _ => return Err("ssl.keystore.certificate.chain and ssl.keystore.key must be given together".into()),
    }
    let Some(bytes) = read_file(settings, "ssl.keystore.location", files)? else {
        return Err(format!(
            "a TLS listener ({}) needs a key store: ssl.keystore.location, or ssl.keystore.certificate.chain and ssl.keystore.key",
            settings.listener()
        ));
    };
    match store_type(settings, "ssl.keystore", Some(&bytes))? {
        StoreType::Pem => pem_key_pair(&bytes, &bytes, key_password),
        StoreType::Pkcs12 => pkcs12_key_pair(&bytes, settings.get("ssl.keystore.password"), key_password),
    }
}

fn pem_key_pair(chain: &[u8], key: &[u8], key_password: Option<&str>) -> Result<KeyPair, String> {
    let blocks = pem_blocks(chain)?;
    let certificates: Vec<_> = blocks
        .iter()
        .filter(|(label, _)| label == "CERTIFICATE")
        .map(|(_, der)| CertificateDer::from(der.clone()))
        .collect();
    if certificates.is_empty() {
        return Err("the key store holds no CERTIFICATE".into());
    }
    let key_block = pem_blocks(key)?.into_iter().find(|(label, _)| label.ends_with("PRIVATE KEY"));
    let (label, der) = key_block.ok_or("the key store holds no PRIVATE KEY")?;
    let key = match label.as_str() {
        "PRIVATE KEY" => PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(der)),
        "RSA PRIVATE KEY" => PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(der)),
        "EC PRIVATE KEY" => PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(der)),
        "ENCRYPTED PRIVATE KEY" => {
            let password = key_password.ok_or("the private key is encrypted: set ssl.key.password")?;
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(decrypt_pkcs8(&der, password)?))
        }
        other => return Err(format!("unsupported key type {other}")),
    };
    Ok((certificates, key))
}

/// Decrypts a PKCS#8 `EncryptedPrivateKeyInfo` (PBES2, as OpenSSL and
/// Kafka's PEM key stores write it) with `ssl.key.password`.
fn decrypt_pkcs8(der: &[u8], password: &str) -> Result<Vec<u8>, String> {
    use pkcs5::der::asn1::OctetStringRef;
    use pkcs5::der::{Decode, Reader, SliceReader};
    let unreadable = |e: pkcs5::der::Error| format!("unreadable encrypted private key: {e}");
    let mut reader = SliceReader::new(der).map_err(unreadable)?;
    let (scheme, data) = reader
        .sequence(|inner| Ok((pkcs5::EncryptionScheme::decode(inner)?, OctetStringRef::decode(inner)?)))
        .map_err(unreadable)?;
    scheme.decrypt(password, data.as_bytes()).map_err(|_| {
        "cannot decrypt the private key: wrong ssl.key.password or unsupported encryption".to_owned()
    })
}

/// The `(label, DER)` blocks of PEM text. Tolerant of the layouts Kafka
/// accepts: lines joined by a properties file's line continuations leave
/// the base64 on one line with spaces, which is fine here.
fn pem_blocks(text: &[u8]) -> Result<Vec<(String, Vec<u8>)>, String> {
    let text = std::str::from_utf8(text).map_err(|_| "PEM text is not UTF-8")?;
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(begin) = rest.find("-----BEGIN ") {
        let after = &rest[begin + 11..];
        let label_end = after.find("-----").ok_or("unterminated PEM BEGIN line")?;
        let label = after[..label_end].to_owned();
        let body = &after[label_end + 5..];
        let end_marker = format!("-----END {label}-----");
        let end = body.find(&end_marker).ok_or_else(|| format!("no END line for PEM {label}"))?;
        let base64: String = body[..end].chars().filter(|c| !c.is_whitespace()).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(base64)
            .map_err(|e| format!("bad base64 in PEM {label}: {e}"))?;
        blocks.push((label, der));
        rest = &body[end + end_marker.len()..];
    }
    Ok(blocks)
}

fn open_pkcs12(bytes: &[u8], passwords: &[Option<&str>]) -> Result<p12_keystore::KeyStore, String> {
    let mut last = String::from("no password");
    for password in passwords.iter().flatten() {
        match p12_keystore::KeyStore::from_pkcs12(bytes, password) {
            Ok(store) => return Ok(store),
            Err(e) => last = e.to_string(),
        }
    }
    // A trust store may have no password at all.
    p12_keystore::KeyStore::from_pkcs12(bytes, "")
        .map_err(|_| format!("cannot open the PKCS12 store: {last}"))
}

fn pkcs12_key_pair(
    bytes: &[u8],
    password: Option<&str>,
    key_password: Option<&str>,
) -> Result<KeyPair, String> {
    let store = open_pkcs12(bytes, &[password, key_password])?;
    let (_, chain) = store.private_key_chain().ok_or("the PKCS12 key store holds no private key")?;
    let certificates = chain.chain().iter().map(|c| CertificateDer::from(c.as_der().to_vec())).collect();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(chain.key().to_vec()));
    Ok((certificates, key))
}

/// The CAs the `ssl.truststore.*` keys of `settings` name, if any.
pub fn trust_roots(settings: &ListenerSettings) -> Result<Option<RootCertStore>, String> {
    trust_store(settings, &mut Vec::new())
}

/// Where Linux distributions keep their CA bundle.
const SYSTEM_CA_BUNDLES: &[&str] =
    &["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"];

/// The system's trusted CAs, for a client with no trust store configured.
pub fn system_roots() -> Result<RootCertStore, String> {
    let bundle = SYSTEM_CA_BUNDLES.iter().find_map(|path| std::fs::read(path).ok());
    let bundle = bundle.ok_or("no trust store configured and no system CA bundle found")?;
    let mut roots = RootCertStore::empty();
    for der in pem_certificates(&bundle)? {
        // A bundle may hold certificates rustls cannot use: skip them.
        let _ = roots.add(CertificateDer::from(der));
    }
    Ok(roots)
}

/// The CAs client certificates must chain to, if any are configured.
pub(super) fn trust_store(
    settings: &ListenerSettings,
    files: &mut Files,
) -> Result<Option<RootCertStore>, String> {
    store_type(settings, "ssl.truststore", None)?;
    let certificates = match settings.get("ssl.truststore.certificates") {
        Some(inline) => pem_certificates(inline.as_bytes())?,
        None => {
            let Some(bytes) = read_file(settings, "ssl.truststore.location", files)? else { return Ok(None) };
            match store_type(settings, "ssl.truststore", Some(&bytes))? {
                StoreType::Pem => pem_certificates(&bytes)?,
                StoreType::Pkcs12 => pkcs12_certificates(&bytes, settings.get("ssl.truststore.password"))?,
            }
        }
    };
    let mut roots = RootCertStore::empty();
    for der in certificates {
        roots.add(CertificateDer::from(der)).map_err(|e| format!("trust store certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err(format!("the trust store of listener {} holds no certificate", settings.listener()));
    }
    Ok(Some(roots))
}

fn pem_certificates(text: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    Ok(pem_blocks(text)?.into_iter().filter(|(l, _)| l == "CERTIFICATE").map(|(_, der)| der).collect())
}

fn pkcs12_certificates(bytes: &[u8], password: Option<&str>) -> Result<Vec<Vec<u8>>, String> {
    let store = open_pkcs12(bytes, &[password])?;
    let mut certificates = Vec::new();
    for (_, entry) in store.entries() {
        match entry {
            p12_keystore::KeyStoreEntry::Certificate(c) => certificates.push(c.as_der().to_vec()),
            p12_keystore::KeyStoreEntry::PrivateKeyChain(chain) => {
                certificates.extend(chain.chain().iter().map(|c| c.as_der().to_vec()))
            }
            p12_keystore::KeyStoreEntry::Secret(_) => {}
        }
    }
    Ok(certificates)
}

fn client_verifier(
    settings: &ListenerSettings,
    roots: Option<RootCertStore>,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, String> {
    let key = "ssl.client.auth";
    let mode = settings.get(key).unwrap_or("none").to_ascii_lowercase();
    if mode == "none" {
        return Ok(WebPkiClientVerifier::no_client_auth());
    }
    if mode != "requested" && mode != "required" {
        return Err(format!("{}: expected none, requested or required, not {mode}", settings.name_of(key)));
    }
    let roots = roots
        .ok_or_else(|| format!("{}={mode} needs a trust store (ssl.truststore.*)", settings.name_of(key)))?;
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
    let builder = if mode == "requested" { builder.allow_unauthenticated() } else { builder };
    builder.build().map_err(|e| format!("{}: {e}", settings.name_of(key)))
}

/// `ssl.enabled.protocols`: of Java's names, rustls speaks TLSv1.2 and
/// TLSv1.3; older ones are skipped with a warning.
pub(super) fn protocol_versions(
    settings: &ListenerSettings,
) -> Result<Vec<&'static SupportedProtocolVersion>, String> {
    let key = "ssl.enabled.protocols";
    let mut names = settings.list(key);
    if names.is_empty() {
        names = vec!["TLSv1.2".into(), "TLSv1.3".into()];
    }
    let mut versions = Vec::new();
    for name in &names {
        match name.as_str() {
            "TLSv1.3" => versions.push(&rustls::version::TLS13),
            "TLSv1.2" => versions.push(&rustls::version::TLS12),
            "TLSv1" | "TLSv1.1" | "SSLv3" => {
                tracing::warn!(protocol = %name, "{key}: protocol not supported, skipped")
            }
            other => return Err(format!("{}: unknown protocol {other}", settings.name_of(key))),
        }
    }
    if versions.is_empty() {
        return Err(format!("{}: none of {names:?} is supported (TLSv1.2, TLSv1.3)", settings.name_of(key)));
    }
    Ok(versions)
}

/// The ring provider, its cipher suites narrowed to `ssl.cipher.suites`.
pub(super) fn provider(settings: &ListenerSettings) -> Result<CryptoProvider, String> {
    let key = "ssl.cipher.suites";
    let mut provider = rustls::crypto::ring::default_provider();
    let wanted = settings.list(key);
    if wanted.is_empty() {
        return Ok(provider);
    }
    let known = |name: &str| provider.cipher_suites.iter().any(|s| iana_name(s) == name);
    for name in wanted.iter().filter(|name| !known(name)) {
        tracing::warn!(suite = %name, "{key}: cipher suite not supported, skipped");
    }
    provider.cipher_suites.retain(|s| wanted.contains(&iana_name(s)));
    if provider.cipher_suites.is_empty() {
        return Err(format!("{}: none of the cipher suites is supported", settings.name_of(key)));
    }
    Ok(provider)
}

/// A suite's IANA name, as Java's `ssl.cipher.suites` spells it (rustls
/// prefixes TLS 1.3 suites with `TLS13_`).
fn iana_name(suite: &rustls::SupportedCipherSuite) -> String {
    let name = format!("{:?}", suite.suite());
    match name.strip_prefix("TLS13_") {
        Some(rest) => format!("TLS_{rest}"),
        None => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_blocks_read_joined_lines() {
        let der = b"\x30\x03\x02\x01\x05";
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        let split =
            format!("-----BEGIN CERTIFICATE-----\n{}\n{}\n-----END CERTIFICATE-----\n", &b64[..4], &b64[4..]);
        let joined =
            format!("-----BEGIN CERTIFICATE----- {} {} -----END CERTIFICATE-----", &b64[..4], &b64[4..]);
        for text in [split, joined] {
            assert_eq!(pem_blocks(text.as_bytes()).unwrap(), vec![("CERTIFICATE".to_owned(), der.to_vec())]);
        }
        assert!(pem_blocks(b"-----BEGIN CERTIFICATE-----\nAAAA\n").is_err());
    }

    #[test]
    fn listeners_without_a_key_store_or_with_jks_are_refused() {
        let none = ListenerSettings::from_pairs("SSL", &[]);
        assert!(build(&none).unwrap_err().contains("needs a key store"));
        let jks = ListenerSettings::from_pairs(
            "SSL",
            &[("ssl.keystore.type", "JKS"), ("ssl.keystore.location", "/nonexistent")],
        );
        assert!(build(&jks).is_err());
    }

    #[test]
    fn protocols_and_suites_are_checked() {
        let only_old = ListenerSettings::from_pairs("SSL", &[("ssl.enabled.protocols", "TLSv1.1")]);
        assert!(protocol_versions(&only_old).is_err());
        let tls13 = ListenerSettings::from_pairs("SSL", &[("ssl.enabled.protocols", "TLSv1.3")]);
        assert_eq!(protocol_versions(&tls13).unwrap().len(), 1);
        let suites = ListenerSettings::from_pairs(
            "SSL",
            &[("ssl.cipher.suites", "TLS_AES_128_GCM_SHA256, TLS_RSA_WITH_NULL_MD5")],
        );
        assert_eq!(provider(&suites).unwrap().cipher_suites.len(), 1);
        let bogus = ListenerSettings::from_pairs("SSL", &[("ssl.cipher.suites", "TLS_BOGUS")]);
        assert!(provider(&bogus).is_err());
    }
}
