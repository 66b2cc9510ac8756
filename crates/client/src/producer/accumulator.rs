//! Per-partition queues of batches: where `send` appends and the sender
//! drains.
//!
//! Each partition has a queue whose last batch is open for appends. A batch
//! closes when the next record would push it past `batch.size`; a closed
//! batch, or an open one older than `linger.ms`, is ready. `drain` hands the
//! sender at most one ready batch per partition, grouped by leader, for the
//! leaders that can take another request; idempotent batches get their
//! sequence numbers there, in queue order. Everything here is synchronous
//! and runs under one mutex; compression happens outside it, in the sender.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::batch::{encoded_record_size, restamp, BatchBuilder, ProducerIdentity, BATCH_HEADER_BYTES};
use super::partitioner::{partition_for_key, StickyPartitioner};
use super::{BatchOutcome, ProducerConfig, ProducerRecord};
use crate::cluster::TopicInfo;
use crate::error::{Error, KafkaCode, Result};

/// A batch on its way: built, then sealed once, then sent (maybe again).
#[derive(Debug)]
pub struct ProducerBatch {
    pub builder: BatchBuilder,
    pub outcome: Arc<BatchOutcome>,
    pub created: Instant,
    /// `buffer.memory` bytes to return when the batch completes.
    pub reserved_bytes: usize,
    /// Closed to appends: full, or being retried.
    pub full: bool,
    pub attempts: u32,
    pub retry_at: Option<Instant>,
    /// Assigned at first drain when idempotent; -1 otherwise.
    pub base_sequence: i32,
    /// The encoded batch, kept so a retry resends the same bytes.
    pub sealed: Option<Bytes>,
    /// An attempt ended without saying whether the broker wrote the batch
    /// (a timeout, a lost connection, a failure after the append).
    pub maybe_written: bool,
}

impl ProducerBatch {
    fn new(outcome: Arc<BatchOutcome>, builder: BatchBuilder, now: Instant) -> Self {
        Self {
            builder,
            outcome,
            created: now,
            reserved_bytes: 0,
            full: false,
            attempts: 0,
            retry_at: None,
            base_sequence: -1,
            sealed: None,
            maybe_written: false,
        }
    }

    pub fn record_count(&self) -> usize {
        self.builder.record_count() as usize
    }

    /// The batch's buffer for reuse, if nothing else still shares it.
    pub fn into_buffer(mut self) -> Option<BytesMut> {
        match self.builder.take_buffer() {
            Some(buffer) => Some(buffer),
            None => self.sealed.take()?.try_into_mut().ok(),
        }
    }

    /// Bytes on the wire: the sealed size once sealed (sealing takes the
    /// builder's buffer), else the size so far.
    pub fn wire_size(&self) -> usize {
        self.sealed.as_ref().map_or_else(|| self.builder.size_bytes(), Bytes::len)
    }

    fn is_ready(&self, now: Instant, linger: Duration, more_behind: bool, send_now: bool) -> bool {
        match self.retry_at {
            Some(at) => now >= at,
            None => more_behind || self.full || send_now || now >= self.created + linger,
        }
    }

    /// When this batch becomes ready if nothing else happens.
    fn ready_at(&self, linger: Duration) -> Instant {
        self.retry_at.unwrap_or(self.created + linger)
    }
}

#[derive(Debug, Default)]
struct PartitionQueue {
    batches: VecDeque<ProducerBatch>,
    next_sequence: i32,
}

#[derive(Debug)]
struct TopicQueues {
    name: Arc<str>,
    info: Arc<TopicInfo>,
    /// Partitions that currently have a leader, for sticky choices.
    available: Vec<i32>,
    sticky: StickyPartitioner,
    partitions: Vec<PartitionQueue>,
}

impl TopicQueues {
    fn update(&mut self, info: Arc<TopicInfo>) {
        self.available = info.partitions.iter().filter(|p| p.leader >= 0).map(|p| p.partition).collect();
        let count = info.partitions.len();
        if self.partitions.len() < count {
            self.partitions.resize_with(count, PartitionQueue::default);
        }
        self.info = info;
    }
}

/// What one `append` did.
pub struct Appended {
    pub outcome: Arc<BatchOutcome>,
    /// The record's offset delta inside its batch.
    pub index: i32,
    /// A batch was created (a new partition to linger on, or the previous
    /// batch filled up), so the sender should look again.
    pub wake_sender: bool,
}

/// A batch with the topic and partition it belongs to.
pub type RoutedBatch = (Arc<str>, i32, ProducerBatch);

/// Batches to send to one leader in one Produce request.
pub struct LeaderBatches {
    pub leader: i32,
    pub batches: Vec<RoutedBatch>,
}

/// The result of one `drain`.
#[derive(Default)]
pub struct Drained {
    pub requests: Vec<LeaderBatches>,
    /// Batches that waited past `delivery.timeout.ms` without being sent.
    pub expired: Vec<ProducerBatch>,
    /// Topics with a partition that has no known leader.
    pub stale_topics: Vec<Arc<str>>,
    /// The earliest moment a held-back batch becomes ready.
    pub next_ready: Option<Instant>,
}

/// At most this many idle batch buffers are kept.
const MAX_POOLED_BUFFERS: usize = 64;

pub struct Accumulator {
    topics: HashMap<Arc<str>, TopicQueues>,
    /// Buffers of completed batches, reused so that a busy producer does
    /// not fault in fresh pages for every batch (Java's `BufferPool`).
    pool: Vec<BytesMut>,
    pool_max: usize,
    batch_size: usize,
    linger: Duration,
    delivery_timeout: Duration,
    max_request_size: usize,
    idempotent: bool,
    ignore_keys: bool,
    seed: u64,
}

impl Accumulator {
    pub fn new(config: &ProducerConfig) -> Self {
        let seed = super::now_ms() as u64 ^ u64::from(std::process::id()).rotate_left(32);
        Self {
            topics: HashMap::new(),
            pool: Vec::new(),
            pool_max: (config.buffer_memory / config.batch_size.max(1)).clamp(1, MAX_POOLED_BUFFERS),
            batch_size: config.batch_size,
            linger: config.linger,
            delivery_timeout: config.delivery_timeout,
            max_request_size: config.max_request_size,
            idempotent: config.wants_idempotence(),
            ignore_keys: config.ignore_keys,
            seed,
        }
    }

    /// The accumulator decides idempotence from the producer's identity,
    /// known only after InitProducerId.
    pub fn set_idempotent(&mut self, idempotent: bool) {
        self.idempotent = idempotent;
    }

    /// Adds a topic or refreshes its partitions and leaders.
    pub fn add_topic(&mut self, info: Arc<TopicInfo>) {
        if let Some(queues) = self.topics.get_mut(info.name.as_str()) {
            queues.update(info);
            return;
        }
        self.seed = self.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let name: Arc<str> = info.name.as_str().into();
        let mut queues = TopicQueues {
            name: name.clone(),
            info: info.clone(),
            available: Vec::new(),
            sticky: StickyPartitioner::new(self.seed),
            partitions: Vec::new(),
        };
        queues.update(info);
        self.topics.insert(name, queues);
    }

    pub fn topic_names(&self) -> Vec<Arc<str>> {
        self.topics.keys().cloned().collect()
    }

    /// An upper bound of the bytes `record` adds to a batch (the deltas it
    /// will get are not known yet; 10 bytes covers their varints).
    pub fn record_size(record: &ProducerRecord<'_>) -> usize {
        encoded_record_size(0, 0, record.key, record.value, record.headers) + 10
    }

    /// Chooses the partition and appends to its open batch, opening a new
    /// one when the record does not fit. `Ok(None)`: the topic has no
    /// metadata yet.
    pub fn append(
        &mut self,
        record: &ProducerRecord<'_>,
        timestamp: i64,
        reserved: usize,
    ) -> Result<Option<Appended>> {
        let (batch_size, ignore_keys) = (self.batch_size, self.ignore_keys);
        let Some(queues) = self.topics.get_mut(record.topic) else { return Ok(None) };
        let partition = choose_partition(queues, record, reserved, batch_size, ignore_keys)?;
        let topic = queues.name.clone();
        let queue = &mut queues.partitions[partition as usize];
        let fits = queue.batches.back().is_some_and(|last| {
            !last.full
                && (last.builder.size_bytes() + reserved <= batch_size || last.builder.record_count() == 0)
        });
        let mut wake_sender = false;
        if !fits {
            if let Some(last) = queue.batches.back_mut() {
                last.full = true;
            }
            let outcome = BatchOutcome::new(topic, partition);
            let capacity = batch_size.max(reserved + BATCH_HEADER_BYTES);
            let builder = match self.pool.pop() {
                Some(buffer) if buffer.capacity() >= capacity => BatchBuilder::from_buffer(buffer),
                _ => BatchBuilder::with_capacity(capacity),
            };
            queue.batches.push_back(ProducerBatch::new(outcome, builder, Instant::now()));
            wake_sender = true;
        }
        let batch = queue.batches.back_mut().expect("a batch was just ensured");
        let index = batch.builder.record_count();
        batch.builder.append(timestamp, record.key, record.value, record.headers);
        batch.reserved_bytes += reserved;
        Ok(Some(Appended { outcome: batch.outcome.clone(), index, wake_sender }))
    }

    /// Takes the ready batches. `send_now` treats every batch as ready
    /// (flush, close, memory pressure); `can_send(leader)` says whether that
    /// leader can take another request.
    pub fn drain(&mut self, now: Instant, send_now: bool, mut can_send: impl FnMut(i32) -> bool) -> Drained {
        let mut drained = Drained::default();
        let mut by_leader: HashMap<i32, (usize, Vec<RoutedBatch>)> = HashMap::new();
        let (linger, idempotent, max_request_size) = (self.linger, self.idempotent, self.max_request_size);
        for queues in self.topics.values_mut() {
            for (partition, queue) in queues.partitions.iter_mut().enumerate() {
                let partition = partition as i32;
                drain_expired(queue, now, self.delivery_timeout, &mut drained.expired);
                let Some(front) = queue.batches.front() else { continue };
                if !front.is_ready(now, linger, queue.batches.len() > 1, send_now) {
                    drained.next_ready = earliest(drained.next_ready, front.ready_at(linger));
                    continue;
                }
                let leader = queues.info.partition(partition).map_or(-1, |p| p.leader);
                if leader < 0 {
                    if !drained.stale_topics.contains(&queues.name) {
                        drained.stale_topics.push(queues.name.clone());
                    }
                    continue;
                }
                let size = front.wire_size();
                let entry = by_leader.entry(leader);
                let fits = match &entry {
                    std::collections::hash_map::Entry::Occupied(e) => e.get().0 + size <= max_request_size,
                    std::collections::hash_map::Entry::Vacant(_) => can_send(leader),
                };
                if !fits {
                    continue;
                }
                let mut batch = queue.batches.pop_front().expect("front exists");
                batch.full = true;
                if idempotent && batch.base_sequence < 0 {
                    batch.base_sequence = queue.next_sequence;
                    queue.next_sequence =
                        queue.next_sequence.wrapping_add(batch.builder.record_count()) & i32::MAX;
                }
                let slot = entry.or_default();
                slot.0 += size;
                slot.1.push((queues.name.clone(), partition, batch));
            }
        }
        drained.requests =
            by_leader.into_iter().map(|(leader, (_, batches))| LeaderBatches { leader, batches }).collect();
        drained
    }

    /// Keeps a completed batch's buffer for a later batch.
    pub fn recycle(&mut self, buffer: BytesMut) {
        if buffer.capacity() >= self.batch_size && self.pool.len() < self.pool_max {
            self.pool.push(buffer);
        }
    }

    /// Puts a batch back for a retry, before any batch with a later
    /// sequence so an idempotent partition is resent in order.
    pub fn requeue(&mut self, topic: &str, partition: i32, batch: ProducerBatch) {
        let Some(queue) = self.topics.get_mut(topic).and_then(|q| q.partitions.get_mut(partition as usize))
        else {
            batch.outcome.complete(Err(Error::InvalidRequest(format!("{topic}-{partition} vanished"))));
            return;
        };
        let at = queue
            .batches
            .iter()
            .position(|b| b.base_sequence < 0 || b.base_sequence > batch.base_sequence)
            .unwrap_or(queue.batches.len());
        queue.batches.insert(at, batch);
    }

    /// Whether a batch waiting for a retry may already be in its log: any
    /// numbered batch except those behind a gap (a refused batch, whose
    /// sequence the partition still expects, so nothing after it went in).
    pub fn has_unresolved_retries(&self, gaps: &HashMap<(Arc<str>, i32), i32>) -> bool {
        self.topics.values().any(|topic| {
            topic.partitions.iter().enumerate().any(|(partition, queue)| {
                let gap = gaps.get(&(topic.name.clone(), partition as i32));
                queue
                    .batches
                    .iter()
                    .any(|b| b.base_sequence >= 0 && gap.is_none_or(|&refused| b.base_sequence < refused))
            })
        })
    }

    /// After an epoch bump every partition starts again at sequence 0:
    /// batches waiting for a retry are renumbered in order and restamped,
    /// the others are numbered when drained.
    pub fn restart_sequences(&mut self, identity: ProducerIdentity) {
        for queue in self.topics.values_mut().flat_map(|t| t.partitions.iter_mut()) {
            let mut next = 0i32;
            for batch in queue.batches.iter_mut().take_while(|b| b.base_sequence >= 0) {
                batch.base_sequence = next;
                if let Some(sealed) = &batch.sealed {
                    batch.sealed = Some(restamp(sealed, identity, next));
                }
                next = next.wrapping_add(batch.builder.record_count()) & i32::MAX;
            }
            queue.next_sequence = next;
        }
    }

    /// No batch is waiting in any queue.
    pub fn is_empty(&self) -> bool {
        self.topics.values().all(|q| q.partitions.iter().all(|p| p.batches.is_empty()))
    }
}

fn drain_expired(
    queue: &mut PartitionQueue,
    now: Instant,
    timeout: Duration,
    expired: &mut Vec<ProducerBatch>,
) {
    while queue.batches.front().is_some_and(|b| now >= b.created + timeout) {
        expired.extend(queue.batches.pop_front());
    }
}

fn earliest(current: Option<Instant>, candidate: Instant) -> Option<Instant> {
    Some(current.map_or(candidate, |c| c.min(candidate)))
}

fn choose_partition(
    queues: &mut TopicQueues,
    record: &ProducerRecord<'_>,
    size: usize,
    batch_size: usize,
    ignore_keys: bool,
) -> Result<i32> {
    let count = queues.partitions.len() as i32;
    if count == 0 {
        return Err(Error::Kafka {
            code: KafkaCode::from_code(5).expect("LEADER_NOT_AVAILABLE"),
            message: None,
        });
    }
    match (record.partition, record.key) {
        (Some(p), _) if (0..count).contains(&p) => Ok(p),
        (Some(p), _) => Err(Error::InvalidRequest(format!(
            "partition {p} is not in [0, {count}) for topic {}",
            record.topic
        ))),
        (None, Some(key)) if !ignore_keys => Ok(partition_for_key(key, count)),
        _ => Ok(queues.sticky.partition(&queues.available, count, size, batch_size)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::PartitionInfo;
    use crate::producer::ProducerConfig;

    fn topic(name: &str, leaders: &[i32]) -> Arc<TopicInfo> {
        let partitions = leaders
            .iter()
            .enumerate()
            .map(|(i, leader)| PartitionInfo {
                partition: i as i32,
                leader: *leader,
                leader_epoch: 0,
                replicas: vec![*leader],
                isr: vec![*leader],
                offline_replicas: vec![],
                error: None,
            })
            .collect();
        Arc::new(TopicInfo {
            name: name.into(),
            topic_id: Default::default(),
            is_internal: false,
            error: None,
            partitions,
        })
    }

    fn accumulator(linger_ms: u64, batch_size: usize, idempotent: bool) -> Accumulator {
        let mut config = ProducerConfig::new("h:1");
        config.linger = Duration::from_millis(linger_ms);
        config.batch_size = batch_size;
        let mut acc = Accumulator::new(&config);
        acc.set_idempotent(idempotent);
        acc
    }

    fn send(acc: &mut Accumulator, topic: &str, key: Option<&[u8]>, value: &[u8]) -> Appended {
        let record = ProducerRecord { topic, key, value: Some(value), ..Default::default() };
        let size = Accumulator::record_size(&record);
        acc.append(&record, 0, size).unwrap().unwrap()
    }

    #[test]
    fn keyed_records_go_to_the_murmur2_partition() {
        let mut acc = accumulator(0, 16_384, false);
        acc.add_topic(topic("t", &[1, 1, 1, 1, 1]));
        for key in [&b"a"[..], b"foobar", b"21"] {
            let appended = send(&mut acc, "t", Some(key), b"v");
            assert_eq!(appended.outcome.partition, partition_for_key(key, 5));
        }
    }

    #[test]
    fn a_batch_lingers_until_linger_ms_or_full() {
        let mut acc = accumulator(50, 200, false);
        acc.add_topic(topic("t", &[1]));
        let first = send(&mut acc, "t", None, &[0u8; 50]);
        assert!(first.wake_sender, "a new batch wakes the sender to start its linger timer");
        let now = Instant::now();
        let drained = acc.drain(now, false, |_| true);
        assert!(drained.requests.is_empty(), "a fresh batch lingers");
        let ready_at = drained.next_ready.expect("the linger deadline");
        assert!(ready_at > now && ready_at <= now + Duration::from_millis(50));

        assert!(!send(&mut acc, "t", None, &[0u8; 50]).wake_sender, "fits in the open batch");
        let overflow = send(&mut acc, "t", None, &[0u8; 150]);
        assert!(overflow.wake_sender, "the open batch is full, a second one starts");
        assert_eq!(overflow.index, 0);

        let drained = acc.drain(now, false, |_| true);
        assert_eq!(drained.requests.len(), 1, "the full batch is ready before linger.ms");
        let (_, _, batch) = &drained.requests[0].batches[0];
        assert_eq!(batch.record_count(), 2);
        assert!(acc.drain(now, false, |_| true).requests.is_empty(), "the second batch still lingers");
        assert_eq!(acc.drain(ready_at + Duration::from_millis(60), false, |_| true).requests.len(), 1);
        assert!(acc.is_empty());
    }

    #[test]
    fn drain_respects_leader_capacity_and_missing_leaders() {
        let mut acc = accumulator(0, 16_384, false);
        acc.add_topic(topic("t", &[1, 2, -1]));
        for p in 0..3 {
            let record =
                ProducerRecord { topic: "t", partition: Some(p), value: Some(b"v"), ..Default::default() };
            acc.append(&record, 0, 20).unwrap().unwrap();
        }
        let drained = acc.drain(Instant::now(), true, |leader| leader == 1);
        assert_eq!(drained.requests.len(), 1);
        assert_eq!(drained.requests[0].leader, 1);
        assert_eq!(drained.stale_topics, [Arc::<str>::from("t")], "partition 2 has no leader");
        acc.add_topic(topic("t", &[1, 2, 2]));
        let drained = acc.drain(Instant::now(), true, |_| true);
        assert_eq!(drained.requests.len(), 1, "one request for leader 2 with both partitions");
        assert_eq!(drained.requests[0].batches.len(), 2);
    }

    #[test]
    fn only_retries_behind_a_gap_count_as_resolved_and_a_restart_renumbers_them() {
        let mut acc = accumulator(0, 150, true);
        acc.add_topic(topic("t", &[1]));
        let mut drained_batches = Vec::new();
        for _ in 0..3 {
            send(&mut acc, "t", None, &[0u8; 30]);
            send(&mut acc, "t", None, &[0u8; 30]);
            let mut drained = acc.drain(Instant::now(), true, |_| true);
            drained_batches.push(drained.requests.pop().unwrap().batches.pop().unwrap().2);
        }
        let sequences: Vec<i32> = drained_batches.iter().map(|b| b.base_sequence).collect();
        assert_eq!(sequences, [0, 2, 4]);
        let third = drained_batches.pop().unwrap();
        let second = drained_batches.pop().unwrap();
        acc.requeue("t", 0, second);
        acc.requeue("t", 0, third);
        let gap_at = |sequence: i32| HashMap::from([((Arc::from("t"), 0), sequence)]);
        assert!(!acc.has_unresolved_retries(&gap_at(2)), "both retries come after the refused batch");
        assert!(acc.has_unresolved_retries(&gap_at(4)), "sequence 2 may be in the log");
        assert!(acc.has_unresolved_retries(&HashMap::new()), "without a gap every retry is unresolved");

        acc.restart_sequences(ProducerIdentity { producer_id: 1, producer_epoch: 1 });
        let mut renumbered = Vec::new();
        for _ in 0..2 {
            let mut drained = acc.drain(Instant::now(), true, |_| true);
            renumbered.extend(drained.requests.pop().unwrap().batches.iter().map(|b| b.2.base_sequence));
        }
        assert_eq!(renumbered, [0, 2], "renumbered from 0 in order");
    }

    #[test]
    fn idempotent_batches_get_consecutive_sequences_and_retries_keep_their_place() {
        let mut acc = accumulator(0, 150, true);
        acc.add_topic(topic("t", &[1]));
        for _ in 0..6 {
            send(&mut acc, "t", None, &[0u8; 30]);
        }
        let mut sequences = Vec::new();
        let mut first = None;
        for _ in 0..3 {
            let mut drained = acc.drain(Instant::now(), true, |_| true);
            let (_, _, batch) = drained.requests.pop().unwrap().batches.pop().unwrap();
            sequences.push((batch.base_sequence, batch.record_count()));
            first.get_or_insert(batch);
        }
        assert_eq!(sequences, [(0, 2), (2, 2), (4, 2)]);
        // A failed first batch goes back in front of anything newer.
        send(&mut acc, "t", None, &[0u8; 30]);
        acc.requeue("t", 0, first.unwrap());
        let mut drained = acc.drain(Instant::now(), true, |_| true);
        let (_, _, batch) = drained.requests.pop().unwrap().batches.pop().unwrap();
        assert_eq!(batch.base_sequence, 0, "the retried batch is resent first");
    }

    #[test]
    fn batches_past_the_delivery_timeout_expire() {
        let mut acc = accumulator(0, 16_384, false);
        acc.add_topic(topic("t", &[-1]));
        send(&mut acc, "t", None, b"v");
        let later = Instant::now() + Duration::from_secs(121);
        let drained = acc.drain(later, true, |_| true);
        assert_eq!(drained.expired.len(), 1);
        assert!(acc.is_empty());
    }

    fn drain_one_sealed(acc: &mut Accumulator) -> ProducerBatch {
        let mut drained = acc.drain(Instant::now(), true, |_| true);
        let (_, _, mut batch) = drained.requests.pop().unwrap().batches.pop().unwrap();
        let identity = crate::producer::ProducerIdentity::NONE;
        batch.sealed =
            Some(batch.builder.seal(kafka_protocol::records::Compression::None, identity, -1).unwrap());
        batch
    }

    #[test]
    fn completed_batches_give_their_buffer_back_unless_still_shared() {
        let mut acc = accumulator(0, 1000, false);
        acc.add_topic(topic("t", &[1]));
        send(&mut acc, "t", None, b"v");
        let batch = drain_one_sealed(&mut acc);
        let still_on_the_wire = batch.sealed.clone();
        assert!(batch.into_buffer().is_none(), "a buffer the writer still holds is not reused");
        drop(still_on_the_wire);

        send(&mut acc, "t", None, b"v");
        let buffer = drain_one_sealed(&mut acc).into_buffer().expect("sole owner");
        assert!(buffer.capacity() >= 1000);
        let address = buffer.as_ptr();
        acc.recycle(buffer);
        send(&mut acc, "t", None, b"w");
        let reused = drain_one_sealed(&mut acc).into_buffer().unwrap();
        assert_eq!(reused.as_ptr(), address, "the next batch wrote into the recycled buffer");
    }

    #[test]
    fn an_explicit_partition_out_of_range_is_refused() {
        let mut acc = accumulator(0, 16_384, false);
        acc.add_topic(topic("t", &[1]));
        let record =
            ProducerRecord { topic: "t", partition: Some(3), value: Some(b"v"), ..Default::default() };
        assert!(acc.append(&record, 0, 10).is_err());
    }
}
