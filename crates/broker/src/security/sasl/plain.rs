//! SASL/PLAIN (RFC 4616) as Kafka's `PlainSaslServer`: one message
//! `authzid NUL username NUL password`, checked against the
//! `user_<name>="<password>"` options of the listener's PlainLoginModule.

use std::collections::BTreeMap;

use super::{Failure, Mechanism, MechanismServer, Step};

pub struct PlainServer {
    users: std::sync::Arc<BTreeMap<String, String>>,
}

impl PlainServer {
    pub fn new(users: std::sync::Arc<BTreeMap<String, String>>) -> Self {
        Self { users }
    }
}

impl MechanismServer for PlainServer {
    fn step(&mut self, token: &[u8]) -> Result<Step, Failure> {
        let failed =
            |message: &str| Failure::new(Mechanism::Plain, format!("Authentication failed: {message}"));
        let text = std::str::from_utf8(token).map_err(|_| failed("the response is not UTF-8"))?;
        let parts: Vec<&str> = text.split('\0').collect();
        let [authorization_id, username, password] = parts[..] else {
            let message = format!("Invalid SASL/PLAIN response: expected 3 tokens, got {}", parts.len());
            return Err(Failure::new(Mechanism::Plain, message));
        };
        if username.is_empty() {
            return Err(failed("username not specified"));
        }
        if password.is_empty() {
            return Err(failed("password not specified"));
        }
        let known = self
            .users
            .get(username)
            .is_some_and(|expected| constant_time_eq(expected.as_bytes(), password.as_bytes()));
        if !known {
            return Err(failed("Invalid username or password"));
        }
        if !authorization_id.is_empty() && authorization_id != username {
            return Err(failed("Client requested an authorization id that is different from username"));
        }
        Ok(Step::Done { response: Vec::new(), user: username.to_owned(), lifetime_ms: None })
    }
}

/// Compares secrets in time that depends on their lengths only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> PlainServer {
        PlainServer::new(std::sync::Arc::new(BTreeMap::from([("alice".to_owned(), "secret".to_owned())])))
    }

    #[test]
    fn accepts_known_users_only() {
        assert!(matches!(server().step(b"\0alice\0secret"), Ok(Step::Done { user, .. }) if user == "alice"));
        assert!(matches!(server().step(b"alice\0alice\0secret"), Ok(Step::Done { .. })));
        let cases: &[(&[u8], &str)] = &[
            (b"\0alice\0wrong", "Invalid username or password"),
            (b"\0bob\0secret", "Invalid username or password"),
            (b"\0\0secret", "username not specified"),
            (b"\0alice\0", "password not specified"),
            (b"bob\0alice\0secret", "authorization id"),
            (b"alice secret", "expected 3 tokens, got 1"),
            (b"\0a\0b\0c", "expected 3 tokens, got 4"),
            (b"\xff\0\xfe\0x", "not UTF-8"),
        ];
        for (token, message) in cases {
            let failure = server().step(token).err().unwrap();
            assert!(failure.message.contains(message), "{:?}: {}", token, failure.message);
        }
    }
}
