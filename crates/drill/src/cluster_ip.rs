//! The Service's ClusterIP, emulated like kube-proxy: each new connection goes to a random eligible pod of the published endpoints.

use std::net::SocketAddr;

use crate::error::DrillError;
use crate::netns::inside_drill_netns;
use crate::nftables::NftClusterIp;
use crate::options::{ClusterIpChoice, DrillOptions, Mode};
use crate::userspace::UserspaceClusterIp;
use crate::PodEndpoint;

/// Which emulation serves the ClusterIP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterIpKind {
    /// Kernel DNAT with an nftables `numgen random` map, inside the drill's network namespace.
    Nftables,
    /// A TCP relay in this process.
    Userspace,
}

impl ClusterIpKind {
    /// The name the report uses.
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterIpKind::Nftables => "nftables",
            ClusterIpKind::Userspace => "userspace",
        }
    }

    /// The emulation a drill with `options` uses here, or `None` when the mode needs no ClusterIP.
    ///
    /// Inside the drill's network namespace `auto` means nftables; outside it means userspace
    /// (call [`crate::reexec_in_netns_if_needed`] first to get nftables).
    pub fn for_options(options: &DrillOptions) -> Option<ClusterIpKind> {
        if options.mode == Mode::Endpoints {
            return None;
        }
        Some(match (options.cluster_ip, inside_drill_netns()) {
            (ClusterIpChoice::Userspace, _) => ClusterIpKind::Userspace,
            (ClusterIpChoice::Nftables, _) | (ClusterIpChoice::Auto, true) => {
                ClusterIpKind::Nftables
            }
            (ClusterIpChoice::Auto, false) => ClusterIpKind::Userspace,
        })
    }
}

/// The pods kube-proxy would send a new connection to: the ready ones, or when none is ready,
/// the serving terminating ones.
pub fn eligible(endpoints: &[PodEndpoint]) -> Vec<SocketAddr> {
    let ready: Vec<SocketAddr> = endpoints
        .iter()
        .filter(|endpoint| endpoint.ready)
        .map(|endpoint| endpoint.address)
        .collect();
    if !ready.is_empty() {
        return ready;
    }
    endpoints
        .iter()
        .filter(|endpoint| endpoint.serving && endpoint.terminating)
        .map(|endpoint| endpoint.address)
        .collect()
}

/// A running ClusterIP emulation.
pub enum ClusterIp {
    /// Kernel DNAT.
    Nftables(NftClusterIp),
    /// In-process relay.
    Userspace(UserspaceClusterIp),
}

impl ClusterIp {
    /// Starts the `kind` emulation routing to `endpoints`.
    pub async fn start(
        kind: ClusterIpKind,
        endpoints: &[PodEndpoint],
    ) -> Result<ClusterIp, DrillError> {
        Ok(match kind {
            ClusterIpKind::Nftables => ClusterIp::Nftables(NftClusterIp::start(endpoints).await?),
            ClusterIpKind::Userspace => {
                ClusterIp::Userspace(UserspaceClusterIp::start(endpoints).await?)
            }
        })
    }

    /// The address clients connect to.
    pub fn address(&self) -> SocketAddr {
        match self {
            ClusterIp::Nftables(nft) => nft.address(),
            ClusterIp::Userspace(relay) => relay.address(),
        }
    }

    /// Routes new connections to the eligible pods of `endpoints` from now on.
    pub fn update(&self, endpoints: &[PodEndpoint]) {
        match self {
            ClusterIp::Nftables(nft) => nft.update(endpoints),
            ClusterIp::Userspace(relay) => relay.update(endpoints),
        }
    }

    /// Which emulation this is.
    pub fn kind(&self) -> ClusterIpKind {
        match self {
            ClusterIp::Nftables(_) => ClusterIpKind::Nftables,
            ClusterIp::Userspace(_) => ClusterIpKind::Userspace,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(last: u8, ready: bool, serving: bool, terminating: bool) -> PodEndpoint {
        PodEndpoint {
            address: SocketAddr::from(([127, 0, 1, last], 8080)),
            ready,
            serving,
            terminating,
        }
    }

    #[test]
    fn ready_pods_win_and_serving_terminating_ones_stand_in() {
        let mixed = [
            endpoint(1, true, true, false),
            endpoint(2, false, true, true),
        ];
        assert_eq!(eligible(&mixed), vec![mixed[0].address]);
        let draining = [
            endpoint(2, false, true, true),
            endpoint(3, false, false, true),
        ];
        assert_eq!(eligible(&draining), vec![draining[0].address]);
        assert!(eligible(&[endpoint(4, false, false, false)]).is_empty());
    }
}
