//! This node's link to the active controller (Kafka's
//! `NodeToControllerChannelManager`): requests go to the quorum leader's
//! controller endpoint (from `controller.quorum.voters`) and are retried at
//! the new leader on NOT_CONTROLLER or a lost connection until their
//! deadline.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kafka_protocol::protocol::Request;
use strom_quorum::channel::Channel;
use strom_quorum::Quorum;
use tokio::time::Instant;

/// The client id of the requests this node sends its controller.
const CLIENT_ID: &str = "strom-controller-link";
/// The pause before a retry, so a leaderless quorum is not hammered.
const RETRY_BACKOFF: Duration = Duration::from_millis(50);

/// Why no answer came from the controller.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// No controller answered before the deadline.
    #[error("no active controller answered in time: {0}")]
    Timeout(String),
}

/// The outbound requests of one node to the active controller.
pub struct ControllerLink {
    quorum: Quorum,
    endpoints: BTreeMap<i32, String>,
    channels: Mutex<HashMap<i32, Arc<Channel>>>,
}

impl ControllerLink {
    pub fn new(quorum: Quorum, endpoints: BTreeMap<i32, String>) -> Self {
        Self { quorum, endpoints, channels: Mutex::default() }
    }

    /// The active controller as this node knows it.
    pub fn leader_id(&self) -> Option<i32> {
        self.quorum.leader().borrow().leader_id
    }

    /// Whether this node is the active controller.
    pub fn is_active(&self) -> bool {
        self.leader_id() == Some(self.quorum.node_id())
    }

    /// Sends `request` at `version` to the active controller until an
    /// answer that `not_controller` does not reject arrives, or `timeout`
    /// passes.
    pub async fn send<R: Request>(
        &self,
        request: &R,
        version: i16,
        timeout: Duration,
        not_controller: impl Fn(&R::Response) -> bool,
    ) -> Result<R::Response, LinkError> {
        let deadline = Instant::now() + timeout;
        let mut last_error = "no leader known".to_owned();
        while Instant::now() < deadline {
            let left = deadline - Instant::now();
            match self.try_send(request, version, left).await {
                Ok(response) if !not_controller(&response) => return Ok(response),
                Ok(_) => last_error = "NOT_CONTROLLER".into(),
                Err(e) => last_error = e,
            }
            tokio::time::sleep(RETRY_BACKOFF.min(deadline.saturating_duration_since(Instant::now()))).await;
        }
        Err(LinkError::Timeout(last_error))
    }

    async fn try_send<R: Request>(
        &self,
        request: &R,
        version: i16,
        left: Duration,
    ) -> Result<R::Response, String> {
        let leader = self.leader_id().ok_or("no leader known")?;
        let channel = self.channel(leader, left).await?;
        let answer = channel.send(request, version, left).await;
        if answer.is_err() {
            self.channels.lock().unwrap_or_else(PoisonError::into_inner).remove(&leader);
        }
        answer.map_err(|e| e.to_string())
    }

    async fn channel(&self, leader: i32, timeout: Duration) -> Result<Arc<Channel>, String> {
        let open = self.channels.lock().unwrap_or_else(PoisonError::into_inner).get(&leader).cloned();
        if let Some(channel) = open.filter(|c| !c.is_closed()) {
            return Ok(channel);
        }
        let address = self.endpoints.get(&leader).ok_or("the leader is not a known voter")?;
        let channel =
            Arc::new(Channel::connect(address, CLIENT_ID, timeout).await.map_err(|e| e.to_string())?);
        self.channels.lock().unwrap_or_else(PoisonError::into_inner).insert(leader, channel.clone());
        Ok(channel)
    }
}
