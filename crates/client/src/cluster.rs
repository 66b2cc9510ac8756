//! The client's view of the cluster: brokers, topics, partition leaders,
//! and one shared connection per broker.
//!
//! The view starts from the bootstrap servers and is refreshed by Metadata
//! requests: on demand for a topic the cache does not know, when it is older
//! than `metadata.max.age.ms`, and whenever a broker answers with an error
//! that means the cache is stale (NOT_LEADER_OR_FOLLOWER,
//! UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE…; see
//! `Error::invalidates_metadata`). Every retry loop here is bounded by
//! `default.api.timeout.ms` and backs off between attempts.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::{
    ApiKey, FindCoordinatorRequest, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::config::ClientConfig;
use crate::connection::Connection;
use crate::error::{Error, KafkaCode, Result};

/// A broker as Metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

impl BrokerInfo {
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// One partition: who leads it and who replicates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    pub partition: i32,
    /// -1 while there is no leader.
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub offline_replicas: Vec<i32>,
    pub error: Option<KafkaCode>,
}

/// One topic and its partitions, ordered by partition number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub topic_id: Uuid,
    pub is_internal: bool,
    pub error: Option<KafkaCode>,
    pub partitions: Vec<PartitionInfo>,
}

impl TopicInfo {
    pub fn partition(&self, partition: i32) -> Option<&PartitionInfo> {
        self.partitions.get(usize::try_from(partition).ok()?).filter(|p| p.partition == partition)
    }
}

/// A snapshot of cluster metadata; replaced whole on each refresh.
#[derive(Debug, Clone)]
pub struct Metadata {
    pub cluster_id: Option<String>,
    /// -1 when the broker does not say.
    pub controller_id: i32,
    pub brokers: BTreeMap<i32, BrokerInfo>,
    pub topics: HashMap<String, Arc<TopicInfo>>,
    fetched_at: Instant,
}

impl Metadata {
    fn empty() -> Self {
        Self {
            cluster_id: None,
            controller_id: -1,
            brokers: BTreeMap::new(),
            topics: HashMap::new(),
            fetched_at: Instant::now(),
        }
    }

    pub fn topic(&self, name: &str) -> Option<&Arc<TopicInfo>> {
        self.topics.get(name)
    }

    /// Merges a Metadata response: brokers and controller are replaced; the
    /// topics it names are replaced, or all topics when it answered for all.
    fn merged(&self, response: MetadataResponse, all_topics: bool) -> Self {
        let brokers = response
            .brokers
            .into_iter()
            .map(|b| {
                let info = BrokerInfo {
                    node_id: b.node_id.0,
                    host: b.host.to_string(),
                    port: b.port,
                    rack: b.rack.map(|r| r.to_string()),
                };
                (info.node_id, info)
            })
            .collect();
        let mut topics = if all_topics { HashMap::new() } else { self.topics.clone() };
        for topic in response.topics {
            if let Some(info) = topic_info(topic) {
                topics.insert(info.name.clone(), Arc::new(info));
            }
        }
        Self {
            cluster_id: response.cluster_id.map(|c| c.to_string()),
            controller_id: response.controller_id.0,
            brokers,
            topics,
            fetched_at: Instant::now(),
        }
    }
}

fn topic_info(topic: MetadataResponseTopic) -> Option<TopicInfo> {
    let mut partitions: Vec<PartitionInfo> = topic
        .partitions
        .into_iter()
        .map(|p| PartitionInfo {
            partition: p.partition_index,
            leader: p.leader_id.0,
            leader_epoch: p.leader_epoch,
            replicas: p.replica_nodes.into_iter().map(|n| n.0).collect(),
            isr: p.isr_nodes.into_iter().map(|n| n.0).collect(),
            offline_replicas: p.offline_replicas.into_iter().map(|n| n.0).collect(),
            error: KafkaCode::from_code(p.error_code),
        })
        .collect();
    partitions.sort_by_key(|p| p.partition);
    Some(TopicInfo {
        name: topic.name?.0.to_string(),
        topic_id: topic.topic_id,
        is_internal: topic.is_internal,
        error: KafkaCode::from_code(topic.error_code),
        partitions,
    })
}

/// Shared cluster state: the metadata cache and the broker connections.
pub struct Cluster {
    config: ClientConfig,
    metadata: RwLock<Arc<Metadata>>,
    connections: tokio::sync::Mutex<HashMap<i32, Arc<Connection>>>,
    /// The connection metadata came from before any broker id was known.
    bootstrap: tokio::sync::Mutex<Option<Arc<Connection>>>,
}

impl Cluster {
    /// Connects to the first reachable bootstrap server and loads the list
    /// of brokers. Fails with one error naming every server tried.
    pub async fn connect(config: ClientConfig) -> Result<Arc<Self>> {
        let cluster = Arc::new(Self {
            config,
            metadata: RwLock::new(Arc::new(Metadata::empty())),
            connections: Default::default(),
            bootstrap: Default::default(),
        });
        cluster.refresh(Some(&[]), false).await?;
        Ok(cluster)
    }

    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The current snapshot; cheap, never waits on the network.
    pub fn metadata(&self) -> Arc<Metadata> {
        self.metadata.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Asks for metadata of `topics` (all topics when `None`) and merges it
    /// into the cache. Tries each known broker, then the bootstrap servers.
    pub async fn refresh(
        &self,
        topics: Option<&[String]>,
        allow_auto_topic_creation: bool,
    ) -> Result<Arc<Metadata>> {
        let connection = self.any_connection().await?;
        let version = connection.version(ApiKey::Metadata)?;
        let request = MetadataRequest::default()
            .with_topics(topics.map(|names| {
                names
                    .iter()
                    .map(|n| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(n.clone()))))
                    })
                    .collect()
            }))
            .with_allow_auto_topic_creation(allow_auto_topic_creation && version >= 4);
        let response = connection.send_at(&request, version).await?;
        let mut guard = self.metadata.write().unwrap_or_else(|e| e.into_inner());
        let merged = Arc::new(guard.merged(response, topics.is_none()));
        *guard = merged.clone();
        Ok(merged)
    }

    /// Metadata for `name`, refreshed if the cache lacks it or is old.
    /// Retries while the topic or its leaders are not ready, up to
    /// `default.api.timeout.ms`; a topic that stays unknown is an error.
    pub async fn topic(&self, name: &str, allow_auto_topic_creation: bool) -> Result<Arc<TopicInfo>> {
        let cached = self.metadata();
        if let Some(topic) = cached.topic(name).filter(|t| is_usable(t)) {
            if cached.fetched_at.elapsed() < self.config.metadata_max_age {
                return Ok(topic.clone());
            }
        }
        let names = [name.to_owned()];
        self.with_retries(&format!("metadata for topic {name}"), || async {
            let metadata = self.refresh(Some(&names), allow_auto_topic_creation).await?;
            let topic = metadata.topic(name).ok_or_else(|| Error::Protocol {
                addr: "metadata".into(),
                reason: format!("response omits requested topic {name}"),
            })?;
            if let Some(code) = topic.error {
                return Err(Error::Kafka { code, message: Some(format!("topic {name}")) });
            }
            if !is_usable(topic) {
                let code = KafkaCode::from_code(5).expect("LEADER_NOT_AVAILABLE");
                return Err(Error::Kafka {
                    code,
                    message: Some(format!("topic {name} has a partition without leader")),
                });
            }
            Ok(topic.clone())
        })
        .await
    }

    /// Runs `attempt` until it succeeds, fails with a non-retriable error,
    /// or `default.api.timeout.ms` runs out; backs off exponentially and
    /// drops cached metadata when the error says it is stale.
    pub async fn with_retries<T, F, Fut>(&self, what: &str, mut attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let deadline = Instant::now() + self.config.api_timeout;
        for attempts in 1u32.. {
            let error = match attempt().await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            let backoff = self.config.backoff(attempts);
            if !error.is_retriable() || Instant::now() + backoff >= deadline {
                return Err(if attempts == 1 {
                    error
                } else {
                    Error::RetriesExhausted { what: what.to_owned(), attempts, last: Box::new(error) }
                });
            }
            tracing::debug!("{what}: attempt {attempts} failed ({error}); retrying in {backoff:?}");
            tokio::time::sleep(backoff).await;
        }
        unreachable!("the loop returns once the deadline passes")
    }

    /// The connection to broker `node_id`, opened on first use and reopened
    /// after it failed.
    pub async fn connection(&self, node_id: i32) -> Result<Arc<Connection>> {
        let mut connections = self.connections.lock().await;
        if let Some(connection) = connections.get(&node_id).filter(|c| !c.is_closed()) {
            return Ok(connection.clone());
        }
        let broker = self.metadata().brokers.get(&node_id).cloned().ok_or_else(|| Error::Kafka {
            code: KafkaCode::from_code(8).expect("BROKER_NOT_AVAILABLE"),
            message: Some(format!("no broker with id {node_id} in metadata")),
        })?;
        let connection =
            Arc::new(Connection::connect(&broker.addr(), self.config.connection_options()).await?);
        connections.insert(node_id, connection.clone());
        Ok(connection)
    }

    /// The connection to the leader of `topic`/`partition`, from the cache.
    pub async fn leader_connection(&self, topic: &str, partition: i32) -> Result<Arc<Connection>> {
        let info = self.topic(topic, false).await?;
        let leader = info.partition(partition).map(|p| p.leader).ok_or_else(|| Error::Kafka {
            code: KafkaCode::from_code(3).expect("UNKNOWN_TOPIC_OR_PARTITION"),
            message: Some(format!("{topic}-{partition}")),
        })?;
        self.connection(leader).await
    }

    /// The connection to the coordinator of `key`: a group id
    /// (`key_type` 0) or a transactional id (1). Not cached: callers retry
    /// through `with_retries`, which asks again after NOT_COORDINATOR.
    pub async fn coordinator(&self, key_type: i8, key: &str) -> Result<Arc<Connection>> {
        let node_id = self.coordinator_id(key_type, key).await?;
        self.connection(node_id).await
    }

    /// The node id of the coordinator of `key`, as [`Self::coordinator`] finds it.
    pub async fn coordinator_id(&self, key_type: i8, key: &str) -> Result<i32> {
        let connection = self.any_connection().await?;
        let version = connection.version(ApiKey::FindCoordinator)?;
        let key_bytes = StrBytes::from_string(key.to_owned());
        let request = if version >= 4 {
            FindCoordinatorRequest::default().with_key_type(key_type).with_coordinator_keys(vec![key_bytes])
        } else {
            FindCoordinatorRequest::default().with_key_type(key_type).with_key(key_bytes)
        };
        let response = connection.send_at(&request, version).await?;
        let (code, message, node_id) = match response.coordinators.first() {
            Some(c) if version >= 4 => (c.error_code, c.error_message.clone(), c.node_id.0),
            _ => (response.error_code, response.error_message.clone(), response.node_id.0),
        };
        if let Some(error) = Error::from_code(code, message.as_ref().map(|m| m.as_str())) {
            return Err(error);
        }
        if !self.metadata().brokers.contains_key(&node_id) {
            self.refresh(Some(&[]), false).await?;
        }
        Ok(node_id)
    }

    /// The controller's connection, or any broker's when none is named
    /// (KRaft brokers forward controller requests themselves).
    pub async fn controller_connection(&self) -> Result<Arc<Connection>> {
        let controller = self.metadata().controller_id;
        match controller {
            id if id >= 0 => match self.connection(id).await {
                Ok(connection) => Ok(connection),
                Err(_) => self.any_connection().await,
            },
            _ => self.any_connection().await,
        }
    }

    /// Some live connection: an open one, else the first known broker or
    /// bootstrap server that accepts one.
    pub async fn any_connection(&self) -> Result<Arc<Connection>> {
        if let Some(open) = self.connections.lock().await.values().find(|c| !c.is_closed()) {
            return Ok(open.clone());
        }
        let mut failures = Vec::new();
        for node_id in self.metadata().brokers.keys() {
            match self.connection(*node_id).await {
                Ok(connection) => return Ok(connection),
                Err(e) => failures.push(e.to_string()),
            }
        }
        self.bootstrap_connection(failures).await
    }

    async fn bootstrap_connection(&self, mut failures: Vec<String>) -> Result<Arc<Connection>> {
        let mut bootstrap = self.bootstrap.lock().await;
        if let Some(connection) = bootstrap.as_ref().filter(|c| !c.is_closed()) {
            return Ok(connection.clone());
        }
        for addr in &self.config.bootstrap_servers {
            match Connection::connect(addr, self.config.connection_options()).await {
                Ok(connection) => {
                    let connection = Arc::new(connection);
                    *bootstrap = Some(connection.clone());
                    return Ok(connection);
                }
                Err(e) => failures.push(e.to_string()),
            }
        }
        Err(Error::NoBrokerReachable(failures.join("; ")))
    }
}

/// Every partition has a leader and no partition-level error.
fn is_usable(topic: &TopicInfo) -> bool {
    topic.error.is_none() && !topic.partitions.is_empty() && topic.partitions.iter().all(|p| p.leader >= 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::metadata_response::{MetadataResponseBroker, MetadataResponsePartition};
    use kafka_protocol::messages::BrokerId;

    fn response(topic: &str, leaders: &[i32]) -> MetadataResponse {
        let partitions = leaders
            .iter()
            .enumerate()
            .rev()
            .map(|(i, leader)| {
                MetadataResponsePartition::default()
                    .with_partition_index(i as i32)
                    .with_leader_id(BrokerId(*leader))
                    .with_replica_nodes(vec![BrokerId(*leader)])
            })
            .collect();
        MetadataResponse::default()
            .with_brokers(vec![MetadataResponseBroker::default()
                .with_node_id(BrokerId(1))
                .with_host(StrBytes::from_static_str("127.0.0.1"))
                .with_port(9092)])
            .with_topics(vec![MetadataResponseTopic::default()
                .with_name(Some(TopicName(StrBytes::from_string(topic.into()))))
                .with_partitions(partitions)])
    }

    #[test]
    fn merging_replaces_named_topics_and_keeps_others() {
        let base = Metadata::empty().merged(response("a", &[1, 1]), true);
        let a = base.topic("a").unwrap();
        assert_eq!(a.partitions.iter().map(|p| p.partition).collect::<Vec<_>>(), [0, 1], "sorted");
        assert_eq!(a.partition(1).unwrap().leader, 1);
        assert!(is_usable(a));
        assert_eq!(base.brokers[&1].addr(), "127.0.0.1:9092");

        let merged = base.merged(response("b", &[-1]), false);
        assert!(merged.topic("a").is_some(), "a topic not asked about is kept");
        assert!(!is_usable(merged.topic("b").unwrap()), "b has no leader yet");

        let all = merged.merged(response("c", &[1]), true);
        assert!(all.topic("a").is_none(), "a full refresh drops deleted topics");
    }
}
