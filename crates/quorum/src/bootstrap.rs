//! The bootstrap checkpoint `kafka-storage.sh format` writes:
//! `__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`, a
//! snapshot of Kafka's layout (`RecordsSnapshotWriter`): one control batch
//! holding the SnapshotHeaderRecord and, for a dynamic quorum (KIP-853,
//! `--standalone` or `--initial-controllers`), the KRaftVersionRecord
//! (kraft.version 1) and the VotersRecord; a batch of the bootstrap metadata
//! records (the feature levels); then a control batch with the
//! SnapshotFooterRecord.
//!
//! Its id (offset 0, epoch 0) names no log position, so the quorum never
//! serves or installs it; [`read_voters`] gives the quorum its bootstrap
//! voter set (`kraft.version` 1) at start, [`read_records`] the controller
//! the records it writes into a new metadata log.

use std::path::{Path, PathBuf};

use bytes::Bytes;

use strom_raft::checkpoint::Checkpoint;
use strom_raft::{Endpoint, OffsetAndEpoch, ReplicaKey, VersionRange, VoterNode, VoterSet};

use crate::disk::{snapshot_file_name, write_atomically, METADATA_PARTITION_DIR};
use crate::QuorumError;

/// One initial voter: its id, its metadata dir's directory id and its
/// controller endpoints as (listener name, host, port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapVoter {
    /// `node.id`.
    pub id: i32,
    /// The `directory.id` of its metadata log dir.
    pub directory_id: [u8; 16],
    /// Its controller listeners.
    pub endpoints: Vec<(String, String, u16)>,
}

/// The checkpoint's bytes in epoch 0: for a dynamic quorum `kraft.version`
/// 1 and the voter set, else `kraft.version` 0; then `records`, the
/// bootstrap metadata records (Kafka's `Formatter`).
pub fn checkpoint_bytes(
    voters: Option<&[BootstrapVoter]>,
    records: Vec<Bytes>,
    timestamp_ms: i64,
) -> Vec<u8> {
    let checkpoint = Checkpoint {
        last_contained_log_timestamp_ms: timestamp_ms,
        kraft_version: i16::from(voters.is_some()),
        voters: voters.map(|voters| VoterSet::new(voters.iter().map(voter_node))),
        records,
    };
    checkpoint.encode(0, timestamp_ms).to_vec()
}

fn voter_node(voter: &BootstrapVoter) -> VoterNode {
    let endpoints = voter
        .endpoints
        .iter()
        .map(|(listener, host, port)| Endpoint {
            listener: listener.clone(),
            host: host.clone(),
            port: *port,
        })
        .collect();
    VoterNode {
        key: ReplicaKey::new(voter.id, Some(uuid::Uuid::from_bytes(voter.directory_id))),
        endpoints,
        kraft_versions: VersionRange { min: 0, max: 1 },
    }
}

/// Writes the checkpoint under `metadata_log_dir` (temp, fsync, rename);
/// returns its path.
pub fn write_checkpoint(
    metadata_log_dir: &Path,
    voters: Option<&[BootstrapVoter]>,
    records: Vec<Bytes>,
) -> Result<PathBuf, QuorumError> {
    let dir = metadata_log_dir.join(METADATA_PARTITION_DIR);
    std::fs::create_dir_all(&dir)
        .map_err(|e| QuorumError::Storage(format!("create {}: {e}", dir.display())))?;
    let name = snapshot_file_name(OffsetAndEpoch::new(0, 0));
    write_atomically(&dir, &name, &checkpoint_bytes(voters, records, strom_storage::now_ms()))?;
    Ok(dir.join(name))
}

/// The bootstrap checkpoint's voter set, when `metadata_log_dir` holds a
/// checkpoint with `kraft.version` 1 (None: a static quorum, or a node
/// formatted with `--no-initial-controllers`).
pub fn read_voters(metadata_log_dir: &Path) -> Result<Option<VoterSet>, QuorumError> {
    let checkpoint = read_checkpoint(metadata_log_dir)?;
    Ok(checkpoint.and_then(|c| c.voters.filter(|_| c.kraft_version >= 1)))
}

/// The bootstrap metadata records (the feature levels `format` chose) of
/// `metadata_log_dir`'s bootstrap checkpoint, if it has one.
pub fn read_records(metadata_log_dir: &Path) -> Result<Option<Vec<Bytes>>, QuorumError> {
    Ok(read_checkpoint(metadata_log_dir)?.map(|checkpoint| checkpoint.records))
}

fn read_checkpoint(metadata_log_dir: &Path) -> Result<Option<Checkpoint>, QuorumError> {
    let path =
        metadata_log_dir.join(METADATA_PARTITION_DIR).join(snapshot_file_name(OffsetAndEpoch::new(0, 0)));
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(QuorumError::Storage(format!("read {}: {e}", path.display()))),
    };
    let checkpoint = Checkpoint::decode(&bytes.into())
        .map_err(|e| QuorumError::Storage(format!("{}: {e}", path.display())))?;
    Ok(Some(checkpoint))
}

#[cfg(test)]
mod tests {
    use bytes::{Buf, Bytes};
    use kafka_protocol::messages::{BrokerId, VotersRecord};
    use kafka_protocol::protocol::Decodable;
    use kafka_protocol::records::RecordBatchDecoder;

    use super::*;

    #[test]
    fn the_checkpoint_holds_header_kraft_version_voters_and_footer_control_records() {
        let voter = BootstrapVoter {
            id: 1,
            directory_id: [7; 16],
            endpoints: vec![("CONTROLLER".into(), "h".into(), 9093)],
        };
        let mut bytes = Bytes::from(checkpoint_bytes(Some(&[voter]), Vec::new(), 5));
        let first = RecordBatchDecoder::decode(&mut bytes).unwrap();
        let footer = RecordBatchDecoder::decode(&mut bytes).unwrap();
        assert!(bytes.is_empty());
        let types: Vec<u8> =
            first.records.iter().chain(&footer.records).map(|r| r.key.as_ref().unwrap()[3]).collect();
        assert_eq!(types, [3, 5, 6, 4]);
        assert!(first.records.iter().all(|r| r.control && r.partition_leader_epoch == 0));
        // The value is the VotersRecord alone, its first field its version.
        let mut value = first.records[2].value.clone().unwrap();
        let voters = VotersRecord::decode(&mut value, 0).unwrap();
        assert!(!value.has_remaining());
        assert_eq!(voters.version, 0);
        assert_eq!(voters.voters[0].voter_id, BrokerId(1));
        assert_eq!(voters.voters[0].endpoints[0].port, 9093);
    }

    #[test]
    fn the_checkpoint_gives_back_its_voter_set() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_voters(dir.path()).unwrap(), None);
        let voter = BootstrapVoter {
            id: 4,
            directory_id: [9; 16],
            endpoints: vec![("CONTROLLER".into(), "h".into(), 9093)],
        };
        write_checkpoint(dir.path(), Some(&[voter]), Vec::new()).unwrap();
        let voters = read_voters(dir.path()).unwrap().unwrap();
        let node = voters.get(4).unwrap();
        assert_eq!(node.key.directory_id, Some(uuid::Uuid::from_bytes([9; 16])));
        assert_eq!(node.endpoint("CONTROLLER").unwrap().port, 9093);
    }

    #[test]
    fn a_static_quorums_checkpoint_holds_only_the_bootstrap_records() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_records(dir.path()).unwrap(), None);
        let records = vec![Bytes::from_static(b"one"), Bytes::from_static(b"two")];
        write_checkpoint(dir.path(), None, records.clone()).unwrap();
        assert_eq!(read_records(dir.path()).unwrap(), Some(records));
        assert_eq!(read_voters(dir.path()).unwrap(), None, "a static quorum's checkpoint names no voters");
    }

    #[test]
    fn a_damaged_checkpoint_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let voter = BootstrapVoter { id: 4, directory_id: [9; 16], endpoints: vec![] };
        let path = write_checkpoint(dir.path(), Some(&[voter]), Vec::new()).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let error = read_voters(dir.path()).unwrap_err().to_string();
        assert!(error.contains("00000000000000000000-0000000000.checkpoint"), "{error}");
        assert!(error.contains("invalid snapshot"), "{error}");
    }
}
