//! The data plane: accepts HTTP/1.1 and h2c, routes each request through the published table, balances, and forwards it with safe retries.
//!
//! Nothing here knows Kubernetes: the control plane hands over a [`sluice_routing::RoutingTable`]
//! and endpoint sets through a [`TableHandle`], and the proxy only reads them. Runtime state
//! learnt from traffic (connections, load, latency, ejections, retry budgets) lives in one
//! [`Runtime`] behind the same handle.

mod access;
mod access_log;
mod attempt;
mod balance;
mod body;
mod budget;
mod cors;
mod edits;
mod error;
mod error_pages;
mod external_auth;
mod forwarded;
mod gateway_filters;
mod grpc;
mod headers;
mod health;
mod inbound;
mod limits;
mod log_phase;
mod mirror;
mod options;
mod outbound;
mod passwords;
mod phases;
mod pipeline;
mod pool;
mod retry_buffer;
mod runtime;
mod server;
mod sticky;
mod table_handle;
mod telemetry;
mod template;
mod traefik;
mod upgrade;
mod upstream;

pub use access_log::{AccessLog, AccessLogFormat, DEFAULT_ACCESS_LOG_QUEUE};
pub use body::{ResponseBodyError, TrackedBody, DEFAULT_REPLAY_LIMIT};
pub use error::ProxyError;
pub use forwarded::TrustedProxies;
pub use options::{
    ProxyOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_HEADER_TIMEOUT,
    DEFAULT_UPSTREAM_IDLE_TIMEOUT, DEFAULT_WEBSOCKET_IDLE_TIMEOUT,
};
pub use pipeline::{Proxy, ProxyBody};
pub use retry_buffer::{DEFAULT_RESPONSE_RETRY_BUFFER, DEFAULT_RESPONSE_RETRY_BUFFER_TOTAL};
pub use runtime::{EndpointReport, Runtime};
pub use server::{
    serve, serve_tls, ClientCertificate, ClientInfo, ListenerOptions, Phase, ShutdownSignal,
    ShutdownTrigger, TlsInfo, TlsSetupError, TlsTerminator, DEFAULT_BODY_IDLE_TIMEOUT,
    DEFAULT_CLIENT_HEADER_TIMEOUT, DEFAULT_CLIENT_IDLE_TIMEOUT, DEFAULT_MAX_CONCURRENT_STREAMS,
    DEFAULT_MAX_HEADERS, DEFAULT_MAX_HEADER_BYTES,
};
pub use sticky::SessionKey;
pub use table_handle::TableHandle;
pub use telemetry::{ConnectionMetrics, ListenerMetrics, ProxyMetrics};

/// Entry points for the micro-benchmarks in `bench/benches` (criterion); not an API.
#[doc(hidden)]
pub mod bench_support {
    use std::net::IpAddr;

    use http::request::Parts;
    use sluice_routing::{Backend, Balancer};

    use crate::balance::{Candidates, RequestKey};
    use crate::runtime::Runtime;

    /// The position of the first endpoint `balancer` picks for a request, as the request path
    /// does it: the backend's current set and its attached runtime state.
    pub fn first_pick(
        balancer: &Balancer,
        backend: &Backend,
        runtime: &Runtime,
        parts: &Parts,
        client: IpAddr,
    ) -> Option<usize> {
        let set = backend.endpoints().load();
        let state = runtime.attach(&set);
        let key = RequestKey { parts, client };
        Candidates::new(balancer, backend, set.eligible(), state, &key).next(
            set.eligible(),
            &[],
            state,
        )
    }
}
