//! Quota precedence, sensors shared as Kafka shares them, and connection limits.

use std::net::IpAddr;
use std::sync::Arc;

use strom_metadata::image::client_quota_record;
use strom_metadata::MetadataImage;

use super::connections::{parse_overrides, ConnectionLimitConfig, ConnectionLimits, Refusal};
use super::*;

fn entity(pairs: &[(&str, Option<&str>)]) -> QuotaEntity {
    pairs.iter().map(|(t, n)| (t.to_string(), n.map(str::to_owned))).collect()
}

/// An entity as (type, name) pairs, `None` for the default.
type Pairs<'a> = &'a [(&'a str, Option<&'a str>)];

fn image_with(quotas: &[(Pairs<'_>, &str, f64)]) -> MetadataImage {
    let mut image = MetadataImage::empty();
    for (pairs, key, value) in quotas {
        image.apply(client_quota_record(&entity(pairs), key, Some(*value)).into());
    }
    image
}

#[test]
fn the_eight_entity_combinations_apply_in_kafkas_order() {
    let levels: [Pairs<'_>; 8] = [
        &[("user", Some("alice")), ("client-id", Some("app"))],
        &[("user", Some("alice")), ("client-id", None)],
        &[("user", Some("alice"))],
        &[("user", None), ("client-id", Some("app"))],
        &[("user", None), ("client-id", None)],
        &[("user", None)],
        &[("client-id", Some("app"))],
        &[("client-id", None)],
    ];
    // With levels i.. set, the most specific one, level i, applies.
    for first in 0..levels.len() {
        let quotas: Vec<_> =
            (first..levels.len()).map(|i| (levels[i], "producer_byte_rate", i as f64 + 1.0)).collect();
        let image = image_with(&quotas);
        let (value, applied) = applicable_quota(&image, QuotaType::Produce, "alice", "app").unwrap();
        assert_eq!(value, first as f64 + 1.0, "level {first}");
        assert_eq!(applied, entity(levels[first]));
    }
}

#[test]
fn quotas_apply_per_key_and_only_to_matching_entities() {
    let image = image_with(&[
        (&[("user", Some("alice"))], "consumer_byte_rate", 10.0),
        (&[("client-id", Some("app"))], "producer_byte_rate", 20.0),
    ]);
    assert_eq!(applicable_quota(&image, QuotaType::Produce, "alice", "app").unwrap().0, 20.0);
    assert_eq!(applicable_quota(&image, QuotaType::Fetch, "alice", "app").unwrap().0, 10.0);
    assert!(applicable_quota(&image, QuotaType::Produce, "bob", "other").is_none());
    assert!(applicable_quota(&MetadataImage::empty(), QuotaType::Produce, "a", "b").is_none());
}

#[test]
fn a_user_quota_is_shared_by_its_clients_and_a_default_client_quota_is_not() {
    let window = QuotaWindow { samples: 2, window_ms: 1000 };
    let user = image_with(&[(&[("user", Some("alice"))], "producer_byte_rate", 1000.0)]);
    let quotas = QuotaManager::new(window);
    assert_eq!(quotas.record(&user, QuotaType::Produce, "alice", "one", 900.0), 0);
    assert!(quotas.record(&user, QuotaType::Produce, "alice", "two", 900.0) > 0, "one sensor for alice");

    let clients = image_with(&[(&[("client-id", None)], "producer_byte_rate", 1000.0)]);
    let quotas = QuotaManager::new(window);
    assert_eq!(quotas.record(&clients, QuotaType::Produce, "alice", "one", 900.0), 0);
    assert_eq!(
        quotas.record(&clients, QuotaType::Produce, "alice", "two", 900.0),
        0,
        "one sensor per client id"
    );
    assert!(quotas.record(&clients, QuotaType::Produce, "alice", "two", 900.0) > 0);
    assert!(quotas.check(&clients, QuotaType::Produce, "alice", "two") > 0);
    assert_eq!(quotas.check(&clients, QuotaType::Produce, "alice", "three"), 0);
}

#[test]
fn a_mute_lasts_its_time_and_a_longer_one_wins() {
    let mute = ChannelMute::default();
    assert!(mute.remaining().is_none());
    mute.mute_for(10_000);
    mute.mute_for(1);
    assert!(mute.remaining().unwrap() > Duration::from_secs(5));
}

#[test]
fn connections_per_ip_are_limited_and_given_back() {
    let ip: IpAddr = "127.0.0.2".parse().unwrap();
    let other: IpAddr = "127.0.0.3".parse().unwrap();
    let config = ConnectionLimitConfig { per_ip: 2, overrides: parse_overrides("127.0.0.3:1").unwrap() };
    let limits = Arc::new(ConnectionLimits::new(config, QuotaWindow::default()));
    let image = MetadataImage::empty();
    let first = limits.admit(&image, ip).unwrap();
    let _second = limits.admit(&image, ip).unwrap();
    assert_eq!(limits.admit(&image, ip).err(), Some(Refusal::TooManyConnections { limit: 2 }));
    drop(first);
    assert!(limits.admit(&image, ip).is_ok());
    let _only = limits.admit(&image, other).unwrap();
    assert_eq!(limits.admit(&image, other).err(), Some(Refusal::TooManyConnections { limit: 1 }));
}

#[test]
fn connection_creation_rate_throttles_new_connections() {
    let ip: IpAddr = "127.0.0.4".parse().unwrap();
    let image = image_with(&[(&[("ip", None)], "connection_creation_rate", 1.0)]);
    let limits = Arc::new(ConnectionLimits::new(ConnectionLimitConfig::default(), QuotaWindow::default()));
    let admitted = (0..30).filter_map(|_| limits.admit(&image, ip).ok()).count();
    // One per second over the ten seconds the rate is measured across.
    assert_eq!(admitted, 10);
    assert!(matches!(limits.admit(&image, ip).err(), Some(Refusal::Throttled { .. })));
}

#[test]
fn overrides_parse_as_kafka_writes_them() {
    let parsed = parse_overrides("127.0.0.1:5, [::1]:7").unwrap();
    assert_eq!(parsed[&"127.0.0.1".parse::<IpAddr>().unwrap()], 5);
    assert_eq!(parsed[&"::1".parse::<IpAddr>().unwrap()], 7);
    assert!(parse_overrides("127.0.0.1").is_err());
    assert!(parse_overrides("host:x").is_err());
}
