//! Storage errors. Each variant maps onto one Kafka error code at the broker edge.

use std::io;

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
    /// A write that breaks the producer's transaction (INVALID_TXN_STATE).
    #[error("invalid transaction state: {0}")]
    InvalidTxnState(String),
    /// The disk failed under us (KAFKA_STORAGE_ERROR).
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The partition's log dir failed earlier and serves nothing more
    /// (KAFKA_STORAGE_ERROR).
    #[error("log dir {0} is offline")]
    LogDirOffline(String),
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
        let StorageError::Io(e) = self else { return false };
        let process_limit = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM));
        !process_limit && e.kind() != io::ErrorKind::NotFound
    }
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;
