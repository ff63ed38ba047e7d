//! Traefik's HTTP middlewares as plain data: the steps a route's `router.middlewares` list applies to each request, in order, with Traefik's semantics.
//!
//! The compiler resolves the Middleware objects (chains flattened, Secrets and Services read)
//! into these; `buffering`, `retry` and `compress` become route policy fields instead, since
//! sluice already has those primitives. The data plane builds its filter from this list once
//! per policy.

use std::sync::Arc;

use serde::{Serialize, Serializer};

use crate::backend::BackendId;

/// A compiled regular expression compared (and shown) by its pattern.
#[derive(Clone, Debug)]
pub struct Pattern(pub Arc<regex::Regex>);

impl Pattern {
    /// Compiles `pattern` as Go's RE2 would: unanchored, with a bounded program size.
    pub fn new(pattern: &str) -> Result<Self, regex::Error> {
        let regex = regex::RegexBuilder::new(pattern)
            .size_limit(1 << 20)
            .build()?;
        Ok(Self(Arc::new(regex)))
    }

    pub fn regex(&self) -> &regex::Regex {
        &self.0
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Eq for Pattern {}

impl Serialize for Pattern {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.as_str())
    }
}

/// One middleware of a route, named `namespace-name` as Traefik names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Middleware {
    pub name: Arc<str>,
    #[serde(flatten)]
    pub step: Step,
}

/// What a middleware does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum Step {
    ForwardAuth(Arc<ForwardAuth>),
    BasicAuth(Arc<BasicAuthStep>),
    IpAllowList(Arc<IpAllowList>),
    RedirectScheme(Arc<RedirectScheme>),
    RedirectRegex(Arc<RedirectRegex>),
    StripPrefix(Arc<StripPrefix>),
    StripPrefixRegex { regex: Vec<Pattern> },
    AddPrefix { prefix: String },
    ReplacePath { path: String },
    ReplacePathRegex { regex: Pattern, replacement: String },
    Headers(Arc<Headers>),
    RateLimit(Arc<RateLimit>),
    InFlightReq(Arc<InFlightReq>),
    Errors(Arc<ErrorPage>),
}

/// `forwardAuth`: every request is first asked of an auth server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ForwardAuth {
    /// The auth server's URL, asked as it is (the request's URI goes in `X-Forwarded-Uri`).
    pub address: String,
    /// `trustForwardHeader`: `Some(true)` keeps the `X-Forwarded-*` a trusted proxy sent,
    /// `Some(false)` replaces them and drops `X-Forwarded-Prefix`, `X-Real-Ip` and
    /// `X-Forwarded-Server`, `None` (unset) replaces them and lets the rest through.
    pub trust_forward_header: Option<bool>,
    /// `authRequestHeaders`: only these client headers are sent (all when empty).
    pub request_headers: Vec<String>,
    /// `authResponseHeaders`: removed from the client's request, then copied from a 2xx answer.
    pub response_headers: Vec<String>,
    /// `authResponseHeadersRegex`: the same for every header whose name matches.
    pub response_headers_regex: Option<Pattern>,
    /// `addAuthCookiesToResponse`: these cookies of a 2xx answer go on the response.
    pub add_auth_cookies: Vec<String>,
    /// `preserveLocationHeader`: a relative `Location` of a refusal stays relative.
    pub preserve_location: bool,
    /// `preserveRequestMethod`: the auth request has the client's method, not GET.
    pub preserve_method: bool,
    /// `authSigninURL`: a 401 from the auth server becomes a 302 here.
    pub signin_url: Option<String>,
    /// `maxResponseBodySize`: a larger answer body is a 401.
    pub max_response_body: Option<u64>,
    /// `tls.insecureSkipVerify`.
    pub insecure_skip_verify: bool,
    /// `tls.caSecret`: the CAs that verify an `https` auth server (else the system's).
    #[serde(skip)]
    pub roots: Option<Vec<rustls::pki_types::CertificateDer<'static>>>,
    /// `tls.certSecret`: the client certificate presented to the auth server.
    #[serde(skip)]
    pub client_certificate: Option<ClientCertificate>,
}

/// A certificate chain and its key, as PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientCertificate {
    pub chain_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

/// `basicAuth` with the users of its Secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BasicAuthStep {
    /// Traefik's default realm is `traefik`.
    pub realm: String,
    /// User names and their htpasswd hashes (`{SHA}`, bcrypt, `$apr1$`/`$1$`).
    #[serde(skip)]
    pub users: Vec<(String, String)>,
    /// `removeHeader`: `Authorization` is not passed on.
    pub remove_header: bool,
    /// `headerField`: the header that carries the user name to the pod.
    pub header_field: Option<String>,
}

/// Which address a client is known by, as Traefik's `ipStrategy` picks it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IpStrategy {
    /// `depth`: the Nth `X-Forwarded-For` entry from the right (1 is the last); 0 is unset.
    pub depth: usize,
    /// `excludedIPs`: the rightmost `X-Forwarded-For` entry outside these.
    pub excluded: Vec<ipnet::IpNet>,
    /// `ipv6Subnet`: an IPv6 address counts as its /N prefix.
    pub ipv6_subnet: Option<u8>,
}

impl IpStrategy {
    /// Whether the strategy reads `X-Forwarded-For` rather than the connection's address.
    pub fn reads_forwarded_for(&self) -> bool {
        self.depth > 0 || !self.excluded.is_empty()
    }
}

/// `ipAllowList` (and the older `ipWhiteList`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IpAllowList {
    pub ranges: Vec<ipnet::IpNet>,
    pub strategy: IpStrategy,
    /// `rejectStatusCode` (403 by default).
    pub reject_status: u16,
}

/// `redirectScheme`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RedirectScheme {
    pub scheme: String,
    pub port: Option<String>,
    pub permanent: bool,
}

/// `redirectRegex`: matched against `scheme://host/path?query`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RedirectRegex {
    pub regex: Pattern,
    pub replacement: String,
    pub permanent: bool,
}

/// `stripPrefix`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StripPrefix {
    pub prefixes: Vec<String>,
    /// `forceSlash` (deprecated, off unless set).
    pub force_slash: bool,
}

/// `headers`: custom request and response headers, CORS and the security headers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Headers {
    /// `customRequestHeaders`: set, or removed when the value is empty (`None`).
    pub request: Vec<(String, Option<String>)>,
    /// `customResponseHeaders`: set, or removed when the value is empty (`None`).
    pub response: Vec<(String, Option<String>)>,
    pub cors: Option<TraefikCors>,
    pub security: SecurityHeaders,
}

/// The CORS fields of Traefik's `headers` middleware.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TraefikCors {
    /// `accessControlAllowOriginList`: exact origins, or `*`.
    pub origins: Vec<String>,
    /// `accessControlAllowOriginListRegex`: unanchored patterns.
    pub origin_patterns: Vec<Pattern>,
    pub methods: Vec<String>,
    pub headers: Vec<String>,
    pub expose_headers: Vec<String>,
    pub credentials: bool,
    pub max_age: Option<i64>,
    /// `addVaryHeader`: `Vary: Origin` on every non-preflight response.
    pub add_vary: bool,
}

/// The security headers of Traefik's `headers` middleware (unrolled/secure).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityHeaders {
    /// `allowedHosts`: another Host is answered 500 `Bad Host`.
    pub allowed_hosts: Vec<String>,
    /// `hostsProxyHeaders`: where the host is read from before `Host`.
    pub hosts_proxy_headers: Vec<String>,
    /// `sslProxyHeaders`: a request with one of these header values counts as HTTPS.
    pub ssl_proxy_headers: Vec<(String, String)>,
    /// `Strict-Transport-Security`, sent over HTTPS (or always with `forceSTSHeader`).
    pub sts: Option<String>,
    pub force_sts: bool,
    /// Headers set on every response: `X-Frame-Options`, `X-Content-Type-Options`,
    /// `X-XSS-Protection`, `Content-Security-Policy`, `Referrer-Policy`, ...
    pub always: Vec<(String, String)>,
    /// `publicKey`: `Public-Key-Pins`, over HTTPS.
    pub public_key: Option<String>,
    /// `isDevelopment`: no host check, no STS, no HPKP.
    pub is_development: bool,
}

impl SecurityHeaders {
    pub fn is_set(&self) -> bool {
        *self != Self::default()
    }
}

/// What a rate or concurrency limit counts requests by.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SourceCriterion {
    /// The client's address, as the strategy picks it.
    ClientAddress(IpStrategy),
    /// A request header's value (`requestHeaderName`).
    Header(String),
    /// The request's Host (`requestHost`).
    Host,
}

/// `rateLimit`: a token bucket per source.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RateLimit {
    /// Tokens per second; `None` is no limit (`average: 0`).
    pub per_second: Option<f64>,
    /// The bucket's size (`burst`, at least 1).
    pub burst: u32,
    pub source: SourceCriterion,
}

impl Eq for RateLimit {}

/// `inFlightReq`: requests in progress per source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InFlightReq {
    pub amount: u64,
    pub source: SourceCriterion,
}

/// `errors`: answers of these statuses are replaced by a page from another Service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorPage {
    /// Inclusive status ranges.
    pub statuses: Vec<(u16, u16)>,
    /// `statusRewrites`: the status the client gets for a caught range.
    pub rewrites: Vec<((u16, u16), u16)>,
    /// The Service port the page is asked of.
    pub backend: BackendId,
    /// The path and query asked, with `{status}`, `{originalStatus}` and `{url}`.
    pub query: String,
    /// `errorRequestHeaders`: the client headers sent along (`None`: all).
    pub request_headers: Option<Vec<String>>,
}

impl ErrorPage {
    /// Whether an answer of `status` is replaced.
    pub fn catches(&self, status: u16) -> bool {
        self.statuses
            .iter()
            .any(|(low, high)| (*low..=*high).contains(&status))
    }

    /// The status the client gets for a caught `status`.
    pub fn status_for(&self, status: u16) -> u16 {
        self.rewrites
            .iter()
            .find(|((low, high), _)| (*low..=*high).contains(&status))
            .map_or(status, |(_, to)| *to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_pages_catch_ranges_and_rewrite_statuses() {
        let page = ErrorPage {
            statuses: vec![(500, 599), (404, 404)],
            rewrites: vec![((500, 503), 503)],
            backend: BackendId::new("default", "errors", "80"),
            query: "/{status}.html".into(),
            request_headers: None,
        };
        assert!(page.catches(404) && page.catches(502) && !page.catches(403));
        assert_eq!(page.status_for(502), 503);
        assert_eq!(page.status_for(504), 504);
    }

    #[test]
    fn patterns_compare_by_their_text() {
        let a = Pattern::new("^/api/(.*)").unwrap();
        let b = Pattern::new("^/api/(.*)").unwrap();
        assert_eq!(a, b);
        assert_ne!(a, Pattern::new("^/v2").unwrap());
    }
}
