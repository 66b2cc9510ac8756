//! Outstanding requests per destination (Kafka's `RequestManager`): at most
//! one in flight to each node, a timeout, and a backoff after failures.

use std::collections::BTreeMap;

use crate::NodeId;

#[derive(Debug, Clone, Default)]
pub(crate) struct Requests {
    next_correlation_id: u64,
    in_flight: BTreeMap<NodeId, (u64, u64)>,
    backoff_until_ms: BTreeMap<NodeId, u64>,
}

impl Requests {
    /// Whether a request may go to `to` now.
    pub fn can_send(&mut self, to: NodeId, now: u64) -> bool {
        self.expire(now);
        !self.in_flight.contains_key(&to) && !self.backoff_until_ms.contains_key(&to)
    }

    /// Whether any request is in flight and not timed out.
    pub fn any_in_flight(&mut self, now: u64) -> bool {
        self.expire(now);
        !self.in_flight.is_empty()
    }

    /// Records a request to `to` and returns its correlation id.
    pub fn start(&mut self, to: NodeId, now: u64, timeout_ms: u64) -> u64 {
        self.next_correlation_id += 1;
        self.in_flight.insert(to, (self.next_correlation_id, now.saturating_add(timeout_ms)));
        self.next_correlation_id
    }

    /// True if this response answers the request in flight to `from`.
    pub fn complete(&mut self, from: NodeId, correlation_id: u64) -> bool {
        match self.in_flight.get(&from) {
            Some((id, _)) if *id == correlation_id => {
                self.in_flight.remove(&from);
                true
            }
            _ => false,
        }
    }

    /// Holds requests to `to` back after a failed one.
    pub fn back_off(&mut self, to: NodeId, now: u64, backoff_ms: u64) {
        self.backoff_until_ms.insert(to, now.saturating_add(backoff_ms));
    }

    /// Forgets everything, as a role change does; correlation ids keep
    /// increasing so late responses to old requests never match.
    pub fn reset(&mut self) {
        self.in_flight.clear();
        self.backoff_until_ms.clear();
    }

    /// Forgets requests that timed out and backoffs that ended, so every
    /// deadline left lies ahead of `now`.
    pub fn expire(&mut self, now: u64) {
        self.in_flight.retain(|_, (_, deadline)| *deadline > now);
        self.backoff_until_ms.retain(|_, until| *until > now);
    }

    /// The earliest time a request times out or a backoff ends.
    pub fn next_deadline(&self) -> u64 {
        let in_flight = self.in_flight.values().map(|(_, deadline)| *deadline);
        let backoffs = self.backoff_until_ms.values().copied();
        in_flight.chain(backoffs).min().unwrap_or(u64::MAX)
    }
}
