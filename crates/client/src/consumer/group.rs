//! Group membership under the classic protocol: JoinGroup, SyncGroup,
//! a heartbeat task, LeaveGroup, and commits as a member.
//!
//! The heartbeat task only *notices* that the group is rebalancing (or
//! that this member was fenced); the rejoin itself happens in the next
//! `poll`, so callbacks and commits run on the application's task. A
//! member that stops polling for `max.poll.interval.ms` leaves the group,
//! as in the Java client, so its partitions go to someone who polls.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, GroupId, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    SyncGroupRequest,
};
use kafka_protocol::protocol::StrBytes;
use tokio::task::JoinHandle;

use super::assignor::{self, Assignor, Member, RebalanceProtocol};
use super::config::ConsumerConfig;
use super::fetcher::{Assignment, PartitionState};
use super::protocol::{self, Subscription, TopicPartition};
use super::RebalanceListener;
use crate::admin::groups::GROUP_KEY;
use crate::admin::{str_bytes, Admin, GroupMember};
use crate::connection::Connection;
use crate::error::{Error, KafkaCode, Result};

/// Bounds the JoinGroup/SyncGroup round trips of one rebalance.
const MAX_JOIN_ATTEMPTS: u32 = 50;

// Kafka error codes the membership reacts to.
const ILLEGAL_GENERATION: i16 = 22;
const UNKNOWN_MEMBER_ID: i16 = 25;
const REBALANCE_IN_PROGRESS: i16 = 27;
const MEMBER_ID_REQUIRED: i16 = 79;
const FENCED_INSTANCE_ID: i16 = 82;

/// What the heartbeat task tells `poll`.
#[derive(Default)]
struct Signals {
    /// The group is rebalancing: rejoin at the next poll.
    rejoin: AtomicBool,
    /// Our generation is gone: partitions are lost, not revoked.
    lost: AtomicBool,
    last_poll: Mutex<Option<Instant>>,
}

pub struct Membership {
    admin: Admin,
    config: Arc<ConsumerConfig>,
    group_id: String,
    topics: BTreeSet<String>,
    assignors: Vec<Box<dyn Assignor>>,
    member: GroupMember,
    joined: bool,
    signals: Arc<Signals>,
    heartbeat: Option<JoinHandle<()>>,
    /// As leader: the partition counts the assignment was made from. A
    /// change (partitions added) calls for a new assignment.
    leader_snapshot: Option<BTreeMap<String, i32>>,
    next_metadata_check: Instant,
}

impl Membership {
    pub fn new(
        admin: Admin,
        config: Arc<ConsumerConfig>,
        group_id: String,
        topics: BTreeSet<String>,
    ) -> Result<Self> {
        let assignors = config
            .assignment_strategies
            .iter()
            .map(|name| {
                assignor::by_name(name).ok_or_else(|| {
                    Error::Config(format!("partition.assignment.strategy: unknown assignor {name}"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let member = GroupMember {
            generation: -1,
            member_id: String::new(),
            instance_id: config.group_instance_id.clone(),
        };
        Ok(Self {
            admin,
            config,
            group_id,
            topics,
            assignors,
            member,
            joined: false,
            signals: Arc::default(),
            heartbeat: None,
            leader_snapshot: None,
            next_metadata_check: Instant::now(),
        })
    }

    pub fn member(&self) -> GroupMember {
        self.member.clone()
    }

    pub fn resubscribe(&mut self, topics: BTreeSet<String>) {
        if topics != self.topics {
            self.topics = topics;
            self.signals.rejoin.store(true, Ordering::Relaxed);
        }
    }

    pub fn record_poll(&self) {
        *self.signals.last_poll.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    pub fn needs_join(&self) -> bool {
        !self.joined || self.signals.rejoin.load(Ordering::Relaxed) || self.heartbeat_stopped()
    }

    fn heartbeat_stopped(&self) -> bool {
        self.heartbeat.as_ref().is_some_and(JoinHandle::is_finished)
    }

    /// Cooperative only when every configured assignor supports it, as in Java.
    fn protocol(&self) -> RebalanceProtocol {
        match self.assignors.iter().all(|a| a.protocol() == RebalanceProtocol::Cooperative) {
            true => RebalanceProtocol::Cooperative,
            false => RebalanceProtocol::Eager,
        }
    }

    /// Runs one rebalance to completion: gives up what the protocol says
    /// to, joins, syncs, and takes the new assignment.
    pub async fn rebalance(
        &mut self,
        assignment: &mut Assignment,
        listener: &mut dyn RebalanceListener,
        auto_commit: bool,
    ) -> Result<()> {
        self.stop_heartbeat();
        let owned: Vec<TopicPartition> = assignment.keys().cloned().collect();
        if self.signals.lost.swap(false, Ordering::Relaxed) && !owned.is_empty() {
            listener.on_partitions_lost(&owned);
            assignment.clear();
        } else if self.protocol() == RebalanceProtocol::Eager && !owned.is_empty() {
            self.give_up(&owned, assignment, listener, auto_commit).await;
        }
        self.signals.rejoin.store(false, Ordering::Relaxed);
        let owned: Vec<TopicPartition> = assignment.keys().cloned().collect();
        let assigned = match self.join_and_sync(&owned).await {
            Ok(assigned) => assigned,
            Err(e) => {
                // Not in the group: the next poll tries again.
                self.joined = false;
                return Err(e);
            }
        };
        self.joined = true;
        self.signals.lost.store(false, Ordering::Relaxed);

        let assigned_set: BTreeSet<&TopicPartition> = assigned.iter().collect();
        let revoked: Vec<TopicPartition> =
            owned.iter().filter(|tp| !assigned_set.contains(tp)).cloned().collect();
        if !revoked.is_empty() {
            // Cooperative: give these up, then rejoin so they can move.
            self.give_up(&revoked, assignment, listener, auto_commit).await;
            self.signals.rejoin.store(true, Ordering::Relaxed);
        }
        let added: Vec<TopicPartition> =
            assigned.into_iter().filter(|tp| !assignment.contains_key(tp)).collect();
        for tp in &added {
            assignment.insert(tp.clone(), PartitionState::new());
        }
        listener.on_partitions_assigned(&added);
        self.start_heartbeat();
        Ok(())
    }

    /// Commits (with auto-commit), tells the listener, and drops `partitions`.
    async fn give_up(
        &mut self,
        partitions: &[TopicPartition],
        assignment: &mut Assignment,
        listener: &mut dyn RebalanceListener,
        auto_commit: bool,
    ) {
        if auto_commit {
            let offsets: Vec<(TopicPartition, i64)> = partitions
                .iter()
                .filter_map(|tp| Some((tp.clone(), assignment.get(tp)?.position?)))
                .collect();
            if let Err(e) = self.commit(&offsets).await {
                tracing::warn!(group = %self.group_id, "commit before revoking partitions failed: {e}");
            }
        }
        listener.on_partitions_revoked(partitions);
        for tp in partitions {
            assignment.remove(tp);
        }
    }

    async fn join_and_sync(&mut self, owned: &[TopicPartition]) -> Result<Vec<TopicPartition>> {
        for attempt in 1..=MAX_JOIN_ATTEMPTS {
            let outcome = match self.join(owned).await {
                Ok(joined) => self.sync(joined).await,
                Err(e) => Err(e),
            };
            let error = match outcome {
                Ok(assigned) => return Ok(assigned),
                Err(error) => error,
            };
            match error.kafka_code().map(KafkaCode::code) {
                Some(MEMBER_ID_REQUIRED) => continue,
                Some(UNKNOWN_MEMBER_ID) => self.member.member_id.clear(),
                Some(ILLEGAL_GENERATION | REBALANCE_IN_PROGRESS) => {}
                Some(FENCED_INSTANCE_ID) => return Err(error),
                _ if error.is_retriable() => {}
                _ => return Err(error),
            }
            tracing::debug!(group = %self.group_id, "rejoining after: {error}");
            tokio::time::sleep(self.config.client.backoff(attempt)).await;
        }
        Err(Error::InvalidRequest(format!(
            "group {}: no stable generation after {MAX_JOIN_ATTEMPTS} joins",
            self.group_id
        )))
    }

    fn subscription(&self, assignor: &dyn Assignor, owned: &[TopicPartition]) -> Subscription {
        Subscription {
            topics: self.topics.iter().cloned().collect(),
            user_data: assignor.subscription_user_data(owned, self.member.generation),
            owned_partitions: owned.to_vec(),
            generation_id: self.member.generation,
            rack_id: None,
        }
    }

    async fn coordinator(&self) -> Result<Arc<Connection>> {
        let cluster = self.admin.cluster();
        cluster.with_retries("FindCoordinator", || cluster.coordinator(GROUP_KEY, &self.group_id)).await
    }

    async fn join(&mut self, owned: &[TopicPartition]) -> Result<JoinGroupResponse> {
        let protocols = self
            .assignors
            .iter()
            .map(|a| {
                Ok(JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_static_str(a.name()))
                    .with_metadata(self.subscription(a.as_ref(), owned).encode()?))
            })
            .collect::<Result<_>>()?;
        let rebalance_timeout = millis(self.config.max_poll_interval);
        let request = JoinGroupRequest::default()
            .with_group_id(GroupId(str_bytes(&self.group_id)))
            .with_session_timeout_ms(millis(self.config.session_timeout))
            .with_rebalance_timeout_ms(rebalance_timeout)
            .with_member_id(str_bytes(&self.member.member_id))
            .with_group_instance_id(self.member.instance_id.as_deref().map(str_bytes))
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(protocols);
        let connection = self.coordinator().await?;
        let version = connection.version(ApiKey::JoinGroup)?;
        // The coordinator holds JoinGroup until every member has joined.
        let timeout = self.config.max_poll_interval + Duration::from_secs(5);
        let response = connection.start(&request, version).await?.with_timeout(timeout).wait().await?;
        if response.error_code == MEMBER_ID_REQUIRED {
            self.member.member_id = response.member_id.to_string();
        }
        if let Some(error) = Error::from_code(response.error_code, None) {
            return Err(error);
        }
        self.member.member_id = response.member_id.to_string();
        self.member.generation = response.generation_id;
        Ok(response)
    }

    async fn sync(&mut self, joined: JoinGroupResponse) -> Result<Vec<TopicPartition>> {
        let protocol_name = joined.protocol_name.clone().unwrap_or_default();
        self.leader_snapshot = None;
        let assignments = if joined.leader == joined.member_id && !joined.skip_assignment {
            self.assign(&joined, protocol_name.as_str()).await?
        } else {
            Vec::new()
        };
        let request = SyncGroupRequest::default()
            .with_group_id(GroupId(str_bytes(&self.group_id)))
            .with_generation_id(self.member.generation)
            .with_member_id(str_bytes(&self.member.member_id))
            .with_group_instance_id(self.member.instance_id.as_deref().map(str_bytes))
            .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
            .with_protocol_name(Some(protocol_name))
            .with_assignments(assignments);
        let connection = self.coordinator().await?;
        let version = connection.version(ApiKey::SyncGroup)?;
        let timeout = self.config.max_poll_interval + Duration::from_secs(5);
        let response = connection.start(&request, version).await?.with_timeout(timeout).wait().await?;
        if let Some(error) = Error::from_code(response.error_code, None) {
            return Err(error);
        }
        let assignment = protocol::Assignment::decode(&response.assignment)?;
        let subscribed: Vec<TopicPartition> =
            assignment.partitions.into_iter().filter(|tp| self.topics.contains(&tp.topic)).collect();
        tracing::info!(
            group = %self.group_id, generation = self.member.generation, member = %self.member.member_id,
            "assigned {} partitions", subscribed.len()
        );
        Ok(subscribed)
    }

    /// As leader: every member's assignment under the chosen assignor.
    async fn assign(
        &mut self,
        joined: &JoinGroupResponse,
        protocol_name: &str,
    ) -> Result<Vec<SyncGroupRequestAssignment>> {
        let assignor = self.assignors.iter().find(|a| a.name() == protocol_name).ok_or_else(|| {
            Error::InvalidRequest(format!("the group chose assignor {protocol_name}, which we lack"))
        })?;
        let mut members = Vec::with_capacity(joined.members.len());
        for member in &joined.members {
            members.push(Member::decode(
                member.member_id.to_string(),
                member.group_instance_id.as_ref().map(ToString::to_string),
                &member.metadata,
            )?);
        }
        let topics: Vec<String> = members
            .iter()
            .flat_map(|m| m.subscription.topics.iter().cloned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let partitions_per_topic = self.partition_counts(&topics).await?;
        let plan = assignor.assign(&partitions_per_topic, &members);
        self.leader_snapshot = Some(partitions_per_topic);
        self.next_metadata_check = Instant::now() + self.config.client.metadata_max_age;
        members
            .iter()
            .map(|m| {
                let assignment = plan.get(&m.member_id).cloned().unwrap_or_default();
                Ok(SyncGroupRequestAssignment::default()
                    .with_member_id(str_bytes(&m.member_id))
                    .with_assignment(assignment.encode()?))
            })
            .collect()
    }

    /// The partition count of each of `topics` that exists.
    async fn partition_counts(&self, topics: &[String]) -> Result<BTreeMap<String, i32>> {
        let metadata = self.admin.cluster().refresh(Some(topics), false).await?;
        Ok(topics
            .iter()
            .filter_map(|t| {
                let info = metadata.topic(t).filter(|i| i.error.is_none() && !i.partitions.is_empty())?;
                Some((t.clone(), info.partitions.len() as i32))
            })
            .collect())
    }

    /// As leader, every `metadata.max.age.ms`: asks for a rebalance when a
    /// subscribed topic's partition count changed since the assignment.
    pub async fn check_partition_counts(&mut self) {
        let Some(snapshot) = &self.leader_snapshot else { return };
        if Instant::now() < self.next_metadata_check {
            return;
        }
        self.next_metadata_check = Instant::now() + self.config.client.metadata_max_age;
        let topics: Vec<String> =
            snapshot.keys().chain(&self.topics).cloned().collect::<BTreeSet<_>>().into_iter().collect();
        match self.partition_counts(&topics).await {
            Ok(counts) if Some(&counts) != self.leader_snapshot.as_ref() => {
                tracing::info!(group = %self.group_id, "partition counts changed; rebalancing");
                self.signals.rejoin.store(true, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(group = %self.group_id, "metadata refresh failed: {e}"),
        }
    }

    fn start_heartbeat(&mut self) {
        let task = heartbeat_loop(
            self.admin.clone(),
            self.config.clone(),
            self.group_id.clone(),
            self.member.clone(),
            self.signals.clone(),
        );
        self.heartbeat = Some(tokio::spawn(task));
    }

    pub fn stop_heartbeat(&mut self) {
        if let Some(task) = self.heartbeat.take() {
            task.abort();
        }
    }

    /// Commits as this member; a commit from a stale generation fails
    /// and schedules a rejoin.
    pub async fn commit(&mut self, offsets: &[(TopicPartition, i64)]) -> Result<()> {
        let result = commit_as(&self.admin, &self.config, &self.member, offsets).await;
        if let Err(e) = &result {
            if matches!(e.kafka_code().map(KafkaCode::code), Some(ILLEGAL_GENERATION | UNKNOWN_MEMBER_ID)) {
                self.signals.lost.store(true, Ordering::Relaxed);
                self.signals.rejoin.store(true, Ordering::Relaxed);
            } else if e.kafka_code().is_some_and(|c| c.code() == REBALANCE_IN_PROGRESS) {
                self.signals.rejoin.store(true, Ordering::Relaxed);
            }
        }
        result
    }

    /// Leaves the group so its partitions move at once. Static members
    /// stay, as in Java: their session timeout decides.
    pub async fn leave(&mut self) {
        self.stop_heartbeat();
        if !self.joined || self.member.instance_id.is_some() || self.member.member_id.is_empty() {
            return;
        }
        self.joined = false;
        leave_quietly(&self.admin, &self.group_id, &self.member).await;
        self.member.generation = -1;
        self.member.member_id.clear();
    }
}

fn millis(duration: Duration) -> i32 {
    duration.as_millis().min(i32::MAX as u128) as i32
}

/// Commits `offsets` as `member`; any partition's error fails the commit.
pub async fn commit_as(
    admin: &Admin,
    config: &ConsumerConfig,
    member: &GroupMember,
    offsets: &[(TopicPartition, i64)],
) -> Result<()> {
    let Some(group) = config.group_id.as_deref() else {
        return Err(Error::Config("committing offsets needs group.id".into()));
    };
    if offsets.is_empty() {
        return Ok(());
    }
    let offsets: Vec<(String, i32, i64)> =
        offsets.iter().map(|(tp, o)| (tp.topic.clone(), tp.partition, *o)).collect();
    for result in admin.commit_offsets_as(group, member, &offsets).await? {
        result.result.map_err(|e| match e {
            Error::Kafka { code, .. } => Error::Kafka {
                code,
                message: Some(format!("committing {}-{}", result.topic, result.partition)),
            },
            other => other,
        })?;
    }
    Ok(())
}

/// A commit outside group management (after `assign`), as Java's
/// consumer does it: no generation, no member id.
pub async fn commit_simple(
    admin: &Admin,
    config: &ConsumerConfig,
    offsets: &[(TopicPartition, i64)],
) -> Result<()> {
    commit_as(admin, config, &GroupMember::admin(), offsets).await
}

async fn heartbeat_loop(
    admin: Admin,
    config: Arc<ConsumerConfig>,
    group_id: String,
    member: GroupMember,
    signals: Arc<Signals>,
) {
    let request = HeartbeatRequest::default()
        .with_group_id(GroupId(str_bytes(&group_id)))
        .with_generation_id(member.generation)
        .with_member_id(str_bytes(&member.member_id))
        .with_group_instance_id(member.instance_id.as_deref().map(str_bytes));
    let mut coordinator: Option<Arc<Connection>> = None;
    loop {
        tokio::time::sleep(config.heartbeat_interval).await;
        let idle = signals.last_poll.lock().unwrap_or_else(|e| e.into_inner()).map(|t| t.elapsed());
        if idle.is_some_and(|idle| idle > config.max_poll_interval) {
            tracing::warn!(
                group = %group_id,
                "no poll for longer than max.poll.interval.ms; leaving the group so others take over"
            );
            // A static member stays: its session timeout decides, as in Java.
            if member.instance_id.is_none() {
                leave_quietly(&admin, &group_id, &member).await;
            }
            signals.lost.store(true, Ordering::Relaxed);
            signals.rejoin.store(true, Ordering::Relaxed);
            return;
        }
        let connection = match coordinator.clone().filter(|c| !c.is_closed()) {
            Some(connection) => connection,
            None => match admin.cluster().coordinator(GROUP_KEY, &group_id).await {
                Ok(connection) => {
                    coordinator = Some(connection.clone());
                    connection
                }
                Err(e) => {
                    tracing::debug!(group = %group_id, "heartbeat: no coordinator: {e}");
                    continue;
                }
            },
        };
        let code = match connection.send(&request).await {
            Ok(response) => response.error_code,
            Err(e) => {
                tracing::debug!(group = %group_id, "heartbeat failed: {e}");
                coordinator = None;
                continue;
            }
        };
        match code {
            0 => {}
            REBALANCE_IN_PROGRESS => signals.rejoin.store(true, Ordering::Relaxed),
            ILLEGAL_GENERATION | UNKNOWN_MEMBER_ID | FENCED_INSTANCE_ID => {
                signals.lost.store(true, Ordering::Relaxed);
                signals.rejoin.store(true, Ordering::Relaxed);
                return;
            }
            other => {
                tracing::debug!(group = %group_id, "heartbeat error code {other}; finding the coordinator again");
                coordinator = None;
            }
        }
    }
}

/// Sends LeaveGroup; failures are only logged (the session timeout
/// removes the member anyway).
async fn leave_quietly(admin: &Admin, group_id: &str, member: &GroupMember) {
    let left = async {
        let connection = admin.cluster().coordinator(GROUP_KEY, group_id).await?;
        let version = connection.version(ApiKey::LeaveGroup)?;
        let mut request = LeaveGroupRequest::default().with_group_id(GroupId(str_bytes(group_id)));
        if version >= 3 {
            request.members = vec![MemberIdentity::default()
                .with_member_id(str_bytes(&member.member_id))
                .with_group_instance_id(member.instance_id.as_deref().map(str_bytes))];
        } else {
            request.member_id = str_bytes(&member.member_id);
        }
        connection.send_at(&request, version).await
    };
    match left.await {
        Ok(response) if response.error_code == 0 => {}
        Ok(response) => {
            tracing::debug!(group = %group_id, "LeaveGroup answered error code {}", response.error_code)
        }
        Err(e) => tracing::debug!(group = %group_id, "LeaveGroup failed: {e}"),
    }
}
