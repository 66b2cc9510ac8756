//! The metadata log of a KRaft node: the controller writes through the
//! quorum, and every node (controller or broker) applies what the quorum
//! commits to its [`MetadataLoader`].
//!
//! [`QuorumRecordLog::start`] subscribes to the quorum and feeds its events
//! to the loader on a task of its own: committed batches are applied in
//! order, a snapshot replaces the image. It also tracks the committed end
//! the loader has reached, counting the quorum's control batches (which
//! never reach the loader), so start-up can wait for the loader to catch up
//! with the high watermark and a new active controller can wait until it
//! has applied everything committed before its epoch, as Kafka's
//! `QuorumController` does before it claims leadership.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use strom_quorum::{LeaderAndEpoch, Quorum, QuorumError, QuorumEvent};
use tokio::sync::{mpsc, watch};

use crate::loader::MetadataLoader;
use crate::record_log::{AppendError, AppendFuture, Claim, ClaimFuture, RecordLog};

/// How often the feeder rereads the high watermark when no commit arrives
/// (a commit of control batches only moves it without an event).
const HIGH_WATERMARK_POLL: Duration = Duration::from_millis(50);
/// How long an append or a claim waits for the quorum before the
/// controller answers NOT_CONTROLLER and the client retries.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(30);

/// When the feeder snapshots the image (Kafka's
/// `metadata.log.max.record.bytes.between.snapshots` and
/// `metadata.log.max.snapshot.interval.ms`).
#[derive(Debug, Clone, Copy)]
pub struct SnapshotPolicy {
    /// Snapshot once this many record bytes were applied since the last one.
    pub max_bytes: u64,
    /// Snapshot this long after the first record applied since the last one.
    pub max_interval: Duration,
}

/// The controller's [`RecordLog`] on a KRaft node.
pub struct QuorumRecordLog {
    quorum: Quorum,
    loader: Arc<MetadataLoader>,
    /// One past the last committed offset the loader has applied.
    applied_end: watch::Receiver<u64>,
    /// Flips when the node shuts down: waiting writes give up at once.
    closed: watch::Sender<bool>,
}

impl QuorumRecordLog {
    /// Subscribes to `quorum` and starts feeding `loader` (on the current runtime).
    pub fn start(quorum: Quorum, loader: Arc<MetadataLoader>, snapshots: SnapshotPolicy) -> Self {
        let (applied_tx, applied_end) = watch::channel(0);
        let feeder =
            Feeder { quorum: quorum.clone(), loader: loader.clone(), applied_end: applied_tx, snapshots };
        tokio::spawn(feeder.run(quorum.subscribe()));
        Self { quorum, loader, applied_end, closed: watch::channel(false).0 }
    }

    /// The quorum this log writes through.
    pub fn quorum(&self) -> &Quorum {
        &self.quorum
    }

    /// Ends every wait for a commit (NOT_CONTROLLER), for shutdown.
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    /// The loader this log feeds.
    pub fn loader(&self) -> &Arc<MetadataLoader> {
        &self.loader
    }

    /// Waits until the loader has applied everything below `end_offset`.
    pub async fn wait_applied(&self, end_offset: u64) {
        let mut applied = self.applied_end.clone();
        let _ = applied.wait_for(|applied| *applied >= end_offset).await;
    }

    /// Waits until this node knows a high watermark and its loader has
    /// applied everything below it (start-up's metadata catch-up).
    pub async fn catch_up(&self) {
        let mut leader = self.quorum.leader();
        let high_watermark = loop {
            if let Some(hw) = self.quorum.high_watermark().filter(|_| leader.borrow().leader_id.is_some()) {
                break hw;
            }
            let _ = tokio::time::timeout(HIGH_WATERMARK_POLL, leader.changed()).await;
        };
        self.wait_applied(high_watermark).await;
    }

    fn not_controller(&self) -> AppendError {
        AppendError::NotController { leader_id: self.quorum.leader().borrow().leader_id }
    }

    /// The current epoch if this node leads it.
    fn leading_epoch(&self) -> Result<i32, AppendError> {
        let LeaderAndEpoch { leader_id, epoch } = *self.quorum.leader().borrow();
        match leader_id == Some(self.quorum.node_id()) {
            true => Ok(epoch),
            false => Err(AppendError::NotController { leader_id }),
        }
    }

    async fn claim_epoch(&self) -> Result<Claim, AppendError> {
        let epoch = self.leading_epoch()?;
        // Everything in the log when this node became leader is below its
        // log end now: this node appends only after a claim, under the
        // controller's lock.
        let end_offset = self.within_epoch(epoch, self.quorum.log_end_offset()).await?;
        let next_offset = end_offset.map_err(|e| self.quorum_error(e))?;
        self.within_epoch(epoch, self.wait_applied(next_offset)).await?;
        Ok(Claim { epoch, next_offset })
    }

    /// Runs `wait` while this node leads `epoch`, for at most the commit timeout.
    async fn within_epoch<T>(
        &self,
        epoch: i32,
        wait: impl std::future::Future<Output = T>,
    ) -> Result<T, AppendError> {
        let mut leader = self.quorum.leader();
        let deposed =
            leader.wait_for(|now| now.epoch != epoch || now.leader_id != Some(self.quorum.node_id()));
        tokio::select! {
            biased;
            done = wait => Ok(done),
            _ = deposed => Err(self.not_controller()),
            _ = tokio::time::sleep(COMMIT_TIMEOUT) => Err(self.not_controller()),
        }
    }

    async fn append_in_epoch(&self, epoch: i32, records: Vec<Bytes>) -> Result<u64, AppendError> {
        let appended = self.within_epoch(epoch, self.quorum.append_in_epoch(epoch, records)).await?;
        let last_offset = appended.map_err(|e| self.quorum_error(e))?;
        self.within_epoch(epoch, self.loader.wait_for_offset(last_offset)).await?;
        // A batch of another leader at that offset means ours was truncated.
        match self.loader.batch_epoch(last_offset) {
            Some(applied) if applied == epoch => Ok(last_offset),
            _ => Err(self.not_controller()),
        }
    }

    fn quorum_error(&self, e: QuorumError) -> AppendError {
        match e {
            QuorumError::NotLeader { leader } => AppendError::NotController { leader_id: leader.leader_id },
            QuorumError::Storage(reason) => {
                AppendError::Storage(strom_storage::StorageError::LogOffline(reason))
            }
            _ => self.not_controller(),
        }
    }
}

impl RecordLog for QuorumRecordLog {
    fn claim(&self) -> ClaimFuture<'_> {
        Box::pin(self.claim_epoch())
    }

    fn append(&self, epoch: i32, records: Vec<Bytes>) -> AppendFuture<'_> {
        Box::pin(self.append_in_epoch(epoch, records))
    }
}

/// The task that applies the quorum's events to the loader.
struct Feeder {
    quorum: Quorum,
    loader: Arc<MetadataLoader>,
    applied_end: watch::Sender<u64>,
    snapshots: SnapshotPolicy,
}

impl Feeder {
    /// Applies the quorum's events until the quorum stops.
    async fn run(self, mut events: mpsc::UnboundedReceiver<QuorumEvent>) {
        let mut poll = tokio::time::interval(HIGH_WATERMARK_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Record bytes applied since the last snapshot, and when the first was.
        let mut unsnapshotted: (u64, Option<tokio::time::Instant>) = (0, None);
        loop {
            let event = tokio::select! {
                event = events.recv() => match event {
                    Some(event) => Some(event),
                    None => return,
                },
                _ = poll.tick() => None,
            };
            // Read before looking at the queue: the quorum hands over every
            // batch below a high watermark before it publishes it, so an
            // empty queue then means all of them were applied.
            let high_watermark = self.quorum.high_watermark().unwrap_or(0);
            if let Some(event) = event {
                if let QuorumEvent::Commit { records, .. } = &event {
                    unsnapshotted.0 += records.iter().map(|r| r.len() as u64).sum::<u64>();
                    unsnapshotted.1.get_or_insert_with(tokio::time::Instant::now);
                }
                match apply(&self.loader, event) {
                    Ok(Some(end)) => raise(&self.applied_end, end),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::error!("metadata replay stopped: {e}");
                        return;
                    }
                }
            }
            if events.is_empty() {
                raise(&self.applied_end, high_watermark);
            }
            let (bytes, since) = unsnapshotted;
            let due = bytes >= self.snapshots.max_bytes
                || since.is_some_and(|since| since.elapsed() >= self.snapshots.max_interval);
            if due && self.snapshot().await {
                unsnapshotted = (0, None);
            }
        }
    }

    /// Hands the quorum a snapshot of the image at its last applied batch.
    async fn snapshot(&self) -> bool {
        let image = self.loader.image();
        let Ok(last_offset) = u64::try_from(image.last_offset) else { return false };
        let Some(epoch) = self.loader.batch_epoch(last_offset) else { return false };
        let records = crate::loader::snapshot_content(&image);
        match self.quorum.create_snapshot(last_offset + 1, epoch, records).await {
            Ok(()) => {
                tracing::info!(end_offset = last_offset + 1, epoch, "metadata snapshot written");
                true
            }
            Err(e) => {
                tracing::warn!("metadata snapshot failed: {e}");
                false
            }
        }
    }
}

fn raise(applied_end: &watch::Sender<u64>, end: u64) {
    applied_end.send_if_modified(|applied| {
        let raised = end > *applied;
        *applied = (*applied).max(end);
        raised
    });
}

/// Applies one event; returns the end offset it covers, if any.
fn apply(loader: &MetadataLoader, event: QuorumEvent) -> Result<Option<u64>, String> {
    match event {
        QuorumEvent::Commit { base_offset, epoch, records } => {
            loader.apply_batch(base_offset, epoch, &records).map_err(|e| e.to_string())?;
            Ok(Some(base_offset + records.len() as u64))
        }
        QuorumEvent::LoadSnapshot { end_offset, records, .. } => {
            loader.load_snapshot(end_offset, &records).map_err(|e| e.to_string())?;
            Ok(Some(end_offset))
        }
        QuorumEvent::LeaderChange(_) => Ok(None),
    }
}
