//! Strom's Kafka client: speaks Kafka's wire protocol to any compatible
//! broker (Strom, Apache Kafka, Redpanda…) without librdkafka.
//!
//! The layers, bottom up:
//!
//! - [`connection`]: one TCP connection per broker. Requests are pipelined:
//!   a writer task sends frames, a reader task routes each response to its
//!   caller by correlation id. API versions are negotiated at connect
//!   ([`versions`] holds the table of versions this client implements).
//! - [`cluster`]: bootstrap, the metadata cache (brokers, topics, partition
//!   leaders), one shared connection per broker, and refresh with bounded
//!   retries when a broker says the cache is stale.
//! - [`admin`]: topics, partitions, configs, offsets, records, groups and
//!   the cluster description, each a request routed to the right broker.
//! - [`producer`]: records are partitioned ([`producer::partitioner`], the
//!   Java client's murmur2 and sticky rules), appended to per-partition
//!   batches ([`producer::accumulator`], linger/batch size/buffer memory),
//!   encoded as RecordBatch v2 ([`producer::batch`]) and sent by one
//!   sender task ([`producer::sender`]), one request per leader, with
//!   retries and idempotence.
//! - [`consumer`]: assign or subscribe (consumer groups, classic protocol,
//!   with Kafka's assignors), fetch with one request in flight per broker,
//!   poll, seek, pause/resume and commits.
//! - [`config`]: Kafka's client property names (`bootstrap.servers`,
//!   `linger.ms`, …) parsed into typed configs.
//! - [`error`]: one error enum; broker errors keep their Kafka code.

pub mod admin;
pub mod cluster;
pub mod config;
pub mod connection;
pub mod consumer;
pub mod error;
pub mod producer;
pub mod versions;

pub use admin::Admin;
pub use cluster::Cluster;
pub use config::ClientConfig;
pub use error::{Error, KafkaCode, Result};

pub use consumer::{Consumer, ConsumerConfig, ConsumerRecord, TopicPartition};
pub use producer::{DeliveryFuture, Producer, ProducerConfig, ProducerRecord, RecordMetadata};
