//! Listeners: accept TCP connections, serve HTTP/1.1 (sluice's own codec) or HTTP/2 (hyper's) on each under the client limits, and shut down in phases: drain, stop, finish.
//!
//! The top layer of the proxy crate: it may use `request` (the table handle, the default
//! timeouts) and every layer below it.
//!
//! Each connection runs in its own task, which also supervises it: the request head must
//! arrive within the header timeout (from accept, or from the first byte of a later request),
//! a keep-alive connection closes after the idle timeout, a client that stops reading a
//! response is cut off, and a client that cancels requests as fast as it sends them (HTTP/2
//! rapid reset) is disconnected. Every HTTP/1.1 head is held to the framing rules
//! (`framing.rs`) before the handler sees it; a refused head is answered by the listener.

mod accept;
mod activity;
mod client_auth;
mod client_io;
mod datagram;
mod detect;
mod framing;
mod http1;
mod proxy_protocol;
mod rewound;
mod stream;
mod supervisor;
mod tls;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

use crate::telemetry::{ListenerMetrics, OpenConnection};
use accept::accept_until_stopped;
use activity::{ClientTimeouts, ConnectionActivity, RequestActivity};
use client_io::{ClientIo, ReadReady};
pub use datagram::{serve_datagrams, DatagramOptions, DEFAULT_UDP_MAX_FLOWS};
use detect::Protocol;
use http1::Http1;
use rewound::Rewound;
pub use stream::{serve_streams, StreamOptions};
use supervisor::supervise;
use tls::Handshake;
pub use tls::{TlsSetupError, TlsTerminator};

use crate::client_body::ClientBody;
use crate::connection::ClientInfo;
use crate::request::options::DEFAULT_BODY_IDLE_TIMEOUT;
use crate::shutdown::ShutdownSignal;

/// `--client-header-timeout`: the whole request head must arrive within this (slowloris).
pub const DEFAULT_CLIENT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// `--client-idle-timeout`: a keep-alive connection with no request in flight closes after this.
pub const DEFAULT_CLIENT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// `--max-header-bytes`: the request line and headers together (431 beyond).
pub const DEFAULT_MAX_HEADER_BYTES: usize = 64 * 1024;
/// `--max-headers`: header fields per request (431 beyond); hyper's default.
pub const DEFAULT_MAX_HEADERS: usize = 100;
/// `--max-concurrent-streams`: HTTP/2 streams a client may have open at once.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 256;

/// A listener's protocol options and client limits.
#[derive(Clone, Debug)]
pub struct ListenerOptions {
    /// Every connection starts with a PROXY protocol (v1 or v2) header naming the client; a
    /// connection without a valid one is closed.
    pub proxy_protocol: bool,
    pub client_header_timeout: Duration,
    pub client_idle_timeout: Duration,
    /// How long a response may wait for the client to read more.
    pub body_idle_timeout: Duration,
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub max_concurrent_streams: u32,
    /// When stopping, how long requests in flight may finish.
    pub grace_period: Duration,
    /// Where the listener counts its connections and handshakes.
    pub metrics: ListenerMetrics,
    /// Set on a Gateway listener's socket: its bound address (see [`ClientInfo`]).
    pub gateway_socket: Option<SocketAddr>,
}

impl Default for ListenerOptions {
    fn default() -> Self {
        Self {
            proxy_protocol: false,
            client_header_timeout: DEFAULT_CLIENT_HEADER_TIMEOUT,
            client_idle_timeout: DEFAULT_CLIENT_IDLE_TIMEOUT,
            body_idle_timeout: DEFAULT_BODY_IDLE_TIMEOUT,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            max_headers: DEFAULT_MAX_HEADERS,
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            grace_period: Duration::from_secs(30),
            metrics: ListenerMetrics::default(),
            gateway_socket: None,
        }
    }
}

impl ListenerOptions {
    fn timeouts(&self) -> ClientTimeouts {
        ClientTimeouts {
            header: self.client_header_timeout,
            idle: self.client_idle_timeout,
            write_stall: self.body_idle_timeout,
        }
    }

    fn http2_builder(&self) -> http2::Builder<TokioExecutor> {
        let mut builder = http2::Builder::new(TokioExecutor::new());
        builder
            .timer(TokioTimer::new())
            .max_concurrent_streams(self.max_concurrent_streams)
            .max_header_list_size(u32::try_from(self.max_header_bytes).unwrap_or(u32::MAX));
        builder
    }
}

/// The response body an HTTP/2 stream sends: the handler's, holding the request's place on
/// the connection until it ends.
pub(crate) struct ServedBody<B> {
    inner: B,
    _request: RequestActivity,
}

impl<B> Body for ServedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx).map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// What a listener serves: a function from a request and its connection to a response.
/// [`serve`] and [`serve_tls`] take any such closure; inside, this one bound stands for it.
trait Handler: Clone + Send + Sync + 'static {
    type Body: Body<Data = Bytes, Error: Into<Box<dyn std::error::Error + Send + Sync>>>
        + Send
        + Unpin
        + 'static;
    type Future: Future<Output = Response<Self::Body>> + Send + 'static;

    fn call(&self, request: Request<ClientBody>, client: ClientInfo) -> Self::Future;
}

impl<F, Fut, B> Handler for F
where
    F: Fn(Request<ClientBody>, ClientInfo) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Body = B;
    type Future = Fut;

    fn call(&self, request: Request<ClientBody>, client: ClientInfo) -> Fut {
        self(request, client)
    }
}

/// Everything a connection task needs from its listener.
struct Listener<F> {
    handler: F,
    http2: http2::Builder<TokioExecutor>,
    options: ListenerOptions,
    /// The listening socket's address, when it names one IP: every connection's own address
    /// then, which saves a getsockname per connection.
    address: Option<SocketAddr>,
    shutdown: ShutdownSignal,
    /// Terminates TLS first, on the TLS listener.
    tls: Option<Arc<TlsTerminator>>,
}

/// Serves `handler` on every connection accepted from `listener` until `shutdown` reaches
/// [`Phase::Stopping`], then closes the listener, closes idle keep-alive connections (HTTP/1.1
/// answers in flight with `Connection: close`, HTTP/2 sends GOAWAY) and waits up to the grace
/// period for requests in flight to finish.
pub async fn serve<F, Fut, B>(
    listener: TcpListener,
    handler: F,
    shutdown: ShutdownSignal,
    options: ListenerOptions,
) where
    F: Fn(Request<ClientBody>, ClientInfo) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    serve_listener(listener, handler, shutdown, options, None).await;
}

/// [`serve`] for the TLS listener: each connection's handshake goes through `tls` first
/// (within the client header timeout), then HTTP/2 or HTTP/1.1 as ALPN chose.
pub async fn serve_tls<F, Fut, B>(
    listener: TcpListener,
    handler: F,
    shutdown: ShutdownSignal,
    options: ListenerOptions,
    tls: Arc<TlsTerminator>,
) where
    F: Fn(Request<ClientBody>, ClientInfo) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    serve_listener(listener, handler, shutdown, options, Some(tls)).await;
}

async fn serve_listener<H: Handler>(
    listener: TcpListener,
    handler: H,
    shutdown: ShutdownSignal,
    options: ListenerOptions,
    tls: Option<Arc<TlsTerminator>>,
) {
    let grace_period = options.grace_period;
    let address = listener
        .local_addr()
        .ok()
        .filter(|address| !address.ip().is_unspecified());
    let context = Arc::new(Listener {
        handler,
        address,
        http2: options.http2_builder(),
        options,
        shutdown: shutdown.clone(),
        tls,
    });
    let accepted = context
        .options
        .metrics
        .accepted_by(crate::worker::current());
    let open = accept_until_stopped(listener, shutdown, grace_period, |stream, peer| {
        accepted.inc();
        serve_connection(stream, peer, context.clone())
    })
    .await;
    if open > 0 {
        tracing::warn!(
            ?grace_period,
            open,
            "requests were still in flight after the grace period; their connections were closed"
        );
    }
}

/// Serves one connection: reads the PROXY header when required, then HTTP until the client
/// leaves, a limit is hit, or the listener stops.
///
/// Everything before HTTP/1.1's requests (PROXY header, TLS handshake, protocol detection,
/// and HTTP/2 in full) runs in a boxed future that is freed when it ends: a connection's task
/// is as large as its largest state, and an idle HTTP/1.1 connection should hold little more
/// than what parking keeps.
async fn serve_connection<H: Handler>(
    stream: TcpStream,
    peer: SocketAddr,
    listener: Arc<Listener<H>>,
) {
    let serving = Box::pin(prepare(stream, peer, &listener)).await;
    if let Some(serving) = serving {
        serving.await;
    }
}

/// An HTTP/1.1 connection's serving, boxed: all that its task holds besides is a pointer.
type Serving<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Reads the PROXY header, terminates (or passes through) TLS and detects the protocol;
/// serves HTTP/2 in full, and returns HTTP/1.1's serving.
async fn prepare<H: Handler>(
    mut stream: TcpStream,
    peer: SocketAddr,
    listener: &Listener<H>,
) -> Option<Serving<'_>> {
    let _ = stream.set_nodelay(true);
    let options = &listener.options;
    let (mut info, prefix) = client_info(&mut stream, peer, listener.address, options).await?;
    let Some(tls) = &listener.tls else {
        return start_http(stream, prefix, None, info, listener).await;
    };
    let handshake = tls.handshake(Rewound::new(stream, prefix));
    let metrics = &options.metrics;
    match tokio::time::timeout(options.client_header_timeout, handshake).await {
        Ok(Ok(Handshake::Terminated(stream, session))) => {
            metrics.handshakes_succeeded.inc();
            info.tls = Some(session);
            let alpn = Protocol::of_alpn(stream.get_ref().1.alpn_protocol());
            return start_http(stream, Bytes::new(), alpn, info, listener).await;
        }
        Ok(Ok(Handshake::Passthrough(passthrough))) => {
            let _open = OpenConnection::passthrough(metrics);
            if let Err(error) = tls.splice(passthrough).await {
                tracing::debug!(%peer, %error, "passthrough connection failed");
            }
        }
        Ok(Ok(Handshake::TlsListener(io))) => tls.serve_tls_listener(io).await,
        Ok(Err(error)) => {
            metrics.handshakes_failed.inc();
            tracing::debug!(%peer, %error, "TLS handshake failed");
        }
        Err(_) => {
            metrics.handshakes_timed_out.inc();
            tracing::debug!(%peer, "TLS handshake timed out");
        }
    }
    None
}

/// Starts HTTP on one connection's byte stream: HTTP/2 (when ALPN or the first bytes say so)
/// is served here until the connection ends; HTTP/1.1's serving is returned.
async fn start_http<H: Handler, S>(
    mut stream: S,
    prefix: Bytes,
    alpn: Option<Protocol>,
    info: ClientInfo,
    listener: &Listener<H>,
) -> Option<Serving<'_>>
where
    S: AsyncRead + AsyncWrite + ReadReady + Send + Unpin + 'static,
{
    let options = &listener.options;
    let peer = info.peer;
    let activity = Arc::new(ConnectionActivity::new());
    let open = OpenConnection::new(&options.metrics);
    let (protocol, read) = match alpn {
        Some(protocol) => (protocol, BytesMut::from(&prefix[..])),
        None => {
            let first_head_due = tokio::time::Instant::now() + options.client_header_timeout;
            let detected = detect::detect(&mut stream, prefix);
            match tokio::time::timeout_at(first_head_due, detected).await {
                Ok(Ok(detected)) => detected?,
                Ok(Err(error)) => {
                    tracing::debug!(%peer, %error, "connection failed before its first request");
                    return None;
                }
                Err(_) => {
                    tracing::debug!(%peer, "closed a connection that sent no request in time");
                    return None;
                }
            }
        }
    };
    if protocol == Protocol::Http1 {
        let http1 = Http1 {
            listener,
            activity,
            info,
            open,
            peer,
        };
        return Some(Box::pin(http1.serve(stream, read)));
    }
    let io = ClientIo::new(stream, read.freeze(), activity.clone());
    let service = ClientService {
        handler: listener.handler.clone(),
        activity: activity.clone(),
        info,
        open,
    };
    let mut connection = listener.http2.serve_connection(TokioIo::new(io), service);
    let stopping = listener.shutdown.clone().wait();
    let timeouts = options.timeouts();
    let ended = supervise(
        Pin::new(&mut connection),
        &activity,
        timeouts,
        stopping,
        None,
        peer,
    )
    .await;
    if let Some(Err(error)) = ended {
        tracing::debug!(%peer, %error, "connection ended with an error");
    }
    None
}

/// The streams of one HTTP/2 connection, as hyper calls them: each goes to the handler with
/// the connection's `ClientInfo`, counted in the connection's activity.
struct ClientService<H> {
    handler: H,
    activity: Arc<ConnectionActivity>,
    info: ClientInfo,
    open: OpenConnection,
}

/// One stream's answer, boxed: hyper keeps a pointer between polls instead of moving the
/// handler's whole state machine into its own slot.
type Answering<B> =
    Pin<Box<dyn Future<Output = Result<Response<ServedBody<B>>, Infallible>> + Send>>;

impl<H: Handler> hyper::service::Service<Request<Incoming>> for ClientService<H> {
    type Response = Response<ServedBody<H::Body>>;
    type Error = Infallible;
    type Future = Answering<H::Body>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        self.open.request(request.version());
        // The handler's future is made inside the box: made here, its whole state (the
        // forwarding future is not boxed) was copied into the box, 8.6 KB a stream
        // (callgrind, h2c).
        Box::pin(respond(
            self.handler.clone(),
            request.map(ClientBody::from_hyper),
            self.info.clone(),
            self.activity.request_started(),
        ))
    }
}

/// Who the client is: from the PROXY header when the listener requires one (with the bytes
/// read past it), else the connection's own addresses. `None` closes the connection.
async fn client_info(
    stream: &mut TcpStream,
    peer: SocketAddr,
    listening: Option<SocketAddr>,
    options: &ListenerOptions,
) -> Option<(ClientInfo, Bytes)> {
    let server = match listening {
        Some(address) => address,
        None => stream.local_addr().unwrap_or(peer),
    };
    let (client, server, rest) = match options.proxy_protocol {
        false => (peer, server, Bytes::new()),
        true => match proxy_protocol::read_header(stream, options.client_header_timeout).await {
            Ok(header) => {
                let (client, server) = header.addresses.unwrap_or((peer, server));
                (client, server, header.rest)
            }
            Err(error) => {
                tracing::debug!(%peer, %error, "closed a connection without a valid PROXY header");
                return None;
            }
        },
    };
    let info = ClientInfo {
        peer,
        client,
        server,
        tls: None,
        gateway_socket: options.gateway_socket,
        forwarded: crate::request::forwarded::forwarded_values(client, server),
    };
    Some((info, rest))
}

/// One stream's answer, holding its place on the connection until its body ends.
async fn respond<H: Handler>(
    handler: H,
    request: Request<ClientBody>,
    info: ClientInfo,
    mut activity: RequestActivity,
) -> Result<Response<ServedBody<H::Body>>, Infallible> {
    let response = handler.call(request, info).await;
    activity.answered();
    Ok(response.map(|body| ServedBody {
        inner: body,
        _request: activity,
    }))
}
