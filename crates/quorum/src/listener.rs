//! A bare listener that answers only the KRaft APIs (Vote,
//! BeginQuorumEpoch, EndQuorumEpoch, Fetch of `__cluster_metadata`,
//! FetchSnapshot, and KIP-853's AddRaftVoter, RemoveRaftVoter,
//! UpdateRaftVoter) for a [`Quorum`]: for tests and tools that run a quorum
//! without a broker. The broker serves these APIs from its own listeners
//! through [`Quorum::handle_request`].
//!
//! Requests on one connection are answered one at a time, in order, as
//! Kafka answers them; anything else closes the connection. A [`Gate`]
//! may see every frame first (the broker's SASL exchange on a secured
//! controller listener while it catches up).

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    AddRaftVoterRequest, ApiKey, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest,
    FetchSnapshotRequest, RemoveRaftVoterRequest, RequestHeader, ResponseHeader, UpdateRaftVoterRequest,
    VoteRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use strom_raft::wire::{WireRequest, WireResponse};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::Quorum;

/// Request frames larger than this close the connection.
const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// Accepts connections on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, quorum: Quorum) {
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve_connection(stream, quorum.clone()));
    }
}

/// What a gate lets happen to a request frame.
pub enum Gate {
    /// The quorum answers it.
    Answer(Bytes),
    /// Write this (size-prefixed) answer instead and read on.
    Reply(Bytes),
    /// Write this answer, then close.
    ReplyAndClose(Bytes),
    /// Close at once.
    Close,
}

/// Answers the KRaft requests of one accepted connection until it closes.
pub async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(stream: S, quorum: Quorum) {
    serve_gated(stream, quorum, Gate::Answer).await
}

/// Answers the KRaft requests `gate` lets through until the connection closes.
pub async fn serve_gated<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    quorum: Quorum,
    mut gate: impl FnMut(Bytes) -> Gate,
) {
    loop {
        let Ok(size) = stream.read_i32().await else { return };
        let Ok(size) = usize::try_from(size) else { return };
        if size > MAX_REQUEST_BYTES {
            return;
        }
        let mut frame = vec![0; size];
        if stream.read_exact(&mut frame).await.is_err() {
            return;
        }
        let (response, close) = match gate(Bytes::from(frame)) {
            Gate::Answer(frame) => match answer(&quorum, frame).await {
                Some(response) => (response, false),
                None => return,
            },
            Gate::Reply(response) => (response, false),
            Gate::ReplyAndClose(response) => (response, true),
            Gate::Close => return,
        };
        if stream.write_all(&response).await.is_err() || close {
            let _ = stream.shutdown().await;
            return;
        }
    }
}

/// The response frame to one request frame; None closes the connection.
async fn answer(quorum: &Quorum, mut frame: Bytes) -> Option<Bytes> {
    let api_key = ApiKey::try_from(i16::from_be_bytes([*frame.first()?, *frame.get(1)?])).ok()?;
    let version = i16::from_be_bytes([*frame.get(2)?, *frame.get(3)?]);
    let header = RequestHeader::decode(&mut frame, api_key.request_header_version(version)).ok()?;
    let request = decode_request(api_key, &mut frame, version)?;
    let response = quorum.handle_request(request, version).await.ok()?;
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    let response_header = ResponseHeader::default().with_correlation_id(header.correlation_id);
    response_header.encode(&mut buf, api_key.response_header_version(version)).ok()?;
    encode_response(&response, &mut buf, version)?;
    let size = i32::try_from(buf.len() - 4).ok()?;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Some(buf.freeze())
}

/// The KRaft request in `body`, if `api_key` is one.
pub fn decode_request(api_key: ApiKey, body: &mut Bytes, version: i16) -> Option<WireRequest> {
    Some(match api_key {
        ApiKey::Vote => WireRequest::Vote(VoteRequest::decode(body, version).ok()?),
        ApiKey::BeginQuorumEpoch => {
            WireRequest::BeginQuorumEpoch(BeginQuorumEpochRequest::decode(body, version).ok()?)
        }
        ApiKey::EndQuorumEpoch => {
            WireRequest::EndQuorumEpoch(EndQuorumEpochRequest::decode(body, version).ok()?)
        }
        ApiKey::Fetch => WireRequest::Fetch(FetchRequest::decode(body, version).ok()?),
        ApiKey::FetchSnapshot => {
            WireRequest::FetchSnapshot(FetchSnapshotRequest::decode(body, version).ok()?)
        }
        ApiKey::AddRaftVoter => WireRequest::AddRaftVoter(AddRaftVoterRequest::decode(body, version).ok()?),
        ApiKey::RemoveRaftVoter => {
            WireRequest::RemoveRaftVoter(RemoveRaftVoterRequest::decode(body, version).ok()?)
        }
        ApiKey::UpdateRaftVoter => {
            WireRequest::UpdateRaftVoter(UpdateRaftVoterRequest::decode(body, version).ok()?)
        }
        _ => return None,
    })
}

/// Encodes a KRaft response's body at `version`.
pub fn encode_response(response: &WireResponse, buf: &mut BytesMut, version: i16) -> Option<()> {
    match response {
        WireResponse::Vote(r) => r.encode(buf, version),
        WireResponse::BeginQuorumEpoch(r) => r.encode(buf, version),
        WireResponse::EndQuorumEpoch(r) => r.encode(buf, version),
        WireResponse::Fetch(r) => r.encode(buf, version),
        WireResponse::FetchSnapshot(r) => r.encode(buf, version),
        WireResponse::AddRaftVoter(r) => r.encode(buf, version),
        WireResponse::RemoveRaftVoter(r) => r.encode(buf, version),
        WireResponse::UpdateRaftVoter(r) => r.encode(buf, version),
    }
    .ok()
}
