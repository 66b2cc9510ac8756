//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's
//! `ScramSaslServer`: client-first, server-first, client-final,
//! server-final, no channel binding.
//!
//! Credentials come from a [`ScramCredentials`] store: the salted keys
//! Kafka keeps per user and mechanism, never the password. The broker's
//! store is [`ImageScramCredentials`], the credentials of the published
//! metadata image (AlterUserScramCredentials, KIP-554);
//! [`InMemoryScramCredentials`] serves tests.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

use super::{Failure, Mechanism, MechanismServer, Step};

/// Kafka's lower bound on iterations for both SCRAM mechanisms.
pub const MIN_ITERATIONS: u32 = 4096;
/// Iterations of credentials derived here.
pub const DEFAULT_ITERATIONS: u32 = 4096;

/// The SCRAM hash functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    /// The SCRAM variant of a SASL mechanism, if it is one.
    pub fn of(mechanism: Mechanism) -> Option<Self> {
        match mechanism {
            Mechanism::ScramSha256 => Some(Self::Sha256),
            Mechanism::ScramSha512 => Some(Self::Sha512),
            _ => None,
        }
    }

    /// Kafka's `ScramMechanism` id, as the metadata records and the admin
    /// APIs carry it.
    pub fn id(self) -> i8 {
        match self {
            Self::Sha256 => 1,
            Self::Sha512 => 2,
        }
    }

    /// The mechanism of a Kafka `ScramMechanism` id.
    pub fn from_id(id: i8) -> Option<Self> {
        match id {
            1 => Some(Self::Sha256),
            2 => Some(Self::Sha512),
            _ => None,
        }
    }

    pub fn mechanism(self) -> Mechanism {
        match self {
            Self::Sha256 => Mechanism::ScramSha256,
            Self::Sha512 => Mechanism::ScramSha512,
        }
    }

    pub(crate) fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Self::Sha256 => Sha256::digest(data).to_vec(),
            Self::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    pub(crate) fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Self::Sha256 => {
                let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
            Self::Sha512 => {
                let mut mac = Hmac::<Sha512>::new_from_slice(key).expect("HMAC takes keys of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
        }
    }

    /// RFC 5802's `Hi`: PBKDF2 with this HMAC.
    pub fn salted_password(self, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Self::Sha256 => {
                pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password.as_bytes(), salt, iterations).to_vec()
            }
            Self::Sha512 => {
                pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password.as_bytes(), salt, iterations).to_vec()
            }
        }
    }
}

/// What the server keeps for one user and mechanism (Kafka's `ScramCredential`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

impl ScramCredential {
    /// Derives the credential of `password` with `salt`.
    pub fn derive(mechanism: ScramMechanism, password: &str, salt: &[u8], iterations: u32) -> Self {
        let salted = mechanism.salted_password(password, salt, iterations);
        Self::from_salted_password(mechanism, &salted, salt, iterations)
    }

    /// The credential of a salted password, as AlterUserScramCredentials
    /// sends it: the server keeps only the keys derived from it.
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salted: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Self {
        let client_key = mechanism.hmac(salted, b"Client Key");
        Self {
            salt: salt.to_vec(),
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted, b"Server Key"),
            iterations,
        }
    }
}

impl ScramCredential {
    /// Whether `password` is the one this credential was made from: its
    /// stored key, derived again (for logins that send the password, such
    /// as the console's HTTP Basic).
    pub fn matches_password(&self, mechanism: ScramMechanism, password: &str) -> bool {
        let derived = Self::derive(mechanism, password, &self.salt, self.iterations);
        let diff = derived.stored_key.iter().zip(&self.stored_key).fold(0u8, |d, (a, b)| d | (a ^ b));
        derived.stored_key.len() == self.stored_key.len() && diff == 0
    }
}

/// Where the SCRAM server finds a user's credential.
pub trait ScramCredentials: Send + Sync {
    fn credential(&self, mechanism: ScramMechanism, user: &str) -> Option<ScramCredential>;
}

/// Credentials held in memory: the interim source (and the tests').
#[derive(Debug, Default)]
pub struct InMemoryScramCredentials {
    credentials: BTreeMap<(ScramMechanism, String), ScramCredential>,
}

impl InMemoryScramCredentials {
    /// Derives and keeps the credential of `user` with a random salt.
    pub fn add_password(&mut self, mechanism: ScramMechanism, user: &str, password: &str) {
        let salt = random_bytes::<24>().to_vec();
        let credential = ScramCredential::derive(mechanism, password, &salt, DEFAULT_ITERATIONS);
        self.credentials.insert((mechanism, user.to_owned()), credential);
    }
}

impl ScramCredentials for InMemoryScramCredentials {
    fn credential(&self, mechanism: ScramMechanism, user: &str) -> Option<ScramCredential> {
        self.credentials.get(&(mechanism, user.to_owned())).cloned()
    }
}

/// The credentials of the metadata image the loader last published. The
/// store exists before the metadata log is opened (listeners are secured
/// first) and serves nothing until [`Self::bind`].
#[derive(Default)]
pub struct ImageScramCredentials {
    loader: std::sync::OnceLock<std::sync::Arc<strom_metadata::MetadataLoader>>,
}

impl ImageScramCredentials {
    /// Serves the images `loader` publishes from now on.
    pub fn bind(&self, loader: std::sync::Arc<strom_metadata::MetadataLoader>) {
        let _ = self.loader.set(loader);
    }
}

impl ScramCredentials for ImageScramCredentials {
    fn credential(&self, mechanism: ScramMechanism, user: &str) -> Option<ScramCredential> {
        let image = self.loader.get()?.image();
        let c = image.scram_credential(user, mechanism.id())?;
        Some(ScramCredential {
            salt: c.salt.to_vec(),
            stored_key: c.stored_key.to_vec(),
            server_key: c.server_key.to_vec(),
            iterations: u32::try_from(c.iterations).ok()?,
        })
    }
}

/// A fresh random salt, as Kafka's tools make one per credential.
pub fn random_salt() -> Vec<u8> {
    random_bytes::<24>().to_vec()
}

pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; N];
    ring::rand::SystemRandom::new().fill(&mut bytes).expect("the system random source works");
    bytes
}

/// One SCRAM exchange.
pub struct ScramServer {
    mechanism: ScramMechanism,
    credentials: std::sync::Arc<dyn ScramCredentials>,
    state: State,
}

enum State {
    ClientFirst,
    ClientFinal { user: String, credential: ScramCredential, nonce: String, auth_prefix: String },
    Done,
}

/// The parts of a client-first message.
#[derive(Debug, PartialEq)]
pub struct ClientFirst {
    pub gs2_header: String,
    pub authorization_id: Option<String>,
    pub user: String,
    pub nonce: String,
    /// `client-first-message-bare`: what the signatures cover.
    pub bare: String,
}

/// Parses `n,[a=authzid],n=user,r=nonce[,ext...]`.
pub fn parse_client_first(text: &str) -> Result<ClientFirst, String> {
    let (flag, rest) = text.split_once(',').ok_or("missing GS2 header")?;
    match flag {
        "n" | "y" => {}
        _ if flag.starts_with("p=") => return Err("channel binding is not supported".into()),
        _ => return Err(format!("invalid GS2 channel binding flag {flag:?}")),
    }
    let (authzid, bare) = rest.split_once(',').ok_or("missing GS2 header")?;
    let authorization_id = match authzid {
        "" => None,
        _ => Some(decode_saslname(authzid.strip_prefix("a=").ok_or("invalid authorization id")?)?),
    };
    let mut fields = bare.split(',');
    let user = decode_saslname(fields.next().and_then(|f| f.strip_prefix("n=")).ok_or("missing user name")?)?;
    let nonce = fields.next().and_then(|f| f.strip_prefix("r=")).ok_or("missing nonce")?;
    if nonce.is_empty() || !nonce.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',') {
        return Err("invalid nonce".into());
    }
    for extension in fields {
        let (key, _) = extension.split_once('=').ok_or("invalid extension")?;
        if key == "tokenauth" {
            return Err("delegation token authentication is not supported".into());
        }
    }
    let gs2_header = format!("{flag},{authzid},");
    Ok(ClientFirst { gs2_header, authorization_id, user, nonce: nonce.to_owned(), bare: bare.to_owned() })
}

/// RFC 5802's `saslname`: `=2C` for `,`, `=3D` for `=`, nothing else escaped.
fn decode_saslname(name: &str) -> Result<String, String> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err("invalid escape in user name".into()),
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    if out.is_empty() {
        return Err("empty user name".into());
    }
    Ok(out)
}

/// The parts of a client-final message.
#[derive(Debug, PartialEq)]
pub struct ClientFinal {
    pub channel_binding: Vec<u8>,
    pub nonce: String,
    pub proof: Vec<u8>,
    /// `client-final-message-without-proof`.
    pub without_proof: String,
}

/// Parses `c=binding,r=nonce[,ext...],p=proof`.
pub fn parse_client_final(text: &str) -> Result<ClientFinal, String> {
    let (without_proof, proof) = text.rsplit_once(",p=").ok_or("missing proof")?;
    let mut fields = without_proof.split(',');
    let binding = fields.next().and_then(|f| f.strip_prefix("c=")).ok_or("missing channel binding")?;
    let nonce = fields.next().and_then(|f| f.strip_prefix("r=")).ok_or("missing nonce")?;
    Ok(ClientFinal {
        channel_binding: BASE64.decode(binding).map_err(|_| "invalid channel binding")?,
        nonce: nonce.to_owned(),
        proof: BASE64.decode(proof).map_err(|_| "invalid proof")?,
        without_proof: without_proof.to_owned(),
    })
}

impl ScramServer {
    pub fn new(mechanism: ScramMechanism, credentials: std::sync::Arc<dyn ScramCredentials>) -> Self {
        Self { mechanism, credentials, state: State::ClientFirst }
    }

    /// Bad credentials: the client learns only the mechanism, as from Kafka.
    fn invalid_credentials(&self, reason: &str) -> Failure {
        Failure::invalid_credentials(self.mechanism.mechanism(), reason)
    }

    fn malformed(&self, reason: String) -> Failure {
        Failure::invalid_credentials(self.mechanism.mechanism(), format!("invalid SCRAM message: {reason}"))
    }

    fn client_first(&mut self, text: &str) -> Result<Step, Failure> {
        let first = parse_client_first(text).map_err(|e| self.malformed(e))?;
        if first.authorization_id.as_ref().is_some_and(|id| *id != first.user) {
            let message =
                "Authentication failed: Client requested an authorization id that is different from username";
            return Err(Failure::new(self.mechanism.mechanism(), message.into()));
        }
        let credential = self
            .credentials
            .credential(self.mechanism, &first.user)
            .ok_or_else(|| self.invalid_credentials("unknown user"))?;
        if credential.iterations < MIN_ITERATIONS {
            return Err(self.invalid_credentials("the credential has too few iterations"));
        }
        let nonce = format!("{}{}", first.nonce, BASE64.encode(random_bytes::<24>()));
        let server_first =
            format!("r={nonce},s={},i={}", BASE64.encode(&credential.salt), credential.iterations);
        let auth_prefix = format!("{},{server_first}", first.bare);
        self.state = State::ClientFinal { user: first.user, credential, nonce, auth_prefix };
        Ok(Step::Challenge(server_first.into_bytes()))
    }

    fn client_final(&mut self, text: &str) -> Result<Step, Failure> {
        let State::ClientFinal { user, credential, nonce, auth_prefix } =
            std::mem::replace(&mut self.state, State::Done)
        else {
            return Err(self.malformed("no exchange in progress".into()));
        };
        let last = parse_client_final(text).map_err(|e| self.malformed(e))?;
        // Kafka accepts a nonce that ends with the server's: librdkafka
        // before 2.1 sends the client's part twice.
        if !last.nonce.ends_with(&nonce) {
            return Err(self.malformed("Invalid client nonce in the final client message.".into()));
        }
        let auth_message = format!("{auth_prefix},{}", last.without_proof);
        let client_signature = self.mechanism.hmac(&credential.stored_key, auth_message.as_bytes());
        if last.proof.len() != client_signature.len() {
            return Err(self.invalid_credentials("a proof of the wrong length"));
        }
        let client_key: Vec<u8> = last.proof.iter().zip(&client_signature).map(|(p, s)| p ^ s).collect();
        if !super::plain::constant_time_eq(&self.mechanism.hash(&client_key), &credential.stored_key) {
            return Err(self.invalid_credentials("Invalid client credentials"));
        }
        let server_signature = self.mechanism.hmac(&credential.server_key, auth_message.as_bytes());
        let server_final = format!("v={}", BASE64.encode(server_signature));
        Ok(Step::Done { response: server_final.into_bytes(), user, lifetime_ms: None })
    }
}

impl MechanismServer for ScramServer {
    fn step(&mut self, token: &[u8]) -> Result<Step, Failure> {
        let text = std::str::from_utf8(token).map_err(|_| self.malformed("not UTF-8".into()))?;
        match self.state {
            State::ClientFirst => self.client_first(text),
            State::ClientFinal { .. } => self.client_final(text),
            State::Done => Err(self.malformed("unexpected message after the exchange ended".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// The client side of the exchange, for the tests.
    fn client_final(
        mechanism: ScramMechanism,
        password: &str,
        client_first_bare: &str,
        server_first: &str,
    ) -> String {
        client_final_with_nonce_prefix(mechanism, password, client_first_bare, server_first, "")
    }

    fn client_final_with_nonce_prefix(
        mechanism: ScramMechanism,
        password: &str,
        client_first_bare: &str,
        server_first: &str,
        nonce_prefix: &str,
    ) -> String {
        let fields: BTreeMap<&str, &str> =
            server_first.split(',').filter_map(|f| f.split_once('=')).collect();
        let salt = BASE64.decode(fields["s"]).unwrap();
        let iterations: u32 = fields["i"].parse().unwrap();
        let salted = mechanism.salted_password(password, &salt, iterations);
        let client_key = mechanism.hmac(&salted, b"Client Key");
        let stored_key = mechanism.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce_prefix}{}", fields["r"]);
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let signature = mechanism.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        format!("{without_proof},p={}", BASE64.encode(proof))
    }

    fn server(mechanism: ScramMechanism) -> ScramServer {
        let mut store = InMemoryScramCredentials::default();
        store.add_password(mechanism, "alice", "pencil");
        ScramServer::new(mechanism, Arc::new(store))
    }

    fn exchange(mechanism: ScramMechanism, user: &str, password: &str) -> Result<Step, Failure> {
        let mut server = server(mechanism);
        let bare = format!("n={user},r=fyko+d2lbbFgONRv9qkxdawL");
        let Step::Challenge(server_first) = server.step(format!("n,,{bare}").as_bytes())? else {
            panic!("no challenge")
        };
        let server_first = String::from_utf8(server_first).unwrap();
        assert!(server_first.starts_with("r=fyko+d2lbbFgONRv9qkxdawL"));
        server.step(client_final(mechanism, password, &bare, &server_first).as_bytes())
    }

    #[test]
    fn both_mechanisms_authenticate_the_right_password_only() {
        for mechanism in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
            let Ok(Step::Done { user, response, .. }) = exchange(mechanism, "alice", "pencil") else {
                panic!("refused")
            };
            assert_eq!(user, "alice");
            assert!(response.starts_with(b"v="));
            let wrong = exchange(mechanism, "alice", "pen").err().unwrap();
            assert!(!wrong.told, "{}", wrong.message);
            assert!(wrong.message.contains("Invalid client credentials"), "{}", wrong.message);
            assert!(exchange(mechanism, "bob", "pencil").is_err());
        }
    }

    #[test]
    fn a_client_nonce_sent_twice_is_accepted_as_kafka_does() {
        // librdkafka before 2.1 echoes its own nonce in front of the combined one.
        let mut server = server(ScramMechanism::Sha512);
        let bare = "n=alice,r=abc";
        let Ok(Step::Challenge(first)) = server.step(format!("n,,{bare}").as_bytes()) else { panic!() };
        let first = String::from_utf8(first).unwrap();
        let last = client_final_with_nonce_prefix(ScramMechanism::Sha512, "pencil", bare, &first, "abc");
        assert!(matches!(server.step(last.as_bytes()), Ok(Step::Done { .. })));
    }

    #[test]
    fn matches_rfc_7677_test_vector() {
        // RFC 7677 section 3: user "user", password "pencil".
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential = ScramCredential::derive(ScramMechanism::Sha256, "pencil", &salt, 4096);
        let auth = "n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let server_signature = ScramMechanism::Sha256.hmac(&credential.server_key, auth.as_bytes());
        assert_eq!(BASE64.encode(server_signature), "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
    }

    #[test]
    fn hostile_client_first_messages_are_refused() {
        let bad = [
            "",
            ",",
            "n",
            "n,",
            "n,,",
            "x,,n=a,r=b",
            "p=tls-server-end-point,,n=a,r=b",
            "n,,n=,r=b",
            "n,,n=a",
            "n,,n=a,r=",
            "n,,n=a=,r=b",
            "n,,n=a=2,r=b",
            "n,,r=b,n=a",
            "n,b,n=a,r=b",
            "n,,n=a,r=b,tokenauth=true",
            "n,,n=a,r=b\u{7f}",
        ];
        for text in bad {
            assert!(parse_client_first(text).is_err(), "{text:?} accepted");
        }
        let parsed = parse_client_first("n,a=x=2Cy,n=x=2Cy,r=abc,ext=1").unwrap();
        assert_eq!(parsed.user, "x,y");
        assert_eq!(parsed.authorization_id.as_deref(), Some("x,y"));
        assert_eq!(parsed.bare, "n=x=2Cy,r=abc,ext=1");
    }

    #[test]
    fn hostile_client_final_messages_are_refused() {
        for text in ["", "c=biws", "c=biws,r=x", "r=x,c=biws,p=AA==", "c=!!,r=x,p=AA==", "c=biws,r=x,p=!!"] {
            assert!(parse_client_final(text).is_err(), "{text:?} accepted");
        }
        let mut server = server(ScramMechanism::Sha256);
        let Ok(Step::Challenge(first)) = server.step(b"n,,n=alice,r=abc") else { panic!() };
        let nonce = String::from_utf8(first).unwrap().split(',').next().unwrap()[2..].to_owned();
        // A proof of the wrong length, a wrong nonce, a wrong binding: all refused, none panics.
        for text in [
            format!("c=biws,r={nonce},p=AAAA"),
            "c=biws,r=other,p=AAAA".to_owned(),
            format!("c=eSws,r={nonce},p=AAAA"),
        ] {
            let mut fresh = server_with_state(&nonce);
            assert!(fresh.step(text.as_bytes()).is_err(), "{text}");
        }
        assert!(server.step(b"\xff\xfe").is_err());
    }

    fn server_with_state(nonce: &str) -> ScramServer {
        let mut s = server(ScramMechanism::Sha256);
        let credential = ScramCredential::derive(ScramMechanism::Sha256, "pencil", b"salt", 4096);
        s.state = State::ClientFinal {
            user: "alice".into(),
            credential,
            nonce: nonce.into(),
            auth_prefix: String::new(),
        };
        s
    }
}
