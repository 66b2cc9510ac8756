//! Fuzzes request frame decoding: `parse_frame` must turn any byte string into
//! a `Parsed` or a `RequestError`, never a panic or an abort, and what it
//! returns must agree with the fixed-width header at the front of the frame.
//!
//! Run with `scripts/fuzz`; seeds in `fuzz/corpus/parse_frame` come from
//! `fuzz/examples/seeds.rs`.

#![no_main]

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use libfuzzer_sys::fuzz_target;
use strom_broker::dispatch::{parse_frame, Parsed};
use strom_broker::error::RequestError;
use strom_broker::handlers::api_versions;

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
            let range = api_versions::supported(api_key).expect("parsed an API we do not serve");
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
            let served = api_versions::supported(ApiKey::ApiVersions).expect("ApiVersions is served");
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
