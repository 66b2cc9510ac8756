//! Consumer settings under Kafka's names, with Kafka 4's defaults.

use std::time::Duration;

use crate::config::{ClientConfig, Properties, Reader};
use crate::error::{Error, Result};

/// `auto.offset.reset`: where to start without a committed offset, or
/// after the position fell out of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    Earliest,
    Latest,
    /// Fail instead (`none`).
    None,
}

/// `isolation.level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationLevel {
    ReadUncommitted = 0,
    /// Stop at the last stable offset and skip aborted transactions.
    ReadCommitted = 1,
}

#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    pub client: ClientConfig,
    /// `group.id`: needed for `subscribe` and for commits.
    pub group_id: Option<String>,
    /// `group.instance.id`: static membership.
    pub group_instance_id: Option<String>,
    /// `enable.auto.commit` (true, when there is a group).
    pub enable_auto_commit: bool,
    /// `auto.commit.interval.ms` (5000).
    pub auto_commit_interval: Duration,
    /// `auto.offset.reset` (latest).
    pub auto_offset_reset: OffsetReset,
    /// `isolation.level` (read_uncommitted).
    pub isolation_level: IsolationLevel,
    /// `fetch.min.bytes` (1).
    pub fetch_min_bytes: i32,
    /// `fetch.max.bytes` (52428800).
    pub fetch_max_bytes: i32,
    /// `fetch.max.wait.ms` (500).
    pub fetch_max_wait: Duration,
    /// `max.partition.fetch.bytes` (1048576).
    pub max_partition_fetch_bytes: i32,
    /// `max.poll.records` (500).
    pub max_poll_records: usize,
    /// `check.crcs` (true).
    pub check_crcs: bool,
    /// `session.timeout.ms` (45000).
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms` (3000).
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms` (300000): also the rebalance timeout.
    pub max_poll_interval: Duration,
    /// `partition.assignment.strategy` (`range, cooperative-sticky`), in
    /// order of preference.
    pub assignment_strategies: Vec<String>,
}

impl ConsumerConfig {
    pub fn new(bootstrap_servers: &str) -> Self {
        let mut properties = Properties::new();
        properties.insert("bootstrap.servers".into(), bootstrap_servers.into());
        Self::from_properties(&properties).expect("defaults are valid")
    }

    pub fn from_properties(properties: &Properties) -> Result<Self> {
        let read = Reader(properties);
        let non_empty =
            |key: &str| properties.get(key).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let config = Self {
            client: ClientConfig::from_properties(properties)?,
            group_id: non_empty("group.id"),
            group_instance_id: non_empty("group.instance.id"),
            enable_auto_commit: read.bool("enable.auto.commit", true)?,
            auto_commit_interval: read.millis("auto.commit.interval.ms", 5_000)?,
            auto_offset_reset: match read.string("auto.offset.reset", "latest").trim() {
                "earliest" | "smallest" | "beginning" => OffsetReset::Earliest,
                "latest" | "largest" | "end" => OffsetReset::Latest,
                "none" | "error" => OffsetReset::None,
                other => {
                    return Err(Error::Config(format!(
                        "auto.offset.reset={other} is not one of earliest, latest, none"
                    )))
                }
            },
            isolation_level: match read.string("isolation.level", "read_uncommitted").trim() {
                "read_uncommitted" => IsolationLevel::ReadUncommitted,
                "read_committed" => IsolationLevel::ReadCommitted,
                other => {
                    return Err(Error::Config(format!(
                        "isolation.level={other} is not read_uncommitted or read_committed"
                    )))
                }
            },
            fetch_min_bytes: read.parse("fetch.min.bytes", 1)?,
            fetch_max_bytes: read.parse("fetch.max.bytes", 52_428_800)?,
            fetch_max_wait: read.millis("fetch.max.wait.ms", 500)?,
            max_partition_fetch_bytes: read.parse("max.partition.fetch.bytes", 1_048_576)?,
            max_poll_records: read.parse("max.poll.records", 500usize)?.max(1),
            check_crcs: read.bool("check.crcs", true)?,
            session_timeout: read.millis("session.timeout.ms", 45_000)?,
            heartbeat_interval: read.millis("heartbeat.interval.ms", 3_000)?,
            max_poll_interval: read.millis("max.poll.interval.ms", 300_000)?,
            assignment_strategies: read
                .string("partition.assignment.strategy", "range, cooperative-sticky")
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        };
        if config.heartbeat_interval >= config.session_timeout {
            return Err(Error::Config("heartbeat.interval.ms must be below session.timeout.ms".into()));
        }
        if config.assignment_strategies.is_empty() {
            return Err(Error::Config("partition.assignment.strategy is empty".into()));
        }
        Ok(config)
    }

    /// Auto-commit applies only with a group.
    pub(crate) fn auto_commit(&self) -> bool {
        self.enable_auto_commit && self.group_id.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_pairs;

    #[test]
    fn reads_kafka_names_and_defaults() {
        let config = ConsumerConfig::new("h:1");
        assert_eq!(config.auto_offset_reset, OffsetReset::Latest);
        assert_eq!(config.max_poll_records, 500);
        assert_eq!(config.assignment_strategies, ["range", "cooperative-sticky"]);
        assert!(!config.auto_commit(), "no group, no auto-commit");

        let pairs = parse_pairs([
            "bootstrap.servers=h:1",
            "group.id=g",
            "auto.offset.reset=earliest",
            "isolation.level=read_committed",
            "partition.assignment.strategy=roundrobin",
        ])
        .unwrap();
        let config = ConsumerConfig::from_properties(&pairs).unwrap();
        assert_eq!(config.group_id.as_deref(), Some("g"));
        assert_eq!(config.auto_offset_reset, OffsetReset::Earliest);
        assert_eq!(config.isolation_level, IsolationLevel::ReadCommitted);
        assert!(config.auto_commit());
    }

    #[test]
    fn refuses_bad_values() {
        for bad in ["auto.offset.reset=soon", "isolation.level=serializable", "heartbeat.interval.ms=50000"] {
            let pairs = parse_pairs(["bootstrap.servers=h:1", bad]).unwrap();
            assert!(ConsumerConfig::from_properties(&pairs).is_err(), "{bad}");
        }
    }
}
