//! Client configuration under Kafka's property names.
//!
//! Tools read a Java properties file (`--command-config`, parsed by
//! `strom_broker::properties`) and `key=value` flags into one `Properties` map; each client picks the keys
//! it knows, with the Java client's defaults, and ignores the rest (as the
//! Java client does, apart from a log line).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::connection::ConnectionOptions;
use crate::error::{Error, Result};

/// `key -> value`, as in a `.properties` file.
pub type Properties = BTreeMap<String, String>;

/// Parses `key=value` pairs given on a command line.
pub fn parse_pairs<'a>(pairs: impl IntoIterator<Item = &'a str>) -> Result<Properties> {
    pairs
        .into_iter()
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) => Ok((key.trim().to_owned(), value.trim().to_owned())),
            None => Err(Error::Config(format!("expected key=value, got {pair:?}"))),
        })
        .collect()
}

/// Typed reads of a `Properties` map with Kafka's defaults.
pub(crate) struct Reader<'a>(pub &'a Properties);

impl Reader<'_> {
    pub fn string(&self, key: &str, default: &str) -> String {
        self.0.get(key).cloned().unwrap_or_else(|| default.to_owned())
    }

    pub fn parse<T: std::str::FromStr>(&self, key: &str, default: T) -> Result<T> {
        match self.0.get(key) {
            None => Ok(default),
            Some(text) => {
                text.trim().parse().map_err(|_| Error::Config(format!("{key}={text} is not valid")))
            }
        }
    }

    pub fn millis(&self, key: &str, default_ms: u64) -> Result<Duration> {
        self.parse(key, default_ms).map(Duration::from_millis)
    }

    pub fn bool(&self, key: &str, default: bool) -> Result<bool> {
        match self.0.get(key).map(|v| v.trim().to_ascii_lowercase()) {
            None => Ok(default),
            Some(v) if v == "true" => Ok(true),
            Some(v) if v == "false" => Ok(false),
            Some(v) => Err(Error::Config(format!("{key}={v} is not true or false"))),
        }
    }
}

/// What every client (admin, producer, later consumer) needs.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `bootstrap.servers`: `host:port` pairs to learn the cluster from.
    pub bootstrap_servers: Vec<String>,
    /// `client.id`, sent in every request header.
    pub client_id: String,
    /// `request.timeout.ms` (30000): how long to wait for one response.
    pub request_timeout: Duration,
    /// `socket.connection.setup.timeout.ms` (10000).
    pub connect_timeout: Duration,
    /// `retry.backoff.ms` (100): the first pause before a retry.
    pub retry_backoff: Duration,
    /// `retry.backoff.max.ms` (1000): the backoff doubles up to this.
    pub retry_backoff_max: Duration,
    /// `default.api.timeout.ms` (60000): the whole budget of one admin or
    /// metadata operation, retries included.
    pub api_timeout: Duration,
    /// `metadata.max.age.ms` (300000): refresh metadata at least this often.
    pub metadata_max_age: Duration,
}

impl ClientConfig {
    /// A config for `bootstrap.servers` with every other key at its default.
    pub fn new(bootstrap_servers: &str) -> Self {
        let mut properties = Properties::new();
        properties.insert("bootstrap.servers".into(), bootstrap_servers.into());
        Self::from_properties(&properties).expect("defaults are valid")
    }

    pub fn from_properties(properties: &Properties) -> Result<Self> {
        let read = Reader(properties);
        let bootstrap_servers: Vec<String> = read
            .string("bootstrap.servers", "")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if bootstrap_servers.is_empty() {
            return Err(Error::Config("bootstrap.servers is empty".into()));
        }
        if let Some(bad) = bootstrap_servers.iter().find(|s| !s.contains(':')) {
            return Err(Error::Config(format!("bootstrap server {bad:?} is not host:port")));
        }
        check_security_protocol(&read.string("security.protocol", "PLAINTEXT"))?;
        Ok(Self {
            bootstrap_servers,
            client_id: read.string("client.id", "strom-client"),
            request_timeout: read.millis("request.timeout.ms", 30_000)?,
            connect_timeout: read.millis("socket.connection.setup.timeout.ms", 10_000)?,
            retry_backoff: read.millis("retry.backoff.ms", 100)?,
            retry_backoff_max: read.millis("retry.backoff.max.ms", 1_000)?,
            api_timeout: read.millis("default.api.timeout.ms", 60_000)?,
            metadata_max_age: read.millis("metadata.max.age.ms", 300_000)?,
        })
    }

    pub fn connection_options(&self) -> ConnectionOptions {
        ConnectionOptions {
            client_id: self.client_id.clone(),
            request_timeout: self.request_timeout,
            connect_timeout: self.connect_timeout,
            ..ConnectionOptions::default()
        }
    }

    /// The pause before retry number `attempt` (1-based): exponential from
    /// `retry.backoff.ms`, capped at `retry.backoff.max.ms`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(16);
        self.retry_backoff.saturating_mul(factor).min(self.retry_backoff_max.max(self.retry_backoff))
    }
}

/// `security.protocol`: only PLAINTEXT is spoken. TLS or SASL asked for
/// and not honoured would send credentials and data in the clear, so the
/// other protocols are refused rather than ignored.
fn check_security_protocol(value: &str) -> Result<()> {
    const NOT_YET: [&str; 3] = ["SSL", "SASL_PLAINTEXT", "SASL_SSL"];
    let protocol = value.trim().to_ascii_uppercase();
    if protocol == "PLAINTEXT" {
        return Ok(());
    }
    let reason = if NOT_YET.contains(&protocol.as_str()) {
        "this client speaks only PLAINTEXT (no TLS or SASL yet)"
    } else {
        "expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
    };
    Err(Error::Config(format!("security.protocol={value} is not supported: {reason}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_properties_files_and_pairs() {
        let properties = parse_pairs(["bootstrap.servers = a:1,b:2", "client.id=tool"]).unwrap();
        assert_eq!(properties["client.id"], "tool");
        let config = ClientConfig::from_properties(&properties).unwrap();
        assert_eq!(config.bootstrap_servers, ["a:1", "b:2"]);
        assert_eq!(parse_pairs(["acks=all"]).unwrap()["acks"], "all");
        assert!(parse_pairs(["acks"]).is_err());
    }

    #[test]
    fn rejects_bad_values_and_empty_bootstrap() {
        let mut properties = parse_pairs(["bootstrap.servers=h:1", "request.timeout.ms=soon"]).unwrap();
        assert!(ClientConfig::from_properties(&properties).is_err());
        properties.insert("request.timeout.ms".into(), "5".into());
        assert_eq!(
            ClientConfig::from_properties(&properties).unwrap().request_timeout,
            Duration::from_millis(5)
        );
        assert!(ClientConfig::from_properties(&Properties::new()).is_err());
        assert!(ClientConfig::new("h:1").bootstrap_servers == ["h:1"]);
        assert!(ClientConfig::from_properties(&parse_pairs(["bootstrap.servers=nohost"]).unwrap()).is_err());
    }

    #[test]
    fn refuses_security_protocols_it_cannot_honour() {
        let config = |protocol: &str| {
            let pairs = ["bootstrap.servers=h:1".to_owned(), format!("security.protocol={protocol}")];
            ClientConfig::from_properties(&parse_pairs(pairs.iter().map(String::as_str)).unwrap())
        };
        assert!(config("PLAINTEXT").is_ok());
        assert!(config("plaintext").is_ok());
        for refused in ["SSL", "SASL_PLAINTEXT", "sasl_ssl", "TLS"] {
            let error = config(refused).unwrap_err().to_string();
            assert!(error.contains(&format!("security.protocol={refused}")), "{error}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let config = ClientConfig::new("h:1");
        let steps: Vec<u128> = (1..=6).map(|a| config.backoff(a).as_millis()).collect();
        assert_eq!(steps, [100, 200, 400, 800, 1000, 1000]);
    }
}
