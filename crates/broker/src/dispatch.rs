//! From a request frame to a response frame.
//!
//! The header is checked against the ApiVersions table before anything is
//! decoded; an unknown API or version closes the connection, except for
//! ApiVersions, which is answered in v0 with UNSUPPORTED_VERSION so the client
//! can retry with a version we speak. The body is decoded with the
//! `kafka-protocol` types and routed to one handler per API, both generated
//! from the table in [`crate::apis`].

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::ApiVersionsResponse;
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::apis::{self, Request};
use crate::config::BrokerConfig;
use crate::controller_channel::ControllerChannel;
use crate::coordinator_host::CoordinatorHost;
use crate::error::RequestError;
use crate::fetch_session::FetchSessionCache;
use crate::group::GroupCoordinator;
use crate::handlers::api_versions;
use crate::internal_topic::Services;
use crate::metrics::{GaugeGuard, Metrics};
use crate::producer_ids::ProducerIdManager;
use crate::quota::throttled::Throttled;
use crate::quota::QuotaManager;
use crate::replica::ReplicaManager;
use crate::replication::Replication;
use crate::response_errors::{Outcome, ResponseErrors};
use crate::security::ListenerSecurity;
use crate::server::Broker;
use crate::txn::TransactionCoordinator;
use strom_quorum::Quorum;
use strom_storage::records::{uvarint_len, write_uvarint};
use strom_storage::segment::FileSlice;
use tokio::sync::watch;
use uuid::Uuid;

/// What a handler knows about the request it serves. Handlers reach the
/// broker's services through its accessors, each naming the one it uses.
pub struct RequestContext<'a> {
    broker: &'a Broker,
    pub api_key: ApiKey,
    pub api_version: i16,
    pub header: RequestHeader,
    /// The client's address as Kafka reports it, `/127.0.0.1`.
    pub client_host: String,
    /// The name of the listener the connection arrived on: answers
    /// advertise that listener's endpoint.
    pub listener: std::sync::Arc<str>,
    /// Who the client authenticated as (`User:ANONYMOUS` if it did not).
    pub principal: std::sync::Arc<str>,
    /// How long the channel is muted after the response (client quotas).
    pub throttle: crate::quota::Throttle,
}

impl<'a> RequestContext<'a> {
    /// The context of an `api_key` request (of the version `header` names)
    /// from `principal` at `client_host`, arrived on `listener`.
    pub fn new(
        broker: &'a Broker,
        api_key: ApiKey,
        header: RequestHeader,
        client_host: String,
        listener: std::sync::Arc<str>,
        principal: std::sync::Arc<str>,
    ) -> Self {
        let api_version = header.request_api_version;
        let throttle = crate::quota::Throttle::default();
        Self { broker, api_key, api_version, header, client_host, listener, principal, throttle }
    }

    /// The context of a request this one carries (an Envelope's): on the
    /// same broker and listener, from the client it names.
    pub fn inner(
        &self,
        api_key: ApiKey,
        header: RequestHeader,
        client_host: String,
        principal: std::sync::Arc<str>,
    ) -> RequestContext<'a> {
        Self::new(self.broker, api_key, header, client_host, self.listener.clone(), principal)
    }

    /// The cluster metadata and the controller, as this node reaches them.
    pub fn controller(&self) -> &ControllerChannel {
        self.broker.controller()
    }

    /// The partitions this node hosts.
    pub fn replicas(&self) -> &ReplicaManager {
        self.broker.replicas()
    }

    /// The broker's static config.
    pub fn config(&self) -> &BrokerConfig {
        self.broker.config()
    }

    /// The broker's metrics.
    pub fn metrics(&self) -> &Metrics {
        self.broker.metrics()
    }

    /// Each listener's TLS and SASL settings, in `listeners` order.
    pub fn listener_security(&self) -> &[std::sync::Arc<ListenerSecurity>] {
        self.broker.listener_security()
    }

    /// The consumer groups this node coordinates.
    pub fn groups(&self) -> &GroupCoordinator {
        self.broker.groups()
    }

    /// The transactions this node coordinates.
    pub fn transactions(&self) -> &TransactionCoordinator {
        self.broker.transactions()
    }

    /// The broker as the coordinators' methods take it.
    pub fn coordinator_host(&self) -> &'a dyn CoordinatorHost {
        self.broker
    }

    /// Incremental fetch sessions (KIP-227).
    pub fn fetch_sessions(&self) -> &FetchSessionCache {
        self.broker.fetch_sessions()
    }

    /// Client and replication quota sensors.
    pub fn quotas(&self) -> &QuotaManager {
        self.broker.quotas()
    }

    /// Wakes the replication task (fetchers, ISR changes).
    pub fn replication(&self) -> &Replication {
        self.broker.replication()
    }

    /// The block of producer ids this node hands out.
    pub fn producer_ids(&self) -> &ProducerIdManager {
        self.broker.producer_ids()
    }

    /// The metadata quorum of a KRaft node.
    pub fn quorum(&self) -> Option<&Quorum> {
        self.broker.quorum()
    }

    /// A receiver that sees `true` once shutdown begins.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.broker.stopping()
    }

    /// Whether this request's principal may do `op` (an
    /// [`strom_metadata::acl::operation`] id) on the resource; always true
    /// without an authorizer.
    pub fn authorize(&self, op: i8, resource_type: i8, name: &str) -> bool {
        let authorizer = &self.config().authorizer;
        if !authorizer.enabled {
            return true;
        }
        let image = self.controller().image();
        authorizer.authorize(&image, &self.principal, self.client_address(), op, resource_type, name)
    }

    /// Whether this principal may do `op` on some resource of the type.
    pub fn authorize_any(&self, op: i8, resource_type: i8) -> bool {
        let authorizer = &self.config().authorizer;
        if !authorizer.enabled {
            return true;
        }
        let image = self.controller().image();
        authorizer.authorize_any(&image, &self.principal, self.client_address(), op, resource_type)
    }

    /// [`Self::authorize`] on the cluster resource.
    pub fn authorize_cluster(&self, op: i8) -> bool {
        use strom_metadata::acl::{resource, CLUSTER_NAME};
        self.authorize(op, resource::CLUSTER, CLUSTER_NAME)
    }

    /// KIP-430's authorized operations of the resource for this principal.
    pub fn authorized_operations(&self, resource_type: i8, name: &str) -> i32 {
        let image = self.controller().image();
        let authorizer = &self.config().authorizer;
        authorizer.authorized_operations(&image, &self.principal, self.client_address(), resource_type, name)
    }

    /// Whether the request came in on a controller listener.
    pub fn on_controller_listener(&self) -> bool {
        let names = &self.config().kraft.controller_listener_names;
        names.iter().any(|name| name.eq_ignore_ascii_case(&self.listener))
    }

    /// The client's IP address as ACL hosts name it (no leading `/`).
    pub fn client_address(&self) -> &str {
        self.client_host.trim_start_matches('/')
    }
}

impl<'a> From<&RequestContext<'a>> for Services<'a> {
    fn from(ctx: &RequestContext<'a>) -> Self {
        ctx.broker.into()
    }
}

/// A handler's result: a response, sent or withheld (a Produce with acks=0).
pub trait Reply {
    fn into_reply(self) -> Answer;
}

/// A handler's response, and whether it goes on the wire. A withheld
/// response still reports its outcome.
pub struct Answer {
    pub body: Box<dyn EncodeBody>,
    pub send: bool,
    /// Close the connection after the request instead of answering: how
    /// Kafka tells an acks=0 producer that its request failed.
    pub close: bool,
}

/// A response body, encodable at the request's version.
pub trait EncodeBody: Send + ResponseErrors {
    fn encode_body(&self, buf: &mut BytesMut, version: i16) -> Result<(), String>;
    fn body_size(&self, version: i16) -> usize;
    /// Byte fields encoded as markers, to be replaced by file ranges.
    fn splices(&self) -> &[Splice] {
        &[]
    }
    /// Raises `throttle_time_ms`, where the response has it (client quotas).
    fn raise_throttle_time_ms(&mut self, _ms: i32) {}
}

/// A bytes field of a response that stays in a segment file: the response is
/// encoded with a unique 16-byte marker in its place, and the marker (with its
/// length prefix) is cut out and replaced by the file range when written, so
/// fetched records never pass through user space.
pub struct Splice {
    pub marker: Bytes,
    pub slice: FileSlice,
}

impl Splice {
    pub fn new(slice: FileSlice) -> Self {
        Self { marker: Bytes::copy_from_slice(Uuid::new_v4().as_bytes()), slice }
    }
}

/// A piece of an encoded response.
#[derive(Debug)]
pub enum Chunk {
    Bytes(Bytes),
    File(FileSlice),
}

impl Chunk {
    pub fn len(&self) -> usize {
        match self {
            Chunk::Bytes(b) => b.len(),
            Chunk::File(f) => f.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Encodable + ResponseErrors + Throttled + Send + 'static> EncodeBody for T {
    fn encode_body(&self, buf: &mut BytesMut, version: i16) -> Result<(), String> {
        self.encode(buf, version).map_err(|e| e.to_string())
    }

    fn raise_throttle_time_ms(&mut self, ms: i32) {
        Throttled::raise_throttle_time_ms(self, ms);
    }

    fn body_size(&self, version: i16) -> usize {
        self.compute_size(version).unwrap_or(0)
    }
}

impl<T: Encodable + ResponseErrors + Throttled + Send + 'static> Reply for T {
    fn into_reply(self) -> Answer {
        Answer { body: Box::new(self), send: true, close: false }
    }
}

/// A reply that may be withheld.
pub struct MaybeReply<T> {
    pub response: T,
    pub send: bool,
    /// See [`Answer::close`].
    pub close: bool,
}

impl<T: Encodable + ResponseErrors + Throttled + Send + 'static> Reply for MaybeReply<T> {
    fn into_reply(self) -> Answer {
        Answer { body: Box::new(self.response), send: self.send, close: self.close }
    }
}

fn i16_at(frame: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([frame[at], frame[at + 1]])
}

/// What a frame holds once parsed.
#[derive(Debug)]
pub enum Parsed {
    Request {
        api_key: ApiKey,
        api_version: i16,
        header: RequestHeader,
        request: Box<Request>,
    },
    /// An ApiVersions request of a version we do not speak.
    UnsupportedApiVersions {
        correlation_id: i32,
    },
}

/// Parses a request frame (without its size prefix). Pure: no broker state,
/// so it can be fuzzed on its own.
pub fn parse_frame(frame: Bytes) -> Result<Parsed, RequestError> {
    if frame.len() < 8 {
        return Err(RequestError::ShortFrame(frame.len()));
    }
    let (raw_key, version) = (i16_at(&frame, 0), i16_at(&frame, 2));
    let correlation_id = i32::from_be_bytes(frame[4..8].try_into().expect("4 bytes"));
    let api_key = ApiKey::try_from(raw_key).map_err(|_| RequestError::UnknownApi(raw_key))?;
    let range = apis::served_versions(api_key).ok_or(RequestError::UnknownApi(raw_key))?;
    if version < range.min || version > range.max {
        if api_key == ApiKey::ApiVersions {
            return Ok(Parsed::UnsupportedApiVersions { correlation_id });
        }
        return Err(RequestError::UnsupportedVersion { api_key: raw_key, version });
    }
    let mut body = frame;
    let header = RequestHeader::decode(&mut body, api_key.request_header_version(version))
        .map_err(|e| RequestError::Malformed(format!("request header: {e}")))?;
    let request = apis::decode_body(api_key, version, &mut body)?;
    Ok(Parsed::Request { api_key, api_version: version, header, request: Box::new(request) })
}

/// Serves one request frame; `Ok(None)` means no response is sent.
pub async fn handle_frame(
    broker: &Broker,
    peer: std::net::SocketAddr,
    listener: &std::sync::Arc<str>,
    session: &crate::security::Session,
    frame: Bytes,
) -> Result<Option<Vec<Chunk>>, RequestError> {
    let started = std::time::Instant::now();
    let (api_key, header, request) = match parse_frame(frame)? {
        Parsed::Request { api_key, header, request, .. } => (api_key, header, request),
        Parsed::UnsupportedApiVersions { correlation_id } => {
            return Ok(Some(vec![Chunk::Bytes(unsupported_api_versions(correlation_id))]));
        }
    };
    let _in_flight = GaugeGuard::new(&broker.metrics().requests_in_flight);
    let client_host = format!("/{}", peer.ip());
    let listener = listener.clone();
    let principal = session.principal.clone();
    let ctx = RequestContext::new(broker, api_key, header, client_host, listener, principal);
    let mut answer = apis::route(&ctx, *request).await;
    crate::quota::record_request_time(&ctx, started.elapsed());
    let throttle_ms = ctx.throttle.get();
    if throttle_ms > 0 {
        answer.body.raise_throttle_time_ms(throttle_ms.min(i32::MAX as u64) as i32);
        session.mute.mute_for(throttle_ms);
    }
    let encoding = std::time::Instant::now();
    let encoded = answer.send.then(|| encode_response(&ctx, answer.body.as_ref())).transpose();
    crate::quota::record_encoding_time(&ctx, encoding.elapsed());
    let elapsed = started.elapsed();
    broker.metrics().record_request(api_key as i16, elapsed);
    let outcome = Outcome::of(answer.body.as_ref(), tracing::enabled!(tracing::Level::DEBUG));
    broker.metrics().record_errors(api_key as i16, &outcome.counts);
    if let Some(detail) = &outcome.detail {
        log_request(&ctx, peer, elapsed, detail);
    }
    if answer.close {
        return Err(RequestError::FailedUnanswered(format!("{:?}", outcome.counts)));
    }
    encoded
}

/// The debug line of one request: enough to tell from the log alone who
/// asked what and how it ended.
fn log_request(
    ctx: &RequestContext<'_>,
    peer: std::net::SocketAddr,
    elapsed: std::time::Duration,
    outcome: &str,
) {
    tracing::debug!(
        api = ?ctx.api_key,
        version = ctx.api_version,
        correlation_id = ctx.header.correlation_id,
        client_id = ctx.header.client_id.as_deref().unwrap_or(""),
        client = %peer,
        listener = %ctx.listener,
        principal = %ctx.principal,
        elapsed_us = elapsed.as_micros() as u64,
        outcome,
        "request"
    );
}

/// Response header and body, as an EnvelopeResponse carries them.
pub fn encode_response_payload(
    ctx: &RequestContext<'_>,
    response: &dyn EncodeBody,
) -> Result<Bytes, RequestError> {
    if !response.splices().is_empty() {
        return Err(RequestError::Encode("a spliced response cannot be enveloped".into()));
    }
    let mut payload = BytesMut::new();
    for chunk in encode_response(ctx, response)? {
        if let Chunk::Bytes(bytes) = chunk {
            payload.extend_from_slice(&bytes);
        }
    }
    Ok(payload.freeze().split_off(4))
}

/// Size prefix, response header, body.
fn encode_response(ctx: &RequestContext<'_>, response: &dyn EncodeBody) -> Result<Vec<Chunk>, RequestError> {
    let header = ResponseHeader::default().with_correlation_id(ctx.header.correlation_id);
    let header_version = ctx.api_key.response_header_version(ctx.api_version);
    let mut buf = BytesMut::with_capacity(64 + response.body_size(ctx.api_version));
    buf.put_i32(0);
    header.encode(&mut buf, header_version).map_err(|e| RequestError::Encode(e.to_string()))?;
    response.encode_body(&mut buf, ctx.api_version).map_err(RequestError::Encode)?;
    let spliced: usize = response.splices().iter().map(|s| s.slice.len).sum();
    let markers: usize = response.splices().iter().map(|s| s.marker.len()).sum();
    let flexible = header_version >= 1;
    // The size counts the file bytes and the real length prefixes in place
    // of the markers and theirs.
    let prefixes: isize = response
        .splices()
        .iter()
        .map(|s| prefix_len(s.slice.len, flexible) as isize - prefix_len(s.marker.len(), flexible) as isize)
        .sum();
    let size = (buf.len() - 4 + spliced - markers) as isize + prefixes;
    buf[..4].copy_from_slice(&(size as i32).to_be_bytes());
    splice_chunks(buf.freeze(), response.splices(), flexible)
}

/// Bytes taken by the length prefix of a `len`-byte field: an int32, or in
/// flexible versions an unsigned varint of `len + 1`.
fn prefix_len(len: usize, flexible: bool) -> usize {
    if !flexible {
        return 4;
    }
    uvarint_len(len as u64 + 1)
}

/// Cuts each marker and its length prefix out of `buf`, putting the real
/// length prefix and the file range in their place.
fn splice_chunks(buf: Bytes, splices: &[Splice], flexible: bool) -> Result<Vec<Chunk>, RequestError> {
    let mut chunks = Vec::with_capacity(1 + 2 * splices.len());
    let mut start = 0;
    for splice in splices {
        let marker = splice.marker.as_ref();
        let found = buf[start..]
            .windows(marker.len())
            .position(|w| w == marker)
            .ok_or_else(|| RequestError::Encode("splice marker not found".into()))?;
        let at = start + found;
        let mut piece = BytesMut::from(&buf[start..at - prefix_len(marker.len(), flexible)]);
        if flexible {
            write_uvarint(splice.slice.len as u64 + 1, &mut piece);
        } else {
            piece.put_i32(splice.slice.len as i32);
        }
        chunks.push(Chunk::Bytes(piece.freeze()));
        chunks.push(Chunk::File(splice.slice.clone()));
        start = at + marker.len();
    }
    chunks.push(Chunk::Bytes(buf.slice(start..)));
    Ok(chunks)
}

/// Kafka's answer to an ApiVersions request of a version it does not know:
/// a v0 response carrying the error and the versions it does support.
fn unsupported_api_versions(correlation_id: i32) -> Bytes {
    let response = ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(api_versions::api_keys());
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    buf.put_i32(correlation_id);
    response.encode(&mut buf, 0).expect("v0 ApiVersions encodes");
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    buf.freeze()
}
