//! The consumer against a real Strom broker in this process: manual
//! assignment, seeks, pause/resume, offset resets, commits and groups.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{producer_config, start_broker};
use strom_client::admin::NewTopic;
use strom_client::config::parse_pairs;
use strom_client::consumer::{NoListener, RebalanceListener};
use strom_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, ConsumerRecord, Producer, ProducerRecord, TopicPartition,
};

fn consumer_config(bootstrap: &str, pairs: &[&str]) -> ConsumerConfig {
    let mut all = vec![format!("bootstrap.servers={bootstrap}")];
    all.extend(pairs.iter().map(|p| p.to_string()));
    ConsumerConfig::from_properties(&parse_pairs(all.iter().map(String::as_str)).unwrap()).unwrap()
}

/// Produces `count` records `{prefix}-{i}` keyed `k{i}` to `topic`.
async fn produce(bootstrap: &str, topic: &str, prefix: &str, count: usize, codec: &str) {
    let setting = format!("compression.type={codec}");
    let producer = Producer::connect(producer_config(bootstrap, &["acks=all", &setting])).await.unwrap();
    let mut deliveries = Vec::new();
    for i in 0..count {
        let (key, value) = (format!("k{i}"), format!("{prefix}-{i}"));
        let record = ProducerRecord::new(topic, value.as_bytes()).with_key(key.as_bytes());
        deliveries.push(producer.send(record).await.unwrap());
    }
    for delivery in deliveries {
        delivery.wait().await.unwrap();
    }
    producer.close().await;
}

async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) {
    let admin = Admin::connect(ClientConfig::new(bootstrap)).await.unwrap();
    let created = admin.create_topics(&[NewTopic::new(topic, partitions, 1)], false).await.unwrap();
    created[0].result.as_ref().unwrap();
}

/// Polls until `want` records arrived or ten seconds passed.
async fn poll_n(consumer: &mut Consumer, want: usize) -> Vec<ConsumerRecord> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut records = Vec::new();
    while records.len() < want && tokio::time::Instant::now() < deadline {
        records.extend(consumer.poll(Duration::from_millis(200)).await.unwrap());
    }
    records
}

fn values(records: &[ConsumerRecord]) -> Vec<String> {
    records.iter().map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assigned_consumer_reads_every_codec_seeks_and_pauses() {
    let broker = start_broker().await;
    create_topic(&broker.bootstrap, "reads", 1).await;
    let codecs = ["none", "gzip", "snappy", "lz4", "zstd"];
    for codec in codecs {
        produce(&broker.bootstrap, "reads", codec, 200, codec).await;
    }
    let tp = TopicPartition::new("reads", 0);
    let config = consumer_config(&broker.bootstrap, &["auto.offset.reset=earliest", "max.poll.records=77"]);
    let mut consumer = Consumer::connect(config).await.unwrap();
    consumer.assign(std::slice::from_ref(&tp)).unwrap();

    let records = poll_n(&mut consumer, 1000).await;
    assert_eq!(records.len(), 1000);
    assert!(records.iter().enumerate().all(|(i, r)| r.offset == i as i64 && r.partition == 0));
    let expected: Vec<String> =
        codecs.iter().flat_map(|c| (0..200).map(move |i| format!("{c}-{i}"))).collect();
    assert_eq!(values(&records), expected);
    assert_eq!(records[5].key.as_deref(), Some(&b"k5"[..]));
    assert_eq!(consumer.position(&tp), Some(1000));
    assert_eq!(consumer.high_watermark(&tp), 1000);
    assert_eq!(consumer.lag(&tp), Some(0));

    consumer.seek(&tp, 990).unwrap();
    assert_eq!(values(&poll_n(&mut consumer, 10).await), expected[990..].to_vec(), "seek back re-reads");

    consumer.pause(std::slice::from_ref(&tp)).unwrap();
    produce(&broker.bootstrap, "reads", "later", 5, "none").await;
    assert!(consumer.poll(Duration::from_millis(300)).await.unwrap().is_empty(), "paused");
    consumer.resume(std::slice::from_ref(&tp)).unwrap();
    assert_eq!(poll_n(&mut consumer, 5).await.len(), 5, "resumed");

    // Pausing with responses buffered keeps them, in order, for resume.
    consumer.seek(&tp, 0).unwrap();
    assert_eq!(poll_n(&mut consumer, 1).await.last().unwrap().offset, 76, "max.poll.records");
    consumer.pause(std::slice::from_ref(&tp)).unwrap();
    assert!(consumer.poll(Duration::from_millis(300)).await.unwrap().is_empty(), "paused with data buffered");
    consumer.resume(std::slice::from_ref(&tp)).unwrap();
    let resumed = poll_n(&mut consumer, 1005 - 77).await;
    assert!(resumed.iter().enumerate().all(|(i, r)| r.offset == 77 + i as i64), "contiguous after resume");

    consumer.seek_to_beginning(std::slice::from_ref(&tp)).unwrap();
    assert_eq!(poll_n(&mut consumer, 1).await[0].offset, 0);
    assert!(consumer.seek(&TopicPartition::new("reads", 9), 0).is_err(), "not assigned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_reset_policies_and_commits() {
    let broker = start_broker().await;
    create_topic(&broker.bootstrap, "resets", 1).await;
    produce(&broker.bootstrap, "resets", "r", 10, "none").await;
    let tp = TopicPartition::new("resets", 0);

    let mut latest = Consumer::connect(consumer_config(&broker.bootstrap, &["group.id=g"])).await.unwrap();
    latest.assign(std::slice::from_ref(&tp)).unwrap();
    assert!(latest.poll(Duration::from_millis(300)).await.unwrap().is_empty(), "latest starts at the end");
    assert_eq!(latest.position(&tp), Some(10));

    let mut strict =
        Consumer::connect(consumer_config(&broker.bootstrap, &["group.id=g", "auto.offset.reset=none"]))
            .await
            .unwrap();
    strict.assign(std::slice::from_ref(&tp)).unwrap();
    assert!(strict.poll(Duration::from_millis(100)).await.is_err(), "none without a commit fails");

    latest.seek(&tp, 4).unwrap();
    latest.commit_async(Some(&[(tp.clone(), 7)]));
    latest.commit_sync(None).await.unwrap();
    assert_eq!(latest.committed(std::slice::from_ref(&tp)).await.unwrap()[&tp], 4, "the later commit wins");
    latest.close().await.unwrap();

    let records = poll_n(&mut strict, 6).await;
    assert_eq!(records.first().map(|r| r.offset), Some(4), "resumes from the commit");
    assert_eq!(records.len(), 6);

    strict.seek(&tp, 1_000).unwrap();
    let out_of_range = strict.poll(Duration::from_secs(2)).await;
    assert!(out_of_range.is_err(), "out of range with reset none is an error");
}

/// Records the partitions the listener saw, to check callbacks ran.
struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl RebalanceListener for Recorder {
    fn on_partitions_revoked(&mut self, partitions: &[TopicPartition]) {
        self.0.lock().unwrap().push(format!("revoked {}", partitions.len()));
    }
    fn on_partitions_assigned(&mut self, partitions: &[TopicPartition]) {
        self.0.lock().unwrap().push(format!("assigned {}", partitions.len()));
    }
}

async fn group_shares_and_rebalances(strategy: &str) {
    let broker = start_broker().await;
    let topic = format!("shared-{strategy}");
    create_topic(&broker.bootstrap, &topic, 4).await;
    produce(&broker.bootstrap, &topic, "v", 400, "lz4").await;
    let settings = [
        "group.id=sharing",
        "auto.offset.reset=earliest",
        "heartbeat.interval.ms=100",
        "session.timeout.ms=6000",
        &format!("partition.assignment.strategy={strategy}"),
    ];
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut first = Consumer::connect(consumer_config(&broker.bootstrap, &settings)).await.unwrap();
    first.subscribe(std::slice::from_ref(&topic), Box::new(Recorder(events.clone()))).unwrap();
    let mut second = Consumer::connect(consumer_config(&broker.bootstrap, &settings)).await.unwrap();
    second.subscribe(std::slice::from_ref(&topic), Box::new(NoListener)).unwrap();

    // Both poll until the group settles with two partitions each.
    let mut seen: BTreeMap<(i32, i64), usize> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !(first.assignment().len() == 2 && second.assignment().len() == 2 && seen.len() == 400) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "group never settled: {:?} {:?}",
            first.assignment(),
            second.assignment()
        );
        let (a, b) =
            tokio::join!(first.poll(Duration::from_millis(100)), second.poll(Duration::from_millis(100)));
        for record in a.unwrap().into_iter().chain(b.unwrap()) {
            *seen.entry((record.partition, record.offset)).or_default() += 1;
        }
    }
    let owned: BTreeSet<TopicPartition> = first.assignment().into_iter().chain(second.assignment()).collect();
    assert_eq!(owned.len(), 4, "every partition has exactly one owner");
    assert!(events.lock().unwrap().iter().any(|e| e.starts_with("assigned")), "listener called");

    first.commit_sync(None).await.unwrap();
    second.commit_sync(None).await.unwrap();
    second.close().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while first.assignment().len() != 4 {
        assert!(tokio::time::Instant::now() < deadline, "survivor never took over");
        assert!(first.poll(Duration::from_millis(100)).await.unwrap().is_empty(), "all was committed");
    }
    produce(&broker.bootstrap, &topic, "w", 40, "none").await;
    let later = poll_n(&mut first, 40).await;
    assert_eq!(later.len(), 40, "the survivor reads new records on all partitions");
    assert_eq!(later.iter().map(|r| r.partition).collect::<BTreeSet<_>>().len(), 4);
    first.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn range_group_shares_partitions_and_rebalances() {
    group_shares_and_rebalances("range").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cooperative_sticky_group_shares_partitions_and_rebalances() {
    group_shares_and_rebalances("cooperative-sticky").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_rebalances_when_partitions_are_added() {
    let broker = start_broker().await;
    create_topic(&broker.bootstrap, "growing", 2).await;
    let settings = ["group.id=growers", "auto.offset.reset=earliest", "metadata.max.age.ms=300"];
    let mut consumer = Consumer::connect(consumer_config(&broker.bootstrap, &settings)).await.unwrap();
    consumer.subscribe(&["growing".to_owned()], Box::new(NoListener)).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while consumer.assignment().len() != 2 {
        assert!(tokio::time::Instant::now() < deadline, "never assigned");
        consumer.poll(Duration::from_millis(100)).await.unwrap();
    }
    let admin = Admin::connect(ClientConfig::new(&broker.bootstrap)).await.unwrap();
    let grown = admin.create_partitions(&[("growing".to_owned(), 5)], false).await.unwrap();
    grown[0].result.as_ref().unwrap();
    while consumer.assignment().len() != 5 {
        assert!(tokio::time::Instant::now() < deadline, "the new partitions were never assigned");
        consumer.poll(Duration::from_millis(100)).await.unwrap();
    }
    consumer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_assigned_again_never_sees_data_fetched_before() {
    let broker = start_broker().await;
    create_topic(&broker.bootstrap, "again", 1).await;
    let producer = Producer::connect(producer_config(&broker.bootstrap, &["acks=1"])).await.unwrap();
    let value = vec![b'x'; 1000];
    let mut deliveries = Vec::new();
    for _ in 0..2000 {
        deliveries.push(producer.send(ProducerRecord::new("again", &value)).await.unwrap());
    }
    for delivery in deliveries {
        delivery.wait().await.unwrap();
    }
    let tp = TopicPartition::new("again", 0);
    let settings = ["max.partition.fetch.bytes=65536", "max.poll.records=10"];
    let mut consumer = Consumer::connect(consumer_config(&broker.bootstrap, &settings)).await.unwrap();
    for round in 0..5 {
        // Read a little (more is buffered and in flight), then drop the
        // partition, take it back and start over at offset 0.
        consumer.assign(std::slice::from_ref(&tp)).unwrap();
        consumer.seek(&tp, 0).unwrap();
        let first = poll_n(&mut consumer, 1).await;
        assert_eq!(first[0].offset, 0, "round {round}");
        consumer.assign(&[]).unwrap();
    }
    consumer.assign(std::slice::from_ref(&tp)).unwrap();
    consumer.seek(&tp, 0).unwrap();
    let records = poll_n(&mut consumer, 2000).await;
    let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (0..2000).collect::<Vec<i64>>(), "every offset once, in order");
    producer.close().await;
}
