//! Why a request failed (the client's request was broken, or no endpoint gave an answer), and the status and short text body the client gets for it; the proxy's deliberate answers are `filters::contract::LocalAnswer`s, not errors.

use http::StatusCode;
use sluice_routing::{PathError, UpstreamFailureStatus};

/// A request the proxy could not forward.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("no route")]
    NoRoute,
    /// A Gateway API rule matched, but the backendRef drawn for the request is invalid (or
    /// the rule has none): the spec's 500.
    #[error("the route's backend reference is invalid")]
    InvalidBackendRef,
    #[error("no endpoints available")]
    NoEndpoints,
    #[error("upstream connect failed")]
    ConnectFailed(#[source] std::io::Error),
    #[error("upstream connection failed")]
    UpstreamFailed(#[source] UpstreamError),
    /// A connect or an exchange that failed before the response head, on a route whose policy
    /// answers that 503 (`UpstreamFailureStatus::ServiceUnavailable`: Gateway API routes, as
    /// Envoy answers). Ingress routes keep nginx's 502.
    #[error("upstream unavailable")]
    UpstreamUnavailable(#[source] Box<ProxyError>),
    #[error("upstream connect timed out")]
    ConnectTimeout,
    #[error("the upstream cut its response off")]
    ResponseCut(#[source] ResponseBodyError),
    #[error("upstream response timed out")]
    ResponseTimeout,
    #[error("the upstream stopped reading the request body")]
    UploadStalled,
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    #[error("bad request path: {0}")]
    BadPath(#[source] PathError),
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("request body larger than allowed")]
    BodyTooLarge,
    #[error("the client stopped sending the request body")]
    ClientBodyTimeout,
    #[error("the request's host is served with another certificate than this connection's")]
    Misdirected,
    #[error("client certificate refused (one was sent: {sent})")]
    ClientCertificate { sent: bool },
}

/// Why an exchange with an endpoint failed: hyper's account for HTTP/2, sluice's own for
/// HTTP/1.1 ([`crate::upstream::http1`]).
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error(transparent)]
    Http2(#[from] hyper::Error),
    #[error("the endpoint closed the connection before it answered")]
    ClosedBeforeResponse,
    #[error("the endpoint closed the connection before the response body's end")]
    IncompleteBody,
    #[error("the connection to the endpoint failed")]
    Io(#[source] std::io::Error),
    #[error("the endpoint's response is malformed: {0}")]
    Malformed(&'static str),
    #[error("the endpoint's response head is malformed")]
    Parse(#[source] httparse::Error),
    #[error("the request body could not be sent")]
    RequestBody(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Why a response body stream from an endpoint ended in an error.
#[derive(Debug, thiserror::Error)]
pub enum ResponseBodyError {
    #[error("the endpoint paused the response body for longer than the idle timeout")]
    Stalled,
    #[error("reading the response body failed")]
    Read(#[source] UpstreamError),
    #[error("the endpoint sent more body than its Content-Length declared")]
    LongerThanDeclared,
    #[error("compressing the response body failed")]
    Coding,
}

impl ProxyError {
    pub fn status(&self) -> StatusCode {
        match self {
            Self::NoRoute => StatusCode::NOT_FOUND,
            Self::InvalidBackendRef => StatusCode::INTERNAL_SERVER_ERROR,
            Self::NoEndpoints | Self::UpstreamUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::ConnectFailed(_) | Self::UpstreamFailed(_) | Self::ResponseCut(_) => {
                StatusCode::BAD_GATEWAY
            }
            Self::ConnectTimeout | Self::ResponseTimeout | Self::UploadStalled => {
                StatusCode::GATEWAY_TIMEOUT
            }
            Self::BadRequest(_) | Self::BadPath(_) => StatusCode::BAD_REQUEST,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::ClientBodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::Misdirected => StatusCode::MISDIRECTED_REQUEST,
            Self::ClientCertificate { .. } => StatusCode::BAD_REQUEST,
        }
    }

    /// The plain-text body sent to the client: short, and free of upstream details.
    pub fn body(&self) -> &'static str {
        match self {
            Self::NoRoute => "404 no route\n",
            Self::InvalidBackendRef => "500 invalid backend reference\n",
            Self::NoEndpoints => "503 no endpoints available\n",
            Self::ConnectFailed(_) => "502 upstream connect failed\n",
            Self::UpstreamFailed(_) => "502 upstream connection failed\n",
            Self::UpstreamUnavailable(_) => {
                "503 upstream connect error or disconnect before headers\n"
            }
            Self::ResponseCut(_) => "502 upstream response cut off\n",
            Self::ConnectTimeout => "504 upstream connect timed out\n",
            Self::ResponseTimeout => "504 upstream response timed out\n",
            Self::UploadStalled => "504 upstream stopped reading the request body\n",
            Self::BadRequest(_) | Self::BadPath(_) => "400 bad request\n",
            Self::MethodNotAllowed => "405 method not allowed\n",
            Self::BodyTooLarge => "413 request body too large\n",
            Self::ClientBodyTimeout => "408 request body timed out\n",
            Self::Misdirected => "421 misdirected request\n",
            Self::ClientCertificate { sent: false } => "400 no required SSL certificate was sent\n",
            Self::ClientCertificate { sent: true } => "400 the SSL certificate error\n",
        }
    }

    /// This error as a route whose policy answers upstream failures with `status` gives it:
    /// with 503, a connect or an exchange that failed before the response head is
    /// [`Self::UpstreamUnavailable`].
    pub(crate) fn answered_as(self, status: UpstreamFailureStatus) -> Self {
        match (self, status) {
            (
                failed @ (Self::ConnectFailed(_) | Self::UpstreamFailed(_)),
                UpstreamFailureStatus::ServiceUnavailable,
            ) => Self::UpstreamUnavailable(Box::new(failed)),
            (other, _) => other,
        }
    }

    /// Whether the client broke the request itself, so the rest of its connection cannot be
    /// trusted to be framed right: the answer closes the connection.
    pub fn closes_connection(&self) -> bool {
        matches!(
            self,
            Self::BadRequest(_)
                | Self::BadPath(_)
                | Self::MethodNotAllowed
                | Self::BodyTooLarge
                | Self::ClientBodyTimeout
        )
    }
}
