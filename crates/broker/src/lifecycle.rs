//! A KRaft node's membership, as Kafka's `BrokerLifecycleManager` and
//! `ControllerRegistrationManager` keep it: a broker registers with the
//! active controller, heartbeats every `broker.heartbeat.interval.ms` with
//! the metadata offset it has applied (the controller unfences it once that
//! covers its registration), registers afresh when its session is lost,
//! and on shutdown asks for a controlled shutdown through its heartbeats
//! (it does not unregister, as Kafka's broker does not). A controller
//! registers itself once, so DescribeCluster can list it.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    broker_registration_request, controller_registration_request, BrokerHeartbeatRequest,
    BrokerHeartbeatResponse, BrokerId, BrokerRegistrationRequest, ControllerRegistrationRequest,
};
use strom_metadata::BrokerRegistration;
use tokio::sync::watch;

use crate::config::BrokerConfig;
use crate::controller_channel::ControllerChannel;
use crate::controller_link::ControllerLink;
use crate::handlers::str_bytes;

/// The versions this node sends (Kafka 4.1's broker sends these too).
const REGISTRATION_VERSION: i16 = 4;
const HEARTBEAT_VERSION: i16 = 1;
const CONTROLLER_REGISTRATION_VERSION: i16 = 0;

/// What the lifecycle managers use of this node: its config and its
/// channel to the controller (whose broker epoch they keep).
#[derive(Clone)]
pub struct Node {
    pub config: Arc<BrokerConfig>,
    pub controller: Arc<ControllerChannel>,
    /// The epoch the last incarnation shut down cleanly at, -1 for none
    /// (KIP-966: an unclean restart leaves the ISR and ELR).
    pub previous_broker_epoch: i64,
}

/// Registers and heartbeats until `stop` flips.
pub async fn run_broker(node: Node, link: Arc<ControllerLink>, mut stop: watch::Receiver<bool>) {
    let interval = heartbeat_interval(&node);
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = crate::shutdown::stopped(&mut stop) => return,
            _ = ticks.tick() => {}
        }
        let round = async {
            if node.controller.broker_epoch() == -1 {
                register(&node, &link, interval).await?;
            }
            // At once after a registration too: the controller unfences
            // this broker on the first heartbeat that shows it caught up.
            heartbeat(&node, &link, node.controller.broker_epoch(), false, interval).await.map(drop)
        };
        let outcome = tokio::select! {
            biased;
            _ = crate::shutdown::stopped(&mut stop) => return,
            outcome = round => outcome,
        };
        if let Err(e) = outcome {
            tracing::debug!("broker lifecycle: {e}");
        }
    }
}

fn heartbeat_interval(node: &Node) -> Duration {
    Duration::from_millis(node.config.kraft.broker_heartbeat_interval_ms.max(1) as u64)
}

async fn register(node: &Node, link: &ControllerLink, timeout: Duration) -> Result<(), String> {
    let registration =
        crate::server::registration(&node.config, node.controller.cluster_id(), node.previous_broker_epoch)
            .map_err(|e| e.to_string())?;
    let request = registration_request(&registration);
    let not_controller = |r: &kafka_protocol::messages::BrokerRegistrationResponse| {
        r.error_code == ResponseError::NotController.code()
    };
    let response = link
        .send(&request, REGISTRATION_VERSION, timeout, not_controller)
        .await
        .map_err(|e| e.to_string())?;
    if response.error_code != 0 {
        return Err(format!("registration refused with error {}", response.error_code));
    }
    tracing::info!(broker_epoch = response.broker_epoch, "registered with the active controller");
    node.controller.set_broker_epoch(response.broker_epoch);
    Ok(())
}

fn registration_request(registration: &BrokerRegistration) -> BrokerRegistrationRequest {
    let listeners = registration
        .endpoints
        .iter()
        .map(|e| {
            broker_registration_request::Listener::default()
                .with_name(str_bytes(&e.name))
                .with_host(str_bytes(&e.host))
                .with_port(e.port)
                .with_security_protocol(e.security_protocol)
        })
        .collect();
    let features = registration
        .features
        .iter()
        .map(|f| {
            broker_registration_request::Feature::default()
                .with_name(str_bytes(&f.name))
                .with_min_supported_version(f.min)
                .with_max_supported_version(f.max)
        })
        .collect();
    BrokerRegistrationRequest::default()
        .with_broker_id(BrokerId(registration.broker_id))
        .with_cluster_id(str_bytes(&registration.cluster_id))
        .with_incarnation_id(registration.incarnation_id)
        .with_listeners(listeners)
        .with_features(features)
        .with_rack(registration.rack.as_deref().map(str_bytes))
        .with_log_dirs(registration.log_dirs.clone())
        .with_previous_broker_epoch(registration.previous_broker_epoch)
}

/// One heartbeat; returns whether the controller says this broker may shut down.
async fn heartbeat(
    node: &Node,
    link: &ControllerLink,
    epoch: i64,
    want_shut_down: bool,
    timeout: Duration,
) -> Result<bool, String> {
    let request = BrokerHeartbeatRequest::default()
        .with_broker_id(BrokerId(node.config.node_id))
        .with_broker_epoch(epoch)
        .with_current_metadata_offset(node.controller.image().last_offset)
        .with_want_fence(false)
        .with_want_shut_down(want_shut_down);
    let response = match link.is_active() {
        // The active controller is this node: no connection to itself.
        true => tokio::time::timeout(timeout, local_heartbeat(node, &request))
            .await
            .map_err(|_| "the controller did not answer in time".to_owned())?,
        false => {
            let not_controller =
                |r: &BrokerHeartbeatResponse| r.error_code == ResponseError::NotController.code();
            link.send(&request, HEARTBEAT_VERSION, timeout, not_controller)
                .await
                .map_err(|e| e.to_string())?
        }
    };
    let lost = [ResponseError::StaleBrokerEpoch.code(), ResponseError::BrokerIdNotRegistered.code()];
    if lost.contains(&response.error_code) {
        // The session is gone (expired, or another incarnation): register afresh.
        node.controller.set_broker_epoch(-1);
        return Err(format!("heartbeat refused with error {}; registering again", response.error_code));
    }
    if response.error_code != 0 {
        return Err(format!("heartbeat refused with error {}", response.error_code));
    }
    Ok(response.should_shut_down)
}

async fn local_heartbeat(node: &Node, request: &BrokerHeartbeatRequest) -> BrokerHeartbeatResponse {
    let heartbeat = strom_metadata::BrokerHeartbeat {
        broker_id: request.broker_id.0,
        broker_epoch: request.broker_epoch,
        current_metadata_offset: request.current_metadata_offset,
        want_fence: request.want_fence,
        want_shut_down: request.want_shut_down,
    };
    match node.controller.broker_heartbeat(heartbeat, strom_storage::now_ms()).await {
        Ok(reply) => BrokerHeartbeatResponse::default()
            .with_is_caught_up(reply.is_caught_up)
            .with_is_fenced(reply.is_fenced)
            .with_should_shut_down(reply.should_shut_down),
        Err(e) => BrokerHeartbeatResponse::default().with_error_code(crate::error::metadata_error(&e).code()),
    }
}

/// Kafka's controlled shutdown: heartbeats asking to shut down until the
/// controller agrees, for at most the session timeout; without an answer
/// from any controller within a heartbeat interval it is skipped.
pub async fn controlled_shutdown(node: &Node, link: &ControllerLink) {
    let epoch = node.controller.broker_epoch();
    if epoch == -1 {
        return;
    }
    let interval = heartbeat_interval(node);
    let deadline = tokio::time::Instant::now()
        + Duration::from_millis(node.config.kraft.broker_session_timeout_ms.max(1) as u64);
    while tokio::time::Instant::now() < deadline {
        match heartbeat(node, link, epoch, true, interval).await {
            Ok(true) => {
                tracing::info!("the controller agreed to the controlled shutdown");
                return;
            }
            Ok(false) => {}
            Err(e) => {
                // No controller to agree (the quorum is gone or lost us):
                // nothing to hand over, as the session will expire anyway.
                tracing::info!("controlled shutdown skipped: {e}");
                return;
            }
        }
        tokio::time::sleep(interval.min(Duration::from_millis(200))).await;
    }
    tracing::warn!("controlled shutdown not confirmed before the session timeout; shutting down anyway");
}

/// Registers this controller with the active controller until its
/// registration is in the metadata.
pub async fn run_controller(node: Node, link: Arc<ControllerLink>, mut stop: watch::Receiver<bool>) {
    let incarnation_id = uuid::Uuid::new_v4();
    let request = controller_registration(&node, incarnation_id);
    let interval = heartbeat_interval(&node);
    let registered = |node: &Node| {
        node.controller
            .image()
            .controllers
            .get(&node.config.node_id)
            .is_some_and(|c| c.incarnation_id == incarnation_id)
    };
    while !registered(&node) {
        let not_controller = |r: &kafka_protocol::messages::ControllerRegistrationResponse| {
            r.error_code == ResponseError::NotController.code()
        };
        let sent = link.send(&request, CONTROLLER_REGISTRATION_VERSION, interval, not_controller);
        tokio::select! {
            biased;
            _ = crate::shutdown::stopped(&mut stop) => return,
            answer = sent => if let Err(e) = answer { tracing::debug!("controller registration: {e}") },
        }
        tokio::select! {
            biased;
            _ = crate::shutdown::stopped(&mut stop) => return,
            _ = tokio::time::sleep(interval.min(Duration::from_millis(500))) => {}
        }
    }
    tracing::info!("registered as a controller");
}

fn controller_registration(node: &Node, incarnation_id: uuid::Uuid) -> ControllerRegistrationRequest {
    let config = &node.config;
    let listeners = config
        .kraft
        .controller_listeners(&config.listeners)
        .into_iter()
        .map(|l| {
            let host = match l.host.as_str() {
                "" | "0.0.0.0" => crate::host_name::canonical(),
                host => host,
            };
            controller_registration_request::Listener::default()
                .with_name(str_bytes(&l.name))
                .with_host(str_bytes(host))
                .with_port(l.port)
                .with_security_protocol(0)
        })
        .collect();
    let features = strom_metadata::controller::SUPPORTED_FEATURES
        .iter()
        .map(|(name, min, max)| {
            controller_registration_request::Feature::default()
                .with_name(str_bytes(name))
                .with_min_supported_version(*min)
                .with_max_supported_version(*max)
        })
        .collect();
    ControllerRegistrationRequest::default()
        .with_controller_id(config.node_id)
        .with_incarnation_id(incarnation_id)
        .with_listeners(listeners)
        .with_features(features)
}
