//! A Strom broker inside the test process, for the client's end-to-end tests.

use strom_broker::server::StartError;
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
    start_broker_with(&[]).await
}

/// How often a broker start is tried when another process takes the chosen
/// port between the probe and the broker's bind.
const BIND_ATTEMPTS: usize = 10;

/// A broker with `extra` settings on top of the test defaults.
pub async fn start_broker_with(extra: &[(&str, &str)]) -> TestBroker {
    for _ in 0..BIND_ATTEMPTS {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut overrides: Vec<(String, String)> = vec![
            ("node.id".into(), "1".into()),
            ("listeners".into(), format!("PLAINTEXT://127.0.0.1:{port}")),
            ("log.dirs".into(), dir.path().display().to_string()),
        ];
        overrides.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let config = BrokerConfig::from_properties("", &overrides).unwrap();
        let bound = match BoundBroker::bind(Broker::open(config).unwrap()).await {
            Ok(bound) => bound,
            Err(StartError::Bind { .. }) => continue,
            Err(e) => panic!("broker start: {e}"),
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(bound.serve(async move {
            let _ = stopped.await;
        }));
        return TestBroker { bootstrap: format!("127.0.0.1:{port}"), stop: Some(stop), _dir: dir };
    }
    panic!("no free loopback port in {BIND_ATTEMPTS} attempts");
}

pub fn producer_config(bootstrap: &str, pairs: &[&str]) -> ProducerConfig {
    let mut all = vec![format!("bootstrap.servers={bootstrap}")];
    all.extend(pairs.iter().map(|p| p.to_string()));
    ProducerConfig::from_properties(&parse_pairs(all.iter().map(String::as_str)).unwrap()).unwrap()
}
