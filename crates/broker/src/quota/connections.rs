//! Connection limits per client address, as Kafka's `ConnectionQuotas`:
//! `max.connections.per.ip` (with `max.connections.per.ip.overrides`) and
//! the IP quota `connection_creation_rate` (KIP-612) from the metadata log.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use strom_metadata::image::{QuotaEntity, ENTITY_IP};
use strom_metadata::MetadataImage;

use super::{QuotaWindow, Rate};

/// The IP quota key (KIP-612).
const CONNECTION_CREATION_RATE: &str = "connection_creation_rate";

/// The connection settings of `server.properties`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimitConfig {
    /// `max.connections.per.ip` (Kafka's default: no limit).
    pub per_ip: usize,
    /// `max.connections.per.ip.overrides`: `addr:count,...`.
    pub overrides: HashMap<IpAddr, usize>,
}

impl Default for ConnectionLimitConfig {
    fn default() -> Self {
        Self { per_ip: i32::MAX as usize, overrides: HashMap::new() }
    }
}

/// Parses `max.connections.per.ip.overrides`: `host:count` pairs, the
/// count after the last colon (so IPv6 addresses keep theirs).
pub fn parse_overrides(text: &str) -> Result<HashMap<IpAddr, usize>, String> {
    let mut overrides = HashMap::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (host, count) = item.rsplit_once(':').ok_or_else(|| format!("{item:?} is not host:count"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let ip: IpAddr = host.parse().map_err(|_| format!("{host:?} is not an IP address"))?;
        let count: usize = count.parse().map_err(|_| format!("{count:?} is not a connection count"))?;
        overrides.insert(ip, count);
    }
    Ok(overrides)
}

/// Why a new connection is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Over `max.connections.per.ip`: closed at once.
    TooManyConnections { limit: usize },
    /// Over `connection_creation_rate`: closed after this many ms, so the
    /// client does not reconnect at once (KIP-612).
    Throttled { delay_ms: u64 },
}

/// Open connections and connection rates per client address.
pub struct ConnectionLimits {
    config: ConnectionLimitConfig,
    window: QuotaWindow,
    started: Instant,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    open: HashMap<IpAddr, usize>,
    creation: HashMap<IpAddr, Rate>,
}

/// An accepted connection's place in its address's count, given back on drop.
pub struct ConnectionPermit {
    limits: Arc<ConnectionLimits>,
    ip: IpAddr,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        let mut state = self.limits.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = state.open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                state.open.remove(&self.ip);
            }
        }
    }
}

impl ConnectionLimits {
    pub fn new(config: ConnectionLimitConfig, window: QuotaWindow) -> Self {
        Self { config, window, started: Instant::now(), state: Mutex::default() }
    }

    fn limit(&self, ip: &IpAddr) -> usize {
        self.config.overrides.get(ip).copied().unwrap_or(self.config.per_ip)
    }

    /// Admits a new connection from `ip`, or says why not.
    pub fn admit(self: &Arc<Self>, image: &MetadataImage, ip: IpAddr) -> Result<ConnectionPermit, Refusal> {
        let limit = self.limit(&ip);
        let now = self.started.elapsed().as_millis() as u64;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let open = state.open.get(&ip).copied().unwrap_or(0);
        if open >= limit {
            return Err(Refusal::TooManyConnections { limit });
        }
        if let Some(bound) = creation_rate(image, ip) {
            if state.creation.len() > super::MAX_SENSORS {
                let idle_ms = self.window.samples as u64 * self.window.window_ms;
                state.creation.retain(|_, r| now.saturating_sub(r.last_record_ms) < idle_ms);
            }
            let rate = state.creation.entry(ip).or_insert_with(|| Rate::new(self.window, now));
            rate.record(1.0, now);
            let delay_ms = rate.throttle_ms(bound, now);
            if delay_ms > 0 {
                // A refused connection does not count against the rate.
                rate.record(-1.0, now);
                return Err(Refusal::Throttled { delay_ms });
            }
        }
        *state.open.entry(ip).or_default() += 1;
        Ok(ConnectionPermit { limits: self.clone(), ip })
    }
}

/// The `connection_creation_rate` of `ip`: its own, else the default IP's.
fn creation_rate(image: &MetadataImage, ip: IpAddr) -> Option<f64> {
    if !image.has_client_quotas() {
        return None;
    }
    [Some(ip.to_string()), None].into_iter().find_map(|name| {
        let entity: QuotaEntity = [(ENTITY_IP.to_owned(), name)].into_iter().collect();
        image.client_quotas(&entity).get(CONNECTION_CREATION_RATE).copied()
    })
}
