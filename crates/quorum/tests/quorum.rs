//! Quorums of in-process nodes over loopback TCP.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{add_raft_voter_request, AddRaftVoterRequest, RemoveRaftVoterRequest};
use kafka_protocol::protocol::StrBytes;
use strom_quorum::bootstrap::{write_checkpoint, BootstrapVoter};
use strom_quorum::{
    Config, LeaderAndEpoch, Quorum, QuorumConfig, QuorumDescription, QuorumError, QuorumEvent, WireRequest,
    WireResponse,
};
use tokio::net::TcpListener;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(20);

struct Node {
    quorum: Quorum,
    listener: JoinHandle<()>,
}

struct Cluster {
    voters: Vec<i32>,
    endpoints: BTreeMap<i32, String>,
    dirs: BTreeMap<i32, PathBuf>,
    nodes: BTreeMap<i32, Node>,
    _tmp: tempfile::TempDir,
}

fn raft_config(node_id: i32, voters: &[i32]) -> QuorumConfig {
    let mut config = QuorumConfig::new(node_id, voters.iter().copied());
    config.election_timeout_ms = 200;
    config.fetch_timeout_ms = 400;
    config.election_backoff_max_ms = 200;
    config.request_timeout_ms = 500;
    config.fetch_max_wait_ms = 100;
    config
}

async fn start_node(
    id: i32,
    voters: &[i32],
    endpoints: &BTreeMap<i32, String>,
    dir: &Path,
    listener: TcpListener,
) -> Node {
    let config = Config {
        raft: raft_config(id, voters),
        cluster_id: "test-cluster".into(),
        metadata_log_dir: dir.to_owned(),
        voter_endpoints: endpoints.clone(),
        bootstrap_servers: Vec::new(),
        connector: Default::default(),
    };
    let quorum = Quorum::start(config).await.expect("quorum starts");
    let listener = tokio::spawn(strom_quorum::listener::serve(listener, quorum.clone()));
    Node { quorum, listener }
}

impl Cluster {
    /// Voters `1..=voters`, plus `observers` ids from 100 on, all started.
    async fn start(voter_count: i32) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let voters: Vec<i32> = (1..=voter_count).collect();
        let mut listeners = BTreeMap::new();
        let mut endpoints = BTreeMap::new();
        for id in &voters {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            endpoints.insert(*id, listener.local_addr().unwrap().to_string());
            listeners.insert(*id, listener);
        }
        let mut cluster =
            Cluster { voters, endpoints, dirs: BTreeMap::new(), nodes: BTreeMap::new(), _tmp: tmp };
        for (id, listener) in listeners {
            cluster.start_with(id, listener).await;
        }
        cluster
    }

    async fn start_with(&mut self, id: i32, listener: TcpListener) {
        let dir = self.dirs.entry(id).or_insert_with(|| self._tmp.path().join(format!("node-{id}"))).clone();
        let node = start_node(id, &self.voters, &self.endpoints, &dir, listener).await;
        self.nodes.insert(id, node);
    }

    /// Restarts a stopped node from its directory, on its old port.
    async fn restart(&mut self, id: i32) {
        let address = self.endpoints.get(&id).cloned().unwrap_or_else(|| "127.0.0.1:0".into());
        let listener = bind_retrying(&address).await;
        self.endpoints.entry(id).or_insert_with(|| listener.local_addr().unwrap().to_string());
        self.start_with(id, listener).await;
    }

    /// Starts an observer with a fresh directory.
    async fn start_observer(&mut self, id: i32) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        self.start_with(id, listener).await;
    }

    async fn stop(&mut self, id: i32) {
        let node = self.nodes.remove(&id).expect("running");
        node.quorum.shutdown().await;
        node.listener.abort();
        let _ = node.listener.await;
    }

    fn quorum(&self, id: i32) -> &Quorum {
        &self.nodes[&id].quorum
    }

    /// Waits until every running voter agrees on one leader in one epoch.
    async fn agreed_leader(&self) -> LeaderAndEpoch {
        let deadline = Instant::now() + WAIT;
        loop {
            let views: Vec<LeaderAndEpoch> = self
                .nodes
                .iter()
                .filter(|(id, _)| self.voters.contains(id))
                .map(|(_, node)| *node.quorum.leader().borrow())
                .collect();
            let first = views[0];
            let leader_running = first.leader_id.is_some_and(|id| self.nodes.contains_key(&id));
            if leader_running && views.iter().all(|view| *view == first) {
                return first;
            }
            assert!(Instant::now() < deadline, "no agreed leader in time: {views:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the leader's high watermark passes `offset`.
    async fn committed(&self, offset: u64) {
        let deadline = Instant::now() + WAIT;
        loop {
            let leader = self.agreed_leader().await.leader_id.unwrap();
            if self.quorum(leader).high_watermark() > Some(offset) {
                return;
            }
            assert!(Instant::now() < deadline, "offset {offset} never committed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Appends `count` one-record batches through the leader, retrying
    /// while leadership moves; returns the last offset.
    async fn append_batches(&self, prefix: &str, count: usize) -> u64 {
        let mut last = 0;
        for i in 0..count {
            let record = Bytes::from(format!("{prefix}-{i}"));
            let deadline = Instant::now() + WAIT;
            last = loop {
                let leader = self.agreed_leader().await.leader_id.unwrap();
                match self.quorum(leader).append(vec![record.clone()]).await {
                    Ok(offset) => break offset,
                    Err(QuorumError::NotLeader { .. }) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(e) => panic!("append failed: {e}"),
                }
            };
        }
        last
    }
}

async fn bind_retrying(address: &str) -> TcpListener {
    let deadline = Instant::now() + WAIT;
    loop {
        match TcpListener::bind(address).await {
            Ok(listener) => return listener,
            Err(e) => assert!(Instant::now() < deadline, "cannot bind {address}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The data records a subscriber receives until it has `want` of them:
/// snapshot content first (as one pseudo-record), then committed records.
async fn collect(events: &mut UnboundedReceiver<QuorumEvent>, want: usize) -> Vec<Bytes> {
    let deadline = Instant::now() + WAIT;
    let mut records = Vec::new();
    while records.len() < want {
        let event = tokio::time::timeout_at(deadline, events.recv())
            .await
            .unwrap_or_else(|_| panic!("only {} of {want} records arrived: {records:?}", records.len()))
            .expect("the quorum is running");
        match event {
            QuorumEvent::Commit { records: batch, .. } => records.extend(batch),
            QuorumEvent::LoadSnapshot { records: state, .. } => {
                records.clear();
                records.extend(state);
            }
            QuorumEvent::LeaderChange(_) => {}
        }
    }
    records
}

fn expected(prefix: &str, count: usize) -> Vec<Bytes> {
    (0..count).map(|i| Bytes::from(format!("{prefix}-{i}"))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_elect_one_leader_and_every_subscriber_sees_the_same_batches() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.agreed_leader().await;
    assert!(leader.epoch > 0);
    let mut subscribers: Vec<_> = cluster.nodes.values().map(|node| node.quorum.subscribe()).collect();
    cluster.append_batches("a", 20).await;
    for events in &mut subscribers {
        assert_eq!(collect(events, 20).await, expected("a", 20));
    }
    let follower = cluster.voters.iter().find(|id| Some(**id) != leader.leader_id).unwrap();
    let refused = cluster.quorum(*follower).append(vec![Bytes::from_static(b"x")]).await;
    assert!(matches!(refused, Err(QuorumError::NotLeader { .. })), "{refused:?}");
    let description = cluster.quorum(leader.leader_id.unwrap()).describe();
    assert_eq!(description.voters.len(), 3);
    assert!(description.high_watermark > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_voters_commit_in_one_order() {
    let cluster = Cluster::start(5).await;
    let mut subscribers: Vec<_> = cluster.nodes.values().map(|node| node.quorum.subscribe()).collect();
    cluster.append_batches("b", 10).await;
    for events in &mut subscribers {
        assert_eq!(collect(events, 10).await, expected("b", 10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_leader_elects_another_in_a_higher_epoch_and_keeps_committed_records() {
    let mut cluster = Cluster::start(3).await;
    let last = cluster.append_batches("c", 5).await;
    cluster.committed(last).await;
    let old = cluster.agreed_leader().await;
    cluster.stop(old.leader_id.unwrap()).await;
    let new = cluster.agreed_leader().await;
    assert!(new.epoch > old.epoch && new.leader_id != old.leader_id, "{old:?} then {new:?}");
    let mut events = cluster.quorum(new.leader_id.unwrap()).subscribe();
    assert_eq!(collect(&mut events, 5).await, expected("c", 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_from_its_directory_catches_up() {
    let mut cluster = Cluster::start(3).await;
    cluster.append_batches("d", 5).await;
    let leader = cluster.agreed_leader().await.leader_id.unwrap();
    let follower = *cluster.voters.iter().find(|id| **id != leader).unwrap();
    cluster.stop(follower).await;
    cluster.append_batches("d2", 5).await;
    cluster.restart(follower).await;
    let mut events = cluster.quorum(follower).subscribe();
    let mut want = expected("d", 5);
    want.extend(expected("d2", 5));
    assert_eq!(collect(&mut events, 10).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_observer_catches_up_through_the_leaders_snapshot_and_follows() {
    let mut cluster = Cluster::start(3).await;
    let last = cluster.append_batches("e", 5).await;
    cluster.committed(last).await;
    let leader = cluster.agreed_leader().await;
    let leader_quorum = cluster.quorum(leader.leader_id.unwrap()).clone();
    leader_quorum
        .create_snapshot(last + 1, leader.epoch, vec![Bytes::from_static(b"state-after-e")])
        .await
        .unwrap();
    cluster.start_observer(100).await;
    let mut events = cluster.quorum(100).subscribe();
    let snapshot = collect(&mut events, 1).await;
    assert_eq!(snapshot, vec![Bytes::from_static(b"state-after-e")]);
    // FetchSnapshot served the leader's file as it is.
    let name =
        strom_quorum::disk::snapshot_file_name(strom_raft::OffsetAndEpoch::new(last + 1, leader.epoch));
    let file = |id: i32| std::fs::read(cluster.dirs[&id].join("__cluster_metadata-0").join(&name)).unwrap();
    assert_eq!(file(100), file(leader.leader_id.unwrap()));
    let checkpoint = strom_raft::checkpoint::Checkpoint::decode(&file(100).into()).unwrap();
    assert_eq!(checkpoint.records, snapshot);
    cluster.append_batches("f", 3).await;
    assert_eq!(collect(&mut events, 3).await, expected("f", 3));
    let description = cluster.quorum(cluster.agreed_leader().await.leader_id.unwrap()).describe();
    assert_eq!(description.observers.iter().map(|o| o.replica_id).collect::<Vec<_>>(), vec![100]);
}

/// A node of a dynamic quorum: its directory id is `[id; 16]`, its
/// endpoint on CONTROLLER is its listener's address.
async fn start_dynamic(id: i32, dir: &Path, listener: TcpListener, bootstrap: &[String]) -> Node {
    let address = listener.local_addr().unwrap();
    let mut raft = raft_config(id, &[]);
    raft.directory_id = Some(uuid::Uuid::from_bytes([id as u8; 16]));
    raft.endpoints = vec![strom_raft::Endpoint {
        listener: "CONTROLLER".into(),
        host: address.ip().to_string(),
        port: address.port(),
    }];
    let config = Config {
        raft,
        cluster_id: "test-cluster".into(),
        metadata_log_dir: dir.to_owned(),
        voter_endpoints: BTreeMap::new(),
        bootstrap_servers: bootstrap.to_vec(),
        connector: Default::default(),
    };
    let quorum = Quorum::start(config).await.expect("quorum starts");
    let listener = tokio::spawn(strom_quorum::listener::serve(listener, quorum.clone()));
    Node { quorum, listener }
}

/// Polls `quorum`'s description until `done` holds.
async fn described(quorum: &Quorum, done: impl Fn(&QuorumDescription) -> bool) -> QuorumDescription {
    let deadline = Instant::now() + WAIT;
    loop {
        let description = quorum.describe();
        if done(&description) {
            return description;
        }
        assert!(Instant::now() < deadline, "quorum never got there: {description:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends a voter change to `quorum` until it is answered without error.
async fn change_voters(quorum: &Quorum, request: WireRequest) {
    let deadline = Instant::now() + WAIT;
    loop {
        let error = match quorum.handle_request(request.clone(), 0).await {
            Ok(WireResponse::AddRaftVoter(r)) => (r.error_code, r.error_message),
            Ok(WireResponse::RemoveRaftVoter(r)) => (r.error_code, r.error_message),
            other => panic!("unexpected answer {other:?}"),
        };
        if error.0 == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "voter change refused: {error:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_voter_adds_an_observer_as_voter_and_removes_it_again() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir1, dir2) = (tmp.path().join("node-1"), tmp.path().join("node-2"));
    let listener1 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address1 = listener1.local_addr().unwrap();
    let voter = BootstrapVoter {
        id: 1,
        directory_id: [1; 16],
        endpoints: vec![("CONTROLLER".into(), "127.0.0.1".into(), address1.port())],
    };
    write_checkpoint(&dir1, Some(&[voter]), Vec::new()).unwrap();
    let node1 = start_dynamic(1, &dir1, listener1, &[]).await;
    let leader = described(&node1.quorum, |d| d.is_leader && d.high_watermark > 0).await;
    assert_eq!(leader.voters.iter().map(|v| v.replica_id).collect::<Vec<_>>(), [1]);

    let listener2 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port2 = listener2.local_addr().unwrap().port();
    let node2 = start_dynamic(2, &dir2, listener2, &[address1.to_string()]).await;
    described(&node1.quorum, |d| d.observers.iter().any(|o| o.replica_id == 2)).await;

    let directory2 = uuid::Uuid::from_bytes([2; 16]);
    let listener = add_raft_voter_request::Listener::default()
        .with_name(StrBytes::from_static_str("CONTROLLER"))
        .with_host(StrBytes::from_static_str("127.0.0.1"))
        .with_port(port2);
    let add = AddRaftVoterRequest::default()
        .with_cluster_id(Some(StrBytes::from_static_str("test-cluster")))
        .with_timeout_ms(5_000)
        .with_voter_id(2)
        .with_voter_directory_id(directory2)
        .with_listeners(vec![listener]);
    change_voters(&node1.quorum, WireRequest::AddRaftVoter(add)).await;
    let both = described(&node1.quorum, |d| d.voters.len() == 2).await;
    assert_eq!(both.voters[1].directory_id, Some(directory2));
    // The new voter learnt the voter set from the log and follows.
    described(&node2.quorum, |d| d.voters.len() == 2 && d.leader_id == 1).await;

    let remove = RemoveRaftVoterRequest::default()
        .with_cluster_id(Some(StrBytes::from_static_str("test-cluster")))
        .with_voter_id(2)
        .with_voter_directory_id(directory2);
    change_voters(&node1.quorum, WireRequest::RemoveRaftVoter(remove)).await;
    let after =
        described(&node1.quorum, |d| d.voters.len() == 1 && d.observers.iter().any(|o| o.replica_id == 2))
            .await;
    assert_eq!(after.voters[0].replica_id, 1);
    node2.quorum.shutdown().await;
    node1.quorum.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_decided_in_an_earlier_epoch_is_refused_after_leadership_returns() {
    let mut cluster = Cluster::start(1).await;
    let first = cluster.agreed_leader().await;
    let decided = cluster.quorum(1).append_in_epoch(first.epoch, vec![Bytes::from_static(b"a")]).await;
    assert!(decided.is_ok(), "{decided:?}");
    // The same node leads again, in a later epoch.
    cluster.stop(1).await;
    cluster.restart(1).await;
    let again = cluster.agreed_leader().await;
    assert!(again.leader_id == first.leader_id && again.epoch > first.epoch, "{first:?} then {again:?}");
    let stale = cluster.quorum(1).append_in_epoch(first.epoch, vec![Bytes::from_static(b"stale")]).await;
    assert!(matches!(stale, Err(QuorumError::NotLeader { leader }) if leader == again), "{stale:?}");
    let current = cluster.quorum(1).append_in_epoch(again.epoch, vec![Bytes::from_static(b"b")]).await;
    assert!(current.is_ok(), "{current:?}");
}
