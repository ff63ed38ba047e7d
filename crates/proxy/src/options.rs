//! Settings of the upstream side: connect and response-header timeouts, and the session-cookie secret.

use std::time::Duration;

/// How long to wait for a TCP connection to an endpoint.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait for an endpoint's response headers once the request is sent
/// (nginx's `proxy_read_timeout` default); a route's per-try timeout overrides it.
pub const DEFAULT_RESPONSE_HEADER_TIMEOUT: Duration = Duration::from_secs(60);

/// Tunables of the upstream side.
#[derive(Clone, Debug)]
pub struct UpstreamOptions {
    pub connect_timeout: Duration,
    pub response_header_timeout: Duration,
    /// Keys the sticky-session cookie's hash; every replica must share it. `None` uses a
    /// built-in key, so replicas agree but values can be computed by anyone.
    pub session_secret: Option<Vec<u8>>,
}

impl Default for UpstreamOptions {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_header_timeout: DEFAULT_RESPONSE_HEADER_TIMEOUT,
            session_secret: None,
        }
    }
}
