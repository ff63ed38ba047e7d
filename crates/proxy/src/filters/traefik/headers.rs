//! Traefik's `headers` middleware: custom request and response headers, CORS (preflights answered by the proxy, never forwarded) and the security headers of unrolled/secure.

use std::sync::Arc;

use http::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE,
    ACCESS_CONTROL_REQUEST_HEADERS, ACCESS_CONTROL_REQUEST_METHOD, CONTENT_LENGTH, CONTENT_TYPE,
    ORIGIN, STRICT_TRANSPORT_SECURITY, VARY, X_CONTENT_TYPE_OPTIONS,
};
use http::{response, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use sluice_routing::middleware::{Headers, TraefikCors};

use super::ChainRequest;
use super::{answered, OwnAnswer};
use crate::filters::contract::LocalAnswer;

/// One `headers` middleware.
pub(super) struct HeaderEdits(pub(super) Arc<Headers>);

impl HeaderEdits {
    /// Answers a CORS preflight, refuses a host outside `allowedHosts`, then sets the custom
    /// request headers (an empty value removes the header: an empty `X-Forwarded-For` leaves
    /// the pod none; `Host` sets the Host the pod gets). Returns whether the request counts as HTTPS for the security headers.
    pub(super) fn on_request(
        &self,
        request: &mut ChainRequest<'_, '_>,
    ) -> Result<bool, Box<LocalAnswer>> {
        let headers = &self.0;
        if let Some(cors) = &headers.cors {
            if is_preflight(&request.upstream.method, &request.upstream.headers) {
                return Err(preflight(cors, &request.upstream.headers));
            }
        }
        let security = &headers.security;
        if !security.allowed_hosts.is_empty() && !security.is_development {
            let host = security
                .hosts_proxy_headers
                .iter()
                .find_map(|name| {
                    request
                        .upstream
                        .headers
                        .get(name.as_str())
                        .and_then(|v| v.to_str().ok())
                        .filter(|v| !v.is_empty())
                })
                .unwrap_or_else(|| request.host());
            if !security
                .allowed_hosts
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(host))
            {
                return Err(bad_host());
            }
        }
        let secure = request.over_tls()
            || security.ssl_proxy_headers.iter().any(|(name, value)| {
                request
                    .upstream
                    .headers
                    .get(name.as_str())
                    .is_some_and(|sent| sent.as_bytes() == value.as_bytes())
            });
        let upstream = &mut request.upstream.headers;
        for (name, value) in &headers.request {
            let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
                continue;
            };
            match value.as_deref().map(HeaderValue::from_str) {
                None => {
                    upstream.remove(&name);
                }
                Some(Ok(value)) => {
                    upstream.insert(name, value);
                }
                Some(Err(_)) => {}
            }
        }
        Ok(secure)
    }

    /// The security headers, then the custom response headers, then the CORS headers.
    pub(super) fn on_response(
        &self,
        response: &mut response::Parts,
        origin: Option<&HeaderValue>,
        secure: bool,
    ) {
        let headers = &self.0;
        let security = &headers.security;
        let out = &mut response.headers;
        for (name, value) in &security.always {
            set(out, name, value);
        }
        if !security.is_development {
            if let Some(sts) = security
                .sts
                .as_deref()
                .filter(|_| secure || security.force_sts)
            {
                if let Ok(value) = HeaderValue::from_str(sts) {
                    out.insert(STRICT_TRANSPORT_SECURITY, value);
                }
            }
            if let Some(pins) = security.public_key.as_deref().filter(|_| secure) {
                set(out, "public-key-pins", pins);
            }
        }
        for (name, value) in &headers.response {
            match value {
                Some(value) => set(out, name, value),
                None => {
                    out.remove(name.as_str());
                }
            }
        }
        if let Some(cors) = &headers.cors {
            response_cors(cors, out, origin);
        }
    }
}

fn set(headers: &mut HeaderMap, name: &str, value: &str) {
    if let (Ok(name), Ok(value)) = (
        HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_str(value),
    ) {
        headers.insert(name, value);
    }
}

/// `OPTIONS` with an `Origin` and an `Access-Control-Request-Method`.
fn is_preflight(method: &Method, headers: &HeaderMap) -> bool {
    let present = |name| {
        headers
            .get(name)
            .is_some_and(|v: &HeaderValue| !v.is_empty())
    };
    method == Method::OPTIONS && present(ORIGIN) && present(ACCESS_CONTROL_REQUEST_METHOD)
}

/// What `Access-Control-Allow-Origin` says to `origin`, or `None` when it is not allowed:
/// the origin itself for a listed or matching one, `*` for the wildcard (the origin itself
/// with credentials, which browsers require).
fn allowed_origin(cors: &TraefikCors, origin: &HeaderValue) -> Option<HeaderValue> {
    for listed in &cors.origins {
        if listed.as_bytes() == origin.as_bytes() {
            return Some(origin.clone());
        }
        if listed == "*" {
            return Some(match cors.credentials {
                true => origin.clone(),
                false => HeaderValue::from_static("*"),
            });
        }
    }
    let text = origin.to_str().ok()?;
    cors.origin_patterns
        .iter()
        .any(|pattern| pattern.regex().is_match(text))
        .then(|| origin.clone())
}

/// The preflight answer: 200, no body, never forwarded.
fn preflight(cors: &TraefikCors, request: &HeaderMap) -> Box<LocalAnswer> {
    let mut headers = HeaderMap::new();
    if cors.credentials {
        headers.insert(
            ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
    }
    let echo = |list: &[String], asked: http::HeaderName| -> Option<HeaderValue> {
        if cors.credentials && list.iter().any(|v| v == "*") {
            return request.get(asked).filter(|v| !v.is_empty()).cloned();
        }
        (!list.is_empty())
            .then(|| HeaderValue::from_str(&list.join(",")).ok())
            .flatten()
    };
    if let Some(value) = echo(&cors.headers, ACCESS_CONTROL_REQUEST_HEADERS) {
        headers.insert(ACCESS_CONTROL_ALLOW_HEADERS, value);
    }
    if let Some(value) = echo(&cors.methods, ACCESS_CONTROL_REQUEST_METHOD) {
        headers.insert(ACCESS_CONTROL_ALLOW_METHODS, value);
    }
    if let Some(allowed) = request
        .get(ORIGIN)
        .and_then(|origin| allowed_origin(cors, origin))
    {
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, allowed);
    }
    if let Some(age) = cors.max_age {
        headers.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from(age));
    }
    if let Some(expose) = expose_headers(cors) {
        headers.insert(ACCESS_CONTROL_EXPOSE_HEADERS, expose);
    }
    headers.insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
    answered(OwnAnswer {
        status: StatusCode::OK,
        headers,
        body: bytes::Bytes::new(),
    })
}

/// `accessControlExposeHeaders`, unless it holds `*` with credentials.
fn expose_headers(cors: &TraefikCors) -> Option<HeaderValue> {
    let wildcard = cors.credentials && cors.expose_headers.iter().any(|v| v == "*");
    if cors.expose_headers.is_empty() || wildcard {
        return None;
    }
    HeaderValue::from_str(&cors.expose_headers.join(",")).ok()
}

/// The CORS headers of an answer that is not a preflight.
fn response_cors(cors: &TraefikCors, out: &mut HeaderMap, origin: Option<&HeaderValue>) {
    let empty = HeaderValue::from_static("");
    if let Some(allowed) = allowed_origin(cors, origin.unwrap_or(&empty)) {
        out.insert(ACCESS_CONTROL_ALLOW_ORIGIN, allowed);
    }
    if cors.credentials {
        out.insert(
            ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
    }
    if let Some(expose) = expose_headers(cors) {
        out.insert(ACCESS_CONTROL_EXPOSE_HEADERS, expose);
    }
    if cors.add_vary {
        let vary = out
            .get(VARY)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let value = match vary.as_str() {
            "Origin" => return,
            "" => "Origin".to_owned(),
            other => format!("{other},Origin"),
        };
        if let Ok(value) = HeaderValue::try_from(value) {
            out.insert(VARY, value);
        }
    }
}

/// `allowedHosts` refused the host: Traefik's 500.
fn bad_host() -> Box<LocalAnswer> {
    let mut headers = HeaderMap::new();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    answered(OwnAnswer {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        headers,
        body: bytes::Bytes::from_static(b"Bad Host\n"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_routing::middleware::Pattern;

    fn cors(origins: &[&str], credentials: bool) -> TraefikCors {
        TraefikCors {
            origins: origins.iter().map(|o| (*o).to_owned()).collect(),
            origin_patterns: vec![Pattern::new(r"^https://.*\.example\.org$").unwrap()],
            credentials,
            ..TraefikCors::default()
        }
    }

    #[test]
    fn origins_are_echoed_or_wildcarded_as_traefik_does() {
        let origin = HeaderValue::from_static("https://app.test");
        assert_eq!(
            allowed_origin(&cors(&["https://app.test"], false), &origin),
            Some(origin.clone())
        );
        assert_eq!(allowed_origin(&cors(&["*"], false), &origin).unwrap(), "*");
        assert_eq!(
            allowed_origin(&cors(&["*"], true), &origin),
            Some(origin.clone())
        );
        assert_eq!(
            allowed_origin(&cors(&["https://x.test"], false), &origin),
            None
        );
        let matching = HeaderValue::from_static("https://a.b.example.org");
        assert_eq!(
            allowed_origin(&cors(&[], false), &matching),
            Some(matching.clone())
        );
    }

    #[test]
    fn vary_gets_origin_appended_once() {
        let mut out = HeaderMap::new();
        let settings = TraefikCors {
            add_vary: true,
            ..cors(&[], false)
        };
        out.insert(VARY, HeaderValue::from_static("Accept-Encoding"));
        response_cors(&settings, &mut out, None);
        assert_eq!(out[VARY], "Accept-Encoding,Origin");
        let mut plain = HeaderMap::new();
        response_cors(&settings, &mut plain, None);
        assert_eq!(plain[VARY], "Origin");
    }
}
