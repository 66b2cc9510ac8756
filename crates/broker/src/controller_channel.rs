//! This node's way to the cluster metadata, the one service handlers and
//! background tasks use for it: the published image, this node's own
//! [`Controller`] (which answers when it is the active controller, or on a
//! single node), the [`ControllerLink`] to the active controller elsewhere,
//! and the broker epoch the controller gave this broker.
//!
//! The channel derefs to the node's own controller, so reading the image
//! or writing as the active controller reads as it always did; the calls
//! that must reach whichever controller is active (a topic created on first
//! use, a block of producer ids) are the channel's own.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use strom_metadata::{Controller, MetadataError, NewTopic, ProducerIdBlock};

use crate::controller_link::ControllerLink;
use crate::replica::ReplicaManager;

/// The controller as this node reaches it.
pub struct ControllerChannel {
    node_id: i32,
    controller: Controller,
    /// A KRaft node's requests to the active controller; none on a single node.
    link: Option<Arc<ControllerLink>>,
    /// This broker's epoch: the offset of its registration record, -1
    /// until it is registered.
    broker_epoch: AtomicI64,
}

impl std::ops::Deref for ControllerChannel {
    type Target = Controller;

    fn deref(&self) -> &Controller {
        &self.controller
    }
}

impl ControllerChannel {
    pub fn new(
        node_id: i32,
        controller: Controller,
        link: Option<Arc<ControllerLink>>,
        broker_epoch: i64,
    ) -> Self {
        Self { node_id, controller, link, broker_epoch: AtomicI64::new(broker_epoch) }
    }

    /// A KRaft node's link to the active controller.
    pub fn link(&self) -> Option<&Arc<ControllerLink>> {
        self.link.as_ref()
    }

    /// The link, when the active controller is another node; `None` when
    /// this node's own controller answers (the active one, or a single node).
    fn remote(&self) -> Option<&Arc<ControllerLink>> {
        self.link.as_ref().filter(|link| !link.is_active())
    }

    /// Records the broker epoch the controller gave this broker (-1: none).
    pub fn set_broker_epoch(&self, epoch: i64) {
        self.broker_epoch.store(epoch, Ordering::Release);
    }

    /// This broker's epoch (the offset of its registration record), -1
    /// while it is not registered.
    pub fn broker_epoch(&self) -> i64 {
        self.broker_epoch.load(Ordering::Acquire)
    }

    /// A block of producer ids from the active controller.
    pub async fn allocate_producer_ids_at_active(&self) -> Result<ProducerIdBlock, MetadataError> {
        let (broker_id, epoch) = (self.node_id, self.broker_epoch());
        match self.remote() {
            Some(link) => link.allocate_producer_ids(broker_id, epoch).await,
            None => self.controller.allocate_producer_ids(broker_id, epoch).await,
        }
    }

    /// Creates `topic` through the active controller; when that is this
    /// node's own, the logs it places here open in `replicas` at once.
    pub async fn create_topic_at_active(
        &self,
        topic: NewTopic,
        replicas: &ReplicaManager,
    ) -> Result<(), MetadataError> {
        match self.remote() {
            Some(link) => link.create_topic(&topic).await,
            None => self.controller.create_topic_with_logs(topic, false, replicas).await.map(drop),
        }
    }
}
