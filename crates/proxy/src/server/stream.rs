//! Gateway TLS and TCP listeners: each connection is routed once, by its server name on a TLS socket or by the socket alone on a TCP one, to a backend chosen by weight, and its bytes are copied both ways until either end closes.
//!
//! A TLS listener in Passthrough mode replays the ClientHello it read to the backend and never
//! touches the session; in Terminate mode TLS ends here with the listener's certificate and the
//! decrypted stream goes on. A connection that no route takes, whose backendRef did not
//! resolve, or whose backend has no endpoint that answers is closed: a stream has no status
//! code to say why, so the reason is logged and counted.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use prometheus_client::metrics::counter::Counter;
use sluice_routing::{
    Backend, GatewayOutcome, RoutePolicy, RoutingTable, SocketProtocol, UpstreamProtocol,
    UpstreamTls,
};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use super::accept::accept_until_stopped;
use super::rewound::Rewound;
use super::tls::{StreamHandshake, TlsTerminator};
use crate::request::table_handle::TableHandle;
use crate::shutdown::ShutdownSignal;
use crate::telemetry::metrics::{StreamMetrics, StreamResult};
use crate::upstream::connect;

/// What a Gateway stream socket needs besides its listener.
#[derive(Clone)]
pub struct StreamOptions {
    /// The published table, read per connection.
    pub table: TableHandle,
    /// The socket's address as the table keys it.
    pub socket: SocketAddr,
    /// TLS or TCP.
    pub protocol: SocketProtocol,
    /// How long one endpoint may take to accept before the next is tried.
    pub connect_timeout: Duration,
    /// How long a TLS ClientHello (and a Terminate handshake) may take.
    pub handshake_timeout: Duration,
    /// How long open connections may go on after the socket stops serving.
    pub grace_period: Duration,
    /// Connections and bytes by route.
    pub metrics: StreamMetrics,
}

/// Accepts connections on a Gateway TLS or TCP socket until `shutdown`, routes and splices
/// each; then waits up to the grace period for open connections before closing them.
pub async fn serve_streams(
    listener: TcpListener,
    options: StreamOptions,
    tls: Option<Arc<TlsTerminator>>,
    shutdown: ShutdownSignal,
) {
    let options = Arc::new(options);
    let grace_period = options.grace_period;
    accept_until_stopped(listener, shutdown, grace_period, |stream, peer| {
        let (options, tls) = (options.clone(), tls.clone());
        async move {
            if let Err(error) = serve_stream(stream, &options, tls.as_deref()).await {
                tracing::debug!(%peer, socket = %options.socket, %error, "stream connection ended");
            }
        }
    })
    .await;
}

/// Routes and splices one connection, counting it and its bytes under its route.
async fn serve_stream(
    stream: TcpStream,
    options: &StreamOptions,
    tls: Option<&TlsTerminator>,
) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    let outcome = match tls.filter(|_| options.protocol == SocketProtocol::Tls) {
        None => {
            let table = options.table.load();
            match route(&table, options.socket, "") {
                Ok((name, backend, policy)) => {
                    let mut stream = stream;
                    let to = Upstream {
                        backend,
                        tls: upstream_tls(&policy),
                    };
                    let spliced = splice_counted(&mut stream, &[], to, (options, &name)).await;
                    (Some(name), spliced)
                }
                Err((name, error)) => (name, Err(Refused(error))),
            }
        }
        Some(tls) => serve_tls_stream(Rewound::new(stream, Bytes::new()), options, tls).await,
    };
    count(outcome, options)
}

/// Serves a connection that a Gateway HTTPS socket handed over because its server name
/// selects one of the TLS listeners sharing the socket: `io` replays the ClientHello.
pub(crate) async fn serve_handed_over(
    io: Rewound<TcpStream>,
    options: &StreamOptions,
    tls: &TlsTerminator,
) {
    let outcome = serve_tls_stream(io, options, tls).await;
    if let Err(error) = count(outcome, options) {
        tracing::debug!(socket = %options.socket, %error, "stream connection ended");
    }
}

/// Counts a connection under its route by how it went.
fn count((name, result): Outcome, options: &StreamOptions) -> io::Result<()> {
    let protocol = options.protocol.as_str();
    let route = name.as_deref().unwrap_or("");
    let metrics = &options.metrics;
    match result {
        Ok(()) => {
            metrics.connection(protocol, route, StreamResult::Spliced);
            Ok(())
        }
        Err(Refused(error)) => {
            metrics.connection(protocol, route, StreamResult::Refused);
            Err(error)
        }
        Err(Failed(error)) => {
            metrics.connection(protocol, route, StreamResult::Failed);
            Err(error)
        }
        Err(Ended(error)) => {
            metrics.connection(protocol, route, StreamResult::Spliced);
            Err(error)
        }
    }
}

/// How a connection that was not spliced to its end went.
enum StreamError {
    /// No route took it, or its backendRef did not resolve.
    Refused(io::Error),
    /// No endpoint accepted, or the TLS handshake failed.
    Failed(io::Error),
    /// Spliced, then ended with an error (a reset, say).
    Ended(io::Error),
}

use StreamError::{Ended, Failed, Refused};

/// A connection's route (when one took it), and how it went.
type Outcome = (Option<Arc<str>>, Result<(), StreamError>);

/// The TLS side of [`serve_stream`]: the ClientHello routed before it is answered, then
/// passed through or terminated.
async fn serve_tls_stream(
    io: Rewound<TcpStream>,
    options: &StreamOptions,
    tls: &TlsTerminator,
) -> Outcome {
    let socket = options.socket;
    // Set when routing refused the connection (and to the route, when one took it).
    let mut refused: Option<Option<Arc<str>>> = None;
    let handshake = tls.stream_handshake(io, |table, name| match route(table, socket, name) {
        Ok((route, backend, policy)) => Ok((route, (backend.id().clone(), policy))),
        Err((route, error)) => {
            refused = Some(route);
            Err(error)
        }
    });
    let handshake = tokio::time::timeout(options.handshake_timeout, handshake).await;
    let ((name, (backend, policy)), handshake) = match handshake {
        Ok(Ok(done)) => done,
        Ok(Err(error)) => {
            return match refused.take() {
                Some(route) => (route, Err(Refused(error))),
                None => (None, Err(Failed(error))),
            };
        }
        Err(_) => {
            let error = io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out");
            return (None, Err(Failed(error)));
        }
    };
    // The table the route was chosen in may have been replaced since: the backend is found
    // again by its id in the current one.
    let table = options.table.load();
    let Some(backend) = table.backend_by_id(&backend) else {
        let error = io::Error::other(format!("{backend} is no longer served"));
        return (Some(name), Err(Refused(error)));
    };
    let spliced = match handshake {
        // The client's own TLS goes through to the pod: no second layer.
        StreamHandshake::Passthrough { mut socket, replay } => {
            let to = Upstream { backend, tls: None };
            splice_counted(&mut socket, &[&replay], to, (options, &name)).await
        }
        StreamHandshake::Terminated(mut stream) => {
            let to = Upstream {
                backend,
                tls: upstream_tls(&policy),
            };
            splice_counted(&mut stream, &[], to, (options, &name)).await
        }
    };
    (Some(name), spliced)
}

/// [`splice`] with the client's bytes counted under the route as they flow, and the
/// connection counted open while it lasts.
async fn splice_counted<S>(
    client: &mut S,
    replay: &[&[u8]],
    to: Upstream<'_>,
    (options, route): (&StreamOptions, &str),
) -> Result<(), StreamError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let protocol = options.protocol.as_str();
    let (received, sent) = options.metrics.byte_counters(protocol, route);
    let open = options.metrics.open(protocol, route);
    open.inc();
    let mut counted = Counted {
        inner: client,
        received,
        sent,
    };
    let spliced = splice(&mut counted, replay, to, options.connect_timeout).await;
    open.dec();
    match spliced {
        Ok(()) => Ok(()),
        Err(SpliceError::Connect(error)) => Err(Failed(error)),
        Err(SpliceError::Copy(error)) => Err(Ended(error)),
    }
}

/// A route that refused a connection (`None` when none took it), and why.
type RouteRefusal = (Option<Arc<str>>, io::Error);

/// Where a connection is spliced to: a backend's endpoints, over TLS when a BackendTLSPolicy
/// asks for it.
pub(crate) struct Upstream<'a> {
    pub(crate) backend: &'a Backend,
    pub(crate) tls: Option<&'a UpstreamTls>,
}

/// The TLS a route's policy asks for towards its pods.
fn upstream_tls(policy: &RoutePolicy) -> Option<&UpstreamTls> {
    match &policy.upstream {
        UpstreamProtocol::Tls(tls) => Some(tls),
        _ => None,
    }
}

/// The backend a connection goes to, with its route's name: the first rule served under its
/// server name on the listener that name selects, and one of the rule's backendRefs by
/// weight. On failure, the route's name when a route took the connection.
fn route<'t>(
    table: &'t RoutingTable,
    socket: SocketAddr,
    name: &str,
) -> Result<(Arc<str>, &'t Backend, Arc<RoutePolicy>), RouteRefusal> {
    let outcome = table
        .gateways()
        .stream_lookup(socket, name, |total| fastrand::u32(1..=total));
    let GatewayOutcome::Matched { rule, choice } = outcome else {
        let error = io::Error::other(format!("no route takes server name {name:?}"));
        return Err((None, error));
    };
    // What the route cannot honour refuses the connection, as it answers a request 503.
    if let Some(why) = choice.and_then(|choice| choice.policy.refused.as_deref()) {
        return Err((Some(rule.route.clone()), io::Error::other(why.to_owned())));
    }
    let backend = choice.and_then(|choice| {
        let backend = table.backend(choice.backend?)?;
        Some((backend, choice.policy.clone()))
    });
    match backend {
        Some((backend, policy)) => Ok((rule.route.clone(), backend, policy)),
        None => Err((
            Some(rule.route.clone()),
            io::Error::other(format!(
                "the backendRef route {} chose did not resolve",
                rule.route
            )),
        )),
    }
}

/// Why a splice ended with an error.
pub(crate) enum SpliceError {
    /// No endpoint accepted the connection (or none is eligible).
    Connect(io::Error),
    /// Copying failed after the endpoint was connected.
    Copy(io::Error),
}

impl From<SpliceError> for io::Error {
    fn from(error: SpliceError) -> Self {
        match error {
            SpliceError::Connect(error) | SpliceError::Copy(error) => error,
        }
    }
}

/// A client stream whose bytes are counted as they are read and written.
struct Counted<'a, S> {
    inner: &'a mut S,
    received: Counter,
    sent: Counter,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<'_, S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut *self.inner).poll_read(cx, buf);
        let read = buf.filled().len().saturating_sub(before);
        if read > 0 {
            self.received.inc_by(read as u64);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<'_, S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut *self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(written)) = &polled {
            self.sent.inc_by(*written as u64);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_shutdown(cx)
    }
}

/// Connects to the backend's endpoints in rotation until one accepts, writes `replay` (what
/// was read from the client before the route was known), then copies bytes both ways until
/// either side closes.
pub(crate) async fn splice<S>(
    client: &mut S,
    replay: &[&[u8]],
    to: Upstream<'_>,
    connect_timeout: Duration,
) -> Result<(), SpliceError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let backend = to.backend;
    let set = backend.endpoints().load();
    let eligible = set.eligible();
    if eligible.is_empty() {
        let error = io::Error::other(format!("{} has no endpoints", backend.id()));
        return Err(SpliceError::Connect(error));
    }
    let start = backend.next_turn();
    let mut last_error = io::Error::other("no endpoint answered");
    for offset in 0..eligible.len() {
        let endpoint = &eligible[(start + offset) % eligible.len()];
        let address = endpoint.authority().as_str();
        let connect = tokio::time::timeout(connect_timeout, TcpStream::connect(address));
        let mut upstream = match connect.await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => {
                last_error = error;
                continue;
            }
            Err(_) => {
                last_error = io::Error::new(io::ErrorKind::TimedOut, "connect timed out");
                continue;
            }
        };
        let _ = upstream.set_nodelay(true);
        let Some(tls) = to.tls else {
            return copy_both_ways(client, replay, &mut upstream).await;
        };
        // A certificate that does not verify fails the connection: never plaintext instead.
        let handshake = connect::open_stream_tls(tls, upstream, address);
        let mut upstream = match tokio::time::timeout(connect_timeout, handshake).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => return Err(SpliceError::Connect(error)),
            Err(_) => {
                let error = io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out");
                return Err(SpliceError::Connect(error));
            }
        };
        return copy_both_ways(client, replay, &mut upstream).await;
    }
    Err(SpliceError::Connect(last_error))
}

/// Writes `replay` to the endpoint, then copies bytes both ways until either side closes.
async fn copy_both_ways<C, U>(
    client: &mut C,
    replay: &[&[u8]],
    upstream: &mut U,
) -> Result<(), SpliceError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    for bytes in replay {
        upstream.write_all(bytes).await.map_err(SpliceError::Copy)?;
    }
    tokio::io::copy_bidirectional(client, upstream)
        .await
        .map_err(SpliceError::Copy)?;
    Ok(())
}
