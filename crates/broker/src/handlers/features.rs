//! UpdateFeatures (KIP-584): finalized feature levels moved by the active
//! controller (brokers forward the request). A refusal of one update fails
//! them all under one top-level error; v0-v1 also answer per feature.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{UpdateFeaturesRequest, UpdateFeaturesResponse};
use strom_metadata::acl::operation;
use strom_metadata::operations::{FeatureUpdate, UpgradeType};

use super::str_bytes;
use crate::dispatch::RequestContext;
use crate::error::metadata_error;

pub async fn update(ctx: &RequestContext<'_>, request: UpdateFeaturesRequest) -> UpdateFeaturesResponse {
    if !ctx.authorize_cluster(operation::ALTER) {
        return failed(ResponseError::ClusterAuthorizationFailed, None);
    }
    let updates: Vec<FeatureUpdate> =
        request.feature_updates.iter().map(|u| feature_update(ctx, u)).collect();
    let local = ctx.config().node_id;
    match ctx.controller().update_features(local, &updates, request.validate_only).await {
        Ok(()) => {
            let results = request
                .feature_updates
                .iter()
                .map(|u| UpdatableFeatureResult::default().with_feature(u.feature.clone()));
            let results = if ctx.api_version <= 1 { results.collect() } else { Vec::new() };
            UpdateFeaturesResponse::default().with_results(results)
        }
        Err(e) => {
            tracing::info!("feature update refused: {e}");
            let message =
                format!("The update failed for all features since the following feature had an error: {e}");
            failed(metadata_error(&e), Some(&message))
        }
    }
}

/// v0 names a downgrade with `allow_downgrade`; v1 on with an upgrade type.
fn feature_update(
    ctx: &RequestContext<'_>,
    update: &kafka_protocol::messages::update_features_request::FeatureUpdateKey,
) -> FeatureUpdate {
    let upgrade_type = match (ctx.api_version, update.allow_downgrade) {
        (0, true) => UpgradeType::SafeDowngrade,
        (0, false) => UpgradeType::Upgrade,
        _ => UpgradeType::from_code(update.upgrade_type),
    };
    FeatureUpdate { name: update.feature.to_string(), level: update.max_version_level, upgrade_type }
}

pub fn failed(error: ResponseError, message: Option<&str>) -> UpdateFeaturesResponse {
    UpdateFeaturesResponse::default().with_error_code(error.code()).with_error_message(message.map(str_bytes))
}
