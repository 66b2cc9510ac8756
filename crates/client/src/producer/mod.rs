//! The producer: records in, acknowledged offsets out.
//!
//! ```text
//! send() ──▶ partitioner ──▶ accumulator ──(ready batches)──▶ sender task ──▶ brokers
//!   │                         per-partition                   one request per
//!   └─ DeliveryFuture ◀───────── batch outcome ◀────────────── leader, ≤ max in flight
//! ```
//!
//! `send` encodes the record into its partition's open batch and returns a
//! [`DeliveryFuture`] at once; it only waits for metadata of a new topic or
//! for `buffer.memory` to free up (back-pressure), each up to `max.block.ms`.
//! The sender task ([`sender`]) drains batches that are full, older than
//! `linger.ms`, or flushed, and sends one Produce request per leader.

pub mod accumulator;
pub mod batch;
pub mod partitioner;
pub mod sender;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, ProducerId};
use kafka_protocol::records::Compression;
use tokio::sync::{Notify, Semaphore};

use crate::cluster::Cluster;
use crate::config::{ClientConfig, Properties, Reader};
use crate::error::{Error, KafkaCode, Result};
use accumulator::Accumulator;
pub use batch::{Header, ProducerIdentity};

/// Producer settings under Kafka's names, with Kafka 4's defaults.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    pub client: ClientConfig,
    /// `acks`: 0, 1 or -1 (`all`, the default).
    pub acks: i16,
    /// `linger.ms` (5): how long a batch waits for more records.
    pub linger: Duration,
    /// `batch.size` (16384): a batch is sent once it holds this many bytes.
    pub batch_size: usize,
    /// `buffer.memory` (33554432): unsent bytes before `send` waits.
    pub buffer_memory: usize,
    /// `max.block.ms` (60000): how long `send` may wait for metadata, and
    /// again for memory (no clock is read on the fast path).
    pub max_block: Duration,
    /// `max.request.size` (1048576): the largest record, and request, sent.
    pub max_request_size: usize,
    /// `compression.type` (none).
    pub compression: Compression,
    /// `retries` (2147483647), bounded in time by `delivery.timeout.ms`.
    pub retries: u32,
    /// `delivery.timeout.ms` (120000): from `send` to a final outcome.
    pub delivery_timeout: Duration,
    /// `max.in.flight.requests.per.connection` (5).
    pub max_in_flight: usize,
    /// `enable.idempotence` (true); `None` when left to the default, which
    /// falls back to plain produce when the broker lacks InitProducerId.
    pub enable_idempotence: Option<bool>,
    /// `partitioner.ignore.keys` (false): sticky partitioning for keyed records too.
    pub ignore_keys: bool,
}

impl ProducerConfig {
    pub fn new(bootstrap_servers: &str) -> Self {
        let mut properties = Properties::new();
        properties.insert("bootstrap.servers".into(), bootstrap_servers.into());
        Self::from_properties(&properties).expect("defaults are valid")
    }

    pub fn from_properties(properties: &Properties) -> Result<Self> {
        let read = Reader(properties);
        let acks = match read.string("acks", "all").trim() {
            "all" | "-1" => -1,
            "1" => 1,
            "0" => 0,
            other => return Err(Error::Config(format!("acks={other} is not one of all, -1, 0, 1"))),
        };
        let enable_idempotence = match properties.get("enable.idempotence") {
            None => None,
            Some(_) => Some(read.bool("enable.idempotence", true)?),
        };
        let config = Self {
            client: ClientConfig::from_properties(properties)?,
            acks,
            linger: read.millis("linger.ms", 5)?,
            batch_size: read.parse("batch.size", 16_384usize)?.max(1),
            buffer_memory: read.parse("buffer.memory", 33_554_432usize)?,
            max_block: read.millis("max.block.ms", 60_000)?,
            max_request_size: read.parse("max.request.size", 1_048_576usize)?,
            compression: batch::parse_compression(&read.string("compression.type", "none"))?,
            retries: read.parse("retries", i32::MAX as u32)?,
            delivery_timeout: read.millis("delivery.timeout.ms", 120_000)?,
            max_in_flight: read.parse("max.in.flight.requests.per.connection", 5usize)?.max(1),
            enable_idempotence,
            ignore_keys: read.bool("partitioner.ignore.keys", false)?,
        };
        config.check_idempotence()?;
        Ok(config)
    }

    /// Kafka's rule: explicit idempotence needs acks=all, retries and at
    /// most 5 requests in flight; when only defaulted, any of those
    /// settings turns it off instead.
    fn check_idempotence(&self) -> Result<()> {
        if self.enable_idempotence == Some(true) && !self.idempotence_compatible() {
            return Err(Error::Config(
                "enable.idempotence=true needs acks=all, retries > 0 and max.in.flight.requests.per.connection <= 5"
                    .into(),
            ));
        }
        Ok(())
    }

    fn idempotence_compatible(&self) -> bool {
        self.acks == -1 && self.retries > 0 && self.max_in_flight <= 5
    }

    /// Whether to ask for a producer id at start.
    pub fn wants_idempotence(&self) -> bool {
        self.enable_idempotence.unwrap_or(true) && self.idempotence_compatible()
    }
}

/// One record to send. Borrowed: the bytes are copied into the batch.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProducerRecord<'a> {
    pub topic: &'a str,
    /// An explicit partition; otherwise the key (or stickiness) decides.
    pub partition: Option<i32>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [Header<'a>],
    /// CreateTime in ms; now when `None`.
    pub timestamp: Option<i64>,
}

impl<'a> ProducerRecord<'a> {
    pub fn new(topic: &'a str, value: &'a [u8]) -> Self {
        Self { topic, value: Some(value), ..Self::default() }
    }

    pub fn with_key(mut self, key: &'a [u8]) -> Self {
        self.key = Some(key);
        self
    }
}

/// Where an acknowledged record landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    pub topic: Arc<str>,
    pub partition: i32,
    /// -1 with acks=0, where the broker does not say.
    pub offset: i64,
    /// CreateTime, or the broker's LogAppendTime when the topic uses it.
    pub timestamp: i64,
}

/// The outcome of a whole batch, shared by the futures of its records.
#[derive(Debug)]
pub struct BatchOutcome {
    topic: Arc<str>,
    partition: i32,
    result: OnceLock<(Result<Delivered>, Instant)>,
    done: Notify,
}

#[derive(Debug, Clone, Copy)]
struct Delivered {
    base_offset: i64,
    log_append_time: i64,
}

impl BatchOutcome {
    fn new(topic: Arc<str>, partition: i32) -> Arc<Self> {
        Arc::new(Self { topic, partition, result: OnceLock::new(), done: Notify::new() })
    }

    /// Records the outcome once; later calls are ignored.
    fn complete(&self, result: Result<Delivered>) {
        if self.result.set((result, Instant::now())).is_ok() {
            self.done.notify_waiters();
        }
    }
}

/// The pending outcome of one `send`.
#[derive(Debug)]
pub struct DeliveryFuture {
    outcome: Arc<BatchOutcome>,
    index: i32,
    timestamp: i64,
}

impl DeliveryFuture {
    /// The outcome if it is known, without waiting.
    pub fn try_result(&self) -> Option<Result<RecordMetadata>> {
        self.outcome.result.get().map(|(result, _)| self.metadata(result))
    }

    /// When the outcome became known (for latency measurements).
    pub fn completed_at(&self) -> Option<Instant> {
        self.outcome.result.get().map(|(_, at)| *at)
    }

    /// Waits for the broker's acknowledgement or the final error.
    pub async fn wait(&self) -> Result<RecordMetadata> {
        loop {
            let notified = self.outcome.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(result) = self.try_result() {
                return result;
            }
            notified.await;
        }
    }

    fn metadata(&self, result: &Result<Delivered>) -> Result<RecordMetadata> {
        let delivered = result.as_ref().map_err(Clone::clone)?;
        let offset =
            if delivered.base_offset < 0 { -1 } else { delivered.base_offset + i64::from(self.index) };
        let timestamp =
            if delivered.log_append_time >= 0 { delivered.log_append_time } else { self.timestamp };
        Ok(RecordMetadata {
            topic: self.outcome.topic.clone(),
            partition: self.outcome.partition,
            offset,
            timestamp,
        })
    }
}

/// State shared by `Producer` handles and the sender task.
pub(crate) struct Shared {
    config: ProducerConfig,
    cluster: Arc<Cluster>,
    accumulator: Mutex<Accumulator>,
    /// Wakes the sender: a batch filled up, a partition got its first
    /// batch, a flush or close began.
    wake: Notify,
    /// `buffer.memory`, in bytes of encoded records not yet acknowledged.
    memory: Semaphore,
    /// Records sent but not yet completed; flush waits for zero.
    unfinished: AtomicUsize,
    idle: Notify,
    flushes: AtomicUsize,
    closed: AtomicBool,
    /// The producer id and epoch; the epoch moves on when a failed batch
    /// leaves a gap in a partition's sequence numbers.
    identity: Mutex<ProducerIdentity>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Accumulator> {
        self.accumulator.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn identity(&self) -> ProducerIdentity {
        *self.identity.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Called by the sender as batches finish.
    fn finished(&self, records: usize, bytes: usize) {
        self.memory.add_permits(bytes);
        if self.unfinished.fetch_sub(records, Ordering::AcqRel) == records {
            self.idle.notify_waiters();
        }
    }
}

/// A Kafka producer. Clone it to share; `close` (or dropping every clone
/// after `flush`) stops the sender task.
#[derive(Clone)]
pub struct Producer {
    shared: Arc<Shared>,
    /// Why idempotence is off although it was left at its default.
    idempotence_fallback: Option<Arc<str>>,
    _closer: Arc<Closer>,
}

/// Closes the producer when the last handle goes: the sender task then
/// sends what is buffered and exits instead of waiting forever.
struct Closer(Arc<Shared>);

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.wake.notify_one();
    }
}

impl Producer {
    /// Connects, obtains a producer id when idempotence is on, and starts
    /// the sender task on the current tokio runtime.
    pub async fn connect(config: ProducerConfig) -> Result<Self> {
        let cluster = Cluster::connect(config.client.clone()).await?;
        Self::with_cluster(config, cluster).await
    }

    pub async fn with_cluster(config: ProducerConfig, cluster: Arc<Cluster>) -> Result<Self> {
        let (identity, idempotence_fallback) = init_producer_id(&config, &cluster).await?;
        let mut accumulator = Accumulator::new(&config);
        accumulator.set_idempotent(identity != ProducerIdentity::NONE);
        let shared = Arc::new(Shared {
            accumulator: Mutex::new(accumulator),
            memory: Semaphore::new(config.buffer_memory.min(Semaphore::MAX_PERMITS)),
            wake: Notify::new(),
            unfinished: AtomicUsize::new(0),
            idle: Notify::new(),
            flushes: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            identity: Mutex::new(identity),
            config,
            cluster,
        });
        tokio::spawn(sender::run(shared.clone()));
        let closer = Arc::new(Closer(shared.clone()));
        Ok(Self { shared, idempotence_fallback, _closer: closer })
    }

    /// The producer id and epoch in use, `None` without idempotence.
    pub fn identity(&self) -> Option<ProducerIdentity> {
        let identity = self.shared.identity();
        (identity != ProducerIdentity::NONE).then_some(identity)
    }

    /// Set when idempotence was left on by default but the broker cannot
    /// provide it; the producer then runs without.
    pub fn idempotence_fallback(&self) -> Option<&str> {
        self.idempotence_fallback.as_deref()
    }

    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.shared.cluster
    }

    /// Appends `record` to its partition's batch; the future resolves when
    /// the broker acknowledges it (or it finally fails).
    pub async fn send(&self, record: ProducerRecord<'_>) -> Result<DeliveryFuture> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(Error::ProducerClosed);
        }
        let timestamp = record.timestamp.unwrap_or_else(now_ms);
        let size = Accumulator::record_size(&record);
        let config = &self.shared.config;
        if size + batch::BATCH_HEADER_BYTES > config.max_request_size.min(config.buffer_memory) {
            return Err(record_too_large(size, config));
        }
        self.reserve_memory(size).await?;
        // Counted before the append: the sender may complete the batch the
        // moment the lock is released, and must not count below zero.
        self.shared.unfinished.fetch_add(1, Ordering::AcqRel);
        let appended = match self.append(&record, timestamp, size).await {
            Ok(appended) => appended,
            Err(e) => {
                self.shared.finished(1, size);
                return Err(e);
            }
        };
        if appended.wake_sender {
            self.shared.wake.notify_one();
        }
        Ok(DeliveryFuture { outcome: appended.outcome, index: appended.index, timestamp })
    }

    /// Appends under the accumulator lock, first fetching metadata for a
    /// topic the producer has not sent to yet.
    async fn append(
        &self,
        record: &ProducerRecord<'_>,
        timestamp: i64,
        size: usize,
    ) -> Result<accumulator::Appended> {
        if let Some(appended) = self.shared.lock().append(record, timestamp, size)? {
            return Ok(appended);
        }
        let lookup = self.shared.cluster.topic(record.topic, true);
        let info = tokio::time::timeout(self.shared.config.max_block, lookup)
            .await
            .map_err(|_| self.blocked_too_long("metadata"))??;
        let mut accumulator = self.shared.lock();
        accumulator.add_topic(info);
        accumulator
            .append(record, timestamp, size)?
            .ok_or_else(|| Error::InvalidRequest(format!("topic {} has no metadata", record.topic)))
    }

    /// Waits for `size` bytes of `buffer.memory`: back-pressure on senders
    /// that outrun the brokers.
    async fn reserve_memory(&self, size: usize) -> Result<()> {
        let permits = u32::try_from(size).unwrap_or(u32::MAX);
        if let Ok(permit) = self.shared.memory.try_acquire_many(permits) {
            permit.forget();
            return Ok(());
        }
        // Let lingering batches go now rather than wait out linger.ms.
        self.shared.wake.notify_one();
        let permit =
            tokio::time::timeout(self.shared.config.max_block, self.shared.memory.acquire_many(permits))
                .await
                .map_err(|_| self.blocked_too_long("buffer.memory"))?
                .map_err(|_| Error::ProducerClosed)?;
        permit.forget();
        Ok(())
    }

    fn blocked_too_long(&self, what: &str) -> Error {
        let ms = self.shared.config.max_block.as_millis();
        Error::Kafka {
            code: KafkaCode::from_code(7).expect("REQUEST_TIMED_OUT"),
            message: Some(format!("waited max.block.ms={ms} for {what}")),
        }
    }

    /// Sends everything buffered now and waits until every record sent so
    /// far has its outcome.
    pub async fn flush(&self) {
        self.shared.flushes.fetch_add(1, Ordering::AcqRel);
        self.shared.wake.notify_one();
        loop {
            let idle = self.shared.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.shared.unfinished.load(Ordering::Acquire) == 0 {
                break;
            }
            idle.await;
        }
        self.shared.flushes.fetch_sub(1, Ordering::AcqRel);
    }

    /// Flushes, then stops the sender task. Later sends fail.
    pub async fn close(&self) {
        self.flush().await;
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake.notify_one();
    }
}

fn record_too_large(size: usize, config: &ProducerConfig) -> Error {
    let (request, memory) = (config.max_request_size, config.buffer_memory);
    Error::Kafka {
        code: KafkaCode::from_code(10).expect("MESSAGE_TOO_LARGE"),
        message: Some(format!(
            "a {size}-byte record exceeds max.request.size={request} or buffer.memory={memory}"
        )),
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Asks for a producer id when idempotence is wanted. A broker without
/// InitProducerId is an error when idempotence was asked for explicitly,
/// and a one-line fallback reason when it was only the default.
async fn init_producer_id(
    config: &ProducerConfig,
    cluster: &Cluster,
) -> Result<(ProducerIdentity, Option<Arc<str>>)> {
    if !config.wants_idempotence() {
        return Ok((ProducerIdentity::NONE, None));
    }
    let connection = cluster.any_connection().await?;
    if connection.version(ApiKey::InitProducerId).is_err() {
        let reason = format!(
            "broker {} does not support InitProducerId, so idempotence is unavailable; set enable.idempotence=false",
            connection.addr()
        );
        if config.enable_idempotence == Some(true) {
            return Err(Error::Config(reason));
        }
        return Ok((ProducerIdentity::NONE, Some(reason.into())));
    }
    Ok((new_producer_id(cluster).await?, None))
}

/// A fresh producer id at epoch 0.
async fn new_producer_id(cluster: &Cluster) -> Result<ProducerIdentity> {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(i32::MAX)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let response = cluster
        .with_retries("InitProducerId", || async { cluster.any_connection().await?.send(&request).await })
        .await?;
    if let Some(error) = Error::from_code(response.error_code, None) {
        return Err(error);
    }
    Ok(ProducerIdentity { producer_id: response.producer_id.0, producer_epoch: response.producer_epoch })
}

/// The identity to go on with after a gap in some partition's sequence:
/// the next epoch, which partitions accept from sequence 0, as the Java
/// client does on its own (KIP-360); a new id once the epoch is exhausted.
pub(crate) async fn bumped(cluster: &Cluster, identity: ProducerIdentity) -> Result<ProducerIdentity> {
    match identity.producer_epoch.checked_add(1) {
        Some(epoch) => Ok(ProducerIdentity { producer_epoch: epoch, ..identity }),
        None => new_producer_id(cluster).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_pairs;

    fn config(pairs: &[&str]) -> Result<ProducerConfig> {
        let mut all = vec!["bootstrap.servers=h:1"];
        all.extend_from_slice(pairs);
        ProducerConfig::from_properties(&parse_pairs(all)?)
    }

    #[test]
    fn defaults_are_kafkas() {
        let c = config(&[]).unwrap();
        assert_eq!((c.acks, c.batch_size, c.buffer_memory, c.max_in_flight), (-1, 16_384, 33_554_432, 5));
        assert_eq!(c.linger, Duration::from_millis(5));
        assert!(c.wants_idempotence());
        assert_eq!(c.compression, Compression::None);
    }

    #[test]
    fn idempotence_follows_kafkas_rules() {
        assert!(!config(&["acks=1"]).unwrap().wants_idempotence(), "defaulted idempotence yields to acks=1");
        assert!(config(&["acks=1", "enable.idempotence=true"]).is_err(), "explicit idempotence conflicts");
        assert!(!config(&["enable.idempotence=false"]).unwrap().wants_idempotence());
        assert!(config(&["acks=2"]).is_err());
        assert!(config(&["compression.type=brotli"]).is_err());
        assert_eq!(config(&["compression.type=zstd"]).unwrap().compression, Compression::Zstd);
    }
}
