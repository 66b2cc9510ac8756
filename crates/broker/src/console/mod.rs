//! The web console (`console.listener=http://HOST:PORT`): what teams install
//! AKHQ or Kafka UI for, served by the broker itself.
//!
//! - [`http`] reads one bounded request per connection and writes the answer;
//! - [`auth`] authenticates (`console.auth`) and checks the CSRF token of
//!   every action; [`config`] reads the `console.*` keys;
//! - [`pages`] renders one module per page (overview, topics, messages,
//!   groups, broker) from Kafka requests that [`kafka`] hands to the same
//!   handlers Kafka clients reach, so the console and the admin tools agree;
//! - [`history`] samples the broker's metrics into an hour-long ring that
//!   [`svg`] draws as plots; [`html`] escapes and frames every page;
//! - `assets/` holds the stylesheet and the little script that refreshes
//!   the live parts of a page, embedded in the binary.
//!
//! Pages are rendered on the blocking pool: reading a partition for the
//! message browser touches the disk.

pub mod auth;
pub mod config;
pub mod history;
pub mod html;
pub mod http;
pub mod kafka;
pub mod pages;
pub mod svg;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

pub use config::ConsoleConfig;

use crate::server::Broker;
use auth::{Auth, CSRF_FIELD};
use history::History;
use http::{ReadError, Request, Response};

/// Connections served at once; more wait in the accept queue.
const MAX_CONNECTIONS: usize = 64;
/// Connections one address (an IPv6 /64) may hold at once (a browser opens
/// six), so that one peer trickling requests in cannot take every slot above.
const MAX_CONNECTIONS_PER_PEER: usize = 16;

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

/// The console's shared state.
pub struct Console {
    broker: Arc<Broker>,
    history: Arc<History>,
    auth: Auth,
}

/// Serves the console on `listener` until the broker stops.
pub async fn serve(broker: Arc<Broker>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
    let config = broker.config().console.clone();
    let history = Arc::new(History::new(config.sample_ms));
    let sampler =
        tokio::spawn(history::run_sampler(broker.clone(), history.clone(), config.sample_ms, stop.clone()));
    let console = Arc::new(Console { broker, history, auth: config.auth });
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let peers = Arc::new(Peers::default());
    loop {
        let permit = tokio::select! {
            biased;
            _ = crate::shutdown::stopped(&mut stop) => break,
            permit = permits.clone().acquire_owned() => permit,
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            biased;
            _ = crate::shutdown::stopped(&mut stop) => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let Some(admitted) = Peers::admit(&peers, peer.ip()) else {
                    tracing::debug!(%peer, "console connection refused: too many from this address");
                    continue;
                };
                let console = console.clone();
                tokio::spawn(async move {
                    console.connection(stream, peer).await;
                    drop((admitted, permit));
                });
            }
            Err(e) => {
                tracing::warn!("console accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let _ = sampler.await;
}

/// Open connections per peer address (see [`peer_key`]).
#[derive(Default)]
struct Peers(Mutex<HashMap<IpAddr, usize>>);

/// One admitted connection; dropping it frees its peer's slot.
struct Admitted {
    peers: Arc<Peers>,
    ip: IpAddr,
}

impl Peers {
    fn admit(peers: &Arc<Self>, ip: IpAddr) -> Option<Admitted> {
        let ip = peer_key(ip);
        let mut open = peers.0.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(ip).or_default();
        if *count >= MAX_CONNECTIONS_PER_PEER {
            return None;
        }
        *count += 1;
        Some(Admitted { peers: peers.clone(), ip })
    }
}

/// The address a peer's connections count against: an IPv6 host usually
/// holds a whole /64, while an IPv4 address mapped into IPv6 is its own.
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !(u64::MAX as u128))),
        },
        v4 => v4,
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.peers.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

impl Console {
    async fn connection(self: Arc<Self>, mut stream: TcpStream, peer: SocketAddr) {
        let response = match http::read_request(&mut stream).await {
            Ok(request) => self.answer(request, peer).await,
            Err(ReadError::Closed) => return,
            Err(ReadError::Refused(status, reason)) => Response::text(status, reason),
        };
        if let Err(e) = http::write_response(&mut stream, &secured(response)).await {
            tracing::debug!(%peer, "console response not written: {e}");
        }
    }

    async fn answer(self: Arc<Self>, request: Request, peer: SocketAddr) -> Response {
        let user = match self.auth.authenticate(&request) {
            Ok(user) => user,
            Err(challenge) => return challenge,
        };
        match (request.method.as_str(), request.path.as_str()) {
            ("GET", "/assets/console.css") => return asset("text/css; charset=utf-8", CSS),
            ("GET", "/assets/console.js") => return asset("text/javascript; charset=utf-8", JS),
            ("GET" | "POST", _) => {}
            _ => return Response::text(405, "only GET and POST").with_header("Allow", "GET, POST".into()),
        }
        let (csrf, fresh) = auth::csrf_token(&request);
        if request.method == "POST"
            && !auth::csrf_ok(&request, request.form().get(CSRF_FIELD).map_or("", String::as_str))
        {
            return Response::text(403, "missing or wrong CSRF token: reload the page and try again");
        }
        let client_host = format!("/{}", peer.ip());
        let console = self.clone();
        let rendered = tokio::task::spawn_blocking(move || {
            let page =
                pages::Page::new(&console.broker, &console.history, &request, &csrf, &user, client_host);
            (pages::route(&page), csrf)
        })
        .await;
        match rendered {
            Ok((response, csrf)) if fresh => response.with_header("Set-Cookie", auth::csrf_cookie(&csrf)),
            Ok((response, _)) => response,
            Err(e) => {
                tracing::error!("console page failed: {e}");
                Response::text(500, "the page failed; see the broker log")
            }
        }
    }
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    Response::new(200, content_type, body.as_bytes().to_vec())
        .with_header("Cache-Control", "max-age=3600".into())
}

/// Headers that keep a page's content from running anything but our own
/// script, and the page itself out of other sites' frames.
fn secured(response: Response) -> Response {
    let cached = response.headers.iter().any(|(name, _)| *name == "Cache-Control");
    let response = if cached { response } else { response.with_header("Cache-Control", "no-store".into()) };
    response
        .with_header(
            "Content-Security-Policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'".into(),
        )
        .with_header("X-Content-Type-Options", "nosniff".into())
        .with_header("X-Frame-Options", "DENY".into())
        .with_header("Referrer-Policy", "same-origin".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_holds_a_bounded_number_of_connections() {
        let peers = Arc::new(Peers::default());
        let (one, two): (IpAddr, IpAddr) = ("127.0.0.2".parse().unwrap(), "127.0.0.1".parse().unwrap());
        let held: Vec<Admitted> =
            (0..MAX_CONNECTIONS_PER_PEER).map(|_| Peers::admit(&peers, one).unwrap()).collect();
        assert!(Peers::admit(&peers, one).is_none());
        assert!(Peers::admit(&peers, two).is_some(), "another address is served");
        drop(held);
        assert!(Peers::admit(&peers, one).is_some(), "slots come back");
        assert!(peers.0.lock().unwrap().get(&two).is_none(), "closed peers are forgotten");
    }

    #[test]
    fn an_ipv6_64_is_one_peer_and_a_mapped_ipv4_address_its_own() {
        let key = |text: &str| peer_key(text.parse().unwrap());
        assert_eq!(key("2001:db8:0:1::1"), key("2001:db8:0:1:ffff::2"));
        assert_ne!(key("2001:db8:0:1::1"), key("2001:db8:0:2::1"));
        assert_ne!(key("::ffff:10.0.0.1"), key("::ffff:10.0.0.2"));
        assert_eq!(key("::ffff:10.0.0.1"), key("10.0.0.1"));
    }
}
