//! The Strom broker: Kafka's wire protocol over Strom's storage.
//!
//! A request travels through these modules, in order:
//!
//! - [`server`] binds the listeners, accepts connections and owns start-up,
//!   background duties (flushes, checkpoints) and clean shutdown; its
//!   `Broker` is the composition root that builds the services below and
//!   hands each task and helper the ones it uses: handlers through
//!   [`dispatch::RequestContext`]'s accessors, the coordinators through
//!   [`coordinator_host::CoordinatorHost`], replication through
//!   [`replication::ReplicationServices`]; only server, dispatch, network
//!   and the console hold the whole `Broker`;
//! - [`network`] reads size-prefixed frames (bounded by
//!   `socket.request.max.bytes`) and writes responses in request order,
//!   over TLS and behind SASL where the listener's [`security`] asks;
//! - [`dispatch`] checks the API key and version against the ApiVersions
//!   table, decodes the header and body, routes to a handler and encodes the
//!   response at the request's version;
//! - [`apis`] is that table: one entry per served API (key, versions,
//!   handler), from which the version check, the decoding and the routing
//!   are generated;
//! - [`handlers`] holds one module per API family (produce, fetch, metadata,
//!   topics, configs, list_offsets, log_dirs, cluster, api_versions, groups,
//!   transactions…; `raft` hands the KRaft APIs and the metadata Fetch to
//!   the node's `strom_quorum::Quorum`, which [`server`] starts on every
//!   node with `process.roles`; until the node has caught up with the
//!   metadata log, [`early_peers`] answers them on the controller
//!   listeners instead);
//! - [`controller_channel`] is how everything reaches the cluster
//!   metadata: the published image, this node's controller (handlers
//!   answering as the active controller await its commits), the
//!   [`controller_link`] to the active controller elsewhere and this
//!   broker's epoch, which the [`lifecycle`] managers keep;
//! - [`response_errors`] reads each response's error codes, which dispatch
//!   counts per API and logs per request at debug level;
//! - [`replica`] is the partition state the handlers act on: the
//!   partitions whose replica set names this broker, each with its log,
//!   high watermark, leadership and the waiters of delayed fetches. Each
//!   published metadata image is applied to it (and leadership changes
//!   to the coordinators) by a loader publisher, before anyone waiting for
//!   that image is answered; a partition led elsewhere is answered
//!   NOT_LEADER_OR_FOLLOWER with KIP-951's leader hint;
//! - [`replication`] moves partition data between brokers: one fetcher task
//!   per leader (and `num.replica.fetchers`) copies led logs to followers,
//!   the leader's ISR rules move the high watermark, and ISR changes go to
//!   the controller as AlterPartition; acks=all produces wait for it;
//! - [`fetch_session`] keeps incremental fetch sessions (KIP-227);
//! - [`producer_ids`] hands out idempotent producers' ids from blocks
//!   reserved in the metadata log;
//! - [`txn`] is the transaction coordinator: `__transaction_state`, the
//!   transaction state machine and the markers that end transactions
//!   (WriteTxnMarkers to partitions other brokers lead, `txn::markers`;
//!   requests to other brokers go through `txn::peers`);
//!   [`verification`] keeps a transactional batch out of a partition until
//!   the coordinator has placed the partition in the producer's transaction;
//!   [`internal_topic`] maps ids to the partitions of the coordinators'
//!   topics and creates those topics on first use.
//!   [`group`] and [`txn`] see the broker only through
//!   [`coordinator_host::CoordinatorHost`].
//!
//! [`quota`] holds client quotas (byte rates, request time, controller
//! mutations), the KIP-219 channel mute and the per-IP connection limits.
//!
//! [`console`] serves the web console (`console.listener`) from the same
//! handlers.
//!
//! [`config`] parses `server.properties` (Java syntax, [`properties`]) with
//! Kafka's key names and overlays
//! the dynamic broker configs, [`config_sources`] says where each described
//! config value comes from, [`error`]
//! maps internal errors to Kafka error codes, [`locks`] says what a lock
//! whose holder panicked is worth, [`alloc`] keeps absurd wire-declared
//! capacities from aborting the process and [`host_name`] finds the name a
//! listener bound to every interface advertises. [`kraft_config`] reads a
//! KRaft node's roles and quorum, and [`meta_properties`] formats and checks
//! the log dirs' `meta.properties`. [`open_files`] says how many more
//! partitions the descriptor limit allows, and [`failpoint`] holds the crash
//! points of the crash tests.

pub mod alloc;
pub mod apis;
pub mod config;
pub mod config_sources;
pub mod console;
pub mod controller_channel;
pub mod controller_link;
pub mod coordinator_host;
pub mod dispatch;
pub mod early_peers;
pub mod error;
pub mod failpoint;
pub mod fetch_session;
pub mod forwarding;
pub mod group;
pub mod handlers;
pub mod host_name;
pub mod internal_topic;
pub mod kraft_config;
pub mod lifecycle;
pub mod locks;
pub mod meta_properties;
pub mod metrics;
pub mod network;
pub mod open_files;
pub mod producer_ids;
pub mod properties;
pub mod quota;
pub mod replica;
pub mod replication;
pub mod response_errors;
pub mod security;
pub mod server;
pub mod shutdown;
pub mod txn;
pub mod verification;

pub use config::BrokerConfig;
pub use server::{BoundBroker, Broker};
