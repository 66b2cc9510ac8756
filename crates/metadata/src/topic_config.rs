//! Topic-level configs: Kafka's names, types and the broker configs that
//! supply their defaults. Those broker configs (Kafka's `DynamicLogConfig`)
//! are the ones that may also change at run time, cluster-wide or per broker.

/// The type and bounds of a config value.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Long {
        min: i64,
    },
    Int {
        min: i32,
    },
    /// An int within bounds, both inclusive.
    IntIn {
        min: i32,
        max: i32,
    },
    /// A gzip level: -1 (the codec's default) or 1 to 9.
    GzipLevel,
    /// Any string.
    Text,
    Double {
        min: f64,
        max: f64,
    },
    Bool,
    /// One of the listed values.
    Choice(&'static [&'static str]),
    /// A comma-separated list drawn from the listed values.
    List(&'static [&'static str]),
    /// Replicas to throttle (KIP-73): `*`, or `partition:broker` pairs
    /// separated by commas (empty for none).
    ReplicaList,
}

/// One topic config.
#[derive(Debug, Clone, Copy)]
pub struct TopicConfigDef {
    pub name: &'static str,
    pub kind: Kind,
    /// The broker config whose value is the default; empty for a topic
    /// config no broker config supplies.
    pub broker_synonym: &'static str,
    /// The default of a topic config without a broker synonym.
    pub default: &'static str,
}

const fn def(name: &'static str, kind: Kind, broker_synonym: &'static str) -> TopicConfigDef {
    TopicConfigDef { name, kind, broker_synonym, default: "" }
}

/// A topic config no broker config supplies, with its own default.
const fn topic_only(name: &'static str, kind: Kind, default: &'static str) -> TopicConfigDef {
    TopicConfigDef { name, kind, broker_synonym: "", default }
}

const CODECS: &[&str] = &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];

/// Every topic config Strom accepts.
pub const TOPIC_CONFIGS: &[TopicConfigDef] = &[
    def("cleanup.policy", Kind::List(&["delete", "compact"]), "log.cleanup.policy"),
    def("compression.type", Kind::Choice(CODECS), "compression.type"),
    def("compression.gzip.level", Kind::GzipLevel, "compression.gzip.level"),
    def("compression.lz4.level", Kind::IntIn { min: 1, max: 17 }, "compression.lz4.level"),
    def("compression.zstd.level", Kind::IntIn { min: -131_072, max: 22 }, "compression.zstd.level"),
    def("delete.retention.ms", Kind::Long { min: 0 }, "log.cleaner.delete.retention.ms"),
    topic_only("errors.deadletterqueue.group.enable", Kind::Bool, "false"),
    def("file.delete.delay.ms", Kind::Long { min: 0 }, "log.segment.delete.delay.ms"),
    def("flush.messages", Kind::Long { min: 1 }, "log.flush.interval.messages"),
    def("flush.ms", Kind::Long { min: 0 }, "log.flush.interval.ms"),
    def(FOLLOWER_THROTTLED_REPLICAS, Kind::ReplicaList, ""),
    def("index.interval.bytes", Kind::Int { min: 0 }, "log.index.interval.bytes"),
    def(LEADER_THROTTLED_REPLICAS, Kind::ReplicaList, ""),
    def("local.retention.bytes", Kind::Long { min: -2 }, "log.local.retention.bytes"),
    def("local.retention.ms", Kind::Long { min: -2 }, "log.local.retention.ms"),
    def("max.compaction.lag.ms", Kind::Long { min: 1 }, "log.cleaner.max.compaction.lag.ms"),
    def("max.decompressed.message.bytes", Kind::Int { min: 0 }, "max.decompressed.message.bytes"),
    def("max.message.bytes", Kind::Int { min: 0 }, "message.max.bytes"),
    def(
        "message.timestamp.type",
        Kind::Choice(&["CreateTime", "LogAppendTime"]),
        "log.message.timestamp.type",
    ),
    def("message.timestamp.before.max.ms", Kind::Long { min: 0 }, "log.message.timestamp.before.max.ms"),
    def("message.timestamp.after.max.ms", Kind::Long { min: 0 }, "log.message.timestamp.after.max.ms"),
    def("min.cleanable.dirty.ratio", Kind::Double { min: 0.0, max: 1.0 }, "log.cleaner.min.cleanable.ratio"),
    def("min.compaction.lag.ms", Kind::Long { min: 0 }, "log.cleaner.min.compaction.lag.ms"),
    def("min.insync.replicas", Kind::Int { min: 1 }, "min.insync.replicas"),
    def("preallocate", Kind::Bool, "log.preallocate"),
    def("remote.copy.lag.bytes", Kind::Long { min: -1 }, "log.remote.copy.lag.bytes"),
    def("remote.copy.lag.ms", Kind::Long { min: -1 }, "log.remote.copy.lag.ms"),
    topic_only("remote.log.copy.disable", Kind::Bool, "false"),
    topic_only("remote.log.delete.on.disable", Kind::Bool, "false"),
    topic_only(REMOTE_STORAGE_ENABLE, Kind::Bool, "false"),
    def("retention.bytes", Kind::Long { min: i64::MIN }, "log.retention.bytes"),
    def("retention.ms", Kind::Long { min: -1 }, "log.retention.ms"),
    def("segment.bytes", Kind::Int { min: 14 }, "log.segment.bytes"),
    def("segment.index.bytes", Kind::Int { min: 4 }, "log.index.size.max.bytes"),
    def("segment.jitter.ms", Kind::Long { min: 0 }, "log.roll.jitter.ms"),
    def("segment.ms", Kind::Long { min: 1 }, "log.roll.ms"),
    def("unclean.leader.election.enable", Kind::Bool, "unclean.leader.election.enable"),
];

/// Tiered storage for a topic (KIP-405), refused while the broker has none.
pub const REMOTE_STORAGE_ENABLE: &str = "remote.storage.enable";

/// The partitions whose replication the leader throttles (KIP-73).
pub const LEADER_THROTTLED_REPLICAS: &str = "leader.replication.throttled.replicas";
/// The partitions whose replication the follower throttles (KIP-73).
pub const FOLLOWER_THROTTLED_REPLICAS: &str = "follower.replication.throttled.replicas";

pub fn topic_config_def(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Checks a value against its kind; the error says what was expected.
pub fn check_value(kind: Kind, value: &str) -> Result<(), String> {
    let value = value.trim();
    match kind {
        Kind::Long { min } => match value.parse::<i64>() {
            Ok(v) if v >= min => Ok(()),
            Ok(_) => Err(format!("value must be at least {min}")),
            Err(_) => Err("expected a 64-bit integer".into()),
        },
        Kind::Int { min } => match value.parse::<i32>() {
            Ok(v) if v >= min => Ok(()),
            Ok(_) => Err(format!("value must be at least {min}")),
            Err(_) => Err("expected a 32-bit integer".into()),
        },
        Kind::IntIn { min, max } => match value.parse::<i32>() {
            Ok(v) if (min..=max).contains(&v) => Ok(()),
            Ok(_) => Err(format!("value must be between {min} and {max}")),
            Err(_) => Err("expected a 32-bit integer".into()),
        },
        Kind::GzipLevel => match value.parse::<i32>() {
            Ok(v) if v == -1 || (1..=9).contains(&v) => Ok(()),
            _ => Err("expected -1 or a level from 1 to 9".into()),
        },
        Kind::Text => Ok(()),
        Kind::Double { min, max } => match value.parse::<f64>() {
            Ok(v) if (min..=max).contains(&v) => Ok(()),
            _ => Err(format!("expected a number between {min} and {max}")),
        },
        Kind::Bool => match value.to_ascii_lowercase().as_str() {
            "true" | "false" => Ok(()),
            _ => Err("expected true or false".into()),
        },
        Kind::Choice(choices) if choices.contains(&value) => Ok(()),
        Kind::Choice(choices) => Err(format!("expected one of {}", choices.join(", "))),
        Kind::List(choices) => {
            let items: Vec<&str> = value.split(',').map(str::trim).collect();
            if items.iter().all(|item| choices.contains(item)) {
                Ok(())
            } else {
                Err(format!("expected a list of {}", choices.join(", ")))
            }
        }
        Kind::ReplicaList => match throttled_replicas(value) {
            Some(_) => Ok(()),
            None => Err("must be the literal '*' or a list of replicas in the following format: \
                 [partitionId]:[brokerId],[partitionId]:[brokerId],..."
                .into()),
        },
    }
}

/// A parsed `*.replication.throttled.replicas` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThrottledReplicas {
    /// `*`: every replica of the topic.
    All,
    /// `partition:broker` pairs.
    Listed(Vec<(i32, i32)>),
}

impl ThrottledReplicas {
    /// Whether `partition`'s replica on `broker` is throttled.
    pub fn contains(&self, partition: i32, broker: i32) -> bool {
        match self {
            Self::All => true,
            Self::Listed(pairs) => pairs.contains(&(partition, broker)),
        }
    }
}

/// Parses a throttled replica list as Kafka's `ThrottledReplicaListValidator`
/// accepts it: `*`, or items each empty or `digits:digits`; `None` if invalid.
pub fn throttled_replicas(value: &str) -> Option<ThrottledReplicas> {
    let items: Vec<&str> = value.split(',').map(str::trim).collect();
    if items.concat() == "*" {
        return Some(ThrottledReplicas::All);
    }
    let pair = |item: &str| -> Option<(i32, i32)> {
        let (partition, broker) = item.split_once(':')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(partition) || !digits(broker) {
            return None;
        }
        // Kafka's pattern takes any digits; ids beyond i32 name no replica.
        Some((partition.parse().unwrap_or(-1), broker.parse().unwrap_or(-1)))
    };
    let pairs: Option<Vec<(i32, i32)>> =
        items.iter().filter(|item| !item.is_empty()).map(|item| pair(item)).collect();
    pairs.map(ThrottledReplicas::Listed)
}

/// Broker configs that are one setting in several units, finest first: the
/// first one set wins, whatever level set it (Kafka's precedence).
pub const BROKER_SYNONYM_GROUPS: &[&[&str]] = &[
    &["log.retention.ms", "log.retention.minutes", "log.retention.hours"],
    &["log.roll.ms", "log.roll.hours"],
    &["log.roll.jitter.ms", "log.roll.jitter.hours"],
];

/// The coarser-unit broker synonyms, which no topic config names directly.
const COARSE_BROKER_SYNONYMS: &[(&str, Kind)] = &[
    ("log.retention.minutes", Kind::Int { min: -1 }),
    ("log.retention.hours", Kind::Int { min: -1 }),
    ("log.roll.hours", Kind::Int { min: 1 }),
    ("log.roll.jitter.hours", Kind::Int { min: 0 }),
];

/// The broker configs that share a setting with `name`, finest unit first
/// (just `name` for most).
pub fn broker_synonyms(name: &str) -> Vec<&str> {
    match BROKER_SYNONYM_GROUPS.iter().find(|group| group.contains(&name)) {
        Some(group) => group.to_vec(),
        None => vec![name],
    }
}

/// `leader.replication.throttled.rate`: bytes/s the leader sends to
/// throttled followers (KIP-73).
pub const LEADER_THROTTLED_RATE: &str = "leader.replication.throttled.rate";
/// `follower.replication.throttled.rate`: bytes/s a follower fetches for
/// its throttled replicas.
pub const FOLLOWER_THROTTLED_RATE: &str = "follower.replication.throttled.rate";

/// Dynamic broker configs that are no topic's default: Kafka's
/// `DynamicConfig.Broker` quota configs, and the SASL login settings Kafka
/// takes per listener at run time (stored and described; Strom has no
/// Kerberos or login refresh for them to tune).
const BROKER_ONLY_DYNAMIC: &[(&str, Kind)] = &[
    (LEADER_THROTTLED_RATE, Kind::Long { min: 0 }),
    (FOLLOWER_THROTTLED_RATE, Kind::Long { min: 0 }),
    ("sasl.kerberos.service.name", Kind::Text),
    ("sasl.kerberos.kinit.cmd", Kind::Text),
    ("sasl.kerberos.ticket.renew.window.factor", Kind::Double { min: 0.0, max: f64::MAX }),
    ("sasl.kerberos.ticket.renew.jitter", Kind::Double { min: 0.0, max: f64::MAX }),
    ("sasl.kerberos.min.time.before.relogin", Kind::Long { min: i64::MIN }),
    ("sasl.kerberos.principal.to.local.rules", Kind::Text),
    ("sasl.login.refresh.window.factor", Kind::Double { min: 0.5, max: 1.0 }),
    ("sasl.login.refresh.window.jitter", Kind::Double { min: 0.0, max: 0.25 }),
    ("sasl.login.refresh.min.period.seconds", Kind::IntIn { min: 0, max: 900 }),
    ("sasl.login.refresh.buffer.seconds", Kind::IntIn { min: 0, max: 3600 }),
];

/// The kind of a broker config that may change at run time, or `None` if
/// it may not.
pub fn dynamic_broker_config_kind(name: &str) -> Option<Kind> {
    if name.is_empty() {
        return None;
    }
    let named = |list: &[(&str, Kind)]| list.iter().find(|(n, _)| *n == name).map(|(_, kind)| *kind);
    TOPIC_CONFIGS
        .iter()
        .find(|d| d.broker_synonym == name)
        .map(|d| d.kind)
        .or_else(|| named(COARSE_BROKER_SYNONYMS))
        .or_else(|| named(BROKER_ONLY_DYNAMIC))
}

/// The TLS store keys a broker takes dynamically for one listener, as
/// `listener.name.<l>.<key>` (Kafka's `SslConfigs.RECONFIGURABLE_CONFIGS`).
pub const LISTENER_STORE_KEYS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
];

/// Whether `name` is `listener.name.<l>.<store key>`.
pub fn is_listener_store_key(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("listener.name.") else { return false };
    rest.split_once('.')
        .is_some_and(|(listener, key)| !listener.is_empty() && LISTENER_STORE_KEYS.contains(&key))
}

/// Validates a dynamic broker config (a cluster-wide or per-broker default).
/// Listener store keys are strings the broker checks by loading the store.
pub fn validate_dynamic_broker_config(name: &str, value: &str) -> Result<(), String> {
    if is_listener_store_key(name) {
        return Ok(());
    }
    let kind =
        dynamic_broker_config_kind(name).ok_or_else(|| format!("unknown dynamic broker config {name:?}"))?;
    check_value(kind, value).map_err(|e| format!("invalid value {value:?} for {name}: {e}"))
}

/// Validates a topic config override.
pub fn validate_topic_config(name: &str, value: &str) -> Result<(), String> {
    let def = topic_config_def(name).ok_or_else(|| format!("unknown topic config {name:?}"))?;
    check_value(def.kind, value).map_err(|e| format!("invalid value {value:?} for {name}: {e}"))?;
    if name == REMOTE_STORAGE_ENABLE && value.trim().eq_ignore_ascii_case("true") {
        // Refused as Kafka refuses it while `remote.log.storage.system.enable` is false.
        return Err(
            "tiered storage is not enabled on this broker (remote.log.storage.system.enable=false), \
                    so no topic can keep its log in remote storage"
                .into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_names_and_values() {
        assert!(validate_topic_config("retention.ms", "-1").is_ok());
        assert!(validate_topic_config("retention.ms", "-2").is_err());
        assert!(validate_topic_config("cleanup.policy", "compact,delete").is_ok());
        assert!(validate_topic_config("cleanup.policy", "shred").is_err());
        assert!(validate_topic_config("message.timestamp.type", "LogAppendTime").is_ok());
        assert!(validate_topic_config("segment.bytes", "lots").is_err());
        assert!(validate_topic_config("no.such.config", "1").is_err());
    }

    #[test]
    fn broker_synonyms_of_topic_configs_are_dynamic() {
        for def in TOPIC_CONFIGS.iter().filter(|d| !d.broker_synonym.is_empty()) {
            assert!(dynamic_broker_config_kind(def.broker_synonym).is_some(), "{}", def.broker_synonym);
        }
        assert!(validate_dynamic_broker_config("log.retention.hours", "-1").is_ok());
        assert!(validate_dynamic_broker_config("log.retention.minutes", "ten").is_err());
        assert!(validate_dynamic_broker_config("log.cleanup.policy", "compact,delete").is_ok());
        assert!(validate_dynamic_broker_config("log.cleaner.min.cleanable.ratio", "1.5").is_err());
        let err = validate_dynamic_broker_config("log.segment.bytes", "big").unwrap_err();
        assert!(err.contains("log.segment.bytes"), "{err}");
        assert!(validate_dynamic_broker_config("log.dirs", "/tmp").is_err());
        assert!(validate_dynamic_broker_config("node.id", "2").is_err());
        assert!(validate_dynamic_broker_config("", "1").is_err());
        assert!(validate_dynamic_broker_config(LEADER_THROTTLED_RATE, "1000").is_ok());
        assert!(validate_dynamic_broker_config(FOLLOWER_THROTTLED_RATE, "-1").is_err());
    }

    #[test]
    fn throttled_replica_lists_are_kafkas() {
        use ThrottledReplicas::{All, Listed};
        assert_eq!(throttled_replicas("*"), Some(All));
        assert_eq!(throttled_replicas(""), Some(Listed(vec![])));
        assert_eq!(throttled_replicas("0:1, 1:2"), Some(Listed(vec![(0, 1), (1, 2)])));
        for bad in ["*,0:1", "0", "0:a", "-1:1", "0:1:2", "all"] {
            assert!(validate_topic_config(LEADER_THROTTLED_REPLICAS, bad).is_err(), "{bad}");
        }
        assert!(Listed(vec![(0, 1)]).contains(0, 1));
        assert!(!Listed(vec![(0, 1)]).contains(0, 2));
        assert!(All.contains(7, 9));
    }

    #[test]
    fn synonym_groups_list_the_finest_unit_first() {
        assert_eq!(broker_synonyms("log.retention.hours")[0], "log.retention.ms");
        assert_eq!(broker_synonyms("log.roll.hours"), ["log.roll.ms", "log.roll.hours"]);
        assert_eq!(broker_synonyms("message.max.bytes"), ["message.max.bytes"]);
    }
}
