//! Filters for ingress-nginx's redirect and rewrite annotations and sluice's header annotations: `app-root`, the route's redirect, the headers the pod gets and the headers the client gets.

use http::header::HOST;
use http::request::Parts;
use http::{response, HeaderName, HeaderValue, StatusCode};
use sluice_routing::{Redirect, RequestEdits, UrlPart};

use crate::error::ProxyError;
use crate::headers::host_without_port;
use crate::phases::{Filter, ProxyScope, RequestContext};

const X_FORWARDED_PREFIX: HeaderName = HeaderName::from_static("x-forwarded-prefix");

/// `temporal-redirect` or `permanent-redirect`: every request to the route is answered with
/// the redirect, its nginx variables filled in.
pub(crate) struct RouteRedirect(pub(crate) Redirect);

impl Filter for RouteRedirect {
    fn on_request(
        &self,
        context: &mut RequestContext<'_>,
        request: &Parts,
        _proxy: &ProxyScope<'_>,
    ) -> Result<(), ProxyError> {
        let mut location = String::new();
        for part in &self.0.location {
            match part {
                UrlPart::Text(text) => location.push_str(text),
                UrlPart::RequestUri => location.push_str(request_uri(request)),
                UrlPart::Host => location.push_str(&nginx_host(context)),
                UrlPart::Scheme => location.push_str(scheme(context)),
            }
        }
        redirect(self.0.code, location)
    }
}

/// `app-root`: a request for exactly `/` gets 302 to the application's root, on the scheme
/// and Host the client used (nginx's `$scheme://$http_host`).
pub(crate) struct AppRoot(pub(crate) String);

impl Filter for AppRoot {
    fn on_request(
        &self,
        context: &mut RequestContext<'_>,
        request: &Parts,
        _proxy: &ProxyScope<'_>,
    ) -> Result<(), ProxyError> {
        if request.uri.path() != "/" {
            return Ok(());
        }
        let host = context.host.to_str().unwrap_or_default();
        let location = format!("{}://{host}{}", scheme(context), self.0);
        redirect(StatusCode::FOUND.as_u16(), location)
    }
}

/// `upstream-vhost`, `x-forwarded-prefix` and `sluice.dev/request-headers`: the Host,
/// `X-Forwarded-Prefix` and other headers the pod gets.
pub(crate) struct UpstreamHead(Vec<(HeaderName, HeaderValue)>);

impl UpstreamHead {
    /// The filter for `edits`, or `None` when it sets no request header.
    pub(crate) fn of(edits: &RequestEdits) -> Option<Self> {
        let mut headers = named(&edits.request_headers);
        if let Some(prefix) = edits.forwarded_prefix.as_deref().and_then(value) {
            headers.push((X_FORWARDED_PREFIX, prefix));
        }
        if let Some(host) = edits.upstream_vhost.as_deref().and_then(value) {
            headers.push((HOST, host));
        }
        (!headers.is_empty()).then_some(Self(headers))
    }
}

impl Filter for UpstreamHead {
    fn on_upstream_request(&self, _context: &RequestContext<'_>, upstream: &mut Parts) {
        for (name, value) in &self.0 {
            upstream.headers.insert(name.clone(), value.clone());
        }
    }
}

/// `sluice.dev/response-headers`: headers set on every response of the route, replacing the
/// pod's under the same names (as nginx's `more_set_headers`).
pub(crate) struct ResponseHeaders(Vec<(HeaderName, HeaderValue)>);

impl ResponseHeaders {
    pub(crate) fn of(edits: &RequestEdits) -> Option<Self> {
        let headers = named(&edits.response_headers);
        (!headers.is_empty()).then_some(Self(headers))
    }
}

impl Filter for ResponseHeaders {
    fn on_response(
        &self,
        _context: &RequestContext<'_>,
        response: &mut response::Parts,
        _proxy: &ProxyScope<'_>,
    ) {
        for (name, value) in &self.0 {
            response.headers.insert(name.clone(), value.clone());
        }
    }
}

/// Headers as the compiler checked them (any that no longer parse are skipped).
fn named(headers: &[(String, String)]) -> Vec<(HeaderName, HeaderValue)> {
    headers
        .iter()
        .filter_map(|(name, text)| {
            Some((HeaderName::from_bytes(name.as_bytes()).ok()?, value(text)?))
        })
        .collect()
}

fn value(text: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(text).ok()
}

fn redirect(code: u16, location: String) -> Result<(), ProxyError> {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::FOUND);
    match HeaderValue::try_from(location) {
        Ok(location) => Err(ProxyError::Redirect { status, location }),
        // A variable filled in with bytes a header cannot carry: serve the route instead.
        Err(_) => Ok(()),
    }
}

/// nginx's `$request_uri`: the target as the client sent it.
fn request_uri(request: &Parts) -> &str {
    request
        .uri
        .path_and_query()
        .map_or("/", |target| target.as_str())
}

/// nginx's `$host`: the request's host, lowercase, without a port.
fn nginx_host(context: &RequestContext<'_>) -> String {
    host_without_port(context.host.to_str().unwrap_or_default()).to_ascii_lowercase()
}

/// nginx's `$scheme`: the client's connection.
fn scheme(context: &RequestContext<'_>) -> &'static str {
    if context.client.tls.is_some() {
        "https"
    } else {
        "http"
    }
}
