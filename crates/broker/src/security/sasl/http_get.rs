//! The one HTTP request the broker makes: a GET of a JWKS document over
//! HTTP/1.1, in plain text or TLS (rustls), on tokio. Bounded in time and
//! size; the answer must be `200` with a `Content-Length`, chunked, or
//! closed body.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// A JWKS larger than this is refused.
const MAX_RESPONSE_BYTES: usize = 1 << 20;
/// The whole exchange, connect to last byte, within this time.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// An `http://` or `https://` URL, split as a GET needs it.
#[derive(Debug, Clone)]
pub struct HttpUrl {
    pub https: bool,
    pub host: String,
    pub port: u16,
    /// Path and query, `/` when the URL has none.
    pub path: String,
}

impl HttpUrl {
    /// `None` when `url` is not http(s); an error when it is, but broken.
    pub fn parse(url: &str) -> Option<Result<Self, String>> {
        let (https, rest) = match url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => (true, rest),
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => (false, rest),
            _ => return None,
        };
        Some(Self::split(https, rest).ok_or_else(|| format!("{url:?} is not a valid URL")))
    }

    fn split(https: bool, rest: &str) -> Option<Self> {
        let (authority, path) = rest.find(['/', '?']).map_or((rest, "/"), |at| rest.split_at(at));
        let path = if path.starts_with('?') { format!("/{path}") } else { path.to_owned() };
        let (host, port) = match authority.rsplit_once(':').filter(|(_, p)| !p.contains(']')) {
            Some((host, port)) => (host, port.parse().ok()?),
            None => (authority, if https { 443 } else { 80 }),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let valid = !host.is_empty() && !host.contains(['@', ' ']) && !path.contains([' ', '\r', '\n']);
        valid.then(|| Self { https, host: host.to_owned(), port, path })
    }
}

/// A TLS client config that trusts `roots`.
pub fn tls_connector(roots: RootCertStore) -> Result<TlsConnector, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// GETs `url` and returns the body of its `200` answer.
pub async fn get(url: &HttpUrl, tls: Option<&TlsConnector>) -> Result<Vec<u8>, String> {
    tokio::time::timeout(EXCHANGE_TIMEOUT, exchange(url, tls))
        .await
        .map_err(|_| format!("no answer within {} s", EXCHANGE_TIMEOUT.as_secs()))?
}

async fn exchange(url: &HttpUrl, tls: Option<&TlsConnector>) -> Result<Vec<u8>, String> {
    let tcp = TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|e| format!("cannot connect to {}:{}: {e}", url.host, url.port))?;
    let raw = match (url.https, tls) {
        (false, _) => round_trip(tcp, url).await?,
        (true, None) => return Err("an https URL needs a trust store".into()),
        (true, Some(connector)) => {
            let name = ServerName::try_from(url.host.clone()).map_err(|e| format!("{}: {e}", url.host))?;
            let stream =
                connector.connect(name, tcp).await.map_err(|e| format!("TLS with {}: {e}", url.host))?;
            round_trip(stream, url).await?
        }
    };
    parse_response(&raw)
}

/// Sends the request and reads the answer until the server closes.
async fn round_trip<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    url: &HttpUrl,
) -> Result<Vec<u8>, String> {
    let host = if url.host.contains(':') { format!("[{}]", url.host) } else { url.host.clone() };
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {host}:{}\r\nAccept: application/json\r\nUser-Agent: strom\r\nConnection: close\r\n\r\n",
        url.path, url.port
    );
    stream.write_all(request.as_bytes()).await.map_err(|e| format!("sending the request: {e}"))?;
    stream.flush().await.map_err(|e| format!("sending the request: {e}"))?;
    let mut raw = Vec::new();
    let mut limited = (&mut stream).take(MAX_RESPONSE_BYTES as u64 + 1);
    match limited.read_to_end(&mut raw).await {
        Ok(_) => {}
        // Servers that close without TLS's close_notify: the framing
        // (Content-Length or the last chunk) says whether all arrived.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(e) => return Err(format!("reading the answer: {e}")),
    }
    if raw.len() > MAX_RESPONSE_BYTES {
        return Err(format!("the answer is larger than {MAX_RESPONSE_BYTES} bytes"));
    }
    Ok(raw)
}

/// The body of a `200` answer, after its framing.
fn parse_response(raw: &[u8]) -> Result<Vec<u8>, String> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or("the answer has no complete header")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "the answer's header is not text")?;
    let body = &raw[end + 4..];
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or("");
    let code = status.split_whitespace().nth(1).unwrap_or("");
    if !status.starts_with("HTTP/1.") || code != "200" {
        return Err(format!("the server answered {status:?}"));
    }
    let header = |name: &str| {
        lines.clone().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim().eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
        })
    };
    if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        return dechunk(body);
    }
    match header("content-length") {
        Some(length) => {
            let length: usize = length.parse().map_err(|_| format!("bad Content-Length {length:?}"))?;
            body.get(..length).map(<[u8]>::to_vec).ok_or_else(|| "the answer was cut short".into())
        }
        None => Ok(body.to_vec()),
    }
}

/// A chunked body's data; an error unless the last (empty) chunk arrived.
fn dechunk(mut body: &[u8]) -> Result<Vec<u8>, String> {
    let mut data = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n").ok_or("a chunk was cut short")?;
        let size_text = std::str::from_utf8(&body[..line_end]).map_err(|_| "bad chunk size")?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size =
            usize::from_str_radix(size_text, 16).map_err(|_| format!("bad chunk size {size_text:?}"))?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Ok(data);
        }
        let chunk = body.get(..size).ok_or("a chunk was cut short")?;
        data.extend_from_slice(chunk);
        body = body.get(size + 2..).ok_or("a chunk was cut short")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_host_port_and_path() {
        let url = HttpUrl::parse("https://127.0.0.1:8443/.well-known/jwks.json").unwrap().unwrap();
        assert!(url.https);
        assert_eq!(
            (url.host.as_str(), url.port, url.path.as_str()),
            ("127.0.0.1", 8443, "/.well-known/jwks.json")
        );
        let url = HttpUrl::parse("http://idp.example?x=1").unwrap().unwrap();
        assert_eq!((url.host.as_str(), url.port, url.path.as_str()), ("idp.example", 80, "/?x=1"));
        let url = HttpUrl::parse("HTTPS://[::1]/keys").unwrap().unwrap();
        assert_eq!((url.host.as_str(), url.port), ("::1", 443));
        assert!(HttpUrl::parse("file:///tmp/jwks.json").is_none());
        assert!(HttpUrl::parse("https://host:notaport/").unwrap().is_err());
        assert!(HttpUrl::parse("https:///path").unwrap().is_err());
    }

    #[test]
    fn responses_are_read_by_their_framing() {
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbodyEXTRA";
        assert_eq!(parse_response(plain).unwrap(), b"body");
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked).unwrap(), b"abcde");
        let closed = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{}";
        assert_eq!(parse_response(closed).unwrap(), b"{}");
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort").is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n").is_err());
        assert!(parse_response(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n").is_err());
        assert!(parse_response(b"garbage").is_err());
    }
}
