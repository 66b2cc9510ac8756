//! The seeded simulation: voters and observers running the real core on an
//! in-memory network and disks, with faults drawn from one seed.
//!
//! A run is a pure function of its seed. It has two phases. During the
//! fault phase messages are lost, delayed (hence reordered) and duplicated,
//! links are cut, nodes crash and restart from what their disks made
//! durable (a torn tail: any part of the unflushed writes survives), node
//! clocks jump forward, and leaders resign. State machines snapshot at
//! random batch ends (the core refuses those above the high watermark) and
//! let their log start move up, so lagging nodes catch up by FetchSnapshot,
//! and crashes land halfway through such fetches. Then every fault heals and a
//! leader must be elected and commit a new append on every node within a
//! bounded simulated time. [`checker`] checks Kafka's invariants after
//! every single event.
//!
//! The dynamic-voters family (KIP-853) bootstraps `kraft.version` 1 with
//! one or three voters and two observers; under the same faults an
//! administrator asks the leader (now and then another node) to add an
//! observer, remove a voter (the leader too) or move a voter's endpoint,
//! and once a run a disk may be replaced: the node comes back empty with a
//! new directory id, and its old key must never vote or count again.

mod checker;
mod world;

#[cfg(test)]
mod tests;

pub(crate) use world::{run, SimConfig};
