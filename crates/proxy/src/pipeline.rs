//! The request pipeline, one phase per step: route, balance, forward upstream, respond.

use std::net::SocketAddr;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST};
use http::uri::{Authority, PathAndQuery, Scheme, Uri};
use http::{HeaderValue, Request, Response, Version};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use sluice_routing::{normalize_request_host, Endpoint, RoutingTable};

use crate::error::ProxyError;
use crate::headers::{ensure_host, set_forwarded, strip_hop_by_hop};
use crate::table_handle::TableHandle;
use crate::upstream::{Upstream, UpstreamOptions};

/// A response body: the upstream's, streamed through, or the proxy's own short text.
pub type ProxyBody = Either<Incoming, Full<Bytes>>;

/// The proxy: the published table plus the upstream client. One per process, shared by all
/// connections.
pub struct Proxy {
    table: TableHandle,
    upstream: Upstream,
}

impl Proxy {
    pub fn new(table: TableHandle, options: &UpstreamOptions) -> Self {
        Self {
            table,
            upstream: Upstream::new(options),
        }
    }

    /// Handles one request from `client`. Never fails: every error becomes a short response.
    pub async fn handle(
        &self,
        request: Request<Incoming>,
        client: SocketAddr,
    ) -> Response<ProxyBody> {
        match self.forward(request, client).await {
            Ok(response) => response.map(Either::Left),
            Err(error) => {
                tracing::debug!(%client, %error, source = ?std::error::Error::source(&error), "answered by proxy");
                error_response(&error)
            }
        }
    }

    async fn forward(
        &self,
        request: Request<Incoming>,
        client: SocketAddr,
    ) -> Result<Response<Incoming>, ProxyError> {
        let table = self.table.load();
        let endpoint = route_and_balance(&table, &request)?;
        let upstream_request = prepare_upstream_request(request, &endpoint, client)?;
        let response = self.upstream.send(upstream_request).await?;
        Ok(prepare_response(response))
    }
}

/// Steps 1 and 2: find the route for host and path, then the next endpoint of its backend.
fn route_and_balance(
    table: &RoutingTable,
    request: &Request<Incoming>,
) -> Result<Endpoint, ProxyError> {
    let host = request_host(request).ok_or(ProxyError::BadRequest("missing Host"))?;
    let backend = table
        .lookup(&normalize_request_host(host), request.uri().path())
        .ok_or(ProxyError::NoRoute)?;
    backend.next_endpoint().ok_or(ProxyError::NoEndpoints)
}

/// The host a request is for: the URI authority (HTTP/2, absolute-form) or the Host header.
fn request_host(request: &Request<Incoming>) -> Option<&str> {
    match request.uri().authority() {
        Some(authority) => Some(authority.host()),
        None => request.headers().get(HOST)?.to_str().ok(),
    }
}

/// Step 3: point the request at the endpoint, keeping path and query byte for byte, and rewrite
/// the headers that belong to this hop.
fn prepare_upstream_request(
    request: Request<Incoming>,
    endpoint: &Endpoint,
    client: SocketAddr,
) -> Result<Request<Incoming>, ProxyError> {
    let (mut parts, body) = request.into_parts();
    let original_authority: Option<Authority> = parts.uri.authority().cloned();
    ensure_host(&mut parts.headers, original_authority.as_ref());
    let host: Option<HeaderValue> = parts.headers.get(HOST).cloned();
    strip_hop_by_hop(&mut parts.headers);
    set_forwarded(&mut parts.headers, client.ip(), host);

    let mut uri_parts = std::mem::take(&mut parts.uri).into_parts();
    uri_parts.scheme = Some(Scheme::HTTP);
    uri_parts.authority = Some(endpoint.authority().clone());
    if uri_parts.path_and_query.is_none() {
        uri_parts.path_and_query = Some(PathAndQuery::from_static("/"));
    }
    parts.uri = Uri::from_parts(uri_parts)
        .map_err(|_| ProxyError::BadRequest("unusable request target"))?;
    parts.version = Version::HTTP_11;
    Ok(Request::from_parts(parts, body))
}

/// Step 5: drop the upstream hop's headers before the response goes back.
fn prepare_response(mut response: Response<Incoming>) -> Response<Incoming> {
    strip_hop_by_hop(response.headers_mut());
    response
}

fn error_response(error: &ProxyError) -> Response<ProxyBody> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from_static(
        error.body().as_bytes(),
    ))));
    *response.status_mut() = error.status();
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
