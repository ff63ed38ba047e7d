//! One request's attempts: pick a candidate, send, and on a safe failure try another endpoint.
//!
//! The retry rules, in order: a connect that failed (nothing was sent) may be retried for any
//! method; after the request was sent, only idempotent methods (or requests carrying
//! `Idempotency-Key`) with a replayable body; after response bytes went to the client, never
//! (an attempt ends when response headers arrive, so this holds by construction). A small
//! response that a retry could replace is held until its last byte has arrived
//! ([`crate::upstream::retry_buffer`]): its attempt ends only then, so a body cut off is a failure after
//! sending like any other. A request
//! that broke on the client's side (its body too large, stalled or unreadable) is never
//! retried.
//!
//! Where a retry goes: to an endpoint not tried yet. Once every endpoint has been tried, a
//! route whose policy revisits (Gateway API's and Traefik's `retry`) goes back to the one tried
//! longest ago, so a Service of one pod is retried too; ingress-nginx's `proxy-next-upstream`
//! never tries one server twice, so its routes stop there.
//!
//! What limits retries: the route's tries and the backend's retry budget. Attempts that reached
//! an endpoint, and connects that timed out, count against the route's tries; retries after an
//! attempt that reached its endpoint count against the backend's retry budget. A refused or
//! reset connect puts no load on any endpoint and costs no time, so it counts against
//! neither: a request keeps looking for a listening endpoint among those not yet tried (and
//! not ejected). With a single address (service-upstream, ExternalName) every attempt counts,
//! and so does every attempt that revisits an endpoint.
//!
//! A stale keep-alive connection is not a failed attempt: when a pooled connection fails
//! before any byte of the response (the endpoint closed it as the request went out), a request
//! that may be resent goes again on a new connection to the same endpoint, as Go's transport
//! does, at no cost in tries or budget. On a route whose retries revisit, the retry to the same
//! endpoint is an ordinary one and costs a try, so that the route's attempts bound what an
//! endpoint sees.
//!
//! Timing: the response-header timeout (or the route's per-try timeout) starts once the
//! request body has been sent; a route's request timeout (an HTTPRoute's `timeouts.request`)
//! cuts the wait to what is left of it, and once it has passed the client gets 504, not an
//! earlier attempt's answer. While the body goes out, an endpoint that takes nothing for the
//! body idle timeout ends the attempt (504); a client that sends nothing for as long fails its
//! own body (408).

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::HeaderName;
use http::request::Parts;
use http::{Method, Request, Response, Version};
use hyper::body::Incoming;
use hyper::client::conn::{http2, TrySendError};
use sluice_routing::{Backend, BackendMode, Endpoint, EndpointSet, RoutePolicy};

use crate::error::{ProxyError, UpstreamError};
use crate::telemetry::trace::{AttemptFacts, AttemptSpan, Tracing, TRACEPARENT};
use crate::telemetry::RetryReason;
use crate::upstream::balance::{Candidates, RequestKey};
use crate::upstream::connect::Wire;
use crate::upstream::health::{Admission, InFlight, TrialGuard};
use crate::upstream::http1::{Http1Connection, Http1Failure};
use crate::upstream::pool::{keep_alive_for, Checkin, Connection, Sender};
use crate::upstream::request_body::{ClientBodyError, RequestBody, UploadProgress, UpstreamBody};
use crate::upstream::response_body::{EndpointBody, EndpointStream, StreamingBody};
use crate::upstream::retry_buffer::{holdable_length, HeldBytes, RetryBuffer};
use crate::upstream::runtime::{EndpointRuntime, Runtime};

const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The proxy-wide settings attempts use.
#[derive(Clone, Copy)]
pub(crate) struct AttemptSettings<'s> {
    pub(crate) runtime: &'s Runtime,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_header_timeout: Duration,
    pub(crate) body_idle_timeout: Duration,
    pub(crate) upstream_idle_timeout: Duration,
    pub(crate) retry_buffer: &'s RetryBuffer,
}

/// A response from an endpoint: its body still streaming (with the endpoint's load and
/// connection), or held whole.
pub(crate) struct Answer {
    pub(crate) response: Response<EndpointBody>,
    pub(crate) endpoint: Endpoint,
}

/// What the attempts of one request came to.
pub(crate) struct Attempted {
    pub(crate) result: Result<Answer, ProxyError>,
    pub(crate) attempts: u32,
    /// The endpoint of the last attempt (the one that answered, when one did).
    pub(crate) last_tried: Option<Endpoint>,
}

/// How an attempt failed, which decides whether another may follow and what it costs.
enum Failure {
    /// Nothing reached the endpoint: the connect was refused or reset, or a pooled connection
    /// was closed before the request went out.
    NotSent(ProxyError),
    /// The connect timed out: nothing was sent, but the time is spent, so it counts as a try.
    ConnectTimedOut,
    /// The request was sent and the connection then failed.
    Sent(ProxyError),
    /// No response headers within the per-try timeout, or the endpoint stopped reading the body.
    TimedOut(ProxyError),
    /// A held response was cut off before its declared end.
    Cut(ProxyError),
    /// The client broke its own request: never retried.
    Client(ProxyError),
}

/// How one exchange on a connection ended, short of a response.
enum Exchanged {
    /// The connection was closed before the request went out: its body (and, for HTTP/2,
    /// the headers that were moved into the request) come back.
    Unsent {
        body: UpstreamBody,
        headers: Option<Box<http::HeaderMap>>,
        error: ProxyError,
    },
    Failed(UpstreamError),
    TimedOut(ProxyError),
}

/// One attempt's request as its connection takes it: the HTTP/1.1 connection itself with the
/// body (the head is written from the exchange's parts), or a request for a shared HTTP/2
/// connection.
enum Outgoing<'c> {
    Http1(Http1Connection, UpstreamBody),
    Http2(
        &'c mut http2::SendRequest<UpstreamBody>,
        Request<UpstreamBody>,
    ),
}

/// The next endpoint to try.
struct Pick {
    endpoint: Endpoint,
    /// The endpoint's connections and health, as attached to its set.
    runtime: Arc<EndpointRuntime>,
    /// Whether the attempt needs a new connection (not a pooled one).
    fresh: bool,
    /// The claim when this attempt is an ejected endpoint's trial; it always resolves.
    trial: Option<TrialGuard>,
}

/// The request's attempts so far.
pub(crate) struct Exchange<'a> {
    settings: AttemptSettings<'a>,
    backend: &'a Backend,
    policy: &'a RoutePolicy,
    set: Arc<EndpointSet>,
    /// The head sent upstream: origin-form target, this hop's headers.
    parts: Parts,
    body: RequestBody,
    client: std::net::IpAddr,
    candidates: Option<Candidates>,
    /// Endpoints tried, and endpoints skipped because they are ejected.
    skip: Vec<Endpoint>,
    /// Endpoints tried, the one tried longest ago first; kept only on a route whose retries
    /// revisit, so that other requests allocate nothing for it.
    tried: Vec<Endpoint>,
    pinned: Option<Endpoint>,
    /// Attempts made.
    attempts: u32,
    /// Attempts that count against the route's tries.
    charged: u32,
    /// Whether the last failed attempt had reached its endpoint (its retry costs budget).
    last_reached: bool,
    fallback_used: bool,
    started: Instant,
    /// The protocol spoken to the endpoints.
    wire: Wire,
    /// How the last attempt ended, which names the reason of the retry after it.
    retry_reason: Option<RetryReason>,
    /// The endpoint of the latest attempt.
    last_tried: Option<Endpoint>,
    /// The tracer and the request's span, when the request is traced: each attempt gets a
    /// span of its own, whose `traceparent` the pod receives.
    trace: Option<(&'a Tracing, opentelemetry::Context)>,
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
            tried: Vec::new(),
            pinned,
            attempts: 0,
            charged: 0,
            last_reached: false,
            fallback_used: false,
            started: Instant::now(),
            wire: Wire::Http1,
            retry_reason: None,
            last_tried: None,
            trace: None,
        }
    }

    /// Speaks `wire` to the endpoints (HTTP/1.1 unless told otherwise).
    pub(crate) fn over(mut self, wire: Wire) -> Self {
        self.wire = wire;
        self
    }

    /// Traces each attempt under the request's span in `trace`.
    pub(crate) fn traced(mut self, trace: Option<(&'a Tracing, opentelemetry::Context)>) -> Self {
        self.trace = trace;
        self
    }

    /// Tries candidates until one answers in a way that is not retried, or the rules stop it.
    /// Either way, says how many attempts it made and which endpoint it tried last; a failure
    /// carries the status the route's policy answers it with.
    pub(crate) async fn run(mut self) -> Attempted {
        let status = self.policy.upstream_failure_status;
        let result = self
            .attempt_all()
            .await
            .map_err(|error| error.answered_as(status));
        Attempted {
            result,
            attempts: self.attempts,
            last_tried: self.last_tried,
        }
    }

    async fn attempt_all(&mut self) -> Result<Answer, ProxyError> {
        let budget = self.settings.runtime.budget(self.backend);
        budget.record_request(self.started);
        let mut last_error = ProxyError::NoEndpoints;
        let mut held: Option<Answer> = None;
        while let Some(pick) = self.next_target() {
            // A refused retry drops `pick`, which releases a trial it claimed.
            if self.last_reached && !budget.try_retry(Instant::now()) {
                self.settings.runtime.metrics.retry_budget_exhausted.inc();
                break;
            }
            if let Some(reason) = self.retry_reason.filter(|_| self.attempts > 0) {
                self.settings.runtime.metrics.retried(reason);
                if let Some(backoff) = self.policy.retry.backoff {
                    tokio::time::sleep(backoff).await;
                }
            }
            self.attempts += 1;
            let revisit = self.tried.contains(&pick.endpoint);
            let span = self.trace_attempt(&pick.endpoint);
            let outcome = self.attempt(&pick).await;
            if let Some(span) = span {
                span.end(match &outcome {
                    Ok(answer) => Ok(answer.response.status()),
                    Err(failure) => Err(failure.retry_reason().label()),
                });
            }
            pick.runtime.stats.record_outcome(match &outcome {
                Ok(answer) => answer.response.status().is_server_error(),
                Err(failure) => !matches!(failure, Failure::Client(_)),
            });
            self.retry_reason = Some(match &outcome {
                Ok(_) => RetryReason::Status,
                Err(failure) => failure.retry_reason(),
            });
            if let Some(trial) = pick.trial {
                self.settle_trial(trial, &pick.runtime, &outcome);
            }
            if let Err(Failure::Cut(_)) = outcome {
                self.record_response_cut(&pick.runtime);
            }
            self.last_reached = matches!(
                outcome,
                Ok(_) | Err(Failure::Sent(_) | Failure::TimedOut(_) | Failure::Cut(_))
            );
            let costly = self.last_reached || matches!(outcome, Err(Failure::ConnectTimedOut));
            if costly || revisit || self.backend.mode() != BackendMode::Endpoints {
                self.charged += 1;
            }
            match outcome {
                // Kept until a later attempt answers: when every try fails, the client gets
                // the last endpoint answer rather than a connect error.
                Ok(answer) if self.retries_status(&answer) => held = Some(answer),
                Ok(answer) => return Ok(answer),
                Err(failure) => {
                    if matches!(failure, Failure::TimedOut(_))
                        && self.request_time_left().is_some_and(|left| left.is_zero())
                    {
                        held = None;
                    }
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

    /// The attempt's span, when the request is traced, and its `traceparent` on the request
    /// the endpoint gets (also when the trace is not recorded: the pod continues it).
    fn trace_attempt(&mut self, endpoint: &Endpoint) -> Option<AttemptSpan> {
        let (tracing, server) = self.trace.as_ref()?;
        let authority = endpoint.authority();
        let facts = AttemptFacts {
            method: &self.parts.method,
            scheme: match self.wire {
                Wire::Tls { .. } => "https",
                _ => "http",
            },
            host: authority.host(),
            port: authority.port_u16().unwrap_or(80),
            target: self
                .parts
                .uri
                .path_and_query()
                .map_or("/", |target| target.as_str()),
            resends: self.attempts.saturating_sub(1),
            retry_reason: self
                .retry_reason
                .filter(|_| self.attempts > 1)
                .map(RetryReason::label),
        };
        let (traceparent, span) = tracing.attempt(server, facts);
        self.parts.headers.insert(TRACEPARENT, traceparent);
        span
    }

    /// Resolves an ejected endpoint's trial: any HTTP response brings it back; a failure of
    /// the endpoint ejects it again; a request the client broke says nothing about it.
    fn settle_trial(
        &self,
        trial: TrialGuard,
        runtime: &Arc<EndpointRuntime>,
        outcome: &Result<Answer, Failure>,
    ) {
        match outcome {
            Ok(_) => trial.alive(),
            Err(Failure::Client(_)) => drop(trial),
            Err(_) => {
                if trial.failed(Instant::now(), self.may_eject(runtime)) {
                    self.settings.runtime.metrics.ejections.inc();
                }
            }
        }
    }

    /// The next endpoint to try, or `None` when the candidates, the tries or the retry time
    /// are used up.
    fn next_target(&mut self) -> Option<Pick> {
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
            let runtime = self.settings.runtime.endpoint_at(&self.set, 0, &endpoint);
            let fresh = self.attempts > 0;
            return tries_left.then_some(Pick {
                endpoint,
                runtime,
                fresh,
                trial: None,
            });
        }
        if let Some(pinned) = self.pinned.take() {
            if let Some(pick) = self.pinned_pick(pinned) {
                return Some(pick);
            }
        }
        if tries_left {
            if let Some(pick) = self.next_candidate().or_else(|| self.revisited()) {
                return Some(pick);
            }
        }
        self.fallback()
    }

    /// With every endpoint tried, the one tried longest ago that is still in the set and not
    /// ejected, when the route's retries revisit.
    fn revisited(&self) -> Option<Pick> {
        if !self.policy.retry.revisit {
            return None;
        }
        self.tried.iter().find_map(|endpoint| {
            let position = self.set.position(endpoint)?;
            let runtime = self
                .settings
                .runtime
                .endpoint_at(&self.set, position, endpoint);
            Some(Pick {
                endpoint: endpoint.clone(),
                runtime: runtime.clone(),
                fresh: false,
                trial: admit(&runtime)?,
            })
        })
    }

    /// The session's endpoint, unless it is ejected.
    fn pinned_pick(&self, endpoint: Endpoint) -> Option<Pick> {
        let position = self.set.position(&endpoint)?;
        let runtime = self
            .settings
            .runtime
            .endpoint_at(&self.set, position, &endpoint);
        let trial = admit(&runtime)?;
        Some(Pick {
            endpoint,
            runtime,
            fresh: false,
            trial,
        })
    }

    fn next_candidate(&mut self) -> Option<Pick> {
        let set = self.set.clone();
        let eligible = set.eligible();
        let state = self.settings.runtime.attach(&set);
        if self.candidates.is_none() {
            let key = RequestKey {
                parts: &self.parts,
                client: self.client,
            };
            self.candidates = Some(Candidates::new(
                &self.policy.balancer,
                self.backend,
                eligible,
                state,
                &key,
            ));
        }
        loop {
            let position = self
                .candidates
                .as_mut()?
                .next(eligible, &self.skip, state)?;
            let endpoint = eligible[position].clone();
            let runtime = match state.endpoints().get(position) {
                Some(runtime) => runtime.clone(),
                None => self.settings.runtime.endpoint(&endpoint),
            };
            match admit(&runtime) {
                Some(trial) => {
                    return Some(Pick {
                        endpoint,
                        runtime,
                        fresh: false,
                        trial,
                    })
                }
                None => self.skip.push(endpoint),
            }
        }
    }

    /// What is left of the route's request timeout, when it has one.
    fn request_time_left(&self) -> Option<Duration> {
        let limit = self.policy.timeouts.request?;
        Some(limit.saturating_sub(self.started.elapsed()))
    }

    /// Whether the ClusterIP fallback is still to be tried.
    fn fallback_due(&self) -> bool {
        self.policy.fallback.is_some() && !self.fallback_used
    }

    fn fallback(&mut self) -> Option<Pick> {
        if !self.fallback_due() {
            return None;
        }
        self.fallback_used = true;
        self.settings.runtime.metrics.fallbacks.inc();
        let endpoint = self.policy.fallback.clone()?;
        let runtime = self.settings.runtime.endpoint(&endpoint);
        Some(Pick {
            endpoint,
            runtime,
            fresh: false,
            trial: None,
        })
    }

    async fn attempt(&mut self, pick: &Pick) -> Result<Answer, Failure> {
        let (endpoint, runtime) = (&pick.endpoint, &pick.runtime);
        self.skip.push(endpoint.clone());
        if self.policy.retry.revisit {
            self.tried.retain(|tried| tried != endpoint);
            self.tried.push(endpoint.clone());
        }
        self.last_tried = Some(endpoint.clone());
        let in_flight = runtime.stats.begin();
        let pooled = if pick.fresh {
            None
        } else {
            runtime.pool.checkout(&self.wire)
        };
        let mut connection = match pooled {
            Some(connection) => {
                self.settings.runtime.metrics.reused_connections.inc();
                connection
            }
            None => self.connect(endpoint, runtime).await?,
        };
        let mut resent_on_new_connection = false;
        loop {
            let Some(body) = self.body.take() else {
                return Err(Failure::Sent(ProxyError::BadRequest(
                    "request body already sent",
                )));
            };
            let progress = body.progress();
            let Some(outgoing) = self.outgoing(&mut connection, body) else {
                return Err(Failure::NotSent(ProxyError::BadRequest(
                    "the connection's last request is still out",
                )));
            };
            let sent = Instant::now();
            match self.exchange(outgoing, progress.as_deref()).await {
                Ok(response) => {
                    let now = Instant::now();
                    runtime.stats.record_latency(now - sent, now);
                    let keep_for =
                        keep_alive_for(response.headers(), self.settings.upstream_idle_timeout);
                    let checkin = Checkin::new(runtime.pool.clone(), connection, keep_for);
                    return self.answered(response, in_flight, checkin, endpoint).await;
                }
                Err(Exchanged::Unsent {
                    body,
                    headers,
                    error,
                }) => {
                    if let Some(headers) = headers {
                        self.parts.headers = *headers;
                    }
                    self.body.restore(body);
                    if !connection.reused {
                        return Err(Failure::NotSent(error));
                    }
                    // The endpoint closed this idle connection: take another one.
                    connection = match runtime.pool.checkout(&self.wire) {
                        Some(connection) => connection,
                        None => self.connect(endpoint, runtime).await?,
                    };
                }
                Err(Exchanged::Failed(error)) => {
                    if let Some(broken) = ClientBodyError::find(&error) {
                        return Err(Failure::Client(broken.to_proxy_error()));
                    }
                    // A route that revisits retries on this endpoint anyway, as a try.
                    let stale = connection.reused
                        && !self.policy.retry.revisit
                        && !resent_on_new_connection
                        && closed_before_response(&error)
                        && resendable(&self.parts)
                        && self.body.is_replayable();
                    if !stale {
                        return Err(Failure::Sent(ProxyError::UpstreamFailed(error)));
                    }
                    resent_on_new_connection = true;
                    self.settings.runtime.metrics.stale_connection_resends.inc();
                    connection = self.connect(endpoint, runtime).await?;
                }
                Err(Exchanged::TimedOut(error)) => return Err(Failure::TimedOut(error)),
            }
        }
    }

    /// The endpoint's response, its body streaming on, or read whole first when it is one to
    /// hold ([`crate::upstream::retry_buffer`]): then a body cut off fails the attempt, which a retry
    /// may follow.
    async fn answered(
        &self,
        response: Response<EndpointStream>,
        in_flight: InFlight,
        checkin: Checkin,
        endpoint: &Endpoint,
    ) -> Result<Answer, Failure> {
        let hold = self.hold(&response);
        let (head, body) = response.into_parts();
        let idle = self
            .policy
            .timeouts
            .read
            .unwrap_or(self.settings.body_idle_timeout);
        let streaming = StreamingBody::new(body, in_flight, idle, checkin);
        let body = match hold {
            None => EndpointBody::Streaming(Box::new(streaming)),
            Some((length, reservation)) => match streaming.read_whole(length, reservation).await {
                Ok(held) => EndpointBody::Held(Box::new(held)),
                Err(error) => return Err(Failure::Cut(ProxyError::ResponseCut(error))),
            },
        };
        Ok(Answer {
            response: Response::from_parts(head, body),
            endpoint: endpoint.clone(),
        })
    }

    /// The length to hold `response` for and its claim on the proxy-wide cap, when the
    /// response is one to hold and a cut-off body could still be retried.
    fn hold(&self, response: &Response<EndpointStream>) -> Option<(u64, HeldBytes)> {
        // The response's own terms first: they are read from its head, while the retry
        // question reads the backend's budget.
        let buffer = self.settings.retry_buffer;
        let limit = buffer.limit(self.policy.retry.response_buffer);
        let length = holdable_length(&self.parts, response, limit)?;
        if !self.could_retry_a_cut() {
            return None;
        }
        match buffer.reserve(length) {
            Some(reservation) => Some((length, reservation)),
            None => {
                self.settings.runtime.metrics.retry_buffer_full.inc();
                None
            }
        }
    }

    /// Whether another attempt could follow this one if its response were cut off: the retry
    /// rules allow it, an endpoint not tried yet (or, when the route revisits, any endpoint;
    /// or the ClusterIP fallback) is there, and
    /// tries, retry time and the backend's retry budget are left.
    fn could_retry_a_cut(&self) -> bool {
        let retry = &self.policy.retry;
        if retry.on.off || !retry.on.error || !self.may_resend() {
            return false;
        }
        let untried = match self.backend.mode() {
            BackendMode::Endpoints => retry.revisit || self.set.eligible().len() > self.skip.len(),
            // One address: a retry goes out on a new connection, where another pod may answer.
            _ => true,
        };
        let tries_left = (untried && self.charged + 1 < retry.tries.max(1)) || self.fallback_due();
        let in_time = retry.timeout.is_none_or(|t| self.started.elapsed() < t);
        tries_left
            && in_time
            && self
                .settings
                .runtime
                .budget(self.backend)
                .has_retry(Instant::now())
    }

    /// Sends one request on its connection: first the body, watching for an endpoint that
    /// stops taking it, then the wait for response headers under the per-try timeout.
    async fn exchange(
        &self,
        outgoing: Outgoing<'_>,
        progress: Option<&UploadProgress>,
    ) -> Result<Response<EndpointStream>, Exchanged> {
        let send = self.send(outgoing);
        tokio::pin!(send);
        let idle = self.settings.body_idle_timeout;
        let send_idle = self.policy.timeouts.send.unwrap_or(idle);
        while let Some(progress) = progress.filter(|progress| !progress.is_sent()) {
            let check_at = match progress.client_owes() {
                true => tokio::time::Instant::now() + idle,
                false => progress.stall_deadline(send_idle),
            };
            tokio::select! {
                biased;
                result = &mut send => return result,
                () = progress.sent() => {}
                () = tokio::time::sleep_until(check_at) => {
                    if progress.endpoint_stalled(send_idle) {
                        return Err(Exchanged::TimedOut(ProxyError::UploadStalled));
                    }
                }
            }
        }
        let timeout = self
            .policy
            .retry
            .per_try_timeout
            .or(self.policy.timeouts.read)
            .unwrap_or(self.settings.response_header_timeout);
        let timeout = self
            .request_time_left()
            .map_or(timeout, |left| timeout.min(left));
        match tokio::time::timeout(timeout, send).await {
            Ok(result) => result,
            Err(_elapsed) => Err(Exchanged::TimedOut(ProxyError::ResponseTimeout)),
        }
    }

    async fn connect(
        &self,
        endpoint: &Endpoint,
        runtime: &Arc<EndpointRuntime>,
    ) -> Result<Connection, Failure> {
        let authority = endpoint.authority().as_str();
        let started = Instant::now();
        match runtime
            .pool
            .connect(authority, &self.wire, self.connect_timeout())
            .await
        {
            Ok(connection) => {
                runtime.stats.record_connect_success();
                if !connection.reused {
                    self.settings.runtime.metrics.connected(started.elapsed());
                }
                Ok(connection)
            }
            Err(error) => {
                self.settings.runtime.metrics.connect_failed(&error);
                self.record_connect_failure(runtime);
                match error {
                    ProxyError::ConnectTimeout => Err(Failure::ConnectTimedOut),
                    error => Err(Failure::NotSent(error)),
                }
            }
        }
    }

    fn connect_timeout(&self) -> Duration {
        self.policy
            .timeouts
            .connect
            .unwrap_or(self.settings.connect_timeout)
    }

    /// Counts a response cut off mid-body, and ejects the endpoint after three in a row when
    /// its backend can spare it.
    fn record_response_cut(&self, runtime: &Arc<EndpointRuntime>) {
        if runtime
            .stats
            .record_response_cut(Instant::now(), self.may_eject(runtime))
        {
            self.settings.runtime.metrics.ejections.inc();
        }
    }

    /// Counts a failed connect and ejects the endpoint when it is due and its backend can
    /// spare it: at most half of the eligible endpoints are ejected at once.
    fn record_connect_failure(&self, runtime: &Arc<EndpointRuntime>) {
        if runtime
            .stats
            .record_connect_failure(Instant::now(), self.may_eject(runtime))
        {
            self.settings.runtime.metrics.ejections.inc();
        }
    }

    /// Whether the backend can spare `runtime`'s endpoint: at most half of the eligible
    /// endpoints are out of rotation at once.
    fn may_eject(&self, runtime: &Arc<EndpointRuntime>) -> bool {
        self.ejected_besides(runtime) < self.set.eligible().len() / 2
    }

    /// How many eligible endpoints other than `endpoint` are out of rotation, counting those
    /// whose ejection ran out but whose trial has not brought them back.
    fn ejected_besides(&self, runtime: &Arc<EndpointRuntime>) -> usize {
        let eligible = self.set.eligible().len();
        self.settings
            .runtime
            .attach(&self.set)
            .endpoints()
            .iter()
            .take(eligible)
            .filter(|other| !Arc::ptr_eq(other, runtime) && other.stats.is_ejected())
            .count()
    }

    /// Sends `outgoing` and waits for the response head.
    async fn send(&self, outgoing: Outgoing<'_>) -> Result<Response<EndpointStream>, Exchanged> {
        match outgoing {
            Outgoing::Http1(http1, body) => match http1.send(&self.parts, body).await {
                Ok(response) => Ok(response.map(EndpointStream::Http1)),
                Err(Http1Failure::Unsent(body, error)) => Err(Exchanged::Unsent {
                    body,
                    headers: None,
                    error: ProxyError::UpstreamFailed(error),
                }),
                Err(Http1Failure::Failed(error)) => Err(Exchanged::Failed(error)),
            },
            Outgoing::Http2(sender, request) => {
                let response = sender.try_send_request(request).await;
                sent(response).map(|response| response.map(EndpointStream::Http2))
            }
        }
    }

    /// What one attempt hands its connection: for HTTP/1.1 the connection itself and the
    /// body (the head is written from the exchange's parts, so nothing is copied for a later
    /// attempt), for HTTP/2 a request.
    /// `None` when an HTTP/1.1 connection's previous request is still out (never, as the
    /// attempts use connections).
    fn outgoing<'c>(
        &mut self,
        connection: &'c mut Connection,
        body: UpstreamBody,
    ) -> Option<Outgoing<'c>> {
        let tls = connection.tls;
        Some(match &mut connection.sender {
            Sender::Http1(slot) => Outgoing::Http1(slot.take()?, body),
            Sender::Http2(sender) => Outgoing::Http2(sender, self.http2_request(body, tls)),
        })
    }

    /// The HTTP/2 request for one attempt: the prepared head (this hop's headers) with this
    /// attempt's body. The headers are copied only when the request might be sent again after
    /// this attempt reached its endpoint; otherwise they move.
    fn http2_request(&mut self, body: UpstreamBody, tls: bool) -> Request<UpstreamBody> {
        let mut request = Request::new(body);
        *request.method_mut() = self.parts.method.clone();
        *request.uri_mut() = self.parts.uri.clone();
        *request.version_mut() = Version::HTTP_11;
        *request.headers_mut() = if self.could_send_again() {
            self.parts.headers.clone()
        } else {
            std::mem::take(&mut self.parts.headers)
        };
        into_http2(&mut request, tls);
        request
    }

    /// Whether the request may go out again once it reached an endpoint: to another endpoint
    /// under the retry rules, or to the same one when its pooled connection was stale.
    fn could_send_again(&self) -> bool {
        self.body.is_replayable() && (resendable(&self.parts) || self.may_resend())
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
            Failure::Client(_) => false,
            Failure::NotSent(_) | Failure::ConnectTimedOut => true,
            Failure::Sent(_) => on.error && self.may_resend(),
            Failure::TimedOut(_) => on.timeout && self.may_resend(),
            Failure::Cut(_) => on.error && self.may_resend(),
        }
    }

    /// Whether a request that reached an endpoint may be sent to another.
    fn may_resend(&self) -> bool {
        may_resend(&self.parts, self.policy) && self.body.is_replayable()
    }
}

/// `None` when the endpoint is ejected; else whether this request is its trial.
fn admit(runtime: &Arc<EndpointRuntime>) -> Option<Option<TrialGuard>> {
    match runtime.stats.admit(Instant::now()) {
        Admission::Open => Some(None),
        Admission::Trial(trial) => Some(Some(trial)),
        Admission::Ejected => None,
    }
}

/// What hyper's answer to one HTTP/2 send means. (The error is as large as the async
/// functions' that carry it back; boxing it would allocate on every failed send.)
#[allow(clippy::result_large_err)]
fn sent(
    result: Result<Response<Incoming>, TrySendError<Request<UpstreamBody>>>,
) -> Result<Response<Incoming>, Exchanged> {
    result.map_err(|mut error| match error.take_message() {
        Some(request) => {
            let (parts, body) = request.into_parts();
            Exchanged::Unsent {
                body,
                headers: Some(Box::new(parts.headers)),
                error: ProxyError::UpstreamFailed(error.into_error().into()),
            }
        }
        None => Exchanged::Failed(error.into_error().into()),
    })
}

/// Whether a connection failed before any response arrived in a way that means the endpoint
/// closed it: end of stream, reset or broken pipe.
fn closed_before_response(error: &UpstreamError) -> bool {
    let error = match error {
        UpstreamError::ClosedBeforeResponse => return true,
        UpstreamError::Io(io) => return closed_by_peer(io),
        UpstreamError::Http2(error) => error,
        _ => return false,
    };
    if error.is_incomplete_message() || error.is_canceled() {
        return true;
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return closed_by_peer(io);
        }
        source = cause.source();
    }
    false
}

fn closed_by_peer(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::UnexpectedEof
    )
}

/// Whether the route's retry rules would ever send this request again after it reached an
/// endpoint: an idempotent method, an `Idempotency-Key`, or `non_idempotent` retries. Only such
/// requests have their bodies buffered for replay.
pub(crate) fn may_resend(parts: &Parts, policy: &RoutePolicy) -> bool {
    let retry = &policy.retry;
    let retries = !retry.on.off && retry.tries > 1;
    retries && (resendable(parts) || retry.on.non_idempotent)
}

/// Whether sending this request twice is safe by its own account: an idempotent method, or an
/// `Idempotency-Key`.
pub(crate) fn resendable(parts: &Parts) -> bool {
    is_idempotent(&parts.method) || parts.headers.contains_key(IDEMPOTENCY_KEY)
}

impl Failure {
    /// The reason a retry after this failure is counted under.
    fn retry_reason(&self) -> RetryReason {
        match self {
            Self::NotSent(_) | Self::Client(_) => RetryReason::ConnectError,
            Self::ConnectTimedOut => RetryReason::ConnectTimeout,
            Self::Sent(_) => RetryReason::UpstreamError,
            Self::TimedOut(_) => RetryReason::Timeout,
            Self::Cut(_) => RetryReason::ResponseCut,
        }
    }

    fn into_error(self) -> ProxyError {
        match self {
            Self::NotSent(error)
            | Self::Sent(error)
            | Self::TimedOut(error)
            | Self::Cut(error)
            | Self::Client(error) => error,
            Self::ConnectTimedOut => ProxyError::ConnectTimeout,
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

#[cfg(test)]
mod tests;

/// An HTTP/2 request names its target in absolute form (`:scheme` and `:authority` from the
/// Host the request carries), and carries no Host header of its own.
fn into_http2(request: &mut Request<UpstreamBody>, tls: bool) {
    *request.version_mut() = Version::HTTP_2;
    let Some(host) = request.headers_mut().remove(http::header::HOST) else {
        return;
    };
    let scheme = if tls { "https" } else { "http" };
    let target = request
        .uri()
        .path_and_query()
        .map_or("/", |target| target.as_str());
    let absolute = format!("{scheme}://{}{target}", host.to_str().unwrap_or_default());
    match absolute.parse() {
        Ok(uri) => *request.uri_mut() = uri,
        // An authority that does not parse stays in the Host header.
        Err(_) => {
            request.headers_mut().insert(http::header::HOST, host);
        }
    }
}
