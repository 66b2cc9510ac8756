//! The sender task: drains ready batches, sends one Produce request per
//! leader, and turns responses into delivery outcomes or retries.
//!
//! Up to `max.in.flight.requests.per.connection` requests per broker are in
//! flight at once; the connection pipelines them. A retriable failure puts
//! the batch back in its queue (in sequence order) with an exponential
//! backoff, and an error that means stale metadata triggers a refresh;
//! `retries` and `delivery.timeout.ms` bound both.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::task::JoinSet;

use super::accumulator::{LeaderBatches, ProducerBatch, RoutedBatch};
use super::{Delivered, Shared};
use crate::connection::Splice;
use crate::error::{Error, KafkaCode, Result};

const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
/// How long to sleep when nothing at all is pending.
const IDLE_WAIT: Duration = Duration::from_secs(3600);

type Batches = Vec<RoutedBatch>;
/// A partition's answer: error code, base offset, log append time, message.
type PartitionAnswer = (i16, i64, i64, Option<String>);
type InFlight = (i32, Batches, Result<ProduceResponse>);

struct Sender {
    shared: Arc<Shared>,
    in_flight: JoinSet<InFlight>,
    requests_per_broker: HashMap<i32, usize>,
    /// Topics whose metadata looked stale; refreshed before the next drain.
    stale: Vec<Arc<str>>,
    last_refresh: Option<Instant>,
    /// Partitions where a batch the broker refused left a gap, with the
    /// refused batch's sequence: nothing new is sent until the in-flight
    /// requests are back and the epoch has moved on.
    sequence_gaps: HashMap<(Arc<str>, i32), i32>,
}

/// Runs until the producer is closed and everything has completed.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut sender = Sender {
        shared,
        in_flight: JoinSet::new(),
        requests_per_broker: HashMap::new(),
        stale: Vec::new(),
        last_refresh: None,
        sequence_gaps: HashMap::new(),
    };
    loop {
        sender.refresh_stale_metadata().await;
        let waiting_for_bump = !sender.sequence_gaps.is_empty();
        let resolving = waiting_for_bump
            && sender.in_flight.is_empty()
            && sender.shared.lock().has_unresolved_retries(&sender.sequence_gaps);
        if waiting_for_bump && sender.in_flight.is_empty() && !resolving {
            sender.bump_epoch().await;
        }
        // Retries that may already be written go out under the old epoch
        // first, so the bump never renumbers (and duplicates) them.
        let next_ready = match sender.sequence_gaps.is_empty() || resolving {
            true => sender.send_ready().await,
            false => None,
        };
        if sender.is_done() {
            break;
        }
        let wake_at = next_ready.unwrap_or_else(|| Instant::now() + IDLE_WAIT);
        tokio::select! {
            _ = sender.shared.wake.notified() => {}
            Some(joined) = sender.in_flight.join_next() => match joined {
                Ok(done) => sender.complete(done),
                Err(e) => tracing::error!("produce request task failed: {e}"),
            },
            _ = tokio::time::sleep_until(wake_at.into()) => {}
        }
    }
}

impl Sender {
    fn is_done(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
            && self.in_flight.is_empty()
            && self.shared.lock().is_empty()
    }

    /// Everything counts as ready while someone flushes, the producer is
    /// closing, or `send` is waiting for buffer memory.
    fn send_now(&self) -> bool {
        self.shared.flushes.load(Ordering::Acquire) > 0
            || self.shared.closed.load(Ordering::Acquire)
            || self.shared.memory.available_permits() < self.shared.config.batch_size
    }

    /// Drains and sends until nothing more is ready; returns when the
    /// next lingering batch will be.
    async fn send_ready(&mut self) -> Option<Instant> {
        loop {
            let max_in_flight = self.shared.config.max_in_flight;
            let per_broker = &self.requests_per_broker;
            let drained = self.shared.lock().drain(Instant::now(), self.send_now(), |leader| {
                per_broker.get(&leader).copied().unwrap_or(0) < max_in_flight
            });
            for batch in drained.expired {
                let error = Error::Kafka {
                    code: KafkaCode::from_code(7).expect("REQUEST_TIMED_OUT"),
                    message: Some("delivery.timeout.ms expired before the batch could be sent".into()),
                };
                self.finish(batch, Err(error));
            }
            for topic in drained.stale_topics {
                self.mark_stale(topic);
            }
            if drained.requests.is_empty() {
                return drained.next_ready;
            }
            for request in drained.requests {
                self.dispatch(request).await;
            }
        }
    }

    /// Seals the batches, writes one Produce request to the leader and
    /// parks its response in `in_flight`.
    async fn dispatch(&mut self, request: LeaderBatches) {
        let LeaderBatches { leader, batches } = request;
        let batches = self.seal_all(batches);
        let config = &self.shared.config;
        let connection = match self.shared.cluster.connection(leader).await {
            Ok(connection) => connection,
            Err(e) => return self.retry_or_fail_all(batches, e),
        };
        let version = match connection.version(ApiKey::Produce) {
            Ok(version) => version,
            Err(e) => {
                for (topic, partition, batch) in batches {
                    self.fail_unsent(topic, partition, batch, e.clone());
                }
                return;
            }
        };
        let (produce, splices) = produce_request(&batches, config.acks, config.client.request_timeout);
        if config.acks == 0 {
            let result = connection.send_without_response(&produce, version, &splices).await;
            let delivered = result.map(|()| Delivered { base_offset: -1, log_append_time: -1 });
            return batches.into_iter().for_each(|(_, _, b)| self.finish(b, delivered.clone()));
        }
        match connection.start_spliced(&produce, version, &splices).await {
            Ok(pending) => {
                *self.requests_per_broker.entry(leader).or_default() += 1;
                self.in_flight.spawn(async move { (leader, batches, pending.wait().await) });
            }
            Err(e) => self.retry_or_fail_all(batches, e),
        }
    }

    /// Encodes each batch once (a retry resends the same bytes); a codec
    /// failure completes that batch with the error.
    fn seal_all(&mut self, batches: Batches) -> Batches {
        let (compression, identity) = (self.shared.config.compression, self.shared.identity());
        let mut sealed = Vec::with_capacity(batches.len());
        for (topic, partition, mut batch) in batches {
            if batch.sealed.is_none() {
                match batch.builder.seal(compression, identity, batch.base_sequence) {
                    Ok(bytes) => batch.sealed = Some(bytes),
                    Err(e) => {
                        self.fail_unsent(topic, partition, batch, e);
                        continue;
                    }
                }
            }
            sealed.push((topic, partition, batch));
        }
        sealed
    }

    /// Applies a Produce response (or the request's failure) to its batches.
    fn complete(&mut self, (leader, batches, result): InFlight) {
        if let Some(count) = self.requests_per_broker.get_mut(&leader) {
            *count = count.saturating_sub(1);
        }
        let response = match result {
            Ok(response) => response,
            Err(e) => return self.retry_or_fail_all(batches, e),
        };
        let mut outcomes: HashMap<(&str, i32), PartitionAnswer> = HashMap::new();
        for topic in &response.responses {
            for p in &topic.partition_responses {
                let message = p.error_message.as_ref().map(|m| m.to_string());
                outcomes.insert(
                    (topic.name.0.as_str(), p.index),
                    (p.error_code, p.base_offset, p.log_append_time_ms, message),
                );
            }
        }
        let mut results = Vec::with_capacity(batches.len());
        for (topic, partition, batch) in batches {
            let outcome = outcomes.get(&(&*topic, partition)).cloned();
            results.push((topic, partition, batch, outcome));
        }
        for (topic, partition, batch, outcome) in results {
            match outcome {
                Some((0, base_offset, log_append_time, _)) => {
                    self.finish(batch, Ok(Delivered { base_offset, log_append_time }))
                }
                // The broker already has this batch: a retry of one whose
                // response was lost. Kafka treats it as delivered.
                Some((DUPLICATE_SEQUENCE_NUMBER, ..)) => {
                    self.finish(batch, Ok(Delivered { base_offset: -1, log_append_time: -1 }))
                }
                Some((code, _, _, message)) => {
                    let error = Error::from_code(code, message.as_deref()).expect("non-zero code");
                    self.retry_or_fail(topic, partition, batch, error);
                }
                None => {
                    let error = Error::Protocol {
                        addr: format!("broker {leader}"),
                        reason: format!("Produce response omits {topic}-{partition}"),
                    };
                    self.finish(batch, Err(error));
                }
            }
        }
    }

    fn retry_or_fail_all(&mut self, batches: Batches, error: Error) {
        for (topic, partition, batch) in batches {
            self.retry_or_fail(topic, partition, batch, error.clone());
        }
    }

    /// Requeues the batch with backoff if the error is worth retrying and
    /// time and retries remain; otherwise completes it with the error.
    fn retry_or_fail(&mut self, topic: Arc<str>, partition: i32, mut batch: ProducerBatch, error: Error) {
        if error.invalidates_metadata() {
            self.mark_stale(topic.clone());
        }
        let config = &self.shared.config;
        let idempotent = self.shared.identity().producer_id >= 0;
        let sequence_gap =
            idempotent && error.kafka_code().map(KafkaCode::code) == Some(OUT_OF_ORDER_SEQUENCE_NUMBER);
        if sequence_gap && !batch.maybe_written && batch.base_sequence >= 0 {
            // The broker holds none of this batch yet went past its
            // sequence: a leader with no state of this producer took later
            // batches first (Kafka accepts any sequence then). Only a new
            // epoch, numbered from this batch, can write it.
            self.sequence_gaps
                .entry((topic.clone(), partition))
                .and_modify(|gap| *gap = (*gap).min(batch.base_sequence))
                .or_insert(batch.base_sequence);
        }
        batch.maybe_written |= !refused_unwritten(&error) && !refused_before_append(&error);
        let backoff = config.client.backoff(batch.attempts + 1);
        let in_time = batch.created.elapsed() + backoff < config.delivery_timeout;
        if (error.is_retriable() || sequence_gap) && batch.attempts < config.retries && in_time {
            tracing::debug!("retrying {topic}-{partition} after {error}");
            batch.attempts += 1;
            batch.retry_at = Some(Instant::now() + backoff);
            self.shared.lock().requeue(&topic, partition, batch);
            return;
        }
        if idempotent && batch.base_sequence >= 0 && refused_unwritten(&error) {
            return self.fail_unsent(topic, partition, batch, error);
        }
        self.finish(batch, Err(error));
    }

    /// Fails a batch that never left: a numbered one leaves a gap.
    fn fail_unsent(&mut self, topic: Arc<str>, partition: i32, batch: ProducerBatch, error: Error) {
        if batch.base_sequence >= 0 {
            self.sequence_gaps.entry((topic, partition)).or_insert(batch.base_sequence);
        }
        self.finish(batch, Err(error));
    }

    /// Moves to the next epoch and renumbers what waits to be retried;
    /// the partitions take the new epoch from sequence 0.
    async fn bump_epoch(&mut self) {
        self.sequence_gaps.clear();
        let current = self.shared.identity();
        match super::bumped(&self.shared.cluster, current).await {
            Ok(identity) => {
                tracing::info!(
                    producer_id = identity.producer_id,
                    epoch = identity.producer_epoch,
                    "a refused batch left a sequence gap; producing on under a new epoch"
                );
                *self.shared.identity.lock().unwrap_or_else(|e| e.into_inner()) = identity;
                self.shared.lock().restart_sequences(identity);
            }
            Err(e) => tracing::warn!("cannot move to a new producer epoch: {e}"),
        }
    }

    fn finish(&self, batch: ProducerBatch, result: Result<Delivered>) {
        batch.outcome.complete(result);
        let (records, bytes) = (batch.record_count(), batch.reserved_bytes);
        if let Some(buffer) = batch.into_buffer() {
            self.shared.lock().recycle(buffer);
        }
        self.shared.finished(records, bytes);
    }

    fn mark_stale(&mut self, topic: Arc<str>) {
        if !self.stale.contains(&topic) {
            self.stale.push(topic);
        }
    }

    /// Refreshes metadata for stale topics, at most once per
    /// `retry.backoff.ms`, and hands the new leaders to the accumulator.
    async fn refresh_stale_metadata(&mut self) {
        let backoff = self.shared.config.client.retry_backoff;
        if self.stale.is_empty() || self.last_refresh.is_some_and(|at| at.elapsed() < backoff) {
            return;
        }
        self.last_refresh = Some(Instant::now());
        let topics: Vec<String> = self.stale.drain(..).map(|t| t.to_string()).collect();
        match self.shared.cluster.refresh(Some(&topics), false).await {
            Ok(metadata) => {
                let mut accumulator = self.shared.lock();
                for name in &topics {
                    if let Some(info) = metadata.topic(name) {
                        accumulator.add_topic(info.clone());
                    }
                }
            }
            Err(e) => {
                tracing::debug!("metadata refresh for {topics:?} failed: {e}");
                self.stale.extend(topics.iter().map(|t| Arc::from(t.as_str())));
            }
        }
    }
}

/// The Produce request for `batches`, each batch spliced in rather than
/// copied into the frame.
/// The broker refused the batch, so it holds none of its records and the
/// partition still expects its sequence: later batches can only go in
/// under a new epoch. (Timeouts and retriable errors leave it unknown
/// whether the batch was written; fencing errors end the producer.)
fn refused_unwritten(error: &Error) -> bool {
    const INVALID_PRODUCER_EPOCH: i16 = 47;
    const PRODUCER_FENCED: i16 = 90;
    matches!(error, Error::Kafka { code, .. }
        if !code.is_retriable() && !matches!(code.code(), INVALID_PRODUCER_EPOCH | PRODUCER_FENCED))
}

/// Retriable refusals a broker gives before it appends anything: the
/// partition is not (yet) led there, or the ISR is too small to take it.
fn refused_before_append(error: &Error) -> bool {
    use kafka_protocol::error::ResponseError as E;
    error.kafka_code().is_some_and(|code| {
        matches!(
            code.0,
            E::UnknownTopicOrPartition | E::LeaderNotAvailable | E::NotEnoughReplicas | E::UnknownTopicId
        )
    })
}

fn produce_request(batches: &Batches, acks: i16, timeout: Duration) -> (ProduceRequest, Vec<Splice>) {
    let mut topics: Vec<TopicProduceData> = Vec::new();
    let mut splices = Vec::with_capacity(batches.len());
    for (topic, partition, batch) in batches {
        let splice = Splice::new(batch.sealed.clone().unwrap_or_default());
        let data =
            PartitionProduceData::default().with_index(*partition).with_records(Some(splice.marker.clone()));
        splices.push(splice);
        match topics.iter_mut().find(|t| t.name.0.as_str() == &**topic) {
            Some(existing) => existing.partition_data.push(data),
            None => topics.push(
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                    .with_partition_data(vec![data]),
            ),
        }
    }
    let request = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(timeout.as_millis().min(i32::MAX as u128) as i32)
        .with_topic_data(topics);
    (request, splices)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
    use kafka_protocol::messages::{
        ApiVersionsResponse, BrokerId, InitProducerIdResponse, MetadataResponse, ProducerId, RequestHeader,
        ResponseHeader,
    };
    use kafka_protocol::protocol::{Decodable, Encodable};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::producer::{Producer, ProducerConfig, ProducerRecord};

    /// A one-partition broker whose Produce answers follow `script` (error
    /// codes; 0 means success at offset 42), counting what it is asked.
    /// Once the script is done, batches of `out_of_order_epoch` are
    /// refused as out of order, as by a broker that took later sequences.
    struct FakeBroker {
        addr: String,
        script: Mutex<Vec<i16>>,
        out_of_order_epoch: Option<i16>,
        produces: AtomicUsize,
        metadata_requests: AtomicUsize,
        /// Each produced batch's producer epoch and base sequence.
        sequences: Mutex<Vec<(i16, i32)>>,
    }

    async fn fake_broker(script: &[i16]) -> Arc<FakeBroker> {
        fake_broker_refusing(script, None).await
    }

    async fn fake_broker_refusing(script: &[i16], out_of_order_epoch: Option<i16>) -> Arc<FakeBroker> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let broker = Arc::new(FakeBroker {
            addr: listener.local_addr().unwrap().to_string(),
            script: Mutex::new(script.iter().rev().copied().collect()),
            out_of_order_epoch,
            produces: AtomicUsize::new(0),
            metadata_requests: AtomicUsize::new(0),
            sequences: Mutex::new(Vec::new()),
        });
        let serving = broker.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(serving.clone(), socket));
            }
        });
        broker
    }

    async fn serve(broker: Arc<FakeBroker>, mut socket: TcpStream) {
        while let Ok(size) = socket.read_i32().await {
            let mut frame = BytesMut::zeroed(size as usize);
            if socket.read_exact(&mut frame).await.is_err() {
                return;
            }
            let mut frame = frame.freeze();
            let api = ApiKey::try_from(i16::from_be_bytes([frame[0], frame[1]])).unwrap();
            let version = i16::from_be_bytes([frame[2], frame[3]]);
            let header = RequestHeader::decode(&mut frame, api.request_header_version(version)).unwrap();
            let mut out = BytesMut::new();
            ResponseHeader::default()
                .with_correlation_id(header.correlation_id)
                .encode(&mut out, api.response_header_version(version))
                .unwrap();
            broker.answer(api, version, frame, &mut out);
            let mut sized = BytesMut::new();
            sized.put_i32(out.len() as i32);
            sized.extend_from_slice(&out);
            if socket.write_all(&sized).await.is_err() {
                return;
            }
        }
    }

    impl FakeBroker {
        fn answer(&self, api: ApiKey, version: i16, mut body: Bytes, out: &mut BytesMut) {
            match api {
                ApiKey::ApiVersions => {
                    let keys =
                        [ApiKey::ApiVersions, ApiKey::Metadata, ApiKey::Produce, ApiKey::InitProducerId];
                    let keys = keys.map(|k| {
                        let range = k.valid_versions();
                        ApiVersion::default()
                            .with_api_key(k as i16)
                            .with_min_version(range.min)
                            .with_max_version(range.max)
                    });
                    ApiVersionsResponse::default().with_api_keys(keys.to_vec()).encode(out, version).unwrap()
                }
                ApiKey::Metadata => {
                    self.metadata_requests.fetch_add(1, Ordering::SeqCst);
                    self.metadata().encode(out, version).unwrap()
                }
                ApiKey::InitProducerId => InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(7))
                    .with_producer_epoch(0)
                    .encode(out, version)
                    .unwrap(),
                ApiKey::Produce => {
                    self.produces.fetch_add(1, Ordering::SeqCst);
                    let request = ProduceRequest::decode(&mut body, version).unwrap();
                    let records = request.topic_data[0].partition_data[0].records.clone().unwrap();
                    // The batch header: producer epoch at byte 51, base sequence at 53.
                    let epoch = i16::from_be_bytes([records[51], records[52]]);
                    let sequence = i32::from_be_bytes(records[53..57].try_into().unwrap());
                    self.sequences.lock().unwrap().push((epoch, sequence));
                    let scripted = self.script.lock().unwrap().pop();
                    let code = match scripted {
                        Some(code) => code,
                        None if self.out_of_order_epoch == Some(epoch) => OUT_OF_ORDER_SEQUENCE_NUMBER,
                        None => 0,
                    };
                    let partition = PartitionProduceResponse::default()
                        .with_index(0)
                        .with_error_code(code)
                        .with_base_offset(if code == 0 { 42 } else { -1 });
                    let topic = TopicProduceResponse::default()
                        .with_name(TopicName(StrBytes::from_static_str("t")))
                        .with_partition_responses(vec![partition]);
                    ProduceResponse::default().with_responses(vec![topic]).encode(out, version).unwrap()
                }
                other => panic!("unexpected {other:?}"),
            }
        }

        fn metadata(&self) -> MetadataResponse {
            let (host, port) = self.addr.rsplit_once(':').unwrap();
            MetadataResponse::default()
                .with_brokers(vec![MetadataResponseBroker::default()
                    .with_node_id(BrokerId(1))
                    .with_host(StrBytes::from_string(host.into()))
                    .with_port(port.parse().unwrap())])
                .with_topics(vec![MetadataResponseTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_static_str("t"))))
                    .with_partitions(vec![MetadataResponsePartition::default()
                        .with_leader_id(BrokerId(1))
                        .with_replica_nodes(vec![BrokerId(1)])
                        .with_isr_nodes(vec![BrokerId(1)])])])
        }
    }

    async fn producer(broker: &FakeBroker) -> Producer {
        let mut config = ProducerConfig::new(&broker.addr);
        config.enable_idempotence = Some(false);
        config.acks = 1;
        config.linger = Duration::ZERO;
        config.client.retry_backoff = Duration::from_millis(1);
        Producer::connect(config).await.unwrap()
    }

    #[tokio::test]
    async fn not_leader_refreshes_metadata_and_retries() {
        let broker = fake_broker(&[6, 6]).await; // NOT_LEADER_OR_FOLLOWER twice
        let producer = producer(&broker).await;
        let future = producer.send(ProducerRecord::new("t", b"v")).await.unwrap();
        let delivered = future.wait().await.unwrap();
        assert_eq!((delivered.partition, delivered.offset), (0, 42));
        assert_eq!(broker.produces.load(Ordering::SeqCst), 3);
        assert!(broker.metadata_requests.load(Ordering::SeqCst) >= 3, "refreshed after each NOT_LEADER");
    }

    #[tokio::test]
    async fn a_fatal_error_fails_the_record_without_retry() {
        let broker = fake_broker(&[87]).await; // INVALID_RECORD
        let producer = producer(&broker).await;
        let future = producer.send(ProducerRecord::new("t", b"v")).await.unwrap();
        let error = future.wait().await.unwrap_err();
        assert_eq!(error.kafka_code().unwrap().to_string(), "INVALID_RECORD");
        assert_eq!(broker.produces.load(Ordering::SeqCst), 1);
        producer.flush().await; // nothing left: returns at once
    }

    #[tokio::test]
    async fn retries_stop_at_the_configured_count() {
        let broker = fake_broker(&[6; 10]).await;
        let mut config = ProducerConfig::new(&broker.addr);
        config.enable_idempotence = Some(false);
        config.retries = 2;
        config.client.retry_backoff = Duration::from_millis(1);
        let producer = Producer::connect(config).await.unwrap();
        let error = producer.send(ProducerRecord::new("t", b"v")).await.unwrap().wait().await.unwrap_err();
        assert_eq!(error.kafka_code().unwrap().code(), 6);
        assert_eq!(broker.produces.load(Ordering::SeqCst), 3, "one try and two retries");
    }

    #[tokio::test]
    async fn a_batch_never_written_yet_passed_by_the_broker_goes_in_under_a_new_epoch() {
        // UNKNOWN_TOPIC_OR_PARTITION (the leader did not host the partition
        // yet), then out of order: the broker took later batches meanwhile.
        let broker = fake_broker_refusing(&[3, 45], Some(0)).await;
        let mut config = ProducerConfig::new(&broker.addr);
        config.linger = Duration::ZERO;
        config.delivery_timeout = Duration::from_secs(5);
        config.client.retry_backoff = Duration::from_millis(1);
        let producer = Producer::connect(config).await.unwrap();
        let delivered = producer.send(ProducerRecord::new("t", b"v")).await.unwrap().wait().await;
        assert_eq!(delivered.expect("written under the next epoch").offset, 42);
        assert_eq!(*broker.sequences.lock().unwrap(), [(0, 0), (0, 0), (1, 0)]);
        assert_eq!(producer.identity().unwrap().producer_epoch, 1);
    }
}
