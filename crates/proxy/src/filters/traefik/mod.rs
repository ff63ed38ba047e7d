//! Traefik's middlewares in the data plane: a route's `router.middlewares`, applied in their order to the request as it will go upstream, and their parts of the response.
//!
//! The chain runs once the upstream head is made (path normalised, forwarding headers set),
//! so that each middleware sees the request as the ones before it left it, as in Traefik:
//! a `stripPrefix` before a `forwardAuth` changes the `X-Forwarded-Uri` the auth server
//! gets. A middleware may answer instead (a refusal, a redirect, the auth server's answer),
//! and the chain stops there. Response parts run in the reverse order, innermost first.

mod access;
mod errors;
mod forward_auth;
mod headers;
mod limits;
mod paths;
mod redirects;

use http::request::Parts;
use http::{response, HeaderValue};
use sluice_routing::middleware::{Middleware, Step};

use crate::error::ProxyError;
use crate::filters::RequestContext;
use crate::upstream::outbound::OutboundClient;

pub(crate) use errors::ErrorPageCapture;

/// A route's middlewares, built once per policy with their runtime state (rate-limit buckets,
/// in-flight counters, auth clients).
pub(crate) struct Chain {
    steps: Vec<Built>,
    /// Some middleware reads `X-Forwarded-For` as a trusted proxy sent it (an `ipStrategy`).
    reads_forwarded_for: bool,
}

/// One middleware, ready to run.
enum Built {
    ForwardAuth(Box<forward_auth::ForwardAuthCheck>),
    BasicAuth(access::BasicAuthCheck),
    IpAllowList(access::AllowListCheck),
    RedirectScheme(redirects::SchemeRedirect),
    RedirectRegex(redirects::RegexRedirect),
    Path(paths::PathEdit),
    Headers(headers::HeaderEdits),
    RateLimit(limits::RateLimiter),
    InFlight(limits::InFlightLimit),
    Errors(errors::ErrorPages),
}

/// The request as the chain works on it.
pub(crate) struct ChainRequest<'a, 'r> {
    pub(crate) context: &'a mut RequestContext<'r>,
    /// The head that goes upstream; middlewares change it in place.
    pub(crate) upstream: &'a mut Parts,
    /// `X-Forwarded-For` as a trusted proxy sent it (`None` from any other peer, whose header
    /// sluice dropped), for an `ipStrategy`.
    pub(crate) forwarded_for: Option<&'a str>,
}

impl ChainRequest<'_, '_> {
    /// The client's Host as it wrote it.
    fn host(&self) -> &str {
        self.context.host.to_str().unwrap_or_default()
    }

    /// Whether the request reached sluice over TLS (or a trusted proxy says it did).
    fn over_tls(&self) -> bool {
        self.context.client.tls.is_some() || self.context.forwarded_https
    }

    /// The path and query as they go upstream now.
    fn request_uri(&self) -> &str {
        self.upstream
            .uri
            .path_and_query()
            .map_or("/", |target| target.as_str())
    }
}

/// What the middlewares noted for the response phase of one request.
#[derive(Default)]
pub(crate) struct State {
    /// The request's `Origin`, for the CORS headers of the response.
    origin: Option<HeaderValue>,
    /// Per `headers` middleware (by position in the chain): whether the request counts as
    /// HTTPS for its security headers.
    secure: Vec<(usize, bool)>,
    /// Cookies of the auth server's answer for the response, with the names they replace.
    auth_cookies: Vec<(usize, Vec<HeaderValue>)>,
    /// What an `errors` middleware needs to ask for its page.
    pub(crate) error_page: Option<Box<ErrorPageCapture>>,
}

impl Chain {
    /// The chain of `middlewares`, or `None` when there are none.
    pub(crate) fn of(middlewares: &[Middleware]) -> Option<Self> {
        if middlewares.is_empty() {
            return None;
        }
        let steps: Vec<Built> = middlewares
            .iter()
            .map(|middleware| match &middleware.step {
                Step::ForwardAuth(auth) => {
                    Built::ForwardAuth(Box::new(forward_auth::ForwardAuthCheck::new(auth.clone())))
                }
                Step::BasicAuth(auth) => Built::BasicAuth(access::BasicAuthCheck(auth.clone())),
                Step::IpAllowList(list) => Built::IpAllowList(access::AllowListCheck(list.clone())),
                Step::RedirectScheme(redirect) => {
                    Built::RedirectScheme(redirects::SchemeRedirect(redirect.clone()))
                }
                Step::RedirectRegex(redirect) => {
                    Built::RedirectRegex(redirects::RegexRedirect(redirect.clone()))
                }
                Step::Headers(edits) => Built::Headers(headers::HeaderEdits(edits.clone())),
                Step::RateLimit(limit) => Built::RateLimit(limits::RateLimiter::new(limit.clone())),
                Step::InFlightReq(limit) => {
                    Built::InFlight(limits::InFlightLimit::new(limit.clone()))
                }
                Step::Errors(page) => Built::Errors(errors::ErrorPages(page.clone())),
                Step::StripPrefix(strip) => {
                    Built::Path(paths::PathEdit::StripPrefix(strip.clone()))
                }
                Step::StripPrefixRegex { regex } => {
                    Built::Path(paths::PathEdit::StripPrefixRegex(regex.clone()))
                }
                Step::AddPrefix { prefix } => {
                    Built::Path(paths::PathEdit::AddPrefix(prefix.clone()))
                }
                Step::ReplacePath { path } => {
                    Built::Path(paths::PathEdit::ReplacePath(path.clone()))
                }
                Step::ReplacePathRegex { regex, replacement } => Built::Path(
                    paths::PathEdit::ReplacePathRegex(regex.clone(), replacement.clone()),
                ),
            })
            .collect();
        let reads_forwarded_for = middlewares.iter().any(|m| match &m.step {
            Step::IpAllowList(list) => list.strategy.reads_forwarded_for(),
            Step::RateLimit(limit) => reads_addresses(&limit.source),
            Step::InFlightReq(limit) => reads_addresses(&limit.source),
            _ => false,
        });
        Some(Self {
            steps,
            reads_forwarded_for,
        })
    }

    /// Whether the chain needs `X-Forwarded-For` as the trusted proxy sent it.
    pub(crate) fn reads_forwarded_for(&self) -> bool {
        self.reads_forwarded_for
    }

    /// Whether the chain has an `errors` middleware.
    pub(crate) fn has_error_pages(&self) -> bool {
        self.steps
            .iter()
            .any(|step| matches!(step, Built::Errors(_)))
    }

    /// Runs each middleware on the request in order; the first that answers ends the chain
    /// with its answer.
    pub(crate) async fn on_request(
        &self,
        request: &mut ChainRequest<'_, '_>,
        outbound: &OutboundClient,
    ) -> Result<(), ProxyError> {
        let mut state = State::default();
        for (index, step) in self.steps.iter().enumerate() {
            match step {
                Built::ForwardAuth(check) => {
                    let cookies = Box::pin(check.check(request, outbound)).await?;
                    if !cookies.is_empty() {
                        state.auth_cookies.push((index, cookies));
                    }
                }
                Built::BasicAuth(check) => check.check(request)?,
                Built::IpAllowList(check) => check.check(request)?,
                Built::RedirectScheme(redirect) => redirect.check(request)?,
                Built::RedirectRegex(redirect) => redirect.check(request)?,
                Built::Path(edit) => edit.apply(request.upstream)?,
                Built::Headers(edits) => {
                    let secure = edits.on_request(request)?;
                    state.secure.push((index, secure));
                    if state.origin.is_none() {
                        state.origin = request.upstream.headers.get(http::header::ORIGIN).cloned();
                    }
                }
                Built::RateLimit(limiter) => limiter.admit(request).await?,
                Built::InFlight(limit) => {
                    let slot = limit.take(request)?;
                    request.context.slots.push(slot);
                }
                Built::Errors(pages) => {
                    state.error_page = Some(Box::new(pages.capture(request)));
                }
            }
        }
        request.context.middleware = Some(Box::new(state));
        Ok(())
    }

    /// The response parts, innermost middleware first.
    pub(crate) fn on_response(&self, context: &RequestContext<'_>, response: &mut response::Parts) {
        let Some(state) = context.middleware.as_deref() else {
            return;
        };
        for (index, step) in self.steps.iter().enumerate().rev() {
            match step {
                Built::Headers(edits) => {
                    let secure = state
                        .secure
                        .iter()
                        .find(|(at, _)| *at == index)
                        .is_some_and(|(_, secure)| *secure);
                    edits.on_response(response, state.origin.as_ref(), secure);
                }
                Built::ForwardAuth(check) => {
                    if let Some((_, cookies)) =
                        state.auth_cookies.iter().find(|(at, _)| *at == index)
                    {
                        check.add_cookies(response, cookies);
                    }
                }
                _ => {}
            }
        }
    }

    /// The `errors` middlewares' page for an answer of `status`, outermost first: the first
    /// whose ranges catch the status.
    pub(crate) fn error_pages(&self) -> impl Iterator<Item = &errors::ErrorPages> {
        self.steps.iter().filter_map(|step| match step {
            Built::Errors(pages) => Some(pages),
            _ => None,
        })
    }
}

fn reads_addresses(source: &sluice_routing::middleware::SourceCriterion) -> bool {
    matches!(source, sluice_routing::middleware::SourceCriterion::ClientAddress(strategy) if strategy.reads_forwarded_for())
}
