//! Feature levels outside the controller: the names of `metadata.version`
//! levels (Kafka's `MetadataVersion`), and the levels a new cluster starts
//! at, chosen by `strom storage format --release-version/--feature` as by
//! `kafka-storage.sh format`, and kept in the metadata log's bootstrap
//! checkpoint until the first active controller writes them.

use std::path::Path;

use crate::controller::{
    BOOTSTRAP_FEATURES, KRAFT_VERSION_FEATURE, METADATA_VERSION_FEATURE, METADATA_VERSION_LEVEL,
    SUPPORTED_FEATURES,
};
use crate::kraft_records::{FeatureLevelRecord, MetadataRecord};
use crate::loader::{decode_record, encode_record};

/// Kafka's production `metadata.version` levels by name, oldest first.
const METADATA_VERSIONS: [(&str, i16); 27] = [
    ("3.3-IV3", 7),
    ("3.4-IV0", 8),
    ("3.5-IV0", 9),
    ("3.5-IV1", 10),
    ("3.5-IV2", 11),
    ("3.6-IV0", 12),
    ("3.6-IV1", 13),
    ("3.6-IV2", 14),
    ("3.7-IV0", 15),
    ("3.7-IV1", 16),
    ("3.7-IV2", 17),
    ("3.7-IV3", 18),
    ("3.7-IV4", 19),
    ("3.8-IV0", 20),
    ("3.9-IV0", 21),
    ("4.0-IV0", 22),
    ("4.0-IV1", 23),
    ("4.0-IV2", 24),
    ("4.0-IV3", 25),
    ("4.1-IV0", 26),
    ("4.1-IV1", 27),
    ("4.2-IV0", 28),
    ("4.2-IV1", 29),
    ("4.3-IV0", 30),
    ("4.4-IV0", 31),
    ("4.4-IV1", 32),
    ("4.4-IV2", 33),
];

/// Kafka's features besides `metadata.version`; those Strom does not list
/// in [`SUPPORTED_FEATURES`] it supports at level 0 only.
const KAFKA_FEATURES: [&str; 6] = [
    "kraft.version",
    "transaction.version",
    "group.version",
    "eligible.leader.replicas.version",
    "share.version",
    "streams.version",
];

/// The name of a `metadata.version` level, e.g. 27 is "4.1-IV1".
pub fn metadata_version_name(level: i16) -> Option<&'static str> {
    METADATA_VERSIONS.iter().find(|(_, l)| *l == level).map(|(name, _)| *name)
}

/// The level a release names: "4.1-IV1" exactly, or "4.1" as its latest
/// level (Kafka's `MetadataVersion.fromVersionString`).
pub fn metadata_version_level(release: &str) -> Option<i16> {
    let exact = METADATA_VERSIONS.iter().find(|(name, _)| *name == release);
    let latest_of_release =
        || METADATA_VERSIONS.iter().rev().find(|(name, _)| name.split('-').next() == Some(release));
    exact.or_else(latest_of_release).map(|(_, level)| *level)
}

/// "3.3-IV3, 3.4-IV0, …": the names Kafka lists when refusing a release.
pub fn metadata_version_names() -> String {
    METADATA_VERSIONS.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ")
}

/// The levels a node is formatted with, as Kafka's `Formatter` computes
/// them: `metadata.version` from `release_version` (or from a
/// `metadata.version=` feature), every other feature at its default
/// unless `features` names it; `kraft.version` follows the quorum (1 for
/// a dynamic one). Levels of 0 are left out.
pub fn format_levels(
    release_version: Option<&str>,
    features: &[(String, i16)],
    dynamic_quorum: bool,
) -> Result<Vec<(String, i16)>, String> {
    let named_metadata = features.iter().find(|(name, _)| name == METADATA_VERSION_FEATURE);
    let metadata_version = match (release_version, named_metadata) {
        (Some(_), Some((_, level))) => {
            return Err(format!(
                "Use --release-version instead of --feature {METADATA_VERSION_FEATURE}={level} to avoid ambiguity."
            ))
        }
        (None, Some((_, level))) => *level,
        (Some(release), None) => metadata_version_level(release).ok_or_else(|| {
            format!("Unknown release version '{release}'. Supported versions are: {}", metadata_version_names())
        })?,
        (None, None) => METADATA_VERSION_LEVEL,
    };
    check_metadata_version(metadata_version)?;
    let mut levels = vec![(METADATA_VERSION_FEATURE.to_owned(), metadata_version)];
    for (name, level) in features.iter().filter(|(name, _)| name != METADATA_VERSION_FEATURE) {
        check_format_level(name, *level, dynamic_quorum)?;
        levels.push((name.clone(), *level));
    }
    for (name, level) in BOOTSTRAP_FEATURES {
        if !levels.iter().any(|(n, _)| n == name) {
            levels.push((name.to_owned(), level));
        }
    }
    levels.retain(|(name, level)| *level > 0 && name != KRAFT_VERSION_FEATURE);
    Ok(levels)
}

/// Checks bootstrap levels another tool may have written (Kafka's
/// `kafka-storage.sh format`): Strom must serve every one of them.
pub fn check_served(levels: &[(String, i16)]) -> Result<(), String> {
    for (name, level) in levels {
        match name.as_str() {
            METADATA_VERSION_FEATURE => check_metadata_version(*level)?,
            // The quorum's own records decide it.
            KRAFT_VERSION_FEATURE => {}
            _ => check_format_level(name, *level, false)?,
        }
    }
    Ok(())
}

fn check_metadata_version(level: i16) -> Result<(), String> {
    if level == METADATA_VERSION_LEVEL {
        return Ok(());
    }
    let name = metadata_version_name(level).unwrap_or("unknown");
    let served = metadata_version_name(METADATA_VERSION_LEVEL).unwrap_or_default();
    Err(format!(
        "Unsupported metadata.version {level} ({name}): Strom serves {served} ({METADATA_VERSION_LEVEL})."
    ))
}

fn check_format_level(name: &str, level: i16, dynamic_quorum: bool) -> Result<(), String> {
    if !KAFKA_FEATURES.contains(&name) {
        let mut known: Vec<&str> = KAFKA_FEATURES.to_vec();
        known.sort_unstable();
        return Err(format!("Unsupported feature: {name}. Supported features are: {}", known.join(", ")));
    }
    if name == KRAFT_VERSION_FEATURE {
        return match (level, dynamic_quorum) {
            (0, true) => Err("Cannot set kraft.version to 0 if KIP-853 configuration is present. Try removing the --feature flag for kraft.version.".into()),
            (1, false) => Err("Cannot set kraft.version to 1 unless KIP-853 configuration is present. Try removing the --feature flag for kraft.version.".into()),
            _ if level > 1 => Err(format!("No feature:{name} with feature level {level}")),
            _ => Ok(()),
        };
    }
    let (min, max) =
        SUPPORTED_FEATURES.iter().find(|(n, ..)| *n == name).map_or((0, 0), |(_, min, max)| (*min, *max));
    if !(min..=max).contains(&level) {
        return Err(format!("Unsupported level {level} of feature {name}: Strom supports {min} to {max}."));
    }
    Ok(())
}

/// `levels` as the bootstrap records of a new metadata log.
pub fn bootstrap_records(levels: &[(String, i16)]) -> Vec<bytes::Bytes> {
    levels
        .iter()
        .map(|(name, level)| {
            let record =
                FeatureLevelRecord { name: name.clone(), feature_level: *level, ..Default::default() };
            encode_record(&record.into())
        })
        .collect()
}

/// The feature levels of `metadata_log_dir`'s bootstrap records, if
/// `format` wrote any (records of other kinds are not Strom's to bootstrap).
pub fn read_bootstrap(metadata_log_dir: &Path) -> Result<Option<Vec<(String, i16)>>, String> {
    let Some(records) = strom_quorum::bootstrap::read_records(metadata_log_dir).map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    let mut levels = Vec::new();
    for value in records {
        match decode_record(&value).map_err(|e| format!("bootstrap record: {e}"))? {
            MetadataRecord::FeatureLevel(r) => levels.push((r.name, r.feature_level)),
            other => tracing::warn!(record = other.name(), "bootstrap record ignored"),
        }
    }
    Ok(Some(levels))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(levels: &[(String, i16)], name: &str) -> Option<i16> {
        levels.iter().find(|(n, _)| n == name).map(|(_, l)| *l)
    }

    #[test]
    fn releases_name_their_latest_level_or_an_exact_one() {
        assert_eq!(metadata_version_level("4.1"), Some(27));
        assert_eq!(metadata_version_level("4.1-IV0"), Some(26));
        assert_eq!(metadata_version_level("3.3"), Some(7));
        assert_eq!(metadata_version_level("2.8"), None);
        assert_eq!(metadata_version_name(27), Some("4.1-IV1"));
    }

    #[test]
    fn format_defaults_to_the_served_release_and_takes_named_features() {
        let levels = format_levels(None, &[], false).unwrap();
        assert_eq!(level(&levels, METADATA_VERSION_FEATURE), Some(METADATA_VERSION_LEVEL));
        assert_eq!(level(&levels, "group.version"), Some(1));
        let levels = format_levels(Some("4.1-IV1"), &[("group.version".into(), 0)], false).unwrap();
        assert_eq!(level(&levels, "group.version"), None, "level 0 is left out");
        assert_eq!(level(&levels, "eligible.leader.replicas.version"), Some(1));
    }

    #[test]
    fn format_refuses_what_kafka_refuses_and_levels_strom_does_not_serve() {
        let refused = |release: Option<&str>, features: &[(&str, i16)], dynamic: bool| {
            let features: Vec<(String, i16)> = features.iter().map(|(n, l)| ((*n).to_owned(), *l)).collect();
            format_levels(release, &features, dynamic).unwrap_err()
        };
        assert!(refused(Some("4.1"), &[("metadata.version", 27)], false).contains("avoid ambiguity"));
        assert!(refused(Some("9.9"), &[], false).starts_with("Unknown release version '9.9'"));
        assert!(refused(Some("4.4"), &[], false).contains("Strom serves 4.1-IV1"));
        assert!(refused(None, &[("no.such", 1)], false).starts_with("Unsupported feature: no.such."));
        assert!(refused(None, &[("transaction.version", 2)], false).contains("supports 0 to 0"));
        assert!(refused(None, &[("kraft.version", 1)], false).contains("unless KIP-853"));
        assert!(refused(None, &[("kraft.version", 0)], true).contains("if KIP-853"));
        assert!(format_levels(None, &[("transaction.version".into(), 0)], false).is_ok());
    }

    #[test]
    fn bootstrap_levels_written_by_kafka_must_be_served() {
        let levels = |mv: i16| vec![("metadata.version".to_owned(), mv), ("kraft.version".to_owned(), 1)];
        assert!(check_served(&levels(METADATA_VERSION_LEVEL)).is_ok());
        assert!(check_served(&levels(33)).unwrap_err().contains("33 (4.4-IV2)"));
    }

    #[test]
    fn bootstrap_levels_read_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_bootstrap(dir.path()).unwrap(), None);
        let levels = format_levels(None, &[("group.version".into(), 0)], false).unwrap();
        strom_quorum::bootstrap::write_checkpoint(dir.path(), None, bootstrap_records(&levels)).unwrap();
        assert_eq!(read_bootstrap(dir.path()).unwrap(), Some(levels));
    }
}
