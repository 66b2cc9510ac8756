//! Where the controller's records go: the seam between the controller and
//! the metadata log's replication.
//!
//! The controller appends a batch through [`RecordLog`] and learns it was
//! committed when the [`MetadataLoader`] has applied it. On a single node
//! [`LocalRecordLog`] is the whole quorum: it writes the batch to
//! `<dir>/__cluster_metadata-0` (RecordBatch v2), fsyncs it, and hands it
//! to the loader before returning; in a cluster the KRaft quorum takes its
//! place and delivers commits to the loader when a majority has them.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use strom_storage::{Context, Log, LogConfig, StorageError};

use crate::controller::MetadataError;
use crate::loader::MetadataLoader;

/// The metadata log's partition directory, as Kafka names it.
pub const METADATA_LOG_DIR: &str = "__cluster_metadata-0";
/// The leader epoch the local metadata log's batches carry. A single node
/// is its own quorum and holds no elections, so the epoch never rises.
pub const METADATA_LEADER_EPOCH: i32 = 0;

/// Why a batch was not appended.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// This node is not the active controller; `leader_id` is, if known.
    #[error("this node is not the active controller")]
    NotController { leader_id: Option<i32> },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// A future as `RecordLog::append` returns it.
pub type AppendFuture<'a> = Pin<Box<dyn Future<Output = Result<u64, AppendError>> + Send + 'a>>;
/// A future as `RecordLog::claim` returns it.
pub type ClaimFuture<'a> = Pin<Box<dyn Future<Output = Result<Claim, AppendError>> + Send + 'a>>;

/// What an active controller knows before it decides an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// The leader epoch it writes in; a new one means a new active controller.
    pub epoch: i32,
    /// The offset the next appended record gets.
    pub next_offset: u64,
}

/// The metadata log as the controller writes it.
pub trait RecordLog: Send + Sync + 'static {
    /// Waits until this node may write: it is the active controller and its
    /// loader has applied everything committed before its leadership, so a
    /// decision taken on the loader's image sees the whole log.
    fn claim(&self) -> ClaimFuture<'_>;

    /// Appends one batch atomically if this node is the active controller
    /// in `epoch`, the epoch of the claim the batch was decided under, and
    /// returns the offset of its last record once the loader has applied
    /// it. In any later epoch the log may hold records the decision never
    /// saw: the append is refused (NOT_CONTROLLER) and the client retries.
    fn append(&self, epoch: i32, records: Vec<Bytes>) -> AppendFuture<'_>;
}

/// The single-node metadata log: written, fsync'd, and committed at once.
pub struct LocalRecordLog {
    log: Mutex<Log>,
    loader: Arc<MetadataLoader>,
}

impl LocalRecordLog {
    /// Opens (or creates) `<dir>/__cluster_metadata-0` and replays it into `loader`.
    pub fn open(dir: &Path, loader: Arc<MetadataLoader>) -> Result<Self, MetadataError> {
        let now = strom_storage::now_ms();
        let path = dir.join(METADATA_LOG_DIR);
        let (log, _) =
            Log::open(&path, LogConfig::default(), 0, 0, false, now).at("open metadata log", &path)?;
        replay(&log, &loader)?;
        Ok(Self { log: Mutex::new(log), loader })
    }

    /// The metadata log's end offset: one past its last record. Every
    /// record is fsync'd before it is applied, so on a single node this is
    /// also the high watermark.
    pub fn log_end_offset(&self) -> i64 {
        self.log.lock().unwrap_or_else(PoisonError::into_inner).log_end_offset()
    }

    /// The underlying log, for tests that damage it.
    #[cfg(test)]
    pub(crate) fn raw(&self) -> &Mutex<Log> {
        &self.log
    }

    /// A panic during an earlier append may have left a batch half written,
    /// so the log then refuses every append (KAFKA_STORAGE_ERROR) until a
    /// restart recovers it, as a partition log does.
    fn write(&self, records: &[Bytes]) -> Result<u64, MetadataError> {
        let mut log = strom_storage::manager::lock_log(&self.log)?;
        let now = strom_storage::now_ms();
        let entries: Vec<_> = records.iter().map(|value| (None, Some(value.clone()))).collect();
        let batch = strom_storage::batch::encode_batch(&entries, now);
        let info = log.append(&batch, METADATA_LEADER_EPOCH, now)?;
        log.flush(now)?;
        let last_offset = info.last_offset as u64;
        let base_offset = last_offset + 1 - records.len() as u64;
        // Under the log lock, so batches reach the loader in offset order.
        self.loader.apply_batch(base_offset, METADATA_LEADER_EPOCH, records)?;
        Ok(last_offset)
    }
}

impl RecordLog for LocalRecordLog {
    fn claim(&self) -> ClaimFuture<'_> {
        let next_offset = self.log_end_offset().max(0) as u64;
        Box::pin(std::future::ready(Ok(Claim { epoch: METADATA_LEADER_EPOCH, next_offset })))
    }

    fn append(&self, _epoch: i32, records: Vec<Bytes>) -> AppendFuture<'_> {
        let written = self.write(&records).map_err(|e| match e {
            MetadataError::Storage(e) => AppendError::Storage(e),
            // The batch was written but this version cannot apply it: the
            // log is unusable until an upgrade, like a storage failure.
            other => AppendError::Storage(StorageError::LogOffline(other.to_string())),
        });
        Box::pin(std::future::ready(written))
    }
}

/// Applies every record of `log` to `loader`, one run of consecutive offsets at a time.
fn replay(log: &Log, loader: &MetadataLoader) -> Result<(), MetadataError> {
    let mut run: Vec<Bytes> = Vec::new();
    let mut base = 0i64;
    for record in log.read_records(log.log_end_offset())? {
        if !run.is_empty() && record.offset != base + run.len() as i64 {
            loader.apply_batch(base as u64, METADATA_LEADER_EPOCH, &std::mem::take(&mut run))?;
        }
        if run.is_empty() {
            base = record.offset;
        }
        run.push(record.value.unwrap_or_default());
    }
    if !run.is_empty() {
        loader.apply_batch(base as u64, METADATA_LEADER_EPOCH, &run)?;
    }
    Ok(())
}
