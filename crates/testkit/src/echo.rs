//! Echo backends: small HTTP servers standing in for pods, each answering with its own name.
//!
//! By default a backend answers `200` with its name and a newline. Special paths drive tests:
//! - `/__testkit/bytes/N` streams N bytes back;
//! - `/__testkit/halves/N?pause=MS` sends the first half of N bytes at once and the rest after
//!   MS milliseconds, with `Content-Length` (none with `&chunked`) and the content type `type`;
//! - `/__testkit/upload` reads the whole request body and answers with its length;
//! - `/__testkit/sleep/MS` waits MS milliseconds before answering;
//! - `/__testkit/reset` closes the connection without answering;
//! - `/__testkit/status/N` answers status N (with the backend's name as the body);
//! - `/__testkit/hop-headers` answers with hop-by-hop headers a proxy must strip
//!   (`Connection: x-hop-secret`, `X-Hop-Secret`, `Keep-Alive`) next to `X-Kept: yes`.
//!
//! On any path, the query `delay=D` (such as `1s` or `300ms`) waits D before answering, as the
//! Gateway API conformance echo server does; and the query `succeedAfter=K&uuid=U[&responseCode=N][&delayRetry=D]` is the retry
//! simulation of the Gateway API conformance echo server: the first K requests carrying uuid U
//! wait D (such as `300ms`) and answer N (without `responseCode`, they close the connection
//! unanswered); the later ones are answered as usual.
//!
//! It never describes the request it got: hyper's parsed view would hide what a proxy really
//! sent. Tests that check what arrives use [`crate::RawBackend`], which reports the bytes.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::body::{PatternBody, PausingBody};
use crate::listener::serve_connections;

type EchoBody = Either<Full<Bytes>, Either<PatternBody, PausingBody>>;

/// Why an echo request failed on purpose (the `/__testkit/reset` path) or by accident.
#[derive(Debug)]
pub struct EchoError(&'static str);

impl std::fmt::Display for EchoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for EchoError {}

/// A running echo backend. Stops when dropped, closing its connections.
pub struct EchoBackend {
    name: String,
    addr: SocketAddr,
    requests: Arc<AtomicU64>,
    connections: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl EchoBackend {
    /// Starts a backend named `name` on `ip` with an ephemeral port.
    pub async fn start(name: &str, ip: IpAddr) -> std::io::Result<Self> {
        Self::start_on(name, SocketAddr::new(ip, 0)).await
    }

    /// Starts a backend named `name` on exactly `addr`.
    pub async fn start_on(name: &str, addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let counters = Counters::default();
        let task = tokio::spawn(accept_loop(listener, name.to_owned(), counters.clone()));
        Ok(Self {
            name: name.to_owned(),
            addr,
            requests: counters.requests,
            connections: counters.open_connections,
            task,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many requests this backend has received.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// How many client connections are open right now.
    pub fn open_connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
}

/// What the accept loop counts for the backend's owner, and for the retry simulation.
#[derive(Clone, Default)]
struct Counters {
    requests: Arc<AtomicU64>,
    open_connections: Arc<AtomicU64>,
    /// Requests seen per retry-simulation uuid.
    simulated: Arc<Mutex<HashMap<String, u32>>>,
}

impl Drop for EchoBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves every connection until the backend is dropped.
async fn accept_loop(listener: TcpListener, name: String, counters: Counters) {
    let name: Arc<str> = name.into();
    serve_connections(listener, |stream| {
        let name = name.clone();
        let requests = counters.requests.clone();
        let open = counters.open_connections.clone();
        let simulated = counters.simulated.clone();
        open.fetch_add(1, Ordering::Relaxed);
        async move {
            let service = service_fn(move |request: Request<Incoming>| {
                requests.fetch_add(1, Ordering::Relaxed);
                let failure = simulated_failure(&simulated, request.uri().query());
                let name = name.clone();
                async move {
                    let Some(failure) = failure else {
                        return answer(name, request).await;
                    };
                    tokio::time::sleep(failure.delay).await;
                    match failure.status {
                        Some(status) => Ok(text(status, format!("{name}\n"))),
                        None => Err(EchoError("connection error on request")),
                    }
                }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
            open.fetch_sub(1, Ordering::Relaxed);
        }
    })
    .await;
}

async fn answer(
    name: Arc<str>,
    request: Request<Incoming>,
) -> Result<Response<EchoBody>, EchoError> {
    let path = request.uri().path().to_owned();
    let delayed = request.uri().query().and_then(|query| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix("delay="))
    });
    if let Some(wait) = delayed {
        tokio::time::sleep(delay(wait)).await;
    }
    if let Some(len) = path.strip_prefix("/__testkit/bytes/") {
        let len = len.parse().map_err(|_| EchoError("bad length"))?;
        return Ok(Response::new(Either::Right(Either::Left(
            PatternBody::new(len),
        ))));
    }
    if let Some(len) = path.strip_prefix("/__testkit/halves/") {
        return halves(len, request.uri().query().unwrap_or_default());
    }
    if path == "/__testkit/upload" {
        let received = count_body(request.into_body()).await?;
        return Ok(text(StatusCode::OK, format!("{received}\n")));
    }
    if let Some(ms) = path.strip_prefix("/__testkit/sleep/") {
        let ms = ms.parse().map_err(|_| EchoError("bad duration"))?;
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if path == "/__testkit/reset" {
        return Err(EchoError("reset on request"));
    }
    if let Some(code) = path.strip_prefix("/__testkit/status/") {
        let status = code
            .parse::<u16>()
            .ok()
            .and_then(|code| StatusCode::from_u16(code).ok())
            .ok_or(EchoError("bad status"))?;
        return Ok(text(status, format!("{name}\n")));
    }
    if path == "/__testkit/hop-headers" {
        let mut response = text(StatusCode::OK, format!("{name}\n"));
        let headers = response.headers_mut();
        headers.insert("connection", http::HeaderValue::from_static("x-hop-secret"));
        headers.insert("x-hop-secret", http::HeaderValue::from_static("1"));
        headers.insert("keep-alive", http::HeaderValue::from_static("timeout=5"));
        headers.insert("x-kept", http::HeaderValue::from_static("yes"));
        return Ok(response);
    }
    Ok(text(StatusCode::OK, format!("{name}\n")))
}

/// How the retry simulation fails one request.
struct SimulatedFailure {
    /// `None`: close the connection unanswered.
    status: Option<StatusCode>,
    delay: Duration,
}

/// The retry simulation's failure for this query, while its uuid has been seen at most
/// `succeedAfter` times.
fn simulated_failure(
    seen: &Mutex<HashMap<String, u32>>,
    query: Option<&str>,
) -> Option<SimulatedFailure> {
    let mut succeed_after = None;
    let mut uuid = None;
    let mut failure = SimulatedFailure {
        status: None,
        delay: Duration::ZERO,
    };
    for pair in query?.split('&') {
        match pair.split_once('=') {
            Some(("succeedAfter", value)) => succeed_after = value.parse::<u32>().ok(),
            Some(("uuid", value)) => uuid = Some(value),
            Some(("responseCode", value)) => {
                failure.status = value
                    .parse()
                    .ok()
                    .and_then(|c| StatusCode::from_u16(c).ok());
            }
            Some(("delayRetry", value)) => failure.delay = delay(value),
            _ => {}
        }
    }
    let (succeed_after, uuid) = (succeed_after?, uuid?);
    let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
    let count = seen.entry(uuid.to_owned()).or_default();
    *count += 1;
    (*count <= succeed_after).then_some(failure)
}

/// `300ms` or `2s`; anything else is no delay.
fn delay(text: &str) -> Duration {
    let number = |digits: &str| digits.parse::<u64>().unwrap_or(0);
    match text.strip_suffix("ms") {
        Some(ms) => Duration::from_millis(number(ms)),
        None => Duration::from_secs(number(text.strip_suffix('s').unwrap_or("0"))),
    }
}

/// `/__testkit/halves/N?pause=MS[&chunked][&type=T]`.
fn halves(len: &str, query: &str) -> Result<Response<EchoBody>, EchoError> {
    let len = len.parse().map_err(|_| EchoError("bad length"))?;
    let mut pause = Duration::ZERO;
    let mut chunked = false;
    let mut content_type = None;
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("pause", ms)) => {
                pause = Duration::from_millis(ms.parse().map_err(|_| EchoError("bad pause"))?);
            }
            Some(("type", value)) => content_type = Some(value.replace("%2F", "/")),
            None if pair == "chunked" => chunked = true,
            _ => {}
        }
    }
    let mut response = Response::new(Either::Right(Either::Right(PausingBody::new(
        len, pause, chunked,
    ))));
    if let Some(value) = content_type.and_then(|value| http::HeaderValue::try_from(value).ok()) {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, value);
    }
    Ok(response)
}

async fn count_body(mut body: Incoming) -> Result<u64, EchoError> {
    let mut received = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| EchoError("upload broke off"))?;
        if let Some(data) = frame.data_ref() {
            received += data.len() as u64;
        }
    }
    Ok(received)
}

fn text(status: StatusCode, body: String) -> Response<EchoBody> {
    let mut response = Response::new(Either::Left(Full::new(Bytes::from(body))));
    *response.status_mut() = status;
    response
}
