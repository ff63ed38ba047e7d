//! The proxy's settings: upstream timeouts and keep-alive, the client body limit, the response retry buffer, whom to trust about forwarding, and the session-cookie secret.

use std::time::Duration;

use crate::request::forwarded::TrustedProxies;
use crate::upstream::retry_buffer::{
    DEFAULT_RESPONSE_RETRY_BUFFER, DEFAULT_RESPONSE_RETRY_BUFFER_TOTAL,
};

/// `--body-idle-timeout`: the longest pause between body chunks, either way.
pub const DEFAULT_BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long to wait for a TCP connection to an endpoint.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait for an endpoint's response headers once the request body is sent
/// (nginx's `proxy_read_timeout` default); a route's per-try timeout overrides it.
pub const DEFAULT_RESPONSE_HEADER_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an idle keep-alive connection to an endpoint is kept (`--upstream-idle-timeout`).
pub const DEFAULT_UPSTREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Tunables of the proxy.
#[derive(Clone, Debug)]
pub struct ProxyOptions {
    pub connect_timeout: Duration,
    pub response_header_timeout: Duration,
    /// The longest pause between two body chunks, in either direction.
    pub body_idle_timeout: Duration,
    /// How long an idle upstream connection is kept; less when the endpoint announces a
    /// shorter `Keep-Alive: timeout`.
    pub upstream_idle_timeout: Duration,
    /// The largest request body (`None`: unlimited); a route's `proxy-body-size` overrides it.
    pub max_body_size: Option<u64>,
    /// Peers whose forwarding headers are believed.
    pub trusted_proxies: TrustedProxies,
    /// Keys the sticky-session cookie's hash; every replica must share it. `None` uses a
    /// built-in key, so replicas agree but values can be computed by anyone.
    pub session_secret: Option<Vec<u8>>,
    /// The port `https://` redirects name (omitted when 443); `None` when no TLS listener
    /// runs, which leaves only `force-ssl-redirect` redirecting.
    pub https_redirect_port: Option<u16>,
    /// How long an upgraded (WebSocket) connection may carry no byte either way.
    pub websocket_idle_timeout: Duration,
    /// The largest response held whole so that a cut-off body can be retried (0: none); a
    /// route's `sluice.dev/response-retry-buffer` overrides it.
    pub response_retry_buffer: u64,
    /// The most response bytes held at once, across all requests.
    pub response_retry_buffer_total: u64,
    /// The codings responses are compressed with where a route does not choose
    /// (`--compression`; empty: off).
    pub compression: sluice_routing::Codings,
}

/// `--websocket-idle-timeout`.
pub const DEFAULT_WEBSOCKET_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);

impl Default for ProxyOptions {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_header_timeout: DEFAULT_RESPONSE_HEADER_TIMEOUT,
            body_idle_timeout: DEFAULT_BODY_IDLE_TIMEOUT,
            upstream_idle_timeout: DEFAULT_UPSTREAM_IDLE_TIMEOUT,
            max_body_size: None,
            trusted_proxies: TrustedProxies::default(),
            session_secret: None,
            https_redirect_port: None,
            websocket_idle_timeout: DEFAULT_WEBSOCKET_IDLE_TIMEOUT,
            response_retry_buffer: DEFAULT_RESPONSE_RETRY_BUFFER,
            response_retry_buffer_total: DEFAULT_RESPONSE_RETRY_BUFFER_TOTAL,
            compression: sluice_routing::Codings::NONE,
        }
    }
}
