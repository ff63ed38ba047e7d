//! How a route uses its backend: the balancer, sticky sessions, retries and the ClusterIP fallback.
//!
//! A policy is plain data compiled from annotations. It belongs to a route, not to a backend,
//! because two Ingresses may send to the same Service port with different settings.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use serde::Serialize;

use crate::attached::Attached;
use crate::backend::Endpoint;

/// Everything a route asks of the data plane besides where to send.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RoutePolicy {
    pub balancer: Balancer,
    /// Session affinity by a token in a cookie (ingress-nginx's `affinity: cookie`, a
    /// `sessionPersistence` of type `Cookie`) or in a header (of type `Header`); `None`
    /// balances every request afresh.
    pub session: Option<SessionAffinity>,
    pub retry: RetryPolicy,
    /// The Service's ClusterIP, used when the backend has no endpoints or every endpoint
    /// attempt failed (`sluice.dev/service-upstream: fallback`).
    pub fallback: Option<Endpoint>,
    /// The largest request body in bytes (`proxy-body-size`); `Some(0)` lifts the limit, as
    /// nginx's `client_max_body_size 0` does, and `None` leaves the proxy-wide limit.
    pub max_body_size: Option<u64>,
    /// Redirects to HTTPS, HSTS, the listeners the route is served on, client certificates.
    pub tls: TlsPolicy,
    /// How the data plane talks to the endpoints.
    pub upstream: UpstreamProtocol,
    /// Which client addresses may use the route (`allowlist-source-range`,
    /// `denylist-source-range`).
    pub source_ranges: SourceRanges,
    /// Requests and connections per client address (`limit-rps`, `limit-rpm`,
    /// `limit-connections`).
    pub limits: Option<RateLimits>,
    /// `default-backend` and `custom-http-errors`.
    pub error_pages: Option<ErrorPages>,
    /// Where copies of the requests go (`mirror-target`, `RequestMirror` filters).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mirrors: Vec<Mirror>,
    /// Basic, digest and external authentication, and `satisfy`.
    pub access: crate::access::AccessControl,
    /// Redirects and changes to the request and response heads, from the annotations
    /// (`temporal-redirect`, `permanent-redirect`, `app-root`, `x-forwarded-prefix`,
    /// `upstream-vhost`, `rewrite-target`, `sluice.dev/request-headers`,
    /// `sluice.dev/response-headers`) or an HTTPRoute rule's filters (`RequestRedirect`,
    /// `URLRewrite`, `RequestHeaderModifier`, `ResponseHeaderModifier`).
    pub edits: RequestEdits,
    /// The route's requests are left out of the access log (`enable-access-log: "false"`).
    pub access_log_off: bool,
    /// Cross-origin resource sharing (`enable-cors` and the `cors-*` annotations).
    pub cors: Option<Cors>,
    /// `proxy-connect-timeout`, `proxy-send-timeout`, `proxy-read-timeout`; `None` keeps the
    /// proxy-wide setting.
    pub timeouts: UpstreamTimeouts,
    /// What the client gets when the endpoint could not be reached, or failed before its
    /// response head, and no attempt is left.
    #[serde(skip_serializing_if = "UpstreamFailureStatus::is_bad_gateway")]
    pub upstream_failure_status: UpstreamFailureStatus,
    /// What sluice cannot honour that restricts access or routing on this route (a snippet,
    /// a WAF switch, a Traefik middleware, another controller's action), in a few words: the
    /// route answers every request 503 rather than serve open what was meant to be protected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Traefik middlewares (`router.middlewares`), applied in order after the ingress-nginx
    /// request filters and the access phase.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub middlewares: Vec<crate::middleware::Middleware>,
    /// Response compression: the proxy's default, or what an annotation or a Traefik
    /// `compress` middleware chose.
    #[serde(skip_serializing_if = "crate::Compression::is_default")]
    pub compression: crate::Compression,
    /// Distributed tracing on this route, when the proxy traces (ingress-nginx's
    /// `enable-opentelemetry` and `opentelemetry-trust-incoming-span`).
    #[serde(skip_serializing_if = "RouteTracing::is_default")]
    pub tracing: RouteTracing,
    /// The data plane's filters for this policy, built from it once and attached.
    #[serde(skip)]
    pub filters: Attached,
}

/// What a route changes of the proxy's tracing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RouteTracing {
    /// No span; the client's `traceparent` goes to the pod as it was sent.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub off: bool,
    /// A new trace even when the client sent one.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub distrust_incoming: bool,
}

impl RouteTracing {
    /// Whether the route traces as the proxy does.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// The status of an answer no endpoint gave: a connect that failed, or an exchange that failed
/// before the response head.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum UpstreamFailureStatus {
    /// 502, as nginx answers (Ingress routes).
    #[default]
    BadGateway,
    /// 503, as Envoy answers and the Gateway API conformance suite's connection-error retry
    /// test expects (Gateway API routes).
    ServiceUnavailable,
}

impl UpstreamFailureStatus {
    fn is_bad_gateway(&self) -> bool {
        *self == Self::BadGateway
    }
}

/// Session affinity: where the token that names a session's endpoint travels.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionAffinity {
    /// In a cookie the proxy sets.
    Cookie(StickyCookie),
    /// In a request and response header of this name.
    Header(String),
}

impl SessionAffinity {
    /// The session cookie, for affinity by cookie.
    pub fn cookie(&self) -> Option<&StickyCookie> {
        match self {
            Self::Cookie(cookie) => Some(cookie),
            Self::Header(_) => None,
        }
    }
}

/// A mirror: where a copy of a request goes, fire-and-forget. The two kinds differ in what
/// they copy, as their origins do: a URL gets the client's request as it came (nginx's
/// `mirror`), a backend the request as the route's filters left it (Envoy's).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mirror {
    /// `mirror-target`.
    Url {
        /// The mirror's URL; may use nginx variables (`$request_uri`, ...).
        target: Vec<crate::variable::Variable>,
        /// `mirror-host`: the Host the mirror gets (default the target's).
        host: Option<String>,
        /// `mirror-request-body` (default on): the copy carries the request body.
        body: bool,
    },
    /// A `RequestMirror` filter: one ready endpoint of the backend gets a copy of
    /// `numerator` in `denominator` requests, with the body.
    Backend {
        /// The backend's id, for display.
        backend: crate::backend::BackendId,
        /// Where the backend sits in the table.
        #[serde(skip)]
        index: Option<crate::backend::BackendIndex>,
        numerator: u32,
        denominator: u32,
    },
}

impl Mirror {
    /// Whether the copy carries the request body, so the body must be kept to send twice.
    pub fn copies_body(&self) -> bool {
        match self {
            Self::Url { body, .. } => *body,
            Self::Backend { .. } => true,
        }
    }
}

/// Headers set (replacing), added (appended) and removed, as a HeaderModifier filter lists.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HeaderChanges {
    pub set: Vec<(String, String)>,
    pub add: Vec<(String, String)>,
    pub remove: Vec<String>,
}

impl HeaderChanges {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }
}

/// Where a redirect sends the client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RedirectTo {
    /// A location with nginx variables filled in per request (`temporal-redirect`,
    /// `permanent-redirect`).
    Template(Vec<crate::variable::Variable>),
    /// The request's own URL with these parts changed (a `RequestRedirect` filter); each part
    /// left out keeps the request's own.
    Parts {
        scheme: Option<String>,
        hostname: Option<String>,
        port: Option<u16>,
        path: Option<PathChange>,
    },
}

/// How the path the pod gets is rewritten.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathRewrite {
    /// `rewrite-target`: the whole path replaced by the target, with `$1`..`$9` standing for
    /// the groups the route's regex path captured (nginx's `rewrite regex target break`).
    Target(String),
    /// `URLRewrite`: the full path, or the prefix the route matched, replaced.
    Replace(PathChange),
}

/// How a redirect or rewrite changes the path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum PathChange {
    /// `ReplaceFullPath`.
    Full(String),
    /// `ReplacePrefixMatch`: the part the route's prefix matched is replaced.
    Prefix(String),
}

impl PathChange {
    /// The new path for `path`, which the route's `matched` prefix matched (`None` for
    /// other kinds of match: the whole path is replaced).
    pub fn apply(&self, path: &str, matched: Option<&str>) -> String {
        match self {
            Self::Full(full) => full.clone(),
            Self::Prefix(replacement) => {
                let prefix = matched.unwrap_or(path).trim_end_matches('/');
                let rest = path.get(prefix.len()..).unwrap_or_default();
                join_path(replacement, rest)
            }
        }
    }
}

/// `replacement` followed by the unmatched rest of a path (`""` or starting with `/`), with
/// exactly one `/` between them and never an empty path.
fn join_path(replacement: &str, rest: &str) -> String {
    let head = replacement.trim_end_matches('/');
    match (head.is_empty(), rest.is_empty()) {
        (true, true) => "/".to_owned(),
        (_, true) if replacement.ends_with('/') && !head.is_empty() => format!("{head}/"),
        (_, true) => replacement.to_owned(),
        _ => format!("{head}{rest}"),
    }
}

/// ingress-nginx's `default-backend` and `custom-http-errors`: a Service that serves the
/// route's requests when its own Service has no endpoints, and answers in place of the pod for
/// the listed statuses (asked for `/`, with `X-Code` and the other headers ingress-nginx's
/// custom error pages read).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ErrorPages {
    /// The `default-backend` Service; `None` uses the table's default backend for the codes.
    pub backend: Option<crate::backend::BackendId>,
    /// `custom-http-errors`: upstream statuses answered by the default backend instead.
    pub codes: Vec<u16>,
}

/// ingress-nginx's per-client limits: a leaky bucket per client address for requests (nginx's
/// `limit_req` with `burst` and `nodelay`) and a cap on its requests in progress (`limit_conn`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RateLimits {
    pub per_second: Option<u32>,
    pub per_minute: Option<u32>,
    pub connections: Option<u32>,
    /// `limit-burst-multiplier` (default 5): the burst is the rate times this.
    pub burst_multiplier: u32,
    /// `limit-allowlist`: client ranges no limit applies to.
    pub exempt: Vec<ipnet::IpNet>,
    /// The status a limited request gets (503 as ingress-nginx, or `sluice.dev/limit-status-code`).
    pub status: u16,
}

/// Redirects and head changes of a route, the same primitives whichever dialect asked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RequestEdits {
    /// Every request to the route is answered with this redirect.
    pub redirect: Option<Redirect>,
    /// A request for exactly `/` is answered 302 to this path on the same scheme and host.
    pub app_root: Option<String>,
    /// `X-Forwarded-Prefix` sent to the pod.
    pub forwarded_prefix: Option<String>,
    /// The Host sent to the pod instead of the client's (`upstream-vhost`, a `URLRewrite`
    /// hostname).
    pub upstream_host: Option<String>,
    /// Headers the pod gets changed: the annotations set (replacing any the client sent
    /// under those names), a `RequestHeaderModifier` sets, adds and removes.
    pub request_headers: HeaderChanges,
    /// Headers the client gets changed, as `request_headers`.
    pub response_headers: HeaderChanges,
    /// The path the pod gets; the query is kept.
    pub rewrite: Option<PathRewrite>,
}

impl RequestEdits {
    pub fn is_set(&self) -> bool {
        *self != Self::default()
    }
}

/// A redirect answered by the proxy: its status and where it sends the client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Redirect {
    pub code: u16,
    pub to: RedirectTo,
}

/// A route's timeouts towards its endpoints, as nginx's `proxy_*_timeout` mean them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UpstreamTimeouts {
    /// Connecting to an endpoint (`--connect-timeout`).
    pub connect: Option<std::time::Duration>,
    /// The whole exchange, every attempt and backoff included (an HTTPRoute rule's
    /// `timeouts.request`): once it has passed without a response head, the client gets 504.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<std::time::Duration>,
    /// The longest an endpoint may stop taking the request body (`--body-idle-timeout`).
    pub send: Option<std::time::Duration>,
    /// The longest wait for the response headers and between two reads of the response body
    /// (`--response-header-timeout` and `--body-idle-timeout`).
    pub read: Option<std::time::Duration>,
}

/// A route's CORS: which origins get the `Access-Control-*` headers, what those headers say,
/// and whose rules decide where ingress-nginx and Gateway API differ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cors {
    /// `None`: any origin (`*`, answered as `Access-Control-Allow-Origin: *`).
    pub origins: Option<Vec<OriginPattern>>,
    pub allow_methods: String,
    pub allow_headers: String,
    pub expose_headers: Option<String>,
    pub allow_credentials: bool,
    pub max_age: u64,
    pub rules: CorsRules,
}

/// Whose CORS rules a route follows where ingress-nginx's `enable-cors` and an HTTPRoute
/// `CORS` filter differ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CorsRules {
    /// nginx.tmpl's CORS block: a `*.` origin matches exactly one more label; only an allowed
    /// origin's `OPTIONS` is answered by the proxy (204), any other goes on to the pod.
    #[default]
    IngressNginx,
    /// The HTTPRoute CORS filter: a `*` label matches one or more labels; every preflight
    /// (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) is answered by the proxy,
    /// an origin not allowed getting 204 without `Access-Control-Allow-Origin`; a `*` among
    /// the methods or headers, or any origin with credentials, is answered with what the
    /// request asked for (browsers refuse a literal `*` with credentials).
    GatewayApi,
}

/// An allowed origin: scheme, host and optional port, where the host may start with `*.`
/// (one more label under ingress-nginx's rules, one or more under Gateway API's).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OriginPattern {
    pub scheme: String,
    /// Lowercase; without the `*.` of a wildcard.
    pub host: String,
    pub wildcard: bool,
    pub port: Option<u16>,
}

impl OriginPattern {
    /// Parses `https://app.example.com`, `http://localhost:3000` or `https://*.example.com`.
    pub fn parse(text: &str) -> Option<Self> {
        let (scheme, rest) = text.trim().split_once("://")?;
        if !matches!(scheme, "http" | "https") || rest.contains('/') || rest.is_empty() {
            return None;
        }
        let (host, port) = match rest.rsplit_once(':') {
            Some((host, port)) => (host, Some(port.parse().ok()?)),
            None => (rest, None),
        };
        let (wildcard, host) = match host.strip_prefix("*.") {
            Some(suffix) => (true, suffix),
            None => (false, host),
        };
        let label_ok = |label: &str| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if !host.split('.').all(label_ok) {
            return None;
        }
        Some(Self {
            scheme: scheme.to_owned(),
            host: host.to_ascii_lowercase(),
            wildcard,
            port,
        })
    }

    /// Whether the request's `Origin` header value is this origin, a wildcard matching as
    /// `rules` say.
    pub fn matches(&self, origin: &str, rules: CorsRules) -> bool {
        let Some(pattern) = Self::parse_exact(origin) else {
            return false;
        };
        if pattern.scheme != self.scheme || pattern.port != self.port {
            return false;
        }
        match self.wildcard {
            false => pattern.host == self.host,
            true => pattern
                .host
                .strip_suffix(&self.host)
                .and_then(|labels| labels.strip_suffix('.'))
                .is_some_and(|labels| match rules {
                    CorsRules::IngressNginx => !labels.is_empty() && !labels.contains('.'),
                    CorsRules::GatewayApi => labels.split('.').all(|label| !label.is_empty()),
                }),
        }
    }

    /// An `Origin` value as a pattern; a wildcard is never an origin.
    fn parse_exact(origin: &str) -> Option<Self> {
        Self::parse(origin).filter(|pattern| !pattern.wildcard)
    }
}

/// Client addresses a route admits, checked against the client after trusted-proxy
/// resolution as ingress-nginx's generated `deny`/`allow` rules are: a denied address gets 403
/// first; then, when an allowlist is set, any address outside it gets 403.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SourceRanges {
    pub allow: Vec<ipnet::IpNet>,
    pub deny: Vec<ipnet::IpNet>,
    /// A range annotation could not be read: the route answers every request 503, as
    /// ingress-nginx does for a location its annotations deny, rather than admit anyone.
    pub unreadable: bool,
}

/// What [`SourceRanges`] decides for one client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceVerdict {
    Admitted,
    Forbidden,
    /// The ranges could not be read (see [`SourceRanges::unreadable`]).
    Unavailable,
}

impl SourceRanges {
    /// Whether any rule applies (a route without one pays no filter).
    pub fn is_set(&self) -> bool {
        self.unreadable || !self.allow.is_empty() || !self.deny.is_empty()
    }

    pub fn verdict(&self, client: std::net::IpAddr) -> SourceVerdict {
        let client = canonical(client);
        let within = |ranges: &[ipnet::IpNet]| ranges.iter().any(|range| range.contains(&client));
        let outside_allowlist = !self.allow.is_empty() && !within(&self.allow);
        if self.unreadable {
            SourceVerdict::Unavailable
        } else if within(&self.deny) || outside_allowlist {
            SourceVerdict::Forbidden
        } else {
            SourceVerdict::Admitted
        }
    }
}

/// An IPv4 client seen as an IPv4-mapped IPv6 address (a dual-stack listener) is matched as
/// the IPv4 address it is.
fn canonical(client: std::net::IpAddr) -> std::net::IpAddr {
    match client {
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(client, std::net::IpAddr::V4),
        v4 => v4,
    }
}

/// What a route asks of the TLS side.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TlsPolicy {
    /// A plain-HTTP request for a host with a TLS entry gets a 308 to `https://`
    /// (`ssl-redirect`, on by default as in ingress-nginx).
    pub ssl_redirect: bool,
    /// Redirect plain HTTP even when the host has no TLS entry (`force-ssl-redirect`).
    pub force_ssl_redirect: bool,
    /// `Strict-Transport-Security` for HTTPS responses (`sluice.dev/hsts`).
    pub hsts: Option<String>,
    /// The listeners that serve the route (Traefik's `router.tls` and `router.entrypoints`).
    pub listeners: Listeners,
    /// Send the verified client certificate to the endpoint as `ssl-client-cert`
    /// (`auth-tls-pass-certificate-to-upstream`).
    pub pass_client_certificate: bool,
}

impl Default for TlsPolicy {
    fn default() -> Self {
        Self {
            ssl_redirect: true,
            force_ssl_redirect: false,
            hsts: None,
            listeners: Listeners::Both,
            pass_client_certificate: false,
        }
    }
}

/// Which proxy listeners serve a route.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Listeners {
    #[default]
    Both,
    /// The plain HTTP listener only (Traefik's `web` entry point).
    Plain,
    /// The TLS listener only (`websecure`, or `router.tls: "true"`).
    Tls,
}

impl Listeners {
    /// Whether a request that arrived over TLS (or not) may use the route.
    pub fn serves(self, over_tls: bool) -> bool {
        match self {
            Self::Both => true,
            Self::Plain => !over_tls,
            Self::Tls => over_tls,
        }
    }
}

/// The protocol spoken to a backend's endpoints.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamProtocol {
    /// HTTP/1.1 over TCP (and WebSocket upgrades).
    #[default]
    Http1,
    /// HTTP/2 with prior knowledge over TCP (`H2C`, `GRPC`, `appProtocol: kubernetes.io/h2c`).
    H2c,
    /// TLS to the endpoint: HTTP/2 when it offers `h2` by ALPN (always for `GRPCS`), else
    /// HTTP/1.1.
    Tls(UpstreamTls),
}

/// How the data plane checks an endpoint's certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UpstreamTls {
    /// Require HTTP/2 (`GRPCS`).
    pub http2_only: bool,
    /// Verify the endpoint's certificate against these CAs (`proxy-ssl-secret` with
    /// `proxy-ssl-verify: "on"`); `None` skips verification, ingress-nginx's default.
    #[serde(skip)]
    pub verify_roots: Option<Vec<rustls::pki_types::CertificateDer<'static>>>,
    /// Verify against the CAs the operating system trusts as well (BackendTLSPolicy's
    /// `wellKnownCACertificates: System`).
    pub system_roots: bool,
    /// The name to verify and to send as SNI (`proxy-ssl-name`); else the request's host.
    pub server_name: Option<String>,
    /// When not empty, the certificate must carry one of these names, and `server_name` is
    /// only sent as SNI (BackendTLSPolicy's `subjectAltNames`).
    pub subject_alt_names: Vec<SubjectName>,
    /// Where the CAs come from, for diagnostics and the admin API (`ConfigMap ns/name`).
    pub ca_sources: Vec<String>,
    /// The certificate presented to endpoints that ask for one (a Gateway's
    /// `spec.tls.backend.clientCertificateRef`), shown by its Secret.
    #[serde(serialize_with = "serialize_client_certificate")]
    pub client_certificate: Option<Arc<crate::Certificate>>,
    /// The data plane's TLS client configuration, built once and attached.
    #[serde(skip)]
    pub client: Attached,
}

/// A name an endpoint's certificate may be required to carry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SubjectName {
    /// A DNS name (a `*.` wildcard in the certificate matches one label).
    Dns(String),
    /// A URI, compared exactly (a SPIFFE ID).
    Uri(String),
}

/// How the next endpoint is chosen. Every balancer yields an ordered list of candidates, so a
/// retry or a sticky miss takes the next one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Balancer {
    /// Each endpoint in turn.
    #[default]
    RoundRobin,
    /// The less busy of two endpoints picked at random (power of two choices).
    LeastRequest,
    /// Power of two choices scored by peak-EWMA latency times requests in flight.
    Ewma,
    /// Consistent hashing (a ring) of a request key: adding one endpoint to N moves about
    /// 1/(N+1) of the keys.
    Hash(HashKey),
}

/// The part of a request a [`Balancer::Hash`] hashes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HashKey {
    /// The client's IP address (`$remote_addr`).
    ClientAddress,
    /// A request header (`$http_x_user`).
    Header(#[serde(serialize_with = "serialize_header_name")] HeaderName),
    /// A cookie (`$cookie_session`).
    Cookie(String),
    /// Path and query (`$request_uri`).
    RequestUri,
    /// Path only (`$uri`).
    Path,
    /// The request's host (`$host`).
    Host,
}

/// Written as ingress-nginx's `upstream-hash-by` variable.
impl std::fmt::Display for HashKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ClientAddress => f.write_str("$remote_addr"),
            Self::Header(name) => write!(f, "$http_{}", name.as_str().replace('-', "_")),
            Self::Cookie(name) => write!(f, "$cookie_{name}"),
            Self::RequestUri => f.write_str("$request_uri"),
            Self::Path => f.write_str("$uri"),
            Self::Host => f.write_str("$host"),
        }
    }
}

fn serialize_client_certificate<S: serde::Serializer>(
    certificate: &Option<Arc<crate::Certificate>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match certificate {
        Some(certificate) => serializer.serialize_some(&*certificate.source),
        None => serializer.serialize_none(),
    }
}

fn serialize_header_name<S: serde::Serializer>(
    name: &HeaderName,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(name.as_str())
}

/// The `SameSite` attribute of a session cookie.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SameSite {
    Strict,
    Lax,
    None,
}

/// A session cookie naming the endpoint by an opaque keyed hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StickyCookie {
    pub name: String,
    pub path: String,
    pub domain: Option<String>,
    /// `Max-Age`, in seconds.
    pub max_age: Option<u64>,
    /// `Expires`, as seconds from the moment the cookie is set.
    pub expires: Option<u64>,
    pub secure: bool,
    pub http_only: bool,
    pub same_site: Option<SameSite>,
}

impl StickyCookie {
    /// ingress-nginx's default cookie name.
    pub const DEFAULT_NAME: &'static str = "INGRESSCOOKIE";

    /// A session cookie with this name and ingress-nginx's other defaults (path `/`, HttpOnly).
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            path: "/".to_owned(),
            domain: None,
            max_age: None,
            expires: None,
            secure: false,
            http_only: true,
            same_site: None,
        }
    }
}

/// When a failed attempt is tried again, and where.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RetryPolicy {
    pub on: RetryOn,
    /// Attempts in all, the first included (`proxy-next-upstream-tries`); 1 never retries.
    pub tries: u32,
    /// Whether a retry may go back to an endpoint already tried once every endpoint has been
    /// (the one tried longest ago first), as Gateway API's `retry` and Traefik's `retry`
    /// do; ingress-nginx's `proxy-next-upstream` never tries one server twice.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub revisit: bool,
    /// Give up retrying once this much time has passed since the first attempt.
    pub timeout: Option<Duration>,
    /// Response-header timeout of each attempt; `None` uses the proxy-wide timeout.
    pub per_try_timeout: Option<Duration>,
    /// The largest response held whole before the client sees it, so that an endpoint that
    /// dies mid-body costs a retry (`sluice.dev/response-retry-buffer`; 0 holds none); `None`
    /// uses the proxy-wide `--response-retry-buffer`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_buffer: Option<u64>,
    /// The least time between one attempt's end and the next attempt (an HTTPRoute rule's
    /// `retry.backoff`); `None` retries at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Duration>,
}

impl RetryPolicy {
    /// ingress-nginx's default number of tries.
    pub const DEFAULT_TRIES: u32 = 3;
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            on: RetryOn::default(),
            tries: Self::DEFAULT_TRIES,
            revisit: false,
            timeout: None,
            per_try_timeout: None,
            response_buffer: None,
            backoff: None,
        }
    }
}

/// The conditions `proxy-next-upstream` lists. A connection that could not be set up is always
/// retried unless retries are off, because nothing reached the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RetryOn {
    /// The request was sent and the connection then failed (`error`).
    pub error: bool,
    /// The endpoint sent no response headers in time (`timeout`).
    pub timeout: bool,
    pub http_500: bool,
    pub http_502: bool,
    pub http_503: bool,
    pub http_504: bool,
    pub http_429: bool,
    /// Retry after sending even for methods that are not idempotent (`non_idempotent`).
    pub non_idempotent: bool,
    /// `off`: no attempt is ever retried, not even a failed connect.
    pub off: bool,
}

impl Default for RetryOn {
    /// `error timeout http_502 http_503 http_504`.
    fn default() -> Self {
        Self {
            error: true,
            timeout: true,
            http_500: false,
            http_502: true,
            http_503: true,
            http_504: true,
            http_429: false,
            non_idempotent: false,
            off: false,
        }
    }
}

impl RetryOn {
    /// No conditions at all (the start of parsing a `proxy-next-upstream` list).
    pub fn none() -> Self {
        Self {
            error: false,
            timeout: false,
            http_500: false,
            http_502: false,
            http_503: false,
            http_504: false,
            http_429: false,
            non_idempotent: false,
            off: false,
        }
    }

    /// Whether a response with this status is retried.
    pub fn status(&self, status: u16) -> bool {
        match status {
            500 => self.http_500,
            502 => self.http_502,
            503 => self.http_503,
            504 => self.http_504,
            429 => self.http_429,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(allow: &[&str], deny: &[&str]) -> SourceRanges {
        let parse = |list: &[&str]| list.iter().map(|r| r.parse().expect("a CIDR")).collect();
        SourceRanges {
            allow: parse(allow),
            deny: parse(deny),
            unreadable: false,
        }
    }

    fn ip(text: &str) -> std::net::IpAddr {
        text.parse().expect("an address")
    }

    #[test]
    fn deny_is_checked_before_allow_and_an_allowlist_refuses_the_rest() {
        let both = ranges(&["10.0.0.0/8"], &["10.9.0.0/16"]);
        assert_eq!(both.verdict(ip("10.1.2.3")), SourceVerdict::Admitted);
        assert_eq!(both.verdict(ip("10.9.0.1")), SourceVerdict::Forbidden);
        assert_eq!(both.verdict(ip("192.0.2.1")), SourceVerdict::Forbidden);
        let deny_only = ranges(&[], &["192.0.2.0/24"]);
        assert_eq!(
            deny_only.verdict(ip("198.51.100.1")),
            SourceVerdict::Admitted
        );
        assert!(!SourceRanges::default().is_set());
    }

    #[test]
    fn an_ipv4_mapped_client_matches_ipv4_ranges_and_unreadable_ranges_admit_nobody() {
        let v4 = ranges(&["127.0.0.0/8"], &[]);
        assert_eq!(v4.verdict(ip("::ffff:127.0.0.1")), SourceVerdict::Admitted);
        let v6 = ranges(&["2001:db8::/32"], &[]);
        assert_eq!(v6.verdict(ip("2001:db8::1")), SourceVerdict::Admitted);
        let unreadable = SourceRanges {
            unreadable: true,
            ..SourceRanges::default()
        };
        assert_eq!(
            unreadable.verdict(ip("10.0.0.1")),
            SourceVerdict::Unavailable
        );
    }
}
