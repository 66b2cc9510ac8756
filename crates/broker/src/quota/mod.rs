//! Client quotas as Kafka enforces them (KIP-13, KIP-55, KIP-219, KIP-599).
//!
//! - [`rate`] is the windowed rate every quota is measured with;
//! - [`QuotaManager`] finds the quota that applies to a request's user and
//!   client id (Kafka's precedence of the eight entity combinations, read
//!   from the metadata image), records the request's bytes, time or
//!   mutations against that quota's sensor, and says how long the client
//!   must wait;
//! - [`replication`] holds the replication throttles of KIP-73, which
//!   leaders and follower fetchers consult for partitions a topic names;
//! - [`ChannelMute`] is a connection's side of KIP-219: the response
//!   carries `throttle_time_ms`, then the connection reads nothing more
//!   from that client until the time has passed.
//!
//! Sensors are shared the way Kafka's metric tags share them: a quota set
//! for a user is shared by all that user's clients, one set for a client id
//! (or a default) by every connection of that client id.

pub mod connections;
pub mod rate;
pub mod replication;
pub mod throttled;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use strom_metadata::image::{QuotaEntity, ENTITY_CLIENT_ID, ENTITY_USER};
use strom_metadata::MetadataImage;

pub use rate::{QuotaWindow, Rate};

/// Sensors idle this many sampling periods are dropped once there are many.
const MAX_SENSORS: usize = 10_000;

/// The client quotas, by their Kafka key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaType {
    /// `producer_byte_rate`: bytes produced per second.
    Produce,
    /// `consumer_byte_rate`: bytes fetched per second.
    Fetch,
    /// `request_percentage`: request handler time, in percent of one thread.
    Request,
    /// `controller_mutation_rate`: partitions created or deleted per second.
    ControllerMutation,
}

impl QuotaType {
    pub fn key(self) -> &'static str {
        match self {
            Self::Produce => "producer_byte_rate",
            Self::Fetch => "consumer_byte_rate",
            Self::Request => "request_percentage",
            Self::ControllerMutation => "controller_mutation_rate",
        }
    }
}

/// Whose sensor a recording goes to: the user and client id the matched
/// quota entity names (named or default), blank where it names neither.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SensorKey {
    quota: QuotaType,
    user: Option<String>,
    client_id: Option<String>,
}

/// The quota that applies to `user` and `client_id`, and the entity it is
/// set on, in Kafka's order: user and client id, user and default client,
/// user alone, default user and client id, both defaults, default user,
/// client id alone, default client.
pub fn applicable_quota(
    image: &MetadataImage,
    quota: QuotaType,
    user: &str,
    client_id: &str,
) -> Option<(f64, QuotaEntity)> {
    if !image.has_client_quotas() {
        return None;
    }
    // Per entity type: absent, its default (`Some(None)`) or named.
    type Part = Option<Option<String>>;
    let named = |name: &str| Some(Some(name.to_owned()));
    let default = Some(None);
    let order: [(Part, Part); 8] = [
        (named(user), named(client_id)),
        (named(user), default.clone()),
        (named(user), None),
        (default.clone(), named(client_id)),
        (default.clone(), default.clone()),
        (default.clone(), None),
        (None, named(client_id)),
        (None, default),
    ];
    order.into_iter().find_map(|(u, c)| {
        let mut entity = QuotaEntity::new();
        if let Some(u) = u {
            entity.insert(ENTITY_USER.to_owned(), u);
        }
        if let Some(c) = c {
            entity.insert(ENTITY_CLIENT_ID.to_owned(), c);
        }
        let value = *image.client_quotas(&entity).get(quota.key())?;
        Some((value, entity))
    })
}

/// The broker's quota sensors.
pub struct QuotaManager {
    window: QuotaWindow,
    started: Instant,
    sensors: Mutex<HashMap<SensorKey, Rate>>,
    /// What this broker sends to throttled followers (KIP-73).
    pub leader_replication: replication::ReplicationQuota,
    /// What this broker's fetchers take for throttled replicas.
    pub follower_replication: replication::ReplicationQuota,
}

impl QuotaManager {
    pub fn new(window: QuotaWindow) -> Self {
        Self {
            window,
            started: Instant::now(),
            sensors: Mutex::new(HashMap::new()),
            leader_replication: Default::default(),
            follower_replication: Default::default(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Records `value` for the client and returns how long it must be
    /// throttled (0 when it has no quota or is within it).
    pub fn record(
        &self,
        image: &MetadataImage,
        quota: QuotaType,
        user: &str,
        client_id: &str,
        value: f64,
    ) -> u64 {
        let Some((bound, entity)) = applicable_quota(image, quota, user, client_id) else { return 0 };
        let key = sensor_key(quota, &entity, user, client_id);
        let now = self.now_ms();
        let mut sensors = self.sensors.lock().unwrap_or_else(|e| e.into_inner());
        self.evict_idle(&mut sensors, now);
        let rate = sensors.entry(key).or_insert_with(|| Rate::new(self.window, now));
        rate.record(value, now);
        rate.throttle_ms(bound, now)
    }

    /// KIP-599's strict check, before a mutation: how long the client must
    /// wait if it is already over its quota (0 when it may go ahead).
    pub fn check(&self, image: &MetadataImage, quota: QuotaType, user: &str, client_id: &str) -> u64 {
        let Some((bound, entity)) = applicable_quota(image, quota, user, client_id) else { return 0 };
        let key = sensor_key(quota, &entity, user, client_id);
        let sensors = self.sensors.lock().unwrap_or_else(|e| e.into_inner());
        sensors.get(&key).map_or(0, |rate| rate.throttle_ms(bound, self.now_ms()))
    }

    /// Takes back a value recorded for a response that was not sent after
    /// all (Kafka's `unrecordQuotaSensor`: a throttled fetch answers empty).
    pub fn unrecord(&self, image: &MetadataImage, quota: QuotaType, user: &str, client_id: &str, value: f64) {
        let Some((_, entity)) = applicable_quota(image, quota, user, client_id) else { return };
        let key = sensor_key(quota, &entity, user, client_id);
        let now = self.now_ms();
        let mut sensors = self.sensors.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rate) = sensors.get_mut(&key) {
            rate.record(-value, now);
        }
    }

    /// The most the client may record at once without being throttled
    /// (Kafka's `getMaxValueInQuotaWindow`: the quota over all but one
    /// sampling window); `None` without a quota.
    pub fn max_value_in_window(
        &self,
        image: &MetadataImage,
        quota: QuotaType,
        user: &str,
        client_id: &str,
    ) -> Option<f64> {
        let (bound, _) = applicable_quota(image, quota, user, client_id)?;
        let full_windows = self.window.samples.saturating_sub(1) as f64;
        Some(bound * full_windows * self.window.window_ms as f64 / 1000.0)
    }

    fn evict_idle(&self, sensors: &mut HashMap<SensorKey, Rate>, now: u64) {
        if sensors.len() < MAX_SENSORS {
            return;
        }
        let idle_ms = self.window.samples as u64 * self.window.window_ms;
        sensors.retain(|_, rate| now.saturating_sub(rate.last_record_ms) < idle_ms);
    }
}

fn sensor_key(quota: QuotaType, entity: &QuotaEntity, user: &str, client_id: &str) -> SensorKey {
    SensorKey {
        quota,
        user: entity.contains_key(ENTITY_USER).then(|| user.to_owned()),
        client_id: entity.contains_key(ENTITY_CLIENT_ID).then(|| client_id.to_owned()),
    }
}

/// The throttle a request's handlers asked for, read by dispatch to mute
/// the channel once the response is out, and what of the request's time
/// its `request_percentage` must not count.
#[derive(Debug, Default)]
pub struct Throttle {
    ms: AtomicU64,
    parked_nanos: AtomicU64,
    exempt: AtomicBool,
}

impl Throttle {
    /// Raises the request's throttle to at least `ms`.
    pub fn raise(&self, ms: u64) {
        self.ms.fetch_max(ms, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.ms.load(Ordering::Relaxed)
    }

    /// Awaits `wait`, a wait for something outside the request (new
    /// records, other group members, the controller), and keeps its time
    /// out of the request's handler time, as Kafka's purgatory waits are.
    pub async fn parked<F: std::future::Future>(&self, wait: F) -> F::Output {
        let started = Instant::now();
        let output = wait.await;
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.parked_nanos.fetch_add(nanos, Ordering::Relaxed);
        output
    }

    fn parked_time(&self) -> Duration {
        Duration::from_nanos(self.parked_nanos.load(Ordering::Relaxed))
    }

    /// Keeps the request out of `request_percentage`, as Kafka exempts
    /// replication (a follower's Fetch) from it.
    pub fn exempt_from_request_quota(&self) {
        self.exempt.store(true, Ordering::Relaxed);
    }
}

/// Records `value` against the requesting client's `quota` and returns the
/// response's `throttle_time_ms`; the channel is muted that long after the
/// response (KIP-219).
pub fn record_request(ctx: &crate::dispatch::RequestContext<'_>, quota: QuotaType, value: f64) -> i32 {
    let image = ctx.controller().image();
    let client_id = ctx.header.client_id.as_deref().unwrap_or("");
    let ms = ctx.quotas().record(&image, quota, quota_user(&ctx.principal), client_id, value);
    ctx.throttle.raise(ms);
    ms.min(i32::MAX as u64) as i32
}

/// Takes back `value` recorded by [`record_request`] for a response that
/// is not sent after all.
pub fn unrecord_request(ctx: &crate::dispatch::RequestContext<'_>, quota: QuotaType, value: f64) {
    let image = ctx.controller().image();
    let client_id = ctx.header.client_id.as_deref().unwrap_or("");
    ctx.quotas().unrecord(&image, quota, quota_user(&ctx.principal), client_id, value);
}

/// The most the requesting client may record of `quota` at once without
/// being throttled; `None` when no quota applies to it.
pub fn max_value_in_window(ctx: &crate::dispatch::RequestContext<'_>, quota: QuotaType) -> Option<f64> {
    let image = ctx.controller().image();
    let client_id = ctx.header.client_id.as_deref().unwrap_or("");
    ctx.quotas().max_value_in_window(&image, quota, quota_user(&ctx.principal), client_id)
}

/// `request_percentage` (KIP-124): the time the broker works on a
/// client's requests, as a percentage of one thread over a second.
///
/// Kafka counts a request's request-handler thread time (from the moment
/// a handler takes it off the request queue until the handler is done
/// with it, so blocking on locks and disk counts but its time in the
/// queue and in purgatory does not) and the network thread time spent on
/// it. Strom has no separate thread pools: one connection task decodes,
/// handles and encodes each request. So the time counted is the request's
/// time in that task from its frame to its encoded response, minus the
/// time it was parked waiting on something outside it (a long-poll Fetch
/// waiting for records, a JoinGroup or SyncGroup waiting for the other
/// members, a request forwarded to the controller waiting for its answer:
/// Kafka's purgatories and forwarding). Writing the response to the socket
/// is not counted: that is waiting on the client's reading, which Kafka's
/// non-blocking network threads do not spend time on either.
///
/// `handled` is the time up to the handler's return, recorded with a
/// throttle; `encoded` is the encoding's, recorded afterwards without one,
/// as Kafka records network thread time (it weighs on the next request).
/// Exempt are the handshake APIs and the cluster's own, as in Kafka.
pub fn record_request_time(ctx: &crate::dispatch::RequestContext<'_>, handled: Duration) -> u64 {
    let Some(percent_seconds) = charged_percent_seconds(ctx, handled) else { return 0 };
    let image = ctx.controller().image();
    let client_id = ctx.header.client_id.as_deref().unwrap_or("");
    let user = quota_user(&ctx.principal);
    let ms = ctx.quotas().record(&image, QuotaType::Request, user, client_id, percent_seconds);
    ctx.throttle.raise(ms);
    ms
}

/// Records the time spent encoding a response against the client's
/// `request_percentage`, without throttling this response.
pub fn record_encoding_time(ctx: &crate::dispatch::RequestContext<'_>, encoded: Duration) {
    if exempt_from_request_quota(ctx) {
        return;
    }
    let image = ctx.controller().image();
    let client_id = ctx.header.client_id.as_deref().unwrap_or("");
    let value = encoded.as_secs_f64() * 100.0;
    ctx.quotas().record(&image, QuotaType::Request, quota_user(&ctx.principal), client_id, value);
}

/// How long the client must wait for its `request_percentage` as it
/// stands, this request's own time not yet recorded.
pub fn request_time_throttle(ctx: &crate::dispatch::RequestContext<'_>) -> u64 {
    if exempt_from_request_quota(ctx) {
        return 0;
    }
    let image = ctx.controller().image();
    let client_id = ctx.header.client_id.as_deref().unwrap_or("");
    let ms = ctx.quotas().check(&image, QuotaType::Request, quota_user(&ctx.principal), client_id);
    ctx.throttle.raise(ms);
    ms
}

fn charged_percent_seconds(ctx: &crate::dispatch::RequestContext<'_>, handled: Duration) -> Option<f64> {
    if exempt_from_request_quota(ctx) {
        return None;
    }
    let working = handled.saturating_sub(ctx.throttle.parked_time());
    Some(working.as_secs_f64() * 100.0)
}

fn exempt_from_request_quota(ctx: &crate::dispatch::RequestContext<'_>) -> bool {
    use kafka_protocol::messages::ApiKey;
    ctx.throttle.exempt.load(Ordering::Relaxed)
        || matches!(
            ctx.api_key,
            ApiKey::DescribeQuorum
                | ApiKey::ApiVersions
                | ApiKey::SaslHandshake
                | ApiKey::SaslAuthenticate
                | ApiKey::Vote
                | ApiKey::BeginQuorumEpoch
                | ApiKey::EndQuorumEpoch
                | ApiKey::FetchSnapshot
                | ApiKey::WriteTxnMarkers
        )
}

/// `controller_mutation_rate` for one request (KIP-599): topics are
/// refused with THROTTLING_QUOTA_EXCEEDED while the client is over its
/// quota (from the versions that know the error; older ones are only
/// throttled), and each accepted topic counts its partitions.
pub struct MutationQuota<'c, 'a> {
    ctx: &'c crate::dispatch::RequestContext<'a>,
    strict: bool,
}

impl<'c, 'a> MutationQuota<'c, 'a> {
    /// `strict_from`: the first version of the API that may be refused.
    pub fn new(ctx: &'c crate::dispatch::RequestContext<'a>, strict_from: i16) -> Self {
        Self { ctx, strict: ctx.api_version >= strict_from }
    }

    /// Whether the next topic must be refused.
    pub fn exceeded(&self) -> bool {
        if !self.strict {
            return false;
        }
        let image = self.ctx.controller().image();
        let client_id = self.ctx.header.client_id.as_deref().unwrap_or("");
        let user = quota_user(&self.ctx.principal);
        let ms = self.ctx.quotas().check(&image, QuotaType::ControllerMutation, user, client_id);
        self.ctx.throttle.raise(ms);
        ms > 0
    }

    /// Counts `partitions` created or deleted.
    pub fn record(&self, partitions: usize) {
        if partitions > 0 {
            record_request(self.ctx, QuotaType::ControllerMutation, partitions as f64);
        }
    }

    /// The response's `throttle_time_ms`.
    pub fn throttle_time_ms(&self) -> i32 {
        self.ctx.throttle.get().min(i32::MAX as u64) as i32
    }
}

/// Kafka's message for THROTTLING_QUOTA_EXCEEDED.
pub const THROTTLED_MESSAGE: &str = "The throttling quota has been exceeded.";

/// The user name quotas know a principal by: `User:alice` is `alice`.
pub fn quota_user(principal: &str) -> &str {
    principal.strip_prefix("User:").unwrap_or(principal)
}

/// A connection's mute (KIP-219): set after a throttled response, waited
/// out before the connection reads its next request.
#[derive(Debug, Default)]
pub struct ChannelMute {
    until: Mutex<Option<Instant>>,
}

impl ChannelMute {
    /// Mutes the channel for `throttle_ms` from now (a longer mute already
    /// set stays).
    pub fn mute_for(&self, throttle_ms: u64) {
        if throttle_ms == 0 {
            return;
        }
        let until = Instant::now() + Duration::from_millis(throttle_ms);
        let mut current = self.until.lock().unwrap_or_else(|e| e.into_inner());
        if current.is_none_or(|c| c < until) {
            *current = Some(until);
        }
    }

    /// How long the channel stays muted, clearing the mute once it is over.
    pub fn remaining(&self) -> Option<Duration> {
        let mut current = self.until.lock().unwrap_or_else(|e| e.into_inner());
        let left = (*current)?.checked_duration_since(Instant::now()).filter(|d| !d.is_zero());
        if left.is_none() {
            *current = None;
        }
        left
    }
}

#[cfg(test)]
mod tests;
