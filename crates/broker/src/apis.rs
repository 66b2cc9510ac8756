//! The APIs Strom serves, in one table.
//!
//! Each entry names an API key, its request type, the versions Strom
//! serves (and the lower bound it advertises, where that differs) and the
//! handler that serves it. Everything that depends on the set of APIs is
//! generated from the table by the `served_apis!` macro: the ApiVersions answer
//! ([`SERVED`]), the version check ([`served_versions`]), the decoded
//! [`Request`] enum, its decoder ([`decode_body`]) and the routing to the
//! handlers ([`route`]). Serving a new API is one entry here plus its
//! handler module.
//!
//! An entry reads `Key(RequestType) min..=max => mode handler;`, where
//! `mode` is `call` for a handler that answers at once, `await` for one
//! that waits (a fetch for data, a join for its rebalance) and `forward`
//! for an admin write a KRaft broker sends to the active controller
//! ([`crate::forwarding`]), answering it here only as the active controller
//! (or a single node): its handler is async too, awaiting the controller's
//! commit without holding a runtime worker. `forward_in_handler` is
//! `forward` for a handler that decides part of the request itself before
//! it forwards the rest (a config change naming another broker). The versions are
//! Kafka 4.1's, capped where `kafka-protocol` cannot decode a newer one;
//! `advertised from n` lowers the advertised minimum below the served one.

use bytes::Bytes;
// The table names request types as Kafka does: all of them are in scope.
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, VersionRange};

use crate::dispatch::{Answer, Reply, RequestContext};
use crate::error::RequestError;
use crate::handlers;

/// One row of the ApiVersions table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServedApi {
    pub key: ApiKey,
    /// The versions a request may use.
    pub versions: VersionRange,
    /// The minimum version ApiVersions advertises; at most `versions.min`.
    pub advertised_min: i16,
}

/// The table's macro: one entry per API, expanded into the items listed in
/// the module doc. A key listed twice names its `Request` variant twice,
/// which does not compile.
macro_rules! served_apis {
    (@first $value:literal $(, $rest:literal)*) => { $value };
    (@call $handler:path, $ctx:ident, $request:ident) => { $handler($ctx, $request).into_reply() };
    (@await $handler:path, $ctx:ident, $request:ident) => { $handler($ctx, $request).await.into_reply() };
    (@forwarded forward) => { true };
    (@forwarded forward_in_handler) => { true };
    (@forwarded $mode:ident) => { false };
    (@forward_in_handler $handler:path, $ctx:ident, $request:ident) => {
        $handler($ctx, $request).await.into_reply()
    };
    (@forward $handler:path, $ctx:ident, $request:ident) => {
        match $ctx.throttle.parked(crate::forwarding::forward($ctx, &$request)).await {
            Some(answer) => answer.into_reply(),
            None => $handler($ctx, $request).await.into_reply(),
        }
    };
    ($(
        $key:ident($request:ident) $min:literal..=$max:literal $(, advertised from $advertised:literal)?
            => $mode:ident $handler:path;
    )*) => {
        /// The served APIs, in the order ApiVersions lists them.
        pub const SERVED: &[ServedApi] = &[$(ServedApi {
            key: ApiKey::$key,
            versions: VersionRange { min: $min, max: $max },
            advertised_min: served_apis!(@first $($advertised,)? $min),
        }),*];

        /// The versions served for `key`, if it is served at all.
        pub fn served_versions(key: ApiKey) -> Option<VersionRange> {
            match key {
                $(ApiKey::$key => Some(VersionRange { min: $min, max: $max }),)*
                _ => None,
            }
        }

        /// Whether a KRaft broker forwards `key` to the active controller
        /// (Kafka's forwardable APIs, the only ones an Envelope may carry).
        pub fn is_forwarded(key: ApiKey) -> bool {
            match key {
                $(ApiKey::$key => served_apis!(@forwarded $mode),)*
                _ => false,
            }
        }

        /// A decoded request body, one variant per served API, named after
        /// its API key.
        #[derive(Debug)]
        pub enum Request {
            $($key($request),)*
        }

        /// Decodes the body of a request for `key` at `version`.
        pub fn decode_body(key: ApiKey, version: i16, body: &mut Bytes) -> Result<Request, RequestError> {
            Ok(match key {
                $(ApiKey::$key => Request::$key(decode(body, version)?),)*
                other => return Err(RequestError::UnknownApi(other as i16)),
            })
        }

        /// Hands a decoded request to its handler.
        pub async fn route(ctx: &RequestContext<'_>, request: Request) -> Answer {
            match request {
                $(Request::$key(r) => served_apis!(@$mode $handler, ctx, r),)*
            }
        }
    };
}

fn decode<T: Decodable>(body: &mut Bytes, version: i16) -> Result<T, RequestError> {
    T::decode(body, version).map_err(|e| RequestError::Malformed(e.to_string()))
}

served_apis! {
    // librdkafka releases older than Kafka 4 compress only when Produce is
    // listed from v0 (KAFKA-18659, librdkafka#4956): Kafka 4 advertises
    // v0-v2 and still refuses them, and so does Strom.
    Produce(ProduceRequest) 3..=13, advertised from 0 => await handlers::produce::handle;
    Fetch(FetchRequest) 4..=18 => await handlers::fetch::handle;
    ListOffsets(ListOffsetsRequest) 1..=10 => call handlers::list_offsets::handle;
    Metadata(MetadataRequest) 0..=13 => await handlers::metadata::handle;
    DescribeTopicPartitions(DescribeTopicPartitionsRequest) 0..=0 => call handlers::topic_partitions::handle;
    ApiVersions(ApiVersionsRequest) 0..=4 => call handlers::api_versions::handle;
    // Served by the connection's SASL exchange; these answer only outside it.
    SaslHandshake(SaslHandshakeRequest) 0..=1 => call handlers::sasl::handshake;
    SaslAuthenticate(SaslAuthenticateRequest) 0..=2 => call handlers::sasl::authenticate;
    CreateTopics(CreateTopicsRequest) 2..=7 => forward handlers::topics::create;
    DeleteTopics(DeleteTopicsRequest) 1..=6 => forward handlers::topics::delete;
    DeleteRecords(DeleteRecordsRequest) 0..=2 => call handlers::delete_records::handle;
    CreatePartitions(CreatePartitionsRequest) 0..=3 => forward handlers::topics::create_partitions;
    DescribeCluster(DescribeClusterRequest) 0..=2 => call handlers::cluster::describe;
    DescribeQuorum(DescribeQuorumRequest) 0..=2 => await handlers::quorum::describe;
    // KRaft (KIP-595, KIP-996, KIP-630), at the versions strom-raft's wire mapping speaks.
    Vote(VoteRequest) 0..=2 => await handlers::raft::vote;
    BeginQuorumEpoch(BeginQuorumEpochRequest) 0..=1 => await handlers::raft::begin_quorum_epoch;
    EndQuorumEpoch(EndQuorumEpochRequest) 0..=1 => await handlers::raft::end_quorum_epoch;
    FetchSnapshot(FetchSnapshotRequest) 0..=1 => await handlers::raft::fetch_snapshot;
    // KIP-853 voter changes, at the versions kafka-protocol 0.18 has.
    AddRaftVoter(AddRaftVoterRequest) 0..=0 => await handlers::raft::add_raft_voter;
    RemoveRaftVoter(RemoveRaftVoterRequest) 0..=0 => await handlers::raft::remove_raft_voter;
    UpdateRaftVoter(UpdateRaftVoterRequest) 0..=0 => await handlers::raft::update_raft_voter;
    FindCoordinator(FindCoordinatorRequest) 0..=6 => await handlers::groups::find_coordinator;
    JoinGroup(JoinGroupRequest) 0..=9 => await handlers::groups::join;
    SyncGroup(SyncGroupRequest) 0..=5 => await handlers::groups::sync;
    Heartbeat(HeartbeatRequest) 0..=4 => call handlers::groups::heartbeat;
    LeaveGroup(LeaveGroupRequest) 0..=5 => call handlers::groups::leave;
    ListGroups(ListGroupsRequest) 0..=5 => call handlers::groups::list;
    DescribeGroups(DescribeGroupsRequest) 0..=6 => call handlers::groups::describe;
    DeleteGroups(DeleteGroupsRequest) 0..=2 => await handlers::groups::delete;
    // v10 is unstable in Kafka 4.1 and not decodable by kafka-protocol 0.18.
    OffsetCommit(OffsetCommitRequest) 2..=9 => await handlers::offsets::commit;
    OffsetFetch(OffsetFetchRequest) 1..=9 => call handlers::offsets::fetch;
    OffsetDelete(OffsetDeleteRequest) 0..=0 => call handlers::offsets::delete;
    ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest) 0..=1 => call handlers::consumer_groups::heartbeat;
    ConsumerGroupDescribe(ConsumerGroupDescribeRequest) 0..=1 => call handlers::consumer_groups::describe;
    DescribeConfigs(DescribeConfigsRequest) 1..=4 => call handlers::configs::describe;
    AlterConfigs(AlterConfigsRequest) 0..=2 => forward_in_handler handlers::configs::alter;
    IncrementalAlterConfigs(IncrementalAlterConfigsRequest) 0..=1 => forward_in_handler handlers::configs::incremental_alter;
    // v6 (two-phase commit, KIP-939) is unstable in Kafka 4.1.
    InitProducerId(InitProducerIdRequest) 0..=5 => await handlers::init_producer_id::handle;
    DescribeLogDirs(DescribeLogDirsRequest) 1..=4 => call handlers::log_dirs::describe;
    AddPartitionsToTxn(AddPartitionsToTxnRequest) 0..=5 => await handlers::transactions::add_partitions;
    AddOffsetsToTxn(AddOffsetsToTxnRequest) 0..=4 => await handlers::transactions::add_offsets;
    EndTxn(EndTxnRequest) 0..=5 => await handlers::transactions::end;
    TxnOffsetCommit(TxnOffsetCommitRequest) 0..=5 => await handlers::transactions::txn_offset_commit;
    WriteTxnMarkers(WriteTxnMarkersRequest) 1..=1 => await handlers::transactions::write_markers;
    DescribeTransactions(DescribeTransactionsRequest) 0..=0 => call handlers::transactions::describe;
    ListTransactions(ListTransactionsRequest) 0..=2 => call handlers::transactions::list;
    DescribeProducers(DescribeProducersRequest) 0..=0 => call handlers::transactions::describe_producers;
    DescribeClientQuotas(DescribeClientQuotasRequest) 0..=1 => call handlers::quotas::describe;
    AlterClientQuotas(AlterClientQuotasRequest) 0..=1 => forward handlers::quotas::alter;
    DescribeUserScramCredentials(DescribeUserScramCredentialsRequest) 0..=0 => call handlers::scram::describe;
    AlterUserScramCredentials(AlterUserScramCredentialsRequest) 0..=0 => forward handlers::scram::alter;
    // Kafka 4 removed v0-v1 (KIP-896).
    OffsetForLeaderEpoch(OffsetForLeaderEpochRequest) 2..=4 => call handlers::leader_epochs::handle;
    // The controller's APIs (KIP-631, KIP-919), answered by the active controller.
    BrokerRegistration(BrokerRegistrationRequest) 0..=4 => await handlers::controller::broker_registration;
    BrokerHeartbeat(BrokerHeartbeatRequest) 0..=1 => await handlers::controller::broker_heartbeat;
    UnregisterBroker(UnregisterBrokerRequest) 0..=0 => await handlers::controller::unregister_broker;
    ControllerRegistration(ControllerRegistrationRequest) 0..=0 => await handlers::controller::controller_registration;
    AllocateProducerIds(AllocateProducerIdsRequest) 0..=0 => await handlers::controller::allocate_producer_ids;
    // Kafka 4 removed v0-v1 (KIP-896).
    AlterPartition(AlterPartitionRequest) 2..=3 => await handlers::controller::alter_partition;
    ElectLeaders(ElectLeadersRequest) 0..=2 => forward handlers::elect_leaders::handle;
    AlterPartitionReassignments(AlterPartitionReassignmentsRequest) 0..=1 => forward handlers::reassignments::alter;
    ListPartitionReassignments(ListPartitionReassignmentsRequest) 0..=0 => forward handlers::reassignments::list;
    UpdateFeatures(UpdateFeaturesRequest) 0..=2 => forward handlers::features::update;
    // KIP-590: a forwarded admin write with its client's principal.
    Envelope(EnvelopeRequest) 0..=0 => await handlers::envelope::handle;
    DescribeAcls(DescribeAclsRequest) 1..=3 => call handlers::acls::describe;
    CreateAcls(CreateAclsRequest) 1..=3 => forward handlers::acls::create;
    DeleteAcls(DeleteAclsRequest) 1..=3 => forward handlers::acls::delete;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_served_version_is_one_kafka_protocol_decodes() {
        for api in SERVED {
            let decodable = api.key.valid_versions();
            let VersionRange { min, max } = api.versions;
            assert!(
                decodable.min <= min && min <= max && max <= decodable.max,
                "{api:?} outside {decodable:?}"
            );
            assert!(api.advertised_min <= min, "{api:?} advertises above what it serves");
        }
    }

    #[test]
    fn the_version_check_agrees_with_the_advertised_table() {
        for api in SERVED {
            assert_eq!(served_versions(api.key), Some(api.versions), "{:?}", api.key);
        }
        let served = |raw: i16| ApiKey::try_from(raw).ok().and_then(served_versions).is_some();
        let served_count = (i16::MIN..=i16::MAX).filter(|raw| served(*raw)).count();
        assert_eq!(served_count, SERVED.len(), "the version check serves an API ApiVersions does not list");
    }

    #[test]
    fn requests_decode_into_the_variant_of_their_key() {
        for api in SERVED {
            let mut body = Bytes::new();
            // An empty body is malformed for most requests; those it decodes
            // must land in their own variant.
            if let Ok(request) = decode_body(api.key, api.versions.max, &mut body) {
                let decoded = format!("{request:?}");
                assert!(
                    decoded.starts_with(&format!("{:?}(", api.key)),
                    "{:?} decoded as {decoded}",
                    api.key
                );
            }
        }
        assert!(matches!(
            decode_body(ApiKey::DescribeDelegationToken, 1, &mut Bytes::new()),
            Err(RequestError::UnknownApi(41))
        ));
    }
}
