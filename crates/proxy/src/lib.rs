//! The data plane: accepts HTTP/1.1 and h2c, routes each request through the published table, balances, and forwards it with safe retries.
//!
//! Nothing here knows Kubernetes: the control plane hands over a [`sluice_routing::RoutingTable`]
//! and endpoint sets through a [`TableHandle`], and the proxy only reads them. Runtime state
//! learnt from traffic (connections, load, latency, ejections, retry budgets) lives in one
//! [`Runtime`] behind the same handle.

mod client_body;
mod connection;
mod error;
mod filters;
mod headers;
mod request;
mod server;
mod shutdown;
mod switch;
mod telemetry;
mod upstream;
mod worker;

pub use client_body::{BodyReadError, ClientBody};
pub use connection::{ClientCertificate, ClientInfo, TlsInfo};
pub use error::ProxyError;
pub use error::ResponseBodyError;
pub use request::driver::Proxy;
pub use request::forwarded::TrustedProxies;
pub use request::options::{
    ProxyOptions, DEFAULT_BODY_IDLE_TIMEOUT, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_RESPONSE_HEADER_TIMEOUT, DEFAULT_UPSTREAM_IDLE_TIMEOUT, DEFAULT_WEBSOCKET_IDLE_TIMEOUT,
};
pub use request::table_handle::TableHandle;
pub use server::{
    serve, serve_datagrams, serve_streams, serve_tls, DatagramOptions, ListenerOptions,
    StreamOptions, TlsSetupError, TlsTerminator, DEFAULT_CLIENT_HEADER_TIMEOUT,
    DEFAULT_CLIENT_IDLE_TIMEOUT, DEFAULT_MAX_CONCURRENT_STREAMS, DEFAULT_MAX_HEADERS,
    DEFAULT_MAX_HEADER_BYTES, DEFAULT_UDP_MAX_FLOWS,
};
pub use shutdown::{Phase, ShutdownSignal, ShutdownTrigger};
pub use telemetry::access_log::{AccessLog, AccessLogFormat, DEFAULT_ACCESS_LOG_QUEUE};
pub use telemetry::metrics::{
    ConnectionMetrics, ListenerMetrics, ProxyMetrics, StreamMetrics, StreamResult,
};
pub use telemetry::trace::{Tracing, TracingError, TracingOptions};
pub use upstream::request_body::DEFAULT_REPLAY_LIMIT;
pub use upstream::response_body::{ProxyBody, TrackedBody};
pub use upstream::retry_buffer::{
    DEFAULT_RESPONSE_RETRY_BUFFER, DEFAULT_RESPONSE_RETRY_BUFFER_TOTAL,
};
pub use upstream::runtime::{EndpointReport, Runtime};
pub use upstream::session_key::SessionKey;
pub use worker::enter_worker;

/// Entry points for the micro-benchmarks in `bench/benches` (criterion); not an API.
#[doc(hidden)]
pub mod bench_support {
    use std::net::IpAddr;

    use http::request::Parts;
    use sluice_routing::{Backend, Balancer};

    use crate::upstream::balance::{Candidates, RequestKey};
    use crate::upstream::runtime::Runtime;

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

    /// A TLS client that accepts any server certificate but checks the handshake's
    /// signatures, as `proxy-ssl-verify: "off"` does, offering `alpn`: for `idle-clients
    /// --tls`, whose proxies serve self-signed certificates.
    pub fn any_certificate_client(
        alpn: Vec<Vec<u8>>,
    ) -> Result<std::sync::Arc<rustls::ClientConfig>, rustls::Error> {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier = crate::upstream::connect::AcceptAnyCertificate(provider.clone());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(std::sync::Arc::new(verifier))
            .with_no_client_auth();
        config.alpn_protocols = alpn;
        Ok(std::sync::Arc::new(config))
    }
}
