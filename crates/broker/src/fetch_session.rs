//! Incremental fetch sessions (KIP-227).
//!
//! A client that opens a session (epoch 0) sends its full partition list once;
//! later fetches (epoch 1, 2, …) carry only the partitions whose fetch state
//! changed plus the ones to forget, and the response carries only partitions
//! with news: records, an error, or a moved high watermark or log start.
//! Epoch -1 fetches without a session.
//!
//! As in Kafka, the cache's own lock is held only to find, add or remove a
//! session; each session has its own lock for its partitions, so a fetch of
//! a large session never holds up another client's fetch. A session caches
//! only partitions the broker hosts, keyed by topic id from Fetch v13 and by
//! name before, as Kafka keys them: the handler answers unknown topics and
//! partitions itself, so what a session holds is bounded by the partitions
//! that exist, and the cache by
//! `max.incremental.fetch.session.cache.slots` sessions. When the cache is
//! full a new session may evict only a stale one (unused for the eviction
//! interval) or, failing that, the smallest one created more than that
//! interval ago, and only if the new one has more partitions; otherwise the
//! fetch is served without a session.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use crate::locks::lock_recovering;

/// Kafka's `MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS`: a session unused
/// this long is stale, and one younger than this cannot be evicted for a
/// larger one.
pub const EVICTION_INTERVAL: Duration = Duration::from_secs(120);
const INITIAL_EPOCH: i32 = 0;
const FINAL_EPOCH: i32 = -1;
/// The session id meaning "no session".
const NO_SESSION: i32 = 0;

/// A topic as a session knows it: by id from Fetch v13 on, by name before,
/// as Kafka keys its cached partitions. A session by name thus follows a
/// topic deleted and created again under that name, and a client can forget
/// a partition whose topic no longer exists.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TopicKey {
    Id(Uuid),
    Name(Arc<str>),
}

/// A partition as sessions know it: topic and partition index.
pub type PartitionKey = (TopicKey, i32);

/// One hosted partition a fetch reads, as the client last described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchTarget {
    /// Nil for a fetch by name: the name finds the topic at each read.
    pub topic_id: Uuid,
    /// The topic's name, shared by the session's partitions of the topic.
    pub topic: Arc<str>,
    pub partition: i32,
    pub fetch_offset: i64,
    pub partition_max_bytes: i32,
    /// The epoch of the last batch the fetcher holds, -1 for none: the
    /// leader checks it for divergence (KIP-320).
    pub last_fetched_epoch: i32,
}

impl FetchTarget {
    pub fn key(&self) -> PartitionKey {
        let topic = match self.topic_id.is_nil() {
            true => TopicKey::Name(self.topic.clone()),
            false => TopicKey::Id(self.topic_id),
        };
        (topic, self.partition)
    }
}

/// What the response reported for a partition last time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionNews {
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// A consumer waiting on read_committed learns of a transaction's end
    /// through it.
    pub last_stable_offset: i64,
}

/// One partition's outcome, as the session needs it to decide whether the
/// response includes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reported {
    pub news: PartitionNews,
    /// Records: always included, and the partition goes to the end of the
    /// session's order.
    pub records: bool,
    /// An error: always included, and sent again once it clears, as Kafka
    /// does.
    pub error: bool,
}

/// A fetch request's session fields and hosted partitions.
pub struct FetchRequestParts<'a> {
    pub session_id: i32,
    pub epoch: i32,
    /// Whether the request names topics by id (Fetch v13+).
    pub uses_topic_ids: bool,
    pub requested: Vec<FetchTarget>,
    pub forgotten: &'a [PartitionKey],
}

/// The partitions a fetch reads and how its response is shaped.
#[derive(Debug)]
pub struct FetchPlan {
    /// The session id the response carries (0 for none).
    pub session_id: i32,
    pub targets: Vec<FetchTarget>,
    /// Whether only partitions with news go in the response.
    pub incremental: bool,
    session: Option<Arc<CachedSession>>,
    /// The session's epoch after this request; a different one at `finish`
    /// means another request of the session overtook this one.
    epoch: i32,
}

#[derive(Debug)]
struct CachedPartition {
    target: FetchTarget,
    last_sent: Option<PartitionNews>,
}

/// A session's partitions in the order fetches read them, with a hashed
/// index. Kafka keeps them in an ImplicitLinkedHashCollection; here each
/// partition's place is a sequence number, so moving one to the end or
/// removing one leaves the others' order as it was.
#[derive(Debug, Default)]
struct Partitions {
    ordered: BTreeMap<u64, CachedPartition>,
    place: HashMap<PartitionKey, u64>,
    /// The place the next partition added or moved to the end takes.
    next_place: u64,
    /// One shared name per topic, so a partition costs a pointer, not a
    /// name, with the number of partitions using it: a topic's name goes
    /// with its last partition, so a long session does not collect names.
    names: HashMap<Arc<str>, usize>,
}

impl Partitions {
    /// A request's partitions, each once where it first appears with the
    /// values it last appears with, as Kafka reads a request's partitions
    /// into a linked map.
    fn from_request(targets: Vec<FetchTarget>) -> Self {
        let mut partitions = Self::default();
        targets.into_iter().for_each(|t| partitions.upsert(t));
        partitions
    }

    fn upsert(&mut self, mut target: FetchTarget) {
        if let Some(cached) = self.get_mut(&target.key()) {
            cached.target.fetch_offset = target.fetch_offset;
            cached.target.partition_max_bytes = target.partition_max_bytes;
            cached.target.last_fetched_epoch = target.last_fetched_epoch;
            return;
        }
        target.topic = self.shared_name(target.topic);
        self.push(CachedPartition { target, last_sent: None });
    }

    fn shared_name(&mut self, name: Arc<str>) -> Arc<str> {
        let shared = self.names.get_key_value(&name).map_or(name, |(shared, _)| shared.clone());
        *self.names.entry(shared.clone()).or_insert(0) += 1;
        shared
    }

    fn release_name(&mut self, name: &Arc<str>) {
        if let Some(users) = self.names.get_mut(name) {
            *users -= 1;
            if *users == 0 {
                self.names.remove(name);
            }
        }
    }

    fn push(&mut self, cached: CachedPartition) {
        self.place.insert(cached.target.key(), self.next_place);
        self.ordered.insert(self.next_place, cached);
        self.next_place += 1;
    }

    fn remove(&mut self, key: &PartitionKey) {
        if let Some(removed) = self.place.remove(key).and_then(|place| self.ordered.remove(&place)) {
            self.release_name(&removed.target.topic);
        }
    }

    /// Puts the partition last, so the next fetch reads the others first.
    fn move_to_end(&mut self, key: &PartitionKey) {
        if let Some(place) = self.place.remove(key) {
            let cached = self.ordered.remove(&place).expect("every placed partition is ordered");
            self.push(cached);
        }
    }

    fn get_mut(&mut self, key: &PartitionKey) -> Option<&mut CachedPartition> {
        self.place.get(key).and_then(|place| self.ordered.get_mut(place))
    }

    fn len(&self) -> usize {
        self.place.len()
    }

    fn is_empty(&self) -> bool {
        self.place.is_empty()
    }

    fn targets(&self) -> Vec<FetchTarget> {
        self.ordered.values().map(|p| p.target.clone()).collect()
    }
}

#[derive(Debug)]
struct SessionState {
    /// The epoch the next incremental fetch must carry.
    epoch: i32,
    uses_topic_ids: bool,
    partitions: Partitions,
}

/// A session in the cache. The cache reads its age, use and size without
/// taking the session's lock.
#[derive(Debug)]
struct CachedSession {
    id: i32,
    created: Instant,
    /// Milliseconds since `created` at the last use.
    last_used_ms: AtomicU64,
    /// Partitions at the last use: what eviction compares.
    size: AtomicUsize,
    state: Mutex<SessionState>,
}

impl CachedSession {
    fn touch(&self, now: Instant, size: usize) {
        let since_creation = now.saturating_duration_since(self.created).as_millis() as u64;
        self.last_used_ms.store(since_creation, Ordering::Relaxed);
        self.size.store(size, Ordering::Relaxed);
    }

    fn last_used(&self) -> Instant {
        self.created + Duration::from_millis(self.last_used_ms.load(Ordering::Relaxed))
    }

    fn size(&self) -> usize {
        self.size.load(Ordering::Relaxed)
    }
}

pub struct FetchSessionCache {
    slots: usize,
    sessions: Mutex<HashMap<i32, Arc<CachedSession>>>,
}

impl FetchSessionCache {
    pub fn new(slots: usize) -> Self {
        Self { slots, sessions: Mutex::new(HashMap::new()) }
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<i32, Arc<CachedSession>>> {
        lock_recovering(&self.sessions, "fetch sessions")
    }

    /// `session`'s state. A panic during a change may have left its
    /// partition order half moved, so a session whose lock it poisoned is
    /// dropped: FETCH_SESSION_ID_NOT_FOUND, and the client opens a new one.
    fn lock_session<'a>(
        &self,
        session: &'a Arc<CachedSession>,
    ) -> Result<MutexGuard<'a, SessionState>, ResponseError> {
        match session.state.lock() {
            Ok(state) => return Ok(state),
            Err(poisoned) => drop(poisoned),
        }
        tracing::error!(session = session.id, "a panic interrupted a change to a fetch session; dropping it");
        self.remove(session);
        Err(ResponseError::FetchSessionIdNotFound)
    }

    /// Resolves which partitions a fetch reads, opening, advancing or closing
    /// its session. Errors are the top-level fetch error codes.
    pub fn begin(&self, request: FetchRequestParts<'_>) -> Result<FetchPlan, ResponseError> {
        self.begin_at(request, Instant::now())
    }

    fn begin_at(&self, request: FetchRequestParts<'_>, now: Instant) -> Result<FetchPlan, ResponseError> {
        if request.epoch == INITIAL_EPOCH || request.epoch == FINAL_EPOCH {
            // A full fetch closes the session it names.
            if request.session_id != NO_SESSION {
                self.sessions().remove(&request.session_id);
            }
            if request.epoch == INITIAL_EPOCH {
                return Ok(self.open(request.requested, request.uses_topic_ids, now));
            }
            return Ok(sessionless(Partitions::from_request(request.requested).targets()));
        }
        let session = self.sessions().get(&request.session_id).cloned();
        let session = session.ok_or(ResponseError::FetchSessionIdNotFound)?;
        let mut state = self.lock_session(&session)?;
        if state.epoch != request.epoch {
            return Err(ResponseError::InvalidFetchSessionEpoch);
        }
        if state.uses_topic_ids != request.uses_topic_ids {
            return Err(ResponseError::FetchSessionTopicIdError);
        }
        for target in request.requested.iter().cloned() {
            state.partitions.upsert(target);
        }
        for key in request.forgotten {
            state.partitions.remove(key);
        }
        if state.partitions.is_empty() {
            drop(state);
            self.remove(&session);
            return Ok(sessionless(Partitions::from_request(request.requested).targets()));
        }
        state.epoch = next_epoch(state.epoch);
        session.touch(now, state.partitions.len());
        let targets = state.partitions.targets();
        let epoch = state.epoch;
        drop(state);
        Ok(FetchPlan { session_id: session.id, targets, incremental: true, session: Some(session), epoch })
    }

    /// A full fetch: a new session if there is room for one.
    fn open(&self, targets: Vec<FetchTarget>, uses_topic_ids: bool, now: Instant) -> FetchPlan {
        let partitions = Partitions::from_request(targets);
        let size = partitions.len();
        if size == 0 || self.slots == 0 {
            return sessionless(partitions.targets());
        }
        let targets = partitions.targets();
        let mut sessions = self.sessions();
        if sessions.len() >= self.slots && !evict_for(&mut sessions, size, now) {
            return sessionless(targets);
        }
        let id = new_session_id(&sessions);
        let epoch = next_epoch(INITIAL_EPOCH);
        let session = Arc::new(CachedSession {
            id,
            created: now,
            last_used_ms: AtomicU64::new(0),
            size: AtomicUsize::new(size),
            state: Mutex::new(SessionState { epoch, uses_topic_ids, partitions }),
        });
        sessions.insert(id, session.clone());
        FetchPlan { session_id: id, targets, incremental: false, session: Some(session), epoch }
    }

    /// Removes `session` unless a new one already took its id.
    fn remove(&self, session: &Arc<CachedSession>) {
        let mut sessions = self.sessions();
        if sessions.get(&session.id).is_some_and(|s| Arc::ptr_eq(s, session)) {
            sessions.remove(&session.id);
        }
    }

    /// Records what the response reports and decides, for an incremental
    /// fetch, which partitions it includes. `reported[i]` belongs to
    /// `plan.targets[i]`; returns whether each is included, or
    /// INVALID_FETCH_SESSION_EPOCH if another request of the session was
    /// served meanwhile (Kafka's answer to a duplicate request).
    ///
    /// As in Kafka, an incremental fetch moves the partitions that returned
    /// records to the end of the session's order, so when `max_bytes` cuts a
    /// response short the partitions left out are read first next time. A
    /// full fetch keeps the client's order: the client rotates it.
    pub fn finish(&self, plan: &FetchPlan, reported: &[Reported]) -> Result<Vec<bool>, ResponseError> {
        let Some(session) = &plan.session else {
            return Ok(vec![true; reported.len()]);
        };
        let mut state = self.lock_session(session)?;
        if state.epoch != plan.epoch {
            return Err(ResponseError::InvalidFetchSessionEpoch);
        }
        let mut included = Vec::with_capacity(reported.len());
        for (target, outcome) in plan.targets.iter().zip(reported) {
            let key = target.key();
            let Some(cached) = state.partitions.get_mut(&key) else {
                included.push(!plan.incremental);
                continue;
            };
            let changed = cached.last_sent != Some(outcome.news);
            cached.last_sent = (!outcome.error).then_some(outcome.news);
            if plan.incremental && outcome.records {
                state.partitions.move_to_end(&key);
            }
            included.push(!plan.incremental || outcome.records || outcome.error || changed);
        }
        Ok(included)
    }

    /// The session of a fetch answered empty because its client is
    /// throttled, as Kafka's `getThrottledResponse` leaves it: a session
    /// the fetch opened is dropped again (the response names none); an
    /// incremental one keeps the request's changes and its new epoch, its
    /// partitions' last reported state untouched. Returns the response's
    /// error (INVALID_FETCH_SESSION_EPOCH if another request of the session
    /// was served meanwhile) and session id.
    pub fn throttled(&self, plan: &FetchPlan) -> (Option<ResponseError>, i32) {
        let Some(session) = &plan.session else { return (None, NO_SESSION) };
        if !plan.incremental {
            self.remove(session);
            return (None, NO_SESSION);
        }
        match self.lock_session(session) {
            Ok(state) if state.epoch == plan.epoch => (None, session.id),
            Ok(_) => (Some(ResponseError::InvalidFetchSessionEpoch), session.id),
            Err(error) => (Some(error), session.id),
        }
    }

    /// Drops sessions unused for longer than the eviction interval, so idle
    /// clients' partitions do not stay in memory until the cache fills.
    pub fn evict_expired(&self) {
        let now = Instant::now();
        self.sessions().retain(|_, s| now.saturating_duration_since(s.last_used()) <= EVICTION_INTERVAL);
    }

    pub fn len(&self) -> usize {
        self.sessions().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn sessionless(targets: Vec<FetchTarget>) -> FetchPlan {
    FetchPlan { session_id: NO_SESSION, targets, incremental: false, session: None, epoch: FINAL_EPOCH }
}

/// Kafka's eviction rule for a new session of `size` partitions: the least
/// recently used session if it is stale, else the smallest session older
/// than the eviction interval if the new one is larger. Returns whether one
/// was evicted.
fn evict_for(sessions: &mut HashMap<i32, Arc<CachedSession>>, size: usize, now: Instant) -> bool {
    let age = |instant: Instant| now.saturating_duration_since(instant);
    let least_recent = sessions.values().min_by_key(|s| (s.last_used(), s.id));
    let victim = match least_recent {
        Some(s) if age(s.last_used()) > EVICTION_INTERVAL => Some(s.id),
        _ => sessions
            .values()
            .filter(|s| age(s.created) > EVICTION_INTERVAL)
            .min_by_key(|s| (s.size(), s.id))
            .filter(|s| size > s.size())
            .map(|s| s.id),
    };
    victim.is_some_and(|id| sessions.remove(&id).is_some())
}

/// A random positive id not in use.
fn new_session_id(sessions: &HashMap<i32, Arc<CachedSession>>) -> i32 {
    loop {
        let candidate = (Uuid::new_v4().as_u128() as i32) & i32::MAX;
        if candidate != NO_SESSION && !sessions.contains_key(&candidate) {
            return candidate;
        }
    }
}

/// Epochs wrap from i32::MAX to 1, never to the reserved 0 and -1.
fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(partition: i32, offset: i64) -> FetchTarget {
        FetchTarget {
            topic_id: Uuid::nil(),
            topic: "t".into(),
            partition,
            fetch_offset: offset,
            partition_max_bytes: 1024,
            last_fetched_epoch: -1,
        }
    }

    fn key(partition: i32) -> PartitionKey {
        (TopicKey::Name("t".into()), partition)
    }

    fn targets(count: i32) -> Vec<FetchTarget> {
        (0..count).map(|p| target(p, 0)).collect()
    }

    fn request(session_id: i32, epoch: i32, requested: Vec<FetchTarget>) -> FetchRequestParts<'static> {
        FetchRequestParts { session_id, epoch, uses_topic_ids: false, requested, forgotten: &[] }
    }

    fn news(hw: i64) -> Reported {
        let news = PartitionNews { high_watermark: hw, log_start_offset: 0, last_stable_offset: hw };
        Reported { news, records: false, error: false }
    }

    #[test]
    fn given_session_when_incremental_fetch_should_send_only_changes() {
        let cache = FetchSessionCache::new(10);
        let plan = cache.begin(request(0, 0, targets(2))).unwrap();
        assert!(!plan.incremental);
        assert_ne!(plan.session_id, 0);
        assert_eq!(cache.finish(&plan, &[news(5), news(7)]).unwrap(), vec![true, true]);

        // Epoch 1 names nothing: both partitions are still fetched, only the
        // one whose high watermark moved is reported.
        let next = cache.begin(request(plan.session_id, 1, vec![])).unwrap();
        assert!(next.incremental);
        assert_eq!(next.targets.len(), 2);
        assert_eq!(cache.finish(&next, &[news(5), news(9)]).unwrap(), vec![false, true]);

        // Forgetting a partition removes it; a stale epoch is refused.
        let forgotten = [key(0)];
        let forget = FetchRequestParts { forgotten: &forgotten, ..request(plan.session_id, 2, vec![]) };
        assert_eq!(cache.begin(forget).unwrap().targets, vec![target(1, 0)]);
        assert_eq!(
            cache.begin(request(plan.session_id, 2, vec![])).unwrap_err(),
            ResponseError::InvalidFetchSessionEpoch
        );
        assert_eq!(
            cache.begin(request(12345, 1, vec![])).unwrap_err(),
            ResponseError::FetchSessionIdNotFound
        );
    }

    #[test]
    fn a_throttled_fetch_drops_a_new_session_and_leaves_an_incremental_one_unreported() {
        let cache = FetchSessionCache::new(10);
        let opened = cache.begin(request(0, 0, targets(2))).unwrap();
        assert_eq!(cache.throttled(&opened), (None, NO_SESSION), "the empty answer names no session");
        assert!(cache.is_empty());

        let plan = cache.begin(request(0, 0, targets(2))).unwrap();
        cache.finish(&plan, &[news(5), news(7)]).unwrap();
        let throttled = cache.begin(request(plan.session_id, 1, vec![])).unwrap();
        assert_eq!(cache.throttled(&throttled), (None, plan.session_id));
        // The next epoch goes on; the news the throttled answer held back
        // is still news.
        let next = cache.begin(request(plan.session_id, 2, vec![])).unwrap();
        assert_eq!(cache.finish(&next, &[news(5), news(9)]).unwrap(), vec![false, true]);
        let overtaken = cache.throttled(&throttled);
        assert_eq!(overtaken, (Some(ResponseError::InvalidFetchSessionEpoch), plan.session_id));
    }

    fn with_records(hw: i64) -> Reported {
        Reported { records: true, ..news(hw) }
    }

    fn order(plan: &FetchPlan) -> Vec<i32> {
        plan.targets.iter().map(|t| t.partition).collect()
    }

    #[test]
    fn an_incremental_fetch_moves_partitions_that_returned_records_to_the_end() {
        let cache = FetchSessionCache::new(10);
        let plan = cache.begin(request(0, 0, targets(4))).unwrap();
        // The full fetch keeps the client's order: the client rotates it.
        cache.finish(&plan, &[with_records(1), news(1), news(1), news(1)]).unwrap();
        let next = cache.begin(request(plan.session_id, 1, vec![target(0, 1)])).unwrap();
        assert_eq!(order(&next), [0, 1, 2, 3]);

        let included = cache.finish(&next, &[with_records(2), news(1), with_records(2), news(1)]).unwrap();
        assert_eq!(included, [true, false, true, false]);
        let forgotten = [key(3)];
        let rotated =
            cache.begin(FetchRequestParts { forgotten: &forgotten, ..request(plan.session_id, 2, vec![]) });
        // Forgetting a partition leaves the others' order alone.
        assert_eq!(order(&rotated.unwrap()), [1, 0, 2]);
    }

    #[test]
    fn a_partition_named_twice_is_read_once_with_its_last_values() {
        let cache = FetchSessionCache::new(10);
        let twice = vec![target(0, 5), target(1, 0), target(0, 9)];
        for epoch in [INITIAL_EPOCH, FINAL_EPOCH] {
            let plan = cache.begin(request(0, epoch, twice.clone())).unwrap();
            assert_eq!(plan.targets, [target(0, 9), target(1, 0)], "epoch {epoch}");
        }
    }

    #[test]
    fn updated_partitions_replace_their_cached_state() {
        let cache = FetchSessionCache::new(10);
        let plan = cache.begin(request(0, 0, vec![target(0, 0)])).unwrap();
        let next = cache.begin(request(plan.session_id, 1, vec![target(0, 42)])).unwrap();
        assert_eq!(next.targets, vec![target(0, 42)]);
    }

    #[test]
    fn an_error_is_reported_again_once_it_clears() {
        let cache = FetchSessionCache::new(10);
        let plan = cache.begin(request(0, 0, targets(1))).unwrap();
        let failed = Reported { error: true, ..news(5) };
        assert_eq!(cache.finish(&plan, &[failed]).unwrap(), vec![true]);
        let next = cache.begin(request(plan.session_id, 1, vec![])).unwrap();
        assert_eq!(cache.finish(&next, &[news(5)]).unwrap(), vec![true]);
    }

    #[test]
    fn a_request_overtaken_by_the_next_epoch_gets_invalid_epoch_at_finish() {
        let cache = FetchSessionCache::new(10);
        let id = cache.begin(request(0, 0, targets(1))).unwrap().session_id;
        let first = cache.begin(request(id, 1, vec![])).unwrap();
        let second = cache.begin(request(id, 2, vec![])).unwrap();
        assert_eq!(cache.finish(&first, &[news(1)]).unwrap_err(), ResponseError::InvalidFetchSessionEpoch);
        assert_eq!(cache.finish(&second, &[news(1)]).unwrap(), vec![true]);
    }

    #[test]
    fn a_session_using_topic_ids_refuses_a_request_by_name() {
        let cache = FetchSessionCache::new(10);
        let by_id = FetchRequestParts { uses_topic_ids: true, ..request(0, 0, targets(1)) };
        let id = cache.begin(by_id).unwrap().session_id;
        assert_eq!(cache.begin(request(id, 1, vec![])).unwrap_err(), ResponseError::FetchSessionTopicIdError);
    }

    #[test]
    fn forgetting_every_partition_closes_the_session() {
        let cache = FetchSessionCache::new(10);
        let id = cache.begin(request(0, 0, targets(1))).unwrap().session_id;
        let forgotten = [key(0)];
        let plan =
            cache.begin(FetchRequestParts { forgotten: &forgotten, ..request(id, 1, vec![]) }).unwrap();
        assert_eq!((plan.session_id, plan.incremental, cache.len()), (0, false, 0));
    }

    #[test]
    fn a_full_fetch_without_hosted_partitions_opens_no_session() {
        let cache = FetchSessionCache::new(10);
        assert_eq!(cache.begin(request(0, 0, vec![])).unwrap().session_id, 0);
        assert!(cache.is_empty());
    }

    #[test]
    fn a_session_keeps_one_copy_of_each_topic_name() {
        let cache = FetchSessionCache::new(10);
        let plan = cache.begin(request(0, 0, targets(3))).unwrap();
        let next = cache.begin(request(plan.session_id, 1, vec![target(7, 0)])).unwrap();
        assert!(next.targets.windows(2).all(|pair| Arc::ptr_eq(&pair[0].topic, &pair[1].topic)));
    }

    #[test]
    fn a_topics_name_goes_with_its_last_partition() {
        let topic = |name: &str, partition| FetchTarget { topic: name.into(), ..target(partition, 0) };
        let mut partitions = Partitions::from_request(vec![topic("a", 0), topic("a", 1), topic("b", 0)]);
        partitions.remove(&(TopicKey::Name("a".into()), 0));
        assert_eq!(partitions.names.len(), 2);
        partitions.remove(&(TopicKey::Name("a".into()), 1));
        assert_eq!(partitions.names.keys().map(|n| &**n).collect::<Vec<_>>(), ["b"]);
    }

    #[test]
    fn a_session_poisoned_by_a_panic_is_dropped_and_the_client_opens_another() {
        let cache = FetchSessionCache::new(10);
        let plan = cache.begin(request(0, 0, targets(2))).unwrap();
        let session = plan.session.clone().unwrap();
        let panicked = std::thread::scope(|s| {
            s.spawn(|| {
                let _held = session.state.lock().unwrap();
                panic!("injected panic while the session is locked");
            })
            .join()
        });
        assert!(panicked.is_err());
        assert_eq!(
            cache.finish(&plan, &[news(5), news(7)]).unwrap_err(),
            ResponseError::FetchSessionIdNotFound
        );
        assert!(cache.is_empty(), "the poisoned session is dropped");
        assert_eq!(
            cache.begin(request(plan.session_id, 1, vec![])).unwrap_err(),
            ResponseError::FetchSessionIdNotFound
        );
        let reopened = cache.begin(request(0, 0, targets(2))).unwrap();
        assert_eq!(cache.finish(&reopened, &[news(5), news(7)]).unwrap(), vec![true, true]);
    }

    #[test]
    fn the_epoch_after_i32_max_is_1() {
        let cache = FetchSessionCache::new(10);
        let id = cache.begin(request(0, 0, targets(1))).unwrap().session_id;
        cache.sessions().get(&id).unwrap().state.lock().unwrap().epoch = i32::MAX;
        cache.begin(request(id, i32::MAX, vec![])).unwrap();
        assert!(cache.begin(request(id, 1, vec![])).is_ok());
    }

    #[test]
    fn a_full_cache_keeps_busy_sessions_from_new_small_ones() {
        let cache = FetchSessionCache::new(2);
        let start = Instant::now();
        let busy = cache.begin_at(request(0, 0, targets(3)), start).unwrap().session_id;
        let small = cache.begin_at(request(0, 0, targets(1)), start).unwrap().session_id;
        for _ in 0..5 {
            assert_eq!(cache.begin_at(request(0, 0, targets(1)), start).unwrap().session_id, 0);
        }
        // Both older than the interval and in use: a new session may evict
        // only the smallest, and only if it is larger.
        let later = start + EVICTION_INTERVAL + Duration::from_secs(1);
        cache.begin_at(request(busy, 1, vec![]), later).unwrap();
        cache.begin_at(request(small, 1, vec![]), later).unwrap();
        assert_eq!(cache.begin_at(request(0, 0, targets(1)), later).unwrap().session_id, 0);
        assert_ne!(cache.begin_at(request(0, 0, targets(2)), later).unwrap().session_id, 0);
        assert!(cache.begin_at(request(busy, 2, vec![]), later).is_ok());
        assert_eq!(
            cache.begin_at(request(small, 2, vec![]), later).unwrap_err(),
            ResponseError::FetchSessionIdNotFound
        );
    }

    #[test]
    fn a_full_cache_gives_a_stale_sessions_slot_to_a_new_one() {
        let cache = FetchSessionCache::new(1);
        let start = Instant::now();
        let stale = cache.begin_at(request(0, 0, targets(5)), start).unwrap().session_id;
        let later = start + EVICTION_INTERVAL + Duration::from_secs(1);
        assert_ne!(cache.begin_at(request(0, 0, targets(1)), later).unwrap().session_id, 0);
        assert_eq!(
            cache.begin_at(request(stale, 1, vec![]), later).unwrap_err(),
            ResponseError::FetchSessionIdNotFound
        );
        let sessionless = cache.begin(request(0, -1, targets(1))).unwrap();
        assert_eq!(sessionless.session_id, 0);
    }
}
