//! Strom's storage engine: the partition log, in Kafka's on-disk format.
//!
//! A partition is a directory `<log.dir>/<topic>-<partition>/` of segments,
//! each named by its 20-digit base offset:
//!
//! - [`batch`] reads RecordBatch v2 headers in place and rewrites the few
//!   fields the broker owns; batches are stored byte for byte otherwise.
//! - [`index`] holds the sparse, mmap'd `.index` (offset → position) and
//!   `.timeindex` (timestamp → offset).
//! - [`segment`] is one `.log` file with its indexes: append, read by offset
//!   or timestamp, and recovery (verify every batch, truncate a torn tail).
//! - [`log`] is the ordered run of segments of one partition: validation and
//!   offset assignment on append, rolling, reads bounded by the high
//!   watermark, flushing.
//! - [`file_cache`] bounds the descriptors inactive segments keep open.
//! - [`records`] walks the records inside a batch (decompressing it), for
//!   Kafka's per-record produce rules (keys on compacted topics, the
//!   timestamp window, the max timestamp), the cleaner and `strom dump-log`.
//! - [`cleaner`] compacts `cleanup.policy=compact` logs (Kafka's log
//!   cleaner): offset map, cleaned copies, crash-safe segment swaps.
//! - [`producer_state`] remembers each producer's epoch and last batches so
//!   idempotent retries are appended once; snapshotted beside the segments.
//! - [`txn_index`] is a segment's `.txnindex` of aborted transactions, for
//!   read_committed fetches.
//! - [`leader_epoch`] is a log's leader epoch cache (`leader-epoch-checkpoint`):
//!   where each leader epoch begins, for OffsetForLeaderEpoch and truncation.
//! - [`partition_metadata`] is a partition dir's `partition.metadata`, the
//!   id of the topic it belongs to.
//! - [`checkpoint`] writes Kafka's offset checkpoint files atomically;
//!   [`fsync`] is where every write is forced to disk.
//! - [`manager`] owns every log across `log.dirs`, loads them at start,
//!   places new ones, takes a failed dir offline (and a log whose lock a
//!   panic poisoned) and marks a clean shutdown.
//! - [`failpoint`] lets crash tests stop the process at a named step
//!   (`STROM_FAILPOINTS=cleaner-old-deleted`, read once; a point costs one
//!   load of a cached empty list when the variable is unset).
//!
//! There is no networking here; the broker crate drives all of it.

pub mod batch;
pub mod checkpoint;
pub mod cleaner;
pub mod error;
pub mod failpoint;
pub mod file_cache;
pub mod fsync;
pub mod index;
pub mod leader_epoch;
pub mod log;
pub mod manager;
pub mod partition_metadata;
pub mod producer_state;
pub mod records;
pub mod segment;
pub mod txn_index;

pub use error::{Context, Result, StorageError};
pub use log::{AppendInfo, CleanupPolicy, Log, LogConfig};
pub use manager::{LogDir, LogManager, SharedLog};

use std::fmt;

/// A topic name and partition number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self { topic: topic.into(), partition }
    }

    /// The partition's directory name, `<topic>-<partition>`.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Milliseconds since the Unix epoch, the clock Kafka timestamps use.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
