//! The userspace ClusterIP: a TCP relay that sends each accepted connection to a random eligible pod.
//!
//! A connection that finds no eligible pod, or whose pod refuses it, is reset, which is what a
//! client of a DNAT to a dead pod sees. Half-closes pass through (`copy_bidirectional` shuts
//! down the other side's write half); an error on either side resets both.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::cluster_ip::eligible;
use crate::error::DrillError;
use crate::PodEndpoint;

/// The ClusterIP address both emulations prefer.
pub const CLUSTER_IP: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 20)), 80);

type Pods = Arc<Vec<SocketAddr>>;

/// A running relay; stops (with every relayed connection) when dropped.
pub struct UserspaceClusterIp {
    address: SocketAddr,
    pods: watch::Sender<Pods>,
    task: JoinHandle<()>,
}

impl UserspaceClusterIp {
    /// Listens on 127.0.0.20:80, or on a free port of 127.0.0.20 when port 80 is not available.
    pub async fn start(endpoints: &[PodEndpoint]) -> Result<Self, DrillError> {
        let listener = match TcpListener::bind(CLUSTER_IP).await {
            Ok(listener) => listener,
            Err(_) => bind(SocketAddr::new(CLUSTER_IP.ip(), 0)).await?,
        };
        let address = listener.local_addr().map_err(|source| DrillError::Bind {
            address: CLUSTER_IP,
            source,
        })?;
        let (pods, watched) = watch::channel(Arc::new(eligible(endpoints)));
        let task = tokio::spawn(relay_all(listener, watched));
        Ok(Self {
            address,
            pods,
            task,
        })
    }

    /// The address clients connect to.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// New connections go to the eligible pods of `endpoints` from now on.
    pub fn update(&self, endpoints: &[PodEndpoint]) {
        self.pods.send_replace(Arc::new(eligible(endpoints)));
    }
}

impl Drop for UserspaceClusterIp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn bind(address: SocketAddr) -> Result<TcpListener, DrillError> {
    TcpListener::bind(address)
        .await
        .map_err(|source| DrillError::Bind { address, source })
}

async fn relay_all(listener: TcpListener, pods: watch::Receiver<Pods>) {
    let mut relays = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    let pod = pick(&pods.borrow());
                    relays.spawn(relay(client, pod));
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(5)).await,
            },
            Some(_) = relays.join_next(), if !relays.is_empty() => {}
        }
    }
}

/// A random pod, like kube-proxy's per-connection choice.
fn pick(pods: &[SocketAddr]) -> Option<SocketAddr> {
    if pods.is_empty() {
        return None;
    }
    pods.get(rand::random_range(0..pods.len())).copied()
}

async fn relay(mut client: TcpStream, pod: Option<SocketAddr>) {
    let _ = client.set_nodelay(true);
    let Some(pod) = pod else {
        return reset(client);
    };
    let Ok(mut upstream) = TcpStream::connect(pod).await else {
        return reset(client);
    };
    let _ = upstream.set_nodelay(true);
    if tokio::io::copy_bidirectional(&mut client, &mut upstream)
        .await
        .is_err()
    {
        reset(client);
        reset(upstream);
    }
}

/// Closes `stream` with a RST instead of a FIN.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}
