//! Fetch: read batches up to the high watermark, long-polling for
//! `min_bytes` up to `max_wait_ms`, within incremental fetch sessions.
//!
//! The wait is a delayed operation: the fetch registers one `Notify` with
//! every partition it reads *before* reading, so an append that lands between
//! the read and the wait still wakes it; no timer polls the log.
//!
//! Topics and partitions the broker does not host are answered here with
//! their error and never reach the session cache. A response carries at most
//! `fetch.max.bytes` of records (beyond one first batch), whatever the
//! request's `max_bytes`.
//!
//! Consumers may read from followers (KIP-392, Fetch v11+), up to the high
//! watermark the follower has from its leader; with a
//! `replica.selector.class` the leader sends a consumer to an in-sync
//! replica in its `client.rack` (`preferred_read_replica`, no records).
//! Followers' fetches of throttled partitions are held back while the
//! leader's replication rate is over its bound (KIP-73).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_response::{
    EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse};
use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

use super::{str_bytes, topic_name, LeaderHints};
use crate::config::ReplicaSelector;
use crate::dispatch::{Answer, EncodeBody, Reply, RequestContext, Splice};
use crate::error::storage_error;
use crate::fetch_session::{
    FetchPlan, FetchRequestParts, FetchTarget, PartitionKey, PartitionNews, Reported, TopicKey,
};
use crate::metrics::{GaugeGuard, Metrics};
use crate::quota::{QuotaManager, QuotaType};
use crate::replica::{Isolation, Partition, ReplicaManager, TopicPartitions};
use crate::replication::fetcher::divergence;
use crate::replication::Replication;
use crate::response_errors::ResponseErrors;
use kafka_protocol::messages::fetch_response::AbortedTransaction;
use kafka_protocol::messages::ProducerId;
use strom_storage::segment::FileSlice;
use strom_storage::txn_index::AbortedTxn;

/// Longest wait honoured, whatever the client asks.
const MAX_WAIT_CAP: Duration = Duration::from_secs(30);
const READ_COMMITTED: i8 = 1;

/// One partition's part of the response.
struct Outcome {
    error: Option<ResponseError>,
    high_watermark: i64,
    last_stable_offset: i64,
    log_start_offset: i64,
    records: Option<FileSlice>,
    aborted: Vec<AbortedTxn>,
    /// Where the fetcher's log diverged from this one, as (epoch, end offset).
    diverging: Option<(i32, i64)>,
    /// KIP-392: the replica the consumer should fetch this partition from.
    preferred_read_replica: Option<i32>,
}

impl Outcome {
    fn bytes(&self) -> usize {
        self.records.as_ref().map_or(0, |r| r.len)
    }

    /// A partition the broker does not host.
    fn failed(error: ResponseError) -> Self {
        Self {
            error: Some(error),
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            records: None,
            aborted: Vec::new(),
            diverging: None,
            preferred_read_replica: None,
        }
    }

    /// A partition answered with its offsets and no records.
    fn without_records(partition: &Partition) -> Self {
        Self {
            error: None,
            high_watermark: partition.high_watermark(),
            last_stable_offset: partition.last_stable_offset(),
            log_start_offset: partition.log_start_offset(),
            records: None,
            aborted: Vec::new(),
            diverging: None,
            preferred_read_replica: None,
        }
    }

    /// Whether the fetch must be answered at once, without waiting for data.
    fn is_final(&self) -> bool {
        self.error.is_some() || self.diverging.is_some() || self.preferred_read_replica.is_some()
    }

    fn reported(&self) -> Reported {
        let news = PartitionNews {
            high_watermark: self.high_watermark,
            log_start_offset: self.log_start_offset,
            last_stable_offset: self.last_stable_offset,
        };
        Reported { news, records: self.bytes() > 0, error: self.is_final() }
    }
}

/// A fetch response whose records stay in the segment files until written.
pub struct FetchReply {
    pub(crate) response: FetchResponse,
    splices: Vec<Splice>,
}

impl EncodeBody for FetchReply {
    fn encode_body(&self, buf: &mut bytes::BytesMut, version: i16) -> Result<(), String> {
        self.response.encode_body(buf, version)
    }

    fn body_size(&self, version: i16) -> usize {
        self.response.body_size(version)
    }

    fn splices(&self) -> &[Splice] {
        &self.splices
    }

    fn raise_throttle_time_ms(&mut self, ms: i32) {
        self.response.throttle_time_ms = self.response.throttle_time_ms.max(ms);
    }
}

impl Reply for FetchReply {
    fn into_reply(self) -> Answer {
        Answer { body: Box::new(self), send: true, close: false }
    }
}

impl ResponseErrors for FetchReply {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn std::fmt::Display, i16)) {
        self.response.visit_errors(visit);
    }
}

pub async fn handle(ctx: &RequestContext<'_>, request: FetchRequest) -> FetchReply {
    // Followers are not clients: replication has no client quota.
    let follower = follower_of(&request);
    let from_follower = follower.is_some();
    if from_follower {
        ctx.throttle.exempt_from_request_quota();
    }
    if ctx.quorum().is_some() && super::raft::is_metadata_fetch(&request, ctx.api_version) {
        let response = super::raft::fetch(ctx, request).await;
        return FetchReply { response, splices: Vec::new() };
    }
    let replicas = ctx.replicas();
    let by_id = ctx.api_version >= 13;
    // Kafka's `fetchOnlyLeader`: consumers with client metadata (v11+) may
    // read from followers.
    let follower_reads = !from_follower && ctx.api_version >= FIRST_CLIENT_RACK_VERSION;
    let readable = read_authorization(ctx, &request);
    let (hosted, rejected) = requested_targets(replicas, &request, by_id, follower_reads, &readable);
    let forgotten = forgotten_partitions(&request, by_id);
    let parts = FetchRequestParts {
        session_id: request.session_id,
        epoch: request.session_epoch,
        uses_topic_ids: by_id,
        requested: hosted,
        forgotten: &forgotten,
    };
    let plan = match ctx.fetch_sessions().begin(parts) {
        Ok(plan) => plan,
        // Kafka answers session errors without a session.
        Err(error) => return session_error(error, 0),
    };
    let partitions = hosted_partitions(replicas, &plan.targets);
    let max_wait = Duration::from_millis(request.max_wait_ms.max(0) as u64).min(MAX_WAIT_CAP);
    // read_committed exists from v4 on.
    let read_committed = ctx.api_version >= 4 && request.isolation_level == READ_COMMITTED;
    let isolation = match (follower, read_committed) {
        (Some(_), _) => Isolation::LogEnd,
        (None, true) => Isolation::ReadCommitted,
        (None, false) => Isolation::ReadUncommitted,
    };
    if let Some((replica_id, broker_epoch)) = follower {
        record_follower_progress(ctx.replication(), &plan, &partitions, replica_id, broker_epoch);
    }
    let missing = if by_id { ResponseError::UnknownTopicId } else { ResponseError::UnknownTopicOrPartition };
    let fetch_max_bytes = match from_follower {
        true => ctx.config().fetch_max_bytes,
        false => consumer_max_bytes(ctx),
    };
    let limits = Limits::new(&request, fetch_max_bytes, isolation, missing, follower_reads);
    let routing = match (follower, follower_reads) {
        (Some((replica_id, _)), _) => Routing::for_follower(ctx, &plan, &partitions, replica_id),
        (None, true) => Routing::for_consumer(ctx, &plan, &partitions, &request.rack_id),
        (None, false) => Routing::default(),
    };
    let outcomes = read_with_wait(ctx, &plan, &partitions, limits, &routing, max_wait).await;
    if from_follower {
        routing.record_leader_throttled(ctx, &outcomes);
    } else {
        if let Some(reply) = throttled_reply(ctx, &plan, &outcomes) {
            return reply;
        }
    }
    count_reads(ctx.metrics(), &plan, &partitions, &outcomes, from_follower);
    let reported: Vec<Reported> = outcomes.iter().map(Outcome::reported).collect();
    let included = match ctx.fetch_sessions().finish(&plan, &reported) {
        Ok(included) => included,
        Err(error) => return session_error(error, plan.session_id),
    };
    let answered = plan
        .targets
        .iter()
        .zip(outcomes)
        .zip(included)
        .filter_map(|(answer, include)| include.then_some(answer));
    let refused = refused_once(&rejected, &plan);
    let (mut responses, splices) = build_responses(answered.chain(refused), read_committed);
    downgrade_for_version(&mut responses, ctx.api_version);
    let mut response = FetchResponse::default().with_session_id(plan.session_id).with_responses(responses);
    if ctx.api_version >= FIRST_LEADER_HINT_VERSION {
        add_leader_hints(ctx, &mut response);
    }
    FetchReply { response, splices }
}

/// A consumer's `fetch.max.bytes`, capped at what its byte-rate quota lets
/// it take at once: a larger response would always be throttled and so,
/// answered empty, never reach it (Kafka caps it the same way).
fn consumer_max_bytes(ctx: &RequestContext<'_>) -> i32 {
    let config_max = ctx.config().fetch_max_bytes;
    match crate::quota::max_value_in_window(ctx, QuotaType::Fetch) {
        Some(window_bytes) => config_max.min(window_bytes.min(i32::MAX as f64) as i32),
        None => config_max,
    }
}

/// KIP-219 for consumers: the records a fetch read count against the
/// client's `consumer_byte_rate`, and a fetch that takes the client over
/// it (or comes from a client over its `request_percentage`) is answered with `throttle_time_ms` and no partitions (the channel
/// is then muted by dispatch). Its bytes are taken back, as they were not
/// sent, and its session is left as Kafka's `getThrottledResponse` leaves
/// it. `None`: the client is within its quota.
fn throttled_reply(ctx: &RequestContext<'_>, plan: &FetchPlan, outcomes: &[Outcome]) -> Option<FetchReply> {
    let bytes = outcomes.iter().map(Outcome::bytes).sum::<usize>() as f64;
    let bandwidth_ms = crate::quota::record_request(ctx, QuotaType::Fetch, bytes);
    // Over `request_percentage` counts too, as in Kafka; this fetch's own
    // time is recorded by dispatch once the handler returns.
    let request_ms = crate::quota::request_time_throttle(ctx).min(i32::MAX as u64) as i32;
    let throttle_time_ms = bandwidth_ms.max(request_ms);
    if throttle_time_ms == 0 {
        return None;
    }
    crate::quota::unrecord_request(ctx, QuotaType::Fetch, bytes);
    let (error, session_id) = ctx.fetch_sessions().throttled(plan);
    let response = FetchResponse::default()
        .with_throttle_time_ms(throttle_time_ms)
        .with_error_code(error.map_or(0, |e| e.code()))
        .with_session_id(session_id);
    Some(FetchReply { response, splices: Vec::new() })
}

/// The replica id and broker epoch of a fetching follower: from
/// `replica_state` (v15+) or the older `replica_id`; `None` for a consumer.
fn follower_of(request: &FetchRequest) -> Option<(i32, i64)> {
    let state = &request.replica_state;
    match (state.replica_id.0, request.replica_id.0) {
        (id, _) if id >= 0 => Some((id, state.replica_epoch)),
        (_, id) if id >= 0 => Some((id, -1)),
        _ => None,
    }
}

/// The leader's side of a follower's fetch: each partition led here
/// records how far the follower holds its log (moving the high watermark),
/// and an ISR the follower caught up into goes to the controller.
fn record_follower_progress(
    replication: &Replication,
    plan: &FetchPlan,
    partitions: &[Option<Arc<Partition>>],
    replica_id: i32,
    broker_epoch: i64,
) {
    for (target, partition) in plan.targets.iter().zip(partitions) {
        let Some(partition) = partition.as_ref().filter(|p| p.is_leader()) else { continue };
        // A diverged follower's offset says nothing of what it holds.
        if diverging_epoch(partition, target).is_some() {
            continue;
        }
        if partition.record_follower_fetch(replica_id, broker_epoch, target.fetch_offset).is_some() {
            replication.isr_change_proposed();
        }
    }
}

/// Fetch v16 is the first to carry KIP-951's leader hints.
const FIRST_LEADER_HINT_VERSION: i16 = 16;
/// Fetch v11 is the first to carry the consumer's `rack_id` (KIP-392).
const FIRST_CLIENT_RACK_VERSION: i16 = 11;

/// Names the leader of each partition refused with NOT_LEADER_OR_FOLLOWER,
/// so the consumer moves there without a metadata round trip (KIP-951).
fn add_leader_hints(ctx: &RequestContext<'_>, response: &mut FetchResponse) {
    let not_leader = ResponseError::NotLeaderOrFollower.code();
    let mut hints = LeaderHints::new(ctx);
    for topic in &mut response.responses {
        let name = match topic.topic.0.is_empty() {
            true => hints.topic_name(&topic.topic_id).unwrap_or_default(),
            false => topic.topic.0.to_string(),
        };
        for partition in topic.partitions.iter_mut().filter(|p| p.error_code == not_leader) {
            let hint = hints.hint(&name, partition.partition_index);
            partition.current_leader = LeaderIdAndEpoch::default()
                .with_leader_id(BrokerId(hint.leader_id))
                .with_leader_epoch(hint.leader_epoch);
        }
    }
    response.node_endpoints = hints
        .endpoints()
        .into_iter()
        .map(|(id, endpoint, rack)| {
            NodeEndpoint::default()
                .with_node_id(BrokerId(id))
                .with_host(str_bytes(&endpoint.host))
                .with_port(i32::from(endpoint.port))
                .with_rack(rack.as_deref().map(str_bytes))
        })
        .collect();
}

/// The refused partitions to answer: each once, and none the plan reads
/// already (a session may hold a partition of a topic deleted since, which
/// it answers itself), so no partition appears twice in the response.
fn refused_once<'a>(
    rejected: &'a [(FetchTarget, ResponseError)],
    plan: &FetchPlan,
) -> impl Iterator<Item = (&'a FetchTarget, Outcome)> {
    let mut answered: HashSet<PartitionKey> = match rejected.is_empty() {
        true => HashSet::new(),
        false => plan.targets.iter().map(FetchTarget::key).collect(),
    };
    rejected
        .iter()
        .filter(move |(target, _)| answered.insert(target.key()))
        .map(|(target, error)| (target, Outcome::failed(*error)))
}

/// What older versions report differently.
fn downgrade_for_version(responses: &mut [FetchableTopicResponse], version: i16) {
    let storage_error = ResponseError::KafkaStorageError.code();
    for p in responses.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
        if version < 5 {
            // The log start offset is reported from v5 on.
            p.log_start_offset = -1;
        }
        if version <= 5 && p.error_code == storage_error {
            // As Kafka does for clients that may not know KAFKA_STORAGE_ERROR.
            p.error_code = ResponseError::NotLeaderOrFollower.code();
        }
    }
}

fn session_error(error: ResponseError, session_id: i32) -> FetchReply {
    let response = FetchResponse::default().with_error_code(error.code()).with_session_id(session_id);
    FetchReply { response, splices: Vec::new() }
}

/// Which topics the request may read: a follower (a replica id set) needs
/// CLUSTER_ACTION on the cluster, a consumer READ on each topic.
fn read_authorization<'a>(ctx: &'a RequestContext<'_>, request: &FetchRequest) -> impl Fn(&str) -> bool + 'a {
    use strom_metadata::acl::{operation, resource};
    let follower = request.replica_id.0 >= 0 || request.replica_state.replica_id.0 >= 0;
    let cluster_action = follower && ctx.authorize_cluster(operation::CLUSTER_ACTION);
    move |topic| match follower {
        true => cluster_action,
        false => ctx.authorize(operation::READ, resource::TOPIC, topic),
    }
}

/// A request's topic, found among the hosted ones by id (v13+) or name.
fn hosted_topic(
    replicas: &ReplicaManager,
    by_id: bool,
    id: Uuid,
    name: &str,
) -> Option<Arc<TopicPartitions>> {
    if by_id {
        replicas.topic_by_id(&id)
    } else {
        replicas.topic(name)
    }
}

/// The requested partitions the broker hosts, and the others with the error
/// that answers them. Only hosted ones may enter a session, so what a client
/// names cannot make a session grow beyond the partitions that exist. A
/// fetch by name leaves the topic id nil: the session keys it by name.
fn requested_targets(
    replicas: &ReplicaManager,
    request: &FetchRequest,
    by_id: bool,
    follower_reads: bool,
    readable: &dyn Fn(&str) -> bool,
) -> (Vec<FetchTarget>, Vec<(FetchTarget, ResponseError)>) {
    let (mut hosted, mut rejected) = (Vec::new(), Vec::new());
    for topic in &request.topics {
        let found = hosted_topic(replicas, by_id, topic.topic_id, &topic.topic.0);
        let denied = match &found {
            Some(t) => !readable(&t.name),
            None => !by_id && !readable(&topic.topic.0),
        };
        let id = if by_id { topic.topic_id } else { Uuid::nil() };
        let name: Arc<str> = match &found {
            Some(t) => t.name.as_str().into(),
            None => topic.topic.0.as_str().into(),
        };
        for p in &topic.partitions {
            let target = FetchTarget {
                topic_id: id,
                topic: name.clone(),
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                partition_max_bytes: p.partition_max_bytes,
                last_fetched_epoch: p.last_fetched_epoch,
            };
            match &found {
                _ if denied => rejected.push((target, ResponseError::TopicAuthorizationFailed)),
                Some(t) => match readable_partition(replicas, &t.name, p.partition, follower_reads) {
                    // A stale or future leader epoch is answered, not read (KIP-320).
                    Ok(partition) => match partition.check_current_leader_epoch(p.current_leader_epoch) {
                        Ok(()) => hosted.push(target),
                        Err(error) => rejected.push((target, error)),
                    },
                    Err(error) => rejected.push((target, error)),
                },
                None if by_id => rejected.push((target, ResponseError::UnknownTopicId)),
                None => rejected.push((target, ResponseError::UnknownTopicOrPartition)),
            }
        }
    }
    (hosted, rejected)
}

/// The partition a fetch may read: one led here or, when `follower_reads`,
/// one followed here from a live leader; else Kafka's error for it.
fn readable_partition(
    replicas: &ReplicaManager,
    topic: &str,
    partition: i32,
    follower_reads: bool,
) -> Result<Arc<Partition>, ResponseError> {
    let followed = follower_reads.then(|| replicas.partition(topic, partition)).flatten();
    match followed {
        Some(p) if serves_consumers_as_follower(&p) => Ok(p),
        _ => replicas.leader_partition(topic, partition),
    }
}

/// A follower serves consumers while it follows a leader; a replica with
/// no leader (offline) or one being deleted answers NOT_LEADER_OR_FOLLOWER.
fn serves_consumers_as_follower(partition: &Partition) -> bool {
    !partition.is_leader() && !partition.is_deleted() && partition.replica_set().leader >= 0
}

/// The partitions a request forgets, keyed as its session keys them. Hosted
/// or not: a session may hold partitions of a topic deleted since, and
/// forgetting is how a client lets go of them.
fn forgotten_partitions(request: &FetchRequest, by_id: bool) -> Vec<PartitionKey> {
    let mut forgotten = Vec::new();
    for topic in &request.forgotten_topics_data {
        let key = match by_id {
            true => TopicKey::Id(topic.topic_id),
            false => TopicKey::Name(topic.topic.0.as_str().into()),
        };
        forgotten.extend(topic.partitions.iter().map(|p| (key.clone(), *p)));
    }
    forgotten
}

/// Each target's partition, by topic id or, for a fetch by name, by name,
/// looking each topic up once per run of its partitions; `None` where the
/// topic is gone.
fn hosted_partitions(replicas: &ReplicaManager, targets: &[FetchTarget]) -> Vec<Option<Arc<Partition>>> {
    let mut run: Option<(&FetchTarget, Option<Arc<TopicPartitions>>)> = None;
    targets
        .iter()
        .map(|target| {
            if run
                .as_ref()
                .is_none_or(|(first, _)| (first.topic_id, &first.topic) != (target.topic_id, &target.topic))
            {
                let by_id = !target.topic_id.is_nil();
                run = Some((target, hosted_topic(replicas, by_id, target.topic_id, &target.topic)));
            }
            let found = run.as_ref().and_then(|(_, found)| found.as_ref())?;
            found.get(target.partition).cloned()
        })
        .collect()
}

/// How much a fetch may read and what it reads.
#[derive(Clone, Copy)]
struct Limits {
    /// The request's `max_bytes`, capped by `fetch.max.bytes`.
    max_bytes: usize,
    /// The request's `min_bytes`, at most `max_bytes` as in Kafka.
    min_bytes: usize,
    isolation: Isolation,
    /// The error for a cached partition whose topic is gone.
    missing: ResponseError,
    /// Whether followed partitions may be read (a consumer's v11+ fetch).
    follower_reads: bool,
}

impl Limits {
    fn new(
        request: &FetchRequest,
        fetch_max_bytes: i32,
        isolation: Isolation,
        missing: ResponseError,
        follower_reads: bool,
    ) -> Self {
        let max_bytes = request.max_bytes.clamp(0, fetch_max_bytes) as usize;
        let min_bytes = (request.min_bytes.max(0) as usize).min(max_bytes);
        Self { max_bytes, min_bytes, isolation, missing, follower_reads }
    }
}

/// Where each target of a fetch is read from and whether it is held back,
/// decided once per request, in the order of the plan's targets.
#[derive(Default)]
struct Routing {
    /// KIP-392: a replica the consumer should read the partition from.
    preferred_read_replica: Vec<Option<i32>>,
    /// KIP-73: partitions named by `leader.replication.throttled.replicas`
    /// for this broker (their bytes count against the leader's rate).
    throttle_listed: Vec<bool>,
    /// Of those, the ones held back while the rate is over its bound:
    /// the fetching follower is outside the ISR.
    throttle_holds: Vec<bool>,
    /// `leader.replication.throttled.rate`.
    leader_rate: i64,
}

impl Routing {
    /// A follower's fetch: which partitions the leader throttle covers.
    fn for_follower(
        ctx: &RequestContext<'_>,
        plan: &FetchPlan,
        partitions: &[Option<Arc<Partition>>],
        replica_id: i32,
    ) -> Self {
        use crate::quota::replication::is_throttled;
        use strom_metadata::topic_config::LEADER_THROTTLED_REPLICAS;
        let config = ctx.replicas().config();
        let image = ctx.controller().image();
        let me = config.node_id;
        let throttle_listed: Vec<bool> = plan
            .targets
            .iter()
            .map(|t| is_throttled(&image, LEADER_THROTTLED_REPLICAS, &t.topic, t.partition, me))
            .collect();
        let throttle_holds = throttle_listed
            .iter()
            .zip(partitions)
            .map(|(listed, partition)| {
                *listed && partition.as_ref().is_some_and(|p| !p.replica_set().isr.contains(&replica_id))
            })
            .collect();
        Self {
            preferred_read_replica: Vec::new(),
            throttle_listed,
            throttle_holds,
            leader_rate: config.replication_throttle.leader_rate,
        }
    }

    /// A consumer's fetch (v11+): with the rack-aware selector and a
    /// `client.rack`, the replica each led partition is better read from.
    fn for_consumer(
        ctx: &RequestContext<'_>,
        plan: &FetchPlan,
        partitions: &[Option<Arc<Partition>>],
        client_rack: &str,
    ) -> Self {
        let config = ctx.replicas().config();
        if config.replica_selector != ReplicaSelector::RackAware || client_rack.is_empty() {
            return Self::default();
        }
        let racks: HashMap<i32, Option<String>> =
            super::live_endpoints(ctx).map(|(id, _, rack)| (id, rack)).collect();
        let in_client_rack =
            |id: &i32| racks.get(id).is_some_and(|rack| rack.as_deref() == Some(client_rack));
        let me = config.node_id;
        let preferred_read_replica = plan
            .targets
            .iter()
            .zip(partitions)
            .map(|(target, partition)| {
                let partition = partition.as_ref().filter(|p| p.is_leader())?;
                if in_client_rack(&me) {
                    return None;
                }
                rack_aware_replica(&partition.replica_set(), me, target.fetch_offset, &in_client_rack)
            })
            .collect();
        Self { preferred_read_replica, ..Self::default() }
    }

    fn preferred(&self, index: usize) -> Option<i32> {
        self.preferred_read_replica.get(index).copied().flatten()
    }

    /// Whether the leader's replication rate is over its bound, asked only
    /// when a partition could be held back.
    fn leader_over_quota(&self, quotas: &QuotaManager) -> bool {
        self.throttle_holds.contains(&true) && quotas.leader_replication.is_exceeded(self.leader_rate)
    }

    fn holds_back(&self, index: usize) -> bool {
        self.throttle_holds.get(index).copied().unwrap_or(false)
    }

    /// Kafka's `sizeOfThrottledPartitions`: what a follower was sent of the
    /// throttled partitions counts against the leader's rate.
    fn record_leader_throttled(&self, ctx: &RequestContext<'_>, outcomes: &[Outcome]) {
        let bytes: usize = outcomes
            .iter()
            .zip(&self.throttle_listed)
            .filter(|(_, listed)| **listed)
            .map(|(o, _)| o.bytes())
            .sum();
        let window = ctx.replicas().config().replication_throttle.window;
        ctx.quotas().leader_replication.record(bytes, window);
    }
}

/// Kafka's `RackAwareReplicaSelector` over the replicas Kafka's
/// `findPreferredReadReplica` offers it: in-sync followers holding
/// `fetch_offset`, in the client's rack; the most caught up wins (the
/// largest log end, then the most recently caught up). `None`: the leader.
fn rack_aware_replica(
    set: &crate::replication::isr::ReplicaSet,
    me: i32,
    fetch_offset: i64,
    in_client_rack: &dyn Fn(&i32) -> bool,
) -> Option<i32> {
    set.isr
        .iter()
        .filter(|id| **id != me && in_client_rack(id))
        .filter_map(|id| Some((*id, set.follower(*id)?)))
        .filter(|(_, progress)| progress.log_end_offset >= fetch_offset)
        .max_by_key(|(_, progress)| (progress.log_end_offset, progress.last_caught_up_ms))
        .map(|(id, _)| id)
}

/// Reads until `min_bytes` are available, an error occurs, `max_wait` passes
/// or the broker starts shutting down; the waits count as parked on the
/// request's throttle.
async fn read_with_wait(
    ctx: &RequestContext<'_>,
    plan: &FetchPlan,
    partitions: &[Option<Arc<Partition>>],
    limits: Limits,
    routing: &Routing,
    max_wait: Duration,
) -> Vec<Outcome> {
    // Held back partitions do not count towards `min_bytes`, as in Kafka's
    // DelayedFetch: a throttled follower waits out its max wait.
    let read = || read_all(plan, partitions, limits, routing, routing.leader_over_quota(ctx.quotas()));
    let mut stopping = ctx.stopping();
    let deadline = Instant::now() + max_wait;
    let waiter = Arc::new(Notify::new());
    // Each partition's wake count at registration; only partitions woken
    // since (which dropped the registration) are watched again.
    let mut watched: Vec<Option<u64>> = vec![None; partitions.len()];
    loop {
        for (partition, seen) in partitions.iter().zip(&mut watched) {
            match partition {
                Some(p) if *seen != Some(p.wakes()) => *seen = Some(p.watch(&waiter)),
                _ => {}
            }
        }
        let outcomes = read();
        let bytes: usize = outcomes.iter().map(Outcome::bytes).sum();
        let satisfied = bytes >= limits.min_bytes || outcomes.iter().any(Outcome::is_final);
        if satisfied || Instant::now() >= deadline || *stopping.borrow() {
            return outcomes;
        }
        let _parked = GaugeGuard::new(&ctx.metrics().delayed_fetches);
        let woken = ctx.throttle.parked(async {
            tokio::select! {
                _ = waiter.notified() => true,
                _ = crate::shutdown::stopped(&mut stopping) => false,
                // Expired: answer with whatever arrived while waiting.
                _ = tokio::time::sleep_until(deadline) => false,
            }
        });
        if !woken.await {
            return read();
        }
    }
}

/// Counts the record bytes going out, per hosted topic: to consumers, or
/// to followers (Kafka's `ReplicationBytesOutPerSec`). Error codes are
/// counted from the response by dispatch.
fn count_reads(
    metrics: &Metrics,
    plan: &FetchPlan,
    partitions: &[Option<Arc<Partition>>],
    outcomes: &[Outcome],
    to_follower: bool,
) {
    for ((target, partition), outcome) in plan.targets.iter().zip(partitions).zip(outcomes) {
        let counted = if outcome.error.is_some() { partition.is_some() } else { outcome.bytes() > 0 };
        if !counted {
            continue;
        }
        let metrics = metrics.topic(&target.topic);
        match outcome.error {
            Some(_) => metrics.failed_fetch_requests.fetch_add(1, Ordering::Relaxed),
            None if to_follower => {
                metrics.replication_bytes_out.fetch_add(outcome.bytes() as u64, Ordering::Relaxed)
            }
            None => metrics.bytes_out.fetch_add(outcome.bytes() as u64, Ordering::Relaxed),
        };
    }
}

/// Kafka's read limits: each partition up to its `partition_max_bytes`, the
/// whole response up to `max_bytes`, but the first batch found is returned
/// whole even when larger, so a big batch can never stall a consumer.
fn read_all(
    plan: &FetchPlan,
    partitions: &[Option<Arc<Partition>>],
    limits: Limits,
    routing: &Routing,
    over_quota: bool,
) -> Vec<Outcome> {
    let mut remaining = limits.max_bytes;
    let mut first = true;
    plan.targets
        .iter()
        .zip(partitions)
        .enumerate()
        .map(|(index, (target, partition))| {
            let Some(partition) = partition.as_ref().filter(|p| !p.is_deleted()) else {
                return Outcome::failed(limits.missing);
            };
            // A session may hold a partition whose leadership has moved since.
            let as_follower = limits.follower_reads && serves_consumers_as_follower(partition);
            if !partition.is_leader() && !as_follower {
                return Outcome::failed(ResponseError::NotLeaderOrFollower);
            }
            if let Some(diverging) = diverging_epoch(partition, target) {
                return diverging;
            }
            if let Some(replica) = routing.preferred(index) {
                return Outcome {
                    preferred_read_replica: Some(replica),
                    ..Outcome::without_records(partition)
                };
            }
            if over_quota && routing.holds_back(index) {
                return Outcome::without_records(partition);
            }
            let limit = (target.partition_max_bytes.max(0) as usize).min(remaining);
            let outcome = read_one(partition, target.fetch_offset, limit, first, limits.isolation);
            remaining = remaining.saturating_sub(outcome.bytes());
            first &= outcome.bytes() == 0;
            outcome
        })
        .collect()
}

/// KIP-320, as Kafka's `readRecords`: a fetcher whose last fetched epoch
/// ends here before its fetch offset (or is older than every epoch here)
/// holds a suffix this log does not; it is told where the largest epoch it
/// may share ends, to truncate there. An epoch this log cannot place, or
/// an offset below the log start, is OFFSET_OUT_OF_RANGE.
fn diverging_epoch(partition: &Partition, target: &FetchTarget) -> Option<Outcome> {
    if target.last_fetched_epoch < 0 {
        return None;
    }
    let found = match partition.end_offset_for_epoch(target.last_fetched_epoch) {
        Ok(found) => found,
        Err(e) => return Some(Outcome::failed(storage_error(&e))),
    };
    let log_start = partition.log_start_offset();
    match divergence(target.last_fetched_epoch, target.fetch_offset, found, log_start) {
        Ok(None) => None,
        Ok(diverging) => Some(Outcome { diverging, ..Outcome::without_records(partition) }),
        Err(e) => Some(Outcome::failed(e)),
    }
}

fn read_one(
    partition: &Partition,
    offset: i64,
    max_bytes: usize,
    min_one_batch: bool,
    isolation: Isolation,
) -> Outcome {
    match partition.read(offset, max_bytes, min_one_batch, isolation) {
        Ok(read) => Outcome {
            error: None,
            high_watermark: read.high_watermark,
            last_stable_offset: read.last_stable_offset,
            log_start_offset: read.log_start_offset,
            records: read.slice,
            aborted: read.aborted,
            diverging: None,
            preferred_read_replica: None,
        },
        Err(e) => Outcome { error: Some(storage_error(&e)), ..Outcome::without_records(partition) },
    }
}

fn diverging_epoch_field(diverging: Option<(i32, i64)>) -> EpochEndOffset {
    let (epoch, end_offset) = diverging.unwrap_or((-1, -1));
    EpochEndOffset::default().with_epoch(epoch).with_end_offset(end_offset)
}

fn aborted_transactions(aborted: &[AbortedTxn]) -> Vec<AbortedTransaction> {
    aborted
        .iter()
        .map(|a| {
            AbortedTransaction::default()
                .with_producer_id(ProducerId(a.producer_id))
                .with_first_offset(a.first_offset)
        })
        .collect()
}

/// Groups partition results by topic, in the order topics first appear.
/// Records are represented by splice markers, replaced by the file bytes
/// when the response is written.
fn build_responses<'a>(
    answered: impl Iterator<Item = (&'a FetchTarget, Outcome)>,
    read_committed: bool,
) -> (Vec<FetchableTopicResponse>, Vec<Splice>) {
    let mut responses: Vec<FetchableTopicResponse> = Vec::new();
    // Splices must follow the encoded order, which groups partitions by
    // topic: a rotated session can interleave topics in `answered`.
    let mut splices_by_topic: Vec<Vec<Splice>> = Vec::new();
    let mut topic_at: HashMap<(Uuid, &str), usize> = HashMap::new();
    for (target, outcome) in answered {
        let splice = outcome.records.clone().filter(|r| r.len > 0).map(Splice::new);
        let data = PartitionData::default()
            .with_partition_index(target.partition)
            .with_error_code(outcome.error.map_or(0, |e| e.code()))
            .with_high_watermark(outcome.high_watermark)
            .with_last_stable_offset(outcome.last_stable_offset)
            .with_log_start_offset(outcome.log_start_offset)
            .with_aborted_transactions(read_committed.then(|| aborted_transactions(&outcome.aborted)))
            .with_diverging_epoch(diverging_epoch_field(outcome.diverging))
            .with_preferred_read_replica(BrokerId(outcome.preferred_read_replica.unwrap_or(-1)))
            .with_records(Some(splice.as_ref().map_or_else(Bytes::new, |s| s.marker.clone())));
        let at = *topic_at.entry((target.topic_id, &target.topic)).or_insert_with(|| {
            responses.push(
                FetchableTopicResponse::default()
                    .with_topic(topic_name(&target.topic))
                    .with_topic_id(target.topic_id),
            );
            splices_by_topic.push(Vec::new());
            responses.len() - 1
        });
        responses[at].partitions.push(data);
        splices_by_topic[at].extend(splice);
    }
    (responses, splices_by_topic.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {

    use strom_metadata::NewTopic;

    use super::*;
    use crate::config::BrokerConfig;
    use crate::server::Broker;

    #[tokio::test]
    async fn a_fetch_from_a_partition_led_elsewhere_names_the_leader_from_v16() {
        use crate::handlers::leadership_tests::{broker_with_another, ctx, place, OTHER, OTHER_PORT};
        use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
        use kafka_protocol::messages::ApiKey;

        let dir = tempfile::tempdir().unwrap();
        let broker = broker_with_another(dir.path());
        place(&broker, "t", &[broker.config().node_id, OTHER]);
        let id = broker.controller().image().topic("t").unwrap().id;
        let partitions =
            (0..2).map(|p| FetchPartition::default().with_partition(p).with_partition_max_bytes(1024));
        let topic = FetchTopic::default().with_topic_id(id).with_partitions(partitions.collect());
        let request =
            FetchRequest::default().with_max_bytes(1024).with_session_epoch(-1).with_topics(vec![topic]);

        let reply = handle(&ctx(&broker, ApiKey::Fetch, 16), request).await;

        let answers: Vec<(i32, i16, i32)> = reply.response.responses[0]
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.error_code, p.current_leader.leader_id.0))
            .collect();
        let not_leader = ResponseError::NotLeaderOrFollower.code();
        assert!(answers.contains(&(0, 0, -1)), "{answers:?}");
        assert!(answers.contains(&(1, not_leader, OTHER)), "{answers:?}");
        let endpoints: Vec<(i32, i32)> =
            reply.response.node_endpoints.iter().map(|e| (e.node_id.0, e.port)).collect();
        assert_eq!(endpoints, [(OTHER, i32::from(OTHER_PORT))]);
    }

    #[tokio::test]
    async fn a_follower_serves_consumers_from_v11_up_to_its_log_and_refuses_older_fetches() {
        use crate::handlers::leadership_tests::{broker_with_another, ctx, OTHER};
        use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
        use kafka_protocol::messages::ApiKey;

        let dir = tempfile::tempdir().unwrap();
        let broker = broker_with_another(dir.path());
        let assignments = [(0, vec![OTHER, broker.config().node_id])].into_iter().collect();
        let topic = NewTopic { name: "t".into(), assignments, ..Default::default() };
        strom_metadata::block_on(broker.controller().create_topic_with_logs(topic, false, broker.replicas()))
            .unwrap();
        let fetch = |version: i16, offset: i64| {
            let partition = FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1024);
            let topic = FetchTopic::default().with_topic(topic_name("t")).with_partitions(vec![partition]);
            let request =
                FetchRequest::default().with_max_bytes(1024).with_session_epoch(-1).with_topics(vec![topic]);
            let broker = &broker;
            async move {
                let reply = handle(&ctx(broker, ApiKey::Fetch, version), request).await;
                reply.response.responses[0].partitions[0].error_code
            }
        };

        assert_eq!(fetch(10, 0).await, ResponseError::NotLeaderOrFollower.code(), "v10 reads only leaders");
        assert_eq!(fetch(11, 0).await, 0, "v11 reads the follower");
        assert_eq!(fetch(11, 5).await, ResponseError::OffsetOutOfRange.code(), "past the follower's log end");
    }

    #[test]
    fn a_leader_holds_back_throttled_partitions_from_followers_outside_the_isr_while_over_its_rate() {
        use crate::handlers::leadership_tests::{broker_with_another, ctx, OTHER};
        use strom_metadata::topic_config::LEADER_THROTTLED_REPLICAS;

        let dir = tempfile::tempdir().unwrap();
        let broker = broker_with_another(dir.path());
        let me = broker.config().node_id;
        let configs = [(LEADER_THROTTLED_REPLICAS.to_owned(), format!("0:{me}"))].into_iter().collect();
        let assignments = vec![(0, vec![me, OTHER]), (1, vec![me, OTHER])];
        let topic = NewTopic { name: "t".into(), configs, assignments, ..Default::default() };
        strom_metadata::block_on(broker.controller().create_topic_with_logs(topic, false, broker.replicas()))
            .unwrap();
        let plan = sessionless_plan(&broker, "t", 2);
        let partitions = hosted_partitions(broker.replicas(), &plan.targets);
        let batch = strom_storage::batch::encode_batch(&[(None, Some(Bytes::from_static(b"v")))], 0);
        for partition in partitions.iter().flatten() {
            partition.append(&batch, 0).unwrap();
        }
        let limits = Limits {
            max_bytes: 1 << 20,
            min_bytes: 1,
            isolation: Isolation::LogEnd,
            missing: ResponseError::UnknownTopicId,
            follower_reads: false,
        };
        let sent = |routing: &Routing, over_quota| -> Vec<bool> {
            read_all(&plan, &partitions, limits, routing, over_quota).iter().map(|o| o.bytes() > 0).collect()
        };

        let ctx = ctx(&broker, kafka_protocol::messages::ApiKey::Fetch, 17);
        let in_sync = Routing::for_follower(&ctx, &plan, &partitions, OTHER);
        let outside = Routing::for_follower(&ctx, &plan, &partitions, OTHER + 1);

        assert_eq!(in_sync.throttle_listed, [true, false], "only 0:{me} is listed");
        assert_eq!(sent(&in_sync, true), [true, true], "an in-sync follower is never held back");
        assert_eq!(sent(&outside, true), [false, true], "the listed partition is held back");
        assert_eq!(sent(&outside, false), [true, true], "within the rate nothing is held back");
    }

    #[test]
    fn the_rack_aware_selector_picks_the_most_caught_up_in_sync_replica_in_the_client_rack() {
        use crate::replication::isr::ReplicaSet;
        let mut set = ReplicaSet::new(1, 30_000);
        let image = strom_metadata::PartitionImage {
            replicas: vec![1, 2, 3, 4],
            isr: vec![1, 2, 3],
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 0,
            ..Default::default()
        };
        set.apply(&image, 100, 0, &|_| true);
        set.record_fetch(2, 1, 90, 100, 1);
        set.record_fetch(3, 1, 100, 100, 1);
        set.record_fetch(4, 1, 100, 100, 1);

        assert_eq!(rack_aware_replica(&set, 1, 50, &|id| [2, 3, 4].contains(id)), Some(3));
        assert_eq!(rack_aware_replica(&set, 1, 95, &|id| *id == 2), None, "2 does not hold offset 95");
        assert_eq!(rack_aware_replica(&set, 1, 50, &|id| *id == 4), None, "4 is not in sync");
        assert_eq!(rack_aware_replica(&set, 1, 50, &|_| false), None, "no replica in the client's rack");
    }

    fn open_broker(dir: &std::path::Path) -> Arc<Broker> {
        let overrides = [("log.dirs".to_owned(), dir.display().to_string())];
        Broker::open(BrokerConfig::from_properties("", &overrides).unwrap()).unwrap()
    }

    fn sessionless_plan(broker: &Broker, topic: &str, partitions: i32) -> FetchPlan {
        let hosted = broker.replicas().topic(topic).unwrap();
        let requested = (0..partitions)
            .map(|partition| FetchTarget {
                topic_id: hosted.id,
                topic: topic.into(),
                partition,
                fetch_offset: 0,
                partition_max_bytes: 1 << 20,
                last_fetched_epoch: -1,
            })
            .collect();
        let parts =
            FetchRequestParts { session_id: 0, epoch: -1, uses_topic_ids: true, requested, forgotten: &[] };
        broker.fetch_sessions().begin(parts).unwrap()
    }

    #[tokio::test]
    async fn a_parked_fetch_answers_not_leader_as_soon_as_leadership_moves_away() {
        use crate::handlers::leadership_tests::{broker_with_another, ctx, place};
        use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
        use kafka_protocol::messages::ApiKey;

        let dir = tempfile::tempdir().unwrap();
        let broker = broker_with_another(dir.path());
        place(&broker, "t", &[broker.config().node_id]);
        let partition = FetchPartition::default().with_partition(0).with_partition_max_bytes(1024);
        let topic = FetchTopic::default().with_topic(topic_name("t")).with_partitions(vec![partition]);
        let request = FetchRequest::default()
            .with_max_wait_ms(30_000)
            .with_min_bytes(1 << 20)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![topic]);
        let context = ctx(&broker, ApiKey::Fetch, 12);
        let fetch = handle(&context, request);
        let fence_everyone = async {
            tokio::task::yield_now().await;
            let later = strom_storage::now_ms() + 3_600_000;
            strom_metadata::block_on(broker.controller().fence_expired_brokers(later)).unwrap();
            std::future::pending::<()>().await
        };

        let reply = tokio::select! {
            reply = fetch => reply,
            _ = fence_everyone => unreachable!(),
            _ = tokio::time::sleep(Duration::from_secs(20)) => panic!("the parked fetch waited out its max wait"),
        };

        let answer = &reply.response.responses[0].partitions[0];
        assert_eq!(answer.error_code, ResponseError::NotLeaderOrFollower.code());
    }

    #[tokio::test]
    async fn a_parked_fetch_registers_once_with_a_partition_that_stays_idle() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        let topic = NewTopic { name: "t".into(), partitions: 2, replication_factor: 1, ..Default::default() };
        strom_metadata::block_on(broker.controller().create_topic(topic, false)).unwrap();
        let plan = sessionless_plan(&broker, "t", 2);
        let partitions = hosted_partitions(broker.replicas(), &plan.targets);
        let (busy, idle) = (partitions[0].clone().unwrap(), partitions[1].clone().unwrap());
        let limits = Limits {
            max_bytes: 1 << 20,
            min_bytes: 1 << 20,
            isolation: Isolation::ReadUncommitted,
            missing: ResponseError::UnknownTopicId,
            follower_reads: false,
        };
        let batch = strom_storage::batch::encode_batch(&[(None, Some(Bytes::from_static(b"v")))], 0);

        // Each append wakes the fetch, short of its min_bytes, to wait again.
        let appends = async {
            for _ in 0..100 {
                busy.append(&batch, 0).unwrap();
                tokio::task::yield_now().await;
            }
            idle.waiter_count()
        };
        let ctx =
            crate::handlers::leadership_tests::ctx(&broker, kafka_protocol::messages::ApiKey::Fetch, 17);
        let routing = Routing::default();
        let idle_waiters = tokio::select! {
            _ = read_with_wait(&ctx, &plan, &partitions, limits, &routing, Duration::from_secs(30)) => {
                panic!("the fetch returned short of its min_bytes")
            }
            count = appends => count,
        };
        assert_eq!(idle_waiters, 1, "the idle partition holds one registration per wait");
    }

    #[test]
    fn splices_follow_the_encoded_order_when_a_rotated_session_interleaves_topics() {
        let dir = tempfile::tempdir().unwrap();
        let broker = open_broker(dir.path());
        for (name, partitions) in [("a", 2), ("b", 1)] {
            let topic =
                NewTopic { name: name.into(), partitions, replication_factor: 1, ..Default::default() };
            strom_metadata::block_on(broker.controller().create_topic(topic, false)).unwrap();
        }
        let target = |topic: &str, partition| {
            let hosted = broker.replicas().topic(topic).unwrap();
            FetchTarget {
                topic_id: hosted.id,
                topic: topic.into(),
                partition,
                fetch_offset: 0,
                partition_max_bytes: 1 << 20,
                last_fetched_epoch: -1,
            }
        };
        // The order an incremental session reaches after rotating a0 to the end.
        let targets = [target("a", 1), target("b", 0), target("a", 0)];
        let batch = strom_storage::batch::encode_batch(&[(None, Some(Bytes::from_static(b"v")))], 0);
        let answered: Vec<(&FetchTarget, Outcome)> = targets
            .iter()
            .map(|t| {
                let partition = broker.replicas().partition(&t.topic, t.partition).unwrap();
                partition.append(&batch, 0).unwrap();
                let read = partition.read(0, 1 << 20, true, Isolation::ReadUncommitted).unwrap();
                let outcome = Outcome {
                    error: None,
                    high_watermark: 1,
                    last_stable_offset: 1,
                    log_start_offset: 0,
                    records: read.slice,
                    aborted: Vec::new(),
                    diverging: None,
                    preferred_read_replica: None,
                };
                (t, outcome)
            })
            .collect();

        let (responses, splices) = build_responses(answered.into_iter(), false);

        let encoded: Vec<Bytes> =
            responses.iter().flat_map(|t| &t.partitions).filter_map(|p| p.records.clone()).collect();
        let spliced: Vec<Bytes> = splices.iter().map(|s| s.marker.clone()).collect();
        assert_eq!(responses.len(), 2, "one entry per topic");
        assert_eq!(encoded, spliced, "splices in the order their markers are encoded");
    }
}
