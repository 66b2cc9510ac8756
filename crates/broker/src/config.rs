//! Broker configuration, Kafka style: a `server.properties` file plus
//! `--override KEY=VALUE` pairs, with Kafka's key names and defaults.
//!
//! Unknown keys are warned about and ignored; a known key with an invalid
//! value stops the start with a message naming the key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use strom_metadata::topic_config::{check_value, dynamic_broker_config_kind, Kind};
use strom_metadata::MetadataImage;
use strom_storage::batch::TimestampType;
use strom_storage::{CleanupPolicy, LogConfig};

use crate::config_sources::config_type;
use crate::group::GroupConfig;
use crate::kraft_config::KraftConfig;
use crate::txn::TxnConfig;

/// A config problem, naming the key.
#[derive(Debug, thiserror::Error)]
#[error("invalid value {value:?} for configuration {key}: {reason}")]
pub struct ConfigError {
    pub key: String,
    pub value: String,
    pub reason: String,
}

/// A `PLAINTEXT://host:port` listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl Listener {
    pub fn socket_addr(&self) -> Result<SocketAddr, String> {
        let host = if self.host.is_empty() { "0.0.0.0" } else { &self.host };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        format!("{host}:{}", self.port)
            .parse()
            .or_else(|_| format!("[{host}]:{}", self.port).parse())
            .map_err(|_| format!("{host} is not an IP address"))
    }
}

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub node_id: i32,
    pub listeners: Vec<Listener>,
    pub advertised_listeners: Vec<Listener>,
    pub log_dirs: Vec<PathBuf>,
    pub metadata_log_dir: PathBuf,
    pub num_partitions: i32,
    /// `controller.max.partitions.per.request` (Strom's own): the most
    /// partitions one CreateTopics or CreatePartitions may create in total,
    /// Kafka's bound of 10,000 records per operation made a setting.
    pub max_partitions_per_request: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics_enable: bool,
    pub socket_request_max_bytes: usize,
    pub min_insync_replicas: i32,
    pub log_flush_offset_checkpoint_interval_ms: u64,
    pub replica_high_watermark_checkpoint_interval_ms: u64,
    /// How this broker's followers fetch from their leaders (`num.replica.fetchers`, `replica.fetch.*`).
    pub replica_fetch: ReplicaFetchConfig,
    /// `replica.lag.time.max.ms`: a follower not caught up for this long leaves the ISR.
    pub replica_lag_time_max_ms: i64,
    /// `replica.selector.class` (KIP-392): which replica consumers are sent to.
    pub replica_selector: ReplicaSelector,
    /// The replication throttles (KIP-73): rates and their sampling.
    pub replication_throttle: ReplicationThrottleConfig,
    pub log_flush_scheduler_interval_ms: u64,
    pub max_incremental_fetch_session_cache_slots: usize,
    /// `fetch.max.bytes`: the most record bytes one fetch response carries
    /// (beyond one first batch), whatever the request's `max_bytes`.
    pub fetch_max_bytes: i32,
    pub max_connections: usize,
    /// `max.connections.per.ip` and its overrides.
    pub connection_limits: crate::quota::connections::ConnectionLimitConfig,
    /// `quota.window.num` samples of `quota.window.size.seconds`.
    pub quota_window: crate::quota::QuotaWindow,
    /// `fetch.zero.copy.enable` (Strom's own): fetched records go from the
    /// page cache to the socket with `sendfile`; off, they are copied
    /// through userspace (for comparison, or where sendfile misbehaves).
    pub zero_copy_fetch: bool,
    /// `metrics.listener=http://HOST:PORT`: where Prometheus scrapes `/metrics`.
    pub metrics_listener: Option<SocketAddr>,
    /// The web console's `console.*` keys.
    pub console: crate::console::ConsoleConfig,
    /// `log.retention.check.interval.ms`
    pub log_retention_check_interval_ms: u64,
    /// `producer.id.expiration.ms`: how long a partition remembers an idle producer.
    pub producer_id_expiration_ms: i64,
    /// `producer.id.expiration.check.interval.ms`
    pub producer_id_expiration_check_interval_ms: u64,
    /// `auto.leader.rebalance.enable`: the active controller moves
    /// leadership back to in-sync preferred replicas every
    /// `leader.imbalance.check.interval.seconds`.
    pub auto_leader_rebalance_enable: bool,
    pub leader_imbalance_check_interval_seconds: u64,
    /// `num.recovery.threads.per.data.dir`: threads per log dir loading logs
    /// at start and closing them at shutdown.
    pub num_recovery_threads_per_data_dir: usize,
    /// `log.segment.open.files.max` (Strom's own): how many inactive
    /// segments' `.log` files stay open at once, across all partitions.
    /// Active segments keep theirs regardless; Kafka keeps every segment open.
    pub log_segment_open_files_max: usize,
    /// Defaults for every topic's log.
    pub log: LogConfig,
    /// The log cleaner's settings.
    pub cleaner: CleanerConfig,
    /// The group coordinator's settings.
    pub groups: GroupConfig,
    /// The transaction coordinator's settings.
    pub transactions: TxnConfig,
    /// Roles, quorum and timeouts of a KRaft node.
    pub kraft: KraftConfig,
    /// `authorizer.class.name`, `super.users`, `allow.everyone.if.no.acl.found`.
    pub authorizer: crate::security::authorizer::AuthorizerConfig,
    /// Every key given, as given, for DescribeConfigs.
    pub provided: BTreeMap<String, String>,
}

/// The log cleaner (compaction) settings, Kafka's `log.cleaner.*`.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerConfig {
    /// `log.cleaner.enable`
    pub enable: bool,
    /// `log.cleaner.threads`
    pub threads: usize,
    /// `log.cleaner.dedupe.buffer.size`: memory for the offset maps of all threads.
    pub dedupe_buffer_size: usize,
    /// `log.cleaner.io.buffer.size`
    pub io_buffer_size: usize,
    /// `log.cleaner.backoff.ms`: sleep when no log needs cleaning.
    pub backoff_ms: u64,
}

impl CleanerConfig {
    /// One cleaner thread's share of the buffers, divided as Kafka does.
    pub fn thread_settings(&self) -> strom_storage::cleaner::CleanerSettings {
        let threads = self.threads.max(1);
        strom_storage::cleaner::CleanerSettings {
            offset_map_bytes: self.dedupe_buffer_size / threads,
            io_buffer_bytes: self.io_buffer_size / threads / 2,
        }
    }
}

/// Keys of Kafka's standard `server.properties` that Strom accepts without
/// acting on them (thread counts, buffer sizes, KRaft wiring of one node).
const ACCEPTED_KEYS: &[&str] = &[
    "process.roles",
    "controller.quorum.voters",
    "controller.quorum.bootstrap.servers",
    "controller.listener.names",
    "inter.broker.listener.name",
    "listener.security.protocol.map",
    "num.network.threads",
    "num.io.threads",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
    "zookeeper.connect",
    "broker.rack",
    "controller.quorum.election.timeout.ms",
    "controller.quorum.fetch.timeout.ms",
    "broker.session.timeout.ms",
    "broker.heartbeat.interval.ms",
];

/// The file's pairs (Java properties syntax, see [`crate::properties`]),
/// values trimmed as Kafka's `ConfigDef` trims them.
fn parse_properties(text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let pairs = crate::properties::parse(text).map_err(|e| ConfigError {
        key: format!("at line {}", e.line),
        value: text.lines().nth(e.line - 1).unwrap_or_default().to_owned(),
        reason: "malformed \\uXXXX escape".into(),
    })?;
    Ok(pairs.into_iter().map(|(key, value)| (key, value.trim().to_owned())).collect())
}

/// Typed access to the provided keys, each failure naming its key.
struct Props<'a>(&'a BTreeMap<String, String>);

impl Props<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn error(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError { key: key.into(), value: value.into(), reason: reason.into() }
    }

    fn parse<T>(&self, key: &str, default: T, min: T) -> Result<T, ConfigError>
    where
        T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
    {
        let Some(raw) = self.get(key) else { return Ok(default) };
        let value: T = raw.parse().map_err(|_| Self::error(key, raw, "expected a number"))?;
        if value < min {
            return Err(Self::error(key, raw, format!("value must be at least {min}")));
        }
        Ok(value)
    }

    /// A number that is left unset unless given.
    fn optional<T>(&self, key: &str, min: T) -> Result<Option<T>, ConfigError>
    where
        T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
    {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.parse(key, min, min).map(Some),
        }
    }

    fn bool(&self, key: &str, default: bool) -> Result<bool, ConfigError> {
        match self.get(key).map(str::to_ascii_lowercase).as_deref() {
            None => Ok(default),
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(raw) => Err(Self::error(key, raw, "expected true or false")),
        }
    }

    fn listeners(&self, key: &str) -> Result<Option<Vec<Listener>>, ConfigError> {
        let Some(raw) = self.get(key) else { return Ok(None) };
        raw.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|item| parse_listener(item).map_err(|reason| Self::error(key, raw, reason)))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

impl Props<'_> {
    fn metrics_listener(&self, key: &str) -> Result<Option<SocketAddr>, ConfigError> {
        let Some(raw) = self.get(key).filter(|v| !v.trim().is_empty()) else { return Ok(None) };
        let address = raw
            .trim()
            .strip_prefix("http://")
            .ok_or_else(|| Self::error(key, raw, "expected http://HOST:PORT"))?;
        let listener =
            parse_listener(&format!("HTTP://{address}")).map_err(|reason| Self::error(key, raw, reason))?;
        listener.socket_addr().map(Some).map_err(|reason| Self::error(key, raw, reason))
    }
}

fn parse_listener(item: &str) -> Result<Listener, String> {
    let (name, rest) = item.split_once("://").ok_or("expected NAME://HOST:PORT")?;
    let (host, port) = rest.rsplit_once(':').ok_or("expected NAME://HOST:PORT")?;
    let port = port.parse().map_err(|_| format!("{port:?} is not a port"))?;
    if name.is_empty() {
        return Err("listener name is empty".into());
    }
    Ok(Listener { name: name.to_owned(), host: host.to_owned(), port })
}

const SECURITY_PROTOCOLS: &[&str] = &["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"];

/// Refuses a listener that `listener.security.protocol.map` gives no
/// security protocol.
fn check_security_protocols(p: &Props<'_>, listeners: &[Listener]) -> Result<(), ConfigError> {
    let map = security_protocol_map(p)?;
    let raw = p.get("listeners").unwrap_or("");
    for listener in listeners {
        let name = listener.name.to_ascii_uppercase();
        if !map.contains_key(&name) {
            let reason =
                format!("no security protocol defined for listener {name} in listener.security.protocol.map");
            return Err(Props::error("listeners", raw, reason));
        }
    }
    Ok(())
}

/// `listener.security.protocol.map` (upper-cased names), Kafka's default
/// when unset: each protocol's own name, and the controller listeners as
/// PLAINTEXT.
fn security_protocol_map(p: &Props<'_>) -> Result<BTreeMap<String, String>, ConfigError> {
    let key = "listener.security.protocol.map";
    let Some(raw) = p.get(key) else {
        let own = SECURITY_PROTOCOLS.iter().map(|name| (name.to_string(), name.to_string()));
        let controllers = controller_listener_names(p).into_iter().map(|name| (name, "PLAINTEXT".to_owned()));
        return Ok(controllers.chain(own).collect());
    };
    let mut map = BTreeMap::new();
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, protocol) =
            entry.split_once(':').ok_or_else(|| Props::error(key, raw, "expected NAME:PROTOCOL"))?;
        let protocol = protocol.trim().to_ascii_uppercase();
        if !SECURITY_PROTOCOLS.contains(&protocol.as_str()) {
            return Err(Props::error(key, raw, format!("{protocol} is not a security protocol")));
        }
        map.insert(name.trim().to_ascii_uppercase(), protocol);
    }
    Ok(map)
}

fn controller_listener_names(p: &Props<'_>) -> Vec<String> {
    let names = p.get("controller.listener.names").unwrap_or("").split(',');
    names.map(str::trim).filter(|n| !n.is_empty()).map(str::to_ascii_uppercase).collect()
}

/// `advertised.listeners`, by default the listeners that are not the
/// controller's. Each must name a listener, and none may advertise
/// 0.0.0.0: no client can connect to the meta-address.
fn advertised_listeners(p: &Props<'_>, listeners: &[Listener]) -> Result<Vec<Listener>, ConfigError> {
    let key = "advertised.listeners";
    let Some(advertised) = p.listeners(key)? else {
        let controllers = controller_listener_names(p);
        let brokers = listeners.iter().filter(|l| !controllers.contains(&l.name.to_ascii_uppercase()));
        return Ok(brokers.cloned().collect());
    };
    let raw = p.get(key).unwrap_or("");
    for listener in &advertised {
        if !listeners.iter().any(|l| l.name.eq_ignore_ascii_case(&listener.name)) {
            return Err(Props::error(key, raw, format!("{} is not a listener in listeners", listener.name)));
        }
        if listener.host == "0.0.0.0" {
            let reason =
                "cannot advertise the non-routable meta-address 0.0.0.0; use a routable host or address";
            return Err(Props::error(key, raw, reason));
        }
    }
    Ok(advertised)
}

impl BrokerConfig {
    /// The security protocol of listener `name`, by
    /// `listener.security.protocol.map` (checked when the config was read).
    pub fn security_protocol(&self, name: &str) -> Option<crate::security::SecurityProtocol> {
        let map = security_protocol_map(&Props(&self.provided)).ok()?;
        map.get(&name.to_ascii_uppercase()).and_then(|p| crate::security::SecurityProtocol::parse(p))
    }

    /// The endpoint advertised to a client connected on listener `name`,
    /// as Kafka answers: the advertised listener of that name, where a bind
    /// to all interfaces (empty host or `0.0.0.0`) stands for the machine's
    /// canonical host name. `None` when that listener is not advertised.
    pub fn advertised_endpoint(&self, name: &str) -> Option<(String, u16)> {
        let listener = self.advertised_listeners.iter().find(|l| l.name.eq_ignore_ascii_case(name))?;
        let host = match listener.host.as_str() {
            "" | "0.0.0.0" => crate::host_name::canonical().to_owned(),
            host => host.to_owned(),
        };
        Some((host, listener.port))
    }

    /// `host:port` of broker `id`'s inter-broker listener, as registered in `image`.
    pub fn inter_broker_address(&self, image: &MetadataImage, id: i32) -> Option<String> {
        let endpoint = image.brokers.get(&id)?.endpoint(&self.kraft.inter_broker_listener_name)?;
        Some(format!("{}:{}", endpoint.host, endpoint.port))
    }

    /// `logging.level` (Strom's own; a `tracing` filter such as
    /// `info,strom_storage=debug`), read ahead of the rest so logging is set
    /// up before the config's own warnings are logged.
    pub fn logging_filter(text: &str, overrides: &[(String, String)]) -> Option<String> {
        Self::early_value(text, overrides, "logging.level")
    }

    /// `log.format` (Strom's own: `text` or `json`), read ahead as
    /// `logging.level` is.
    pub fn log_format(text: &str, overrides: &[(String, String)]) -> Option<String> {
        Self::early_value(text, overrides, "log.format")
    }

    fn early_value(text: &str, overrides: &[(String, String)], key: &str) -> Option<String> {
        let from_file = parse_properties(text).unwrap_or_default().into_iter();
        let pairs = from_file.chain(overrides.iter().cloned());
        pairs.filter(|(k, _)| k == key).map(|(_, v)| v).next_back()
    }

    /// Builds the config from a properties file's text and overrides (which win).
    pub fn from_properties(text: &str, overrides: &[(String, String)]) -> Result<Self, ConfigError> {
        let mut provided = BTreeMap::new();
        for (key, value) in parse_properties(text)?.into_iter().chain(overrides.iter().cloned()) {
            provided.insert(key, value);
        }
        let config = Self::from_map(provided)?;
        for key in config.provided.keys() {
            if !is_known_key(key) {
                tracing::warn!(key, "ignoring unknown configuration key");
            }
        }
        Ok(config)
    }

    /// A single-node broker on 127.0.0.1:9092 storing data under `./strom-data`.
    pub fn embedded_defaults() -> Self {
        Self::from_map(BTreeMap::new()).expect("defaults are valid")
    }

    fn from_map(provided: BTreeMap<String, String>) -> Result<Self, ConfigError> {
        check_kafka_numbers(&provided)?;
        let p = Props(&provided);
        let node_id = match (p.get("node.id"), p.get("broker.id")) {
            (Some(_), _) => p.parse("node.id", 1, 0)?,
            (None, Some(_)) => p.parse("broker.id", 1, 0)?,
            (None, None) => 1,
        };
        if p.get("broker.id").is_some() && p.parse("broker.id", node_id, 0)? != node_id {
            let reason = "You must set `node.id` to the same value as `broker.id`.";
            return Err(Props::error("broker.id", p.get("broker.id").unwrap_or(""), reason));
        }
        let default_listener = Listener { name: "PLAINTEXT".into(), host: "127.0.0.1".into(), port: 9092 };
        let listeners = p.listeners("listeners")?.unwrap_or_else(|| vec![default_listener]);
        if listeners.is_empty() {
            return Err(Props::error("listeners", p.get("listeners").unwrap_or(""), "no listener given"));
        }
        for listener in &listeners {
            listener
                .socket_addr()
                .map_err(|reason| Props::error("listeners", p.get("listeners").unwrap_or(""), reason))?;
        }
        check_security_protocols(&p, &listeners)?;
        let advertised_listeners = advertised_listeners(&p, &listeners)?;
        let node_id_given = p.get("node.id").is_some() || p.get("broker.id").is_some();
        let kraft = KraftConfig::parse(&provided, node_id, node_id_given, &listeners, &advertised_listeners)?;
        let log_dirs: Vec<PathBuf> = p
            .get("log.dirs")
            .or(p.get("log.dir"))
            .unwrap_or("./strom-data")
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .collect();
        if log_dirs.is_empty() {
            return Err(Props::error("log.dirs", p.get("log.dirs").unwrap_or(""), "no directory given"));
        }
        let metadata_log_dir =
            p.get("metadata.log.dir").map(PathBuf::from).unwrap_or_else(|| log_dirs[0].clone());
        let roll_ms = match p.get("log.roll.ms") {
            Some(_) => p.parse("log.roll.ms", 0i64, 1)?,
            None => p.parse("log.roll.hours", 168i64, 1)? * 3_600_000,
        };
        let timestamp_type = match p.get("log.message.timestamp.type") {
            None => TimestampType::CreateTime,
            Some(raw) => {
                raw.parse().map_err(|reason| Props::error("log.message.timestamp.type", raw, reason))?
            }
        };
        let flush_ms = match p.get("log.flush.interval.ms") {
            Some(_) => p.parse("log.flush.interval.ms", i64::MAX, 0)?,
            None => i64::MAX,
        };
        let retention_ms = match (p.get("log.retention.ms"), p.get("log.retention.minutes")) {
            (Some(_), _) => p.parse("log.retention.ms", -1i64, -1)?,
            (None, Some(_)) => minutes_or_unlimited(p.parse("log.retention.minutes", -1i64, -1)?),
            (None, None) => hours_or_unlimited(p.parse("log.retention.hours", 168i64, -1)?),
        };
        let cleanup_policy = match p.get("log.cleanup.policy") {
            None => CleanupPolicy::DELETE,
            Some(raw) => raw.parse().map_err(|reason| Props::error("log.cleanup.policy", raw, reason))?,
        };
        let log = LogConfig {
            segment_bytes: p.parse("log.segment.bytes", 1u64 << 30, 14)?,
            segment_ms: roll_ms,
            index_interval_bytes: p.parse("log.index.interval.bytes", 4096usize, 0)?,
            max_index_bytes: p.parse("log.index.size.max.bytes", 10usize << 20, 4)?,
            max_message_bytes: p.parse("message.max.bytes", 1_048_588usize, 0)?,
            timestamp_type,
            flush_interval_messages: p.parse("log.flush.interval.messages", i64::MAX as u64, 1)?,
            flush_interval_ms: flush_ms,
            cleanup_policy,
            retention_ms,
            retention_bytes: p.parse("log.retention.bytes", -1i64, i64::MIN)?,
            file_delete_delay_ms: p.parse("log.segment.delete.delay.ms", 60_000i64, 0)?,
            delete_retention_ms: p.parse("log.cleaner.delete.retention.ms", 86_400_000i64, 0)?,
            min_cleanable_dirty_ratio: p.parse("log.cleaner.min.cleanable.ratio", 0.5f64, 0.0)?,
            min_compaction_lag_ms: p.parse("log.cleaner.min.compaction.lag.ms", 0i64, 0)?,
            max_compaction_lag_ms: p.parse("log.cleaner.max.compaction.lag.ms", i64::MAX, 1)?,
            timestamp_before_max_ms: p.parse("log.message.timestamp.before.max.ms", i64::MAX, 0)?,
            timestamp_after_max_ms: p.parse(
                "log.message.timestamp.after.max.ms",
                strom_storage::log::DEFAULT_TIMESTAMP_AFTER_MAX_MS,
                0,
            )?,
        };
        if log.min_cleanable_dirty_ratio > 1.0 {
            let raw = p.get("log.cleaner.min.cleanable.ratio").unwrap_or("");
            return Err(Props::error("log.cleaner.min.cleanable.ratio", raw, "value must be at most 1"));
        }
        Ok(Self {
            node_id,
            listeners,
            advertised_listeners,
            log_dirs,
            metadata_log_dir,
            num_partitions: p.parse("num.partitions", 1, 1)?,
            max_partitions_per_request: p.parse(
                "controller.max.partitions.per.request",
                strom_metadata::DEFAULT_MAX_PARTITIONS_PER_REQUEST,
                1,
            )?,
            default_replication_factor: p.parse("default.replication.factor", 1, 1)?,
            auto_create_topics_enable: p.bool("auto.create.topics.enable", true)?,
            socket_request_max_bytes: p.parse("socket.request.max.bytes", 100 << 20, 1)?,
            min_insync_replicas: p.parse("min.insync.replicas", 1, 1)?,
            log_flush_offset_checkpoint_interval_ms: p.parse(
                "log.flush.offset.checkpoint.interval.ms",
                60_000,
                1,
            )?,
            replica_fetch: ReplicaFetchConfig {
                fetchers: p.parse("num.replica.fetchers", 1, 1)?,
                max_bytes: p.parse("replica.fetch.max.bytes", 1 << 20, 0)?,
                response_max_bytes: p.parse("replica.fetch.response.max.bytes", 10 << 20, 0)?,
                wait_max_ms: p.parse("replica.fetch.wait.max.ms", 500, 0)?,
                min_bytes: p.parse("replica.fetch.min.bytes", 1, 1)?,
                backoff_ms: p.parse("replica.fetch.backoff.ms", 1000, 0)?,
            },
            replica_lag_time_max_ms: p.parse("replica.lag.time.max.ms", 30_000, 1)?,
            replica_selector: ReplicaSelector::parse(p.get("replica.selector.class")).map_err(|reason| {
                Props::error("replica.selector.class", p.get("replica.selector.class").unwrap_or(""), reason)
            })?,
            replication_throttle: ReplicationThrottleConfig {
                leader_rate: p.parse(strom_metadata::topic_config::LEADER_THROTTLED_RATE, i64::MAX, 0)?,
                follower_rate: p.parse(strom_metadata::topic_config::FOLLOWER_THROTTLED_RATE, i64::MAX, 0)?,
                window: crate::quota::QuotaWindow {
                    samples: p.parse("replication.quota.window.num", 11, 1)?,
                    window_ms: p.parse::<u64>("replication.quota.window.size.seconds", 1, 1)? * 1000,
                },
            },
            replica_high_watermark_checkpoint_interval_ms: p.parse(
                "replica.high.watermark.checkpoint.interval.ms",
                5_000,
                1,
            )?,
            log_flush_scheduler_interval_ms: p.parse("log.flush.scheduler.interval.ms", 1_000, 1)?,
            max_incremental_fetch_session_cache_slots: p.parse::<i32>(
                "max.incremental.fetch.session.cache.slots",
                1000,
                0,
            )? as usize,
            fetch_max_bytes: p.parse("fetch.max.bytes", 55 << 20, 1024)?,
            max_connections: p.parse("max.connections", 10_000, 1)?,
            connection_limits: crate::quota::connections::ConnectionLimitConfig {
                per_ip: p.parse("max.connections.per.ip", i32::MAX as usize, 0)?,
                overrides: match p.get("max.connections.per.ip.overrides") {
                    None => Default::default(),
                    Some(raw) => crate::quota::connections::parse_overrides(raw)
                        .map_err(|why| Props::error("max.connections.per.ip.overrides", raw, why))?,
                },
            },
            quota_window: crate::quota::QuotaWindow {
                samples: p.parse("quota.window.num", 11, 1)?,
                window_ms: p.parse::<u64>("quota.window.size.seconds", 1, 1)? * 1000,
            },
            zero_copy_fetch: p.bool("fetch.zero.copy.enable", true)?,
            metrics_listener: p.metrics_listener("metrics.listener")?,
            console: crate::console::ConsoleConfig::parse(&provided)?,
            authorizer: crate::security::authorizer::AuthorizerConfig::parse(|key| p.get(key))
                .map_err(|(key, value, reason)| Props::error(&key, &value, reason))?,
            log_retention_check_interval_ms: p.parse("log.retention.check.interval.ms", 300_000, 1)?,
            producer_id_expiration_ms: p.parse("producer.id.expiration.ms", 86_400_000, 1)?,
            auto_leader_rebalance_enable: p.bool("auto.leader.rebalance.enable", true)?,
            leader_imbalance_check_interval_seconds: p.parse(
                "leader.imbalance.check.interval.seconds",
                300,
                1,
            )?,
            producer_id_expiration_check_interval_ms: p.parse(
                "producer.id.expiration.check.interval.ms",
                600_000,
                1,
            )?,
            num_recovery_threads_per_data_dir: p.parse(
                "num.recovery.threads.per.data.dir",
                strom_storage::manager::DEFAULT_THREADS_PER_DIR,
                1,
            )?,
            log_segment_open_files_max: p.parse(
                "log.segment.open.files.max",
                strom_storage::file_cache::DEFAULT_CAPACITY,
                1,
            )?,
            cleaner: CleanerConfig {
                enable: p.bool("log.cleaner.enable", true)?,
                threads: p.parse("log.cleaner.threads", 1, 0)?,
                dedupe_buffer_size: p.parse("log.cleaner.dedupe.buffer.size", 128 << 20, 1 << 20)?,
                io_buffer_size: p.parse("log.cleaner.io.buffer.size", 512 << 10, 4096)?,
                backoff_ms: p.parse("log.cleaner.backoff.ms", 15_000, 0)?,
            },
            groups: GroupConfig {
                offsets_topic_partitions: p.parse("offsets.topic.num.partitions", 50, 1)?,
                offsets_topic_segment_bytes: p.parse("offsets.topic.segment.bytes", 100 << 20, 1)?,
                offsets_topic_replication_factor: p.optional("offsets.topic.replication.factor", 1)?,
                min_session_timeout_ms: p.parse("group.min.session.timeout.ms", 6_000, 0)?,
                max_session_timeout_ms: p.parse("group.max.session.timeout.ms", 1_800_000, 0)?,
                initial_rebalance_delay_ms: p.parse("group.initial.rebalance.delay.ms", 3_000, 0)?,
                max_size: p.parse("group.max.size", i32::MAX as usize, 1)?,
                offset_metadata_max_bytes: p.parse("offset.metadata.max.bytes", 4096, 0)?,
                offsets_commit_timeout_ms: p.parse("offsets.commit.timeout.ms", 5_000, 1)?,
                offsets_retention_ms: p.parse("offsets.retention.minutes", 10_080i64, 1)? * 60_000,
                offsets_retention_check_interval_ms: p.parse(
                    "offsets.retention.check.interval.ms",
                    600_000,
                    1,
                )?,
                consumer_session_timeout_ms: p.parse("group.consumer.session.timeout.ms", 45_000, 1)?,
                consumer_heartbeat_interval_ms: p.parse("group.consumer.heartbeat.interval.ms", 5_000, 1)?,
            },
            transactions: TxnConfig {
                state_log_partitions: p.parse("transaction.state.log.num.partitions", 50, 1)?,
                state_log_segment_bytes: p.parse("transaction.state.log.segment.bytes", 100 << 20, 1)?,
                state_log_replication_factor: p.optional("transaction.state.log.replication.factor", 1)?,
                state_log_min_isr: p.optional("transaction.state.log.min.isr", 1)?,
                max_timeout_ms: p.parse("transaction.max.timeout.ms", 900_000, 1)?,
                abort_timed_out_interval_ms: p.parse(
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                    10_000,
                    1,
                )?,
                id_expiration_ms: p.parse("transactional.id.expiration.ms", 604_800_000, 1)?,
                remove_expired_interval_ms: p.parse(
                    "transaction.remove.expired.transaction.cleanup.interval.ms",
                    3_600_000,
                    1,
                )?,
                partition_verification: p.bool("transaction.partition.verification.enable", true)?,
                // Kafka's coordinator waits this long for the ISR to hold a state.
                request_timeout_ms: p.parse("request.timeout.ms", 30_000, 1)?,
            },
            log,
            kraft,
            provided,
        })
    }

    /// This broker's config with the dynamic broker configs applied:
    /// per-broker values over cluster-wide defaults over `server.properties`.
    /// Synonyms resolve as in Kafka, finest unit first whatever level set
    /// it. `provided` stays the static set.
    pub fn with_dynamic(
        &self,
        cluster_default: &BTreeMap<String, String>,
        per_broker: &BTreeMap<String, String>,
    ) -> Result<Self, ConfigError> {
        let mut merged = self.provided.clone();
        merged.extend(cluster_default.iter().chain(per_broker).map(|(k, v)| (k.clone(), v.clone())));
        let mut config = Self::from_map(merged)?;
        config.provided = self.provided.clone();
        Ok(config)
    }

    /// [`Self::with_dynamic`] with the dynamic configs `image` holds for this
    /// broker; the static config if they do not parse (the controller
    /// validated them when they were written).
    pub fn with_dynamic_from(&self, image: &MetadataImage) -> Self {
        let per_broker = image.broker_configs(&self.node_id.to_string());
        self.with_dynamic(image.broker_configs(""), per_broker).unwrap_or_else(|e| {
            tracing::error!("ignoring the dynamic broker configs: {e}");
            self.clone()
        })
    }

    /// The log config of a topic: broker defaults overlaid with its overrides
    /// (already validated by the controller).
    pub fn log_config_for(&self, overrides: &BTreeMap<String, String>) -> LogConfig {
        let mut config = self.log.clone();
        for (key, value) in overrides {
            let value = value.trim();
            match key.as_str() {
                "segment.bytes" => set(&mut config.segment_bytes, value),
                "segment.ms" => set(&mut config.segment_ms, value),
                "index.interval.bytes" => set(&mut config.index_interval_bytes, value),
                "segment.index.bytes" => set(&mut config.max_index_bytes, value),
                "max.message.bytes" => set(&mut config.max_message_bytes, value),
                "flush.messages" => set(&mut config.flush_interval_messages, value),
                "flush.ms" => set(&mut config.flush_interval_ms, value),
                "message.timestamp.type" => set(&mut config.timestamp_type, value),
                "cleanup.policy" => set(&mut config.cleanup_policy, value),
                "retention.ms" => set(&mut config.retention_ms, value),
                "retention.bytes" => set(&mut config.retention_bytes, value),
                "file.delete.delay.ms" => set(&mut config.file_delete_delay_ms, value),
                "delete.retention.ms" => set(&mut config.delete_retention_ms, value),
                "min.cleanable.dirty.ratio" => set(&mut config.min_cleanable_dirty_ratio, value),
                "min.compaction.lag.ms" => set(&mut config.min_compaction_lag_ms, value),
                "max.compaction.lag.ms" => set(&mut config.max_compaction_lag_ms, value),
                "message.timestamp.before.max.ms" => set(&mut config.timestamp_before_max_ms, value),
                "message.timestamp.after.max.ms" => set(&mut config.timestamp_after_max_ms, value),
                _ => {}
            }
        }
        config
    }
}

/// Kafka's type and range for every numeric key given: an int must fit 32
/// bits, a long 64 (as `config_sources` types them), a short 16, and the
/// log defaults take their topic config's range. Values that would parse
/// into a wider Rust field (`log.segment.bytes=5000000000`) are refused, as
/// Kafka refuses them.
fn check_kafka_numbers(provided: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    for (key, value) in provided {
        if ACCEPTED_SHORTS.contains(&key.as_str()) {
            check_short(value).map_err(|reason| Props::error(key, value, reason))?;
        }
        let Some(kind) = kafka_number_kind(key) else { continue };
        check_value(kind, value).map_err(|reason| Props::error(key, value, reason))?;
    }
    Ok(())
}

/// Kafka's ints among the keys Strom accepts without acting on, with
/// their minimum: a value Kafka would refuse is refused here too.
const ACCEPTED_INTS: &[(&str, i32)] = &[
    ("num.network.threads", 1),
    ("num.io.threads", 1),
    ("socket.send.buffer.bytes", i32::MIN),
    ("socket.receive.buffer.bytes", i32::MIN),
];

/// Kafka's shorts among the keys Strom accepts without acting on; each
/// must be at least 1.
const ACCEPTED_SHORTS: &[&str] =
    &["share.coordinator.state.topic.replication.factor", "share.coordinator.state.topic.min.isr"];

fn check_short(value: &str) -> Result<(), String> {
    match value.trim().parse::<i16>() {
        Ok(v) if v >= 1 => Ok(()),
        Ok(_) => Err("value must be at least 1".into()),
        Err(_) => Err("expected a 16-bit integer".into()),
    }
}

/// The kind of a numeric broker key: its topic config's when it is a log
/// default, Kafka's for an accepted-only key, else its type with no bound
/// (`from_map`'s parsing applies the minimum).
fn kafka_number_kind(key: &str) -> Option<Kind> {
    let log_default = dynamic_broker_config_kind(key);
    let number = |kind: &Kind| matches!(kind, Kind::Int { .. } | Kind::Long { .. } | Kind::Double { .. });
    if let Some(kind) = log_default {
        return number(&kind).then_some(kind);
    }
    if let Some((_, min)) = ACCEPTED_INTS.iter().find(|(name, _)| *name == key) {
        return Some(Kind::Int { min: *min });
    }
    match crate::config_sources::broker_key(key)?.config_type {
        config_type::INT => Some(Kind::Int { min: i32::MIN }),
        config_type::LONG => Some(Kind::Long { min: i64::MIN }),
        _ => None,
    }
}

fn hours_or_unlimited(hours: i64) -> i64 {
    if hours < 0 {
        -1
    } else {
        hours.saturating_mul(3_600_000)
    }
}

fn minutes_or_unlimited(minutes: i64) -> i64 {
    if minutes < 0 {
        -1
    } else {
        minutes.saturating_mul(60_000)
    }
}

fn set<T: std::str::FromStr>(field: &mut T, value: &str) {
    if let Ok(parsed) = value.parse() {
        *field = parsed;
    }
}

/// How followers fetch from their leaders: Kafka's `num.replica.fetchers`
/// and `replica.fetch.*` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaFetchConfig {
    pub fetchers: i32,
    pub max_bytes: i32,
    pub response_max_bytes: i32,
    pub wait_max_ms: i32,
    pub min_bytes: i32,
    pub backoff_ms: u64,
}

/// Kafka's `replica.selector.class`: the leader answers consumers alone
/// unless a selector is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaSelector {
    /// Unset: consumers fetch from the leader.
    LeaderOnly,
    /// `org.apache.kafka.common.replica.RackAwareReplicaSelector`: a
    /// consumer is sent to an in-sync replica in its `client.rack`.
    RackAware,
}

impl ReplicaSelector {
    const RACK_AWARE_CLASS: &str = "org.apache.kafka.common.replica.RackAwareReplicaSelector";

    fn parse(class: Option<&str>) -> Result<Self, String> {
        match class.map(str::trim) {
            None | Some("") => Ok(Self::LeaderOnly),
            Some(Self::RACK_AWARE_CLASS) => Ok(Self::RackAware),
            Some(other) => {
                Err(format!("Class {other} cannot be found (Strom knows {})", Self::RACK_AWARE_CLASS))
            }
        }
    }
}

/// KIP-73's replication throttles: `leader.replication.throttled.rate`
/// and `follower.replication.throttled.rate` (bytes/s), measured over
/// `replication.quota.window.num` windows of
/// `replication.quota.window.size.seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicationThrottleConfig {
    pub leader_rate: i64,
    pub follower_rate: i64,
    pub window: crate::quota::QuotaWindow,
}

/// Keys Strom reads (the broker keys DescribeConfigs lists), plus the
/// standard ones it accepts without acting on.
pub fn is_known_key(key: &str) -> bool {
    crate::config_sources::BROKER_KEYS.iter().any(|k| k.name == key)
        || ACCEPTED_KEYS.contains(&key)
        || crate::kraft_config::TIMEOUT_KEYS.iter().any(|(name, _)| *name == key)
        || crate::console::config::KEYS.contains(&key)
        || crate::security::is_security_key(key)
        || crate::security::authorizer::KEYS.contains(&key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kafka_properties_and_overrides() {
        let text = "# comment\nnode.id=3\nlisteners=PLAINTEXT://127.0.0.1:9999\nlog.dirs=/a, /b\nnum.partitions: 6\n";
        let overrides = vec![("num.partitions".to_owned(), "8".to_owned())];
        let config = BrokerConfig::from_properties(text, &overrides).unwrap();
        assert_eq!(config.node_id, 3);
        assert_eq!(config.listeners[0].port, 9999);
        assert_eq!(config.advertised_listeners, config.listeners);
        assert_eq!(config.log_dirs, vec![PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(config.num_partitions, 8);
    }

    #[test]
    fn reads_java_properties_syntax_in_full() {
        let text = "node.id 4\nlisteners PLAINTEXT://127.0.0.1:9999\nlog.dirs = /a,\\\n    /b\nnum.partitions\t6  \n";
        let config = BrokerConfig::from_properties(text, &[]).unwrap();
        assert_eq!(config.node_id, 4);
        assert_eq!(config.listeners[0].port, 9999);
        assert_eq!(config.log_dirs, vec![PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(config.num_partitions, 6);
        let error = BrokerConfig::from_properties("node.id=1\nlog.dirs=\\u00zz\n", &[]).unwrap_err();
        assert!(error.to_string().contains("line 2"), "{error}");
    }

    #[test]
    fn embedded_defaults_match_the_readme() {
        let config = BrokerConfig::embedded_defaults();
        assert_eq!(config.listeners[0].socket_addr().unwrap(), "127.0.0.1:9092".parse().unwrap());
        assert_eq!(config.log_dirs, vec![PathBuf::from("./strom-data")]);
        assert_eq!(config.log.segment_bytes, 1 << 30);
        assert_eq!(config.log.segment_ms, 168 * 3_600_000);
        assert_eq!(config.log.max_message_bytes, 1_048_588);
        assert_eq!(config.log.retention_ms, 168 * 3_600_000);
        assert_eq!(config.log.retention_bytes, -1);
        assert_eq!(config.log.cleanup_policy, CleanupPolicy::DELETE);
        assert_eq!(config.log_retention_check_interval_ms, 300_000);
        assert_eq!(config.producer_id_expiration_ms, 86_400_000);
        assert_eq!(config.producer_id_expiration_check_interval_ms, 600_000);
    }

    #[test]
    fn logging_level_comes_from_the_last_setting() {
        assert_eq!(BrokerConfig::logging_filter("num.partitions=1\n", &[]), None);
        let text = "logging.level=warn\n";
        assert_eq!(BrokerConfig::logging_filter(text, &[]).as_deref(), Some("warn"));
        let overrides = [("logging.level".to_owned(), "debug,strom_storage=trace".to_owned())];
        assert_eq!(
            BrokerConfig::logging_filter(text, &overrides).as_deref(),
            Some("debug,strom_storage=trace")
        );
    }

    #[test]
    fn metrics_listener_must_be_an_http_address() {
        let parse =
            |value: &str| BrokerConfig::from_properties("", &[("metrics.listener".into(), value.into())]);
        assert_eq!(
            parse("http://127.0.0.1:9404").unwrap().metrics_listener,
            Some("127.0.0.1:9404".parse().unwrap())
        );
        assert_eq!(parse("").unwrap().metrics_listener, None);
        for bad in ["127.0.0.1:9404", "https://127.0.0.1:9404", "http://localhost:x"] {
            assert_eq!(parse(bad).unwrap_err().key, "metrics.listener", "{bad}");
        }
    }

    #[test]
    fn retention_ms_wins_over_minutes_and_hours() {
        let parse = |pairs: &[(&str, &str)]| {
            let pairs: Vec<_> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            BrokerConfig::from_properties("", &pairs).unwrap().log.retention_ms
        };
        assert_eq!(parse(&[("log.retention.hours", "1")]), 3_600_000);
        assert_eq!(parse(&[("log.retention.hours", "1"), ("log.retention.minutes", "2")]), 120_000);
        assert_eq!(parse(&[("log.retention.minutes", "2"), ("log.retention.ms", "5")]), 5);
        assert_eq!(parse(&[("log.retention.hours", "-1")]), -1);
    }

    #[test]
    fn the_replica_selector_and_replication_throttles_take_kafkas_names_and_defaults() {
        let defaults = BrokerConfig::from_properties("", &[]).unwrap();
        assert_eq!(defaults.replica_selector, ReplicaSelector::LeaderOnly);
        assert_eq!(defaults.replication_throttle.leader_rate, i64::MAX);
        assert_eq!(defaults.replication_throttle.window, crate::quota::QuotaWindow::default());
        let class = "org.apache.kafka.common.replica.RackAwareReplicaSelector";
        let overrides = [("replica.selector.class".into(), class.into())];
        let config = BrokerConfig::from_properties("", &overrides).unwrap();
        assert_eq!(config.replica_selector, ReplicaSelector::RackAware);
        let dynamic = map(&[("follower.replication.throttled.rate", "1024")]);
        let config = defaults.with_dynamic(&dynamic, &map(&[])).unwrap();
        assert_eq!(config.replication_throttle.follower_rate, 1024);
    }

    #[test]
    fn invalid_values_name_their_key() {
        for (key, value) in [
            ("num.partitions", "zero"),
            ("num.partitions", "0"),
            ("auto.create.topics.enable", "maybe"),
            ("listeners", "localhost:9092"),
            ("log.message.timestamp.type", "Whenever"),
            ("replica.selector.class", "com.example.NearestReplicaSelector"),
            ("leader.replication.throttled.rate", "-1"),
        ] {
            let err = BrokerConfig::from_properties("", &[(key.into(), value.into())]).unwrap_err();
            assert_eq!(err.key, key);
            assert!(err.to_string().contains(key));
        }
    }

    #[test]
    fn numbers_take_kafkas_type_and_range() {
        let parse = |key: &str, value: &str| BrokerConfig::from_properties("", &[(key.into(), value.into())]);
        for (key, value) in [
            ("log.segment.bytes", "5000000000"),
            ("log.segment.bytes", "13"),
            ("log.index.size.max.bytes", "3"),
            ("message.max.bytes", "2147483648"),
            ("socket.request.max.bytes", "4294967296"),
            ("offsets.topic.segment.bytes", "3000000000"),
            ("transaction.state.log.segment.bytes", "3000000000"),
            ("log.cleaner.io.buffer.size", "-1"),
            ("log.message.timestamp.after.max.ms", "-1"),
            ("log.retention.ms", "-2"),
            ("log.roll.hours", "0"),
            ("num.recovery.threads.per.data.dir", "4294967297"),
            ("max.incremental.fetch.session.cache.slots", "99999999999"),
            ("num.io.threads", "0"),
            ("socket.send.buffer.bytes", "2147483648"),
            ("offsets.topic.replication.factor", "40000"),
            ("transaction.state.log.replication.factor", "0"),
        ] {
            let err = parse(key, value).unwrap_err();
            assert_eq!((err.key.as_str(), err.value.as_str()), (key, value));
            assert_eq!(err.to_string().lines().count(), 1, "{err}");
        }
        assert_eq!(parse("log.segment.bytes", "2147483647").unwrap().log.segment_bytes, 2_147_483_647);
        assert_eq!(parse("log.segment.bytes", "14").unwrap().log.segment_bytes, 14);
        let long = parse("log.cleaner.dedupe.buffer.size", "5000000000").unwrap();
        assert_eq!(long.cleaner.dedupe_buffer_size, 5_000_000_000, "a long may pass 32 bits");
        assert_eq!(BrokerConfig::embedded_defaults().log.timestamp_after_max_ms, 3_600_000);
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn dynamic_configs_overlay_static_ones() {
        let text = "log.segment.bytes=5000\nlog.retention.hours=5\nmessage.max.bytes=100\n";
        let config = BrokerConfig::from_properties(text, &[]).unwrap();
        let cluster_default = map(&[("log.segment.bytes", "6000"), ("message.max.bytes", "200")]);
        let per_broker = map(&[("message.max.bytes", "300")]);
        let dynamic = config.with_dynamic(&cluster_default, &per_broker).unwrap();
        assert_eq!(dynamic.log.segment_bytes, 6000);
        assert_eq!(dynamic.log.max_message_bytes, 300);
        assert_eq!(dynamic.log.retention_ms, 5 * 3_600_000);
        assert_eq!(dynamic.provided, config.provided, "provided stays the static set");
    }

    #[test]
    fn finer_units_win_whatever_level_sets_them() {
        let config = BrokerConfig::from_properties("log.retention.ms=1000\n", &[]).unwrap();
        let dynamic = config.with_dynamic(&map(&[("log.retention.hours", "2")]), &map(&[])).unwrap();
        assert_eq!(dynamic.log.retention_ms, 1000);
        let config = BrokerConfig::from_properties("log.retention.hours=1\n", &[]).unwrap();
        let dynamic = config.with_dynamic(&map(&[("log.retention.minutes", "2")]), &map(&[])).unwrap();
        assert_eq!(dynamic.log.retention_ms, 120_000);
    }

    #[test]
    fn invalid_dynamic_values_name_their_key() {
        let config = BrokerConfig::embedded_defaults();
        let err = config.with_dynamic(&map(&[("log.roll.ms", "0")]), &map(&[])).unwrap_err();
        assert_eq!(err.key, "log.roll.ms");
    }

    fn with(pairs: &[(&str, &str)]) -> Result<BrokerConfig, ConfigError> {
        let pairs: Vec<_> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        BrokerConfig::from_properties("", &pairs)
    }

    #[test]
    fn listeners_take_their_security_protocol_from_the_map() {
        use crate::security::SecurityProtocol;
        let mapped = [
            ("listeners", "INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093,SSL://127.0.0.1:9094"),
            ("listener.security.protocol.map", "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL,SSL:SSL"),
        ];
        let config = with(&mapped).unwrap();
        assert_eq!(config.security_protocol("internal"), Some(SecurityProtocol::Plaintext));
        assert_eq!(config.security_protocol("EXTERNAL"), Some(SecurityProtocol::SaslSsl));
        assert_eq!(config.security_protocol("SSL"), Some(SecurityProtocol::Ssl));
        let defaults = with(&[("listeners", "SASL_PLAINTEXT://127.0.0.1:9093")]).unwrap();
        assert_eq!(defaults.security_protocol("SASL_PLAINTEXT"), Some(SecurityProtocol::SaslPlaintext));
        let unmapped = with(&[("listeners", "CLIENT://127.0.0.1:9092")]).unwrap_err();
        assert!(unmapped.reason.contains("no security protocol defined for listener CLIENT"), "{unmapped}");
        let bad_protocol = [("listener.security.protocol.map", "PLAINTEXT:TLS")];
        assert_eq!(with(&bad_protocol).unwrap_err().key, "listener.security.protocol.map");
    }

    #[test]
    fn plaintext_listeners_by_any_name_are_served() {
        let mapped = [
            ("listeners", "INTERNAL://127.0.0.1:9092,external://127.0.0.1:9093"),
            ("listener.security.protocol.map", "INTERNAL:PLAINTEXT,EXTERNAL:plaintext"),
        ];
        assert_eq!(with(&mapped).unwrap().listeners.len(), 2);
        // Without a map, the controller listener is PLAINTEXT and not advertised.
        let controller = [
            ("listeners", "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"),
            ("controller.listener.names", "CONTROLLER"),
        ];
        let config = with(&controller).unwrap();
        let advertised: Vec<&str> = config.advertised_listeners.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(advertised, ["PLAINTEXT"]);
    }

    #[test]
    fn each_listener_advertises_its_own_endpoint() {
        let config = with(&[
            ("listeners", "INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093"),
            ("advertised.listeners", "INTERNAL://broker:9092,EXTERNAL://localhost:19093"),
            ("listener.security.protocol.map", "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT"),
        ])
        .unwrap();
        assert_eq!(config.advertised_endpoint("INTERNAL"), Some(("broker".to_owned(), 9092)));
        assert_eq!(config.advertised_endpoint("external"), Some(("localhost".to_owned(), 19093)));
        assert_eq!(config.advertised_endpoint("CONTROLLER"), None);
    }

    #[test]
    fn a_bind_to_every_interface_advertises_the_canonical_host_name() {
        for host in ["0.0.0.0", ""] {
            let config = with(&[("listeners", &format!("PLAINTEXT://{host}:9092"))]).unwrap();
            let (advertised, port) = config.advertised_endpoint("PLAINTEXT").unwrap();
            assert_eq!((advertised.as_str(), port), (crate::host_name::canonical(), 9092));
            assert_ne!(advertised, "0.0.0.0");
        }
    }

    #[test]
    fn advertised_listeners_must_be_routable_listeners() {
        let meta = with(&[("advertised.listeners", "PLAINTEXT://0.0.0.0:9092")]).unwrap_err();
        assert_eq!(meta.key, "advertised.listeners");
        assert!(meta.reason.contains("0.0.0.0"), "{meta}");
        let unknown = with(&[("advertised.listeners", "OTHER://host:9092")]).unwrap_err();
        assert!(unknown.reason.contains("OTHER is not a listener"), "{unknown}");
    }

    #[test]
    fn topic_overrides_replace_broker_defaults() {
        let config = BrokerConfig::embedded_defaults();
        let overrides = BTreeMap::from([
            ("segment.bytes".to_owned(), "1024".to_owned()),
            ("message.timestamp.type".to_owned(), "LogAppendTime".to_owned()),
        ]);
        let log = config.log_config_for(&overrides);
        assert_eq!(log.segment_bytes, 1024);
        assert_eq!(log.timestamp_type, TimestampType::LogAppendTime);
    }

    #[test]
    fn fetch_limits_take_kafkas_defaults_and_ranges() {
        let config = BrokerConfig::embedded_defaults();
        assert_eq!(
            (config.fetch_max_bytes, config.max_incremental_fetch_session_cache_slots),
            (57_671_680, 1000)
        );
        let parse = |key: &str, value: &str| BrokerConfig::from_properties("", &[(key.into(), value.into())]);
        assert_eq!(parse("fetch.max.bytes", "1024").unwrap().fetch_max_bytes, 1024);
        assert_eq!(
            parse("max.incremental.fetch.session.cache.slots", "0")
                .unwrap()
                .max_incremental_fetch_session_cache_slots,
            0
        );
        for (key, value) in [
            ("fetch.max.bytes", "1023"),
            ("fetch.max.bytes", "2147483648"),
            ("max.incremental.fetch.session.cache.slots", "-1"),
            ("max.incremental.fetch.session.cache.slots", "2147483648"),
        ] {
            assert_eq!(parse(key, value).unwrap_err().key, key, "{key}={value}");
        }
    }
}
