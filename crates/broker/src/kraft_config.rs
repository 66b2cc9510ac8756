//! KRaft settings: this node's roles, its metadata quorum and the broker's
//! session with the controller (Kafka's `process.roles`, `controller.*`,
//! `broker.*` keys), checked with Kafka's rules (`KafkaConfig`'s
//! `validateValues` and `QuorumConfig`).
//!
//! With no `process.roles` Strom is its own single-node broker and the keys
//! only carry their defaults. A node with roles is a KRaft node: its log
//! dirs must be formatted (`strom storage format`) and it runs the metadata
//! quorum (`strom-quorum`): a voter if it is a listed controller, else an
//! observer.

use std::collections::BTreeMap;

use crate::config::{ConfigError, Listener};

/// A role of `process.roles`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProcessRole {
    Broker,
    Controller,
}

/// A `controller.quorum.voters` entry, `id@host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub id: i32,
    pub host: String,
    pub port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KraftConfig {
    /// `process.roles`; empty for Strom's self-formatting single node.
    pub process_roles: Vec<ProcessRole>,
    /// `controller.quorum.voters`: the static quorum.
    pub voters: Vec<Voter>,
    /// `controller.quorum.bootstrap.servers`: where a dynamic (KIP-853)
    /// quorum is found, as `(host, port)`.
    pub bootstrap_servers: Vec<(String, u16)>,
    /// `controller.listener.names`, upper-cased.
    pub controller_listener_names: Vec<String>,
    /// `inter.broker.listener.name`, upper-cased; Kafka's default is the
    /// listener named after `security.inter.broker.protocol` (PLAINTEXT).
    pub inter_broker_listener_name: String,
    /// `broker.rack`
    pub broker_rack: Option<String>,
    /// `controller.quorum.election.timeout.ms`
    pub election_timeout_ms: i32,
    /// `controller.quorum.fetch.timeout.ms`
    pub fetch_timeout_ms: i32,
    /// `broker.session.timeout.ms`
    pub broker_session_timeout_ms: i32,
    /// `broker.heartbeat.interval.ms`
    pub broker_heartbeat_interval_ms: i32,
    /// `controller.quorum.request.timeout.ms`
    pub request_timeout_ms: i32,
    /// `controller.quorum.election.backoff.max.ms`
    pub election_backoff_max_ms: i32,
    /// `metadata.log.max.record.bytes.between.snapshots`
    pub max_bytes_between_snapshots: i32,
    /// `metadata.log.max.snapshot.interval.ms`
    pub max_snapshot_interval_ms: i32,
}

/// The KRaft keys Strom reads, each an int of at least 1, with Kafka's defaults.
pub const TIMEOUT_KEYS: [(&str, i32); 8] = [
    ("controller.quorum.election.timeout.ms", 1_000),
    ("controller.quorum.fetch.timeout.ms", 2_000),
    ("broker.session.timeout.ms", 9_000),
    ("broker.heartbeat.interval.ms", 2_000),
    ("controller.quorum.request.timeout.ms", 2_000),
    ("controller.quorum.election.backoff.max.ms", 1_000),
    ("metadata.log.max.record.bytes.between.snapshots", 20 * 1024 * 1024),
    ("metadata.log.max.snapshot.interval.ms", 3_600_000),
];

const NAMES: &str = "controller.listener.names";

fn error(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError { key: key.into(), value: value.into(), reason: reason.into() }
}

fn list(provided: &BTreeMap<String, String>, key: &str) -> Vec<String> {
    let raw = provided.get(key).map(String::as_str).unwrap_or("");
    raw.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

impl KraftConfig {
    /// Reads and checks the KRaft keys against the node's id and listeners
    /// (`node_id_given`: whether `node.id` or `broker.id` was set).
    pub fn parse(
        provided: &BTreeMap<String, String>,
        node_id: i32,
        node_id_given: bool,
        listeners: &[Listener],
        advertised: &[Listener],
    ) -> Result<Self, ConfigError> {
        let timeout = |index: usize| positive_int(provided, TIMEOUT_KEYS[index]);
        let config = Self {
            process_roles: process_roles(provided)?,
            voters: voters(provided)?,
            bootstrap_servers: bootstrap_servers(provided)?,
            controller_listener_names: list(provided, "controller.listener.names")
                .iter()
                .map(|name| name.to_ascii_uppercase())
                .collect(),
            inter_broker_listener_name: inter_broker_listener_name(provided)?,
            broker_rack: provided.get("broker.rack").map(|rack| rack.trim().to_owned()),
            election_timeout_ms: timeout(0)?,
            fetch_timeout_ms: timeout(1)?,
            broker_session_timeout_ms: timeout(2)?,
            broker_heartbeat_interval_ms: timeout(3)?,
            request_timeout_ms: timeout(4)?,
            election_backoff_max_ms: timeout(5)?,
            max_bytes_between_snapshots: timeout(6)?,
            max_snapshot_interval_ms: timeout(7)?,
        };
        if !config.process_roles.is_empty() {
            if !node_id_given {
                let reason = "Missing configuration `node.id` which is required when `process.roles` is defined (i.e. when running in KRaft mode).";
                return Err(error("node.id", "", reason));
            }
            config.check_roles(provided, node_id, listeners, advertised)?;
        }
        Ok(config)
    }

    /// True for a KRaft node: `process.roles` is set.
    pub fn is_kraft(&self) -> bool {
        !self.process_roles.is_empty()
    }

    pub fn has_role(&self, role: ProcessRole) -> bool {
        self.process_roles.contains(&role)
    }

    /// The listeners named in `controller.listener.names`.
    pub fn controller_listeners<'a>(&self, listeners: &'a [Listener]) -> Vec<&'a Listener> {
        let named = |l: &&Listener| self.controller_listener_names.contains(&l.name.to_ascii_uppercase());
        listeners.iter().filter(named).collect()
    }

    /// Kafka's per-role checks of the quorum and listeners.
    fn check_roles(
        &self,
        provided: &BTreeMap<String, String>,
        node_id: i32,
        listeners: &[Listener],
        advertised: &[Listener],
    ) -> Result<(), ConfigError> {
        if self.voters.is_empty() && self.bootstrap_servers.is_empty() {
            let reason = "If using process.roles, either controller.quorum.bootstrap.servers must contain the set of bootstrap controllers or controller.quorum.voters must contain a parseable set of controllers.";
            return Err(error("controller.quorum.voters", "", reason));
        }
        let raw = |key: &str| provided.get(key).cloned().unwrap_or_default();
        let voter_ids: Vec<i32> = self.voters.iter().map(|v| v.id).collect();
        let is_controller = self.has_role(ProcessRole::Controller);
        let is_voter = voter_ids.contains(&node_id);
        // A dynamic quorum (no static voters) learns its voters later.
        let misplaced = if is_controller { !voter_ids.is_empty() && !is_voter } else { is_voter };
        if misplaced {
            let (roles, must) = match is_controller {
                true => ("contains the 'controller' role", "must"),
                false => ("contains just the 'broker' role", "must not"),
            };
            let reason = format!("If process.roles {roles}, the node id {node_id} {must} be included in the set of voters controller.quorum.voters={voter_ids:?}");
            return Err(error("controller.quorum.voters", &raw("controller.quorum.voters"), reason));
        }
        let problem = match is_controller {
            true => self.controller_listeners_problem(listeners),
            false => self.broker_only_listeners_problem(listeners),
        };
        if let Some((key, reason)) = problem {
            return Err(error(key, &raw(key), reason));
        }
        if self.has_role(ProcessRole::Broker) {
            self.check_broker_listeners(provided, advertised)?;
        }
        Ok(())
    }

    /// Why a broker-only node's controller listeners are wrong, if they are,
    /// and the key at fault: it needs one to reach the quorum and must not
    /// listen on it.
    fn broker_only_listeners_problem(&self, listeners: &[Listener]) -> Option<(&'static str, &'static str)> {
        if self.controller_listener_names.is_empty() {
            let reason = "controller.listener.names must contain at least one value when running KRaft with just the broker role";
            return Some((NAMES, reason));
        }
        let listening = !self.controller_listeners(listeners).is_empty();
        let reason = "controller.listener.names must not contain a value appearing in the 'listeners' configuration when running KRaft with just the broker role";
        listening.then_some((NAMES, reason))
    }

    /// Why a controller's listeners are wrong, if they are, and the key at
    /// fault: it listens on every controller listener, and a controller-only
    /// node on nothing else.
    fn controller_listeners_problem(&self, listeners: &[Listener]) -> Option<(&'static str, &'static str)> {
        let controller_listeners = self.controller_listeners(listeners);
        if !self.has_role(ProcessRole::Broker) && controller_listeners.len() != listeners.len() {
            let reason = "The listeners config must only contain KRaft controller listeners from controller.listener.names when process.roles=controller";
            return Some(("listeners", reason));
        }
        let listed = |name: &String| listeners.iter().any(|l| l.name.eq_ignore_ascii_case(name));
        let all_listed = self.controller_listener_names.iter().all(listed);
        let reason = "controller.listener.names must contain at least one value and only values appearing in the 'listeners' configuration when running the KRaft controller role";
        (controller_listeners.is_empty() || !all_listed).then_some((NAMES, reason))
    }

    /// A broker needs an advertised listener of its own, and the
    /// inter-broker listener must be one of them.
    fn check_broker_listeners(
        &self,
        provided: &BTreeMap<String, String>,
        advertised: &[Listener],
    ) -> Result<(), ConfigError> {
        let names: Vec<String> = advertised
            .iter()
            .map(|l| l.name.to_ascii_uppercase())
            .filter(|name| !self.controller_listener_names.contains(name))
            .collect();
        if names.is_empty() {
            let reason = "There must be at least one broker advertised listener. Perhaps all listeners appear in controller.listener.names?";
            return Err(error("listeners", provided.get("listeners").map_or("", |v| v), reason));
        }
        if !names.contains(&self.inter_broker_listener_name) {
            let reason = format!(
                "inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid options based on currently configured listeners are {}",
                names.join(",")
            );
            return Err(error("inter.broker.listener.name", &self.inter_broker_listener_name, reason));
        }
        Ok(())
    }
}

/// An int of at least 1, `default` when unset.
fn positive_int(
    provided: &BTreeMap<String, String>,
    (key, default): (&str, i32),
) -> Result<i32, ConfigError> {
    let Some(raw) = provided.get(key) else { return Ok(default) };
    match raw.trim().parse::<i32>() {
        Ok(value) if value >= 1 => Ok(value),
        Ok(_) => Err(error(key, raw, "value must be at least 1")),
        Err(_) => Err(error(key, raw, "expected a 32-bit integer")),
    }
}

fn process_roles(provided: &BTreeMap<String, String>) -> Result<Vec<ProcessRole>, ConfigError> {
    let key = "process.roles";
    let raw = provided.get(key).map(String::as_str).unwrap_or("");
    let mut roles = Vec::new();
    for name in list(provided, key) {
        let role = match name.as_str() {
            "broker" => ProcessRole::Broker,
            "controller" => ProcessRole::Controller,
            _ => {
                let reason = format!(
                    "Unknown process role '{name}' (only 'broker' and 'controller' are allowed roles)"
                );
                return Err(error(key, raw, reason));
            }
        };
        if roles.contains(&role) {
            return Err(error(key, raw, "Duplicate role names found in `process.roles`"));
        }
        roles.push(role);
    }
    roles.sort();
    Ok(roles)
}

/// `host:port`, the host possibly a bracketed IPv6 address; `None` when it
/// does not parse (Kafka's `Utils.getHost` and `getPort`).
fn host_and_port(address: &str) -> Option<(String, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '[' | ']');
    (!host.is_empty() && host.chars().all(valid)).then(|| (host.to_owned(), port))
}

fn voters(provided: &BTreeMap<String, String>) -> Result<Vec<Voter>, ConfigError> {
    let key = "controller.quorum.voters";
    let raw = provided.get(key).map(String::as_str).unwrap_or("");
    let form = "Each entry should be in the form `{id}@{host}:{port}`.";
    let mut voters: Vec<Voter> = Vec::new();
    for entry in list(provided, key) {
        let Some((id, address)) = entry.split_once('@').filter(|(_, a)| !a.contains('@')) else {
            return Err(error(key, raw, format!("Invalid entry {entry}. {form}")));
        };
        let id: i32 =
            id.trim().parse().ok().filter(|id| *id >= 0).ok_or_else(|| {
                error(key, raw, format!("Failed to parse node id from entry {entry}. {form}"))
            })?;
        let (host, port) = host_and_port(address.trim()).ok_or_else(|| {
            error(key, raw, format!("Failed to parse host and port from entry {entry}. {form}"))
        })?;
        if host == "0.0.0.0" {
            return Err(error(key, raw, format!("Host string ({host}) is not routeable")));
        }
        if voters.iter().any(|v| v.id == id) {
            return Err(error(key, raw, format!("voter {id} is listed more than once")));
        }
        voters.push(Voter { id, host, port });
    }
    Ok(voters)
}

/// `inter.broker.listener.name`, else the listener named after
/// `security.inter.broker.protocol`; Kafka refuses both at once.
fn inter_broker_listener_name(provided: &BTreeMap<String, String>) -> Result<String, ConfigError> {
    let name = provided.get("inter.broker.listener.name");
    let protocol = provided.get("security.inter.broker.protocol");
    if let (Some(name), Some(_)) = (name, protocol) {
        let reason =
            "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.";
        return Err(error("inter.broker.listener.name", name, reason));
    }
    Ok(name.or(protocol).map_or("PLAINTEXT".to_owned(), |name| name.trim().to_ascii_uppercase()))
}

fn bootstrap_servers(provided: &BTreeMap<String, String>) -> Result<Vec<(String, u16)>, ConfigError> {
    let key = "controller.quorum.bootstrap.servers";
    let raw = provided.get(key).map(String::as_str).unwrap_or("");
    list(provided, key)
        .iter()
        .map(|entry| {
            host_and_port(entry).ok_or_else(|| {
                let reason = format!(
                    "Failed to parse host name and port from {entry}. Each entry should be in the form \"{{host}}:{{port}}\""
                );
                error(key, raw, reason)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::config::{BrokerConfig, ConfigError};

    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Result<BrokerConfig, ConfigError> {
        let pairs: Vec<_> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        BrokerConfig::from_properties("", &pairs)
    }

    const COMBINED: [(&str, &str); 4] = [
        ("process.roles", "broker,controller"),
        ("node.id", "1"),
        ("listeners", "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"),
        ("controller.listener.names", "CONTROLLER"),
    ];

    fn combined(extra: &[(&'static str, &'static str)]) -> Result<BrokerConfig, ConfigError> {
        let mut pairs = COMBINED.to_vec();
        pairs.extend_from_slice(extra);
        with(&pairs)
    }

    #[test]
    fn defaults_are_kafkas_and_no_roles_means_single_node() {
        let kraft = BrokerConfig::embedded_defaults().kraft;
        assert!(!kraft.is_kraft());
        assert_eq!(
            (
                kraft.election_timeout_ms,
                kraft.fetch_timeout_ms,
                kraft.broker_session_timeout_ms,
                kraft.broker_heartbeat_interval_ms
            ),
            (1_000, 2_000, 9_000, 2_000)
        );
        assert_eq!((kraft.request_timeout_ms, kraft.election_backoff_max_ms), (2_000, 1_000));
        assert_eq!(kraft.inter_broker_listener_name, "PLAINTEXT");
        assert_eq!(kraft.broker_rack, None);
    }

    #[test]
    fn a_combined_node_with_static_voters_parses() {
        let config =
            combined(&[("controller.quorum.voters", "1@127.0.0.1:9093"), ("broker.rack", "r1")]).unwrap();
        let kraft = &config.kraft;
        assert_eq!(kraft.process_roles, [ProcessRole::Broker, ProcessRole::Controller]);
        assert_eq!(kraft.voters, [Voter { id: 1, host: "127.0.0.1".into(), port: 9093 }]);
        assert_eq!(kraft.broker_rack.as_deref(), Some("r1"));
        let advertised: Vec<&str> = config.advertised_listeners.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(advertised, ["PLAINTEXT"], "the controller listener is not advertised to clients");
    }

    #[test]
    fn the_inter_broker_listener_is_named_once() {
        let voters = ("controller.quorum.voters", "1@127.0.0.1:9093");
        let by_protocol = combined(&[voters, ("security.inter.broker.protocol", "plaintext")]).unwrap();
        assert_eq!(by_protocol.kraft.inter_broker_listener_name, "PLAINTEXT");
        let both = combined(&[
            voters,
            ("security.inter.broker.protocol", "PLAINTEXT"),
            ("inter.broker.listener.name", "PLAINTEXT"),
        ]);
        assert!(both.unwrap_err().reason.contains("Only one of"));
    }

    #[test]
    fn roles_are_kafkas_two_each_at_most_once() {
        let unknown = combined(&[("process.roles", "broker,leader"), ("controller.quorum.voters", "1@h:1")]);
        let unknown = unknown.unwrap_err();
        assert_eq!(unknown.key, "process.roles");
        assert!(unknown.reason.contains("Unknown process role 'leader'"), "{unknown}");
        let twice = combined(&[("process.roles", "broker,broker"), ("controller.quorum.voters", "2@h:1")]);
        assert!(twice.unwrap_err().reason.contains("Duplicate role names"));
    }

    #[test]
    fn a_kraft_node_needs_a_quorum_and_a_node_id() {
        let no_quorum = combined(&[]).unwrap_err();
        assert!(no_quorum.reason.contains("either controller.quorum.bootstrap.servers"), "{no_quorum}");
        let mut pairs = COMBINED.to_vec();
        pairs.retain(|(k, _)| *k != "node.id");
        pairs.push(("controller.quorum.voters", "1@h:9093"));
        let no_id = with(&pairs).unwrap_err();
        assert_eq!(no_id.key, "node.id");
        assert!(no_id.reason.contains("Missing configuration `node.id`"), "{no_id}");
    }

    #[test]
    fn voters_and_bootstrap_servers_take_kafkas_forms() {
        for bad in ["1@h", "x@h:9093", "1@h:port", "1@0.0.0.0:9093", "1@h:9093@x", "1@h:1,1@g:2"] {
            let error = combined(&[("controller.quorum.voters", bad)]).unwrap_err();
            assert_eq!(error.key, "controller.quorum.voters", "{bad}");
        }
        for bad in ["h", "h:port", ":9093"] {
            let error = combined(&[("controller.quorum.bootstrap.servers", bad)]).unwrap_err();
            assert_eq!(error.key, "controller.quorum.bootstrap.servers", "{bad}");
        }
        let ipv6 = combined(&[("controller.quorum.voters", "1@[::1]:9093")]).unwrap();
        assert_eq!(ipv6.kraft.voters[0].host, "[::1]");
    }

    #[test]
    fn controllers_must_be_voters_and_brokers_must_not() {
        let absent = combined(&[("controller.quorum.voters", "2@h:9093")]).unwrap_err();
        assert!(absent.reason.contains("the node id 1 must be included in the set of voters"), "{absent}");
        let broker = with(&[
            ("process.roles", "broker"),
            ("node.id", "1"),
            ("controller.listener.names", "CONTROLLER"),
            ("controller.quorum.voters", "1@h:9093"),
        ])
        .unwrap_err();
        assert!(broker.reason.contains("must not be included in the set of voters"), "{broker}");
    }

    #[test]
    fn controller_listeners_follow_the_roles() {
        let broker = |names: &'static str, listeners: &'static str| {
            with(&[
                ("process.roles", "broker"),
                ("node.id", "4"),
                ("controller.quorum.voters", "1@h:9093"),
                ("controller.listener.names", names),
                ("listeners", listeners),
                ("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"),
            ])
        };
        assert!(broker("CONTROLLER", "PLAINTEXT://127.0.0.1:9092").is_ok());
        assert!(broker("", "PLAINTEXT://127.0.0.1:9092").unwrap_err().reason.contains("at least one value"));
        let listening = broker("CONTROLLER", "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093");
        assert!(listening.unwrap_err().reason.contains("must not contain a value appearing"));
        let missing = combined(&[
            ("controller.listener.names", "OTHER"),
            ("controller.quorum.voters", "1@h:1"),
            ("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"),
        ]);
        assert_eq!(missing.unwrap_err().key, "controller.listener.names");
        let controller_with_client_listener = with(&[
            ("process.roles", "controller"),
            ("node.id", "1"),
            ("controller.quorum.voters", "1@h:9093"),
            ("listeners", "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"),
            ("controller.listener.names", "CONTROLLER"),
        ]);
        assert!(controller_with_client_listener
            .unwrap_err()
            .reason
            .contains("must only contain KRaft controller listeners"));
    }

    #[test]
    fn the_inter_broker_listener_must_be_advertised() {
        let voters = ("controller.quorum.voters", "1@h:9093");
        let error = combined(&[voters, ("inter.broker.listener.name", "INTERNAL")]).unwrap_err();
        assert_eq!(error.key, "inter.broker.listener.name");
        assert!(error.reason.contains("valid options based on currently configured listeners are PLAINTEXT"));
        let named = combined(&[voters, ("inter.broker.listener.name", "plaintext")]).unwrap();
        assert_eq!(named.kraft.inter_broker_listener_name, "PLAINTEXT");
    }

    #[test]
    fn timeouts_are_positive_ints() {
        for (key, _) in TIMEOUT_KEYS {
            for bad in ["0", "-5", "2147483648", "soon"] {
                assert_eq!(with(&[(key, bad)]).unwrap_err().key, key, "{key}={bad}");
            }
        }
        let config = with(&[("broker.session.timeout.ms", "18000")]).unwrap();
        assert_eq!(config.kraft.broker_session_timeout_ms, 18_000);
    }
}
