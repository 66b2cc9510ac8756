//! The leader's view of its replicas, as Kafka's `Partition` keeps it: each
//! follower's log end offset and last caught-up time, the ISR committed in
//! the metadata and the one proposed to the controller, and the rules that
//! move the high watermark and the ISR. Pure state: the caller brings the
//! clock and the leader's log end offset, and sends the AlterPartition the
//! rules ask for.

use std::collections::BTreeMap;

/// What the leader knows of one follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerProgress {
    /// The offset its last fetch asked for: its log end offset; -1 unknown.
    pub log_end_offset: i64,
    /// The last time it was known to hold everything the leader held.
    pub last_caught_up_ms: i64,
    /// The leader's log end offset at its previous fetch.
    last_fetch_leader_log_end: i64,
    last_fetch_ms: i64,
    /// The broker epoch its last fetch named (KIP-903).
    pub broker_epoch: i64,
}

impl FollowerProgress {
    fn new(now_ms: i64) -> Self {
        Self {
            log_end_offset: -1,
            last_caught_up_ms: now_ms,
            last_fetch_leader_log_end: -1,
            last_fetch_ms: now_ms,
            broker_epoch: -1,
        }
    }
}

/// The replica set of a partition as this broker sees it.
#[derive(Debug, Clone, Default)]
pub struct ReplicaSet {
    local: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    /// The partition epoch of the ISR committed (rises with every change).
    pub partition_epoch: i32,
    pub replicas: Vec<i32>,
    /// The ISR the metadata (or the controller's answer) committed.
    pub isr: Vec<i32>,
    /// The ISR proposed in an AlterPartition still unanswered.
    pub pending: Option<Vec<i32>>,
    /// Whether `pending` still waits to be sent.
    pub unsent: bool,
    followers: BTreeMap<i32, FollowerProgress>,
    /// Where this broker's leadership began: a follower joins the ISR only
    /// once it holds the whole of earlier epochs.
    leader_epoch_start_offset: i64,
    /// `replica.lag.time.max.ms`.
    pub lag_time_max_ms: i64,
    /// Followers whose brokers may not join the ISR (fenced, shutting
    /// down or unregistered): Kafka's `isReplicaIsrEligible`.
    ineligible: Vec<i32>,
}

impl ReplicaSet {
    pub fn new(local: i32, lag_time_max_ms: i64) -> Self {
        Self { local, leader: -1, lag_time_max_ms, ..Self::default() }
    }

    /// Takes the partition state of a new image. A new leader or epoch
    /// starts every follower afresh (unknown log end, caught up now), as
    /// Kafka's `makeLeader` does; a newer partition epoch replaces the ISR
    /// and ends any proposal. Returns whether leadership or epoch changed.
    pub fn apply(
        &mut self,
        image: &strom_metadata::PartitionImage,
        log_end_offset: i64,
        now_ms: i64,
        eligible: &dyn Fn(i32) -> bool,
    ) -> bool {
        let changed = image.leader != self.leader || image.leader_epoch != self.leader_epoch;
        if image.partition_epoch > self.partition_epoch || changed {
            self.isr = image.isr.clone();
            self.partition_epoch = image.partition_epoch;
            self.pending = None;
            self.unsent = false;
        }
        self.replicas = image.replicas.clone();
        if changed {
            self.leader = image.leader;
            self.leader_epoch = image.leader_epoch;
            self.leader_epoch_start_offset = log_end_offset;
            self.followers.clear();
        }
        let followers: Vec<i32> = self.replicas.iter().copied().filter(|r| *r != self.local).collect();
        self.followers.retain(|id, _| followers.contains(id));
        self.ineligible = followers.iter().copied().filter(|id| !eligible(*id)).collect();
        for id in followers {
            self.followers.entry(id).or_insert_with(|| FollowerProgress::new(now_ms));
        }
        changed
    }

    /// Kafka's maximal ISR: the committed ISR plus the replicas a pending
    /// expansion adds (a pending shrink still counts the leaving ones).
    pub fn maximal_isr(&self) -> Vec<i32> {
        let mut isr = self.isr.clone();
        for id in self.pending.iter().flatten() {
            if !isr.contains(id) {
                isr.push(*id);
            }
        }
        isr
    }

    /// Proposes `isr`: pending until the controller answers.
    pub fn propose(&mut self, isr: Vec<i32>) {
        self.pending = Some(isr);
        self.unsent = true;
    }

    /// The ISR proposal not yet sent, each member with the broker epoch
    /// it last fetched with (this broker's own given as `local_epoch`).
    pub fn take_unsent(&mut self, local_epoch: i64) -> Option<Vec<(i32, i64)>> {
        if !std::mem::take(&mut self.unsent) {
            return None;
        }
        let epoch_of = |id: i32| match id == self.local {
            true => local_epoch,
            false => self.followers.get(&id).map_or(-1, |p| p.broker_epoch),
        };
        Some(self.pending.as_ref()?.iter().map(|id| (*id, epoch_of(*id))).collect())
    }

    pub fn follower(&self, id: i32) -> Option<&FollowerProgress> {
        self.followers.get(&id)
    }

    /// Kafka's `updateFollowerFetchState`: a fetch from `fetch_offset`
    /// proves the follower holds everything below it; it was caught up at
    /// this fetch if it reached the leader's end, or at its previous fetch
    /// if it reached the leader's end as of then. Returns false for a
    /// replica that is not a follower of this partition.
    pub fn record_fetch(
        &mut self,
        id: i32,
        broker_epoch: i64,
        fetch_offset: i64,
        leader_log_end: i64,
        now_ms: i64,
    ) -> bool {
        let Some(progress) = self.followers.get_mut(&id) else { return false };
        if fetch_offset >= leader_log_end {
            progress.last_caught_up_ms = progress.last_caught_up_ms.max(now_ms);
        } else if fetch_offset >= progress.last_fetch_leader_log_end {
            progress.last_caught_up_ms = progress.last_caught_up_ms.max(progress.last_fetch_ms);
        }
        progress.log_end_offset = fetch_offset;
        progress.last_fetch_leader_log_end = leader_log_end;
        progress.last_fetch_ms = now_ms;
        progress.broker_epoch = broker_epoch;
        true
    }

    /// Kafka's `maybeIncrementLeaderHW`: the least log end offset among the
    /// leader and the followers of the maximal ISR, and among followers
    /// caught up lately and about to join it (so the high watermark does
    /// not pass a replica the ISR is taking in).
    pub fn high_watermark(&self, leader_log_end: i64, now_ms: i64, lag_max_ms: i64) -> i64 {
        let maximal = self.maximal_isr();
        let counted = |id: &i32, p: &FollowerProgress| {
            let joining = p.log_end_offset >= 0 && now_ms - p.last_caught_up_ms <= lag_max_ms;
            maximal.contains(id) || (joining && !self.ineligible.contains(id))
        };
        let followers = self.followers.iter().filter(|(id, p)| counted(id, p));
        followers.map(|(_, p)| p.log_end_offset.max(0)).fold(leader_log_end, i64::min)
    }

    /// Kafka's `maybeExpandIsr`: the ISR with the followers that hold
    /// everything up to the high watermark and the start of this
    /// leadership; `None` while a change is in flight or none qualifies.
    pub fn expanded_isr(&self, high_watermark: i64) -> Option<Vec<i32>> {
        if self.pending.is_some() || self.leader != self.local {
            return None;
        }
        let joining: Vec<i32> = self
            .followers
            .iter()
            .filter(|(id, p)| {
                !self.isr.contains(id)
                    && !self.ineligible.contains(id)
                    && p.log_end_offset >= high_watermark
                    && p.log_end_offset >= self.leader_epoch_start_offset
            })
            .map(|(id, _)| *id)
            .collect();
        (!joining.is_empty()).then(|| self.isr.iter().copied().chain(joining).collect())
    }

    /// Kafka's `maybeShrinkIsr`: the ISR without the followers that have
    /// not caught up for longer than `lag_max_ms` and are not at the log
    /// end; `None` while a change is in flight or all keep up.
    pub fn shrunk_isr(&self, leader_log_end: i64, now_ms: i64, lag_max_ms: i64) -> Option<Vec<i32>> {
        if self.pending.is_some() || self.leader != self.local {
            return None;
        }
        let lagging = |id: &i32| {
            self.followers.get(id).is_some_and(|p| {
                p.log_end_offset != leader_log_end && now_ms - p.last_caught_up_ms > lag_max_ms
            })
        };
        let kept: Vec<i32> = self.isr.iter().copied().filter(|id| !lagging(id)).collect();
        (kept.len() < self.isr.len()).then_some(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strom_metadata::PartitionImage;

    const LAG_MS: i64 = 30_000;

    fn led_by_one(isr: &[i32]) -> ReplicaSet {
        let mut set = ReplicaSet::new(1, LAG_MS);
        let image = PartitionImage {
            replicas: vec![1, 2, 3],
            isr: isr.to_vec(),
            leader: 1,
            leader_epoch: 4,
            partition_epoch: 7,
            directories: Vec::new(),
            leader_recovery_state: 0,
            adding_replicas: vec![],
            removing_replicas: vec![],
        };
        assert!(set.apply(&image, 10, 0, &|_| true));
        set
    }

    #[test]
    fn the_high_watermark_is_the_least_log_end_of_the_isr() {
        let mut set = led_by_one(&[1, 2, 3]);
        assert_eq!(set.high_watermark(20, 0, LAG_MS), 0, "followers not heard from hold it");
        set.record_fetch(2, 5, 20, 20, 1);
        set.record_fetch(3, 5, 15, 20, 1);
        assert_eq!(set.high_watermark(20, 1, LAG_MS), 15);
        set.record_fetch(3, 5, 20, 20, 2);
        assert_eq!(set.high_watermark(25, 2, LAG_MS), 20);
    }

    #[test]
    fn a_follower_outside_the_isr_holds_the_high_watermark_only_while_caught_up() {
        let mut set = led_by_one(&[1, 2]);
        set.record_fetch(2, 5, 30, 30, 0);
        set.record_fetch(3, 5, 25, 30, 0);
        assert_eq!(set.high_watermark(30, 0, LAG_MS), 25, "3 was caught up lately");
        assert_eq!(set.high_watermark(30, LAG_MS + 1, LAG_MS), 30, "3 lags: not waited for");
    }

    #[test]
    fn a_fenced_follower_outside_the_isr_neither_holds_the_high_watermark_nor_joins() {
        let mut set = led_by_one(&[1, 2]);
        set.record_fetch(2, 5, 30, 30, 0);
        set.record_fetch(3, 5, 25, 30, 0);
        let image = PartitionImage {
            replicas: vec![1, 2, 3],
            isr: vec![1, 2],
            leader: 1,
            leader_epoch: 4,
            partition_epoch: 8,
            directories: Vec::new(),
            leader_recovery_state: 0,
            adding_replicas: vec![],
            removing_replicas: vec![],
        };
        set.apply(&image, 30, 0, &|id| id != 3);
        assert_eq!(set.high_watermark(30, 0, LAG_MS), 30);
        set.record_fetch(3, 5, 30, 30, 1);
        assert_eq!(set.expanded_isr(30), None);
    }

    #[test]
    fn a_follower_joins_the_isr_once_it_reaches_the_high_watermark_and_the_epoch_start() {
        let mut set = led_by_one(&[1, 2]);
        set.record_fetch(3, 5, 9, 12, 0);
        assert_eq!(set.expanded_isr(8), None, "below the start of this leadership (10)");
        set.record_fetch(3, 5, 12, 12, 1);
        assert_eq!(set.expanded_isr(12), Some(vec![1, 2, 3]));
        set.pending = Some(vec![1, 2, 3]);
        assert_eq!(set.maximal_isr(), [1, 2, 3]);
        assert_eq!(set.expanded_isr(12), None, "one change at a time");
    }

    #[test]
    fn a_follower_behind_longer_than_the_lag_time_leaves_the_isr() {
        let mut set = led_by_one(&[1, 2, 3]);
        set.record_fetch(2, 5, 50, 50, 1_000);
        set.record_fetch(3, 5, 40, 50, 1_000);
        assert_eq!(set.shrunk_isr(50, LAG_MS, LAG_MS), None, "caught up at the start of leadership (0)");
        set.record_fetch(2, 5, 60, 60, 1_000 + LAG_MS);
        assert_eq!(set.shrunk_isr(60, 2_000 + LAG_MS, LAG_MS), Some(vec![1, 2]));
        set.pending = Some(vec![1, 2]);
        assert_eq!(set.maximal_isr(), [1, 2, 3], "a pending shrink still counts 3");
    }

    #[test]
    fn a_follower_caught_up_at_its_previous_fetch_counts_from_then() {
        let mut set = led_by_one(&[1, 2]);
        set.record_fetch(2, 5, 10, 10, 100);
        // The leader grew to 20 since; the follower fetches from 10 again at 200.
        set.record_fetch(2, 5, 10, 20, 200);
        assert_eq!(set.follower(2).unwrap().last_caught_up_ms, 100);
        set.record_fetch(2, 5, 20, 30, 300);
        assert_eq!(set.follower(2).unwrap().last_caught_up_ms, 200, "it held 20 at its fetch at 200");
    }

    #[test]
    fn a_newer_image_replaces_the_isr_and_a_new_epoch_forgets_the_followers() {
        let mut set = led_by_one(&[1, 2, 3]);
        set.record_fetch(2, 5, 10, 10, 0);
        set.pending = Some(vec![1, 2]);
        let mut image = PartitionImage {
            replicas: vec![1, 2, 3],
            isr: vec![1, 2],
            leader: 1,
            leader_epoch: 4,
            partition_epoch: 8,
            directories: Vec::new(),
            leader_recovery_state: 0,
            adding_replicas: vec![],
            removing_replicas: vec![],
        };
        assert!(!set.apply(&image, 10, 5, &|_| true));
        assert_eq!((set.isr.clone(), set.pending.clone()), (vec![1, 2], None));
        assert_eq!(set.follower(2).unwrap().log_end_offset, 10);
        image.leader_epoch = 5;
        assert!(set.apply(&image, 10, 6, &|_| true));
        assert_eq!(set.follower(2).unwrap().log_end_offset, -1);
    }
}
