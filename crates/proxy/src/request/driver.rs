//! The phase driver: every request goes through the numbered phases in order, the route's filters' hooks run in each, and the driver names no filter.
//!
//! ```text
//! 1 route ─► 2 request filters ─► 3 access ─► 4 upstream request ─► 5 body ready
//!                                                                        │
//! 9 log ◄─ 8 response filters ◄─ 7 answer ◄─ 6 choose endpoint and send ◄┘
//! ```
//!
//! Any filter hook of phases 2 to 4 may answer instead ([`LocalAnswer`]); a failure
//! ([`ProxyError`]) ends the request at any phase. Either way the log phase sees the answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::request::Parts;
use http::{HeaderValue, Request, Response};
use http_body_util::Either;
use sluice_routing::{RoutePolicy, UpstreamProtocol};

use super::answer;
use super::forwarded::{Forwarding, X_REQUEST_ID};
use super::grpc;
use super::inbound::Inbound;
use super::options::ProxyOptions;
use super::respond::respond;
use super::route::route_request;
use super::table_handle::TableHandle;
use super::upstream_head;
use super::Stop;
use crate::client_body::ClientBody;
use crate::connection::ClientInfo;
use crate::error::ProxyError;
use crate::filters::contract::{Connection, LocalAnswer, RequestContext, Slots};
use crate::filters::registry::Filters;
use crate::filters::services::{AttemptTimeouts, MemoryBudget, Services, COMPRESSION_MEMORY};
use crate::shutdown::ShutdownSignal;
use crate::telemetry;
use crate::telemetry::access_log::{AccessLog, AccessRecord};
use crate::telemetry::completion::{declared_length, Completion};
use crate::telemetry::trace::{RequestTrace, RouteFacts, ServerFacts, Tracing, TRACESTATE};
use crate::upstream::attempt::{may_resend, resendable, Exchange};
use crate::upstream::connect::Wire;
use crate::upstream::outbound::OutboundClient;
use crate::upstream::request_body::{BodyLimits, RequestBody, DEFAULT_REPLAY_LIMIT};
use crate::upstream::response_body::ProxyBody;
use crate::upstream::retry_buffer::RetryBuffer;
use crate::upstream::runtime::Runtime;
use crate::upstream::session_key::SessionKey;
use crate::upstream::upgrade::{ClientUpgrade, Tunnels};

/// The proxy: the published table and runtime state, plus its settings. One per process,
/// shared by all connections.
pub struct Proxy {
    table: TableHandle,
    options: ProxyOptions,
    replay_limit: usize,
    /// What the route's filters may use: settings, clients, the runtime.
    services: Services,
    tunnels: Tunnels,
    access_log: Option<Arc<AccessLog>>,
    tracing: Option<Arc<Tracing>>,
}

impl Proxy {
    /// A proxy over `table`. Inside a Tokio runtime it also starts the task that closes idle
    /// upstream connections as they expire.
    pub fn new(table: TableHandle, options: &ProxyOptions) -> Self {
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let every = (options.upstream_idle_timeout / 4)
                .clamp(Duration::from_millis(100), Duration::from_secs(5));
            handle.spawn(reap_idle_connections(
                Arc::downgrade(table.runtime()),
                every,
            ));
        }
        let services = Services {
            session_key: options
                .session_secret
                .as_deref()
                .map(SessionKey::new)
                .unwrap_or_default(),
            https_redirect_port: options.https_redirect_port,
            outbound: OutboundClient::default(),
            runtime: table.runtime().clone(),
            retry_buffer: RetryBuffer::new(
                options.response_retry_buffer,
                options.response_retry_buffer_total,
            ),
            timeouts: AttemptTimeouts {
                connect: options.connect_timeout,
                response_header: options.response_header_timeout,
                body_idle: options.body_idle_timeout,
                upstream_idle: options.upstream_idle_timeout,
            },
            compression: options.compression,
            compression_budget: MemoryBudget::new(COMPRESSION_MEMORY),
        };
        Self {
            table,
            options: options.clone(),
            replay_limit: DEFAULT_REPLAY_LIMIT,
            services,
            tunnels: Tunnels::new(options.websocket_idle_timeout),
            access_log: None,
            tracing: None,
        }
    }

    /// Writes a line per request to `log`.
    pub fn with_access_log(mut self, log: Arc<AccessLog>) -> Self {
        self.access_log = Some(log);
        self
    }

    /// Records a span per request (and one per upstream attempt) with `tracing`, and passes
    /// the trace on to the pods.
    pub fn with_tracing(mut self, tracing: Arc<Tracing>) -> Self {
        self.tracing = Some(tracing);
        self
    }

    /// Resolves once every upgraded (WebSocket) connection has ended; on shutdown they end at
    /// the latest when the grace period does.
    pub async fn tunnels_closed(&self) {
        self.tunnels.all_closed().await;
    }

    /// Upgraded (WebSocket) connections get `grace_period` once `shutdown` stops the
    /// listeners, then close. Set once; later calls are ignored.
    pub fn watch_shutdown(&self, shutdown: ShutdownSignal, grace_period: Duration) {
        self.tunnels.watch_shutdown(shutdown, grace_period);
    }

    /// Handles one request from `client` through the phases. Never fails: a failure becomes
    /// a short response. Either way the response carries the request's `X-Request-ID`.
    pub async fn handle(
        &self,
        request: Request<ClientBody>,
        client: ClientInfo,
    ) -> Response<ProxyBody> {
        let started = Instant::now();
        let forwarding =
            Forwarding::decide(request.headers(), &client, &self.options.trusted_proxies);
        let grpc_call = grpc::is_grpc(request.headers());
        let mut measure = Measure {
            started,
            method: telemetry::method(request.method()),
            request_bytes: declared_length(request.headers()),
            record: self
                .access_log
                .as_ref()
                .map(|_| AccessRecord::begin(&request, forwarding.real_client)),
            trace: self.tracing.as_ref().map(|tracing| tracing.begin()),
        };
        let table = self.table.load();
        let mut context = RequestContext {
            table: &table,
            connection: Connection {
                client: client.client,
                server: client.server,
                over_tls: client.tls.is_some(),
            },
            real_client: forwarding.real_client,
            request_id: forwarding.request_id(request.headers()),
            target: None,
            host: HeaderValue::from_static(""),
            host_has_tls: false,
            forwarded_https: forwarding.says_https(request.headers()),
            pinned: None,
            endpoint: None,
            tried: None,
            upstream_status: None,
            attempts: 0,
            slots: Slots::default(),
            stood_in_for: None,
            peer_trusted: forwarding.trusted,
            held: Vec::new(),
        };
        // Not boxed: the listener pins the handler's future where it is made and drops it
        // with the request, so a box would only add an allocation and a copy of this future
        // (bench/instructions: 36,827 -> 36,466 instructions per request without it).
        let forward = self.forward(
            request,
            (&client, &forwarding),
            &mut context,
            &mut measure.trace,
        );
        let response = match forward.await {
            Ok(response) => response,
            Err(stop) => {
                let trace_id = measure.trace.as_ref().and_then(RequestTrace::trace_id);
                log_stop(&stop, &client, trace_id);
                answer::stopped(stop, grpc_call)
            }
        };
        self.log(response, &mut context, &client, measure)
    }

    /// Phases 1 to 8, from the route to the response filters.
    async fn forward<'r>(
        &self,
        mut request: Request<ClientBody>,
        (client, forwarding): (&ClientInfo, &Forwarding),
        context: &mut RequestContext<'r>,
        trace: &mut Option<RequestTrace>,
    ) -> Result<Response<ProxyBody>, Stop> {
        let services = &self.services;
        // 1. Route.
        let client_upgrade = ClientUpgrade::take(&mut request);
        let (mut parts, body) = request.into_parts();
        let inbound = Inbound::read(&parts)?;
        let routed = route_request(client, &inbound, &parts, context);
        if let Some(trace) = trace {
            self.open_trace(
                trace,
                &mut parts,
                &inbound,
                routed.as_ref().ok(),
                client,
                context,
            );
        }
        let target = routed?;
        let filters = Filters::of(target.policy, services);
        // 2. Request filters.
        for filter in filters.chain() {
            filter.on_request(context, &parts, services)?;
        }
        // 3. Access.
        for filter in filters.chain() {
            filter.on_access(context, &parts, services).result().await?;
        }
        // 4. Upstream request.
        let wire = match &target.policy.upstream {
            UpstreamProtocol::Http1 => Wire::Http1,
            protocol => Wire::for_route(protocol, inbound.host_name())?,
        };
        upstream_head::prepare(&mut parts, inbound, client, context, forwarding);
        for filter in filters.chain() {
            filter
                .on_upstream_request(context, &mut parts, services)
                .result()
                .await?;
        }
        if let Some(upgrade) = &client_upgrade {
            upgrade.restore(&mut parts.headers);
        }
        // 5. Body ready.
        let body = self
            .prepare_body(&parts, body, target.policy, filters)
            .await?;
        for filter in filters.chain() {
            filter.on_body_ready(context, &parts, &body, services);
        }
        // 6. Choose an endpoint and send.
        let deadline = grpc::timeout(&parts.headers);
        // Boxed where it is made: the exchange's future is about 5 KB, and unboxed it was
        // copied three times more on its way into this future's state (bench/instructions).
        let exchange = Box::pin(
            Exchange::new(
                services.attempt_settings(),
                target.backend,
                target.policy,
                parts,
                body,
                context.real_client,
                context.pinned.clone(),
            )
            .over(wire)
            .traced(
                self.tracing
                    .as_deref()
                    .zip(trace.as_ref().and_then(RequestTrace::server).cloned()),
            )
            .run(),
        );
        // The client's gRPC deadline bounds every attempt together.
        let attempted = grpc::within(deadline, exchange).await?;
        context.attempts = attempted.attempts;
        context.tried = attempted.last_tried;
        // 7. Answer.
        let mut outcome = attempted.result;
        for filter in filters.chain() {
            outcome = filter.on_answer(context, outcome, services).result().await;
        }
        // 8. Response filters.
        Ok(respond(
            outcome?,
            filters,
            context,
            (services, &self.tunnels),
            client_upgrade,
        ))
    }

    /// Opens the request's span once the route phase is done (the route turns tracing off,
    /// or keeps a client's trace out); a request that matched no route gets a span too.
    fn open_trace(
        &self,
        trace: &mut RequestTrace,
        parts: &mut Parts,
        inbound: &Inbound,
        target: Option<&sluice_routing::Target<'_>>,
        client: &ClientInfo,
        context: &RequestContext<'_>,
    ) {
        let Some(tracing) = &self.tracing else {
            return;
        };
        let policy = target
            .map(|target| target.policy.tracing)
            .unwrap_or_default();
        if policy.off {
            tracing.skip(trace);
            return;
        }
        let route = target.map(|target| RouteFacts {
            kind: if client.gateway_socket.is_some() {
                "HTTPRoute"
            } else {
                "Ingress"
            },
            name: target.ingress,
            path: target.path.map(|path| path.path()),
            service: target.backend.id().parts(),
        });
        let facts = ServerFacts {
            method: &parts.method,
            path: inbound.path(),
            scheme: if client.tls.is_some() {
                "https"
            } else {
                "http"
            },
            version: parts.version,
            host: inbound.host_name(),
            client: context.real_client,
            user_agent: parts.headers.get(http::header::USER_AGENT),
            route,
        };
        if tracing.open(trace, &parts.headers, !policy.distrust_incoming, facts) {
            parts.headers.remove(TRACESTATE);
        }
    }

    /// Refuses a body over the route's limit, and buffers it for replay when it is small and
    /// could be sent again (by a retry, on a new connection when a pooled one was stale, or
    /// by a filter that copies it).
    async fn prepare_body(
        &self,
        parts: &Parts,
        body: ClientBody,
        policy: &RoutePolicy,
        filters: &Filters,
    ) -> Result<RequestBody, ProxyError> {
        let max_size = match policy.max_body_size {
            Some(0) => None,
            Some(limit) => Some(limit),
            None => self.options.max_body_size,
        };
        let limits = BodyLimits {
            max_size,
            idle: self.options.body_idle_timeout,
        };
        let may_replay = may_resend(parts, policy) || resendable(parts) || filters.keeps_body();
        RequestBody::prepare(parts, body, limits, may_replay, self.replay_limit).await
    }

    /// Phase 9, the log: the request id on the answer, the route's log hooks, then the
    /// request's metrics, access-log line and held places handed to the response body, which
    /// records them (and gives the places back) when it ends; a body of the proxy's own is
    /// recorded at once.
    fn log(
        &self,
        mut response: Response<ProxyBody>,
        context: &mut RequestContext<'_>,
        client: &ClientInfo,
        measure: Measure,
    ) -> Response<ProxyBody> {
        response
            .headers_mut()
            .insert(X_REQUEST_ID, context.request_id.clone());
        if let Some(filters) = context
            .target
            .map(|target| Filters::of(target.policy, &self.services))
            .filter(|filters| !filters.chain().is_empty())
        {
            let (mut head, body) = response.into_parts();
            for filter in filters.chain() {
                filter.on_log(context, &mut head);
            }
            response = Response::from_parts(head, body);
        }
        let completion = self.completion(&response, context, client, measure);
        match response.body_mut() {
            Either::Left(body) => body.on_end(completion),
            Either::Right(body) => {
                let length = hyper::body::Body::size_hint(body).exact().unwrap_or(0);
                completion.finish(length);
            }
        }
        response
    }

    /// What the request records once its response ends.
    fn completion(
        &self,
        response: &Response<ProxyBody>,
        context: &mut RequestContext<'_>,
        client: &ClientInfo,
        measure: Measure,
    ) -> Completion {
        let metrics = &self.table.runtime().metrics;
        let route = match &context.target {
            Some(target) => metrics.route(target),
            None => metrics.unrouted(),
        };
        let quiet = context
            .target
            .is_some_and(|target| target.policy.access_log_off);
        if let Some(trace) = &measure.trace {
            trace.answered(response.status());
        }
        let trace_id = measure.trace.as_ref().and_then(RequestTrace::trace_id);
        let log = match (&self.access_log, measure.record) {
            (Some(sink), Some(mut record)) if !quiet => {
                record.status = response.status().as_u16();
                record.host = context.host.clone();
                record.upstream = context.endpoint.clone().or_else(|| context.tried.clone());
                record.upstream_status = context.upstream_status.map(|s| s.as_u16());
                record.attempts = context.attempts;
                record.route = context.target.map(|t| t.ingress).unwrap_or_default().into();
                record.request_id = context.request_id.clone();
                record.trace_id = trace_id;
                if let Some(session) = &client.tls {
                    record.tls_version = Some(session.version);
                    record.sni = session.sni.clone();
                }
                Some(Box::new((sink.clone(), record)))
            }
            _ => None,
        };
        Completion {
            started: measure.started,
            method: measure.method,
            status: response.status(),
            request_bytes: measure.request_bytes,
            route,
            log,
            held: std::mem::take(&mut context.held),
            trace: measure.trace,
        }
    }
}

/// Why the proxy answered the request itself, for the debug log (with the request's trace id
/// when it is traced).
fn log_stop(stop: &Stop, client: &ClientInfo, trace_id: Option<opentelemetry::trace::TraceId>) {
    let trace_id = trace_id.map(tracing::field::display);
    match stop {
        Stop::Answer(answer) => {
            let LocalAnswer { status, .. } = answer.as_ref();
            tracing::debug!(client = %client.client, %status, trace_id, "answered by the proxy");
        }
        Stop::Fail(error) => {
            tracing::debug!(client = %client.client, %error, source = ?std::error::Error::source(error), trace_id, "answered by proxy");
        }
    }
}

/// What the log phase needs from the start of a request.
struct Measure {
    started: Instant,
    method: &'static str,
    request_bytes: u64,
    /// The access-log line, begun from the request head when the access log is on.
    record: Option<AccessRecord>,
    /// The request's trace, when the proxy traces.
    trace: Option<RequestTrace>,
}

/// Closes idle upstream connections as they expire, until the runtime is gone.
async fn reap_idle_connections(runtime: std::sync::Weak<Runtime>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        match runtime.upgrade() {
            Some(runtime) => runtime.reap_idle_connections(),
            None => return,
        }
    }
}
