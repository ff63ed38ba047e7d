//! Filters for Gateway API route rules: `RequestHeaderModifier`, `ResponseHeaderModifier`, `RequestRedirect`, `URLRewrite` and header session persistence, as the v1.6.1 spec defines them.

use http::header::HOST;
use http::request::Parts;
use http::{response, HeaderMap, HeaderName, HeaderValue};
use sluice_routing::{GatewayFilters, GatewayRedirect, HeaderChanges, PathChange};

use crate::error::ProxyError;
use crate::filters::edits::redirect;
use crate::filters::template::{http_host, scheme};
use crate::filters::{Filter, HeaderSession, ProxyScope, RequestContext};
use crate::headers::host_without_port;

/// Header changes in the form a header map takes them (names and values checked by the
/// compiler; any that do not parse are skipped).
struct HeaderEdit {
    set: Vec<(HeaderName, HeaderValue)>,
    add: Vec<(HeaderName, HeaderValue)>,
    remove: Vec<HeaderName>,
}

impl HeaderEdit {
    fn of(changes: &HeaderChanges) -> Option<Self> {
        if changes.is_empty() {
            return None;
        }
        let pairs = |list: &[(String, String)]| -> Vec<(HeaderName, HeaderValue)> {
            list.iter()
                .filter_map(|(name, value)| {
                    Some((
                        HeaderName::from_bytes(name.as_bytes()).ok()?,
                        HeaderValue::from_str(value).ok()?,
                    ))
                })
                .collect()
        };
        Some(Self {
            set: pairs(&changes.set),
            add: pairs(&changes.add),
            remove: changes
                .remove
                .iter()
                .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
                .collect(),
        })
    }

    /// Set replaces every value, add appends one, remove drops every value.
    fn apply(&self, headers: &mut HeaderMap) {
        for (name, value) in &self.set {
            headers.insert(name.clone(), value.clone());
        }
        for (name, value) in &self.add {
            headers.append(name.clone(), value.clone());
        }
        for name in &self.remove {
            headers.remove(name);
        }
    }
}

/// `RequestHeaderModifier` and `URLRewrite`: the head the pod gets.
struct UpstreamRequest {
    headers: Option<HeaderEdit>,
    host: Option<HeaderValue>,
    path: Option<PathChange>,
}

impl Filter for UpstreamRequest {
    fn on_upstream_request(&self, context: &RequestContext<'_>, upstream: &mut Parts) {
        if let Some(host) = &self.host {
            upstream.headers.insert(HOST, host.clone());
        }
        if let Some(change) = &self.path {
            let matched = matched_prefix(context);
            let mut path = change.apply(upstream.uri.path(), matched);
            if let Some(query) = upstream.uri.query() {
                path.push('?');
                path.push_str(query);
            }
            if let Ok(uri) = http::Uri::try_from(path) {
                upstream.uri = uri;
            }
        }
        if let Some(headers) = &self.headers {
            headers.apply(&mut upstream.headers);
        }
    }
}

/// The prefix the request's route matched, for `ReplacePrefixMatch`.
fn matched_prefix<'c>(context: &'c RequestContext<'_>) -> Option<&'c str> {
    let path = context.target.as_ref()?.path?;
    (path.kind() == sluice_routing::PathKind::Prefix).then(|| path.path())
}

/// `ResponseHeaderModifier`: the head the client gets.
struct ResponseHead(HeaderEdit);

impl Filter for ResponseHead {
    fn on_response(
        &self,
        _context: &RequestContext<'_>,
        response: &mut response::Parts,
        _proxy: &ProxyScope<'_>,
    ) {
        self.0.apply(&mut response.headers);
    }
}

/// `RequestRedirect`: the proxy answers with the request's URL changed as the filter says.
struct Redirect(GatewayRedirect);

impl Filter for Redirect {
    fn on_request(
        &self,
        context: &mut RequestContext<'_>,
        request: &Parts,
        _proxy: &ProxyScope<'_>,
    ) -> Result<(), ProxyError> {
        redirect(self.0.status, redirect_location(&self.0, context, request))
    }
}

/// The `Location` of a redirect: scheme, host and port as the filter sets them, else the
/// request's scheme and host and the listener's port. A filter that sets the scheme and no
/// port gets the scheme's well-known port, and a port that is its scheme's default is left
/// out, as the spec says.
fn redirect_location(
    redirect: &GatewayRedirect,
    context: &RequestContext<'_>,
    request: &Parts,
) -> String {
    let scheme = redirect.scheme.as_deref().unwrap_or(scheme(context));
    let written_host = http_host(context);
    let host = redirect
        .hostname
        .as_deref()
        .unwrap_or_else(|| host_without_port(written_host));
    let port = match (redirect.port, &redirect.scheme) {
        (Some(port), _) => Some(port),
        (None, Some(_)) => None,
        (None, None) => Some(context.client.server.port()),
    };
    let default_port = if scheme == "https" { 443 } else { 80 };
    let path = match &redirect.path {
        Some(change) => change.apply(request.uri.path(), matched_prefix(context)),
        None => request.uri.path().to_owned(),
    };
    let query = request
        .uri
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    match port.filter(|&port| port != default_port) {
        Some(port) => format!("{scheme}://{host}:{port}{path}{query}"),
        None => format!("{scheme}://{host}{path}{query}"),
    }
}

/// Adds the Gateway filters of a policy to its chain, in the spec's order: a redirect
/// answers first; the rest change what the pod and the client get.
pub(crate) fn add_filters(filters: &GatewayFilters, chain: &mut Vec<Box<dyn Filter>>) {
    if let Some(redirect) = &filters.redirect {
        chain.push(Box::new(Redirect(redirect.clone())));
    }
    let upstream = UpstreamRequest {
        headers: HeaderEdit::of(&filters.request_headers),
        host: filters
            .rewrite_host
            .as_deref()
            .and_then(|host| HeaderValue::from_str(host).ok()),
        path: filters.rewrite_path.clone(),
    };
    if upstream.headers.is_some() || upstream.host.is_some() || upstream.path.is_some() {
        chain.push(Box::new(upstream));
    }
    if let Some(edit) = HeaderEdit::of(&filters.response_headers) {
        chain.push(Box::new(ResponseHead(edit)));
    }
    let session = filters.session_header.as_deref();
    if let Some(name) = session.and_then(|name| HeaderName::from_bytes(name.as_bytes()).ok()) {
        chain.push(Box::new(HeaderSession(name)));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn set_add_remove_apply_in_that_order() {
        let edit = HeaderEdit::of(&HeaderChanges {
            set: vec![("x-set".into(), "new".into())],
            add: vec![("x-add".into(), "two".into())],
            remove: vec!["x-gone".into()],
        })
        .unwrap();
        let mut headers = HeaderMap::new();
        headers.append("x-set", "a".parse().unwrap());
        headers.append("x-set", "b".parse().unwrap());
        headers.append("x-add", "one".parse().unwrap());
        headers.append("x-gone", "z".parse().unwrap());
        edit.apply(&mut headers);
        let all = |name| {
            headers
                .get_all(name)
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(all("x-set"), ["new"]);
        assert_eq!(all("x-add"), ["one", "two"]);
        assert!(all("x-gone").is_empty());
    }
}
