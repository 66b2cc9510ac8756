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
//! Ending a transaction: PrepareCommit (or PrepareAbort) is written, then a
//! COMMIT (ABORT) marker goes straight into the log of every partition of
//! the transaction this broker leads and, through WriteTxnMarkers
//! ([`markers`]), to the leaders of the others; once every marker is
//! written, CompleteCommit (CompleteAbort). A marker in `__consumer_offsets` makes
//! the transaction's staged offsets the group's (or drops them). A crash
//! between the steps leaves a Prepare state, which start-up completes; an
//! Ongoing transaction left behind times out and is aborted.

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

use crate::group::OFFSETS_TOPIC;
use crate::internal_topic;
use crate::locks::lock_recovering;
use crate::replica::Partition;
use crate::server::Broker;
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
    /// `transaction.state.log.replication.factor`, if set (see [`internal_topic::ensure`]).
    pub state_log_replication_factor: Option<i16>,
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
    /// `__transaction_state` partitions whose leadership is being taken.
    loading: internal_topic::Loading,
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
    pub fn check_coordinator(&self, broker: &Broker, transactional_id: &str) -> Result<(), ResponseError> {
        self.loading.check(broker, self.partition_for(transactional_id))
    }

    /// Marks the `__transaction_state` partitions `image` gives this broker
    /// to lead as loading, before the leadership is applied; returns them.
    pub fn start_loading(&self, broker: &Broker, image: &MetadataImage) -> Vec<i32> {
        self.loading.start(broker, image)
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

    /// Creates `__transaction_state` on first use, with Kafka's settings.
    pub fn ensure_topic(&self, broker: &Broker) -> Result<(), ResponseError> {
        let config = &self.config;
        internal_topic::ensure(
            broker,
            TRANSACTION_STATE_TOPIC,
            config.state_log_partitions,
            config.state_log_replication_factor,
            config.state_log_segment_bytes,
        )
    }

    /// Writes `metadata` (or, for `None`, a tombstone of `transactional_id`).
    fn persist(
        &self,
        broker: &Broker,
        transactional_id: &str,
        metadata: Option<&TxnMetadata>,
    ) -> Result<(), ResponseError> {
        self.ensure_topic(broker)?;
        let partition = broker
            .replicas
            .partition(TRANSACTION_STATE_TOPIC, self.partition_for(transactional_id))
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        let key = codec::encode_key(transactional_id);
        let value = metadata.map(codec::encode_value);
        let now = strom_storage::now_ms();
        let batch = strom_storage::batch::encode_batch(&[(Some(key), value)], now);
        // Unlike Kafka's acks=-1 coordinator, not yet waiting for the ISR:
        // a state lost with its leader can undo an answered EndTxn.
        partition.append(&batch, now).map(|_| ()).map_err(|e| {
            tracing::error!(transactional_id, "writing transaction state failed: {e}");
            ResponseError::NotCoordinator
        })
    }

    /// Writes `next` and makes it current.
    fn transition(
        &self,
        broker: &Broker,
        txns: &mut HashMap<String, TxnMetadata>,
        next: TxnMetadata,
    ) -> Result<(), ResponseError> {
        self.persist(broker, &next.transactional_id, Some(&next))?;
        txns.insert(next.transactional_id.clone(), next);
        Ok(())
    }

    /// InitProducerId with a transactional id: the id's producer id and a
    /// new epoch, fencing older producers of the id. An ongoing transaction
    /// is aborted first and the client told to retry (CONCURRENT_TRANSACTIONS).
    pub fn init_producer_id(
        &self,
        broker: &Broker,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), ResponseError> {
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return Err(ResponseError::InvalidTransactionTimeout);
        }
        self.ensure_topic(broker)?;
        self.check_coordinator(broker, transactional_id)?;
        let now_ms = strom_storage::now_ms();
        let request = InitRequest { timeout_ms, expected, now_ms };
        let mut txns = self.txns();
        let current = match txns.get(transactional_id) {
            Some(current) => current.clone(),
            None => TxnMetadata::new(transactional_id, next_producer_id(broker)?, timeout_ms, now_ms),
        };
        let next = match current.prepare_init(request)? {
            InitTransition::Ready(next) => next,
            InitTransition::NeedsNewProducerId => {
                current.prepare_rotation(next_producer_id(broker)?, request)
            }
            InitTransition::FenceOngoing(fenced) => {
                self.transition(broker, &mut txns, fenced)?;
                drop(txns);
                tracing::info!(transactional_id, "fenced the ongoing transaction of an older producer");
                self.complete(broker, transactional_id)?;
                return Err(ResponseError::ConcurrentTransactions);
            }
        };
        let answer = (next.producer_id, next.producer_epoch);
        self.transition(broker, &mut txns, next)?;
        Ok(answer)
    }

    /// AddPartitionsToTxn and AddOffsetsToTxn.
    pub fn add_partitions(
        &self,
        broker: &Broker,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[TxnPartition],
    ) -> Result<(), ResponseError> {
        if transactional_id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        self.check_coordinator(broker, transactional_id)?;
        let mut txns = self.txns();
        let current = txns.get(transactional_id).ok_or(ResponseError::InvalidProducerIdMapping)?;
        match current.prepare_add_partitions(producer_id, epoch, partitions, strom_storage::now_ms())? {
            Some(next) => self.transition(broker, &mut txns, next),
            None => Ok(()),
        }
    }

    /// AddPartitionsToTxn v4+ with `verify_only`: one answer per partition.
    pub fn verify_partitions(
        &self,
        broker: &Broker,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[TxnPartition],
    ) -> Vec<Option<ResponseError>> {
        let checked = match transactional_id {
            "" => Err(ResponseError::InvalidRequest),
            _ => self.check_coordinator(broker, transactional_id),
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

    /// EndTxn: once PrepareCommit (PrepareAbort) is written the outcome is
    /// decided and the client is answered; the markers follow at once.
    pub fn end_txn(
        &self,
        broker: &Broker,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        result: TxnResult,
    ) -> Result<(), ResponseError> {
        if transactional_id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        self.check_coordinator(broker, transactional_id)?;
        {
            let mut txns = self.txns();
            let current = txns.get(transactional_id).ok_or(ResponseError::InvalidProducerIdMapping)?;
            let Some(next) = current.prepare_end(producer_id, epoch, result, strom_storage::now_ms())? else {
                return Ok(());
            };
            self.transition(broker, &mut txns, next)?;
        }
        if let Err(error) = self.complete(broker, transactional_id) {
            // Decided all the same: the retry timer writes the markers.
            tracing::warn!(transactional_id, "transaction markers not yet written: {error:?}");
        }
        Ok(())
    }

    /// Writes the markers of a prepared transaction this broker leads the
    /// partitions of, then its Complete state; markers for other brokers'
    /// partitions are queued for [`markers::deliver`], which completes it.
    fn complete(&self, broker: &Broker, transactional_id: &str) -> Result<(), ResponseError> {
        let Some(claim) = CompletionClaim::take(&self.completing, transactional_id) else {
            return Err(ResponseError::ConcurrentTransactions);
        };
        let prepared = self.txns().get(transactional_id).cloned();
        let Some(prepared) = prepared.filter(|m| m.state.is_prepared()) else { return Ok(()) };
        let result = prepared.pending_result().expect("prepared");
        crate::failpoint::reach(crate::failpoint::TXN_PREPARED);
        let coordinator_epoch = self.coordinator_epoch(broker, transactional_id)?;
        let plan = markers::plan(&prepared.partitions, &broker.replicas.image(), broker.config.node_id);
        if !plan.gone.is_empty() {
            tracing::info!(transactional_id, partitions = ?plan.gone, "no markers for partitions of deleted topics");
        }
        let (producer_id, producer_epoch) = (prepared.producer_id, prepared.producer_epoch);
        write_markers(broker, producer_id, producer_epoch, coordinator_epoch, result, &plan.local)?;
        if plan.is_local() {
            return self.finish(broker, transactional_id);
        }
        let job = MarkerJob {
            transactional_id: transactional_id.to_owned(),
            producer_id,
            producer_epoch,
            result,
            coordinator_epoch,
            partitions: plan.elsewhere(),
            claim,
        };
        self.marker_jobs.send(job).map_err(|_| ResponseError::CoordinatorNotAvailable)
    }

    /// The coordinator epoch markers carry: the leader epoch of the
    /// `__transaction_state` partition of `transactional_id`.
    /// Asks the image first: one that lacks the topic is too old to say
    /// which of the transaction's topics are gone.
    fn coordinator_epoch(&self, broker: &Broker, transactional_id: &str) -> Result<i32, ResponseError> {
        self.check_coordinator(broker, transactional_id)?;
        let partition = broker
            .replicas
            .partition(TRANSACTION_STATE_TOPIC, self.partition_for(transactional_id))
            .filter(|p| p.is_leader())
            .ok_or(ResponseError::NotCoordinator)?;
        Ok(partition.leader_epoch())
    }

    /// Whether `job` is still this coordinator's to send: its transaction
    /// prepared at the same producer epoch and the coordinator epoch
    /// unchanged (Kafka cancels the markers otherwise).
    fn still_sending(&self, broker: &Broker, job: &MarkerJob) -> bool {
        let id = &job.transactional_id;
        let same_txn = self.txns().get(id).is_some_and(|m| {
            m.state.is_prepared()
                && m.producer_id == job.producer_id
                && m.producer_epoch == job.producer_epoch
        });
        same_txn && self.coordinator_epoch(broker, id) == Ok(job.coordinator_epoch)
    }

    /// Every marker written: the transaction's Complete state.
    fn finish(&self, broker: &Broker, transactional_id: &str) -> Result<(), ResponseError> {
        let mut txns = self.txns();
        // Nothing else moves a prepared transaction: it is still this one.
        let Some(next) = txns.get(transactional_id).and_then(|m| m.prepare_complete(strom_storage::now_ms()))
        else {
            return Ok(());
        };
        self.transition(broker, &mut txns, next)
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
    pub fn load(&self, broker: &Broker) -> Result<(), StorageError> {
        let Some(topic) = broker.replicas.topic(TRANSACTION_STATE_TOPIC) else { return Ok(()) };
        for partition in topic.partitions.values().filter(|p| p.is_leader()) {
            self.load_partition(broker, partition)?;
        }
        Ok(())
    }

    /// Replays one `__transaction_state` partition, when this broker starts
    /// leading it, then finishes the transactions it left prepared by
    /// writing their markers.
    pub fn load_partition(&self, broker: &Broker, partition: &Partition) -> Result<(), StorageError> {
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
        let prepared: Vec<String> =
            loaded.values().filter(|m| m.state.is_prepared()).map(|m| m.transactional_id.clone()).collect();
        let number = partition.tp.partition;
        tracing::info!(
            partition = number,
            transactional_ids = loaded.len(),
            prepared = prepared.len(),
            "loaded transactions"
        );
        self.txns().extend(loaded);
        // Served from here on: the prepared transactions complete as any would.
        self.loading.finish(&[number]);
        for id in prepared {
            if let Err(error) = self.complete(broker, &id) {
                tracing::warn!(
                    transactional_id = id,
                    "cannot complete a prepared transaction yet: {error:?}"
                );
            }
        }
        Ok(())
    }

    /// Runs until the broker stops: aborts transactions past their timeout,
    /// retries prepared ones whose markers failed and forgets ids idle past
    /// `transactional.id.expiration.ms`.
    pub async fn run_timers(broker: Arc<Broker>) {
        let config = broker.transactions.config.clone();
        let mut stopping = broker.stopping();
        let taken = lock_recovering(&broker.transactions.marker_queue, "marker queue").take();
        let Some(mut marker_jobs) = taken else { return };
        let mut abort = tokio::time::interval(Duration::from_millis(config.abort_timed_out_interval_ms));
        let mut expire = tokio::time::interval(Duration::from_millis(config.remove_expired_interval_ms));
        loop {
            tokio::select! {
                _ = stopping.changed() => return,
                Some(job) = marker_jobs.recv() => {
                    tokio::spawn(markers::deliver(broker.clone(), job));
                }
                _ = abort.tick() => {
                    let run = broker.clone();
                    let _ = tokio::task::spawn_blocking(move || {
                        run.transactions.abort_timed_out(&run, strom_storage::now_ms())
                    })
                    .await;
                }
                _ = expire.tick() => {
                    let run = broker.clone();
                    let _ = tokio::task::spawn_blocking(move || run.transactions.expire_ids(&run)).await;
                }
            }
        }
    }

    /// Kafka's `abortTimedOutTransactions`: each ongoing transaction past its
    /// timeout is fenced (its epoch bumped, so its producer learns of it)
    /// and aborted; prepared ones left behind get their markers again.
    pub fn abort_timed_out(&self, broker: &Broker, now_ms: i64) {
        let (timed_out, stuck): (Vec<String>, Vec<String>) = {
            let txns = self.txns();
            let timed_out = txns.values().filter(|m| m.timed_out(now_ms)).map(|m| m.transactional_id.clone());
            let stuck = txns
                .values()
                .filter(|m| m.state.is_prepared() && now_ms - m.last_update_timestamp_ms >= PREPARED_RETRY_MS)
                .map(|m| m.transactional_id.clone());
            (timed_out.collect(), stuck.collect())
        };
        for id in timed_out {
            let fenced = {
                let mut txns = self.txns();
                let Some(current) = txns.get(&id).filter(|m| m.timed_out(now_ms)) else { continue };
                let fenced = current.prepare_fence(now_ms);
                self.transition(broker, &mut txns, fenced)
            };
            match fenced.and_then(|_| self.complete(broker, &id)) {
                Ok(()) => tracing::info!(transactional_id = id, "aborted a transaction past its timeout"),
                Err(error) => {
                    tracing::warn!(transactional_id = id, "aborting a timed out transaction: {error:?}")
                }
            }
        }
        for id in stuck {
            match self.complete(broker, &id) {
                // Its markers are on their way to other brokers.
                Ok(()) | Err(ResponseError::ConcurrentTransactions) => {}
                Err(error) => {
                    tracing::warn!(transactional_id = id, "transaction markers still failing: {error:?}")
                }
            }
        }
    }

    /// Kafka's transactional id expiration: ids with no transaction running
    /// and no change for `transactional.id.expiration.ms` are tombstoned.
    pub fn expire_ids(&self, broker: &Broker) {
        let now_ms = strom_storage::now_ms();
        let mut txns = self.txns();
        let expired: Vec<String> = txns
            .values()
            .filter(|m| {
                matches!(m.state, TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort)
            })
            .filter(|m| now_ms - m.last_update_timestamp_ms >= self.config.id_expiration_ms)
            .map(|m| m.transactional_id.clone())
            .collect();
        for id in expired {
            if self.persist(broker, &id, None).is_ok() {
                txns.remove(&id);
                tracing::info!(transactional_id = id, "expired a transactional id");
            }
        }
    }
}

fn next_producer_id(broker: &Broker) -> Result<i64, ResponseError> {
    broker.producer_ids.next_id(|| broker.allocate_producer_ids()).map_err(|e| {
        tracing::error!("cannot reserve producer ids: {e}");
        crate::error::metadata_error(&e)
    })
}

/// Writes a marker of `producer_id` at `epoch` into each partition and,
/// for `__consumer_offsets`, ends the staged offsets there. Partitions of
/// deleted topics are skipped, as Kafka does. Returns the first failure.
pub fn write_markers<'a>(
    broker: &Broker,
    producer_id: i64,
    epoch: i16,
    coordinator_epoch: i32,
    result: TxnResult,
    partitions: impl IntoIterator<Item = &'a TxnPartition>,
) -> Result<(), ResponseError> {
    let mut first_error = None;
    for (topic, index) in partitions {
        if let Err(error) = write_marker(broker, producer_id, epoch, coordinator_epoch, result, topic, *index)
        {
            first_error.get_or_insert(error);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// One marker; WriteTxnMarkers reports these per partition. A marker from
/// an older coordinator than the partition last heard from is refused
/// (TRANSACTION_COORDINATOR_FENCED).
pub fn write_marker(
    broker: &Broker,
    producer_id: i64,
    epoch: i16,
    coordinator_epoch: i32,
    result: TxnResult,
    topic: &str,
    index: i32,
) -> Result<(), ResponseError> {
    let partition = match broker.replicas.leader_partition(topic, index) {
        Ok(partition) => partition,
        Err(ResponseError::UnknownTopicOrPartition) => {
            tracing::info!(topic, partition = index, "skipping the marker of a partition that is gone");
            return Ok(());
        }
        // Not (or no longer) led here: the coordinator sends it to the leader.
        Err(error) => return Err(error),
    };
    let control = match result {
        TxnResult::Commit => ControlType::Commit,
        TxnResult::Abort => ControlType::Abort,
    };
    let now = strom_storage::now_ms();
    let marker = encode_marker(control, producer_id, epoch, coordinator_epoch, now);
    match partition.append_as(&marker, now, AppendOrigin::Coordinator) {
        Ok(_) => {}
        // A newer epoch already ended this producer's transaction here.
        Err(StorageError::InvalidProducerEpoch(e)) => {
            tracing::info!(topic, partition = index, "skipping a stale marker: {e}");
            return Ok(());
        }
        Err(e) => {
            tracing::error!(topic, partition = index, "writing a transaction marker failed: {e}");
            return Err(crate::error::storage_error(&e));
        }
    }
    if topic == OFFSETS_TOPIC {
        broker.groups.complete_txn(producer_id, index, result == TxnResult::Commit);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use crate::replica::VerifiedAppendError;
    use std::path::Path;
    use strom_metadata::NewTopic;

    fn open_broker(dir: &Path) -> Arc<Broker> {
        let overrides = [("log.dirs".to_owned(), dir.display().to_string())];
        Broker::open(BrokerConfig::from_properties("", &overrides).unwrap()).unwrap()
    }

    fn create_topic(broker: &Broker, name: &str, partitions: i32) {
        let topic = NewTopic { name: name.into(), partitions, replication_factor: 1, ..Default::default() };
        strom_metadata::block_on(broker.controller.create_topic(topic, false)).unwrap();
    }

    /// Writes one transactional record of `producer` into `topic`-`index`,
    /// as TxnOffsetCommit writes its offsets.
    fn write_in_txn(broker: &Broker, topic: &str, index: i32, (producer_id, epoch): (i64, i16)) {
        let record = [(None, Some(bytes::Bytes::from_static(b"v")), 0)];
        let batch = strom_storage::batch::encode_transactional(record, producer_id, epoch);
        let partition = broker.replicas.partition(topic, index).unwrap();
        partition.append_as(&batch, 0, AppendOrigin::Coordinator).unwrap();
    }

    fn stable(broker: &Broker, topic: &str, index: i32) -> bool {
        let partition = broker.replicas.partition(topic, index).unwrap();
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

    fn verify(broker: &Broker, (producer_id, epoch): (i64, i16)) -> Result<(), ResponseError> {
        broker.transactions.verify_produce("tx", producer_id, epoch, &("t".to_owned(), 0))
    }

    #[test]
    fn a_coordinator_still_loading_the_ids_partition_answers_load_in_progress_not_an_unknown_id() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        let coordinator = &broker.transactions;
        let partition = coordinator.partition_for("tx");
        let tp = ("t".to_owned(), 0);
        coordinator.loading.mark(partition);
        let loading = Some(ResponseError::CoordinatorLoadInProgress);
        assert_eq!(
            coordinator.verify_partitions(&broker, "tx", 1, 0, std::slice::from_ref(&tp)),
            vec![loading]
        );
        assert_eq!(
            coordinator.add_partitions(&broker, "tx", 1, 0, std::slice::from_ref(&tp)),
            Err(ResponseError::CoordinatorLoadInProgress)
        );
        coordinator.finish_loading(&[partition]);
        let unknown = Some(ResponseError::InvalidProducerIdMapping);
        assert_eq!(coordinator.verify_partitions(&broker, "tx", 1, 0, &[tp]), vec![unknown], "once loaded");
    }

    #[test]
    fn a_transactional_batch_opens_a_transaction_only_once_verified() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        create_topic(&broker, "t", 1);
        let producer = broker.transactions.init_producer_id(&broker, "tx", 60_000, None).unwrap();
        let partition = broker.replicas.partition("t", 0).unwrap();
        let batch = client_batch(producer.0, producer.1);
        let refused = partition.append(&batch, 0);
        assert!(matches!(refused, Err(StorageError::InvalidTxnState(_))), "no verification: {refused:?}");
        let unverified = partition.append_verified(&batch, 0, producer.0, || verify(&broker, producer));
        assert!(matches!(
            unverified,
            Err(VerifiedAppendError::Unverified(ResponseError::TransactionAbortable))
        ));
        assert_eq!(partition.high_watermark(), 0);

        broker
            .transactions
            .add_partitions(&broker, "tx", producer.0, producer.1, &[("t".to_owned(), 0)])
            .unwrap();
        partition.append_verified(&batch, 0, producer.0, || verify(&broker, producer)).unwrap();
        let mut next = client_batch(producer.0, producer.1);
        next[strom_storage::batch::BASE_SEQUENCE + 3] = 1;
        let crc = strom_storage::batch::compute_crc(&next);
        next[strom_storage::batch::CRC..strom_storage::batch::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        partition
            .append_verified(&next, 0, producer.0, || panic!("the open transaction needs no second word"))
            .unwrap();
        assert_eq!(partition.high_watermark(), 2);
    }

    #[test]
    fn a_marker_between_verification_and_append_refuses_the_batch() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        create_topic(&broker, "t", 1);
        let coordinator = &broker.transactions;
        let producer = coordinator.init_producer_id(&broker, "tx", 60_000, None).unwrap();
        coordinator.add_partitions(&broker, "tx", producer.0, producer.1, &[("t".to_owned(), 0)]).unwrap();
        let partition = broker.replicas.partition("t", 0).unwrap();
        // The coordinator vouches for the partition, then the transaction
        // ends (its marker written) before the batch reaches the log.
        let appended =
            partition.append_verified(&client_batch(producer.0, producer.1), 0, producer.0, || {
                let verified = verify(&broker, producer);
                coordinator.end_txn(&broker, "tx", producer.0, producer.1, TxnResult::Abort).unwrap();
                verified
            });
        assert!(
            matches!(appended, Err(VerifiedAppendError::Storage(StorageError::InvalidTxnState(_)))),
            "{appended:?}"
        );
        assert_eq!(partition.high_watermark(), 1, "only the marker");
        assert!(stable(&broker, "t", 0), "no transaction left open behind the marker");
    }

    #[test]
    fn txn_offsets_after_the_transaction_ended_are_refused() {
        use crate::group::{CommitEntry, TxnCommit};
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        create_topic(&broker, "t", 1);
        let coordinator = &broker.transactions;
        let producer = coordinator.init_producer_id(&broker, "tx", 60_000, None).unwrap();
        broker.groups.ensure_offsets_topic(&broker).unwrap();
        let offsets = (OFFSETS_TOPIC.to_owned(), broker.groups.partition_for("g"));
        coordinator
            .add_partitions(&broker, "tx", producer.0, producer.1, std::slice::from_ref(&offsets))
            .unwrap();
        let commit = TxnCommit {
            group_id: "g".into(),
            producer_id: producer.0,
            producer_epoch: producer.1,
            generation: -1,
            member_id: String::new(),
            instance_id: None,
        };
        let entry =
            CommitEntry { topic: "t".into(), partition: 0, offset: 1, leader_epoch: -1, metadata: None };
        // Verified, then the transaction's abort marker lands before the
        // offsets do (written here directly: the group lock is held).
        let partition = broker.replicas.partition(OFFSETS_TOPIC, offsets.1).unwrap();
        let outcomes = broker.groups.txn_commit(&broker, &commit, &[entry], || {
            let verified = coordinator.verify_produce("tx", producer.0, producer.1, &offsets);
            let marker = encode_marker(ControlType::Abort, producer.0, producer.1, 0, 0);
            partition.append_as(&marker, 0, AppendOrigin::Coordinator).unwrap();
            verified
        });
        assert_eq!(outcomes, vec![Some(ResponseError::InvalidTxnState)]);
        assert!(stable(&broker, OFFSETS_TOPIC, offsets.1), "no transaction left open in __consumer_offsets");
    }

    #[test]
    fn a_transaction_prepared_before_a_crash_is_completed_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        create_topic(&broker, "t", 2);
        let coordinator = &broker.transactions;
        let producer = coordinator.init_producer_id(&broker, "tx", 60_000, None).unwrap();
        let partitions = [("t".to_owned(), 0), ("t".to_owned(), 1)];
        coordinator.add_partitions(&broker, "tx", producer.0, producer.1, &partitions).unwrap();
        write_in_txn(&broker, "t", 0, producer);
        {
            // The crash comes after PrepareCommit is written, before any marker.
            let mut txns = coordinator.txns.lock().unwrap();
            let prepared = txns["tx"].prepare_end(producer.0, producer.1, TxnResult::Commit, 0).unwrap();
            coordinator.transition(&broker, &mut txns, prepared.unwrap()).unwrap();
        }
        assert!(!stable(&broker, "t", 0));
        drop(broker);
        let broker = open_broker(dir.path());
        assert_eq!(broker.transactions.describe("tx").unwrap().state, TxnState::CompleteCommit);
        assert!(stable(&broker, "t", 0), "the commit marker was written at start");
        let end = broker.replicas.partition("t", 1).unwrap().high_watermark();
        assert_eq!(end, 1, "every partition of the transaction got its marker");
    }

    #[test]
    fn a_transaction_past_its_timeout_is_fenced_and_aborted() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        create_topic(&broker, "t", 1);
        let coordinator = &broker.transactions;
        let producer = coordinator.init_producer_id(&broker, "tx", 1_000, None).unwrap();
        coordinator.add_partitions(&broker, "tx", producer.0, producer.1, &[("t".to_owned(), 0)]).unwrap();
        write_in_txn(&broker, "t", 0, producer);
        let started = coordinator.describe("tx").unwrap().start_timestamp_ms;
        coordinator.abort_timed_out(&broker, started + 1_000);
        assert_eq!(coordinator.describe("tx").unwrap().state, TxnState::Ongoing, "not yet past the timeout");
        coordinator.abort_timed_out(&broker, started + 1_001);
        let aborted = coordinator.describe("tx").unwrap();
        assert_eq!((aborted.state, aborted.producer_epoch), (TxnState::CompleteAbort, producer.1 + 1));
        assert!(stable(&broker, "t", 0));
        let end = coordinator.end_txn(&broker, "tx", producer.0, producer.1, TxnResult::Commit);
        assert_eq!(end, Err(ResponseError::ProducerFenced), "the old epoch is fenced");
        let partition = broker.replicas.partition("t", 0).unwrap();
        let aborted = partition
            .log()
            .lock()
            .unwrap()
            .collect_aborted_transactions(0, partition.high_watermark())
            .unwrap();
        assert_eq!(aborted.len(), 1);
    }

    #[test]
    fn invalid_timeouts_and_unknown_ids_get_kafkas_errors() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        let coordinator = &broker.transactions;
        assert_eq!(
            coordinator.init_producer_id(&broker, "tx", 0, None),
            Err(ResponseError::InvalidTransactionTimeout)
        );
        assert_eq!(
            coordinator.init_producer_id(&broker, "tx", 900_001, None),
            Err(ResponseError::InvalidTransactionTimeout)
        );
        assert_eq!(
            coordinator.add_partitions(&broker, "nobody", 1, 0, &[]),
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
