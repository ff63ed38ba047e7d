//! The data plane: accepts HTTP/1.1 and h2c, routes each request through the published table, balances, and forwards it with safe retries.
//!
//! Nothing here knows Kubernetes: the control plane hands over a [`sluice_routing::RoutingTable`]
//! and endpoint sets through a [`TableHandle`], and the proxy only reads them. Runtime state
//! learnt from traffic (connections, load, latency, ejections, retry budgets) lives in one
//! [`Runtime`] behind the same handle.

mod attempt;
mod balance;
mod body;
mod budget;
mod error;
mod headers;
mod health;
mod pipeline;
mod pool;
mod runtime;
mod server;
mod sticky;
mod table_handle;
mod upstream;

pub use body::{TrackedBody, DEFAULT_REPLAY_LIMIT};
pub use error::ProxyError;
pub use pipeline::{Proxy, ProxyBody};
pub use runtime::{ProxyCounters, Runtime};
pub use server::{serve, Phase, ShutdownSignal, ShutdownTrigger};
pub use sticky::SessionKey;
pub use table_handle::TableHandle;
pub use upstream::{UpstreamOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_HEADER_TIMEOUT};
