//! The log manager: every partition log across `log.dirs`.
//!
//! It places new partitions on the online dir holding the fewest, loads all
//! logs at start (recovering them after an unclean shutdown), writes the
//! recovery point and log start checkpoints, and marks a clean shutdown with
//! `.kafka_cleanshutdown` so the next start can skip recovery.
//!
//! A dir whose disk fails (an I/O error writing, flushing or checkpointing)
//! goes offline, as Kafka's `LogDirFailureChannel` takes it: its partitions
//! serve nothing more until a restart, its checkpoints and clean shutdown
//! marker are no longer written (so the next start recovers it), and the
//! other dirs carry on.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::checkpoint::OffsetCheckpoint;
use crate::cleaner::{Cleaner, CleanerManager};
use crate::error::{Context, Result, StorageError};
use crate::log::{LoadReport, Log, LogConfig};
use crate::TopicPartition;

pub const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
pub const LOG_START_CHECKPOINT: &str = "log-start-offset-checkpoint";
pub const HIGH_WATERMARK_CHECKPOINT: &str = "replication-offset-checkpoint";
pub const CLEAN_SHUTDOWN_MARKER: &str = ".kafka_cleanshutdown";
const LOCK_FILE: &str = ".lock";
/// Kafka 4's `num.recovery.threads.per.data.dir`.
pub const DEFAULT_THREADS_PER_DIR: usize = 2;
const DELETE_SUFFIX: &str = "-delete";

/// A partition log shared between the request path and background tasks.
pub type SharedLog = Arc<Mutex<Log>>;

/// Locks a partition log for use. A lock poisoned by a panic (perhaps in
/// the middle of an append) means the log's memory may disagree with its
/// files: the log is offline, answering [`StorageError::LogOffline`], is
/// left out of checkpoints and keeps its dir from being marked clean, so a
/// restart recovers it from disk. It is reported once.
pub fn lock_log(log: &Mutex<Log>) -> Result<MutexGuard<'_, Log>> {
    log.lock().map_err(|poisoned| {
        let mut log = poisoned.into_inner();
        if log.take_offline() {
            tracing::error!(dir = %log.dir().display(), "a panic interrupted work on this log; it is offline until a restart recovers it");
        }
        StorageError::LogOffline(log.dir().display().to_string())
    })
}

/// Locks a partition log only to report figures (size, offsets): reading
/// them from a log a panic took offline is safe, at worst stale.
pub fn peek_log(log: &Mutex<Log>) -> MutexGuard<'_, Log> {
    log.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug)]
struct Entry {
    dir: usize,
    log: SharedLog,
}

/// The checkpoints of one dir as found at start.
#[derive(Debug, Default)]
struct StartCheckpoints {
    recovery_points: HashMap<TopicPartition, i64>,
    log_starts: HashMap<TopicPartition, i64>,
}

/// One entry of `log.dirs` and whether it still serves.
#[derive(Debug)]
pub struct LogDir {
    path: PathBuf,
    offline: AtomicBool,
    /// Logs held here, for placing new ones without counting them all.
    partitions: AtomicUsize,
}

impl LogDir {
    pub(crate) fn new(path: PathBuf) -> Self {
        Self { path, offline: AtomicBool::new(false), partitions: AtomicUsize::new(0) }
    }

    /// How many partition logs the dir holds.
    pub fn partition_count(&self) -> usize {
        self.partitions.load(Ordering::Relaxed)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn is_online(&self) -> bool {
        !self.offline.load(Ordering::Acquire)
    }

    /// Fails with [`StorageError::LogDirOffline`] once the dir has failed.
    pub fn check(&self) -> Result<()> {
        if self.is_online() {
            Ok(())
        } else {
            Err(StorageError::LogDirOffline(self.path.display().to_string()))
        }
    }

    /// Passes `result` through, taking the dir offline first if it failed
    /// because the disk did.
    pub fn guard<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(e) = &result {
            if e.is_disk_failure() {
                self.fail(e);
            }
        }
        result
    }

    /// Takes the dir offline until the broker restarts.
    pub fn fail(&self, reason: &dyn Display) {
        if !self.offline.swap(true, Ordering::AcqRel) {
            tracing::error!(dir = %self.path.display(), "log dir failed; its partitions are offline: {reason}");
        }
    }
}

#[derive(Debug)]
pub struct LogManager {
    dirs: Vec<Arc<LogDir>>,
    /// `.lock` in each dir, held (flock) for the life of the process.
    _locks: Vec<std::fs::File>,
    logs: RwLock<HashMap<TopicPartition, Entry>>,
    /// Whether the previous process shut down cleanly, per dir.
    clean: Vec<bool>,
    checkpoints: Vec<StartCheckpoints>,
    /// Which compacted logs are being cleaned and how far each is clean.
    cleaner: CleanerManager,
    /// Threads per dir loading logs at start and closing them at shutdown
    /// (`num.recovery.threads.per.data.dir`).
    threads_per_dir: usize,
    /// The broker epoch a clean shutdown records: the one every marker of
    /// the previous process held (-1 when any dir was unclean) until the
    /// broker registers, then its own.
    broker_epoch: AtomicI64,
}

/// `<topic>-<partition>` back to its parts; topic names may contain `-`.
pub fn parse_partition_dir(name: &str) -> Option<TopicPartition> {
    let (topic, partition) = name.rsplit_once('-')?;
    if topic.is_empty() || partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(TopicPartition::new(topic, partition.parse().ok()?))
}

/// What recovery did across every log at start, logged as one line: after
/// an unclean shutdown of many partitions, a line each would bury the rest.
#[derive(Debug, Default)]
struct RecoveryTotals {
    partitions: usize,
    segments: usize,
    truncated_bytes: u64,
    truncated_partitions: usize,
}

impl RecoveryTotals {
    fn add(&mut self, report: &LoadReport) {
        if report.recovered_segments > 0 {
            self.partitions += 1;
            self.segments += report.recovered_segments;
        }
        if report.truncated_bytes > 0 {
            self.truncated_partitions += 1;
            self.truncated_bytes += report.truncated_bytes;
        }
    }

    fn log_summary(&self) {
        if self.partitions > 0 {
            tracing::warn!(
                partitions = self.partitions,
                segments = self.segments,
                truncated_partitions = self.truncated_partitions,
                truncated_bytes = self.truncated_bytes,
                "recovered logs after an unclean shutdown"
            );
        }
    }
}

impl LogManager {
    /// Prepares the dirs (created when missing) and consumes their clean
    /// shutdown markers.
    pub fn new(dirs: Vec<PathBuf>) -> Result<Self> {
        let mut clean = Vec::with_capacity(dirs.len());
        let mut locks = Vec::with_capacity(dirs.len());
        let mut epochs = Vec::with_capacity(dirs.len());
        for dir in &dirs {
            std::fs::create_dir_all(dir).at("create log dir", dir)?;
            locks.push(lock_dir(dir)?);
            let marker = dir.join(CLEAN_SHUTDOWN_MARKER);
            clean.push(marker.exists());
            if marker.exists() {
                epochs.push(std::fs::read_to_string(&marker).ok().and_then(|s| marker_broker_epoch(&s)));
                std::fs::remove_file(&marker).at("remove", &marker)?;
            } else {
                epochs.push(None);
            }
            remove_deleted_logs(dir).at("remove deleted logs in", dir)?;
        }
        let checkpoints = dirs.iter().map(|dir| read_start_checkpoints(dir)).collect();
        let dirs: Vec<Arc<LogDir>> = dirs.into_iter().map(|dir| Arc::new(LogDir::new(dir))).collect();
        let cleaner = CleanerManager::new(&dirs);
        let logs = RwLock::new(HashMap::new());
        let threads_per_dir = DEFAULT_THREADS_PER_DIR;
        let agreed = epochs.first().copied().flatten().filter(|e| epochs.iter().all(|o| *o == Some(*e)));
        let broker_epoch = AtomicI64::new(agreed.unwrap_or(-1));
        Ok(Self { dirs, _locks: locks, logs, clean, checkpoints, cleaner, threads_per_dir, broker_epoch })
    }

    /// The broker epoch the next clean shutdown records; before the broker
    /// registers, the epoch its previous incarnation shut down cleanly at
    /// (Kafka's `PreviousBrokerEpoch`), -1 when it did not.
    pub fn broker_epoch(&self) -> i64 {
        self.broker_epoch.load(Ordering::Acquire)
    }

    /// Records the broker epoch the controller registered this broker at.
    pub fn set_broker_epoch(&self, epoch: i64) {
        self.broker_epoch.store(epoch, Ordering::Release);
    }

    /// Sets `num.recovery.threads.per.data.dir`.
    pub fn with_threads_per_dir(mut self, threads: usize) -> Self {
        self.threads_per_dir = threads.max(1);
        self
    }

    /// The dirs of `log.dirs`, in configuration order.
    pub fn dirs(&self) -> &[Arc<LogDir>] {
        &self.dirs
    }

    /// Every partition directory found on disk.
    pub fn partitions_on_disk(&self) -> Result<Vec<(TopicPartition, usize)>> {
        let mut found = Vec::new();
        for (i, dir) in self.dirs.iter().enumerate() {
            for entry in std::fs::read_dir(dir.path()).at("list log dir", dir.path())? {
                let entry = entry.at("list log dir", dir.path())?;
                if !entry.file_type().at("inspect", &entry.path())?.is_dir() {
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
        self.load_reporting(tp, dir_index, config, now_ms).map(|(log, _)| log)
    }

    /// [`Self::load`], with what recovery did.
    fn load_reporting(
        &self,
        tp: &TopicPartition,
        dir_index: usize,
        config: LogConfig,
        now_ms: i64,
    ) -> Result<(SharedLog, LoadReport)> {
        let path = self.dirs[dir_index].path().join(tp.dir_name());
        let checkpoints = &self.checkpoints[dir_index];
        let (log, report) = Log::open(
            &path,
            config,
            checkpoints.recovery_points.get(tp).copied().unwrap_or(0),
            checkpoints.log_starts.get(tp).copied().unwrap_or(0),
            self.clean[dir_index],
            now_ms,
        )
        .at("load log", &path)?;
        if report.recovered_segments > 0 {
            tracing::debug!(partition = %tp, recovered = report.recovered_segments,
                truncated_bytes = report.truncated_bytes, "recovered log");
        }
        Ok((self.insert(tp, dir_index, log), report))
    }

    /// Loads the logs of `partitions` (each with its dir and config), each
    /// dir's on its own threads; the first failure is returned once every
    /// thread has stopped.
    pub fn load_all(&self, partitions: Vec<(TopicPartition, usize, LogConfig)>, now_ms: i64) -> Result<()> {
        let mut by_dir: Vec<Vec<(TopicPartition, LogConfig)>> =
            self.dirs.iter().map(|_| Vec::new()).collect();
        for (tp, dir, config) in partitions {
            by_dir[dir].push((tp, config));
        }
        let totals = Mutex::new(RecoveryTotals::default());
        self.in_parallel_per_dir(by_dir, |dir, (tp, config)| {
            let (_, report) = self.load_reporting(&tp, dir, config, now_ms)?;
            totals.lock().expect("recovery totals lock").add(&report);
            Ok(())
        })?;
        totals.into_inner().expect("recovery totals lock").log_summary();
        Ok(())
    }

    /// Runs `work` on every job, `threads_per_dir` threads for each dir's
    /// jobs, as Kafka spreads recovery. A failing thread stops taking jobs.
    fn in_parallel_per_dir<T: Send>(
        &self,
        jobs: Vec<Vec<T>>,
        work: impl Fn(usize, T) -> Result<()> + Sync,
    ) -> Result<()> {
        let sizes: Vec<usize> = jobs.iter().map(Vec::len).collect();
        let queues: Vec<Mutex<std::vec::IntoIter<T>>> =
            jobs.into_iter().map(|j| Mutex::new(j.into_iter())).collect();
        let first_error = Mutex::new(None);
        let worker = |dir: usize| loop {
            let Some(job) = queues[dir].lock().expect("job queue lock").next() else { return };
            if let Err(e) = work(dir, job) {
                first_error.lock().expect("error lock").get_or_insert(e);
                return;
            }
        };
        std::thread::scope(|scope| {
            for (dir, size) in sizes.into_iter().enumerate() {
                for _ in 0..self.threads_per_dir.min(size) {
                    scope.spawn(move || worker(dir));
                }
            }
        });
        first_error.into_inner().expect("error lock").map_or(Ok(()), Err)
    }

    /// The map of logs; changed one insert or removal at a time, so usable
    /// through a poisoning.
    fn log_map(&self) -> RwLockReadGuard<'_, HashMap<TopicPartition, Entry>> {
        self.logs.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn log_map_mut(&self) -> RwLockWriteGuard<'_, HashMap<TopicPartition, Entry>> {
        self.logs.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn insert(&self, tp: &TopicPartition, dir: usize, log: Log) -> SharedLog {
        let shared = Arc::new(Mutex::new(log));
        let entry = Entry { dir, log: shared.clone() };
        let replaced = self.log_map_mut().insert(tp.clone(), entry);
        self.dirs[dir].partitions.fetch_add(1, Ordering::Relaxed);
        if let Some(old) = replaced {
            self.dirs[old.dir].partitions.fetch_sub(1, Ordering::Relaxed);
        }
        shared
    }

    /// The log of `tp`, created on the online dir holding the fewest
    /// partitions. A dir that fails the creation goes offline and the next
    /// one is tried.
    pub fn get_or_create(&self, tp: &TopicPartition, config: LogConfig, now_ms: i64) -> Result<SharedLog> {
        if let Some(log) = self.get(tp) {
            return Ok(log);
        }
        let mut failure = None;
        for _ in 0..self.dirs.len() {
            let Some(dir) = self.least_loaded_dir() else { break };
            let path = self.dirs[dir].path().join(tp.dir_name());
            match self.dirs[dir]
                .guard(Log::open(&path, config.clone(), 0, 0, true, now_ms).at("create log", &path))
            {
                Ok((log, _)) => return Ok(self.insert(tp, dir, log)),
                Err(e) if e.is_disk_failure() => failure = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(failure.unwrap_or_else(|| StorageError::LogDirOffline("every log dir".into())))
    }

    pub fn get(&self, tp: &TopicPartition) -> Option<SharedLog> {
        self.log_map().get(tp).map(|e| e.log.clone())
    }

    /// The dir holding `tp`'s log.
    pub fn dir_of(&self, tp: &TopicPartition) -> Option<Arc<LogDir>> {
        let logs = self.log_map();
        logs.get(tp).map(|e| self.dirs[e.dir].clone())
    }

    /// The online dir holding the fewest partitions; the first such in
    /// `log.dirs` order on a tie, as Kafka picks.
    fn least_loaded_dir(&self) -> Option<usize> {
        let online = (0..self.dirs.len()).filter(|i| self.dirs[*i].is_online());
        online.min_by_key(|i| self.dirs[*i].partition_count())
    }

    /// The logs in dir `dir_index`.
    pub fn logs_in(&self, dir_index: usize) -> Vec<(TopicPartition, SharedLog)> {
        let logs = self.log_map();
        logs.iter().filter(|(_, e)| e.dir == dir_index).map(|(tp, e)| (tp.clone(), e.log.clone())).collect()
    }

    /// Forgets `tp` and removes its files: renamed first, so a crash midway
    /// leaves a `-delete` dir that the next start removes.
    pub fn delete(&self, tp: &TopicPartition) -> Result<()> {
        let Some(entry) = self.log_map_mut().remove(tp) else {
            return Ok(());
        };
        let log_dir = &self.dirs[entry.dir];
        log_dir.partitions.fetch_sub(1, Ordering::Relaxed);
        if !log_dir.is_online() {
            // Its files go with the other orphans at the next start.
            return Ok(());
        }
        self.forget_cleaning(tp, entry.dir);
        let dir = log_dir.path().join(tp.dir_name());
        let doomed = log_dir.path().join(format!("{}.{}{DELETE_SUFFIX}", tp.dir_name(), unique_suffix()));
        // Under the log lock: a cleaner swap in flight finishes first, and a
        // later one sees the log is gone.
        let _quiesced = peek_log(&entry.log);
        let removed = std::fs::rename(&dir, &doomed).and_then(|_| std::fs::remove_dir_all(&doomed));
        log_dir.guard(removed.at("delete log", &dir))
    }

    /// Removes a partition dir that no topic owns (deleted while we were down).
    pub fn delete_orphan(&self, tp: &TopicPartition, dir_index: usize) -> Result<()> {
        self.forget_cleaning(tp, dir_index);
        let path = self.dirs[dir_index].path().join(tp.dir_name());
        std::fs::remove_dir_all(&path).at("delete log", &path)
    }

    fn snapshot(&self) -> Vec<(TopicPartition, usize, SharedLog)> {
        let logs = self.log_map();
        logs.iter().map(|(tp, e)| (tp.clone(), e.dir, e.log.clone())).collect()
    }

    /// The logs of online dirs, each with its dir's index.
    fn online_logs(&self) -> Vec<(usize, SharedLog)> {
        let logs = self.log_map();
        let online = logs.values().filter(|e| self.dirs[e.dir].is_online());
        online.map(|e| (e.dir, e.log.clone())).collect()
    }

    /// The high watermarks of every dir's `replication-offset-checkpoint`,
    /// as the last checkpoint left them; a missing or damaged file gives
    /// none (the logs then start from their log end, as on one node).
    pub fn read_high_watermarks(&self) -> HashMap<TopicPartition, i64> {
        let mut marks = HashMap::new();
        for dir in &self.dirs {
            let path = dir.path().join(HIGH_WATERMARK_CHECKPOINT);
            match OffsetCheckpoint::new(path.clone()).read() {
                Ok(entries) => marks.extend(entries),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(file = %path.display(), "ignoring an unreadable checkpoint: {e}"),
            }
        }
        marks
    }

    /// Writes the recovery point and log start checkpoints of every online
    /// dir, and the high watermarks given by the replica layer. A dir that
    /// fails goes offline without keeping the others from their checkpoints;
    /// the first failure is returned.
    pub fn checkpoint(&self, high_watermarks: &HashMap<TopicPartition, i64>) -> Result<()> {
        let mut recovery = vec![BTreeMap::new(); self.dirs.len()];
        let mut starts = vec![BTreeMap::new(); self.dirs.len()];
        let mut marks = vec![BTreeMap::new(); self.dirs.len()];
        for (tp, dir, log) in self.snapshot() {
            if !self.dirs[dir].is_online() {
                continue;
            }
            // An offline log keeps no recovery point: a restart recovers it whole.
            let log = match lock_log(&log) {
                Ok(log) => {
                    recovery[dir].insert(tp.clone(), log.recovery_point());
                    log
                }
                Err(_) => peek_log(&log),
            };
            starts[dir].insert(tp.clone(), log.log_start_offset());
            if let Some(hw) = high_watermarks.get(&tp) {
                marks[dir].insert(tp, *hw);
            }
        }
        let mut first_error = None;
        for (i, dir) in self.dirs.iter().enumerate().filter(|(_, d)| d.is_online()) {
            let written = (|| -> Result<()> {
                for (name, entries) in [
                    (RECOVERY_POINT_CHECKPOINT, &recovery[i]),
                    (LOG_START_CHECKPOINT, &starts[i]),
                    (HIGH_WATERMARK_CHECKPOINT, &marks[i]),
                ] {
                    let path = dir.path().join(name);
                    OffsetCheckpoint::new(path.clone()).write(entries).at("write checkpoint", &path)?;
                }
                Ok(())
            })();
            if let Err(e) = dir.guard(written) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Drops a removed log's cleaner checkpoint, so a new log of the same
    /// name starts dirty; a failure to write it only costs a warning.
    fn forget_cleaning(&self, tp: &TopicPartition, dir: usize) {
        if let Err(e) = self.cleaner.forget(tp, dir) {
            tracing::warn!(partition = %tp, "cannot update {}: {e}", crate::cleaner::CHECKPOINT_FILE);
        }
    }

    /// Cleans the dirtiest compacted log of an online dir if one is due;
    /// returns whether one was. Runs on a cleaner thread; `stop` ends it
    /// early. A disk failure takes the log's dir offline, which also ends a
    /// cleaning there. The cleaner asks whether its log is still registered
    /// while holding that log's lock, so nothing may hold the log map lock
    /// while waiting for a log lock.
    pub fn clean_dirtiest(&self, cleaner: &mut Cleaner, stop: &dyn Fn() -> bool) -> Result<bool> {
        let registered = |tp: &TopicPartition, log: &SharedLog| {
            let logs = self.log_map();
            let live = |entry: &Entry| Arc::ptr_eq(&entry.log, log) && self.dirs[entry.dir].is_online();
            logs.get(tp).is_some_and(live) && !log.is_poisoned()
        };
        let mut online = self.snapshot();
        online.retain(|(_, dir, log)| self.dirs[*dir].is_online() && !log.is_poisoned());
        self.cleaner.clean_dirtiest(&online, cleaner, &registered, stop, crate::now_ms())
    }

    /// Flushes logs whose `flush.ms` has passed, and the segments rolled
    /// since the last flush of the others, on every online dir.
    pub fn flush_due(&self, now_ms: i64) -> Result<()> {
        self.for_each_online_log(
            |log| if log.flush_due(now_ms) { log.flush(now_ms) } else { log.flush_rolled() },
        )
    }

    /// Runs `action` on every online log of an online dir; a disk failure
    /// takes its dir offline and the others carry on. Returns the first
    /// failure.
    fn for_each_online_log(&self, mut action: impl FnMut(&mut Log) -> Result<()>) -> Result<()> {
        let mut first_error = None;
        for (dir, log) in self.online_logs() {
            let dir = &self.dirs[dir];
            if !dir.is_online() {
                // Failed since the list was taken.
                continue;
            }
            let Ok(mut log) = lock_log(&log) else { continue };
            let done = action(&mut log).at("flush log", log.dir());
            if let Err(e) = dir.guard(done) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Closes every log, writes final checkpoints and the clean shutdown
    /// marker, on every dir still online: an offline dir is recovered at the
    /// next start.
    pub fn shutdown(&self, high_watermarks: &HashMap<TopicPartition, i64>, now_ms: i64) -> Result<()> {
        let mut by_dir: Vec<Vec<SharedLog>> = self.dirs.iter().map(|_| Vec::new()).collect();
        for (dir, log) in self.online_logs() {
            by_dir[dir].push(log);
        }
        // Closing flushes what is unflushed: the dir's threads share the fsyncs.
        let closed = self.in_parallel_per_dir(by_dir, |dir, log| match lock_log(&log) {
            Ok(mut log) => self.dirs[dir].guard(log.close(now_ms)),
            Err(_) => Ok(()),
        });
        let checkpointed = self.checkpoint(high_watermarks);
        let mut first_error = closed.err().or(checkpointed.err());
        // A dir holding an offline log stays unclean: the next start recovers it.
        let mut unclean: Vec<bool> = self.dirs.iter().map(|d| !d.is_online()).collect();
        for (dir, log) in self.online_logs() {
            unclean[dir] |= log.is_poisoned();
        }
        for (dir, _) in self.dirs.iter().zip(unclean).filter(|(_, unclean)| !unclean) {
            let marker = clean_shutdown_marker(self.broker_epoch());
            let marked =
                crate::checkpoint::write_atomically(&dir.path().join(CLEAN_SHUTDOWN_MARKER), &marker);
            if let Err(e) = dir.guard(marked.map_err(StorageError::from)) {
                first_error.get_or_insert(e);
            }
        }
        for dir in self.dirs.iter().filter(|d| !d.is_online()) {
            tracing::warn!(dir = %dir.path().display(), "log dir offline: left for recovery at the next start");
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Kafka's clean shutdown file: JSON with the broker epoch, so the
/// controller can tell a clean restart from a crash (KIP-966).
fn clean_shutdown_marker(broker_epoch: i64) -> Vec<u8> {
    format!("{{\"version\":0,\"brokerEpoch\":{broker_epoch}}}").into_bytes()
}

/// The broker epoch a clean shutdown marker holds, if it holds one.
fn marker_broker_epoch(marker: &str) -> Option<i64> {
    let (_, rest) = marker.split_once("\"brokerEpoch\"")?;
    let value = rest.trim_start().strip_prefix(':')?.trim_start();
    let end = value.find(|c: char| !(c.is_ascii_digit() || c == '-')).unwrap_or(value.len());
    value[..end].parse().ok().filter(|e: &i64| *e >= 0)
}

/// A checkpoint that cannot be read means recovery from offset 0 and the
/// first segment as log start: slower, never wrong.
fn read_start_checkpoints(dir: &Path) -> StartCheckpoints {
    let read = |name: &str| {
        OffsetCheckpoint::new(dir.join(name)).read_into().unwrap_or_else(|e| {
            tracing::warn!("ignoring {name}: {e}");
            HashMap::new()
        })
    };
    StartCheckpoints {
        recovery_points: read(RECOVERY_POINT_CHECKPOINT),
        log_starts: read(LOG_START_CHECKPOINT),
    }
}

/// Takes the dir's `.lock` so two brokers never share a log dir.
/// Takes `dir/.lock`, as Kafka does, so two brokers never share a log dir.
fn lock_dir(dir: &Path) -> Result<std::fs::File> {
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path);
    let file = file.at("open lock file", &path)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StorageError::IoAt {
            op: "lock log dir",
            path: dir.to_owned(),
            error: std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                "another process (another broker?) holds its .lock",
            ),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(e).at("lock", &path),
    }
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

    fn manager(count: usize) -> (tempfile::TempDir, Vec<PathBuf>, LogManager) {
        let root = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = (0..count).map(|i| root.path().join(format!("logs{i}"))).collect();
        let manager = LogManager::new(dirs.clone()).unwrap();
        (root, dirs, manager)
    }

    fn create(manager: &LogManager, topic: &str, partitions: i32) -> Vec<usize> {
        (0..partitions)
            .map(|p| {
                let tp = TopicPartition::new(topic, p);
                manager.get_or_create(&tp, LogConfig::default(), 0).unwrap();
                let dir = manager.dir_of(&tp).unwrap();
                assert!(dir.path().join(tp.dir_name()).is_dir());
                manager.dirs().iter().position(|d| Arc::ptr_eq(d, &dir)).unwrap()
            })
            .collect()
    }

    #[test]
    fn high_watermarks_are_read_back_from_every_dirs_replication_offset_checkpoint() {
        let (_root, dirs, manager) = manager(2);
        create(&manager, "t", 4);
        let marks: HashMap<TopicPartition, i64> =
            (0..4).map(|p| (TopicPartition::new("t", p), 10 + i64::from(p))).collect();
        manager.checkpoint(&marks).unwrap();
        assert!(dirs.iter().all(|d| d.join(HIGH_WATERMARK_CHECKPOINT).exists()));
        drop(manager);
        let reopened = LogManager::new(dirs.clone()).unwrap();
        assert_eq!(reopened.read_high_watermarks(), marks);
        std::fs::write(dirs[0].join(HIGH_WATERMARK_CHECKPOINT), "garbage").unwrap();
        assert!(reopened.read_high_watermarks().len() < 4, "a damaged file gives none of its entries");
    }

    fn counts(manager: &LogManager) -> Vec<usize> {
        (0..manager.dirs().len()).map(|i| manager.logs_in(i).len()).collect()
    }

    /// Makes `dir` unusable under a running manager: a file takes its place.
    fn break_dir(dir: &Path) {
        std::fs::rename(dir, dir.with_extension("broken")).unwrap();
        std::fs::write(dir, b"not a directory").unwrap();
    }

    #[test]
    fn new_partitions_go_to_the_dir_holding_the_fewest() {
        let (_root, dirs, first) = manager(3);
        create(&first, "old", 4);
        first.shutdown(&HashMap::new(), 0).unwrap();
        drop(first);
        // Reload with every old partition on dir 0, as a broker that had one dir would.
        for p in 0..4 {
            let name = TopicPartition::new("old", p).dir_name();
            let from = dirs.iter().find(|d| d.join(&name).exists()).unwrap();
            if from != &dirs[0] {
                std::fs::rename(from.join(&name), dirs[0].join(&name)).unwrap();
            }
        }
        let manager = LogManager::new(dirs.clone()).unwrap();
        for (tp, dir) in manager.partitions_on_disk().unwrap() {
            manager.load(&tp, dir, LogConfig::default(), 0).unwrap();
        }
        assert_eq!(counts(&manager), vec![4, 0, 0]);
        assert_eq!(create(&manager, "new", 8), vec![1, 2, 1, 2, 1, 2, 1, 2]);
        assert_eq!(create(&manager, "more", 3), vec![0, 1, 2], "ties go to the first dir");
        assert_eq!(counts(&manager), vec![5, 5, 5]);
    }

    #[test]
    fn a_clean_shutdown_records_the_broker_epoch_for_the_next_start() {
        let (_root, dirs, first) = manager(2);
        assert_eq!(first.broker_epoch(), -1, "no marker: not a clean shutdown");
        first.set_broker_epoch(42);
        first.shutdown(&HashMap::new(), 0).unwrap();
        drop(first);
        let marker = std::fs::read_to_string(dirs[0].join(CLEAN_SHUTDOWN_MARKER)).unwrap();
        assert_eq!(marker, r#"{"version":0,"brokerEpoch":42}"#);
        let second = LogManager::new(dirs.clone()).unwrap();
        assert_eq!(second.broker_epoch(), 42);
        drop(second);
        // The markers were consumed: a crash now leaves none.
        assert_eq!(LogManager::new(dirs).unwrap().broker_epoch(), -1);
    }

    #[test]
    fn a_failed_dir_takes_no_new_partitions() {
        let (_root, dirs, manager) = manager(3);
        break_dir(&dirs[1]);
        // Dir 1 looks healthy until a creation fails there; that one moves on.
        assert_eq!(create(&manager, "t", 6), vec![0, 2, 0, 2, 0, 2]);
        assert!(!manager.dirs()[1].is_online());
        let tp = TopicPartition::new("t", 0);
        assert!(manager.dir_of(&tp).unwrap().check().is_ok());
        assert!(matches!(manager.dirs()[1].check(), Err(StorageError::LogDirOffline(_))));
    }

    #[test]
    fn a_failed_checkpoint_takes_only_its_dir_offline() {
        let (_root, dirs, manager) = manager(2);
        create(&manager, "t", 4);
        break_dir(&dirs[0]);
        let error = manager.checkpoint(&HashMap::new()).unwrap_err();
        assert!(error.is_disk_failure(), "{error}");
        assert!(!manager.dirs()[0].is_online());
        assert!(manager.dirs()[1].is_online());
        let written = OffsetCheckpoint::new(dirs[1].join(RECOVERY_POINT_CHECKPOINT)).read().unwrap();
        assert_eq!(written.len(), 2, "dir 1's partitions are checkpointed");
        manager.shutdown(&HashMap::new(), 0).unwrap();
        assert!(dirs[1].join(CLEAN_SHUTDOWN_MARKER).exists());
        assert!(!dirs[0].with_extension("broken").join(CLEAN_SHUTDOWN_MARKER).exists());
        assert!(manager.get_or_create(&TopicPartition::new("t", 9), LogConfig::default(), 0).is_ok());
        assert_eq!(manager.logs_in(1).len(), 3, "new partitions land on the online dir");
    }

    #[test]
    fn deleting_a_log_on_a_failed_dir_forgets_it_and_leaves_the_files() {
        let (_root, dirs, manager) = manager(2);
        create(&manager, "t", 2);
        manager.dirs()[1].fail(&"test");
        for p in 0..2 {
            manager.delete(&TopicPartition::new("t", p)).unwrap();
        }
        assert!(manager.get(&TopicPartition::new("t", 0)).is_none());
        assert!(!dirs[0].join("t-0").exists(), "removed from the online dir");
        assert!(dirs[1].join("t-1").exists(), "left for the next start on the failed one");
        assert_eq!(manager.dirs()[1].partition_count(), 0);
    }

    /// Poisons `log`'s lock as a panic in the middle of an append would.
    pub(crate) fn poison(log: &SharedLog) {
        let panicked = std::thread::scope(|s| {
            s.spawn(|| {
                let _held = log.lock().unwrap();
                panic!("injected panic while the log is locked");
            })
            .join()
        });
        assert!(panicked.is_err() && log.is_poisoned());
    }

    #[test]
    fn a_log_poisoned_by_a_panic_goes_offline_and_its_dir_is_recovered_at_the_next_start() {
        let (_root, dirs, manager) = manager(2);
        create(&manager, "t", 4);
        let (broken, healthy) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
        let broken_dir =
            manager.dirs().iter().position(|d| Arc::ptr_eq(d, &manager.dir_of(&broken).unwrap()));
        let broken_dir = broken_dir.unwrap();
        let batch = crate::batch::encode_batch(&[(None, Some(bytes::Bytes::from_static(b"v")))], 0);
        let broken_log = manager.get(&broken).unwrap();
        lock_log(&broken_log).unwrap().append(&batch, 0, 0).unwrap();
        poison(&broken_log);

        let offline = lock_log(&broken_log).map(|_| ());
        assert!(
            matches!(offline, Err(StorageError::LogOffline(ref dir)) if dir.ends_with("t-0")),
            "{offline:?}"
        );
        assert_eq!(peek_log(&broken_log).log_end_offset(), 1, "figures stay readable");
        lock_log(&manager.get(&healthy).unwrap()).unwrap().append(&batch, 0, 0).unwrap();
        manager.flush_due(i64::MAX).unwrap();
        manager.checkpoint(&HashMap::new()).unwrap();
        let recovery =
            OffsetCheckpoint::new(dirs[broken_dir].join(RECOVERY_POINT_CHECKPOINT)).read().unwrap();
        assert!(!recovery.iter().any(|(tp, _)| *tp == broken), "an offline log is recovered whole");
        assert!(manager.dirs().iter().all(|d| d.is_online()), "one log's panic is not its dir's failure");

        manager.shutdown(&HashMap::new(), 0).unwrap();
        assert!(!dirs[broken_dir].join(CLEAN_SHUTDOWN_MARKER).exists());
        assert!(dirs[1 - broken_dir].join(CLEAN_SHUTDOWN_MARKER).exists());
        drop((broken_log, manager));
        let restarted = LogManager::new(dirs.clone()).unwrap();
        let loaded = restarted.load(&broken, broken_dir, LogConfig::default(), 0).unwrap();
        assert_eq!(lock_log(&loaded).unwrap().log_end_offset(), 1);
    }

    #[test]
    fn with_every_dir_offline_creation_fails_with_a_storage_error() {
        let (_root, dirs, manager) = manager(1);
        break_dir(&dirs[0]);
        let created = manager.get_or_create(&TopicPartition::new("t", 0), LogConfig::default(), 0);
        assert!(matches!(created, Err(StorageError::IoAt { .. })), "the failure that took the dir down");
        let again = manager.get_or_create(&TopicPartition::new("t", 1), LogConfig::default(), 0);
        assert!(matches!(again, Err(StorageError::LogDirOffline(_))));
    }
}
