//! Group resources of DescribeConfigs and the config APIs (KIP-848): each
//! group config with the group's override, else the broker's synonym,
//! else Kafka's default; and the broker's bounds on new values
//! (`group.consumer.min.session.timeout.ms` and the like).

use std::collections::BTreeMap;

use strom_metadata::group_config::{
    group_config_def, validate_group_config, GroupConfigDef, GroupKind, GROUP_CONFIGS,
};
use strom_metadata::MetadataError;

use crate::config::BrokerConfig;
use crate::config_sources::{config_type, ConfigEntry, Synonym, DEFAULT_CONFIG, STATIC_BROKER_CONFIG};

/// Kafka's `ConfigSource.GROUP_CONFIG`.
pub const DYNAMIC_GROUP_CONFIG: i8 = 8;

/// The group configs `wanted` of a group with these `overrides`.
pub fn entries(
    config: &BrokerConfig,
    overrides: &BTreeMap<String, String>,
    wanted: impl Fn(&str) -> bool,
) -> Vec<ConfigEntry> {
    let entry = |def: &GroupConfigDef| {
        let own = overrides.get(def.name).map(|v| (v.clone(), DYNAMIC_GROUP_CONFIG, def.name));
        let broker = def
            .broker_synonym
            .and_then(|key| config.provided.get(key).map(|v| (v.clone(), STATIC_BROKER_CONFIG, key)));
        // Kafka lists the default last, under the broker synonym's name.
        let default = (def.default.to_owned(), DEFAULT_CONFIG, def.broker_synonym.unwrap_or(def.name));
        let levels: Vec<(String, i8, &str)> = own.into_iter().chain(broker).chain([default]).collect();
        let synonyms: Vec<Synonym> = levels
            .iter()
            .map(|(value, source, name)| Synonym {
                name: (*name).to_owned(),
                value: value.clone(),
                source: *source,
            })
            .collect();
        let (value, source, _) = levels[0].clone();
        ConfigEntry {
            name: def.name.to_owned(),
            value: Some(value),
            source,
            read_only: false,
            config_type: wire_type(def.kind),
            synonyms,
        }
    };
    GROUP_CONFIGS.iter().filter(|def| wanted(def.name)).map(entry).collect()
}

fn wire_type(kind: GroupKind) -> i8 {
    match kind {
        GroupKind::Int => config_type::INT,
        GroupKind::Long => config_type::LONG,
        GroupKind::Boolean => config_type::BOOLEAN,
        GroupKind::String => config_type::STRING,
        GroupKind::List => config_type::LIST,
    }
}

/// The broker's bounds on each changed value of `next`, with Kafka's message.
pub fn check_bounds(config: &BrokerConfig, next: &BTreeMap<String, String>) -> Result<(), MetadataError> {
    for (name, value) in next {
        // Kafka checks the value itself first.
        validate_group_config(name, value).map_err(MetadataError::InvalidConfig)?;
        let Some((min_key, min, max_key, max)) = group_config_def(name).and_then(|def| def.bounds) else {
            continue;
        };
        let bound = |key: &str, default: i64| {
            config.provided.get(key).and_then(|v| v.trim().parse().ok()).unwrap_or(default)
        };
        let (min, max) = (bound(min_key, min), bound(max_key, max));
        let Ok(number) = value.trim().parse::<i64>() else { continue };
        if !(min..=max).contains(&number) {
            return Err(MetadataError::InvalidConfig(format!(
                "{name} must be in the range {min} to {max} inclusive."
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_override_wins_over_the_broker_and_kafkas_default() {
        let config = BrokerConfig::from_properties("group.consumer.session.timeout.ms=50000\n", &[]).unwrap();
        let overrides = BTreeMap::from([("consumer.heartbeat.interval.ms".to_owned(), "6000".to_owned())]);
        let described = entries(&config, &overrides, |n| n.starts_with("consumer."));
        let find = |name: &str| described.iter().find(|e| e.name == name).unwrap();
        assert_eq!(described.len(), 3);
        assert_eq!(
            (
                find("consumer.heartbeat.interval.ms").value.as_deref(),
                find("consumer.heartbeat.interval.ms").source
            ),
            (Some("6000"), DYNAMIC_GROUP_CONFIG)
        );
        assert_eq!(
            (
                find("consumer.session.timeout.ms").value.as_deref(),
                find("consumer.session.timeout.ms").source
            ),
            (Some("50000"), STATIC_BROKER_CONFIG)
        );
        assert_eq!(
            (
                find("consumer.assignment.interval.ms").value.as_deref(),
                find("consumer.assignment.interval.ms").source
            ),
            (Some("1000"), DEFAULT_CONFIG)
        );
    }

    #[test]
    fn values_outside_the_brokers_bounds_are_refused() {
        let config =
            BrokerConfig::from_properties("group.consumer.max.session.timeout.ms=70000\n", &[]).unwrap();
        let next = |v: &str| BTreeMap::from([("consumer.session.timeout.ms".to_owned(), v.to_owned())]);
        assert!(check_bounds(&config, &next("65000")).is_ok());
        let refused = check_bounds(&config, &next("1")).unwrap_err().to_string();
        assert_eq!(refused, "consumer.session.timeout.ms must be in the range 45000 to 70000 inclusive.");
    }
}
