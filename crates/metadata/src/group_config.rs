//! Group configs (KIP-848's `ConfigResource.Type.GROUP`): the overrides a
//! group may carry, as Kafka 4.4's `GroupConfig` defines them, with the
//! broker config each falls back to and the checks that need no broker.
//! The bounds a broker sets (`group.consumer.min.session.timeout.ms` and
//! the like) are checked where the broker's configs are known.

/// A group config's value type, as DescribeConfigs reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupKind {
    Int,
    Long,
    Boolean,
    String,
    List,
}

/// One group config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupConfigDef {
    pub name: &'static str,
    pub kind: GroupKind,
    /// Its value where neither the group nor the broker sets one.
    pub default: &'static str,
    /// The broker config whose value is the group's default.
    pub broker_synonym: Option<&'static str>,
    /// The least number it takes.
    pub at_least: Option<i64>,
    /// The broker's bounds: (min key, min default, max key, max default).
    pub bounds: Option<(&'static str, i64, &'static str, i64)>,
    /// The only values it takes, where it is an enumeration.
    pub one_of: &'static [&'static str],
}

const fn def(name: &'static str, kind: GroupKind, default: &'static str) -> GroupConfigDef {
    GroupConfigDef { name, kind, default, broker_synonym: None, at_least: None, bounds: None, one_of: &[] }
}

const fn bounded(
    name: &'static str,
    default: &'static str,
    synonym: &'static str,
    at_least: i64,
    bounds: Option<(&'static str, i64, &'static str, i64)>,
) -> GroupConfigDef {
    GroupConfigDef {
        broker_synonym: Some(synonym),
        at_least: Some(at_least),
        bounds,
        ..def(name, GroupKind::Int, default)
    }
}

/// Kafka 4.4's group configs, in the order its DescribeConfigs lists them.
pub const GROUP_CONFIGS: [GroupConfigDef; 21] = [
    bounded(
        "consumer.session.timeout.ms",
        "45000",
        "group.consumer.session.timeout.ms",
        1,
        Some((
            "group.consumer.min.session.timeout.ms",
            45_000,
            "group.consumer.max.session.timeout.ms",
            60_000,
        )),
    ),
    GroupConfigDef {
        broker_synonym: Some("group.streams.assignors"),
        ..def("streams.assignor.name", GroupKind::String, "sticky")
    },
    bounded("consumer.assignment.interval.ms", "1000", "group.consumer.assignment.interval.ms", 0, None),
    def("errors.deadletterqueue.copy.record.enable", GroupKind::Boolean, "false"),
    def("share.auto.offset.reset", GroupKind::String, "latest"),
    GroupConfigDef {
        broker_synonym: Some("group.streams.rack.aware.assignment.tags"),
        ..def("streams.rack.aware.assignment.tags", GroupKind::List, "")
    },
    def("share.renew.acknowledge.enable", GroupKind::Boolean, "true"),
    bounded(
        "streams.initial.rebalance.delay.ms",
        "3000",
        "group.streams.initial.rebalance.delay.ms",
        0,
        None,
    ),
    bounded(
        "share.session.timeout.ms",
        "45000",
        "group.share.session.timeout.ms",
        1,
        Some(("group.share.min.session.timeout.ms", 45_000, "group.share.max.session.timeout.ms", 60_000)),
    ),
    bounded("streams.assignment.interval.ms", "1000", "group.streams.assignment.interval.ms", 0, None),
    bounded(
        "share.heartbeat.interval.ms",
        "5000",
        "group.share.heartbeat.interval.ms",
        1,
        Some((
            "group.share.min.heartbeat.interval.ms",
            5_000,
            "group.share.max.heartbeat.interval.ms",
            15_000,
        )),
    ),
    bounded(
        "streams.heartbeat.interval.ms",
        "5000",
        "group.streams.heartbeat.interval.ms",
        1,
        Some((
            "group.streams.min.heartbeat.interval.ms",
            5_000,
            "group.streams.max.heartbeat.interval.ms",
            15_000,
        )),
    ),
    bounded(
        "share.delivery.count.limit",
        "5",
        "group.share.delivery.count.limit",
        2,
        Some(("group.share.min.delivery.count.limit", 2, "group.share.max.delivery.count.limit", 10)),
    ),
    def("errors.deadletterqueue.topic.name", GroupKind::String, ""),
    bounded(
        "consumer.heartbeat.interval.ms",
        "5000",
        "group.consumer.heartbeat.interval.ms",
        1,
        Some((
            "group.consumer.min.heartbeat.interval.ms",
            5_000,
            "group.consumer.max.heartbeat.interval.ms",
            15_000,
        )),
    ),
    bounded(
        "share.record.lock.duration.ms",
        "30000",
        "group.share.record.lock.duration.ms",
        1000,
        Some((
            "group.share.min.record.lock.duration.ms",
            15_000,
            "group.share.max.record.lock.duration.ms",
            60_000,
        )),
    ),
    bounded("share.assignment.interval.ms", "1000", "group.share.assignment.interval.ms", 0, None),
    GroupConfigDef {
        one_of: &["read_committed", "read_uncommitted"],
        ..def("share.isolation.level", GroupKind::String, "read_uncommitted")
    },
    bounded(
        "streams.session.timeout.ms",
        "45000",
        "group.streams.session.timeout.ms",
        1,
        Some((
            "group.streams.min.session.timeout.ms",
            45_000,
            "group.streams.max.session.timeout.ms",
            60_000,
        )),
    ),
    bounded(
        "share.partition.max.record.locks",
        "2000",
        "group.share.partition.max.record.locks",
        100,
        Some((
            "group.share.min.partition.max.record.locks",
            100,
            "group.share.max.partition.max.record.locks",
            10_000,
        )),
    ),
    bounded(
        "streams.num.standby.replicas",
        "0",
        "group.streams.num.standby.replicas",
        0,
        Some(("group.streams.min.standby.replicas", 0, "group.streams.max.standby.replicas", 2)),
    ),
];

/// The group config `name`, if Kafka defines one.
pub fn group_config_def(name: &str) -> Option<&'static GroupConfigDef> {
    GROUP_CONFIGS.iter().find(|d| d.name == name)
}

/// A group's int setting `name`: its override, else `broker_value`.
pub fn int_setting(
    overrides: &std::collections::BTreeMap<String, String>,
    name: &str,
    broker_value: i32,
) -> i32 {
    overrides.get(name).and_then(|v| v.trim().parse().ok()).unwrap_or(broker_value)
}

/// The checks of `name=value` that need no broker, with Kafka's messages.
pub fn validate_group_config(name: &str, value: &str) -> Result<(), String> {
    let def = group_config_def(name).ok_or_else(|| format!("Unknown group config name: {name}"))?;
    let invalid = |why: &str| Err(format!("Invalid value {value} for configuration {name}: {why}"));
    match def.kind {
        GroupKind::Int | GroupKind::Long => {
            let type_name = if def.kind == GroupKind::Int { "INT" } else { "LONG" };
            let number = match def.kind {
                GroupKind::Int => value.trim().parse::<i32>().map(i64::from).ok(),
                _ => value.trim().parse::<i64>().ok(),
            };
            let Some(number) = number else { return invalid(&format!("Not a number of type {type_name}")) };
            if let Some(least) = def.at_least.filter(|least| number < *least) {
                return invalid(&format!("Value must be at least {least}"));
            }
        }
        GroupKind::Boolean
            if !value.trim().eq_ignore_ascii_case("true") && !value.trim().eq_ignore_ascii_case("false") =>
        {
            return invalid("Expected value to be either true or false");
        }
        _ if !def.one_of.is_empty() && !def.one_of.contains(&value) => {
            return invalid(&format!("String must be one of: {}", def.one_of.join(", ")));
        }
        _ if name == "share.auto.offset.reset" && !valid_share_reset(value) => {
            return invalid("Invalid value for share.auto.offset.reset");
        }
        _ => {}
    }
    Ok(())
}

/// `earliest`, `latest` or `by_duration:<ISO-8601 duration>`.
fn valid_share_reset(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    lower == "earliest"
        || lower == "latest"
        || lower
            .strip_prefix("by_duration:")
            .is_some_and(|d| d.starts_with('p') && d.len() > 1 && !d.contains('-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_types_and_least_values_are_refused_with_kafkas_messages() {
        assert_eq!(validate_group_config("no.such", "1").unwrap_err(), "Unknown group config name: no.such");
        assert_eq!(
            validate_group_config("consumer.session.timeout.ms", "x").unwrap_err(),
            "Invalid value x for configuration consumer.session.timeout.ms: Not a number of type INT"
        );
        assert!(validate_group_config("share.delivery.count.limit", "1")
            .unwrap_err()
            .ends_with("at least 2"));
        assert!(validate_group_config("share.isolation.level", "dirty").is_err());
        assert!(validate_group_config("share.auto.offset.reset", "by_duration:PT1H").is_ok());
        assert!(validate_group_config("share.renew.acknowledge.enable", "maybe").is_err());
        assert!(validate_group_config("consumer.session.timeout.ms", "50000").is_ok());
    }
}
