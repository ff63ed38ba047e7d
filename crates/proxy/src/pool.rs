//! One endpoint's keep-alive HTTP/1.1 connections: checked out per request, returned when the response ends, closed when idle too long or when the endpoint retires.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::header::HeaderName;
use http::HeaderMap;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::body::UpstreamBody;
use crate::error::ProxyError;

/// Idle connections kept per endpoint; more are closed when their response ends. As many as
/// nginx's `keepalive` in the benchmark, so that 500 busy clients on one endpoint keep reusing
/// their connections.
const MAX_IDLE: usize = 1024;
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");

/// A connection ready to carry one request, tagged with the pool generation it belongs to.
pub(crate) struct Connection {
    pub(crate) sender: SendRequest<UpstreamBody>,
    generation: u64,
    /// Whether the connection carried a request before (a reused connection may have been
    /// closed by the endpoint in the meantime).
    pub(crate) reused: bool,
}

struct Idle {
    sender: SendRequest<UpstreamBody>,
    generation: u64,
    expires: Instant,
}

/// The idle connections to one endpoint. Retiring the pool closes them and bumps the
/// generation, so connections busy at that moment are closed when their response ends.
#[derive(Default)]
pub(crate) struct ConnectionPool {
    idle: Mutex<Vec<Idle>>,
    generation: AtomicU64,
}

impl ConnectionPool {
    /// The most recently used idle connection that is still open, current and not expired.
    pub(crate) fn checkout(&self) -> Option<Connection> {
        let generation = self.generation.load(Ordering::Acquire);
        let now = Instant::now();
        let mut idle = self.idle.lock().ok()?;
        while let Some(candidate) = idle.pop() {
            let usable = candidate.generation == generation
                && now < candidate.expires
                && candidate.sender.is_ready();
            if usable {
                return Some(Connection {
                    sender: candidate.sender,
                    generation,
                    reused: true,
                });
            }
        }
        None
    }

    /// Opens a new connection to `authority` within `timeout`.
    pub(crate) async fn connect(
        &self,
        authority: &str,
        timeout: Duration,
    ) -> Result<Connection, ProxyError> {
        let generation = self.generation.load(Ordering::Acquire);
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(authority)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => return Err(ProxyError::ConnectFailed(error)),
            Err(_elapsed) => return Err(ProxyError::ConnectTimeout),
        };
        let _ = stream.set_nodelay(true);
        let (sender, connection) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(ProxyError::UpstreamFailed)?;
        tokio::spawn(async move {
            // With upgrades: a 101 hands the connection to the WebSocket tunnel.
            if let Err(error) = connection.with_upgrades().await {
                tracing::debug!(%error, "upstream connection ended with an error");
            }
        });
        Ok(Connection {
            sender,
            generation,
            reused: false,
        })
    }

    fn keep(&self, connection: Connection, expires: Instant) {
        if connection.generation != self.generation.load(Ordering::Acquire) {
            return;
        }
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < MAX_IDLE {
                idle.push(Idle {
                    sender: connection.sender,
                    generation: connection.generation,
                    expires,
                });
            }
        }
    }

    /// Closes the idle connections that expired by `now` or that the endpoint closed: dropping
    /// the last sender of an idle HTTP/1.1 connection makes hyper close it.
    pub(crate) fn reap(&self, now: Instant) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.retain(|entry| now < entry.expires && !entry.sender.is_closed());
        }
    }

    /// How many idle connections the pool holds.
    #[cfg(test)]
    pub(crate) fn idle_count(&self) -> usize {
        self.idle.lock().map(|idle| idle.len()).unwrap_or(0)
    }

    /// Closes every idle connection, and makes connections now busy close when their response
    /// ends. New connections may be opened afterwards (a terminating endpoint still serves its
    /// sticky sessions).
    pub(crate) fn retire(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let closing = match self.idle.lock() {
            Ok(mut idle) => std::mem::take(&mut *idle),
            Err(_) => return,
        };
        // Dropping the last sender of an idle HTTP/1.1 connection makes hyper close it.
        drop(closing);
    }
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

    /// The response body has ended: the connection goes back to its pool. hyper has almost
    /// always made it ready for the next request by then; when it has not, a task waits for
    /// it, so the response path never does.
    pub(crate) fn response_ended(self) {
        let Self {
            pool,
            mut connection,
            keep_for,
        } = self;
        if connection.sender.is_ready() {
            pool.keep(connection, Instant::now() + keep_for);
            return;
        }
        // Outside a runtime (a body dropped after shutdown) the connection just closes.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if connection.sender.ready().await.is_ok() {
                    pool.keep(connection, Instant::now() + keep_for);
                }
            });
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
