//! One endpoint's upstream connections: keep-alive HTTP/1.1 ones checked out per request and returned when the response ends, HTTP/2 ones shared by up to 100 streams, all closed when idle too long or when the endpoint retires.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::header::HeaderName;
use http::HeaderMap;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::error::ProxyError;
use crate::upstream::connect::{Opened, Wire};
use crate::upstream::http1::{Http1Connection, Reusable};
use crate::upstream::request_body::UpstreamBody;

/// Idle connections kept per endpoint; more are closed when their response ends. As many as
/// nginx's `keepalive` in the benchmark, so that 500 busy clients on one endpoint keep reusing
/// their connections.
const MAX_IDLE: usize = 1024;
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
/// Streams one HTTP/2 connection carries before a second one opens: what most servers
/// announce as SETTINGS_MAX_CONCURRENT_STREAMS (Go's and nginx's 100, which gRPC servers
/// keep). hyper queues a stream beyond the peer's own limit rather than failing it.
const MAX_STREAMS_PER_CONNECTION: usize = 100;

/// The request side of one upstream connection: HTTP/1.1 (one request at a time, carried in
/// the request's own task) or HTTP/2 (shared by many streams).
pub(crate) enum Sender {
    /// `None` while a request is out on it: the connection travels with the response body
    /// and comes back when that ends.
    Http1(Option<Http1Connection>),
    Http2(http2::SendRequest<UpstreamBody>),
}

/// A connection ready to carry one request, tagged with the pool generation it belongs to.
pub(crate) struct Connection {
    pub(crate) sender: Sender,
    generation: u64,
    /// Whether the connection carried a request before (a reused connection may have been
    /// closed by the endpoint in the meantime).
    pub(crate) reused: bool,
    /// Whether it runs over TLS (then requests name the `https` scheme).
    pub(crate) tls: bool,
    /// The wire identity it was opened with ([`Wire::identity`]).
    identity: u64,
    /// An HTTP/2 connection's stream count, held until the response ends.
    _stream: Option<StreamSlot>,
}

struct Idle {
    connection: Http1Connection,
    generation: u64,
    identity: u64,
    expires: Instant,
}

/// Idle HTTP/1.1 connections, one list per data-plane worker ([`crate::worker`]): a
/// connection's socket is registered with the worker that opened it, so only that worker reuses it.
#[derive(Default)]
struct IdleLists(Vec<Vec<Idle>>);

impl IdleLists {
    /// The current worker's list.
    fn of_this_worker(&mut self) -> &mut Vec<Idle> {
        let worker = crate::worker::current();
        if self.0.len() <= worker {
            self.0.resize_with(worker + 1, Vec::new);
        }
        &mut self.0[worker]
    }
}

/// An HTTP/2 connection many requests share, with the streams it carries now.
struct Shared {
    sender: http2::SendRequest<UpstreamBody>,
    generation: u64,
    tls: bool,
    identity: u64,
    streams: Arc<AtomicUsize>,
}

/// One stream counted on a shared HTTP/2 connection until dropped.
struct StreamSlot(Arc<AtomicUsize>);

impl StreamSlot {
    fn take(streams: &Arc<AtomicUsize>) -> Self {
        streams.fetch_add(1, Ordering::AcqRel);
        Self(streams.clone())
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The connections to one endpoint: idle HTTP/1.1 ones, and HTTP/2 ones shared by streams.
/// Retiring the pool closes the idle ones and bumps the generation, so connections busy at
/// that moment are closed when their response ends.
#[derive(Default)]
pub(crate) struct ConnectionPool {
    idle: Mutex<IdleLists>,
    idle_tls: Mutex<IdleLists>,
    shared: Mutex<Vec<Shared>>,
    /// Held while an HTTP/2-capable connection is being opened.
    connecting: tokio::sync::Mutex<()>,
    /// The endpoint answered TLS with HTTP/1.1 by ALPN: TLS connects need not take turns.
    tls_chose_http1: AtomicBool,
    generation: AtomicU64,
}

impl ConnectionPool {
    /// A connection for `wire` that is open, current and not expired: an HTTP/2 one with a
    /// free stream, else the most recently used idle HTTP/1.1 one.
    pub(crate) fn checkout(&self, wire: &Wire) -> Option<Connection> {
        let generation = self.generation.load(Ordering::Acquire);
        let tls = wire.is_tls();
        let identity = wire.identity();
        if wire.may_use_http2() {
            if let Some(connection) = self.checkout_shared(generation, wire) {
                return Some(connection);
            }
        }
        if !wire.may_use_http1() {
            return None;
        }
        let now = Instant::now();
        let mut lists = self.idle_of(tls).lock().ok()?;
        let idle = lists.of_this_worker();
        // Plain connections all share identity 0, so this takes the last one.
        while let Some(at) = idle.iter().rposition(|idle| idle.identity == identity) {
            let mut candidate = idle.remove(at);
            let usable = candidate.generation == generation
                && now < candidate.expires
                && candidate.connection.is_open();
            if usable {
                return Some(Connection {
                    sender: Sender::Http1(Some(candidate.connection)),
                    generation,
                    reused: true,
                    tls,
                    identity,
                    _stream: None,
                });
            }
        }
        None
    }

    /// The idle HTTP/1.1 connections over TLS, or over plain TCP.
    fn idle_of(&self, tls: bool) -> &Mutex<IdleLists> {
        match tls {
            true => &self.idle_tls,
            false => &self.idle,
        }
    }

    fn checkout_shared(&self, generation: u64, wire: &Wire) -> Option<Connection> {
        let (tls, identity) = (wire.is_tls(), wire.identity());
        let mut shared = self.shared.lock().ok()?;
        shared.retain(|connection| {
            connection.generation == generation && !connection.sender.is_closed()
        });
        let connection = shared.iter().find(|connection| {
            connection.tls == tls
                && connection.identity == identity
                && connection.streams.load(Ordering::Acquire) < MAX_STREAMS_PER_CONNECTION
        })?;
        Some(Connection {
            sender: Sender::Http2(connection.sender.clone()),
            generation,
            reused: true,
            tls,
            identity,
            _stream: Some(StreamSlot::take(&connection.streams)),
        })
    }

    /// Opens a new connection to `authority` for `wire` within `timeout` (TLS included). A
    /// wire that may speak HTTP/2 opens one connection at a time per endpoint, and a request
    /// that waited takes a stream on the connection just opened: a burst of requests to a cold
    /// endpoint opens one connection, not one per request.
    pub(crate) async fn connect(
        &self,
        authority: &str,
        wire: &Wire,
        timeout: Duration,
    ) -> Result<Connection, ProxyError> {
        let attempt = async {
            let _one_at_a_time = match self.shares(wire) {
                true => {
                    let turn = self.connecting.lock().await;
                    let generation = self.generation.load(Ordering::Acquire);
                    if let Some(connection) = self.checkout_shared(generation, wire) {
                        return Ok(connection);
                    }
                    Some(turn)
                }
                false => None,
            };
            self.open(authority, wire).await
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(result) => result,
            Err(_elapsed) => Err(ProxyError::ConnectTimeout),
        }
    }

    /// Whether connections for `wire` may be shared HTTP/2 ones: always for h2c, and over TLS
    /// until the endpoint has chosen HTTP/1.1 by ALPN.
    fn shares(&self, wire: &Wire) -> bool {
        match wire {
            Wire::Http1 => false,
            Wire::H2c => true,
            Wire::Tls { .. } => !self.tls_chose_http1.load(Ordering::Relaxed),
        }
    }

    /// Connects, sets up the wire's protocol and, for HTTP/2, shares the connection.
    async fn open(&self, authority: &str, wire: &Wire) -> Result<Connection, ProxyError> {
        let generation = self.generation.load(Ordering::Acquire);
        let stream = TcpStream::connect(authority)
            .await
            .map_err(ProxyError::ConnectFailed)?;
        let _ = stream.set_nodelay(true);
        let (tls, identity) = (wire.is_tls(), wire.identity());
        let connection = match wire.open(stream, authority).await? {
            Opened::Http1(io) => {
                if tls {
                    self.tls_chose_http1.store(true, Ordering::Relaxed);
                }
                Connection {
                    sender: Sender::Http1(Some(Http1Connection::new(io))),
                    generation,
                    reused: false,
                    tls,
                    identity,
                    _stream: None,
                }
            }
            Opened::Http2(io) => {
                let sender = handshake_http2(io).await?;
                let streams = Arc::new(AtomicUsize::new(0));
                let slot = StreamSlot::take(&streams);
                if let Ok(mut shared) = self.shared.lock() {
                    shared.push(Shared {
                        sender: sender.clone(),
                        generation,
                        tls,
                        identity,
                        streams,
                    });
                }
                Connection {
                    sender: Sender::Http2(sender),
                    generation,
                    reused: false,
                    tls,
                    identity,
                    _stream: Some(slot),
                }
            }
        };
        Ok(connection)
    }

    fn keep(&self, connection: Connection, expires: Instant) {
        if connection.generation != self.generation.load(Ordering::Acquire) {
            return;
        }
        // A shared HTTP/2 connection stays in `shared`; its stream slot drops here.
        let Sender::Http1(Some(http1)) = connection.sender else {
            return;
        };
        if let Ok(mut lists) = self.idle_of(connection.tls).lock() {
            let idle = lists.of_this_worker();
            if idle.len() < MAX_IDLE {
                idle.push(Idle {
                    connection: http1,
                    generation: connection.generation,
                    identity: connection.identity,
                    expires,
                });
            }
        }
    }

    /// Closes the idle connections that expired by `now` or that the endpoint closed (an
    /// HTTP/1.1 connection closes when dropped). Closed HTTP/2 connections are forgotten.
    pub(crate) fn reap(&self, now: Instant) {
        for idle in [&self.idle, &self.idle_tls] {
            if let Ok(mut lists) = idle.lock() {
                for idle in &mut lists.0 {
                    idle.retain_mut(|entry| now < entry.expires && entry.connection.is_open());
                }
            }
        }
        if let Ok(mut shared) = self.shared.lock() {
            shared.retain(|entry| !entry.sender.is_closed());
        }
    }

    /// How many idle connections the pool holds.
    #[cfg(test)]
    pub(crate) fn idle_count(&self) -> usize {
        let count = |lists: &IdleLists| lists.0.iter().map(Vec::len).sum();
        self.idle.lock().map(|lists| count(&lists)).unwrap_or(0)
    }

    /// Closes every idle connection, and makes connections now busy close when their response
    /// ends (HTTP/2 connections once their last stream ends). New connections may be opened
    /// afterwards (a terminating endpoint still serves its sticky sessions).
    pub(crate) fn retire(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        for idle in [&self.idle, &self.idle_tls] {
            // An idle HTTP/1.1 connection closes when dropped.
            let closing = idle.lock().map(|mut idle| std::mem::take(&mut *idle));
            drop(closing);
        }
        if let Ok(mut shared) = self.shared.lock() {
            shared.clear();
        }
    }
}

async fn handshake_http2<T>(io: T) -> Result<http2::SendRequest<UpstreamBody>, ProxyError>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (sender, connection) = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .handshake(TokioIo::new(io))
        .await
        .map_err(|error| ProxyError::UpstreamFailed(error.into()))?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "upstream HTTP/2 connection ended with an error");
        }
    });
    Ok(sender)
}

/// A connection whose response is on its way to the client, and the pool it returns to when
/// the response body has ended.
pub(crate) struct Checkin {
    pool: Arc<ConnectionPool>,
    connection: Connection,
    keep_for: Duration,
}

impl Checkin {
    pub(crate) fn new(
        pool: Arc<ConnectionPool>,
        connection: Connection,
        keep_for: Duration,
    ) -> Self {
        Self {
            pool,
            connection,
            keep_for,
        }
    }

    /// The response body has ended: an HTTP/1.1 connection the response left `reusable`
    /// goes back to its pool (an HTTP/2 one stays shared and frees its stream). One whose
    /// endpoint answered before the request body had all gone goes back once it has, in a
    /// task of its own, unless that takes longer than the connection would be kept idle.
    pub(crate) fn response_ended(self, reusable: Option<Reusable>) {
        let Some(reusable) = reusable else {
            return;
        };
        match reusable.now() {
            Ok(http1) => self.keep(http1),
            Err(uploading) => {
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    return;
                };
                runtime.spawn(async move {
                    let sent = tokio::time::timeout(self.keep_for, uploading.after_upload());
                    if let Ok(Some(http1)) = sent.await {
                        self.keep(http1);
                    }
                });
            }
        }
    }

    fn keep(self, http1: Http1Connection) {
        let Self {
            pool,
            mut connection,
            keep_for,
        } = self;
        if let Sender::Http1(slot) = &mut connection.sender {
            *slot = Some(http1);
            pool.keep(connection, Instant::now() + keep_for);
        }
    }
}

/// How long to keep a connection idle after this response: `limit`, or less when the endpoint
/// announced a shorter `Keep-Alive: timeout=N` (as Node does). The connection is given up a
/// little before the endpoint's own deadline (a quarter of it, at most a second), so that a
/// request is not sent just as the endpoint closes.
pub(crate) fn keep_alive_for(headers: &HeaderMap, limit: Duration) -> Duration {
    let announced = headers
        .get(KEEP_ALIVE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            value.split(',').find_map(|parameter| {
                let (name, seconds) = parameter.split_once('=')?;
                let named = name.trim().eq_ignore_ascii_case("timeout");
                named.then(|| seconds.trim().parse::<u64>().ok()).flatten()
            })
        })
        .map(Duration::from_secs);
    match announced {
        Some(timeout) => {
            let margin = (timeout / 4).min(Duration::from_secs(1));
            limit.min(timeout - margin)
        }
        None => limit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn announced(value: &str) -> Duration {
        let mut headers = HeaderMap::new();
        headers.insert(
            KEEP_ALIVE,
            HeaderValue::from_str(value).unwrap_or_else(|e| panic!("{e}")),
        );
        keep_alive_for(&headers, Duration::from_secs(60))
    }

    /// Runs `work` on a thread that is data-plane worker `index`, in a runtime of its own.
    fn on_worker<T: Send + 'static>(index: usize, work: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(move || {
            crate::worker::enter_worker(index);
            work()
        })
        .join()
        .unwrap_or_else(|_| panic!("worker {index} panicked"))
    }

    #[test]
    fn a_worker_reuses_only_the_connections_it_opened() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let authority = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("{e}"))
            .to_string();
        // The endpoint holds every connection open.
        std::thread::spawn(move || {
            let held: Vec<_> = listener.incoming().collect();
            drop(held);
        });
        let pool = Arc::new(ConnectionPool::default());
        let worker_pool = pool.clone();
        let (on_zero, on_one) = on_worker(1, move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("{e}"));
            runtime.block_on(async move {
                let opened = worker_pool
                    .connect(&authority, &Wire::Http1, Duration::from_secs(5))
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                worker_pool.keep(opened, Instant::now() + Duration::from_secs(60));
                assert_eq!(worker_pool.idle_count(), 1);
                let zero_pool = worker_pool.clone();
                let on_zero = on_worker(0, move || zero_pool.checkout(&Wire::Http1).is_some());
                let on_one = worker_pool.checkout(&Wire::Http1).map(|c| c.reused);
                (on_zero, on_one)
            })
        });
        assert!(!on_zero, "worker 0 took worker 1's connection");
        assert_eq!(on_one, Some(true), "worker 1 reuses its own connection");
        assert_eq!(pool.idle_count(), 0);
    }

    #[test]
    fn an_announced_keep_alive_timeout_is_respected_with_a_margin() {
        assert_eq!(
            keep_alive_for(&HeaderMap::new(), Duration::from_secs(60)),
            Duration::from_secs(60)
        );
        assert_eq!(announced("timeout=5"), Duration::from_secs(4));
        assert_eq!(announced("max=100, timeout=1"), Duration::from_millis(750));
        assert_eq!(
            announced("timeout=600"),
            Duration::from_secs(60),
            "the limit wins"
        );
        assert_eq!(announced("timeout=abc"), Duration::from_secs(60));
    }
}
