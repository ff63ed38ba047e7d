//! The request pipeline: the request phases of [`crate::filters`] in order, from the route to the log.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_TYPE, HOST, LOCATION};
use http::request::Parts;
use http::{HeaderValue, Request, Response, StatusCode, Uri, Version};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use sluice_routing::{
    GatewayMiss, RequestFacts, RoutePolicy, RoutingTable, Target, UpstreamProtocol,
};

use crate::error::ProxyError;
use crate::filters::error_pages::{self, ErrorPageRequest};
use crate::filters::limits::ConnectionSlot;
use crate::filters::mirror::MirrorCopy;
use crate::filters::traefik::ChainRequest;
use crate::filters::{Filters, ProxyScope, RequestContext};
use crate::headers::{join_cookies, strip_hop_by_hop};
use crate::request::forwarded::{Forwarding, X_REQUEST_ID};
use crate::request::grpc;
use crate::request::inbound::Inbound;
use crate::request::options::ProxyOptions;
use crate::request::table_handle::TableHandle;
use crate::server::{ClientCertificate, ClientInfo, ShutdownSignal, TlsInfo};
use crate::telemetry;
use crate::telemetry::access_log::{AccessLog, AccessRecord};
use crate::telemetry::completion::{declared_length, Completion};
use crate::upstream::attempt::{may_resend, resendable, Answer, AttemptSettings, Exchange};
use crate::upstream::body::{
    BodyLimits, EndpointBody, RequestBody, TrackedBody, DEFAULT_REPLAY_LIMIT,
};
use crate::upstream::connect::Wire;
use crate::upstream::health::InFlight;
use crate::upstream::outbound::OutboundClient;
use crate::upstream::retry_buffer::RetryBuffer;
use crate::upstream::runtime::Runtime;
use crate::upstream::session_key::SessionKey;
use crate::upstream::upgrade::{
    requested_upgrade, restore_upgrade_headers, tunnel, OpenTunnels, TunnelShutdown,
};

/// A response body: the upstream's, streamed through, or the proxy's own short text.
pub type ProxyBody = Either<TrackedBody, Full<Bytes>>;

/// The proxy: the published table and runtime state, plus its settings. One per process,
/// shared by all connections.
pub struct Proxy {
    table: TableHandle,
    session_key: SessionKey,
    options: ProxyOptions,
    replay_limit: usize,
    /// When upgraded connections must end on shutdown (set once by `watch_shutdown`).
    tunnel_shutdown: OnceLock<TunnelShutdown>,
    tunnels: Arc<OpenTunnels>,
    access_log: Option<Arc<AccessLog>>,
    outbound: OutboundClient,
    retry_buffer: RetryBuffer,
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
        Self {
            table,
            session_key: options
                .session_secret
                .as_deref()
                .map(SessionKey::new)
                .unwrap_or_default(),
            options: options.clone(),
            replay_limit: DEFAULT_REPLAY_LIMIT,
            tunnel_shutdown: OnceLock::new(),
            tunnels: Arc::default(),
            access_log: None,
            outbound: OutboundClient::default(),
            retry_buffer: RetryBuffer::new(
                options.response_retry_buffer,
                options.response_retry_buffer_total,
            ),
        }
    }

    /// Writes a line per request to `log`.
    pub fn with_access_log(mut self, log: Arc<AccessLog>) -> Self {
        self.access_log = Some(log);
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
        let _ = self.tunnel_shutdown.set(TunnelShutdown {
            signal: shutdown,
            grace_period,
        });
    }

    /// Handles one request from `client` through the request phases ([`crate::filters`]).
    /// Never fails: every error becomes a short response. Either way the response carries the
    /// request's `X-Request-ID`.
    pub async fn handle(
        &self,
        request: Request<Incoming>,
        client: ClientInfo,
    ) -> Response<ProxyBody> {
        let started = Instant::now();
        let forwarding =
            Forwarding::decide(request.headers(), &client, &self.options.trusted_proxies);
        let grpc_call = grpc::is_grpc(request.headers());
        let measure = Measure {
            started,
            method: telemetry::method(request.method()),
            request_bytes: declared_length(request.headers()),
            record: self
                .access_log
                .as_ref()
                .map(|_| AccessRecord::begin(&request, forwarding.real_client)),
        };
        let table = self.table.load();
        let mut context = RequestContext {
            client: &client,
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
            cors_origin: None,
            auth_cookies: None,
            slots: Vec::new(),
            middleware: None,
        };
        // Boxed: the forwarding future is large (4.8 KB), and hyper keeps the handler's
        // future in a per-connection box while the connection lives. Boxing it here makes
        // that 1.2 KB, and a moved future is a pointer rather than a copy (perf showed 4 % of
        // the CPU in memmove before).
        let forward = Box::pin(self.forward(request, &table, &forwarding, &mut context));
        let mut response = match forward.await {
            Ok(response) => response,
            Err(error) => {
                tracing::debug!(client = %client.client, %error, source = ?std::error::Error::source(&error), "answered by proxy");
                let answered_as_http = matches!(
                    error,
                    ProxyError::Redirect { .. }
                        | ProxyError::Preflight(_)
                        | ProxyError::AuthDenied { .. }
                        | ProxyError::Answered(_)
                );
                match grpc_call && !answered_as_http {
                    true => grpc::error_response(&error, Either::Right(Full::new(Bytes::new()))),
                    false => error_response(&error),
                }
            }
        };
        response
            .headers_mut()
            .insert(X_REQUEST_ID, context.request_id.clone());
        if let Some(grant) = &context.auth_cookies {
            auth_cookies(&mut response, grant);
        }
        // Log phase.
        if let Some(target) = &context.target {
            Filters::of(target.policy).on_log(&context, response.status());
        }
        let slots = std::mem::take(&mut context.slots);
        self.measure(&mut response, &context, measure, slots);
        response
    }

    /// Hands the request's metrics, access-log line and `limit-connections` place to its
    /// response body, which records them (and gives the place back) when it ends; a body of
    /// the proxy's own is recorded at once.
    fn measure(
        &self,
        response: &mut Response<ProxyBody>,
        context: &RequestContext<'_>,
        measure: Measure,
        slots: Vec<ConnectionSlot>,
    ) {
        let metrics = &self.table.runtime().metrics;
        let route = match &context.target {
            Some(target) => metrics.route(target),
            None => metrics.unrouted(),
        };
        let quiet = context
            .target
            .is_some_and(|target| target.policy.access_log_off);
        let log = match (&self.access_log, measure.record) {
            (Some(sink), Some(mut record)) if !quiet => {
                record.status = response.status().as_u16();
                record.host = context.host.clone();
                record.upstream = context.endpoint.clone().or_else(|| context.tried.clone());
                record.upstream_status = context.upstream_status.map(|s| s.as_u16());
                record.attempts = context.attempts;
                record.route = context.target.map(|t| t.ingress).unwrap_or_default().into();
                record.request_id = context.request_id.clone();
                if let Some(session) = &context.client.tls {
                    record.tls_version = Some(session.version);
                    record.sni = session.sni.clone();
                }
                Some(Box::new((sink.clone(), record)))
            }
            _ => None,
        };
        let completion = Completion {
            started: measure.started,
            method: measure.method,
            status: response.status(),
            request_bytes: measure.request_bytes,
            route,
            log,
            slots,
        };
        match response.body_mut() {
            Either::Left(body) => body.on_end(completion),
            Either::Right(body) => {
                let length = hyper::body::Body::size_hint(body).exact().unwrap_or(0);
                completion.finish(length);
            }
        }
    }

    /// The phases from route to response filters.
    async fn forward<'r>(
        &self,
        request: Request<Incoming>,
        table: &'r RoutingTable,
        forwarding: &Forwarding,
        context: &mut RequestContext<'r>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        // Route.
        let mut request = request;
        let upgrade = requested_upgrade(&request);
        let client_upgrade = upgrade.as_ref().map(|_| hyper::upgrade::on(&mut request));
        let (mut parts, body) = request.into_parts();
        let inbound = Inbound::read(&parts)?;
        // The route, its canary when the canary takes the request, and its default backend
        // when its own backend has no endpoints.
        let routed = canary_or_main(route(table, &inbound, &parts, context)?, &parts.headers);
        let (target, replaced) = error_pages::serving_target(table, routed);
        context.target = Some(target);
        let filters = Filters::of(target.policy);
        // Request filters.
        filters.on_request(context, &parts, &self.scope())?;
        // Access.
        let grant = match filters.access() {
            // Boxed, as the other rare phases: their futures would otherwise grow every
            // request's.
            Some(access) => Some(Box::pin(access.check(context, &parts, &self.outbound)).await?),
            None => None,
        };
        // Upstream request.
        let wire = match &target.policy.upstream {
            UpstreamProtocol::Http1 => Wire::Http1,
            protocol => Wire::for_route(protocol, inbound.host_name())?,
        };
        let deadline = grpc::timeout(&parts.headers);
        let mirror = filters
            .mirror()
            .and_then(|mirror| Some((mirror, mirror.head(context, &parts)?)));
        // Only a route with custom error pages keeps the URI as sent (for X-Original-URI).
        let original_uri = target
            .policy
            .error_pages
            .as_ref()
            .and_then(|_| parts.uri.path_and_query().map(|t| t.as_str().to_owned()));
        let forwarded_for = filters
            .middlewares()
            .filter(|chain| chain.reads_forwarded_for())
            .and_then(|_| forwarding.trusted_forwarded_for(&parts.headers));
        prepare_upstream_head(&mut parts, inbound, context, forwarding);
        filters.on_upstream_request(context, &mut parts);
        // Traefik middlewares, in their order, on the request as it goes upstream.
        if let Some(chain) = filters.middlewares() {
            let mut request = ChainRequest {
                context: &mut *context,
                upstream: &mut parts,
                forwarded_for: forwarded_for.as_deref(),
            };
            Box::pin(chain.on_request(&mut request, &self.outbound)).await?;
        }
        // Gateway API mirrors copy the request as the route's filters left it, as Envoy's do.
        let gateway_copies = match &target.policy.gateway {
            Some(gateway) if !gateway.mirrors.is_empty() => {
                crate::filters::mirror::gateway_mirror_heads(&gateway.mirrors, table, &parts)
            }
            _ => Vec::new(),
        };
        if let Some(grant) = grant {
            grant.apply(&mut parts.headers);
            context.auth_cookies = (!grant.cookies.is_empty()).then_some(grant);
        }
        if let Some(protocol) = upgrade {
            restore_upgrade_headers(&mut parts.headers, protocol);
        }
        if let Some(replaced) = replaced {
            let original_uri = original_uri.as_deref().unwrap_or("/");
            error_pages::tell_default_backend(&mut parts.headers, &target, replaced, original_uri);
        }
        let error_page =
            ErrorPageRequest::capture(&target, &parts, original_uri.as_deref().unwrap_or("/"));
        let body = self.prepare_body(&parts, body, target.policy).await?;
        if let Some((mirror, head)) = mirror {
            mirror.send(head, &body, &self.outbound);
        }
        if !gateway_copies.is_empty() {
            crate::filters::mirror::send_gateway_copies(gateway_copies, &body, &self.outbound);
        }
        // Choose an endpoint and send.
        let settings = AttemptSettings {
            runtime: self.table.runtime(),
            connect_timeout: self.options.connect_timeout,
            response_header_timeout: self.options.response_header_timeout,
            body_idle_timeout: self.options.body_idle_timeout,
            upstream_idle_timeout: self.options.upstream_idle_timeout,
            retry_buffer: &self.retry_buffer,
        };
        let exchange = Exchange::new(
            settings,
            target.backend,
            target.policy,
            parts,
            body,
            forwarding.real_client,
            context.pinned.clone(),
        )
        .over(wire)
        .run();
        // The client's gRPC deadline bounds every attempt together.
        let attempted = match deadline {
            None => exchange.await,
            Some(deadline) => tokio::time::timeout(deadline, exchange)
                .await
                .map_err(|_elapsed| ProxyError::ResponseTimeout)?,
        };
        context.attempts = attempted.attempts;
        context.tried = attempted.last_tried;
        let result = match filters
            .middlewares()
            .filter(|chain| chain.has_error_pages())
        {
            Some(chain) => {
                let scope = (table, &target, settings, forwarding.real_client);
                Box::pin(traefik_error_page(chain, attempted.result, context, scope)).await
            }
            None => attempted.result,
        };
        let mut answer = result?;
        let status = answer.response.status();
        if let Some(request) = error_page
            .filter(|_| ErrorPageRequest::intercepts(target.policy.error_pages.as_ref(), status))
        {
            let client = forwarding.real_client;
            let page = Box::pin(request.ask(status, table, &target, settings, client)).await;
            if let Some(page) = page {
                answer = page;
            }
        }
        // Response filters.
        Ok(self.respond(answer, filters, context, client_upgrade))
    }

    /// Joins the client's and the endpoint's connections once both have switched protocols.
    fn open_tunnel(&self, client: OnUpgrade, endpoint: OnUpgrade, in_flight: InFlight) {
        tokio::spawn(tunnel(
            client,
            endpoint,
            in_flight,
            self.options.websocket_idle_timeout,
            self.tunnel_shutdown.get().cloned(),
            self.tunnels.open(),
        ));
    }

    fn scope(&self) -> ProxyScope<'_> {
        ProxyScope {
            session_key: &self.session_key,
            https_redirect_port: self.options.https_redirect_port,
        }
    }

    /// Refuses a body over the route's limit, and buffers it for replay when it is small and
    /// could be sent again (by a retry, or on a new connection when a pooled one was stale).
    async fn prepare_body(
        &self,
        parts: &Parts,
        body: Incoming,
        policy: &RoutePolicy,
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
        let may_replay =
            may_resend(parts, policy) || resendable(parts) || MirrorCopy::wants_body(policy);
        RequestBody::prepare(parts, body, limits, may_replay, self.replay_limit).await
    }

    /// Drops the upstream hop's headers, runs the route's response filters, and counts the
    /// endpoint's load until the body ends.
    fn respond(
        &self,
        answer: Answer,
        filters: &Filters,
        context: &mut RequestContext<'_>,
        client_upgrade: Option<OnUpgrade>,
    ) -> Response<ProxyBody> {
        let Answer {
            mut response,
            endpoint,
        } = answer;
        context.upstream_status = Some(response.status());
        let switched = match client_upgrade {
            Some(client) if response.status() == StatusCode::SWITCHING_PROTOCOLS => {
                let protocol = response.headers().get(http::header::UPGRADE).cloned();
                Some((client, hyper::upgrade::on(&mut response), protocol))
            }
            _ => None,
        };
        let (mut head, body) = response.into_parts();
        strip_hop_by_hop(&mut head.headers);
        // A proxy answers in its own HTTP version (RFC 9110 §6.2), whatever the pod spoke: an
        // HTTP/1.0 pod's answer keeps the client's connection alive, a body it ends by closing
        // going out chunked.
        head.version = http::Version::HTTP_11;
        context.endpoint = Some(endpoint);
        filters.on_response(context, &mut head, &self.scope());
        if let Some((client, upstream, protocol)) = switched {
            if let Some(protocol) = protocol {
                restore_upgrade_headers(&mut head.headers, protocol);
            }
            // The connection is the tunnel's now: it never goes back to the pool. (A switch of
            // protocols is never held, so its body is always the streaming one.)
            if let EndpointBody::Streaming(body) = body {
                if let Some(in_flight) = body.into_tunnel() {
                    self.open_tunnel(client, upstream, in_flight);
                }
            }
            return Response::from_parts(head, Either::Right(Full::new(Bytes::new())));
        }
        Response::from_parts(head, Either::Left(TrackedBody::new(body)))
    }
}

/// A Traefik `errors` middleware's page in place of an answer (the pod's, or the proxy's own
/// failure) whose status it catches; the answer itself when none catches it or the error
/// Service does not answer.
async fn traefik_error_page(
    chain: &crate::filters::traefik::Chain,
    result: Result<Answer, ProxyError>,
    context: &RequestContext<'_>,
    (table, target, settings, client): (
        &RoutingTable,
        &Target<'_>,
        AttemptSettings<'_>,
        std::net::IpAddr,
    ),
) -> Result<Answer, ProxyError> {
    let status = match &result {
        Ok(answer) => answer.response.status(),
        Err(error) => error.status(),
    };
    let Some(capture) = context
        .middleware
        .as_ref()
        .and_then(|state| state.error_page.as_deref())
    else {
        return result;
    };
    let Some(pages) = chain.error_pages().find(|pages| pages.catches(status)) else {
        return result;
    };
    match pages
        .ask(capture, status, (table, target.policy), settings, client)
        .await
    {
        Some(page) => Ok(page),
        None => result,
    }
}

/// What the log phase needs from the start of a request.
struct Measure {
    started: Instant,
    method: &'static str,
    request_bytes: u64,
    /// The access-log line, begun from the request head when the access log is on.
    record: Option<AccessRecord>,
}

/// The route phase: 421 when the request's host has a TLS site whose terms differ from the
/// connection's, the `from-to-www-redirect` 308, then host and path, served on this listener
/// (else 404), and the trailing-slash 301.
fn route<'r>(
    table: &'r RoutingTable,
    inbound: &Inbound,
    parts: &http::request::Parts,
    context: &mut RequestContext<'r>,
) -> Result<Target<'r>, ProxyError> {
    if let Some(socket) = context.client.gateway_socket {
        return gateway_route(table, socket, inbound, parts, context);
    }
    let host = inbound.route_host();
    let tls_site = table.tls().site(&host);
    let over_tls = match &context.client.tls {
        Some(session) if !session.may_serve(tls_site) => {
            tracing::debug!(%host, sni = ?session.sni, "the request's host is served with another certificate: 421");
            return Err(ProxyError::Misdirected);
        }
        Some(session) => {
            if let Some(sent) = session.client_refusal() {
                return Err(ProxyError::ClientCertificate { sent });
            }
            true
        }
        None => false,
    };
    if let Some(to) = table.host_redirect(&host) {
        return Err(www_redirect(inbound, to, over_tls));
    }
    let target = table
        .lookup(&host, inbound.path())
        .filter(|target| target.policy.tls.listeners.serves(over_tls))
        .ok_or(ProxyError::NoRoute)?;
    if let Some(directory) = target
        .path
        .and_then(|path| path.slash_redirect(inbound.path()))
    {
        return Err(slash_redirect(inbound, &directory, over_tls));
    }
    context.host_has_tls = tls_site.is_some();
    context.host = inbound.host.clone();
    Ok(target)
}

/// The route phase on a Gateway listener's socket: the listener by hostname, then the first
/// rule in HTTPRoute precedence whose matches the request meets (else 404), then a backendRef
/// by weight (an invalid one answers 500).
fn gateway_route<'r>(
    table: &'r RoutingTable,
    socket: std::net::SocketAddr,
    inbound: &Inbound,
    parts: &http::request::Parts,
    context: &mut RequestContext<'r>,
) -> Result<Target<'r>, ProxyError> {
    let host = inbound.route_host();
    if let Some(sni) = context.client.tls.as_ref().and_then(|s| s.sni.as_deref()) {
        // The host must select the listener the handshake's server name did.
        let gateways = table.gateways();
        if gateways.listener_position(socket, sni) != gateways.listener_position(socket, &host) {
            return Err(ProxyError::Misdirected);
        }
    }
    let facts = RequestFacts {
        method: &parts.method,
        path: inbound.path(),
        query: inbound.target.query(),
        headers: &parts.headers,
    };
    let target = table
        .gateway_lookup(socket, &host, &facts, |total| fastrand::u32(1..=total))
        .map_err(|miss| match miss {
            GatewayMiss::NoRoute => ProxyError::NoRoute,
            GatewayMiss::NoBackend => ProxyError::InvalidBackendRef,
        })?;
    context.host = inbound.host.clone();
    Ok(target)
}

/// The route's canary when its rule takes this request (header, then cookie, then weight,
/// as ingress-nginx decides), else the route itself.
fn canary_or_main<'r>(target: Target<'r>, headers: &http::HeaderMap) -> Target<'r> {
    let Some(canary) = target.canary else {
        return target;
    };
    let rule = canary.rule;
    let header = rule
        .header
        .as_deref()
        .and_then(|name| headers.get(name))
        .map(HeaderValue::as_bytes);
    let cookie = rule
        .cookie
        .as_deref()
        .and_then(|name| crate::upstream::session_key::request_cookie(headers, name));
    if rule.chooses(header, cookie, |total| fastrand::u32(1..=total)) {
        target.to_canary()
    } else {
        target
    }
}

/// `from-to-www-redirect`: ingress-nginx's 308 to the rule host on the client's scheme, with
/// the request URI less one trailing slash (so `/` becomes nothing); the port the client
/// named is kept.
fn www_redirect(inbound: &Inbound, to: &str, over_tls: bool) -> ProxyError {
    let scheme = if over_tls { "https" } else { "http" };
    let port = inbound
        .host
        .to_str()
        .ok()
        .and_then(|host| host.rsplit_once(':'))
        .map(|(_, port)| port)
        .filter(|port| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()));
    let uri = inbound.target.as_str();
    let uri = uri.strip_suffix('/').unwrap_or(uri);
    let location = match port {
        Some(port) => format!("{scheme}://{to}:{port}{uri}"),
        None => format!("{scheme}://{to}{uri}"),
    };
    redirect_to(StatusCode::PERMANENT_REDIRECT, location)
}

/// nginx's answer to `/foo` on a location written `/foo/`: a 301 to the directory, on the
/// scheme and Host the client used, the query kept.
fn slash_redirect(inbound: &Inbound, directory: &str, over_tls: bool) -> ProxyError {
    let scheme = if over_tls { "https" } else { "http" };
    let host = inbound.host.to_str().unwrap_or_default();
    let location = match inbound.target.query() {
        Some(query) => format!("{scheme}://{host}{directory}?{query}"),
        None => format!("{scheme}://{host}{directory}"),
    };
    redirect_to(StatusCode::MOVED_PERMANENTLY, location)
}

/// The route phase's redirect to `location`; a location no header can carry (a Host with
/// bytes a header refuses) is a 404, as no route could serve it.
fn redirect_to(status: StatusCode, location: String) -> ProxyError {
    match HeaderValue::try_from(location) {
        Ok(location) => ProxyError::Redirect { status, location },
        Err(_) => ProxyError::NoRoute,
    }
}

/// The head the next hop gets, once for all attempts: this hop's headers removed, the
/// client's Host, the forwarding headers, and the normalised target in origin form.
fn prepare_upstream_head(
    parts: &mut Parts,
    inbound: Inbound,
    context: &RequestContext<'_>,
    forwarding: &Forwarding,
) {
    strip_hop_by_hop(&mut parts.headers);
    if parts.version == Version::HTTP_2 {
        join_cookies(&mut parts.headers);
    }
    parts.headers.insert(HOST, inbound.host.clone());
    forwarding.apply(
        &mut parts.headers,
        context.client,
        &inbound.host,
        &context.request_id,
    );
    parts.uri = Uri::from(inbound.target);
    if let Some(session) = &context.client.tls {
        let pass = context
            .target
            .is_some_and(|target| target.policy.tls.pass_client_certificate);
        client_certificate_headers(&mut parts.headers, session, pass);
    }
}

/// On a host that asks for client certificates: `ssl-client-verify` (`SUCCESS` or `NONE`)
/// and, when the route passes it on, `ssl-client-cert` (the PEM, URL-encoded as nginx's
/// `$ssl_client_escaped_cert`). Whatever the client sent under these names is dropped first.
fn client_certificate_headers(headers: &mut http::HeaderMap, session: &TlsInfo, pass: bool) {
    if session
        .site
        .as_ref()
        .is_none_or(|site| site.client_auth.is_none())
    {
        return;
    }
    headers.remove(SSL_CLIENT_CERT);
    let verified = match &session.client_certificate {
        ClientCertificate::Verified(leaf) => Some(leaf),
        _ => None,
    };
    let verify = if verified.is_some() {
        "SUCCESS"
    } else {
        "NONE"
    };
    headers.insert(SSL_CLIENT_VERIFY, HeaderValue::from_static(verify));
    if let (true, Some(certificate)) = (pass, verified) {
        if let Ok(value) = HeaderValue::try_from(escaped_pem(certificate)) {
            headers.insert(SSL_CLIENT_CERT, value);
        }
    }
}

const SSL_CLIENT_CERT: http::HeaderName = http::HeaderName::from_static("ssl-client-cert");
const SSL_CLIENT_VERIFY: http::HeaderName = http::HeaderName::from_static("ssl-client-verify");

/// A certificate as PEM, percent-encoded except RFC 3986's unreserved characters.
fn escaped_pem(certificate: &[u8]) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(certificate);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    let mut escaped = String::with_capacity(pem.len() * 3 / 2);
    for byte in pem.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            escaped.push(char::from(byte));
        } else {
            escaped.push_str(&format!("%{byte:02X}"));
        }
    }
    escaped
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

/// The auth service's `Set-Cookie` on the response: on successful and redirect answers only
/// (nginx's `add_header`), or on all with `auth-always-set-cookie`.
fn auth_cookies(response: &mut Response<ProxyBody>, grant: &crate::filters::access::Grant) {
    let status = response.status().as_u16();
    let added = matches!(
        status,
        200 | 201 | 204 | 206 | 301 | 302 | 303 | 304 | 307 | 308
    );
    if added || grant.cookies_always {
        for cookie in &grant.cookies {
            response
                .headers_mut()
                .append(http::header::SET_COOKIE, cookie.clone());
        }
    }
}

fn error_response(error: &ProxyError) -> Response<ProxyBody> {
    if let ProxyError::Answered(answer) = error {
        let mut response = Response::new(Either::Right(Full::new(answer.body.clone())));
        *response.status_mut() = answer.status;
        *response.headers_mut() = answer.headers.clone();
        return response;
    }
    let mut response = Response::new(Either::Right(Full::new(Bytes::from_static(
        error.body().as_bytes(),
    ))));
    *response.status_mut() = error.status();
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if error.closes_connection() {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    match error {
        ProxyError::Redirect { location, .. } => {
            headers.insert(LOCATION, location.clone());
        }
        ProxyError::Preflight(cors) => {
            for (name, value) in cors.iter() {
                headers.insert(name.clone(), value.clone());
            }
        }
        ProxyError::AuthDenied { headers: extra, .. } => {
            for (name, value) in extra.iter() {
                headers.append(name.clone(), value.clone());
            }
        }
        _ => {}
    }
    response
}
