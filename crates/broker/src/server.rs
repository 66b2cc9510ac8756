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

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use strom_metadata::controller::{METADATA_LOG_DIR, METADATA_VERSION_FEATURE, METADATA_VERSION_LEVEL};
use strom_metadata::{
    block_on, BrokerHeartbeat, BrokerRegistration, Controller, Endpoint, FeatureRange, HeartbeatReply,
    MetadataError,
};
use strom_quorum::{Quorum, QuorumConfig};
use strom_storage::file_cache::FileCache;
use strom_storage::{Context, LogManager, StorageError};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::config::BrokerConfig;
use crate::fetch_session::FetchSessionCache;
use crate::group::GroupCoordinator;
use crate::meta_properties::{node_dirs, parse_uuid, FormatError, LogDirs};
use crate::metrics::{self, GaugeGuard, Metrics};
use crate::network;
use crate::producer_ids::ProducerIdManager;
use crate::quota::connections::{ConnectionLimits, Refusal};
use crate::quota::QuotaManager;
use crate::replica::ReplicaManager;
use crate::security::sasl::scram::{ImageScramCredentials, ScramCredentials};
use crate::security::ListenerSecurity;
use crate::txn::TransactionCoordinator;

/// Kafka's `SecurityProtocol.PLAINTEXT` id, the only protocol Strom serves.
const PLAINTEXT: i16 = 0;

/// How long shutdown waits for connections to finish their requests.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Everything a request handler can reach.
pub struct Broker {
    pub config: Arc<BrokerConfig>,
    pub controller: Controller,
    /// This broker's epoch: the offset of its registration record.
    pub broker_epoch: i64,
    pub replicas: ReplicaManager,
    pub fetch_sessions: FetchSessionCache,
    pub groups: GroupCoordinator,
    pub metrics: Metrics,
    pub producer_ids: ProducerIdManager,
    pub transactions: TransactionCoordinator,
    /// Each listener's TLS and SASL settings, in `listeners` order.
    pub listener_security: Vec<Arc<ListenerSecurity>>,
    /// Client quota sensors.
    pub quotas: QuotaManager,
    /// Open connections and connection rates per client address.
    pub connection_limits: Arc<ConnectionLimits>,
    /// Flips to true when shutdown begins; delayed operations end early on it.
    stopping: watch::Sender<bool>,
    /// The metadata quorum of a KRaft node, started when the broker binds.
    quorum: OnceLock<Quorum>,
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

/// Where the node-local controller keeps its log. On a KRaft node
/// `__cluster_metadata-0` belongs to the quorum, so the local controller
/// moves aside (temporary, until the controller writes through the quorum).
fn local_controller_dir(config: &BrokerConfig) -> PathBuf {
    match config.kraft.is_kraft() {
        true => config.metadata_log_dir.join("__strom_local_metadata"),
        false => config.metadata_log_dir.clone(),
    }
}

/// Opens the metadata log of the cluster the log dirs' `meta.properties`
/// name. A KRaft node needs formatted dirs; a single node formats its dirs
/// on first start. As in Kafka, the cluster id lives in `meta.properties`,
/// not in the log.
fn open_controller(config: &BrokerConfig) -> Result<Controller, StartError> {
    let dirs = LogDirs::load(&node_dirs(config))?;
    let formatted_id = dirs.verify(config.node_id)?.map(str::to_owned);
    if config.kraft.is_kraft() {
        dirs.require_formatted()?;
    }
    let controller_dir = local_controller_dir(config);
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
    Ok(Controller::open_local(&controller_dir, &cluster_id)?
        .with_max_partitions_per_request(config.max_partitions_per_request)
        .with_session_timeout_ms(config.kraft.broker_session_timeout_ms.into()))
}

/// Registers this node as a broker through the controller, with its
/// advertised listeners, rack and log dir ids, then heartbeats once so it
/// is unfenced (it has applied its own registration); returns its broker
/// epoch.
fn register_broker(config: &BrokerConfig, controller: &Controller) -> Result<i64, StartError> {
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
    let registration = BrokerRegistration {
        broker_id: config.node_id,
        cluster_id: controller.cluster_id().to_owned(),
        incarnation_id: uuid::Uuid::new_v4(),
        endpoints,
        features: vec![FeatureRange {
            name: METADATA_VERSION_FEATURE.into(),
            min: METADATA_VERSION_LEVEL,
            max: METADATA_VERSION_LEVEL,
        }],
        rack: config.kraft.broker_rack.clone(),
        log_dirs,
    };
    let now = strom_storage::now_ms();
    let epoch = block_on(controller.register_broker(registration, now))?;
    heartbeat(config, controller, epoch)?;
    Ok(epoch)
}

/// One BrokerHeartbeat of this node to its own controller.
fn heartbeat(
    config: &BrokerConfig,
    controller: &Controller,
    epoch: i64,
) -> Result<HeartbeatReply, MetadataError> {
    let request = BrokerHeartbeat {
        broker_id: config.node_id,
        broker_epoch: epoch,
        current_metadata_offset: controller.image().last_offset,
        want_fence: false,
        want_shut_down: false,
    };
    block_on(controller.broker_heartbeat(request, strom_storage::now_ms()))
}

impl Broker {
    /// Opens the metadata log and every partition log.
    pub fn open(config: BrokerConfig) -> Result<Arc<Self>, StartError> {
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
        let logs = LogManager::new(config.log_dirs.clone())?
            .with_threads_per_dir(config.num_recovery_threads_per_data_dir);
        FileCache::shared().set_capacity(config.log_segment_open_files_max);
        let controller = open_controller(&config)?;
        scram.bind(controller.loader().clone());
        let broker_epoch = register_broker(&config, &controller)?;
        let metadata_ms = started.elapsed().as_millis();
        let replicas = ReplicaManager::open(config.clone(), logs, &controller.image())?;
        let logs_ms = started.elapsed().as_millis() - metadata_ms;
        let fetch_sessions = FetchSessionCache::new(config.max_incremental_fetch_session_cache_slots);
        let groups = GroupCoordinator::new(config.groups.clone());
        let (stopping, _) = watch::channel(false);
        let metrics = Metrics::default();
        let producer_ids = ProducerIdManager::default();
        let transactions = TransactionCoordinator::new(config.transactions.clone());
        let quotas = QuotaManager::new(config.quota_window);
        let connection_limits =
            Arc::new(ConnectionLimits::new(config.connection_limits.clone(), config.quota_window));
        let broker = Self {
            config,
            controller,
            broker_epoch,
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
            quorum: OnceLock::new(),
        };
        broker.groups.load(&broker)?;
        // After the groups: completing a prepared transaction may commit
        // their staged offsets.
        broker.transactions.load(&broker)?;
        tracing::info!(metadata_ms, logs_ms, total_ms = started.elapsed().as_millis(), "broker state loaded");
        Ok(Arc::new(broker))
    }

    /// The metadata quorum, on a KRaft node once bound.
    pub fn quorum(&self) -> Option<&Quorum> {
        self.quorum.get()
    }

    /// Starts the metadata quorum of a KRaft node: a voter if this node is
    /// a listed controller, an observer otherwise.
    async fn start_quorum(&self) -> Result<(), StartError> {
        if !self.config.kraft.is_kraft() || self.quorum.get().is_some() {
            return Ok(());
        }
        let config = quorum_config(&self.config, self.controller.cluster_id())?;
        let quorum = Quorum::start(config).await.map_err(|e| StartError::Config(e.to_string()))?;
        let _ = self.quorum.set(quorum);
        Ok(())
    }

    /// A receiver that sees `true` once shutdown begins.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// Applies the controller's latest image to the hosted partitions and
    /// their log configs.
    pub fn sync_partitions(&self) -> Result<(), StorageError> {
        self.replicas.sync(&self.controller.image())
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
    pub async fn bind(broker: Arc<Broker>) -> Result<Self, StartError> {
        broker.start_quorum().await?;
        let mut listeners = Vec::new();
        for (listener, security) in broker.config.listeners.iter().zip(&broker.listener_security) {
            let addr = listener.socket_addr().map_err(StartError::Config)?;
            let bound = TcpListener::bind(addr)
                .await
                .map_err(|error| StartError::Bind { addr: addr.to_string(), error })?;
            let local =
                bound.local_addr().map_err(|error| StartError::Bind { addr: addr.to_string(), error })?;
            tracing::debug!(listener = %listener.name, protocol = ?security.protocol, addr = %local, "listening");
            listeners.push((security.clone(), bound));
        }
        let metrics_listener = match broker.config.metrics_listener {
            Some(addr) => {
                let bound = TcpListener::bind(addr)
                    .await
                    .map_err(|error| StartError::Bind { addr: addr.to_string(), error })?;
                tracing::info!(addr = %addr, "serving Prometheus metrics at /metrics");
                Some(bound)
            }
            None => None,
        };
        let console_listener = match broker.config.console.listener {
            Some(addr) => {
                let bound = TcpListener::bind(addr)
                    .await
                    .map_err(|error| StartError::Bind { addr: addr.to_string(), error })?;
                tracing::info!(addr = %addr, "serving the web console at http://{addr}/");
                Some(bound)
            }
            None => None,
        };
        Ok(Self { broker, listeners, metrics_listener, console_listener })
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
        background.spawn(GroupCoordinator::run_timers(self.broker.clone()));
        background.spawn(TransactionCoordinator::run_timers(self.broker.clone()));
        if let Some(listener) = self.metrics_listener {
            background.spawn(metrics::serve_http(self.broker.clone(), listener, stop_rx.clone()));
        }
        if let Some(listener) = self.console_listener {
            background.spawn(crate::console::serve(self.broker.clone(), listener, stop_rx.clone()));
        }
        if self.broker.config.cleaner.enable {
            for id in 0..self.broker.config.cleaner.threads {
                background.spawn(run_log_cleaner(self.broker.clone(), stop_rx.clone(), id));
            }
        }
        let permits = Arc::new(Semaphore::new(self.broker.config.max_connections));
        let mut acceptors = JoinSet::new();
        for (security, listener) in self.listeners {
            if let Some(tls) = &security.tls {
                background.spawn(tls.clone().watch(security.name.clone(), stop_rx.clone()));
            }
            let broker = self.broker.clone();
            acceptors.spawn(accept_loop(broker, security, listener, permits.clone(), stop_rx.clone()));
        }
        shutdown.await;
        tracing::info!("shutting down: no new connections, finishing in-flight requests");
        self.broker.stopping.send_replace(true);
        if let Some(quorum) = self.broker.quorum() {
            // A leader hands over first, so the quorum does not wait out a timeout.
            quorum.shutdown().await;
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
        while background.join_next().await.is_some() {}
        self.broker.replicas.shutdown()?;
        tracing::info!("shut down cleanly");
        Ok(())
    }
}

/// The quorum settings of a KRaft node, from `controller.quorum.*`.
fn quorum_config(config: &BrokerConfig, cluster_id: &str) -> Result<strom_quorum::Config, StartError> {
    let kraft = &config.kraft;
    let voter_endpoints =
        kraft.voter_endpoints(config.node_id, &config.listeners).map_err(|e| StartError::Config(e.into()))?;
    let millis = |value: i32| u64::try_from(value).unwrap_or(1);
    let mut raft = QuorumConfig::new(config.node_id, voter_endpoints.keys().copied());
    raft.election_timeout_ms = millis(kraft.election_timeout_ms);
    raft.fetch_timeout_ms = millis(kraft.fetch_timeout_ms);
    raft.request_timeout_ms = millis(kraft.request_timeout_ms);
    raft.election_backoff_max_ms = millis(kraft.election_backoff_max_ms);
    // Kafka parks a fetch for 500 ms; a fetch timeout below twice that
    // (tests) must not expire while the fetch is parked.
    raft.fetch_max_wait_ms = raft.fetch_max_wait_ms.min(raft.fetch_timeout_ms / 2);
    Ok(strom_quorum::Config {
        raft,
        cluster_id: cluster_id.to_owned(),
        metadata_log_dir: config.metadata_log_dir.clone(),
        voter_endpoints,
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
            _ = stop.changed() => break,
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
                _ = stop.changed() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
        }
    }
}

/// Flushes due logs, enforces retention, writes checkpoints and expires
/// idle producer ids on Kafka's intervals.
/// This broker's heartbeat to its own controller, then the controller's
/// fencing of brokers whose sessions expired (Kafka's periodic maintenance).
fn keep_session(broker: &Broker) {
    if let Err(e) = heartbeat(&broker.config, &broker.controller, broker.broker_epoch) {
        tracing::warn!("broker heartbeat failed: {e}");
    }
    if let Err(e) = block_on(broker.controller.fence_expired_brokers(strom_storage::now_ms())) {
        tracing::warn!("fencing expired broker sessions failed: {e}");
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
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => return,
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
            _ = session.tick() => keep_session(&broker),
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
