//! Transaction markers, sent as Kafka's coordinator sends them (its
//! `TransactionMarkerChannelManager`): one WriteTxnMarkers (v1) per
//! destination broker, to each partition's current leader, through the
//! inter-broker listener; markers of partitions led here are written
//! straight into their logs. Either way a marker counts once the
//! partition's ISR holds it.
//!
//! Every prepared transaction becomes a [`MarkerJob`]: the coordinator
//! queues it and answers EndTxn; [`deliver`] then writes the markers
//! without any coordinator lock held. Each partition's answer is judged as Kafka's
//! `TransactionMarkerRequestCompletionHandler` judges it ([`outcome`]):
//! written, retried at the partition's (new) leader after the next look at
//! the metadata image, dropped, or fenced (the transaction is no longer
//! this coordinator's to finish). The transaction moves to CompleteCommit
//! (CompleteAbort) only once every marker is written. A job that cannot
//! finish within [`DELIVERY_TIMEOUT`] leaves the transaction prepared: the
//! coordinator's timer queues it again, and a coordinator that loads the
//! transaction after a restart or a failover does too.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};
use kafka_protocol::protocol::StrBytes;
use strom_metadata::MetadataImage;
use tokio::time::Instant;

use super::peers::REQUEST_TIMEOUT;
use super::state::{TxnPartition, TxnResult};
use super::{CompletionClaim, TxnMarker};
use crate::coordinator_host::CoordinatorHost;

/// The WriteTxnMarkers version sent, as Kafka 4's coordinator sends it.
const WRITE_TXN_MARKERS_VERSION: i16 = 1;
/// The pause before markers that failed are sent again.
const RETRY_BACKOFF: Duration = Duration::from_millis(100);
/// How long one job keeps trying before it leaves the transaction to the
/// coordinator's retry timer.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// The markers of one prepared transaction.
pub struct MarkerJob {
    pub transactional_id: String,
    /// Carries the `__transaction_state` partition's leader epoch when the
    /// job began.
    pub marker: TxnMarker,
    pub partitions: Vec<TxnPartition>,
    /// Keeps the coordinator's timer off the transaction while in flight.
    pub(super) claim: CompletionClaim,
}

/// Where each partition's marker goes, by the metadata image.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MarkerPlan {
    /// Led by this broker: written straight into the log.
    pub local: Vec<TxnPartition>,
    /// Led by another broker, by its id.
    pub remote: BTreeMap<i32, Vec<TxnPartition>>,
    /// Without a leader just now: tried again later.
    pub leaderless: Vec<TxnPartition>,
    /// Of a deleted topic: no marker is owed, as in Kafka.
    pub gone: Vec<TxnPartition>,
}

impl MarkerPlan {
    /// The partitions whose markers must wait for the network or a leader.
    pub fn elsewhere(&self) -> Vec<TxnPartition> {
        self.remote.values().flatten().chain(&self.leaderless).cloned().collect()
    }
}

/// Sorts `partitions` by where their markers go, `me` being this broker.
pub fn plan<'a>(
    partitions: impl IntoIterator<Item = &'a TxnPartition>,
    image: &MetadataImage,
    me: i32,
) -> MarkerPlan {
    let mut plan = MarkerPlan::default();
    for tp in partitions {
        let leader = image.topic(&tp.0).and_then(|t| t.partitions.get(&tp.1)).map(|p| p.leader);
        match leader {
            None => plan.gone.push(tp.clone()),
            Some(leader) if leader == me => plan.local.push(tp.clone()),
            Some(leader) if leader < 0 => plan.leaderless.push(tp.clone()),
            Some(leader) => plan.remote.entry(leader).or_default().push(tp.clone()),
        }
    }
    plan
}

/// What one partition's answer means for its marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerOutcome {
    Written,
    /// Sent again, to whoever leads the partition by then.
    Retry,
    /// No marker is owed there any more.
    Drop,
    /// The producer or the coordinator moved on: stop sending this
    /// transaction's markers.
    Fenced,
}

/// Kafka's completion handler's reading of a partition's error.
pub fn outcome(error: Option<ResponseError>) -> MarkerOutcome {
    use ResponseError::*;
    match error {
        None => MarkerOutcome::Written,
        Some(
            UnknownTopicOrPartition
            | NotLeaderOrFollower
            | NotEnoughReplicas
            | NotEnoughReplicasAfterAppend
            | RequestTimedOut
            | KafkaStorageError,
        ) => MarkerOutcome::Retry,
        Some(InvalidProducerEpoch | TransactionCoordinatorFenced) => MarkerOutcome::Fenced,
        Some(UnsupportedForMessageFormat | UnsupportedVersion) => MarkerOutcome::Drop,
        // Kafka treats anything else as a bug; keep trying, bounded by the
        // job's deadline, and say so in the log.
        Some(other) => {
            tracing::error!("unexpected error writing a transaction marker: {other:?}");
            MarkerOutcome::Retry
        }
    }
}

/// Sends `job`'s markers until all are written (then completes the
/// transaction), the transaction is fenced or moved on, or the deadline.
pub async fn deliver(host: Arc<dyn CoordinatorHost>, job: MarkerJob) {
    let deadline = Instant::now() + DELIVERY_TIMEOUT;
    let id = job.transactional_id.clone();
    let mut pending = job.partitions.clone();
    loop {
        if !host.transactions().still_sending(&*host, &job) {
            tracing::info!(
                transactional_id = id,
                "transaction moved on; its markers are no longer sent from here"
            );
            return;
        }
        let Some(retry) = send_round(&host, &job, &pending).await else {
            tracing::info!(transactional_id = id, "transaction markers fenced; no longer sent");
            return;
        };
        if retry.is_empty() {
            let finished = host.transactions().finish(&*host, &job.transactional_id).await;
            drop(job.claim);
            if let Err(error) = finished {
                tracing::warn!(transactional_id = id, "completing the transaction failed: {error:?}");
            }
            return;
        }
        if Instant::now() + RETRY_BACKOFF >= deadline {
            tracing::warn!(
                transactional_id = id,
                partitions = retry.len(),
                "transaction markers still not written; the coordinator retries later"
            );
            return;
        }
        pending = retry;
        tokio::time::sleep(RETRY_BACKOFF).await;
    }
}

/// One attempt at every pending marker: the partitions to try again, or
/// None when fenced.
async fn send_round(
    host: &Arc<dyn CoordinatorHost>,
    job: &MarkerJob,
    pending: &[TxnPartition],
) -> Option<Vec<TxnPartition>> {
    let image = host.replicas().image();
    let plan = plan(pending, &image, host.node_id());
    if !plan.gone.is_empty() {
        let id = &job.transactional_id;
        tracing::info!(transactional_id = id, partitions = ?plan.gone, "no markers for partitions of deleted topics");
    }
    let mut unanswered: Vec<TxnPartition> = plan.elsewhere();
    let mut sends = tokio::task::JoinSet::new();
    for (leader, partitions) in plan.remote {
        let request = request(job, &partitions);
        let (host, image) = (host.clone(), image.clone());
        sends.spawn(async move {
            let answered = send(&*host, &image, leader, &request).await;
            answers_of(leader, partitions, answered)
        });
    }
    // Written here while the other brokers write theirs.
    let local: Vec<_> = plan.local.into_iter().map(|tp| (job.marker, tp)).collect();
    let timeout = Duration::from_millis(host.transactions().config().request_timeout_ms);
    let written = super::write_markers(&**host, &local, timeout).await;
    let mut answers: Vec<(TxnPartition, MarkerOutcome)> =
        local.into_iter().zip(written).map(|((_, tp), error)| (tp, outcome(error))).collect();
    while let Some(sent) = sends.join_next().await {
        answers.extend(sent.unwrap_or_default());
    }
    // Leaderless partitions, and those of a send that panicked, got no
    // answer: their markers are owed still.
    unanswered.retain(|tp| !answers.iter().any(|(answered, _)| answered == tp));
    answers.extend(unanswered.into_iter().map(|tp| (tp, MarkerOutcome::Retry)));
    if answers.iter().any(|(_, o)| *o == MarkerOutcome::Fenced) {
        return None;
    }
    Some(answers.into_iter().filter(|(_, o)| *o == MarkerOutcome::Retry).map(|(tp, _)| tp).collect())
}

/// The WriteTxnMarkers request carrying `job`'s markers for `partitions`.
fn request(job: &MarkerJob, partitions: &[TxnPartition]) -> WriteTxnMarkersRequest {
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, index) in partitions {
        topics.entry(topic).or_default().push(*index);
    }
    let topics = topics
        .into_iter()
        .map(|(name, indexes)| {
            WritableTxnMarkerTopic::default()
                .with_name(TopicName(StrBytes::from_string(name.to_owned())))
                .with_partition_indexes(indexes)
        })
        .collect();
    let TxnMarker { producer_id, producer_epoch, coordinator_epoch, result } = job.marker;
    let marker = WritableTxnMarker::default()
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(producer_epoch)
        .with_transaction_result(result == TxnResult::Commit)
        .with_topics(topics)
        .with_coordinator_epoch(coordinator_epoch);
    WriteTxnMarkersRequest::default().with_markers(vec![marker])
}

/// Sends `request` to broker `leader`; each partition's error, or why no
/// answer came.
async fn send(
    host: &dyn CoordinatorHost,
    image: &MetadataImage,
    leader: i32,
    request: &WriteTxnMarkersRequest,
) -> Result<HashMap<TxnPartition, Option<ResponseError>>, String> {
    let peers = &host.transactions().peers;
    let response =
        peers.send(host, image, leader, request, WRITE_TXN_MARKERS_VERSION, REQUEST_TIMEOUT).await?;
    let mut errors = HashMap::new();
    for marker in response.markers {
        for topic in marker.topics {
            for partition in topic.partitions {
                let tp = (topic.name.to_string(), partition.partition_index);
                errors.insert(tp, ResponseError::try_from_code(partition.error_code));
            }
        }
    }
    Ok(errors)
}

/// Each partition's outcome from broker `leader`'s answer; a partition the
/// answer leaves out, or a request that got none, is tried again.
fn answers_of(
    leader: i32,
    partitions: Vec<TxnPartition>,
    answered: Result<HashMap<TxnPartition, Option<ResponseError>>, String>,
) -> Vec<(TxnPartition, MarkerOutcome)> {
    let errors = answered.unwrap_or_else(|e| {
        tracing::info!(broker = leader, "sending transaction markers failed, retrying: {e}");
        HashMap::new()
    });
    partitions
        .into_iter()
        .map(|tp| {
            let outcome = errors.get(&tp).map_or(MarkerOutcome::Retry, |error| outcome(*error));
            (tp, outcome)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use strom_metadata::kraft_records::{MetadataRecord, PartitionRecord, TopicRecord};

    fn image_with(topic: &str, leaders: &[i32]) -> MetadataImage {
        let mut image = MetadataImage::empty();
        let topic_id = uuid::Uuid::from_u128(7);
        image.apply(MetadataRecord::Topic(TopicRecord {
            name: topic.into(),
            topic_id,
            ..Default::default()
        }));
        for (partition_id, leader) in (0..).zip(leaders) {
            let replicas = vec![*leader];
            let partition =
                PartitionRecord { partition_id, topic_id, leader: *leader, replicas, ..Default::default() };
            image.apply(MetadataRecord::Partition(partition));
        }
        image
    }

    fn tp(topic: &str, index: i32) -> TxnPartition {
        (topic.to_owned(), index)
    }

    #[test]
    fn markers_are_batched_per_leader_and_deleted_topics_dropped() {
        let image = image_with("t", &[1, 2, 3, 2, -1]);
        let partitions = [tp("t", 0), tp("t", 1), tp("t", 2), tp("t", 3), tp("t", 4), tp("gone", 0)];
        let plan = plan(&partitions, &image, 1);
        assert_eq!(plan.local, vec![tp("t", 0)]);
        assert_eq!(plan.remote, BTreeMap::from([(2, vec![tp("t", 1), tp("t", 3)]), (3, vec![tp("t", 2)])]));
        assert_eq!(plan.leaderless, vec![tp("t", 4)]);
        assert_eq!(plan.gone, vec![tp("gone", 0)]);
        assert_eq!(plan.elsewhere(), vec![tp("t", 1), tp("t", 3), tp("t", 2), tp("t", 4)]);
    }

    #[test]
    fn a_transaction_led_here_needs_no_network() {
        let image = image_with("t", &[1, 1]);
        let plan = plan(&[tp("t", 0), tp("t", 1), tp("gone", 3)], &image, 1);
        assert!(plan.elsewhere().is_empty());
        assert_eq!(plan.local.len(), 2);
    }

    #[test]
    fn partition_errors_are_judged_as_kafka_judges_them() {
        use ResponseError::*;
        assert_eq!(outcome(None), MarkerOutcome::Written);
        for retried in [
            NotLeaderOrFollower,
            UnknownTopicOrPartition,
            NotEnoughReplicas,
            NotEnoughReplicasAfterAppend,
            RequestTimedOut,
            KafkaStorageError,
        ] {
            assert_eq!(outcome(Some(retried)), MarkerOutcome::Retry, "{retried:?}");
        }
        assert_eq!(outcome(Some(TransactionCoordinatorFenced)), MarkerOutcome::Fenced);
        assert_eq!(outcome(Some(InvalidProducerEpoch)), MarkerOutcome::Fenced);
        assert_eq!(outcome(Some(UnsupportedForMessageFormat)), MarkerOutcome::Drop);
    }

    #[test]
    fn one_request_per_leader_carries_the_marker_with_its_topics_grouped() {
        let completing = Arc::default();
        let job = MarkerJob {
            transactional_id: "tx".into(),
            marker: TxnMarker {
                producer_id: 42,
                producer_epoch: 3,
                coordinator_epoch: 7,
                result: TxnResult::Commit,
            },
            partitions: Vec::new(),
            claim: CompletionClaim::take(&completing, "tx").unwrap(),
        };
        let sent = request(&job, &[tp("b", 1), tp("a", 0), tp("b", 4)]);
        let [marker] = &sent.markers[..] else { panic!("one marker: {sent:?}") };
        assert_eq!((marker.producer_id.0, marker.producer_epoch), (42, 3));
        assert!(marker.transaction_result, "COMMIT");
        assert_eq!(marker.coordinator_epoch, 7);
        let topics: Vec<(String, Vec<i32>)> =
            marker.topics.iter().map(|t| (t.name.to_string(), t.partition_indexes.clone())).collect();
        assert_eq!(topics, vec![("a".to_owned(), vec![0]), ("b".to_owned(), vec![1, 4])]);
    }

    #[test]
    fn a_broker_that_does_not_answer_gets_every_marker_again() {
        let partitions = vec![tp("t", 0), tp("u", 1)];
        let lost = answers_of(2, partitions.clone(), Err("connection refused".into()));
        assert!(lost.iter().all(|(_, o)| *o == MarkerOutcome::Retry));
        let partial = HashMap::from([(tp("t", 0), None)]);
        let answered = answers_of(2, partitions, Ok(partial));
        assert_eq!(answered, vec![(tp("t", 0), MarkerOutcome::Written), (tp("u", 1), MarkerOutcome::Retry)]);
    }
}
