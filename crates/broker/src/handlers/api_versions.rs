//! ApiVersions: the table every client negotiates against, read from
//! [`crate::apis`]. The KRaft APIs only the quorum and the controller's
//! brokers use are advertised on controller listeners only, as Kafka
//! advertises them.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};

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
    ApiVersionsResponse::default().with_api_keys(listed(ctx.on_controller_listener()))
}
