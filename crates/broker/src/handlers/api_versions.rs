//! ApiVersions: the table every client negotiates against, read from
//! [`crate::apis`]. The KRaft APIs only the quorum and the controller's
//! brokers use are advertised on controller listeners only, as Kafka
//! advertises them. From v3 the answer also carries the features this node
//! supports and the levels the cluster has finalized (KIP-584).

use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;
use strom_metadata::controller::SUPPORTED_FEATURES;
use strom_metadata::MetadataImage;

use crate::apis::SERVED;
use crate::dispatch::RequestContext;

/// The APIs Kafka lists on controller listeners only.
const CONTROLLER_ONLY: [ApiKey; 11] = [
    ApiKey::Vote,
    ApiKey::BeginQuorumEpoch,
    ApiKey::EndQuorumEpoch,
    ApiKey::FetchSnapshot,
    ApiKey::UpdateRaftVoter,
    ApiKey::BrokerRegistration,
    ApiKey::BrokerHeartbeat,
    ApiKey::ControllerRegistration,
    ApiKey::AllocateProducerIds,
    ApiKey::AlterPartition,
    ApiKey::Envelope,
];

/// The table ApiVersions answers with on a broker listener: each served
/// API's versions, from its advertised minimum.
pub fn api_keys() -> Vec<ApiVersion> {
    listed(false)
}

fn listed(controller_listener: bool) -> Vec<ApiVersion> {
    SERVED
        .iter()
        .filter(|api| controller_listener || !CONTROLLER_ONLY.contains(&api.key))
        .map(|api| {
            ApiVersion::default()
                .with_api_key(api.key as i16)
                .with_min_version(api.advertised_min)
                .with_max_version(api.versions.max)
        })
        .collect()
}

pub fn handle(ctx: &RequestContext<'_>, _request: ApiVersionsRequest) -> ApiVersionsResponse {
    let image = ctx.controller().image();
    ApiVersionsResponse::default()
        .with_api_keys(listed(ctx.on_controller_listener()))
        .with_supported_features(supported_features())
        .with_finalized_features_epoch(image.last_offset)
        .with_finalized_features(finalized_features(&image))
}

fn supported_features() -> Vec<SupportedFeatureKey> {
    SUPPORTED_FEATURES
        .iter()
        .map(|(name, min, max)| {
            SupportedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect()
}

/// The finalized levels, as Kafka lists them: those above 0, each as a
/// range from its level to itself.
fn finalized_features(image: &MetadataImage) -> Vec<FinalizedFeatureKey> {
    image
        .features
        .iter()
        .filter(|(_, level)| **level > 0)
        .map(|(name, level)| {
            FinalizedFeatureKey::default()
                .with_name(StrBytes::from_string(name.clone()))
                .with_min_version_level(*level)
                .with_max_version_level(*level)
        })
        .collect()
}
