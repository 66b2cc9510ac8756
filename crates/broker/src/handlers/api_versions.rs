//! ApiVersions: the table every client negotiates against, read from
//! [`crate::apis`].

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};

use crate::apis::SERVED;
use crate::dispatch::RequestContext;

/// The table ApiVersions answers with: each served API's versions, from
/// its advertised minimum.
pub fn api_keys() -> Vec<ApiVersion> {
    SERVED
        .iter()
        .map(|api| {
            ApiVersion::default()
                .with_api_key(api.key as i16)
                .with_min_version(api.advertised_min)
                .with_max_version(api.versions.max)
        })
        .collect()
}

pub fn handle(_ctx: &RequestContext<'_>, _request: ApiVersionsRequest) -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(api_keys())
}
