//! Cluster metadata for Strom.
//!
//! Topics, partitions, topic ids, configs and producer-id blocks are records in an append-only
//! metadata log, replayed into an in-memory image at start:
//!
//! - [`records`] defines the metadata records and their encoding;
//! - [`kraft_records`] holds Kafka's own KRaft metadata records (KIP-631),
//!   generated from Kafka's JSON schemas, with their framing;
//! - [`image`] is the state they build (topics by name and id, partitions,
//!   topic config overrides, dynamic broker configs), shared with readers as
//!   an `Arc` snapshot;
//! - [`controller`] validates changes (Kafka's topic name rules, partition
//!   and replication checks, topic and dynamic broker configs), writes them
//!   to the log and publishes the next image; new partitions get their logs
//!   (through [`PartitionLogs`]) before any record names them;
//! - [`placement`] chooses the brokers of new partitions (Kafka's striped,
//!   rack-aware placer) and checks manual replica assignments;
//! - [`topic_config`] lists the topic-level configs, the broker configs that
//!   supply their defaults (the ones that may change at run time) and their
//!   validation.
//!
//! On one node the log has a single voter; a cluster will replicate the same
//! records through a Raft quorum.

pub mod controller;
pub mod image;
pub mod kraft_records;
pub mod placement;
pub mod records;
pub mod topic_config;

pub use controller::{
    ConfigResource, Controller, MetadataError, NewTopic, NoLogs, PartitionLogs, ProducerIdBlock,
    DEFAULT_MAX_PARTITIONS_PER_REQUEST, PRODUCER_ID_BLOCK_SIZE,
};
pub use image::{MetadataImage, PartitionImage, TopicImage, RESOURCE_BROKER, RESOURCE_TOPIC};
