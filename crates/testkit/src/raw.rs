//! A backend that records every request exactly as it arrived on the wire: the raw request line and header lines, byte for byte, not a parser's view of them.
//!
//! It reads the head up to the blank line itself and keeps those bytes; a parser is used only
//! to learn where the body ends (Content-Length or chunked). Each request is answered `200`
//! with a JSON description (`request_line`, `headers` as `[name, value]` pairs in the order
//! received, `body_bytes`, `connection`), and the test can read the log of every request,
//! including ones whose body never completed.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::listener::serve_connections;

/// A request head larger than this is refused (the connection is closed).
const MAX_HEAD: usize = 256 * 1024;

/// One request as the backend received it.
#[derive(Clone, Debug)]
pub struct RawRequest {
    /// The head as received, up to and including the blank line (lossy UTF-8).
    pub head: String,
    pub body: Vec<u8>,
    /// Whether the whole body arrived (a request aborted mid-body is logged with `false`).
    pub complete: bool,
    /// Which connection carried it, counting accepted connections from 1.
    pub connection: u64,
}

impl RawRequest {
    /// The request line as received, without its CRLF.
    pub fn request_line(&self) -> &str {
        self.lines().next().unwrap_or("")
    }

    /// The header lines as received, without their CRLFs.
    pub fn header_lines(&self) -> impl Iterator<Item = &str> {
        self.lines().skip(1).take_while(|line| !line.is_empty())
    }

    /// Every value of header `name` (compared case-insensitively), in the order received,
    /// with the whitespace around it trimmed.
    pub fn header_values(&self, name: &str) -> Vec<&str> {
        self.header_lines()
            .filter_map(|line| line.split_once(':'))
            .filter(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.trim_matches([' ', '\t']))
            .collect()
    }

    /// The value of header `name` when it was sent exactly once.
    pub fn header(&self, name: &str) -> Option<&str> {
        match self.header_values(name).as_slice() {
            [only] => Some(only),
            _ => None,
        }
    }

    fn lines(&self) -> impl Iterator<Item = &str> {
        self.head.split("\r\n")
    }

    fn describe(&self) -> String {
        let headers: Vec<serde_json::Value> = self
            .header_lines()
            .map(|line| {
                let (name, value) = line.split_once(':').unwrap_or((line, ""));
                serde_json::json!([name, value.trim_matches([' ', '\t'])])
            })
            .collect();
        serde_json::json!({
            "request_line": self.request_line(),
            "headers": headers,
            "body_bytes": self.body.len(),
            "connection": self.connection,
        })
        .to_string()
    }
}

/// How a [`RawBackend`] treats its connections.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawBackendOptions {
    /// Close a keep-alive connection after it has been idle this long, as Node (5 s) or
    /// gunicorn (2 s) do.
    pub idle_close: Option<Duration>,
    /// How long before the close reaches the client the pod decides on it, as a close takes a
    /// network's latency to arrive: a request sent in that window meets a closing socket, is
    /// never read, and is reset. The idle timeout still ends at `idle_close`.
    pub close_notice: Duration,
    /// Announce `idle_close` in a `Keep-Alive: timeout=N` response header, as Node does.
    pub announce_idle_close: bool,
    /// Answers each request with this function's complete HTTP/1.1 response (head and body,
    /// with its `content-length`) instead of the JSON description.
    pub answer: Option<fn(&RawRequest) -> String>,
}

/// A running raw backend. Stops when dropped, closing its connections.
pub struct RawBackend {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<RawRequest>>,
    connections: AtomicU64,
    bytes_received: AtomicU64,
}

impl RawBackend {
    /// Starts a backend on `ip` with an ephemeral port.
    pub async fn start(ip: IpAddr) -> std::io::Result<Self> {
        Self::start_with(SocketAddr::new(ip, 0), RawBackendOptions::default()).await
    }

    /// Starts a backend on exactly `addr`.
    pub async fn start_with(addr: SocketAddr, options: RawBackendOptions) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let task = tokio::spawn(accept_loop(listener, shared.clone(), options));
        Ok(Self { addr, shared, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RawRequest> {
        self.shared
            .requests
            .lock()
            .map(|requests| requests.clone())
            .unwrap_or_default()
    }

    /// The only request received so far. Panics unless exactly one arrived.
    pub fn only_request(&self) -> RawRequest {
        let mut requests = self.requests();
        assert_eq!(requests.len(), 1, "expected one request: {requests:#?}");
        requests.remove(0)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// Bytes read from every connection so far.
    pub fn bytes_received(&self) -> u64 {
        self.shared.bytes_received.load(Ordering::Relaxed)
    }
}

impl Drop for RawBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, options: RawBackendOptions) {
    serve_connections(listener, |stream| {
        let number = shared.connections.fetch_add(1, Ordering::Relaxed) + 1;
        serve(stream, number, shared.clone(), options)
    })
    .await;
}

/// Reads requests from one connection until it closes, answering each.
async fn serve(
    mut stream: TcpStream,
    number: u64,
    shared: Arc<Shared>,
    options: RawBackendOptions,
) {
    let mut reader = Reader {
        buffer: Vec::new(),
        shared: &shared,
    };
    loop {
        let idle = options.idle_close.unwrap_or(Duration::from_secs(3600));
        let decided = idle.saturating_sub(options.close_notice);
        let head = match tokio::time::timeout(decided, reader.head(&mut stream)).await {
            Ok(Some(head)) => head,
            Ok(None) => return,
            Err(_) => {
                // Closing: whatever arrives from now on is never read.
                tokio::time::sleep(options.close_notice).await;
                return;
            }
        };
        let (body, complete) = reader.body(&mut stream, &head).await;
        let request = RawRequest {
            head: String::from_utf8_lossy(&head).into_owned(),
            body,
            complete,
            connection: number,
        };
        let close = !complete || wants_close(&request);
        let answered = options.answer.map(|answer| answer(&request));
        let answer = request.describe();
        if let Ok(mut requests) = shared.requests.lock() {
            requests.push(request);
        }
        if !complete {
            return;
        }
        let connection = match (close, options.idle_close) {
            (true, _) => "connection: close\r\n".to_owned(),
            (false, Some(idle)) if options.announce_idle_close => {
                format!("keep-alive: timeout={}\r\n", idle.as_secs())
            }
            _ => String::new(),
        };
        let response = match answered {
            Some(response) => response,
            None => format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{connection}\r\n{answer}",
                answer.len(),
            ),
        };
        if stream.write_all(response.as_bytes()).await.is_err() || close {
            return;
        }
    }
}

fn wants_close(request: &RawRequest) -> bool {
    let http10 = request.request_line().ends_with("HTTP/1.0");
    let connection = request
        .header_values("connection")
        .join(",")
        .to_ascii_lowercase();
    connection.contains("close") || (http10 && !connection.contains("keep-alive"))
}

/// Buffered reading of one connection's bytes.
struct Reader<'a> {
    buffer: Vec<u8>,
    shared: &'a Shared,
}

impl Reader<'_> {
    /// Reads more bytes into the buffer; `false` at end of stream or on error.
    async fn fill(&mut self, stream: &mut TcpStream) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => false,
            Ok(read) => {
                self.shared
                    .bytes_received
                    .fetch_add(read as u64, Ordering::Relaxed);
                self.buffer.extend_from_slice(&chunk[..read]);
                true
            }
        }
    }

    /// The next head, up to and including its blank line; `None` when the connection ends first.
    async fn head(&mut self, stream: &mut TcpStream) -> Option<Vec<u8>> {
        loop {
            if let Some(end) = find(&self.buffer, b"\r\n\r\n") {
                return Some(self.buffer.drain(..end + 4).collect());
            }
            if self.buffer.len() > MAX_HEAD || !self.fill(stream).await {
                return None;
            }
        }
    }

    /// The body the head announces, and whether all of it arrived.
    async fn body(&mut self, stream: &mut TcpStream, head: &[u8]) -> (Vec<u8>, bool) {
        match framing(head) {
            Framing::Length(length) => self.exactly(stream, length).await,
            Framing::Chunked => self.chunked(stream).await,
        }
    }

    async fn exactly(&mut self, stream: &mut TcpStream, length: usize) -> (Vec<u8>, bool) {
        while self.buffer.len() < length {
            if !self.fill(stream).await {
                return (std::mem::take(&mut self.buffer), false);
            }
        }
        (self.buffer.drain(..length).collect(), true)
    }

    async fn line(&mut self, stream: &mut TcpStream) -> Option<Vec<u8>> {
        loop {
            if let Some(end) = find(&self.buffer, b"\r\n") {
                let line = self.buffer.drain(..end + 2).take(end).collect();
                return Some(line);
            }
            if !self.fill(stream).await {
                return None;
            }
        }
    }

    async fn chunked(&mut self, stream: &mut TcpStream) -> (Vec<u8>, bool) {
        let mut body = Vec::new();
        loop {
            let Some(line) = self.line(stream).await else {
                return (body, false);
            };
            let text = String::from_utf8_lossy(&line);
            let size = text.split(';').next().unwrap_or("").trim();
            let Ok(size) = usize::from_str_radix(size, 16) else {
                return (body, false);
            };
            if size == 0 {
                // Trailers, up to the blank line.
                loop {
                    match self.line(stream).await {
                        Some(line) if line.is_empty() => return (body, true),
                        Some(_) => continue,
                        None => return (body, false),
                    }
                }
            }
            let (data, complete) = self.exactly(stream, size + 2).await;
            if !complete || !data.ends_with(b"\r\n") {
                body.extend_from_slice(&data);
                return (body, false);
            }
            body.extend_from_slice(&data[..size]);
        }
    }
}

enum Framing {
    Length(usize),
    Chunked,
}

fn framing(head: &[u8]) -> Framing {
    let text = String::from_utf8_lossy(head);
    let mut length = 0;
    for line in text.split("\r\n").skip(1) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding")
            && value.to_ascii_lowercase().ends_with("chunked")
        {
            return Framing::Chunked;
        }
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse().unwrap_or(0);
        }
    }
    Framing::Length(length)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}
