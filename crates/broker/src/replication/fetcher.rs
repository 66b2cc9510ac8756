//! Followers fetching from their leaders, as Kafka's `ReplicaFetcherThread`:
//! one task per (leader, fetcher id) with `num.replica.fetchers` fetchers
//! per leader, each sending Fetch with this broker's replica id and broker
//! epoch and every partition's leader epoch and last fetched epoch. The
//! follower appends the leader's batches as they are, takes the leader's
//! high watermark (never past its own log end), and truncates where the
//! leader says its log diverged (KIP-320); its log start offset follows the
//! leader's up to its high watermark. On OFFSET_OUT_OF_RANGE it asks the
//! leader's log end and start with ListOffsets and truncates to the end,
//! or restarts its log empty at the start when its whole log lies below it
//! (Kafka's `fetchOffsetAndTruncate`). A partition that fails waits
//! `replica.fetch.backoff.ms` before it is fetched again.
//!
//! Replication throttles (KIP-73): the bytes of partitions a topic's
//! `follower.replication.throttled.replicas` names for this broker count
//! against `follower.replication.throttled.rate`; while over it, those of
//! them not caught up with the leader are left out of the fetch (Kafka's
//! `shouldFollowerThrottle`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use strom_quorum::channel::Channel;
use strom_storage::batch::Batches;
use tokio::sync::watch;
use tokio::time::Instant;
use uuid::Uuid;

use crate::config::ReplicaFetchConfig;
use crate::replica::Partition;
use crate::replication::ReplicationServices;

/// Fetch v15 carries `replica_state` (KIP-903) and topic ids.
const FETCH_VERSION: i16 = 15;
/// ListOffsets v4 carries the current leader epoch.
const LIST_OFFSETS_VERSION: i16 = 4;
/// ListOffsets' timestamps for the log end and the log start.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
/// Kafka's `replica.socket.timeout.ms` default, beyond the fetch's wait.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(30);
const CLIENT_ID: &str = "strom-replica-fetcher";

/// A partition this broker follows, as one fetcher fetches it.
#[derive(Debug, Clone)]
pub struct Followed {
    pub topic_id: Uuid,
    pub partition: Arc<Partition>,
    /// The leader epoch the image gave when the fetcher took it.
    pub leader_epoch: i32,
}

/// Fetches the partitions `assigned` names from `leader` until the
/// assignment is dropped or the broker stops.
pub async fn run(
    services: ReplicationServices,
    leader: i32,
    mut assigned: watch::Receiver<Vec<Followed>>,
    mut stop: watch::Receiver<bool>,
) {
    let config = services.replicas.config().replica_fetch;
    let backoff = Duration::from_millis(config.backoff_ms);
    let mut channel: Option<Channel> = None;
    let mut delayed: HashMap<(Uuid, i32), Instant> = HashMap::new();
    let mut lags = Lags::default();
    loop {
        if *stop.borrow() {
            return;
        }
        let now = Instant::now();
        delayed.retain(|_, until| *until > now);
        let followed = assigned.borrow_and_update().clone();
        lags.keep_only(&followed);
        let throttle = FollowerThrottle::now(&services, &followed);
        let ready: Vec<&Followed> = followed
            .iter()
            .filter(|f| !delayed.contains_key(&key_of(f)))
            .filter(|f| !throttle.holds_back(f, &lags))
            .collect();
        if ready.is_empty() {
            let wake = delayed.values().min().copied().unwrap_or(now + backoff);
            tokio::select! {
                changed = assigned.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep_until(wake) => {}
                _ = crate::shutdown::stopped(&mut stop) => return,
            }
            continue;
        }
        let request = fetch_request(&services, &config, &ready);
        // As Kafka's fetcher thread, a new assignment waits for the fetch in
        // flight (answered within the leader's wait): a leader serves one
        // connection's requests in order, so each fetch given up would
        // still hold the next one back by a whole wait.
        let sent = tokio::select! {
            sent = send(&services, leader, &mut channel, &request, &config) => sent,
            _ = crate::shutdown::stopped(&mut stop) => return,
        };
        match sent {
            Ok(response) => {
                let mut throttled_bytes = 0;
                let mut out_of_range = Vec::new();
                for applied in apply_response(&ready, response) {
                    match applied.outcome {
                        Outcome::Done => {}
                        Outcome::Failed => drop(delayed.insert(applied.key, Instant::now() + backoff)),
                        Outcome::OutOfRange => out_of_range.push(applied.key),
                    }
                    if throttle.covers(&applied.key) {
                        throttled_bytes += applied.bytes;
                    }
                    lags.update(&applied);
                }
                services.quotas.follower_replication.record(throttled_bytes, throttle.window);
                for f in ready.iter().filter(|f| out_of_range.contains(&key_of(f))) {
                    let reset = tokio::select! {
                        reset = fetch_offset_and_truncate(&services, leader, &mut channel, f, &config) => reset,
                        _ = crate::shutdown::stopped(&mut stop) => return,
                    };
                    if let Err(e) = reset {
                        tracing::warn!(partition = %f.partition.tp, "cannot reset the fetch offset: {e}");
                        delayed.insert(key_of(f), Instant::now() + backoff);
                    }
                }
            }
            Err(e) => {
                tracing::debug!(leader, "replica fetch failed: {e}");
                channel = None;
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = crate::shutdown::stopped(&mut stop) => return,
                }
            }
        }
    }
}

fn key_of(followed: &Followed) -> (Uuid, i32) {
    (followed.topic_id, followed.partition.tp.partition)
}

/// Each partition's lag behind its leader's high watermark after its last
/// fetch that brought records (Kafka's `PartitionFetchState.lag`).
#[derive(Default)]
struct Lags(HashMap<(Uuid, i32), i64>);

impl Lags {
    fn update(&mut self, applied: &Applied) {
        let Some(lag) = applied.lag else { return };
        if applied.bytes > 0 || !self.0.contains_key(&applied.key) {
            self.0.insert(applied.key, lag);
        }
    }

    /// Forgets the partitions no longer followed.
    fn keep_only(&mut self, followed: &[Followed]) {
        if self.0.len() > followed.len() {
            let keys: std::collections::HashSet<_> = followed.iter().map(key_of).collect();
            self.0.retain(|key, _| keys.contains(key));
        }
    }

    /// Kafka's `isReplicaInSync`: a known lag of nothing.
    fn in_sync(&self, key: &(Uuid, i32)) -> bool {
        self.0.get(key).is_some_and(|lag| *lag <= 0)
    }
}

/// The follower's side of KIP-73 for one round of fetching.
struct FollowerThrottle {
    /// The followed partitions named by `follower.replication.throttled.replicas`.
    listed: std::collections::HashSet<(Uuid, i32)>,
    over_quota: bool,
    window: crate::quota::QuotaWindow,
}

impl FollowerThrottle {
    fn now(services: &ReplicationServices, followed: &[Followed]) -> Self {
        use crate::quota::replication::is_throttled;
        use strom_metadata::topic_config::FOLLOWER_THROTTLED_REPLICAS;
        let config = services.replicas.config();
        let throttle = config.replication_throttle;
        let image = services.controller.image();
        let listed = followed
            .iter()
            .filter(|f| {
                let tp = &f.partition.tp;
                is_throttled(&image, FOLLOWER_THROTTLED_REPLICAS, &tp.topic, tp.partition, config.node_id)
            })
            .map(key_of)
            .collect();
        let over_quota = services.quotas.follower_replication.is_exceeded(throttle.follower_rate);
        Self { listed, over_quota, window: throttle.window }
    }

    fn covers(&self, key: &(Uuid, i32)) -> bool {
        self.listed.contains(key)
    }

    /// Kafka's `shouldFollowerThrottle`: listed, lagging, and over the rate.
    fn holds_back(&self, followed: &Followed, lags: &Lags) -> bool {
        let key = key_of(followed);
        self.over_quota && self.covers(&key) && !lags.in_sync(&key)
    }
}

/// Sends `request` to `leader` over its inter-broker listener, connecting
/// first if need be.
async fn send(
    services: &ReplicationServices,
    leader: i32,
    channel: &mut Option<Channel>,
    request: &FetchRequest,
    config: &ReplicaFetchConfig,
) -> Result<FetchResponse, String> {
    let timeout = SOCKET_TIMEOUT + Duration::from_millis(config.wait_max_ms.max(0) as u64);
    let channel = connected(services, leader, channel).await?;
    channel.send(request, FETCH_VERSION, timeout).await.map_err(|e| e.to_string())
}

/// The channel to `leader`, connected first if need be.
async fn connected<'c>(
    services: &ReplicationServices,
    leader: i32,
    channel: &'c mut Option<Channel>,
) -> Result<&'c Channel, String> {
    if channel.as_ref().is_none_or(Channel::is_closed) {
        let image = services.controller.image();
        let address = services
            .replicas
            .config()
            .inter_broker_address(&image, leader)
            .ok_or("the leader has no inter-broker endpoint")?;
        let connector = &services.connector;
        let connected =
            connector.connect(&address, CLIENT_ID, SOCKET_TIMEOUT).await.map_err(|e| e.to_string())?;
        *channel = Some(connected);
    }
    Ok(channel.as_ref().expect("connected above"))
}

/// Kafka's `fetchOffsetAndTruncate`, after OFFSET_OUT_OF_RANGE: a follower
/// past its leader's log end truncates to it; one whose whole log lies
/// below the leader's log start (retention or DeleteRecords ran while it
/// was away) restarts its log empty there. The next fetch goes on from
/// the new log end.
async fn fetch_offset_and_truncate(
    services: &ReplicationServices,
    leader: i32,
    channel: &mut Option<Channel>,
    followed: &Followed,
    config: &ReplicaFetchConfig,
) -> Result<(), String> {
    let partition = &followed.partition;
    let log_end = partition.log_end_offset();
    let leader_end = leader_offset(services, leader, channel, followed, LATEST, config).await?;
    let restart_at = if leader_end < log_end {
        if leader_end >= partition.log_start_offset() {
            tracing::info!(partition = %partition.tp, log_end, leader_end, "truncating to the leader's log end");
            partition.truncate_to(leader_end).map_err(|e| e.to_string())?;
            return Ok(());
        }
        leader_end
    } else {
        let leader_start = leader_offset(services, leader, channel, followed, EARLIEST, config).await?;
        if leader_start <= log_end {
            return Ok(());
        }
        leader_start
    };
    tracing::info!(partition = %partition.tp, log_end, restart_at, "the log lies outside the leader's: restarting it empty");
    partition.truncate_fully_and_start_at(restart_at).map_err(|e| e.to_string())
}

/// The leader's offset for `timestamp` (LATEST: its log end, as a replica
/// asks; EARLIEST: its log start).
async fn leader_offset(
    services: &ReplicationServices,
    leader: i32,
    channel: &mut Option<Channel>,
    followed: &Followed,
    timestamp: i64,
    config: &ReplicaFetchConfig,
) -> Result<i64, String> {
    let tp = &followed.partition.tp;
    let partition = ListOffsetsPartition::default()
        .with_partition_index(tp.partition)
        .with_current_leader_epoch(followed.leader_epoch)
        .with_timestamp(timestamp);
    let topic = ListOffsetsTopic::default()
        .with_name(TopicName(StrBytes::from_string(tp.topic.clone())))
        .with_partitions(vec![partition]);
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(services.replicas.node_id()))
        .with_topics(vec![topic]);
    let timeout = SOCKET_TIMEOUT + Duration::from_millis(config.wait_max_ms.max(0) as u64);
    let channel = connected(services, leader, channel).await?;
    let response = channel.send(&request, LIST_OFFSETS_VERSION, timeout).await.map_err(|e| e.to_string())?;
    let answer = response.topics.first().and_then(|t| t.partitions.first()).ok_or("an empty answer")?;
    match ResponseError::try_from_code(answer.error_code) {
        Some(error) => Err(format!("ListOffsets refused: {error:?}")),
        None => Ok(answer.offset),
    }
}

fn fetch_request(
    services: &ReplicationServices,
    config: &ReplicaFetchConfig,
    followed: &[&Followed],
) -> FetchRequest {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for f in followed {
        let p = &f.partition;
        let partition = FetchPartition::default()
            .with_partition(p.tp.partition)
            .with_current_leader_epoch(f.leader_epoch)
            .with_fetch_offset(p.log_end_offset())
            .with_last_fetched_epoch(p.latest_log_epoch())
            .with_log_start_offset(p.log_start_offset())
            .with_partition_max_bytes(config.max_bytes);
        match topics.iter_mut().find(|t| t.topic_id == f.topic_id) {
            Some(topic) => topic.partitions.push(partition),
            None => {
                topics.push(FetchTopic::default().with_topic_id(f.topic_id).with_partitions(vec![partition]))
            }
        }
    }
    let replica = ReplicaState::default()
        .with_replica_id(BrokerId(services.replicas.node_id()))
        .with_replica_epoch(services.controller.broker_epoch());
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_replica_state(replica)
        .with_max_wait_ms(config.wait_max_ms)
        .with_min_bytes(config.min_bytes)
        .with_max_bytes(config.response_max_bytes)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(topics)
}

/// What became of one partition's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Done,
    /// It waits out the backoff.
    Failed,
    /// OFFSET_OUT_OF_RANGE: the fetch offset must be reset.
    OutOfRange,
}

/// What a fetch response did to one followed partition.
struct Applied {
    key: (Uuid, i32),
    outcome: Outcome,
    /// Record bytes the leader sent.
    bytes: usize,
    /// The leader's high watermark less this log's end, once applied.
    lag: Option<i64>,
}

/// Applies each partition's answer.
fn apply_response(followed: &[&Followed], response: FetchResponse) -> Vec<Applied> {
    if let Some(error) = ResponseError::try_from_code(response.error_code) {
        tracing::debug!("replica fetch refused: {error:?}");
        let failed =
            |f: &&Followed| Applied { key: key_of(f), outcome: Outcome::Failed, bytes: 0, lag: None };
        return followed.iter().map(failed).collect();
    }
    let mut results = Vec::new();
    for topic in response.responses {
        for data in topic.partitions {
            let key = (topic.topic_id, data.partition_index);
            let Some(f) = followed.iter().find(|f| key_of(f) == key) else {
                continue;
            };
            let bytes = data.records.as_ref().map_or(0, Bytes::len);
            let leader_high_watermark = data.high_watermark;
            // An image that moved the partition since the request voids the answer.
            let current = !f.partition.is_leader() && f.partition.leader_epoch() == f.leader_epoch;
            let outcome = match () {
                _ if !current => Outcome::Done,
                _ if data.error_code == ResponseError::OffsetOutOfRange.code() => Outcome::OutOfRange,
                _ if apply_partition(&f.partition, data) => Outcome::Done,
                _ => Outcome::Failed,
            };
            let applied = current && outcome == Outcome::Done;
            let lag = applied.then(|| leader_high_watermark - f.partition.log_end_offset());
            results.push(Applied { key, outcome, bytes, lag });
        }
    }
    results
}

/// Applies one partition's answer; false when it failed.
pub(crate) fn apply_partition(partition: &Partition, data: PartitionData) -> bool {
    if let Some(error) = ResponseError::try_from_code(data.error_code) {
        tracing::debug!(partition = %partition.tp, "replica fetch refused: {error:?}");
        return false;
    }
    let applied = if data.diverging_epoch.epoch >= 0 {
        truncate_on_divergence(partition, data.diverging_epoch.epoch, data.diverging_epoch.end_offset)
    } else {
        append(partition, data.records.unwrap_or_default())
    };
    if let Err(e) = applied {
        tracing::warn!(partition = %partition.tp, "replication failed: {e}");
        return false;
    }
    partition.set_follower_high_watermark(data.high_watermark);
    if let Err(e) = partition.follow_log_start_offset(data.log_start_offset) {
        tracing::warn!(partition = %partition.tp, "cannot follow the leader's log start offset: {e}");
    }
    true
}

fn append(partition: &Partition, records: Bytes) -> Result<(), strom_storage::StorageError> {
    // A leader may cut the last batch short at the size limit.
    let whole: usize = Batches::new(&records).map_while(Result::ok).map(<[u8]>::len).sum();
    if whole > 0 {
        partition.append_as_follower(&records[..whole])?;
    }
    Ok(())
}

/// KIP-320: the leader's log holds `leader_epoch` (the largest epoch it
/// shares with ours) up to `leader_end`. The follower keeps what both
/// hold: up to the end of that epoch in both logs; when it does not have
/// that epoch, up to the end of its own largest earlier one, and the next
/// fetch checks again from there.
fn truncate_on_divergence(
    partition: &Partition,
    leader_epoch: i32,
    leader_end: i64,
) -> Result<(), strom_storage::StorageError> {
    let found = partition.end_offset_for_epoch(leader_epoch)?;
    let offset = truncation_offset(found, leader_end, partition.log_start_offset());
    tracing::info!(partition = %partition.tp, leader_epoch, leader_end, offset, "truncating where the log diverged from the leader's");
    partition.truncate_to(offset)?;
    Ok(())
}

/// Where a follower truncates when the leader says its epoch ends at
/// `leader_end`: `found` is the follower's own end of that epoch (its
/// largest epoch not above it, -1 when it has none), and the log start is
/// the floor.
pub(crate) fn truncation_offset(found: (i32, i64), leader_end: i64, log_start: i64) -> i64 {
    let (epoch, end) = found;
    let offset = match epoch {
        -1 => leader_end,
        _ => end.min(leader_end),
    };
    offset.max(log_start)
}

/// KIP-320, the leader's side: `found` is where the largest epoch not
/// above the fetcher's last fetched epoch ends here. A fetcher holding a
/// suffix this log does not is answered with that epoch and end (`Some`);
/// an epoch this log cannot place, or an offset below the log start, is
/// OFFSET_OUT_OF_RANGE.
pub(crate) fn divergence(
    last_fetched_epoch: i32,
    fetch_offset: i64,
    found: (i32, i64),
    log_start: i64,
) -> Result<Option<(i32, i64)>, ResponseError> {
    let (epoch, end_offset) = found;
    if epoch < 0 || end_offset < 0 || fetch_offset < log_start {
        return Err(ResponseError::OffsetOutOfRange);
    }
    if end_offset >= fetch_offset && epoch >= last_fetched_epoch {
        return Ok(None);
    }
    Ok(Some(found))
}
