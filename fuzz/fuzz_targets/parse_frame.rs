//! Fuzzes request frame decoding: `parse_frame` must turn any byte string into
//! a `Parsed` or a `RequestError`, never a panic or an abort, and what it
//! returns must agree with the fixed-width header at the front of the frame.
//! Each decoded body then goes through the decoders its handler applies to
//! what `kafka-protocol` leaves opaque or unchecked: produced record batches
//! (headers, record walks and decompression for the key and timestamp
//! rules, txn markers), JoinGroup members' subscriptions, topic names,
//! config values and SASL mechanism messages (PLAIN, SCRAM, OAUTHBEARER).
//!
//! Run with `scripts/fuzz`; seeds in `fuzz/corpus/parse_frame` come from
//! `fuzz/examples/seeds.rs`.

#![no_main]

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use libfuzzer_sys::fuzz_target;
use strom_broker::apis::{served_versions, Request};
use strom_broker::dispatch::{parse_frame, Parsed};
use strom_broker::error::RequestError;
use strom_storage::batch;
use strom_storage::records::{check_records, records_body, RecordRules, TimestampWindow};

/// The broker's own allocator: without it a frame that declares 2^31-1 array
/// elements makes `Vec::with_capacity` fail and the process abort, which the
/// fuzzer would report as a crash the real binary does not have.
#[global_allocator]
static ALLOCATOR: strom_broker::alloc::LazyLargeAlloc = strom_broker::alloc::LazyLargeAlloc;

/// Kafka's key for ApiVersions, written out so the check does not lean on
/// the code under test.
const API_VERSIONS_KEY: i16 = 18;

/// API key, version and correlation id: the header fields every version has.
struct FixedHeader {
    api_key: i16,
    api_version: i16,
    correlation_id: i32,
}

fn fixed_header(data: &[u8]) -> Option<FixedHeader> {
    let field = |at: usize, len: usize| data.get(at..at + len);
    Some(FixedHeader {
        api_key: i16::from_be_bytes(field(0, 2)?.try_into().ok()?),
        api_version: i16::from_be_bytes(field(2, 2)?.try_into().ok()?),
        correlation_id: i32::from_be_bytes(field(4, 4)?.try_into().ok()?),
    })
}

fuzz_target!(|data: &[u8]| {
    let result = parse_frame(Bytes::copy_from_slice(data));
    let Some(fixed) = fixed_header(data) else {
        assert!(matches!(result, Err(RequestError::ShortFrame(n)) if n == data.len()), "{result:?}");
        return;
    };
    match result {
        Ok(Parsed::Request { api_key, api_version, header, request }) => {
            run_handler_decoders(&request);
            let range = served_versions(api_key).expect("parsed an API we do not serve");
            assert!(range.min <= api_version && api_version <= range.max);
            assert_eq!(api_key as i16, fixed.api_key);
            // The body went to the decoder of the header's API: variants are
            // named after Kafka's API keys.
            let decoded = format!("{request:?}");
            assert!(decoded.starts_with(&format!("{api_key:?}(")), "{api_key:?} decoded as {decoded}");
            assert_eq!(api_version, fixed.api_version);
            assert_eq!(header.request_api_key, fixed.api_key);
            assert_eq!(header.request_api_version, fixed.api_version);
            assert_eq!(header.correlation_id, fixed.correlation_id);
        }
        Ok(Parsed::UnsupportedApiVersions { correlation_id }) => {
            assert_eq!(fixed.api_key, API_VERSIONS_KEY);
            let served = served_versions(ApiKey::ApiVersions).expect("ApiVersions is served");
            assert!(fixed.api_version < served.min || fixed.api_version > served.max);
            assert_eq!(correlation_id, fixed.correlation_id);
        }
        Err(RequestError::ShortFrame(n)) => panic!("{n}-byte short frame reported for {} bytes", data.len()),
        Err(RequestError::UnknownApi(key)) => assert_eq!(key, fixed.api_key),
        Err(RequestError::UnsupportedVersion { api_key, version }) => {
            assert_eq!((api_key, version), (fixed.api_key, fixed.api_version));
        }
        Err(e @ RequestError::Encode(_)) => panic!("decoding reported an encoding error: {e}"),
        // The reason is logged when the connection is closed: it must format.
        Err(e) => drop(e.to_string()),
    }
});

/// The decoders the handlers run on a decoded request's contents.
fn run_handler_decoders(request: &Request) {
    match request {
        Request::Produce(produce) => {
            let partitions = produce.topic_data.iter().flat_map(|t| &t.partition_data);
            for records in partitions.filter_map(|p| p.records.as_ref()) {
                check_produced_records(records);
            }
        }
        Request::JoinGroup(join) => {
            for protocol in &join.protocols {
                drop(strom_broker::group::subscription_topics(&protocol.metadata));
            }
        }
        Request::CreateTopics(create) => {
            for topic in &create.topics {
                drop(strom_metadata::controller::validate_topic_name(&topic.name));
                for config in &topic.configs {
                    check_config(&config.name, config.value.as_deref());
                }
            }
        }
        Request::AlterConfigs(alter) => {
            for config in alter.resources.iter().flat_map(|r| &r.configs) {
                check_config(&config.name, config.value.as_deref());
            }
        }
        Request::IncrementalAlterConfigs(alter) => {
            for config in alter.resources.iter().flat_map(|r| &r.configs) {
                check_config(&config.name, config.value.as_deref());
            }
        }
        Request::SaslAuthenticate(authenticate) => check_sasl_message(&authenticate.auth_bytes),
        _ => {}
    }
}

/// Each mechanism's server on a client message, as the first message of
/// an exchange and (OAUTHBEARER, SCRAM's final-message parser) the second.
fn check_sasl_message(message: &[u8]) {
    use std::sync::Arc;
    use strom_broker::security::sasl::scram::{self, InMemoryScramCredentials, ScramMechanism, ScramServer};
    use strom_broker::security::sasl::{oauth, plain::PlainServer, MechanismServer};

    drop(PlainServer::new(Arc::default()).step(message));
    let options = oauth::UnsecuredOptions::from_jaas(&Default::default()).expect("default options");
    let mut oauth = oauth::OAuthServer::new(Arc::new(oauth::Validator::Unsecured(options)));
    drop(oauth.step(message));
    drop(oauth.step(message));
    for mechanism in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
        let credentials = Arc::new(InMemoryScramCredentials::default());
        drop(ScramServer::new(mechanism, credentials).step(message));
    }
    if let Ok(text) = std::str::from_utf8(message) {
        drop(scram::parse_client_final(text));
    }
}

fn check_config(name: &str, value: Option<&str>) {
    let value = value.unwrap_or_default();
    drop(strom_metadata::topic_config::validate_topic_config(name, value));
    drop(strom_metadata::topic_config::validate_dynamic_broker_config(name, value));
}

/// What a log checks of a produced record set before appending it. Each
/// batch's CRC is set right first: a mutation would otherwise stop at the
/// CRC check and never reach the record decoders behind it.
fn check_produced_records(records: &[u8]) {
    let mut records = records.to_vec();
    fix_crcs(&mut records);
    for raw in batch::Batches::new(&records) {
        let Ok(raw) = raw else { return };
        let Ok(header) = batch::BatchHeader::parse(raw) else { return };
        assert_eq!(batch::compute_crc(raw), header.crc);
        if header.compression() == 0 {
            drop(batch::count_uncompressed_records(raw));
        }
        if let Ok(body) = records_body(raw, &header) {
            drop(check_records(&body, &header, strictest_rules(&header)));
        }
        if header.is_control() {
            let _ = batch::end_txn_marker(raw);
        }
    }
}

/// The strictest rules a log applies: every record is walked and needs a
/// key and the batch's base timestamp, so most are refused and described.
fn strictest_rules(header: &batch::BatchHeader) -> RecordRules {
    let window = TimestampWindow { now_ms: header.base_timestamp, before_max_ms: 0, after_max_ms: 0 };
    RecordRules { keys_required: true, timestamps: Some(window) }
}

fn fix_crcs(records: &mut [u8]) {
    let mut at = 0;
    while let Some(Ok(size)) = batch::batch_size(&records[at..]) {
        let Some(raw) = records.get_mut(at..at + size) else { return };
        let crc = batch::compute_crc(raw);
        raw[batch::CRC..batch::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        at += size;
    }
}
