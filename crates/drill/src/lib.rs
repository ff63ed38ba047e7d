//! A rollout drill: a Kubernetes Deployment's rolling update on loopback, replayed against a proxy under load, counting every failed request.
//!
//! [`run`] starts real pods ([`pods`]), the Service's ClusterIP ([`cluster_ip`]) when the mode
//! needs one, and the proxy (through the caller's closure); then sends open-loop load
//! ([`load`]) while [`rollout`] replaces every pod, publishing each endpoint change after the
//! endpoint lag ([`lag`]). The [`Report`] says what the load saw.

pub mod cluster_ip;
mod drill;
pub mod error;
pub mod lag;
pub mod load;
pub mod netns;
pub mod nftables;
pub mod options;
mod pod_http;
pub mod pods;
pub mod report;
pub mod rollout;
pub mod userspace;

use std::net::SocketAddr;

pub use cluster_ip::ClusterIpKind;
pub use drill::{reexec_in_netns_if_needed, run};
pub use error::DrillError;
pub use options::{ClusterIpChoice, DrillOptions, Method, Mode, Termination};
pub use report::Report;

/// What the drill asks of the proxy under test. Implemented by the sluice binary.
pub trait ProxyUnderTest: Send + Sync + 'static {
    /// Where the load generator sends requests (plain HTTP/1.1, Host header `drill.local`).
    fn address(&self) -> SocketAddr;
    /// Publishes the Service's endpoints as its EndpointSlices show them *now*. The drill has
    /// already applied the endpoint lag before calling this.
    fn publish_endpoints(&self, endpoints: &[PodEndpoint]);
}

/// One pod's endpoint in the Service's EndpointSlices, with its conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodEndpoint {
    /// The pod's IP and container port.
    pub address: SocketAddr,
    /// `conditions.ready`.
    pub ready: bool,
    /// `conditions.serving`.
    pub serving: bool,
    /// `conditions.terminating`.
    pub terminating: bool,
}

impl PodEndpoint {
    /// A pod that has started but is not ready yet.
    pub fn starting(address: SocketAddr) -> Self {
        Self {
            address,
            ready: false,
            serving: false,
            terminating: false,
        }
    }

    /// A ready pod.
    pub fn ready(address: SocketAddr) -> Self {
        Self {
            address,
            ready: true,
            serving: true,
            terminating: false,
        }
    }

    /// A pod being deleted, still `serving` or not.
    pub fn terminating(address: SocketAddr, serving: bool) -> Self {
        Self {
            address,
            ready: false,
            serving,
            terminating: true,
        }
    }
}

/// What the drill provides to the proxy at start.
#[derive(Clone, Debug)]
pub struct Environment {
    /// How the proxy should reach the Service.
    pub mode: Mode,
    /// The emulated ClusterIP, in service-upstream and fallback modes.
    pub cluster_ip: Option<SocketAddr>,
    /// The endpoints as published before load starts: every initial pod, ready.
    pub initial_endpoints: Vec<PodEndpoint>,
}
