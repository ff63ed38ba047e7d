//! Traefik's `forwardAuth`: the request's headers and `X-Forwarded-*` go to the auth server with a GET; a 2xx lets the request through with the auth server's headers, anything else goes back to the client as the auth server sent it.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, HOST, LOCATION, SET_COOKIE, TRANSFER_ENCODING, USER_AGENT};
use http::{response, HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use sluice_routing::middleware::ForwardAuth;

use super::ChainRequest;
use super::{answered, OwnAnswer};
use crate::filters::contract::LocalAnswer;
use crate::headers::strip_hop_by_hop;
use crate::upstream::outbound::{client_with_tls, HttpsClient, OutboundClient};

/// How long the auth server may take (Traefik's client timeout).
const AUTH_TIMEOUT: Duration = Duration::from_secs(30);
/// The most of an auth answer's body read when `maxResponseBodySize` sets no limit.
const DEFAULT_BODY_LIMIT: usize = 4 << 20;

/// The forwarding headers Traefik manages: dropped from what an untrusted client sent, and
/// (with `trustForwardHeader: false`) from what the auth server gets before they are set anew.
const MANAGED: [&str; 13] = [
    "x-forwarded-proto",
    "x-forwarded-scheme",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-server",
    "x-forwarded-uri",
    "x-forwarded-method",
    "x-forwarded-prefix",
    "x-forwarded-tls-client-cert",
    "x-forwarded-tls-client-cert-info",
    "x-scheme",
    "x-real-ip",
];

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_METHOD: HeaderName = HeaderName::from_static("x-forwarded-method");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_PORT: HeaderName = HeaderName::from_static("x-forwarded-port");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_URI: HeaderName = HeaderName::from_static("x-forwarded-uri");

/// One `forwardAuth` middleware, with its own client when it has TLS settings.
pub(super) struct ForwardAuthCheck {
    auth: Arc<ForwardAuth>,
    address: Option<Uri>,
    request_headers: Vec<HeaderName>,
    response_headers: Vec<HeaderName>,
    client: OnceLock<Result<HttpsClient, String>>,
}

/// The auth server's answer, read whole.
struct AuthAnswer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl ForwardAuthCheck {
    pub(super) fn new(auth: Arc<ForwardAuth>) -> Self {
        let names = |list: &[String]| {
            list.iter()
                .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
                .collect()
        };
        Self {
            address: auth.address.parse().ok(),
            request_headers: names(&auth.request_headers),
            response_headers: names(&auth.response_headers),
            auth,
            client: OnceLock::new(),
        }
    }

    /// Asks the auth server. Returns the cookies its 2xx answer has for the response; any
    /// other answer is the client's.
    pub(super) async fn check(
        &self,
        request: &mut ChainRequest<'_, '_>,
        outbound: &OutboundClient,
    ) -> Result<Vec<HeaderValue>, Box<LocalAnswer>> {
        let Some(address) = self.address.clone() else {
            return Err(unreachable());
        };
        let client = self.client(outbound).map_err(|error| {
            tracing::warn!(%error, "no client for the forwardAuth server: 500");
            unreachable()
        })?;
        let mut ask = Request::new(Full::new(Bytes::new()));
        *ask.method_mut() = match self.auth.preserve_method {
            true => request.upstream.method.clone(),
            false => Method::GET,
        };
        *ask.headers_mut() = self.auth_headers(request, &address);
        *ask.uri_mut() = address;
        let answer = match tokio::time::timeout(AUTH_TIMEOUT, client.request(ask)).await {
            Ok(Ok(response)) => self.read(response).await?,
            Ok(Err(error)) => {
                tracing::warn!(%error, address = %self.auth.address, "the forwardAuth server could not be reached: 500");
                return Err(unreachable());
            }
            Err(_) => {
                tracing::warn!(address = %self.auth.address, "the forwardAuth server did not answer in time: 500");
                return Err(unreachable());
            }
        };
        if answer.status.is_success() {
            return Ok(self.admit(answer, &mut request.upstream.headers));
        }
        Err(self.refuse(answer))
    }

    fn client<'c>(&'c self, outbound: &'c OutboundClient) -> Result<&'c HttpsClient, String> {
        let auth = &self.auth;
        if !auth.insecure_skip_verify && auth.roots.is_none() && auth.client_certificate.is_none() {
            return outbound.get().map_err(str::to_owned);
        }
        self.client
            .get_or_init(|| tls_config(auth).map(client_with_tls))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// What the auth server gets: the request's headers (or only `authRequestHeaders`), then
    /// `X-Forwarded-Method`, `-Proto`, `-Host`, `-Uri`, `-For` and `-Port` as
    /// `trustForwardHeader` says.
    fn auth_headers(&self, request: &ChainRequest<'_, '_>, address: &Uri) -> HeaderMap {
        let mut headers = request.upstream.headers.clone();
        strip_hop_by_hop(&mut headers);
        for name in [HOST, CONTENT_LENGTH, TRANSFER_ENCODING] {
            headers.remove(name);
        }
        let trust = self.auth.trust_forward_header;
        if trust == Some(false) {
            for name in MANAGED {
                headers.remove(name);
            }
        }
        if !self.request_headers.is_empty() {
            let mut kept = HeaderMap::new();
            let listed = |name: &HeaderName| {
                self.request_headers.contains(name)
                    || (trust == Some(true) && MANAGED.contains(&name.as_str()))
            };
            for (name, value) in &headers {
                if listed(name) {
                    kept.append(name.clone(), value.clone());
                }
            }
            headers = kept;
        }
        let client_ip = request.context.connection.client.ip().to_string();
        let proto = if request.context.connection.over_tls {
            "https"
        } else {
            "http"
        };
        let host = request.host().to_owned();
        let uri = request.request_uri().to_owned();
        let method = request.upstream.method.as_str().to_owned();
        let set = |headers: &mut HeaderMap, name: HeaderName, value: &str, keep: bool| {
            if keep && headers.contains_key(&name) {
                return;
            }
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.insert(name, value);
            }
        };
        let keep = trust == Some(true);
        // With trust, the X-Forwarded-For sluice made (the trusted proxies' list and the peer)
        // is already what Traefik sends.
        set(&mut headers, X_FORWARDED_FOR, &client_ip, keep);
        set(&mut headers, X_FORWARDED_METHOD, &method, keep);
        set(&mut headers, X_FORWARDED_PROTO, proto, keep);
        if trust.is_some() {
            let proto_now = headers
                .get(&X_FORWARDED_PROTO)
                .and_then(|v| v.to_str().ok())
                .unwrap_or(proto)
                .to_owned();
            let port = match host.rsplit_once(':') {
                Some((_, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
                    port.to_owned()
                }
                _ if matches!(proto_now.as_str(), "https" | "wss") => "443".to_owned(),
                _ => "80".to_owned(),
            };
            set(&mut headers, X_FORWARDED_PORT, &port, keep);
        }
        set(&mut headers, X_FORWARDED_HOST, &host, keep);
        set(&mut headers, X_FORWARDED_URI, &uri, keep);
        if let Some(authority) = address.authority() {
            if let Ok(value) = HeaderValue::from_str(authority.as_str()) {
                headers.insert(HOST, value);
            }
        }
        if request.upstream.headers.get(USER_AGENT).is_none() {
            headers.remove(USER_AGENT);
        }
        headers
    }

    async fn read(
        &self,
        response: http::Response<hyper::body::Incoming>,
    ) -> Result<AuthAnswer, Box<LocalAnswer>> {
        let (head, body) = response.into_parts();
        let limit = self
            .auth
            .max_response_body
            .and_then(|limit| usize::try_from(limit).ok())
            .unwrap_or(DEFAULT_BODY_LIMIT);
        let body = match Limited::new(body, limit).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(error) if error.is::<http_body_util::LengthLimitError>() => {
                tracing::warn!(address = %self.auth.address, limit, "the forwardAuth answer's body is over the limit: 401");
                return Err(OwnAnswer::text(StatusCode::UNAUTHORIZED, ""));
            }
            Err(error) => {
                tracing::warn!(%error, address = %self.auth.address, "the forwardAuth answer broke off: 500");
                return Err(unreachable());
            }
        };
        Ok(AuthAnswer {
            status: head.status,
            headers: head.headers,
            body,
        })
    }

    /// A 2xx: each `authResponseHeaders` (and `authResponseHeadersRegex`) header is removed
    /// from the request, so a client can never send it itself, then copied from the answer.
    fn admit(&self, answer: AuthAnswer, upstream: &mut HeaderMap) -> Vec<HeaderValue> {
        for name in &self.response_headers {
            upstream.remove(name);
            for value in answer.headers.get_all(name) {
                upstream.append(name.clone(), value.clone());
            }
        }
        if let Some(pattern) = &self.auth.response_headers_regex {
            let matches = |name: &HeaderName| pattern.regex().is_match(&canonical(name.as_str()));
            let named: Vec<HeaderName> = upstream
                .keys()
                .filter(|name| matches(name))
                .cloned()
                .collect();
            for name in named {
                upstream.remove(name);
            }
            for (name, value) in answer.headers.iter().filter(|(name, _)| matches(name)) {
                upstream.append(name.clone(), value.clone());
            }
        }
        if self.auth.add_auth_cookies.is_empty() {
            return Vec::new();
        }
        answer
            .headers
            .get_all(SET_COOKIE)
            .iter()
            .filter(|cookie| {
                cookie_name(cookie).is_some_and(|name| {
                    self.auth
                        .add_auth_cookies
                        .iter()
                        .any(|wanted| wanted == name)
                })
            })
            .cloned()
            .collect()
    }

    /// Anything but a 2xx goes to the client as the auth server sent it (a relative
    /// `Location` made absolute against the auth server's address), or, for a 401 with
    /// `authSigninURL`, a 302 to the sign-in page.
    fn refuse(&self, answer: AuthAnswer) -> Box<LocalAnswer> {
        if let (StatusCode::UNAUTHORIZED, Some(signin)) = (answer.status, &self.auth.signin_url) {
            let mut headers = HeaderMap::new();
            if let Ok(location) = HeaderValue::from_str(signin) {
                headers.insert(LOCATION, location);
            }
            return answered(OwnAnswer {
                status: StatusCode::FOUND,
                headers,
                body: Bytes::new(),
            });
        }
        let mut headers = answer.headers;
        strip_hop_by_hop(&mut headers);
        headers.remove(CONTENT_LENGTH);
        headers.remove(TRANSFER_ENCODING);
        if !self.auth.preserve_location {
            let absolute = headers
                .get(LOCATION)
                .and_then(|location| location.to_str().ok())
                .map(|location| resolve_location(&self.auth.address, location));
            if let Some(Ok(location)) = absolute.map(HeaderValue::try_from) {
                headers.insert(LOCATION, location);
            }
        }
        answered(OwnAnswer {
            status: answer.status,
            headers,
            body: answer.body,
        })
    }

    /// `addAuthCookiesToResponse`: the response's cookies of the same names are replaced by
    /// the auth server's.
    pub(super) fn add_cookies(&self, response: &mut response::Parts, cookies: &[HeaderValue]) {
        let replaced = |cookie: &HeaderValue| {
            cookie_name(cookie).is_some_and(|name| {
                self.auth
                    .add_auth_cookies
                    .iter()
                    .any(|wanted| wanted == name)
            })
        };
        let kept: Vec<HeaderValue> = response
            .headers
            .get_all(SET_COOKIE)
            .iter()
            .filter(|cookie| !replaced(cookie))
            .cloned()
            .collect();
        response.headers.remove(SET_COOKIE);
        for cookie in kept.into_iter().chain(cookies.iter().cloned()) {
            response.headers.append(SET_COOKIE, cookie);
        }
    }
}

/// The forwardAuth server could not be asked or did not answer: Traefik's empty 500.
fn unreachable() -> Box<LocalAnswer> {
    OwnAnswer::text(StatusCode::INTERNAL_SERVER_ERROR, "")
}

/// The name of a `Set-Cookie` value.
fn cookie_name(cookie: &HeaderValue) -> Option<&str> {
    let text = cookie.to_str().ok()?;
    let (name, _) = text.split_once('=')?;
    Some(name.trim())
}

/// A header name as Go canonicalises it (`remote-user` → `Remote-User`), which
/// `authResponseHeadersRegex` is matched against.
fn canonical(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// `location` resolved against the auth server's `address`, as Go's `Response.Location`
/// does.
fn resolve_location(address: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_owned();
    }
    let Ok(base) = address.parse::<Uri>() else {
        return location.to_owned();
    };
    let scheme = base.scheme_str().unwrap_or("http");
    let authority = base.authority().map_or("", |a| a.as_str());
    if let Some(rest) = location.strip_prefix("//") {
        return format!("{scheme}://{rest}");
    }
    if location.starts_with('/') {
        return format!("{scheme}://{authority}{location}");
    }
    let directory = base.path().rsplit_once('/').map_or("", |(dir, _)| dir);
    format!("{scheme}://{authority}{directory}/{location}")
}

/// The TLS client settings of a forwardAuth with `tls`: its CAs (else the system's), or no
/// verification, and its client certificate.
fn tls_config(auth: &ForwardAuth) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| error.to_string())?;
    let builder = if auth.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(
                crate::upstream::connect::AcceptAnyCertificate(provider),
            ))
    } else if let Some(roots) = &auth.roots {
        let mut store = rustls::RootCertStore::empty();
        store.add_parsable_certificates(roots.iter().cloned());
        builder.with_root_certificates(store)
    } else {
        use hyper_rustls::ConfigBuilderExt;
        builder
            .with_native_roots()
            .map_err(|error| format!("no system CA certificates: {error}"))?
    };
    match &auth.client_certificate {
        None => Ok(builder.with_no_client_auth()),
        Some(certificate) => {
            let chain = rustls::pki_types::CertificateDer::pem_slice_iter(&certificate.chain_pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|error| format!("the client certificate is not PEM: {error}"))?;
            let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(&certificate.key_pem)
                .map_err(|error| format!("the client key is not PEM: {error}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|error| error.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_locations_resolve_against_the_auth_address() {
        let address = "http://auth:9000/api/verify";
        assert_eq!(
            resolve_location(address, "/login"),
            "http://auth:9000/login"
        );
        assert_eq!(
            resolve_location(address, "login"),
            "http://auth:9000/api/login"
        );
        assert_eq!(resolve_location(address, "https://x/y"), "https://x/y");
        assert_eq!(resolve_location(address, "//other/p"), "http://other/p");
    }

    #[test]
    fn header_names_are_matched_in_go_case() {
        assert_eq!(canonical("remote-user"), "Remote-User");
        assert_eq!(canonical("x-auth-request-email"), "X-Auth-Request-Email");
    }
}
