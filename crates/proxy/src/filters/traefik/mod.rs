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

use bytes::Bytes;
use http::request::Parts;
use http::{response, HeaderMap, HeaderValue, StatusCode};
use sluice_routing::middleware::Step;
use sluice_routing::RoutePolicy;

use super::contract::{self, Filter, Flow, LocalAnswer, RequestContext};
use super::services::{boxed, RouteFilter, Services};
use crate::error::ProxyError;
use crate::headers::forwarded_for;
use crate::upstream::attempt::Answer;

/// A Traefik middleware's own answer, as Traefik writes it: exactly these headers and body.
pub(crate) struct OwnAnswer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl OwnAnswer {
    /// `status` with `body` and no headers (as Traefik writes its own short answers).
    pub(crate) fn text(status: StatusCode, body: &'static str) -> Box<LocalAnswer> {
        LocalAnswer::exact(
            status,
            HeaderMap::new(),
            Bytes::from_static(body.as_bytes()),
        )
    }
}

/// The proxy's answer for a middleware's own.
pub(crate) fn answered(answer: OwnAnswer) -> Box<LocalAnswer> {
    let OwnAnswer {
        status,
        headers,
        body,
    } = answer;
    LocalAnswer::exact(status, headers, body)
}

/// `X-Forwarded-For` as the trusted proxy in front sent it, for an `ipStrategy`.
struct TrustedForwardedFor(String);

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
        self.context.connection.over_tls || self.context.forwarded_https
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
    /// The chain of `policy`'s middlewares, or `None` when it lists none.
    pub(crate) fn of(policy: &RoutePolicy) -> Option<RouteFilter> {
        let middlewares = &policy.middlewares;
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
                Step::RateLimit(limit) => Built::RateLimit(limits::RateLimiter::new(
                    middleware.name.clone(),
                    limit.clone(),
                )),
                Step::InFlightReq(limit) => Built::InFlight(limits::InFlightLimit::new(
                    middleware.name.clone(),
                    limit.clone(),
                )),
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
        boxed(Self {
            steps,
            reads_forwarded_for,
        })
    }

    /// Runs each middleware on the request in order; the first that answers ends the chain
    /// with its answer.
    async fn run(&self, request: &mut ChainRequest<'_, '_>, services: &Services) -> Flow {
        let mut state = State::default();
        for (index, step) in self.steps.iter().enumerate() {
            match step {
                Built::ForwardAuth(check) => {
                    let cookies = Box::pin(check.check(request, &services.outbound)).await?;
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
                Built::RateLimit(limiter) => limiter.admit(request, services).await?,
                Built::InFlight(limit) => {
                    let slot = limit.take(request, services)?;
                    request.context.held.push(Box::new(slot));
                }
                Built::Errors(pages) => {
                    state.error_page = Some(Box::new(pages.capture(request)));
                }
            }
        }
        request.context.slots.insert(state);
        Ok(())
    }

    /// The response parts, innermost middleware first.
    fn respond(&self, state: &State, response: &mut response::Parts) {
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
    fn error_pages(&self) -> impl Iterator<Item = &errors::ErrorPages> {
        self.steps.iter().filter_map(|step| match step {
            Built::Errors(pages) => Some(pages),
            _ => None,
        })
    }

    /// An `errors` middleware's page in place of an answer (the pod's, or the proxy's own
    /// failure) whose status it catches; the answer itself when none catches it or the error
    /// Service does not answer.
    async fn error_page(
        &self,
        context: &mut RequestContext<'_>,
        outcome: Result<Answer, ProxyError>,
        services: &Services,
    ) -> Result<Answer, ProxyError> {
        let status = match &outcome {
            Ok(answer) => answer.response.status(),
            Err(error) => error.status(),
        };
        let Some(pages) = self.error_pages().find(|pages| pages.catches(status)) else {
            return outcome;
        };
        let (Some(target), Some(capture)) = (
            context.target,
            context
                .slots
                .get_mut::<State>()
                .and_then(|state| state.error_page.take()),
        ) else {
            return outcome;
        };
        let settings = services.attempt_settings();
        let asked = (context.table, target.policy);
        match pages
            .ask(&capture, status, asked, settings, context.real_client)
            .await
        {
            Some(page) => Ok(page),
            None => outcome,
        }
    }
}

impl Filter<Services> for Chain {
    fn on_request(&self, context: &mut RequestContext<'_>, request: &Parts, _: &Services) -> Flow {
        if self.reads_forwarded_for && context.peer_trusted {
            let trusted = forwarded_for(&request.headers).join(", ");
            context.slots.insert(TrustedForwardedFor(trusted));
        }
        Ok(())
    }

    /// The middlewares, in their order, on the request as it goes upstream.
    fn on_upstream_request<'a>(
        &'a self,
        context: &'a mut RequestContext<'_>,
        upstream: &'a mut Parts,
        services: &'a Services,
    ) -> contract::Step<'a, Flow> {
        contract::Step::Wait(Box::pin(async move {
            let forwarded_for = context.slots.take::<TrustedForwardedFor>();
            let mut request = ChainRequest {
                context,
                upstream,
                forwarded_for: forwarded_for.as_ref().map(|f| f.0.as_str()),
            };
            self.run(&mut request, services).await
        }))
    }

    fn on_answer<'a>(
        &'a self,
        context: &'a mut RequestContext<'_>,
        outcome: Result<Answer, ProxyError>,
        services: &'a Services,
    ) -> contract::Step<'a, Result<Answer, ProxyError>> {
        if self.error_pages().next().is_none() {
            return contract::Step::Done(outcome);
        }
        contract::Step::Wait(Box::pin(self.error_page(context, outcome, services)))
    }

    fn on_response(
        &self,
        context: &mut RequestContext<'_>,
        response: &mut response::Parts,
        _: &Services,
    ) {
        if let Some(state) = context.slots.get::<State>() {
            self.respond(state, response);
        }
    }
}

fn reads_addresses(source: &sluice_routing::middleware::SourceCriterion) -> bool {
    matches!(source, sluice_routing::middleware::SourceCriterion::ClientAddress(strategy) if strategy.reads_forwarded_for())
}
