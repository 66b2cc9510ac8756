//! This node's link to the active controller (Kafka's
//! `NodeToControllerChannelManager`): requests go to the quorum leader's
//! controller endpoint (from `controller.quorum.voters`) and are retried at
//! the new leader on NOT_CONTROLLER or a lost connection until their
//! deadline. Connections are secured and authenticated as the controller
//! listener is configured ([`crate::security::client`]); one that cannot
//! authenticate is logged and retried after a backoff.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::{
    AllocateProducerIdsRequest, AllocateProducerIdsResponse, BrokerId, CreateTopicsRequest,
};
use kafka_protocol::protocol::Request;
use strom_metadata::{MetadataError, NewTopic, ProducerIdBlock};
use strom_quorum::channel::{Channel, ChannelError, Connector, AUTHENTICATION_BACKOFF};
use strom_quorum::Quorum;
use tokio::time::Instant;

use crate::handlers::{str_bytes, topic_name};

/// The client id of the requests this node sends its controller.
const CLIENT_ID: &str = "strom-controller-link";
/// How long a request of this node's own looks for an active controller.
const LINK_TIMEOUT: Duration = Duration::from_secs(30);
/// The CreateTopics version internal-topic creation sends.
const CREATE_TOPICS_VERSION: i16 = 7;
/// The longest one attempt may wait for its answer.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause before a retry, so a leaderless quorum is not hammered.
const RETRY_BACKOFF: Duration = Duration::from_millis(50);

/// Why no answer came from the controller.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// No controller answered before the deadline.
    #[error("no active controller answered in time: {0}")]
    Timeout(String),
}

fn not_controller_error(e: LinkError) -> MetadataError {
    tracing::warn!("{e}");
    MetadataError::NotController { leader_id: None }
}

/// The outbound requests of one node to the active controller.
pub struct ControllerLink {
    quorum: Quorum,
    connector: Connector,
    channels: Mutex<HashMap<i32, Arc<Channel>>>,
    /// Flips at shutdown: requests in progress give up at once.
    closed: tokio::sync::watch::Sender<bool>,
}

impl ControllerLink {
    pub fn new(quorum: Quorum, connector: Connector) -> Self {
        Self { quorum, connector, channels: Mutex::default(), closed: tokio::sync::watch::channel(false).0 }
    }

    /// Opens connections to controllers, secured as this link's are.
    pub fn connector(&self) -> &Connector {
        &self.connector
    }

    /// Ends every request in progress and refuses new ones (shutdown).
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    /// The active controller as this node knows it.
    pub fn leader_id(&self) -> Option<i32> {
        self.quorum.leader().borrow().leader_id
    }

    /// Whether this node is the active controller.
    pub fn is_active(&self) -> bool {
        self.leader_id() == Some(self.quorum.node_id())
    }

    /// AllocateProducerIds: a block of producer ids for this broker.
    pub async fn allocate_producer_ids(
        &self,
        broker_id: i32,
        broker_epoch: i64,
    ) -> Result<ProducerIdBlock, MetadataError> {
        let request = AllocateProducerIdsRequest::default()
            .with_broker_id(BrokerId(broker_id))
            .with_broker_epoch(broker_epoch);
        let not_controller =
            |r: &AllocateProducerIdsResponse| r.error_code == ResponseError::NotController.code();
        let response =
            self.send(&request, 0, LINK_TIMEOUT, not_controller).await.map_err(not_controller_error)?;
        match ResponseError::try_from_code(response.error_code) {
            None => Ok(response.producer_id_start.0
                ..response.producer_id_start.0 + i64::from(response.producer_id_len)),
            Some(ResponseError::StaleBrokerEpoch) => {
                Err(MetadataError::StaleBrokerEpoch("stale broker epoch".into()))
            }
            Some(e) => {
                Err(MetadataError::InvalidConfig(format!("the controller refused producer ids: {e:?}")))
            }
        }
    }

    /// CreateTopics of one topic (internal topics created on first use).
    pub async fn create_topic(&self, topic: &NewTopic) -> Result<(), MetadataError> {
        let configs = topic
            .configs
            .iter()
            .map(|(name, value)| {
                CreatableTopicConfig::default().with_name(str_bytes(name)).with_value(Some(str_bytes(value)))
            })
            .collect();
        let creatable = CreatableTopic::default()
            .with_name(topic_name(&topic.name))
            .with_num_partitions(topic.partitions)
            .with_replication_factor(topic.replication_factor)
            .with_configs(configs);
        let request = CreateTopicsRequest::default()
            .with_topics(vec![creatable])
            .with_timeout_ms(LINK_TIMEOUT.as_millis() as i32);
        let response = self
            .send(&request, CREATE_TOPICS_VERSION, LINK_TIMEOUT, crate::forwarding::is_not_controller)
            .await
            .map_err(not_controller_error)?;
        let code = response.topics.first().map_or(0, |t| t.error_code);
        match ResponseError::try_from_code(code) {
            None => Ok(()),
            Some(ResponseError::TopicAlreadyExists) => {
                Err(MetadataError::TopicAlreadyExists(topic.name.clone()))
            }
            Some(e) => {
                Err(MetadataError::InvalidConfig(format!("the controller refused {}: {e:?}", topic.name)))
            }
        }
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
        let mut leader = self.quorum.leader();
        let mut closed = self.closed.subscribe();
        while Instant::now() < deadline && !*closed.borrow() {
            let left = (deadline - Instant::now()).min(ATTEMPT_TIMEOUT);
            leader.mark_unchanged();
            // A leader that changes mid-request (a paused or dead one was
            // replaced) is not waited for: the request goes to the new one.
            let attempt = tokio::select! {
                answer = self.try_send(request, version, left) => answer,
                _ = leader.changed() => Err("the leader changed".to_owned()),
                _ = closed.wait_for(|closed| *closed) => Err("shutting down".to_owned()),
            };
            match attempt {
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
        let address = self.address_of(leader).ok_or("the leader is not a known voter")?;
        let channel = match self.connector.connect(&address, CLIENT_ID, timeout).await {
            Ok(channel) => Arc::new(channel),
            Err(e @ ChannelError::Authentication(..)) => {
                tracing::error!(link = CLIENT_ID, "{e}; retrying in {AUTHENTICATION_BACKOFF:?}");
                tokio::time::sleep(AUTHENTICATION_BACKOFF).await;
                return Err(e.to_string());
            }
            Err(e) => return Err(e.to_string()),
        };
        self.channels.lock().unwrap_or_else(PoisonError::into_inner).insert(leader, channel.clone());
        Ok(channel)
    }

    /// A voter's controller endpoint, from the voter set in force (or
    /// `controller.quorum.voters`), as the quorum itself reaches it.
    fn address_of(&self, voter: i32) -> Option<String> {
        let described = self.quorum.describe();
        let (_, endpoints) = described.voter_endpoints.into_iter().find(|(id, _)| *id == voter)?;
        endpoints.first().map(|e| format!("{}:{}", e.host, e.port))
    }
}
