//! Kafka's KRaft metadata quorum as a sans-IO state machine, and the seeded
//! simulation that checks it.
//!
//! The protocol is KIP-595 (Vote, BeginQuorumEpoch, EndQuorumEpoch, followers
//! and observers pulling with Fetch) with KIP-996 pre-vote, KIP-630
//! snapshots (FetchSnapshot) and KIP-853 dynamic voters (AddRaftVoter,
//! RemoveRaftVoter, UpdateRaftVoter), built to what
//! Kafka's `raft` module does (`KafkaRaftClient`, `QuorumState` and the
//! `EpochState` classes); comments name the class a rule comes from.
//!
//! # Layout
//!
//! - [`node`]: [`RaftNode`], the state machine. Events go in
//!   ([`Event`]: a message received, a tick, a flush completed; plus
//!   [`RaftNode::append`], [`RaftNode::resign`],
//!   [`RaftNode::create_snapshot`] and [`RaftNode::delete_before_snapshot`]),
//!   each with the current
//!   time of a monotonic clock the caller owns; [`Action`]s come out (send a
//!   message, append to / truncate / flush the log, write `quorum-state`,
//!   write or install a snapshot, move the log start),
//!   to perform in order. [`RaftNode::next_deadline`] says when to tick.
//!   No I/O, no threads, no clock, and randomness only from a seed.
//! - `election` (private): pre-vote, Vote, BeginQuorumEpoch, EndQuorumEpoch,
//!   and how an epoch or leader learnt from any message moves the node.
//! - `replication` (private): Fetch on both sides, diverging-epoch
//!   truncation, the leader's high watermark, check-quorum, and the
//!   observers the leader tracks as candidates for AddRaftVoter.
//! - [`voters`]: KIP-853's [`ReplicaKey`] (id and directory id),
//!   [`VoterNode`] (endpoints, supported `kraft.version`s), [`VoterSet`],
//!   and the history of voter sets by log offset.
//! - `reconfig` (private): the leader's AddRaftVoter, RemoveRaftVoter and
//!   UpdateRaftVoter, and how a new voter set reaches its bookkeeping.
//! - [`snapshot`]: KIP-630. The state machine above records a snapshot at a
//!   committed batch end and may then drop the log below it; a fetch the
//!   leader's log can no longer validate is answered with the snapshot's id,
//!   and the fetcher pulls it with FetchSnapshot in chunks and installs it
//!   at once (a half-fetched snapshot lives in memory only, and one that
//!   fails its checks is never installed).
//! - [`checkpoint`]: the snapshot file in Kafka's layout (header, the
//!   `kraft.version` and voter set in force at its end, the state machine's
//!   records, footer); the core writes it and reads its voters back.
//! - [`record_batch`]: Kafka's record batches and KRaft's control records,
//!   shared by the snapshot file and the metadata log's codec.
//! - [`state`]: the per-role state and [`ElectionState`], the `quorum-state`.
//! - [`log`]: [`RaftLog`], the log the core reads, and [`MemoryLog`].
//! - [`message`]: the KRaft requests and responses. They are an internal
//!   enum that maps 1:1 onto `kafka-protocol`'s `VoteRequest`,
//!   `BeginQuorumEpochRequest`, `EndQuorumEpochRequest`, `FetchRequest`,
//!   `FetchSnapshotRequest`, the three `*RaftVoterRequest`s and their
//!   responses, so the core stays free of wire nesting and versions.
//! - [`wire`]: that mapping, both ways, at the versions Kafka 4.1 speaks;
//!   reading checks version, cluster id, topic and partition.
//! - [`config`]: [`QuorumConfig`], `controller.quorum.*` with Kafka's defaults.
//! - [`rng`]: a seeded SplitMix64 for election jitter.
//! - `sim` (tests only): the seeded simulation and Kafka's invariants.
//!
//! # Roles and their transitions
//!
//! Epochs only grow, and every change of epoch, vote or leader is written to
//! `quorum-state` before the node acts on it (and so before it answers).
//!
//! - **Unattached** (no leader known): a voter whose randomised election
//!   timeout (`[t, 2t)`, t = `controller.quorum.election.timeout.ms`) expires
//!   becomes Prospective; an observer fetches from any voter to find the
//!   leader. Grants a vote once per epoch, to a candidate whose log is at
//!   least as up to date, and then waits a new election timeout. Entered
//!   from a role already counting down to an election (unattached,
//!   candidate, resigned), the countdown carries on. A restart that finds
//!   its own vote resumes as Prospective, not as Kafka's candidate: the log
//!   flushes asynchronously, so its Vote requests may have advertised a tail
//!   the crash tore off.
//! - **Prospective** (KIP-996): asks for pre-votes in its current epoch;
//!   a majority makes it Candidate. Losing (a majority rejects or the
//!   election timeout expires) sends it back to Follower if it knew a
//!   leader, else Unattached. Pre-votes change no one's state.
//! - **Candidate**: epoch + 1, votes for itself, asks for votes; a majority
//!   makes it Leader. A timeout or a rejecting majority backs it off
//!   (randomised, exponential in the elections lost in a row, capped by
//!   `controller.quorum.election.backoff.max.ms`), then it is Prospective again.
//! - **Leader**: appends a LeaderChange control record, announces the epoch
//!   with BeginQuorumEpoch (again every half fetch timeout), serves Fetch
//!   and FetchSnapshot,
//!   and moves the high watermark to what a majority of voters has flushed,
//!   once a record of its own epoch is included. If a majority has not
//!   fetched within 1.5 × `controller.quorum.fetch.timeout.ms` it resigns
//!   (a lone voter never does).
//! - **Follower**: fetches from its leader (fetch offset and last fetched
//!   epoch, after flushing), truncates exactly the suffix a diverging epoch
//!   names, pulls and installs the snapshot a snapshot id names, and takes
//!   the leader's high watermark (capped by its log end).
//!   A voter without a successful fetch for `controller.quorum.fetch.timeout.ms`
//!   becomes Prospective; an observer goes looking for the leader again.
//! - **Resigned**: a leader stepping down (check-quorum,
//!   [`RaftNode::resign`], or its own removal from the voter set committed)
//!   sends EndQuorumEpoch naming its voters by
//!   descending fetch offset; the first one stands at once, the others
//!   after exponentially longer backoffs. After its election timeout it is
//!   Prospective, or, no longer a voter, an observer in the next epoch.
//!   A node restarting as its epoch's leader starts here.
//!
//! Any role moves to Follower on learning the leader of an equal or newer
//! epoch, and to Unattached on learning a newer epoch without a leader.
//!
//! # Voters (KIP-853)
//!
//! With `kraft.version` 0 the voters are [`QuorumConfig::voters`]. With
//! `kraft.version` 1 ([`QuorumConfig::bootstrap_voters`], Kafka's bootstrap
//! checkpoint) the voter set in force is the latest VotersRecord in the log,
//! committed or not ([`RaftNode::voter_set`]); the first leader writes the
//! bootstrap set there. Whoever "voter" means below (who campaigns, whose
//! votes and fetch offsets count, who is sent BeginQuorumEpoch) is read
//! from that set at the moment. A voter is a [`ReplicaKey`]: a node that
//! comes back with another metadata directory is an observer until the
//! voter set names its new directory. The leader changes the set one voter
//! at a time, one change at a time, and only once it has committed an
//! offset in its epoch (Kafka's `AddVoterHandler`, `RemoveVoterHandler`).
//! Voter changes come from administrators, not quorum nodes: the `from` of
//! their [`Event::Receive`] is any id the driver routes the answer back by.
//! The exception is a follower voter whose entry in the voter set names
//! other endpoints than it has (it came back on other listeners): it sends
//! UpdateRaftVoter to the leader itself, as Kafka's `pollFollowerAsVoter`.
//!
//! # Seams for what comes next
//!
//! Snapshots keep the latest one only, end on batch boundaries, and leave
//! retention (Kafka's `metadata.max.retention.bytes`/`.ms`, which decide
//! when `maybeClean` moves the log start) to the caller. The leader does not ask a new voter for its
//! `kraft.version` range with ApiVersions (every Strom node supports 0-1);
//! `kraft.version` does not move from 0 to 1 on a running quorum; and
//! `quorum-state` records the vote's id, not its directory id.

pub mod checkpoint;
pub mod config;
mod election;
pub mod log;
pub mod message;
pub mod node;
mod reconfig;
pub mod record_batch;
mod replication;
mod requests;
pub mod rng;
#[cfg(test)]
mod sim;
pub mod snapshot;
pub mod state;
#[cfg(test)]
mod tests;
pub mod voters;
pub mod wire;

/// A node's `node.id`.
pub type NodeId = i32;

pub use config::QuorumConfig;
pub use log::{Batch, MemoryLog, OffsetAndEpoch, RaftLog, Records};
pub use message::{Body, ErrorCode, Message};
pub use node::{Action, AppendError, Event, RaftNode};
pub use snapshot::{SnapshotError, SnapshotState};
pub use state::{ElectionState, RoleName};
pub use voters::{Endpoint, ReplicaKey, VersionRange, VoterNode, VoterSet};
