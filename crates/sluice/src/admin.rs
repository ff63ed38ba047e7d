//! The admin listener: the dashboard, liveness and readiness, metrics, the JSON API (routes, backends, status, diagnostics) and the run-time log level, behind an optional bearer token.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use serde::Serialize;
use sluice_config::{Diagnostic, Severity};
use sluice_proxy::ClientBody;
use sluice_routing::{Backend, BackendMode, Condition, RoutePolicy, RoutingTable, TableView};
use sluice_sources::kubernetes::WatchReport;

use crate::control::{Activity, ControlPlane};

/// The dashboard: one page, no build step, nothing fetched from elsewhere.
const DASHBOARD: &str = include_str!("dashboard.html");

/// The admin listener's state: the control plane and the token, when one is required.
pub struct Admin {
    control: Arc<ControlPlane>,
    token: Option<String>,
    /// The `--metrics` listener: /metrics and the probes only, with no token.
    metrics_only: bool,
}

/// `GET /api/routes`: the table and every diagnostic.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RoutesResponse<'a> {
    generation: u64,
    #[serde(flatten)]
    table: TableView,
    diagnostics: &'a [Diagnostic],
}

/// `GET /api/status`: readiness, the watches' states, the latest compile and propagation,
/// and the requests answered.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusResponse {
    ready: bool,
    draining: bool,
    generation: u64,
    /// `null` when serving from a manifest directory.
    watches: Option<Vec<WatchReport>>,
    #[serde(flatten)]
    activity: Activity,
    requests: RequestTotals,
    errors: usize,
    warnings: usize,
}

#[derive(Serialize)]
struct RequestTotals {
    total: u64,
    /// Answered with a 5xx.
    errors: u64,
}

/// `GET /api/diagnostics`.
#[derive(Serialize)]
struct DiagnosticsResponse<'a> {
    generation: u64,
    diagnostics: &'a [Diagnostic],
}

/// `GET /api/backends`: every backend with its mode, policy and endpoints as the proxy sees
/// them.
#[derive(Serialize)]
struct BackendsResponse {
    generation: u64,
    backends: Vec<BackendReport>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BackendReport {
    id: String,
    namespace: String,
    service: String,
    port: String,
    /// `endpoints`, `service-upstream`, `fallback` (endpoints, then the ClusterIP) or
    /// `external-name`.
    mode: &'static str,
    policy: PolicyReport,
    /// What the mode costs, in words.
    notes: Vec<String>,
    endpoints: Vec<EndpointEntry>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PolicyReport {
    balancer: String,
    sticky: Option<String>,
    tries: u32,
    retry_on: String,
    upstream: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EndpointEntry {
    address: String,
    /// `ready`, `serving_terminating` or `ejected`.
    state: &'static str,
    in_flight: u32,
    latency_ms: Option<f64>,
    /// Attempts sent, and those that failed or answered 5xx.
    requests: u64,
    failures: u64,
}

impl Admin {
    pub fn new(control: Arc<ControlPlane>, token: Option<String>) -> Self {
        Self {
            control,
            token,
            metrics_only: false,
        }
    }

    /// The `--metrics` listener: /metrics, /healthz and /readyz, for probes and Prometheus;
    /// nothing of the dashboard or the JSON API.
    pub fn metrics_only(control: Arc<ControlPlane>) -> Self {
        Self {
            control,
            token: None,
            metrics_only: true,
        }
    }

    /// Answers one admin request.
    pub async fn handle(self: Arc<Self>, request: Request<ClientBody>) -> Response<Full<Bytes>> {
        let path = request.uri().path().to_owned();
        if let Some(answer) = self.probe(&path) {
            return answer;
        }
        if self.metrics_only {
            return match (request.method(), path.as_str()) {
                (&Method::GET | &Method::HEAD, "/metrics") => metrics(&self.control, &request),
                _ => text(
                    StatusCode::NOT_FOUND,
                    "not found: this listener (--metrics) serves only /metrics, /healthz and /readyz; the dashboard and the JSON API are on --admin\n",
                ),
            };
        }
        if !self.authorized(&request) {
            let mut response = text(
                StatusCode::UNAUTHORIZED,
                "unauthorized: send Authorization: Bearer <the --admin-token>, or open the dashboard as /?token=<the --admin-token>\n",
            );
            response.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"sluice\""),
            );
            return response;
        }
        match (request.method().clone(), path.as_str()) {
            (Method::PUT, "/log-level") => set_log_level(request).await,
            (Method::GET | Method::HEAD, "/log-level") => {
                text(StatusCode::OK, &format!("{}\n", crate::logging::level()))
            }
            (_, "/log-level") => text(StatusCode::METHOD_NOT_ALLOWED, "only GET and PUT\n"),
            (Method::GET | Method::HEAD, _) => self.read(&request, &path),
            _ => text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n"),
        }
    }

    /// `/healthz` and `/readyz`, which never need the token (kubelet probes have none).
    fn probe(&self, path: &str) -> Option<Response<Full<Bytes>>> {
        let control = &self.control;
        Some(match path {
            "/healthz" => text(StatusCode::OK, "ok\n"),
            "/readyz" if control.is_draining() => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: shutting down, requests are still served\n",
            ),
            "/readyz" if control.is_ready() => text(StatusCode::OK, "ready\n"),
            "/readyz" => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: no configuration published yet\n",
            ),
            _ => return None,
        })
    }

    fn read(&self, request: &Request<ClientBody>, path: &str) -> Response<Full<Bytes>> {
        let control = &self.control;
        match path {
            "/" | "/index.html" => dashboard(),
            "/api/routes" => routes(control),
            "/api/status" => status(control),
            "/api/backends" => backends(control),
            "/api/diagnostics" => diagnostics(control),
            "/api/gateways" => gateways(control),
            "/metrics" => metrics(control, request),
            _ => text(
                StatusCode::NOT_FOUND,
                "not found; try / (the dashboard), /healthz, /readyz, /metrics, /api/routes, /api/backends, /api/status, /api/diagnostics, /api/gateways or /log-level\n",
            ),
        }
    }

    /// Whether the request carries the token: as `Authorization: Bearer`, or for the dashboard
    /// page (which a browser opens by address) as `?token=`.
    fn authorized(&self, request: &Request<ClientBody>) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let bearer = request
            .headers()
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| {
                let (scheme, credentials) = value.split_once(' ')?;
                scheme
                    .eq_ignore_ascii_case("bearer")
                    .then(|| credentials.trim())
            });
        let from_query = match request.uri().path() {
            "/" | "/index.html" => request.uri().query().and_then(|query| {
                query
                    .split('&')
                    .find_map(|pair| pair.strip_prefix("token="))
            }),
            _ => None,
        };
        bearer
            .or(from_query)
            .is_some_and(|given| constant_time_eq(given.as_bytes(), token.as_bytes()))
    }
}

/// Compares the SHA-256 digests of both without stopping at the first difference, so the time
/// taken says nothing about how much of a guess, or of its length, was right.
fn constant_time_eq(given: &[u8], expected: &[u8]) -> bool {
    use ring::digest::{digest, SHA256};
    let (given, expected) = (digest(&SHA256, given), digest(&SHA256, expected));
    let difference = given
        .as_ref()
        .iter()
        .zip(expected.as_ref())
        .fold(0u8, |difference, (a, b)| difference | (a ^ b));
    difference == 0
}

/// `PUT /log-level` with a level or filter as the body.
async fn set_log_level(request: Request<ClientBody>) -> Response<Full<Bytes>> {
    let body = match Limited::new(request.into_body(), 4096).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return text(StatusCode::BAD_REQUEST, "the body must be a log level\n"),
    };
    let Ok(level) = std::str::from_utf8(&body) else {
        return text(
            StatusCode::BAD_REQUEST,
            "the log level must be UTF-8 text\n",
        );
    };
    match crate::logging::set_level(level) {
        Ok(()) => text(StatusCode::OK, &format!("log level: {}\n", level.trim())),
        Err(error) => text(StatusCode::BAD_REQUEST, &format!("{error}\n")),
    }
}

fn dashboard() -> Response<Full<Bytes>> {
    let mut response = with_type(
        Bytes::from_static(DASHBOARD.as_bytes()),
        StatusCode::OK,
        "text/html; charset=utf-8",
    );
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn routes(control: &ControlPlane) -> Response<Full<Bytes>> {
    let status = control.status();
    json(&RoutesResponse {
        generation: status.generation,
        table: TableView::of(&control.table().load()),
        diagnostics: &status.diagnostics,
    })
}

fn diagnostics(control: &ControlPlane) -> Response<Full<Bytes>> {
    let status = control.status();
    json(&DiagnosticsResponse {
        generation: status.generation,
        diagnostics: &status.diagnostics,
    })
}

/// `/api/gateways`: the Gateway API status, with listeners whose socket could not be bound
/// marked `PortUnavailable`.
fn gateways(control: &ControlPlane) -> Response<Full<Bytes>> {
    #[derive(Serialize)]
    struct GatewaysResponse {
        generation: u64,
        #[serde(flatten)]
        report: sluice_config::gateway::status::GatewayReport,
    }
    json(&GatewaysResponse {
        generation: control.status().generation,
        report: control.gateway_report(),
    })
}

fn status(control: &ControlPlane) -> Response<Full<Bytes>> {
    let status = control.status();
    let count = |severity| {
        status
            .diagnostics
            .iter()
            .filter(|d| d.severity == severity)
            .count()
    };
    let (total, errors) = control.table().runtime().metrics().answered();
    json(&StatusResponse {
        ready: control.is_ready(),
        draining: control.is_draining(),
        generation: status.generation,
        watches: control.watch_reports(),
        activity: control.activity(),
        requests: RequestTotals { total, errors },
        errors: count(Severity::Error),
        warnings: count(Severity::Warning),
    })
}

fn backends(control: &ControlPlane) -> Response<Full<Bytes>> {
    let table = control.table().load();
    let policies = policies_by_backend(&table);
    let runtime = control.table().runtime();
    let backends = table
        .service_backends()
        .map(|backend| {
            let policy = policies
                .get(backend.id().as_str())
                .copied()
                .unwrap_or(&DEFAULT_POLICY);
            backend_report(backend, policy, runtime)
        })
        .collect();
    json(&BackendsResponse {
        generation: control.status().generation,
        backends,
    })
}

static DEFAULT_POLICY: std::sync::LazyLock<RoutePolicy> =
    std::sync::LazyLock::new(RoutePolicy::default);

/// The policy of the first route to each backend (routes of one Ingress share it).
fn policies_by_backend(table: &RoutingTable) -> BTreeMap<&str, &RoutePolicy> {
    let mut policies = BTreeMap::new();
    for routes in table.hosts().into_values() {
        for route in routes {
            if let Some(backend) = table.backend(route.backend) {
                policies
                    .entry(backend.id().as_str())
                    .or_insert(&*route.policy);
            }
        }
    }
    policies
}

fn backend_report(
    backend: &Backend,
    policy: &RoutePolicy,
    runtime: &sluice_proxy::Runtime,
) -> BackendReport {
    let (namespace, service, port) = backend.id().parts();
    let mode = match (backend.mode(), policy.fallback.is_some()) {
        (BackendMode::Endpoints, true) => "fallback",
        (BackendMode::Endpoints, false) => "endpoints",
        (BackendMode::ServiceUpstream, _) => "service-upstream",
        (BackendMode::ExternalName, _) => "external-name",
    };
    let mut notes = Vec::new();
    if backend.mode() == BackendMode::ServiceUpstream {
        notes.push(
            "service-upstream: one address (the ClusterIP); kube-proxy picks the pod, so sticky sessions, the balancer choice and retries on another pod do not apply".to_owned(),
        );
    }
    if mode == "fallback" {
        notes.push(
            "fallback: pods first; the ClusterIP only when no pod attempt is left".to_owned(),
        );
    }
    let set = backend.endpoints().load();
    let endpoints = set
        .iter()
        .map(|endpoint| {
            let report = runtime.endpoint_report(endpoint);
            let state = match set.condition(endpoint) {
                _ if report.ejected => "ejected",
                Some(Condition::Ready) => "ready",
                _ => "serving_terminating",
            };
            EndpointEntry {
                address: endpoint.authority().as_str().to_owned(),
                state,
                in_flight: report.in_flight,
                latency_ms: report.latency.map(|l| l.as_secs_f64() * 1e3),
                requests: report.attempts,
                failures: report.failures,
            }
        })
        .collect();
    BackendReport {
        id: backend.id().to_string(),
        namespace: namespace.to_owned(),
        service: service.to_owned(),
        port: port.to_owned(),
        mode,
        policy: policy_report(policy),
        notes,
        endpoints,
    }
}

fn policy_report(policy: &RoutePolicy) -> PolicyReport {
    let balancer = serde_json::to_value(&policy.balancer)
        .ok()
        .map(|value| match value {
            serde_json::Value::String(name) => name,
            other => other.to_string(),
        })
        .unwrap_or_default();
    PolicyReport {
        balancer,
        sticky: policy
            .session
            .as_ref()
            .and_then(sluice_routing::SessionAffinity::cookie)
            .map(|cookie| cookie.name.clone()),
        tries: policy.retry.tries,
        retry_on: retry_on_text(&policy.retry.on),
        upstream: match &policy.upstream {
            sluice_routing::UpstreamProtocol::Http1 => "http1",
            sluice_routing::UpstreamProtocol::H2c => "h2c",
            sluice_routing::UpstreamProtocol::Tls(_) => "tls",
        },
    }
}

/// `proxy-next-upstream`'s spelling of the retry conditions.
fn retry_on_text(on: &sluice_routing::RetryOn) -> String {
    if on.off {
        return "off".to_owned();
    }
    let conditions = [
        (on.error, "error"),
        (on.timeout, "timeout"),
        (on.http_500, "http_500"),
        (on.http_502, "http_502"),
        (on.http_503, "http_503"),
        (on.http_504, "http_504"),
        (on.http_429, "http_429"),
        (on.non_idempotent, "non_idempotent"),
    ];
    let named: Vec<&str> = conditions
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
    named.join(" ")
}

/// The Prometheus text format, or OpenMetrics when the scraper asks for it.
fn metrics(control: &ControlPlane, request: &Request<ClientBody>) -> Response<Full<Bytes>> {
    let wants_openmetrics = request
        .headers()
        .get_all(ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|accept| accept.contains("application/openmetrics-text"));
    let metrics = control.metrics();
    if wants_openmetrics {
        with_type(
            Bytes::from(metrics.encode_openmetrics()),
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )
    } else {
        with_type(
            Bytes::from(metrics.encode_prometheus()),
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
        )
    }
}

fn json(body: &impl Serialize) -> Response<Full<Bytes>> {
    match serde_json::to_vec_pretty(body) {
        Ok(json) => with_type(Bytes::from(json), StatusCode::OK, "application/json"),
        Err(error) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot render JSON: {error}\n"),
        ),
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    with_type(
        Bytes::copy_from_slice(body.as_bytes()),
        status,
        "text/plain; charset=utf-8",
    )
}

fn with_type(body: Bytes, status: StatusCode, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
