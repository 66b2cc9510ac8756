//! Cluster metadata for Strom.
//!
//! Topics, partitions, brokers, configs, features and producer-id blocks
//! are Kafka's own KRaft records (KIP-631) in an append-only metadata log,
//! replayed into immutable images:
//!
//! - [`kraft_records`] holds the records, generated from Kafka's JSON
//!   schemas, with their framing (frame version 1, Kafka's type ids);
//! - [`image`] is the state they build (features, brokers, controllers,
//!   topics by name and id with their partitions, configs, the next
//!   producer id) and writes an image back as records for a snapshot;
//! - [`loader`] applies committed batches and snapshots and publishes each
//!   new image, so every reader sees one image whole;
//! - [`operations`] decides each controller operation as a pure function of
//!   the image, the request and the time: records to write, or the Kafka
//!   error that refuses it; its `election` module moves leadership and ISRs
//!   (fencing, controlled shutdown, AlterPartition, ElectLeaders, leader
//!   balancing) as Kafka's `PartitionChangeBuilder` does, and its
//!   `reassignment` module starts, completes and cancels partition
//!   reassignments (KIP-455);
//! - [`record_log`] is where the controller writes: the [`RecordLog`]
//!   seam, and the single node's fsync'd local log behind it;
//! - [`quorum_log`] is the record log of a KRaft node: the controller
//!   appends through the quorum, and every node feeds the quorum's commits
//!   and snapshots to its loader;
//! - [`controller`] runs one operation at a time: decide, append, wait for
//!   the loader to apply the commit, answer; new partitions get their logs
//!   (through [`PartitionLogs`]) before any record names them;
//! - [`acl`] holds access control entries and Kafka's rules for matching
//!   them (the StandardAuthorizer's), which the image keeps by id;
//! - [`placement`] chooses the brokers of new partitions (Kafka's striped,
//!   rack-aware placer) and checks manual replica assignments;
//! - [`topic_config`] lists the topic-level configs, the broker configs that
//!   supply their defaults (the ones that may change at run time) and their
//!   validation.
//!
//! The cluster id is not in the log: as in Kafka, the log dirs'
//! `meta.properties` hold it.

pub mod acl;
pub mod controller;
pub mod features;
pub mod group_config;
pub mod image;
pub mod kraft_records;
pub mod loader;
pub mod operations;
pub mod placement;
pub mod quorum_log;
pub mod record_log;
pub mod topic_config;

pub use controller::{
    block_on, ConfigResource, Controller, MetadataError, NewTopic, NoLogs, PartitionLogs, ProducerIdBlock,
    DEFAULT_MAX_PARTITIONS_PER_REQUEST, PRODUCER_ID_BLOCK_SIZE,
};
pub use image::{
    BrokerImage, ControllerImage, Endpoint, FeatureRange, MetadataImage, PartitionImage, TopicImage,
    RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC,
};
pub use loader::MetadataLoader;
pub use operations::{BrokerHeartbeat, BrokerRegistration, HeartbeatReply, IsrChange, TopicElections};
pub use quorum_log::{QuorumRecordLog, SnapshotPolicy};
pub use record_log::{AppendError, Claim, LocalRecordLog, RecordLog};
