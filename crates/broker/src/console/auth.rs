//! Who may use the console, and proof that a form was posted by the
//! console's own page.
//!
//! `console.auth=none` is allowed only on a loopback listener: anyone who
//! reaches the port is trusted, as with the Kafka listener today. Such a
//! console answers only requests naming a loopback host: a web page whose
//! own name an attacker rebinds to 127.0.0.1 (DNS rebinding) would otherwise
//! be same-origin with the console and could read it and post its forms. With
//! `console.auth=basic` every request carries HTTP Basic credentials that a
//! [`CredentialStore`] checks: the configured list. With
//! `console.auth=sasl` the store is the broker's own users ([`SaslUsers`]):
//! the PLAIN users of a SASL listener and the SCRAM credentials of the
//! metadata log, so one password serves Kafka clients and the console.
//!
//! Actions are POSTs carrying a CSRF token (double submit): the token lives in
//! a `SameSite=Strict` cookie and in a hidden field of every form, and must
//! match. Another site can make a browser send the cookie with neither
//! strictness nor the ability to read it into the form.

use std::sync::{Arc, OnceLock};

use super::http::{Request, Response};
use crate::security::sasl::SaslConfig;
use crate::security::ListenerSecurity;

/// The cookie holding the CSRF token.
pub const CSRF_COOKIE: &str = "strom_console_csrf";
/// The form field echoing it.
pub const CSRF_FIELD: &str = "csrf";

/// Checks a user name and password.
pub trait CredentialStore: Send + Sync + std::fmt::Debug {
    fn verify(&self, user: &str, password: &str) -> bool;
}

/// `console.auth.basic.users=user:password,...`.
#[derive(Clone, PartialEq, Eq)]
pub struct ConfiguredUsers(pub Vec<(String, String)>);

/// Names the users, never their passwords: configs end up in logs.
impl std::fmt::Debug for ConfiguredUsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|(user, _)| user)).finish()
    }
}

impl CredentialStore for ConfiguredUsers {
    fn verify(&self, user: &str, password: &str) -> bool {
        // Every entry is compared, so timing does not tell which users exist.
        self.0.iter().fold(false, |found, (u, p)| {
            found
                | (constant_time_eq(u.as_bytes(), user.as_bytes())
                    & constant_time_eq(p.as_bytes(), password.as_bytes()))
        })
    }
}

/// The users of a SASL listener, bound once the broker's listeners are
/// secured: its PLAIN users and the SCRAM credentials (for the mechanisms
/// it serves) of the metadata image.
pub struct SaslUsers {
    /// `console.auth.sasl.listener`: the listener whose users log in (the
    /// first SASL listener when not set).
    pub listener: Option<String>,
    bound: OnceLock<Arc<SaslConfig>>,
}

impl std::fmt::Debug for SaslUsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslUsers").field("listener", &self.listener).finish_non_exhaustive()
    }
}

impl SaslUsers {
    pub fn new(listener: Option<String>) -> Self {
        Self { listener, bound: OnceLock::new() }
    }

    /// Binds to the configured listener's SASL settings, or says why not.
    pub fn bind(&self, listeners: &[Arc<ListenerSecurity>]) -> Result<(), String> {
        let chosen = listeners.iter().filter(|l| l.sasl.is_some()).find(|l| match &self.listener {
            Some(name) => l.name.eq_ignore_ascii_case(name),
            None => true,
        });
        let Some(sasl) = chosen.and_then(|l| l.sasl.clone()) else {
            return Err(match &self.listener {
                Some(name) => format!("console.auth=sasl: listener {name} is not a SASL listener"),
                None => "console.auth=sasl needs a SASL_PLAINTEXT or SASL_SSL listener".into(),
            });
        };
        let _ = self.bound.set(sasl);
        Ok(())
    }
}

impl CredentialStore for SaslUsers {
    fn verify(&self, user: &str, password: &str) -> bool {
        let Some(sasl) = self.bound.get() else { return false };
        if let Some(users) = sasl.plain_users() {
            if let Some(expected) = users.get(user) {
                return constant_time_eq(expected.as_bytes(), password.as_bytes());
            }
        }
        let (mechanisms, store) = sasl.scram();
        mechanisms
            .into_iter()
            .any(|m| store.credential(m, user).is_some_and(|c| c.matches_password(m, password)))
    }
}

/// The console's authentication.
#[derive(Debug, Clone)]
pub enum Auth {
    None,
    Basic(Arc<dyn CredentialStore>),
    /// HTTP Basic checked against a SASL listener's users.
    Sasl(Arc<SaslUsers>),
}

impl Auth {
    /// The user a request authenticates as (`ANONYMOUS` without auth), or
    /// the 401 that asks the browser for credentials.
    pub fn authenticate(&self, request: &Request) -> Result<String, Response> {
        let store: &dyn CredentialStore = match self {
            Auth::Basic(store) => store.as_ref(),
            Auth::Sasl(users) => users.as_ref(),
            Auth::None => return Self::local_only(request),
        };
        let challenge = || {
            Response::text(401, "authentication required")
                .with_header("WWW-Authenticate", "Basic realm=\"strom console\", charset=\"UTF-8\"".into())
        };
        let credentials = request
            .header("authorization")
            .and_then(|h| h.strip_prefix("Basic "))
            .and_then(|b64| decode_base64(b64.trim()))
            .and_then(|raw| String::from_utf8(raw).ok())
            .ok_or_else(challenge)?;
        let (user, password) = credentials.split_once(':').ok_or_else(challenge)?;
        if store.verify(user, password) {
            Ok(user.to_owned())
        } else {
            Err(challenge())
        }
    }

    fn local_only(request: &Request) -> Result<String, Response> {
        if request.header("host").is_none_or(is_loopback_host) {
            return Ok("ANONYMOUS".into());
        }
        let reason = "without console.auth this console answers only to localhost or a loopback address";
        Err(Response::text(403, reason))
    }
}

/// Whether a `Host` header names this machine: `localhost` or a loopback
/// address, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.rsplit_once(':') {
        Some((name, port)) if !port.contains(']') => name,
        _ => host,
    };
    let name = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')).unwrap_or(name);
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The CSRF token of this browser: the cookie's, or a fresh one to set.
pub fn csrf_token(request: &Request) -> (String, bool) {
    match request.cookie(CSRF_COOKIE).filter(|t| is_token(t)) {
        Some(token) => (token.to_owned(), false),
        None => (uuid::Uuid::new_v4().simple().to_string(), true),
    }
}

pub fn csrf_cookie(token: &str) -> String {
    format!("{CSRF_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict")
}

fn is_token(text: &str) -> bool {
    text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether a POST proves it came from a console page: the form echoes the
/// cookie's token, and a browser that says where the request came from says
/// it came from here.
pub fn csrf_ok(request: &Request, form_token: &str) -> bool {
    let Some(cookie) = request.cookie(CSRF_COOKIE).filter(|t| is_token(t)) else { return false };
    if request.header("sec-fetch-site").is_some_and(|site| site == "cross-site" || site == "same-site") {
        return false;
    }
    if let (Some(origin), Some(host)) = (request.header("origin"), request.header("host")) {
        let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
        if origin_host != host {
            return false;
        }
    }
    constant_time_eq(cookie.as_bytes(), form_token.as_bytes())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// Standard base64 with padding, as Basic credentials use it.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let bytes = text.trim_end_matches('=').as_bytes();
    let whole_quanta = text.as_bytes().chunks(4).all(|quantum| quantum.len() == 4);
    if !whole_quanta || text.len() - bytes.len() > 2 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in bytes {
        acc = (acc << 6) | u32::from(value(*c)?);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::http::parse_head;

    fn request(headers: &str) -> Request {
        parse_head(format!("POST / HTTP/1.1\r\n{headers}").trim_end().as_bytes()).unwrap()
    }

    #[test]
    fn base64_decodes_basic_credentials() {
        assert_eq!(decode_base64("YWxpY2U6c2VjcmV0").unwrap(), b"alice:secret");
        assert_eq!(decode_base64("YQ==").unwrap(), b"a");
        assert_eq!(decode_base64("YWI=").unwrap(), b"ab");
        assert!(decode_base64("YQ=").is_none());
        assert!(decode_base64("Y!==").is_none());
    }

    #[test]
    fn basic_auth_accepts_only_configured_credentials() {
        let auth = Auth::Basic(Arc::new(ConfiguredUsers(vec![("alice".into(), "secret".into())])));
        assert_eq!(auth.authenticate(&request("Authorization: Basic YWxpY2U6c2VjcmV0")).unwrap(), "alice");
        for wrong in [
            "",
            "Authorization: Basic YWxpY2U6d3Jvbmc=",
            "Authorization: Bearer x",
            "Authorization: Basic ???",
        ] {
            let refused = auth.authenticate(&request(wrong)).unwrap_err();
            assert_eq!(refused.status, 401, "{wrong}");
            assert!(refused.headers.iter().any(|(name, _)| *name == "WWW-Authenticate"));
        }
        assert_eq!(Auth::None.authenticate(&request("")).unwrap(), "ANONYMOUS");
        assert_eq!(format!("{auth:?}"), r#"Basic(["alice"])"#, "passwords stay out of logs");
    }

    #[test]
    fn without_auth_only_loopback_host_names_are_answered() {
        for host in
            ["127.0.0.1:8080", "127.0.0.1", "localhost:80", "LOCALHOST", "[::1]:8080", "[::1]", "127.1.2.3:9"]
        {
            assert!(Auth::None.authenticate(&request(&format!("Host: {host}"))).is_ok(), "{host}");
        }
        for host in
            ["rebound.example:8080", "rebound.example", "10.0.0.1:8080", "localhost.example", "[::2]:80"]
        {
            let refused = Auth::None.authenticate(&request(&format!("Host: {host}"))).unwrap_err();
            assert_eq!(refused.status, 403, "{host}");
        }
    }

    #[test]
    fn csrf_needs_the_cookie_echoed_from_the_same_origin() {
        let token = "0123456789abcdef0123456789abcdef";
        let cookie = format!("Cookie: {CSRF_COOKIE}={token}\r\nHost: 127.0.0.1:8080");
        assert!(csrf_ok(&request(&cookie), token));
        assert!(!csrf_ok(&request(&cookie), "0123456789abcdef0123456789abcdee"));
        assert!(!csrf_ok(&request("Host: x"), token), "no cookie");
        assert!(!csrf_ok(&request(&format!("{cookie}\r\nOrigin: http://evil.example")), token));
        assert!(csrf_ok(&request(&format!("{cookie}\r\nOrigin: http://127.0.0.1:8080")), token));
        assert!(!csrf_ok(&request(&format!("{cookie}\r\nSec-Fetch-Site: cross-site")), token));
    }
}
