//! Gateway UDP listeners: each client address and port is a flow, routed once to a backend chosen by weight and one of its endpoints, with an upstream socket of its own that carries the replies back, until the flow has been idle for the flow timeout.
//!
//! A datagram whose flow no route takes (no UDPRoute, an unresolved backendRef, a backend
//! without endpoints) is dropped: UDP has no way to say why, so the reason is logged. A flow
//! keeps its endpoint while it lives, even if the endpoint leaves the Service: a removed
//! endpoint gets no new flow, and an existing one ends when it goes idle.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use sluice_routing::{GatewayOutcome, RoutingTable};
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

use crate::request::table_handle::TableHandle;
use crate::shutdown::ShutdownSignal;
use crate::telemetry::metrics::{StreamMetrics, StreamResult};

/// The largest datagram carried (the UDP maximum payload).
const MAX_DATAGRAM: usize = 65_507;

/// The most flows one UDP listener keeps at once by default (`--udp-max-flows`): each holds a
/// socket, and a flood of datagrams from forged source addresses must not exhaust the
/// process's file descriptors. A new client beyond it is dropped (counted as failed) until
/// flows go idle.
pub const DEFAULT_UDP_MAX_FLOWS: u32 = 16_384;

/// What a Gateway UDP socket needs besides its socket.
#[derive(Clone)]
pub struct DatagramOptions {
    /// The published table, read for each new flow.
    pub table: TableHandle,
    /// The socket's address as the table keys it.
    pub socket: SocketAddr,
    /// How long a flow lives without a datagram either way (`--udp-idle-timeout`).
    pub idle_timeout: Duration,
    /// The most flows kept at once (`--udp-max-flows`); a new client beyond it is dropped.
    pub max_flows: usize,
    /// Flows and bytes by route.
    pub metrics: StreamMetrics,
}

/// One client flow: its upstream socket, when it last carried a datagram, and the task that
/// carries the replies.
struct Flow {
    upstream: Arc<UdpSocket>,
    last_seen: Arc<AtomicU64>,
    replies: JoinHandle<()>,
    /// Bytes received from the client, under the flow's route.
    received: Counter,
    /// The route's open flows, this one among them.
    open: Gauge,
}

impl Drop for Flow {
    fn drop(&mut self) {
        self.replies.abort();
        self.open.dec();
    }
}

/// Receives datagrams on a Gateway UDP socket until `shutdown`, each sent on through its
/// client's flow (made on the first datagram); flows end after the idle timeout.
pub async fn serve_datagrams(
    socket: UdpSocket,
    options: DatagramOptions,
    shutdown: ShutdownSignal,
) {
    let socket = Arc::new(socket);
    let started = Instant::now();
    let mut flows: HashMap<SocketAddr, Flow> = HashMap::new();
    let mut sweep = tokio::time::interval(sweep_period(options.idle_timeout));
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut buffer = vec![0u8; MAX_DATAGRAM];
    let stop = shutdown.wait();
    tokio::pin!(stop);
    loop {
        let (length, client) = tokio::select! {
            received = socket.recv_from(&mut buffer) => match received {
                Ok(received) => received,
                Err(error) => {
                    // An ICMP error for an earlier reply, on some systems: not the socket's end.
                    tracing::debug!(socket = %options.socket, %error, "UDP receive failed");
                    continue;
                }
            },
            _ = sweep.tick() => {
                end_idle_flows(&mut flows, started, options.idle_timeout);
                continue;
            }
            () = &mut stop => break,
        };
        let datagram = &buffer[..length];
        if flows.len() >= options.max_flows && !flows.contains_key(&client) {
            tracing::debug!(%client, socket = %options.socket, "UDP datagram dropped: too many flows");
            options.metrics.connection("UDP", "", StreamResult::Failed);
            continue;
        }
        let flow = match flows.entry(client) {
            Entry::Occupied(flow) => flow.into_mut(),
            Entry::Vacant(slot) => {
                let context = FlowContext {
                    listener: &socket,
                    client,
                    started,
                    options: &options,
                };
                match open_flow(&context).await {
                    Ok(flow) => slot.insert(flow),
                    Err((route, result, error)) => {
                        let route = route.as_deref().unwrap_or("");
                        options.metrics.connection("UDP", route, result);
                        tracing::debug!(%client, socket = %options.socket, %error, "UDP datagram dropped");
                        continue;
                    }
                }
            }
        };
        flow.last_seen
            .store(millis_since(started), Ordering::Relaxed);
        flow.received.inc_by(length as u64);
        if let Err(error) = flow.upstream.send(datagram).await {
            tracing::debug!(%client, %error, "UDP datagram to the endpoint failed");
        }
    }
}

/// How often flows are looked at for idleness: a quarter of the timeout, within 10 ms to 5 s,
/// so a flow ends at most a quarter late.
fn sweep_period(idle_timeout: Duration) -> Duration {
    (idle_timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(5))
}

/// Ends the flows that carried no datagram either way for the idle timeout (dropping a flow
/// stops its reply task and closes its upstream socket).
fn end_idle_flows(flows: &mut HashMap<SocketAddr, Flow>, started: Instant, idle_timeout: Duration) {
    let now = millis_since(started);
    let timeout = duration_millis(idle_timeout);
    flows.retain(|_, flow| now.saturating_sub(flow.last_seen.load(Ordering::Relaxed)) < timeout);
}

/// What opening a flow needs from the listener's loop.
struct FlowContext<'a> {
    listener: &'a Arc<UdpSocket>,
    client: SocketAddr,
    started: Instant,
    options: &'a DatagramOptions,
}

/// Why a flow could not be opened: its route (when one took it), the result to count, and
/// the error.
type FlowRefusal = (Option<Arc<str>>, StreamResult, io::Error);

/// Routes a new client, connects an upstream socket to the chosen endpoint, and starts the
/// task that sends its replies to the client.
async fn open_flow(context: &FlowContext<'_>) -> Result<Flow, FlowRefusal> {
    let table = context.options.table.load();
    let (route, endpoint) = choose_endpoint(&table, context.options.socket)?;
    let upstream = connect_upstream(endpoint)
        .await
        .map_err(|error| (Some(route.clone()), StreamResult::Failed, error))?;
    let metrics = &context.options.metrics;
    metrics.connection("UDP", &route, StreamResult::Spliced);
    let (received, sent) = metrics.byte_counters("UDP", &route);
    let open = metrics.open("UDP", &route);
    open.inc();
    let last_seen = Arc::new(AtomicU64::new(millis_since(context.started)));
    let replies = tokio::spawn(carry_replies(
        upstream.clone(),
        context.listener.clone(),
        context.client,
        (last_seen.clone(), context.started, sent),
    ));
    Ok(Flow {
        upstream,
        last_seen,
        replies,
        received,
        open,
    })
}

/// A UDP socket of the endpoint's family, connected to it.
async fn connect_upstream(endpoint: SocketAddr) -> io::Result<Arc<UdpSocket>> {
    let unspecified = match endpoint.ip() {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let upstream = UdpSocket::bind(SocketAddr::new(unspecified, 0)).await?;
    upstream.connect(endpoint).await?;
    Ok(Arc::new(upstream))
}

/// The endpoint a new flow goes to, with its route: the listener's first rule, a backendRef
/// by weight, and the backend's next eligible endpoint in rotation.
fn choose_endpoint(
    table: &RoutingTable,
    socket: SocketAddr,
) -> Result<(Arc<str>, SocketAddr), FlowRefusal> {
    let outcome = table
        .gateways()
        .datagram_lookup(socket, |total| fastrand::u32(1..=total));
    let GatewayOutcome::Matched { rule, choice } = outcome else {
        let error = io::Error::other("no UDPRoute serves the listener");
        return Err((None, StreamResult::Refused, error));
    };
    let route = rule.route.clone();
    if let Some(why) = choice.and_then(|choice| choice.policy.refused.as_deref()) {
        let error = io::Error::other(why.to_owned());
        return Err((Some(route), StreamResult::Refused, error));
    }
    let backend = choice
        .and_then(|choice| choice.backend)
        .and_then(|index| table.backend(index));
    let Some(backend) = backend else {
        let error = io::Error::other(format!(
            "the backendRef route {route} chose did not resolve"
        ));
        return Err((Some(route), StreamResult::Refused, error));
    };
    let set = backend.endpoints().load();
    let eligible = set.eligible();
    if eligible.is_empty() {
        let error = io::Error::other(format!("{} has no endpoints", backend.id()));
        return Err((Some(route), StreamResult::Failed, error));
    }
    let endpoint = &eligible[backend.next_turn() % eligible.len()];
    match endpoint.authority().as_str().parse() {
        Ok(address) => Ok((route, address)),
        Err(_) => {
            let error = io::Error::other(format!(
                "endpoint {} is not an address",
                endpoint.authority()
            ));
            Err((Some(route), StreamResult::Failed, error))
        }
    }
}

/// Sends each reply from the endpoint to the client, marking the flow as alive, until the
/// flow is dropped.
async fn carry_replies(
    upstream: Arc<UdpSocket>,
    listener: Arc<UdpSocket>,
    client: SocketAddr,
    (last_seen, started, sent): (Arc<AtomicU64>, Instant, Counter),
) {
    let mut buffer = vec![0u8; MAX_DATAGRAM];
    loop {
        match upstream.recv(&mut buffer).await {
            Ok(length) => {
                last_seen.store(millis_since(started), Ordering::Relaxed);
                sent.inc_by(length as u64);
                if let Err(error) = listener.send_to(&buffer[..length], client).await {
                    tracing::debug!(%client, %error, "UDP reply to the client failed");
                }
            }
            // A refused earlier datagram (ICMP port unreachable): the flow goes on.
            Err(error) => tracing::debug!(%client, %error, "UDP receive from the endpoint failed"),
        }
    }
}

fn millis_since(started: Instant) -> u64 {
    duration_millis(started.elapsed())
}

fn duration_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
