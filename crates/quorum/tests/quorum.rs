//! Quorums of in-process nodes over loopback TCP.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use strom_quorum::{Config, LeaderAndEpoch, Quorum, QuorumConfig, QuorumError, QuorumEvent};
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
            QuorumEvent::LoadSnapshot { content, .. } => {
                records.clear();
                records.push(content);
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
        .create_snapshot(last + 1, leader.epoch, Bytes::from_static(b"state-after-e"))
        .await
        .unwrap();
    cluster.start_observer(100).await;
    let mut events = cluster.quorum(100).subscribe();
    let snapshot = collect(&mut events, 1).await;
    assert_eq!(snapshot, vec![Bytes::from_static(b"state-after-e")]);
    cluster.append_batches("f", 3).await;
    assert_eq!(collect(&mut events, 3).await, expected("f", 3));
    let description = cluster.quorum(cluster.agreed_leader().await.leader_id.unwrap()).describe();
    assert_eq!(description.observers.iter().map(|o| o.replica_id).collect::<Vec<_>>(), vec![100]);
}
