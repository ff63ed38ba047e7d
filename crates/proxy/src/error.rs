//! Why the proxy answered a request itself, and the status and short text body it answers with.

use http::StatusCode;

/// A request the proxy could not forward.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("no route")]
    NoRoute,
    #[error("no endpoints available")]
    NoEndpoints,
    #[error("upstream connect failed")]
    ConnectFailed(#[source] std::io::Error),
    #[error("upstream connection failed")]
    UpstreamFailed(#[source] hyper::Error),
    #[error("upstream connect timed out")]
    ConnectTimeout,
    #[error("upstream response timed out")]
    ResponseTimeout,
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    #[error("reading the request body failed")]
    RequestBody(#[source] hyper::Error),
}

impl ProxyError {
    pub fn status(&self) -> StatusCode {
        match self {
            Self::NoRoute => StatusCode::NOT_FOUND,
            Self::NoEndpoints => StatusCode::SERVICE_UNAVAILABLE,
            Self::ConnectFailed(_) | Self::UpstreamFailed(_) => StatusCode::BAD_GATEWAY,
            Self::ConnectTimeout | Self::ResponseTimeout => StatusCode::GATEWAY_TIMEOUT,
            Self::BadRequest(_) | Self::RequestBody(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// The plain-text body sent to the client: short, and free of upstream details.
    pub fn body(&self) -> &'static str {
        match self {
            Self::NoRoute => "404 no route\n",
            Self::NoEndpoints => "503 no endpoints available\n",
            Self::ConnectFailed(_) => "502 upstream connect failed\n",
            Self::UpstreamFailed(_) => "502 upstream connection failed\n",
            Self::ConnectTimeout => "504 upstream connect timed out\n",
            Self::ResponseTimeout => "504 upstream response timed out\n",
            Self::BadRequest(_) | Self::RequestBody(_) => "400 bad request\n",
        }
    }
}
