//! Distributed tracing: a SERVER span per request and a CLIENT span per upstream attempt, W3C Trace Context continued from the client and passed to the pod, exported over OTLP/HTTP in batches through a bounded queue that drops (and counts) rather than slow a request.

use std::cell::Cell;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::header::HeaderName;
use http::{HeaderMap, HeaderValue, Method, Version};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, Sampler, SamplingDecision, SdkTracer, SdkTracerProvider,
    ShouldSample as _, SpanData, SpanExporter as _, SpanProcessor,
};
use opentelemetry_sdk::Resource;
use prometheus_client::metrics::counter::Counter;

/// W3C Trace Context's request header.
pub(crate) const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// W3C Trace Context's vendor header, forwarded as the client sent it.
pub(crate) const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// Finished spans the queue to the exporter holds before it drops.
const QUEUE: usize = 4096;
/// Spans sent to the collector in one request, at most.
const BATCH: usize = 512;
/// How long a started batch waits for more spans before it is sent.
const LINGER: Duration = Duration::from_secs(1);
/// How long one export may take before it is given up (and its spans counted as dropped).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and how much to trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TracingOptions {
    /// The collector's OTLP/HTTP base address; spans go to `{endpoint}/v1/traces`.
    pub endpoint: String,
    /// The share of new traces recorded (0 to 1); a client's sampled or unsampled trace is
    /// followed as it is.
    pub sample_ratio: f64,
    /// The `service.name` resource attribute.
    pub service_name: String,
}

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    #[error("--tracing-otlp-endpoint {endpoint}: {reason}")]
    Endpoint { endpoint: String, reason: String },
}

/// The tracer: shared by every request.
#[derive(Debug)]
pub struct Tracing {
    tracer: SdkTracer,
    /// The tracer's sampler, asked before a request's span is built.
    sampler: Sampler,
    ids: RandomIdGenerator,
    /// Owns the span processor (the queue's sending side).
    _provider: SdkTracerProvider,
}

impl Tracing {
    /// A tracer whose spans go to `options.endpoint`, and the task that exports them (to be
    /// spawned). `dropped` counts spans lost to a full queue or a failed export.
    pub fn start(
        options: &TracingOptions,
        dropped: Counter,
    ) -> Result<(Arc<Self>, impl Future<Output = ()> + Send + 'static), TracingError> {
        let traces_url = traces_url(&options.endpoint)?;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|error| TracingError::Endpoint {
                endpoint: options.endpoint.clone(),
                reason: format!("no CA certificates to verify the collector with: {error}"),
            })?
            .https_or_http()
            .enable_http1()
            .build();
        let client = opentelemetry_http::hyper::HyperClient::new(connector, EXPORT_TIMEOUT, None);
        let resource = Resource::builder()
            .with_service_name(options.service_name.clone())
            .build();
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(traces_url)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|error| TracingError::Endpoint {
                endpoint: options.endpoint.clone(),
                reason: error.to_string(),
            })?;
        exporter.set_resource(&resource);
        let queue = Arc::new(SpanQueue::default());
        let processor = QueueProcessor {
            queue: queue.clone(),
            dropped: dropped.clone(),
        };
        let ratio = options.sample_ratio.clamp(0.0, 1.0);
        let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio)));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(sampler.clone())
            .with_id_generator(DrawnIds::default())
            .with_resource(resource)
            .build();
        let tracing = Arc::new(Self {
            tracer: provider.tracer("sluice"),
            sampler,
            ids: RandomIdGenerator::default(),
            _provider: provider,
        });
        Ok((tracing, export(queue, exporter, dropped)))
    }

    /// The trace of a request whose first byte came now: opened once its route is known.
    pub(crate) fn begin(&self) -> RequestTrace {
        RequestTrace {
            started: SystemTime::now(),
            stage: Stage::Pending,
        }
    }

    /// Opens the request's SERVER span: the client's trace continued when `trust_incoming`
    /// and its `traceparent` is well formed, else a new trace. Only the first call opens the
    /// span. True when the client sent a trace that is not continued: its `tracestate` is to
    /// go with it.
    pub(crate) fn open(
        &self,
        trace: &mut RequestTrace,
        headers: &HeaderMap,
        trust_incoming: bool,
        facts: ServerFacts<'_>,
    ) -> bool {
        if !matches!(trace.stage, Stage::Pending) {
            return false;
        }
        let parent = incoming(headers).filter(|_| trust_incoming);
        let replaced = parent.is_none() && headers.contains_key(TRACEPARENT);
        let (parent, trace_id, root) = match parent {
            Some(span) => {
                let id = span.trace_id();
                (Context::new().with_remote_span_context(span), id, false)
            }
            None => (Context::new(), self.ids.new_trace_id(), true),
        };
        // The sampler decides before anything is built, so a request that is not recorded
        // costs two ids, not a span's name and attributes.
        let decision = self
            .sampler
            .should_sample(Some(&parent), trace_id, "", &SpanKind::Server, &[], &[])
            .decision;
        if decision == SamplingDecision::Drop {
            let state = parent.span().span_context().trace_state().clone();
            let span = SpanContext::new(
                trace_id,
                self.ids.new_span_id(),
                TraceFlags::default(),
                false,
                state,
            );
            trace.stage = Stage::Open(Context::new().with_remote_span_context(span));
            return replaced;
        }
        if root {
            DRAWN_TRACE_ID.with(|drawn| drawn.set(Some(trace_id)));
        }
        let name = match facts.route.as_ref().and_then(|route| route.path) {
            Some(path) => format!("{} {path}", facts.method),
            None => facts.method.to_string(),
        };
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_start_time(trace.started)
            .with_attributes(facts.attributes())
            .start_with_context(&self.tracer, &parent);
        DRAWN_TRACE_ID.with(Cell::take);
        trace.stage = Stage::Open(parent.with_span(span));
        replaced
    }

    /// Marks a request that is not traced (its route turned tracing off): its headers go on
    /// as the client sent them.
    pub(crate) fn skip(&self, trace: &mut RequestTrace) {
        trace.stage = Stage::Off;
    }

    /// One attempt's CLIENT span under the request's span, when the request is recorded, and
    /// the `traceparent` the pod gets: the CLIENT span's, or the request span's when the trace
    /// is not recorded.
    pub(crate) fn attempt(
        &self,
        server: &Context,
        facts: AttemptFacts<'_>,
    ) -> (HeaderValue, Option<AttemptSpan>) {
        let server_span = server.span();
        if !server_span.span_context().is_sampled() {
            return (traceparent(server_span.span_context()), None);
        }
        let mut attributes = vec![
            KeyValue::new("http.request.method", facts.method.as_str().to_owned()),
            KeyValue::new("server.address", facts.host.to_owned()),
            KeyValue::new("server.port", i64::from(facts.port)),
            KeyValue::new(
                "url.full",
                format!(
                    "{}://{}:{}{}",
                    facts.scheme, facts.host, facts.port, facts.target
                ),
            ),
        ];
        if facts.resends > 0 {
            attributes.push(KeyValue::new(
                "http.request.resend_count",
                i64::from(facts.resends),
            ));
        }
        let mut builder = self
            .tracer
            .span_builder(facts.method.as_str().to_owned())
            .with_kind(SpanKind::Client)
            .with_attributes(attributes);
        if let Some(reason) = facts.retry_reason {
            builder = builder.with_events(vec![opentelemetry::trace::Event::new(
                "retry",
                SystemTime::now(),
                vec![KeyValue::new("sluice.retry.reason", reason)],
                0,
            )]);
        }
        let span = builder.start_with_context(&self.tracer, server);
        let header = traceparent(opentelemetry::trace::Span::span_context(&span));
        (header, Some(AttemptSpan(span)))
    }
}

/// A request's trace, from its first byte until its response ends.
pub(crate) struct RequestTrace {
    started: SystemTime,
    stage: Stage,
}

enum Stage {
    /// The route is not known yet.
    Pending,
    /// The request's span, as the context its attempts start theirs in.
    Open(Context),
    /// The route turned tracing off.
    Off,
}

impl RequestTrace {
    /// The request span's context, once it is open.
    pub(crate) fn server(&self) -> Option<&Context> {
        match &self.stage {
            Stage::Open(context) => Some(context),
            _ => None,
        }
    }

    /// The trace id, for the access log.
    pub(crate) fn trace_id(&self) -> Option<TraceId> {
        let context = self.server()?;
        let id = context.span().span_context().trace_id();
        (id != TraceId::INVALID).then_some(id)
    }

    /// The answer's status on the request's span; a 5xx marks it as an error.
    pub(crate) fn answered(&self, status: http::StatusCode) {
        let Some(context) = self.server() else {
            return;
        };
        let span = context.span();
        if !span.is_recording() {
            return;
        }
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status.as_u16()),
        ));
        if status.is_server_error() {
            span.set_status(Status::error(""));
        }
    }

    /// Ends the request's span: its response has ended (or the client left).
    pub(crate) fn finish(self) {
        if let Stage::Open(context) = self.stage {
            context.span().end();
        }
    }
}

impl std::fmt::Debug for RequestTrace {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RequestTrace")
            .field("trace_id", &self.trace_id())
            .finish()
    }
}

/// What the request span records from the request and its route.
pub(crate) struct ServerFacts<'f> {
    pub(crate) method: &'f Method,
    pub(crate) path: &'f str,
    pub(crate) scheme: &'static str,
    pub(crate) version: Version,
    /// The Host's name, without its port.
    pub(crate) host: &'f str,
    pub(crate) client: std::net::IpAddr,
    pub(crate) user_agent: Option<&'f HeaderValue>,
    pub(crate) route: Option<RouteFacts<'f>>,
}

/// The route a request took, for its span.
pub(crate) struct RouteFacts<'f> {
    /// `Ingress` or `HTTPRoute`.
    pub(crate) kind: &'static str,
    /// `namespace/name` of the Ingress or route.
    pub(crate) name: &'f str,
    /// The matched path as written (`http.route`).
    pub(crate) path: Option<&'f str>,
    /// `namespace`, `name` and `port` of the Service.
    pub(crate) service: (&'f str, &'f str, &'f str),
}

impl ServerFacts<'_> {
    fn attributes(&self) -> Vec<KeyValue> {
        let address = self.host;
        let mut attributes = vec![
            KeyValue::new("http.request.method", self.method.as_str().to_owned()),
            KeyValue::new("url.path", self.path.to_owned()),
            KeyValue::new("url.scheme", self.scheme),
            KeyValue::new("network.protocol.version", protocol_version(self.version)),
            KeyValue::new("client.address", self.client.to_string()),
        ];
        if !address.is_empty() {
            attributes.push(KeyValue::new("server.address", address.to_owned()));
        }
        if let Some(agent) = self.user_agent.and_then(|value| value.to_str().ok()) {
            attributes.push(KeyValue::new("user_agent.original", agent.to_owned()));
        }
        if let Some(route) = &self.route {
            let (namespace, name) = route.name.split_once('/').unwrap_or(("", route.name));
            let (service_namespace, service, port) = route.service;
            if let Some(path) = route.path {
                attributes.push(KeyValue::new("http.route", path.to_owned()));
            }
            attributes.extend([
                KeyValue::new("sluice.route.kind", route.kind),
                KeyValue::new("sluice.route.namespace", namespace.to_owned()),
                KeyValue::new("sluice.route.name", name.to_owned()),
                KeyValue::new("sluice.service.namespace", service_namespace.to_owned()),
                KeyValue::new("sluice.service.name", service.to_owned()),
                KeyValue::new("sluice.service.port", port.to_owned()),
            ]);
            if route.kind == "Ingress" {
                // The names ingress-nginx users add with `opentelemetry_attribute`.
                attributes.extend([
                    KeyValue::new("ingress.namespace", namespace.to_owned()),
                    KeyValue::new("ingress.name", name.to_owned()),
                    KeyValue::new("ingress.service_name", service.to_owned()),
                ]);
            }
        }
        attributes
    }
}

/// What an attempt's span records.
pub(crate) struct AttemptFacts<'f> {
    pub(crate) method: &'f Method,
    pub(crate) scheme: &'static str,
    /// The pod's (or ClusterIP's) address and port.
    pub(crate) host: &'f str,
    pub(crate) port: u16,
    pub(crate) target: &'f str,
    /// Attempts before this one.
    pub(crate) resends: u32,
    /// Why the attempt before this one is retried.
    pub(crate) retry_reason: Option<&'static str>,
}

/// One upstream attempt's CLIENT span; dropping it ends it.
pub(crate) struct AttemptSpan(opentelemetry_sdk::trace::Span);

impl AttemptSpan {
    /// Ends the span with the pod's status, or with the failure's kind as `error.type`.
    pub(crate) fn end(mut self, outcome: Result<http::StatusCode, &'static str>) {
        use opentelemetry::trace::Span as _;
        match outcome {
            Ok(status) => {
                self.0.set_attribute(KeyValue::new(
                    "http.response.status_code",
                    i64::from(status.as_u16()),
                ));
                if status.is_server_error() {
                    self.0.set_status(Status::error(""));
                }
            }
            Err(kind) => {
                self.0.set_attribute(KeyValue::new("error.type", kind));
                self.0.set_status(Status::error(kind));
            }
        }
        self.0.end();
    }
}

/// The client's trace, when its one `traceparent` is well formed (W3C Trace Context: version,
/// 32 and 16 lowercase hex digits, flags; neither id all zeros).
fn incoming(headers: &HeaderMap) -> Option<SpanContext> {
    let mut values = headers.get_all(TRACEPARENT).iter();
    let value = values.next()?.to_str().ok()?;
    if values.next().is_some() || !well_formed(value) {
        return None;
    }
    let propagator = TraceContextPropagator::new();
    let context = propagator.extract(&opentelemetry_http::HeaderExtractor(headers));
    let span = context.span().span_context().clone();
    span.is_valid().then_some(span)
}

/// Whether `value` has `traceparent`'s shape: `vv-{32 hex}-{16 hex}-ff`, lowercase, more
/// fields only after a version above 00, version ff invalid.
fn well_formed(value: &str) -> bool {
    let bytes = value.as_bytes();
    let hex = |range: std::ops::Range<usize>| {
        bytes
            .get(range)
            .is_some_and(|part| part.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
    };
    let dashes = [2, 35, 52].iter().all(|&at| bytes.get(at) == Some(&b'-'));
    let version_ok = hex(0..2) && &bytes[..2] != b"ff";
    let length_ok = match bytes.get(..2) {
        Some(b"00") => bytes.len() == 55,
        _ => bytes.len() == 55 || bytes.get(55) == Some(&b'-'),
    };
    version_ok && dashes && length_ok && hex(3..35) && hex(36..52) && hex(53..55)
}

/// The `traceparent` naming `span` as the parent: `00-{trace id}-{span id}-{flags}` in
/// lowercase hex, written into a fixed buffer (once or twice per request, where `format!`
/// showed in the profile).
fn traceparent(span: &SpanContext) -> HeaderValue {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = [b'-'; 55];
    let fields: [(&[u8], usize); 4] = [
        (&[0], 0),
        (&span.trace_id().to_bytes(), 3),
        (&span.span_id().to_bytes(), 36),
        (&[span.trace_flags().to_u8()], 53),
    ];
    for (bytes, at) in fields {
        for (index, byte) in bytes.iter().enumerate() {
            text[at + 2 * index] = DIGITS[usize::from(byte >> 4)];
            text[at + 2 * index + 1] = DIGITS[usize::from(byte & 0x0f)];
        }
    }
    HeaderValue::from_bytes(&text).unwrap_or(HeaderValue::from_static(""))
}

fn protocol_version(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "0.9",
        Version::HTTP_10 => "1.0",
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
        _ => "1.1",
    }
}

/// `{endpoint}/v1/traces`, checked to be an http or https address.
fn traces_url(endpoint: &str) -> Result<String, TracingError> {
    let invalid = |reason: &str| TracingError::Endpoint {
        endpoint: endpoint.to_owned(),
        reason: reason.to_owned(),
    };
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|_| invalid("not a URL (expected http://HOST:PORT or https://HOST:PORT)"))?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.host().is_some() => {}
        _ => return Err(invalid("expected an http:// or https:// URL with a host")),
    }
    Ok(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
}

thread_local! {
    /// The trace id `Tracing::open` drew for a new trace's sampling decision, for the SDK to
    /// give the span it then builds on the same thread.
    static DRAWN_TRACE_ID: Cell<Option<TraceId>> = const { Cell::new(None) };
}

/// The tracer's ids: a new trace gets the id its sampling decision was made on, so the
/// recorded trace is the one the ratio chose; everything else is random.
#[derive(Debug, Default)]
struct DrawnIds(RandomIdGenerator);

impl IdGenerator for DrawnIds {
    fn new_trace_id(&self) -> TraceId {
        DRAWN_TRACE_ID
            .with(Cell::take)
            .unwrap_or_else(|| self.0.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        self.0.new_span_id()
    }
}

/// Finished spans on their way to the export task. Pushing one never wakes the task except
/// for the first span of a batch, a full batch and the tracer's end, so a traced request
/// costs no cross-thread wake-up (a channel send per span woke the exporter's thread every
/// time: 14 % of a traced request's CPU in the profile).
#[derive(Debug, Default)]
struct SpanQueue {
    state: std::sync::Mutex<Queued>,
    wake: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Queued {
    spans: Vec<SpanData>,
    /// The tracer is gone: send what is left and stop.
    closed: bool,
}

impl SpanQueue {
    /// Queues a span; false when the queue is full and the span is dropped.
    fn push(&self, span: SpanData) -> bool {
        let queued = {
            let Ok(mut state) = self.state.lock() else {
                return false;
            };
            if state.spans.len() >= QUEUE {
                return false;
            }
            state.spans.push(span);
            state.spans.len()
        };
        if queued == 1 || queued == BATCH {
            self.wake.notify_one();
        }
        true
    }

    /// Up to [`BATCH`] spans from the front of the queue, and whether the tracer is gone.
    fn take(&self) -> (Vec<SpanData>, bool) {
        let Ok(mut state) = self.state.lock() else {
            return (Vec::new(), true);
        };
        let count = state.spans.len().min(BATCH);
        (state.spans.drain(..count).collect(), state.closed)
    }

    /// How many spans wait, and whether the tracer is gone.
    fn waiting(&self) -> (usize, bool) {
        match self.state.lock() {
            Ok(state) => (state.spans.len(), state.closed),
            Err(_) => (0, true),
        }
    }

    fn close(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.closed = true;
        }
        self.wake.notify_one();
    }
}

/// The span processor: every ended span goes on the queue without waiting; a full queue
/// drops it and counts the drop.
#[derive(Debug)]
struct QueueProcessor {
    queue: Arc<SpanQueue>,
    dropped: Counter,
}

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _context: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !self.queue.push(span) {
            self.dropped.inc();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

impl Drop for QueueProcessor {
    fn drop(&mut self) {
        self.queue.close();
    }
}

/// Sends queued spans to the collector in batches of up to [`BATCH`]: a full batch at once,
/// a partial one [`LINGER`] after the task looked at it, until the tracer is gone. A failed
/// export drops its batch (counted).
async fn export(
    queue: Arc<SpanQueue>,
    exporter: opentelemetry_otlp::SpanExporter,
    dropped: Counter,
) {
    let mut warned = false;
    loop {
        let (waiting, closed) = queue.waiting();
        if waiting == 0 && !closed {
            queue.wake.notified().await;
            continue;
        }
        let deadline = tokio::time::Instant::now() + LINGER;
        loop {
            let (waiting, closed) = queue.waiting();
            if waiting >= BATCH || closed {
                break;
            }
            if tokio::time::timeout_at(deadline, queue.wake.notified())
                .await
                .is_err()
            {
                break;
            }
        }
        let (batch, closed) = queue.take();
        if batch.is_empty() {
            if closed {
                return;
            }
            continue;
        }
        let count = batch.len() as u64;
        match exporter.export(batch).await {
            Ok(()) => warned = false,
            Err(error) => {
                dropped.inc_by(count);
                if !warned {
                    tracing::warn!(%error, spans = count, "the trace collector did not take spans; dropped (counted in sluice_tracing_spans_dropped_total)");
                    warned = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_shape_is_checked_as_w3c_says() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(well_formed(good));
        assert!(well_formed(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"
        ));
        for bad in [
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-1-2-01",
            "",
        ] {
            assert!(!well_formed(bad), "{bad}");
        }
    }

    /// A finished span as the SDK hands it to the processor.
    fn finished_span() -> SpanData {
        SpanData {
            span_context: SpanContext::empty_context(),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Server,
            name: "GET".into(),
            start_time: SystemTime::now(),
            end_time: SystemTime::now(),
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: Status::Unset,
            instrumentation_scope: Default::default(),
        }
    }

    #[test]
    fn the_span_queue_holds_its_bound_and_hands_out_batches() {
        let queue = SpanQueue::default();
        for _ in 0..QUEUE {
            assert!(queue.push(finished_span()));
        }
        assert!(!queue.push(finished_span()), "a full queue drops");
        assert_eq!(queue.waiting(), (QUEUE, false));
        let (batch, closed) = queue.take();
        assert_eq!((batch.len(), closed), (BATCH, false));
        assert_eq!(queue.waiting(), (QUEUE - BATCH, false));
        queue.close();
        assert_eq!(queue.waiting(), (QUEUE - BATCH, true));
    }

    #[tokio::test]
    async fn the_exporter_is_woken_by_a_first_span_and_by_a_full_batch_only() {
        let woken = |queue: &SpanQueue| {
            use std::future::Future as _;
            let mut wait = std::pin::pin!(queue.wake.notified());
            let waker = std::task::Waker::noop();
            wait.as_mut()
                .poll(&mut std::task::Context::from_waker(waker))
                .is_ready()
        };
        let queue = SpanQueue::default();
        assert!(!woken(&queue));
        queue.push(finished_span());
        assert!(woken(&queue), "the first span wakes the exporter");
        for _ in 1..BATCH - 1 {
            queue.push(finished_span());
        }
        assert!(!woken(&queue), "spans after the first do not");
        queue.push(finished_span());
        assert!(woken(&queue), "a full batch does");
        queue.close();
        assert!(woken(&queue), "so does the tracer's end");
    }

    #[tokio::test]
    async fn a_new_trace_is_recorded_at_the_ratio_and_keeps_the_id_it_was_drawn_with() {
        let options = TracingOptions {
            endpoint: "http://127.0.0.1:9".into(),
            sample_ratio: 0.5,
            service_name: "sluice".into(),
        };
        let Ok((tracing, _export)) = Tracing::start(&options, Counter::default()) else {
            panic!("tracing starts");
        };
        let method = Method::GET;
        let (mut recorded, requests) = (0, 400);
        for _ in 0..requests {
            let mut trace = tracing.begin();
            let facts = ServerFacts {
                method: &method,
                path: "/",
                scheme: "http",
                version: Version::HTTP_11,
                host: "example.test",
                client: std::net::Ipv4Addr::LOCALHOST.into(),
                user_agent: None,
                route: None,
            };
            tracing.open(&mut trace, &HeaderMap::new(), true, facts);
            let Some(context) = trace.server() else {
                panic!("the trace is open");
            };
            let span = context.span();
            let id = span.span_context().trace_id();
            let chosen = tracing
                .sampler
                .should_sample(None, id, "", &SpanKind::Server, &[], &[])
                .decision
                == SamplingDecision::RecordAndSample;
            assert_eq!(span.is_recording(), chosen, "the ratio's choice for {id}");
            assert_eq!(span.span_context().is_sampled(), chosen);
            recorded += usize::from(chosen);
        }
        // Half at 0.5; a second draw by the SDK would record a quarter (100 ± 9).
        assert!((150..=250).contains(&recorded), "{recorded} of {requests}");
    }

    #[test]
    fn traceparent_is_written_as_w3c_spells_it() {
        let span = |flags| {
            SpanContext::new(
                TraceId::from(0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736),
                SpanId::from(0x00f0_67aa_0ba9_02b7),
                TraceFlags::new(flags),
                false,
                Default::default(),
            )
        };
        assert_eq!(
            traceparent(&span(1)),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(
            traceparent(&span(0)),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
        );
        assert!(well_formed(traceparent(&span(1)).to_str().unwrap_or("")));
    }

    #[test]
    fn an_all_zero_id_or_a_second_header_is_no_parent() {
        let mut headers = HeaderMap::new();
        headers.insert(
            TRACEPARENT,
            HeaderValue::from_static("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
        );
        assert!(incoming(&headers).is_none());
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        headers.insert(TRACEPARENT, HeaderValue::from_static(good));
        let parent = incoming(&headers).map(|span| span.trace_id().to_string());
        assert_eq!(parent.as_deref(), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        headers.append(TRACEPARENT, HeaderValue::from_static(good));
        assert!(incoming(&headers).is_none());
    }

    #[test]
    fn the_traces_url_is_the_endpoint_with_its_signal_path() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318/").ok().as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        assert!(traces_url("127.0.0.1:4318").is_err());
        assert!(traces_url("ftp://collector").is_err());
    }
}
