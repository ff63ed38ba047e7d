//! Gateway listener sockets: binds each socket the published table serves (TCP for HTTP, HTTPS, TLS and TCP listeners, UDP for UDP ones), closes those it no longer serves, and records the ones that cannot be bound.
//!
//! Listeners that share an address and port share one socket: the table merges them by
//! hostname. A socket that cannot be bound (the port is taken, the address is not local) is
//! reported to the control plane, which marks its listeners `Accepted=False,
//! reason=PortUnavailable`; the other sockets serve. A socket dropped from the table stops
//! accepting at once and its connections finish under the grace period, as at shutdown.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Body;
use sluice_proxy::{
    serve, serve_datagrams, serve_streams, serve_tls, ClientBody, ClientInfo, DatagramOptions,
    ListenerOptions, ShutdownSignal, ShutdownTrigger, StreamMetrics, StreamOptions, TlsTerminator,
};
use sluice_routing::{SocketProtocol, Transport};
use tokio::task::JoinHandle;

use crate::control::ControlPlane;
use crate::serve::bind_listener;

/// How soon a socket that could not be bound is tried again.
const BIND_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// One bound Gateway socket: its protocol, its own stop, and its task.
struct BoundSocket {
    protocol: SocketProtocol,
    stop: ShutdownTrigger,
    task: JoinHandle<()>,
}

/// The timeouts and metrics of the Gateway's TLS, TCP and UDP listeners.
#[derive(Clone)]
pub(crate) struct StreamSettings {
    /// `--connect-timeout`, for each endpoint a connection tries.
    pub connect: std::time::Duration,
    /// `--udp-idle-timeout`
    pub udp_idle: std::time::Duration,
    /// `--udp-max-flows`
    pub udp_max_flows: usize,
    pub metrics: StreamMetrics,
}

/// A TLS terminator for an HTTPS or TLS socket; an HTTPS socket's also serves the TLS
/// listeners that may share it, with `streams`.
fn terminator(
    (address, protocol): (SocketAddr, SocketProtocol),
    control: &ControlPlane,
    connect_timeout: std::time::Duration,
    streams: StreamOptions,
) -> Result<Arc<TlsTerminator>, String> {
    let terminator = TlsTerminator::new(control.table().clone(), connect_timeout)
        .map_err(|error| error.to_string())?;
    Ok(Arc::new(match protocol {
        SocketProtocol::Tls => terminator.for_gateway_stream_socket(address),
        _ => terminator.for_gateway_socket(address, streams),
    }))
}

/// What a socket is served with.
struct Serving<'a, F> {
    control: &'a Arc<ControlPlane>,
    handler: &'a F,
    options: &'a ListenerOptions,
    settings: StreamSettings,
}

/// Binds one socket and starts serving it as its protocol says.
fn start_socket<F, Fut, B>(
    address: SocketAddr,
    protocol: SocketProtocol,
    serving: &Serving<'_, F>,
) -> Result<BoundSocket, String>
where
    F: Fn(Request<ClientBody>, ClientInfo) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (stop, signal) = ShutdownSignal::new();
    let (control, options, settings) = (serving.control, serving.options, &serving.settings);
    if protocol == SocketProtocol::Udp {
        let socket = bind_datagram(address)?;
        let datagram_options = DatagramOptions {
            table: control.table().clone(),
            socket: address,
            idle_timeout: settings.udp_idle,
            max_flows: settings.udp_max_flows,
            metrics: settings.metrics.clone(),
        };
        let task = tokio::spawn(serve_datagrams(socket, datagram_options, signal));
        return Ok(BoundSocket {
            protocol,
            stop,
            task,
        });
    }
    // An HTTPS socket's TLS listeners are served as a TLS socket's are.
    let stream_options = StreamOptions {
        table: control.table().clone(),
        socket: address,
        protocol: match protocol {
            SocketProtocol::Https => SocketProtocol::Tls,
            protocol => protocol,
        },
        connect_timeout: settings.connect,
        handshake_timeout: options.client_header_timeout,
        grace_period: options.grace_period,
        metrics: settings.metrics.clone(),
    };
    let tls = match protocol {
        SocketProtocol::Https | SocketProtocol::Tls => Some(terminator(
            (address, protocol),
            control,
            settings.connect,
            stream_options.clone(),
        )?),
        _ => None,
    };
    let listener = bind_listener(address, false).map_err(|error| error.to_string())?;
    let socket_options = ListenerOptions {
        gateway_socket: Some(address),
        ..options.clone()
    };
    let handler = serving.handler.clone();
    let task = match (protocol, tls) {
        (SocketProtocol::Https, Some(tls)) => {
            tokio::spawn(serve_tls(listener, handler, signal, socket_options, tls))
        }
        (SocketProtocol::Http, _) => tokio::spawn(serve(listener, handler, signal, socket_options)),
        (_, tls) => tokio::spawn(serve_streams(listener, stream_options, tls, signal)),
    };
    Ok(BoundSocket {
        protocol,
        stop,
        task,
    })
}

/// A UDP socket bound at `address`, non-blocking for tokio.
fn bind_datagram(address: SocketAddr) -> Result<tokio::net::UdpSocket, String> {
    let socket = std::net::UdpSocket::bind(address).map_err(|error| error.to_string())?;
    socket
        .set_nonblocking(true)
        .map_err(|error| error.to_string())?;
    tokio::net::UdpSocket::from_std(socket).map_err(|error| error.to_string())
}

/// Keeps the bound Gateway sockets equal to the published table's until `shutdown` stops
/// serving, then stops them all and waits for their connections to finish.
pub(crate) async fn run<F, Fut, B>(
    control: Arc<ControlPlane>,
    handler: F,
    (options, settings): (ListenerOptions, StreamSettings),
    shutdown: ShutdownSignal,
) where
    F: Fn(Request<ClientBody>, ClientInfo) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let serving = Serving {
        control: &control,
        handler: &handler,
        options: &options,
        settings,
    };
    let mut wanted = control.gateway_sockets();
    let mut bound: BTreeMap<(SocketAddr, Transport), BoundSocket> = BTreeMap::new();
    let stop = shutdown.wait();
    tokio::pin!(stop);
    loop {
        let sockets = wanted.borrow_and_update().clone();
        let mut unbound = Vec::new();
        bound.retain(|(address, _), socket| {
            let keep = sockets
                .iter()
                .any(|(wanted, protocol)| wanted == address && *protocol == socket.protocol);
            if !keep {
                tracing::info!(%address, "Gateway socket no longer served; closing it");
                socket.stop.stop();
            }
            keep
        });
        for (address, protocol) in sockets {
            let Entry::Vacant(slot) = bound.entry((address, protocol.transport())) else {
                continue;
            };
            match start_socket(address, protocol, &serving) {
                Ok(socket) => {
                    tracing::info!(%address, protocol = protocol.as_str(), "Gateway socket bound");
                    slot.insert(socket);
                }
                Err(error) => {
                    tracing::warn!(%address, %error, "cannot bind a Gateway listener's socket");
                    unbound.push((address, error));
                }
            }
        }
        let retry = !unbound.is_empty();
        control.set_unbound(unbound);
        tokio::select! {
            changed = wanted.changed() => if changed.is_err() { break },
            () = tokio::time::sleep(BIND_RETRY), if retry => {}
            () = &mut stop => break,
        }
    }
    for socket in bound.values() {
        socket.stop.stop();
    }
    for (_, socket) in bound {
        let _ = socket.task.await;
    }
}
