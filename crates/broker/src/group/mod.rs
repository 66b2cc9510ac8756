//! The group coordinator: consumer groups under the classic protocol and
//! their committed offsets.
//!
//! Every group belongs to one partition of `__consumer_offsets` (Java's
//! `String.hashCode` of the id, made non-negative, modulo
//! `offsets.topic.num.partitions`). Offset commits and the group's membership
//! after each rebalance are records in that partition, written through the
//! normal log, and replayed when the broker starts or comes to lead it.
//! As Kafka's acks=-1 writes, a commit or a stored assignment is answered
//! (and takes effect in memory) once the high watermark passes its batch:
//! appended under the `groups` lock to keep the log in order, awaited in
//! the produce purgatory with the lock released, then applied under it.
//! DeleteGroups is answered, and expired offsets logged, once the ISR
//! holds their tombstones. Every write goes through one append
//! (`append`) and one wait (`acknowledged`); the broker is reached through
//! [`CoordinatorHost`].
//!
//! [`state`] is the pure state machine of one group; this module adds the
//! locking, the persistence, the timers and the request-level checks.

pub mod codec;
pub mod consumer;
pub mod state;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use tokio::sync::{oneshot, watch};
use uuid::Uuid;

use crate::coordinator_host::{replicated, CoordinatorHost};
use crate::internal_topic;
use crate::locks::lock_recovering;
use crate::replica::{Partition, VerifiedAppendError};
use crate::replication::purgatory::AwaitedAppend;
use codec::{GroupValue, OffsetValue, RecordKey};
use state::{Group, GroupLimits, GroupState, JoinResult, Member, SyncResult};
use strom_metadata::MetadataImage;
use strom_storage::log::AppendInfo;
use strom_storage::producer_state::AppendOrigin;
use strom_storage::StorageError;

/// Kafka's internal topic for group state.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// How often timers (sessions, rebalance deadlines) are checked.
const TICK: Duration = Duration::from_millis(100);

/// Group settings from the broker config, Kafka's names.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    pub offsets_topic_partitions: i32,
    pub offsets_topic_segment_bytes: i64,
    /// `offsets.topic.replication.factor`, if set (see [`internal_topic::InternalTopic`]).
    pub offsets_topic_replication_factor: Option<i16>,
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    pub initial_rebalance_delay_ms: i32,
    pub max_size: usize,
    pub offset_metadata_max_bytes: usize,
    /// How long a write to `__consumer_offsets` waits for the ISR.
    pub offsets_commit_timeout_ms: u64,
    pub offsets_retention_ms: i64,
    pub offsets_retention_check_interval_ms: u64,
    pub consumer_session_timeout_ms: i32,
    pub consumer_heartbeat_interval_ms: i32,
}

/// A JoinGroup request, decoded.
pub struct JoinRequest {
    pub group_id: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// v4+: a new member must first learn its id (MEMBER_ID_REQUIRED).
    pub require_known_member_id: bool,
    /// v9+: a static leader may be told to skip the assignment.
    pub supports_skip_assignment: bool,
}

/// A SyncGroup request, decoded.
pub struct SyncRequest {
    pub group_id: String,
    pub generation: i32,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignments: HashMap<String, Bytes>,
}

/// One partition of an OffsetCommit.
pub struct CommitEntry {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// Who a TxnOffsetCommit comes from.
pub struct TxnCommit {
    pub group_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub generation: i32,
    pub member_id: String,
    pub instance_id: Option<String>,
}

/// A described group, for DescribeGroups.
pub struct GroupDescription {
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    /// (member id, instance id, client id, client host, metadata, assignment)
    pub members: Vec<(String, Option<String>, String, String, Bytes, Bytes)>,
}

/// A write to `__consumer_offsets`, to await before answering.
struct Written {
    wait: AwaitedAppend,
    /// Where the batch starts: orders acknowledged offset commits.
    base_offset: i64,
}

impl Written {
    fn new(partition: Arc<Partition>, info: &strom_storage::log::AppendInfo, min_insync: usize) -> Self {
        let wait = AwaitedAppend::new(partition, info.last_offset + 1, min_insync);
        Self { wait, base_offset: info.first_offset }
    }
}

/// The write of a leader's assignment, or why it failed.
type StoredGroup = Result<Written, ResponseError>;

pub struct GroupCoordinator {
    config: GroupConfig,
    groups: Mutex<HashMap<String, Group>>,
    /// Offsets partitions whose leadership is being taken.
    loading: internal_topic::Loading,
}

impl GroupCoordinator {
    pub fn new(config: GroupConfig) -> Self {
        Self {
            config,
            groups: Mutex::new(HashMap::new()),
            loading: internal_topic::Loading::new(OFFSETS_TOPIC),
        }
    }

    /// Marks the offsets partitions `image` gives this broker to lead as
    /// loading, before the leadership is applied; returns them.
    pub fn start_loading(&self, host: &dyn CoordinatorHost, image: &MetadataImage) -> Vec<i32> {
        self.loading.start(host.replicas(), image)
    }

    /// The partitions [`Self::start_loading`] marked are replayed.
    pub fn finish_loading(&self, loaded: &[i32]) {
        self.loading.finish(loaded);
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    fn groups(&self) -> MutexGuard<'_, HashMap<String, Group>> {
        lock_recovering(&self.groups, "consumer groups")
    }

    fn limits(&self) -> GroupLimits {
        GroupLimits {
            initial_rebalance_delay: Duration::from_millis(
                self.config.initial_rebalance_delay_ms.max(0) as u64
            ),
            max_size: self.config.max_size,
        }
    }

    /// The `__consumer_offsets` partition that owns `group_id`.
    pub fn partition_for(&self, group_id: &str) -> i32 {
        internal_topic::partition_for(group_id, self.config.offsets_topic_partitions)
    }

    /// `__consumer_offsets` as Kafka's settings create it.
    pub fn offsets_topic(&self) -> internal_topic::InternalTopic {
        let config = &self.config;
        internal_topic::InternalTopic {
            name: OFFSETS_TOPIC,
            partitions: config.offsets_topic_partitions,
            replication_factor: config.offsets_topic_replication_factor,
            min_insync_replicas: internal_topic::MinInsyncReplicas::Broker,
            segment_bytes: config.offsets_topic_segment_bytes,
        }
    }

    /// Writes records to the group's `__consumer_offsets` partition, as
    /// the coordinator's own batch.
    fn persist(
        &self,
        host: &dyn CoordinatorHost,
        group_id: &str,
        entries: &[(Option<Bytes>, Option<Bytes>)],
    ) -> Result<Written, ResponseError> {
        let batch = strom_storage::batch::encode_batch(entries, strom_storage::now_ms());
        self.append(host, group_id, |partition, now_ms| {
            partition
                .append_as(&batch, now_ms, AppendOrigin::Coordinator)
                .map_err(VerifiedAppendError::Storage)
        })
    }

    /// Every write to `__consumer_offsets` goes through here: `append`
    /// puts a batch in the group's partition, as Kafka's acks=-1 writes,
    /// none while the ISR is below `min.insync.replicas`. The returned
    /// write is to be [`Self::acknowledged`] with the groups lock released.
    fn append(
        &self,
        host: &dyn CoordinatorHost,
        group_id: &str,
        append: impl FnOnce(&Partition, i64) -> Result<(AppendInfo, i64), VerifiedAppendError>,
    ) -> Result<Written, ResponseError> {
        let partition = host
            .replicas()
            .partition(OFFSETS_TOPIC, self.partition_for(group_id))
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        let min_insync = host.min_insync_replicas(OFFSETS_TOPIC);
        if partition.isr_size() < min_insync {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        match append(&partition, strom_storage::now_ms()) {
            Ok((info, _)) => Ok(Written::new(partition, &info, min_insync)),
            Err(VerifiedAppendError::Unverified(error)) => Err(error),
            Err(VerifiedAppendError::Storage(e)) => {
                tracing::error!(group = group_id, "writing group state failed: {e}");
                Err(match e {
                    StorageError::InvalidProducerEpoch(_) => ResponseError::ProducerFenced,
                    StorageError::InvalidTxnState(_) => ResponseError::InvalidTxnState,
                    _ => ResponseError::CoordinatorNotAvailable,
                })
            }
        }
    }

    /// Waits, without the groups lock, until the ISR holds a write
    /// (`offsets.commit.timeout.ms`), answering failures as Kafka's
    /// coordinator does.
    async fn acknowledged(&self, host: &dyn CoordinatorHost, written: Written) -> Result<(), ResponseError> {
        let timeout = Duration::from_millis(self.config.offsets_commit_timeout_ms);
        replicated(host, written.wait, timeout).await
    }

    /// TxnOffsetCommit: writes the offsets as part of the producer's
    /// transaction (a transactional batch of its id and epoch), stages
    /// them, and answers once the ISR holds the batch; the commit marker
    /// makes them the group's offsets. `verify` must confirm that the
    /// group's partition is in the transaction before the batch opens it
    /// there (KIP-890).
    pub async fn commit_in_txn(
        &self,
        host: &dyn CoordinatorHost,
        commit: &TxnCommit,
        entries: &[CommitEntry],
        verify: impl Future<Output = Result<(), ResponseError>>,
    ) -> Vec<Option<ResponseError>> {
        let (outcomes, written) = self.append_txn_offsets(host, commit, entries, verify).await;
        let Some(written) = written else { return outcomes };
        match self.acknowledged(host, written).await {
            Ok(()) => outcomes,
            Err(error) => outcomes.into_iter().map(|o| o.or(Some(error))).collect(),
        }
    }

    /// [`Self::commit_in_txn`] without the wait for the ISR.
    #[cfg(test)]
    pub async fn txn_commit(
        &self,
        host: &dyn CoordinatorHost,
        commit: &TxnCommit,
        entries: &[CommitEntry],
        verify: impl Future<Output = Result<(), ResponseError>>,
    ) -> Vec<Option<ResponseError>> {
        self.append_txn_offsets(host, commit, entries, verify).await.0
    }

    /// Appends and stages a TxnOffsetCommit's offsets. They are staged at
    /// once, acknowledged or not: the marker commits what the log holds, as
    /// a replay would.
    async fn append_txn_offsets(
        &self,
        host: &dyn CoordinatorHost,
        commit: &TxnCommit,
        entries: &[CommitEntry],
        verify: impl Future<Output = Result<(), ResponseError>>,
    ) -> (Vec<Option<ResponseError>>, Option<Written>) {
        let group_id = commit.group_id.as_str();
        let now_ms = strom_storage::now_ms();
        let (outcomes, records) = {
            let groups = self.groups();
            if let Err(error) = check_txn_committer(&groups, commit) {
                return (vec![Some(error); entries.len()], None);
            }
            self.offset_records(host, group_id, entries, now_ms)
        };
        if records.is_empty() {
            return (outcomes, None);
        }
        let encoded = records.iter().map(|(k, v)| (Some(k.encode()), Some(v.encode()), now_ms));
        let batch =
            strom_storage::batch::encode_transactional(encoded, commit.producer_id, commit.producer_epoch);
        // Not under the groups lock: verifying may wait on the transaction
        // coordinator of another broker.
        let producer_id = commit.producer_id;
        let failed = |error| (outcomes.iter().map(|o| (*o).or(Some(error))).collect(), None);
        let Some(verifying) = host.replicas().partition(OFFSETS_TOPIC, self.partition_for(group_id)) else {
            return failed(ResponseError::CoordinatorNotAvailable);
        };
        let guard = match verifying.verify_transaction(producer_id, verify).await {
            Ok(guard) => guard,
            Err(error) => return failed(error),
        };
        let written = self.append(host, group_id, |partition, now_ms| {
            partition.append_guarded(&batch, now_ms, AppendOrigin::Coordinator, producer_id, guard)
        });
        let written = match written {
            Ok(written) => written,
            Err(error) => {
                if let Some(guard) = guard {
                    verifying.abandon_verification(producer_id, guard);
                }
                return failed(error);
            }
        };
        let mut groups = self.groups();
        let group = groups.entry(group_id.to_owned()).or_insert_with(|| Group::new(group_id));
        let pending = group.pending_txn_offsets.entry(commit.producer_id).or_default();
        for (key, value) in records {
            if let RecordKey::Offset { topic, partition, .. } = key {
                pending.insert((topic, partition), value);
            }
        }
        (outcomes, Some(written))
    }

    /// A marker of `producer_id` landed in `__consumer_offsets` partition
    /// `offsets_partition`: its staged offsets there become the groups'
    /// offsets (commit) or go (abort).
    pub fn complete_txn(&self, producer_id: i64, offsets_partition: i32, commit: bool) {
        let mut groups = self.groups();
        for group in groups.values_mut() {
            if self.partition_for(&group.id) != offsets_partition {
                continue;
            }
            if let Some(pending) = group.pending_txn_offsets.remove(&producer_id) {
                if commit {
                    group.offsets.extend(pending);
                }
            }
        }
    }

    /// Whether a transaction not yet ended holds an offset of the group for
    /// the partition (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT).
    pub fn has_pending_txn_offset(&self, group_id: &str, topic: &str, partition: i32) -> bool {
        let groups = self.groups();
        let key = (topic.to_owned(), partition);
        groups.get(group_id).is_some_and(|g| g.pending_txn_offsets.values().any(|p| p.contains_key(&key)))
    }

    /// A group that just lost its last member is written as empty, so a
    /// restart does not bring the departed members back.
    fn persist_if_emptied(&self, host: &dyn CoordinatorHost, group: &mut Group) {
        if group.state == GroupState::Empty && group.generation != group.persisted_generation {
            let _ = self.persist_group(host, group);
            group.persisted_generation = group.generation;
        }
    }

    fn persist_group(&self, host: &dyn CoordinatorHost, group: &Group) -> Result<Written, ResponseError> {
        let key = RecordKey::Group { group: group.id.clone() }.encode();
        let value = group.to_value(strom_storage::now_ms()).encode();
        self.persist(host, &group.id, &[(Some(key), Some(value))])
    }

    /// Kafka's `storeGroup` callback: once the leader's assignment is
    /// acknowledged (or not), the members waiting in SyncGroup get it (or
    /// the error, and the group rebalances), unless the rebalance moved on
    /// meanwhile.
    async fn finish_sync(
        &self,
        host: &dyn CoordinatorHost,
        group_id: &str,
        generation: i32,
        stored: StoredGroup,
    ) {
        let outcome = match stored {
            Ok(written) => self.acknowledged(host, written).await,
            Err(error) => Err(error),
        };
        let mut groups = self.groups();
        let Some(group) = groups.get_mut(group_id) else { return };
        if group.generation != generation || group.state != GroupState::CompletingRebalance {
            return;
        }
        match outcome {
            Ok(()) => {
                group.complete_sync();
                group.persisted_generation = generation;
            }
            Err(error) => group.fail_sync(error, self.limits(), Instant::now()),
        }
    }

    /// Replays the `__consumer_offsets` partitions this broker leads, at start.
    pub fn load(&self, host: &dyn CoordinatorHost) -> Result<(), strom_storage::StorageError> {
        let Some(topic) = host.replicas().topic(OFFSETS_TOPIC) else { return Ok(()) };
        for partition in topic.partitions.values().filter(|p| p.is_leader()) {
            self.load_partition(partition)?;
        }
        Ok(())
    }

    /// Replays one `__consumer_offsets` partition, when this broker starts
    /// leading it: the offsets and last stored membership of its groups.
    pub fn load_partition(&self, partition: &Partition) -> Result<(), strom_storage::StorageError> {
        let records = partition.read_records_to_log_end()?;
        // Takes no lock for a new partition: whoever created the topic may
        // hold it while the creation is applied.
        if records.is_empty() {
            return Ok(());
        }
        let number = partition.tp.partition;
        let now = Instant::now();
        let mut groups = self.groups();
        for record in records {
            if record.control {
                let commit = record.key.as_deref().is_some_and(|k| k.get(2..4) == Some(&[0, 1]));
                let in_partition = |group: &str| self.partition_for(group) == number;
                complete_loaded_txn(&mut groups, record.producer_id, commit, in_partition);
                continue;
            }
            let Some(key) = record.key.as_deref().and_then(|k| RecordKey::decode(k).ok()) else {
                continue;
            };
            if record.transactional {
                stage_loaded_offset(&mut groups, record.producer_id, key, record.value.as_deref());
                continue;
            }
            apply_record(&mut groups, key, record.value.as_deref(), now);
        }
        groups.retain(|id, g| {
            self.partition_for(id) != number
                || !(g.members.is_empty()
                    && g.offsets.is_empty()
                    && g.generation == 0
                    && g.pending_txn_offsets.is_empty())
        });
        let loaded = groups.keys().filter(|id| self.partition_for(id) == number).count();
        tracing::info!(partition = number, groups = loaded, "loaded consumer groups");
        Ok(())
    }

    /// Forgets the groups of a `__consumer_offsets` partition this broker
    /// no longer leads: their requests get NOT_COORDINATOR from now on.
    pub fn unload_partition(&self, partition: i32) {
        let mut groups = self.groups();
        let before = groups.len();
        groups.retain(|id, _| self.partition_for(id) != partition);
        tracing::info!(partition, groups = before - groups.len(), "unloaded consumer groups");
    }

    /// NOT_COORDINATOR unless this broker leads the `__consumer_offsets`
    /// partition of `group_id`; COORDINATOR_LOAD_IN_PROGRESS while the
    /// leadership is being taken and the partition replayed.
    pub fn check_coordinator(&self, host: &dyn CoordinatorHost, group_id: &str) -> Result<(), ResponseError> {
        self.loading.check(host, self.partition_for(group_id))
    }

    /// ConsumerGroupHeartbeat (KIP-848).
    pub fn consumer_heartbeat(
        &self,
        host: &dyn CoordinatorHost,
        group_id: &str,
        heartbeat: consumer::Heartbeat,
    ) -> Result<consumer::HeartbeatReply, ResponseError> {
        if group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        let image = host.metadata_image();
        let topics: consumer::TopicsView =
            image.topics().map(|t| (t.name.clone(), (t.id, t.partitions.len() as i32))).collect();
        let session_ms = strom_metadata::group_config::int_setting(
            image.group_configs(group_id),
            "consumer.session.timeout.ms",
            self.config.consumer_session_timeout_ms,
        );
        let session = Duration::from_millis(session_ms.max(0) as u64);
        let mut groups = self.groups();
        if !groups.contains_key(group_id) && heartbeat.member_epoch != 0 {
            return Err(ResponseError::UnknownMemberId);
        }
        let group = groups.entry(group_id.to_owned()).or_insert_with(|| Group::new(group_id));
        if group.consumer.is_none() {
            if !group.members.is_empty() {
                return Err(ResponseError::GroupIdNotFound);
            }
            group.consumer = Some(consumer::ConsumerGroup::default());
        }
        let consumer = group.consumer.as_mut().expect("set above");
        consumer.heartbeat(heartbeat, &topics, session, Instant::now())
    }

    /// A KIP-848 group's state, for ConsumerGroupDescribe.
    pub fn describe_consumer_group(&self, group_id: &str) -> Option<consumer::ConsumerGroup> {
        let groups = self.groups();
        groups.get(group_id)?.consumer.as_ref().map(|c| consumer::ConsumerGroup {
            epoch: c.epoch,
            assignment_epoch: c.assignment_epoch,
            assignor: c.assignor.clone(),
            members: c.members.clone(),
            target: c.target.clone(),
        })
    }

    /// JoinGroup: answers at once, or when the rebalance completes (or the
    /// broker stops: NOT_COORDINATOR sends the client elsewhere).
    pub async fn join(&self, request: JoinRequest, mut stopping: watch::Receiver<bool>) -> JoinResult {
        let member_id = request.member_id.clone();
        let waiter = {
            let mut groups = self.groups();
            match self.join_locked(&mut groups, request, Instant::now()) {
                Ok(waiter) => waiter,
                Err(result) => return *result,
            }
        };
        tokio::select! {
            result = waiter => result.unwrap_or_else(|_| JoinResult::error(ResponseError::UnknownMemberId, &member_id)),
            _ = stopping.wait_for(|stop| *stop) => JoinResult::error(ResponseError::NotCoordinator, &member_id),
        }
    }

    fn join_locked(
        &self,
        groups: &mut HashMap<String, Group>,
        request: JoinRequest,
        now: Instant,
    ) -> Result<oneshot::Receiver<JoinResult>, Box<JoinResult>> {
        let fail = |error| Err(Box::new(JoinResult::error(error, &request.member_id)));
        if request.group_id.is_empty() {
            return fail(ResponseError::InvalidGroupId);
        }
        let timeouts = self.config.min_session_timeout_ms..=self.config.max_session_timeout_ms;
        if !timeouts.contains(&request.session_timeout_ms) {
            return fail(ResponseError::InvalidSessionTimeout);
        }
        if !groups.contains_key(&request.group_id) && !request.member_id.is_empty() {
            return fail(ResponseError::UnknownMemberId);
        }
        let limits = self.limits();
        let group = groups.entry(request.group_id.clone()).or_insert_with(|| Group::new(&request.group_id));
        if group.consumer.as_ref().is_some_and(|c| !c.members.is_empty()) {
            return fail(ResponseError::InconsistentGroupProtocol);
        }
        if group.state == GroupState::Dead {
            return fail(ResponseError::CoordinatorNotAvailable);
        }
        if !group.accepts(&request.protocol_type, &request.protocols) {
            return fail(ResponseError::InconsistentGroupProtocol);
        }
        let (tx, rx) = oneshot::channel();
        if request.member_id.is_empty() {
            if let Some(existing) =
                request.instance_id.as_ref().and_then(|i| group.static_members.get(i)).cloned()
            {
                return rejoin_static(group, &existing, request, limits, now, tx).map(|_| rx);
            }
            let new_id = format!("{}-{}", request.client_id, Uuid::new_v4());
            if request.require_known_member_id && request.instance_id.is_none() {
                group.pending.insert(new_id.clone());
                return Err(Box::new(JoinResult::error(ResponseError::MemberIdRequired, &new_id)));
            }
            if group.members.len() >= limits.max_size {
                return fail(ResponseError::GroupMaxSizeReached);
            }
            group.add_member(new_member(new_id, &request, tx, now), &request.protocol_type, limits, now);
        } else {
            if let Some(instance) = &request.instance_id {
                if group.static_members.get(instance).is_some_and(|m| *m != request.member_id) {
                    return fail(ResponseError::FencedInstanceId);
                }
            }
            if group.pending.contains(&request.member_id) {
                if group.members.len() >= limits.max_size {
                    group.pending.remove(&request.member_id);
                    return fail(ResponseError::GroupMaxSizeReached);
                }
                let member = new_member(request.member_id.clone(), &request, tx, now);
                group.add_member(member, &request.protocol_type, limits, now);
            } else if group.member(&request.member_id).is_some() {
                if let Some(result) = rejoin_known(group, &request, limits, now, tx) {
                    return Err(Box::new(result));
                }
            } else {
                return fail(ResponseError::UnknownMemberId);
            }
        }
        group.maybe_complete_join(now, false);
        Ok(rx)
    }

    /// SyncGroup: the leader's assignment, or a wait for it.
    pub async fn sync(&self, host: &dyn CoordinatorHost, request: SyncRequest) -> SyncResult {
        let fail = |error| SyncResult { error: Some(error), assignment: Bytes::new() };
        let mut stopping = host.stopping();
        let mut stored = None;
        let waiter = {
            let mut groups = self.groups();
            let Some(group) = groups.get_mut(&request.group_id) else {
                return fail(ResponseError::UnknownMemberId);
            };
            if group.is_fenced(&request.member_id, request.instance_id.as_deref()) {
                return fail(ResponseError::FencedInstanceId);
            }
            let Some(member) = group.member(&request.member_id) else {
                return fail(ResponseError::UnknownMemberId);
            };
            if request.instance_id.is_some() && member.instance_id != request.instance_id {
                return fail(ResponseError::FencedInstanceId);
            }
            if request.generation != group.generation {
                return fail(ResponseError::IllegalGeneration);
            }
            let type_mismatch =
                request.protocol_type.is_some() && request.protocol_type != group.protocol_type;
            let name_mismatch = request.protocol_name.is_some() && request.protocol_name != group.protocol;
            if type_mismatch || name_mismatch {
                return fail(ResponseError::InconsistentGroupProtocol);
            }
            match group.state {
                GroupState::Empty | GroupState::Dead => return fail(ResponseError::UnknownMemberId),
                GroupState::PreparingRebalance => return fail(ResponseError::RebalanceInProgress),
                GroupState::Stable => {
                    return SyncResult { error: None, assignment: member.assignment.clone() };
                }
                GroupState::CompletingRebalance => {}
            }
            let (tx, rx) = oneshot::channel();
            group.member_mut(&request.member_id).expect("checked").sync_waiter = Some(tx);
            if group.leader.as_deref() == Some(request.member_id.as_str()) {
                group.set_assignments(request.assignments);
                stored = Some((group.generation, self.persist_group(host, group)));
            }
            rx
        };
        if let Some((generation, written)) = stored {
            self.finish_sync(host, &request.group_id, generation, written).await;
        }
        tokio::select! {
            result = waiter => result.unwrap_or_else(|_| fail(ResponseError::RebalanceInProgress)),
            _ = stopping.wait_for(|stop| *stop) => fail(ResponseError::NotCoordinator),
        }
    }

    /// Heartbeat: keeps the member's session alive and tells it whether to rejoin.
    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Option<ResponseError> {
        let mut groups = self.groups();
        let Some(group) = groups.get_mut(group_id) else { return Some(ResponseError::UnknownMemberId) };
        if group.is_fenced(member_id, instance_id) {
            return Some(ResponseError::FencedInstanceId);
        }
        let state = group.state;
        let current_generation = group.generation;
        let Some(member) = group.member_mut(member_id) else { return Some(ResponseError::UnknownMemberId) };
        if instance_id.is_some() && member.instance_id.as_deref() != instance_id {
            return Some(ResponseError::FencedInstanceId);
        }
        if generation != current_generation {
            return Some(ResponseError::IllegalGeneration);
        }
        member.heartbeat_deadline = Instant::now() + member.session_timeout;
        match state {
            GroupState::PreparingRebalance => Some(ResponseError::RebalanceInProgress),
            GroupState::Empty | GroupState::Dead => Some(ResponseError::UnknownMemberId),
            GroupState::Stable | GroupState::CompletingRebalance => None,
        }
    }

    /// LeaveGroup for each (member id, instance id); returns each outcome.
    pub fn leave(
        &self,
        host: &dyn CoordinatorHost,
        group_id: &str,
        leaving: &[(String, Option<String>)],
    ) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        let mut groups = self.groups();
        let group = groups.get_mut(group_id).ok_or(ResponseError::UnknownMemberId)?;
        let outcomes = leaving
            .iter()
            .map(|(member_id, instance_id)| {
                let id = match instance_id {
                    Some(instance) => match group.static_members.get(instance) {
                        Some(id) if member_id.is_empty() || id == member_id => id.clone(),
                        Some(_) => return Some(ResponseError::FencedInstanceId),
                        None => return Some(ResponseError::UnknownMemberId),
                    },
                    None => member_id.clone(),
                };
                if group.pending.remove(&id) {
                    return None;
                }
                group.remove_member(&id).map_or(Some(ResponseError::UnknownMemberId), |_| None)
            })
            .collect();
        group.on_members_left(self.limits(), Instant::now());
        self.persist_if_emptied(host, group);
        Ok(outcomes)
    }

    /// OffsetCommit: checks the committer against the group, then stores
    /// every valid partition in one write. The offsets become the group's
    /// once the ISR holds the write, as Kafka's pending offset commits.
    pub async fn commit(
        &self,
        host: &dyn CoordinatorHost,
        group_id: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        entries: &[CommitEntry],
    ) -> Vec<Option<ResponseError>> {
        if let Err(error) = self.check_coordinator(host, group_id) {
            return vec![Some(error); entries.len()];
        }
        // Appended under the lock, so commits reach the log in the order checked.
        let (outcomes, records, written) = {
            let groups = self.groups();
            if let Err(error) = self.check_committer(&groups, group_id, generation, member_id, instance_id) {
                return vec![Some(error); entries.len()];
            }
            let now_ms = strom_storage::now_ms();
            let (outcomes, records) = self.offset_records(host, group_id, entries, now_ms);
            if records.is_empty() {
                return outcomes;
            }
            let encoded: Vec<_> = records.iter().map(|(k, v)| (Some(k.encode()), Some(v.encode()))).collect();
            match self.persist(host, group_id, &encoded) {
                Ok(written) => (outcomes, records, written),
                Err(error) => return outcomes.into_iter().map(|o| o.or(Some(error))).collect(),
            }
        };
        let base_offset = written.base_offset;
        if let Err(error) = self.acknowledged(host, written).await {
            return outcomes.into_iter().map(|o| o.or(Some(error))).collect();
        }
        let offsets = records.into_iter().filter_map(|(key, value)| match key {
            RecordKey::Offset { topic, partition, .. } => Some(((topic, partition), value)),
            RecordKey::Group { .. } => None,
        });
        let mut groups = self.groups();
        let group = groups.entry(group_id.to_owned()).or_insert_with(|| Group::new(group_id));
        group.apply_offsets(offsets.collect(), base_offset);
        outcomes
    }

    /// The offset records of a commit's valid entries, and each entry's
    /// outcome: an error, or None when its record is among those returned.
    fn offset_records(
        &self,
        host: &dyn CoordinatorHost,
        group_id: &str,
        entries: &[CommitEntry],
        now_ms: i64,
    ) -> (Vec<Option<ResponseError>>, Vec<(RecordKey, OffsetValue)>) {
        let mut records = Vec::new();
        let outcomes = entries
            .iter()
            .map(|e| {
                // The partition may be led by any broker: the metadata says it exists.
                if !host.replicas().knows(&e.topic, e.partition) {
                    return Some(ResponseError::UnknownTopicOrPartition);
                }
                if e.metadata.as_ref().is_some_and(|m| m.len() > self.config.offset_metadata_max_bytes) {
                    return Some(ResponseError::OffsetMetadataTooLarge);
                }
                let key = RecordKey::Offset {
                    group: group_id.to_owned(),
                    topic: e.topic.clone(),
                    partition: e.partition,
                };
                let value = OffsetValue {
                    offset: e.offset,
                    leader_epoch: e.leader_epoch,
                    metadata: e.metadata.clone().unwrap_or_default(),
                    commit_timestamp_ms: now_ms,
                };
                records.push((key, value));
                None
            })
            .collect();
        (outcomes, records)
    }

    fn check_committer(
        &self,
        groups: &HashMap<String, Group>,
        group_id: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), ResponseError> {
        let group = groups.get(group_id);
        // A commit from outside the group (manual assignment) is fine while
        // the group has no members.
        if generation < 0 && member_id.is_empty() {
            return match group {
                Some(g) if !g.is_empty() => Err(ResponseError::UnknownMemberId),
                _ => Ok(()),
            };
        }
        let group = group.ok_or(ResponseError::IllegalGeneration)?;
        if group.is_fenced(member_id, instance_id) {
            return Err(ResponseError::FencedInstanceId);
        }
        if let Some(consumer) = &group.consumer {
            let member = consumer.members.get(member_id).ok_or(ResponseError::UnknownMemberId)?;
            if generation != member.epoch && generation != member.previous_epoch {
                return Err(ResponseError::StaleMemberEpoch);
            }
            return Ok(());
        }
        let member = group.member(member_id).ok_or(ResponseError::UnknownMemberId)?;
        if instance_id.is_some() && member.instance_id.as_deref() != instance_id {
            return Err(ResponseError::FencedInstanceId);
        }
        if generation != group.generation {
            return Err(ResponseError::IllegalGeneration);
        }
        if group.state == GroupState::CompletingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        Ok(())
    }

    /// Committed offsets of `group_id` for the given partitions, or all.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        partitions: Option<&[(String, i32)]>,
    ) -> Vec<(String, i32, Option<OffsetValue>)> {
        let groups = self.groups();
        let offsets = groups.get(group_id).map(|g| &g.offsets);
        match partitions {
            Some(wanted) => wanted
                .iter()
                .map(|(t, p)| (t.clone(), *p, offsets.and_then(|o| o.get(&(t.clone(), *p))).cloned()))
                .collect(),
            None => {
                let mut all: Vec<_> = offsets
                    .into_iter()
                    .flatten()
                    .map(|((t, p), v)| (t.clone(), *p, Some(v.clone())))
                    .collect();
                all.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
                all
            }
        }
    }

    /// OffsetDelete: refused for topics the group's members subscribe to.
    pub fn delete_offsets(
        &self,
        host: &dyn CoordinatorHost,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        let mut groups = self.groups();
        let group = groups.get_mut(group_id).ok_or(ResponseError::GroupIdNotFound)?;
        let subscribed = subscribed_topics(group);
        let mut tombstones = Vec::new();
        let outcomes = partitions
            .iter()
            .map(|(topic, partition)| {
                if subscribed.iter().any(|s| s == topic) {
                    return Some(ResponseError::GroupSubscribedToTopic);
                }
                group.offset_batches.remove(&(topic.clone(), *partition));
                if group.offsets.remove(&(topic.clone(), *partition)).is_some() {
                    let key = RecordKey::Offset {
                        group: group_id.to_owned(),
                        topic: topic.clone(),
                        partition: *partition,
                    };
                    tombstones.push((Some(key.encode()), None));
                }
                None
            })
            .collect();
        if !tombstones.is_empty() {
            self.persist(host, group_id, &tombstones)?;
        }
        Ok(outcomes)
    }

    /// (group id, protocol type, state, group type) of every group.
    pub fn list(&self) -> Vec<(String, String, &'static str, &'static str)> {
        let groups = self.groups();
        let mut listed: Vec<_> = groups
            .values()
            .map(|g| {
                let protocol_type =
                    if g.consumer.is_some() { Some("consumer".to_owned()) } else { g.protocol_type.clone() };
                (g.id.clone(), protocol_type.unwrap_or_default(), g.state_name(), g.group_type())
            })
            .collect();
        listed.sort();
        listed
    }

    pub fn describe(&self, group_id: &str) -> Option<GroupDescription> {
        let groups = self.groups();
        let group = groups.get(group_id)?;
        if let Some(consumer) = &group.consumer {
            let members = consumer
                .members
                .values()
                .map(|m| {
                    (
                        m.id.clone(),
                        m.instance_id.clone(),
                        m.client_id.clone(),
                        m.client_host.clone(),
                        Bytes::new(),
                        Bytes::new(),
                    )
                })
                .collect();
            return Some(GroupDescription {
                state: consumer.state_name(),
                protocol_type: "consumer".into(),
                protocol: consumer.assignor.clone(),
                members,
            });
        }
        let protocol = group.protocol.clone().unwrap_or_default();
        let show_members = matches!(
            group.state,
            GroupState::Stable | GroupState::CompletingRebalance | GroupState::PreparingRebalance
        );
        let members = if show_members {
            group
                .members
                .iter()
                .map(|m| {
                    let metadata = m
                        .protocols
                        .iter()
                        .find(|(n, _)| *n == protocol)
                        .map(|(_, b)| b.clone())
                        .unwrap_or_default();
                    let assignment =
                        if group.state == GroupState::Stable { m.assignment.clone() } else { Bytes::new() };
                    (
                        m.id.clone(),
                        m.instance_id.clone(),
                        m.client_id.clone(),
                        m.client_host.clone(),
                        metadata,
                        assignment,
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        Some(GroupDescription {
            state: group.state.name(),
            protocol_type: group.protocol_type.clone().unwrap_or_default(),
            protocol: if group.state == GroupState::Stable { protocol } else { String::new() },
            members,
        })
    }

    /// DeleteGroups: only groups without members; their offsets go too.
    /// The group is gone at once (a join meanwhile starts a new one), and
    /// the answer waits until the ISR holds its tombstones.
    pub async fn delete_group(&self, host: &dyn CoordinatorHost, group_id: &str) -> Option<ResponseError> {
        let written = {
            let groups = self.groups();
            let Some(group) = groups.get(group_id) else { return Some(ResponseError::GroupIdNotFound) };
            if !group.is_empty() {
                return Some(ResponseError::NonEmptyGroup);
            }
            let mut tombstones = vec![(Some(RecordKey::Group { group: group_id.to_owned() }.encode()), None)];
            for (topic, partition) in group.offsets.keys() {
                let key = RecordKey::Offset {
                    group: group_id.to_owned(),
                    topic: topic.clone(),
                    partition: *partition,
                };
                tombstones.push((Some(key.encode()), None));
            }
            match self.persist(host, group_id, &tombstones) {
                Ok(written) => written,
                Err(error) => return Some(error),
            }
        };
        self.groups().remove(group_id);
        self.acknowledged(host, written).await.err()
    }

    /// Runs the timers until the broker stops: sessions, rebalance
    /// deadlines, and the expiry of old offsets of empty groups.
    pub async fn run_timers(host: Arc<dyn CoordinatorHost>) {
        let mut stopping = host.stopping();
        let mut tick = tokio::time::interval(TICK);
        let retention_check = Duration::from_millis(host.groups().config.offsets_retention_check_interval_ms);
        let mut last_retention_check = Instant::now();
        loop {
            tokio::select! {
                _ = crate::shutdown::stopped(&mut stopping) => return,
                _ = tick.tick() => {}
            }
            let now = Instant::now();
            let limits = host.groups().limits();
            {
                let mut groups = host.groups().groups();
                for group in groups.values_mut() {
                    match &mut group.consumer {
                        Some(consumer) => {
                            consumer.tick(now);
                        }
                        None => {
                            if group.tick(limits, now) {
                                host.groups().persist_if_emptied(&*host, group);
                            }
                        }
                    }
                }
            }
            if now - last_retention_check >= retention_check {
                last_retention_check = now;
                let expiring = host.clone();
                // Its own task: the tick goes on while the tombstones replicate.
                tokio::spawn(async move { expiring.groups().expire_offsets(&*expiring).await });
            }
        }
    }

    /// Removes offsets older than `offsets.retention.minutes` from groups
    /// without members, writing tombstones, and waits for the ISR to hold
    /// them as for every other group write.
    async fn expire_offsets(&self, host: &dyn CoordinatorHost) {
        let now_ms = strom_storage::now_ms();
        let mut written = Vec::new();
        for group in self.groups().values_mut() {
            let expired = group.expired_offsets(now_ms, self.config.offsets_retention_ms);
            if expired.is_empty() {
                continue;
            }
            let tombstones: Vec<_> = expired
                .iter()
                .map(|(topic, partition)| {
                    let key = RecordKey::Offset {
                        group: group.id.clone(),
                        topic: topic.clone(),
                        partition: *partition,
                    };
                    (Some(key.encode()), None)
                })
                .collect();
            let Ok(tombstones) = self.persist(host, &group.id, &tombstones) else { continue };
            written.push((group.id.clone(), expired.len(), tombstones));
            for key in expired {
                group.offset_batches.remove(&key);
                group.offsets.remove(&key);
            }
        }
        for (group, expired, tombstones) in written {
            match self.acknowledged(host, tombstones).await {
                Ok(()) => tracing::info!(group, expired, "expired committed offsets"),
                Err(error) => tracing::warn!(group, ?error, "expired offsets' tombstones not replicated"),
            }
        }
    }
}

fn new_member(
    id: String,
    request: &JoinRequest,
    waiter: oneshot::Sender<JoinResult>,
    now: Instant,
) -> Member {
    let session_timeout = Duration::from_millis(request.session_timeout_ms.max(0) as u64);
    Member {
        id,
        instance_id: request.instance_id.clone(),
        client_id: request.client_id.clone(),
        client_host: request.client_host.clone(),
        session_timeout,
        rebalance_timeout: Duration::from_millis(request.rebalance_timeout_ms.max(0) as u64),
        protocols: request.protocols.clone(),
        assignment: Bytes::new(),
        join_waiter: Some(waiter),
        sync_waiter: None,
        heartbeat_deadline: now + session_timeout,
    }
}

/// A known member joins again. Returns an immediate answer when no rebalance
/// is needed; otherwise parks the member's join.
fn rejoin_known(
    group: &mut Group,
    request: &JoinRequest,
    limits: GroupLimits,
    now: Instant,
    waiter: oneshot::Sender<JoinResult>,
) -> Option<JoinResult> {
    let is_leader = group.leader.as_deref() == Some(request.member_id.as_str());
    let state = group.state;
    let member = group.member_mut(&request.member_id).expect("caller checked");
    let unchanged = member.protocols == request.protocols;
    member.session_timeout = Duration::from_millis(request.session_timeout_ms.max(0) as u64);
    member.rebalance_timeout = Duration::from_millis(request.rebalance_timeout_ms.max(0) as u64);
    member.heartbeat_deadline = now + member.session_timeout;
    let quiet =
        matches!(state, GroupState::CompletingRebalance) || (state == GroupState::Stable && !is_leader);
    if unchanged && quiet {
        return Some(current_generation(group, &request.member_id));
    }
    let member = group.member_mut(&request.member_id).expect("caller checked");
    member.protocols = request.protocols.clone();
    member.join_waiter = Some(waiter);
    if state != GroupState::PreparingRebalance {
        group.prepare_rebalance(limits, now);
    }
    None
}

/// A static member rejoining with a new member id takes over its old
/// identity: in a stable group without a rebalance.
fn rejoin_static(
    group: &mut Group,
    old_id: &str,
    request: JoinRequest,
    limits: GroupLimits,
    now: Instant,
    waiter: oneshot::Sender<JoinResult>,
) -> Result<(), Box<JoinResult>> {
    let new_id = format!("{}-{}", request.client_id, Uuid::new_v4());
    let was_leader = group.leader.as_deref() == Some(old_id);
    let Some(mut old) = group.remove_member(old_id) else {
        return Err(Box::new(JoinResult::error(ResponseError::UnknownMemberId, "")));
    };
    old.id = new_id.clone();
    old.client_id = request.client_id.clone();
    old.client_host = request.client_host.clone();
    old.session_timeout = Duration::from_millis(request.session_timeout_ms.max(0) as u64);
    old.heartbeat_deadline = now + old.session_timeout;
    group.static_members.insert(request.instance_id.clone().expect("static"), new_id.clone());
    // As Kafka: the rejoined member's metadata replaces the old (a restarted
    // client owns no partitions yet), and only a change of the protocol the
    // group would select next calls for a rebalance.
    old.protocols = request.protocols;
    group.members.push(old);
    if group.state == GroupState::Stable && group.select_protocol() == group.protocol {
        if !was_leader {
            return Err(Box::new(current_generation(group, &new_id)));
        }
        // KIP-814: a v9 leader learns the members but keeps the assignment;
        // older leaders are told the old leader id, so they do not reassign.
        group.leader = Some(new_id.clone());
        let mut result = current_generation(group, &new_id);
        if request.supports_skip_assignment {
            let protocol = group.protocol.clone().unwrap_or_default();
            result.members = group
                .members
                .iter()
                .map(|m| (m.id.clone(), m.instance_id.clone(), m.metadata(&protocol)))
                .collect();
            result.skip_assignment = true;
        } else {
            result.leader = old_id.to_owned();
        }
        return Err(Box::new(result));
    }
    group.member_mut(&new_id).expect("just added").join_waiter = Some(waiter);
    if group.state != GroupState::PreparingRebalance {
        group.prepare_rebalance(limits, now);
    }
    group.maybe_complete_join(now, false);
    Ok(())
}

/// The answer to a join that changes nothing: the current generation.
fn current_generation(group: &Group, member_id: &str) -> JoinResult {
    JoinResult {
        error: None,
        generation: group.generation,
        protocol_type: group.protocol_type.clone(),
        protocol: group.protocol.clone(),
        leader: group.leader.clone().unwrap_or_default(),
        member_id: member_id.to_owned(),
        members: Vec::new(),
        skip_assignment: false,
    }
}

/// Topics the members of a consumer-protocol group subscribe to.
fn subscribed_topics(group: &Group) -> Vec<String> {
    if group.protocol_type.as_deref() != Some("consumer") {
        return Vec::new();
    }
    let protocol = group.protocol.clone().unwrap_or_default();
    let mut topics = Vec::new();
    for member in &group.members {
        let Some((_, metadata)) = member.protocols.iter().find(|(n, _)| *n == protocol) else { continue };
        topics.extend(subscription_topics(metadata));
    }
    topics
}

/// The topics a JoinGroup member's consumer-protocol metadata names; none
/// when the metadata does not decode.
pub fn subscription_topics(metadata: &Bytes) -> Vec<String> {
    use kafka_protocol::messages::ConsumerProtocolSubscription;
    use kafka_protocol::protocol::Decodable;
    if metadata.len() < 2 {
        return Vec::new();
    }
    let version = i16::from_be_bytes([metadata[0], metadata[1]]);
    let mut body = metadata.slice(2..);
    match ConsumerProtocolSubscription::decode(&mut body, version.clamp(0, 3)) {
        Ok(subscription) => subscription.topics.iter().map(|t| t.to_string()).collect(),
        Err(_) => Vec::new(),
    }
}

/// Kafka's checks of a TxnOffsetCommit's sender, looser than a plain
/// commit's: an empty member id or a negative generation is not checked
/// (clients before TxnOffsetCommit v3 send neither).
fn check_txn_committer(groups: &HashMap<String, Group>, commit: &TxnCommit) -> Result<(), ResponseError> {
    let Some(group) = groups.get(&commit.group_id) else { return Ok(()) };
    if group.is_fenced(&commit.member_id, commit.instance_id.as_deref()) {
        return Err(ResponseError::FencedInstanceId);
    }
    if let Some(consumer) = &group.consumer {
        if commit.member_id.is_empty() {
            return Ok(());
        }
        let member = consumer.members.get(&commit.member_id).ok_or(ResponseError::UnknownMemberId)?;
        let epochs = [member.epoch, member.previous_epoch];
        if commit.generation >= 0 && !epochs.contains(&commit.generation) {
            return Err(ResponseError::StaleMemberEpoch);
        }
        return Ok(());
    }
    if !commit.member_id.is_empty() && group.member(&commit.member_id).is_none() {
        return Err(ResponseError::UnknownMemberId);
    }
    if commit.generation >= 0 && commit.generation != group.generation {
        return Err(ResponseError::IllegalGeneration);
    }
    Ok(())
}

/// A transactional offset read back at start: staged until its marker.
fn stage_loaded_offset(
    groups: &mut HashMap<String, Group>,
    producer_id: i64,
    key: RecordKey,
    value: Option<&[u8]>,
) {
    let (RecordKey::Offset { group, topic, partition }, Some(value)) = (key, value) else { return };
    match OffsetValue::decode(value) {
        Ok(offset) => {
            let group = groups.entry(group.clone()).or_insert_with(|| Group::new(&group));
            group.pending_txn_offsets.entry(producer_id).or_default().insert((topic, partition), offset);
        }
        Err(e) => tracing::warn!("skipping transactional offset record: {e}"),
    }
}

/// A marker read back at start: the producer's staged offsets in this
/// partition are committed or dropped.
fn complete_loaded_txn(
    groups: &mut HashMap<String, Group>,
    producer_id: i64,
    commit: bool,
    in_partition: impl Fn(&str) -> bool,
) {
    for group in groups.values_mut().filter(|g| in_partition(&g.id)) {
        if let Some(pending) = group.pending_txn_offsets.remove(&producer_id) {
            if commit {
                group.offsets.extend(pending);
            }
        }
    }
}

fn apply_record(groups: &mut HashMap<String, Group>, key: RecordKey, value: Option<&[u8]>, now: Instant) {
    let group = groups.entry(key.group().to_owned()).or_insert_with(|| Group::new(key.group()));
    match (key, value) {
        (RecordKey::Offset { topic, partition, .. }, Some(value)) => match OffsetValue::decode(value) {
            Ok(offset) => {
                group.offsets.insert((topic, partition), offset);
            }
            Err(e) => tracing::warn!("skipping offset record: {e}"),
        },
        (RecordKey::Offset { topic, partition, .. }, None) => {
            group.offsets.remove(&(topic, partition));
        }
        (RecordKey::Group { .. }, Some(value)) => match GroupValue::decode(value) {
            Ok(stored) => group.restore(stored, now),
            Err(e) => tracing::warn!("skipping group record: {e}"),
        },
        (RecordKey::Group { .. }, None) => {
            group.restore(
                GroupValue {
                    protocol_type: String::new(),
                    generation: 0,
                    protocol: None,
                    leader: None,
                    state_timestamp_ms: -1,
                    members: Vec::new(),
                },
                now,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;

    #[test]
    fn txn_commits_check_only_what_the_sender_names() {
        let commit = |member: &str, generation| TxnCommit {
            group_id: "g".into(),
            producer_id: 1,
            producer_epoch: 0,
            generation,
            member_id: member.into(),
            instance_id: None,
        };
        let mut groups = HashMap::new();
        assert!(check_txn_committer(&groups, &commit("m", 3)).is_ok(), "an unknown group takes any commit");
        let mut group = Group::new("g");
        group.generation = 5;
        groups.insert("g".to_owned(), group);
        assert!(check_txn_committer(&groups, &commit("", -1)).is_ok());
        assert!(check_txn_committer(&groups, &commit("", 5)).is_ok());
        assert_eq!(check_txn_committer(&groups, &commit("", 4)), Err(ResponseError::IllegalGeneration));
        assert_eq!(check_txn_committer(&groups, &commit("m", -1)), Err(ResponseError::UnknownMemberId));
    }

    #[test]
    fn delete_groups_is_answered_once_its_tombstones_replicate() {
        use crate::coordinator_host::testing::HeldReplication;
        use crate::server::Broker;
        use strom_metadata::{block_on, NewTopic};
        let dir = tempfile::tempdir().unwrap();
        let overrides = [("log.dirs".to_owned(), dir.path().display().to_string())];
        let broker = Broker::open(BrokerConfig::from_properties("", &overrides).unwrap()).unwrap();
        let topic = NewTopic { name: "t".into(), partitions: 1, replication_factor: 1, ..Default::default() };
        block_on(broker.controller().create_topic(topic, false)).unwrap();
        block_on(internal_topic::create(&*broker, &broker.groups().offsets_topic())).unwrap();
        let coordinator = broker.groups();
        let commit = |group: &str| {
            let entry =
                CommitEntry { topic: "t".into(), partition: 0, offset: 7, leader_epoch: -1, metadata: None };
            assert_eq!(block_on(coordinator.commit(&*broker, group, -1, "", None, &[entry])), [None]);
        };
        commit("kept");
        commit("gone");

        let timed_out = HeldReplication::new(&broker);
        timed_out.replicate(Err(ResponseError::RequestTimedOut));
        let refused = block_on(coordinator.delete_group(&timed_out, "kept"));
        assert_eq!(refused, Some(ResponseError::CoordinatorNotAvailable), "answered only once replicated");

        let held = HeldReplication::new(&broker);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let delete = coordinator.delete_group(&held, "gone");
            tokio::pin!(delete);
            tokio::select! {
                biased;
                answer = &mut delete => panic!("answered before replicated: {answer:?}"),
                _ = tokio::task::yield_now() => {}
            }
            held.replicate(Ok(()));
            assert_eq!(delete.await, None);
        });
        assert!(coordinator.fetch_offsets("gone", None).is_empty());
        assert_eq!(
            block_on(coordinator.delete_group(&*broker, "gone")),
            Some(ResponseError::GroupIdNotFound)
        );
    }

    #[test]
    fn groups_map_to_kafkas_partitions() {
        let coordinator = GroupCoordinator::new(BrokerConfig::embedded_defaults().groups);
        assert_eq!(coordinator.partition_for("polygenelubricants"), 0);
        // 99162322 % 50
        assert_eq!(coordinator.partition_for("hello"), 22);
    }
}
