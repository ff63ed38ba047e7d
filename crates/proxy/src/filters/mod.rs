//! Request phases: the named steps every request takes, and the filters a route's policy adds to them.
//!
//! ```text
//! accept ─► route ─► request filters ─► upstream request ─► choose endpoint and send
//!                                                                   │ (retries, attempt.rs)
//!                                   log ◄─ response filters ◄───────┘
//! ```
//!
//! - **accept** (`server`): framing, limits and the client's identity, per connection.
//! - **route**: host and path against the published table; the route's policy and its filters.
//! - **request filters**: each filter of the route may read the client's request, note what the
//!   later phases need in the [`RequestContext`], or answer the request itself.
//! - **upstream request**: the next hop's head (hop-by-hop headers out, forwarding headers in,
//!   origin form) and its body (size limit, buffered for replay when it may be resent).
//! - **choose endpoint and send**: balancer, health, retries ([`crate::upstream::attempt`]).
//! - **response filters**: each filter may change the response head before it goes out.
//! - **log**: every request ends here, answered by an endpoint or by the proxy.
//!
//! A route's filters are built from its policy once, when a request first uses the policy, and
//! kept on the policy ([`sluice_routing::Attached`]); a route without filters pays one pointer
//! load per phase.

pub(crate) mod access;
pub(crate) mod cors;
pub(crate) mod edits;
pub(crate) mod error_pages;
pub(crate) mod external_auth;
pub(crate) mod gateway;
pub(crate) mod limits;
pub(crate) mod mirror;
pub(crate) mod passwords;
pub(crate) mod template;
pub(crate) mod traefik;

use http::request::Parts;
use http::{response, HeaderValue, StatusCode};
use sluice_routing::{Endpoint, RoutePolicy, SourceRanges, SourceVerdict, StickyCookie, Target};

use crate::error::ProxyError;
use crate::filters::access::Access;
use crate::filters::cors::CorsFilter;
use crate::filters::edits::{AppRoot, ResponseHeaders, Rewrite, RouteRedirect, UpstreamHead};
use crate::filters::limits::ClientLimits;
use crate::filters::mirror::MirrorCopy;
use crate::server::ClientInfo;
use crate::upstream::session_key::{request_cookie, set_cookie, SessionKey};

/// What the phases of one request share.
pub(crate) struct RequestContext<'r> {
    pub(crate) client: &'r ClientInfo,
    /// The client's address after trusted-proxy resolution.
    pub(crate) real_client: std::net::IpAddr,
    pub(crate) request_id: HeaderValue,
    /// The route, once the route phase found one.
    pub(crate) target: Option<Target<'r>>,
    /// The request's Host as the client wrote it (set by the route phase).
    pub(crate) host: HeaderValue,
    /// Whether the request's host has a TLS entry (an Ingress's `spec.tls` names it).
    pub(crate) host_has_tls: bool,
    /// A trusted proxy in front terminated TLS (`X-Forwarded-Proto: https`).
    pub(crate) forwarded_https: bool,
    /// The endpoint to try first: a session cookie's, set by the sticky-session filter.
    pub(crate) pinned: Option<Endpoint>,
    /// The endpoint that answered, once one did.
    pub(crate) endpoint: Option<Endpoint>,
    /// The endpoint tried last, answered or not, once the attempts are over.
    pub(crate) tried: Option<Endpoint>,
    /// The endpoint's status, once an endpoint answered.
    pub(crate) upstream_status: Option<StatusCode>,
    /// Attempts made to endpoints (0 when the proxy answered before choosing one).
    pub(crate) attempts: u32,
    /// The `Access-Control-Allow-Origin` the response gets, set by the CORS filter for an
    /// allowed origin.
    pub(crate) cors_origin: Option<HeaderValue>,
    /// The auth service's grant, while it has cookies for the response.
    pub(crate) auth_cookies: Option<crate::filters::access::Grant>,
    /// The request's places under `limit-connections` and Traefik's `inFlightReq`, handed to
    /// the response body by the log phase and given back when the response ends.
    pub(crate) slots: Vec<crate::filters::limits::ConnectionSlot>,
    /// What the route's Traefik middlewares noted for the response phase.
    pub(crate) middleware: Option<Box<crate::filters::traefik::State>>,
}

/// What the phases may use from the proxy as a whole.
pub(crate) struct ProxyScope<'p> {
    pub(crate) session_key: &'p SessionKey,
    /// The port `https://` redirects name; `None` without a TLS listener.
    pub(crate) https_redirect_port: Option<u16>,
}

/// A step a route adds to the request phases. Each method has a default that does nothing, so a
/// filter implements only the phases it acts in.
pub(crate) trait Filter: Send + Sync {
    /// Request phase: may record what later phases need, or answer the request itself with
    /// an error.
    fn on_request(
        &self,
        _context: &mut RequestContext<'_>,
        _request: &Parts,
        _proxy: &ProxyScope<'_>,
    ) -> Result<(), ProxyError> {
        Ok(())
    }

    /// Upstream-request phase: may change the head the endpoints get (after the forwarding
    /// headers are set).
    fn on_upstream_request(&self, _context: &RequestContext<'_>, _upstream: &mut Parts) {}

    /// Response phase: may change the response head before it goes to the client.
    fn on_response(
        &self,
        _context: &RequestContext<'_>,
        _response: &mut response::Parts,
        _proxy: &ProxyScope<'_>,
    ) {
    }

    /// Log phase: the request is answered with `status`, by an endpoint or by the proxy.
    fn on_log(&self, _context: &RequestContext<'_>, _status: StatusCode) {}
}

/// A route's filters, in the order they run, and its access phase.
#[derive(Default)]
pub(crate) struct Filters {
    chain: Vec<Box<dyn Filter>>,
    access: Option<Access>,
    mirror: Option<MirrorCopy>,
    /// Traefik's middlewares, run once the upstream head is made.
    middlewares: Option<crate::filters::traefik::Chain>,
}

impl Filters {
    /// The filters of `policy`, built on first use and kept on the policy.
    pub(crate) fn of(policy: &RoutePolicy) -> &Filters {
        static NONE: Filters = Filters {
            chain: Vec::new(),
            access: None,
            mirror: None,
            middlewares: None,
        };
        policy
            .filters
            .get_or_attach(|| Self::build(policy))
            .unwrap_or(&NONE)
    }

    fn build(policy: &RoutePolicy) -> Self {
        let mut filters: Vec<Box<dyn Filter>> = Vec::new();
        // Fail closed before anything else: not even a redirect leaks the route.
        if let Some(reason) = &policy.refused {
            filters.push(Box::new(Refused(reason.clone())));
        }
        // nginx's order: the server's `app-root` rewrite, the location's `return` (a redirect
        // annotation), then the HTTPS redirect (Lua, at the end of the rewrite phase), then
        // the access phase (source ranges).
        let edits = &policy.edits;
        if let Some(root) = &edits.app_root {
            filters.push(Box::new(AppRoot(root.clone())));
        }
        if let Some(redirect) = &edits.redirect {
            filters.push(Box::new(RouteRedirect(redirect.clone())));
        }
        let tls = &policy.tls;
        if tls.ssl_redirect || tls.force_ssl_redirect {
            filters.push(Box::new(HttpsRedirect {
                force: tls.force_ssl_redirect,
            }));
        }
        if let Some(limits) = &policy.limits {
            filters.push(Box::new(ClientLimits::new(limits)));
        }
        if policy.source_ranges.is_set() && !Access::takes_source_ranges(policy) {
            filters.push(Box::new(SourceRangeCheck(policy.source_ranges.clone())));
        }
        if let Some(cors) = &policy.cors {
            filters.push(Box::new(CorsFilter::new(cors)));
        }
        if let Some(cookie) = &policy.sticky {
            filters.push(Box::new(StickySession(cookie.clone())));
        }
        if let Some(target) = &edits.rewrite_target {
            filters.push(Box::new(Rewrite(target.clone())));
        }
        if let Some(upstream_head) = UpstreamHead::of(edits) {
            filters.push(Box::new(upstream_head));
        }
        if let Some(response_headers) = ResponseHeaders::of(edits) {
            filters.push(Box::new(response_headers));
        }
        if let Some(gateway) = &policy.gateway {
            crate::filters::gateway::add_filters(gateway, &mut filters);
        }
        if let Some(hsts) = tls
            .hsts
            .as_deref()
            .and_then(|v| HeaderValue::from_str(v).ok())
        {
            filters.push(Box::new(Hsts(hsts)));
        }
        Self {
            chain: filters,
            access: Access::of(policy),
            mirror: MirrorCopy::of(policy),
            middlewares: crate::filters::traefik::Chain::of(&policy.middlewares),
        }
    }

    /// The route's Traefik middlewares, when it lists any.
    pub(crate) fn middlewares(&self) -> Option<&crate::filters::traefik::Chain> {
        self.middlewares.as_ref()
    }

    /// The route's mirror, when it has one.
    pub(crate) fn mirror(&self) -> Option<&MirrorCopy> {
        self.mirror.as_ref()
    }

    /// The access phase (basic, digest and external auth), when the route authenticates.
    pub(crate) fn access(&self) -> Option<&Access> {
        self.access.as_ref()
    }

    pub(crate) fn on_request(
        &self,
        context: &mut RequestContext<'_>,
        request: &Parts,
        proxy: &ProxyScope<'_>,
    ) -> Result<(), ProxyError> {
        self.chain
            .iter()
            .try_for_each(|filter| filter.on_request(context, request, proxy))
    }

    pub(crate) fn on_upstream_request(&self, context: &RequestContext<'_>, upstream: &mut Parts) {
        for filter in &self.chain {
            filter.on_upstream_request(context, upstream);
        }
    }

    pub(crate) fn on_response(
        &self,
        context: &RequestContext<'_>,
        response: &mut response::Parts,
        proxy: &ProxyScope<'_>,
    ) {
        for filter in &self.chain {
            filter.on_response(context, response, proxy);
        }
        if let Some(chain) = &self.middlewares {
            chain.on_response(context, response);
        }
    }

    pub(crate) fn on_log(&self, context: &RequestContext<'_>, status: StatusCode) {
        for filter in &self.chain {
            filter.on_log(context, status);
        }
    }
}

/// A plain-HTTP request for a host with a TLS entry (or any host, forced) gets a 308 to
/// `https://`, as ingress-nginx's `ssl-redirect` and `force-ssl-redirect` do. ACME HTTP-01
/// challenges are exempt, and so is a request a trusted proxy says arrived over HTTPS.
struct HttpsRedirect {
    force: bool,
}

const ACME_CHALLENGE: &str = "/.well-known/acme-challenge/";

impl Filter for HttpsRedirect {
    fn on_request(
        &self,
        context: &mut RequestContext<'_>,
        request: &Parts,
        proxy: &ProxyScope<'_>,
    ) -> Result<(), ProxyError> {
        if context.client.tls.is_some() || context.forwarded_https {
            return Ok(());
        }
        let port = match (self.force, proxy.https_redirect_port) {
            (_, Some(port)) if self.force || context.host_has_tls => port,
            (true, None) => 443,
            _ => return Ok(()),
        };
        if request.uri.path().starts_with(ACME_CHALLENGE) {
            return Ok(());
        }
        let host = crate::headers::host_without_port(context.host.to_str().unwrap_or_default());
        let target = request
            .uri
            .path_and_query()
            .map_or("/", |target| target.as_str());
        let location = if port == 443 {
            format!("https://{host}{target}")
        } else {
            format!("https://{host}:{port}{target}")
        };
        match HeaderValue::try_from(location) {
            Ok(location) => Err(ProxyError::Redirect {
                status: StatusCode::PERMANENT_REDIRECT,
                location,
            }),
            Err(_) => Ok(()),
        }
    }
}

/// A route whose protection sluice cannot honour (a snippet, a WAF, a Traefik middleware,
/// another controller's action) answers every request 503.
struct Refused(String);

impl Filter for Refused {
    fn on_request(
        &self,
        _context: &mut RequestContext<'_>,
        _request: &Parts,
        _proxy: &ProxyScope<'_>,
    ) -> Result<(), ProxyError> {
        tracing::debug!(reason = %self.0, "the route fails closed: 503");
        Err(ProxyError::RouteDenied)
    }
}

/// `allowlist-source-range` and `denylist-source-range`: a client outside the ranges gets 403
/// (after the HTTPS redirect, as nginx's access phase follows its rewrite phase).
struct SourceRangeCheck(SourceRanges);

impl Filter for SourceRangeCheck {
    fn on_request(
        &self,
        context: &mut RequestContext<'_>,
        _request: &Parts,
        _proxy: &ProxyScope<'_>,
    ) -> Result<(), ProxyError> {
        match self.0.verdict(context.real_client) {
            SourceVerdict::Admitted => Ok(()),
            SourceVerdict::Forbidden => Err(ProxyError::Forbidden),
            SourceVerdict::Unavailable => Err(ProxyError::RouteDenied),
        }
    }
}

/// `Strict-Transport-Security` on responses sent over TLS (never over plain HTTP, which
/// RFC 6797 §7.2 forbids).
struct Hsts(HeaderValue);

impl Filter for Hsts {
    fn on_response(
        &self,
        context: &RequestContext<'_>,
        response: &mut response::Parts,
        _proxy: &ProxyScope<'_>,
    ) {
        if context.client.tls.is_some() {
            response
                .headers
                .insert(http::header::STRICT_TRANSPORT_SECURITY, self.0.clone());
        }
    }
}

/// Cookie session affinity: a request carrying a cookie that names an endpoint still serving
/// goes there first; a response from any other endpoint pins the session to it.
struct StickySession(StickyCookie);

impl Filter for StickySession {
    fn on_request(
        &self,
        context: &mut RequestContext<'_>,
        request: &Parts,
        proxy: &ProxyScope<'_>,
    ) -> Result<(), ProxyError> {
        let value = request_cookie(&request.headers, &self.0.name);
        pin_session(context, value, proxy);
        Ok(())
    }

    fn on_response(
        &self,
        context: &RequestContext<'_>,
        response: &mut response::Parts,
        proxy: &ProxyScope<'_>,
    ) {
        let header = new_session(context, proxy).and_then(|value| set_cookie(&self.0, &value));
        if let Some(header) = header {
            response.headers.append(http::header::SET_COOKIE, header);
        }
    }
}

/// Header session affinity (a Gateway API rule's `sessionPersistence` of type `Header`): as
/// [`StickySession`], with the session's token in a request and response header.
pub(crate) struct HeaderSession(pub(crate) http::HeaderName);

impl Filter for HeaderSession {
    fn on_request(
        &self,
        context: &mut RequestContext<'_>,
        request: &Parts,
        proxy: &ProxyScope<'_>,
    ) -> Result<(), ProxyError> {
        let value = request.headers.get(&self.0).and_then(|v| v.to_str().ok());
        pin_session(context, value, proxy);
        Ok(())
    }

    fn on_response(
        &self,
        context: &RequestContext<'_>,
        response: &mut response::Parts,
        proxy: &ProxyScope<'_>,
    ) {
        let value = new_session(context, proxy).and_then(|v| HeaderValue::try_from(v).ok());
        if let Some(value) = value {
            response.headers.insert(self.0.clone(), value);
        }
    }
}

/// Pins the request to the endpoint a session token names, when it still serves.
fn pin_session(context: &mut RequestContext<'_>, token: Option<&str>, proxy: &ProxyScope<'_>) {
    let (Some(target), Some(token)) = (&context.target, token) else {
        return;
    };
    let set = target.backend.endpoints().load();
    context.pinned = proxy.session_key.pinned(&set, token).cloned();
}

/// The token to hand the client: its session's endpoint, unless the request was already
/// pinned there.
fn new_session(context: &RequestContext<'_>, proxy: &ProxyScope<'_>) -> Option<String> {
    let endpoint = context.endpoint.as_ref()?;
    (context.pinned.as_ref() != Some(endpoint)).then(|| proxy.session_key.value(endpoint))
}
