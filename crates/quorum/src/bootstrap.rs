//! The bootstrap checkpoint `kafka-storage.sh format` writes for a dynamic
//! quorum (KIP-853, `--standalone` or `--initial-controllers`):
//! `__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`, a
//! snapshot of Kafka's layout (`RecordsSnapshotWriter`): one control batch
//! holding the SnapshotHeaderRecord, the KRaftVersionRecord (kraft.version 1)
//! and the VotersRecord, then a control batch with the SnapshotFooterRecord.
//!
//! Its id (offset 0, epoch 0) names no log position, so the quorum never
//! serves or installs it; [`read_voters`] gives the quorum its bootstrap
//! voter set (`kraft.version` 1) at start.

use std::path::{Path, PathBuf};

use kafka_protocol::messages::voters_record::{Endpoint, KRaftVersionFeature, Voter};
use kafka_protocol::messages::{
    BrokerId, KRaftVersionRecord, SnapshotFooterRecord, SnapshotHeaderRecord, VotersRecord,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use kafka_protocol::records::RecordBatchDecoder;
use strom_raft::{OffsetAndEpoch, VoterSet};

use crate::codec::{control_value, encode_control_batch};
use crate::disk::{snapshot_file_name, write_atomically, METADATA_PARTITION_DIR};
use crate::QuorumError;

/// `ControlRecordType` values of the snapshot's control records.
const SNAPSHOT_HEADER: i16 = 3;
const SNAPSHOT_FOOTER: i16 = 4;
const KRAFT_VERSION: i16 = 5;
const KRAFT_VOTERS: i16 = 6;

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

/// The checkpoint's bytes.
pub fn checkpoint_bytes(voters: &[BootstrapVoter], timestamp_ms: i64) -> Vec<u8> {
    let header =
        SnapshotHeaderRecord::default().with_version(0).with_last_contained_log_timestamp(timestamp_ms);
    let kraft_version = KRaftVersionRecord::default().with_version(0).with_k_raft_version(1);
    let voters =
        VotersRecord::default().with_version(0).with_voters(voters.iter().map(voter_entry).collect());
    let control = [
        (SNAPSHOT_HEADER, control_value(&header, 0)),
        (KRAFT_VERSION, control_value(&kraft_version, 0)),
        (KRAFT_VOTERS, control_value(&voters, 0)),
    ];
    let footer = [(SNAPSHOT_FOOTER, control_value(&SnapshotFooterRecord::default().with_version(0), 0))];
    let mut bytes = encode_control_batch(0, 0, &control, timestamp_ms).to_vec();
    bytes.extend_from_slice(&encode_control_batch(control.len() as i64, 0, &footer, timestamp_ms));
    bytes
}

fn voter_entry(voter: &BootstrapVoter) -> Voter {
    let endpoints = voter
        .endpoints
        .iter()
        .map(|(name, host, port)| {
            Endpoint::default()
                .with_name(StrBytes::from_string(name.clone()))
                .with_host(StrBytes::from_string(host.clone()))
                .with_port(*port)
        })
        .collect();
    Voter::default()
        .with_voter_id(BrokerId(voter.id))
        .with_voter_directory_id(uuid::Uuid::from_bytes(voter.directory_id))
        .with_endpoints(endpoints)
        .with_k_raft_version_feature(
            KRaftVersionFeature::default().with_min_supported_version(0).with_max_supported_version(1),
        )
}

/// Writes the checkpoint under `metadata_log_dir` (temp, fsync, rename);
/// returns its path.
pub fn write_checkpoint(metadata_log_dir: &Path, voters: &[BootstrapVoter]) -> Result<PathBuf, QuorumError> {
    let dir = metadata_log_dir.join(METADATA_PARTITION_DIR);
    std::fs::create_dir_all(&dir)
        .map_err(|e| QuorumError::Storage(format!("create {}: {e}", dir.display())))?;
    let name = snapshot_file_name(OffsetAndEpoch::new(0, 0));
    write_atomically(&dir, &name, &checkpoint_bytes(voters, strom_storage::now_ms()))?;
    Ok(dir.join(name))
}

/// The bootstrap checkpoint's voter set, when `metadata_log_dir` holds a
/// checkpoint with `kraft.version` 1 (None: a static quorum, or a node
/// formatted with `--no-initial-controllers`).
pub fn read_voters(metadata_log_dir: &Path) -> Result<Option<VoterSet>, QuorumError> {
    let path =
        metadata_log_dir.join(METADATA_PARTITION_DIR).join(snapshot_file_name(OffsetAndEpoch::new(0, 0)));
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(QuorumError::Storage(format!("read {}: {e}", path.display()))),
    };
    let bad = |why: String| QuorumError::Storage(format!("{}: {why}", path.display()));
    let mut bytes = bytes::Bytes::from(bytes);
    let (mut kraft_version, mut voters) = (0, None);
    while !bytes.is_empty() {
        let set = RecordBatchDecoder::decode(&mut bytes).map_err(|e| bad(e.to_string()))?;
        for record in set.records.iter().filter(|r| r.control) {
            let control_type =
                record.key.as_ref().filter(|k| k.len() >= 4).map(|k| i16::from_be_bytes([k[2], k[3]]));
            let mut value = record.value.clone().unwrap_or_default();
            if value.len() < 2 {
                continue;
            }
            let version = i16::from_be_bytes([value[0], value[1]]);
            bytes::Buf::advance(&mut value, 2);
            match control_type {
                Some(KRAFT_VERSION) => {
                    kraft_version = KRaftVersionRecord::decode(&mut value, version)
                        .map_err(|e| bad(e.to_string()))?
                        .k_raft_version;
                }
                Some(KRAFT_VOTERS) => {
                    let record = VotersRecord::decode(&mut value, version).map_err(|e| bad(e.to_string()))?;
                    voters = Some(
                        strom_raft::wire::voter_set_from_record(&record).map_err(|e| bad(e.to_string()))?,
                    );
                }
                _ => {}
            }
        }
    }
    Ok(voters.filter(|_| kraft_version >= 1))
}

#[cfg(test)]
mod tests {
    use bytes::{Buf, Bytes};
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
        let mut bytes = Bytes::from(checkpoint_bytes(&[voter], 5));
        let first = RecordBatchDecoder::decode(&mut bytes).unwrap();
        let footer = RecordBatchDecoder::decode(&mut bytes).unwrap();
        assert!(bytes.is_empty());
        let types: Vec<u8> =
            first.records.iter().chain(&footer.records).map(|r| r.key.as_ref().unwrap()[3]).collect();
        assert_eq!(types, [3, 5, 6, 4]);
        assert!(first.records.iter().all(|r| r.control && r.partition_leader_epoch == 0));
        let mut value = first.records[2].value.clone().unwrap();
        let version = value.get_i16();
        let voters = VotersRecord::decode(&mut value, version).unwrap();
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
        write_checkpoint(dir.path(), &[voter]).unwrap();
        let voters = read_voters(dir.path()).unwrap().unwrap();
        let node = voters.get(4).unwrap();
        assert_eq!(node.key.directory_id, Some(uuid::Uuid::from_bytes([9; 16])));
        assert_eq!(node.endpoint("CONTROLLER").unwrap().port, 9093);
    }
}
