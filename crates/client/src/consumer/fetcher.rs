//! Fetching: one Fetch request in flight per broker, responses buffered
//! per partition and handed out as records.
//!
//! Each assigned partition has a *position* (the next offset `poll` hands
//! out) and a *fetch offset* (where the next request starts). While the
//! application works through one buffered response, the next request for
//! that partition is already on the wire, so a single busy partition is
//! not stalled by round trips. Every seek bumps the partition's epoch;
//! responses from an older epoch are dropped, which is how a seek (or a
//! revocation) discards data already in flight.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse};
use tokio::sync::mpsc;

use super::config::{ConsumerConfig, OffsetReset};
use super::protocol::TopicPartition;
use super::records::{Batch, Batches, ConsumerRecord, RecordIter};
use super::session::{FetchSession, SessionRequest, SESSIONLESS};
use crate::admin::topic_name;
use crate::cluster::Cluster;
use crate::error::{Error, KafkaCode, Result};

/// What the consumer knows about one assigned partition.
#[derive(Debug, Clone)]
pub struct PartitionState {
    /// The next offset to hand out; `None` until resolved from a commit
    /// or `auto.offset.reset`.
    pub position: Option<i64>,
    /// Where the next Fetch starts (ahead of `position` while buffered).
    fetch_offset: i64,
    /// Bumped by every seek; older responses are stale.
    epoch: u64,
    pub paused: bool,
    in_flight: bool,
    buffered: usize,
    /// The strategy to resolve a missing position with, once known.
    pub reset: Option<OffsetReset>,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
}

/// Epochs come from one counter, so a partition assigned again never
/// matches a response fetched for its earlier state.
static NEXT_EPOCH: AtomicU64 = AtomicU64::new(1);

fn fresh_epoch() -> u64 {
    NEXT_EPOCH.fetch_add(1, Ordering::Relaxed)
}

impl PartitionState {
    pub fn new() -> Self {
        Self {
            position: None,
            fetch_offset: -1,
            epoch: fresh_epoch(),
            paused: false,
            in_flight: false,
            buffered: 0,
            reset: None,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
        }
    }

    /// Moves the position; anything fetched or in flight becomes stale.
    pub fn seek(&mut self, offset: i64) {
        self.position = Some(offset);
        self.fetch_offset = offset;
        self.epoch = fresh_epoch();
        self.buffered = 0;
        self.reset = None;
    }

    /// Forgets the position, to be resolved again with `strategy`.
    pub fn request_reset(&mut self, strategy: OffsetReset) {
        self.position = None;
        self.epoch = fresh_epoch();
        self.buffered = 0;
        self.reset = Some(strategy);
    }

    /// One response may wait in the buffer while the next is fetched, so
    /// decoding one overlaps the round trip of the next.
    fn fetchable(&self) -> bool {
        self.position.is_some() && !self.paused && !self.in_flight && self.buffered <= 1
    }
}

impl Default for PartitionState {
    fn default() -> Self {
        Self::new()
    }
}

pub type Assignment = BTreeMap<TopicPartition, PartitionState>;

/// Fetch v7 brought sessions.
const FIRST_SESSION_VERSION: i16 = 7;

/// A partition's answer from one Fetch, drained as `poll` asks for records.
struct CompletedFetch {
    tp: TopicPartition,
    topic: Arc<str>,
    epoch: u64,
    batches: Batches,
    /// The batch being read, and the offset after it.
    records: Option<(RecordIter, i64)>,
    /// Aborted transactions (producer id, first offset) by first offset,
    /// for read_committed; consumed as batches pass their first offset.
    aborted: VecDeque<(i64, i64)>,
    aborting: HashSet<i64>,
}

struct FetchOutcome {
    node: i32,
    sent: Vec<(TopicPartition, u64)>,
    result: Result<FetchResponse>,
}

pub struct Fetcher {
    cluster: Arc<Cluster>,
    config: Arc<ConsumerConfig>,
    in_flight: HashSet<i32>,
    outcomes_tx: mpsc::UnboundedSender<FetchOutcome>,
    outcomes: mpsc::UnboundedReceiver<FetchOutcome>,
    completed: VecDeque<CompletedFetch>,
    /// Topics whose leaders must be looked up again.
    pub stale_topics: BTreeSet<String>,
    sessions: HashMap<i32, FetchSession>,
}

impl Fetcher {
    pub fn new(cluster: Arc<Cluster>, config: Arc<ConsumerConfig>) -> Self {
        let (outcomes_tx, outcomes) = mpsc::unbounded_channel();
        Self {
            cluster,
            config,
            in_flight: HashSet::new(),
            outcomes_tx,
            outcomes,
            completed: VecDeque::new(),
            stale_topics: BTreeSet::new(),
            sessions: HashMap::new(),
        }
    }

    /// Sends a Fetch to each leader without one in flight, for its
    /// fetchable partitions.
    pub async fn send_fetches(&mut self, assignment: &mut Assignment) -> Result<()> {
        let metadata = self.cluster.metadata();
        let mut by_node: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
        for (tp, _) in assignment.iter().filter(|(_, s)| s.fetchable()) {
            let leader = metadata.topic(&tp.topic).and_then(|t| t.partition(tp.partition)).map(|p| p.leader);
            match leader {
                Some(node) if node >= 0 => {
                    if !self.in_flight.contains(&node) {
                        by_node.entry(node).or_default().push(tp.clone());
                    }
                }
                _ => {
                    self.stale_topics.insert(tp.topic.clone());
                }
            }
        }
        for (node, partitions) in by_node {
            let connection = match self.cluster.connection(node).await {
                Ok(connection) => connection,
                Err(e) => {
                    tracing::debug!("fetch: broker {node} unreachable: {e}");
                    self.stale_topics.extend(partitions.into_iter().map(|tp| tp.topic));
                    continue;
                }
            };
            let version = connection.version(ApiKey::Fetch)?;
            let wanted: BTreeMap<TopicPartition, i64> =
                partitions.iter().map(|tp| (tp.clone(), assignment[tp].fetch_offset)).collect();
            let request = match version >= FIRST_SESSION_VERSION {
                true => self.sessions.entry(node).or_default().next_request(&wanted),
                false => SessionRequest {
                    session_id: SESSIONLESS.0,
                    epoch: SESSIONLESS.1,
                    send: wanted.into_iter().collect(),
                    forget: Vec::new(),
                },
            };
            let pending = match connection.start(&self.request(request), version).await {
                Ok(pending) => pending,
                Err(e) => {
                    tracing::debug!("fetch: broker {node} connection failed: {e}");
                    self.sessions.remove(&node);
                    self.stale_topics.extend(partitions.into_iter().map(|tp| tp.topic));
                    continue;
                }
            };
            let sent: Vec<(TopicPartition, u64)> = partitions
                .into_iter()
                .map(|tp| {
                    let state = assignment.get_mut(&tp).expect("chosen from the assignment");
                    state.in_flight = true;
                    let epoch = state.epoch;
                    (tp, epoch)
                })
                .collect();
            self.in_flight.insert(node);
            let outcomes = self.outcomes_tx.clone();
            tokio::spawn(async move {
                let result = pending.wait().await;
                let _ = outcomes.send(FetchOutcome { node, sent, result });
            });
        }
        Ok(())
    }

    fn request(&self, session: SessionRequest) -> FetchRequest {
        let mut topics: Vec<FetchTopic> = Vec::new();
        for (tp, fetch_offset) in session.send {
            let partition = FetchPartition::default()
                .with_partition(tp.partition)
                .with_current_leader_epoch(-1)
                .with_last_fetched_epoch(-1)
                .with_log_start_offset(-1)
                .with_fetch_offset(fetch_offset)
                .with_partition_max_bytes(self.config.max_partition_fetch_bytes);
            match topics.last_mut().filter(|t| t.topic.0.as_str() == tp.topic) {
                Some(topic) => topic.partitions.push(partition),
                None => topics.push(
                    FetchTopic::default().with_topic(topic_name(&tp.topic)).with_partitions(vec![partition]),
                ),
            }
        }
        let mut forgotten: Vec<ForgottenTopic> = Vec::new();
        for tp in session.forget {
            match forgotten.last_mut().filter(|t| t.topic.0.as_str() == tp.topic) {
                Some(topic) => topic.partitions.push(tp.partition),
                None => forgotten.push(
                    ForgottenTopic::default()
                        .with_topic(topic_name(&tp.topic))
                        .with_partitions(vec![tp.partition]),
                ),
            }
        }
        FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(self.config.fetch_max_wait.as_millis().min(i32::MAX as u128) as i32)
            .with_min_bytes(self.config.fetch_min_bytes)
            .with_max_bytes(self.config.fetch_max_bytes)
            .with_isolation_level(self.config.isolation_level as i8)
            .with_session_id(session.session_id)
            .with_session_epoch(session.epoch)
            .with_topics(topics)
            .with_forgotten_topics_data(forgotten)
    }

    /// Whether any Fetch is on the wire.
    pub fn has_in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// Waits until `deadline` for one response, then takes in any others
    /// that have arrived.
    pub async fn wait_for_responses(
        &mut self,
        assignment: &mut Assignment,
        deadline: tokio::time::Instant,
    ) -> Result<()> {
        let first = match tokio::time::timeout_at(deadline, self.outcomes.recv()).await {
            Ok(Some(outcome)) => outcome,
            _ => return Ok(()),
        };
        self.handle(first, assignment)?;
        while let Ok(outcome) = self.outcomes.try_recv() {
            self.handle(outcome, assignment)?;
        }
        Ok(())
    }

    fn handle(&mut self, outcome: FetchOutcome, assignment: &mut Assignment) -> Result<()> {
        self.in_flight.remove(&outcome.node);
        let mut sent: HashMap<TopicPartition, u64> = HashMap::new();
        for (tp, epoch) in outcome.sent {
            if let Some(state) = assignment.get_mut(&tp) {
                state.in_flight = false;
            }
            sent.insert(tp, epoch);
        }
        let response = match outcome.result {
            Ok(response) => response,
            Err(e) => {
                tracing::debug!("fetch from broker {} failed: {e}", outcome.node);
                self.sessions.remove(&outcome.node);
                self.stale_topics.extend(sent.into_keys().map(|tp| tp.topic));
                return Ok(());
            }
        };
        if let Some(session) = self.sessions.get_mut(&outcome.node) {
            session.on_response(response.error_code, response.session_id);
        }
        if let Some(error) = Error::from_code(response.error_code, None) {
            tracing::debug!("fetch from broker {} failed: {error}", outcome.node);
            self.stale_topics.extend(sent.into_keys().map(|tp| tp.topic));
            return Ok(());
        }
        let mut first_error = None;
        for topic in response.responses {
            let name: Arc<str> = Arc::from(topic.topic.0.as_str());
            for data in topic.partitions {
                let tp = TopicPartition { topic: name.to_string(), partition: data.partition_index };
                let Some(&epoch) = sent.get(&tp) else { continue };
                let Some(state) = assignment.get_mut(&tp).filter(|s| s.epoch == epoch) else { continue };
                if let Err(e) = self.take_partition(tp, name.clone(), epoch, state, data) {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn take_partition(
        &mut self,
        tp: TopicPartition,
        topic: Arc<str>,
        epoch: u64,
        state: &mut PartitionState,
        data: PartitionData,
    ) -> Result<()> {
        match KafkaCode::from_code(data.error_code) {
            None => {}
            Some(code) if code.code() == 1 => {
                // OFFSET_OUT_OF_RANGE: start over by the reset policy.
                let offset = state.fetch_offset;
                return match self.config.auto_offset_reset {
                    OffsetReset::None => Err(Error::Kafka {
                        code,
                        message: Some(format!("{tp} at offset {offset}, and auto.offset.reset is none")),
                    }),
                    strategy => {
                        tracing::info!("{tp}: offset {offset} is out of range; resetting to {strategy:?}");
                        state.request_reset(strategy);
                        Ok(())
                    }
                };
            }
            Some(code) if code.is_retriable() || code.invalidates_metadata() => {
                self.stale_topics.insert(tp.topic);
                return Ok(());
            }
            Some(code) => return Err(Error::Kafka { code, message: Some(format!("fetching {tp}")) }),
        }
        state.high_watermark = data.high_watermark;
        state.last_stable_offset = data.last_stable_offset;
        state.log_start_offset = data.log_start_offset;
        let records = data.records.unwrap_or_default();
        let Some(next_offset) = next_fetch_offset(&records)? else {
            if !records.is_empty() {
                return Err(Error::Protocol {
                    addr: "fetch".into(),
                    reason: format!(
                        "{tp}: the batch at offset {} is larger than max.partition.fetch.bytes={}",
                        state.fetch_offset, self.config.max_partition_fetch_bytes
                    ),
                });
            }
            return Ok(());
        };
        state.fetch_offset = next_offset;
        state.buffered += 1;
        let mut aborted: Vec<(i64, i64)> = data
            .aborted_transactions
            .unwrap_or_default()
            .into_iter()
            .map(|a| (a.first_offset, a.producer_id.0))
            .collect();
        aborted.sort_unstable();
        self.completed.push_back(CompletedFetch {
            tp,
            topic,
            epoch,
            batches: Batches::new(records),
            records: None,
            aborted: aborted.into(),
            aborting: HashSet::new(),
        });
        Ok(())
    }

    /// Hands out up to `max` records from the buffered responses, moving
    /// positions past them (and past control and aborted batches).
    pub fn drain(&mut self, assignment: &mut Assignment, max: usize) -> Result<Vec<ConsumerRecord>> {
        let mut out = Vec::new();
        while out.len() < max {
            // The oldest response of a partition that is not paused: a
            // partition's responses stay in the order they were fetched.
            let paused = |f: &CompletedFetch| assignment.get(&f.tp).is_some_and(|s| s.paused);
            let Some(index) = self.completed.iter().position(|f| !paused(f)) else { break };
            let fetch = &mut self.completed[index];
            let state =
                assignment.get_mut(&fetch.tp).filter(|s| s.epoch == fetch.epoch && s.position.is_some());
            let Some(state) = state else {
                self.completed.remove(index);
                continue;
            };
            match fetch.next_records(state, max - out.len(), self.config.check_crcs, &mut out) {
                Ok(true) => {}
                Ok(false) => {
                    state.buffered = state.buffered.saturating_sub(1);
                    self.completed.remove(index);
                }
                Err(e) => {
                    // Fetch again from where reading stopped: a damaged
                    // batch keeps failing there, it is never skipped.
                    self.completed.remove(index);
                    if let Some(position) = state.position {
                        state.seek(position);
                    }
                    return if out.is_empty() { Err(e) } else { Ok(out) };
                }
            }
        }
        Ok(out)
    }

    /// Drops everything buffered (after a revocation, or at close).
    pub fn clear(&mut self) {
        self.completed.clear();
    }
}

impl CompletedFetch {
    /// Appends up to `max` records to `out`; `Ok(false)` once exhausted.
    fn next_records(
        &mut self,
        state: &mut PartitionState,
        max: usize,
        check_crcs: bool,
        out: &mut Vec<ConsumerRecord>,
    ) -> Result<bool> {
        let mut taken = 0;
        while taken < max {
            if let Some((records, batch_end)) = self.records.as_mut() {
                match records.next() {
                    Some(record) => {
                        let record = record?;
                        if state.position.is_some_and(|position| record.offset >= position) {
                            state.position = Some(record.offset + 1);
                            out.push(record);
                            taken += 1;
                        }
                        continue;
                    }
                    None => {
                        // A compacted batch may end past its last record.
                        let end = *batch_end;
                        state.position = state.position.map(|position| position.max(end));
                        self.records = None;
                    }
                }
            }
            let Some(batch) = self.batches.next().transpose()? else { return Ok(false) };
            let end = batch.header.last_offset().saturating_add(1);
            if state.position.is_some_and(|position| end <= position) {
                continue;
            }
            if check_crcs {
                batch.check_crc()?;
            }
            if self.is_hidden(&batch) {
                state.position = state.position.map(|position| position.max(end));
                continue;
            }
            let records = batch.records(self.topic.clone(), self.tp.partition)?;
            self.records = Some((records, end));
        }
        Ok(true)
    }

    /// Control batches, and for read_committed the batches of aborted
    /// transactions, are never handed out.
    fn is_hidden(&mut self, batch: &Batch) -> bool {
        let header = &batch.header;
        while let Some(&(first_offset, producer_id)) = self.aborted.front() {
            if first_offset > header.last_offset() {
                break;
            }
            self.aborting.insert(producer_id);
            self.aborted.pop_front();
        }
        if header.is_control() {
            if !batch.is_commit_marker() {
                self.aborting.remove(&header.producer_id);
            }
            return true;
        }
        header.is_transactional() && self.aborting.contains(&header.producer_id)
    }
}

/// The offset after the last whole batch in `records`, if there is one.
fn next_fetch_offset(records: &Bytes) -> Result<Option<i64>> {
    let mut next = None;
    for batch in Batches::new(records.clone()) {
        next = Some(batch?.header.last_offset().saturating_add(1));
    }
    Ok(next)
}
