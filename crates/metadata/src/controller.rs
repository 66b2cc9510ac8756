//! The controller: the only writer of the metadata log.
//!
//! Each operation runs alone (one at a time, under an async lock): it is
//! decided against the latest published image by the pure functions of
//! [`crate::operations`], appended through the [`RecordLog`], and answered
//! only once the [`MetadataLoader`] has applied the batch, so no answer
//! precedes the commit and the next operation sees the previous one.
//!
//! On a single node the record log is [`LocalRecordLog`], which commits
//! before `append` returns, so every future here completes without waiting
//! on anything but the fsync; [`block_on`] lets the broker's synchronous
//! handlers call in.

use std::collections::BTreeMap;
use std::future::Future;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Wake, Waker};

use bytes::Bytes;
use tokio::sync::{Mutex, MutexGuard};
use uuid::Uuid;

use crate::acl::{Acl, AclFilter};
use crate::image::{
    config_record, ControllerImage, MetadataImage, TopicImage, RESOURCE_BROKER, RESOURCE_GROUP,
    RESOURCE_TOPIC,
};
use crate::kraft_records::{ConfigRecord, FeatureLevelRecord, MetadataRecord};
use crate::loader::{encode_record, MetadataLoader};
use crate::operations::{
    self, BrokerHeartbeat, BrokerHeartbeats, BrokerRegistration, HeartbeatReply, MIN_INSYNC_REPLICAS,
};
use crate::placement::{SplitMix64, StripedReplicaPlacer};
use crate::record_log::{AppendError, Claim, LocalRecordLog, RecordLog};
use crate::topic_config::{validate_dynamic_broker_config, validate_topic_config};

pub use crate::operations::validate_topic_name;
pub use crate::record_log::{METADATA_LEADER_EPOCH, METADATA_LOG_DIR};

/// The most partitions one request may create unless configured otherwise
/// (`controller.max.partitions.per.request`): Kafka's bound on the records of
/// one user operation, so a hostile count (2^31 - 1) is refused instead of
/// exhausting memory and descriptors.
pub const DEFAULT_MAX_PARTITIONS_PER_REQUEST: i32 = 10_000;
/// `broker.session.timeout.ms`'s default.
pub const DEFAULT_BROKER_SESSION_TIMEOUT_MS: i64 = 9_000;
/// The feature whose level says which records and versions the log may hold.
pub const METADATA_VERSION_FEATURE: &str = "metadata.version";
/// The `metadata.version` a new log starts at: Kafka 4.1's latest
/// production level, 4.1-IV1.
pub const METADATA_VERSION_LEVEL: i16 = 27;
/// The feature that turns on eligible leader replicas (KIP-966).
pub const ELIGIBLE_LEADER_REPLICAS_FEATURE: &str = "eligible.leader.replicas.version";
/// Its level on a new cluster: Kafka 4.1 enables ELR on newly formatted
/// clusters.
pub const ELIGIBLE_LEADER_REPLICAS_LEVEL: i16 = 1;
/// The feature that turns on the consumer group protocol (KIP-848) at 1.
pub const GROUP_VERSION_FEATURE: &str = "group.version";
/// The quorum's own feature: 1 once its voter set is dynamic (KIP-853). It
/// lives in the quorum's control records, never in a FeatureLevelRecord.
pub const KRAFT_VERSION_FEATURE: &str = "kraft.version";

/// The feature levels a Strom node supports, as (name, min, max): what it
/// registers with and what ApiVersions lists. Kafka lists only features
/// whose max is above 0, so `transaction.version` (no KIP-890 epoch bumps
/// yet), `share.version` and `streams.version` are left out.
pub const SUPPORTED_FEATURES: [(&str, i16, i16); 4] = [
    (METADATA_VERSION_FEATURE, METADATA_VERSION_LEVEL, METADATA_VERSION_LEVEL),
    (ELIGIBLE_LEADER_REPLICAS_FEATURE, 0, ELIGIBLE_LEADER_REPLICAS_LEVEL),
    (GROUP_VERSION_FEATURE, 0, 1),
    (KRAFT_VERSION_FEATURE, 0, 1),
];

/// The levels a new metadata log is finalized at, as Kafka's format writes
/// them: each supported feature's max, but for `kraft.version`.
pub const BOOTSTRAP_FEATURES: [(&str, i16); 3] = [
    (METADATA_VERSION_FEATURE, METADATA_VERSION_LEVEL),
    (ELIGIBLE_LEADER_REPLICAS_FEATURE, ELIGIBLE_LEADER_REPLICAS_LEVEL),
    (GROUP_VERSION_FEATURE, 1),
];

/// Why a metadata change was refused; each maps to one Kafka error code.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("Topic '{0}' already exists.")]
    TopicAlreadyExists(String),
    #[error("unknown topic or partition")]
    UnknownTopic,
    #[error("{0}")]
    InvalidTopic(String),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    #[error("{0}")]
    InvalidConfig(String),
    #[error("{0}")]
    PolicyViolation(String),
    #[error("all producer ids have been handed out")]
    ProducerIdsExhausted,
    #[error("{0}")]
    StaleBrokerEpoch(String),
    #[error("broker {0} is not registered")]
    BrokerIdNotRegistered(i32),
    #[error("{0}")]
    DuplicateBrokerRegistration(String),
    #[error("{0}")]
    InconsistentClusterId(String),
    #[error("{0}")]
    UnsupportedVersion(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    UnsupportedSaslMechanism(String),
    #[error("{0}")]
    UnacceptableCredential(String),
    #[error("{0}")]
    ResourceNotFound(String),
    #[error("{0}")]
    DuplicateResource(String),
    #[error("{0}")]
    FencedLeaderEpoch(String),
    #[error("{0}")]
    InvalidUpdateVersion(String),
    #[error("{0}")]
    IneligibleReplica(String),
    #[error("unknown topic id")]
    UnknownTopicId,
    /// An AlterPartition's change elected another leader: the sender must
    /// learn it from the metadata before trying again.
    #[error("a new leader was elected")]
    NewLeaderElected,
    #[error("the partition already has the leader asked for")]
    ElectionNotNeeded,
    #[error("{0}")]
    PreferredLeaderNotAvailable(String),
    #[error("{0}")]
    EligibleLeadersNotAvailable(String),
    #[error("No partition reassignment is in progress.")]
    NoReassignmentInProgress,
    /// This node is not the active controller; `leader_id` is, if known.
    #[error("this node is not the active controller")]
    NotController { leader_id: Option<i32> },
    /// A record of the metadata log that this version cannot apply: replay
    /// stops there, since an image that skipped it would silently differ
    /// from every other node's.
    #[error("metadata log record at offset {offset} cannot be replayed: {reason}")]
    UnreadableRecord { offset: i64, reason: crate::kraft_records::DecodeError },
    /// Storage failed: the metadata log's or a new partition's; the message
    /// names the operation and the path.
    #[error(transparent)]
    Storage(#[from] strom_storage::StorageError),
}

impl From<AppendError> for MetadataError {
    fn from(e: AppendError) -> Self {
        match e {
            AppendError::NotController { leader_id } => Self::NotController { leader_id },
            AppendError::Storage(e) => Self::Storage(e),
        }
    }
}

/// Producer ids a broker may hand out: `[start, end)`.
pub type ProducerIdBlock = std::ops::Range<i64>;

/// Ids per block, as in Kafka.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// A topic to create, as asked by CreateTopics or auto-creation.
#[derive(Debug, Clone, Default)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
    /// Manual assignments as (partition index, broker ids); when given,
    /// they replace `partitions` and `replication_factor`.
    pub assignments: Vec<(i32, Vec<i32>)>,
}

/// A resource whose configs live in the metadata log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigResource {
    /// A topic's overrides, by topic name.
    Topic(String),
    /// Dynamic broker configs: a node id, or "" for the cluster-wide default.
    Broker(String),
    /// A group's overrides (KIP-848), by group id.
    Group(String),
}

impl ConfigResource {
    pub(crate) fn record(&self, name: &str, value: Option<&str>) -> ConfigRecord {
        match self {
            Self::Topic(topic) => config_record(RESOURCE_TOPIC, topic, name, value),
            Self::Broker(broker) => config_record(RESOURCE_BROKER, broker, name, value),
            Self::Group(group) => config_record(RESOURCE_GROUP, group, name, value),
        }
    }

    pub(crate) fn validate(&self, name: &str, value: &str) -> Result<(), MetadataError> {
        match self {
            Self::Topic(_) => validate_topic_config(name, value),
            Self::Broker(_) => validate_dynamic_broker_config(name, value),
            Self::Group(_) => crate::group_config::validate_group_config(name, value),
        }
        .map_err(MetadataError::InvalidConfig)
    }
}

/// The partition logs of this node. The controller has them created before
/// its records name the partitions and discards them if the records are not
/// written, so the metadata never names a partition without a log and a
/// crash in between leaves only logs no topic owns (removed at start).
pub trait PartitionLogs: Sync {
    /// Refuses `count` new logs if this node has no room for them.
    fn check_room(&self, count: usize) -> Result<(), MetadataError>;
    /// Creates the logs of `partitions` of `topic`: all of them, or none.
    fn create(&self, topic: &TopicImage, partitions: Range<i32>) -> Result<(), MetadataError>;
    /// Removes the logs `create` made for records that were then not written.
    fn discard(&self, topic: &TopicImage, partitions: Range<i32>);
}

/// For callers that keep no logs (tests, validation).
pub struct NoLogs;

impl PartitionLogs for NoLogs {
    fn check_room(&self, _: usize) -> Result<(), MetadataError> {
        Ok(())
    }

    fn create(&self, _: &TopicImage, _: Range<i32>) -> Result<(), MetadataError> {
        Ok(())
    }

    fn discard(&self, _: &TopicImage, _: Range<i32>) {}
}

/// What the controller keeps in memory between operations.
struct ControllerState {
    placer: StripedReplicaPlacer,
    heartbeats: BrokerHeartbeats,
    /// The leader epoch this controller last wrote in, if any.
    epoch: Option<i32>,
    /// The broker session timeout, for a new epoch's fresh sessions.
    session_timeout_ms: i64,
    /// This node's part in choosing elections.
    election_defaults: operations::ElectionDefaults,
}

pub struct Controller {
    cluster_id: String,
    max_partitions_per_request: i32,
    log: Arc<dyn RecordLog>,
    loader: Arc<MetadataLoader>,
    /// Held for a whole operation: decide, append, wait for the commit.
    state: Mutex<ControllerState>,
    /// The epoch of the last claim, set under `state`: the operation's
    /// appends name it, so a decision never lands in a later epoch.
    claimed_epoch: AtomicI32,
    /// The feature levels a new log starts at, `metadata.version` first.
    bootstrap_features: Vec<(String, i16)>,
}

impl Controller {
    /// A controller of cluster `cluster_id` writing through `log`, whose
    /// commits `loader` applies.
    pub fn new(cluster_id: &str, log: Arc<dyn RecordLog>, loader: Arc<MetadataLoader>) -> Self {
        let seed = u64::from_le_bytes(Uuid::new_v4().as_bytes()[..8].try_into().expect("8 bytes"));
        Self {
            cluster_id: cluster_id.to_owned(),
            max_partitions_per_request: DEFAULT_MAX_PARTITIONS_PER_REQUEST,
            log,
            loader,
            state: Mutex::new(ControllerState {
                placer: StripedReplicaPlacer::new(SplitMix64::new(seed)),
                heartbeats: BrokerHeartbeats::new(DEFAULT_BROKER_SESSION_TIMEOUT_MS),
                epoch: None,
                session_timeout_ms: DEFAULT_BROKER_SESSION_TIMEOUT_MS,
                election_defaults: operations::ElectionDefaults::default(),
            }),
            claimed_epoch: AtomicI32::new(0),
            bootstrap_features: BOOTSTRAP_FEATURES.iter().map(|(n, l)| ((*n).to_owned(), *l)).collect(),
        }
    }

    /// A single node's controller: opens (or creates) the metadata log in
    /// `dir`, replays it, applies `configure` (the node's static configs),
    /// and writes the bootstrap records into a new log.
    pub fn open_local(
        dir: &Path,
        cluster_id: &str,
        configure: impl FnOnce(Self) -> Self,
    ) -> Result<Self, MetadataError> {
        let loader = Arc::new(MetadataLoader::new());
        let log = Arc::new(LocalRecordLog::open(dir, loader.clone())?);
        let controller = configure(Self::new(cluster_id, log, loader));
        block_on(controller.bootstrap())?;
        Ok(controller)
    }

    /// Sets `controller.max.partitions.per.request`.
    pub fn with_max_partitions_per_request(mut self, max: i32) -> Self {
        self.max_partitions_per_request = max.max(1);
        self
    }

    /// Sets the feature levels a new log starts at, as `format` chose
    /// them; `metadata.version` is the one Strom serves.
    pub fn with_bootstrap_features(mut self, mut levels: Vec<(String, i16)>) -> Self {
        levels.retain(|(name, _)| name != METADATA_VERSION_FEATURE);
        levels.insert(0, (METADATA_VERSION_FEATURE.to_owned(), METADATA_VERSION_LEVEL));
        self.bootstrap_features = levels;
        self
    }

    /// Sets `broker.session.timeout.ms`.
    pub fn with_session_timeout_ms(self, timeout_ms: i64) -> Self {
        let mut state = self.state.try_lock().expect("not yet shared");
        state.heartbeats = BrokerHeartbeats::new(timeout_ms);
        state.session_timeout_ms = timeout_ms;
        drop(state);
        self
    }

    /// Sets this node's id and static `unclean.leader.election.enable`,
    /// which elections fall back to.
    pub fn with_election_defaults(self, defaults: operations::ElectionDefaults) -> Self {
        self.state.try_lock().expect("not yet shared").election_defaults = defaults;
        self
    }

    /// The cluster id, from the log dirs' `meta.properties`.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// The loader whose images this controller reads.
    pub fn loader(&self) -> &Arc<MetadataLoader> {
        &self.loader
    }

    /// The latest published image; cheap to take and consistent for as
    /// long as it is held.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.loader.image()
    }

    /// One past the last applied record: on a single node, which commits
    /// each batch as it is fsync'd, the log end offset and high watermark.
    pub fn applied_end_offset(&self) -> i64 {
        self.image().last_offset + 1
    }

    /// Refuses a request that would create more than
    /// `controller.max.partitions.per.request` partitions.
    pub fn check_partitions_per_request(&self, new_partitions: i64) -> Result<(), MetadataError> {
        operations::check_partitions_per_request(new_partitions, self.max_partitions_per_request)
    }

    /// Starts an operation: takes the controller and waits until this node
    /// may write (NOT_CONTROLLER otherwise). A controller that has just
    /// become active starts every broker's session afresh, as Kafka's
    /// `BrokerHeartbeatManager` does, and writes the bootstrap records into
    /// a log that has none yet.
    async fn begin(&self) -> Result<(MutexGuard<'_, ControllerState>, Claim), MetadataError> {
        let mut state = self.state.lock().await;
        let claim = self.claim().await?;
        if state.epoch != Some(claim.epoch) {
            state.heartbeats = BrokerHeartbeats::new(state.session_timeout_ms);
            state.epoch = Some(claim.epoch);
            self.write_metadata_version(state.election_defaults.min_insync_replicas).await?;
            return Ok((state, self.claim().await?));
        }
        Ok((state, claim))
    }

    /// Claims the log and remembers the epoch the decision is taken in.
    async fn claim(&self) -> Result<Claim, MetadataError> {
        let claim = self.log.claim().await?;
        self.claimed_epoch.store(claim.epoch, Ordering::Release);
        Ok(claim)
    }

    /// Writes `metadata.version` (and the other feature levels a new
    /// cluster starts at) into a log that has none yet.
    pub async fn bootstrap(&self) -> Result<(), MetadataError> {
        let _state = self.begin().await?;
        Ok(())
    }

    /// A new log's bootstrap records, written in one batch: the feature
    /// levels, `metadata.version` first, at the levels `format` chose; and,
    /// when eligible leader replicas are on, the cluster-wide
    /// `min.insync.replicas` at this controller's static value, which
    /// KIP-966 keeps set.
    async fn write_metadata_version(&self, min_insync_replicas: i32) -> Result<(), MetadataError> {
        if self.image().metadata_version() != 0 {
            return Ok(());
        }
        let mut records: Vec<MetadataRecord> = self
            .bootstrap_features
            .iter()
            .map(|(name, level)| {
                FeatureLevelRecord { name: name.clone(), feature_level: *level, ..Default::default() }.into()
            })
            .collect();
        let elr =
            self.bootstrap_features.iter().any(|(n, l)| n == ELIGIBLE_LEADER_REPLICAS_FEATURE && *l >= 1);
        if !elr {
            return self.commit(records).await.map(drop);
        }
        let min_isr = min_insync_replicas.to_string();
        records
            .push(ConfigResource::Broker(String::new()).record(MIN_INSYNC_REPLICAS, Some(&min_isr)).into());
        self.commit(records).await.map(drop)
    }

    /// Appends `records` as one batch and waits until it is applied;
    /// returns the offset of its last record.
    async fn commit(&self, records: Vec<MetadataRecord>) -> Result<u64, MetadataError> {
        let values: Vec<Bytes> = records.iter().map(encode_record).collect();
        let epoch = self.claimed_epoch.load(Ordering::Acquire);
        Ok(self.log.append(epoch, values).await?)
    }

    /// Creates a topic, or only checks that it could be created.
    pub async fn create_topic(
        &self,
        topic: NewTopic,
        validate_only: bool,
    ) -> Result<TopicImage, MetadataError> {
        self.create_topic_with_logs(topic, validate_only, &NoLogs).await
    }

    /// [`Self::create_topic`], with the partitions' logs created by `logs`
    /// before the topic is written.
    pub async fn create_topic_with_logs(
        &self,
        topic: NewTopic,
        validate_only: bool,
        logs: &dyn PartitionLogs,
    ) -> Result<TopicImage, MetadataError> {
        let (mut state, _) = self.begin().await?;
        let image = self.image();
        let (records, created) =
            operations::create_topic(&image, &topic, &mut state.placer, self.max_partitions_per_request)?;
        let partitions = 0..created.partitions.len() as i32;
        if validate_only {
            logs.check_room(partitions.len())?;
            return Ok(created);
        }
        self.commit_with_logs(records, logs, &created, partitions).await?;
        Ok(created)
    }

    /// Has `logs` create the logs of `partitions`, then commits `records`;
    /// the logs are discarded if the write fails.
    async fn commit_with_logs(
        &self,
        records: Vec<MetadataRecord>,
        logs: &dyn PartitionLogs,
        topic: &TopicImage,
        partitions: Range<i32>,
    ) -> Result<(), MetadataError> {
        logs.create(topic, partitions.clone())?;
        if let Err(e) = self.commit(records).await {
            logs.discard(topic, partitions);
            return Err(e);
        }
        Ok(())
    }

    /// Grows `name` to `count` partitions (CreatePartitions); partitions are
    /// never removed. `assignments`, when given, names each new partition's
    /// replicas.
    pub async fn create_partitions(
        &self,
        name: &str,
        count: i32,
        assignments: Option<&[Vec<i32>]>,
        validate_only: bool,
    ) -> Result<(), MetadataError> {
        self.create_partitions_with_logs(name, count, assignments, validate_only, &NoLogs).await
    }

    /// [`Self::create_partitions`], with the new partitions' logs created
    /// by `logs` before they are written.
    pub async fn create_partitions_with_logs(
        &self,
        name: &str,
        count: i32,
        assignments: Option<&[Vec<i32>]>,
        validate_only: bool,
        logs: &dyn PartitionLogs,
    ) -> Result<(), MetadataError> {
        let (mut state, _) = self.begin().await?;
        let image = self.image();
        let (records, grown) = operations::create_partitions(
            &image,
            name,
            count,
            assignments,
            &mut state.placer,
            self.max_partitions_per_request,
        )?;
        let current = image.topic(name).map_or(0, |t| t.partitions.len() as i32);
        if validate_only {
            return logs.check_room((count - current) as usize);
        }
        self.commit_with_logs(records, logs, &grown, current..count).await
    }

    /// Deletes a topic by id, returning its name.
    pub async fn delete_topic(&self, topic_id: Uuid) -> Result<String, MetadataError> {
        let _state = self.begin().await?;
        let (records, name) = operations::delete_topic(&self.image(), topic_id)?;
        self.commit(records).await?;
        Ok(name)
    }

    /// Replaces the configs of `resource` with what `change` makes of the
    /// current image and the resource's current configs, or only checks that
    /// it could. `change` runs with the controller held, so concurrent
    /// changes to one resource never lose updates.
    pub async fn alter_configs<F>(
        &self,
        resource: &ConfigResource,
        validate_only: bool,
        change: F,
    ) -> Result<(), MetadataError>
    where
        F: FnOnce(
            &MetadataImage,
            &BTreeMap<String, String>,
        ) -> Result<BTreeMap<String, String>, MetadataError>,
    {
        let _state = self.begin().await?;
        let image = self.image();
        let current = match resource {
            ConfigResource::Topic(name) => &image.topic(name).ok_or(MetadataError::UnknownTopic)?.configs,
            ConfigResource::Broker(name) => image.broker_configs(name),
            ConfigResource::Group(name) => image.group_configs(name),
        };
        let next = change(&image, current)?;
        let records = operations::alter_configs(resource, current, &next)?;
        let cluster_wide = *resource == ConfigResource::Broker(String::new());
        let removes_min_isr =
            current.contains_key(MIN_INSYNC_REPLICAS) && !next.contains_key(MIN_INSYNC_REPLICAS);
        if cluster_wide && image.elr_enabled() && removes_min_isr {
            // KIP-966: the leader rules read the cluster-wide value, so it stays set.
            return Err(MetadataError::InvalidConfig(
                "the cluster-wide min.insync.replicas cannot be removed while eligible leader replicas are enabled"
                    .into(),
            ));
        }
        if validate_only || records.is_empty() {
            return Ok(());
        }
        self.commit(records).await.map(drop)
    }

    /// CreateAcls: stores the valid bindings; per binding `Ok` or why it is
    /// invalid.
    pub async fn create_acls(&self, acls: &[Acl]) -> Result<Vec<Result<(), String>>, MetadataError> {
        let _state = self.state.lock().await;
        let (records, results) = operations::create_acls(&self.image(), acls);
        if !records.is_empty() {
            self.commit(records).await?;
        }
        Ok(results)
    }

    /// DeleteAcls: removes what the filters match; per filter the removed
    /// bindings or why the filter is invalid.
    pub async fn delete_acls(
        &self,
        filters: &[AclFilter],
    ) -> Result<Vec<Result<Vec<Acl>, String>>, MetadataError> {
        let _state = self.state.lock().await;
        let (records, results) = operations::delete_acls(&self.image(), filters);
        if !records.is_empty() {
            self.commit(records).await?;
        }
        Ok(results)
    }

    /// Alters SCRAM credentials (AlterUserScramCredentials): the users
    /// whose changes are all valid are written together; each user's outcome
    /// is returned in order of first mention.
    pub async fn alter_scram_credentials(
        &self,
        alterations: &[operations::ScramAlteration],
    ) -> Result<Vec<operations::UserOutcome>, MetadataError> {
        let _state = self.state.lock().await;
        let (records, outcomes) = operations::alter_scram_credentials(&self.image(), alterations);
        if !records.is_empty() {
            self.commit(records).await?;
        }
        Ok(outcomes)
    }

    /// Alters client quotas (AlterClientQuotas), or only checks that it
    /// could: the valid entries are written together; each entry's outcome
    /// is returned in request order.
    pub async fn alter_client_quotas(
        &self,
        alterations: &[operations::QuotaAlteration],
        validate_only: bool,
    ) -> Result<Vec<Result<(), MetadataError>>, MetadataError> {
        let _state = self.state.lock().await;
        let image = self.image();
        let mut records = Vec::new();
        let outcomes = alterations
            .iter()
            .map(|a| operations::alter_client_quotas(&image, a).map(|mut r| records.append(&mut r)))
            .collect();
        if !validate_only && !records.is_empty() {
            self.commit(records).await?;
        }
        Ok(outcomes)
    }

    /// UpdateFeatures: finalizes the levels of `updates` (all of them, or
    /// none when one is refused); `local` is this controller's node id.
    pub async fn update_features(
        &self,
        local: i32,
        updates: &[operations::FeatureUpdate],
        validate_only: bool,
    ) -> Result<(), MetadataError> {
        let _state = self.begin().await?;
        let records = operations::update_features(&self.image(), local, updates)?;
        if !validate_only && !records.is_empty() {
            self.commit(records).await?;
        }
        Ok(())
    }

    /// Reserves the next block of producer ids for `broker_id` at
    /// `broker_epoch`. The block is committed before it is returned, so no
    /// id is handed out twice, even across a crash.
    pub async fn allocate_producer_ids(
        &self,
        broker_id: i32,
        broker_epoch: i64,
    ) -> Result<ProducerIdBlock, MetadataError> {
        let _state = self.begin().await?;
        let (records, block) = operations::allocate_producer_ids(&self.image(), broker_id, broker_epoch)?;
        self.commit(records).await?;
        Ok(block)
    }

    /// BrokerRegistration: registers the broker fenced and returns its
    /// broker epoch, the offset of its registration record.
    pub async fn register_broker(
        &self,
        request: BrokerRegistration,
        now_ms: i64,
    ) -> Result<i64, MetadataError> {
        let (mut state, claim) = self.begin().await?;
        let image = self.image();
        let mut records =
            operations::previous_incarnation_shutdown(&image, &request, state.election_defaults);
        // Kafka's broker epoch is the offset the registration is written
        // at, after the partition changes its previous incarnation left.
        let epoch = (claim.next_offset + records.len() as u64) as i64;
        records.extend(operations::register_broker(
            &image,
            &self.cluster_id,
            &request,
            &state.heartbeats,
            now_ms,
            epoch,
        )?);
        self.commit(records).await?;
        state.heartbeats.registered(request.broker_id);
        state.heartbeats.touch(request.broker_id, now_ms);
        Ok(epoch)
    }

    /// BrokerHeartbeat.
    pub async fn broker_heartbeat(
        &self,
        request: BrokerHeartbeat,
        now_ms: i64,
    ) -> Result<HeartbeatReply, MetadataError> {
        let (mut state, _) = self.begin().await?;
        let image = self.image();
        let defaults = state.election_defaults;
        let (records, reply) =
            operations::broker_heartbeat(&image, &request, &mut state.heartbeats, now_ms, defaults)?;
        let mut last_offset = image.last_offset;
        if !records.is_empty() {
            last_offset = self.commit(records).await? as i64;
        }
        if request.want_shut_down && !reply.should_shut_down {
            // Every active broker must see the moved leaderships first.
            state.heartbeats.note_shutdown_offset(request.broker_id, last_offset);
        }
        Ok(reply)
    }

    /// Fences the brokers whose sessions have expired; returns how many
    /// records that took.
    pub async fn fence_expired_brokers(&self, now_ms: i64) -> Result<usize, MetadataError> {
        let (mut state, _) = self.begin().await?;
        let defaults = state.election_defaults;
        let records =
            operations::fence_expired_brokers(&self.image(), &mut state.heartbeats, now_ms, defaults);
        let count = records.len();
        if count > 0 {
            self.commit(records).await?;
        }
        Ok(count)
    }

    /// UnregisterBroker.
    pub async fn unregister_broker(&self, broker_id: i32) -> Result<(), MetadataError> {
        let (mut state, _) = self.begin().await?;
        let records = operations::unregister_broker(&self.image(), broker_id, state.election_defaults)?;
        self.commit(records).await?;
        state.heartbeats.remove(broker_id);
        Ok(())
    }

    /// AlterPartition: a partition leader's new ISRs; per entry the
    /// partition after the change, or why it was refused.
    pub async fn alter_partition(
        &self,
        broker_id: i32,
        broker_epoch: i64,
        changes: &[operations::IsrChange],
    ) -> Result<Vec<operations::IsrOutcome>, MetadataError> {
        let (state, _) = self.begin().await?;
        let (records, results) = operations::alter_partition(
            &self.image(),
            broker_id,
            broker_epoch,
            changes,
            state.election_defaults,
        )?;
        if !records.is_empty() {
            self.commit(records).await?;
        }
        Ok(results)
    }

    /// ElectLeaders: preferred or unclean elections of the named partitions
    /// (all of them when `None`).
    pub async fn elect_leaders(
        &self,
        election_type: i8,
        partitions: Option<&[(String, Vec<i32>)]>,
    ) -> Result<Vec<operations::TopicElections>, MetadataError> {
        let (state, _) = self.begin().await?;
        let (records, results) =
            operations::elect_leaders(&self.image(), election_type, partitions, state.election_defaults)?;
        if !records.is_empty() {
            self.commit(records).await?;
        }
        Ok(results)
    }

    /// AlterPartitionReassignments (KIP-455): starts or cancels the
    /// reassignments of the named partitions; per partition, whether it
    /// was accepted.
    pub async fn alter_partition_reassignments(
        &self,
        topics: &[(String, Vec<operations::ReassignmentTarget>)],
        allow_replication_factor_change: bool,
    ) -> Result<Vec<operations::TopicReassignments>, MetadataError> {
        let (state, _) = self.begin().await?;
        let (records, results) = operations::alter_partition_reassignments(
            &self.image(),
            topics,
            allow_replication_factor_change,
            state.election_defaults,
        );
        if !records.is_empty() {
            self.commit(records).await?;
        }
        Ok(results)
    }

    /// ListPartitionReassignments: the ongoing reassignments, as the
    /// active controller's latest image holds them.
    pub async fn list_partition_reassignments(
        &self,
        topics: Option<&[(String, Vec<i32>)]>,
    ) -> Result<Vec<(String, Vec<operations::OngoingReassignment>)>, MetadataError> {
        let _state = self.begin().await?;
        Ok(operations::list_partition_reassignments(&self.image(), topics))
    }

    /// Moves leadership back to preferred replicas that are in sync and
    /// alive (`auto.leader.rebalance.enable`); returns how many moved.
    pub async fn balance_partition_leaders(&self) -> Result<usize, MetadataError> {
        let (state, _) = self.begin().await?;
        let records = operations::balance_partition_leaders(&self.image(), state.election_defaults);
        let count = records.len();
        if count > 0 {
            self.commit(records).await?;
        }
        Ok(count)
    }

    /// ControllerRegistration.
    pub async fn register_controller(&self, controller: ControllerImage) -> Result<(), MetadataError> {
        let _state = self.begin().await?;
        self.commit(operations::register_controller(&controller)).await.map(drop)
    }
}

/// Runs `future` to completion on this thread, for the broker's
/// synchronous callers of the controller. On a multi-threaded tokio runtime
/// the worker first hands its queued tasks to another thread
/// (`block_in_place`), so a future that waits for the quorum's tasks
/// cannot starve them. Elsewhere (a single node's local record log, which
/// commits before `append` returns) it parks the thread between polls.
pub fn block_on<F: Future>(future: F) -> F::Output {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
            return tokio::task::block_in_place(|| handle.block_on(future));
        }
    }
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(output) => return output,
            Poll::Pending => std::thread::park(),
        }
    }
}

/// A cluster id in Kafka's style: 16 random bytes, URL-safe base64, unpadded.
pub fn new_cluster_id() -> String {
    base64_url(operations::new_topic_id().as_bytes())
}

fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests;
