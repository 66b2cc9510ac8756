//! Cluster administration, the counterpart of Java's `Admin` client.
//!
//! Each operation builds one Kafka request, sends it to the broker that
//! must answer it (the controller for topic changes, partition leaders for
//! offsets and record deletion, any broker for configs and metadata), and
//! returns a result per item (topic, partition, resource), because Kafka
//! answers per item: creating two topics can half succeed. Whole-request
//! failures (no broker, timeout) are the outer `Result`. Retriable failures
//! are retried up to `default.api.timeout.ms` after refreshing metadata.
//! Consumer-group administration lives in [`groups`], transactions in
//! [`transactions`], the metadata quorum in [`quorum`], client quotas and
//! SCRAM credentials in [`quotas`], partition reassignments in
//! [`reassignments`], feature levels in [`features`].

pub(crate) mod features;
pub(crate) mod groups;
pub(crate) mod partitions;
pub(crate) mod quorum;
pub mod quotas;
pub(crate) mod reassignments;
pub(crate) mod transactions;

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    alter_configs_request, incremental_alter_configs_request, AlterConfigsRequest, ApiKey, BrokerId,
    CreatePartitionsRequest, CreateTopicsRequest, DeleteRecordsRequest, DeleteTopicsRequest,
    DescribeClusterRequest, DescribeConfigsRequest, ElectLeadersRequest, IncrementalAlterConfigsRequest,
    ListOffsetsRequest, TopicName,
};
use kafka_protocol::protocol::{Request, StrBytes};

use crate::cluster::{BrokerInfo, Cluster, TopicInfo};
use crate::config::ClientConfig;
use crate::error::{Error, KafkaCode, Result};

/// A topic to create. `-1` partitions or replication factor means the
/// broker's default (`num.partitions`, `default.replication.factor`).
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

impl NewTopic {
    pub fn new(name: impl Into<String>, partitions: i32, replication_factor: i16) -> Self {
        Self { name: name.into(), partitions, replication_factor, configs: BTreeMap::new() }
    }

    pub fn with_config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.configs.insert(key.into(), value.into());
        self
    }
}

/// The outcome for one named item of a multi-item request.
#[derive(Debug)]
pub struct ItemResult<T = ()> {
    pub name: String,
    pub result: Result<T>,
}

/// A config resource: Kafka's `ConfigResource.Type` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceType {
    Topic = 2,
    Broker = 4,
    BrokerLogger = 8,
}

/// One config entry as DescribeConfigs reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    pub value: Option<String>,
    pub read_only: bool,
    pub is_sensitive: bool,
    /// Kafka's `ConfigSource` code; see [`config_source_name`].
    pub source: i8,
    /// Every level that sets this config, the one in force first.
    pub synonyms: Vec<ConfigSynonym>,
}

impl ConfigEntry {
    /// Nobody set it: neither the resource, nor a dynamic config, nor a
    /// broker's properties file (Kafka's `ConfigEntry.isDefault`).
    pub fn is_default(&self) -> bool {
        self.source == DEFAULT_CONFIG
    }
}

/// One level that sets a config: a topic override, a broker's dynamic or
/// static config (under the broker's name for it), the default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigSynonym {
    pub name: String,
    pub value: Option<String>,
    pub source: i8,
}

const DEFAULT_CONFIG: i8 = 5;

/// Kafka's name for a `ConfigSource` code, as its tools print it.
pub fn config_source_name(source: i8) -> &'static str {
    match source {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        7 => "CLIENT_METRICS_CONFIG",
        8 => "GROUP_CONFIG",
        _ => "UNKNOWN",
    }
}

/// An IncrementalAlterConfigs operation (Kafka's `AlterConfigOp.OpType`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterConfigOp {
    Set(String, String),
    Delete(String),
    Append(String, String),
    Subtract(String, String),
}

/// Which offset ListOffsets should find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    Earliest,
    Latest,
    /// The first offset whose timestamp is at or after this (ms).
    Timestamp(i64),
    /// The offset of the record with the highest timestamp (ListOffsets v7+).
    MaxTimestamp,
}

impl OffsetSpec {
    fn as_timestamp(self) -> i64 {
        match self {
            Self::Earliest => -2,
            Self::Latest => -1,
            Self::MaxTimestamp => -3,
            Self::Timestamp(ms) => ms,
        }
    }
}

/// An offset found by ListOffsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedOffset {
    pub offset: i64,
    /// -1 for earliest/latest.
    pub timestamp: i64,
    pub leader_epoch: i32,
}

/// `topic`/`partition` with a per-partition outcome.
#[derive(Debug)]
pub struct PartitionResult<T> {
    pub topic: String,
    pub partition: i32,
    pub result: Result<T>,
}

/// What DescribeCluster (or Metadata, for older brokers) says.
#[derive(Debug, Clone)]
pub struct ClusterDescription {
    pub cluster_id: Option<String>,
    pub controller_id: i32,
    /// The brokers, fenced ones included where the broker can say (KIP-1073).
    pub brokers: Vec<BrokerInfo>,
    /// The ids of the fenced brokers among them.
    pub fenced: Vec<i32>,
}

/// The admin client; cheap to clone.
#[derive(Clone)]
pub struct Admin {
    cluster: Arc<Cluster>,
}

pub use features::{FeatureDescription, FeatureMetadata, UpgradeType};
pub use groups::{GroupDescription, GroupMember, ListedGroup, MemberDescription};
pub use partitions::{PartitionDescription, TopicDescription};
pub use quorum::{QuorumEndpoint, QuorumInfo, QuorumReplica, METADATA_TOPIC};
pub use reassignments::PartitionReassignment;
pub use transactions::{
    AbortTransactionSpec, ListTransactionsFilter, ProducerState, TransactionDescription, TransactionListing,
};

pub(crate) fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

pub(crate) fn str_bytes(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

fn item_result(name: impl ToString, code: i16, message: Option<&StrBytes>) -> ItemResult {
    let result = Error::from_code(code, message.map(|m| m.as_str())).map_or(Ok(()), Err);
    ItemResult { name: name.to_string(), result }
}

fn timeout_ms(cluster: &Cluster) -> i32 {
    cluster.config().request_timeout.as_millis().min(i32::MAX as u128) as i32
}

impl Admin {
    /// Connects to the cluster named by `config.bootstrap_servers`.
    pub async fn connect(config: ClientConfig) -> Result<Self> {
        Ok(Self { cluster: Cluster::connect(config).await? })
    }

    /// An admin client sharing an existing cluster view.
    pub fn from_cluster(cluster: Arc<Cluster>) -> Self {
        Self { cluster }
    }

    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Sends `request` to the controller, retrying what a metadata refresh can fix.
    async fn to_controller<R: Request>(&self, api: &str, request: &R) -> Result<R::Response> {
        self.cluster
            .with_retries(api, || async { self.cluster.controller_connection().await?.send(request).await })
            .await
    }

    /// CreateTopics; `validate_only` checks without creating.
    pub async fn create_topics(&self, topics: &[NewTopic], validate_only: bool) -> Result<Vec<ItemResult>> {
        let request = CreateTopicsRequest::default()
            .with_topics(topics.iter().map(creatable_topic).collect())
            .with_timeout_ms(timeout_ms(&self.cluster))
            .with_validate_only(validate_only);
        let response = self.to_controller("CreateTopics", &request).await?;
        Ok(response
            .topics
            .iter()
            .map(|t| item_result(t.name.0.as_str(), t.error_code, t.error_message.as_ref()))
            .collect())
    }

    /// DeleteTopics by name.
    pub async fn delete_topics(&self, names: &[String]) -> Result<Vec<ItemResult>> {
        let request = DeleteTopicsRequest::default()
            .with_topic_names(names.iter().map(|n| topic_name(n)).collect())
            .with_timeout_ms(timeout_ms(&self.cluster));
        let response = self.to_controller("DeleteTopics", &request).await?;
        Ok(response
            .responses
            .iter()
            .map(|t| {
                let name = t.name.as_ref().map_or("", |n| n.0.as_str());
                item_result(name, t.error_code, t.error_message.as_ref())
            })
            .collect())
    }

    /// Names of all topics, internal ones (`__consumer_offsets`) only when asked.
    pub async fn list_topics(&self, include_internal: bool) -> Result<Vec<String>> {
        let metadata = self.all_metadata().await?;
        let mut names: Vec<String> = metadata
            .topics
            .values()
            .filter(|t| t.error.is_none() && (include_internal || !t.is_internal))
            .map(|t| t.name.clone())
            .collect();
        names.sort();
        Ok(names)
    }

    /// Partitions, leaders, replicas and ISR of each named topic (all topics
    /// when `names` is empty). An unknown topic is an error item, not retried.
    pub async fn describe_topics(&self, names: &[String]) -> Result<Vec<ItemResult<Arc<TopicInfo>>>> {
        let metadata = if names.is_empty() {
            self.all_metadata().await?
        } else {
            self.cluster
                .with_retries("Metadata", || async { self.cluster.refresh(Some(names), false).await })
                .await?
        };
        let mut wanted: Vec<String> = names.to_vec();
        if wanted.is_empty() {
            wanted = metadata.topics.keys().cloned().collect();
            wanted.sort();
        }
        Ok(wanted
            .into_iter()
            .map(|name| {
                let result = match metadata.topic(&name) {
                    Some(topic) => match topic.error {
                        Some(code) => Err(Error::Kafka { code, message: None }),
                        None => Ok(topic.clone()),
                    },
                    None => Err(Error::from_code(3, None).expect("UNKNOWN_TOPIC_OR_PARTITION")),
                };
                ItemResult { name, result }
            })
            .collect())
    }

    async fn all_metadata(&self) -> Result<Arc<crate::cluster::Metadata>> {
        self.cluster.with_retries("Metadata", || async { self.cluster.refresh(None, false).await }).await
    }

    /// CreatePartitions: grow each topic to `total_count` partitions.
    pub async fn create_partitions(
        &self,
        increases: &[(String, i32)],
        validate_only: bool,
    ) -> Result<Vec<ItemResult>> {
        let request = CreatePartitionsRequest::default()
            .with_topics(
                increases
                    .iter()
                    // No assignments (null, not the default empty array, which
                    // a broker reads as zero assignments): the broker places them.
                    .map(|(name, count)| {
                        CreatePartitionsTopic::default()
                            .with_name(topic_name(name))
                            .with_count(*count)
                            .with_assignments(None)
                    })
                    .collect(),
            )
            .with_timeout_ms(timeout_ms(&self.cluster))
            .with_validate_only(validate_only);
        let response = self.to_controller("CreatePartitions", &request).await?;
        Ok(response
            .results
            .iter()
            .map(|t| item_result(t.name.0.as_str(), t.error_code, t.error_message.as_ref()))
            .collect())
    }

    /// DescribeConfigs of one resource, with synonyms; `keys` empty means
    /// every key.
    pub async fn describe_configs(
        &self,
        resource: ResourceType,
        name: &str,
        keys: &[String],
    ) -> Result<Vec<ConfigEntry>> {
        let keys = (!keys.is_empty()).then(|| keys.iter().map(|k| str_bytes(k)).collect());
        let request = DescribeConfigsRequest::default()
            .with_resources(vec![DescribeConfigsResource::default()
                .with_resource_type(resource as i8)
                .with_resource_name(str_bytes(name))
                .with_configuration_keys(keys)])
            .with_include_synonyms(true);
        let connection = self.config_connection(resource, name).await?;
        let response = self.cluster.with_retries("DescribeConfigs", || connection.send(&request)).await?;
        let result = response.results.into_iter().next().ok_or_else(|| Error::Protocol {
            addr: connection.addr().to_owned(),
            reason: "DescribeConfigs answered no resource".into(),
        })?;
        if let Some(error) =
            Error::from_code(result.error_code, result.error_message.as_ref().map(|m| m.as_str()))
        {
            return Err(error);
        }
        Ok(result
            .configs
            .into_iter()
            .map(|c| ConfigEntry {
                name: c.name.to_string(),
                value: c.value.map(|v| v.to_string()),
                read_only: c.read_only,
                is_sensitive: c.is_sensitive,
                source: c.config_source,
                synonyms: c
                    .synonyms
                    .into_iter()
                    .map(|s| ConfigSynonym {
                        name: s.name.to_string(),
                        value: s.value.map(|v| v.to_string()),
                        source: s.source,
                    })
                    .collect(),
            })
            .collect())
    }

    /// AlterConfigs (the legacy, replace-everything form): keys not given
    /// return to their defaults.
    pub async fn alter_configs(
        &self,
        resource: ResourceType,
        name: &str,
        configs: &BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<()> {
        use alter_configs_request::{AlterConfigsResource, AlterableConfig};
        let entries = configs
            .iter()
            .map(|(k, v)| AlterableConfig::default().with_name(str_bytes(k)).with_value(Some(str_bytes(v))));
        let request = AlterConfigsRequest::default()
            .with_resources(vec![AlterConfigsResource::default()
                .with_resource_type(resource as i8)
                .with_resource_name(str_bytes(name))
                .with_configs(entries.collect())])
            .with_validate_only(validate_only);
        let connection = self.config_connection(resource, name).await?;
        let response = self.cluster.with_retries("AlterConfigs", || connection.send(&request)).await?;
        first_item_error(response.responses.iter().map(|r| (r.error_code, r.error_message.as_ref())))
    }

    /// IncrementalAlterConfigs: set, delete, append to or subtract from keys.
    pub async fn incremental_alter_configs(
        &self,
        resource: ResourceType,
        name: &str,
        ops: &[AlterConfigOp],
        validate_only: bool,
    ) -> Result<()> {
        use incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
        let entries = ops.iter().map(|op| {
            let (key, code, value) = match op {
                AlterConfigOp::Set(k, v) => (k, 0, Some(v)),
                AlterConfigOp::Delete(k) => (k, 1, None),
                AlterConfigOp::Append(k, v) => (k, 2, Some(v)),
                AlterConfigOp::Subtract(k, v) => (k, 3, Some(v)),
            };
            AlterableConfig::default()
                .with_name(str_bytes(key))
                .with_config_operation(code)
                .with_value(value.map(|v| str_bytes(v)))
        });
        let request = IncrementalAlterConfigsRequest::default()
            .with_resources(vec![AlterConfigsResource::default()
                .with_resource_type(resource as i8)
                .with_resource_name(str_bytes(name))
                .with_configs(entries.collect())])
            .with_validate_only(validate_only);
        let connection = self.config_connection(resource, name).await?;
        let response =
            self.cluster.with_retries("IncrementalAlterConfigs", || connection.send(&request)).await?;
        first_item_error(response.responses.iter().map(|r| (r.error_code, r.error_message.as_ref())))
    }

    /// Broker configs must be asked of that broker; topic configs of any.
    async fn config_connection(
        &self,
        resource: ResourceType,
        name: &str,
    ) -> Result<Arc<crate::connection::Connection>> {
        match (resource, name.parse::<i32>()) {
            (ResourceType::Broker | ResourceType::BrokerLogger, Ok(node_id)) => {
                self.cluster.connection(node_id).await
            }
            _ => self.cluster.any_connection().await,
        }
    }

    /// ListOffsets for each `(topic, partition, spec)`, asked of each leader.
    pub async fn list_offsets(
        &self,
        queries: &[(String, i32, OffsetSpec)],
    ) -> Result<Vec<PartitionResult<ListedOffset>>> {
        self.list_offsets_at(queries, 0).await
    }

    /// `list_offsets` under an isolation level: with 1 (read_committed)
    /// "latest" is the last stable offset rather than the high watermark.
    pub async fn list_offsets_at(
        &self,
        queries: &[(String, i32, OffsetSpec)],
        isolation_level: i8,
    ) -> Result<Vec<PartitionResult<ListedOffset>>> {
        let by_leader =
            self.group_by_leader(queries.iter().map(|(t, p, spec)| (t.as_str(), *p, *spec))).await?;
        let mut results = Vec::new();
        for (leader, partitions) in by_leader {
            let mut topics: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
            for (topic, partition, spec) in &partitions {
                topics.entry(topic).or_default().push(
                    ListOffsetsPartition::default()
                        .with_partition_index(*partition)
                        .with_current_leader_epoch(-1)
                        .with_timestamp(spec.as_timestamp()),
                );
            }
            let request = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_isolation_level(isolation_level)
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(name, partitions)| {
                            ListOffsetsTopic::default()
                                .with_name(topic_name(name))
                                .with_partitions(partitions)
                        })
                        .collect(),
                );
            let connection = self.cluster.connection(leader).await?;
            let response = connection.send(&request).await?;
            for topic in response.topics {
                for p in topic.partitions {
                    let result = match Error::from_code(p.error_code, None) {
                        Some(error) => Err(error),
                        None => Ok(ListedOffset {
                            offset: p.offset,
                            timestamp: p.timestamp,
                            leader_epoch: p.leader_epoch,
                        }),
                    };
                    results.push(PartitionResult {
                        topic: topic.name.0.to_string(),
                        partition: p.partition_index,
                        result,
                    });
                }
            }
        }
        Ok(results)
    }

    /// DeleteRecords: move each partition's log start offset up to `offset`
    /// (-1: the high watermark). Returns the new low watermark.
    pub async fn delete_records(&self, targets: &[(String, i32, i64)]) -> Result<Vec<PartitionResult<i64>>> {
        let by_leader = self.group_by_leader(targets.iter().map(|(t, p, o)| (t.as_str(), *p, *o))).await?;
        let mut results = Vec::new();
        for (leader, partitions) in by_leader {
            let mut topics: BTreeMap<&str, Vec<DeleteRecordsPartition>> = BTreeMap::new();
            for (topic, partition, offset) in &partitions {
                topics.entry(topic).or_default().push(
                    DeleteRecordsPartition::default().with_partition_index(*partition).with_offset(*offset),
                );
            }
            let request = DeleteRecordsRequest::default()
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(name, partitions)| {
                            DeleteRecordsTopic::default()
                                .with_name(topic_name(name))
                                .with_partitions(partitions)
                        })
                        .collect(),
                )
                .with_timeout_ms(timeout_ms(&self.cluster));
            let response = self.cluster.connection(leader).await?.send(&request).await?;
            for topic in response.topics {
                for p in topic.partitions {
                    let result = Error::from_code(p.error_code, None).map_or(Ok(p.low_watermark), Err);
                    results.push(PartitionResult {
                        topic: topic.name.0.to_string(),
                        partition: p.partition_index,
                        result,
                    });
                }
            }
        }
        Ok(results)
    }

    /// ElectLeaders (KIP-460): a preferred (`election_type` 0) or unclean
    /// (1) election of `partitions`, or of every partition that needs one
    /// when `None`. Per partition, `Ok` once a leader was elected.
    pub async fn elect_leaders(
        &self,
        election_type: i8,
        partitions: Option<&[(String, i32)]>,
    ) -> Result<Vec<PartitionResult<()>>> {
        let named = partitions.map(|partitions| {
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for (topic, partition) in partitions {
                by_topic.entry(topic).or_default().push(*partition);
            }
            let topics = by_topic.into_iter();
            topics
                .map(|(t, p)| TopicPartitions::default().with_topic(topic_name(t)).with_partitions(p))
                .collect()
        });
        let request = ElectLeadersRequest::default()
            .with_election_type(election_type)
            .with_topic_partitions(named)
            .with_timeout_ms(timeout_ms(&self.cluster));
        let response = self.to_controller("ElectLeaders", &request).await?;
        if let Some(e) = Error::from_code(response.error_code, None) {
            return Err(e);
        }
        let results = response.replica_election_results.into_iter().flat_map(|topic| {
            topic.partition_result.into_iter().map(move |p| PartitionResult {
                topic: topic.topic.0.to_string(),
                partition: p.partition_id,
                result: Error::from_code(p.error_code, p.error_message.as_ref().map(|m| m.as_str()))
                    .map_or(Ok(()), Err),
            })
        });
        Ok(results.collect())
    }

    /// Groups `(topic, partition, payload)` by the partition leader's id.
    async fn group_by_leader<'a, T: Copy>(
        &self,
        items: impl Iterator<Item = (&'a str, i32, T)>,
    ) -> Result<BTreeMap<i32, Vec<(&'a str, i32, T)>>> {
        let mut by_leader: BTreeMap<i32, Vec<(&'a str, i32, T)>> = BTreeMap::new();
        for (topic, partition, payload) in items {
            let info = self.cluster.topic(topic, false).await?;
            let leader = info.partition(partition).map(|p| p.leader).ok_or_else(|| Error::Kafka {
                code: KafkaCode::from_code(3).expect("UNKNOWN_TOPIC_OR_PARTITION"),
                message: Some(format!("{topic}-{partition}")),
            })?;
            by_leader.entry(leader).or_default().push((topic, partition, payload));
        }
        Ok(by_leader)
    }

    /// The cluster id, controller and brokers: DescribeCluster where the
    /// broker has it, Metadata otherwise.
    pub async fn describe_cluster(&self) -> Result<ClusterDescription> {
        let connection = self.cluster.any_connection().await?;
        if connection.version(ApiKey::DescribeCluster).is_err() {
            let metadata = self.cluster.refresh(Some(&[]), false).await?;
            return Ok(ClusterDescription {
                cluster_id: metadata.cluster_id.clone(),
                controller_id: metadata.controller_id,
                brokers: metadata.brokers.values().cloned().collect(),
                fenced: Vec::new(),
            });
        }
        let request =
            DescribeClusterRequest::default().with_endpoint_type(1).with_include_fenced_brokers(true);
        let response = connection.send(&request).await?;
        if let Some(error) =
            Error::from_code(response.error_code, response.error_message.as_ref().map(|m| m.as_str()))
        {
            return Err(error);
        }
        let fenced = response.brokers.iter().filter(|b| b.is_fenced).map(|b| b.broker_id.0).collect();
        Ok(ClusterDescription {
            cluster_id: Some(response.cluster_id.to_string()),
            controller_id: response.controller_id.0,
            fenced,
            brokers: response
                .brokers
                .into_iter()
                .map(|b| BrokerInfo {
                    node_id: b.broker_id.0,
                    host: b.host.to_string(),
                    port: b.port,
                    rack: b.rack.map(|r| r.to_string()),
                })
                .collect(),
        })
    }
}

fn creatable_topic(topic: &NewTopic) -> CreatableTopic {
    CreatableTopic::default()
        .with_name(topic_name(&topic.name))
        .with_num_partitions(topic.partitions)
        .with_replication_factor(topic.replication_factor)
        .with_configs(
            topic
                .configs
                .iter()
                .map(|(k, v)| {
                    CreatableTopicConfig::default().with_name(str_bytes(k)).with_value(Some(str_bytes(v)))
                })
                .collect(),
        )
}

fn first_item_error<'a>(items: impl Iterator<Item = (i16, Option<&'a StrBytes>)>) -> Result<()> {
    for (code, message) in items {
        if let Some(error) = Error::from_code(code, message.map(|m| m.as_str())) {
            return Err(error);
        }
    }
    Ok(())
}
