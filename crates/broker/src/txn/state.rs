//! One transactional id's metadata and Kafka's state machine over it
//! (`TransactionMetadata` and the checks of `TransactionCoordinator`).
//!
//! Every operation takes the current metadata and returns the metadata to
//! write to `__transaction_state` (the caller makes it current once the
//! write succeeds), or the Kafka error the client gets. States:
//!
//! ```text
//! Empty ──add partitions──▶ Ongoing ──EndTxn──▶ PrepareCommit ──markers──▶ CompleteCommit
//!   ▲                          │     └─EndTxn/timeout/fence─▶ PrepareAbort ──markers──▶ CompleteAbort
//!   └──────── InitProducerId (epoch bump) from Empty or Complete* ◀────────────────────────┘
//! ```
//!
//! PrepareEpochFence is Kafka's transient state while an InitProducerId
//! fences an ongoing transaction; here the fence goes straight to
//! PrepareAbort with the bumped epoch, which is what Kafka then writes.
//! Dead marks an expired transactional id about to be removed.

use std::collections::BTreeSet;

use kafka_protocol::error::ResponseError;

pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// Kafka's `TransactionState`, with its on-disk codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
}

impl TxnState {
    pub const ALL: [TxnState; 8] = [
        Self::Empty,
        Self::Ongoing,
        Self::PrepareCommit,
        Self::PrepareAbort,
        Self::CompleteCommit,
        Self::CompleteAbort,
        Self::Dead,
        Self::PrepareEpochFence,
    ];

    /// The `TransactionStatus` byte of `__transaction_state`.
    pub fn code(self) -> i8 {
        Self::ALL.iter().position(|s| *s == self).expect("listed") as i8
    }

    pub fn from_code(code: i8) -> Option<Self> {
        usize::try_from(code).ok().and_then(|i| Self::ALL.get(i).copied())
    }

    /// The name DescribeTransactions and ListTransactions report.
    pub fn name(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::Ongoing => "Ongoing",
            Self::PrepareCommit => "PrepareCommit",
            Self::PrepareAbort => "PrepareAbort",
            Self::CompleteCommit => "CompleteCommit",
            Self::CompleteAbort => "CompleteAbort",
            Self::Dead => "Dead",
            Self::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    fn is_complete_or_empty(self) -> bool {
        matches!(self, Self::Empty | Self::CompleteCommit | Self::CompleteAbort)
    }

    pub fn is_prepared(self) -> bool {
        matches!(self, Self::PrepareCommit | Self::PrepareAbort)
    }
}

/// How a transaction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnResult {
    Commit,
    Abort,
}

/// A partition of a transaction: (topic, partition).
pub type TxnPartition = (String, i32);

/// What the coordinator knows of one transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    /// The producer id before the last rotation (an exhausted epoch).
    pub last_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump, so a retried InitProducerId is
    /// recognised.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TxnPartition>,
    pub start_timestamp_ms: i64,
    pub last_update_timestamp_ms: i64,
    /// Kafka's `pendingState`: the state being written to
    /// `__transaction_state`, not yet replicated. Other requests for the id
    /// get CONCURRENT_TRANSACTIONS meanwhile; never written itself.
    pub pending_state: Option<TxnState>,
}

/// What InitProducerId asks of a known transactional id.
#[derive(Debug, Clone, Copy)]
pub struct InitRequest {
    pub timeout_ms: i32,
    /// KIP-360: the producer id and epoch the client holds, if it sent them.
    pub expected: Option<(i64, i16)>,
    pub now_ms: i64,
}

/// The outcome of InitProducerId's checks.
#[derive(Debug, PartialEq, Eq)]
pub enum InitTransition {
    /// Write this; the client gets its producer id and epoch.
    Ready(TxnMetadata),
    /// The epoch is spent: write this, with a new producer id at epoch 0.
    NeedsNewProducerId,
    /// An ongoing transaction is fenced: abort it with this (PrepareAbort at
    /// the bumped epoch), then answer CONCURRENT_TRANSACTIONS so the client
    /// retries.
    FenceOngoing(TxnMetadata),
}

/// Kafka's `isEpochExhausted`: the next bump would reach `i16::MAX`.
pub fn epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

impl TxnMetadata {
    /// A new transactional id: its producer id at no epoch yet, Empty.
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: i32, now_ms: i64) -> Self {
        Self {
            transactional_id: transactional_id.to_owned(),
            producer_id,
            last_producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_timestamp_ms: -1,
            last_update_timestamp_ms: now_ms,
            pending_state: None,
        }
    }

    /// Kafka's `prepareInitProducerIdTransit`.
    pub fn prepare_init(&self, request: InitRequest) -> Result<InitTransition, ResponseError> {
        self.check_not_pending()?;
        if let Some(expected) = request.expected {
            if !self.is_valid_producer_id(expected) {
                return Err(ResponseError::ProducerFenced);
            }
        }
        match self.state {
            TxnState::PrepareAbort | TxnState::PrepareCommit => Err(ResponseError::ConcurrentTransactions),
            TxnState::Empty | TxnState::CompleteAbort | TxnState::CompleteCommit => {
                let epoch_matches = request.expected.is_none_or(|(_, epoch)| epoch == self.producer_epoch);
                if epoch_exhausted(self.producer_epoch) && epoch_matches {
                    return Ok(InitTransition::NeedsNewProducerId);
                }
                self.prepare_increment_epoch(request).map(InitTransition::Ready)
            }
            TxnState::Ongoing => Ok(InitTransition::FenceOngoing(self.prepare_fence(request.now_ms))),
            TxnState::Dead | TxnState::PrepareEpochFence => Err(ResponseError::ConcurrentTransactions),
        }
    }

    /// Kafka's `isValidProducerId`.
    fn is_valid_producer_id(&self, (producer_id, epoch): (i64, i16)) -> bool {
        self.producer_epoch == NO_PRODUCER_EPOCH
            || producer_id == self.producer_id
            || (producer_id == self.last_producer_id && epoch_exhausted(epoch))
    }

    /// Kafka's `prepareIncrementProducerEpoch`: a bump, or for a retry of a
    /// bump already made (the client sends the epoch before it) the same.
    fn prepare_increment_epoch(&self, request: InitRequest) -> Result<TxnMetadata, ResponseError> {
        let mut next = self.clear_transaction(TxnState::Empty, request.now_ms);
        next.timeout_ms = request.timeout_ms;
        let bumped = self.producer_epoch.saturating_add(1);
        let (epoch, last_epoch) = match request.expected {
            None => (bumped, NO_PRODUCER_EPOCH),
            Some((_, expected))
                if self.producer_epoch == NO_PRODUCER_EPOCH || expected == self.producer_epoch =>
            {
                (bumped, self.producer_epoch)
            }
            // A retry of a bump the client never heard of.
            Some((_, expected)) if expected == self.last_producer_epoch => {
                (self.producer_epoch, self.last_producer_epoch)
            }
            Some(_) => return Err(ResponseError::ProducerFenced),
        };
        next.producer_epoch = epoch;
        next.last_producer_epoch = last_epoch;
        Ok(next)
    }

    /// Kafka's `prepareProducerIdRotation`: a new producer id at epoch 0.
    pub fn prepare_rotation(&self, new_producer_id: i64, request: InitRequest) -> TxnMetadata {
        let mut next = self.clear_transaction(TxnState::Empty, request.now_ms);
        next.timeout_ms = request.timeout_ms;
        next.last_producer_id = self.producer_id;
        next.producer_id = new_producer_id;
        next.last_producer_epoch =
            if request.expected.is_some() { self.producer_epoch } else { NO_PRODUCER_EPOCH };
        next.producer_epoch = 0;
        next
    }

    /// The fence of an ongoing transaction (by a new producer or a timeout):
    /// PrepareAbort at the next epoch, which the markers carry to every
    /// partition so the old producer's writes are refused.
    pub fn prepare_fence(&self, now_ms: i64) -> TxnMetadata {
        let mut next = self.clone();
        if !epoch_exhausted(self.producer_epoch) {
            next.producer_epoch = self.producer_epoch + 1;
        }
        next.last_producer_epoch = NO_PRODUCER_EPOCH;
        next.state = TxnState::PrepareAbort;
        next.last_update_timestamp_ms = now_ms;
        next
    }

    /// Checks a client's producer id and epoch against this id's.
    pub fn check_producer(&self, producer_id: i64, epoch: i16) -> Result<(), ResponseError> {
        if self.producer_id != producer_id {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        if self.producer_epoch != epoch {
            return Err(ResponseError::ProducerFenced);
        }
        Ok(())
    }

    /// CONCURRENT_TRANSACTIONS while a state of this id is being written.
    pub fn check_not_pending(&self) -> Result<(), ResponseError> {
        match self.pending_state {
            Some(_) => Err(ResponseError::ConcurrentTransactions),
            None => Ok(()),
        }
    }

    /// AddPartitionsToTxn (and AddOffsetsToTxn): `None` when nothing needs
    /// writing (the partitions are already in the ongoing transaction).
    pub fn prepare_add_partitions(
        &self,
        producer_id: i64,
        epoch: i16,
        partitions: &[TxnPartition],
        now_ms: i64,
    ) -> Result<Option<TxnMetadata>, ResponseError> {
        self.check_producer(producer_id, epoch)?;
        self.check_not_pending()?;
        match self.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => Err(ResponseError::ConcurrentTransactions),
            TxnState::Ongoing if partitions.iter().all(|p| self.partitions.contains(p)) => Ok(None),
            TxnState::Dead | TxnState::PrepareEpochFence => Err(ResponseError::ConcurrentTransactions),
            _ => {
                let mut next = self.clone();
                if self.state.is_complete_or_empty() {
                    next.partitions.clear();
                    next.start_timestamp_ms = now_ms;
                }
                next.partitions.extend(partitions.iter().cloned());
                next.state = TxnState::Ongoing;
                next.last_update_timestamp_ms = now_ms;
                Ok(Some(next))
            }
        }
    }

    /// AddPartitionsToTxn v4+ with `verify_only`: Kafka's
    /// `handleVerifyPartitionsInTransaction`, one answer per partition.
    pub fn verify_partitions(
        &self,
        producer_id: i64,
        epoch: i16,
        partitions: &[TxnPartition],
    ) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        self.check_producer(producer_id, epoch)?;
        // As Kafka: a transaction about to end takes no more partitions.
        let ending = self.pending_state.is_some_and(|s| s != TxnState::Ongoing);
        if self.state.is_prepared() || ending {
            return Err(ResponseError::ConcurrentTransactions);
        }
        Ok(partitions
            .iter()
            .map(|p| (!self.partitions.contains(p)).then_some(ResponseError::TransactionAbortable))
            .collect())
    }

    /// Whether `partition` belongs to the ongoing transaction of this
    /// producer: the check a transactional produce must pass.
    pub fn verify_produce(
        &self,
        producer_id: i64,
        epoch: i16,
        partition: &TxnPartition,
    ) -> Result<(), ResponseError> {
        self.verify_partitions(producer_id, epoch, std::slice::from_ref(partition))?
            .pop()
            .flatten()
            .map_or(Ok(()), Err)
    }

    /// EndTxn from the client: `Ok(None)` when the transaction already ended
    /// that way (a retry); else the PrepareCommit or PrepareAbort to write.
    pub fn prepare_end(
        &self,
        producer_id: i64,
        epoch: i16,
        result: TxnResult,
        now_ms: i64,
    ) -> Result<Option<TxnMetadata>, ResponseError> {
        self.check_producer(producer_id, epoch)?;
        self.check_not_pending()?;
        let same = |wanted: TxnResult, answer: Result<Option<TxnMetadata>, ResponseError>| {
            if result == wanted {
                answer
            } else {
                Err(ResponseError::InvalidTxnState)
            }
        };
        match self.state {
            TxnState::Ongoing => {
                let mut next = self.clone();
                next.state = match result {
                    TxnResult::Commit => TxnState::PrepareCommit,
                    TxnResult::Abort => TxnState::PrepareAbort,
                };
                next.last_update_timestamp_ms = now_ms;
                Ok(Some(next))
            }
            TxnState::CompleteCommit => same(TxnResult::Commit, Ok(None)),
            TxnState::CompleteAbort => same(TxnResult::Abort, Ok(None)),
            TxnState::PrepareCommit => same(TxnResult::Commit, Err(ResponseError::ConcurrentTransactions)),
            TxnState::PrepareAbort => same(TxnResult::Abort, Err(ResponseError::ConcurrentTransactions)),
            TxnState::Empty => Err(ResponseError::InvalidTxnState),
            TxnState::Dead | TxnState::PrepareEpochFence => Err(ResponseError::ConcurrentTransactions),
        }
    }

    /// Kafka's `prepareComplete`: once every marker is written, the
    /// transaction is complete and holds no partitions.
    pub fn prepare_complete(&self, now_ms: i64) -> Option<TxnMetadata> {
        if self.pending_state.is_some() {
            return None;
        }
        let state = match self.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            _ => return None,
        };
        Some(self.clear_transaction(state, now_ms))
    }

    /// Whether an ongoing transaction outlived its timeout.
    pub fn timed_out(&self, now_ms: i64) -> bool {
        self.state == TxnState::Ongoing
            && self.pending_state.is_none()
            && self.start_timestamp_ms + i64::from(self.timeout_ms) < now_ms
    }

    fn clear_transaction(&self, state: TxnState, now_ms: i64) -> TxnMetadata {
        let mut next = self.clone();
        next.state = state;
        next.pending_state = None;
        next.partitions.clear();
        next.last_update_timestamp_ms = now_ms;
        if state == TxnState::Empty {
            next.start_timestamp_ms = -1;
        }
        next
    }

    /// The transaction's result, for the markers of a prepared state.
    pub fn pending_result(&self) -> Option<TxnResult> {
        match self.state {
            TxnState::PrepareCommit => Some(TxnResult::Commit),
            TxnState::PrepareAbort => Some(TxnResult::Abort),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init(expected: Option<(i64, i16)>) -> InitRequest {
        InitRequest { timeout_ms: 60_000, expected, now_ms: 10 }
    }

    fn ready(transition: Result<InitTransition, ResponseError>) -> TxnMetadata {
        match transition {
            Ok(InitTransition::Ready(next)) => next,
            other => panic!("expected a ready transition, got {other:?}"),
        }
    }

    fn tp(partition: i32) -> TxnPartition {
        ("t".to_owned(), partition)
    }

    /// A fresh id, initialised once: producer 5 at epoch 0.
    fn initialised() -> TxnMetadata {
        ready(TxnMetadata::new("tx", 5, 60_000, 0).prepare_init(init(None)))
    }

    #[test]
    fn codes_and_names_are_kafkas() {
        assert_eq!(TxnState::Empty.code(), 0);
        assert_eq!(TxnState::CompleteAbort.code(), 5);
        assert_eq!(TxnState::PrepareEpochFence.code(), 7);
        assert_eq!(TxnState::from_code(4), Some(TxnState::CompleteCommit));
        assert_eq!(TxnState::from_code(8), None);
        assert_eq!(TxnState::from_name("PrepareCommit"), Some(TxnState::PrepareCommit));
    }

    #[test]
    fn a_full_transaction_walks_kafkas_states() {
        let meta = initialised();
        assert_eq!((meta.producer_epoch, meta.state), (0, TxnState::Empty));
        let ongoing = meta.prepare_add_partitions(5, 0, &[tp(0), tp(1)], 20).unwrap().unwrap();
        assert_eq!(
            (ongoing.state, ongoing.start_timestamp_ms, ongoing.partitions.len()),
            (TxnState::Ongoing, 20, 2)
        );
        assert_eq!(ongoing.prepare_add_partitions(5, 0, &[tp(1)], 30).unwrap(), None, "already added");
        let more = ongoing.prepare_add_partitions(5, 0, &[tp(2)], 30).unwrap().unwrap();
        assert_eq!(more.start_timestamp_ms, 20, "the transaction keeps its start");
        let prepared = more.prepare_end(5, 0, TxnResult::Commit, 40).unwrap().unwrap();
        assert_eq!(prepared.state, TxnState::PrepareCommit);
        assert_eq!(prepared.pending_result(), Some(TxnResult::Commit));
        assert_eq!(
            prepared.prepare_add_partitions(5, 0, &[tp(3)], 41),
            Err(ResponseError::ConcurrentTransactions)
        );
        assert_eq!(
            prepared.prepare_end(5, 0, TxnResult::Commit, 41),
            Err(ResponseError::ConcurrentTransactions)
        );
        assert_eq!(prepared.prepare_end(5, 0, TxnResult::Abort, 41), Err(ResponseError::InvalidTxnState));
        let complete = prepared.prepare_complete(50).unwrap();
        assert_eq!((complete.state, complete.partitions.len()), (TxnState::CompleteCommit, 0));
        assert_eq!(complete.prepare_end(5, 0, TxnResult::Commit, 60), Ok(None), "a retried commit succeeds");
        assert_eq!(complete.prepare_end(5, 0, TxnResult::Abort, 60), Err(ResponseError::InvalidTxnState));
        let next = complete.prepare_add_partitions(5, 0, &[tp(7)], 70).unwrap().unwrap();
        assert_eq!((next.start_timestamp_ms, next.partitions.len()), (70, 1), "a new transaction begins");
    }

    #[test]
    fn wrong_producers_and_epochs_are_refused() {
        let meta = initialised();
        assert_eq!(
            meta.prepare_add_partitions(6, 0, &[tp(0)], 1),
            Err(ResponseError::InvalidProducerIdMapping)
        );
        assert_eq!(meta.prepare_add_partitions(5, 1, &[tp(0)], 1), Err(ResponseError::ProducerFenced));
        assert_eq!(
            meta.prepare_end(5, 0, TxnResult::Commit, 1),
            Err(ResponseError::InvalidTxnState),
            "Empty"
        );
    }

    #[test]
    fn init_bumps_the_epoch_and_fences_an_ongoing_transaction() {
        let meta = initialised();
        let bumped = ready(meta.prepare_init(init(None)));
        assert_eq!((bumped.producer_id, bumped.producer_epoch, bumped.last_producer_epoch), (5, 1, -1));
        let ongoing = bumped.prepare_add_partitions(5, 1, &[tp(0)], 20).unwrap().unwrap();
        let InitTransition::FenceOngoing(fenced) = ongoing.prepare_init(init(None)).unwrap() else {
            panic!()
        };
        assert_eq!((fenced.state, fenced.producer_epoch), (TxnState::PrepareAbort, 2));
        assert_eq!(fenced.partitions.len(), 1, "the abort reaches the transaction's partitions");
        assert_eq!(fenced.prepare_init(init(None)), Err(ResponseError::ConcurrentTransactions));
        let aborted = fenced.prepare_complete(30).unwrap();
        let again = ready(aborted.prepare_init(init(None)));
        assert_eq!(again.producer_epoch, 3, "the client's retry gets a second bump");
        // The fenced producer (epoch 1) is told so everywhere.
        assert_eq!(again.prepare_end(5, 1, TxnResult::Commit, 40), Err(ResponseError::ProducerFenced));
    }

    #[test]
    fn kip_360_inits_with_the_current_id_are_bumps_or_retries() {
        let meta = ready(initialised().prepare_init(init(None)));
        assert_eq!(meta.producer_epoch, 1);
        let bumped = ready(meta.prepare_init(init(Some((5, 1)))));
        assert_eq!(bumped.producer_epoch, 2);
        let retried = ready(bumped.prepare_init(init(Some((5, 1)))));
        assert_eq!(retried.producer_epoch, 2, "a retry of the same bump");
        assert_eq!(bumped.prepare_init(init(Some((5, 0)))), Err(ResponseError::ProducerFenced));
        assert_eq!(bumped.prepare_init(init(Some((9, 2)))), Err(ResponseError::ProducerFenced));
    }

    #[test]
    fn an_exhausted_epoch_rotates_the_producer_id() {
        let mut meta = initialised();
        meta.producer_epoch = i16::MAX - 1;
        assert_eq!(meta.prepare_init(init(None)), Ok(InitTransition::NeedsNewProducerId));
        let rotated = meta.prepare_rotation(77, init(None));
        assert_eq!((rotated.producer_id, rotated.producer_epoch, rotated.last_producer_id), (77, 0, 5));
    }

    #[test]
    fn a_state_being_written_makes_other_requests_concurrent() {
        let mut ongoing = initialised().prepare_add_partitions(5, 0, &[tp(0)], 100).unwrap().unwrap();
        ongoing.pending_state = Some(TxnState::PrepareCommit);
        let concurrent = ResponseError::ConcurrentTransactions;
        assert_eq!(ongoing.prepare_end(5, 0, TxnResult::Commit, 110), Err(concurrent));
        assert_eq!(ongoing.prepare_add_partitions(5, 0, &[tp(1)], 110), Err(concurrent));
        assert_eq!(ongoing.prepare_init(init(None)), Err(concurrent));
        assert_eq!(
            ongoing.verify_produce(5, 0, &tp(0)),
            Err(concurrent),
            "no produce into an ending transaction"
        );
        assert_eq!(ongoing.prepare_end(5, 1, TxnResult::Commit, 110), Err(ResponseError::ProducerFenced));
        assert!(!ongoing.timed_out(1 << 40), "the write in flight decides its fate");
        ongoing.pending_state = Some(TxnState::Ongoing);
        assert_eq!(ongoing.verify_produce(5, 0, &tp(0)), Ok(()), "partitions being added still verify");
        ongoing.pending_state = None;
        let prepared = ongoing.prepare_end(5, 0, TxnResult::Commit, 120).unwrap().unwrap();
        assert_eq!(prepared.pending_state, None);
        let mut completing = prepared.clone();
        completing.pending_state = Some(TxnState::CompleteCommit);
        assert_eq!(completing.prepare_complete(130), None, "completed once");
        assert_eq!(prepared.prepare_complete(130).unwrap().state, TxnState::CompleteCommit);
    }

    #[test]
    fn verification_and_timeouts() {
        let ongoing = initialised().prepare_add_partitions(5, 0, &[tp(0)], 100).unwrap().unwrap();
        assert_eq!(
            ongoing.verify_partitions(5, 0, &[tp(0), tp(1)]),
            Ok(vec![None, Some(ResponseError::TransactionAbortable)])
        );
        assert_eq!(ongoing.verify_produce(5, 0, &tp(0)), Ok(()));
        assert_eq!(ongoing.verify_produce(5, 0, &tp(1)), Err(ResponseError::TransactionAbortable));
        assert_eq!(ongoing.verify_produce(5, 1, &tp(0)), Err(ResponseError::ProducerFenced));
        assert!(!ongoing.timed_out(100 + 60_000));
        assert!(ongoing.timed_out(100 + 60_001));
        let fenced = ongoing.prepare_fence(60_101);
        assert_eq!((fenced.state, fenced.producer_epoch), (TxnState::PrepareAbort, 1));
        assert!(!fenced.timed_out(1 << 40), "only ongoing transactions time out");
    }
}
