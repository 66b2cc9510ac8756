//! Writes the seed corpus of the `parse_frame` fuzz target and checks every
//! seed against `parse_frame` as it goes, so a seed that stops reaching the
//! body decoder is caught when the corpus is regenerated.
//!
//! ```text
//! cargo run --manifest-path fuzz/Cargo.toml --example seeds [OUT_DIR]
//! ```
//!
//! OUT_DIR defaults to `fuzz/corpus/parse_frame`; files are rewritten in
//! place and named after what they hold. Three kinds of seed:
//!
//! - a valid frame for every version of every API in the broker's
//!   ApiVersions table, encoded with `kafka-protocol` (Produce carries a real
//!   v2 RecordBatch in each codec); a newly served API without a builder here stops the run;
//! - hostile frames built by hand: array counts of 2^31-1 (classic) and
//!   2^31 and 2^32-1 (compact uvarint), nested huge counts, huge string and
//!   tagged-field lengths, negative lengths, unknown APIs and versions;
//! - truncations of the valid frames.
//!
//! Frames carry no 4-byte size prefix: `parse_frame` takes what the network
//! layer hands it after reading the prefix.

use std::path::PathBuf;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::consumer_group_heartbeat_request;
use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::describe_producers_request::TopicRequest as DescribeProducersTopicRequest;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use kafka_protocol::messages::{
    alter_configs_request, incremental_alter_configs_request, AlterConfigsRequest, DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, DescribeProducersRequest, DescribeTransactionsRequest,
    EndTxnRequest, ListTransactionsRequest, TransactionalId, TxnOffsetCommitRequest, WriteTxnMarkersRequest,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, BrokerId, ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest,
    CreatePartitionsRequest, CreateTopicsRequest, DeleteGroupsRequest, DeleteRecordsRequest,
    DeleteTopicsRequest, DescribeClusterRequest, DescribeGroupsRequest, DescribeLogDirsRequest,
    DescribeQuorumRequest, FetchRequest, FindCoordinatorRequest, GroupId, HeartbeatRequest,
    InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest, ListOffsetsRequest,
    MetadataRequest, OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest,
    OffsetForLeaderEpochRequest, ProduceRequest, RequestHeader, SaslAuthenticateRequest,
    SaslHandshakeRequest, SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use strom_broker::dispatch::{parse_frame, Parsed};
use strom_broker::handlers::api_versions::api_keys as served_api_keys;
use uuid::Uuid;

/// As in the broker: the hostile seeds declare capacities that would abort
/// the check below with the system allocator.
#[global_allocator]
static ALLOCATOR: strom_broker::alloc::LazyLargeAlloc = strom_broker::alloc::LazyLargeAlloc;

const TOPIC_ID: Uuid = Uuid::from_u128(0x5f1c_2c8e_9b0a_4a7e_8d3e_1f2a_3b4c_5d6e);
const CORRELATION_ID: i32 = 0x0102_0304;

/// What `parse_frame` must make of a seed.
#[derive(Clone, Copy)]
enum Expect {
    Request,
    UnsupportedApiVersions,
    Rejected,
}

struct Seed {
    name: String,
    frame: Bytes,
    expect: Expect,
}

fn main() {
    let out_dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus").join("parse_frame"));
    let mut seeds = valid_seeds();
    let truncated: Vec<Seed> =
        seeds.iter().filter(|s| matches!(s.expect, Expect::Request)).flat_map(truncations).collect();
    seeds.extend(truncated);
    seeds.extend(hostile_seeds());

    std::fs::create_dir_all(&out_dir).expect("create corpus directory");
    let mut total_bytes = 0;
    for seed in &seeds {
        check(seed);
        std::fs::write(out_dir.join(&seed.name), &seed.frame).expect("write seed");
        total_bytes += seed.frame.len();
    }
    println!("{} seeds, {total_bytes} bytes, in {}", seeds.len(), out_dir.display());
}

fn check(seed: &Seed) {
    let result = parse_frame(seed.frame.clone());
    let ok = matches!(
        (seed.expect, &result),
        (Expect::Request, Ok(Parsed::Request { .. }))
            | (Expect::UnsupportedApiVersions, Ok(Parsed::UnsupportedApiVersions { .. }))
            | (Expect::Rejected, Err(_))
    );
    let outcome = match &result {
        Ok(Parsed::Request { api_key, api_version, .. }) => format!("{api_key:?} v{api_version}"),
        Ok(Parsed::UnsupportedApiVersions { .. }) => "unsupported ApiVersions".to_string(),
        Err(e) => e.to_string(),
    };
    assert!(ok, "seed {} parsed as: {outcome}", seed.name);
}

// ---- valid frames -------------------------------------------------------

fn valid_seeds() -> Vec<Seed> {
    let mut seeds = Vec::new();
    for served in served_api_keys() {
        let key = ApiKey::try_from(served.api_key).expect("served API keys are known");
        for version in served.min_version..=served.max_version {
            let name = format!("{}-v{version}", kebab(key));
            match body(key, version) {
                Ok(body) => {
                    seeds.push(Seed { name, frame: frame(key, version, body), expect: Expect::Request })
                }
                Err(e) => println!("no seed {name}: kafka-protocol cannot encode it: {e}"),
            }
        }
    }

    // Clients open with ApiVersions at their newest version, which may be
    // newer than ours; and a null client id is legal in every header version.
    let newer = RequestHeader::default()
        .with_request_api_key(ApiKey::ApiVersions as i16)
        .with_request_api_version(5)
        .with_correlation_id(CORRELATION_ID)
        .with_client_id(Some(StrBytes::from_static_str("strom-fuzz")));
    seeds.push(Seed {
        name: "api-versions-v5-unsupported".into(),
        frame: encode_frame(&newer, 2, body(ApiKey::ApiVersions, 4).expect("encode ApiVersions")),
        expect: Expect::UnsupportedApiVersions,
    });
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Metadata as i16)
        .with_request_api_version(9)
        .with_correlation_id(CORRELATION_ID);
    seeds.push(Seed {
        name: "metadata-v9-null-client-id".into(),
        frame: encode_frame(&header, 2, body(ApiKey::Metadata, 9).expect("encode Metadata")),
        expect: Expect::Request,
    });
    seeds
}

fn kebab(key: ApiKey) -> String {
    let mut name = String::new();
    for (i, c) in format!("{key:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('-');
        }
        name.push(c.to_ascii_lowercase());
    }
    name
}

/// The encoded body of a valid request: one builder per served API.
fn body(key: ApiKey, version: i16) -> Result<Bytes, String> {
    fn encode<T: Encodable>(body: T, version: i16) -> Result<Bytes, String> {
        let mut buf = BytesMut::new();
        body.encode(&mut buf, version).map_err(|e| e.to_string())?;
        Ok(buf.freeze())
    }
    let v = version;
    match key {
        ApiKey::ApiVersions => encode(api_versions(v), v),
        ApiKey::Metadata => encode(metadata(v), v),
        ApiKey::CreateTopics => encode(create_topics(v), v),
        ApiKey::DeleteTopics => encode(delete_topics(v), v),
        ApiKey::Produce => encode(produce(v), v),
        ApiKey::Fetch => encode(fetch(v), v),
        ApiKey::ListOffsets => encode(list_offsets(v), v),
        ApiKey::DescribeCluster => encode(describe_cluster(v), v),
        ApiKey::FindCoordinator => encode(find_coordinator(v), v),
        ApiKey::JoinGroup => encode(join_group(v), v),
        ApiKey::SyncGroup => encode(sync_group(v), v),
        ApiKey::Heartbeat => encode(heartbeat(v), v),
        ApiKey::LeaveGroup => encode(leave_group(v), v),
        ApiKey::ListGroups => encode(list_groups(v), v),
        ApiKey::DescribeGroups => encode(describe_groups(v), v),
        ApiKey::DeleteGroups => {
            encode(DeleteGroupsRequest::default().with_groups_names(vec![group("billing")]), v)
        }
        ApiKey::OffsetCommit => encode(offset_commit(v), v),
        ApiKey::OffsetFetch => encode(offset_fetch(v), v),
        ApiKey::OffsetDelete => encode(offset_delete(), v),
        ApiKey::DeleteRecords => encode(delete_records(), v),
        ApiKey::CreatePartitions => encode(create_partitions(), v),
        ApiKey::ConsumerGroupHeartbeat => encode(consumer_group_heartbeat(), v),
        ApiKey::ConsumerGroupDescribe => {
            encode(ConsumerGroupDescribeRequest::default().with_group_ids(vec![group("billing")]), v)
        }
        ApiKey::DescribeConfigs => encode(describe_configs(v), v),
        ApiKey::AlterConfigs => encode(alter_configs(), v),
        ApiKey::IncrementalAlterConfigs => encode(incremental_alter_configs(), v),
        ApiKey::InitProducerId => encode(init_producer_id(v), v),
        ApiKey::DescribeLogDirs => encode(describe_log_dirs(), v),
        ApiKey::AddPartitionsToTxn => encode(add_partitions_to_txn(v), v),
        ApiKey::AddOffsetsToTxn => encode(add_offsets_to_txn(), v),
        ApiKey::EndTxn => encode(end_txn(), v),
        ApiKey::TxnOffsetCommit => encode(txn_offset_commit(v), v),
        ApiKey::WriteTxnMarkers => encode(write_txn_markers(), v),
        ApiKey::DescribeTransactions => encode(
            DescribeTransactionsRequest::default().with_transactional_ids(vec![txn_id("orders-tx")]),
            v,
        ),
        ApiKey::ListTransactions => encode(list_transactions(v), v),
        ApiKey::DescribeProducers => encode(describe_producers(), v),
        ApiKey::DescribeQuorum => encode(DescribeQuorumRequest::default(), v),
        ApiKey::OffsetForLeaderEpoch => encode(OffsetForLeaderEpochRequest::default(), v),
        ApiKey::SaslHandshake => encode(
            SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("SCRAM-SHA-256")),
            v,
        ),
        // A SCRAM client-first message: the SASL decoders the fuzz target
        // runs start from it.
        ApiKey::SaslAuthenticate => encode(
            SaslAuthenticateRequest::default()
                .with_auth_bytes(Bytes::from_static(b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL")),
            v,
        ),
        other => panic!("{other:?} is served: add a seed builder for it to fuzz/examples/seeds.rs"),
    }
}

/// InitProducerId with a transactional id, and from v3 the current id and epoch (KIP-360).
fn init_producer_id(version: i16) -> InitProducerIdRequest {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(Some(StrBytes::from_static_str("orders-tx").into()))
        .with_transaction_timeout_ms(60_000);
    if version >= 3 {
        request.with_producer_id(42.into()).with_producer_epoch(3)
    } else {
        request
    }
}

fn txn_id(id: &'static str) -> TransactionalId {
    TransactionalId(StrBytes::from_static_str(id))
}

/// AddPartitionsToTxn: the client form up to v3; from v4 the brokers'
/// batched form, one transaction added and one verified.
fn add_partitions_to_txn(version: i16) -> AddPartitionsToTxnRequest {
    let topics =
        vec![AddPartitionsToTxnTopic::default().with_name(topic("orders")).with_partitions(vec![0, 2])];
    if version < 4 {
        return AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(txn_id("orders-tx"))
            .with_v3_and_below_producer_id(42.into())
            .with_v3_and_below_producer_epoch(3)
            .with_v3_and_below_topics(topics);
    }
    let transaction = |id, verify_only| {
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(txn_id(id))
            .with_producer_id(42.into())
            .with_producer_epoch(3)
            .with_verify_only(verify_only)
            .with_topics(topics.clone())
    };
    AddPartitionsToTxnRequest::default()
        .with_transactions(vec![transaction("orders-tx", false), transaction("billing-tx", true)])
}

fn add_offsets_to_txn() -> AddOffsetsToTxnRequest {
    AddOffsetsToTxnRequest::default()
        .with_transactional_id(txn_id("orders-tx"))
        .with_producer_id(42.into())
        .with_producer_epoch(3)
        .with_group_id(group("billing"))
}

fn end_txn() -> EndTxnRequest {
    EndTxnRequest::default()
        .with_transactional_id(txn_id("orders-tx"))
        .with_producer_id(42.into())
        .with_producer_epoch(3)
        .with_committed(true)
}

/// TxnOffsetCommit, with the member's generation from v3.
fn txn_offset_commit(version: i16) -> TxnOffsetCommitRequest {
    let partition = TxnOffsetCommitRequestPartition::default()
        .with_partition_index(1)
        .with_committed_offset(1_234)
        .with_committed_metadata(Some(StrBytes::from_static_str("m")));
    let request = TxnOffsetCommitRequest::default()
        .with_transactional_id(txn_id("orders-tx"))
        .with_group_id(group("billing"))
        .with_producer_id(42.into())
        .with_producer_epoch(3)
        .with_topics(vec![TxnOffsetCommitRequestTopic::default()
            .with_name(topic("orders"))
            .with_partitions(vec![partition])]);
    if version >= 3 {
        request.with_generation_id(5).with_member_id(StrBytes::from_static_str("member-1"))
    } else {
        request
    }
}

fn write_txn_markers() -> WriteTxnMarkersRequest {
    let marker = WritableTxnMarker::default()
        .with_producer_id(42.into())
        .with_producer_epoch(3)
        .with_transaction_result(true)
        .with_coordinator_epoch(0)
        .with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(topic("orders"))
            .with_partition_indexes(vec![0])]);
    WriteTxnMarkersRequest::default().with_markers(vec![marker])
}

/// ListTransactions with every filter its version has.
fn list_transactions(version: i16) -> ListTransactionsRequest {
    let request = ListTransactionsRequest::default()
        .with_state_filters(vec![StrBytes::from_static_str("Ongoing")])
        .with_producer_id_filters(vec![42.into()]);
    let request = if version >= 1 { request.with_duration_filter(60_000) } else { request };
    if version >= 2 {
        request.with_transactional_id_pattern(Some(StrBytes::from_static_str("orders-.*")))
    } else {
        request
    }
}

fn describe_producers() -> DescribeProducersRequest {
    DescribeProducersRequest::default().with_topics(vec![DescribeProducersTopicRequest::default()
        .with_name(topic("orders"))
        .with_partition_indexes(vec![0, 1])])
}

/// Header (at the version the API key and version call for) then body.
fn frame(key: ApiKey, version: i16, body: Bytes) -> Bytes {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(CORRELATION_ID)
        .with_client_id(Some(StrBytes::from_static_str("strom-fuzz")));
    encode_frame(&header, key.request_header_version(version), body)
}

fn encode_frame(header: &RequestHeader, header_version: i16, body: Bytes) -> Bytes {
    let mut buf = BytesMut::new();
    header.encode(&mut buf, header_version).expect("encode header");
    buf.put(body);
    buf.freeze()
}

fn topic(name: &'static str) -> TopicName {
    TopicName(StrBytes::from_static_str(name))
}

fn api_versions(version: i16) -> ApiVersionsRequest {
    let request = ApiVersionsRequest::default();
    if version < 3 {
        return request;
    }
    request
        .with_client_software_name(StrBytes::from_static_str("strom-fuzz"))
        .with_client_software_version(StrBytes::from_static_str("0.1.0"))
}

fn metadata(version: i16) -> MetadataRequest {
    let mut topics = vec![MetadataRequestTopic::default().with_name(Some(topic("orders")))];
    if version >= 12 {
        // From v12 a topic may be named by id alone.
        topics.push(MetadataRequestTopic::default().with_topic_id(TOPIC_ID).with_name(None));
    }
    MetadataRequest::default()
        .with_topics(Some(topics))
        .with_allow_auto_topic_creation(version < 4)
        .with_include_cluster_authorized_operations((8..=10).contains(&version))
        .with_include_topic_authorized_operations(version >= 8)
}

fn create_topics(version: i16) -> CreateTopicsRequest {
    let configured = CreatableTopic::default()
        .with_name(topic("orders"))
        .with_num_partitions(3)
        .with_replication_factor(1)
        .with_configs(vec![CreatableTopicConfig::default()
            .with_name(StrBytes::from_static_str("cleanup.policy"))
            .with_value(Some(StrBytes::from_static_str("compact")))]);
    let assigned = CreatableTopic::default()
        .with_name(topic("payments"))
        .with_num_partitions(-1)
        .with_replication_factor(-1)
        .with_assignments(vec![
            CreatableReplicaAssignment::default().with_partition_index(0).with_broker_ids(vec![BrokerId(1)]),
            CreatableReplicaAssignment::default().with_partition_index(1).with_broker_ids(vec![BrokerId(1)]),
        ]);
    CreateTopicsRequest::default()
        .with_topics(vec![configured, assigned])
        .with_timeout_ms(30_000)
        .with_validate_only(version >= 1 && version % 2 == 1)
}

fn delete_topics(version: i16) -> DeleteTopicsRequest {
    let request = DeleteTopicsRequest::default().with_timeout_ms(30_000);
    if version < 6 {
        return request.with_topic_names(vec![topic("orders"), topic("payments")]);
    }
    request.with_topics(vec![
        DeleteTopicState::default().with_name(Some(topic("orders"))),
        DeleteTopicState::default().with_name(None).with_topic_id(TOPIC_ID),
    ])
}

/// A real two-record v2 RecordBatch: CRC, varint lengths, a header and a
/// null key, as a producer sends it, compressed with `compression`.
fn record_batch(compression: Compression) -> Bytes {
    let record = |offset: i64, key: Option<&'static [u8]>, value: &'static [u8]| Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset,
        sequence: -1,
        timestamp: 1_700_000_000_000 + offset,
        key: key.map(Bytes::from_static),
        value: Some(Bytes::from_static(value)),
        headers: [(StrBytes::from_static_str("trace"), Some(Bytes::from_static(b"42")))]
            .into_iter()
            .collect(),
    };
    let records = [record(0, Some(b"k0"), b"hello"), record(1, None, b"world")];
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression };
    RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encode record batch");
    buf.freeze()
}

fn produce(version: i16) -> ProduceRequest {
    // One partition per codec, so the fuzzer starts from every record
    // decoder a produce handler may reach (decompression for the key check).
    let codecs =
        [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];
    let mut partitions: Vec<PartitionProduceData> = (0..)
        .zip(codecs)
        .map(|(index, codec)| {
            PartitionProduceData::default().with_index(index).with_records(Some(record_batch(codec)))
        })
        .collect();
    partitions.push(PartitionProduceData::default().with_index(5).with_records(None));
    let topic_data = TopicProduceData::default().with_partition_data(partitions);
    let topic_data = if version >= 13 {
        topic_data.with_topic_id(TOPIC_ID)
    } else {
        topic_data.with_name(topic("orders"))
    };
    ProduceRequest::default()
        .with_transactional_id(None)
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![topic_data])
}

fn fetch(version: i16) -> FetchRequest {
    let mut partition = FetchPartition::default()
        .with_partition(0)
        .with_fetch_offset(42)
        .with_log_start_offset(0)
        .with_partition_max_bytes(1 << 20);
    if version >= 9 {
        partition = partition.with_current_leader_epoch(0);
    }
    if version >= 12 {
        partition = partition.with_last_fetched_epoch(0);
    }
    if version >= 17 {
        // Tagged fields: replica_directory_id (v17) and high_watermark (v18).
        partition = partition.with_replica_directory_id(TOPIC_ID);
    }
    if version >= 18 {
        partition = partition.with_high_watermark(100);
    }
    let (fetched, forgotten) = if version >= 13 {
        (
            FetchTopic::default().with_topic_id(TOPIC_ID),
            ForgottenTopic::default().with_topic_id(TOPIC_ID).with_partitions(vec![1]),
        )
    } else {
        (
            FetchTopic::default().with_topic(topic("orders")),
            ForgottenTopic::default().with_topic(topic("orders")).with_partitions(vec![1]),
        )
    };
    let mut request = FetchRequest::default()
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(50 << 20)
        .with_isolation_level(1)
        .with_topics(vec![fetched.with_partitions(vec![partition])]);
    if version >= 7 {
        request =
            request.with_session_id(0).with_session_epoch(-1).with_forgotten_topics_data(vec![forgotten]);
    }
    if version >= 11 {
        request = request.with_rack_id(StrBytes::from_static_str("rack-a"));
    }
    if version >= 12 {
        request = request.with_cluster_id(Some(StrBytes::from_static_str("strom-cluster")));
    }
    request
}

fn list_offsets(version: i16) -> ListOffsetsRequest {
    let mut partition = ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1);
    if version >= 4 {
        partition = partition.with_current_leader_epoch(0);
    }
    let mut request = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
        ListOffsetsTopic::default().with_name(topic("orders")).with_partitions(vec![partition]),
    ]);
    if version >= 2 {
        request = request.with_isolation_level(1);
    }
    if version >= 10 {
        request = request.with_timeout_ms(30_000);
    }
    request
}

fn describe_cluster(version: i16) -> DescribeClusterRequest {
    DescribeClusterRequest::default()
        .with_include_cluster_authorized_operations(true)
        .with_include_fenced_brokers(version >= 2)
}

fn group(id: &'static str) -> GroupId {
    GroupId(StrBytes::from_static_str(id))
}

fn text(s: &'static str) -> StrBytes {
    StrBytes::from_static_str(s)
}

const MEMBER_ID: &str = "consumer-1-6f1e0c9a";

fn find_coordinator(version: i16) -> FindCoordinatorRequest {
    let request = FindCoordinatorRequest::default();
    if version >= 4 {
        return request.with_coordinator_keys(vec![text("billing"), text("audit")]);
    }
    request.with_key(text("billing"))
}

fn join_group(version: i16) -> JoinGroupRequest {
    let protocol = |name: &'static str| {
        JoinGroupRequestProtocol::default()
            .with_name(text(name))
            .with_metadata(Bytes::from_static(b"\x00\x03\x00\x00\x00\x01\x00\x06orders\xff\xff\xff\xff"))
    };
    let mut request = JoinGroupRequest::default()
        .with_group_id(group("billing"))
        .with_session_timeout_ms(45_000)
        .with_member_id(text(MEMBER_ID))
        .with_protocol_type(text("consumer"))
        .with_protocols(vec![protocol("range"), protocol("cooperative-sticky")]);
    if version >= 1 {
        request = request.with_rebalance_timeout_ms(300_000);
    }
    if version >= 5 {
        request = request.with_group_instance_id(Some(text("instance-1")));
    }
    if version >= 8 {
        request = request.with_reason(Some(text("rejoining")));
    }
    request
}

fn sync_group(version: i16) -> SyncGroupRequest {
    let mut request = SyncGroupRequest::default()
        .with_group_id(group("billing"))
        .with_generation_id(1)
        .with_member_id(text(MEMBER_ID))
        .with_assignments(vec![SyncGroupRequestAssignment::default()
            .with_member_id(text(MEMBER_ID))
            .with_assignment(Bytes::from_static(
                b"\x00\x03\x00\x00\x00\x01\x00\x06orders\x00\x00\x00\x01\x00\x00\x00\x00",
            ))]);
    if version >= 3 {
        request = request.with_group_instance_id(Some(text("instance-1")));
    }
    if version >= 5 {
        request = request.with_protocol_type(Some(text("consumer"))).with_protocol_name(Some(text("range")));
    }
    request
}

fn heartbeat(version: i16) -> HeartbeatRequest {
    let request = HeartbeatRequest::default()
        .with_group_id(group("billing"))
        .with_generation_id(1)
        .with_member_id(text(MEMBER_ID));
    if version >= 3 {
        return request.with_group_instance_id(Some(text("instance-1")));
    }
    request
}

fn leave_group(version: i16) -> LeaveGroupRequest {
    let request = LeaveGroupRequest::default().with_group_id(group("billing"));
    if version < 3 {
        return request.with_member_id(text(MEMBER_ID));
    }
    let mut member = MemberIdentity::default()
        .with_member_id(text(MEMBER_ID))
        .with_group_instance_id(Some(text("instance-1")));
    if version >= 5 {
        member = member.with_reason(Some(text("shutting down")));
    }
    request.with_members(vec![member, MemberIdentity::default().with_member_id(text("consumer-2-0b1d"))])
}

fn list_groups(version: i16) -> ListGroupsRequest {
    let mut request = ListGroupsRequest::default();
    if version >= 4 {
        request = request.with_states_filter(vec![text("Stable"), text("Empty")]);
    }
    if version >= 5 {
        request = request.with_types_filter(vec![text("classic")]);
    }
    request
}

fn describe_groups(version: i16) -> DescribeGroupsRequest {
    DescribeGroupsRequest::default()
        .with_groups(vec![group("billing"), group("audit")])
        .with_include_authorized_operations(version >= 3)
}

fn offset_commit(version: i16) -> OffsetCommitRequest {
    let mut partition = OffsetCommitRequestPartition::default()
        .with_partition_index(0)
        .with_committed_offset(42)
        .with_committed_metadata(Some(text("")));
    if version >= 6 {
        partition = partition.with_committed_leader_epoch(0);
    }
    let mut request = OffsetCommitRequest::default()
        .with_group_id(group("billing"))
        .with_generation_id_or_member_epoch(1)
        .with_member_id(text(MEMBER_ID))
        .with_topics(vec![OffsetCommitRequestTopic::default().with_name(topic("orders")).with_partitions(
            vec![partition, OffsetCommitRequestPartition::default().with_partition_index(1)],
        )]);
    if version <= 4 {
        request = request.with_retention_time_ms(-1);
    }
    if version >= 7 {
        request = request.with_group_instance_id(Some(text("instance-1")));
    }
    request
}

fn offset_fetch(version: i16) -> OffsetFetchRequest {
    if version < 8 {
        return OffsetFetchRequest::default()
            .with_group_id(group("billing"))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(topic("orders"))
                .with_partition_indexes(vec![0, 1])]))
            .with_require_stable(version >= 7);
    }
    let mut fetched =
        OffsetFetchRequestGroup::default().with_group_id(group("billing")).with_topics(Some(vec![
            OffsetFetchRequestTopics::default().with_name(topic("orders")).with_partition_indexes(vec![0, 1]),
        ]));
    if version >= 9 {
        fetched = fetched.with_member_id(Some(text(MEMBER_ID))).with_member_epoch(3);
    }
    let all = OffsetFetchRequestGroup::default().with_group_id(group("audit")).with_topics(None);
    OffsetFetchRequest::default().with_groups(vec![fetched, all]).with_require_stable(true)
}

fn offset_delete() -> OffsetDeleteRequest {
    OffsetDeleteRequest::default().with_group_id(group("billing")).with_topics(vec![
        OffsetDeleteRequestTopic::default()
            .with_name(topic("orders"))
            .with_partitions(vec![OffsetDeleteRequestPartition::default().with_partition_index(0)]),
    ])
}

fn create_partitions() -> CreatePartitionsRequest {
    let assignment = CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(1)]);
    CreatePartitionsRequest::default().with_timeout_ms(30_000).with_topics(vec![
        CreatePartitionsTopic::default().with_name(topic("orders")).with_count(3),
        CreatePartitionsTopic::default()
            .with_name(topic("payments"))
            .with_count(2)
            .with_assignments(Some(vec![assignment])),
    ])
}

fn delete_records() -> DeleteRecordsRequest {
    DeleteRecordsRequest::default().with_timeout_ms(30_000).with_topics(vec![DeleteRecordsTopic::default()
        .with_name(topic("orders"))
        .with_partitions(vec![
            DeleteRecordsPartition::default().with_partition_index(0).with_offset(42),
            DeleteRecordsPartition::default().with_partition_index(1).with_offset(-1),
        ])])
}

fn consumer_group_heartbeat() -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(group("billing"))
        .with_member_id(text(MEMBER_ID))
        .with_rebalance_timeout_ms(300_000)
        .with_subscribed_topic_names(Some(vec![topic("orders")]))
        .with_server_assignor(Some(text("uniform")))
        .with_topic_partitions(Some(vec![consumer_group_heartbeat_request::TopicPartitions::default()
            .with_topic_id(Uuid::from_u128(7))
            .with_partitions(vec![0, 1])]))
}

fn describe_configs(version: i16) -> DescribeConfigsRequest {
    DescribeConfigsRequest::default()
        .with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(text("orders"))
                .with_configuration_keys(Some(vec![text("retention.ms")])),
            DescribeConfigsResource::default().with_resource_type(4).with_resource_name(text("1")),
        ])
        .with_include_synonyms(true)
        .with_include_documentation(version >= 3)
}

fn alter_configs() -> AlterConfigsRequest {
    AlterConfigsRequest::default().with_resources(vec![alter_configs_request::AlterConfigsResource::default(
    )
    .with_resource_type(2)
    .with_resource_name(text("orders"))
    .with_configs(vec![alter_configs_request::AlterableConfig::default()
        .with_name(text("retention.ms"))
        .with_value(Some(text("60000")))])])
}

fn incremental_alter_configs() -> IncrementalAlterConfigsRequest {
    use incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    IncrementalAlterConfigsRequest::default().with_validate_only(true).with_resources(vec![
        AlterConfigsResource::default().with_resource_type(4).with_resource_name(text("")).with_configs(
            vec![
                AlterableConfig::default()
                    .with_name(text("log.cleanup.policy"))
                    .with_config_operation(2)
                    .with_value(Some(text("compact"))),
                AlterableConfig::default().with_name(text("log.retention.ms")).with_config_operation(1),
            ],
        ),
    ])
}

fn truncations(seed: &Seed) -> Vec<Seed> {
    // Cut inside the body, inside the header, and one byte short.
    let cuts = [seed.frame.len() / 2, 10.min(seed.frame.len() - 1), seed.frame.len() - 1];
    let interesting = ["produce-v3", "produce-v9", "produce-v13", "fetch-v4", "fetch-v13", "fetch-v18"];
    let cuts: &[usize] = if interesting.contains(&seed.name.as_str()) { &cuts } else { &cuts[..1] };
    cuts.iter()
        .map(|&len| Seed {
            name: format!("{}-truncated-{len}", seed.name),
            frame: seed.frame.slice(..len),
            expect: Expect::Rejected,
        })
        .collect()
}

// ---- hostile frames, built by hand ---------------------------------------

/// Classic header (v1): key, version, correlation id, client id.
fn header_v1(key: ApiKey, version: i16) -> BytesMut {
    let mut buf = BytesMut::new();
    buf.put_i16(key as i16);
    buf.put_i16(version);
    buf.put_i32(CORRELATION_ID);
    put_string(&mut buf, "strom-fuzz");
    buf
}

/// Flexible header (v2): the v1 fields then an empty tagged-field section.
fn header_v2(key: ApiKey, version: i16) -> BytesMut {
    let mut buf = header_v1(key, version);
    put_uvarint(&mut buf, 0);
    buf
}

fn put_string(buf: &mut BytesMut, s: &str) {
    buf.put_i16(s.len() as i16);
    buf.put_slice(s.as_bytes());
}

fn put_compact_string(buf: &mut BytesMut, s: &str) {
    put_uvarint(buf, s.len() as u64 + 1);
    buf.put_slice(s.as_bytes());
}

fn put_uvarint(buf: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        buf.put_u8(value as u8 | 0x80);
        value >>= 7;
    }
    buf.put_u8(value as u8);
}

fn hostile(name: &str, buf: BytesMut) -> Seed {
    Seed { name: name.to_string(), frame: buf.freeze(), expect: Expect::Rejected }
}

fn hostile_seeds() -> Vec<Seed> {
    let mut seeds = Vec::new();
    let huge = i32::MAX;

    // Classic arrays: an i32 count of 2^31-1 and nothing after it.
    let mut buf = header_v1(ApiKey::Metadata, 1);
    buf.put_i32(huge);
    seeds.push(hostile("metadata-v1-array-7fffffff", buf));

    let mut buf = header_v1(ApiKey::Produce, 3);
    buf.put_i16(-1); // transactional_id: null
    buf.put_i16(-1); // acks
    buf.put_i32(30_000);
    buf.put_i32(huge); // topic_data
    seeds.push(hostile("produce-v3-array-7fffffff", buf));

    // Nested: one topic, then 2^31-1 partitions inside it.
    let mut buf = header_v1(ApiKey::Produce, 3);
    buf.put_i16(-1);
    buf.put_i16(1);
    buf.put_i32(30_000);
    buf.put_i32(1);
    put_string(&mut buf, "orders");
    buf.put_i32(huge); // partition_data
    seeds.push(hostile("produce-v3-nested-array-7fffffff", buf));

    let mut buf = header_v1(ApiKey::Fetch, 4);
    buf.put_i32(-1); // replica_id
    buf.put_i32(500); // max_wait_ms
    buf.put_i32(1); // min_bytes
    buf.put_i32(1 << 20); // max_bytes
    buf.put_i8(0); // isolation_level
    buf.put_i32(1); // topics
    put_string(&mut buf, "orders");
    buf.put_i32(huge); // partitions
    seeds.push(hostile("fetch-v4-nested-array-7fffffff", buf));

    let mut buf = header_v1(ApiKey::ListOffsets, 1);
    buf.put_i32(-1);
    buf.put_i32(huge);
    seeds.push(hostile("list-offsets-v1-array-7fffffff", buf));

    let mut buf = header_v1(ApiKey::CreateTopics, 2);
    buf.put_i32(huge);
    seeds.push(hostile("create-topics-v2-array-7fffffff", buf));

    let mut buf = header_v1(ApiKey::DeleteTopics, 1);
    buf.put_i32(huge);
    seeds.push(hostile("delete-topics-v1-array-7fffffff", buf));

    // Negative counts and lengths other than the null marker -1.
    let mut buf = header_v1(ApiKey::Metadata, 1);
    buf.put_i32(-2);
    seeds.push(hostile("metadata-v1-array-negative", buf));

    let mut buf = header_v1(ApiKey::Produce, 3);
    buf.put_i16(-2); // transactional_id length
    seeds.push(hostile("produce-v3-string-negative", buf));

    // Compact arrays: uvarint counts of 2^31 (2^31-1 elements) and 2^32-1.
    for (count_name, count) in [("80000000", 1u64 << 31), ("ffffffff", u64::from(u32::MAX))] {
        let mut buf = header_v2(ApiKey::Metadata, 12);
        put_uvarint(&mut buf, count); // topics
        seeds.push(hostile(&format!("metadata-v12-compact-array-{count_name}"), buf));

        let mut buf = header_v2(ApiKey::Fetch, 13);
        buf.put_i32(-1); // replica_id
        buf.put_i32(500);
        buf.put_i32(1);
        buf.put_i32(1 << 20);
        buf.put_i8(0);
        buf.put_i32(0); // session_id
        buf.put_i32(-1); // session_epoch
        put_uvarint(&mut buf, count); // topics
        seeds.push(hostile(&format!("fetch-v13-compact-array-{count_name}"), buf));

        let mut buf = header_v2(ApiKey::Produce, 9);
        put_uvarint(&mut buf, 0); // transactional_id: null
        buf.put_i16(-1);
        buf.put_i32(30_000);
        put_uvarint(&mut buf, 2); // one topic
        put_compact_string(&mut buf, "orders");
        put_uvarint(&mut buf, count); // partition_data
        seeds.push(hostile(&format!("produce-v9-nested-compact-array-{count_name}"), buf));
    }

    // Consumer groups: 2^31-1 groups in one OffsetFetch.
    let mut buf = header_v2(ApiKey::OffsetFetch, 8);
    put_uvarint(&mut buf, 1 << 31); // groups
    seeds.push(hostile("offset-fetch-v8-compact-array-80000000", buf));

    let mut buf = header_v1(ApiKey::OffsetCommit, 2);
    put_string(&mut buf, "billing");
    buf.put_i32(1); // generation_id
    put_string(&mut buf, "consumer-1");
    buf.put_i64(-1); // retention_time_ms
    buf.put_i32(1); // topics
    put_string(&mut buf, "orders");
    buf.put_i32(huge); // partitions
    seeds.push(hostile("offset-commit-v2-nested-array-7fffffff", buf));

    // A uvarint longer than five bytes.
    let mut buf = header_v2(ApiKey::Metadata, 12);
    buf.put_slice(&[0xff; 10]);
    seeds.push(hostile("metadata-v12-uvarint-overlong", buf));

    // Lengths far past the frame's end: strings, bytes, tagged fields.
    let mut buf = header_v2(ApiKey::ApiVersions, 3);
    put_uvarint(&mut buf, 1 << 31); // client_software_name
    seeds.push(hostile("api-versions-v3-compact-string-80000000", buf));

    let mut buf = BytesMut::new();
    buf.put_i16(ApiKey::Metadata as i16);
    buf.put_i16(1);
    buf.put_i32(CORRELATION_ID);
    buf.put_i16(i16::MAX); // client_id
    buf.put_slice(b"short");
    seeds.push(hostile("metadata-v1-client-id-7fff", buf));

    let mut buf = header_v1(ApiKey::Metadata, 12);
    put_uvarint(&mut buf, u64::from(u32::MAX)); // header tagged fields
    seeds.push(hostile("metadata-v12-header-tagged-fields-ffffffff", buf));

    let mut buf = header_v1(ApiKey::Metadata, 12);
    put_uvarint(&mut buf, 1); // one tagged field
    put_uvarint(&mut buf, 7); // tag
    put_uvarint(&mut buf, u64::from(u32::MAX)); // its size
    seeds.push(hostile("metadata-v12-header-tagged-field-size-ffffffff", buf));

    let mut buf = header_v1(ApiKey::Produce, 3);
    buf.put_i16(-1);
    buf.put_i16(-1);
    buf.put_i32(30_000);
    buf.put_i32(1);
    put_string(&mut buf, "orders");
    buf.put_i32(1);
    buf.put_i32(0); // index
    buf.put_i32(huge); // records length
    seeds.push(hostile("produce-v3-records-length-7fffffff", buf));

    // Header-level refusals.
    seeds.push(hostile("short-7-bytes", BytesMut::from(&header_v1(ApiKey::Metadata, 1)[..7])));
    let mut unknown = header_v1(ApiKey::Metadata, 1);
    unknown[..2].copy_from_slice(&9999i16.to_be_bytes());
    seeds.push(hostile("unknown-api-key-9999", unknown));
    seeds.push(hostile("join-group-v9-no-body", header_v2(ApiKey::JoinGroup, 9)));
    seeds.push(hostile("produce-v2-unsupported", header_v1(ApiKey::Produce, 2)));
    seeds.push(hostile("fetch-v19-unsupported", header_v1(ApiKey::Fetch, 19)));
    seeds.push(hostile("fetch-negative-version", header_v1(ApiKey::Fetch, -1)));
    seeds
}

/// Two partitions of one topic; null topics (every partition) is the other form.
fn describe_log_dirs() -> DescribeLogDirsRequest {
    DescribeLogDirsRequest::default().with_topics(Some(vec![DescribableLogDirTopic::default()
        .with_topic(topic("orders"))
        .with_partitions(vec![0, 3])]))
}
