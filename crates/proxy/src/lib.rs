//! The data plane: accepts HTTP/1.1 and h2c, routes each request through the published table, and forwards it to an endpoint.
//!
//! Nothing here knows Kubernetes: the control plane hands over a [`sluice_routing::RoutingTable`]
//! through a [`TableHandle`] and the proxy only reads it.

mod error;
mod headers;
mod pipeline;
mod server;
mod table_handle;
mod upstream;

pub use error::ProxyError;
pub use pipeline::{Proxy, ProxyBody};
pub use server::{serve, ShutdownSignal};
pub use table_handle::TableHandle;
pub use upstream::{UpstreamOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_HEADER_TIMEOUT};
