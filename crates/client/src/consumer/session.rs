//! Fetch sessions (KIP-227), the client's half.
//!
//! The first Fetch to a broker lists every partition and asks for a
//! session; the broker remembers the list and its fetch offsets. Later
//! requests name only the partitions that are new or whose fetch offset
//! moved, and forget the ones no longer wanted, so a consumer of many
//! quiet partitions sends and receives a few bytes instead of the whole
//! list each time. Any error starts over with a full request.

use std::collections::BTreeMap;

use super::protocol::TopicPartition;

/// `session_id` and `session_epoch` of a request that wants no session.
pub const SESSIONLESS: (i32, i32) = (0, -1);

#[derive(Debug, Default)]
pub struct FetchSession {
    /// 0 until the broker grants a session.
    id: i32,
    /// The epoch of the next request: 0 asks for a new session.
    epoch: i32,
    /// What the broker holds for the session: partition and fetch offset.
    partitions: BTreeMap<TopicPartition, i64>,
}

/// One request of the session.
#[derive(Debug, PartialEq, Eq)]
pub struct SessionRequest {
    pub session_id: i32,
    pub epoch: i32,
    /// Partitions to name, with their fetch offsets.
    pub send: Vec<(TopicPartition, i64)>,
    /// Partitions to drop from the session.
    pub forget: Vec<TopicPartition>,
}

impl FetchSession {
    /// The request that leaves the broker fetching exactly `wanted`.
    pub fn next_request(&mut self, wanted: &BTreeMap<TopicPartition, i64>) -> SessionRequest {
        let full = self.id == 0;
        let send = wanted
            .iter()
            .filter(|(tp, offset)| full || self.partitions.get(*tp) != Some(offset))
            .map(|(tp, offset)| (tp.clone(), *offset))
            .collect();
        let forget = match full {
            true => Vec::new(),
            false => self.partitions.keys().filter(|tp| !wanted.contains_key(*tp)).cloned().collect(),
        };
        self.partitions = wanted.clone();
        SessionRequest { session_id: self.id, epoch: self.epoch, send, forget }
    }

    /// Takes in a response: the session the broker granted (0: none) and
    /// its top-level error code.
    pub fn on_response(&mut self, error_code: i16, session_id: i32) {
        if error_code != 0 || session_id == 0 {
            return self.reset();
        }
        if self.id == 0 {
            tracing::debug!(session_id, "fetch session established");
            self.id = session_id;
            self.epoch = 1;
        } else {
            // Epochs run 1..=i32::MAX and wrap past 0, which means "new".
            self.epoch = if self.epoch == i32::MAX { 1 } else { self.epoch + 1 };
        }
    }

    /// Forgets the session; the next request is a full one.
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(entries: &[(i32, i64)]) -> BTreeMap<TopicPartition, i64> {
        entries.iter().map(|&(p, offset)| (TopicPartition::new("t", p), offset)).collect()
    }

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    #[test]
    fn full_then_incremental_then_full_after_an_error() {
        let mut session = FetchSession::default();
        let first = session.next_request(&wanted(&[(0, 5), (1, 7)]));
        assert_eq!(
            (first.session_id, first.epoch, first.send.len()),
            (0, 0, 2),
            "full, asking for a session"
        );
        session.on_response(0, 42);

        let second = session.next_request(&wanted(&[(0, 9), (1, 7), (2, 0)]));
        assert_eq!((second.session_id, second.epoch), (42, 1));
        assert_eq!(second.send, [(tp(0), 9), (tp(2), 0)], "only what moved or is new");
        assert!(second.forget.is_empty());
        session.on_response(0, 42);

        let third = session.next_request(&wanted(&[(2, 3)]));
        assert_eq!(third.epoch, 2);
        assert_eq!(third.send, [(tp(2), 3)]);
        assert_eq!(third.forget, [tp(0), tp(1)], "what is no longer wanted leaves the session");

        session.on_response(71, 0); // INVALID_FETCH_SESSION_EPOCH
        let fourth = session.next_request(&wanted(&[(2, 3)]));
        assert_eq!((fourth.session_id, fourth.epoch, fourth.send.len()), (0, 0, 1), "full again");
    }

    #[test]
    fn a_broker_without_sessions_gets_full_requests() {
        let mut session = FetchSession::default();
        for _ in 0..3 {
            let request = session.next_request(&wanted(&[(0, 1)]));
            assert_eq!((request.session_id, request.epoch), (0, 0));
            session.on_response(0, 0);
        }
    }

    #[test]
    fn epochs_wrap_past_zero() {
        let mut session = FetchSession { id: 1, epoch: i32::MAX, partitions: BTreeMap::new() };
        session.on_response(0, 1);
        assert_eq!(session.epoch, 1);
    }
}
