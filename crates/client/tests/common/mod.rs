//! A Strom broker inside the test process, for the client's end-to-end tests.

use strom_broker::{BoundBroker, Broker, BrokerConfig};
use strom_client::config::parse_pairs;
use strom_client::ProducerConfig;

/// A broker on a free loopback port with its own data dir; stops when dropped.
pub struct TestBroker {
    pub bootstrap: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub async fn start_broker() -> TestBroker {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let overrides = [
        ("node.id", "1".to_owned()),
        ("listeners", format!("PLAINTEXT://127.0.0.1:{port}")),
        ("log.dirs", dir.path().display().to_string()),
    ]
    .map(|(k, v)| (k.to_owned(), v));
    let config = BrokerConfig::from_properties("", &overrides).unwrap();
    let bound = BoundBroker::bind(Broker::open(config).unwrap()).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(bound.serve(async move {
        let _ = stopped.await;
    }));
    TestBroker { bootstrap: format!("127.0.0.1:{port}"), stop: Some(stop), _dir: dir }
}

pub fn producer_config(bootstrap: &str, pairs: &[&str]) -> ProducerConfig {
    let mut all = vec![format!("bootstrap.servers={bootstrap}")];
    all.extend(pairs.iter().map(|p| p.to_string()));
    ProducerConfig::from_properties(&parse_pairs(all.iter().map(String::as_str)).unwrap()).unwrap()
}
