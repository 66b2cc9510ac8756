//! The client side of SASL, for this node's own links to other nodes:
//! PLAIN and SCRAM-SHA-256/512 (RFC 5802, no channel binding) as sans-IO
//! state machines. A [`SaslClient`] yields the first message, then turns
//! each server message into the next one until the exchange is done;
//! [`crate::security::client`] carries the messages in SaslHandshake and
//! SaslAuthenticate requests.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;

use super::scram::{ScramMechanism, MIN_ITERATIONS};
use super::Mechanism;

/// A node's own SASL login: the mechanism and the credentials of the
/// login module (`username` / `password` in its JAAS config).
#[derive(Clone)]
pub struct SaslLogin {
    pub mechanism: Mechanism,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for SaslLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password stays out of logs.
        f.debug_struct("SaslLogin")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish()
    }
}

/// What the client does after a server message.
#[derive(Debug, PartialEq)]
pub enum Next {
    /// Send this message and wait for the server's answer.
    Send(Vec<u8>),
    /// Authenticated.
    Done,
}

/// One client-side exchange.
pub enum SaslClient {
    /// PLAIN: one message, then the server's empty answer.
    Plain {
        sent: bool,
    },
    Scram(ScramClient),
}

impl SaslClient {
    /// A fresh exchange for `login`; OAUTHBEARER has no client here.
    pub fn new(login: &SaslLogin) -> Result<Self, String> {
        match ScramMechanism::of(login.mechanism) {
            Some(mechanism) => Ok(Self::Scram(ScramClient::new(mechanism, &login.username, &login.password))),
            None if login.mechanism == Mechanism::Plain => Ok(Self::Plain { sent: false }),
            None => Err(format!("{} is not supported on inter-node links", login.mechanism.name())),
        }
    }

    /// The first message to send.
    pub fn first_message(&mut self, login: &SaslLogin) -> Vec<u8> {
        match self {
            Self::Plain { sent } => {
                *sent = true;
                // authzid (empty), NUL, user, NUL, password.
                format!("\0{}\0{}", login.username, login.password).into_bytes()
            }
            Self::Scram(scram) => scram.client_first().into_bytes(),
        }
    }

    /// The answer to a server message.
    pub fn on_server_message(&mut self, message: &[u8]) -> Result<Next, String> {
        match self {
            Self::Plain { sent: true } => Ok(Next::Done),
            Self::Plain { sent: false } => Err("PLAIN: a server message before the client's".into()),
            Self::Scram(scram) => scram.on_server_message(message),
        }
    }
}

enum ScramState {
    Initial,
    /// client-first sent: its bare part is part of what is signed.
    FirstSent,
    /// client-final sent; the server must prove it knows the password too.
    FinalSent {
        server_signature: Vec<u8>,
    },
    Done,
}

/// The client of one SCRAM exchange.
pub struct ScramClient {
    mechanism: ScramMechanism,
    user: String,
    password: String,
    nonce: String,
    state: ScramState,
}

impl ScramClient {
    pub fn new(mechanism: ScramMechanism, user: &str, password: &str) -> Self {
        let nonce = BASE64.encode(super::scram::random_bytes::<24>());
        Self::with_nonce(mechanism, user, password, nonce)
    }

    fn with_nonce(mechanism: ScramMechanism, user: &str, password: &str, nonce: String) -> Self {
        Self { mechanism, user: user.into(), password: password.into(), nonce, state: ScramState::Initial }
    }

    fn first_bare(&self) -> String {
        // RFC 5802 saslname: ',' and '=' are escaped.
        let user = self.user.replace('=', "=3D").replace(',', "=2C");
        format!("n={user},r={}", self.nonce)
    }

    /// `client-first-message`: no channel binding, no authorization id.
    pub fn client_first(&mut self) -> String {
        self.state = ScramState::FirstSent;
        format!("n,,{}", self.first_bare())
    }

    pub fn on_server_message(&mut self, message: &[u8]) -> Result<Next, String> {
        let text = std::str::from_utf8(message).map_err(|_| "the SCRAM server message is not UTF-8")?;
        match std::mem::replace(&mut self.state, ScramState::Done) {
            ScramState::FirstSent => self.server_first(text),
            ScramState::FinalSent { server_signature } => self.server_final(text, &server_signature),
            ScramState::Initial | ScramState::Done => Err("SCRAM: unexpected server message".into()),
        }
    }

    /// `server-first-message` in, `client-final-message` out.
    fn server_first(&mut self, text: &str) -> Result<Next, String> {
        let field = |name: &str| {
            text.split(',').find_map(|f| f.strip_prefix(name)).ok_or(format!("SCRAM: no {name} in {text:?}"))
        };
        let nonce = field("r=")?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err("SCRAM: the server nonce does not extend the client's".into());
        }
        let salt = BASE64.decode(field("s=")?).map_err(|_| "SCRAM: invalid salt")?;
        let iterations: u32 = field("i=")?.parse().map_err(|_| "SCRAM: invalid iteration count")?;
        if iterations < MIN_ITERATIONS {
            return Err(format!("SCRAM: {iterations} iterations is below the minimum {MIN_ITERATIONS}"));
        }
        let mechanism = self.mechanism;
        let salted = mechanism.salted_password(&self.password, &salt, iterations);
        let client_key = mechanism.hmac(&salted, b"Client Key");
        let stored_key = mechanism.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.first_bare());
        let signature = mechanism.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(k, s)| k ^ s).collect();
        let server_key = mechanism.hmac(&salted, b"Server Key");
        let server_signature = mechanism.hmac(&server_key, auth_message.as_bytes());
        self.state = ScramState::FinalSent { server_signature };
        Ok(Next::Send(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes()))
    }

    /// `server-final-message`: the server's signature, or its error.
    fn server_final(&mut self, text: &str, expected: &[u8]) -> Result<Next, String> {
        if let Some(error) = text.strip_prefix("e=") {
            return Err(format!("SCRAM: the server refused: {error}"));
        }
        let signature = text.strip_prefix("v=").ok_or("SCRAM: no server signature")?;
        let signature = BASE64.decode(signature).map_err(|_| "SCRAM: invalid server signature")?;
        if !super::plain::constant_time_eq(&signature, expected) {
            return Err(
                "SCRAM: the server signature does not match: the server does not know the password".into()
            );
        }
        Ok(Next::Done)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::super::plain::PlainServer;
    use super::super::scram::{InMemoryScramCredentials, ScramServer};
    use super::super::{MechanismServer, Step};
    use super::*;

    fn login(mechanism: Mechanism, password: &str) -> SaslLogin {
        SaslLogin { mechanism, username: "broker".into(), password: password.into() }
    }

    /// Runs `client` against `server` to the end: the user the server
    /// authenticated, or the first error of either side.
    fn exchange(login: &SaslLogin, server: &mut dyn MechanismServer) -> Result<String, String> {
        let mut client = SaslClient::new(login)?;
        let mut message = client.first_message(login);
        for _ in 0..4 {
            match server.step(&message).map_err(|f| f.message)? {
                Step::Challenge(challenge) => match client.on_server_message(&challenge)? {
                    Next::Send(next) => message = next,
                    Next::Done => return Err("the client finished before the server".into()),
                },
                Step::Done { response, user, .. } => {
                    assert_eq!(client.on_server_message(&response)?, Next::Done);
                    return Ok(user);
                }
            }
        }
        Err("the exchange did not end".into())
    }

    fn scram_server(mechanism: ScramMechanism, password: &str) -> ScramServer {
        let mut credentials = InMemoryScramCredentials::default();
        credentials.add_password(mechanism, "broker", password);
        ScramServer::new(mechanism, Arc::new(credentials))
    }

    #[test]
    fn scram_clients_authenticate_with_the_right_password_only() {
        for mechanism in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
            let right = login(mechanism.mechanism(), "secret");
            assert_eq!(exchange(&right, &mut scram_server(mechanism, "secret")), Ok("broker".into()));
            let wrong = login(mechanism.mechanism(), "guess");
            let refused = exchange(&wrong, &mut scram_server(mechanism, "secret")).unwrap_err();
            assert!(refused.contains("Invalid client credentials"), "{refused}");
        }
    }

    #[test]
    fn plain_clients_send_the_login_modules_credentials() {
        let users = Arc::new(BTreeMap::from([("broker".to_owned(), "secret".to_owned())]));
        let right = login(Mechanism::Plain, "secret");
        assert_eq!(exchange(&right, &mut PlainServer::new(users.clone())), Ok("broker".into()));
        assert!(exchange(&login(Mechanism::Plain, "guess"), &mut PlainServer::new(users)).is_err());
    }

    #[test]
    fn a_scram_server_that_does_not_know_the_password_is_refused() {
        let mut client = ScramClient::with_nonce(ScramMechanism::Sha256, "broker", "secret", "abc".into());
        assert_eq!(client.client_first(), "n,,n=broker,r=abc");
        let salt = BASE64.encode(b"salt");
        let next = client.on_server_message(format!("r=abcdef,s={salt},i=4096").as_bytes()).unwrap();
        let Next::Send(last) = next else { panic!("expected client-final") };
        assert!(String::from_utf8(last).unwrap().starts_with("c=biws,r=abcdef,p="));
        let forged = format!("v={}", BASE64.encode([0u8; 32]));
        assert!(client.on_server_message(forged.as_bytes()).unwrap_err().contains("does not match"));
    }

    #[test]
    fn scram_clients_refuse_bad_server_first_messages() {
        let salt = BASE64.encode(b"salt");
        let bad = [
            format!("r=xyz123,s={salt},i=4096"),
            format!("r=abc,s={salt},i=4096"),
            format!("r=abcdef,s={salt},i=1"),
            "r=abcdef,i=4096".to_owned(),
            format!("r=abcdef,s={salt},i=many"),
        ];
        for message in bad {
            let mut client =
                ScramClient::with_nonce(ScramMechanism::Sha512, "broker", "secret", "abc".into());
            client.client_first();
            assert!(client.on_server_message(message.as_bytes()).is_err(), "{message}");
            // An exchange that failed stays failed.
            assert!(client.on_server_message(b"v=AAAA").is_err());
        }
    }

    #[test]
    fn user_names_are_escaped_as_saslnames() {
        let mut client = ScramClient::with_nonce(ScramMechanism::Sha256, "a=b,c", "p", "n0".into());
        assert_eq!(client.client_first(), "n,,n=a=3Db=2Cc,r=n0");
        assert!(SaslClient::new(&login(Mechanism::OAuthBearer, "x")).is_err());
    }
}
