//! The client against a real Strom broker running in this process: admin
//! operations, the producer and group offsets, end to end over TCP.

use std::time::Duration;

mod common;

use common::{producer_config, start_broker, start_broker_with};
use strom_client::admin::{NewTopic, OffsetSpec};
use strom_client::{Admin, ClientConfig, Producer, ProducerRecord};

async fn latest_offsets(admin: &Admin, topic: &str, partitions: i32) -> Vec<i64> {
    let queries: Vec<_> = (0..partitions).map(|p| (topic.to_owned(), p, OffsetSpec::Latest)).collect();
    let mut results = admin.list_offsets(&queries).await.unwrap();
    results.sort_by_key(|r| r.partition);
    results.into_iter().map(|r| r.result.unwrap().offset).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_creates_describes_and_deletes_topics() {
    let broker = start_broker().await;
    let admin = Admin::connect(ClientConfig::new(&broker.bootstrap)).await.unwrap();

    let orders = NewTopic::new("orders", 3, 1).with_config("retention.ms", "3600000");
    let checked = admin.create_topics(std::slice::from_ref(&orders), true).await.unwrap();
    assert!(checked[0].result.is_ok(), "{:?}", checked[0].result);
    assert!(
        !admin.list_topics(false).await.unwrap().contains(&"orders".to_owned()),
        "validate_only creates nothing"
    );

    let created = admin
        .create_topics(&[orders.clone(), NewTopic::new("bad", 1, 1).with_config("retention.ms", "x")], false)
        .await
        .unwrap();
    assert!(created[0].result.is_ok());
    assert_eq!(created[1].result.as_ref().unwrap_err().kafka_code().unwrap().to_string(), "INVALID_CONFIG");
    let again = admin.create_topics(&[orders], false).await.unwrap();
    assert_eq!(
        again[0].result.as_ref().unwrap_err().kafka_code().unwrap().code(),
        36,
        "TOPIC_ALREADY_EXISTS"
    );

    let described = admin.describe_topics(&["orders".into(), "ghost".into()]).await.unwrap();
    let orders = described[0].result.as_ref().unwrap();
    assert_eq!(orders.partitions.len(), 3);
    assert!(orders.partitions.iter().all(|p| p.leader == 1 && p.isr == [1]));
    assert_eq!(described[1].result.as_ref().unwrap_err().kafka_code().unwrap().code(), 3);

    // DescribeTopicPartitions answers in name order, with eligible leader replicas.
    let described = admin.describe_topic_partitions(&["orders".into(), "ghost".into()]).await.unwrap();
    assert_eq!(described.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["ghost", "orders"]);
    assert_eq!(described[0].result.as_ref().unwrap_err().kafka_code().unwrap().code(), 3);
    let orders = described[1].result.as_ref().unwrap();
    assert_eq!(orders.partitions.iter().map(|p| p.partition).collect::<Vec<_>>(), [0, 1, 2]);
    for p in &orders.partitions {
        assert_eq!((p.leader, &p.replicas, &p.isr), (Some(1), &vec![1], &vec![1]));
        assert_eq!((&p.elr, &p.last_known_elr), (&Some(vec![]), &Some(vec![])));
        assert!(p.offline_replicas.is_empty());
    }
    assert!(orders.authorized_operations.is_some_and(|ops| ops > 0));

    let cluster = admin.describe_cluster().await.unwrap();
    assert_eq!(cluster.brokers.len(), 1);
    assert_eq!(cluster.brokers[0].addr(), broker.bootstrap);

    let deleted = admin.delete_topics(&["orders".into()]).await.unwrap();
    assert!(deleted[0].result.is_ok());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while admin.list_topics(false).await.unwrap().contains(&"orders".to_owned()) {
        assert!(tokio::time::Instant::now() < deadline, "orders still listed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_delivers_keyed_records_in_order_with_offsets() {
    let broker = start_broker().await;
    let admin = Admin::connect(ClientConfig::new(&broker.bootstrap)).await.unwrap();
    admin.create_topics(&[NewTopic::new("events", 4, 1)], false).await.unwrap();
    let config = producer_config(&broker.bootstrap, &["acks=all", "linger.ms=2", "batch.size=1000"]);
    let producer = Producer::connect(config).await.unwrap();
    assert_eq!(producer.idempotence_fallback(), None, "the broker grants producer ids");
    assert!(producer.identity().is_some(), "idempotent by default");

    let mut futures = Vec::new();
    for i in 0..500u32 {
        let key = format!("key-{}", i % 17);
        let value = format!("value-{i}");
        let record = ProducerRecord::new("events", value.as_bytes()).with_key(key.as_bytes());
        let future = producer.send(record).await.unwrap();
        futures.push((key, future));
    }
    producer.flush().await;
    let mut next_offset = [0i64; 4];
    let mut partition_of_key = std::collections::HashMap::new();
    for (key, future) in futures {
        let metadata = future.wait().await.unwrap();
        let partition = metadata.partition as usize;
        assert_eq!(metadata.offset, next_offset[partition], "offsets are consecutive per partition");
        next_offset[partition] += 1;
        assert_eq!(*partition_of_key.entry(key).or_insert(metadata.partition), metadata.partition);
    }
    assert_eq!(latest_offsets(&admin, "events", 4).await, next_offset);

    let earliest = admin.list_offsets(&[("events".into(), 0, OffsetSpec::Earliest)]).await.unwrap();
    assert_eq!(earliest[0].result.as_ref().unwrap().offset, 0);
    // The fullest partition holds 500 / 4 records at least.
    let fullest = (0..4).max_by_key(|&p| next_offset[p]).unwrap();
    let trimmed = admin.delete_records(&[("events".into(), fullest as i32, 1)]).await.unwrap();
    assert_eq!(*trimmed[0].result.as_ref().unwrap(), 1, "new low watermark");
    producer.close().await;
    assert!(producer.send(ProducerRecord::new("events", b"late")).await.is_err(), "closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_codec_and_acks_zero_reach_the_log() {
    let broker = start_broker().await;
    let admin = Admin::connect(ClientConfig::new(&broker.bootstrap)).await.unwrap();
    admin.create_topics(&[NewTopic::new("codecs", 1, 1)], false).await.unwrap();
    let mut expected = 0;
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let codec_setting = format!("compression.type={codec}");
        let producer =
            Producer::connect(producer_config(&broker.bootstrap, &["acks=1", &codec_setting])).await.unwrap();
        let futures: Vec<_> = {
            let mut futures = Vec::new();
            for i in 0..100 {
                let value = format!("{codec}-{i}-{}", "x".repeat(100));
                futures.push(producer.send(ProducerRecord::new("codecs", value.as_bytes())).await.unwrap());
            }
            futures
        };
        for future in futures {
            assert_eq!(future.wait().await.unwrap().offset, expected);
            expected += 1;
        }
    }
    let fire_and_forget = Producer::connect(producer_config(&broker.bootstrap, &["acks=0"])).await.unwrap();
    let future = fire_and_forget.send(ProducerRecord::new("codecs", b"no ack")).await.unwrap();
    assert_eq!(future.wait().await.unwrap().offset, -1, "acks=0 learns no offset");
    fire_and_forget.close().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while latest_offsets(&admin, "codecs", 1).await[0] != expected + 1 {
        assert!(tokio::time::Instant::now() < deadline, "the acks=0 record never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_to_an_unknown_topic_auto_creates_it() {
    let broker = start_broker().await;
    let producer = Producer::connect(producer_config(&broker.bootstrap, &["acks=1", "max.block.ms=3000"]))
        .await
        .unwrap();
    let future = producer.send(ProducerRecord::new("fresh", b"v")).await.unwrap();
    assert_eq!(future.wait().await.unwrap().offset, 0, "auto-created");
    let oversized = vec![0u8; 2 << 20];
    let error = producer.send(ProducerRecord::new("fresh", &oversized)).await.unwrap_err();
    assert_eq!(error.kafka_code().unwrap().to_string(), "MESSAGE_TOO_LARGE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_to_an_unknown_topic_times_out_without_auto_creation() {
    let broker = start_broker_with(&[("auto.create.topics.enable", "false")]).await;
    let producer =
        Producer::connect(producer_config(&broker.bootstrap, &["acks=1", "max.block.ms=500"])).await.unwrap();
    // As the Java producer does: send waits max.block.ms for the topic to appear.
    let error = producer.send(ProducerRecord::new("fresh", b"v")).await.expect_err("no such topic");
    assert_eq!(error.kafka_code().map(|c| c.to_string()), Some("REQUEST_TIMED_OUT".into()), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_offsets_commit_fetch_list_describe_and_delete() {
    let broker = start_broker().await;
    let admin = Admin::connect(ClientConfig::new(&broker.bootstrap)).await.unwrap();
    admin.create_topics(&[NewTopic::new("tracked", 2, 1)], false).await.unwrap();

    let committed = admin
        .commit_offsets("auditors", &[("tracked".into(), 0, 7), ("tracked".into(), 1, 3)])
        .await
        .unwrap();
    assert!(committed.iter().all(|r| r.result.is_ok()), "{committed:?}");
    let mut fetched = admin.fetch_offsets("auditors", None).await.unwrap();
    fetched.sort_by_key(|r| r.partition);
    let offsets: Vec<_> = fetched.iter().map(|r| (r.partition, *r.result.as_ref().unwrap())).collect();
    assert_eq!(offsets, [(0, Some(7)), (1, Some(3))]);
    let one = admin.fetch_offsets("auditors", Some(&[("tracked".into(), 1)])).await.unwrap();
    assert_eq!(*one[0].result.as_ref().unwrap(), Some(3));

    let groups = admin.list_groups().await.unwrap();
    assert!(groups.iter().any(|g| g.group_id == "auditors"), "{groups:?}");
    let described = admin.describe_groups(&["auditors".into()]).await.unwrap();
    let group = described[0].result.as_ref().unwrap();
    assert_eq!((group.state.as_str(), group.members.len()), ("Empty", 0));

    let deleted = admin.delete_groups(&["auditors".into(), "nobody".into()]).await.unwrap();
    assert!(deleted[0].result.is_ok(), "{:?}", deleted[0].result);
    assert_eq!(
        deleted[1].result.as_ref().unwrap_err().kafka_code().unwrap().code(),
        69,
        "GROUP_ID_NOT_FOUND"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_bootstrap_fails_fast_with_every_address() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let bootstrap = format!("127.0.0.1:{port},127.0.0.1:{}", port.wrapping_add(1).max(1024));
    let error = Admin::connect(ClientConfig::new(&bootstrap)).await.err().expect("nothing listens");
    let text = error.to_string();
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(!text.contains('\n'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_batch_moves_the_epoch_so_later_batches_still_go_in() {
    let broker = start_broker().await;
    let admin = Admin::connect(ClientConfig::new(&broker.bootstrap)).await.unwrap();
    let compacted = NewTopic::new("keyed-only", 1, 1).with_config("cleanup.policy", "compact");
    admin.create_topics(&[compacted], false).await.unwrap()[0].result.as_ref().unwrap();
    let producer = Producer::connect(producer_config(
        &broker.bootstrap,
        &["delivery.timeout.ms=15000", "linger.ms=0", "batch.size=1"],
    ))
    .await
    .unwrap();
    let before = producer.identity().expect("idempotent by default");

    // The partition learns the producer, then refuses a record without a
    // key (the topic is compacted): it still expects that sequence number.
    let first = producer.send(ProducerRecord::new("keyed-only", b"v").with_key(b"first")).await.unwrap();
    assert_eq!(first.wait().await.unwrap().offset, 0);
    let keyless = producer.send(ProducerRecord::new("keyed-only", b"no key")).await.unwrap();
    let refused = keyless.wait().await.unwrap_err();
    assert_eq!(refused.kafka_code().unwrap().to_string(), "INVALID_RECORD");

    let mut deliveries = Vec::new();
    for i in 0..20 {
        let key = format!("k{i}");
        deliveries.push(
            producer.send(ProducerRecord::new("keyed-only", b"v").with_key(key.as_bytes())).await.unwrap(),
        );
    }
    for (i, delivery) in deliveries.into_iter().enumerate() {
        let offset =
            delivery.wait().await.unwrap_or_else(|e| panic!("record {i} after the refusal: {e}")).offset;
        assert_eq!(offset, 1 + i as i64);
    }
    let after = producer.identity().unwrap();
    assert_eq!((after.producer_id, after.producer_epoch), (before.producer_id, before.producer_epoch + 1));

    // Again with the later batches already in flight behind the refused
    // one: they come back out of order and are renumbered under the bump.
    let keyless = producer.send(ProducerRecord::new("keyed-only", b"no key")).await.unwrap();
    let mut deliveries = Vec::new();
    for i in 0..50 {
        let key = format!("again{i}");
        deliveries.push(
            producer.send(ProducerRecord::new("keyed-only", b"v").with_key(key.as_bytes())).await.unwrap(),
        );
        tokio::task::yield_now().await;
    }
    assert!(keyless.wait().await.is_err());
    let mut offsets = Vec::new();
    for delivery in deliveries {
        offsets.push(delivery.wait().await.expect("every keyed record goes in").offset);
    }
    assert_eq!(offsets, (21..71).collect::<Vec<i64>>(), "in order, each once");
    assert_eq!(producer.identity().unwrap().producer_epoch, before.producer_epoch + 2);
    producer.close().await;
}
