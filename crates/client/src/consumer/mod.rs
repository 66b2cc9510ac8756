//! The consumer: assigned partitions in, records out.
//!
//! ```text
//! poll() ─▶ join/sync the group if a rebalance is due ([`group`])
//!        ─▶ resolve missing positions (committed offset, else auto.offset.reset)
//!        ─▶ send a Fetch to each leader without one in flight ([`fetcher`])
//!        ─▶ hand out buffered records, or wait for a response until the timeout
//! ```
//!
//! Partitions come from [`Consumer::assign`] (manual) or from
//! [`Consumer::subscribe`] (a consumer group, classic protocol: JoinGroup,
//! SyncGroup and a heartbeat task; the leader runs an [`assignor`]). As in
//! the Java client, rebalance callbacks and auto-commits run inside `poll`,
//! so the application sees a rebalance only between two polls.

pub mod assignor;
pub mod config;
pub mod fetcher;
mod group;
pub mod protocol;
pub mod records;
mod session;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::admin::{Admin, OffsetSpec};
use crate::cluster::Cluster;
use crate::error::{Error, KafkaCode, Result};
pub use config::{ConsumerConfig, IsolationLevel, OffsetReset};
use fetcher::{Assignment, Fetcher, PartitionState};
use group::Membership;
pub use protocol::TopicPartition;
pub use records::{ConsumerRecord, TimestampType};

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Told about partitions coming and going in a group rebalance; called
/// from inside `poll`. With auto-commit on, the positions of revoked
/// partitions are committed before `on_partitions_revoked` runs.
pub trait RebalanceListener: Send {
    fn on_partitions_revoked(&mut self, _partitions: &[TopicPartition]) {}
    fn on_partitions_assigned(&mut self, _partitions: &[TopicPartition]) {}
    /// Partitions taken away without a chance to commit (the member was
    /// fenced or timed out); by default treated as revoked.
    fn on_partitions_lost(&mut self, partitions: &[TopicPartition]) {
        self.on_partitions_revoked(partitions)
    }
}

/// A listener that does nothing.
pub struct NoListener;
impl RebalanceListener for NoListener {}

pub struct Consumer {
    config: Arc<ConsumerConfig>,
    admin: Admin,
    assignment: Assignment,
    fetcher: Fetcher,
    /// The group, once `subscribe` was called.
    membership: Option<Membership>,
    listener: Box<dyn RebalanceListener>,
    next_auto_commit: Instant,
    /// Asynchronous commits still on their way; a synchronous commit, a
    /// rebalance or close waits for them, so no older commit lands last.
    pending_commits: Vec<tokio::task::JoinHandle<()>>,
    closed: bool,
}

impl Consumer {
    /// Connects to the cluster; nothing is assigned yet.
    pub async fn connect(config: ConsumerConfig) -> Result<Self> {
        let cluster = Cluster::connect(config.client.clone()).await?;
        let config = Arc::new(config);
        Ok(Self {
            fetcher: Fetcher::new(cluster.clone(), config.clone()),
            admin: Admin::from_cluster(cluster),
            next_auto_commit: Instant::now() + config.auto_commit_interval,
            config,
            assignment: Assignment::new(),
            membership: None,
            listener: Box::new(NoListener),
            pending_commits: Vec::new(),
            closed: false,
        })
    }

    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    pub fn cluster(&self) -> &Arc<Cluster> {
        self.admin.cluster()
    }

    /// Takes exactly these partitions, outside any group rebalancing.
    /// Positions of partitions kept are kept.
    pub fn assign(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        if self.membership.is_some() {
            return Err(Error::InvalidRequest("assign() after subscribe(); unsubscribe first".into()));
        }
        let wanted: BTreeSet<&TopicPartition> = partitions.iter().collect();
        self.assignment.retain(|tp, _| wanted.contains(tp));
        for tp in partitions {
            self.assignment.entry(tp.clone()).or_default();
        }
        Ok(())
    }

    /// Joins `group.id` for `topics`; partitions arrive with the first
    /// `poll` that completes a rebalance.
    pub fn subscribe(&mut self, topics: &[String], listener: Box<dyn RebalanceListener>) -> Result<()> {
        let group_id = self.config.group_id.clone().ok_or_else(|| {
            Error::Config("subscribe needs group.id; use assign() for manual partitions".into())
        })?;
        if self.membership.is_none() && !self.assignment.is_empty() {
            return Err(Error::InvalidRequest("subscribe() after assign(); unassign first".into()));
        }
        if topics.iter().any(|t| t.trim().is_empty()) {
            return Err(Error::InvalidRequest("topic names must not be empty".into()));
        }
        let topics: BTreeSet<String> = topics.iter().cloned().collect();
        match self.membership.as_mut() {
            Some(membership) => membership.resubscribe(topics),
            None => {
                self.membership =
                    Some(Membership::new(self.admin.clone(), self.config.clone(), group_id, topics)?);
            }
        }
        self.listener = listener;
        Ok(())
    }

    /// The partitions currently assigned.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.assignment.keys().cloned().collect()
    }

    /// The next offset `poll` will return for `tp`, if known yet.
    pub fn position(&self, tp: &TopicPartition) -> Option<i64> {
        self.assignment.get(tp).and_then(|s| s.position)
    }

    /// The high watermark from the last fetch of `tp` (-1 before one).
    pub fn high_watermark(&self, tp: &TopicPartition) -> i64 {
        self.assignment.get(tp).map_or(-1, |s| s.high_watermark)
    }

    /// Records behind the end of the log (the LSO under read_committed).
    pub fn lag(&self, tp: &TopicPartition) -> Option<i64> {
        let state = self.assignment.get(tp)?;
        let end = match self.config.isolation_level {
            IsolationLevel::ReadCommitted => state.last_stable_offset,
            IsolationLevel::ReadUncommitted => state.high_watermark,
        };
        Some((end - state.position?).max(0)).filter(|_| end >= 0)
    }

    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> Result<()> {
        self.state_mut(tp)?.seek(offset);
        Ok(())
    }

    pub fn seek_to_beginning(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.request_reset(partitions, OffsetReset::Earliest)
    }

    pub fn seek_to_end(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.request_reset(partitions, OffsetReset::Latest)
    }

    fn request_reset(&mut self, partitions: &[TopicPartition], strategy: OffsetReset) -> Result<()> {
        for tp in partitions {
            self.state_mut(tp)?.request_reset(strategy);
        }
        Ok(())
    }

    /// Stops fetching `partitions` until `resume`; their positions stay.
    pub fn pause(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        for tp in partitions {
            self.state_mut(tp)?.paused = true;
        }
        Ok(())
    }

    pub fn resume(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        for tp in partitions {
            self.state_mut(tp)?.paused = false;
        }
        Ok(())
    }

    pub fn paused(&self) -> Vec<TopicPartition> {
        self.assignment.iter().filter(|(_, s)| s.paused).map(|(tp, _)| tp.clone()).collect()
    }

    fn state_mut(&mut self, tp: &TopicPartition) -> Result<&mut PartitionState> {
        self.assignment
            .get_mut(tp)
            .ok_or_else(|| Error::InvalidRequest(format!("{tp} is not assigned to this consumer")))
    }

    /// Up to `max.poll.records` records, waiting at most `timeout` for
    /// some to arrive; an empty batch means none came in time.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        if self.closed {
            return Err(Error::InvalidRequest("the consumer is closed".into()));
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(membership) = self.membership.as_mut() {
                membership.record_poll();
                membership.check_partition_counts().await;
                if membership.needs_join() {
                    for commit in self.pending_commits.drain(..) {
                        let _ = commit.await;
                    }
                    // Partitions kept keep what was fetched for them; data of
                    // partitions given up is dropped as it is drained.
                    membership
                        .rebalance(&mut self.assignment, &mut *self.listener, self.config.auto_commit())
                        .await?;
                }
            }
            self.maybe_auto_commit().await;
            self.refresh_stale_leaders().await;
            self.update_positions().await?;
            self.fetcher.send_fetches(&mut self.assignment).await?;
            let records = self.fetcher.drain(&mut self.assignment, self.config.max_poll_records)?;
            if !records.is_empty() {
                // Keep the pipe full while the caller works on these.
                self.fetcher.send_fetches(&mut self.assignment).await?;
                return Ok(records);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(records);
            }
            if self.fetcher.has_in_flight() {
                let wait_until = deadline.min(now + self.config.heartbeat_interval);
                self.fetcher.wait_for_responses(&mut self.assignment, wait_until).await?;
            } else {
                // Nothing fetchable (no assignment, all paused, or leaders unknown).
                let pause = self.config.client.retry_backoff.max(Duration::from_millis(10));
                tokio::time::sleep_until(deadline.min(now + pause)).await;
            }
        }
    }

    async fn refresh_stale_leaders(&mut self) {
        if self.fetcher.stale_topics.is_empty() {
            return;
        }
        let topics: Vec<String> = std::mem::take(&mut self.fetcher.stale_topics).into_iter().collect();
        if let Err(e) = self.cluster().refresh(Some(&topics), false).await {
            tracing::debug!("metadata refresh for {topics:?} failed: {e}");
        }
    }

    /// Gives each partition without a position its committed offset, or
    /// else the `auto.offset.reset` offset.
    async fn update_positions(&mut self) -> Result<()> {
        let unknown: Vec<TopicPartition> = self
            .assignment
            .iter()
            .filter(|(_, s)| s.position.is_none() && s.reset.is_none())
            .map(|(tp, _)| tp.clone())
            .collect();
        if !unknown.is_empty() {
            let committed = self.committed(&unknown).await?;
            for tp in unknown {
                let state = self.assignment.get_mut(&tp).expect("listed above");
                match committed.get(&tp) {
                    Some(&offset) => state.seek(offset),
                    None if self.config.auto_offset_reset == OffsetReset::None => {
                        return Err(Error::InvalidRequest(format!(
                            "no committed offset for {tp} and auto.offset.reset is none"
                        )))
                    }
                    None => state.reset = Some(self.config.auto_offset_reset),
                }
            }
        }
        let resets: Vec<(String, i32, OffsetSpec)> = self
            .assignment
            .iter()
            .filter(|(_, s)| s.position.is_none())
            .filter_map(|(tp, s)| {
                let spec = match s.reset? {
                    OffsetReset::Earliest => OffsetSpec::Earliest,
                    _ => OffsetSpec::Latest,
                };
                Some((tp.topic.clone(), tp.partition, spec))
            })
            .collect();
        if resets.is_empty() {
            return Ok(());
        }
        let listed = self.admin.list_offsets_at(&resets, self.config.isolation_level as i8).await?;
        for result in listed {
            let tp = TopicPartition::new(result.topic, result.partition);
            match (result.result, self.assignment.get_mut(&tp)) {
                (Ok(listed), Some(state)) if state.position.is_none() => state.seek(listed.offset),
                (Err(e), _) if e.kafka_code().is_some_and(KafkaCode::invalidates_metadata) => {
                    self.fetcher.stale_topics.insert(tp.topic);
                }
                (Err(e), _) => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    /// The group's committed offsets for `partitions` (those with one).
    pub async fn committed(&self, partitions: &[TopicPartition]) -> Result<BTreeMap<TopicPartition, i64>> {
        let Some(group) = self.config.group_id.as_deref() else { return Ok(BTreeMap::new()) };
        let wanted: Vec<(String, i32)> =
            partitions.iter().map(|tp| (tp.topic.clone(), tp.partition)).collect();
        let mut committed = BTreeMap::new();
        for result in self.admin.fetch_offsets(group, Some(&wanted)).await? {
            if let Some(offset) = result.result? {
                committed.insert(TopicPartition::new(result.topic, result.partition), offset);
            }
        }
        Ok(committed)
    }

    /// The positions of all assigned partitions, to commit.
    fn consumed_offsets(&self) -> Vec<(TopicPartition, i64)> {
        self.assignment.iter().filter_map(|(tp, s)| Some((tp.clone(), s.position?))).collect()
    }

    /// Commits `offsets` (the next offsets to read), or every assigned
    /// partition's position when `None`, and waits for the answer.
    pub async fn commit_sync(&mut self, offsets: Option<&[(TopicPartition, i64)]>) -> Result<()> {
        let offsets = offsets.map_or_else(|| self.consumed_offsets(), <[_]>::to_vec);
        for commit in self.pending_commits.drain(..) {
            let _ = commit.await;
        }
        match self.membership.as_mut() {
            Some(membership) => membership.commit(&offsets).await,
            None => group::commit_simple(&self.admin, &self.config, &offsets).await,
        }
    }

    /// Commits like `commit_sync` without waiting; the outcome is logged.
    pub fn commit_async(&mut self, offsets: Option<&[(TopicPartition, i64)]>) {
        let offsets = offsets.map_or_else(|| self.consumed_offsets(), <[_]>::to_vec);
        let member = self.membership.as_ref().map(Membership::member);
        let (admin, config) = (self.admin.clone(), self.config.clone());
        self.pending_commits.retain(|commit| !commit.is_finished());
        let previous = self.pending_commits.pop();
        self.pending_commits.push(tokio::spawn(async move {
            // One after the other, in the order they were made.
            if let Some(previous) = previous {
                let _ = previous.await;
            }
            let result = match member {
                Some(member) => group::commit_as(&admin, &config, &member, &offsets).await,
                None => group::commit_simple(&admin, &config, &offsets).await,
            };
            if let Err(e) = result {
                tracing::warn!("asynchronous offset commit failed: {e}");
            }
        }));
    }

    async fn maybe_auto_commit(&mut self) {
        if !self.config.auto_commit() || Instant::now() < self.next_auto_commit {
            return;
        }
        self.next_auto_commit = Instant::now() + self.config.auto_commit_interval;
        self.commit_async(None);
    }

    /// Commits (with auto-commit on) and leaves the group.
    pub async fn close(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        for commit in self.pending_commits.drain(..) {
            let _ = commit.await;
        }
        let committed = match self.config.auto_commit() && !self.assignment.is_empty() {
            true => self.commit_sync(None).await,
            false => Ok(()),
        };
        let owned = self.assignment();
        if let Some(membership) = self.membership.as_mut() {
            if !owned.is_empty() {
                self.listener.on_partitions_revoked(&owned);
            }
            membership.leave().await;
        }
        self.fetcher.clear();
        committed
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if let Some(membership) = self.membership.as_mut() {
            membership.stop_heartbeat();
        }
    }
}
