//! Storage errors. Each variant maps onto one Kafka error code at the broker edge.
//!
//! An error's message holds its cause (an I/O error's OS message) and no
//! error here reports a `source()`, so a chain printer (anyhow's `{:#}`)
//! shows each cause once. An I/O error names what it was doing and where
//! when [`Context::at`] was given them.

use std::io;
use std::path::{Path, PathBuf};

/// Everything that can go wrong reading or writing a partition log.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A batch failed its size, magic or CRC check (CORRUPT_MESSAGE).
    #[error("corrupt record: {0}")]
    CorruptRecord(String),
    /// A batch whose contents contradict its header (INVALID_RECORD).
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// `rejected` records of one batch break the log's rules; the first
    /// [`crate::records::MAX_NAMED_RECORD_ERRORS`] are named so a client can
    /// fail just them (KIP-467). INVALID_TIMESTAMP when a timestamp is out of
    /// range, INVALID_RECORD otherwise.
    #[error("{}", rejected_records_message(*.rejected, .errors))]
    RejectedRecords { invalid_timestamp: bool, rejected: usize, errors: Vec<RecordError> },
    /// A batch larger than `max.message.bytes` (MESSAGE_TOO_LARGE).
    #[error("batch of {size} bytes exceeds the limit of {max} bytes")]
    RecordTooLarge { size: usize, max: usize },
    /// An append or index entry past the largest position a segment's index
    /// can record ([`crate::segment::MAX_SEGMENT_BYTES`]). Logs roll before
    /// this, so it is refused, never wrapped (UNKNOWN_SERVER_ERROR).
    #[error("segment full: {0}")]
    SegmentFull(String),
    /// A fetch outside `[log start, log end]` (OFFSET_OUT_OF_RANGE).
    #[error("offset {offset} is outside the log range [{log_start}, {log_end}]")]
    OffsetOutOfRange { offset: i64, log_start: i64, log_end: i64 },
    /// A producer's batch does not follow its last one (OUT_OF_ORDER_SEQUENCE_NUMBER).
    #[error("out of order sequence: {0}")]
    OutOfOrderSequence(String),
    /// A batch from an older epoch of its producer (INVALID_PRODUCER_EPOCH).
    #[error("invalid producer epoch: {0}")]
    InvalidProducerEpoch(String),
    /// A transaction marker from an older coordinator than the last one
    /// the partition heard from (TRANSACTION_COORDINATOR_FENCED).
    #[error("transaction coordinator fenced: {0}")]
    CoordinatorFenced(String),
    /// A write that breaks the producer's transaction (INVALID_TXN_STATE).
    #[error("invalid transaction state: {0}")]
    InvalidTxnState(String),
    /// The disk failed under us (KAFKA_STORAGE_ERROR).
    #[error("I/O error: {0}")]
    Io(io::Error),
    /// [`StorageError::Io`] with the operation and the path it failed on.
    #[error("cannot {op} {}: {error}", path.display())]
    IoAt { op: &'static str, path: PathBuf, error: io::Error },
    /// The partition's log dir failed earlier and serves nothing more
    /// (KAFKA_STORAGE_ERROR).
    #[error("log dir {0} is offline")]
    LogDirOffline(String),
    /// A panic poisoned the partition's log lock, perhaps mid-append: its
    /// state in memory may disagree with its files, so it serves nothing
    /// more until a restart recovers it from disk (KAFKA_STORAGE_ERROR).
    #[error("log {0} is offline after an internal error")]
    LogOffline(String),
}

/// One refused record: its index within its batch and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    pub batch_index: i32,
    pub message: String,
}

/// How many records were refused, with the first few reasons.
fn rejected_records_message(rejected: usize, errors: &[RecordError]) -> String {
    const SHOWN: usize = 3;
    let first: Vec<String> =
        errors.iter().take(SHOWN).map(|e| format!("record {}: {}", e.batch_index, e.message)).collect();
    format!("{rejected} record(s) rejected; the first {}: {}", first.len(), first.join("; "))
}

impl StorageError {
    /// Whether the error says the log dir itself is failing, which takes it
    /// offline. Running out of descriptors or memory is the process's
    /// trouble, not the disk's; a file gone missing is what a deletion
    /// racing a read looks like.
    pub fn is_disk_failure(&self) -> bool {
        let (StorageError::Io(e) | StorageError::IoAt { error: e, .. }) = self else { return false };
        let process_limit = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM));
        !process_limit && e.kind() != io::ErrorKind::NotFound
    }
}

impl From<io::Error> for StorageError {
    fn from(error: io::Error) -> Self {
        StorageError::Io(error)
    }
}

/// Names the operation and the path of a failed I/O step.
pub trait Context<T> {
    /// A bare I/O error becomes [`StorageError::IoAt`]: `cannot {op} {path}:
    /// {error}`. Other errors, and I/O errors already named, pass unchanged.
    fn at(self, op: &'static str, path: &Path) -> Result<T>;
}

impl<T, E: Into<StorageError>> Context<T> for std::result::Result<T, E> {
    fn at(self, op: &'static str, path: &Path) -> Result<T> {
        self.map_err(|e| match e.into() {
            StorageError::Io(error) => StorageError::IoAt { op, path: path.to_owned(), error },
            other => other,
        })
    }
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_error_names_the_operation_and_path_once() {
        let failed: io::Result<()> = Err(io::Error::from_raw_os_error(libc::ENOENT));
        let error = failed.at("open segment", Path::new("/data/t-0/00.log")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "cannot open segment /data/t-0/00.log: No such file or directory (os error 2)"
        );
        assert!(
            std::error::Error::source(&error).is_none(),
            "the cause is in the message, not repeated as a source"
        );
        let renamed = Err::<(), _>(error).at("load log", Path::new("/data/t-0")).unwrap_err();
        assert!(
            renamed.to_string().starts_with("cannot open segment"),
            "the innermost step is the one named"
        );
    }
}
