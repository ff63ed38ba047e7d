//! Pods: real HTTP/1.1 servers on their own loopback addresses that die the way their termination mode says.
//!
//! A pod answers any request with `200` and a body naming it, after a short service time, in two
//! chunks with a gap between them. On SIGTERM ([`Pod::terminate`]):
//! - **graceful** keeps serving (and accepting) for `drain_after`, then closes its listener,
//!   lets requests in flight finish, closes idle keep-alive connections, and exits (hyper's
//!   graceful shutdown, cut short after `grace_period` like the kubelet's SIGKILL);
//! - **abrupt** closes its listener at once and starts hyper's graceful shutdown on every
//!   connection: idle ones close immediately, a request still in its service time is answered
//!   by closing the connection (no response), and a response already being written finishes;
//! - **crash** closes the listener and aborts every connection at once; sockets have
//!   `SO_LINGER 0`, so peers get a RST, even in the middle of a body.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::DrillError;
use crate::options::Termination;
use crate::pod_http::{Connections, Shared};

/// Port every pod listens on, like a container port.
pub const POD_PORT: u16 = 8080;

/// Next pod address index in this process; never reused, like pod IPs in one run.
static NEXT_POD: AtomicU32 = AtomicU32::new(0);

/// How a pod serves and how it terminates.
#[derive(Clone, Debug)]
pub struct PodConfig {
    /// What SIGTERM does.
    pub termination: Termination,
    /// Graceful only: how long the pod serves on after SIGTERM (its preStop hook).
    pub drain_after: Duration,
    /// Time between reading a request and starting its response.
    pub service_time: Duration,
    /// Gap between the two chunks of a response body.
    pub chunk_gap: Duration,
    /// Graceful only: how long draining may take before connections are cut.
    pub grace_period: Duration,
}

impl PodConfig {
    /// A pod with the drill's service time (2 ms) and chunk gap (3 ms).
    pub fn new(termination: Termination, drain_after: Duration) -> Self {
        Self {
            termination,
            drain_after,
            service_time: Duration::from_millis(2),
            chunk_gap: Duration::from_millis(3),
            grace_period: Duration::from_secs(30),
        }
    }
}

/// Where a pod is in its life; phases only move forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PodPhase {
    /// Serving, not yet signalled.
    Running,
    /// Got SIGTERM; graceful pods still accept connections here.
    Terminating,
    /// The listener is closed: connecting is refused.
    ListenerClosed,
    /// Every connection is gone.
    Exited,
}

/// A running pod. Dropping it kills it.
pub struct Pod {
    name: String,
    address: SocketAddr,
    sigterm: watch::Sender<bool>,
    phase: watch::Receiver<PodPhase>,
    task: JoinHandle<()>,
}

impl Pod {
    /// Starts a pod on the next free address 127.0.X.Y:8080 (X from 1, Y in 1..=254).
    pub async fn start_next(config: PodConfig) -> Result<Pod, DrillError> {
        loop {
            let index = NEXT_POD.fetch_add(1, Ordering::Relaxed);
            let address = pod_address(index).ok_or(DrillError::NoPodAddress)?;
            match TcpListener::bind(address).await {
                Ok(listener) => return Ok(Self::serve(listener, address, index, config)),
                Err(error) if error.kind() == std::io::ErrorKind::AddrInUse => continue,
                Err(source) => return Err(DrillError::Bind { address, source }),
            }
        }
    }

    fn serve(listener: TcpListener, address: SocketAddr, index: u32, config: PodConfig) -> Pod {
        let name = format!("pod-{}", index + 1);
        let (sigterm, signalled) = watch::channel(false);
        let (phase_tx, phase) = watch::channel(PodPhase::Running);
        let shared = Shared::new(&name, address, config);
        let task = tokio::spawn(live(listener, shared, signalled, phase_tx));
        Pod {
            name,
            address,
            sigterm,
            phase,
            task,
        }
    }

    /// The pod's name, which its responses carry.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pod's address (its IP and port 8080).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Sends the pod SIGTERM; what follows depends on its termination mode.
    pub fn terminate(&self) {
        self.sigterm.send_replace(true);
    }

    /// Waits until the pod has reached `phase` (or died).
    pub async fn reached(&self, phase: PodPhase) {
        let mut current = self.phase.clone();
        let _ = current.wait_for(|now| *now >= phase).await;
    }

    /// The phase the pod is in now.
    pub fn phase(&self) -> PodPhase {
        *self.phase.borrow()
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The address of the `index`th pod of this process.
fn pod_address(index: u32) -> Option<SocketAddr> {
    let third = u8::try_from(1 + index / 254).ok()?;
    let fourth = u8::try_from(1 + index % 254).ok()?;
    let ip = Ipv4Addr::new(127, 0, third, fourth);
    Some(SocketAddr::new(IpAddr::V4(ip), POD_PORT))
}

/// The pod's whole life: serve until SIGTERM, then terminate the configured way.
async fn live(
    listener: TcpListener,
    shared: std::sync::Arc<Shared>,
    mut signalled: watch::Receiver<bool>,
    phase: watch::Sender<PodPhase>,
) {
    let mut connections = Connections::new(shared.clone());
    let sigterm = async move {
        let _ = signalled.wait_for(|got| *got).await;
    };
    connections.accept_until(&listener, sigterm).await;
    phase.send_replace(PodPhase::Terminating);
    let config = shared.config();
    match config.termination {
        Termination::Graceful => {
            let prestop = tokio::time::sleep(config.drain_after);
            connections.accept_until(&listener, prestop).await;
            drop(listener);
            phase.send_replace(PodPhase::ListenerClosed);
            connections.drain(config.grace_period).await;
        }
        Termination::Abrupt => {
            shared.refuse_new_responses();
            drop(listener);
            phase.send_replace(PodPhase::ListenerClosed);
            connections.drain(config.grace_period).await;
        }
        Termination::Crash => {
            drop(listener);
            phase.send_replace(PodPhase::ListenerClosed);
            connections.kill();
        }
    }
    phase.send_replace(PodPhase::Exited);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_addresses_are_distinct_and_on_loopback() {
        assert_eq!(pod_address(0), Some("127.0.1.1:8080".parse().unwrap()));
        assert_eq!(pod_address(253), Some("127.0.1.254:8080".parse().unwrap()));
        assert_eq!(pod_address(254), Some("127.0.2.1:8080".parse().unwrap()));
        assert_eq!(pod_address(255 * 254), None);
    }
}
