//! Fetch: read batches up to the high watermark, long-polling for
//! `min_bytes` up to `max_wait_ms`, within incremental fetch sessions.
//!
//! The wait is a delayed operation: the fetch registers one `Notify` with
//! every partition it reads *before* reading, so an append that lands between
//! the read and the wait still wakes it; no timer polls the log.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse};
use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

use super::topic_name;
use crate::dispatch::{Answer, EncodeBody, Reply, RequestContext, Splice};
use crate::error::storage_error;
use crate::fetch_session::{FetchPlan, FetchTarget, PartitionNews};
use crate::metrics::GaugeGuard;
use crate::replica::{Isolation, Partition};
use crate::response_errors::ResponseErrors;
use crate::server::Broker;
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
}

impl Outcome {
    fn bytes(&self) -> usize {
        self.records.as_ref().map_or(0, |r| r.len)
    }
}

/// A fetch response whose records stay in the segment files until written.
pub struct FetchReply {
    response: FetchResponse,
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
}

impl Reply for FetchReply {
    fn into_reply(self) -> Answer {
        Answer { body: Box::new(self), send: true }
    }
}

impl ResponseErrors for FetchReply {
    fn visit_errors(&self, visit: &mut dyn FnMut(&dyn std::fmt::Display, i16)) {
        self.response.visit_errors(visit);
    }
}

pub async fn handle(ctx: &RequestContext<'_>, request: FetchRequest) -> FetchReply {
    let broker = ctx.broker;
    let by_id = ctx.api_version >= 13;
    let requested = requested_targets(broker, &request, by_id);
    let forgotten: Vec<(Uuid, String, i32)> = request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| {
            let name = if by_id { resolve_name(broker, t.topic_id) } else { t.topic.0.to_string() };
            let id = if by_id { t.topic_id } else { Uuid::nil() };
            t.partitions.iter().map(move |p| (id, name.clone(), *p))
        })
        .collect();
    let plan =
        match broker.fetch_sessions.begin(request.session_id, request.session_epoch, requested, &forgotten) {
            Ok(plan) => plan,
            Err(error) => {
                // Kafka answers session errors without a session.
                let response = FetchResponse::default().with_error_code(error.code()).with_session_id(0);
                return FetchReply { response, splices: Vec::new() };
            }
        };
    let partitions: Vec<Option<Arc<Partition>>> =
        plan.targets.iter().map(|t| broker.replicas.partition(&t.topic, t.partition)).collect();
    let max_wait = Duration::from_millis(request.max_wait_ms.max(0) as u64).min(MAX_WAIT_CAP);
    // read_committed exists from v4 on.
    let read_committed = ctx.api_version >= 4 && request.isolation_level == READ_COMMITTED;
    let isolation = if read_committed { Isolation::ReadCommitted } else { Isolation::ReadUncommitted };
    let outcomes = read_with_wait(broker, &plan, &partitions, &request, max_wait, isolation).await;
    count_reads(broker, &plan, &outcomes);
    let news: Vec<(PartitionNews, bool)> = outcomes
        .iter()
        .map(|o| {
            let state = PartitionNews {
                high_watermark: o.high_watermark,
                log_start_offset: o.log_start_offset,
                last_stable_offset: o.last_stable_offset,
            };
            (state, o.error.is_some() || o.bytes() > 0)
        })
        .collect();
    let included = broker.fetch_sessions.finish(&plan, &news);
    let (mut responses, splices) = build_responses(&plan, outcomes, &included, read_committed);
    if ctx.api_version < 5 {
        // The log start offset is reported from v5 on.
        responses.iter_mut().flat_map(|t| t.partitions.iter_mut()).for_each(|p| p.log_start_offset = -1);
    }
    if ctx.api_version <= 5 {
        // As Kafka does for clients that may not know KAFKA_STORAGE_ERROR.
        let storage_error = ResponseError::KafkaStorageError.code();
        for p in responses.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
            if p.error_code == storage_error {
                p.error_code = ResponseError::NotLeaderOrFollower.code();
            }
        }
    }
    let response = FetchResponse::default().with_session_id(plan.session_id).with_responses(responses);
    FetchReply { response, splices }
}

fn resolve_name(broker: &Broker, id: Uuid) -> String {
    broker.replicas.topic_by_id(&id).map(|t| t.name.clone()).unwrap_or_default()
}

fn requested_targets(broker: &Broker, request: &FetchRequest, by_id: bool) -> Vec<FetchTarget> {
    let mut targets = Vec::new();
    for topic in &request.topics {
        let (name, id) = if by_id {
            (resolve_name(broker, topic.topic_id), topic.topic_id)
        } else {
            (topic.topic.0.to_string(), Uuid::nil())
        };
        for p in &topic.partitions {
            targets.push(FetchTarget {
                topic: name.clone(),
                topic_id: id,
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                partition_max_bytes: p.partition_max_bytes,
            });
        }
    }
    targets
}

/// Reads until `min_bytes` are available, an error occurs, `max_wait` passes
/// or the broker starts shutting down.
async fn read_with_wait(
    broker: &Broker,
    plan: &FetchPlan,
    partitions: &[Option<Arc<Partition>>],
    request: &FetchRequest,
    max_wait: Duration,
    isolation: Isolation,
) -> Vec<Outcome> {
    let mut stopping = broker.stopping();
    let deadline = Instant::now() + max_wait;
    let waiter = Arc::new(Notify::new());
    loop {
        partitions.iter().flatten().for_each(|p| p.watch(&waiter));
        let outcomes = read_all(plan, partitions, request.max_bytes, isolation);
        let bytes: usize = outcomes.iter().map(Outcome::bytes).sum();
        let satisfied =
            bytes >= request.min_bytes.max(0) as usize || outcomes.iter().any(|o| o.error.is_some());
        if satisfied || Instant::now() >= deadline || *stopping.borrow() {
            return outcomes;
        }
        let _parked = GaugeGuard::new(&broker.metrics.delayed_fetches);
        tokio::select! {
            _ = waiter.notified() => {}
            _ = stopping.changed() => return read_all(plan, partitions, request.max_bytes, isolation),
            // Expired: answer with whatever arrived while waiting.
            _ = tokio::time::sleep_until(deadline) => return read_all(plan, partitions, request.max_bytes, isolation),
        }
    }
}

/// Counts the record bytes going out and the refused reads, per topic.
fn count_reads(broker: &Broker, plan: &FetchPlan, outcomes: &[Outcome]) {
    for (target, outcome) in plan.targets.iter().zip(outcomes) {
        let counted = if outcome.error.is_some() {
            broker.replicas.topic(&target.topic).is_some()
        } else {
            outcome.bytes() > 0
        };
        if !counted {
            continue;
        }
        let metrics = broker.metrics.topic(&target.topic);
        match outcome.error {
            Some(_) => metrics.failed_fetch_requests.fetch_add(1, Ordering::Relaxed),
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
    max_bytes: i32,
    isolation: Isolation,
) -> Vec<Outcome> {
    let mut remaining = max_bytes.max(0) as usize;
    let mut first = true;
    plan.targets
        .iter()
        .zip(partitions)
        .map(|(target, partition)| {
            let Some(partition) = partition else {
                let error = if target.topic.is_empty() {
                    ResponseError::UnknownTopicId
                } else {
                    ResponseError::UnknownTopicOrPartition
                };
                return Outcome {
                    error: Some(error),
                    high_watermark: -1,
                    last_stable_offset: -1,
                    log_start_offset: -1,
                    records: None,
                    aborted: Vec::new(),
                };
            };
            let limit = (target.partition_max_bytes.max(0) as usize).min(remaining);
            let outcome = read_one(partition, target.fetch_offset, limit, first, isolation);
            remaining = remaining.saturating_sub(outcome.bytes());
            first &= outcome.bytes() == 0;
            outcome
        })
        .collect()
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
        },
        Err(e) => Outcome {
            error: Some(storage_error(&e)),
            high_watermark: partition.high_watermark(),
            last_stable_offset: partition.last_stable_offset(),
            log_start_offset: partition.log_start_offset(),
            records: None,
            aborted: Vec::new(),
        },
    }
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

/// Groups partition results by topic, in request order, keeping only the
/// partitions an incremental session includes. Records are represented by
/// splice markers, replaced by the file bytes when the response is written.
fn build_responses(
    plan: &FetchPlan,
    outcomes: Vec<Outcome>,
    included: &[bool],
    read_committed: bool,
) -> (Vec<FetchableTopicResponse>, Vec<Splice>) {
    let mut responses: Vec<FetchableTopicResponse> = Vec::new();
    let mut splices = Vec::new();
    for ((target, outcome), include) in plan.targets.iter().zip(outcomes).zip(included) {
        if !include {
            continue;
        }
        let data = PartitionData::default()
            .with_partition_index(target.partition)
            .with_error_code(outcome.error.map_or(0, |e| e.code()))
            .with_high_watermark(outcome.high_watermark)
            .with_last_stable_offset(outcome.last_stable_offset)
            .with_log_start_offset(outcome.log_start_offset)
            .with_aborted_transactions(read_committed.then(|| aborted_transactions(&outcome.aborted)))
            .with_records(Some(match outcome.records.filter(|r| r.len > 0) {
                Some(slice) => {
                    let splice = Splice::new(slice);
                    let marker = splice.marker.clone();
                    splices.push(splice);
                    marker
                }
                None => Bytes::new(),
            }));
        let same_topic = responses
            .last()
            .is_some_and(|r| r.topic_id == target.topic_id && r.topic.0.as_str() == target.topic.as_str());
        if !same_topic {
            responses.push(
                FetchableTopicResponse::default()
                    .with_topic(topic_name(&target.topic))
                    .with_topic_id(target.topic_id),
            );
        }
        responses.last_mut().expect("pushed above").partitions.push(data);
    }
    (responses, splices)
}
