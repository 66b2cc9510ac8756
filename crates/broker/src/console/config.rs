//! The console's keys (Strom's own):
//!
//! - `console.listener=http://HOST:PORT`: where the console is served; off
//!   unless set;
//! - `console.auth=none|basic|sasl`: `none` (the default) only on a
//!   loopback address; `basic` checks HTTP Basic credentials against
//!   `console.auth.basic.users`, `sasl` against the broker's own users
//!   (the PLAIN users and SCRAM credentials of a SASL listener);
//! - `console.auth.sasl.listener`: that listener (by default the first
//!   SASL listener);
//! - `console.auth.basic.users=user:password,...`: the users `basic`
//!   accepts (a password cannot hold a comma). Never described by
//!   DescribeConfigs;
//! - `console.metrics.sample.ms`: how often the plots' history is sampled
//!   (10 s by default; the history keeps the last hour, and a faster rate
//!   plots fewer topics and groups within the same memory).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use super::auth::{Auth, ConfiguredUsers, SaslUsers};
use crate::config::ConfigError;

pub const LISTENER: &str = "console.listener";
pub const AUTH: &str = "console.auth";
pub const BASIC_USERS: &str = "console.auth.basic.users";
pub const SASL_LISTENER: &str = "console.auth.sasl.listener";
pub const SAMPLE_MS: &str = "console.metrics.sample.ms";

/// Keys this module reads; the config accepts them without a warning.
pub const KEYS: &[&str] = &[LISTENER, AUTH, BASIC_USERS, SASL_LISTENER, SAMPLE_MS];

const DEFAULT_SAMPLE_MS: u64 = 10_000;

#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    pub listener: Option<SocketAddr>,
    pub auth: Auth,
    pub sample_ms: u64,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self { listener: None, auth: Auth::None, sample_ms: DEFAULT_SAMPLE_MS }
    }
}

fn error(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError { key: key.into(), value: value.into(), reason: reason.into() }
}

impl ConsoleConfig {
    pub fn parse(provided: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let get = |key: &str| provided.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
        let listener =
            get(LISTENER).map(|raw| parse_listener(raw).map_err(|r| error(LISTENER, raw, r))).transpose()?;
        let users =
            get(BASIC_USERS).map(parse_users).transpose().map_err(|r| error(BASIC_USERS, "(hidden)", r))?;
        let auth = match (get(AUTH).unwrap_or("none"), users) {
            ("none", _) => Auth::None,
            ("basic", Some(users)) => Auth::Basic(Arc::new(users)),
            ("basic", None) => return Err(error(AUTH, "basic", format!("basic needs {BASIC_USERS}"))),
            ("sasl", _) => Auth::Sasl(Arc::new(SaslUsers::new(get(SASL_LISTENER).map(str::to_owned)))),
            (other, _) => return Err(error(AUTH, other, "expected none, basic or sasl")),
        };
        if let (Some(addr), Auth::None) = (listener, &auth) {
            if !addr.ip().is_loopback() {
                let reason =
                    "console.auth=none is allowed only on a loopback address; set console.auth=basic";
                return Err(error(LISTENER, &addr.to_string(), reason));
            }
        }
        let sample_ms = match get(SAMPLE_MS) {
            None => DEFAULT_SAMPLE_MS,
            Some(raw) => raw
                .parse()
                .ok()
                .filter(|ms| (100..=60_000).contains(ms))
                .ok_or_else(|| error(SAMPLE_MS, raw, "expected milliseconds from 100 to 60000"))?,
        };
        Ok(Self { listener, auth, sample_ms })
    }
}

fn parse_listener(raw: &str) -> Result<SocketAddr, String> {
    let address = raw.strip_prefix("http://").ok_or("expected http://HOST:PORT")?;
    let (host, port) = address.rsplit_once(':').ok_or("expected http://HOST:PORT")?;
    let port: u16 = port.parse().map_err(|_| format!("{port:?} is not a port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip = match host {
        "localhost" => std::net::Ipv4Addr::LOCALHOST.into(),
        _ => host.parse().map_err(|_| format!("{host} is not an IP address"))?,
    };
    Ok(SocketAddr::new(ip, port))
}

fn parse_users(raw: &str) -> Result<ConfiguredUsers, String> {
    let users = raw
        .split(',')
        .map(|entry| match entry.trim().split_once(':') {
            Some((user, password)) if !user.is_empty() && !password.is_empty() => {
                Ok((user.to_owned(), password.to_owned()))
            }
            _ => Err("expected user:password entries separated by commas".to_owned()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ConfiguredUsers(users))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<ConsoleConfig, ConfigError> {
        ConsoleConfig::parse(&pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn the_console_is_off_unless_a_listener_is_set() {
        let config = parse(&[]).unwrap();
        assert!(config.listener.is_none() && matches!(config.auth, Auth::None));
        assert_eq!(
            parse(&[(LISTENER, "http://127.0.0.1:8080")]).unwrap().listener,
            Some("127.0.0.1:8080".parse().unwrap())
        );
        assert_eq!(
            parse(&[(LISTENER, "http://[::1]:8080")]).unwrap().listener,
            Some("[::1]:8080".parse().unwrap())
        );
    }

    #[test]
    fn no_auth_is_refused_off_loopback() {
        for open in [
            "http://0.0.0.0:8080",
            "http://[::]:8080",
            "http://[::ffff:127.0.0.1]:8080",
            "http://10.0.0.1:80",
        ] {
            assert_eq!(parse(&[(LISTENER, open)]).unwrap_err().key, LISTENER, "{open}");
        }
        let basic =
            parse(&[(LISTENER, "http://0.0.0.0:8080"), (AUTH, "basic"), (BASIC_USERS, "a:b,c:d")]).unwrap();
        assert!(matches!(basic.auth, Auth::Basic(_)));
    }

    #[test]
    fn bad_values_name_their_key_and_hide_passwords() {
        for (key, value) in [
            (LISTENER, "127.0.0.1:80"),
            (LISTENER, "http://host.example:80"),
            (AUTH, "digest"),
            (SAMPLE_MS, "5"),
        ] {
            assert_eq!(parse(&[(key, value)]).unwrap_err().key, key, "{value}");
        }
        assert_eq!(parse(&[(AUTH, "basic")]).unwrap_err().key, AUTH);
        let users = parse(&[(AUTH, "basic"), (BASIC_USERS, "alice:secret,bob")]).unwrap_err();
        assert!(!users.to_string().contains("secret"), "{users}");
    }
}
