//! Connections: size-prefixed frames in, responses out in request order.
//!
//! A TLS listener's connections first finish the TLS handshake (which
//! names the client when it shows a certificate); a SASL listener's first
//! run the SASL exchange, which sees every frame before dispatch does.
//! Fetched records leave by `sendfile` on plaintext connections only: TLS
//! encrypts them on their way through user space.
//!
//! Each connection is one task that reads a frame, serves it and writes the
//! response before reading the next, as Kafka mutes a channel while a request
//! is in flight; that is what keeps responses in request order. Responses are
//! buffered and flushed once no further request is already waiting in the
//! read buffer, so pipelined requests share a write.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::watch;

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use strom_storage::segment::FileSlice;
use tokio::io::Interest;
use tokio::net::tcp::OwnedWriteHalf;

use crate::dispatch::{self, Chunk};
use crate::security::sasl::{Action, SaslConnection};
use crate::security::{ListenerSecurity, Session};
use crate::server::Broker;
use tokio_rustls::server::TlsStream;

const IO_BUFFER_BYTES: usize = 64 * 1024;
/// Frames are read in steps of at most this much, so a size prefix alone
/// never reserves more memory than the bytes that actually arrive.
const READ_STEP_BYTES: usize = 1 << 20;
/// File ranges this small are copied: one syscall fewer than `sendfile`.
const COPY_BELOW_BYTES: usize = 16 * 1024;
/// Copied file ranges go through memory in pieces of this size.
const COPY_STEP_BYTES: usize = 64 * 1024;

/// Why a connection stops reading.
#[derive(Debug, thiserror::Error)]
enum FrameError {
    #[error("request size {size} is outside [0, socket.request.max.bytes = {max}]")]
    BadSize { size: i32, max: usize },
    #[error("connection closed mid-frame")]
    Truncated,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Reads one frame; `Ok(None)` on a clean end of stream between frames.
async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R, max: usize) -> Result<Option<Bytes>, FrameError> {
    let size = match reader.read_i32().await {
        Ok(size) => size,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if size < 0 || size as usize > max {
        return Err(FrameError::BadSize { size, max });
    }
    let size = size as usize;
    let mut frame = BytesMut::with_capacity(size.min(READ_STEP_BYTES));
    while frame.len() < size {
        frame.reserve((size - frame.len()).min(READ_STEP_BYTES));
        let mut limited = (&mut *reader).take((size - frame.len()) as u64);
        if limited.read_buf(&mut frame).await? == 0 {
            return Err(FrameError::Truncated);
        }
    }
    Ok(Some(frame.freeze()))
}

/// Serves one client connection until it closes, errs, or the broker
/// stops: over TLS when the listener asks for it, and behind SASL.
pub async fn serve(
    broker: Arc<Broker>,
    stream: TcpStream,
    peer: SocketAddr,
    security: Arc<ListenerSecurity>,
    mut shutdown: watch::Receiver<bool>,
) {
    tracing::debug!(%peer, listener = %security.name, "connection opened");
    let _ = stream.set_nodelay(true);
    let Some(tls) = &security.tls else {
        let (read_half, write_half) = stream.into_split();
        serve_stream(broker, read_half, write_half, peer, &security, Session::default(), shutdown).await;
        return;
    };
    let accepted = tokio::select! {
        biased;
        _ = crate::shutdown::stopped(&mut shutdown) => return,
        accepted = tokio::time::timeout(security.max_idle, tls.accept(stream)) => accepted,
    };
    let Ok(accepted) = accepted else {
        tracing::info!(%peer, listener = %security.name, "closing connection idle in its TLS handshake");
        return;
    };
    let stream = match accepted {
        Ok(stream) => stream,
        Err(e) => {
            tracing::info!(%peer, listener = %security.name, "TLS handshake failed: {e}");
            return;
        }
    };
    let principal = match tls.principal(&stream) {
        Ok(principal) => principal,
        Err(e) => {
            tracing::warn!(%peer, listener = %security.name, "closing TLS connection: {e}");
            return;
        }
    };
    tracing::debug!(%peer, listener = %security.name, principal, "TLS established");
    let session = Session { principal: Arc::from(principal), ..Session::default() };
    let (read_half, write_half) = tokio::io::split(stream);
    serve_stream(broker, read_half, write_half, peer, &security, session, shutdown).await;
}

/// The request loop over an established (plain or TLS) stream.
async fn serve_stream<R: AsyncRead + Unpin, W: ResponseWriter>(
    broker: Arc<Broker>,
    read_half: R,
    write_half: W,
    peer: SocketAddr,
    security: &ListenerSecurity,
    mut session: Session,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut reader = BufReader::with_capacity(IO_BUFFER_BYTES, read_half);
    let mut writer = BufWriter::with_capacity(IO_BUFFER_BYTES, write_half);
    let mut sasl = security.sasl.clone().map(SaslConnection::new);
    let max = broker.config().socket_request_max_bytes;
    loop {
        if let Some(muted) = session.mute.remaining() {
            // KIP-219: a throttled client's next request waits in its socket.
            if writer.flush().await.is_err() {
                break;
            }
            tokio::select! {
                biased;
                _ = crate::shutdown::stopped(&mut shutdown) => break,
                _ = tokio::time::sleep(muted) => {}
            }
        }
        let limit = sasl.as_ref().map_or(max, |sasl| sasl.max_frame_bytes(max));
        let frame = tokio::select! {
            biased;
            _ = crate::shutdown::stopped(&mut shutdown) => break,
            frame = read_frame(&mut reader, limit) => frame,
            // Kafka's idle expiry (`connections.max.idle.ms`); a frame
            // still arriving when the time is up counts as idle too.
            _ = tokio::time::sleep(security.max_idle) => {
                tracing::debug!(%peer, listener = %security.name, "closing idle connection");
                break;
            }
        };
        let frame = match frame {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(%peer, "closing connection: {e}");
                break;
            }
        };
        let frame = match sasl.as_mut() {
            None => frame,
            Some(sasl) => match sasl_step(sasl, frame, &mut session, &mut writer, peer, security).await {
                Next::Dispatch(frame) => frame,
                Next::ReadOn => continue,
                Next::Close => break,
            },
        };
        match dispatch::handle_frame(&broker, peer, &security.name, &session, frame).await {
            Ok(Some(response)) => {
                if let Err(e) = write_response(&mut writer, response, broker.config().zero_copy_fetch).await {
                    tracing::debug!(%peer, "write failed: {e}");
                    break;
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(%peer, "closing connection: {e}");
                break;
            }
        }
        if reader.buffer().is_empty() && writer.flush().await.is_err() {
            break;
        }
    }
    let _ = writer.flush().await;
    let _ = writer.shutdown().await;
    tracing::debug!(%peer, "connection closed");
}

/// What the connection does after the SASL exchange saw a frame.
enum Next {
    Dispatch(Bytes),
    ReadOn,
    Close,
}

/// Hands a frame to the SASL exchange and writes its answer; the
/// principal it authenticates is recorded on the session.
async fn sasl_step<W: AsyncWrite + Unpin>(
    sasl: &mut SaslConnection,
    frame: Bytes,
    session: &mut Session,
    writer: &mut BufWriter<W>,
    peer: SocketAddr,
    security: &ListenerSecurity,
) -> Next {
    let was_authenticated = sasl.is_authenticated();
    let had_principal = sasl.principal.is_some();
    let (answer, close) = match sasl.on_frame(frame) {
        Action::Dispatch(frame) => return Next::Dispatch(frame),
        Action::Reply(answer) => (answer, None),
        Action::ReplyAndClose(answer, reason) => (answer, Some(reason)),
        Action::Close(reason) => (Bytes::new(), Some(reason)),
    };
    if let Some(principal) =
        sasl.principal.as_deref().filter(|_| sasl.is_authenticated() && !was_authenticated)
    {
        let event = if had_principal { "SASL re-authenticated" } else { "SASL authenticated" };
        tracing::debug!(%peer, listener = %security.name, principal, "{event}");
        session.principal = Arc::from(principal);
    }
    let written = writer.write_all(&answer).await.is_ok() && writer.flush().await.is_ok();
    match close {
        Some(reason) => {
            tracing::info!(%peer, listener = %security.name, "closing connection: {reason}");
            Next::Close
        }
        None if written => Next::ReadOn,
        None => Next::Close,
    }
}

/// Where responses are written: a plaintext socket can take file ranges
/// by `sendfile`, a TLS stream must encrypt them in user space.
trait ResponseWriter: AsyncWrite + Unpin {
    fn zero_copy_socket(&self) -> Option<&TcpStream>;
}

impl ResponseWriter for OwnedWriteHalf {
    fn zero_copy_socket(&self) -> Option<&TcpStream> {
        Some(self.as_ref())
    }
}

impl ResponseWriter for WriteHalf<TlsStream<TcpStream>> {
    fn zero_copy_socket(&self) -> Option<&TcpStream> {
        None
    }
}

/// Writes a response's chunks in order: bytes through the buffer, file
/// ranges straight from the page cache to the socket (or, without
/// `zero_copy` or over TLS, through a userspace copy).
async fn write_response<W: ResponseWriter>(
    writer: &mut BufWriter<W>,
    chunks: Vec<Chunk>,
    zero_copy: bool,
) -> std::io::Result<()> {
    for chunk in chunks {
        match chunk {
            Chunk::Bytes(bytes) => writer.write_all(&bytes).await?,
            Chunk::File(slice) => {
                let sendfile = zero_copy
                    && slice.len > COPY_BELOW_BYTES
                    && writer.get_ref().zero_copy_socket().is_some();
                if !sendfile {
                    copy_file(writer, &slice).await?;
                    continue;
                }
                writer.flush().await?;
                if let Some(socket) = writer.get_ref().zero_copy_socket() {
                    send_file(socket, &slice).await?;
                }
            }
        }
    }
    Ok(())
}

/// Copies a file range to the socket a step at a time, so a large response
/// to a client that reads slowly (or never) holds one step of memory, not
/// the whole range.
async fn copy_file<W: AsyncWrite + Unpin>(
    writer: &mut BufWriter<W>,
    slice: &FileSlice,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; slice.len.min(COPY_STEP_BYTES)];
    let mut copied = 0;
    while copied < slice.len {
        let step = (slice.len - copied).min(buf.len());
        slice.file.read_exact_at(&mut buf[..step], slice.position + copied as u64)?;
        writer.write_all(&buf[..step]).await?;
        copied += step;
    }
    Ok(())
}

/// `sendfile(2)` of a file range to the socket, waiting for writability.
async fn send_file(stream: &TcpStream, slice: &FileSlice) -> std::io::Result<()> {
    let mut offset = slice.position as libc::off_t;
    let end = slice.position as libc::off_t + slice.len as libc::off_t;
    while offset < end {
        stream.writable().await?;
        let sent = stream.try_io(Interest::WRITABLE, || {
            let count = (end - offset) as usize;
            // SAFETY: both descriptors are open for the duration of the call
            // (the socket is borrowed, the file is held by its Arc), and
            // `offset` is a valid, exclusively borrowed off_t.
            #[allow(unsafe_code)]
            let sent =
                unsafe { libc::sendfile(stream.as_raw_fd(), slice.file.as_raw_fd(), &mut offset, count) };
            if sent < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(sent)
            }
        });
        match sent {
            // The file ended early: it was truncated under us.
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_frames_and_rejects_bad_sizes() {
        let mut input: &[u8] = &[0, 0, 0, 3, b'a', b'b', b'c'];
        assert_eq!(read_frame(&mut input, 100).await.unwrap().unwrap(), Bytes::from_static(b"abc"));
        assert!(read_frame(&mut input, 100).await.unwrap().is_none());

        let mut huge: &[u8] = &0x7fff_ffffi32.to_be_bytes();
        assert!(matches!(read_frame(&mut huge, 100).await, Err(FrameError::BadSize { .. })));
        let mut negative: &[u8] = &(-1i32).to_be_bytes();
        assert!(matches!(read_frame(&mut negative, 100).await, Err(FrameError::BadSize { .. })));
        let mut truncated: &[u8] = &[0, 0, 0, 9, 1, 2];
        assert!(matches!(read_frame(&mut truncated, 100).await, Err(FrameError::Truncated)));
    }
}
