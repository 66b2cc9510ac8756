//! The log manager: every partition log across `log.dirs`.
//!
//! It places new partitions on the dir holding the fewest, loads all logs at
//! start (recovering them after an unclean shutdown), writes the recovery
//! point and log start checkpoints, and marks a clean shutdown with
//! `.kafka_cleanshutdown` so the next start can skip recovery.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use crate::checkpoint::OffsetCheckpoint;
use crate::cleaner::{Cleaner, CleanerManager};
use crate::error::Result;
use crate::log::{Log, LogConfig};
use crate::TopicPartition;

pub const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
pub const LOG_START_CHECKPOINT: &str = "log-start-offset-checkpoint";
pub const HIGH_WATERMARK_CHECKPOINT: &str = "replication-offset-checkpoint";
pub const CLEAN_SHUTDOWN_MARKER: &str = ".kafka_cleanshutdown";
const LOCK_FILE: &str = ".lock";
const DELETE_SUFFIX: &str = "-delete";

/// A partition log shared between the request path and background tasks.
pub type SharedLog = Arc<Mutex<Log>>;

#[derive(Debug)]
struct Entry {
    dir: usize,
    log: SharedLog,
}

/// The checkpoints of one dir as found at start.
#[derive(Debug, Default)]
struct StartCheckpoints {
    recovery_points: BTreeMap<TopicPartition, i64>,
    log_starts: BTreeMap<TopicPartition, i64>,
}

#[derive(Debug)]
pub struct LogManager {
    dirs: Vec<PathBuf>,
    /// `.lock` in each dir, held (flock) for the life of the process.
    _locks: Vec<std::fs::File>,
    logs: RwLock<HashMap<TopicPartition, Entry>>,
    /// Whether the previous process shut down cleanly, per dir.
    clean: Vec<bool>,
    checkpoints: Vec<StartCheckpoints>,
    /// Which compacted logs are being cleaned and how far each is clean.
    cleaner: CleanerManager,
}

/// `<topic>-<partition>` back to its parts; topic names may contain `-`.
pub fn parse_partition_dir(name: &str) -> Option<TopicPartition> {
    let (topic, partition) = name.rsplit_once('-')?;
    if topic.is_empty() || partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(TopicPartition::new(topic, partition.parse().ok()?))
}

impl LogManager {
    /// Prepares the dirs (created when missing) and consumes their clean
    /// shutdown markers.
    pub fn new(dirs: Vec<PathBuf>) -> Result<Self> {
        let mut clean = Vec::with_capacity(dirs.len());
        let mut locks = Vec::with_capacity(dirs.len());
        for dir in &dirs {
            std::fs::create_dir_all(dir)?;
            locks.push(lock_dir(dir)?);
            let marker = dir.join(CLEAN_SHUTDOWN_MARKER);
            clean.push(marker.exists());
            if marker.exists() {
                std::fs::remove_file(&marker)?;
            }
            remove_deleted_logs(dir)?;
        }
        let checkpoints = dirs.iter().map(|dir| read_start_checkpoints(dir)).collect();
        let cleaner = CleanerManager::new(&dirs);
        Ok(Self { dirs, _locks: locks, logs: RwLock::new(HashMap::new()), clean, checkpoints, cleaner })
    }

    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Every partition directory found on disk.
    pub fn partitions_on_disk(&self) -> Result<Vec<(TopicPartition, usize)>> {
        let mut found = Vec::new();
        for (i, dir) in self.dirs.iter().enumerate() {
            for entry in std::fs::read_dir(dir)? {
                let entry = entry?;
                if !entry.file_type()?.is_dir() {
                    continue;
                }
                if let Some(tp) = entry.file_name().to_str().and_then(parse_partition_dir) {
                    found.push((tp, i));
                }
            }
        }
        Ok(found)
    }

    /// Opens a partition's existing log (in dir `dir_index`), recovering it
    /// if the last shutdown of that dir was unclean.
    pub fn load(
        &self,
        tp: &TopicPartition,
        dir_index: usize,
        config: LogConfig,
        now_ms: i64,
    ) -> Result<SharedLog> {
        let dir = &self.dirs[dir_index];
        let checkpoints = &self.checkpoints[dir_index];
        let (log, report) = Log::open(
            &dir.join(tp.dir_name()),
            config,
            checkpoints.recovery_points.get(tp).copied().unwrap_or(0),
            checkpoints.log_starts.get(tp).copied().unwrap_or(0),
            self.clean[dir_index],
            now_ms,
        )?;
        if report.recovered_segments > 0 {
            tracing::info!(partition = %tp, recovered = report.recovered_segments,
                truncated_bytes = report.truncated_bytes, "recovered log");
        }
        Ok(self.insert(tp, dir_index, log))
    }

    fn insert(&self, tp: &TopicPartition, dir: usize, log: Log) -> SharedLog {
        let shared = Arc::new(Mutex::new(log));
        let entry = Entry { dir, log: shared.clone() };
        self.logs.write().expect("log map lock").insert(tp.clone(), entry);
        shared
    }

    /// The log of `tp`, created on the dir holding the fewest partitions.
    pub fn get_or_create(&self, tp: &TopicPartition, config: LogConfig, now_ms: i64) -> Result<SharedLog> {
        if let Some(entry) = self.logs.read().expect("log map lock").get(tp) {
            return Ok(entry.log.clone());
        }
        let dir = self.least_loaded_dir();
        let (log, _) = Log::open(&self.dirs[dir].join(tp.dir_name()), config, 0, 0, true, now_ms)?;
        Ok(self.insert(tp, dir, log))
    }

    pub fn get(&self, tp: &TopicPartition) -> Option<SharedLog> {
        self.logs.read().expect("log map lock").get(tp).map(|e| e.log.clone())
    }

    fn least_loaded_dir(&self) -> usize {
        let mut counts = vec![0usize; self.dirs.len()];
        for entry in self.logs.read().expect("log map lock").values() {
            counts[entry.dir] += 1;
        }
        (0..counts.len()).min_by_key(|i| counts[*i]).unwrap_or(0)
    }

    /// Forgets `tp` and removes its files: renamed first, so a crash midway
    /// leaves a `-delete` dir that the next start removes.
    pub fn delete(&self, tp: &TopicPartition) -> Result<()> {
        let Some(entry) = self.logs.write().expect("log map lock").remove(tp) else {
            return Ok(());
        };
        self.forget_cleaning(tp, entry.dir);
        let dir = self.dirs[entry.dir].join(tp.dir_name());
        let doomed =
            self.dirs[entry.dir].join(format!("{}.{}{DELETE_SUFFIX}", tp.dir_name(), unique_suffix()));
        // Under the log lock: a cleaner swap in flight finishes first, and a
        // later one sees the log is gone.
        let _quiesced = entry.log.lock().expect("log lock");
        std::fs::rename(&dir, &doomed)?;
        std::fs::remove_dir_all(&doomed)?;
        Ok(())
    }

    /// Removes a partition dir that no topic owns (deleted while we were down).
    pub fn delete_orphan(&self, tp: &TopicPartition, dir_index: usize) -> Result<()> {
        self.forget_cleaning(tp, dir_index);
        std::fs::remove_dir_all(self.dirs[dir_index].join(tp.dir_name()))?;
        Ok(())
    }

    fn snapshot(&self) -> Vec<(TopicPartition, usize, SharedLog)> {
        let logs = self.logs.read().expect("log map lock");
        logs.iter().map(|(tp, e)| (tp.clone(), e.dir, e.log.clone())).collect()
    }

    /// Writes the recovery point and log start checkpoints of every dir, and
    /// the high watermarks given by the replica layer.
    pub fn checkpoint(&self, high_watermarks: &HashMap<TopicPartition, i64>) -> Result<()> {
        let mut recovery = vec![BTreeMap::new(); self.dirs.len()];
        let mut starts = vec![BTreeMap::new(); self.dirs.len()];
        let mut marks = vec![BTreeMap::new(); self.dirs.len()];
        for (tp, dir, log) in self.snapshot() {
            let log = log.lock().expect("log lock");
            recovery[dir].insert(tp.clone(), log.recovery_point());
            starts[dir].insert(tp.clone(), log.log_start_offset());
            if let Some(hw) = high_watermarks.get(&tp) {
                marks[dir].insert(tp, *hw);
            }
        }
        for (i, dir) in self.dirs.iter().enumerate() {
            OffsetCheckpoint::new(dir.join(RECOVERY_POINT_CHECKPOINT)).write(&recovery[i])?;
            OffsetCheckpoint::new(dir.join(LOG_START_CHECKPOINT)).write(&starts[i])?;
            OffsetCheckpoint::new(dir.join(HIGH_WATERMARK_CHECKPOINT)).write(&marks[i])?;
        }
        Ok(())
    }

    /// Drops a removed log's cleaner checkpoint, so a new log of the same
    /// name starts dirty; a failure to write it only costs a warning.
    fn forget_cleaning(&self, tp: &TopicPartition, dir: usize) {
        if let Err(e) = self.cleaner.forget(tp, dir) {
            tracing::warn!(partition = %tp, "cannot update {}: {e}", crate::cleaner::CHECKPOINT_FILE);
        }
    }

    /// Cleans the dirtiest compacted log if one is due; returns whether one
    /// was. Runs on a cleaner thread; `stop` ends it early. The cleaner asks
    /// whether its log is still registered while holding that log's lock, so
    /// nothing may hold the log map lock while waiting for a log lock.
    pub fn clean_dirtiest(&self, cleaner: &mut Cleaner, stop: &dyn Fn() -> bool) -> Result<bool> {
        let registered =
            |tp: &TopicPartition, log: &SharedLog| self.get(tp).is_some_and(|live| Arc::ptr_eq(&live, log));
        self.cleaner.clean_dirtiest(&self.snapshot(), cleaner, &registered, stop, crate::now_ms())
    }

    /// Flushes logs whose `flush.ms` has passed.
    pub fn flush_due(&self, now_ms: i64) -> Result<()> {
        for (_, _, log) in self.snapshot() {
            let mut log = log.lock().expect("log lock");
            if log.flush_due(now_ms) {
                log.flush(now_ms)?;
            }
        }
        Ok(())
    }

    /// Closes every log, writes final checkpoints and the clean shutdown marker.
    pub fn shutdown(&self, high_watermarks: &HashMap<TopicPartition, i64>, now_ms: i64) -> Result<()> {
        for (_, _, log) in self.snapshot() {
            log.lock().expect("log lock").close(now_ms)?;
        }
        self.checkpoint(high_watermarks)?;
        for dir in &self.dirs {
            crate::checkpoint::write_atomically(&dir.join(CLEAN_SHUTDOWN_MARKER), b"")?;
        }
        Ok(())
    }
}

/// A checkpoint that cannot be read means recovery from offset 0 and the
/// first segment as log start: slower, never wrong.
fn read_start_checkpoints(dir: &Path) -> StartCheckpoints {
    let read = |name: &str| {
        OffsetCheckpoint::new(dir.join(name)).read().unwrap_or_else(|e| {
            tracing::warn!("ignoring {name}: {e}");
            BTreeMap::new()
        })
    };
    StartCheckpoints {
        recovery_points: read(RECOVERY_POINT_CHECKPOINT),
        log_starts: read(LOG_START_CHECKPOINT),
    }
}

/// Takes the dir's `.lock` so two brokers never share a log dir.
fn lock_dir(dir: &Path) -> Result<std::fs::File> {
    let file =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(LOCK_FILE))?;
    file.try_lock().map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            format!("{} is in use by another process", dir.display()),
        )
    })?;
    Ok(file)
}

fn unique_suffix() -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{nanos:x}")
}

fn remove_deleted_logs(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.to_str().is_some_and(|p| p.ends_with(DELETE_SUFFIX)) {
            std::fs::remove_dir_all(&path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_dir_serves_one_broker_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let first = LogManager::new(vec![dir.path().to_owned()]).unwrap();
        assert!(LogManager::new(vec![dir.path().to_owned()]).is_err());
        drop(first);
        assert!(LogManager::new(vec![dir.path().to_owned()]).is_ok());
    }

    #[test]
    fn partition_dir_names_parse_back() {
        assert_eq!(parse_partition_dir("orders-3"), Some(TopicPartition::new("orders", 3)));
        assert_eq!(parse_partition_dir("my-topic-12"), Some(TopicPartition::new("my-topic", 12)));
        assert_eq!(parse_partition_dir("orders"), None);
        assert_eq!(parse_partition_dir("orders-+1"), None);
        assert_eq!(parse_partition_dir("orders-x"), None);
        assert_eq!(parse_partition_dir("-1"), None);
    }
}
