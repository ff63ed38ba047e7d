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

use bytes::Bytes;
use sluice_routing::{Backend, GatewayOutcome, RoutingTable, SocketProtocol};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::accept::Acceptor;
use super::rewound::Rewound;
use super::tls::{StreamHandshake, TlsTerminator};
use crate::request::table_handle::TableHandle;
use crate::shutdown::ShutdownSignal;

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
    let mut acceptor = Acceptor::default();
    let mut connections = JoinSet::new();
    let stop = shutdown.wait();
    tokio::pin!(stop);
    loop {
        while connections.try_join_next().is_some() {}
        let (stream, peer) = tokio::select! {
            accepted = acceptor.accept(&listener) => accepted,
            () = &mut stop => break,
        };
        let options = options.clone();
        let tls = tls.clone();
        connections.spawn(async move {
            if let Err(error) = serve_stream(stream, &options, tls.as_deref()).await {
                tracing::debug!(%peer, socket = %options.socket, %error, "stream connection ended");
            }
        });
    }
    drop(listener);
    let finished = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(options.grace_period, finished)
        .await
        .is_err()
    {
        connections.shutdown().await;
    }
}

/// Routes and splices one connection.
async fn serve_stream(
    stream: TcpStream,
    options: &StreamOptions,
    tls: Option<&TlsTerminator>,
) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    let socket = options.socket;
    let Some(tls) = tls.filter(|_| options.protocol == SocketProtocol::Tls) else {
        let table = options.table.load();
        let backend = route(&table, socket, "")?;
        let mut stream = stream;
        return splice(&mut stream, &[], backend, options.connect_timeout).await;
    };
    let handshake = tls.stream_handshake(Rewound::new(stream, Bytes::new()), |table, name| {
        route(table, socket, name).map(|backend| backend.id().clone())
    });
    let (backend, handshake) = tokio::time::timeout(options.handshake_timeout, handshake)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
    // The table the route was chosen in may have been replaced since: the backend is found
    // again by its id in the current one.
    let table = options.table.load();
    let backend = table
        .backend_by_id(&backend)
        .ok_or_else(|| io::Error::other(format!("{backend} is no longer served")))?;
    match handshake {
        StreamHandshake::Passthrough { mut socket, replay } => {
            splice(&mut socket, &[&replay], backend, options.connect_timeout).await
        }
        StreamHandshake::Terminated(mut stream) => {
            splice(&mut stream, &[], backend, options.connect_timeout).await
        }
    }
}

/// The backend a connection goes to: the first rule served under its server name on the
/// listener that name selects, and one of the rule's backendRefs by weight.
fn route<'t>(table: &'t RoutingTable, socket: SocketAddr, name: &str) -> io::Result<&'t Backend> {
    let outcome = table
        .gateways()
        .stream_lookup(socket, name, |total| fastrand::u32(1..=total));
    let GatewayOutcome::Matched { rule, choice } = outcome else {
        return Err(io::Error::other(format!(
            "no route takes server name {name:?}"
        )));
    };
    choice
        .and_then(|choice| choice.backend)
        .and_then(|index| table.backend(index))
        .ok_or_else(|| {
            io::Error::other(format!(
                "the backendRef route {} chose did not resolve",
                rule.route
            ))
        })
}

/// Connects to the backend's endpoints in rotation until one accepts, writes `replay` (what
/// was read from the client before the route was known), then copies bytes both ways until
/// either side closes.
pub(crate) async fn splice<S>(
    client: &mut S,
    replay: &[&[u8]],
    backend: &Backend,
    connect_timeout: Duration,
) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let set = backend.endpoints().load();
    let eligible = set.eligible();
    if eligible.is_empty() {
        return Err(io::Error::other(format!(
            "{} has no endpoints",
            backend.id()
        )));
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
        for bytes in replay {
            upstream.write_all(bytes).await?;
        }
        tokio::io::copy_bidirectional(client, &mut upstream).await?;
        return Ok(());
    }
    Err(last_error)
}
