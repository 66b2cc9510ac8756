//! The transaction coordinator: transactional ids, their producer ids and
//! epochs, and the transactions they run.
//!
//! Every transactional id belongs to one partition of `__transaction_state`
//! (Java's `String.hashCode` of the id, made non-negative, modulo
//! `transaction.state.log.num.partitions`); each change of its metadata is
//! a record there, in Kafka's schemas ([`codec`]), written before the
//! change takes effect and replayed when the broker starts. [`state`] is
//! the pure state machine; this module adds the locking, the persistence,
//! the markers and the timers.
//!
//! As Kafka's acks=-1 writes, a state takes effect (and the client is
//! answered) once the ISR holds it: appended under the `txns` lock, which
//! keeps each id's writes in order, with the id's `pending_state` set, so
//! other requests for it get CONCURRENT_TRANSACTIONS; awaited with the
//! lock released; then made current, or on failure the pending state is
//! cleared and the client told to retry.
//!
//! Ending a transaction, in Kafka's order: once the ISR holds PrepareCommit
//! (or PrepareAbort) the outcome is decided and the client answered; then
//! a COMMIT (ABORT) marker goes to every partition of the transaction
//! ([`markers`]): into the log of those this broker leads, through
//! WriteTxnMarkers to the leaders of the others, each an acks=-1 write the
//! ISR must hold; once every marker is, CompleteCommit (CompleteAbort).
//! A marker in `__consumer_offsets` makes the transaction's staged offsets
//! the group's (or drops them). A crash between the steps leaves a Prepare
//! state, which the next coordinator completes; an Ongoing transaction left
//! behind times out and is aborted.

pub mod codec;
pub mod markers;
pub mod peers;
pub mod state;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use strom_storage::batch::{encode_marker, ControlType};
use strom_storage::producer_state::AppendOrigin;
use strom_storage::StorageError;

use crate::coordinator_host::{replicated, CoordinatorHost};
use crate::group::OFFSETS_TOPIC;
use crate::internal_topic::{self, InternalTopic, MinInsyncReplicas};
use crate::locks::lock_recovering;
use crate::replica::Partition;
use crate::replication::purgatory::AwaitedAppend;
use markers::MarkerJob;
use peers::Peers;
use state::{InitRequest, InitTransition, TxnMetadata, TxnPartition, TxnResult, TxnState};
use strom_metadata::MetadataImage;

/// Kafka's internal topic for transaction state.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";
/// A transaction left in a Prepare state (its markers failed) is retried
/// after this long.
const PREPARED_RETRY_MS: i64 = 10_000;

/// Transaction settings from the broker config, Kafka's names.
#[derive(Debug, Clone)]
pub struct TxnConfig {
    /// `transaction.state.log.num.partitions`
    pub state_log_partitions: i32,
    /// `transaction.state.log.segment.bytes`
    pub state_log_segment_bytes: i64,
    /// `transaction.state.log.replication.factor`, if set (see [`internal_topic::InternalTopic`]).
    pub state_log_replication_factor: Option<i16>,
    /// `transaction.state.log.min.isr`, the topic's `min.insync.replicas`.
    pub state_log_min_isr: Option<i32>,
    /// `transaction.max.timeout.ms`
    pub max_timeout_ms: i32,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`
    pub abort_timed_out_interval_ms: u64,
    /// `transactional.id.expiration.ms`
    pub id_expiration_ms: i64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`
    pub remove_expired_interval_ms: u64,
    /// `transaction.partition.verification.enable`: a transactional produce
    /// must go to a partition added to the transaction.
    pub partition_verification: bool,
    /// `request.timeout.ms`: how long a state write waits for the ISR.
    pub request_timeout_ms: u64,
}

/// A transaction as ListTransactions reports it.
pub struct ListedTxn {
    pub transactional_id: String,
    pub producer_id: i64,
    pub state: TxnState,
}

pub struct TransactionCoordinator {
    config: TxnConfig,
    txns: Mutex<HashMap<String, TxnMetadata>>,
    /// Ids whose markers are being written, so the retry timer leaves them be.
    completing: Arc<Mutex<HashSet<String>>>,
    /// Markers for other brokers, to the task that sends them; as many
    /// jobs at most as transactions (each holds its transaction's claim).
    marker_jobs: tokio::sync::mpsc::UnboundedSender<MarkerJob>,
    marker_queue: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<MarkerJob>>>,
    /// Connections to the other brokers, for markers and verification.
    peers: Peers,
    /// Wakes the timers to complete the prepared transactions of a
    /// partition just loaded.
    loaded_prepared: tokio::sync::Notify,
    /// `__transaction_state` partitions whose leadership is being taken.
    loading: internal_topic::Loading,
}

/// A state appended to `__transaction_state`, its id pending until the ISR
/// holds it.
struct Staged {
    next: TxnMetadata,
    wait: AwaitedAppend,
}

/// How an InitProducerId goes on once its state is staged.
enum InitStaged {
    /// Answer with the staged producer id and epoch.
    Answer(Staged),
    /// An ongoing transaction is being fenced: abort it, then answer
    /// CONCURRENT_TRANSACTIONS.
    Fence(Staged),
    /// The id needs a new producer id: reserve one (outside the lock, as
    /// that may ask the controller) and stage again.
    NeedsProducerId,
}

/// One transaction's markers being written: the id stays claimed until the
/// claim drops, even if the writer panics, so the transaction is never
/// stuck as "completing".
pub struct CompletionClaim {
    completing: Arc<Mutex<HashSet<String>>>,
    transactional_id: String,
}

impl CompletionClaim {
    fn take(completing: &Arc<Mutex<HashSet<String>>>, transactional_id: &str) -> Option<Self> {
        let claimed =
            lock_recovering(completing, "transactions completing").insert(transactional_id.to_owned());
        claimed
            .then(|| Self { completing: completing.clone(), transactional_id: transactional_id.to_owned() })
    }
}

impl Drop for CompletionClaim {
    fn drop(&mut self) {
        lock_recovering(&self.completing, "transactions completing").remove(&self.transactional_id);
    }
}

impl TransactionCoordinator {
    pub fn new(config: TxnConfig) -> Self {
        let (marker_jobs, marker_queue) = tokio::sync::mpsc::unbounded_channel();
        Self {
            config,
            txns: Mutex::default(),
            completing: Arc::default(),
            marker_jobs,
            marker_queue: Mutex::new(Some(marker_queue)),
            peers: Peers::default(),
            loaded_prepared: tokio::sync::Notify::new(),
            loading: internal_topic::Loading::new(TRANSACTION_STATE_TOPIC),
        }
    }

    pub fn config(&self) -> &TxnConfig {
        &self.config
    }

    fn txns(&self) -> MutexGuard<'_, HashMap<String, TxnMetadata>> {
        lock_recovering(&self.txns, "transactions")
    }

    /// The `__transaction_state` partition that owns `transactional_id`.
    pub fn partition_for(&self, transactional_id: &str) -> i32 {
        internal_topic::partition_for(transactional_id, self.config.state_log_partitions)
    }

    /// NOT_COORDINATOR unless this broker leads the `__transaction_state`
    /// partition of `transactional_id`; COORDINATOR_LOAD_IN_PROGRESS while
    /// the leadership is being taken and the partition replayed.
    pub fn check_coordinator(
        &self,
        host: &dyn CoordinatorHost,
        transactional_id: &str,
    ) -> Result<(), ResponseError> {
        self.loading.check(host, self.partition_for(transactional_id))
    }

    /// Marks the `__transaction_state` partitions `image` gives this broker
    /// to lead as loading, before the leadership is applied; returns them.
    pub fn start_loading(&self, host: &dyn CoordinatorHost, image: &MetadataImage) -> Vec<i32> {
        self.loading.start(host.replicas(), image)
    }

    /// The partitions [`Self::start_loading`] marked are replayed.
    pub fn finish_loading(&self, loaded: &[i32]) {
        self.loading.finish(loaded);
    }

    /// Forgets the transactions of a `__transaction_state` partition this
    /// broker no longer leads: their requests get NOT_COORDINATOR from now on.
    pub fn unload_partition(&self, partition: i32) {
        let mut txns = self.txns();
        let before = txns.len();
        txns.retain(|id, _| self.partition_for(id) != partition);
        tracing::info!(partition, transactional_ids = before - txns.len(), "unloaded transactions");
    }

    /// `__transaction_state` as Kafka's settings create it.
    pub fn state_topic(&self) -> InternalTopic {
        let config = &self.config;
        InternalTopic {
            name: TRANSACTION_STATE_TOPIC,
            partitions: config.state_log_partitions,
            replication_factor: config.state_log_replication_factor,
            min_insync_replicas: MinInsyncReplicas::Topic(config.state_log_min_isr),
            segment_bytes: config.state_log_segment_bytes,
        }
    }

    /// Appends `metadata` (or, for `None`, a tombstone of `transactional_id`)
    /// as Kafka's acks=-1 write: refused (COORDINATOR_NOT_AVAILABLE) while
    /// the ISR is below `min.insync.replicas`.
    fn append_state(
        &self,
        host: &dyn CoordinatorHost,
        transactional_id: &str,
        metadata: Option<&TxnMetadata>,
    ) -> Result<AwaitedAppend, ResponseError> {
        let partition = host
            .replicas()
            .partition(TRANSACTION_STATE_TOPIC, self.partition_for(transactional_id))
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        let min_insync = host.min_insync_replicas(TRANSACTION_STATE_TOPIC);
        if partition.isr_size() < min_insync {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        let key = codec::encode_key(transactional_id);
        let value = metadata.map(codec::encode_value);
        let now = strom_storage::now_ms();
        let batch = strom_storage::batch::encode_batch(&[(Some(key), value)], now);
        let (info, _) = partition.append(&batch, now).map_err(|e| {
            tracing::error!(transactional_id, "writing transaction state failed: {e}");
            ResponseError::NotCoordinator
        })?;
        Ok(AwaitedAppend::new(partition, info.last_offset + 1, min_insync))
    }

    /// Appends `next` (a tombstone when Dead) and marks its id pending, so
    /// the id takes no other request until [`Self::settle`]. `next`'s id
    /// must be in `txns`.
    fn stage(
        &self,
        host: &dyn CoordinatorHost,
        txns: &mut HashMap<String, TxnMetadata>,
        mut next: TxnMetadata,
    ) -> Result<Staged, ResponseError> {
        next.pending_state = None;
        let value = (next.state != TxnState::Dead).then_some(&next);
        let wait = self.append_state(host, &next.transactional_id, value)?;
        if let Some(current) = txns.get_mut(&next.transactional_id) {
            current.pending_state = Some(next.state);
        }
        Ok(Staged { next, wait })
    }

    /// Waits, without the lock, until the ISR holds a staged state
    /// (`request.timeout.ms`); then makes it current (a Dead id is
    /// forgotten), or clears the pending state and returns Kafka's
    /// retriable error.
    async fn settle(&self, host: &dyn CoordinatorHost, staged: Staged) -> Result<(), ResponseError> {
        let timeout = Duration::from_millis(self.config.request_timeout_ms);
        let outcome = replicated(host, staged.wait, timeout).await;
        let Staged { next, .. } = staged;
        let mut txns = self.txns();
        let id = next.transactional_id.as_str();
        // Gone or reloaded meanwhile: the partition moved to another coordinator.
        let Some(current) = txns.get_mut(id).filter(|m| m.pending_state == Some(next.state)) else {
            return Err(ResponseError::NotCoordinator);
        };
        match outcome {
            Ok(()) if next.state == TxnState::Dead => drop(txns.remove(id)),
            Ok(()) => *current = next,
            Err(error) => {
                current.pending_state = None;
                tracing::warn!(transactional_id = id, ?error, "transaction state not replicated");
                return Err(error);
            }
        }
        Ok(())
    }

    /// InitProducerId with a transactional id: the id's producer id and a
    /// new epoch, fencing older producers of the id. An ongoing transaction
    /// is aborted first and the client told to retry (CONCURRENT_TRANSACTIONS).
    pub async fn init_producer_id(
        &self,
        host: &dyn CoordinatorHost,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), ResponseError> {
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return Err(ResponseError::InvalidTransactionTimeout);
        }
        self.check_coordinator(host, transactional_id)?;
        let mut fresh = None;
        let mut staged = self.stage_init(host, transactional_id, timeout_ms, expected, fresh)?;
        if let InitStaged::NeedsProducerId = staged {
            fresh = Some(host.next_producer_id().await?);
            staged = self.stage_init(host, transactional_id, timeout_ms, expected, fresh)?;
        }
        match staged {
            InitStaged::NeedsProducerId => Err(ResponseError::ConcurrentTransactions),
            InitStaged::Answer(staged) => {
                let answer = (staged.next.producer_id, staged.next.producer_epoch);
                self.settle(host, staged).await?;
                Ok(answer)
            }
            InitStaged::Fence(staged) => {
                self.settle(host, staged).await?;
                tracing::info!(transactional_id, "fenced the ongoing transaction of an older producer");
                self.complete(host, transactional_id)?;
                Err(ResponseError::ConcurrentTransactions)
            }
        }
    }

    /// InitProducerId's checks and its state, staged under the lock;
    /// `fresh` is a reserved producer id, for an id that needs one.
    fn stage_init(
        &self,
        host: &dyn CoordinatorHost,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        fresh: Option<i64>,
    ) -> Result<InitStaged, ResponseError> {
        let now_ms = strom_storage::now_ms();
        let request = InitRequest { timeout_ms, expected, now_ms };
        let mut txns = self.txns();
        let current = match (txns.get(transactional_id), fresh) {
            (Some(current), _) => current.clone(),
            (None, Some(id)) => TxnMetadata::new(transactional_id, id, timeout_ms, now_ms),
            (None, None) => return Ok(InitStaged::NeedsProducerId),
        };
        let (next, fence) = match current.prepare_init(request)? {
            InitTransition::Ready(next) => (next, false),
            InitTransition::NeedsNewProducerId => match fresh {
                Some(id) => (current.prepare_rotation(id, request), false),
                None => return Ok(InitStaged::NeedsProducerId),
            },
            InitTransition::FenceOngoing(fenced) => (fenced, true),
        };
        // As Kafka, a new id is known (Empty, no epoch) from its first write.
        txns.entry(transactional_id.to_owned()).or_insert(current);
        let staged = self.stage(host, &mut txns, next)?;
        Ok(if fence { InitStaged::Fence(staged) } else { InitStaged::Answer(staged) })
    }

    /// AddPartitionsToTxn and AddOffsetsToTxn.
    pub async fn add_partitions(
        &self,
        host: &dyn CoordinatorHost,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[TxnPartition],
    ) -> Result<(), ResponseError> {
        if transactional_id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        self.check_coordinator(host, transactional_id)?;
        let staged = {
            let mut txns = self.txns();
            let current = txns.get(transactional_id).ok_or(ResponseError::InvalidProducerIdMapping)?;
            match current.prepare_add_partitions(producer_id, epoch, partitions, strom_storage::now_ms())? {
                Some(next) => self.stage(host, &mut txns, next)?,
                None => return Ok(()),
            }
        };
        self.settle(host, staged).await
    }
    /// AddPartitionsToTxn v4+ with `verify_only`: one answer per partition.
    pub fn verify_partitions(
        &self,
        host: &dyn CoordinatorHost,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[TxnPartition],
    ) -> Vec<Option<ResponseError>> {
        let checked = match transactional_id {
            "" => Err(ResponseError::InvalidRequest),
            _ => self.check_coordinator(host, transactional_id),
        };
        if let Err(error) = checked {
            return vec![Some(error); partitions.len()];
        }
        let txns = self.txns();
        let verified = match txns.get(transactional_id) {
            None => Err(ResponseError::InvalidProducerIdMapping),
            Some(current) => current.verify_partitions(producer_id, epoch, partitions),
        };
        verified.unwrap_or_else(|error| vec![Some(error); partitions.len()])
    }

    /// Whether a transactional produce of `producer_id` at `epoch` may write
    /// to `partition`: it must be in the id's ongoing transaction.
    pub fn verify_produce(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partition: &TxnPartition,
    ) -> Result<(), ResponseError> {
        if !self.config.partition_verification {
            return Ok(());
        }
        let txns = self.txns();
        let current = txns.get(transactional_id).ok_or(ResponseError::InvalidProducerIdMapping)?;
        current.verify_produce(producer_id, epoch, partition)
    }

    /// EndTxn: answered once the ISR holds PrepareCommit (PrepareAbort),
    /// which decides the outcome; the markers follow ([`markers::deliver`]).
    pub async fn end_txn(
        &self,
        host: &dyn CoordinatorHost,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        result: TxnResult,
    ) -> Result<(), ResponseError> {
        if transactional_id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        self.check_coordinator(host, transactional_id)?;
        let staged = {
            let mut txns = self.txns();
            let current = txns.get(transactional_id).ok_or(ResponseError::InvalidProducerIdMapping)?;
            let Some(next) = current.prepare_end(producer_id, epoch, result, strom_storage::now_ms())? else {
                return Ok(());
            };
            self.stage(host, &mut txns, next)?
        };
        self.settle(host, staged).await?;
        if let Err(error) = self.complete(host, transactional_id) {
            // Decided all the same: the retry timer writes the markers.
            tracing::warn!(transactional_id, "transaction markers not yet written: {error:?}");
        }
        Ok(())
    }

    /// Queues the markers of a prepared transaction for
    /// [`markers::deliver`], which completes it once the ISR of every
    /// partition holds its marker.
    fn complete(&self, host: &dyn CoordinatorHost, transactional_id: &str) -> Result<(), ResponseError> {
        let Some(claim) = CompletionClaim::take(&self.completing, transactional_id) else {
            return Err(ResponseError::ConcurrentTransactions);
        };
        let prepared = self.txns().get(transactional_id).cloned();
        let Some(prepared) = prepared.filter(|m| m.state.is_prepared() && m.pending_state.is_none()) else {
            return Ok(());
        };
        crate::failpoint::reach(crate::failpoint::TXN_PREPARED);
        let marker = TxnMarker {
            producer_id: prepared.producer_id,
            producer_epoch: prepared.producer_epoch,
            coordinator_epoch: self.coordinator_epoch(host, transactional_id)?,
            result: prepared.pending_result().expect("prepared"),
        };
        let job = MarkerJob {
            transactional_id: transactional_id.to_owned(),
            marker,
            partitions: prepared.partitions.into_iter().collect(),
            claim,
        };
        self.marker_jobs.send(job).map_err(|_| ResponseError::CoordinatorNotAvailable)
    }

    /// The coordinator epoch markers carry: the leader epoch of the
    /// `__transaction_state` partition of `transactional_id`.
    /// Asks the image first: one that lacks the topic is too old to say
    /// which of the transaction's topics are gone.
    fn coordinator_epoch(
        &self,
        host: &dyn CoordinatorHost,
        transactional_id: &str,
    ) -> Result<i32, ResponseError> {
        self.check_coordinator(host, transactional_id)?;
        let partition = host
            .replicas()
            .partition(TRANSACTION_STATE_TOPIC, self.partition_for(transactional_id))
            .filter(|p| p.is_leader())
            .ok_or(ResponseError::NotCoordinator)?;
        Ok(partition.leader_epoch())
    }

    /// Whether `job` is still this coordinator's to send: its transaction
    /// prepared at the same producer epoch and the coordinator epoch
    /// unchanged (Kafka cancels the markers otherwise).
    fn still_sending(&self, host: &dyn CoordinatorHost, job: &MarkerJob) -> bool {
        let id = &job.transactional_id;
        let marker = &job.marker;
        let same_txn = self.txns().get(id).is_some_and(|m| {
            m.state.is_prepared()
                && m.producer_id == marker.producer_id
                && m.producer_epoch == marker.producer_epoch
        });
        same_txn && self.coordinator_epoch(host, id) == Ok(marker.coordinator_epoch)
    }

    /// Every marker written: the transaction's Complete state.
    async fn finish(&self, host: &dyn CoordinatorHost, transactional_id: &str) -> Result<(), ResponseError> {
        let staged = {
            let mut txns = self.txns();
            // Nothing else moves a prepared transaction: it is still this one.
            let Some(next) =
                txns.get(transactional_id).and_then(|m| m.prepare_complete(strom_storage::now_ms()))
            else {
                return Ok(());
            };
            self.stage(host, &mut txns, next)?
        };
        self.settle(host, staged).await
    }
    /// DescribeTransactions: the metadata of `transactional_id`.
    pub fn describe(&self, transactional_id: &str) -> Result<TxnMetadata, ResponseError> {
        if transactional_id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        let txns = self.txns();
        txns.get(transactional_id)
            .filter(|m| m.state != TxnState::Dead)
            .cloned()
            .ok_or(ResponseError::TransactionalIdNotFound)
    }

    /// ListTransactions: every id passing the filters (empty filters pass
    /// all; `min_duration_ms` < 0 passes all), sorted by id.
    pub fn list(&self, states: &[TxnState], producer_ids: &[i64], min_duration_ms: i64) -> Vec<ListedTxn> {
        let now_ms = strom_storage::now_ms();
        let txns = self.txns();
        let mut listed: Vec<ListedTxn> = txns
            .values()
            .filter(|m| m.state != TxnState::Dead)
            .filter(|m| states.is_empty() || states.contains(&m.state))
            .filter(|m| producer_ids.is_empty() || producer_ids.contains(&m.producer_id))
            // Kafka's test, whatever the state: started more than the duration ago.
            .filter(|m| min_duration_ms < 0 || now_ms - m.start_timestamp_ms > min_duration_ms)
            .map(|m| ListedTxn {
                transactional_id: m.transactional_id.clone(),
                producer_id: m.producer_id,
                state: m.state,
            })
            .collect();
        listed.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        listed
    }

    /// Replays the `__transaction_state` partitions this broker leads, at start.
    pub fn load(&self, host: &dyn CoordinatorHost) -> Result<(), StorageError> {
        let Some(topic) = host.replicas().topic(TRANSACTION_STATE_TOPIC) else { return Ok(()) };
        for partition in topic.partitions.values().filter(|p| p.is_leader()) {
            self.load_partition(partition)?;
        }
        Ok(())
    }

    /// Replays one `__transaction_state` partition, when this broker starts
    /// leading it; the timers then finish the transactions it left
    /// prepared ([`Self::complete_prepared`]).
    pub fn load_partition(&self, partition: &Partition) -> Result<(), StorageError> {
        // To the log end, as Kafka's coordinator loads: a write every
        // replica holds may still be above the high watermark inherited as
        // a follower.
        let records = partition.read_records_to_log_end()?;
        // Takes no lock for a new partition: whoever created the topic may
        // hold it while the creation is applied.
        if records.is_empty() {
            return Ok(());
        }
        let mut loaded = HashMap::new();
        for record in records {
            let Some(id) = record.key.as_deref().and_then(|k| codec::decode_key(k).ok()) else {
                continue;
            };
            match record.value.as_deref().map(|v| codec::decode_value(&id, v)) {
                None => {
                    loaded.remove(&id);
                }
                Some(Ok(metadata)) => {
                    loaded.insert(id, metadata);
                }
                Some(Err(e)) => tracing::warn!(transactional_id = id, "skipping transaction record: {e}"),
            }
        }
        loaded.retain(|_, m| m.state != TxnState::Dead);
        let prepared = loaded.values().filter(|m| m.state.is_prepared()).count();
        let number = partition.tp.partition;
        tracing::info!(partition = number, transactional_ids = loaded.len(), prepared, "loaded transactions");
        self.txns().extend(loaded);
        // Served from here on: the prepared transactions complete as any would.
        self.loading.finish(&[number]);
        if prepared > 0 {
            self.loaded_prepared.notify_one();
        }
        Ok(())
    }

    /// Writes the markers of every prepared transaction at least
    /// `min_age_ms` old that is not being completed already.
    pub async fn complete_prepared(&self, host: &dyn CoordinatorHost, min_age_ms: i64) {
        let now_ms = strom_storage::now_ms();
        let prepared: Vec<String> = self
            .txns()
            .values()
            .filter(|m| m.state.is_prepared() && now_ms - m.last_update_timestamp_ms >= min_age_ms)
            .map(|m| m.transactional_id.clone())
            .collect();
        for id in prepared {
            match self.complete(host, &id) {
                // Its markers are on their way already.
                Ok(()) | Err(ResponseError::ConcurrentTransactions) => {}
                Err(error) => {
                    tracing::warn!(transactional_id = id, "transaction markers still failing: {error:?}")
                }
            }
        }
    }

    /// Runs until the broker stops: completes loaded prepared transactions,
    /// aborts transactions past their timeout, retries prepared ones whose
    /// markers failed and forgets ids idle past
    /// `transactional.id.expiration.ms`. Each duty runs as its own task, so
    /// none waits for another's writes to replicate.
    pub async fn run_timers(host: Arc<dyn CoordinatorHost>) {
        let coordinator = host.transactions();
        let config = coordinator.config.clone();
        let mut stopping = host.stopping();
        let taken = lock_recovering(&coordinator.marker_queue, "marker queue").take();
        let Some(mut marker_jobs) = taken else { return };
        let mut abort = tokio::time::interval(Duration::from_millis(config.abort_timed_out_interval_ms));
        let mut expire = tokio::time::interval(Duration::from_millis(config.remove_expired_interval_ms));
        loop {
            let run = host.clone();
            tokio::select! {
                _ = crate::shutdown::stopped(&mut stopping) => return,
                Some(job) = marker_jobs.recv() => {
                    tokio::spawn(markers::deliver(run, job));
                }
                _ = coordinator.loaded_prepared.notified() => {
                    tokio::spawn(async move { run.transactions().complete_prepared(&*run, 0).await });
                }
                _ = abort.tick() => {
                    tokio::spawn(async move {
                        run.transactions().abort_timed_out(&*run, strom_storage::now_ms()).await
                    });
                }
                _ = expire.tick() => {
                    tokio::spawn(async move { run.transactions().expire_ids(&*run).await });
                }
            }
        }
    }

    /// Kafka's `abortTimedOutTransactions`: each ongoing transaction past its
    /// timeout is fenced (its epoch bumped, so its producer learns of it)
    /// and aborted; prepared ones left behind get their markers again.
    pub async fn abort_timed_out(&self, host: &dyn CoordinatorHost, now_ms: i64) {
        let timed_out: Vec<String> = self
            .txns()
            .values()
            .filter(|m| m.timed_out(now_ms))
            .map(|m| m.transactional_id.clone())
            .collect();
        for id in timed_out {
            let staged = {
                let mut txns = self.txns();
                let Some(current) = txns.get(&id).filter(|m| m.timed_out(now_ms)) else { continue };
                let fenced = current.prepare_fence(now_ms);
                self.stage(host, &mut txns, fenced)
            };
            let aborted = match staged {
                Ok(staged) => self.settle(host, staged).await,
                Err(error) => Err(error),
            };
            match aborted {
                Ok(()) => match self.complete(host, &id) {
                    Ok(()) => tracing::info!(transactional_id = id, "aborted a transaction past its timeout"),
                    Err(error) => {
                        tracing::warn!(transactional_id = id, "aborting a timed out transaction: {error:?}")
                    }
                },
                Err(error) => {
                    tracing::warn!(transactional_id = id, "fencing a timed out transaction: {error:?}")
                }
            }
        }
        self.complete_prepared(host, PREPARED_RETRY_MS).await;
    }

    /// Kafka's transactional id expiration: ids with no transaction running
    /// and no change for `transactional.id.expiration.ms` are tombstoned.
    pub async fn expire_ids(&self, host: &dyn CoordinatorHost) {
        let now_ms = strom_storage::now_ms();
        let expired: Vec<Staged> = {
            let mut txns = self.txns();
            let expired: Vec<TxnMetadata> = txns
                .values()
                .filter(|m| m.pending_state.is_none())
                .filter(|m| {
                    matches!(m.state, TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort)
                })
                .filter(|m| now_ms - m.last_update_timestamp_ms >= self.config.id_expiration_ms)
                .map(|m| TxnMetadata { state: TxnState::Dead, last_update_timestamp_ms: now_ms, ..m.clone() })
                .collect();
            expired.into_iter().filter_map(|dead| self.stage(host, &mut txns, dead).ok()).collect()
        };
        for staged in expired {
            let id = staged.next.transactional_id.clone();
            if self.settle(host, staged).await.is_ok() {
                tracing::info!(transactional_id = id, "expired a transactional id");
            }
        }
    }
}

/// A transaction marker as its coordinator sends it: which producer's
/// transaction ends, how, and from which coordinator epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnMarker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The leader epoch of the coordinator's `__transaction_state` partition.
    pub coordinator_epoch: i32,
    pub result: TxnResult,
}

/// Writes each marker into its partition, led here, as Kafka's acks=-1
/// write: appended, then awaited until the ISR holds it (`timeout` for
/// all). A marker held by the ISR in `__consumer_offsets` then ends the
/// transaction's staged offsets there. Returns each marker's error, in
/// order: WriteTxnMarkers answers these per partition.
pub async fn write_markers(
    host: &dyn CoordinatorHost,
    markers: &[(TxnMarker, TxnPartition)],
    timeout: Duration,
) -> Vec<Option<ResponseError>> {
    let mut errors = vec![None; markers.len()];
    let mut waits = Vec::new();
    for (i, (marker, (topic, index))) in markers.iter().enumerate() {
        match append_marker(host, marker, topic, *index) {
            Ok(Some(wait)) => waits.push((i, wait)),
            Ok(None) => {}
            Err(error) => errors[i] = Some(error),
        }
    }
    let deadline = tokio::time::Instant::now() + timeout;
    for (i, wait) in waits {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if let Err(error) = host.await_append(wait, left).await {
            errors[i] = Some(error);
            continue;
        }
        let (marker, (topic, index)) = &markers[i];
        if topic == OFFSETS_TOPIC {
            host.groups().complete_txn(marker.producer_id, *index, marker.result == TxnResult::Commit);
        }
    }
    errors
}

/// Appends one marker, refused (NOT_ENOUGH_REPLICAS) while the ISR is
/// below `min.insync.replicas`, and from an older coordinator than the
/// partition last heard from (TRANSACTION_COORDINATOR_FENCED). None when
/// a newer producer epoch already ended the transaction here: no marker
/// is owed.
fn append_marker(
    host: &dyn CoordinatorHost,
    marker: &TxnMarker,
    topic: &str,
    index: i32,
) -> Result<Option<AwaitedAppend>, ResponseError> {
    // Not (or no longer) led here: the coordinator sends it to the leader,
    // or drops it once the image says the topic is gone.
    let partition = host.replicas().leader_partition(topic, index)?;
    let min_insync = host.min_insync_replicas(topic);
    if partition.isr_size() < min_insync {
        return Err(ResponseError::NotEnoughReplicas);
    }
    let control = match marker.result {
        TxnResult::Commit => ControlType::Commit,
        TxnResult::Abort => ControlType::Abort,
    };
    let now = strom_storage::now_ms();
    let batch =
        encode_marker(control, marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, now);
    match partition.append_as(&batch, now, AppendOrigin::Coordinator) {
        Ok((info, _)) => Ok(Some(AwaitedAppend::new(partition, info.last_offset + 1, min_insync))),
        Err(StorageError::InvalidProducerEpoch(e)) => {
            tracing::info!(topic, partition = index, "skipping a stale marker: {e}");
            Ok(None)
        }
        Err(e) => {
            tracing::error!(topic, partition = index, "writing a transaction marker failed: {e}");
            Err(crate::error::storage_error(&e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use crate::coordinator_host::testing::HeldReplication;
    use crate::replica::VerifiedAppendError;
    use crate::server::Broker;
    use std::path::Path;
    use strom_metadata::block_on;
    use strom_metadata::NewTopic;

    /// A single node whose coordinators' topics exist, as FindCoordinator
    /// leaves them.
    fn open_broker(dir: &Path) -> Arc<Broker> {
        let overrides = [("log.dirs".to_owned(), dir.display().to_string())];
        let broker = Broker::open(BrokerConfig::from_properties("", &overrides).unwrap()).unwrap();
        for topic in [broker.transactions().state_topic(), broker.groups().offsets_topic()] {
            block_on(internal_topic::create(&*broker, &topic)).unwrap();
        }
        broker
    }

    fn create_topic(broker: &Broker, name: &str, partitions: i32) {
        let topic = NewTopic { name: name.into(), partitions, replication_factor: 1, ..Default::default() };
        strom_metadata::block_on(broker.controller().create_topic(topic, false)).unwrap();
    }

    /// Writes one transactional record of `producer` into `topic`-`index`,
    /// as TxnOffsetCommit writes its offsets.
    fn write_in_txn(broker: &Broker, topic: &str, index: i32, (producer_id, epoch): (i64, i16)) {
        let record = [(None, Some(bytes::Bytes::from_static(b"v")), 0)];
        let batch = strom_storage::batch::encode_transactional(record, producer_id, epoch);
        let partition = broker.replicas().partition(topic, index).unwrap();
        partition.append_as(&batch, 0, AppendOrigin::Coordinator).unwrap();
    }

    fn stable(broker: &Broker, topic: &str, index: i32) -> bool {
        let partition = broker.replicas().partition(topic, index).unwrap();
        partition.last_stable_offset() == partition.high_watermark()
    }

    /// A producer's transactional batch as a client sends it: sequence 0.
    fn client_batch(producer_id: i64, epoch: i16) -> Vec<u8> {
        let record = [(None, Some(bytes::Bytes::from_static(b"v")), 0)];
        let mut batch = strom_storage::batch::encode_transactional(record, producer_id, epoch).to_vec();
        use strom_storage::batch::{compute_crc, BASE_SEQUENCE, CRC};
        batch[BASE_SEQUENCE..BASE_SEQUENCE + 4].copy_from_slice(&0i32.to_be_bytes());
        let crc = compute_crc(&batch);
        batch[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
        batch
    }

    /// A transaction of "tx" that `__consumer_offsets` was added to, and
    /// the offset of group "g" for `t`-0 it commits.
    struct OffsetsInTxn {
        producer: (i64, i16),
        offsets: TxnPartition,
        commit: crate::group::TxnCommit,
        entry: crate::group::CommitEntry,
    }

    fn offsets_in_txn(broker: &Arc<Broker>) -> OffsetsInTxn {
        create_topic(broker, "t", 1);
        let coordinator = broker.transactions();
        let (producer_id, producer_epoch) =
            block_on(coordinator.init_producer_id(&**broker, "tx", 60_000, None)).unwrap();
        let offsets = (OFFSETS_TOPIC.to_owned(), broker.groups().partition_for("g"));
        let added = std::slice::from_ref(&offsets);
        block_on(coordinator.add_partitions(&**broker, "tx", producer_id, producer_epoch, added)).unwrap();
        let commit = crate::group::TxnCommit {
            group_id: "g".into(),
            producer_id,
            producer_epoch,
            generation: -1,
            member_id: String::new(),
            instance_id: None,
        };
        let entry = crate::group::CommitEntry {
            topic: "t".into(),
            partition: 0,
            offset: 1,
            leader_epoch: -1,
            metadata: None,
        };
        OffsetsInTxn { producer: (producer_id, producer_epoch), offsets, commit, entry }
    }

    /// What the timers' marker task does: delivers every queued job.
    fn deliver_markers(broker: &Arc<Broker>) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let host: Arc<dyn CoordinatorHost> = broker.clone();
        loop {
            let mut queue = lock_recovering(&broker.transactions().marker_queue, "marker queue");
            let Ok(job) = queue.as_mut().expect("no timers run in tests").try_recv() else { return };
            drop(queue);
            runtime.block_on(markers::deliver(host.clone(), job));
        }
    }

    fn verify(broker: &Broker, (producer_id, epoch): (i64, i16)) -> Result<(), ResponseError> {
        broker.transactions().verify_produce("tx", producer_id, epoch, &("t".to_owned(), 0))
    }

    #[test]
    fn a_coordinator_still_loading_the_ids_partition_answers_load_in_progress_not_an_unknown_id() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        let coordinator = broker.transactions();
        let partition = coordinator.partition_for("tx");
        let tp = ("t".to_owned(), 0);
        coordinator.loading.mark(partition);
        let loading = Some(ResponseError::CoordinatorLoadInProgress);
        assert_eq!(
            coordinator.verify_partitions(&*broker, "tx", 1, 0, std::slice::from_ref(&tp)),
            vec![loading]
        );
        assert_eq!(
            block_on(coordinator.add_partitions(&*broker, "tx", 1, 0, std::slice::from_ref(&tp))),
            Err(ResponseError::CoordinatorLoadInProgress)
        );
        coordinator.finish_loading(&[partition]);
        let unknown = Some(ResponseError::InvalidProducerIdMapping);
        assert_eq!(coordinator.verify_partitions(&*broker, "tx", 1, 0, &[tp]), vec![unknown], "once loaded");
    }

    #[test]
    fn a_transactional_batch_opens_a_transaction_only_once_verified() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        create_topic(&broker, "t", 1);
        let producer =
            block_on(broker.transactions().init_producer_id(&*broker, "tx", 60_000, None)).unwrap();
        let partition = broker.replicas().partition("t", 0).unwrap();
        let batch = client_batch(producer.0, producer.1);
        let refused = partition.append(&batch, 0);
        assert!(matches!(refused, Err(StorageError::InvalidTxnState(_))), "no verification: {refused:?}");
        let unverified =
            block_on(partition.append_verified(&batch, 0, producer.0, async { verify(&broker, producer) }));
        assert!(matches!(
            unverified,
            Err(VerifiedAppendError::Unverified(ResponseError::TransactionAbortable))
        ));
        assert_eq!(partition.high_watermark(), 0);

        block_on(broker.transactions().add_partitions(
            &*broker,
            "tx",
            producer.0,
            producer.1,
            &[("t".to_owned(), 0)],
        ))
        .unwrap();
        block_on(partition.append_verified(&batch, 0, producer.0, async { verify(&broker, producer) }))
            .unwrap();
        let mut next = client_batch(producer.0, producer.1);
        next[strom_storage::batch::BASE_SEQUENCE + 3] = 1;
        let crc = strom_storage::batch::compute_crc(&next);
        next[strom_storage::batch::CRC..strom_storage::batch::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        let unasked = async { panic!("the open transaction needs no second word") };
        block_on(partition.append_verified(&next, 0, producer.0, unasked)).unwrap();
        assert_eq!(partition.high_watermark(), 2);
    }

    #[test]
    fn a_marker_between_verification_and_append_refuses_the_batch() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        create_topic(&broker, "t", 1);
        let coordinator = broker.transactions();
        let producer = block_on(coordinator.init_producer_id(&*broker, "tx", 60_000, None)).unwrap();
        block_on(coordinator.add_partitions(&*broker, "tx", producer.0, producer.1, &[("t".to_owned(), 0)]))
            .unwrap();
        let partition = broker.replicas().partition("t", 0).unwrap();
        // The coordinator vouches for the partition, then the transaction
        // ends (its marker written) before the batch reaches the log.
        let verify_then_abort = async {
            let verified = verify(&broker, producer);
            coordinator.end_txn(&*broker, "tx", producer.0, producer.1, TxnResult::Abort).await.unwrap();
            deliver_markers(&broker);
            verified
        };
        let batch = client_batch(producer.0, producer.1);
        let appended = block_on(partition.append_verified(&batch, 0, producer.0, verify_then_abort));
        assert!(
            matches!(appended, Err(VerifiedAppendError::Storage(StorageError::InvalidTxnState(_)))),
            "{appended:?}"
        );
        assert_eq!(partition.high_watermark(), 1, "only the marker");
        assert!(stable(&broker, "t", 0), "no transaction left open behind the marker");
    }

    #[test]
    fn txn_offsets_after_the_transaction_ended_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        let coordinator = broker.transactions();
        let OffsetsInTxn { producer, offsets, commit, entry } = offsets_in_txn(&broker);
        // Verified, then the transaction's abort marker lands before the
        // offsets do (written here directly: the group lock is held).
        let partition = broker.replicas().partition(OFFSETS_TOPIC, offsets.1).unwrap();
        let verify_then_abort = async {
            let verified = coordinator.verify_produce("tx", producer.0, producer.1, &offsets);
            let marker = encode_marker(ControlType::Abort, producer.0, producer.1, 0, 0);
            partition.append_as(&marker, 0, AppendOrigin::Coordinator).unwrap();
            verified
        };
        let outcomes = block_on(broker.groups().txn_commit(&*broker, &commit, &[entry], verify_then_abort));
        assert_eq!(outcomes, vec![Some(ResponseError::InvalidTxnState)]);
        assert!(stable(&broker, OFFSETS_TOPIC, offsets.1), "no transaction left open in __consumer_offsets");
    }

    #[test]
    fn a_marker_counts_only_once_the_isr_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        let OffsetsInTxn { producer: (producer_id, producer_epoch), offsets, commit, entry } =
            offsets_in_txn(&broker);
        let staged = block_on(broker.groups().txn_commit(&*broker, &commit, &[entry], async { Ok(()) }));
        assert_eq!(staged, vec![None]);
        let pending = || broker.groups().has_pending_txn_offset("g", "t", 0);

        let marker =
            TxnMarker { producer_id, producer_epoch, coordinator_epoch: 0, result: TxnResult::Commit };
        let writes = [(marker, offsets.clone())];
        let timeout = Duration::from_secs(30);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let timed_out = HeldReplication::new(&broker);
        timed_out.replicate(Err(ResponseError::RequestTimedOut));
        let written = runtime.block_on(write_markers(&timed_out, &writes, timeout));
        assert_eq!(written, vec![Some(ResponseError::RequestTimedOut)], "the coordinator retries it");
        assert!(pending(), "a marker the ISR does not hold ends nothing");

        let held = HeldReplication::new(&broker);
        runtime.block_on(async {
            let write = write_markers(&held, &writes, timeout);
            tokio::pin!(write);
            tokio::select! {
                biased;
                answer = &mut write => panic!("answered before replicated: {answer:?}"),
                _ = tokio::task::yield_now() => {}
            }
            assert!(pending(), "still waiting for the ISR");
            held.replicate(Ok(()));
            assert_eq!(write.await, vec![None]);
        });
        assert!(!pending(), "the commit made the offsets the group's");
    }

    #[test]
    fn a_transaction_prepared_before_a_crash_is_completed_once_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        create_topic(&broker, "t", 2);
        let coordinator = broker.transactions();
        let producer = block_on(coordinator.init_producer_id(&*broker, "tx", 60_000, None)).unwrap();
        let partitions = [("t".to_owned(), 0), ("t".to_owned(), 1)];
        block_on(coordinator.add_partitions(&*broker, "tx", producer.0, producer.1, &partitions)).unwrap();
        write_in_txn(&broker, "t", 0, producer);
        let staged = {
            // The crash comes after PrepareCommit is written, before any marker.
            let mut txns = coordinator.txns.lock().unwrap();
            let prepared = txns["tx"].prepare_end(producer.0, producer.1, TxnResult::Commit, 0).unwrap();
            coordinator.stage(&*broker, &mut txns, prepared.unwrap()).unwrap()
        };
        block_on(coordinator.settle(&*broker, staged)).unwrap();
        assert!(!stable(&broker, "t", 0));
        drop(broker);
        let broker = open_broker(dir.path());
        assert_eq!(broker.transactions().describe("tx").unwrap().state, TxnState::PrepareCommit);
        // What the timers do once woken by the load.
        block_on(broker.transactions().complete_prepared(&*broker, 0));
        deliver_markers(&broker);
        assert_eq!(broker.transactions().describe("tx").unwrap().state, TxnState::CompleteCommit);
        assert!(stable(&broker, "t", 0), "the commit marker was written at start");
        let end = broker.replicas().partition("t", 1).unwrap().high_watermark();
        assert_eq!(end, 1, "every partition of the transaction got its marker");
    }

    #[test]
    fn a_transaction_past_its_timeout_is_fenced_and_aborted() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        create_topic(&broker, "t", 1);
        let coordinator = broker.transactions();
        let producer = block_on(coordinator.init_producer_id(&*broker, "tx", 1_000, None)).unwrap();
        block_on(coordinator.add_partitions(&*broker, "tx", producer.0, producer.1, &[("t".to_owned(), 0)]))
            .unwrap();
        write_in_txn(&broker, "t", 0, producer);
        let started = coordinator.describe("tx").unwrap().start_timestamp_ms;
        block_on(coordinator.abort_timed_out(&*broker, started + 1_000));
        assert_eq!(coordinator.describe("tx").unwrap().state, TxnState::Ongoing, "not yet past the timeout");
        block_on(coordinator.abort_timed_out(&*broker, started + 1_001));
        deliver_markers(&broker);
        let aborted = coordinator.describe("tx").unwrap();
        assert_eq!((aborted.state, aborted.producer_epoch), (TxnState::CompleteAbort, producer.1 + 1));
        assert!(stable(&broker, "t", 0));
        let end = block_on(coordinator.end_txn(&*broker, "tx", producer.0, producer.1, TxnResult::Commit));
        assert_eq!(end, Err(ResponseError::ProducerFenced), "the old epoch is fenced");
        let partition = broker.replicas().partition("t", 0).unwrap();
        let aborted = partition
            .log()
            .lock()
            .unwrap()
            .collect_aborted_transactions(0, partition.high_watermark())
            .unwrap();
        assert_eq!(aborted.len(), 1);
    }

    #[test]
    fn a_state_being_replicated_holds_off_the_id_and_takes_effect_once_replicated() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        create_topic(&broker, "t", 2);
        let coordinator = broker.transactions();
        let (id, epoch) = block_on(coordinator.init_producer_id(&*broker, "tx", 60_000, None)).unwrap();
        block_on(coordinator.add_partitions(&*broker, "tx", id, epoch, &[("t".to_owned(), 0)])).unwrap();
        write_in_txn(&broker, "t", 0, (id, epoch));
        let held = HeldReplication::new(&broker);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let end = coordinator.end_txn(&held, "tx", id, epoch, TxnResult::Commit);
            tokio::pin!(end);
            // Runs the EndTxn up to its wait for the ISR.
            tokio::select! {
                biased;
                answer = &mut end => panic!("answered before replicated: {answer:?}"),
                _ = tokio::task::yield_now() => {}
            }
            let current = coordinator.describe("tx").unwrap();
            assert_eq!(current.state, TxnState::Ongoing, "PrepareCommit is not current before replicated");
            assert_eq!(current.pending_state, Some(TxnState::PrepareCommit));
            let concurrent = ResponseError::ConcurrentTransactions;
            let more = [("t".to_owned(), 1)];
            assert_eq!(coordinator.add_partitions(&*broker, "tx", id, epoch, &more).await, Err(concurrent));
            assert_eq!(
                coordinator.end_txn(&*broker, "tx", id, epoch, TxnResult::Abort).await,
                Err(concurrent)
            );
            assert_eq!(coordinator.init_producer_id(&*broker, "tx", 60_000, None).await, Err(concurrent));
            held.replicate(Ok(()));
            end.await.unwrap();
        });
        // Answered once decided, before any marker is written.
        assert_eq!(coordinator.describe("tx").unwrap().state, TxnState::PrepareCommit);
        assert!(!stable(&broker, "t", 0));
        deliver_markers(&broker);
        let completed = coordinator.describe("tx").unwrap();
        assert_eq!((completed.state, completed.pending_state), (TxnState::CompleteCommit, None));
        assert!(stable(&broker, "t", 0), "the commit marker is written");
    }

    #[test]
    fn a_state_that_does_not_replicate_is_undone_and_the_client_told_to_retry() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        create_topic(&broker, "t", 1);
        let coordinator = broker.transactions();
        let (id, epoch) = block_on(coordinator.init_producer_id(&*broker, "tx", 60_000, None)).unwrap();
        block_on(coordinator.add_partitions(&*broker, "tx", id, epoch, &[("t".to_owned(), 0)])).unwrap();
        let timed_out = HeldReplication::new(&broker);
        timed_out.replicate(Err(ResponseError::RequestTimedOut));
        let end = block_on(coordinator.end_txn(&timed_out, "tx", id, epoch, TxnResult::Commit));
        assert_eq!(end, Err(ResponseError::CoordinatorNotAvailable));
        let current = coordinator.describe("tx").unwrap();
        assert_eq!((current.state, current.pending_state), (TxnState::Ongoing, None));

        let moved = HeldReplication::new(&broker);
        moved.replicate(Err(ResponseError::NotLeaderOrFollower));
        let init = block_on(coordinator.init_producer_id(&moved, "other", 60_000, None));
        assert_eq!(init, Err(ResponseError::NotCoordinator));
        assert_eq!(coordinator.describe("other").unwrap().pending_state, None);

        // The client's retry, replicated this time.
        block_on(coordinator.end_txn(&*broker, "tx", id, epoch, TxnResult::Commit)).unwrap();
        deliver_markers(&broker);
        assert_eq!(coordinator.describe("tx").unwrap().state, TxnState::CompleteCommit);
    }

    #[test]
    fn invalid_timeouts_and_unknown_ids_get_kafkas_errors() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        let coordinator = broker.transactions();
        assert_eq!(
            block_on(coordinator.init_producer_id(&*broker, "tx", 0, None)),
            Err(ResponseError::InvalidTransactionTimeout)
        );
        assert_eq!(
            block_on(coordinator.init_producer_id(&*broker, "tx", 900_001, None)),
            Err(ResponseError::InvalidTransactionTimeout)
        );
        assert_eq!(
            block_on(coordinator.add_partitions(&*broker, "nobody", 1, 0, &[])),
            Err(ResponseError::InvalidProducerIdMapping)
        );
        assert_eq!(coordinator.describe("nobody").unwrap_err(), ResponseError::TransactionalIdNotFound);
        assert_eq!(coordinator.describe("").unwrap_err(), ResponseError::InvalidRequest);
    }

    #[test]
    fn transactional_ids_map_to_kafkas_partitions() {
        let coordinator = TransactionCoordinator::new(BrokerConfig::embedded_defaults().transactions);
        assert_eq!(coordinator.partition_for("polygenelubricants"), 0);
        assert_eq!(coordinator.partition_for("hello"), 22);
    }

    #[test]
    fn a_panic_while_writing_markers_releases_the_transaction() {
        let completing = Arc::default();
        let panicked = std::thread::scope(|s| {
            s.spawn(|| {
                let _claim = CompletionClaim::take(&completing, "tx").unwrap();
                assert!(CompletionClaim::take(&completing, "tx").is_none(), "claimed once at a time");
                panic!("injected panic while writing markers");
            })
            .join()
        });
        assert!(panicked.is_err());
        assert!(CompletionClaim::take(&completing, "tx").is_some());
    }
}
