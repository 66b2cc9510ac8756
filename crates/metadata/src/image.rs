//! The metadata image: the state the metadata log replays to.
//!
//! Readers take an `Arc` snapshot and never block writers; the controller
//! builds the next image by applying records to a copy.

use std::collections::{BTreeMap, HashMap};

use uuid::Uuid;

use crate::records::MetadataRecord;

/// Kafka's `ConfigResource.Type` ids of the resources Strom keeps configs for.
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;

static NO_CONFIGS: BTreeMap<String, String> = BTreeMap::new();

/// One partition's assignment and leadership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionImage {
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub leader: i32,
    pub leader_epoch: i32,
}

/// A topic, its partitions and its config overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    pub name: String,
    pub id: Uuid,
    pub partitions: BTreeMap<i32, PartitionImage>,
    pub configs: BTreeMap<String, String>,
}

impl TopicImage {
    /// Kafka marks its own bookkeeping topics internal.
    pub fn is_internal(&self) -> bool {
        matches!(self.name.as_str(), "__consumer_offsets" | "__transaction_state")
    }
}

#[derive(Debug, Clone, Default)]
pub struct MetadataImage {
    pub cluster_id: String,
    topics: BTreeMap<String, TopicImage>,
    names_by_id: HashMap<Uuid, String>,
    /// Dynamic broker configs by resource name: a node id, or "" for the
    /// cluster-wide defaults.
    broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Offset of the last record applied.
    pub last_offset: i64,
    /// The first producer id no broker has been given yet.
    pub next_producer_id: i64,
}

impl MetadataImage {
    pub fn topics(&self) -> impl Iterator<Item = &TopicImage> {
        self.topics.values()
    }

    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<&TopicImage> {
        self.names_by_id.get(id).and_then(|name| self.topics.get(name))
    }

    /// The dynamic configs of a broker resource: `"1"` for node 1, `""` for
    /// the cluster-wide defaults.
    pub fn broker_configs(&self, resource_name: &str) -> &BTreeMap<String, String> {
        self.broker_configs.get(resource_name).unwrap_or(&NO_CONFIGS)
    }

    /// Applies one record. Records that refer to unknown topics are ignored
    /// with a warning: they can only follow a removal in the same log.
    pub fn apply(&mut self, record: MetadataRecord) {
        match record {
            MetadataRecord::Cluster { cluster_id } => self.cluster_id = cluster_id,
            MetadataRecord::Topic { name, topic_id } => {
                self.names_by_id.insert(topic_id, name.clone());
                let topic = TopicImage {
                    name: name.clone(),
                    id: topic_id,
                    partitions: BTreeMap::new(),
                    configs: BTreeMap::new(),
                };
                self.topics.insert(name, topic);
            }
            MetadataRecord::Partition { topic_id, partition, replicas, leader, leader_epoch } => {
                if let Some(topic) = self.topic_mut(&topic_id) {
                    let isr = replicas.clone();
                    topic
                        .partitions
                        .insert(partition, PartitionImage { replicas, isr, leader, leader_epoch });
                }
            }
            MetadataRecord::TopicConfig { topic_id, name, value } => {
                if let Some(topic) = self.topic_mut(&topic_id) {
                    match value {
                        Some(value) => topic.configs.insert(name, value),
                        None => topic.configs.remove(&name),
                    };
                }
            }
            MetadataRecord::Config { resource_type, resource_name, name, value } => {
                self.apply_config(resource_type, resource_name, name, value)
            }
            MetadataRecord::RemoveTopic { topic_id } => {
                if let Some(name) = self.names_by_id.remove(&topic_id) {
                    self.topics.remove(&name);
                }
            }
            MetadataRecord::ProducerIds { next_producer_id, .. } => {
                // Ids only ever move forward, whatever the log holds.
                self.next_producer_id = self.next_producer_id.max(next_producer_id);
            }
        }
    }

    fn apply_config(
        &mut self,
        resource_type: i8,
        resource_name: String,
        name: String,
        value: Option<String>,
    ) {
        let configs = match resource_type {
            RESOURCE_TOPIC => match self.topics.get_mut(&resource_name) {
                Some(topic) => &mut topic.configs,
                None => {
                    tracing::warn!(topic = %resource_name, "config record for an unknown topic ignored");
                    return;
                }
            },
            RESOURCE_BROKER => self.broker_configs.entry(resource_name.clone()).or_default(),
            other => {
                tracing::warn!(resource_type = other, "config record for an unknown resource type ignored");
                return;
            }
        };
        match value {
            Some(value) => configs.insert(name, value),
            None => configs.remove(&name),
        };
        if resource_type == RESOURCE_BROKER && configs.is_empty() {
            self.broker_configs.remove(&resource_name);
        }
    }

    fn topic_mut(&mut self, id: &Uuid) -> Option<&mut TopicImage> {
        let name = self.names_by_id.get(id);
        if name.is_none() {
            tracing::warn!(topic_id = %id, "metadata record for an unknown topic ignored");
        }
        self.topics.get_mut(name?)
    }
}
