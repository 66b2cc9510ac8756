//! The quorum's disk state in `<metadata.log.dir>/__cluster_metadata-0`,
//! laid out as Kafka lays it out:
//!
//! - the segments of the metadata log (a [`strom_storage::Log`]: recovery
//!   truncates a torn tail, `strom dump-log` reads it), one record batch
//!   per raft batch ([`crate::codec`]);
//! - `quorum-state`, Kafka's JSON election state (data_version 0);
//! - snapshots, `<20-digit end offset>-<10-digit epoch>.checkpoint`, in
//!   Kafka's layout ([`Checkpoint`]), written and served byte for byte as
//!   the core made or fetched them.
//!
//! Every file other than the segments is written to a temporary name,
//! fsync'd and renamed, and the directory fsync'd. The core runs on a
//! [`MemoryLog`] (the metadata log is small) that this module rebuilds at
//! start and mirrors every action into.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use serde_json::{json, Value};
use strom_raft::checkpoint::Checkpoint;
use strom_raft::{Batch, ElectionState, MemoryLog, OffsetAndEpoch, RaftLog};
use strom_storage::producer_state::AppendOrigin;
use strom_storage::{Log, LogConfig};

use crate::codec;
use crate::QuorumError;

/// The metadata partition's directory name.
pub const METADATA_PARTITION_DIR: &str = "__cluster_metadata-0";
/// The election state's file name.
pub const QUORUM_STATE_FILE: &str = "quorum-state";
const SNAPSHOT_SUFFIX: &str = ".checkpoint";
const PART_SUFFIX: &str = ".part";

/// What survived on disk, for the core to start from.
#[derive(Debug)]
pub struct Recovered {
    /// The log, with the latest snapshot installed under it.
    pub log: MemoryLog,
    /// `quorum-state`, if it was ever written.
    pub election: Option<ElectionState>,
}

/// The metadata partition's directory and its open log.
#[derive(Debug, Clone)]
pub struct MetadataDir {
    dir: PathBuf,
    log: Arc<Mutex<Log>>,
}

fn storage_error(what: &str, error: impl std::fmt::Display) -> QuorumError {
    QuorumError::Storage(format!("{what}: {error}"))
}

fn log_config() -> LogConfig {
    // One raft batch may be up to 8 MiB (Kafka's MAX_BATCH_SIZE_BYTES).
    LogConfig { max_message_bytes: 16 * 1024 * 1024, ..LogConfig::default() }
}

impl MetadataDir {
    /// Opens (creating) `<metadata_log_dir>/__cluster_metadata-0`, recovers
    /// the log and reconciles it with the latest snapshot.
    pub fn open(metadata_log_dir: &Path) -> Result<(Self, Recovered), QuorumError> {
        let dir = metadata_log_dir.join(METADATA_PARTITION_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| storage_error("create the metadata dir", e))?;
        let snapshot = latest_snapshot(&dir)?;
        remove_other_snapshots(&dir, snapshot.as_ref().map(|(id, _)| *id))?;
        let start = snapshot.as_ref().map_or(0, |(id, _)| id.offset as i64);
        let log = open_log(&dir, start)?;
        let mut this = Self { dir, log: Arc::new(Mutex::new(log)) };
        let mut memory = MemoryLog::new();
        if let Some((id, content)) = snapshot {
            memory.install_snapshot(id, content);
        }
        this.load_batches(&mut memory)?;
        let election = read_quorum_state(&this.dir.join(QUORUM_STATE_FILE))?;
        Ok((this, Recovered { log: memory, election }))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends the disk batches that continue `memory`; whatever does not
    /// (a tail past a crash during a snapshot install) is cut off.
    fn load_batches(&mut self, memory: &mut MemoryLog) -> Result<(), QuorumError> {
        let (start, end) = {
            let log = self.lock();
            (log.log_start_offset(), log.log_end_offset())
        };
        if start as u64 > memory.end_offset() || end < memory.end_offset() as i64 {
            // The snapshot is past everything the log holds: start over at it.
            return self.restart_log_at(memory.end_offset());
        }
        let mut offset = memory.end_offset() as i64;
        while offset < end {
            let bytes = {
                let log = self.lock();
                let slice =
                    log.read(offset, 1 << 20, end, true).map_err(|e| storage_error("read the log", e))?;
                match slice {
                    Some(slice) => slice.read().map_err(|e| storage_error("read the log", e))?,
                    None => break,
                }
            };
            for batch in codec::decode_batches(bytes).map_err(|e| storage_error("decode the log", e))? {
                let continues =
                    batch.base_offset == memory.end_offset() && batch.epoch >= memory.last_epoch();
                if !continues {
                    return self.truncate(memory.end_offset());
                }
                offset = batch.next_offset() as i64;
                memory.append(batch);
            }
        }
        if (end as u64) > memory.end_offset() {
            self.truncate(memory.end_offset())?;
        }
        Ok(())
    }

    /// Writes batches at the end of the log (not yet durable).
    pub fn append(&self, batches: &[Batch]) -> Result<(), QuorumError> {
        let mut log = self.lock();
        let now = strom_storage::now_ms();
        for batch in batches {
            debug_assert_eq!(batch.base_offset as i64, log.log_end_offset());
            let bytes = codec::encode_batch(batch, now);
            log.append_as(&bytes, batch.epoch, now, AppendOrigin::Raft)
                .map_err(|e| storage_error("append to the metadata log", e))?;
        }
        Ok(())
    }

    /// When the batch holding `offset` was appended: its max timestamp
    /// (None when the log no longer holds it).
    pub fn append_time_ms(&self, offset: u64) -> Option<i64> {
        /// Base offset, length, epoch, magic, CRC, attributes, last offset
        /// delta and base timestamp come before it in a v2 batch header.
        const MAX_TIMESTAMP_AT: usize = 35;
        let log = self.lock();
        let slice = log.read(offset as i64, 1, log.log_end_offset(), true).ok()??;
        let bytes = slice.read().ok()?;
        let base_offset = i64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
        let max_timestamp = bytes.get(MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8)?;
        (base_offset <= offset as i64).then(|| i64::from_be_bytes(max_timestamp.try_into().expect("8 bytes")))
    }

    /// Removes the log from `offset` on.
    pub fn truncate(&self, offset: u64) -> Result<(), QuorumError> {
        self.lock().truncate_to(offset as i64).map_err(|e| storage_error("truncate the metadata log", e))?;
        Ok(())
    }

    /// Makes every write so far durable (blocks: call off the runtime).
    pub fn flush(&self) -> Result<(), QuorumError> {
        self.lock().flush(strom_storage::now_ms()).map_err(|e| storage_error("flush the metadata log", e))
    }

    /// Moves the log start up to a durable snapshot's end offset and drops
    /// the segments wholly below it.
    pub fn delete_before(&self, offset: u64, high_watermark: u64) -> Result<(), QuorumError> {
        let mut log = self.lock();
        log.advance_log_start_offset(offset as i64).map_err(|e| storage_error("move the log start", e))?;
        log.delete_retained_segments(high_watermark as i64, strom_storage::now_ms())
            .map_err(|e| storage_error("delete old segments", e))?;
        Ok(())
    }

    /// Writes `quorum-state` durably (temp, fsync, rename).
    pub fn write_quorum_state(
        &self,
        state: ElectionState,
        cluster_id: &str,
        voters: &[i32],
        applied_offset: u64,
    ) -> Result<(), QuorumError> {
        let voters: Vec<Value> = voters.iter().map(|id| json!({ "voterId": id })).collect();
        let body = json!({
            "clusterId": cluster_id,
            "leaderId": state.leader_id.unwrap_or(-1),
            "leaderEpoch": state.epoch,
            "votedId": state.voted_id.unwrap_or(-1),
            "appliedOffset": applied_offset,
            "currentVoters": voters,
            "data_version": 0,
        });
        write_atomically(&self.dir, QUORUM_STATE_FILE, body.to_string().as_bytes())
    }

    /// Writes a snapshot file durably; older ones go.
    pub fn write_snapshot(&self, id: OffsetAndEpoch, content: &[u8]) -> Result<(), QuorumError> {
        write_atomically(&self.dir, &snapshot_file_name(id), content)?;
        remove_other_snapshots(&self.dir, Some(id))
    }

    /// Installs a snapshot fetched from the leader: the snapshot first
    /// (durable), then the log emptied and restarted at its end offset. A
    /// crash in between is repaired at the next [`Self::open`].
    pub fn install_snapshot(&mut self, id: OffsetAndEpoch, content: &[u8]) -> Result<(), QuorumError> {
        self.write_snapshot(id, content)?;
        self.restart_log_at(id.offset)
    }

    fn restart_log_at(&mut self, offset: u64) -> Result<(), QuorumError> {
        let mut log = self.lock();
        for entry in std::fs::read_dir(&self.dir).map_err(|e| storage_error("list the metadata dir", e))? {
            let entry = entry.map_err(|e| storage_error("list the metadata dir", e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name != QUORUM_STATE_FILE && !name.ends_with(SNAPSHOT_SUFFIX) {
                std::fs::remove_file(entry.path()).map_err(|e| storage_error("empty the metadata log", e))?;
            }
        }
        *log = open_log(&self.dir, offset as i64)?;
        Ok(())
    }
}

fn open_log(dir: &Path, start_offset: i64) -> Result<Log, QuorumError> {
    let now = strom_storage::now_ms();
    // Always recover from the start: the metadata log is small.
    let (log, _) = Log::open(dir, log_config(), 0, start_offset, false, now)
        .map_err(|e| storage_error("open the metadata log", e))?;
    Ok(log)
}

/// `<20-digit end offset>-<10-digit epoch>.checkpoint`.
pub fn snapshot_file_name(id: OffsetAndEpoch) -> String {
    format!("{:020}-{:010}{SNAPSHOT_SUFFIX}", id.offset, id.epoch)
}

fn parse_snapshot_name(name: &str) -> Option<OffsetAndEpoch> {
    let stem = name.strip_suffix(SNAPSHOT_SUFFIX)?;
    let (offset, epoch) = stem.split_once('-')?;
    if offset.len() != 20 || epoch.len() != 10 {
        return None;
    }
    Some(OffsetAndEpoch::new(offset.parse().ok()?, epoch.parse().ok()?))
}

fn snapshot_ids(dir: &Path) -> Result<Vec<OffsetAndEpoch>, QuorumError> {
    let mut ids = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| storage_error("list the metadata dir", e))? {
        let entry = entry.map_err(|e| storage_error("list the metadata dir", e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(PART_SUFFIX) {
            // A write a crash interrupted.
            let _ = std::fs::remove_file(entry.path());
        } else if let Some(id) = parse_snapshot_name(&name).filter(|id| id.offset > 0) {
            // 0-0 is the bootstrap checkpoint (`bootstrap::read_voters`), no state.
            ids.push(id);
        }
    }
    ids.sort_by_key(|id| (id.offset, id.epoch));
    Ok(ids)
}

/// The latest snapshot, checked whole: a damaged one stops the start
/// (as Kafka's reader does) rather than load garbage as state.
fn latest_snapshot(dir: &Path) -> Result<Option<(OffsetAndEpoch, Bytes)>, QuorumError> {
    let Some(id) = snapshot_ids(dir)?.pop() else { return Ok(None) };
    let path = dir.join(snapshot_file_name(id));
    let content = Bytes::from(std::fs::read(&path).map_err(|e| storage_error("read a snapshot", e))?);
    Checkpoint::decode(&content).map_err(|e| storage_error(&path.display().to_string(), e))?;
    Ok(Some((id, content)))
}

fn remove_other_snapshots(dir: &Path, keep: Option<OffsetAndEpoch>) -> Result<(), QuorumError> {
    for id in snapshot_ids(dir)? {
        if Some(id) != keep {
            std::fs::remove_file(dir.join(snapshot_file_name(id)))
                .map_err(|e| storage_error("remove an old snapshot", e))?;
        }
    }
    Ok(())
}

/// Writes `name` in `dir` by temp file, fsync, rename, fsync of the dir.
pub(crate) fn write_atomically(dir: &Path, name: &str, content: &[u8]) -> Result<(), QuorumError> {
    use std::io::Write;
    let temp = dir.join(format!("{name}{PART_SUFFIX}"));
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(content)?;
        strom_storage::fsync::sync_all(&file)?;
        std::fs::rename(&temp, dir.join(name))?;
        strom_storage::fsync::sync_dir(dir)
    };
    write().map_err(|e| storage_error(&format!("write {name}"), e))
}

fn read_quorum_state(path: &Path) -> Result<Option<ElectionState>, QuorumError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(storage_error("read quorum-state", e)),
    };
    let value: Value = serde_json::from_str(&text).map_err(|e| storage_error("parse quorum-state", e))?;
    let field = |name: &str| value.get(name).and_then(Value::as_i64).and_then(|v| i32::try_from(v).ok());
    let id = |name: &str| field(name).filter(|id| *id >= 0);
    let epoch = field("leaderEpoch").ok_or_else(|| storage_error("parse quorum-state", "no leaderEpoch"))?;
    Ok(Some(ElectionState { epoch, leader_id: id("leaderId"), voted_id: id("votedId") }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use strom_raft::Records;

    fn data(base_offset: u64, epoch: i32, values: &[&'static str]) -> Batch {
        let records = Records::Data(values.iter().map(|v| Bytes::from_static(v.as_bytes())).collect());
        Batch { base_offset, epoch, records }
    }

    #[test]
    fn batches_and_quorum_state_survive_a_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, recovered) = MetadataDir::open(tmp.path()).unwrap();
        assert_eq!((recovered.log.end_offset(), recovered.election), (0, None));
        let change = Batch {
            base_offset: 0,
            epoch: 2,
            records: Records::LeaderChange { leader_id: 1, voters: vec![1] },
        };
        let batches = vec![change, data(1, 2, &["a", "b"])];
        dir.append(&batches).unwrap();
        dir.flush().unwrap();
        let state = ElectionState { epoch: 2, leader_id: Some(1), voted_id: Some(1) };
        dir.write_quorum_state(state, "cluster", &[1], 0).unwrap();
        drop(dir);
        let (_, recovered) = MetadataDir::open(tmp.path()).unwrap();
        assert_eq!(recovered.log.batches(), &batches[..]);
        assert_eq!(recovered.election, Some(state));
    }

    fn checkpoint(epoch: i32) -> Bytes {
        let checkpoint = Checkpoint {
            last_contained_log_timestamp_ms: 1,
            kraft_version: 0,
            voters: None,
            records: vec![Bytes::from_static(b"state")],
        };
        checkpoint.encode(epoch, 2)
    }

    #[test]
    fn a_batch_append_time_is_read_back_from_the_log() {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, _) = MetadataDir::open(tmp.path()).unwrap();
        let before = strom_storage::now_ms();
        dir.append(&[data(0, 1, &["a", "b"]), data(2, 1, &["c"])]).unwrap();
        let after = strom_storage::now_ms();
        for offset in 0..3 {
            let appended = dir.append_time_ms(offset).unwrap();
            assert!((before..=after).contains(&appended), "offset {offset}: {appended}");
        }
        assert_eq!(dir.append_time_ms(3), None, "past the end");
    }

    #[test]
    fn an_installed_snapshot_replaces_the_log() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut dir, _) = MetadataDir::open(tmp.path()).unwrap();
        dir.append(&[data(0, 1, &["a", "b", "c"])]).unwrap();
        let id = OffsetAndEpoch::new(10, 3);
        dir.install_snapshot(id, &checkpoint(3)).unwrap();
        dir.append(&[data(10, 3, &["d"])]).unwrap();
        dir.flush().unwrap();
        drop(dir);
        let (dir, recovered) = MetadataDir::open(tmp.path()).unwrap();
        assert_eq!(recovered.log.snapshot().map(|s| (s.id, s.content.clone())), Some((id, checkpoint(3))));
        assert_eq!(recovered.log.batches(), &[data(10, 3, &["d"])]);
        let file = dir.path().join("00000000000000000010-0000000003.checkpoint");
        assert_eq!(std::fs::read(file).unwrap(), checkpoint(3), "the file is the checkpoint, byte for byte");
    }

    #[test]
    fn a_damaged_snapshot_stops_the_start_with_its_name() {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, _) = MetadataDir::open(tmp.path()).unwrap();
        let id = OffsetAndEpoch::new(10, 3);
        dir.write_snapshot(id, &checkpoint(3)).unwrap();
        let file = dir.path().join(snapshot_file_name(id));
        drop(dir);
        let whole = std::fs::read(&file).unwrap();
        let mut flipped = whole.clone();
        flipped[whole.len() / 2] ^= 0x10;
        for damaged in [flipped, whole[..whole.len() - 3].to_vec()] {
            std::fs::write(&file, damaged).unwrap();
            let error = MetadataDir::open(tmp.path()).unwrap_err().to_string();
            assert!(error.contains("00000000000000000010-0000000003.checkpoint"), "{error}");
            assert!(error.contains("invalid snapshot"), "{error}");
        }
    }

    #[test]
    fn a_snapshot_write_a_crash_interrupted_is_never_loaded() {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, _) = MetadataDir::open(tmp.path()).unwrap();
        let part = dir.path().join("00000000000000000010-0000000003.checkpoint.part");
        std::fs::write(&part, &checkpoint(3)[..20]).unwrap();
        drop(dir);
        let (_, recovered) = MetadataDir::open(tmp.path()).unwrap();
        assert_eq!(recovered.log.snapshot(), None);
        assert!(!part.exists());
    }
}
