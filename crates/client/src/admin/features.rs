//! Feature levels (KIP-584): what a broker supports and what the cluster
//! has finalized, as Java's `Admin.describeFeatures` reads them from
//! ApiVersions, and `Admin.updateFeatures` (UpdateFeatures, to the
//! controller).

use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::{ApiVersionsRequest, UpdateFeaturesRequest};
use kafka_protocol::protocol::StrBytes;

use super::{timeout_ms, Admin};
use crate::error::{Error, Result};

/// One feature as a broker's ApiVersions lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureDescription {
    pub name: String,
    pub supported_min: i16,
    pub supported_max: i16,
    /// `None` while the cluster has not finalized it (level 0).
    pub finalized: Option<i16>,
}

/// A broker's features and the epoch (metadata offset) of the finalized ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureMetadata {
    pub features: Vec<FeatureDescription>,
    pub finalized_epoch: i64,
}

/// Kafka's `FeatureUpdate.UpgradeType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpgradeType {
    Upgrade = 1,
    SafeDowngrade = 2,
    UnsafeDowngrade = 3,
}

impl Admin {
    /// The features of any one broker, supported and finalized.
    pub async fn describe_features(&self) -> Result<FeatureMetadata> {
        let connection = self.cluster.any_connection().await?;
        let response = connection.send(&ApiVersionsRequest::default()).await?;
        if let Some(e) = Error::from_code(response.error_code, None) {
            return Err(e);
        }
        let finalized = |name: &StrBytes| {
            let found = response.finalized_features.iter().find(|f| &f.name == name);
            found.map(|f| f.max_version_level)
        };
        let features = response
            .supported_features
            .iter()
            .map(|f| FeatureDescription {
                name: f.name.to_string(),
                supported_min: f.min_version,
                supported_max: f.max_version,
                finalized: finalized(&f.name),
            })
            .collect();
        Ok(FeatureMetadata { features, finalized_epoch: response.finalized_features_epoch })
    }

    /// UpdateFeatures: every `(name, level, type)` finalized, or none (the
    /// first refusal is the error); `validate_only` only checks them.
    pub async fn update_features(
        &self,
        updates: &[(String, i16, UpgradeType)],
        validate_only: bool,
    ) -> Result<()> {
        let keys = updates.iter().map(|(name, level, upgrade_type)| {
            FeatureUpdateKey::default()
                .with_feature(StrBytes::from_string(name.clone()))
                .with_max_version_level(*level)
                .with_upgrade_type(*upgrade_type as i8)
        });
        let request = UpdateFeaturesRequest::default()
            .with_timeout_ms(timeout_ms(&self.cluster))
            .with_feature_updates(keys.collect())
            .with_validate_only(validate_only);
        let response = self.to_controller("UpdateFeatures", &request).await?;
        let message = response.error_message.as_ref().map(|m| m.as_str());
        if let Some(e) = Error::from_code(response.error_code, message) {
            return Err(e);
        }
        let refused = response.results.iter().find(|r| r.error_code != 0);
        match refused
            .and_then(|r| Error::from_code(r.error_code, r.error_message.as_ref().map(|m| m.as_str())))
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
