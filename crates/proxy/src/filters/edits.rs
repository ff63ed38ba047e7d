//! Filters for ingress-nginx's redirect and rewrite annotations and sluice's header annotations: `app-root`, the route's redirect, `rewrite-target`, the headers the pod gets and the headers the client gets.

use http::header::HOST;
use http::request::Parts;
use http::{response, HeaderName, HeaderValue, StatusCode};
use sluice_routing::{Redirect, RequestEdits};

use crate::error::ProxyError;
use crate::filters::template::{fill, http_host, scheme};
use crate::filters::{Filter, ProxyScope, RequestContext};

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
        redirect(self.0.code, fill(&self.0.location, context, request))
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
        let location = format!("{}://{}{}", scheme(context), http_host(context), self.0);
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

/// `rewrite-target`: the path the pod gets, as nginx's `rewrite regex target break` makes it:
/// the whole path is replaced by the target, with `$1`..`$9` filled from the groups the
/// route's regex path captured, and the query is kept.
pub(crate) struct Rewrite(pub(crate) String);

impl Filter for Rewrite {
    fn on_upstream_request(&self, context: &RequestContext<'_>, upstream: &mut Parts) {
        let path = upstream.uri.path();
        let captures = context
            .target
            .and_then(|target| target.path)
            .and_then(|route| route.captures(path));
        let mut rewritten = expand(&self.0, captures.as_ref());
        if let Some(query) = upstream.uri.query() {
            rewritten.push('?');
            rewritten.push_str(query);
        }
        if let Ok(uri) = http::Uri::try_from(rewritten) {
            upstream.uri = uri;
        }
    }
}

/// The target with each `$N` replaced by group N (empty when the group did not take part or
/// the path is not a regex).
fn expand(target: &str, captures: Option<&regex::Captures<'_>>) -> String {
    let mut out = String::with_capacity(target.len() + 16);
    let mut rest = target;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        match after.as_bytes().first() {
            Some(digit @ b'0'..=b'9') => {
                let group = usize::from(digit - b'0');
                let text = captures.and_then(|c| c.get(group)).map(|m| m.as_str());
                out.push_str(text.unwrap_or_default());
                rest = &after[1..];
            }
            _ => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
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

/// Answers with a redirect to `location`; a location a header cannot carry serves the route
/// instead.
pub(crate) fn redirect(code: u16, location: String) -> Result<(), ProxyError> {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::FOUND);
    match HeaderValue::try_from(location) {
        Ok(location) => Err(ProxyError::Redirect { status, location }),
        // A variable filled in with bytes a header cannot carry: serve the route instead.
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_routing::PathMatch;

    #[test]
    fn groups_fill_the_target_and_a_missing_group_is_empty() {
        let path = PathMatch::regex("/api(/|$)(.*)").unwrap();
        let captures = path.captures("/api/users/7");
        assert_eq!(expand("/$2", captures.as_ref()), "/users/7");
        assert_eq!(expand("/v2$1$2", captures.as_ref()), "/v2/users/7");
        assert_eq!(expand("/x/$3/$", captures.as_ref()), "/x//$");
        assert_eq!(expand("/new", None), "/new");
    }
}
