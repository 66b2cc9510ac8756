//! Which version of each API to speak to a broker.
//!
//! `CLIENT_VERSIONS` lists, per API, the versions this client's request
//! building and response handling are written for. At connect the broker's
//! ApiVersions answer is intersected with it and the highest common version
//! wins, as in every Kafka client. The upper bounds stop short of versions
//! whose shape we do not handle yet (Produce v13 and Fetch v13+ address
//! topics by id only).

use std::collections::HashMap;

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::VersionRange;

/// `(api, lowest, highest)` versions this client implements.
pub const CLIENT_VERSIONS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 9),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 5),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::ElectLeaders, 1, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::UpdateFeatures, 1, 2),
    (ApiKey::AddRaftVoter, 0, 0),
    (ApiKey::RemoveRaftVoter, 0, 0),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::ListGroups, 0, 4),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetFetch, 1, 7),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::JoinGroup, 2, 9),
    (ApiKey::SyncGroup, 1, 5),
    (ApiKey::Heartbeat, 1, 4),
    (ApiKey::LeaveGroup, 1, 5),
    (ApiKey::WriteTxnMarkers, 1, 1),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 2),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
];

/// The version of ApiVersions sent first; a broker that does not know it
/// answers in v0 with UNSUPPORTED_VERSION and its own range.
pub const API_VERSIONS_FIRST_TRY: i16 = 3;

/// The versions this client implements for `api`.
pub fn client_range(api: ApiKey) -> Option<VersionRange> {
    CLIENT_VERSIONS.iter().find(|(key, ..)| *key == api).map(|&(_, min, max)| VersionRange { min, max })
}

/// The outcome of ApiVersions on one connection: per API, either the version
/// to use or the broker's range (to explain why there is none).
#[derive(Debug, Clone, Default)]
pub struct NegotiatedVersions {
    broker: HashMap<i16, VersionRange>,
    chosen: HashMap<i16, i16>,
}

impl NegotiatedVersions {
    /// Intersects the broker's advertised ranges with `CLIENT_VERSIONS`.
    pub fn negotiate(broker_ranges: impl IntoIterator<Item = (i16, VersionRange)>) -> Self {
        let broker: HashMap<i16, VersionRange> = broker_ranges.into_iter().collect();
        let chosen = CLIENT_VERSIONS
            .iter()
            .filter_map(|&(api, min, max)| {
                let common = broker.get(&(api as i16))?.intersect(&VersionRange { min, max });
                (!common.is_empty()).then_some((api as i16, common.max))
            })
            .collect();
        Self { broker, chosen }
    }

    /// The version to speak for `api`, `None` if there is no common one.
    pub fn version(&self, api: ApiKey) -> Option<i16> {
        self.chosen.get(&(api as i16)).copied()
    }

    /// Every API the broker advertised with its range, by API key.
    pub fn broker_ranges(&self) -> Vec<(i16, VersionRange)> {
        let mut ranges: Vec<(i16, VersionRange)> = self.broker.iter().map(|(k, r)| (*k, *r)).collect();
        ranges.sort_by_key(|(key, _)| *key);
        ranges
    }

    /// The range the broker advertised for `api`, if any.
    pub fn broker_range(&self, api: ApiKey) -> Option<VersionRange> {
        self.broker.get(&(api as i16)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_highest_common_version() {
        let broker = [
            (ApiKey::Metadata as i16, VersionRange { min: 0, max: 13 }),
            (ApiKey::Produce as i16, VersionRange { min: 0, max: 7 }),
            (ApiKey::DeleteTopics as i16, VersionRange { min: 6, max: 6 }),
        ];
        let versions = NegotiatedVersions::negotiate(broker);
        assert_eq!(versions.version(ApiKey::Metadata), Some(12));
        assert_eq!(versions.version(ApiKey::Produce), Some(7));
        assert_eq!(versions.version(ApiKey::DeleteTopics), None, "no overlap");
        assert_eq!(versions.version(ApiKey::InitProducerId), None, "not advertised");
        assert_eq!(versions.broker_range(ApiKey::DeleteTopics), Some(VersionRange { min: 6, max: 6 }));
    }

    #[test]
    fn client_table_stays_inside_what_the_codec_knows() {
        for &(api, min, max) in CLIENT_VERSIONS {
            let codec = api.valid_versions();
            assert!(codec.min <= min && max <= codec.max && min <= max, "{api:?}");
        }
    }
}
