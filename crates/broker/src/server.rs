//! The broker process: start-up, the accept loop, background duties and a
//! clean shutdown.
//!
//! Start-up replays the metadata log, then loads (and if needed recovers)
//! every partition log before the first connection is accepted. Shutdown
//! stops accepting, lets each connection finish the request it is serving,
//! then flushes every log and writes the checkpoints and the clean-shutdown
//! marker. Background tasks flush logs, write checkpoints, run the group
//! and transaction timers and the log cleaner threads; all of them end when
//! shutdown begins.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use strom_metadata::controller::{METADATA_LOG_DIR, SUPPORTED_FEATURES};
use strom_metadata::{
    block_on, BrokerHeartbeat, BrokerRegistration, Controller, Endpoint, FeatureRange, HeartbeatReply,
    MetadataError, MetadataImage, MetadataLoader, QuorumRecordLog, SnapshotPolicy,
};
use strom_quorum::channel::Connector;
use strom_quorum::{Quorum, QuorumConfig};
use strom_storage::file_cache::FileCache;
use strom_storage::{Context, LogManager, StorageError};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::config::BrokerConfig;
use crate::controller_channel::ControllerChannel;
use crate::controller_link::ControllerLink;
use crate::coordinator_host::{CoordinatorHost, ProducerIdReservation, Replication as AppendReplicated};
use crate::fetch_session::FetchSessionCache;
use crate::group::{GroupCoordinator, OFFSETS_TOPIC};
use crate::kraft_config::ProcessRole;
use crate::lifecycle;
use crate::meta_properties::{node_dirs, parse_uuid, FormatError, LogDirs};
use crate::metrics::{self, GaugeGuard, Metrics};
use crate::network;
use crate::producer_ids::ProducerIdManager;
use crate::quota::connections::{ConnectionLimits, Refusal};
use crate::quota::QuotaManager;
use crate::replica::{LeadershipChanges, ReplicaManager};
use crate::replication::purgatory::{await_append, AwaitedAppend};
use crate::replication::{Replication, ReplicationServices};
use crate::security::sasl::scram::{ImageScramCredentials, ScramCredentials};
use crate::security::ListenerSecurity;
use crate::txn::{TransactionCoordinator, TRANSACTION_STATE_TOPIC};

/// Kafka's `SecurityProtocol.PLAINTEXT` id, the only protocol Strom serves.
const PLAINTEXT: i16 = 0;

/// How long shutdown waits for connections to finish their requests.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The broker's services, composed once at start. Handlers reach them
/// through [`RequestContext`](crate::dispatch::RequestContext)'s accessors,
/// the coordinators through [`CoordinatorHost`], replication through
/// [`ReplicationServices`]; only the composition roots (this module,
/// [`dispatch`](crate::dispatch), [`network`] and the
/// [`console`](crate::console)) hold the whole `Broker`.
pub struct Broker {
    config: Arc<BrokerConfig>,
    /// The cluster metadata: the image, this node's controller, the link
    /// to the active one and this broker's epoch.
    controller: Arc<ControllerChannel>,
    replicas: Arc<ReplicaManager>,
    fetch_sessions: FetchSessionCache,
    groups: GroupCoordinator,
    metrics: Metrics,
    producer_ids: ProducerIdManager,
    transactions: TransactionCoordinator,
    /// Each listener's TLS and SASL settings, in `listeners` order.
    listener_security: Vec<Arc<ListenerSecurity>>,
    /// Client quota sensors.
    quotas: Arc<QuotaManager>,
    /// Open connections and connection rates per client address.
    connection_limits: Arc<ConnectionLimits>,
    /// Flips to true when shutdown begins; delayed operations end early on it.
    stopping: watch::Sender<bool>,
    /// The metadata log of a KRaft node: its quorum, feeding the loader.
    metadata_log: Option<Arc<QuorumRecordLog>>,
    /// Opens links to other brokers (replica fetches), secured as the
    /// inter-broker listener.
    inter_broker: Connector,
    /// Wakes the replication task (fetchers, ISR changes).
    replication: Arc<Replication>,
}

/// Read access to the services, for the composition roots and tests.
impl Broker {
    /// The static config.
    pub fn config(&self) -> &Arc<BrokerConfig> {
        &self.config
    }

    /// The cluster metadata and the controller, as this node reaches them.
    pub fn controller(&self) -> &Arc<ControllerChannel> {
        &self.controller
    }

    /// The partitions this node hosts.
    pub fn replicas(&self) -> &ReplicaManager {
        &self.replicas
    }

    /// Incremental fetch sessions (KIP-227).
    pub fn fetch_sessions(&self) -> &FetchSessionCache {
        &self.fetch_sessions
    }

    /// The consumer groups this node coordinates.
    pub fn groups(&self) -> &GroupCoordinator {
        &self.groups
    }

    /// The request, topic and connection counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The block of producer ids this node hands out.
    pub fn producer_ids(&self) -> &ProducerIdManager {
        &self.producer_ids
    }

    /// The transactions this node coordinates.
    pub fn transactions(&self) -> &TransactionCoordinator {
        &self.transactions
    }

    /// Each listener's TLS and SASL settings, in `listeners` order.
    pub fn listener_security(&self) -> &[Arc<ListenerSecurity>] {
        &self.listener_security
    }

    /// Client quota sensors.
    pub fn quotas(&self) -> &QuotaManager {
        &self.quotas
    }

    /// Open connections and connection rates per client address.
    pub fn connection_limits(&self) -> &Arc<ConnectionLimits> {
        &self.connection_limits
    }

    /// Wakes the replication task (fetchers, ISR changes).
    pub fn replication(&self) -> &Replication {
        &self.replication
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    // The inner messages name what failed and where; transparent, so a
    // chain printer shows each once.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("cannot listen on {addr}: {error}")]
    Bind { addr: String, error: std::io::Error },
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Format(#[from] FormatError),
}

/// Opens the metadata log of the cluster the log dirs' `meta.properties`
/// name. A KRaft node needs formatted dirs; a single node formats its dirs
/// on first start. As in Kafka, the cluster id lives in `meta.properties`,
/// not in the log.
fn open_controller(config: &BrokerConfig) -> Result<Controller, StartError> {
    let dirs = LogDirs::load(&node_dirs(config))?;
    let formatted_id = dirs.verify(config.node_id)?.map(str::to_owned);
    let controller_dir = config.metadata_log_dir.clone();
    let metadata_log = controller_dir.join(METADATA_LOG_DIR);
    if formatted_id.is_none() && metadata_log.join("00000000000000000000.log").exists() {
        let reason = format!(
            "the metadata log {} exists but no meta.properties names its cluster; restore meta.properties or remove the data dir",
            metadata_log.display()
        );
        return Err(FormatError(reason).into());
    }
    let cluster_id = formatted_id.unwrap_or_else(strom_metadata::controller::new_cluster_id);
    dirs.format(
        &cluster_id,
        config.node_id,
        &[],
        |dir| tracing::info!(dir = %dir.display(), cluster_id = %cluster_id, "formatting log dir"),
    )?;
    std::fs::create_dir_all(&controller_dir).at("create metadata log dir", &controller_dir)?;
    Ok(Controller::open_local(&controller_dir, &cluster_id, |c| configured(c, config))?)
}

/// The controller settings of `config`.
fn configured(controller: Controller, config: &BrokerConfig) -> Controller {
    // The static broker-level default; topic and dynamic configs override it.
    let unclean = config.provided.get("unclean.leader.election.enable");
    let defaults = strom_metadata::operations::ElectionDefaults {
        node_id: config.node_id,
        unclean_leader_election_enable: unclean.is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
        min_insync_replicas: config.min_insync_replicas,
    };
    controller
        .with_max_partitions_per_request(config.max_partitions_per_request)
        .with_session_timeout_ms(config.kraft.broker_session_timeout_ms.into())
        .with_election_defaults(defaults)
}

/// The feature levels `format` chose for a new cluster, if it wrote them
/// (Kafka's `kafka-storage.sh format` among the writers): each must be
/// one Strom serves.
fn bootstrap_features(config: &BrokerConfig) -> Result<Option<Vec<(String, i16)>>, StartError> {
    let dir = &config.metadata_log_dir;
    let levels = strom_metadata::features::read_bootstrap(dir).map_err(StartError::Config)?;
    if let Some(levels) = &levels {
        strom_metadata::features::check_served(levels)
            .map_err(|e| StartError::Config(format!("the bootstrap checkpoint in {}: {e}", dir.display())))?;
    }
    Ok(levels)
}

/// The cluster id of a KRaft node's formatted log dirs.
fn formatted_cluster_id(config: &BrokerConfig) -> Result<String, StartError> {
    let dirs = LogDirs::load(&node_dirs(config))?;
    let cluster_id = dirs.verify(config.node_id)?.map(str::to_owned);
    dirs.require_formatted()?;
    cluster_id.ok_or_else(|| FormatError("the log dirs are not formatted".into()).into())
}

/// The snapshot settings of a KRaft node.
fn snapshot_policy(config: &BrokerConfig) -> SnapshotPolicy {
    SnapshotPolicy {
        max_bytes: config.kraft.max_bytes_between_snapshots.max(1) as u64,
        max_interval: Duration::from_millis(config.kraft.max_snapshot_interval_ms.max(1) as u64),
    }
}

/// This node's BrokerRegistration: its advertised listeners, rack,
/// features and log dir ids, under a new incarnation id.
pub(crate) fn registration(
    config: &BrokerConfig,
    cluster_id: &str,
    previous_broker_epoch: i64,
) -> Result<BrokerRegistration, StartError> {
    let endpoints = config
        .advertised_listeners
        .iter()
        .filter_map(|l| {
            let (host, port) = config.advertised_endpoint(&l.name)?;
            Some(Endpoint { name: l.name.clone(), host, port, security_protocol: PLAINTEXT })
        })
        .collect();
    let log_dirs = LogDirs::load(&config.log_dirs)?
        .formatted
        .iter()
        .filter_map(|(_, meta)| parse_uuid(&meta.directory_id).map(uuid::Uuid::from_bytes))
        .collect();
    Ok(BrokerRegistration {
        broker_id: config.node_id,
        cluster_id: cluster_id.to_owned(),
        incarnation_id: uuid::Uuid::new_v4(),
        endpoints,
        features: SUPPORTED_FEATURES
            .iter()
            .map(|(name, min, max)| FeatureRange { name: (*name).into(), min: *min, max: *max })
            .collect(),
        rack: config.kraft.broker_rack.clone(),
        log_dirs,
        previous_broker_epoch,
    })
}

/// Registers this node as a broker through `controller`, then heartbeats
/// once so it is unfenced (it has applied its own registration); returns
/// its broker epoch.
async fn register_broker(
    registration: BrokerRegistration,
    controller: &Controller,
) -> Result<i64, MetadataError> {
    let broker_id = registration.broker_id;
    let epoch = controller.register_broker(registration, strom_storage::now_ms()).await?;
    heartbeat(broker_id, controller, epoch).await?;
    Ok(epoch)
}

/// One BrokerHeartbeat of this node to `controller`.
async fn heartbeat(
    broker_id: i32,
    controller: &Controller,
    epoch: i64,
) -> Result<HeartbeatReply, MetadataError> {
    let request = BrokerHeartbeat {
        broker_id,
        broker_epoch: epoch,
        current_metadata_offset: controller.image().last_offset,
        want_fence: false,
        want_shut_down: false,
    };
    controller.broker_heartbeat(request, strom_storage::now_ms()).await
}

impl Broker {
    /// Opens a single node (no `process.roles`): its local metadata log,
    /// replayed, then every partition log. A KRaft node starts with
    /// [`BoundBroker::start`].
    pub fn open(config: BrokerConfig) -> Result<Arc<Self>, StartError> {
        if config.kraft.is_kraft() {
            return Err(StartError::Config("a KRaft node starts through BoundBroker::start".into()));
        }
        let config = Arc::new(config);
        let started = std::time::Instant::now();
        // Before anything touches the disk: a listener that cannot be
        // secured as configured stops the start.
        let scram = Arc::new(ImageScramCredentials::default());
        let listener_security = listener_security(&config, scram.clone())?;
        if let crate::console::auth::Auth::Sasl(users) = &config.console.auth {
            users.bind(&listener_security).map_err(StartError::Config)?;
        }
        // Lock the log dirs before touching anything in them.
        let logs = Self::lock_log_dirs(&config)?;
        let controller = open_controller(&config)?;
        scram.bind(controller.loader().clone());
        let registration = registration(&config, controller.cluster_id(), logs.broker_epoch())?;
        let broker_epoch = block_on(register_broker(registration, &controller))?;
        tracing::info!(metadata_ms = started.elapsed().as_millis(), "metadata loaded");
        Self::assemble(config, listener_security, logs, controller, broker_epoch, None, None)
    }

    fn lock_log_dirs(config: &BrokerConfig) -> Result<LogManager, StartError> {
        let logs = LogManager::new(config.log_dirs.clone())?
            .with_threads_per_dir(config.num_recovery_threads_per_data_dir);
        FileCache::shared().set_capacity(config.log_segment_open_files_max);
        Ok(logs)
    }

    /// Opens every partition log against the controller's image and loads
    /// the coordinators.
    fn assemble(
        config: Arc<BrokerConfig>,
        listener_security: Vec<Arc<ListenerSecurity>>,
        logs: LogManager,
        controller: Controller,
        broker_epoch: i64,
        metadata_log: Option<Arc<QuorumRecordLog>>,
        controller_link: Option<Arc<ControllerLink>>,
    ) -> Result<Arc<Self>, StartError> {
        let started = std::time::Instant::now();
        if broker_epoch >= 0 {
            logs.set_broker_epoch(broker_epoch);
        }
        let replicas = Arc::new(ReplicaManager::open(config.clone(), logs, &controller.image())?);
        let logs_ms = started.elapsed().as_millis();
        let fetch_sessions = FetchSessionCache::new(config.max_incremental_fetch_session_cache_slots);
        let groups = GroupCoordinator::new(config.groups.clone());
        let (stopping, _) = watch::channel(false);
        let metrics = Metrics::default();
        let producer_ids = ProducerIdManager::default();
        let transactions = TransactionCoordinator::new(config.transactions.clone());
        let quotas = Arc::new(QuotaManager::new(config.quota_window));
        let connection_limits =
            Arc::new(ConnectionLimits::new(config.connection_limits.clone(), config.quota_window));
        // A single node links to no other broker.
        let inter_broker = match config.kraft.is_kraft() {
            true => crate::security::client::inter_broker_connector(&config).map_err(StartError::Config)?,
            false => Connector::plaintext(),
        };
        let controller =
            Arc::new(ControllerChannel::new(config.node_id, controller, controller_link, broker_epoch));
        let broker = Self {
            config,
            controller,
            replicas,
            fetch_sessions,
            groups,
            metrics,
            producer_ids,
            transactions,
            listener_security,
            quotas,
            connection_limits,
            stopping,
            metadata_log,
            inter_broker,
            replication: Default::default(),
        };
        broker.groups.load(&broker)?;
        // After the groups: completing a prepared transaction may commit
        // their staged offsets.
        broker.transactions.load(&broker)?;
        tracing::info!(logs_ms, total_ms = started.elapsed().as_millis(), "broker state loaded");
        let broker = Arc::new(broker);
        let applier = Arc::downgrade(&broker);
        broker.controller.loader().add_publisher(Box::new(move |image| {
            if let Some(broker) = applier.upgrade() {
                broker.apply_image(image);
            }
        }));
        Ok(broker)
    }

    /// What the replication task uses of this broker.
    fn replication_services(&self) -> ReplicationServices {
        ReplicationServices {
            replicas: self.replicas.clone(),
            controller: self.controller.clone(),
            quotas: self.quotas.clone(),
            wakes: self.replication.clone(),
            connector: self.inter_broker.clone(),
        }
    }

    /// The metadata quorum of a KRaft node.
    pub fn quorum(&self) -> Option<&Quorum> {
        self.metadata_log.as_deref().map(QuorumRecordLog::quorum)
    }

    /// What the lifecycle managers use of this node.
    fn node(&self) -> lifecycle::Node {
        lifecycle::Node {
            config: self.config.clone(),
            controller: self.controller.clone(),
            previous_broker_epoch: self.replicas.logs_broker_epoch(),
        }
    }

    /// This broker's epoch (the offset of its registration record), -1
    /// while it is not registered: [`ControllerChannel::broker_epoch`].
    pub fn broker_epoch(&self) -> i64 {
        self.controller.broker_epoch()
    }

    /// Waits until the metadata shows this KRaft broker registered and
    /// unfenced; at once for a single node or a controller-only node.
    pub async fn wait_until_unfenced(&self) {
        if self.controller.link().is_none() || !self.config.kraft.has_role(ProcessRole::Broker) {
            return;
        }
        let mut images = self.controller.loader().subscribe();
        let me = self.config.node_id;
        // This incarnation's registration: a restarted broker's old one may still look unfenced.
        let unfenced = |image: &Arc<strom_metadata::MetadataImage>| {
            image.brokers.get(&me).is_some_and(|b| !b.fenced && b.epoch == self.broker_epoch())
        };
        let _ = images.wait_for(unfenced).await;
        tracing::info!("unfenced by the controller: serving clients");
    }

    /// A receiver that sees `true` once shutdown begins.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// Applies a published image to this broker: which partitions it
    /// hosts, which of them it leads, and their log configs. The loader
    /// calls it with every image (a publisher registered in `assemble`).
    pub fn apply_image(&self, image: &Arc<MetadataImage>) {
        // Groups and transactions of an internal partition this image makes
        // us lead are loading (COORDINATOR_LOAD_IN_PROGRESS) until replayed.
        let loading_groups = self.groups.start_loading(self, image);
        let loading_txns = self.transactions.start_loading(self, image);
        match self.replicas.sync(image) {
            Ok(changes) => {
                self.replication.image_applied();
                self.move_coordinators(&changes)
            }
            Err(e) => tracing::error!(
                offset = image.last_offset,
                "applying the metadata to the hosted partitions failed: {e}"
            ),
        }
        self.groups.finish_loading(&loading_groups);
        self.transactions.finish_loading(&loading_txns);
    }

    /// The coordinators unload the state of the internal partitions whose
    /// leadership moved away and load that of those it moved to.
    fn move_coordinators(&self, changes: &LeadershipChanges) {
        for tp in &changes.lost {
            match tp.topic.as_str() {
                OFFSETS_TOPIC => self.groups.unload_partition(tp.partition),
                TRANSACTION_STATE_TOPIC => self.transactions.unload_partition(tp.partition),
                _ => {}
            }
        }
        for tp in &changes.gained {
            let Some(partition) = self.replicas.partition(&tp.topic, tp.partition) else { continue };
            let loaded = match tp.topic.as_str() {
                OFFSETS_TOPIC => self.groups.load_partition(&partition),
                TRANSACTION_STATE_TOPIC => self.transactions.load_partition(&partition),
                _ => Ok(()),
            };
            if let Err(e) = loaded {
                tracing::error!(partition = %tp, "loading the coordinator's state failed: {e}");
            }
        }
    }
}

impl<'a> From<&'a Broker> for crate::internal_topic::Services<'a> {
    fn from(broker: &'a Broker) -> Self {
        Self { controller: &broker.controller, replicas: &broker.replicas }
    }
}

impl CoordinatorHost for Broker {
    fn node_id(&self) -> i32 {
        self.config.node_id
    }

    fn replicas(&self) -> &ReplicaManager {
        &self.replicas
    }

    fn metadata_image(&self) -> Arc<MetadataImage> {
        self.controller.image()
    }

    fn groups(&self) -> &GroupCoordinator {
        &self.groups
    }

    fn transactions(&self) -> &TransactionCoordinator {
        &self.transactions
    }

    fn check_leads(&self, topic: &str, partition: i32) -> Result<(), ResponseError> {
        crate::internal_topic::check_local(self, topic, partition)
    }

    fn min_insync_replicas(&self, topic: &str) -> usize {
        crate::handlers::produce::min_insync_replicas(&self.controller, &self.replicas, topic).max(1) as usize
    }

    fn await_append(&self, wait: AwaitedAppend, timeout: Duration) -> AppendReplicated<'_> {
        Box::pin(await_append(self.stopping(), wait, timeout))
    }

    fn stopping(&self) -> watch::Receiver<bool> {
        Broker::stopping(self)
    }

    fn next_producer_id(&self) -> ProducerIdReservation<'_> {
        Box::pin(async move {
            let reserved =
                self.producer_ids.next_id_async(|| self.controller.allocate_producer_ids_at_active());
            reserved.await.map_err(|e| {
                tracing::error!("cannot reserve producer ids: {e}");
                crate::error::metadata_error(&e)
            })
        })
    }

    fn inter_broker_connector(&self) -> &Connector {
        &self.inter_broker
    }

    fn inter_broker_address(&self, image: &MetadataImage, id: i32) -> Option<String> {
        self.config.inter_broker_address(image, id)
    }
}

/// Each listener's security, from the config.
fn listener_security(
    config: &BrokerConfig,
    scram: Arc<ImageScramCredentials>,
) -> Result<Vec<Arc<ListenerSecurity>>, StartError> {
    let scram: Arc<dyn ScramCredentials> = scram;
    let secure = |name: &str| {
        ListenerSecurity::from_config(config, name, &scram)
            .map(Arc::new)
            .map_err(|reason| StartError::Config(format!("listener {name}: {reason}")))
    };
    config.listeners.iter().map(|listener| secure(&listener.name)).collect()
}

/// A KRaft node before it serves: its listeners bound, its quorum running.
struct KraftStart {
    config: Arc<BrokerConfig>,
    listener_security: Vec<Arc<ListenerSecurity>>,
    logs: LogManager,
    cluster_id: String,
    metadata_log: Arc<QuorumRecordLog>,
    /// Opens the links to controllers, secured as the controller listener.
    controller_connector: Connector,
}

impl KraftStart {
    /// Locks and checks the log dirs and starts the quorum: a voter if this
    /// node is a listed controller, an observer otherwise.
    async fn begin(config: BrokerConfig) -> Result<Self, StartError> {
        let config = Arc::new(config);
        let scram = Arc::new(ImageScramCredentials::default());
        let listener_security = listener_security(&config, scram.clone())?;
        if let crate::console::auth::Auth::Sasl(users) = &config.console.auth {
            users.bind(&listener_security).map_err(StartError::Config)?;
        }
        let logs = Broker::lock_log_dirs(&config)?;
        let cluster_id = formatted_cluster_id(&config)?;
        let controller_connector =
            crate::security::client::controller_connector(&config).map_err(StartError::Config)?;
        let quorum_config = quorum_config(&config, &cluster_id, controller_connector.clone())?;
        let quorum = Quorum::start(quorum_config).await.map_err(|e| StartError::Config(e.to_string()))?;
        let loader = Arc::new(MetadataLoader::new());
        scram.bind(loader.clone());
        let metadata_log = Arc::new(QuorumRecordLog::start(quorum, loader, snapshot_policy(&config)));
        Ok(Self { config, listener_security, logs, cluster_id, metadata_log, controller_connector })
    }

    /// Waits until the loader has caught up with the high watermark known
    /// at start (as Kafka's broker waits for metadata catch-up), answering
    /// the quorum's peers on the controller listeners meanwhile: the quorum
    /// needs this node's votes and fetches answered before it can commit
    /// anything. Clients of the other listeners wait in the accept queue.
    async fn catch_up(&self, listeners: &[(Arc<ListenerSecurity>, TcpListener)]) {
        let quorum = self.metadata_log.quorum().clone();
        let controller_names = &self.config.kraft.controller_listener_names;
        let answer_peers = listeners
            .iter()
            .filter(|(security, _)| controller_names.iter().any(|n| n.eq_ignore_ascii_case(&security.name)))
            .map(|(security, listener)| {
                crate::early_peers::answer(listener, security.clone(), self.config.clone(), quorum.clone())
            });
        let started = std::time::Instant::now();
        tokio::select! {
            _ = self.metadata_log.catch_up() => {}
            _ = futures_join_all(answer_peers) => {}
        }
        let applied = self.metadata_log.quorum().high_watermark();
        tracing::info!(high_watermark = ?applied, wait_ms = started.elapsed().as_millis(), "metadata caught up");
    }

    /// The broker, once caught up.
    fn finish(self) -> Result<Arc<Broker>, StartError> {
        let loader = self.metadata_log.loader().clone();
        let log: Arc<dyn strom_metadata::RecordLog> = self.metadata_log.clone();
        let mut controller = configured(Controller::new(&self.cluster_id, log, loader), &self.config);
        if let Some(levels) = bootstrap_features(&self.config)? {
            controller = controller.with_bootstrap_features(levels);
        }
        let link =
            Arc::new(ControllerLink::new(self.metadata_log.quorum().clone(), self.controller_connector));
        let security = self.listener_security;
        Broker::assemble(
            self.config,
            security,
            self.logs,
            controller,
            -1,
            Some(self.metadata_log),
            Some(link),
        )
    }
}

/// Runs every future of `futures` to completion, concurrently.
async fn futures_join_all<F: Future<Output = ()>>(futures: impl Iterator<Item = F>) {
    let mut pending: Vec<_> = futures.map(Box::pin).collect();
    std::future::poll_fn(|cx| {
        pending.retain_mut(|future| future.as_mut().poll(cx).is_pending());
        match pending.is_empty() {
            true => std::task::Poll::Ready(()),
            false => std::task::Poll::Pending,
        }
    })
    .await
}

/// A bound, not yet serving, broker: lets callers learn the real ports
/// (e.g. when a listener asks for port 0) before serving.
pub struct BoundBroker {
    broker: Arc<Broker>,
    /// Each bound socket with its listener's name and security.
    listeners: Vec<(Arc<ListenerSecurity>, TcpListener)>,
    metrics_listener: Option<TcpListener>,
    console_listener: Option<TcpListener>,
}

impl BoundBroker {
    /// Binds the listeners of an opened single node.
    pub async fn bind(broker: Arc<Broker>) -> Result<Self, StartError> {
        let (listeners, metrics_listener, console_listener) =
            bind_sockets(&broker.config, &broker.listener_security).await?;
        Ok(Self { broker, listeners, metrics_listener, console_listener })
    }

    /// Starts any node: a single node opens then binds; a KRaft node binds,
    /// starts its quorum and waits for its metadata to catch up before it
    /// opens its partition logs.
    pub async fn start(config: BrokerConfig) -> Result<Self, StartError> {
        if !config.kraft.is_kraft() {
            return Self::bind(Broker::open(config)?).await;
        }
        let start = KraftStart::begin(config).await?;
        let (listeners, metrics_listener, console_listener) =
            bind_sockets(&start.config, &start.listener_security).await?;
        // A controller-only node hosts no partitions: it serves at once, as
        // Kafka's controller does, and replays the log meanwhile.
        if start.config.kraft.has_role(ProcessRole::Broker) {
            start.catch_up(&listeners).await;
        }
        let broker = start.finish()?;
        Ok(Self { broker, listeners, metrics_listener, console_listener })
    }

    /// The broker being served.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// Each listener as `NAME://ADDRESS:PORT`, with the port actually bound.
    pub fn listener_addresses(&self) -> Vec<String> {
        let address = |(security, socket): &(Arc<ListenerSecurity>, TcpListener)| match socket.local_addr() {
            Ok(local) => format!("{}://{local}", security.name),
            Err(_) => format!("{}://?", security.name),
        };
        self.listeners.iter().map(address).collect()
    }

    /// Serves until `shutdown` completes, then shuts down cleanly.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), StorageError> {
        let stop_rx = self.broker.stopping();
        let mut background = JoinSet::new();
        background.spawn(periodic_duties(self.broker.clone(), stop_rx.clone()));
        if let Some(link) = self.broker.controller.link() {
            let kraft = &self.broker.config.kraft;
            if kraft.has_role(ProcessRole::Broker) {
                background.spawn(lifecycle::run_broker(self.broker.node(), link.clone(), stop_rx.clone()));
                background.spawn(crate::replication::run(
                    self.broker.replication_services(),
                    link.clone(),
                    stop_rx.clone(),
                ));
            }
            if kraft.has_role(ProcessRole::Controller) {
                background.spawn(lifecycle::run_controller(
                    self.broker.node(),
                    link.clone(),
                    stop_rx.clone(),
                ));
            }
        }
        background.spawn(GroupCoordinator::run_timers(self.broker.clone()));
        background.spawn(TransactionCoordinator::run_timers(self.broker.clone()));
        if let Some(listener) = self.metrics_listener {
            let broker = self.broker.clone();
            let render =
                Arc::new(move || broker.metrics.render(&broker.replicas, &broker.controller, &broker.groups));
            background.spawn(metrics::serve_http(render, listener, stop_rx.clone()));
        }
        if self.broker.config.cleaner.enable {
            for id in 0..self.broker.config.cleaner.threads {
                background.spawn(run_log_cleaner(self.broker.clone(), stop_rx.clone(), id));
            }
        }
        let permits = Arc::new(Semaphore::new(self.broker.config.max_connections));
        let mut acceptors = JoinSet::new();
        let kraft = &self.broker.config.kraft;
        let (controller_listeners, client_listeners): (Vec<_>, Vec<_>) =
            self.listeners.into_iter().partition(|(security, _)| {
                kraft.controller_listener_names.iter().any(|n| n.eq_ignore_ascii_case(&security.name))
            });
        for (security, _) in controller_listeners.iter().chain(&client_listeners) {
            if let Some(tls) = &security.tls {
                let broker = self.broker.clone();
                let node = broker.config.node_id.to_string();
                let dynamic = move || broker.controller.image().broker_configs(&node).clone();
                // Stores set by AlterConfigs before a restart serve from the first connection.
                if let Err(e) = tls.reload_if_changed(&dynamic()) {
                    tracing::error!(listener = %security.name, "dynamic TLS stores do not load; serving the configured ones: {e}");
                }
                background.spawn(tls.clone().watch(security.name.clone(), dynamic, stop_rx.clone()));
            }
        }
        for (security, listener) in controller_listeners {
            let broker = self.broker.clone();
            acceptors.spawn(accept_loop(broker, security, listener, permits.clone(), stop_rx.clone()));
        }
        let mut shutdown = std::pin::pin!(shutdown);
        // As Kafka's broker, a KRaft broker serves clients once the
        // controller has unfenced it; the controller listeners serve at once.
        let stopped_early = tokio::select! {
            _ = self.broker.wait_until_unfenced() => false,
            _ = &mut shutdown => true,
        };
        if let Some(listener) = self.console_listener {
            background.spawn(crate::console::serve(self.broker.clone(), listener, stop_rx.clone()));
        }
        for (name, listener) in client_listeners {
            let broker = self.broker.clone();
            acceptors.spawn(accept_loop(broker, name, listener, permits.clone(), stop_rx.clone()));
        }
        if !stopped_early {
            shutdown.await;
        }
        if let Some(link) =
            self.broker.controller.link().filter(|_| self.broker.config.kraft.has_role(ProcessRole::Broker))
        {
            lifecycle::controlled_shutdown(&self.broker.node(), link).await;
        }
        tracing::info!("shutting down: no new connections, finishing in-flight requests");
        self.broker.stopping.send_replace(true);
        if let Some(metadata_log) = &self.broker.metadata_log {
            metadata_log.close();
        }
        if let Some(link) = self.broker.controller.link() {
            link.close();
        }
        if let Some(quorum) = self.broker.quorum() {
            // A leader hands over first, so the quorum does not wait out a timeout.
            quorum.shutdown().await;
            tracing::debug!("quorum shut down");
        }
        let mut connections = Vec::new();
        while let Some(joined) = acceptors.join_next().await {
            connections.extend(joined.ok());
        }
        let drain = async {
            for set in &mut connections {
                while set.join_next().await.is_some() {}
            }
        };
        if tokio::time::timeout(DRAIN_TIMEOUT, drain).await.is_err() {
            tracing::warn!("connections still busy after {DRAIN_TIMEOUT:?}; closing them");
            connections.iter_mut().for_each(JoinSet::abort_all);
        }
        tracing::debug!("connections drained");
        while background.join_next().await.is_some() {}
        tracing::debug!("background duties ended");
        let broker_epoch = self.broker.controller.broker_epoch();
        if broker_epoch >= 0 {
            self.broker.replicas.set_logs_broker_epoch(broker_epoch);
        }
        self.broker.replicas.shutdown()?;
        tracing::info!("shut down cleanly");
        Ok(())
    }
}

/// Binds the client and controller listeners, the metrics and the console listeners.
async fn bind_sockets(
    config: &BrokerConfig,
    security: &[Arc<ListenerSecurity>],
) -> Result<BoundSockets, StartError> {
    let mut listeners = Vec::new();
    for (listener, security) in config.listeners.iter().zip(security) {
        let addr = listener.socket_addr().map_err(StartError::Config)?;
        let bound = TcpListener::bind(addr)
            .await
            .map_err(|error| StartError::Bind { addr: addr.to_string(), error })?;
        let local = bound.local_addr().map_err(|error| StartError::Bind { addr: addr.to_string(), error })?;
        tracing::debug!(listener = %listener.name, protocol = ?security.protocol, addr = %local, "listening");
        listeners.push((security.clone(), bound));
    }
    let metrics_listener = match config.metrics_listener {
        Some(addr) => {
            let bound = TcpListener::bind(addr)
                .await
                .map_err(|error| StartError::Bind { addr: addr.to_string(), error })?;
            tracing::info!(addr = %addr, "serving Prometheus metrics at /metrics");
            Some(bound)
        }
        None => None,
    };
    let console_listener = match config.console.listener {
        Some(addr) => {
            let bound = TcpListener::bind(addr)
                .await
                .map_err(|error| StartError::Bind { addr: addr.to_string(), error })?;
            tracing::info!(addr = %addr, "serving the web console at http://{addr}/");
            Some(bound)
        }
        None => None,
    };
    Ok((listeners, metrics_listener, console_listener))
}

/// Bound listeners with their names, the metrics and the console listeners.
type BoundSockets = (Vec<(Arc<ListenerSecurity>, TcpListener)>, Option<TcpListener>, Option<TcpListener>);

/// The quorum settings of a KRaft node, from `controller.quorum.*`: a
/// static quorum from `controller.quorum.voters`, else a dynamic (KIP-853)
/// one whose voters come from the bootstrap checkpoint or the log, found
/// through `controller.quorum.bootstrap.servers`.
fn quorum_config(
    config: &BrokerConfig,
    cluster_id: &str,
    connector: Connector,
) -> Result<strom_quorum::Config, StartError> {
    let kraft = &config.kraft;
    let voter_endpoints: BTreeMap<i32, String> =
        kraft.voters.iter().map(|v| (v.id, format!("{}:{}", v.host, v.port))).collect();
    let millis = |value: i32| u64::try_from(value).unwrap_or(1);
    let mut raft = QuorumConfig::new(config.node_id, voter_endpoints.keys().copied());
    raft.election_timeout_ms = millis(kraft.election_timeout_ms);
    raft.fetch_timeout_ms = millis(kraft.fetch_timeout_ms);
    raft.request_timeout_ms = millis(kraft.request_timeout_ms);
    raft.election_backoff_max_ms = millis(kraft.election_backoff_max_ms);
    // Kafka parks a fetch for 500 ms; a fetch or request timeout below
    // twice that (tests) must not expire while the fetch is parked, or a
    // follower that is fully caught up never completes a fetch.
    raft.fetch_max_wait_ms =
        raft.fetch_max_wait_ms.min(raft.fetch_timeout_ms / 2).min(raft.request_timeout_ms / 2);
    if let Some(name) = kraft.controller_listener_names.first() {
        raft.listener_name = name.clone();
    }
    // Advertised where a controller listener is advertised, as Kafka's voters are.
    raft.endpoints = kraft
        .controller_listeners(&config.listeners)
        .iter()
        .map(|l| {
            let (host, port) = config.advertised_endpoint(&l.name).unwrap_or((l.host.clone(), l.port));
            strom_quorum::Endpoint { listener: l.name.to_ascii_uppercase(), host, port }
        })
        .collect();
    raft.directory_id =
        crate::meta_properties::directory_id(&config.metadata_log_dir).map(uuid::Uuid::from_bytes);
    Ok(strom_quorum::Config {
        raft,
        cluster_id: cluster_id.to_owned(),
        metadata_log_dir: config.metadata_log_dir.clone(),
        voter_endpoints,
        bootstrap_servers: kraft
            .bootstrap_servers
            .iter()
            .map(|(host, port)| format!("{host}:{port}"))
            .collect(),
        connector,
    })
}

/// Raises the soft limit on open files (`RLIMIT_NOFILE`) to the hard limit,
/// as Kafka's operators are told to: every active segment holds a
/// descriptor, like every connection. Returns the soft limit before and after.
pub fn raise_open_files_limit() -> std::io::Result<(u64, u64)> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a valid rlimit for getrlimit to fill.
    #[allow(unsafe_code)]
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: `limit` is an initialized rlimit that setrlimit only reads.
        #[allow(unsafe_code)]
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok((before, limit.rlim_cur))
}

async fn accept_loop(
    broker: Arc<Broker>,
    security: Arc<ListenerSecurity>,
    listener: TcpListener,
    permits: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
) -> JoinSet<()> {
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            biased;
            _ = crate::shutdown::stopped(&mut stop) => break,
            accepted = listener.accept() => accepted,
        };
        // Reap finished connection tasks so the set stays bounded.
        while connections.try_join_next().is_some() {}
        match accepted {
            Ok((stream, peer)) => {
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, "max.connections reached; closing the new connection");
                    continue;
                };
                let ip_permit = match broker.connection_limits.admit(&broker.controller.image(), peer.ip()) {
                    Ok(ip_permit) => ip_permit,
                    Err(refusal) => {
                        connections.spawn(refuse(stream, peer, refusal));
                        continue;
                    }
                };
                let (broker, security, stop) = (broker.clone(), security.clone(), stop.clone());
                connections.spawn(async move {
                    let _open = GaugeGuard::new(&broker.metrics.connections);
                    network::serve(broker.clone(), stream, peer, security, stop).await;
                    drop((permit, ip_permit));
                });
            }
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    connections
}

/// Closes a connection its address may not open: at once over
/// `max.connections.per.ip`, after the throttle time over
/// `connection_creation_rate` (KIP-612), so the client does not reconnect
/// in a loop.
async fn refuse(stream: tokio::net::TcpStream, peer: std::net::SocketAddr, refusal: Refusal) {
    match refusal {
        Refusal::TooManyConnections { limit } => {
            tracing::info!(%peer, limit, "max.connections.per.ip reached; closing the new connection");
        }
        Refusal::Throttled { delay_ms } => {
            tracing::info!(%peer, delay_ms, "connection_creation_rate exceeded; closing the new connection");
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        }
    }
    drop(stream);
}

/// One log cleaner thread (Kafka's `kafka-log-cleaner-thread-<id>`): cleans
/// on the blocking pool, one log per round, and sleeps `log.cleaner.backoff.ms`
/// when no log is due. Shutdown ends a cleaning in progress at its next
/// chunk, before the logs close.
async fn run_log_cleaner(broker: Arc<Broker>, mut stop: watch::Receiver<bool>, id: usize) {
    let backoff = Duration::from_millis(broker.config.cleaner.backoff_ms);
    let mut cleaner = strom_storage::cleaner::Cleaner::new(broker.config.cleaner.thread_settings());
    while !*stop.borrow() {
        let (round_broker, round_stop) = (broker.clone(), stop.clone());
        let round = tokio::task::spawn_blocking(move || {
            let cleaned = round_broker.replicas.clean_dirtiest(&mut cleaner, &|| *round_stop.borrow());
            (cleaner, cleaned)
        });
        let cleaned = match round.await {
            Ok((returned, cleaned)) => {
                cleaner = returned;
                cleaned.unwrap_or_else(|e| {
                    tracing::error!(cleaner = id, "log cleaner round failed: {e}");
                    false
                })
            }
            Err(e) => {
                tracing::error!(cleaner = id, "log cleaner thread died: {e}");
                return;
            }
        };
        if !cleaned {
            tokio::select! {
                biased;
                _ = crate::shutdown::stopped(&mut stop) => return,
                _ = tokio::time::sleep(backoff) => {}
            }
        }
    }
}

/// Flushes due logs, enforces retention, writes checkpoints and expires
/// idle producer ids on Kafka's intervals.
/// This broker's heartbeat to the controller (registering first when it
/// has no broker epoch yet), then the controller's fencing of brokers whose
/// sessions expired (Kafka's periodic maintenance, which only the active
/// controller does; elsewhere it answers NOT_CONTROLLER).
async fn keep_session(broker: &Broker) {
    let config = &broker.config;
    let epoch = broker.broker_epoch();
    // A KRaft broker's lifecycle manager heartbeats to the active controller.
    let heartbeat = match epoch {
        _ if config.kraft.is_kraft() => Ok(()),
        -1 => match registration(config, broker.controller.cluster_id(), broker.replicas.logs_broker_epoch())
        {
            Ok(request) => register_broker(request, &broker.controller).await.map(|epoch| {
                tracing::info!(broker_epoch = epoch, "registered with the controller");
                broker.controller.set_broker_epoch(epoch);
            }),
            Err(e) => {
                tracing::warn!("cannot build the broker registration: {e}");
                Ok(())
            }
        },
        epoch => heartbeat(config.node_id, &broker.controller, epoch).await.map(drop),
    };
    match heartbeat {
        Ok(()) | Err(MetadataError::NotController { .. }) => {}
        Err(MetadataError::StaleBrokerEpoch(_) | MetadataError::BrokerIdNotRegistered(_)) => {
            // The session was lost (fenced, unregistered): register afresh.
            broker.controller.set_broker_epoch(-1);
        }
        Err(e) => tracing::warn!("broker heartbeat failed: {e}"),
    }
    match broker.controller.fence_expired_brokers(strom_storage::now_ms()).await {
        Ok(_) | Err(MetadataError::NotController { .. }) => {}
        Err(e) => tracing::warn!("fencing expired broker sessions failed: {e}"),
    }
}

/// The active controller's `auto.leader.rebalance.enable` run; other
/// nodes are refused with NOT_CONTROLLER and skip it.
async fn balance_leaders(broker: &Broker) {
    match broker.controller.balance_partition_leaders().await {
        Ok(0) | Err(MetadataError::NotController { .. }) => {}
        Ok(moved) => tracing::info!(moved, "moved leadership back to preferred replicas"),
        Err(e) => tracing::warn!("balancing partition leaders failed: {e}"),
    }
}

async fn periodic_duties(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let config = broker.config.clone();
    let mut flush = tokio::time::interval(Duration::from_millis(config.log_flush_scheduler_interval_ms));
    let checkpoint_ms = config
        .replica_high_watermark_checkpoint_interval_ms
        .min(config.log_flush_offset_checkpoint_interval_ms);
    let mut checkpoint = tokio::time::interval(Duration::from_millis(checkpoint_ms));
    let mut retention = tokio::time::interval(Duration::from_millis(config.log_retention_check_interval_ms));
    let mut producer_expiry =
        tokio::time::interval(Duration::from_millis(config.producer_id_expiration_check_interval_ms));
    let heartbeat_ms = config.kraft.broker_heartbeat_interval_ms.max(1) as u64;
    let mut session = tokio::time::interval(Duration::from_millis(heartbeat_ms));
    let mut leader_balance =
        tokio::time::interval(Duration::from_secs(config.leader_imbalance_check_interval_seconds));
    leader_balance.reset();
    loop {
        tokio::select! {
            biased;
            _ = crate::shutdown::stopped(&mut stop) => return,
            _ = flush.tick() => {
                on_blocking_thread(&broker, "flush", |replicas| {
                    let flushed = replicas.flush_due();
                    replicas.remove_deleted_files();
                    flushed
                })
                .await;
            }
            _ = retention.tick() => {
                on_blocking_thread(&broker, "retention check", ReplicaManager::enforce_retention).await;
            }
            _ = producer_expiry.tick() => {
                let expiration_ms = config.producer_id_expiration_ms;
                on_blocking_thread(&broker, "producer id expiry", move |replicas| {
                    replicas.remove_expired_producers(expiration_ms);
                    Ok(())
                })
                .await;
            }
            _ = session.tick() => {
                // A controller waiting for its quorum must not hold up shutdown.
                tokio::select! {
                    biased;
                    _ = crate::shutdown::stopped(&mut stop) => return,
                    _ = keep_session(&broker) => {}
                }
            }
            _ = leader_balance.tick(), if config.auto_leader_rebalance_enable => {
                tokio::select! {
                    biased;
                    _ = crate::shutdown::stopped(&mut stop) => return,
                    _ = balance_leaders(&broker) => {}
                }
            }
            _ = checkpoint.tick() => {
                on_blocking_thread(&broker, "checkpoint", ReplicaManager::checkpoint).await;
                broker.fetch_sessions.evict_expired();
            }
        }
    }
}

/// Runs a periodic duty on the blocking pool: it walks every log and waits
/// for the disk (fsyncs, renames, removals), which must stall neither the
/// runtime's workers nor the connections they serve.
async fn on_blocking_thread(
    broker: &Arc<Broker>,
    duty: &'static str,
    work: impl FnOnce(&ReplicaManager) -> Result<(), StorageError> + Send + 'static,
) {
    let broker = broker.clone();
    match tokio::task::spawn_blocking(move || work(&broker.replicas)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!("{duty} failed: {e}"),
        Err(e) => tracing::error!("{duty} task failed: {e}"),
    }
}
