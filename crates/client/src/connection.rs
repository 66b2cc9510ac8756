//! One TCP connection to one broker, with pipelined requests.
//!
//! A caller encodes its request, registers a waiter under a fresh
//! correlation id and hands the frame to the connection's writer task; the
//! reader task matches each response frame to its waiter by correlation id.
//! Many requests can be in flight at once and callers never block each
//! other. Decoding happens in the caller, so the reader only moves bytes.
//!
//! ```text
//!  caller ──frame──▶ [mpsc] ──▶ writer task ──▶ socket
//!  caller ◀─frame── [oneshot] ◀── reader task ◀── socket
//! ```
//!
//! When either task fails the connection is marked closed and every waiter
//! gets `Error::Disconnected`; the cluster layer then opens a new one.
//!
//! Large byte fields (a Produce request's record batches) can be
//! [spliced](Splice): the request is encoded with a small marker in their
//! place and the frame goes out as pieces, so the batch bytes are written
//! to the socket from the producer's own buffer instead of being copied.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersionsResponse;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes, VersionRange};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, Result};
use crate::versions::{self, NegotiatedVersions, API_VERSIONS_FIRST_TRY};

const IO_BUFFER_BYTES: usize = 64 * 1024;
/// Frames waiting for the writer task; a full queue makes callers wait.
const WRITE_QUEUE_FRAMES: usize = 64;
const UNSUPPORTED_VERSION: i16 = 35;

/// How to open and use a connection; see `ClientConfig` for the Kafka names.
#[derive(Debug, Clone)]
pub struct ConnectionOptions {
    pub client_id: String,
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// Responses larger than this close the connection instead of being read.
    pub max_response_bytes: usize,
}

impl Default for ConnectionOptions {
    fn default() -> Self {
        Self {
            client_id: "strom-client".into(),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            max_response_bytes: 512 * 1024 * 1024,
        }
    }
}

/// A frame as the writer task sends it: pieces written back to back.
type Frame = Vec<Bytes>;

/// A bytes field sent from its own buffer: the request carries `marker`
/// in its place, and the frame is cut around it.
#[derive(Debug, Clone)]
pub struct Splice {
    pub marker: Bytes,
    pub payload: Bytes,
}

impl Splice {
    /// A splice with a fresh random 16-byte marker.
    pub fn new(payload: Bytes) -> Self {
        Self { marker: Bytes::copy_from_slice(uuid::Uuid::new_v4().as_bytes()), payload }
    }
}

/// Callers waiting for responses, by correlation id.
#[derive(Default)]
struct Waiters {
    closed: bool,
    by_correlation_id: HashMap<i32, oneshot::Sender<Bytes>>,
}

/// State shared by the handle and the two I/O tasks.
struct Shared {
    addr: String,
    waiters: Mutex<Waiters>,
}

impl Shared {
    fn register(&self, correlation_id: i32) -> Result<oneshot::Receiver<Bytes>> {
        let (tx, rx) = oneshot::channel();
        let mut waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        if waiters.closed {
            return Err(Error::Disconnected { addr: self.addr.clone() });
        }
        waiters.by_correlation_id.insert(correlation_id, tx);
        Ok(rx)
    }

    fn take(&self, correlation_id: i32) -> Option<oneshot::Sender<Bytes>> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner()).by_correlation_id.remove(&correlation_id)
    }

    /// Marks the connection dead; dropping the senders wakes every waiter.
    fn close(&self) {
        let mut waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        waiters.closed = true;
        waiters.by_correlation_id.clear();
    }

    fn is_closed(&self) -> bool {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner()).closed
    }
}

/// A connection to one broker. Cheap to share behind an `Arc`; dropping the
/// last handle closes the socket.
pub struct Connection {
    shared: Arc<Shared>,
    frames: mpsc::Sender<Frame>,
    next_correlation_id: AtomicI32,
    versions: NegotiatedVersions,
    options: ConnectionOptions,
}

impl Connection {
    /// Connects to `addr` (`host:port`) and negotiates API versions.
    pub async fn connect(addr: &str, options: ConnectionOptions) -> Result<Self> {
        let io_error = |source| Error::Io { addr: addr.to_owned(), source };
        let stream = tokio::time::timeout(options.connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| io_error(std::io::ErrorKind::TimedOut.into()))?
            .map_err(io_error)?;
        stream.set_nodelay(true).map_err(io_error)?;
        let (read_half, write_half) = stream.into_split();
        let shared = Arc::new(Shared { addr: addr.to_owned(), waiters: Mutex::default() });
        let (frames, frame_rx) = mpsc::channel(WRITE_QUEUE_FRAMES);
        tokio::spawn(write_loop(shared.clone(), write_half, frame_rx));
        tokio::spawn(read_loop(shared.clone(), read_half, options.max_response_bytes));
        let mut connection = Self {
            shared,
            frames,
            next_correlation_id: AtomicI32::new(0),
            versions: NegotiatedVersions::default(),
            options,
        };
        connection.versions = connection.negotiate_versions().await?;
        Ok(connection)
    }

    pub fn addr(&self) -> &str {
        &self.shared.addr
    }

    /// Whether the socket has failed; a closed connection never recovers.
    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    pub fn versions(&self) -> &NegotiatedVersions {
        &self.versions
    }

    /// The negotiated version of `api`, or why there is none.
    pub fn version(&self, api: ApiKey) -> Result<i16> {
        self.versions.version(api).ok_or_else(|| {
            let ours = versions::client_range(api).unwrap_or(VersionRange { min: 0, max: -1 });
            Error::UnsupportedApi { api, addr: self.addr().to_owned(), min: ours.min, max: ours.max }
        })
    }

    /// Sends `request` at the negotiated version and waits for its response.
    pub async fn send<R: Request>(&self, request: &R) -> Result<R::Response> {
        let version = self.version(api_key::<R>()?)?;
        self.send_at(request, version).await
    }

    /// Sends `request` at `version` and waits for its response.
    pub async fn send_at<R: Request>(&self, request: &R, version: i16) -> Result<R::Response> {
        self.start(request, version).await?.wait().await
    }

    /// Queues `request` for writing and returns a handle to await its
    /// response. Requests started one after the other from one task are
    /// written in that order (the producer relies on it for sequence numbers).
    pub async fn start<R: Request>(&self, request: &R, version: i16) -> Result<PendingResponse<R::Response>> {
        self.start_spliced(request, version, &[]).await
    }

    /// `start`, with the byte fields carrying the `splices`' markers sent
    /// from the splices' payloads.
    pub async fn start_spliced<R: Request>(
        &self,
        request: &R,
        version: i16,
        splices: &[Splice],
    ) -> Result<PendingResponse<R::Response>> {
        let api = api_key::<R>()?;
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let frame = self.encode(request, api, version, correlation_id, splices)?;
        let response = self.shared.register(correlation_id)?;
        self.write(frame).await?;
        Ok(PendingResponse {
            shared: self.shared.clone(),
            response,
            api,
            version,
            timeout: self.options.request_timeout,
            _body: std::marker::PhantomData,
        })
    }

    /// Sends a request the broker will not answer (Produce with acks=0).
    pub async fn send_without_response<R: Request>(
        &self,
        request: &R,
        version: i16,
        splices: &[Splice],
    ) -> Result<()> {
        let api = api_key::<R>()?;
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let frame = self.encode(request, api, version, correlation_id, splices)?;
        self.write(frame).await
    }

    async fn write(&self, frame: Frame) -> Result<()> {
        self.frames.send(frame).await.map_err(|_| Error::Disconnected { addr: self.addr().to_owned() })
    }

    /// Size prefix, request header, body; one piece, or several around
    /// spliced payloads.
    fn encode<R: Request>(
        &self,
        request: &R,
        api: ApiKey,
        version: i16,
        correlation_id: i32,
        splices: &[Splice],
    ) -> Result<Frame> {
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_string(self.options.client_id.clone())));
        let header_version = R::header_version(version);
        // kafka-protocol refuses, for one, a field set that the version lacks.
        let bad = |e: String| Error::InvalidRequest(format!("cannot encode {api:?} v{version}: {e}"));
        let size = header.compute_size(header_version).map_err(|e| bad(e.to_string()))?
            + request.compute_size(version).map_err(|e| bad(e.to_string()))?;
        let mut frame = BytesMut::with_capacity(4 + size);
        frame.put_i32(size as i32);
        header.encode(&mut frame, header_version).map_err(|e| bad(e.to_string()))?;
        request.encode(&mut frame, version).map_err(|e| bad(e.to_string()))?;
        if splices.is_empty() {
            return Ok(vec![frame.freeze()]);
        }
        let flexible = header_version >= 2;
        splice_frame(frame, splices, flexible).map_err(bad)
    }

    /// ApiVersions, falling back to the version the broker offers when it
    /// does not know ours (it then answers in v0 with UNSUPPORTED_VERSION).
    async fn negotiate_versions(&self) -> Result<NegotiatedVersions> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("strom-client"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let mut version = API_VERSIONS_FIRST_TRY;
        for _ in 0..2 {
            let frame = self.start(&request, version).await?.wait_frame().await?;
            let body = self.api_versions_body(frame, version)?;
            if body.error_code == UNSUPPORTED_VERSION {
                let offered = body.api_keys.iter().find(|k| k.api_key == ApiKey::ApiVersions as i16);
                version = offered.map_or(0, |k| k.max_version.min(API_VERSIONS_FIRST_TRY));
                continue;
            }
            if let Some(error) = Error::from_code(body.error_code, None) {
                return Err(error);
            }
            let ranges = body
                .api_keys
                .iter()
                .map(|k| (k.api_key, VersionRange { min: k.min_version, max: k.max_version }));
            return Ok(NegotiatedVersions::negotiate(ranges));
        }
        Err(self.protocol_error("ApiVersions kept answering UNSUPPORTED_VERSION"))
    }

    /// Decodes an ApiVersions response, which is v0 whenever it carries
    /// UNSUPPORTED_VERSION, whatever version was asked.
    fn api_versions_body(&self, mut frame: Bytes, version: i16) -> Result<ApiVersionsResponse> {
        ResponseHeader::decode(&mut frame, 0).map_err(|e| self.protocol_error(e))?;
        let error_code = frame.get(..2).map(|b| i16::from_be_bytes([b[0], b[1]]));
        let version = if error_code == Some(UNSUPPORTED_VERSION) { 0 } else { version };
        ApiVersionsResponse::decode(&mut frame, version).map_err(|e| self.protocol_error(e))
    }

    fn protocol_error(&self, reason: impl ToString) -> Error {
        Error::Protocol { addr: self.addr().to_owned(), reason: reason.to_string() }
    }
}

/// Cuts `frame` around each splice marker and puts the payload (with its
/// real length prefix) in the marker's place. The marker was encoded as a
/// 16-byte field: after a 4-byte length in classic versions, a 1-byte
/// unsigned varint (17) in flexible ones.
fn splice_frame(frame: BytesMut, splices: &[Splice], flexible: bool) -> Result<Frame, String> {
    let mut found: Vec<(usize, &Splice)> = Vec::with_capacity(splices.len());
    for splice in splices {
        let at = find(&frame, &splice.marker).ok_or("a splice marker is missing from the encoded request")?;
        found.push((at, splice));
    }
    found.sort_by_key(|(at, _)| *at);
    let prefix_len = if flexible { 1 } else { 4 };
    let mut pieces = Vec::with_capacity(2 * found.len() + 1);
    let mut small = BytesMut::new();
    let mut cursor = 4; // the size prefix is rewritten below
    for (at, splice) in found {
        let field_start =
            at.checked_sub(prefix_len).filter(|s| *s >= cursor).ok_or("splice markers overlap")?;
        small.extend_from_slice(&frame[cursor..field_start]);
        put_bytes_length(&mut small, splice.payload.len(), flexible);
        pieces.push(small.split().freeze());
        pieces.push(splice.payload.clone());
        cursor = at + splice.marker.len();
    }
    small.extend_from_slice(&frame[cursor..]);
    pieces.push(small.freeze());
    let size: usize = pieces.iter().map(Bytes::len).sum();
    let size = i32::try_from(size).map_err(|_| "request larger than 2 GiB")?;
    pieces.insert(0, Bytes::copy_from_slice(&size.to_be_bytes()));
    Ok(pieces)
}

fn put_bytes_length(out: &mut BytesMut, len: usize, flexible: bool) {
    if !flexible {
        out.put_i32(len as i32);
        return;
    }
    let mut v = len as u64 + 1;
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

fn api_key<R: Request>() -> Result<ApiKey> {
    ApiKey::try_from(R::KEY).map_err(|_| Error::InvalidRequest(format!("unknown api key {}", R::KEY)))
}

/// A request on the wire; await `wait` for its decoded response.
pub struct PendingResponse<T> {
    shared: Arc<Shared>,
    response: oneshot::Receiver<Bytes>,
    api: ApiKey,
    version: i16,
    timeout: Duration,
    _body: std::marker::PhantomData<fn() -> T>,
}

impl<T: Decodable> PendingResponse<T> {
    /// Waits `timeout` instead of `request.timeout.ms` (for requests the
    /// broker may hold, like JoinGroup).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Waits up to the request timeout and decodes the response.
    pub async fn wait(self) -> Result<T> {
        let (api, version, addr) = (self.api, self.version, self.shared.addr.clone());
        let mut frame = self.wait_frame().await?;
        let header_version = api.response_header_version(version);
        let bad =
            |e: String| Error::Protocol { addr: addr.clone(), reason: format!("{api:?} v{version}: {e}") };
        ResponseHeader::decode(&mut frame, header_version).map_err(|e| bad(e.to_string()))?;
        T::decode(&mut frame, version).map_err(|e| bad(e.to_string()))
    }

    /// The raw response frame, header included, without the size prefix.
    async fn wait_frame(self) -> Result<Bytes> {
        match tokio::time::timeout(self.timeout, self.response).await {
            Ok(Ok(frame)) => Ok(frame),
            Ok(Err(_)) => Err(Error::Disconnected { addr: self.shared.addr.clone() }),
            Err(_) => {
                // As in the Java client, a broker that does not answer in
                // time is dropped: the connection closes (failing the other
                // requests on it) and the next request opens a new one.
                tracing::debug!(addr = %self.shared.addr, api = ?self.api, "request timed out; closing the connection");
                self.shared.close();
                Err(Error::Timeout { api: self.api, addr: self.shared.addr.clone(), timeout: self.timeout })
            }
        }
    }
}

/// Writes queued frames, flushing once the queue is momentarily empty so
/// back-to-back requests share a syscall.
async fn write_loop(shared: Arc<Shared>, half: OwnedWriteHalf, mut frames: mpsc::Receiver<Frame>) {
    let mut writer = BufWriter::with_capacity(IO_BUFFER_BYTES, half);
    while let Some(frame) = frames.recv().await {
        let mut result = write_frame(&mut writer, &frame).await;
        while let (Ok(()), Ok(frame)) = (&result, frames.try_recv()) {
            result = write_frame(&mut writer, &frame).await;
        }
        if let Err(e) = result.and(writer.flush().await) {
            tracing::debug!(addr = %shared.addr, "write failed: {e}");
            shared.close();
            return;
        }
    }
    // Every handle is gone: close our side so the reader sees the end too.
    let _ = writer.shutdown().await;
}

/// Small pieces gather in the buffer; a large one goes straight to the
/// socket (BufWriter passes writes bigger than its buffer through).
async fn write_frame(writer: &mut BufWriter<OwnedWriteHalf>, frame: &Frame) -> std::io::Result<()> {
    for piece in frame {
        writer.write_all(piece).await?;
    }
    Ok(())
}

/// Reads response frames and hands each to the caller waiting for it.
async fn read_loop(shared: Arc<Shared>, half: OwnedReadHalf, max_frame_bytes: usize) {
    let mut reader = BufReader::with_capacity(IO_BUFFER_BYTES, half);
    loop {
        match read_frame(&mut reader, max_frame_bytes).await {
            Ok(frame) if frame.len() >= 4 => {
                let correlation_id = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
                match shared.take(correlation_id) {
                    Some(waiter) => {
                        let _ = waiter.send(frame);
                    }
                    None => tracing::debug!(addr = %shared.addr, correlation_id, "response nobody waits for"),
                }
            }
            Ok(_) => {
                tracing::warn!(addr = %shared.addr, "response frame shorter than its header");
                break;
            }
            Err(e) => {
                if e.kind() != std::io::ErrorKind::UnexpectedEof {
                    tracing::debug!(addr = %shared.addr, "read failed: {e}");
                }
                break;
            }
        }
    }
    shared.close();
}

async fn read_frame(reader: &mut BufReader<OwnedReadHalf>, max_frame_bytes: usize) -> std::io::Result<Bytes> {
    let size = reader.read_i32().await?;
    if size < 0 || size as usize > max_frame_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("response size {size} outside [0, {max_frame_bytes}]"),
        ));
    }
    // Filled straight from the socket, without zeroing first: fetch
    // responses run to megabytes.
    let size = size as usize;
    let mut frame = BytesMut::with_capacity(size);
    while frame.len() < size {
        let missing = size - frame.len();
        let mut rest = (&mut frame).limit(missing);
        if reader.read_buf(&mut rest).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(frame.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
    use tokio::net::TcpListener;

    /// A fake broker: answers ApiVersions with `api_versions_reply`, then
    /// answers each later request by `reply`, in reverse order of arrival
    /// for every pair, to prove responses are matched by correlation id.
    async fn fake_broker(
        reply: fn(ApiKey, i16, &mut Bytes) -> Option<BytesMut>,
    ) -> (String, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut held: Option<Bytes> = None;
            loop {
                let Ok(size) = socket.read_i32().await else { return };
                let mut frame = BytesMut::zeroed(size as usize);
                socket.read_exact(&mut frame).await.unwrap();
                let mut frame = frame.freeze();
                let api = ApiKey::try_from(i16::from_be_bytes([frame[0], frame[1]])).unwrap();
                let version = i16::from_be_bytes([frame[2], frame[3]]);
                let header = RequestHeader::decode(&mut frame, api.request_header_version(version)).unwrap();
                let Some(body) = reply(api, version, &mut frame) else { continue };
                let mut out = BytesMut::new();
                ResponseHeader::default()
                    .with_correlation_id(header.correlation_id)
                    .encode(&mut out, api.response_header_version(version))
                    .unwrap();
                out.extend_from_slice(&body);
                let mut sized = BytesMut::new();
                sized.put_i32(out.len() as i32);
                sized.extend_from_slice(&out);
                let sized = sized.freeze();
                if api == ApiKey::ApiVersions {
                    socket.write_all(&sized).await.unwrap();
                } else if let Some(first) = held.take() {
                    socket.write_all(&sized).await.unwrap();
                    socket.write_all(&first).await.unwrap();
                } else {
                    held = Some(sized);
                }
            }
        });
        (addr, task)
    }

    fn api_versions_reply(version: i16) -> BytesMut {
        let keys = [ApiKey::ApiVersions, ApiKey::Metadata]
            .iter()
            .map(|k| {
                let range = k.valid_versions();
                ApiVersion::default()
                    .with_api_key(*k as i16)
                    .with_min_version(range.min)
                    .with_max_version(range.max)
            })
            .collect();
        let mut out = BytesMut::new();
        ApiVersionsResponse::default().with_api_keys(keys).encode(&mut out, version).unwrap();
        out
    }

    fn serve(api: ApiKey, version: i16, body: &mut Bytes) -> Option<BytesMut> {
        match api {
            ApiKey::ApiVersions => Some(api_versions_reply(version)),
            ApiKey::Metadata => {
                // Echo the requested topic count as the controller id.
                let request = MetadataRequest::decode(body, version).unwrap();
                let count = request.topics.map_or(-1, |t| t.len() as i32);
                let mut out = BytesMut::new();
                MetadataResponse::default()
                    .with_controller_id(count.into())
                    .encode(&mut out, version)
                    .unwrap();
                Some(out)
            }
            _ => None,
        }
    }

    fn metadata_for(topics: usize) -> MetadataRequest {
        let topics = (0..topics).map(|_| Default::default()).collect();
        MetadataRequest::default().with_topics(Some(topics))
    }

    #[tokio::test]
    async fn negotiates_versions_and_matches_responses_out_of_order() {
        let (addr, _broker) = fake_broker(serve).await;
        let connection = Connection::connect(&addr, ConnectionOptions::default()).await.unwrap();
        assert_eq!(connection.version(ApiKey::Metadata).unwrap(), 12);
        assert!(matches!(connection.version(ApiKey::Produce), Err(Error::UnsupportedApi { .. })));

        let first = connection.start(&metadata_for(1), 12).await.unwrap();
        let second = connection.start(&metadata_for(2), 12).await.unwrap();
        // The broker answers the second before the first.
        let (first, second) = tokio::join!(first.wait(), second.wait());
        assert_eq!(first.unwrap().controller_id.0, 1);
        assert_eq!(second.unwrap().controller_id.0, 2);
    }

    #[tokio::test]
    async fn a_request_without_answer_times_out_and_closes_and_a_dead_broker_disconnects() {
        let (addr, _silent_broker) = fake_broker(serve).await;
        let options = ConnectionOptions { request_timeout: Duration::from_millis(200), ..Default::default() };
        let connection = Connection::connect(&addr, options).await.unwrap();
        // The fake broker holds an odd request back until a second arrives.
        let lonely = connection.send(&metadata_for(3)).await;
        assert!(matches!(lonely, Err(Error::Timeout { .. })), "{lonely:?}");
        assert!(connection.is_closed(), "a timed-out connection is dropped");

        let (addr, broker) = fake_broker(serve).await;
        let connection = Connection::connect(&addr, ConnectionOptions::default()).await.unwrap();
        broker.abort();
        let _ = broker.await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !connection.is_closed() {
            assert!(tokio::time::Instant::now() < deadline, "connection never noticed the broker died");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let after = connection.send(&metadata_for(1)).await;
        assert!(matches!(after, Err(Error::Disconnected { .. })), "{after:?}");
    }

    /// Splicing yields exactly the bytes of the plain encoding.
    #[test]
    fn spliced_frames_equal_copied_frames() {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        use kafka_protocol::messages::{ProduceRequest, TopicName};
        let payloads: Vec<Bytes> = vec![Bytes::from(vec![7u8; 300]), Bytes::from_static(b"second batch")];
        let request = |records: Vec<Bytes>| {
            let partitions = records
                .into_iter()
                .enumerate()
                .map(|(i, r)| PartitionProduceData::default().with_index(i as i32).with_records(Some(r)))
                .collect();
            ProduceRequest::default().with_acks(1).with_timeout_ms(1000).with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_static_str("t")))
                    .with_partition_data(partitions),
            ])
        };
        for version in [3, 8, 9, 12] {
            let splices: Vec<Splice> = payloads.iter().cloned().map(Splice::new).collect();
            let marked = request(splices.iter().map(|s| s.marker.clone()).collect());
            let mut frame = BytesMut::new();
            frame.put_i32(0);
            marked.encode(&mut frame, version).unwrap();
            let flexible = ApiKey::Produce.request_header_version(version) >= 2;
            let pieces = splice_frame(frame, &splices, flexible).unwrap();
            let joined: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();

            let mut plain = BytesMut::new();
            request(payloads.clone()).encode(&mut plain, version).unwrap();
            assert_eq!(
                i32::from_be_bytes(joined[..4].try_into().unwrap()) as usize,
                plain.len(),
                "v{version}"
            );
            assert_eq!(&joined[4..], &plain[..], "v{version}");
        }
    }

    #[tokio::test]
    async fn an_unreachable_broker_is_an_io_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let result = Connection::connect(&addr, ConnectionOptions::default()).await;
        assert!(matches!(result, Err(Error::Io { .. })));
    }
}
