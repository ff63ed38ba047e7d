//! The data plane's metrics: families registered once and exported from the first scrape, and per-route handles resolved on a route's first request and kept on the published route, so recording a request allocates nothing.

use std::hash::{Hash, Hasher};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::{Method, StatusCode, Version};
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, LabelSetEncoder, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use sluice_routing::Target;

/// A family exported from the first scrape: its `# HELP` and `# TYPE` lines appear before it
/// has a series, so that alerts and `rate()` see zero rather than absence (the registry leaves
/// out a family without series otherwise).
#[derive(Debug)]
pub(crate) struct Declared<M>(pub(crate) M);

impl<M: EncodeMetric> EncodeMetric for Declared<M> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }

    fn is_empty(&self) -> bool {
        false
    }
}

/// `namespace`, `ingress`, `service` and `port` of one route's series. Hashing uses a digest
/// computed once, so a lookup hashes eight bytes, not four strings.
#[derive(Debug, Eq)]
pub(crate) struct RouteLabels {
    namespace: Box<str>,
    ingress: Box<str>,
    service: Box<str>,
    port: Box<str>,
    digest: u64,
}

impl RouteLabels {
    fn new(namespace: &str, ingress: &str, service: &str, port: &str) -> Self {
        let mut hasher = std::hash::DefaultHasher::new();
        (namespace, ingress, service, port).hash(&mut hasher);
        Self {
            namespace: namespace.into(),
            ingress: ingress.into(),
            service: service.into(),
            port: port.into(),
            digest: hasher.finish(),
        }
    }

    fn of(target: &Target<'_>) -> Self {
        let (namespace, ingress) = target.ingress.split_once('/').unwrap_or(("", ""));
        let (backend_namespace, service, port) = target.backend.id().parts();
        let namespace = if namespace.is_empty() {
            backend_namespace
        } else {
            namespace
        };
        Self::new(namespace, ingress, service, port)
    }

    fn encode_into(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        [
            ("namespace", &*self.namespace),
            ("ingress", &*self.ingress),
            ("service", &*self.service),
            ("port", &*self.port),
        ]
        .encode(encoder)
    }
}

impl PartialEq for RouteLabels {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
            && self.namespace == other.namespace
            && self.ingress == other.ingress
            && self.service == other.service
            && self.port == other.port
    }
}

impl Hash for RouteLabels {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.digest);
    }
}

/// A route's labels, shared by its series.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RouteKey(Arc<RouteLabels>);

impl EncodeLabelSet for RouteKey {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode_into(encoder)
    }
}

/// A route's labels plus the request's method and status code.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RequestKey {
    route: Arc<RouteLabels>,
    method: &'static str,
    code: u16,
}

impl EncodeLabelSet for RequestKey {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        self.route.encode_into(encoder)?;
        [("method", self.method)].encode(encoder)?;
        [("code", self.code)].encode(encoder)
    }
}

/// The method as a label: the standard ones by name, any other as `other`, so a client cannot
/// create series at will.
pub(crate) fn method(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}

/// Builds histograms with a family's buckets.
#[derive(Clone, Copy, Debug)]
struct Buckets {
    start: f64,
    factor: f64,
    count: u16,
}

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(exponential_buckets(self.start, self.factor, self.count))
    }
}

/// 1 ms to about 65 s, doubling.
const DURATION_BUCKETS: Buckets = Buckets {
    start: 0.001,
    factor: 2.0,
    count: 17,
};
/// 64 bytes to 64 MiB, times four.
const SIZE_BUCKETS: Buckets = Buckets {
    start: 64.0,
    factor: 4.0,
    count: 11,
};

/// Why a retry was made: how the attempt before it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RetryReason {
    ConnectError,
    ConnectTimeout,
    UpstreamError,
    Timeout,
    Status,
    ResponseCut,
}

impl RetryReason {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::ConnectError => "connect_error",
            Self::ConnectTimeout => "connect_timeout",
            Self::UpstreamError => "upstream_error",
            Self::Timeout => "timeout",
            Self::Status => "status",
            Self::ResponseCut => "response_cut",
        }
    }
}

/// Every data-plane metric. Cloned families and counters share their values, so the registry
/// holds clones and the proxy records into these.
#[derive(Debug)]
pub struct ProxyMetrics {
    requests: Family<RequestKey, Counter>,
    duration: Family<RouteKey, Histogram, Buckets>,
    request_size: Family<RouteKey, Histogram, Buckets>,
    response_size: Family<RouteKey, Histogram, Buckets>,
    upstream_connect: Histogram,
    connect_errors: Family<Fixed<1>, Counter>,
    pub(crate) reused_connections: Counter,
    retries: Family<Fixed<1>, Counter>,
    /// Every retry, whatever its reason (not exported: the family's sum).
    retries_total: Counter,
    pub(crate) retry_budget_exhausted: Counter,
    pub(crate) ejections: Counter,
    pub(crate) fallbacks: Counter,
    pub(crate) stale_connection_resends: Counter,
    pub(crate) retry_buffer_full: Counter,
    /// The handles of requests that matched no route, resolved on the first such request.
    unrouted: OnceLock<Arc<RouteMetrics>>,
    /// Every request answered, and those answered 5xx (not exported: the family's sums, for
    /// the admin API).
    answered: Counter,
    server_errors: Counter,
}

impl Default for ProxyMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(DURATION_BUCKETS),
            request_size: Family::new_with_constructor(SIZE_BUCKETS),
            response_size: Family::new_with_constructor(SIZE_BUCKETS),
            // 100 µs to about 3 s, doubling.
            upstream_connect: Histogram::new(exponential_buckets(0.000_1, 2.0, 15)),
            connect_errors: Family::default(),
            reused_connections: Counter::default(),
            retries: Family::default(),
            retries_total: Counter::default(),
            retry_budget_exhausted: Counter::default(),
            ejections: Counter::default(),
            fallbacks: Counter::default(),
            stale_connection_resends: Counter::default(),
            retry_buffer_full: Counter::default(),
            unrouted: OnceLock::new(),
            answered: Counter::default(),
            server_errors: Counter::default(),
        }
    }
}

impl ProxyMetrics {
    /// Registers every family in `registry` (which should carry the `sluice` prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "requests",
            "Requests answered, by route, method and status code (routes are namespace, ingress, service and port; empty for requests that matched no route)",
            Declared(self.requests.clone()),
        );
        registry.register(
            "request_duration_seconds",
            "Seconds from a request's head to the last byte of its response",
            Declared(self.duration.clone()),
        );
        registry.register(
            "request_size_bytes",
            "Request body bytes, as declared by Content-Length",
            Declared(self.request_size.clone()),
        );
        registry.register(
            "response_size_bytes",
            "Response body bytes sent to the client",
            Declared(self.response_size.clone()),
        );
        registry.register(
            "upstream_connect_seconds",
            "Seconds a new upstream connection took to open (TCP, and TLS when the route uses it)",
            self.upstream_connect.clone(),
        );
        registry.register(
            "upstream_connect_errors",
            "Upstream connects that failed, by reason (refused, timeout, reset, unreachable, tls, other)",
            Declared(self.connect_errors.clone()),
        );
        registry.register(
            "upstream_reused_connections",
            "Attempts sent on a pooled keep-alive upstream connection",
            self.reused_connections.clone(),
        );
        registry.register(
            "retries",
            "Attempts sent to another endpoint after a failed one, by how the failed one ended",
            Declared(self.retries.clone()),
        );
        registry.register(
            "retry_budget_exhausted",
            "Retries not made because the backend's retry budget (20% over 10 s) was spent",
            self.retry_budget_exhausted.clone(),
        );
        registry.register(
            "endpoint_ejections",
            "Endpoints ejected after consecutive failed connects",
            self.ejections.clone(),
        );
        registry.register(
            "clusterip_fallbacks",
            "Requests sent to a Service's ClusterIP because no endpoint attempt was left (service-upstream: fallback)",
            self.fallbacks.clone(),
        );
        registry.register(
            "upstream_stale_connection_resends",
            "Requests sent again on a new connection because the endpoint closed a pooled keep-alive connection as the request went out",
            self.stale_connection_resends.clone(),
        );
        registry.register(
            "response_retry_buffer_full",
            "Responses that could have been held for a retry but streamed because the held bytes had reached --response-retry-buffer-total",
            self.retry_buffer_full.clone(),
        );
    }

    /// The handles of `target`'s route, kept on the route after its first request.
    pub(crate) fn route(&self, target: &Target<'_>) -> Arc<RouteMetrics> {
        let attached = target
            .telemetry
            .get_or_attach(|| Arc::new(self.route_metrics(Arc::new(RouteLabels::of(target)))));
        match attached {
            Some(metrics) => metrics.clone(),
            None => Arc::new(self.route_metrics(Arc::new(RouteLabels::of(target)))),
        }
    }

    /// The handles for requests that matched no route (all four route labels empty).
    pub(crate) fn unrouted(&self) -> Arc<RouteMetrics> {
        self.unrouted
            .get_or_init(|| {
                let labels = Arc::new(RouteLabels::new("", "", "", ""));
                Arc::new(self.route_metrics(labels))
            })
            .clone()
    }

    fn route_metrics(&self, labels: Arc<RouteLabels>) -> RouteMetrics {
        let key = RouteKey(labels.clone());
        RouteMetrics {
            requests: self.requests.clone(),
            seen: Default::default(),
            answered: self.answered.clone(),
            server_errors: self.server_errors.clone(),
            duration: self.duration.get_or_create_owned(&key),
            request_size: self.request_size.get_or_create_owned(&key),
            response_size: self.response_size.get_or_create_owned(&key),
            labels,
        }
    }

    pub(crate) fn connected(&self, took: Duration) {
        self.upstream_connect.observe(took.as_secs_f64());
    }

    pub(crate) fn connect_failed(&self, error: &crate::error::ProxyError) {
        self.connect_errors
            .get_or_create(&[("reason", connect_error_reason(error))])
            .inc();
    }

    /// Requests answered so far, and those answered with a 5xx.
    pub fn answered(&self) -> (u64, u64) {
        (self.answered.get(), self.server_errors.get())
    }

    /// Retries made so far, for every reason.
    pub fn retries(&self) -> u64 {
        self.retries_total.get()
    }

    /// Endpoints ejected so far.
    pub fn ejections(&self) -> u64 {
        self.ejections.get()
    }

    pub(crate) fn retried(&self, reason: RetryReason) {
        self.retries_total.inc();
        self.retries
            .get_or_create(&[("reason", reason.label())])
            .inc();
    }
}

/// The `reason` label of a failed connect.
fn connect_error_reason(error: &crate::error::ProxyError) -> &'static str {
    use std::io::ErrorKind;
    match error {
        crate::error::ProxyError::ConnectTimeout => "timeout",
        crate::error::ProxyError::ConnectFailed(io) => match io.kind() {
            ErrorKind::ConnectionRefused => "refused",
            ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted => "reset",
            ErrorKind::HostUnreachable | ErrorKind::NetworkUnreachable => "unreachable",
            ErrorKind::InvalidData | ErrorKind::InvalidInput => "tls",
            _ => "other",
        },
        _ => "other",
    }
}

/// One route's metric handles: recording through them takes no lookup but the requests
/// counter's, whose labels (method, code) vary per request; the counters of the pairs seen
/// are kept here, so that lookup is a short scan rather than the family's lock and SipHash
/// (about 500 instructions a request, bench/instructions).
#[derive(Debug)]
pub(crate) struct RouteMetrics {
    labels: Arc<RouteLabels>,
    requests: Family<RequestKey, Counter>,
    /// The requests counters of the (method, code) pairs seen so far, up to [`SEEN_PAIRS`].
    seen: arc_swap::ArcSwap<Vec<(&'static str, u16, Counter)>>,
    answered: Counter,
    server_errors: Counter,
    duration: Histogram,
    request_size: Histogram,
    response_size: Histogram,
}

/// What one answered request adds to its route's metrics.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Measured {
    pub(crate) status: StatusCode,
    pub(crate) request_bytes: u64,
    pub(crate) response_bytes: u64,
    pub(crate) duration: Duration,
}

/// The most (method, code) pairs a route keeps its counters of; rarer ones are looked up.
const SEEN_PAIRS: usize = 16;

impl RouteMetrics {
    pub(crate) fn record(&self, method: &'static str, measured: &Measured) {
        self.count_request(method, measured.status.as_u16());
        self.answered.inc();
        if measured.status.is_server_error() {
            self.server_errors.inc();
        }
        self.duration.observe(measured.duration.as_secs_f64());
        self.request_size.observe(measured.request_bytes as f64);
        self.response_size.observe(measured.response_bytes as f64);
    }

    /// Counts a request of `method` answered with `code`.
    fn count_request(&self, method: &'static str, code: u16) {
        let seen = self.seen.load();
        if let Some((_, _, counter)) = seen
            .iter()
            .find(|(seen_method, seen_code, _)| *seen_code == code && *seen_method == method)
        {
            counter.inc();
            return;
        }
        let key = RequestKey {
            route: self.labels.clone(),
            method,
            code,
        };
        let counter = self.requests.get_or_create_owned(&key);
        if seen.len() < SEEN_PAIRS {
            self.seen.rcu(|seen| {
                let mut more = Vec::clone(seen);
                if !more.iter().any(|(m, c, _)| *c == code && *m == method) {
                    more.push((method, code, counter.clone()));
                }
                more
            });
        }
        counter.inc();
    }
}

/// `HTTP/1.1` and the like, as access logs write the protocol.
pub(crate) fn protocol(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

/// Labels with fixed values (`reason`, `result`, `listener` and `protocol`).
type Fixed<const N: usize> = [(&'static str, &'static str); N];

/// Open client connections and TLS handshakes, for every listener. Registered once; each
/// listener records through its own pre-resolved [`ListenerMetrics`].
#[derive(Clone, Debug, Default)]
pub struct ConnectionMetrics {
    open: Family<Fixed<2>, Gauge>,
    parked: Family<Fixed<1>, Gauge>,
    handshakes: Family<Fixed<2>, Counter>,
    accepted: Family<WorkerLabels, Counter>,
}

/// A listener and the data-plane worker (`--workers`) that accepted on it.
type WorkerLabels = [(&'static str, String); 2];

impl ConnectionMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "open_connections",
            "Client connections open, by listener and protocol (pending: no request yet)",
            Declared(self.open.clone()),
        );
        registry.register(
            "parked_connections",
            "Idle HTTP/1.1 client connections holding only their socket until the next request, by listener",
            Declared(self.parked.clone()),
        );
        registry.register(
            "tls_handshakes",
            "TLS handshakes with clients, by listener and result",
            Declared(self.handshakes.clone()),
        );
        registry.register(
            "accepted_connections",
            "Client connections accepted, by listener and data-plane worker (--workers): how evenly the kernel spreads them",
            Declared(self.accepted.clone()),
        );
    }

    /// The handles of the listener called `listener` (`http`, `https`).
    pub fn listener(&self, listener: &'static str) -> ListenerMetrics {
        let gauge = |protocol| {
            self.open
                .get_or_create_owned(&[("listener", listener), ("protocol", protocol)])
        };
        let handshakes = |result| {
            self.handshakes
                .get_or_create_owned(&[("listener", listener), ("result", result)])
        };
        ListenerMetrics(Arc::new(ListenerHandles {
            pending: gauge("pending"),
            http1: gauge("http1"),
            http2: gauge("http2"),
            passthrough: gauge("passthrough"),
            parked: self.parked.get_or_create_owned(&[("listener", listener)]),
            handshakes_succeeded: handshakes("success"),
            handshakes_failed: handshakes("failure"),
            handshakes_timed_out: handshakes("timeout"),
            listener,
            accepted: self.accepted.clone(),
        }))
    }
}

/// One listener's open connections by protocol and TLS handshakes by result; clones share
/// them.
#[derive(Clone, Debug, Default)]
pub struct ListenerMetrics(Arc<ListenerHandles>);

impl std::ops::Deref for ListenerMetrics {
    type Target = ListenerHandles;

    fn deref(&self) -> &ListenerHandles {
        &self.0
    }
}

/// The gauges and counters behind a [`ListenerMetrics`].
#[derive(Debug, Default)]
pub struct ListenerHandles {
    /// Connections accepted that have not sent a request yet.
    pub(crate) pending: Gauge,
    pub(crate) http1: Gauge,
    pub(crate) http2: Gauge,
    /// TLS connections spliced to a backend unterminated.
    pub(crate) passthrough: Gauge,
    /// HTTP/1.1 connections parked between requests (they count under `http1` too).
    pub(crate) parked: Gauge,
    pub(crate) handshakes_succeeded: Counter,
    pub(crate) handshakes_failed: Counter,
    pub(crate) handshakes_timed_out: Counter,
    listener: &'static str,
    accepted: Family<WorkerLabels, Counter>,
}

impl ListenerHandles {
    /// The count of connections this listener accepted on data-plane worker `worker`.
    pub(crate) fn accepted_by(&self, worker: usize) -> Counter {
        self.accepted.get_or_create_owned(&[
            ("listener", self.listener.to_owned()),
            ("worker", worker.to_string()),
        ])
    }
}

/// Counts one connection in its listener's gauges while it lives: first as pending, then
/// under the protocol of its first request.
pub(crate) struct OpenConnection {
    metrics: ListenerMetrics,
    counted_as: std::sync::OnceLock<Gauge>,
}

impl OpenConnection {
    pub(crate) fn new(metrics: &ListenerMetrics) -> Self {
        metrics.pending.inc();
        Self {
            metrics: metrics.clone(),
            counted_as: std::sync::OnceLock::new(),
        }
    }

    /// A passthrough connection, counted as such until it drops (even when its task is
    /// aborted at the end of the grace period).
    pub(crate) fn passthrough(metrics: &ListenerMetrics) -> Self {
        let counted_as = std::sync::OnceLock::new();
        let _ = counted_as.set(metrics.passthrough.clone());
        metrics.passthrough.inc();
        Self {
            metrics: metrics.clone(),
            counted_as,
        }
    }

    /// A request arrived: the connection now counts under its protocol.
    pub(crate) fn request(&self, version: Version) {
        if self.counted_as.get().is_some() {
            return;
        }
        let gauge = match version {
            Version::HTTP_2 => &self.metrics.http2,
            _ => &self.metrics.http1,
        };
        if self.counted_as.set(gauge.clone()).is_ok() {
            gauge.inc();
            self.metrics.pending.dec();
        }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        match self.counted_as.get() {
            Some(gauge) => gauge.dec(),
            None => self.metrics.pending.dec(),
        };
    }
}

/// Labels of a stream route's metrics: the socket's protocol (`TLS`, `TCP`, `UDP`) and the
/// route (`namespace/name`, empty when none took the connection).
type StreamLabels = [(&'static str, String); 2];

/// Connections (UDP: flows) and bytes of the Gateway's TLS, TCP and UDP listeners, by route.
/// Clones share their values.
#[derive(Clone, Debug, Default)]
pub struct StreamMetrics {
    connections: Family<[(&'static str, String); 3], Counter>,
    open: Family<StreamLabels, Gauge>,
    received: Family<StreamLabels, Counter>,
    sent: Family<StreamLabels, Counter>,
}

/// How a stream connection (or UDP flow) ended up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamResult {
    /// Connected to an endpoint and spliced.
    Spliced,
    /// No route took it, or its backendRef did not resolve: closed (UDP: dropped).
    Refused,
    /// The route had no endpoint that accepted, or the TLS handshake failed.
    Failed,
}

impl StreamMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "stream_connections",
            "Connections (UDP: client flows) taken by the Gateway's TLS, TCP and UDP listeners, by protocol, route and result (spliced, refused: no route or an invalid backendRef, failed: no endpoint answered or the handshake failed)",
            Declared(self.connections.clone()),
        );
        registry.register(
            "stream_open_connections",
            "Connections (UDP: flows) open on the Gateway's TLS, TCP and UDP listeners, by protocol and route",
            Declared(self.open.clone()),
        );
        registry.register(
            "stream_received_bytes",
            "Bytes received from clients on the Gateway's TLS, TCP and UDP listeners, by protocol and route (TLS: the bytes of the TLS stream in Passthrough, the decrypted ones in Terminate)",
            Declared(self.received.clone()),
        );
        registry.register(
            "stream_sent_bytes",
            "Bytes sent to clients on the Gateway's TLS, TCP and UDP listeners, by protocol and route",
            Declared(self.sent.clone()),
        );
    }

    fn labels(protocol: &'static str, route: &str) -> StreamLabels {
        [
            ("protocol", protocol.to_owned()),
            ("route", route.to_owned()),
        ]
    }

    /// Counts one connection or flow and how it ended up.
    pub fn connection(&self, protocol: &'static str, route: &str, result: StreamResult) {
        let result = match result {
            StreamResult::Spliced => "spliced",
            StreamResult::Refused => "refused",
            StreamResult::Failed => "failed",
        };
        self.connections
            .get_or_create(&[
                ("protocol", protocol.to_owned()),
                ("route", route.to_owned()),
                ("result", result.to_owned()),
            ])
            .inc();
    }

    /// The open-connections gauge of a route.
    pub fn open(&self, protocol: &'static str, route: &str) -> Gauge {
        self.open
            .get_or_create_owned(&Self::labels(protocol, route))
    }

    /// The counters of bytes received from and sent to clients on a route.
    pub fn byte_counters(&self, protocol: &'static str, route: &str) -> (Counter, Counter) {
        let labels = Self::labels(protocol, route);
        (
            self.received.get_or_create_owned(&labels),
            self.sent.get_or_create_owned(&labels),
        )
    }
}
