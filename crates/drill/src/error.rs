//! The one error type of the drill crate.

use std::net::SocketAddr;

/// Why a drill could not be set up or run.
#[derive(Debug, thiserror::Error)]
pub enum DrillError {
    /// A pod, or the ClusterIP relay, could not bind its address.
    #[error("cannot bind {address}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// No free pod address was left in 127.0.1.0 – 127.0.255.254.
    #[error("no free pod address left on loopback")]
    NoPodAddress,
    /// A helper program (`ip`, `nft`) could not run or failed.
    #[error("`{command}` failed: {detail}")]
    Command { command: String, detail: String },
    /// A helper program could not be started at all.
    #[error("cannot run `{command}`")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// The nftables ClusterIP was asked for where it cannot work.
    #[error("nftables ClusterIP unavailable: {0}")]
    NftablesUnavailable(String),
    /// The proxy address does not make a URI.
    #[error("cannot send requests to {0}")]
    Target(SocketAddr),
    /// The nftables emulation handles IPv4 addresses only.
    #[error("nftables ClusterIP needs IPv4 addresses, got {0}")]
    NotIpv4(SocketAddr),
}
