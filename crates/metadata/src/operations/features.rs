//! UpdateFeatures (KIP-584, KIP-778): moving a finalized feature level, by
//! the rules of Kafka's `FeatureControlManager`. A level must be supported
//! by this controller and by every registered broker and controller; a
//! downgrade must say so; one refused update refuses the whole request.

use crate::controller::{
    MetadataError, ELIGIBLE_LEADER_REPLICAS_FEATURE, KRAFT_VERSION_FEATURE, SUPPORTED_FEATURES,
};
use crate::image::{FeatureRange, MetadataImage};
use crate::kraft_records::{ClearElrRecord, FeatureLevelRecord, MetadataRecord};

/// Kafka's `FeatureUpdate.UpgradeType`, as UpdateFeatures codes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpgradeType {
    Upgrade,
    SafeDowngrade,
    UnsafeDowngrade,
    Unknown,
}

impl UpgradeType {
    pub fn from_code(code: i8) -> Self {
        match code {
            1 => Self::Upgrade,
            2 => Self::SafeDowngrade,
            3 => Self::UnsafeDowngrade,
            _ => Self::Unknown,
        }
    }
}

/// One entry of an UpdateFeatures request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureUpdate {
    pub name: String,
    pub level: i16,
    pub upgrade_type: UpgradeType,
}

/// The records that finalize `updates`, or the first update's refusal.
/// `local` is this controller's node id, named in Kafka's messages.
pub fn update_features(
    image: &MetadataImage,
    local: i32,
    updates: &[FeatureUpdate],
) -> Result<Vec<MetadataRecord>, MetadataError> {
    let mut records = Vec::new();
    for update in updates {
        let refuse = |why: String| {
            MetadataError::InvalidUpdateVersion(format!(
                "Invalid update version {} for feature {}. {why}",
                update.level, update.name
            ))
        };
        check_update(image, local, update).map_err(refuse)?;
        records.push(
            FeatureLevelRecord {
                name: update.name.clone(),
                feature_level: update.level,
                ..Default::default()
            }
            .into(),
        );
        // Without eligible leader replicas the partitions keep none.
        if update.name == ELIGIBLE_LEADER_REPLICAS_FEATURE && update.level == 0 && image.elr_enabled() {
            records.push(ClearElrRecord::default().into());
        }
    }
    Ok(records)
}

fn check_update(image: &MetadataImage, local: i32, update: &FeatureUpdate) -> Result<(), String> {
    let FeatureUpdate { name, level, upgrade_type } = update;
    if *upgrade_type == UpgradeType::Unknown {
        return Err("The controller does not support the given upgrade type.".into());
    }
    let current = image.features.get(name).copied().unwrap_or(0);
    if *level < 0 {
        return Err("A feature version cannot be less than 0.".into());
    }
    reason_not_supported(image, local, name, *level)?;
    if *level < current && *upgrade_type == UpgradeType::Upgrade {
        return Err("Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade.".into());
    }
    if *level > current && *upgrade_type != UpgradeType::Upgrade {
        return Err("Can't downgrade to a newer version.".into());
    }
    // The quorum's own feature is fixed when its voters are formatted.
    if name == KRAFT_VERSION_FEATURE && *level != current {
        return Err("Changing kraft.version of a running quorum is not supported.".into());
    }
    Ok(())
}

/// Kafka's `reasonNotSupported`: this controller first, then each
/// registered broker and controller, by the ranges they registered.
fn reason_not_supported(image: &MetadataImage, local: i32, name: &str, level: i16) -> Result<(), String> {
    let local_range = SUPPORTED_FEATURES.iter().find(|(n, ..)| *n == name).map(|(_, min, max)| (*min, *max));
    check_range(&format!("Local controller {local}"), local_range, level)?;
    for broker in image.brokers.values() {
        check_range(&format!("Broker {}", broker.id), registered(&broker.features, name), level)?;
    }
    for controller in image.controllers.values().filter(|c| c.id != local) {
        check_range(&format!("Controller {}", controller.id), registered(&controller.features, name), level)?;
    }
    Ok(())
}

/// A registration's range of `name`.
fn registered(features: &[FeatureRange], name: &str) -> Option<(i16, i16)> {
    features.iter().find(|f| f.name == name).map(|f| (f.min, f.max))
}

/// Kafka's `QuorumFeatures.reasonNotSupported`; a feature not listed is
/// supported at 0 only.
fn check_range(what: &str, range: Option<(i16, i16)>, level: i16) -> Result<(), String> {
    let (min, max) = range.unwrap_or((0, 0));
    if (min..=max).contains(&level) {
        return Ok(());
    }
    Err(match (min, max) {
        (_, 0) => format!("{what} does not support this feature."),
        (min, max) if min == max => format!("{what} only supports versions {min}"),
        (min, max) => format!("{what} only supports versions {min}-{max}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{GROUP_VERSION_FEATURE, METADATA_VERSION_FEATURE, METADATA_VERSION_LEVEL};
    use crate::image::BrokerImage;

    fn image(broker_group_max: i16) -> MetadataImage {
        let mut image = MetadataImage::default();
        image.features.insert(METADATA_VERSION_FEATURE.into(), METADATA_VERSION_LEVEL);
        image.features.insert(GROUP_VERSION_FEATURE.into(), 1);
        image.features.insert(ELIGIBLE_LEADER_REPLICAS_FEATURE.into(), 1);
        let features =
            vec![FeatureRange { name: GROUP_VERSION_FEATURE.into(), min: 0, max: broker_group_max }];
        let broker = BrokerImage {
            id: 2,
            epoch: 5,
            incarnation_id: Default::default(),
            endpoints: Vec::new(),
            features,
            rack: None,
            fenced: false,
            in_controlled_shutdown: false,
            log_dirs: Vec::new(),
        };
        image.brokers.insert(2, broker);
        image
    }

    fn update(name: &str, level: i16, upgrade_type: UpgradeType) -> FeatureUpdate {
        FeatureUpdate { name: name.into(), level, upgrade_type }
    }

    fn refusal(image: &MetadataImage, updates: &[FeatureUpdate]) -> String {
        match update_features(image, 1, updates) {
            Err(MetadataError::InvalidUpdateVersion(why)) => why,
            other => panic!("expected INVALID_UPDATE_VERSION, got {other:?}"),
        }
    }

    #[test]
    fn a_downgrade_must_say_so_and_an_upgrade_must_not() {
        let image = image(1);
        let why = refusal(&image, &[update(GROUP_VERSION_FEATURE, 0, UpgradeType::Upgrade)]);
        assert!(
            why.starts_with("Invalid update version 0 for feature group.version. Can't downgrade"),
            "{why}"
        );
        let records =
            update_features(&image, 1, &[update(GROUP_VERSION_FEATURE, 0, UpgradeType::SafeDowngrade)])
                .unwrap();
        assert!(matches!(&records[..], [MetadataRecord::FeatureLevel(r)] if r.feature_level == 0));
        let mut disabled = image.clone();
        disabled.features.remove(GROUP_VERSION_FEATURE);
        let why = refusal(&disabled, &[update(GROUP_VERSION_FEATURE, 1, UpgradeType::SafeDowngrade)]);
        assert!(why.ends_with("Can't downgrade to a newer version."), "{why}");
        let why = refusal(&image, &[update(GROUP_VERSION_FEATURE, 1, UpgradeType::Unknown)]);
        assert!(why.ends_with("does not support the given upgrade type."), "{why}");
    }

    #[test]
    fn every_node_must_support_the_level_and_one_refusal_refuses_all() {
        let why = refusal(&image(1), &[update(METADATA_VERSION_FEATURE, 33, UpgradeType::Upgrade)]);
        assert!(why.ends_with("Local controller 1 only supports versions 27"), "{why}");
        let why = refusal(&image(1), &[update("share.version", 1, UpgradeType::Upgrade)]);
        assert!(why.ends_with("Local controller 1 does not support this feature."), "{why}");
        let mut image = image(0);
        image.features.remove(GROUP_VERSION_FEATURE);
        let updates = [
            update(ELIGIBLE_LEADER_REPLICAS_FEATURE, 0, UpgradeType::SafeDowngrade),
            update(GROUP_VERSION_FEATURE, 1, UpgradeType::Upgrade),
        ];
        let why = refusal(&image, &updates);
        assert!(why.ends_with("Broker 2 does not support this feature."), "{why}");
    }

    #[test]
    fn turning_eligible_leader_replicas_off_clears_them_everywhere() {
        let updates = [update(ELIGIBLE_LEADER_REPLICAS_FEATURE, 0, UpgradeType::SafeDowngrade)];
        let records = update_features(&image(1), 1, &updates).unwrap();
        assert!(
            matches!(&records[..], [MetadataRecord::FeatureLevel(_), MetadataRecord::ClearElr(r)] if r.topic_name.is_empty())
        );
    }
}
