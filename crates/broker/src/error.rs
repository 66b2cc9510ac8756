//! How internal errors become Kafka error codes on the wire.

use kafka_protocol::error::ResponseError;
use strom_metadata::MetadataError;
use strom_storage::StorageError;

/// The Kafka error code for a storage failure.
pub fn storage_error(e: &StorageError) -> ResponseError {
    match e {
        StorageError::CorruptRecord(_) => ResponseError::CorruptMessage,
        StorageError::InvalidRecord(_) => ResponseError::InvalidRecord,
        StorageError::RejectedRecords { invalid_timestamp: true, .. } => ResponseError::InvalidTimestamp,
        StorageError::RejectedRecords { .. } => ResponseError::InvalidRecord,
        StorageError::RecordTooLarge { .. } => ResponseError::MessageTooLarge,
        StorageError::SegmentFull(_) => ResponseError::UnknownServerError,
        StorageError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        StorageError::OutOfOrderSequence(_) => ResponseError::OutOfOrderSequenceNumber,
        StorageError::InvalidProducerEpoch(_) => ResponseError::InvalidProducerEpoch,
        StorageError::InvalidTxnState(_) => ResponseError::InvalidTxnState,
        StorageError::CoordinatorFenced(_) => ResponseError::TransactionCoordinatorFenced,
        StorageError::Io(_)
        | StorageError::IoAt { .. }
        | StorageError::LogDirOffline(_)
        | StorageError::LogOffline(_) => ResponseError::KafkaStorageError,
    }
}

/// The Kafka error code for a refused metadata change.
pub fn metadata_error(e: &MetadataError) -> ResponseError {
    match e {
        MetadataError::TopicAlreadyExists(_) => ResponseError::TopicAlreadyExists,
        MetadataError::UnknownTopic => ResponseError::UnknownTopicOrPartition,
        MetadataError::InvalidTopic(_) => ResponseError::InvalidTopicException,
        MetadataError::InvalidPartitions(_) => ResponseError::InvalidPartitions,
        MetadataError::InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
        MetadataError::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
        MetadataError::InvalidConfig(_) => ResponseError::InvalidConfig,
        MetadataError::PolicyViolation(_) => ResponseError::PolicyViolation,
        MetadataError::ProducerIdsExhausted | MetadataError::UnreadableRecord { .. } => {
            ResponseError::UnknownServerError
        }
        MetadataError::StaleBrokerEpoch(_) => ResponseError::StaleBrokerEpoch,
        MetadataError::BrokerIdNotRegistered(_) => ResponseError::BrokerIdNotRegistered,
        MetadataError::DuplicateBrokerRegistration(_) => ResponseError::DuplicateBrokerRegistration,
        MetadataError::InconsistentClusterId(_) => ResponseError::InconsistentClusterId,
        MetadataError::UnsupportedVersion(_) => ResponseError::UnsupportedVersion,
        MetadataError::InvalidRequest(_) => ResponseError::InvalidRequest,
        MetadataError::UnsupportedSaslMechanism(_) => ResponseError::UnsupportedSaslMechanism,
        MetadataError::UnacceptableCredential(_) => ResponseError::UnacceptableCredential,
        MetadataError::ResourceNotFound(_) => ResponseError::ResourceNotFound,
        MetadataError::DuplicateResource(_) => ResponseError::DuplicateResource,
        MetadataError::NotController { .. } => ResponseError::NotController,
        MetadataError::FencedLeaderEpoch(_) => ResponseError::FencedLeaderEpoch,
        MetadataError::InvalidUpdateVersion(_) => ResponseError::InvalidUpdateVersion,
        MetadataError::IneligibleReplica(_) => ResponseError::IneligibleReplica,
        MetadataError::UnknownTopicId => ResponseError::UnknownTopicId,
        MetadataError::NewLeaderElected => ResponseError::NewLeaderElected,
        MetadataError::ElectionNotNeeded => ResponseError::ElectionNotNeeded,
        MetadataError::PreferredLeaderNotAvailable(_) => ResponseError::PreferredLeaderNotAvailable,
        MetadataError::EligibleLeadersNotAvailable(_) => ResponseError::EligibleLeadersNotAvailable,
        MetadataError::NoReassignmentInProgress => ResponseError::NoReassignmentInProgress,
        MetadataError::Storage(_) => ResponseError::KafkaStorageError,
    }
}

/// Why a connection is closed instead of answered, as Kafka closes it.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("frame of {0} bytes is too short for a request header")]
    ShortFrame(usize),
    #[error("unknown API key {0}")]
    UnknownApi(i16),
    #[error("unsupported version {version} of API key {api_key}")]
    UnsupportedVersion { api_key: i16, version: i16 },
    #[error("malformed request: {0}")]
    Malformed(String),
    #[error("response encoding failed: {0}")]
    Encode(String),
    /// A request that gets no response failed (a Produce with acks=0).
    #[error("a request without a response failed, (error code, count): {0}")]
    FailedUnanswered(String),
}
