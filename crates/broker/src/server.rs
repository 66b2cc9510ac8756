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
use std::sync::Arc;
use std::time::Duration;

use strom_metadata::{Controller, MetadataError};
use strom_storage::file_cache::FileCache;
use strom_storage::{Context, LogManager, StorageError};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::config::BrokerConfig;
use crate::fetch_session::FetchSessionCache;
use crate::group::GroupCoordinator;
use crate::meta_properties::{node_dirs, FormatError, LogDirs};
use crate::metrics::{self, GaugeGuard, Metrics};
use crate::network;
use crate::producer_ids::ProducerIdManager;
use crate::replica::ReplicaManager;
use crate::security::ListenerSecurity;
use crate::txn::TransactionCoordinator;

/// How long shutdown waits for connections to finish their requests.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Everything a request handler can reach.
pub struct Broker {
    pub config: Arc<BrokerConfig>,
    pub controller: Controller,
    pub replicas: ReplicaManager,
    pub fetch_sessions: FetchSessionCache,
    pub groups: GroupCoordinator,
    pub metrics: Metrics,
    pub producer_ids: ProducerIdManager,
    pub transactions: TransactionCoordinator,
    /// Each listener's TLS and SASL settings, in `listeners` order.
    pub listener_security: Vec<Arc<ListenerSecurity>>,
    /// Flips to true when shutdown begins; delayed operations end early on it.
    stopping: watch::Sender<bool>,
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
/// name. A KRaft node needs formatted dirs and, in this release, a quorum
/// of itself alone; a single node formats its dirs on first start.
fn open_controller(config: &BrokerConfig) -> Result<Controller, StartError> {
    let dirs = LogDirs::load(&node_dirs(config))?;
    let formatted_id = dirs.verify(config.node_id)?.map(str::to_owned);
    if config.kraft.is_kraft() {
        dirs.require_formatted()?;
        if !config.kraft.is_single_node_quorum(config.node_id, &config.listeners) {
            let reason = "clustering is not available yet: a KRaft node must combine process.roles=broker,controller with a quorum of itself alone";
            return Err(StartError::Config(reason.into()));
        }
    }
    std::fs::create_dir_all(&config.metadata_log_dir)
        .at("create metadata log dir", &config.metadata_log_dir)?;
    let controller =
        Controller::open_in_cluster(&config.metadata_log_dir, config.node_id, formatted_id.as_deref())?;
    let recorded = controller.image().cluster_id.clone();
    if let Some(formatted) = formatted_id.filter(|id| *id != recorded) {
        let dir = config.metadata_log_dir.display();
        let reason = format!("the metadata log in {dir} belongs to cluster {recorded}, but meta.properties names cluster {formatted}");
        return Err(FormatError(reason).into());
    }
    dirs.format(
        &recorded,
        config.node_id,
        &[],
        |dir| tracing::info!(dir = %dir.display(), cluster_id = %recorded, "formatting log dir"),
    )?;
    Ok(controller)
}

impl Broker {
    /// Opens the metadata log and every partition log.
    pub fn open(config: BrokerConfig) -> Result<Arc<Self>, StartError> {
        let config = Arc::new(config);
        let started = std::time::Instant::now();
        // Before anything touches the disk: a listener that cannot be
        // secured as configured stops the start.
        let listener_security = listener_security(&config)?;
        // Lock the log dirs before touching anything in them.
        let logs = LogManager::new(config.log_dirs.clone())?
            .with_threads_per_dir(config.num_recovery_threads_per_data_dir);
        FileCache::shared().set_capacity(config.log_segment_open_files_max);
        let controller =
            open_controller(&config)?.with_max_partitions_per_request(config.max_partitions_per_request);
        let metadata_ms = started.elapsed().as_millis();
        let replicas = ReplicaManager::open(config.clone(), logs, &controller.image())?;
        let logs_ms = started.elapsed().as_millis() - metadata_ms;
        let fetch_sessions = FetchSessionCache::new(config.max_incremental_fetch_session_cache_slots);
        let groups = GroupCoordinator::new(config.groups.clone());
        let (stopping, _) = watch::channel(false);
        let metrics = Metrics::default();
        let producer_ids = ProducerIdManager::default();
        let transactions = TransactionCoordinator::new(config.transactions.clone());
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
            stopping,
        };
        broker.groups.load(&broker)?;
        // After the groups: completing a prepared transaction may commit
        // their staged offsets.
        broker.transactions.load(&broker)?;
        tracing::info!(metadata_ms, logs_ms, total_ms = started.elapsed().as_millis(), "broker state loaded");
        Ok(Arc::new(broker))
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
fn listener_security(config: &BrokerConfig) -> Result<Vec<Arc<ListenerSecurity>>, StartError> {
    let secure = |name: &str| {
        ListenerSecurity::from_config(config, name)
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
}

impl BoundBroker {
    pub async fn bind(broker: Arc<Broker>) -> Result<Self, StartError> {
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
        Ok(Self { broker, listeners, metrics_listener })
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
                let (broker, security, stop) = (broker.clone(), security.clone(), stop.clone());
                connections.spawn(async move {
                    let _open = GaugeGuard::new(&broker.metrics.connections);
                    network::serve(broker.clone(), stream, peer, security, stop).await;
                    drop(permit);
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
