//! One endpoint's keep-alive HTTP/1.1 connections: checked out per request, returned when the response ends, closed when the endpoint retires.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::error::ProxyError;

/// The body sent upstream: buffered (and so replayable) or streamed from the client.
pub(crate) type UpstreamBody = Either<Full<Bytes>, Incoming>;

/// How long an idle connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Idle connections kept per endpoint; more are closed when their response ends.
const MAX_IDLE: usize = 256;

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
    since: Instant,
}

/// The idle connections to one endpoint. Retiring the pool closes them and bumps the
/// generation, so connections busy at that moment are closed when their response ends.
#[derive(Default)]
pub(crate) struct ConnectionPool {
    idle: Mutex<Vec<Idle>>,
    generation: AtomicU64,
}

impl ConnectionPool {
    /// The most recently used idle connection that is still open and current, if any.
    pub(crate) fn checkout(&self) -> Option<Connection> {
        let generation = self.generation.load(Ordering::Acquire);
        let mut idle = self.idle.lock().ok()?;
        while let Some(candidate) = idle.pop() {
            let usable = candidate.generation == generation
                && candidate.since.elapsed() < IDLE_TIMEOUT
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
            if let Err(error) = connection.await {
                tracing::debug!(%error, "upstream connection ended with an error");
            }
        });
        Ok(Connection {
            sender,
            generation,
            reused: false,
        })
    }

    /// Keeps the connection for the next request once its response has ended, unless the pool
    /// retired since it was opened or is full.
    pub(crate) fn check_in_when_ready(pool: std::sync::Arc<Self>, mut connection: Connection) {
        tokio::spawn(async move {
            if connection.sender.ready().await.is_err() {
                return;
            }
            pool.keep(connection);
        });
    }

    fn keep(&self, connection: Connection) {
        if connection.generation != self.generation.load(Ordering::Acquire) {
            return;
        }
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < MAX_IDLE {
                idle.push(Idle {
                    sender: connection.sender,
                    generation: connection.generation,
                    since: Instant::now(),
                });
            }
        }
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
