//! The controller listeners while a KRaft node catches up with the
//! metadata log: only the quorum's own requests are answered (the quorum
//! needs this node's votes and fetches answered before it can commit
//! anything), over TLS and behind SASL as the listener asks. With an
//! authorizer, only super users are answered: the ACLs are not known
//! before the log is, and Kafka's authorizer too serves only super users
//! until it has loaded them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use strom_quorum::listener::{serve_gated, Gate};
use strom_quorum::Quorum;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

use crate::config::BrokerConfig;
use crate::security::sasl::{Action, SaslConnection};
use crate::security::{ListenerSecurity, ANONYMOUS};

/// Serves the KRaft APIs on `listener`'s new connections, until dropped.
pub async fn answer(
    listener: &TcpListener,
    security: Arc<ListenerSecurity>,
    config: Arc<BrokerConfig>,
    quorum: Quorum,
) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                let peer = Peer { address: peer, security: security.clone(), config: config.clone() };
                tokio::spawn(peer.serve(stream, quorum.clone()));
            }
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// One connected quorum peer.
struct Peer {
    address: SocketAddr,
    security: Arc<ListenerSecurity>,
    config: Arc<BrokerConfig>,
}

impl Peer {
    async fn serve(self, stream: TcpStream, quorum: Quorum) {
        let Some(tls) = self.security.tls.clone() else {
            return self.serve_stream(stream, ANONYMOUS.to_owned(), quorum).await;
        };
        let stream = match tls.accept(stream).await {
            Ok(stream) => stream,
            Err(e) => {
                self.refuse(&format!("TLS handshake failed: {e}"));
                return;
            }
        };
        match tls.principal(&stream) {
            Ok(principal) => self.serve_stream(stream, principal, quorum).await,
            Err(e) => {
                self.refuse(&e);
            }
        }
    }

    /// Serves an established stream whose TLS peer (if any) is `principal`;
    /// SASL, when the listener asks for it, names the peer instead.
    async fn serve_stream<S: AsyncRead + AsyncWrite + Unpin>(
        self,
        stream: S,
        principal: String,
        quorum: Quorum,
    ) {
        let mut sasl = self.security.sasl.clone().map(SaslConnection::new);
        serve_gated(stream, quorum, move |frame| {
            let Some(sasl) = sasl.as_mut() else { return self.authorized(frame, &principal) };
            match sasl.on_frame(frame) {
                Action::Dispatch(frame) if sasl.is_authenticated() => {
                    let principal = sasl.principal.clone().unwrap_or_else(|| ANONYMOUS.to_owned());
                    self.authorized(frame, &principal)
                }
                Action::Dispatch(_) => self.refuse("a request before SASL authentication"),
                Action::Reply(answer) => Gate::Reply(answer),
                Action::ReplyAndClose(answer, reason) => {
                    self.refuse(&reason);
                    Gate::ReplyAndClose(answer)
                }
                Action::Close(reason) => self.refuse(&reason),
            }
        })
        .await
    }

    /// `frame` for the quorum, if `principal` may send it now.
    fn authorized(&self, frame: bytes::Bytes, principal: &str) -> Gate {
        let authorizer = &self.config.authorizer;
        if !authorizer.enabled || authorizer.super_users.contains(principal) {
            return Gate::Answer(frame);
        }
        self.refuse(&format!(
            "{principal} is not a super user, and ACLs are not loaded before the metadata log"
        ))
    }

    fn refuse(&self, reason: &str) -> Gate {
        let listener = &self.security.name;
        tracing::warn!(peer = %self.address, %listener, "closing a quorum peer's connection: {reason}");
        Gate::Close
    }
}
