//! Traefik's `redirectScheme` and `redirectRegex`: the URL the client used, rebuilt and compared, and a redirect (302/307, or 301/308 when permanent) when it changed.

use std::sync::Arc;

use http::header::LOCATION;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use sluice_routing::middleware::{RedirectRegex, RedirectScheme};

use super::ChainRequest;
use super::{answered, OwnAnswer};
use crate::filters::contract::LocalAnswer;

/// Traefik's redirect statuses: a GET gets 302 (301 when permanent), any other method 307
/// (308), so that the method and body are kept.
fn status(method: &Method, permanent: bool) -> StatusCode {
    match (method == Method::GET, permanent) {
        (true, false) => StatusCode::FOUND,
        (true, true) => StatusCode::MOVED_PERMANENTLY,
        (false, false) => StatusCode::TEMPORARY_REDIRECT,
        (false, true) => StatusCode::PERMANENT_REDIRECT,
    }
}

/// The redirect answer: `Location` and the status's reason phrase as the body.
fn redirect(status: StatusCode, location: &str) -> Box<LocalAnswer> {
    let mut headers = HeaderMap::new();
    match HeaderValue::try_from(location) {
        Ok(value) => {
            headers.insert(LOCATION, value);
        }
        Err(_) => return OwnAnswer::text(StatusCode::BAD_GATEWAY, "Bad Gateway"),
    }
    let reason = status.canonical_reason().unwrap_or_default();
    answered(OwnAnswer {
        status,
        headers,
        body: bytes::Bytes::from_static(reason.as_bytes()),
    })
}

/// Host and port (with its `:`) of a Host header; an IPv6 literal keeps its brackets.
fn split_host(host: &str) -> (&str, &str) {
    match host.rfind(':') {
        Some(colon)
            if !host[colon..].contains(']')
                && host[colon + 1..].bytes().all(|b| b.is_ascii_digit()) =>
        {
            (&host[..colon], &host[colon..])
        }
        _ => (host, ""),
    }
}

/// `redirectScheme`: the request's URL on another scheme (and port), unless it already is.
pub(super) struct SchemeRedirect(pub(super) Arc<RedirectScheme>);

impl SchemeRedirect {
    pub(super) fn check(&self, request: &ChainRequest<'_, '_>) -> Result<(), Box<LocalAnswer>> {
        let redirect = &self.0;
        let scheme = if request.over_tls() { "https" } else { "http" };
        let (host, port) = split_host(request.host());
        let port = match (scheme, port) {
            ("http", ":80") | ("https", ":443") => "",
            (_, port) => port,
        };
        let uri = request.request_uri();
        let current = format!("{scheme}://{host}{port}{uri}");
        let target_port = match (redirect.scheme.as_str(), redirect.port.as_deref()) {
            (_, None) | ("http", Some("80")) | ("https", Some("443")) => String::new(),
            (_, Some(port)) => format!(":{port}"),
        };
        let target = format!("{}://{host}{target_port}{uri}", redirect.scheme);
        if target == current {
            return Ok(());
        }
        Err(self::redirect(
            status(&request.upstream.method, redirect.permanent),
            &target,
        ))
    }
}

/// `redirectRegex`: `scheme://host/path?query` (the Host as sent, port and all; the scheme
/// from the connection only) rewritten by the regex; a redirect when it changed.
pub(super) struct RegexRedirect(pub(super) Arc<RedirectRegex>);

impl RegexRedirect {
    pub(super) fn check(&self, request: &ChainRequest<'_, '_>) -> Result<(), Box<LocalAnswer>> {
        let redirect = &self.0;
        let scheme = if request.context.connection.over_tls {
            "https"
        } else {
            "http"
        };
        let current = format!("{scheme}://{}{}", request.host(), request.request_uri());
        let regex = redirect.regex.regex();
        if !regex.is_match(&current) {
            return Ok(());
        }
        let target = regex.replace_all(&current, redirect.replacement.as_str());
        if target == current {
            return Ok(());
        }
        if target.parse::<http::Uri>().is_err() {
            return Err(OwnAnswer::text(StatusCode::BAD_GATEWAY, "Bad Gateway"));
        }
        Err(self::redirect(
            status(&request.upstream.method, redirect.permanent),
            &target,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_statuses_keep_the_method_of_anything_but_get() {
        assert_eq!(status(&Method::GET, false), StatusCode::FOUND);
        assert_eq!(status(&Method::POST, false), StatusCode::TEMPORARY_REDIRECT);
        assert_eq!(status(&Method::GET, true), StatusCode::MOVED_PERMANENTLY);
        assert_eq!(status(&Method::HEAD, true), StatusCode::PERMANENT_REDIRECT);
    }

    #[test]
    fn hosts_split_from_their_port() {
        assert_eq!(split_host("a.test:8080"), ("a.test", ":8080"));
        assert_eq!(split_host("a.test"), ("a.test", ""));
        assert_eq!(split_host("[::1]:80"), ("[::1]", ":80"));
        assert_eq!(split_host("[::1]"), ("[::1]", ""));
    }
}
