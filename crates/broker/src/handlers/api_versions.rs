//! ApiVersions: the table every client negotiates against.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::VersionRange;

use crate::dispatch::RequestContext;

/// The APIs this broker serves; versions are those Kafka 4.1 accepts.
const SERVED: &[ApiKey] = &[
    ApiKey::Produce,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::Metadata,
    ApiKey::ApiVersions,
    ApiKey::CreateTopics,
    ApiKey::DeleteTopics,
    ApiKey::DeleteRecords,
    ApiKey::CreatePartitions,
    ApiKey::DescribeCluster,
    ApiKey::FindCoordinator,
    ApiKey::JoinGroup,
    ApiKey::SyncGroup,
    ApiKey::Heartbeat,
    ApiKey::LeaveGroup,
    ApiKey::ListGroups,
    ApiKey::DescribeGroups,
    ApiKey::DeleteGroups,
    ApiKey::OffsetCommit,
    ApiKey::OffsetFetch,
    ApiKey::OffsetDelete,
    ApiKey::ConsumerGroupHeartbeat,
    ApiKey::ConsumerGroupDescribe,
    ApiKey::DescribeConfigs,
    ApiKey::AlterConfigs,
    ApiKey::IncrementalAlterConfigs,
    ApiKey::InitProducerId,
    ApiKey::DescribeLogDirs,
    ApiKey::AddPartitionsToTxn,
    ApiKey::AddOffsetsToTxn,
    ApiKey::EndTxn,
    ApiKey::TxnOffsetCommit,
    ApiKey::WriteTxnMarkers,
    ApiKey::DescribeTransactions,
    ApiKey::ListTransactions,
    ApiKey::DescribeProducers,
    ApiKey::OffsetForLeaderEpoch,
];

/// The version range served for `key`, if it is served at all.
pub fn supported(key: ApiKey) -> Option<VersionRange> {
    SERVED.contains(&key).then(|| served_versions(key))
}

/// Kafka's range, capped where `kafka-protocol` 0.18 lists a version its
/// decoder does not handle yet (OffsetCommit and OffsetFetch v10) or one
/// Kafka 4.1 does not advertise (InitProducerId v6, two-phase commit).
fn served_versions(key: ApiKey) -> VersionRange {
    let range = key.valid_versions();
    let decodable_max = match key {
        ApiKey::OffsetCommit | ApiKey::OffsetFetch => 9,
        ApiKey::InitProducerId => 5,
        _ => range.max,
    };
    // Kafka 4 removed OffsetForLeaderEpoch v0-v1 (KIP-896).
    let min = if key == ApiKey::OffsetForLeaderEpoch { range.min.max(2) } else { range.min };
    VersionRange { min, max: range.max.min(decodable_max) }
}

/// The lowest Produce version advertised, below the lowest served (3):
/// librdkafka releases older than Kafka 4 compress only when ApiVersions
/// lists Produce from v0 (KAFKA-18659, librdkafka#4956), so Kafka 4
/// advertises v0-v2 and still refuses them; so does Strom.
const PRODUCE_ADVERTISED_MIN_VERSION: i16 = 0;

/// The table ApiVersions answers with: the served versions, but for
/// Produce's lower bound, which is Kafka's.
pub fn api_keys() -> Vec<ApiVersion> {
    SERVED
        .iter()
        .map(|key| {
            let mut range = served_versions(*key);
            if *key == ApiKey::Produce {
                range.min = PRODUCE_ADVERTISED_MIN_VERSION;
            }
            ApiVersion::default()
                .with_api_key(*key as i16)
                .with_min_version(range.min)
                .with_max_version(range.max)
        })
        .collect()
}

pub fn handle(_ctx: &RequestContext<'_>, _request: ApiVersionsRequest) -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(api_keys())
}
