//! The broker's test-only crash points, in topic creation and deletion
//! and in ending a transaction.
//! `STROM_FAILPOINTS=name[,name…]` arms them; the mechanism, and the log
//! cleaner's points, are in [`strom_storage::failpoint`].

/// After a new topic's logs exist, before the metadata names the topic.
pub const TOPIC_LOGS_CREATED: &str = "topic-logs-created";
/// After a new topic is in the metadata log, before the broker hosts it.
pub const TOPIC_COMMITTED: &str = "topic-committed";
/// After the logs of partitions added to a topic exist, before the metadata names them.
pub const PARTITION_LOGS_ADDED: &str = "partition-logs-added";
/// After partitions added to a topic are in the metadata log, before the broker hosts them.
pub const PARTITIONS_ADDED: &str = "partitions-added";
/// After a topic's removal is in the metadata log, before its logs go.
pub const TOPIC_REMOVAL_COMMITTED: &str = "topic-removal-committed";
/// After the first log of a deleted topic is removed, before the others.
pub const TOPIC_LOG_REMOVED: &str = "topic-log-removed";
/// After a transaction's PrepareCommit (PrepareAbort) is written, before
/// any of its markers.
pub const TXN_PREPARED: &str = "txn-prepared";

/// Shared with the storage crate, which owns the mechanism and its own points.
pub use strom_storage::failpoint::reach;
