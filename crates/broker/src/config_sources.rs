//! Where each config value comes from, as DescribeConfigs reports it.
//!
//! A config resolves through levels, first one set wins: a topic override,
//! this broker's dynamic config, the cluster-wide dynamic default,
//! `server.properties`, then the default. Each level that sets the config
//! (or one of its broker synonyms, e.g. `log.retention.hours` for
//! `retention.ms`) is a synonym in Kafka's sense; the first names the source.

use std::collections::BTreeMap;

use strom_metadata::topic_config::{
    broker_synonyms, dynamic_broker_config_kind, is_listener_store_key, Kind, TopicConfigDef,
};
use strom_storage::batch::TimestampType;
use strom_storage::LogConfig;

/// Kafka's `DescribeConfigsResponse.ConfigSource`.
pub const DYNAMIC_TOPIC_CONFIG: i8 = 1;
pub const DYNAMIC_BROKER_CONFIG: i8 = 2;
pub const DYNAMIC_DEFAULT_BROKER_CONFIG: i8 = 3;
pub const STATIC_BROKER_CONFIG: i8 = 4;
pub const DEFAULT_CONFIG: i8 = 5;

/// Kafka's `DescribeConfigsResponse.ConfigType`.
pub mod config_type {
    pub const UNKNOWN: i8 = 0;
    pub const BOOLEAN: i8 = 1;
    pub const STRING: i8 = 2;
    pub const INT: i8 = 3;
    pub const SHORT: i8 = 4;
    pub const LONG: i8 = 5;
    pub const DOUBLE: i8 = 6;
    pub const LIST: i8 = 7;
    /// Described without its value (`is_sensitive`), as Kafka describes secrets.
    pub const PASSWORD: i8 = 9;
}

/// A broker config Strom describes: its default as Strom applies it (Kafka's,
/// except where noted) and its type.
#[derive(Debug, Clone, Copy)]
pub struct BrokerKey {
    pub name: &'static str,
    pub default: Option<&'static str>,
    pub config_type: i8,
}

const fn key(name: &'static str, default: Option<&'static str>, config_type: i8) -> BrokerKey {
    BrokerKey { name, default, config_type }
}

const MAX_LONG: &str = "9223372036854775807";

/// The broker configs Strom reads, and the dynamic ones it stores.
pub const BROKER_KEYS: &[BrokerKey] = {
    use config_type::*;
    &[
        key("node.id", Some("1"), INT),
        key("broker.id", None, INT),
        key("listeners", Some("PLAINTEXT://127.0.0.1:9092"), STRING),
        key("advertised.listeners", None, STRING),
        key("log.dirs", None, STRING),
        key("log.dir", Some("./strom-data"), STRING),
        key("metadata.log.dir", None, STRING),
        key("num.partitions", Some("1"), INT),
        key("controller.max.partitions.per.request", Some("10000"), INT),
        key("default.replication.factor", Some("1"), INT),
        key("auto.create.topics.enable", Some("true"), BOOLEAN),
        key("socket.request.max.bytes", Some("104857600"), INT),
        key("max.connections", Some("10000"), INT),
        key("authorizer.class.name", Some(""), STRING),
        key("super.users", None, STRING),
        key("allow.everyone.if.no.acl.found", Some("false"), BOOLEAN),
        key("max.connections.per.ip", Some("2147483647"), INT),
        key("max.connections.per.ip.overrides", Some(""), STRING),
        key("quota.window.num", Some("11"), INT),
        key("quota.window.size.seconds", Some("1"), INT),
        key("max.incremental.fetch.session.cache.slots", Some("1000"), INT),
        key("fetch.max.bytes", Some("57671680"), INT),
        key("log.flush.scheduler.interval.ms", Some("1000"), LONG),
        key("log.flush.offset.checkpoint.interval.ms", Some("60000"), INT),
        key("replica.high.watermark.checkpoint.interval.ms", Some("5000"), LONG),
        key("num.replica.fetchers", Some("1"), INT),
        key("replica.fetch.max.bytes", Some("1048576"), INT),
        key("replica.fetch.response.max.bytes", Some("10485760"), INT),
        key("replica.fetch.wait.max.ms", Some("500"), INT),
        key("replica.fetch.min.bytes", Some("1"), INT),
        key("replica.fetch.backoff.ms", Some("1000"), INT),
        key("replica.lag.time.max.ms", Some("30000"), LONG),
        key("replica.selector.class", None, STRING),
        key("replication.quota.window.num", Some("11"), INT),
        key("replication.quota.window.size.seconds", Some("1"), INT),
        key("leader.replication.throttled.rate", Some(MAX_LONG), LONG),
        key("follower.replication.throttled.rate", Some(MAX_LONG), LONG),
        key("log.retention.check.interval.ms", Some("300000"), LONG),
        key("fetch.zero.copy.enable", Some("true"), BOOLEAN),
        key("metrics.listener", None, STRING),
        key("console.listener", None, STRING),
        key("console.auth", Some("none"), STRING),
        key("logging.level", Some("info"), STRING),
        key("log.format", Some("text"), STRING),
        key("num.recovery.threads.per.data.dir", Some("2"), INT),
        key("log.segment.open.files.max", Some("1024"), INT),
        key("producer.id.expiration.ms", Some("86400000"), INT),
        key("producer.id.expiration.check.interval.ms", Some("600000"), INT),
        key("log.cleaner.enable", Some("true"), BOOLEAN),
        key("log.cleaner.threads", Some("1"), INT),
        key("log.cleaner.dedupe.buffer.size", Some("134217728"), LONG),
        key("log.cleaner.io.buffer.size", Some("524288"), INT),
        key("log.cleaner.backoff.ms", Some("15000"), LONG),
        key("auto.leader.rebalance.enable", Some("true"), BOOLEAN),
        key("leader.imbalance.check.interval.seconds", Some("300"), LONG),
        key("offsets.topic.num.partitions", Some("50"), INT),
        key("offsets.topic.segment.bytes", Some("104857600"), INT),
        // Unset, Kafka's 3 capped at the brokers registered (see
        // internal_topic): no single value to describe.
        key("offsets.topic.replication.factor", None, SHORT),
        key("offsets.retention.minutes", Some("10080"), INT),
        key("offsets.retention.check.interval.ms", Some("600000"), LONG),
        key("offset.metadata.max.bytes", Some("4096"), INT),
        key("offsets.commit.timeout.ms", Some("5000"), INT),
        key("group.min.session.timeout.ms", Some("6000"), INT),
        key("group.max.session.timeout.ms", Some("1800000"), INT),
        key("group.initial.rebalance.delay.ms", Some("3000"), INT),
        key("group.max.size", Some("2147483647"), INT),
        key("group.consumer.session.timeout.ms", Some("45000"), INT),
        key("group.consumer.heartbeat.interval.ms", Some("5000"), INT),
        key("transaction.state.log.num.partitions", Some("50"), INT),
        key("transaction.state.log.segment.bytes", Some("104857600"), INT),
        key("transaction.state.log.replication.factor", None, SHORT),
        key("transaction.max.timeout.ms", Some("900000"), INT),
        key("transaction.abort.timed.out.transaction.cleanup.interval.ms", Some("10000"), INT),
        key("transactional.id.expiration.ms", Some("604800000"), INT),
        key("transaction.remove.expired.transaction.cleanup.interval.ms", Some("3600000"), INT),
        key("transaction.partition.verification.enable", Some("true"), BOOLEAN),
        // The log defaults, which may change at run time.
        key("log.cleanup.policy", Some("delete"), LIST),
        key("compression.type", Some("producer"), STRING),
        key("log.cleaner.delete.retention.ms", Some("86400000"), LONG),
        key("log.segment.delete.delay.ms", Some("60000"), LONG),
        key("log.flush.interval.messages", Some(MAX_LONG), LONG),
        key("log.flush.interval.ms", None, LONG),
        key("log.index.interval.bytes", Some("4096"), INT),
        key("log.cleaner.max.compaction.lag.ms", Some(MAX_LONG), LONG),
        key("message.max.bytes", Some("1048588"), INT),
        key("log.message.timestamp.type", Some("CreateTime"), STRING),
        key("log.message.timestamp.before.max.ms", Some(MAX_LONG), LONG),
        key("log.message.timestamp.after.max.ms", Some("3600000"), LONG),
        key("log.cleaner.min.cleanable.ratio", Some("0.5"), DOUBLE),
        key("log.cleaner.min.compaction.lag.ms", Some("0"), LONG),
        key("min.insync.replicas", Some("1"), INT),
        key("log.preallocate", Some("false"), BOOLEAN),
        key("log.retention.bytes", Some("-1"), LONG),
        key("log.retention.ms", None, LONG),
        key("log.retention.minutes", None, INT),
        key("log.retention.hours", Some("168"), INT),
        key("log.segment.bytes", Some("1073741824"), INT),
        key("log.index.size.max.bytes", Some("10485760"), INT),
        key("log.roll.jitter.ms", None, LONG),
        key("log.roll.jitter.hours", Some("0"), INT),
        key("log.roll.ms", None, LONG),
        key("log.roll.hours", Some("168"), INT),
        key("unclean.leader.election.enable", Some("false"), BOOLEAN),
        // Log defaults Strom accepts and describes but does not apply yet:
        // codec levels (batches are stored as produced), tiered storage's
        // local retention and copy lag, the decompressed batch bound.
        key("compression.gzip.level", Some("-1"), INT),
        key("compression.lz4.level", Some("9"), INT),
        key("compression.zstd.level", Some("3"), INT),
        key("log.local.retention.bytes", Some("-2"), LONG),
        key("log.local.retention.ms", Some("-2"), LONG),
        key("log.remote.copy.lag.bytes", Some("-1"), LONG),
        key("log.remote.copy.lag.ms", Some("0"), LONG),
        key("max.decompressed.message.bytes", Some("2147483639"), INT),
        // SASL login settings Kafka takes at run time; no Strom mechanism uses them.
        key("sasl.kerberos.service.name", None, STRING),
        key("sasl.kerberos.kinit.cmd", Some("/usr/bin/kinit"), STRING),
        key("sasl.kerberos.ticket.renew.window.factor", Some("0.8"), DOUBLE),
        key("sasl.kerberos.ticket.renew.jitter", Some("0.05"), DOUBLE),
        key("sasl.kerberos.min.time.before.relogin", Some("60000"), LONG),
        key("sasl.kerberos.principal.to.local.rules", Some("DEFAULT"), LIST),
        key("sasl.login.refresh.window.factor", Some("0.8"), DOUBLE),
        key("sasl.login.refresh.window.jitter", Some("0.05"), DOUBLE),
        key("sasl.login.refresh.min.period.seconds", Some("60"), SHORT),
        key("sasl.login.refresh.buffer.seconds", Some("300"), SHORT),
    ]
};

pub fn broker_key(name: &str) -> Option<&'static BrokerKey> {
    BROKER_KEYS.iter().find(|k| k.name == name)
}

/// One level's value of a config or of one of its synonyms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synonym {
    pub name: String,
    pub value: String,
    pub source: i8,
}

/// One described config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    pub value: Option<String>,
    pub source: i8,
    pub read_only: bool,
    pub config_type: i8,
    /// Highest precedence first; the first one is the source.
    pub synonyms: Vec<Synonym>,
}

/// The broker config levels of one broker, highest precedence first.
#[derive(Debug, Clone, Copy)]
pub struct BrokerLevels<'a> {
    pub per_broker: &'a BTreeMap<String, String>,
    pub cluster_default: &'a BTreeMap<String, String>,
    /// `server.properties` and `--override`s.
    pub static_configs: &'a BTreeMap<String, String>,
}

impl BrokerLevels<'_> {
    /// Every level's value of each of `names`, level by level.
    pub fn synonyms(&self, names: &[&str]) -> Vec<Synonym> {
        let levels = [
            (self.per_broker, DYNAMIC_BROKER_CONFIG),
            (self.cluster_default, DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self.static_configs, STATIC_BROKER_CONFIG),
        ];
        let mut synonyms = Vec::new();
        for (configs, source) in levels {
            for name in names {
                if let Some(value) = configs.get(*name) {
                    synonyms.push(Synonym { name: name.to_string(), value: value.clone(), source });
                }
            }
        }
        for name in names {
            if let Some(value) = broker_key(name).and_then(|k| k.default) {
                synonyms.push(Synonym {
                    name: name.to_string(),
                    value: value.into(),
                    source: DEFAULT_CONFIG,
                });
            }
        }
        synonyms
    }

    /// The synonyms of broker config `name`, from the first that names it:
    /// as Kafka does, those ranked above it are not its synonyms
    /// (log.retention.hours set above log.retention.ms), and none are when
    /// only its coarser units are set.
    fn own_synonyms(&self, name: &str) -> Vec<Synonym> {
        let mut synonyms = self.synonyms(&broker_synonyms(name));
        let own = synonyms.iter().position(|s| s.name == name).unwrap_or(synonyms.len());
        synonyms.drain(..own);
        synonyms
    }

    /// A broker config as this broker applies it.
    pub fn broker_entry(&self, name: &str) -> ConfigEntry {
        let synonyms = self.own_synonyms(name);
        ConfigEntry {
            name: name.into(),
            value: synonyms.first().map(|s| s.value.clone()),
            source: synonyms.first().map_or(DEFAULT_CONFIG, |s| s.source),
            read_only: dynamic_broker_config_kind(name).is_none(),
            config_type: broker_key(name).map_or(config_type::UNKNOWN, |k| k.config_type),
            synonyms,
        }
    }

    /// The listener store keys set on this broker by AlterConfigs
    /// (`listener.name.<l>.ssl.keystore.location` …): secrets and key
    /// material without their values, as Kafka describes PASSWORD configs.
    pub fn listener_store_entries(&self) -> Vec<ConfigEntry> {
        let stores = self.per_broker.iter().filter(|(name, _)| is_listener_store_key(name));
        stores
            .map(|(name, value)| {
                let secret = ["password", "keystore.key", "certificate.chain", "truststore.certificates"]
                    .iter()
                    .any(|suffix| name.ends_with(suffix));
                let value = (!secret).then(|| value.clone());
                let synonym = Synonym {
                    name: name.clone(),
                    value: value.clone().unwrap_or_default(),
                    source: DYNAMIC_BROKER_CONFIG,
                };
                ConfigEntry {
                    name: name.clone(),
                    value,
                    source: DYNAMIC_BROKER_CONFIG,
                    read_only: false,
                    config_type: if secret { config_type::PASSWORD } else { config_type::STRING },
                    synonyms: vec![synonym],
                }
            })
            .collect()
    }

    /// The cluster-wide dynamic defaults, which is all the "" broker
    /// resource holds.
    pub fn cluster_default_entries(&self) -> Vec<ConfigEntry> {
        let no_per_broker = BTreeMap::new();
        let levels = BrokerLevels { per_broker: &no_per_broker, ..*self };
        self.cluster_default
            .keys()
            .map(|name| {
                let mut entry = levels.broker_entry(name);
                entry.synonyms.retain(|s| s.source == DYNAMIC_DEFAULT_BROKER_CONFIG);
                entry
            })
            .collect()
    }

    /// A topic config as the topic's log applies it: `log` is the topic's
    /// resolved log config, `overrides` its topic-level configs.
    pub fn topic_entry(
        &self,
        def: &TopicConfigDef,
        overrides: &BTreeMap<String, String>,
        log: &LogConfig,
    ) -> ConfigEntry {
        let mut synonyms = Vec::new();
        if let Some(value) = overrides.get(def.name) {
            synonyms.push(Synonym {
                name: def.name.into(),
                value: value.clone(),
                source: DYNAMIC_TOPIC_CONFIG,
            });
        }
        if !def.broker_synonym.is_empty() {
            synonyms.extend(self.own_synonyms(def.broker_synonym));
        }
        // An override shows as written; otherwise the log's own value, so
        // that units and precedence are exactly those the log applies, or
        // the broker level's in its finest unit.
        let value = match overrides.get(def.name) {
            Some(value) => Some(value.clone()),
            None if def.broker_synonym.is_empty() => Some(def.default.into()),
            None => log_config_value(def.name, log)
                .or_else(|| self.synonyms(&broker_synonyms(def.broker_synonym)).first().map(in_finest_unit)),
        };
        ConfigEntry {
            name: def.name.into(),
            value,
            source: synonyms.first().map_or(DEFAULT_CONFIG, |s| s.source),
            read_only: false,
            config_type: kind_type(def.kind),
            synonyms,
        }
    }

    /// The value `resource_level` would inherit if it did not set `name`:
    /// the first value set at a lower level, or the default.
    pub fn inherited_value(&self, names: &[&str], resource_level: i8) -> Option<String> {
        self.synonyms(names).into_iter().find(|s| s.source > resource_level).map(|s| in_finest_unit(&s))
    }
}

/// A synonym's value in the unit of the finest synonym (hours become ms).
fn in_finest_unit(synonym: &Synonym) -> String {
    const MS: &[(&str, i64)] = &[(".hours", 3_600_000), (".minutes", 60_000)];
    let scale = MS.iter().find(|(suffix, _)| synonym.name.ends_with(suffix)).map(|(_, ms)| *ms);
    match (scale, synonym.value.trim().parse::<i64>()) {
        (Some(_), Ok(v)) if v < 0 => "-1".into(),
        (Some(ms), Ok(v)) => v.saturating_mul(ms).to_string(),
        _ => synonym.value.clone(),
    }
}

/// Kafka's config type for a topic config kind.
pub fn kind_type(kind: Kind) -> i8 {
    match kind {
        Kind::Long { .. } => config_type::LONG,
        Kind::Int { .. } | Kind::IntIn { .. } | Kind::GzipLevel => config_type::INT,
        Kind::Double { .. } => config_type::DOUBLE,
        Kind::Bool => config_type::BOOLEAN,
        Kind::Choice(_) | Kind::Text => config_type::STRING,
        Kind::List(_) | Kind::ReplicaList => config_type::LIST,
    }
}

/// The value a log applies for a topic config it holds, as Kafka prints it.
fn log_config_value(name: &str, log: &LogConfig) -> Option<String> {
    let long = |v: u64| v.min(i64::MAX as u64).to_string();
    Some(match name {
        "segment.bytes" => long(log.segment_bytes),
        "segment.ms" => log.segment_ms.to_string(),
        "index.interval.bytes" => log.index_interval_bytes.to_string(),
        "segment.index.bytes" => log.max_index_bytes.to_string(),
        "max.message.bytes" => log.max_message_bytes.to_string(),
        "flush.messages" => long(log.flush_interval_messages),
        "flush.ms" => log.flush_interval_ms.to_string(),
        "message.timestamp.type" => match log.timestamp_type {
            TimestampType::CreateTime => "CreateTime".into(),
            TimestampType::LogAppendTime => "LogAppendTime".into(),
        },
        "cleanup.policy" => {
            let policy = log.cleanup_policy;
            let parts = [(policy.compact, "compact"), (policy.delete, "delete")];
            parts.iter().filter(|(on, _)| *on).map(|(_, name)| *name).collect::<Vec<_>>().join(",")
        }
        "retention.ms" => log.retention_ms.to_string(),
        "retention.bytes" => log.retention_bytes.to_string(),
        "file.delete.delay.ms" => log.file_delete_delay_ms.to_string(),
        "delete.retention.ms" => log.delete_retention_ms.to_string(),
        "min.cleanable.dirty.ratio" => log.min_cleanable_dirty_ratio.to_string(),
        "min.compaction.lag.ms" => log.min_compaction_lag_ms.to_string(),
        "max.compaction.lag.ms" => log.max_compaction_lag_ms.to_string(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use strom_metadata::topic_config::{topic_config_def, TOPIC_CONFIGS};

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn levels<'a>(
        per_broker: &'a BTreeMap<String, String>,
        cluster_default: &'a BTreeMap<String, String>,
        static_configs: &'a BTreeMap<String, String>,
    ) -> BrokerLevels<'a> {
        BrokerLevels { per_broker, cluster_default, static_configs }
    }

    fn topic_entry(
        levels: &BrokerLevels<'_>,
        name: &str,
        overrides: &BTreeMap<String, String>,
    ) -> ConfigEntry {
        let static_pairs: Vec<_> = levels.static_configs.clone().into_iter().collect();
        let config = BrokerConfig::from_properties("", &static_pairs).unwrap();
        let config = config.with_dynamic(levels.cluster_default, levels.per_broker).unwrap();
        levels.topic_entry(topic_config_def(name).unwrap(), overrides, &config.log_config_for(overrides))
    }

    #[test]
    fn every_default_is_the_one_strom_applies() {
        let defaults = BrokerConfig::from_properties("", &[]).unwrap();
        let debug = |mut config: BrokerConfig| {
            config.provided.clear();
            format!("{config:?}")
        };
        let expected = debug(defaults);
        for key in BROKER_KEYS {
            let Some(default) = key.default else { continue };
            let config = BrokerConfig::from_properties("", &[(key.name.into(), default.into())]).unwrap();
            assert_eq!(debug(config), expected, "{}={default} is not the default", key.name);
        }
    }

    #[test]
    fn every_dynamic_broker_config_is_described() {
        for def in TOPIC_CONFIGS.iter().filter(|d| !d.broker_synonym.is_empty()) {
            assert!(broker_key(def.broker_synonym).is_some(), "{}", def.broker_synonym);
        }
    }

    #[test]
    fn topic_sources_follow_precedence() {
        let empty = map(&[]);
        let static_configs = map(&[("log.segment.bytes", "5000")]);
        let cluster_default = map(&[("log.segment.bytes", "6000")]);
        let per_broker = map(&[("log.segment.bytes", "7000")]);
        let overrides = map(&[("segment.bytes", "8000")]);
        let cases = [
            (levels(&empty, &empty, &empty), &empty, DEFAULT_CONFIG, "1073741824"),
            (levels(&empty, &empty, &static_configs), &empty, STATIC_BROKER_CONFIG, "5000"),
            (
                levels(&empty, &cluster_default, &static_configs),
                &empty,
                DYNAMIC_DEFAULT_BROKER_CONFIG,
                "6000",
            ),
            (levels(&per_broker, &cluster_default, &static_configs), &empty, DYNAMIC_BROKER_CONFIG, "7000"),
            (
                levels(&per_broker, &cluster_default, &static_configs),
                &overrides,
                DYNAMIC_TOPIC_CONFIG,
                "8000",
            ),
        ];
        for (levels, overrides, source, value) in cases {
            let entry = topic_entry(&levels, "segment.bytes", overrides);
            assert_eq!((entry.source, entry.value.as_deref()), (source, Some(value)), "{entry:?}");
            assert_eq!(entry.synonyms[0].source, source);
            assert_eq!(entry.synonyms.last().unwrap().source, DEFAULT_CONFIG);
            assert_eq!(entry.config_type, config_type::INT);
        }
    }

    #[test]
    fn topic_values_convert_coarse_synonyms() {
        let empty = map(&[]);
        let static_configs = map(&[("log.retention.hours", "2")]);
        let entry = topic_entry(&levels(&empty, &empty, &static_configs), "retention.ms", &empty);
        assert_eq!(entry.value.as_deref(), Some("7200000"));
        // As Kafka answers: the synonyms start at log.retention.ms, which no
        // level sets, so there are none and the source is the default.
        assert_eq!(entry.source, DEFAULT_CONFIG);
        assert!(entry.synonyms.is_empty(), "{:?}", entry.synonyms);

        let static_configs = map(&[("log.retention.ms", "5000"), ("log.retention.hours", "2")]);
        let entry = topic_entry(&levels(&empty, &empty, &static_configs), "retention.ms", &empty);
        assert_eq!(entry.value.as_deref(), Some("5000"));
        assert_eq!(entry.source, STATIC_BROKER_CONFIG);
        let names: Vec<_> = entry.synonyms.iter().map(|s| (s.name.as_str(), s.source)).collect();
        assert_eq!(
            names,
            [
                ("log.retention.ms", STATIC_BROKER_CONFIG),
                ("log.retention.hours", STATIC_BROKER_CONFIG),
                ("log.retention.hours", DEFAULT_CONFIG)
            ]
        );

        let cluster_default = map(&[("log.roll.jitter.hours", "1")]);
        let entry = topic_entry(&levels(&empty, &cluster_default, &empty), "segment.jitter.ms", &empty);
        assert_eq!(entry.value.as_deref(), Some("3600000"));
        assert_eq!(entry.source, DEFAULT_CONFIG);
    }

    #[test]
    fn broker_entries_drop_finer_synonyms_ranked_above() {
        let empty = map(&[]);
        let cluster_default = map(&[("log.retention.ms", "1000")]);
        let static_configs = map(&[("log.retention.hours", "3")]);
        let levels = levels(&empty, &cluster_default, &static_configs);
        let hours = levels.broker_entry("log.retention.hours");
        assert_eq!((hours.value.as_deref(), hours.source), (Some("3"), STATIC_BROKER_CONFIG));
        assert_eq!(hours.synonyms.len(), 2);
        assert!(!hours.read_only);
        let ms = levels.broker_entry("log.retention.ms");
        assert_eq!((ms.value.as_deref(), ms.source), (Some("1000"), DYNAMIC_DEFAULT_BROKER_CONFIG));
        let minutes = levels.broker_entry("log.retention.minutes");
        assert_eq!((minutes.value, minutes.source), (None, DEFAULT_CONFIG));
        let node = levels.broker_entry("node.id");
        assert!(node.read_only);
    }

    #[test]
    fn the_cluster_default_resource_holds_only_dynamic_defaults() {
        let empty = map(&[]);
        let cluster_default = map(&[("log.retention.ms", "1000")]);
        let static_configs = map(&[("log.retention.ms", "5"), ("num.partitions", "3")]);
        let entries = levels(&empty, &cluster_default, &static_configs).cluster_default_entries();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].value.as_deref(), Some("1000"));
        assert_eq!(entries[0].source, DYNAMIC_DEFAULT_BROKER_CONFIG);
        assert!(entries[0].synonyms.iter().all(|s| s.source == DYNAMIC_DEFAULT_BROKER_CONFIG));
    }

    #[test]
    fn inherited_values_skip_the_resource_own_level() {
        let empty = map(&[]);
        let cluster_default = map(&[("log.cleanup.policy", "compact")]);
        let levels = levels(&empty, &cluster_default, &empty);
        let names = ["log.cleanup.policy"];
        assert_eq!(levels.inherited_value(&names, DYNAMIC_TOPIC_CONFIG).as_deref(), Some("compact"));
        assert_eq!(levels.inherited_value(&names, DYNAMIC_DEFAULT_BROKER_CONFIG).as_deref(), Some("delete"));
    }
}
