//! One request's attempts: pick a candidate, send, and on a safe failure try an endpoint not tried yet.
//!
//! The retry rules, in order: a connect that failed (nothing was sent) may be retried for any
//! method; after the request was sent, only idempotent methods (or requests carrying
//! `Idempotency-Key`) with a replayable body; after response bytes went to the client, never
//! (an attempt ends when response headers arrive, so this holds by construction).
//!
//! What limits retries: every attempt goes to an endpoint not tried yet. Attempts that reached
//! an endpoint count against the route's tries, and their retries against the backend's retry
//! budget. A failed connect puts no load on any endpoint, so it counts against neither: a
//! request keeps looking for a listening endpoint among those not yet tried (and not ejected).
//! With a single address (service-upstream, ExternalName) every attempt counts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::HeaderName;
use http::request::Parts;
use http::uri::{PathAndQuery, Scheme, Uri};
use http::{Method, Request, Response, Version};
use hyper::body::Incoming;
use sluice_routing::{Backend, BackendMode, Endpoint, EndpointSet, RoutePolicy};

use crate::balance::{Candidates, RequestKey};
use crate::body::RequestBody;
use crate::error::ProxyError;
use crate::health::{Admission, InFlight};
use crate::pool::{Connection, ConnectionPool};
use crate::runtime::{EndpointRuntime, Runtime};

const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The proxy-wide settings attempts use.
pub(crate) struct AttemptSettings<'s> {
    pub(crate) runtime: &'s Runtime,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_header_timeout: Duration,
}

/// A response from an endpoint, with what the caller needs to finish it.
pub(crate) struct Answer {
    pub(crate) response: Response<Incoming>,
    pub(crate) in_flight: InFlight,
    pub(crate) endpoint: Endpoint,
}

/// How an attempt failed, which decides whether another may follow.
enum Failure {
    /// Nothing reached the endpoint: the connect failed or a pooled connection was closed.
    NotSent(ProxyError),
    /// The request was sent and the connection then failed.
    Sent(ProxyError),
    /// No response headers within the per-try timeout.
    TimedOut,
}

/// The request's attempts so far.
pub(crate) struct Exchange<'a> {
    settings: AttemptSettings<'a>,
    backend: &'a Backend,
    policy: &'a RoutePolicy,
    set: Arc<EndpointSet>,
    parts: Parts,
    body: RequestBody,
    client: std::net::IpAddr,
    candidates: Option<Candidates>,
    /// Endpoints tried, and endpoints skipped because they are ejected.
    skip: Vec<Endpoint>,
    pinned: Option<Endpoint>,
    /// Attempts made.
    attempts: u32,
    /// Attempts that count against the route's tries.
    charged: u32,
    /// Whether the last failed attempt had reached its endpoint (its retry costs budget).
    last_reached: bool,
    fallback_used: bool,
    started: Instant,
}

impl<'a> Exchange<'a> {
    pub(crate) fn new(
        settings: AttemptSettings<'a>,
        backend: &'a Backend,
        policy: &'a RoutePolicy,
        parts: Parts,
        body: RequestBody,
        client: std::net::IpAddr,
        pinned: Option<Endpoint>,
    ) -> Self {
        Self {
            settings,
            backend,
            policy,
            set: backend.endpoints().load(),
            parts,
            body,
            client,
            candidates: None,
            skip: Vec::new(),
            pinned,
            attempts: 0,
            charged: 0,
            last_reached: false,
            fallback_used: false,
            started: Instant::now(),
        }
    }

    /// Tries candidates until one answers in a way that is not retried, or the rules stop it.
    pub(crate) async fn run(mut self) -> Result<Answer, ProxyError> {
        let budget = self.settings.runtime.budget(self.backend.id());
        budget.record_request(self.started);
        let mut last_error = ProxyError::NoEndpoints;
        let mut held: Option<Answer> = None;
        while let Some((endpoint, fresh)) = self.next_target() {
            if self.last_reached && !budget.try_retry(Instant::now()) {
                self.settings.runtime.counters.retries_over_budget.inc();
                break;
            }
            if self.attempts > 0 {
                self.settings.runtime.counters.retries.inc();
            }
            self.attempts += 1;
            let outcome = self.attempt(&endpoint, fresh).await;
            self.last_reached = !matches!(outcome, Err(Failure::NotSent(_)));
            if self.last_reached || self.backend.mode() != BackendMode::Endpoints {
                self.charged += 1;
            }
            match outcome {
                // Kept until a later attempt answers: when every try fails, the client gets
                // the last endpoint answer rather than a connect error.
                Ok(answer) if self.retries_status(&answer) => held = Some(answer),
                Ok(answer) => return Ok(answer),
                Err(failure) => {
                    let retry = self.may_retry(&failure);
                    last_error = failure.into_error();
                    if !retry {
                        break;
                    }
                }
            }
        }
        held.ok_or(last_error)
    }

    /// The next endpoint to try and whether it needs a new connection, or `None` when the
    /// candidates, the tries or the retry time are used up.
    fn next_target(&mut self) -> Option<(Endpoint, bool)> {
        let retry = &self.policy.retry;
        let tries_left = self.charged < retry.tries.max(1);
        if !tries_left && !self.fallback_due() {
            return None;
        }
        if self.attempts > 0 && retry.timeout.is_some_and(|t| self.started.elapsed() >= t) {
            return None;
        }
        if self.backend.mode() != BackendMode::Endpoints {
            // One address (a ClusterIP or a DNS name): retry it on a new connection, so
            // kube-proxy or DNS may choose another pod.
            let endpoint = self.set.eligible().first()?.clone();
            return tries_left.then_some((endpoint, self.attempts > 0));
        }
        if let Some(pinned) = self.pinned.take() {
            let stats = &self.settings.runtime.endpoint(&pinned).stats;
            if stats.admit(Instant::now()) != Admission::Ejected {
                return Some((pinned, false));
            }
        }
        if tries_left {
            if let Some(endpoint) = self.next_candidate() {
                return Some((endpoint, false));
            }
        }
        self.fallback()
    }

    fn next_candidate(&mut self) -> Option<Endpoint> {
        let set = self.set.clone();
        let eligible = set.eligible();
        let candidates = self.candidates.get_or_insert_with(|| {
            let key = RequestKey {
                parts: &self.parts,
                client: self.client,
            };
            Candidates::new(
                &self.policy.balancer,
                self.backend,
                eligible,
                &key,
                self.settings.runtime,
            )
        });
        let now = Instant::now();
        while let Some(endpoint) = candidates.next(eligible, &self.skip) {
            let endpoint = endpoint.clone();
            let admission = self.settings.runtime.endpoint(&endpoint).stats.admit(now);
            if admission != Admission::Ejected {
                return Some(endpoint);
            }
            self.skip.push(endpoint);
        }
        None
    }

    /// Whether the ClusterIP fallback is still to be tried.
    fn fallback_due(&self) -> bool {
        self.policy.fallback.is_some() && !self.fallback_used
    }

    fn fallback(&mut self) -> Option<(Endpoint, bool)> {
        if !self.fallback_due() {
            return None;
        }
        self.fallback_used = true;
        self.settings.runtime.counters.fallbacks.inc();
        self.policy
            .fallback
            .clone()
            .map(|endpoint| (endpoint, false))
    }

    async fn attempt(&mut self, endpoint: &Endpoint, fresh: bool) -> Result<Answer, Failure> {
        self.skip.push(endpoint.clone());
        let runtime = self.settings.runtime.endpoint(endpoint);
        let in_flight = runtime.stats.begin();
        let pooled = if fresh { None } else { runtime.pool.checkout() };
        let mut connection = match pooled {
            Some(connection) => connection,
            None => self.connect(endpoint, &runtime).await?,
        };
        loop {
            let Some(body) = self.body.take() else {
                return Err(Failure::Sent(ProxyError::BadRequest(
                    "request body already sent",
                )));
            };
            let request = self.upstream_request(endpoint, body)?;
            let sent = Instant::now();
            let timeout = self
                .policy
                .retry
                .per_try_timeout
                .unwrap_or(self.settings.response_header_timeout);
            let outcome =
                tokio::time::timeout(timeout, connection.sender.try_send_request(request)).await;
            match outcome {
                Ok(Ok(response)) => {
                    runtime.stats.record_latency(sent.elapsed());
                    ConnectionPool::check_in_when_ready(runtime.pool.clone(), connection);
                    return Ok(Answer {
                        response,
                        in_flight,
                        endpoint: endpoint.clone(),
                    });
                }
                Ok(Err(mut error)) => {
                    let unsent = error.take_message();
                    let error = ProxyError::UpstreamFailed(error.into_error());
                    let Some(request) = unsent else {
                        return Err(Failure::Sent(error));
                    };
                    self.body.restore(request.into_body());
                    if !connection.reused {
                        return Err(Failure::NotSent(error));
                    }
                    // The endpoint closed this idle connection: take another one.
                    connection = match runtime.pool.checkout() {
                        Some(connection) => connection,
                        None => self.connect(endpoint, &runtime).await?,
                    };
                }
                Err(_elapsed) => return Err(Failure::TimedOut),
            }
        }
    }

    async fn connect(
        &self,
        endpoint: &Endpoint,
        runtime: &EndpointRuntime,
    ) -> Result<Connection, Failure> {
        let authority = endpoint.authority().as_str();
        match runtime
            .pool
            .connect(authority, self.settings.connect_timeout)
            .await
        {
            Ok(connection) => {
                runtime.stats.record_success();
                Ok(connection)
            }
            Err(error) => {
                self.record_connect_failure(runtime);
                Err(Failure::NotSent(error))
            }
        }
    }

    /// Counts a failed connect and ejects the endpoint when it is due and its backend can
    /// spare it: at most half of the eligible endpoints are ejected at once.
    fn record_connect_failure(&self, runtime: &EndpointRuntime) {
        let now = Instant::now();
        let eligible = self.set.eligible();
        let ejected = eligible
            .iter()
            .filter(|e| self.settings.runtime.endpoint(e).stats.is_ejected(now))
            .count();
        let may_eject = ejected < eligible.len() / 2;
        if runtime.stats.record_connect_failure(now, may_eject) {
            self.settings.runtime.counters.ejections.inc();
        }
    }

    fn upstream_request(
        &self,
        endpoint: &Endpoint,
        body: crate::pool::UpstreamBody,
    ) -> Result<Request<crate::pool::UpstreamBody>, Failure> {
        let path = self
            .parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let uri = Uri::builder()
            .scheme(Scheme::HTTP)
            .authority(endpoint.authority().clone())
            .path_and_query(path)
            .build()
            .map_err(|_| Failure::NotSent(ProxyError::BadRequest("unusable request target")))?;
        let mut request = Request::new(body);
        *request.method_mut() = self.parts.method.clone();
        *request.uri_mut() = uri;
        *request.version_mut() = Version::HTTP_11;
        *request.headers_mut() = self.parts.headers.clone();
        Ok(request)
    }

    /// Whether a response with a retryable status should be held while another endpoint is
    /// tried.
    fn retries_status(&self, answer: &Answer) -> bool {
        let on = &self.policy.retry.on;
        !on.off && on.status(answer.response.status().as_u16()) && self.may_resend()
    }

    fn may_retry(&self, failure: &Failure) -> bool {
        let on = &self.policy.retry.on;
        match failure {
            _ if on.off => false,
            Failure::NotSent(_) => true,
            Failure::Sent(_) => on.error && self.may_resend(),
            Failure::TimedOut => on.timeout && self.may_resend(),
        }
    }

    /// Whether a request that reached an endpoint may be sent to another.
    fn may_resend(&self) -> bool {
        may_resend(&self.parts, self.policy) && self.body.is_replayable()
    }
}

/// Whether the route's retry rules would ever send this request again after it reached an
/// endpoint: an idempotent method, an `Idempotency-Key`, or `non_idempotent` retries. Only such
/// requests have their bodies buffered for replay.
pub(crate) fn may_resend(parts: &Parts, policy: &RoutePolicy) -> bool {
    let retry = &policy.retry;
    let retries = !retry.on.off && retry.tries > 1;
    let safe = is_idempotent(&parts.method)
        || parts.headers.contains_key(IDEMPOTENCY_KEY)
        || retry.on.non_idempotent;
    retries && safe
}

impl Failure {
    fn into_error(self) -> ProxyError {
        match self {
            Self::NotSent(error) | Self::Sent(error) => error,
            Self::TimedOut => ProxyError::ResponseTimeout,
        }
    }
}

/// RFC 9110's idempotent methods.
fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    )
}
