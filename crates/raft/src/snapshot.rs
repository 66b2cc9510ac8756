//! Snapshots (KIP-630): the state machine records one at a committed
//! offset, the log may then drop what lies below it, and a follower the
//! leader can no longer serve from its log pulls the snapshot with
//! FetchSnapshot, chunk by chunk, and installs it at once.
//!
//! Rules from Kafka's `KafkaMetadataLog` (`createNewSnapshot`,
//! `deleteBeforeSnapshot`) and `KafkaRaftClient` (`handleFetchSnapshotRequest`,
//! `handleFetchSnapshotResponse`).

use bytes::Bytes;

use crate::checkpoint::Checkpoint;

use crate::config::QuorumConfig;
use crate::log::{OffsetAndEpoch, RaftLog};
use crate::message::{Body, ErrorCode};
use crate::node::{Action, RaftNode};
use crate::state::{Role, SnapshotFetch};
use crate::voters::{BaseSource, ControlHistory, VoterSet, KRAFT_VERSION_STATIC};
use crate::NodeId;

/// The voter history a node starts with: the latest snapshot's header (or
/// the configuration) then the control records of the log above it
/// (Kafka's `KRaftControlRecordStateMachine.updateState`).
pub(crate) fn recover_history(config: &QuorumConfig, log: &impl RaftLog) -> ControlHistory {
    let mut history = configured_history(config);
    let mut from = log.start_offset();
    if let Some(id) = log.latest_snapshot() {
        if let Some((_, content)) = log.read_snapshot(id, 0, usize::MAX) {
            // The driver checked the file before handing the log over.
            if let Ok(checkpoint) = Checkpoint::decode(&content) {
                history = history_from_snapshot(config, checkpoint);
            }
            from = id.offset;
        }
    }
    if from < log.end_offset() {
        for batch in log.read(from, usize::MAX) {
            history.on_append(&batch);
        }
    }
    history
}

fn configured_history(config: &QuorumConfig) -> ControlHistory {
    match &config.bootstrap_voters {
        Some(voters) => {
            ControlHistory::new(crate::voters::KRAFT_VERSION_DYNAMIC, voters.clone(), BaseSource::Config)
        }
        None => ControlHistory::new(
            KRAFT_VERSION_STATIC,
            VoterSet::from_ids(config.voters.iter().copied()),
            BaseSource::Config,
        ),
    }
}

/// The history a snapshot starts: its voters, or the configured ones for
/// a snapshot that carries none.
fn history_from_snapshot(config: &QuorumConfig, checkpoint: Checkpoint) -> ControlHistory {
    match checkpoint.voters {
        Some(voters) if !voters.is_empty() => {
            ControlHistory::new(checkpoint.kraft_version, voters, BaseSource::Snapshot)
        }
        _ => configured_history(config),
    }
}

/// Why a snapshot was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotError {
    /// Its end offset is past the high watermark (or none is known):
    /// only committed state may be snapshotted.
    AboveHighWatermark,
    /// Its end offset is not past the log start and the latest snapshot.
    NotNewer,
    /// The log has no batch of that epoch ending at that offset.
    InvalidId,
}

/// What the state machine hands over for a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotState {
    /// Its state below the snapshot's end offset, as records.
    pub records: Vec<Bytes>,
    /// When the last record it covers was appended (the header's
    /// `LastContainedLogTimestamp`), wall-clock milliseconds.
    pub last_contained_log_timestamp_ms: i64,
    /// Wall-clock milliseconds now, the batches' timestamp.
    pub timestamp_ms: i64,
}

/// The fields of a FetchSnapshot request the leader reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FetchSnapshotParams {
    pub replica_id: NodeId,
    pub current_leader_epoch: i32,
    pub snapshot_id: OffsetAndEpoch,
    pub position: u64,
    pub max_bytes: usize,
    pub replica_directory_id: Option<uuid::Uuid>,
}

/// The fields of a FetchSnapshot response the follower reads.
#[derive(Debug, Clone)]
pub(crate) struct SnapshotChunk {
    pub error: ErrorCode,
    pub leader_epoch: i32,
    pub leader_id: Option<NodeId>,
    pub snapshot_id: OffsetAndEpoch,
    pub size: u64,
    pub position: u64,
    pub bytes: Bytes,
}

impl<L: RaftLog> RaftNode<L> {
    /// Records a snapshot the state machine took of its state below
    /// `snapshot_id.offset`, the end of a batch of epoch `snapshot_id.epoch`
    /// at or below the high watermark (Kafka's `createNewSnapshot`), as a
    /// checkpoint file in Kafka's layout ([`Checkpoint`]).
    pub fn create_snapshot(
        &mut self,
        now: u64,
        snapshot_id: OffsetAndEpoch,
        state: SnapshotState,
    ) -> Result<(), SnapshotError> {
        let result = self.record_snapshot(snapshot_id, state);
        self.poll(now);
        result
    }

    fn record_snapshot(
        &mut self,
        snapshot_id: OffsetAndEpoch,
        state: SnapshotState,
    ) -> Result<(), SnapshotError> {
        let high_watermark = self.high_watermark.unwrap_or(0);
        if snapshot_id.offset > high_watermark && !self.snapshots_above_high_watermark() {
            return Err(SnapshotError::AboveHighWatermark);
        }
        let newest = self.log.latest_snapshot().map_or(0, |id| id.offset).max(self.log.start_offset());
        if snapshot_id.offset <= newest {
            return Err(SnapshotError::NotNewer);
        }
        if !self.ends_a_batch_of_epoch(snapshot_id) {
            return Err(SnapshotError::InvalidId);
        }
        let content = self.checkpoint(snapshot_id, state);
        self.log.create_snapshot(snapshot_id, content.clone());
        self.push_action(Action::WriteSnapshot { snapshot_id, content });
        Ok(())
    }

    /// The checkpoint file of `state`, behind the `kraft.version` and
    /// voters in force at the snapshot's end (Kafka's `createSnapshot`:
    /// `kraftVersionAtOffset`, `voterSetAtOffset`).
    fn checkpoint(&self, snapshot_id: OffsetAndEpoch, state: SnapshotState) -> Bytes {
        let (kraft_version, voters) = self.history.before(snapshot_id.offset);
        let checkpoint = Checkpoint {
            last_contained_log_timestamp_ms: state.last_contained_log_timestamp_ms,
            kraft_version,
            voters: (kraft_version > KRAFT_VERSION_STATIC).then(|| voters.clone()),
            records: state.records,
        };
        checkpoint.encode(snapshot_id.epoch, state.timestamp_ms)
    }

    /// Moves the log start up to the latest snapshot, dropping the batches
    /// below it, if the snapshot lies past the start and at or below the
    /// high watermark (Kafka's `deleteBeforeSnapshot`, which `maybeClean`
    /// calls once `metadata.max.retention.bytes` or `.ms` is exceeded: that
    /// policy is the caller's). Returns whether the start moved.
    pub fn delete_before_snapshot(&mut self, now: u64) -> bool {
        let moved = self.move_log_start();
        self.poll(now);
        moved
    }

    fn move_log_start(&mut self) -> bool {
        let Some(snapshot_id) = self.log.latest_snapshot() else { return false };
        let high_watermark = self.high_watermark.unwrap_or(0);
        if snapshot_id.offset <= self.log.start_offset() || snapshot_id.offset > high_watermark {
            return false;
        }
        self.log.delete_before_snapshot();
        self.history.forget_before(snapshot_id.offset);
        // What lies below the start is durable in the snapshot.
        self.flushed_offset = self.flushed_offset.max(snapshot_id.offset);
        self.push_action(Action::DeleteLogBefore { offset: snapshot_id.offset });
        true
    }

    /// Whether the record before `id.offset` is the last of a batch of
    /// epoch `id.epoch`: `id.epoch` reaches that far and the epoch before
    /// it ends earlier (Kafka's `validateOffsetAndEpoch`, plus the batch
    /// boundary the log start must fall on).
    fn ends_a_batch_of_epoch(&self, id: OffsetAndEpoch) -> bool {
        if id.offset > self.log.end_offset() || id.epoch <= 0 {
            return false;
        }
        let at_boundary = match self.log.read(id.offset, 0).first() {
            Some(batch) => batch.base_offset == id.offset,
            None => true,
        };
        let through = self.log.end_offset_for_epoch(id.epoch);
        let before = self.log.end_offset_for_epoch(id.epoch - 1);
        at_boundary && through.epoch == id.epoch && through.offset >= id.offset && before.offset < id.offset
    }

    #[cfg(test)]
    fn snapshots_above_high_watermark(&self) -> bool {
        self.bugs.snapshot_above_high_watermark
    }

    #[cfg(not(test))]
    fn snapshots_above_high_watermark(&self) -> bool {
        false
    }

    // ---- leader side ---------------------------------------------------

    /// Serves a chunk of a snapshot the leader holds (Kafka's
    /// `handleFetchSnapshotRequest`); the fetch counts for check-quorum.
    pub(crate) fn handle_fetch_snapshot_request(
        &mut self,
        now: u64,
        from: NodeId,
        fetch: FetchSnapshotParams,
    ) -> Body {
        let answer = |node: &Self, error, size, bytes| Body::FetchSnapshotResponse {
            error,
            leader_epoch: node.epoch,
            leader_id: node.leader_id(),
            snapshot_id: fetch.snapshot_id,
            size,
            position: fetch.position,
            bytes,
        };
        let error = self.validate_leader_request(from, fetch.replica_id, fetch.current_leader_epoch);
        if error != ErrorCode::None {
            return answer(self, error, 0, Bytes::new());
        }
        let replica = crate::voters::ReplicaKey::new(fetch.replica_id, fetch.replica_directory_id);
        self.note_voter_fetch(now, replica);
        let max_bytes = fetch.max_bytes.min(self.config.fetch_snapshot_max_bytes);
        match self.log.read_snapshot(fetch.snapshot_id, fetch.position, max_bytes) {
            None => answer(self, ErrorCode::SnapshotNotFound, 0, Bytes::new()),
            Some((size, _)) if fetch.position >= size => {
                answer(self, ErrorCode::PositionOutOfRange, size, Bytes::new())
            }
            Some((size, bytes)) => answer(self, ErrorCode::None, size, bytes),
        }
    }

    // ---- follower side -------------------------------------------------

    /// The leader cannot serve our fetch position from its log: pull its
    /// snapshot instead (Kafka's `handleFetchResponse` with a snapshot id).
    /// False for an id no snapshot can have.
    pub(crate) fn start_snapshot_fetch(&mut self, id: OffsetAndEpoch) -> bool {
        let epoch = self.epoch;
        let Role::Follower { snapshot_fetch, .. } = &mut self.role else { return false };
        let valid = id.offset > 0 && id.epoch > 0 && id.epoch <= epoch;
        if valid {
            *snapshot_fetch = Some(SnapshotFetch { id, size: None, content: Vec::new() });
        }
        valid
    }

    /// The next FetchSnapshot to send, if a snapshot is being pulled.
    pub(crate) fn fetch_snapshot_request(&self) -> Option<Body> {
        let Role::Follower { snapshot_fetch: Some(fetch), .. } = &self.role else { return None };
        Some(Body::FetchSnapshotRequest {
            replica_id: self.config.node_id,
            current_leader_epoch: self.epoch,
            snapshot_id: fetch.id,
            position: fetch.content.len() as u64,
            max_bytes: self.config.fetch_snapshot_max_bytes,
            replica_directory_id: self.config.directory_id,
        })
    }

    /// Appends a chunk to the snapshot being pulled and installs it once
    /// complete (Kafka's `handleFetchSnapshotResponse`). An error, or a
    /// chunk that does not continue what we hold, discards the partial
    /// snapshot: the next Fetch tells which snapshot to pull now.
    pub(crate) fn handle_fetch_snapshot_response(&mut self, now: u64, from: NodeId, chunk: SnapshotChunk) {
        if self.handle_common_response(now, from, chunk.error, chunk.leader_epoch, chunk.leader_id) {
            return;
        }
        let fetch_timeout = self.config.fetch_timeout_ms;
        let Role::Follower { leader, fetch_deadline_ms, snapshot_fetch, .. } = &mut self.role else { return };
        if *leader != from {
            return;
        }
        let Some(fetch) = snapshot_fetch else { return };
        let fits = chunk.error == ErrorCode::None
            && chunk.snapshot_id == fetch.id
            && chunk.position == fetch.content.len() as u64
            && fetch.size.is_none_or(|size| size == chunk.size)
            && !chunk.bytes.is_empty()
            && chunk.position.saturating_add(chunk.bytes.len() as u64) <= chunk.size;
        if !fits {
            *snapshot_fetch = None;
            return;
        }
        *fetch_deadline_ms = now.saturating_add(fetch_timeout);
        fetch.size = Some(chunk.size);
        fetch.content.extend_from_slice(&chunk.bytes);
        if fetch.content.len() as u64 == chunk.size {
            let id = fetch.id;
            let content = Bytes::from(std::mem::take(&mut fetch.content));
            *snapshot_fetch = None;
            if !self.install_snapshot(id, content) {
                // Pull it again only after a pause, not in a tight loop.
                self.requests.back_off(from, now, self.config.retry_backoff_ms);
            }
        }
    }

    /// Replaces the log with the fetched snapshot (Kafka's
    /// `truncateToLatestSnapshot`, which `truncateFullyAndStartAt`s): the
    /// leader sent it because it could not validate our log, so nothing
    /// past it can be trusted. Committed records are never cut: a snapshot
    /// below our high watermark or log start is refused, as only a broken
    /// leader can send it. Returns whether it was installed.
    fn install_snapshot(&mut self, id: OffsetAndEpoch, content: Bytes) -> bool {
        let floor = self.high_watermark.unwrap_or(0).max(self.log.start_offset());
        if id.offset < floor {
            self.refused_truncations += 1;
            return false;
        }
        let Ok(checkpoint) = Checkpoint::decode(&content) else {
            // Damaged on the way or at the leader: never install it; the
            // next Fetch names the snapshot to pull again.
            self.refused_snapshots += 1;
            return false;
        };
        self.history = history_from_snapshot(&self.config, checkpoint);
        self.log.install_snapshot(id, content.clone());
        self.push_action(Action::InstallSnapshot { snapshot_id: id, content });
        self.flushed_offset = id.offset;
        for (_, pending) in &mut self.pending_flushes {
            *pending = (*pending).min(id.offset);
        }
        // The snapshot is committed (Kafka's `updateFollowerHighWatermark`
        // after the install).
        self.high_watermark = Some(self.high_watermark.unwrap_or(0).max(id.offset));
        true
    }
}
