//! An outbound Kafka connection: connect to `host:port`, send any
//! `kafka-protocol` request at a chosen version, await its response.
//!
//! Requests are framed as Kafka frames them (a 4-byte size, the request
//! header at the version the API key and version imply, the body) and
//! pipelined: many may be in flight, each answered through its own
//! correlation id. When the connection fails every in-flight request fails
//! with it and the channel reports itself closed; the owner opens a new
//! one (see [`Reconnecting`]). The quorum's peer links use it, and so does
//! the broker's channel to the controller.
//!
//! A [`Connector`] opens channels: over plain TCP, or secured by a
//! [`LinkSecurity`] (TLS around the socket, then SASL as the first
//! requests), which the broker builds from the link's listener settings.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// The largest response frame accepted (Kafka's clients have no such
/// bound; a broken peer must not make us allocate without one).
const MAX_RESPONSE_BYTES: usize = 128 * 1024 * 1024;

/// Why a request got no response.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ChannelError {
    /// Connecting or writing failed, or the connection closed before the answer.
    #[error("connection to {0} failed: {1}")]
    Io(String, String),
    /// No answer within the timeout.
    #[error("request to {0} timed out")]
    Timeout(String),
    /// The request could not be encoded or the response decoded.
    #[error("bad message: {0}")]
    Codec(String),
    /// The TLS handshake or SASL authentication failed.
    #[error("authentication to {0} failed: {1}")]
    Authentication(String, String),
}

/// How long a link waits before trying again after an authentication
/// failure: wrong credentials do not fix themselves within milliseconds.
pub const AUTHENTICATION_BACKOFF: Duration = Duration::from_secs(1);

/// A connected stream a channel reads and writes: plain TCP or TLS over it.
pub trait LinkStream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> LinkStream for T {}

/// A boxed future, as [`LinkSecurity`]'s methods return them.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a link secures its connections; errors are messages for the log.
pub trait LinkSecurity: Send + Sync + std::fmt::Debug {
    /// Wraps a connected socket (a TLS handshake with `host`), or hands it back.
    fn wrap<'a>(
        &'a self,
        stream: TcpStream,
        host: &'a str,
    ) -> BoxFuture<'a, Result<Box<dyn LinkStream>, String>>;
    /// Authenticates a fresh channel before any other request (SASL).
    fn authenticate<'a>(&'a self, channel: &'a Channel) -> BoxFuture<'a, Result<(), String>>;
}

/// Opens channels, plain or secured; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Connector {
    security: Option<Arc<dyn LinkSecurity>>,
}

impl Connector {
    /// Plain TCP, no authentication (Kafka's PLAINTEXT).
    pub fn plaintext() -> Self {
        Self::default()
    }

    /// Connections secured by `security`.
    pub fn secured(security: Arc<dyn LinkSecurity>) -> Self {
        Self { security: Some(security) }
    }

    /// Connects to `address` (`host:port`), secures and authenticates the
    /// connection, all within `timeout`.
    pub async fn connect(
        &self,
        address: &str,
        client_id: &str,
        timeout: Duration,
    ) -> Result<Channel, ChannelError> {
        tokio::time::timeout(timeout, self.open(address, client_id))
            .await
            .map_err(|_| ChannelError::Timeout(address.to_owned()))?
    }

    async fn open(&self, address: &str, client_id: &str) -> Result<Channel, ChannelError> {
        let io_error = |e: &dyn std::fmt::Display| ChannelError::Io(address.to_owned(), e.to_string());
        let stream = TcpStream::connect(address).await.map_err(|e| io_error(&e))?;
        stream.set_nodelay(true).map_err(|e| io_error(&e))?;
        let Some(security) = &self.security else {
            return Ok(Channel::over(Box::new(stream), address, client_id));
        };
        let refused = |e: String| ChannelError::Authentication(address.to_owned(), e);
        let stream = security.wrap(stream, host_of(address)).await.map_err(refused)?;
        let channel = Channel::over(stream, address, client_id);
        security.authenticate(&channel).await.map_err(refused)?;
        Ok(channel)
    }
}

/// The host of `host:port` (an IPv6 address without its brackets).
fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

type Pending = Arc<Mutex<HashMap<i32, oneshot::Sender<Bytes>>>>;

/// One connection to one server.
pub struct Channel {
    address: String,
    client_id: StrBytes,
    writer: tokio::sync::Mutex<WriteHalf<Box<dyn LinkStream>>>,
    pending: Pending,
    next_correlation_id: AtomicI32,
    closed: Arc<AtomicBool>,
    /// The task reading responses; it holds the stream's read half.
    reader: tokio::task::AbortHandle,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel").field("address", &self.address).field("closed", &self.is_closed()).finish()
    }
}

impl Channel {
    /// Connects to `address` (`host:port`) over plain TCP, sending
    /// `client_id` in every header.
    pub async fn connect(address: &str, client_id: &str, timeout: Duration) -> Result<Self, ChannelError> {
        Connector::plaintext().connect(address, client_id, timeout).await
    }

    /// A channel over an established stream to `address`.
    fn over(stream: Box<dyn LinkStream>, address: &str, client_id: &str) -> Self {
        let (reader, writer) = tokio::io::split(stream);
        let pending: Pending = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));
        let reader = tokio::spawn(read_responses(reader, pending.clone(), closed.clone())).abort_handle();
        Self {
            address: address.to_owned(),
            client_id: StrBytes::from_string(client_id.to_owned()),
            writer: tokio::sync::Mutex::new(writer),
            pending,
            next_correlation_id: AtomicI32::new(0),
            closed,
            reader,
        }
    }

    /// The server's address.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Whether the connection has failed: every later request fails.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Sends `request` at `version` and waits up to `timeout` for its response.
    pub async fn send<R: Request>(
        &self,
        request: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<R::Response, ChannelError> {
        if self.is_closed() {
            return Err(ChannelError::Io(self.address.clone(), "connection closed".into()));
        }
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let frame = self.frame(request, version, correlation_id)?;
        let (tx, rx) = oneshot::channel();
        self.lock_pending().insert(correlation_id, tx);
        let written = async {
            let mut writer = self.writer.lock().await;
            writer.write_all(&frame).await
        };
        let result = tokio::time::timeout(timeout, async {
            if let Err(e) = written.await {
                self.closed.store(true, Ordering::Release);
                return Err(ChannelError::Io(self.address.clone(), e.to_string()));
            }
            rx.await.map_err(|_| ChannelError::Io(self.address.clone(), "connection closed".into()))
        })
        .await;
        self.lock_pending().remove(&correlation_id);
        let mut body = match result {
            Ok(answer) => answer?,
            Err(_) => return Err(ChannelError::Timeout(self.address.clone())),
        };
        let codec = |e: &dyn std::fmt::Display| ChannelError::Codec(e.to_string());
        ResponseHeader::decode(&mut body, R::Response::header_version(version)).map_err(|e| codec(&e))?;
        R::Response::decode(&mut body, version).map_err(|e| codec(&e))
    }

    fn frame<R: Request>(
        &self,
        request: &R,
        version: i16,
        correlation_id: i32,
    ) -> Result<Bytes, ChannelError> {
        let codec = |e: &dyn std::fmt::Display| ChannelError::Codec(e.to_string());
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header.encode(&mut buf, R::header_version(version)).map_err(|e| codec(&e))?;
        request.encode(&mut buf, version).map_err(|e| codec(&e))?;
        let size = i32::try_from(buf.len() - 4).map_err(|e| codec(&e))?;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        Ok(buf.freeze())
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, HashMap<i32, oneshot::Sender<Bytes>>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // Nobody waits for an answer any more: ending the reader drops the
        // stream's last half, which closes the connection (a split stream
        // is not shut down by dropping its write half alone).
        self.closed.store(true, Ordering::Release);
        self.reader.abort();
    }
}

/// Reads response frames and hands each to the request it answers; on
/// any failure fails every request still waiting.
async fn read_responses(
    mut reader: ReadHalf<Box<dyn LinkStream>>,
    pending: Pending,
    closed: Arc<AtomicBool>,
) {
    while let Ok(size) = reader.read_i32().await {
        let Ok(size) = usize::try_from(size) else { break };
        if !(4..=MAX_RESPONSE_BYTES).contains(&size) {
            break;
        }
        let mut frame = vec![0; size];
        if reader.read_exact(&mut frame).await.is_err() {
            break;
        }
        let frame = Bytes::from(frame);
        let correlation_id = (&frame[..4]).get_i32();
        let waiter = pending.lock().unwrap_or_else(PoisonError::into_inner).remove(&correlation_id);
        if let Some(waiter) = waiter {
            let _ = waiter.send(frame);
        }
        if closed.load(Ordering::Acquire) && pending.lock().unwrap_or_else(PoisonError::into_inner).is_empty()
        {
            break;
        }
    }
    closed.store(true, Ordering::Release);
    pending.lock().unwrap_or_else(PoisonError::into_inner).clear();
}

/// A channel to one address that reconnects when it finds the connection
/// broken, waiting a backoff between failed attempts.
#[derive(Debug)]
pub struct Reconnecting {
    address: String,
    client_id: String,
    connector: Connector,
    channel: tokio::sync::Mutex<Option<Arc<Channel>>>,
    backoff: Duration,
    timeout: Duration,
}

impl Reconnecting {
    /// A channel to `address` opened by `connector`; connects on first use.
    pub fn new(
        address: &str,
        client_id: &str,
        connector: Connector,
        backoff: Duration,
        timeout: Duration,
    ) -> Self {
        Self {
            address: address.to_owned(),
            client_id: client_id.to_owned(),
            connector,
            channel: tokio::sync::Mutex::new(None),
            backoff,
            timeout,
        }
    }

    /// Sends `request` at `version` over the current connection, opening
    /// one if needed. A failure is not retried: the caller decides.
    pub async fn send<R: Request>(&self, request: &R, version: i16) -> Result<R::Response, ChannelError> {
        let channel = self.current().await?;
        channel.send(request, version, self.timeout).await
    }

    async fn current(&self) -> Result<Arc<Channel>, ChannelError> {
        let mut slot = self.channel.lock().await;
        if let Some(channel) = slot.as_ref().filter(|channel| !channel.is_closed()) {
            return Ok(channel.clone());
        }
        let had_one = slot.take().is_some();
        if had_one {
            tokio::time::sleep(self.backoff).await;
        }
        match self.connector.connect(&self.address, &self.client_id, self.timeout).await {
            Ok(channel) => Ok(slot.insert(Arc::new(channel)).clone()),
            Err(e @ ChannelError::Authentication(..)) => {
                tracing::error!(link = %self.client_id, "{e}; retrying in {AUTHENTICATION_BACKOFF:?}");
                tokio::time::sleep(AUTHENTICATION_BACKOFF.max(self.backoff)).await;
                Err(e)
            }
            Err(e) => {
                // Holding the lock through the backoff spaces out attempts.
                tokio::time::sleep(self.backoff).await;
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
    use tokio::net::TcpListener;

    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(5);

    /// A server that answers each ApiVersions v3 frame on its `n`th
    /// connection with `respond(n, header)`, or closes the connection when
    /// that is None.
    async fn server(respond: fn(usize, RequestHeader) -> Option<Bytes>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let mut connections = 0;
            while let Ok((mut stream, _)) = listener.accept().await {
                let connection = connections;
                connections += 1;
                tokio::spawn(async move {
                    while let Ok(size) = stream.read_i32().await {
                        let mut frame = vec![0; size as usize];
                        if stream.read_exact(&mut frame).await.is_err() {
                            return;
                        }
                        let mut frame = Bytes::from(frame);
                        let header_version = ApiKey::ApiVersions.request_header_version(3);
                        let Ok(header) = RequestHeader::decode(&mut frame, header_version) else { return };
                        let Some(body) = respond(connection, header) else { return };
                        if stream.write_all(&body).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        address
    }

    fn api_versions_answer(_connection: usize, header: RequestHeader) -> Option<Bytes> {
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        ResponseHeader::default().with_correlation_id(header.correlation_id).encode(&mut buf, 0).unwrap();
        ApiVersionsResponse::default().with_error_code(35).encode(&mut buf, 3).unwrap();
        let size = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        Some(buf.freeze())
    }

    #[tokio::test]
    async fn a_request_gets_the_response_with_its_correlation_id() {
        let address = server(api_versions_answer).await;
        let channel = Channel::connect(&address, "test", TIMEOUT).await.unwrap();
        for _ in 0..3 {
            let response = channel.send(&ApiVersionsRequest::default(), 3, TIMEOUT).await.unwrap();
            assert_eq!(response.error_code, 35);
        }
        assert!(!channel.is_closed());
    }

    #[tokio::test]
    async fn a_dropped_connection_fails_its_requests_and_a_reconnecting_channel_opens_another() {
        // The first connection is dropped unanswered, later ones are served.
        let address = server(|connection, header| match connection {
            0 => None,
            _ => api_versions_answer(connection, header),
        })
        .await;
        let reconnecting =
            Reconnecting::new(&address, "test", Connector::plaintext(), Duration::from_millis(10), TIMEOUT);
        let failed = reconnecting.send(&ApiVersionsRequest::default(), 3).await;
        assert!(matches!(failed, Err(ChannelError::Io(..))), "{failed:?}");
        let answered = reconnecting.send(&ApiVersionsRequest::default(), 3).await.unwrap();
        assert_eq!(answered.error_code, 35);
    }

    /// Authenticates by asking ApiVersions; refuses unless the answer has `expected`.
    #[derive(Debug)]
    struct AskFirst {
        expected: i16,
    }

    impl LinkSecurity for AskFirst {
        fn wrap<'a>(
            &'a self,
            stream: TcpStream,
            _host: &'a str,
        ) -> BoxFuture<'a, Result<Box<dyn LinkStream>, String>> {
            Box::pin(async move { Ok(Box::new(stream) as Box<dyn LinkStream>) })
        }

        fn authenticate<'a>(&'a self, channel: &'a Channel) -> BoxFuture<'a, Result<(), String>> {
            Box::pin(async move {
                let answer = channel.send(&ApiVersionsRequest::default(), 3, TIMEOUT).await;
                match answer.map_err(|e| e.to_string())?.error_code {
                    code if code == self.expected => Ok(()),
                    code => Err(format!("refused with {code}")),
                }
            })
        }
    }

    #[tokio::test]
    async fn a_secured_connector_hands_out_only_authenticated_channels() {
        let address = server(api_versions_answer).await;
        let accepted = Connector::secured(Arc::new(AskFirst { expected: 35 }));
        let channel = accepted.connect(&address, "test", TIMEOUT).await.unwrap();
        assert!(channel.send(&ApiVersionsRequest::default(), 3, TIMEOUT).await.is_ok());
        let refused = Connector::secured(Arc::new(AskFirst { expected: 0 }));
        let failed = refused.connect(&address, "test", TIMEOUT).await;
        assert!(
            matches!(&failed, Err(ChannelError::Authentication(_, why)) if why == "refused with 35"),
            "{failed:?}"
        );
    }

    #[tokio::test]
    async fn a_dropped_channel_closes_its_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let channel = Channel::connect(&address, "test", TIMEOUT).await.unwrap();
        let (mut accepted, _) = listener.accept().await.unwrap();
        drop(channel);
        let mut byte = [0u8; 1];
        let read =
            tokio::time::timeout(TIMEOUT, accepted.read(&mut byte)).await.expect("the connection stays open");
        assert_eq!(read.unwrap(), 0, "end of stream");
    }

    #[test]
    fn hosts_are_taken_from_addresses() {
        assert_eq!(host_of("127.0.0.1:9093"), "127.0.0.1");
        assert_eq!(host_of("[::1]:9093"), "::1");
        assert_eq!(host_of("node-1.example:9093"), "node-1.example");
    }

    #[tokio::test]
    async fn an_unreachable_server_is_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        drop(listener);
        assert!(Channel::connect(&address, "test", TIMEOUT).await.is_err());
    }
}
