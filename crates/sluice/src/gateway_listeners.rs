//! Gateway listener sockets: binds each socket the published table serves, closes those it no longer serves, and records the ones that cannot be bound.
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
    serve, serve_streams, serve_tls, ClientBody, ClientInfo, ListenerOptions, ShutdownSignal,
    ShutdownTrigger, StreamOptions, TlsTerminator,
};
use sluice_routing::SocketProtocol;
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

/// Binds one socket, with its TLS terminator when it serves HTTPS or TLS.
fn bind_socket(
    address: SocketAddr,
    protocol: SocketProtocol,
    control: &ControlPlane,
    connect_timeout: std::time::Duration,
) -> Result<(tokio::net::TcpListener, Option<Arc<TlsTerminator>>), String> {
    let terminator = match protocol {
        SocketProtocol::Https | SocketProtocol::Tls => {
            let terminator = TlsTerminator::new(control.table().clone(), connect_timeout)
                .map_err(|error| error.to_string())?;
            Some(Arc::new(match protocol {
                SocketProtocol::Tls => terminator.for_gateway_stream_socket(address),
                _ => terminator.for_gateway_socket(address),
            }))
        }
        SocketProtocol::Http | SocketProtocol::Tcp => None,
    };
    let listener = bind_listener(address, false).map_err(|error| error.to_string())?;
    Ok((listener, terminator))
}

/// Keeps the bound Gateway sockets equal to the published table's until `shutdown` stops
/// serving, then stops them all and waits for their connections to finish.
pub(crate) async fn run<F, Fut, B>(
    control: Arc<ControlPlane>,
    handler: F,
    (options, connect_timeout): (ListenerOptions, std::time::Duration),
    shutdown: ShutdownSignal,
) where
    F: Fn(Request<ClientBody>, ClientInfo) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut wanted = control.gateway_sockets();
    let mut bound: BTreeMap<SocketAddr, BoundSocket> = BTreeMap::new();
    let stop = shutdown.wait();
    tokio::pin!(stop);
    loop {
        let sockets = wanted.borrow_and_update().clone();
        let mut unbound = Vec::new();
        bound.retain(|address, socket| {
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
            if let Entry::Vacant(slot) = bound.entry(address) {
                match bind_socket(address, protocol, &control, connect_timeout) {
                    Ok((listener, terminator)) => {
                        tracing::info!(%address, protocol = protocol.as_str(), "Gateway socket bound");
                        let (stop, signal) = ShutdownSignal::new();
                        let socket_options = ListenerOptions {
                            gateway_socket: Some(address),
                            ..options.clone()
                        };
                        let task = match (protocol.is_http(), terminator) {
                            (false, terminator) => {
                                let stream_options = StreamOptions {
                                    table: control.table().clone(),
                                    socket: address,
                                    protocol,
                                    connect_timeout,
                                    handshake_timeout: options.client_header_timeout,
                                    grace_period: options.grace_period,
                                };
                                tokio::spawn(serve_streams(
                                    listener,
                                    stream_options,
                                    terminator,
                                    signal,
                                ))
                            }
                            (true, Some(tls)) => tokio::spawn(serve_tls(
                                listener,
                                handler.clone(),
                                signal,
                                socket_options,
                                tls,
                            )),
                            (true, None) => tokio::spawn(serve(
                                listener,
                                handler.clone(),
                                signal,
                                socket_options,
                            )),
                        };
                        slot.insert(BoundSocket {
                            protocol,
                            stop,
                            task,
                        });
                    }
                    Err(error) => {
                        tracing::warn!(%address, %error, "cannot bind a Gateway listener's socket");
                        unbound.push((address, error));
                    }
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
