//! A small HTTP/1.1 server side: one request per connection, every read
//! bounded in size and time.
//!
//! The console serves a handful of pages to a browser; keep-alive, chunked
//! bodies and pipelining buy nothing there, and refusing them keeps the
//! parser short enough to check by eye. A request head is at most
//! [`MAX_HEAD_BYTES`], a body at most [`MAX_BODY_BYTES`] and must declare its
//! length; the whole request must arrive within [`READ_TIMEOUT`].

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const MAX_HEAD_BYTES: usize = 16 * 1024;
pub const MAX_BODY_BYTES: usize = 256 * 1024;
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// A parsed request.
#[derive(Debug, Default)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: BTreeMap<String, String>,
    /// Header names lowercased; a repeated header keeps its last value.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// A query parameter, empty when absent.
    pub fn param(&self, name: &str) -> &str {
        self.query.get(name).map_or("", String::as_str)
    }

    /// The body as an `application/x-www-form-urlencoded` form.
    pub fn form(&self) -> BTreeMap<String, String> {
        parse_urlencoded(&String::from_utf8_lossy(&self.body))
    }

    /// The value of one cookie.
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.header("cookie")?
            .split(';')
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value)
    }
}

/// Why a request was refused before it reached a page.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The peer closed or sent nothing usable; nothing is answered.
    Closed,
    /// Answered with this status and reason.
    Refused(u16, &'static str),
}

/// A response: status, extra headers, body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn new(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Self {
        Self { status, content_type, headers: Vec::new(), body: body.into() }
    }

    pub fn html(status: u16, body: String) -> Self {
        Self::new(status, "text/html; charset=utf-8", body)
    }

    pub fn text(status: u16, body: &str) -> Self {
        Self::new(status, "text/plain; charset=utf-8", body.as_bytes().to_vec())
    }

    /// A 303 to `location`, the answer to a form post that worked.
    pub fn see_other(location: String) -> Self {
        Self::text(303, "see other").with_header("Location", location)
    }

    pub fn with_header(mut self, name: &'static str, value: String) -> Self {
        self.headers.push((name, value));
        self
    }
}

pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// Reads one request, within the size and time bounds.
pub async fn read_request(stream: &mut TcpStream) -> Result<Request, ReadError> {
    match tokio::time::timeout(READ_TIMEOUT, read_unbounded_in_time(stream)).await {
        Ok(read) => read,
        Err(_) => Err(ReadError::Refused(408, "the request did not arrive in time")),
    }
}

async fn read_unbounded_in_time(stream: &mut TcpStream) -> Result<Request, ReadError> {
    let mut buf = Vec::with_capacity(2048);
    // Where the blank line may still start: a head trickling in a byte at a
    // time is searched once, not once per byte.
    let mut unsearched = 0;
    let head_end = loop {
        if let Some(at) = find_head_end(&buf[unsearched..]) {
            break unsearched + at;
        }
        unsearched = buf.len().saturating_sub(3);
        if buf.len() >= MAX_HEAD_BYTES {
            return Err(ReadError::Refused(431, "request head too large"));
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.map_err(|_| ReadError::Closed)?;
        if n == 0 {
            return Err(ReadError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    if head_end > MAX_HEAD_BYTES {
        return Err(ReadError::Refused(431, "request head too large"));
    }
    let mut request = parse_head(&buf[..head_end])?;
    let length = body_length(&request)?;
    let mut body = buf.split_off(head_end + 4);
    if body.len() > length {
        return Err(ReadError::Refused(400, "more bytes than Content-Length"));
    }
    while body.len() < length {
        let mut chunk = vec![0u8; (length - body.len()).min(16 * 1024)];
        let n = stream.read(&mut chunk).await.map_err(|_| ReadError::Closed)?;
        if n == 0 {
            return Err(ReadError::Closed);
        }
        body.extend_from_slice(&chunk[..n]);
    }
    request.body = body;
    Ok(request)
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

fn body_length(request: &Request) -> Result<usize, ReadError> {
    if request.header("transfer-encoding").is_some() {
        return Err(ReadError::Refused(501, "chunked bodies are not accepted; send Content-Length"));
    }
    let Some(raw) = request.header("content-length") else {
        return match request.method.as_str() {
            "POST" => Err(ReadError::Refused(411, "a POST needs Content-Length")),
            _ => Ok(0),
        };
    };
    // Digits only: `+5` or `0x5` may mean a length to a proxy in front.
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ReadError::Refused(400, "bad Content-Length"));
    }
    let length = raw.parse().unwrap_or(usize::MAX);
    if length > MAX_BODY_BYTES {
        return Err(ReadError::Refused(413, "request body too large"));
    }
    Ok(length)
}

/// Headers whose repetition makes a request ambiguous (RFC 9112): which
/// length or host a proxy in front used is unknown.
const SINGLE_HEADERS: &[&str] = &["content-length", "host", "transfer-encoding"];

/// Parses the request line and headers (without the blank line).
pub fn parse_head(head: &[u8]) -> Result<Request, ReadError> {
    let bad = ReadError::Refused(400, "malformed request head");
    let text = std::str::from_utf8(head).map_err(|_| ReadError::Refused(400, "request head is not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (request_line.next(), request_line.next(), request_line.next(), request_line.next())
    else {
        return Err(bad);
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') || method.is_empty() {
        return Err(bad);
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut headers = BTreeMap::new();
    for line in lines {
        let (name, value) = line.split_once(':').ok_or(ReadError::Refused(400, "malformed header"))?;
        // A bare CR or LF inside a line ends it for some proxies and not for us.
        let control = |c: char| c.is_control() && c != '\t';
        if name.is_empty() || name.contains(char::is_whitespace) || value.contains(control) {
            return Err(ReadError::Refused(400, "malformed header"));
        }
        let name = name.to_ascii_lowercase();
        if SINGLE_HEADERS.contains(&name.as_str()) && headers.contains_key(&name) {
            return Err(ReadError::Refused(400, "a header that may appear once appears twice"));
        }
        headers.insert(name, value.trim().to_owned());
    }
    Ok(Request {
        method: method.to_owned(),
        path: percent_decode(path),
        query: parse_urlencoded(query),
        headers,
        body: Vec::new(),
    })
}

/// Writes the response and closes the connection.
pub async fn write_response(stream: &mut TcpStream, response: &Response) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        response.status,
        reason_phrase(response.status),
        response.content_type,
        response.body.len()
    );
    for (name, value) in &response.headers {
        // Header values are ours, but never let one split the head.
        let value: String = value.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(&response.body).await?;
        stream.shutdown().await
    };
    tokio::time::timeout(WRITE_TIMEOUT, write)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

/// `a=1&b=x+y` into a map; the last of repeated keys wins.
pub fn parse_urlencoded(text: &str) -> BTreeMap<String, String> {
    text.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(&key.replace('+', " ")), percent_decode(&value.replace('+', " ")))
        })
        .collect()
}

/// Decodes `%XX` escapes; invalid escapes stay as they are, invalid UTF-8
/// becomes U+FFFD.
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|b| (*b as char).to_digit(16));
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (byte, ..) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Escapes everything but unreserved characters, for query values.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(byte as char),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_head_is_parsed_with_its_query() {
        let head = b"GET /topic?name=a%2Eb&x=1+2 HTTP/1.1\r\nHost: h\r\nCookie: a=1; strom=z";
        let request = parse_head(head).unwrap();
        assert_eq!((request.method.as_str(), request.path.as_str()), ("GET", "/topic"));
        assert_eq!(request.param("name"), "a.b");
        assert_eq!(request.param("x"), "1 2");
        assert_eq!(request.header("host"), Some("h"));
        assert_eq!(request.cookie("strom"), Some("z"));
        assert_eq!(request.cookie("b"), None);
    }

    #[test]
    fn malformed_heads_are_refused() {
        for head in [
            &b"GET"[..],
            b"GET / HTTP/1.1 extra",
            b"GET nopath HTTP/1.1",
            b"GET / SPDY",
            b"GET / HTTP/1.1\r\nno colon",
            b"GET / HTTP/1.1\r\nX-A: a\nContent-Length: 5",
            b"GET / HTTP/1.1\r\nX-A: a\rb",
            b"GET / HTTP/1.1\r\nX-A: a\x00b",
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 50",
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 5",
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: b",
        ] {
            assert!(matches!(parse_head(head), Err(ReadError::Refused(400, _))), "{head:?}");
        }
    }

    #[test]
    fn percent_coding_round_trips_and_tolerates_bad_escapes() {
        let text = "a b/ü&=%";
        assert_eq!(percent_decode(&percent_encode(text)), text);
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("%ff"), "\u{fffd}");
    }

    #[test]
    fn bodies_must_declare_a_bounded_length() {
        let post = |headers: &str| {
            let head = format!("POST / HTTP/1.1\r\n{headers}");
            body_length(&parse_head(head.trim_end().as_bytes()).unwrap())
        };
        assert_eq!(post(""), Err(ReadError::Refused(411, "a POST needs Content-Length")));
        assert_eq!(post("Content-Length: 12"), Ok(12));
        assert!(matches!(
            post(&format!("Content-Length: {}", MAX_BODY_BYTES + 1)),
            Err(ReadError::Refused(413, _))
        ));
        assert!(matches!(post("Transfer-Encoding: chunked"), Err(ReadError::Refused(501, _))));
        for bad in ["+5", "-1", "0x5", "5 5", "5,5", ""] {
            assert_eq!(
                post(&format!("Content-Length: {bad}")),
                Err(ReadError::Refused(400, "bad Content-Length"))
            );
        }
        assert!(matches!(post("Content-Length: 99999999999999999999999"), Err(ReadError::Refused(413, _))));
        assert_eq!(post("Content-Length: 007"), Ok(7));
    }
}
