//! The replica manager: the partitions this broker hosts and their state.
//!
//! A broker hosts the partitions whose replica set in the metadata image
//! names it, and leads those whose image leader is its node id; each new
//! image is applied by [`ReplicaManager::sync`], which creates, opens and
//! deletes logs and moves leadership, reporting the leadership it gained
//! and lost. Each partition pairs its log with the high watermark, the
//! waiters of delayed operations (fetches and acks=all produces, woken by
//! appends and high watermark moves) and its replica set
//! ([`crate::replication::isr`]). A leader's high watermark is the least log
//! end offset of its ISR, moved by appends and followers' fetches; alone in
//! the ISR it follows the log end offset as soon as an append returns. A
//! follower takes its leader's high watermark. High watermarks start from
//! `replication-offset-checkpoint`.
//!
//! Every read or write of a partition's log goes through its [`LogDir`]: once
//! the dir has failed the partition answers KAFKA_STORAGE_ERROR, and a disk
//! error on the way takes the dir (and every partition on it) offline. A
//! panic while a log is locked takes that one partition offline the same way
//! ([`lock_log`]). The other locks here guard state a panic cannot leave
//! unusable (lists of waiters and files, one config pointer, the map of
//! hosted partitions), so they are used through a poisoning.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, Weak};

use kafka_protocol::error::ResponseError;
use strom_metadata::{MetadataError, MetadataImage, PartitionImage, PartitionLogs, TopicImage};
use strom_storage::manager::{lock_log, peek_log};
use strom_storage::producer_state::AppendOrigin;
use strom_storage::segment::FileSlice;
use strom_storage::txn_index::AbortedTxn;
use strom_storage::Log;
use strom_storage::{AppendInfo, LogDir, LogManager, SharedLog, StorageError, TopicPartition};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::config::BrokerConfig;
use crate::failpoint;
use crate::open_files;
use crate::replication::isr::ReplicaSet;
use crate::verification::{Guard, Verifications};

/// The metadata log lives beside the partition logs, as in Kafka.
const METADATA_TOPIC: &str = "__cluster_metadata";
/// Dead waiters are swept once a partition holds this many.
const WAITER_SWEEP_THRESHOLD: usize = 64;

#[derive(Debug)]
pub struct Partition {
    pub tp: TopicPartition,
    /// The leader epoch of the last image applied.
    leader_epoch: AtomicI32,
    /// Whether the last image applied names this broker the leader.
    leader: AtomicBool,
    log: SharedLog,
    dir: Arc<LogDir>,
    high_watermark: AtomicI64,
    waiters: Mutex<Vec<Weak<Notify>>>,
    verifications: Verifications,
    /// How many times the waiters were woken (and their list emptied).
    wakes: AtomicU64,
    /// Set when the topic is deleted, for the fetches that still hold it.
    deleted: AtomicBool,
    /// The replicas, the ISR and, when leading, each follower's progress.
    replication: Mutex<ReplicaSet>,
}

/// What a read found, with the offsets a fetch response reports.
#[derive(Debug)]
pub struct ReadResult {
    pub slice: Option<FileSlice>,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// For read_committed: the aborted transactions the records overlap.
    pub aborted: Vec<AbortedTxn>,
}

/// Which records a read may return: Kafka's fetch `isolation_level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// Up to the high watermark.
    ReadUncommitted,
    /// Up to the last stable offset, with the aborted transactions listed.
    ReadCommitted,
    /// Up to the log end: a follower replicating the log.
    LogEnd,
}

impl Partition {
    #[cfg(test)]
    pub(crate) fn new(tp: TopicPartition, leader_epoch: i32, log: SharedLog, dir: Arc<LogDir>) -> Self {
        Self::with_replicas(tp, leader_epoch, log, dir, ReplicaSet::new(-1, DEFAULT_LAG_TIME_MAX_MS), None)
    }

    /// A partition of `replicas`' local broker whose high watermark was
    /// last checkpointed at `checkpointed` (never above the log end).
    fn with_replicas(
        tp: TopicPartition,
        leader_epoch: i32,
        log: SharedLog,
        dir: Arc<LogDir>,
        replicas: ReplicaSet,
        checkpointed: Option<i64>,
    ) -> Self {
        let log_end = peek_log(&log).log_end_offset();
        let log_end = checkpointed.map_or(log_end, |hw| hw.min(log_end));
        Self {
            tp,
            leader_epoch: AtomicI32::new(leader_epoch),
            // Set from the image once hosted (see ReplicaManager::sync).
            leader: AtomicBool::new(false),
            log,
            dir,
            high_watermark: AtomicI64::new(log_end),
            waiters: Mutex::new(Vec::new()),
            verifications: Verifications::default(),
            wakes: AtomicU64::new(0),
            deleted: AtomicBool::new(false),
            replication: Mutex::new(replicas),
        }
    }

    /// The replica set, changed one field at a time: usable through a poisoning.
    fn replication(&self) -> MutexGuard<'_, ReplicaSet> {
        self.replication.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of the replica set as this broker sees it.
    pub fn replica_set(&self) -> ReplicaSet {
        self.replication().clone()
    }

    /// Takes a new image's state of the partition: its replicas, ISR,
    /// leader and epoch. A broker that starts leading moves the high
    /// watermark as its ISR allows at once (a lone leader to its log end).
    fn apply_image(
        &self,
        state: &PartitionImage,
        leads: bool,
        eligible: &dyn Fn(i32) -> bool,
        min_insync_replicas: usize,
    ) -> bool {
        let log_end = peek_log(&self.log).log_end_offset();
        {
            let mut replication = self.replication();
            replication.apply(state, log_end, strom_storage::now_ms(), eligible);
            replication.min_insync_replicas = min_insync_replicas;
        }
        let changed = self.set_leadership(leads, state.leader_epoch);
        if leads && changed {
            if let Err(e) = self.with_log(|log| log.assign_leader_epoch_start(state.leader_epoch)) {
                tracing::error!(partition = %self.tp, "cannot record the start of leader epoch: {e}");
            }
        }
        if leads {
            self.maybe_increment_high_watermark(log_end);
        }
        changed
    }

    /// The in-sync replicas (the ISR in force, with a pending change's
    /// additions): how many acks=all waits for.
    pub fn isr_size(&self) -> usize {
        let replication = self.replication();
        if replication.leader < 0 {
            return 1;
        }
        replication.isr.len()
    }

    /// Kafka's `maybeIncrementLeaderHW`: raises the high watermark to what
    /// the ISR holds, waking the waiters when it moves. Never lowers it,
    /// and holds it while the ISR is below min ISR.
    fn maybe_increment_high_watermark(&self, log_end: i64) -> bool {
        let candidate = {
            let replication = self.replication();
            replication.high_watermark(log_end, strom_storage::now_ms(), replication.lag_time_max_ms)
        };
        let Some(candidate) = candidate else { return false };
        let previous = self.high_watermark.fetch_max(candidate.min(log_end), Ordering::AcqRel);
        let moved = candidate.min(log_end) > previous;
        if moved {
            self.wake_waiters();
        }
        moved
    }

    /// The leader's side of a follower's fetch from `fetch_offset`: its
    /// progress is recorded and the high watermark moved. Returns the ISR
    /// to propose when the follower has caught up into it, marked pending.
    pub fn record_follower_fetch(
        &self,
        replica_id: i32,
        broker_epoch: i64,
        fetch_offset: i64,
    ) -> Option<Vec<i32>> {
        let log_end = peek_log(&self.log).log_end_offset();
        let now = strom_storage::now_ms();
        if !self.replication().record_fetch(replica_id, broker_epoch, fetch_offset, log_end, now) {
            return None;
        }
        self.maybe_increment_high_watermark(log_end);
        let mut replication = self.replication();
        let expanded = replication.expanded_isr(self.high_watermark())?;
        replication.propose(expanded.clone());
        Some(expanded)
    }

    /// The ISR to propose without the followers lagging longer than
    /// `replica.lag.time.max.ms`, marked pending; `None` when all keep up.
    pub fn shrink_isr_proposal(&self) -> Option<Vec<i32>> {
        let log_end = peek_log(&self.log).log_end_offset();
        let mut replication = self.replication();
        let lag_max_ms = replication.lag_time_max_ms;
        let shrunk = replication.shrunk_isr(log_end, strom_storage::now_ms(), lag_max_ms)?;
        replication.propose(shrunk.clone());
        Some(shrunk)
    }

    /// The ISR proposal waiting to be sent, with each member's broker epoch,
    /// and the leader and partition epochs it builds on.
    pub fn take_isr_proposal(&self, local_broker_epoch: i64) -> Option<IsrProposal> {
        let mut replication = self.replication();
        let isr = replication.take_unsent(local_broker_epoch)?;
        Some(IsrProposal {
            isr,
            leader_epoch: replication.leader_epoch,
            partition_epoch: replication.partition_epoch,
        })
    }

    /// Ends the AlterPartition in flight: a committed ISR at
    /// `partition_epoch` from the controller's answer, or (with `None`) a
    /// proposal given up, back to the last ISR committed.
    pub fn finish_isr_change(&self, committed: Option<(Vec<i32>, i32)>) {
        let log_end = peek_log(&self.log).log_end_offset();
        {
            let mut replication = self.replication();
            if let Some((isr, partition_epoch)) = committed {
                if partition_epoch >= replication.partition_epoch {
                    replication.isr = isr;
                    replication.partition_epoch = partition_epoch;
                }
            }
            replication.pending = None;
        }
        if self.is_leader() {
            self.maybe_increment_high_watermark(log_end);
        }
    }

    /// The follower's side: appends the leader's batches as they are.
    pub fn append_as_follower(&self, records: &[u8]) -> Result<AppendInfo, StorageError> {
        let now = strom_storage::now_ms();
        let appended = self.with_log(|log| log.append_as_follower(records, now))?;
        self.wake_waiters();
        Ok(appended)
    }

    /// The follower takes its leader's high watermark, never past its own
    /// log end.
    pub fn set_follower_high_watermark(&self, leader_high_watermark: i64) {
        let log_end = peek_log(&self.log).log_end_offset();
        let high_watermark = leader_high_watermark.min(log_end);
        if self.high_watermark.swap(high_watermark, Ordering::AcqRel) != high_watermark {
            self.wake_waiters();
        }
    }

    /// The follower follows its leader's log start offset (moved by
    /// retention or DeleteRecords) up to its own high watermark, as Kafka's
    /// `maybeIncrementLogStartOffset` allows.
    pub fn follow_log_start_offset(&self, leader_log_start: i64) -> Result<(), StorageError> {
        if leader_log_start <= self.log_start_offset() || leader_log_start > self.high_watermark() {
            return Ok(());
        }
        self.with_log(|log| log.advance_log_start_offset(leader_log_start)).map(drop)
    }

    /// A follower drops its log from `offset` on (where it diverged from
    /// its leader); the high watermark follows it down.
    pub fn truncate_to(&self, offset: i64) -> Result<i64, StorageError> {
        let log_end = self.with_log(|log| log.truncate_to(offset))?;
        self.high_watermark.fetch_min(log_end, Ordering::AcqRel);
        Ok(log_end)
    }

    /// A follower whose whole log lies below its leader's log start drops
    /// it and restarts empty at `offset`; the high watermark moves there.
    pub fn truncate_fully_and_start_at(&self, offset: i64) -> Result<(), StorageError> {
        let now = strom_storage::now_ms();
        self.with_log(|log| log.truncate_fully_and_start_at(offset, offset, now))?;
        self.high_watermark.store(offset, Ordering::Release);
        self.wake_waiters();
        Ok(())
    }

    /// The log end offset.
    pub fn log_end_offset(&self) -> i64 {
        peek_log(&self.log).log_end_offset()
    }

    /// The latest leader epoch in the log, -1 for none.
    pub fn latest_log_epoch(&self) -> i32 {
        peek_log(&self.log).leader_epochs().latest_epoch().unwrap_or(-1)
    }

    /// The partition's leader epoch, as the last image applied gives it.
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.load(Ordering::Acquire)
    }

    /// Whether this broker leads the partition (the last image applied
    /// names it the leader).
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Acquire)
    }

    /// Takes the leadership and epoch of a new image; returns whether this
    /// broker's leadership changed. Fetches parked on a partition that
    /// stops being led here are woken to answer NOT_LEADER_OR_FOLLOWER at
    /// once, as Kafka completes them when the leader moves.
    fn set_leadership(&self, leader: bool, leader_epoch: i32) -> bool {
        self.leader_epoch.store(leader_epoch, Ordering::Release);
        let changed = self.leader.swap(leader, Ordering::AcqRel) != leader;
        if changed && !leader {
            self.wake_waiters();
        }
        changed
    }

    /// Whether the partition's topic has been deleted.
    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// Wakes the fetches waiting on the partition so they answer it gone at
    /// once, as Kafka completes the delayed fetches of a removed partition,
    /// instead of at their max wait.
    fn mark_deleted(&self) {
        self.deleted.store(true, Ordering::Release);
        self.wake_waiters();
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::Acquire)
    }

    pub fn log(&self) -> &SharedLog {
        &self.log
    }

    /// The log dir holding the partition.
    pub fn dir(&self) -> &LogDir {
        &self.dir
    }

    /// False once the partition's log dir has failed, or a panic left its
    /// log offline.
    pub fn is_online(&self) -> bool {
        self.dir.is_online() && !self.log.is_poisoned()
    }

    pub fn log_start_offset(&self) -> i64 {
        peek_log(&self.log).log_start_offset()
    }

    /// Runs `action` on the log if its dir is online; a disk failure takes
    /// the dir offline.
    fn with_log<T>(
        &self,
        action: impl FnOnce(&mut Log) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        self.dir.check()?;
        let result = action(&mut *lock_log(&self.log)?);
        self.dir.guard(result)
    }

    /// Appends a producer's record set and wakes the fetches waiting on it.
    /// A transactional batch in it must continue a transaction already open
    /// in the log; [`Self::append_verified`] starts one.
    pub fn append(&self, records: &[u8], now_ms: i64) -> Result<(AppendInfo, i64), StorageError> {
        self.append_checked(records, now_ms, AppendOrigin::Client, None)
    }

    /// [`Self::append`] for a transactional producer's record set: when its
    /// transaction is not yet open in the log, `verify` must first confirm
    /// with the transaction coordinator that this partition belongs to it
    /// (KIP-890; see [`crate::verification`]).
    pub async fn append_verified(
        &self,
        records: &[u8],
        now_ms: i64,
        producer_id: i64,
        verify: impl Future<Output = Result<(), ResponseError>>,
    ) -> Result<(AppendInfo, i64), VerifiedAppendError> {
        let guard =
            self.verify_transaction(producer_id, verify).await.map_err(VerifiedAppendError::Unverified)?;
        self.append_guarded(records, now_ms, AppendOrigin::Client, producer_id, guard)
    }

    /// The first half of [`Self::append_verified`]: asks `verify` only when
    /// the producer has no transaction open here yet. The guard returned
    /// goes to [`Self::append_guarded`], or back through
    /// [`Self::abandon_verification`] when no append follows.
    pub async fn verify_transaction(
        &self,
        producer_id: i64,
        verify: impl Future<Output = Result<(), ResponseError>>,
    ) -> Result<Option<Guard>, ResponseError> {
        if !self.needs_verification(producer_id) {
            return Ok(None);
        }
        let guard = self.verifications.begin(producer_id);
        match verify.await {
            Ok(()) => Ok(Some(guard)),
            Err(error) => {
                self.verifications.abandon(producer_id, guard);
                Err(error)
            }
        }
    }

    /// The second half of [`Self::append_verified`], for `origin`: the
    /// group coordinator's TxnOffsetCommit batches are verified the same way.
    pub fn append_guarded(
        &self,
        records: &[u8],
        now_ms: i64,
        origin: AppendOrigin,
        producer_id: i64,
        guard: Option<Guard>,
    ) -> Result<(AppendInfo, i64), VerifiedAppendError> {
        let appended = self.append_checked(records, now_ms, origin, guard);
        if let (Err(_), Some(guard)) = (&appended, guard) {
            self.abandon_verification(producer_id, guard);
        }
        Ok(appended?)
    }

    /// Gives up a verification no append follows.
    pub fn abandon_verification(&self, producer_id: i64, guard: Guard) {
        self.verifications.abandon(producer_id, guard);
    }

    /// Kafka's `maybeStartTransactionVerification`: whether the producer has
    /// no transaction open here yet.
    fn needs_verification(&self, producer_id: i64) -> bool {
        // An offline log refuses the append that follows.
        let log = peek_log(&self.log);
        log.producer_state().get(producer_id).is_none_or(|entry| entry.current_txn_first_offset.is_none())
    }

    fn append_checked(
        &self,
        records: &[u8],
        now_ms: i64,
        origin: AppendOrigin,
        guard: Option<Guard>,
    ) -> Result<(AppendInfo, i64), StorageError> {
        let appended = self.with_log(|log| {
            self.verifications.check(log, records, guard)?;
            self.append_locked(log, records, now_ms, origin)
        })?;
        self.wake_waiters();
        Ok(appended)
    }

    /// [`Self::append`] for `origin`: the coordinators write markers and
    /// transactional offsets.
    pub fn append_as(
        &self,
        records: &[u8],
        now_ms: i64,
        origin: AppendOrigin,
    ) -> Result<(AppendInfo, i64), StorageError> {
        let appended = self.with_log(|log| self.append_locked(log, records, now_ms, origin))?;
        self.wake_waiters();
        Ok(appended)
    }

    fn append_locked(
        &self,
        log: &mut Log,
        records: &[u8],
        now_ms: i64,
        origin: AppendOrigin,
    ) -> Result<(AppendInfo, i64), StorageError> {
        panic_if_injected(&self.tp);
        let info = log.append_as(records, self.leader_epoch(), now_ms, origin)?;
        self.verifications.appended(records);
        // Alone in the ISR, the high watermark is the new log end.
        self.maybe_increment_high_watermark(log.log_end_offset());
        Ok((info, log.log_start_offset()))
    }

    /// Kafka's `checkCurrentLeaderEpoch`: a client naming an epoch
    /// (anything but -1) must name this partition's; an older one is
    /// FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH.
    pub fn check_current_leader_epoch(&self, current_leader_epoch: i32) -> Result<(), ResponseError> {
        use std::cmp::Ordering::{Greater, Less};
        if current_leader_epoch == NO_PARTITION_LEADER_EPOCH {
            return Ok(());
        }
        match self.leader_epoch().cmp(&current_leader_epoch) {
            Greater => Err(ResponseError::FencedLeaderEpoch),
            Less => Err(ResponseError::UnknownLeaderEpoch),
            _ => Ok(()),
        }
    }

    /// OffsetForLeaderEpoch: the largest epoch at or below `epoch` and
    /// where it ends; (-1, -1) when unknown.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Result<(i32, i64), StorageError> {
        self.with_log(|log| Ok(log.end_offset_for_epoch(epoch)))
    }

    /// The last stable offset: read_committed consumers read up to it.
    pub fn last_stable_offset(&self) -> i64 {
        peek_log(&self.log).last_stable_offset(self.high_watermark())
    }

    /// Reads from `offset`, bounded by the high watermark (or, for
    /// read_committed, the last stable offset).
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
        isolation: Isolation,
    ) -> Result<ReadResult, StorageError> {
        self.with_log(|log| {
            let high_watermark = self.high_watermark();
            let last_stable_offset = log.last_stable_offset(high_watermark);
            let max_offset = match isolation {
                Isolation::ReadUncommitted => high_watermark,
                Isolation::ReadCommitted => last_stable_offset,
                Isolation::LogEnd => log.log_end_offset(),
            };
            let slice = log.read(offset, max_bytes, max_offset, min_one_batch)?;
            let aborted = match (&slice, isolation) {
                (Some(slice), Isolation::ReadCommitted) => {
                    log.collect_aborted_transactions(offset, slice.end_offset)?
                }
                _ => Vec::new(),
            };
            Ok(ReadResult {
                slice,
                high_watermark,
                last_stable_offset,
                log_start_offset: log.log_start_offset(),
                aborted,
            })
        })
    }

    /// The first record at or after `timestamp`, as (timestamp, offset).
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(i64, i64)>, StorageError> {
        self.with_log(|log| log.offset_for_timestamp(timestamp))
    }

    /// The record with the largest timestamp, as (timestamp, offset).
    pub fn offset_of_max_timestamp(&self) -> Result<Option<(i64, i64)>, StorageError> {
        self.with_log(|log| log.offset_of_max_timestamp())
    }

    /// Every record below the high watermark, decoded (internal topics).
    pub fn read_records(&self) -> Result<Vec<kafka_protocol::records::Record>, StorageError> {
        self.with_log(|log| log.read_records(self.high_watermark()))
    }

    /// Every record up to the log end. A new leader's coordinator replays
    /// this, as Kafka's: its log is the partition's history from now on,
    /// though its high watermark still waits for the followers' next
    /// fetches (an acknowledged write may lie above it).
    pub fn read_records_to_log_end(&self) -> Result<Vec<kafka_protocol::records::Record>, StorageError> {
        self.with_log(|log| log.read_records(log.log_end_offset()))
    }

    /// Bytes of the partition's segments.
    pub fn size_bytes(&self) -> u64 {
        peek_log(&self.log).size_bytes()
    }

    /// The producers this partition knows, for DescribeProducers.
    pub fn producers(&self) -> Vec<(i64, strom_storage::producer_state::ProducerEntry)> {
        let log = peek_log(&self.log);
        log.producer_state().producers().map(|(id, entry)| (id, *entry)).collect()
    }

    /// DeleteRecords: makes everything below `offset` (the high watermark
    /// for -1) unreadable. Returns the new log start offset.
    pub fn delete_records(&self, offset: i64) -> Result<i64, DeleteRecordsError> {
        let high_watermark = self.high_watermark();
        let offset = if offset == DELETE_TO_HIGH_WATERMARK { high_watermark } else { offset };
        if !(0..=high_watermark).contains(&offset) {
            return Err(DeleteRecordsError::OffsetOutOfRange);
        }
        self.dir.check()?;
        let mut log = lock_log(&self.log)?;
        if !log.config().cleanup_policy.delete {
            return Err(DeleteRecordsError::PolicyViolation);
        }
        Ok(log.advance_log_start_offset(offset)?)
    }

    /// Registers a delayed operation to be notified by the next append.
    /// Returns the wake count: while [`Self::wakes`] still returns it, the
    /// registration stands, so a fetch woken by another partition need not
    /// register here again (and pile up entries for as long as it waits).
    pub fn watch(&self, waiter: &Arc<Notify>) -> u64 {
        let mut waiters = self.waiters();
        if waiters.len() >= WAITER_SWEEP_THRESHOLD {
            waiters.retain(|w| w.strong_count() > 0);
        }
        waiters.push(Arc::downgrade(waiter));
        self.wakes.load(Ordering::Acquire)
    }

    /// How many times the partition's waiters were woken.
    pub fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::Acquire)
    }

    #[cfg(test)]
    pub(crate) fn waiter_count(&self) -> usize {
        self.waiters().len()
    }

    /// A list of weak pointers, changed one push or sweep at a time: usable
    /// through a poisoning.
    fn waiters(&self) -> MutexGuard<'_, Vec<Weak<Notify>>> {
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake_waiters(&self) {
        let waiters = {
            let mut waiters = self.waiters();
            // Counted under the lock, so a count `watch` returned changes
            // exactly when its registration is taken.
            self.wakes.fetch_add(1, Ordering::AcqRel);
            std::mem::take(&mut *waiters)
        };
        for waiter in waiters.iter().filter_map(Weak::upgrade) {
            waiter.notify_one();
        }
    }
}

/// Debug builds panic in an append to the topic named by
/// `STROM_TEST_PANIC_APPEND_TOPIC`, while its log is locked: how tests play
/// a bug that poisons a partition's log.
fn panic_if_injected(tp: &TopicPartition) {
    #[cfg(debug_assertions)]
    {
        static TOPIC: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        let injected = TOPIC.get_or_init(|| std::env::var("STROM_TEST_PANIC_APPEND_TOPIC").ok());
        if injected.as_deref() == Some(tp.topic.as_str()) {
            panic!("injected panic appending to {tp} (STROM_TEST_PANIC_APPEND_TOPIC)");
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = tp;
}

/// Kafka's default `replica.lag.time.max.ms`.
#[cfg(test)]
const DEFAULT_LAG_TIME_MAX_MS: i64 = 30_000;

/// Kafka's `NO_PARTITION_LEADER_EPOCH`: a request that names no epoch.
const NO_PARTITION_LEADER_EPOCH: i32 = -1;

/// DeleteRecords' offset meaning "up to the high watermark".
const DELETE_TO_HIGH_WATERMARK: i64 = -1;

/// Why DeleteRecords refused a partition.
#[derive(Debug, thiserror::Error)]
pub enum DeleteRecordsError {
    #[error("the offset is beyond the high watermark")]
    OffsetOutOfRange,
    #[error("records of a compacted topic cannot be deleted")]
    PolicyViolation,
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// An ISR change for the controller: the proposed members with their
/// broker epochs (KIP-903), on top of the leader and partition epochs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrProposal {
    pub isr: Vec<(i32, i64)>,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
}

/// Why [`Partition::append_verified`] appended nothing.
#[derive(Debug, thiserror::Error)]
pub enum VerifiedAppendError {
    /// The transaction coordinator did not vouch for the partition.
    #[error("transactional batch not verified: {0:?}")]
    Unverified(ResponseError),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Files of deleted segments, removed once their `file.delete.delay.ms` has passed.
#[derive(Debug, Default)]
struct DelayedRemovals(Vec<(i64, PathBuf)>);

impl DelayedRemovals {
    fn schedule(&mut self, due_ms: i64, files: Vec<PathBuf>) {
        self.0.extend(files.into_iter().map(|f| (due_ms, f)));
    }

    fn remove_due(&mut self, now_ms: i64) {
        self.0.retain(|(due_ms, file)| {
            if *due_ms > now_ms {
                return true;
            }
            match std::fs::remove_file(file) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    tracing::warn!(file = %file.display(), "cannot remove a deleted segment file: {e}")
                }
                _ => {}
            }
            false
        });
    }
}

/// Gives every hosted log the config `image` now gives it. A new
/// `segment.bytes` or `segment.ms` applies from the next roll; retention is
/// read from the log's config at each check.
fn apply_configs(hosted: &Hosted, config: &BrokerConfig, image: &MetadataImage) {
    for topic in hosted.by_id.values() {
        let Some(overrides) = image.topic_by_id(&topic.id).map(|t| &t.configs) else { continue };
        let log_config = config.log_config_for(overrides);
        for partition in topic.partitions.values() {
            let Ok(mut log) = lock_log(&partition.log) else { continue };
            if *log.config() != log_config {
                log.set_config(log_config.clone());
            }
        }
    }
}

/// The partitions of one topic that this broker hosts (those whose replica
/// set names it), by partition number: in a cluster, a few of the topic's.
#[derive(Debug)]
pub struct TopicPartitions {
    pub name: String,
    pub id: Uuid,
    pub partitions: BTreeMap<i32, Arc<Partition>>,
}

impl TopicPartitions {
    /// Hosted partition `partition`, if this broker holds a replica of it.
    pub fn get(&self, partition: i32) -> Option<&Arc<Partition>> {
        self.partitions.get(&partition)
    }
}

/// How an image moved partition leadership to or away from this broker:
/// the coordinators load and unload their partitions' state from it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LeadershipChanges {
    pub gained: Vec<TopicPartition>,
    pub lost: Vec<TopicPartition>,
}

#[derive(Debug, Default)]
struct Hosted {
    by_name: HashMap<String, Arc<TopicPartitions>>,
    by_id: HashMap<Uuid, Arc<TopicPartitions>>,
    /// The last image synced, so an image is never applied twice or over a
    /// newer one, and answers name the leaders it knew.
    image: Option<Arc<MetadataImage>>,
}

pub struct ReplicaManager {
    /// This node: it hosts the partitions whose replica set names it.
    node_id: i32,
    /// The static config (`server.properties` and overrides).
    static_config: Arc<BrokerConfig>,
    /// The static config with the dynamic broker configs applied.
    config: RwLock<Arc<BrokerConfig>>,
    logs: LogManager,
    hosted: RwLock<Hosted>,
    removals: Mutex<DelayedRemovals>,
    /// Partition logs on disk (with their topic's id and their dir) that the
    /// open files limit left no room to open at start: opened from there
    /// once there is, removed if their topic is deleted first.
    /// Their topic id is unknown when the node started before replaying
    /// any metadata.
    unopened: Mutex<HashMap<TopicPartition, (Option<Uuid>, usize)>>,
    /// The high watermarks `replication-offset-checkpoint` held at start.
    checkpointed_high_watermarks: HashMap<TopicPartition, i64>,
}

impl ReplicaManager {
    /// Opens the log dirs and loads every partition the image assigns to us;
    /// partition dirs of topics that no longer exist are removed.
    pub fn open(
        config: Arc<BrokerConfig>,
        logs: LogManager,
        image: &Arc<MetadataImage>,
    ) -> Result<Self, StorageError> {
        let node_id = config.node_id;
        let now = strom_storage::now_ms();
        let dynamic = config.with_dynamic_from(image);
        let started = std::time::Instant::now();
        let mut wanted = Vec::new();
        let mut undecided = Vec::new();
        for (tp, dir) in logs.partitions_on_disk()? {
            if tp.topic == METADATA_TOPIC {
                continue;
            }
            // An image with no record yet (a cluster node before it has
            // replayed the log) cannot tell a deleted topic from one it has
            // not read yet: such logs wait unopened for the image naming them.
            if image.last_offset < 0 {
                undecided.push((tp, (None, dir)));
                continue;
            }
            let Some(topic) = image.topic(&tp.topic).filter(|t| t.partitions.contains_key(&tp.partition))
            else {
                tracing::info!(partition = %tp, "removing the log of a deleted topic");
                logs.delete_orphan(&tp, dir)?;
                continue;
            };
            if !topic.partitions.get(&tp.partition).is_some_and(|p| p.replicas.contains(&node_id)) {
                tracing::info!(partition = %tp, "removing the log of a replica moved to other brokers");
                logs.delete_orphan(&tp, dir)?;
                continue;
            }
            if names_another_topic(&logs, &tp, dir, &topic.id) {
                tracing::info!(partition = %tp, "removing the log of an earlier topic of the same name");
                logs.delete_orphan(&tp, dir)?;
                continue;
            }
            wanted.push((tp, dir, dynamic.log_config_for(&topic.configs)));
        }
        // Each topic's first partitions first, so what the limit leaves out is predictable.
        wanted.sort_unstable_by(|(a, ..), (b, ..)| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        let fit = open_files::partitions_that_fit(dynamic.log_segment_open_files_max as u64, 0);
        let unopened = wanted.split_off(wanted.len().min(usize::try_from(fit).unwrap_or(usize::MAX)));
        let count = wanted.len();
        let checkpointed_high_watermarks = logs.read_high_watermarks();
        logs.load_all(wanted, now)?;
        tracing::info!(logs = count, elapsed_ms = started.elapsed().as_millis(), "loaded partition logs");
        let manager = Self {
            node_id,
            static_config: config,
            config: RwLock::new(Arc::new(dynamic)),
            logs,
            hosted: RwLock::new(Hosted::default()),
            removals: Mutex::default(),
            checkpointed_high_watermarks,
            unopened: Mutex::new(
                unopened
                    .into_iter()
                    .map(|(tp, dir, _)| (image.topic(&tp.topic).map(|t| t.id), tp, dir))
                    .map(|(id, tp, dir)| (tp, (id, dir)))
                    .chain(undecided)
                    .collect(),
            ),
        };
        manager.sync(image)?;
        Ok(manager)
    }

    /// The broker config in force: static, overlaid by the dynamic broker
    /// configs of the last image synced.
    pub fn config(&self) -> Arc<BrokerConfig> {
        self.config.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub fn topic(&self, name: &str) -> Option<Arc<TopicPartitions>> {
        self.hosted().by_name.get(name).cloned()
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<Arc<TopicPartitions>> {
        self.hosted().by_id.get(id).cloned()
    }

    /// Hosted partition `partition` of `topic`, led here or not.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        self.topic(topic)?.get(partition).cloned()
    }

    /// Whether the last image synced names partition `partition` of
    /// `topic`, wherever it is hosted.
    pub fn knows(&self, topic: &str, partition: i32) -> bool {
        let hosted = self.hosted();
        let image = hosted.image.as_ref();
        image.and_then(|i| i.topic(topic)).is_some_and(|t| t.partitions.contains_key(&partition))
    }

    /// The last image synced (the empty image before the first).
    pub fn image(&self) -> Arc<MetadataImage> {
        self.hosted().image.clone().unwrap_or_else(|| Arc::new(MetadataImage::empty()))
    }

    /// Partition `partition` of `topic` if this broker leads it, else
    /// Kafka's answer (`ReplicaManager.getPartitionOrError`): a partition
    /// the metadata knows but that is not led here is
    /// NOT_LEADER_OR_FOLLOWER, one it does not know
    /// UNKNOWN_TOPIC_OR_PARTITION.
    pub fn leader_partition(&self, topic: &str, partition: i32) -> Result<Arc<Partition>, ResponseError> {
        let hosted = self.hosted();
        let found = hosted.by_name.get(topic).and_then(|t| t.get(partition));
        match found {
            Some(p) if p.is_leader() => Ok(p.clone()),
            _ if hosted
                .image
                .as_ref()
                .and_then(|image| image.topic(topic))
                .is_some_and(|t| t.partitions.contains_key(&partition)) =>
            {
                Err(ResponseError::NotLeaderOrFollower)
            }
            _ => Err(ResponseError::UnknownTopicOrPartition),
        }
    }

    /// Brings the hosted partitions in line with the image: logs are created
    /// for new replicas of this broker and deleted for removed topics and
    /// replicas moved away, each partition takes the image's leader and
    /// epoch, and every log gets the config the image now gives it (topic
    /// overrides over dynamic broker configs over static ones). Returns the
    /// partitions whose leadership moved to or away from this broker.
    pub fn sync(&self, image: &Arc<MetadataImage>) -> Result<LeadershipChanges, StorageError> {
        let now = strom_storage::now_ms();
        let mut hosted = self.hosted.write().unwrap_or_else(PoisonError::into_inner);
        // Each image is applied once, and never an older one over a newer.
        if hosted.image.as_ref().is_some_and(|synced| image.last_offset <= synced.last_offset) {
            return Ok(LeadershipChanges::default());
        }
        hosted.image = Some(image.clone());
        let config = Arc::new(self.static_config.with_dynamic_from(image));
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = config.clone();
        let mut changes = LeadershipChanges::default();
        let removed: Vec<Arc<TopicPartitions>> =
            hosted.by_id.values().filter(|t| image.topic_by_id(&t.id).is_none()).cloned().collect();
        for topic in removed {
            hosted.by_id.remove(&topic.id);
            hosted.by_name.remove(&topic.name);
            for partition in topic.partitions.values() {
                self.remove_partition(partition, &mut changes)?;
                failpoint::reach(failpoint::TOPIC_LOG_REMOVED);
            }
        }
        self.remove_unopened_of_deleted(image)?;
        // Counted only if a log is missing: listing descriptors costs.
        let mut budget = None;
        let mut offline = Offline::default();
        for topic in image.topics() {
            let local: Vec<(i32, &PartitionImage)> = topic
                .partitions
                .iter()
                .filter(|(n, _)| self.is_local(topic, **n))
                .map(|(n, p)| (*n, p))
                .collect();
            let current = hosted.by_id.get(&topic.id);
            let unchanged = current.is_some_and(|t| {
                t.partitions.len() == local.len() && local.iter().all(|(n, _)| t.partitions.contains_key(n))
            });
            if unchanged {
                continue;
            }
            let log_config = config.log_config_for(&topic.configs);
            let mut previous = current.map(|t| t.partitions.clone()).unwrap_or_default();
            let mut partitions = BTreeMap::new();
            for (number, state) in local {
                if let Some(partition) = previous.remove(&number) {
                    partitions.insert(number, partition);
                    continue;
                }
                let tp = TopicPartition::new(topic.name.clone(), number);
                // Logs made before the metadata named them are there already;
                // others (a crash, a dir removed by hand, a replica placed
                // here by another node's controller) are made if they fit.
                let log = match self.logs.get(&tp) {
                    Some(log) => Ok(log),
                    None => match budget.get_or_insert_with(|| self.partitions_that_fit()) {
                        0 => Err(StorageError::Io(std::io::Error::other(
                            "the open files limit (RLIMIT_NOFILE) leaves no room",
                        ))),
                        left => {
                            *left -= 1;
                            self.open_or_create(&tp, log_config.clone(), now)
                        }
                    },
                };
                match log.and_then(|log| record_topic_id(&log, &topic.id).map(|()| log)) {
                    Ok(log) => {
                        let dir = self.logs.dir_of(&tp).expect("a log the manager holds has a dir");
                        let replicas = ReplicaSet::new(self.node_id, config.replica_lag_time_max_ms);
                        let checkpointed = self.checkpointed_high_watermarks.get(&tp).copied();
                        let partition = Partition::with_replicas(
                            tp,
                            state.leader_epoch,
                            log,
                            dir,
                            replicas,
                            checkpointed,
                        );
                        partitions.insert(number, Arc::new(partition));
                    }
                    // Waits offline for the next image.
                    Err(e) => offline.note(&topic.name, e),
                }
            }
            // What is left was hosted here and is not any more.
            for partition in previous.values() {
                tracing::info!(partition = %partition.tp, "removing the log of a replica moved to other brokers");
                self.remove_partition(partition, &mut changes)?;
            }
            let entry = Arc::new(TopicPartitions { name: topic.name.clone(), id: topic.id, partitions });
            hosted.by_name.insert(topic.name.clone(), entry.clone());
            hosted.by_id.insert(topic.id, entry);
        }
        offline.report();
        self.apply_leadership(&hosted, image, &config, &mut changes);
        apply_configs(&hosted, &config, image);
        Ok(changes)
    }

    /// Gives every hosted partition the image's leader and epoch.
    fn apply_leadership(
        &self,
        hosted: &Hosted,
        image: &MetadataImage,
        config: &BrokerConfig,
        changes: &mut LeadershipChanges,
    ) {
        // Kafka's `isReplicaIsrEligible`: a registered broker, neither
        // fenced nor shutting down.
        let eligible =
            |id: i32| image.brokers.get(&id).is_some_and(|b| !b.fenced && !b.in_controlled_shutdown);
        for topic in hosted.by_id.values() {
            let Some(described) = image.topic_by_id(&topic.id) else { continue };
            let min_isr = described.configs.get("min.insync.replicas").and_then(|v| v.parse().ok());
            let min_isr = min_isr.unwrap_or(config.min_insync_replicas).max(1) as usize;
            for (number, partition) in &topic.partitions {
                let Some(state) = described.partitions.get(number) else { continue };
                let leads = state.leader == self.node_id;
                if partition.apply_image(state, leads, &eligible, min_isr) {
                    let moved = if leads { &mut changes.gained } else { &mut changes.lost };
                    moved.push(partition.tp.clone());
                }
            }
        }
    }

    /// Whether the image places a replica of `topic`'s partition `number`
    /// on this broker.
    fn is_local(&self, topic: &TopicImage, number: i32) -> bool {
        topic.partitions.get(&number).is_some_and(|p| p.replicas.contains(&self.node_id))
    }

    /// Stops hosting `partition` and deletes its log.
    fn remove_partition(
        &self,
        partition: &Partition,
        changes: &mut LeadershipChanges,
    ) -> Result<(), StorageError> {
        // Deleted first: a fetch woken by either change answers it gone.
        partition.mark_deleted();
        if partition.set_leadership(false, partition.leader_epoch()) {
            changes.lost.push(partition.tp.clone());
        }
        self.logs.delete(&partition.tp)
    }

    /// Unopened logs go with their topic, as hosted ones do: a new topic of
    /// the same name must not find them.
    fn remove_unopened_of_deleted(&self, image: &MetadataImage) -> Result<(), StorageError> {
        let mut unopened = self.unopened.lock().unwrap_or_else(PoisonError::into_inner);
        let deleted: Vec<(TopicPartition, usize)> = unopened
            .iter()
            .filter(|(_, (id, _))| id.is_some_and(|id| image.topic_by_id(&id).is_none()))
            .map(|(tp, (_, dir))| (tp.clone(), *dir))
            .collect();
        for (tp, dir) in deleted {
            unopened.remove(&tp);
            self.logs.delete_orphan(&tp, dir)?;
        }
        Ok(())
    }

    /// The log of `tp`: the one on disk if start-up left it unopened, else
    /// a new one.
    fn open_or_create(
        &self,
        tp: &TopicPartition,
        config: strom_storage::LogConfig,
        now: i64,
    ) -> Result<SharedLog, StorageError> {
        let mut unopened = self.unopened.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(&(_, dir)) = unopened.get(tp) else {
            return self.logs.get_or_create(tp, config, now);
        };
        let log = self.logs.load(tp, dir, config, now)?;
        unopened.remove(tp);
        Ok(log)
    }

    /// How many more partition logs the open files limit leaves room for.
    fn partitions_that_fit(&self) -> u64 {
        let hosted = self.logs.dirs().iter().map(|d| d.partition_count() as u64).sum();
        let cache = self.config().log_segment_open_files_max as u64;
        open_files::partitions_that_fit(cache, hosted)
    }

    /// Every hosted topic, with its hosted partitions.
    pub fn topics(&self) -> Vec<Arc<TopicPartitions>> {
        self.hosted().by_id.values().cloned().collect()
    }

    /// This broker's node id.
    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    /// Every hosted partition.
    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        let hosted = self.hosted();
        hosted.by_name.values().flat_map(|t| t.partitions.values().cloned()).collect()
    }

    fn high_watermarks(&self) -> HashMap<TopicPartition, i64> {
        self.partitions().iter().map(|p| (p.tp.clone(), p.high_watermark())).collect()
    }

    /// One retention pass over every hosted log of an online dir; the log
    /// start offsets it moved are checkpointed at once. A disk failure takes
    /// its dir offline and the other logs carry on; the first is returned.
    pub fn enforce_retention(&self) -> Result<(), StorageError> {
        let now = strom_storage::now_ms();
        let mut deleted_any = false;
        let mut first_error = None;
        for partition in self.partitions().into_iter().filter(|p| p.dir.is_online()) {
            let Ok(mut log) = lock_log(&partition.log) else { continue };
            let deleted =
                match partition.dir.guard(log.delete_retained_segments(partition.high_watermark(), now)) {
                    Ok(deleted) => deleted,
                    Err(e) => {
                        first_error.get_or_insert(e);
                        continue;
                    }
                };
            if deleted.segments > 0 {
                deleted_any = true;
                let due = now.saturating_add(log.config().file_delete_delay_ms);
                self.removals().schedule(due, deleted.files);
            }
        }
        if deleted_any {
            self.checkpoint()?;
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Forgets, in every hosted log, the producers idle longer than `expiration_ms`.
    pub fn remove_expired_producers(&self, expiration_ms: i64) {
        let now = strom_storage::now_ms();
        for partition in self.partitions() {
            let Ok(mut log) = lock_log(&partition.log) else { continue };
            let removed = log.remove_expired_producers(now, expiration_ms);
            drop(log);
            if removed > 0 {
                tracing::debug!(partition = %partition.tp, removed, "expired idle producer ids");
            }
        }
    }

    /// Removes the files of deleted segments whose delay has passed.
    pub fn remove_deleted_files(&self) {
        self.removals().remove_due(strom_storage::now_ms());
    }

    fn hosted(&self) -> RwLockReadGuard<'_, Hosted> {
        self.hosted.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn removals(&self) -> MutexGuard<'_, DelayedRemovals> {
        self.removals.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The log dirs, in `log.dirs` order.
    pub fn log_dirs(&self) -> &[Arc<LogDir>] {
        self.logs.dirs()
    }

    /// The hosted partitions whose logs live in dir `dir_index`.
    pub fn partitions_in_dir(&self, dir_index: usize) -> Vec<Arc<Partition>> {
        let dir = &self.logs.dirs()[dir_index];
        let hosted = self.hosted();
        let all = hosted.by_name.values().flat_map(|t| t.partitions.values());
        all.filter(|p| Arc::ptr_eq(&p.dir, dir)).cloned().collect()
    }

    /// Writes the offset checkpoints of every log dir.
    pub fn checkpoint(&self) -> Result<(), StorageError> {
        self.logs.checkpoint(&self.high_watermarks())
    }

    /// One round of a log cleaner thread: cleans the dirtiest compacted log
    /// if one is due; returns whether one was.
    pub fn clean_dirtiest(
        &self,
        cleaner: &mut strom_storage::cleaner::Cleaner,
        stop: &dyn Fn() -> bool,
    ) -> Result<bool, StorageError> {
        self.logs.clean_dirtiest(cleaner, stop)
    }

    /// Flushes the logs whose `flush.ms` has passed.
    pub fn flush_due(&self) -> Result<(), StorageError> {
        self.logs.flush_due(strom_storage::now_ms())
    }

    /// The broker epoch the log dirs' clean shutdown markers record (see
    /// [`LogManager::broker_epoch`]).
    pub fn logs_broker_epoch(&self) -> i64 {
        self.logs.broker_epoch()
    }

    /// Records the broker's registered epoch for the clean shutdown markers.
    pub fn set_logs_broker_epoch(&self, epoch: i64) {
        self.logs.set_broker_epoch(epoch);
    }

    /// Flushes and closes every log and marks the shutdown clean.
    pub fn shutdown(&self) -> Result<(), StorageError> {
        self.logs.shutdown(&self.high_watermarks(), strom_storage::now_ms())
    }
}

/// Partitions the metadata names but this broker could not open: they
/// stay offline (no leader) until a later image finds room, and are
/// reported in one line, not one per partition.
#[derive(Default)]
struct Offline {
    partitions: usize,
    topics: Vec<String>,
    first_error: Option<StorageError>,
}

impl Offline {
    fn note(&mut self, topic: &str, error: StorageError) {
        self.partitions += 1;
        if self.topics.last().is_none_or(|last| last != topic) {
            self.topics.push(topic.to_owned());
        }
        self.first_error.get_or_insert(error);
    }

    fn report(self) {
        let Some(error) = self.first_error else { return };
        let topics = self.topics.len();
        let examples = self.topics.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
        tracing::error!(
            partitions = self.partitions,
            topics,
            "partitions left offline: their logs cannot be opened ({error}); e.g. topics {examples}"
        );
    }
}

/// New partitions get their logs before the metadata names them, and only
/// as many as the open files limit allows.
impl PartitionLogs for ReplicaManager {
    fn check_room(&self, count: usize) -> Result<(), MetadataError> {
        let fit = self.partitions_that_fit();
        if count as u64 > fit {
            return Err(MetadataError::PolicyViolation(format!(
                "{count} new partitions need {count} open files, but the open files limit \
                 (RLIMIT_NOFILE) leaves room for {fit} more; raise it to host more partitions"
            )));
        }
        Ok(())
    }

    fn create(&self, topic: &TopicImage, partitions: std::ops::Range<i32>) -> Result<(), MetadataError> {
        let local: Vec<i32> = partitions.clone().filter(|&n| self.is_local(topic, n)).collect();
        self.check_room(local.len())?;
        let log_config = self.config().log_config_for(&topic.configs);
        let now = strom_storage::now_ms();
        for number in local {
            let tp = TopicPartition::new(topic.name.clone(), number);
            if let Err(e) = self.logs.get_or_create(&tp, log_config.clone(), now) {
                self.discard(topic, partitions.start..number);
                return Err(MetadataError::Storage(e));
            }
        }
        // A new topic's partitions start at 0; added ones never do.
        let created = if partitions.start == 0 {
            failpoint::TOPIC_LOGS_CREATED
        } else {
            failpoint::PARTITION_LOGS_ADDED
        };
        failpoint::reach(created);
        Ok(())
    }

    fn discard(&self, topic: &TopicImage, partitions: std::ops::Range<i32>) {
        for number in partitions.filter(|&n| self.is_local(topic, n)) {
            let tp = TopicPartition::new(topic.name.clone(), number);
            if let Err(e) = self.logs.delete(&tp) {
                tracing::warn!(partition = %tp, "cannot remove the log of a partition not created: {e}");
            }
        }
    }
}

/// Whether the log's `partition.metadata` names a topic other than `id`:
/// the log outlived its topic, and one of the same name took its place.
fn names_another_topic(logs: &LogManager, tp: &TopicPartition, dir: usize, id: &Uuid) -> bool {
    let path = logs.dirs()[dir].path().join(tp.dir_name());
    let named = strom_storage::partition_metadata::read(&path).ok().flatten();
    named.is_some_and(|named| named != crate::meta_properties::base64_url(id.as_bytes()))
}

/// Writes Kafka's `partition.metadata` beside a hosted log, once: the
/// topic id the dir belongs to.
fn record_topic_id(log: &SharedLog, topic_id: &Uuid) -> Result<(), StorageError> {
    use strom_storage::Context;
    let dir = strom_storage::manager::peek_log(log).dir().to_owned();
    let id = crate::meta_properties::base64_url(topic_id.as_bytes());
    strom_storage::partition_metadata::write_if_absent(&dir, &id).at("write partition.metadata in", &dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::error::ResponseError;
    use strom_storage::LogConfig;

    fn partitions(logs: &LogManager, count: i32) -> Vec<Partition> {
        (0..count)
            .map(|p| {
                let tp = TopicPartition::new("t", p);
                let log = logs.get_or_create(&tp, LogConfig::default(), 0).unwrap();
                Partition::new(tp.clone(), 0, log, logs.dir_of(&tp).unwrap())
            })
            .collect()
    }

    /// Poisons the partition's log lock as a panic mid-append would.
    fn panic_holding_the_log(partition: &Partition) {
        let panicked = std::thread::scope(|s| {
            s.spawn(|| {
                let _held = partition.log.lock().unwrap();
                panic!("injected panic while the log is locked");
            })
            .join()
        });
        assert!(panicked.is_err());
    }

    mod hosting {
        use super::*;
        use strom_metadata::kraft_records::{
            MetadataRecord, PartitionChangeRecord, PartitionRecord, RemoveTopicRecord, TopicRecord,
        };

        const NODE: i32 = 1;
        const TOPIC_ID: Uuid = Uuid::from_u128(0x7);

        /// An image whose topic "t" places partition `p` on broker
        /// `placement[p]`, which leads it at epoch 0.
        fn image_placing(placement: &[i32]) -> MetadataImage {
            let mut image = MetadataImage::empty();
            image.apply(TopicRecord { name: "t".into(), topic_id: TOPIC_ID, ..Default::default() }.into());
            for (number, &broker) in placement.iter().enumerate() {
                let partition = PartitionRecord {
                    partition_id: number as i32,
                    topic_id: TOPIC_ID,
                    replicas: vec![broker],
                    isr: vec![broker],
                    leader: broker,
                    ..Default::default()
                };
                image.apply(partition.into());
            }
            image.last_offset = 1;
            image
        }

        /// `image` after `record`, one offset later.
        fn then(image: &MetadataImage, record: impl Into<MetadataRecord>) -> Arc<MetadataImage> {
            let mut next = image.clone();
            next.apply(record.into());
            next.last_offset += 1;
            Arc::new(next)
        }

        fn change(partition: i32, leader: i32, replicas: Option<Vec<i32>>) -> PartitionChangeRecord {
            PartitionChangeRecord {
                partition_id: partition,
                topic_id: TOPIC_ID,
                leader,
                replicas,
                ..Default::default()
            }
        }

        fn manager(dir: &std::path::Path, image: &Arc<MetadataImage>) -> ReplicaManager {
            let overrides = [
                ("log.dirs".to_owned(), dir.display().to_string()),
                ("node.id".to_owned(), NODE.to_string()),
            ];
            let config = Arc::new(BrokerConfig::from_properties("", &overrides).unwrap());
            let logs = LogManager::new(vec![dir.to_owned()]).unwrap();
            ReplicaManager::open(config, logs, image).unwrap()
        }

        fn hosted_numbers(manager: &ReplicaManager) -> Vec<i32> {
            manager.topic("t").map(|t| t.partitions.keys().copied().collect()).unwrap_or_default()
        }

        fn log_exists(dir: &std::path::Path, partition: i32) -> bool {
            dir.join(format!("t-{partition}")).exists()
        }

        #[test]
        fn given_partitions_spread_over_brokers_when_synced_should_host_only_this_nodes() {
            let dir = tempfile::tempdir().unwrap();
            let image = Arc::new(image_placing(&[1, 2, 1, 3]));
            let manager = manager(dir.path(), &image);

            assert_eq!(hosted_numbers(&manager), vec![0, 2]);
            assert_eq!(
                (0..4).map(|p| log_exists(dir.path(), p)).collect::<Vec<_>>(),
                [true, false, true, false]
            );
            assert!(manager.leader_partition("t", 2).unwrap().is_leader());
            assert_eq!(manager.leader_partition("t", 1).unwrap_err(), ResponseError::NotLeaderOrFollower);
            assert_eq!(manager.leader_partition("t", 4).unwrap_err(), ResponseError::UnknownTopicOrPartition);
            assert_eq!(manager.leader_partition("u", 0).unwrap_err(), ResponseError::UnknownTopicOrPartition);
        }

        #[test]
        fn given_a_led_partition_when_its_leader_goes_and_returns_should_lose_and_regain_leadership() {
            let dir = tempfile::tempdir().unwrap();
            let image = Arc::new(image_placing(&[1, 2]));
            let manager = manager(dir.path(), &image);
            let tp = TopicPartition::new("t", 0);
            let first_epoch = manager.partition("t", 0).unwrap().leader_epoch();

            let leaderless = then(&image, change(0, -1, None));
            let changes = manager.sync(&leaderless).unwrap();
            assert_eq!(changes, LeadershipChanges { gained: vec![], lost: vec![tp.clone()] });
            assert_eq!(manager.leader_partition("t", 0).unwrap_err(), ResponseError::NotLeaderOrFollower);
            assert_eq!(hosted_numbers(&manager), vec![0], "a replica without leadership stays hosted");

            let led_again = then(&leaderless, change(0, NODE, None));
            let changes = manager.sync(&led_again).unwrap();
            assert_eq!(changes, LeadershipChanges { gained: vec![tp], lost: vec![] });
            let partition = manager.leader_partition("t", 0).unwrap();
            assert_eq!(partition.leader_epoch(), first_epoch + 2, "each new leader bumps the epoch");
            assert_eq!(
                manager.sync(&led_again).unwrap(),
                LeadershipChanges::default(),
                "applying twice changes nothing"
            );
        }

        #[test]
        fn given_an_older_image_when_synced_should_change_nothing() {
            let dir = tempfile::tempdir().unwrap();
            let image = Arc::new(image_placing(&[1]));
            let manager = manager(dir.path(), &image);
            let newer = then(&image, change(0, -1, None));
            manager.sync(&newer).unwrap();

            assert_eq!(manager.sync(&image).unwrap(), LeadershipChanges::default());
            assert!(manager.leader_partition("t", 0).is_err());
        }

        #[test]
        fn given_a_replica_moved_to_another_broker_when_synced_should_delete_its_log() {
            let dir = tempfile::tempdir().unwrap();
            let image = Arc::new(image_placing(&[1, 1]));
            let manager = manager(dir.path(), &image);
            let kept = manager.partition("t", 0).unwrap();

            let moved = then(&image, change(1, 2, Some(vec![2])));
            let changes = manager.sync(&moved).unwrap();

            assert_eq!(changes.lost, vec![TopicPartition::new("t", 1)]);
            assert_eq!(hosted_numbers(&manager), vec![0]);
            assert!(!log_exists(dir.path(), 1) && log_exists(dir.path(), 0));
            assert!(
                Arc::ptr_eq(&kept, &manager.partition("t", 0).unwrap()),
                "the other partition is untouched"
            );
            assert_eq!(manager.leader_partition("t", 1).unwrap_err(), ResponseError::NotLeaderOrFollower);
        }

        #[test]
        fn given_a_replica_placed_here_later_when_synced_should_create_and_lead_it() {
            let dir = tempfile::tempdir().unwrap();
            let image = Arc::new(image_placing(&[2]));
            let manager = manager(dir.path(), &image);
            assert!(hosted_numbers(&manager).is_empty());

            let placed = then(&image, change(0, NODE, Some(vec![NODE])));
            let changes = manager.sync(&placed).unwrap();

            assert_eq!(changes.gained, vec![TopicPartition::new("t", 0)]);
            assert!(log_exists(dir.path(), 0));
            assert!(manager.leader_partition("t", 0).is_ok());
        }

        #[test]
        fn given_a_deleted_topic_when_synced_should_drop_its_partitions() {
            let dir = tempfile::tempdir().unwrap();
            let image = Arc::new(image_placing(&[1, 2]));
            let manager = manager(dir.path(), &image);
            let partition = manager.partition("t", 0).unwrap();

            let removed = then(&image, RemoveTopicRecord { topic_id: TOPIC_ID, ..Default::default() });
            let changes = manager.sync(&removed).unwrap();

            assert_eq!(changes.lost, vec![TopicPartition::new("t", 0)]);
            assert!(manager.topic("t").is_none() && partition.is_deleted());
            assert!(!log_exists(dir.path(), 0));
        }

        #[test]
        fn given_an_image_not_replayed_yet_when_opened_should_keep_the_logs_until_named() {
            let dir = tempfile::tempdir().unwrap();
            let image = Arc::new(image_placing(&[1]));
            let batch =
                strom_storage::batch::encode_batch(&[(None, Some(bytes::Bytes::from_static(b"v")))], 0);
            manager(dir.path(), &image).partition("t", 0).unwrap().append(&batch, 0).unwrap();

            let manager = manager(dir.path(), &Arc::new(MetadataImage::empty()));
            assert!(hosted_numbers(&manager).is_empty() && log_exists(dir.path(), 0));

            manager.sync(&image).unwrap();
            let partition = manager.leader_partition("t", 0).unwrap();
            assert_eq!(partition.high_watermark(), 1, "the record written before the restart is still there");
        }

        #[test]
        fn given_logs_of_replicas_placed_elsewhere_when_opened_should_remove_them() {
            let dir = tempfile::tempdir().unwrap();
            let image = Arc::new(image_placing(&[1, 1]));
            drop(manager(dir.path(), &image));
            let moved = then(&image, change(1, 2, Some(vec![2])));

            let manager = manager(dir.path(), &moved);

            assert_eq!(hosted_numbers(&manager), vec![0]);
            assert!(!log_exists(dir.path(), 1));
        }
    }

    #[test]
    fn a_panic_holding_a_log_takes_its_partition_offline_with_a_storage_error() {
        let dir = tempfile::tempdir().unwrap();
        let logs = LogManager::new(vec![dir.path().to_owned()]).unwrap();
        let [broken, healthy] = <[Partition; 2]>::try_from(partitions(&logs, 2)).unwrap();
        let batch = strom_storage::batch::encode_batch(&[(None, Some(bytes::Bytes::from_static(b"v")))], 0);
        broken.append(&batch, 0).unwrap();
        panic_holding_the_log(&broken);

        for error in [
            broken.append(&batch, 0).map(drop).unwrap_err(),
            broken.read(0, 1024, true, Isolation::ReadCommitted).map(drop).unwrap_err(),
            broken.offset_of_max_timestamp().map(drop).unwrap_err(),
        ] {
            assert_eq!(crate::error::storage_error(&error), ResponseError::KafkaStorageError, "{error}");
        }
        assert!(matches!(broken.delete_records(0), Err(DeleteRecordsError::Storage(_))));
        assert!(!broken.is_online());
        assert_eq!((broken.log_start_offset(), broken.size_bytes() > 0), (0, true), "figures stay readable");
        assert!(broken.dir().is_online(), "one partition's panic is not its dir's failure");
        assert!(healthy.is_online());
        assert_eq!(healthy.append(&batch, 0).unwrap().0.first_offset, 0);
    }
}
