//! Upstream connections: a pooled keep-alive HTTP/1.1 client with connect and response-header timeouts.

use std::error::Error as _;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::error::ProxyError;

/// How long to wait for a TCP connection to an endpoint.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait for an endpoint's response headers once the request is sent
/// (nginx's `proxy_read_timeout` default).
pub const DEFAULT_RESPONSE_HEADER_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an idle pooled upstream connection is kept.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Tunables of the upstream client.
#[derive(Clone, Debug)]
pub struct UpstreamOptions {
    pub connect_timeout: Duration,
    pub response_header_timeout: Duration,
}

impl Default for UpstreamOptions {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_header_timeout: DEFAULT_RESPONSE_HEADER_TIMEOUT,
        }
    }
}

/// The pooled client every request to every endpoint goes through. Pools are keyed by endpoint
/// authority, so they outlive table swaps.
pub(crate) struct Upstream {
    client: Client<HttpConnector, Incoming>,
    response_header_timeout: Duration,
}

impl Upstream {
    pub(crate) fn new(options: &UpstreamOptions) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(options.connect_timeout));
        connector.set_nodelay(true);
        connector.enforce_http(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .build(connector);
        Self {
            client,
            response_header_timeout: options.response_header_timeout,
        }
    }

    /// Sends a request whose URI already names the endpoint; returns once response headers arrive.
    /// The response body streams afterwards.
    pub(crate) async fn send(
        &self,
        request: Request<Incoming>,
    ) -> Result<Response<Incoming>, ProxyError> {
        match tokio::time::timeout(self.response_header_timeout, self.client.request(request)).await
        {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(error)) => Err(classify(error)),
            Err(_elapsed) => Err(ProxyError::ResponseTimeout),
        }
    }
}

fn classify(error: hyper_util::client::legacy::Error) -> ProxyError {
    if !error.is_connect() {
        return ProxyError::UpstreamFailed(error);
    }
    if timed_out(&error) {
        ProxyError::ConnectTimeout(error)
    } else {
        ProxyError::ConnectFailed(error)
    }
}

/// Whether any error in the source chain is an I/O timeout.
fn timed_out(error: &hyper_util::client::legacy::Error) -> bool {
    let mut source = error.source();
    while let Some(cause) = source {
        if cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        source = cause.source();
    }
    false
}
