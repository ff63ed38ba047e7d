//! The metrics registry: the control plane's own metrics, the data plane's families, and the collectors that read endpoint states, watches and the process at each scrape.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Weak;
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use sluice_config::Severity;
use sluice_proxy::{ConnectionMetrics, ProxyMetrics, StreamMetrics};
use sluice_routing::Condition;

use crate::control::ControlPlane;

/// Every metric sluice exports, registered once.
pub struct Metrics {
    registry: Registry,
    /// From a watch event's receipt to the moment the data plane uses the new endpoint set.
    pub endpoint_propagation: Histogram,
    /// How long one compile of the whole snapshot takes.
    pub compile: Histogram,
    /// How many routing tables were published.
    pub publishes: Counter,
    /// Access-log lines dropped because the writer fell behind.
    pub access_log_dropped: Counter,
    /// Finished spans dropped: the queue to the exporter was full, or the collector refused
    /// or did not answer an export.
    pub tracing_spans_dropped: Counter,
    /// Client connections and TLS handshakes, per listener.
    pub connections: ConnectionMetrics,
    /// Connections, flows and bytes of the Gateway's TLS, TCP and UDP listeners, by route.
    pub streams: StreamMetrics,
    per_endpoint: std::sync::Arc<AtomicBool>,
}

impl Metrics {
    /// The control plane's metrics, the data plane's families from `proxy`, and collectors
    /// that read `control`'s table and watches at each scrape.
    pub fn new(proxy: &ProxyMetrics, control: Weak<ControlPlane>) -> Self {
        let mut root = Registry::default();
        root.register_collector(Box::new(ProcessCollector::new()));
        let per_endpoint = std::sync::Arc::new(AtomicBool::new(false));
        let registry = root.sub_registry_with_prefix("sluice");
        // 10 µs to about 5 s, doubling.
        let endpoint_propagation = Histogram::new(exponential_buckets(0.000_01, 2.0, 20));
        let compile = Histogram::new(exponential_buckets(0.000_1, 2.0, 18));
        let publishes = Counter::default();
        let access_log_dropped = Counter::default();
        let tracing_spans_dropped = Counter::default();
        let connections = ConnectionMetrics::default();
        let streams = StreamMetrics::default();
        registry.register(
            "endpoint_propagation_seconds",
            "Seconds from an EndpointSlice watch event's receipt to the data plane using the new endpoint set",
            endpoint_propagation.clone(),
        );
        registry.register(
            "compile_seconds",
            "Seconds one compile of the snapshot into a routing table takes",
            compile.clone(),
        );
        registry.register(
            "config_publishes",
            "Routing tables published",
            publishes.clone(),
        );
        registry.register(
            "access_log_dropped",
            "Access-log lines dropped because the queue to the writer was full",
            access_log_dropped.clone(),
        );
        registry.register(
            "tracing_spans_dropped",
            "Finished spans dropped because the queue to the exporter was full or the collector failed an export",
            tracing_spans_dropped.clone(),
        );
        registry.register(
            "build",
            "The running build",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        proxy.register(registry);
        connections.register(registry);
        streams.register(registry);
        registry.register_collector(Box::new(ControlCollector {
            control,
            per_endpoint: per_endpoint.clone(),
        }));
        Self {
            registry: root,
            endpoint_propagation,
            compile,
            publishes,
            access_log_dropped,
            tracing_spans_dropped,
            connections,
            streams,
            per_endpoint,
        }
    }

    /// Exports each endpoint's load, latency and outcomes under its address
    /// (`--metrics-per-endpoint`).
    pub fn export_per_endpoint(&self, on: bool) {
        self.per_endpoint.store(on, Ordering::Relaxed);
    }

    /// The OpenMetrics text exposition.
    pub fn encode_openmetrics(&self) -> String {
        let mut text = String::new();
        if let Err(error) = encode(&mut text, &self.registry) {
            tracing::warn!(%error, "cannot encode metrics");
        }
        text
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn encode_prometheus(&self) -> String {
        to_prometheus_text(&self.encode_openmetrics())
    }
}

/// Rewrites OpenMetrics text as Prometheus text format 0.0.4: a counter's and an info
/// metric's family take their samples' names (`_total`, `_info`, info becomes a gauge), and
/// the `# UNIT` and `# EOF` lines go.
fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut renames: Vec<(String, String)> = Vec::new();
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (suffix, kind) = match kind {
                "counter" => ("_total", "counter"),
                "info" => ("_info", "gauge"),
                other => ("", other),
            };
            let renamed = format!("{name}{suffix}");
            out.push_str(&format!("# TYPE {renamed} {kind}\n"));
            renames.push((name.to_owned(), renamed));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    // HELP lines come before TYPE lines: rename them in a second pass.
    let mut fixed = String::with_capacity(out.len());
    for line in out.lines() {
        match line.strip_prefix("# HELP ") {
            Some(rest) => {
                let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
                let renamed = renames
                    .iter()
                    .find(|(from, _)| from == name)
                    .map_or(name, |(_, to)| to.as_str());
                fixed.push_str(&format!("# HELP {renamed} {help}\n"));
            }
            None => {
                fixed.push_str(line);
                fixed.push('\n');
            }
        }
    }
    fixed
}

/// Reads the published table, the diagnostics and the watches at each scrape.
#[derive(Debug)]
struct ControlCollector {
    control: Weak<ControlPlane>,
    per_endpoint: std::sync::Arc<AtomicBool>,
}

type Labels = Vec<(&'static str, String)>;

impl Collector for ControlCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(control) = self.control.upgrade() else {
            return Ok(());
        };
        let status = control.status();
        gauge(
            &mut encoder,
            "config_generation",
            "Generation of the routing table serving now (counts publishes since start)",
            &[(Vec::new(), status.generation as i64)],
        )?;
        let severities = [Severity::Error, Severity::Warning, Severity::Info].map(|severity| {
            let count = status
                .diagnostics
                .iter()
                .filter(|d| d.severity == severity)
                .count();
            (
                vec![("severity", severity.to_string())],
                i64::try_from(count).unwrap_or(i64::MAX),
            )
        });
        gauge(
            &mut encoder,
            "diagnostics",
            "Diagnostics of the last compile, by severity",
            &severities,
        )?;
        let endpoints = endpoint_states(&control);
        gauge(
            &mut encoder,
            "endpoints",
            "Endpoints of each backend by state: ready, serving_terminating (kube-proxy's rule: used only when no endpoint is ready) and ejected (out of rotation after failed connects)",
            &endpoints,
        )?;
        if let Some(watches) = control.watch_reports() {
            let up: Vec<(Labels, i64)> = watches
                .iter()
                .map(|watch| {
                    let mut labels = vec![("kind", watch.kind.to_owned())];
                    if let Some(namespace) = &watch.namespace {
                        labels.push(("namespace", namespace.clone()));
                    }
                    (
                        labels,
                        i64::from(watch.error.is_none() && watch.synced_once),
                    )
                })
                .collect();
            gauge(
                &mut encoder,
                "watch_up",
                "1 when a watch (of a Kubernetes kind, or of the manifest directory) has synced and is not retrying after an error",
                &up,
            )?;
        }
        if self.per_endpoint.load(Ordering::Relaxed) {
            per_endpoint(&control, &mut encoder)?;
        }
        Ok(())
    }
}

/// `(labels, count)` of `sluice_endpoints` for every backend of the table.
fn endpoint_states(control: &ControlPlane) -> Vec<(Labels, i64)> {
    let table = control.table().load();
    let runtime = control.table().runtime();
    let mut samples = Vec::new();
    for backend in table.service_backends() {
        let (namespace, service, _) = backend.id().parts();
        let set = backend.endpoints().load();
        let mut counts = [0i64; 3];
        for endpoint in set.iter() {
            let state = match set.condition(endpoint) {
                _ if runtime.endpoint_report(endpoint).ejected => 2,
                Some(Condition::Ready) => 0,
                _ => 1,
            };
            counts[state] += 1;
        }
        for (state, count) in ["ready", "serving_terminating", "ejected"]
            .into_iter()
            .zip(counts)
        {
            let labels = vec![
                ("namespace", namespace.to_owned()),
                ("service", service.to_owned()),
                ("port", backend.id().parts().2.to_owned()),
                ("state", state.to_owned()),
            ];
            samples.push((labels, count));
        }
    }
    samples
}

/// Each endpoint's in-flight requests, latency average and outcomes, under its address.
fn per_endpoint(
    control: &ControlPlane,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let table = control.table().load();
    let runtime = control.table().runtime();
    let mut in_flight = Vec::new();
    let mut latency = Vec::new();
    let mut attempts = Vec::new();
    let mut failures = Vec::new();
    for backend in table.service_backends() {
        let (namespace, service, port) = backend.id().parts();
        for endpoint in backend.endpoints().load().iter() {
            let report = runtime.endpoint_report(endpoint);
            let labels = vec![
                ("namespace", namespace.to_owned()),
                ("service", service.to_owned()),
                ("port", port.to_owned()),
                ("endpoint", endpoint.authority().as_str().to_owned()),
            ];
            in_flight.push((labels.clone(), i64::from(report.in_flight)));
            let seconds = report.latency.map_or(0.0, |l| l.as_secs_f64());
            latency.push((labels.clone(), seconds));
            attempts.push((labels.clone(), report.attempts));
            failures.push((labels, report.failures));
        }
    }
    gauge(
        encoder,
        "endpoint_in_flight",
        "Requests in flight to each endpoint (--metrics-per-endpoint)",
        &in_flight,
    )?;
    family(
        encoder,
        (
            "endpoint_latency_seconds",
            "Peak-EWMA time to response headers of each endpoint (--metrics-per-endpoint)",
            MetricType::Gauge,
        ),
        &latency,
        ConstGauge::new,
    )?;
    counter(
        encoder,
        "endpoint_attempts",
        "Attempts sent to each endpoint (--metrics-per-endpoint)",
        &attempts,
    )?;
    counter(
        encoder,
        "endpoint_failures",
        "Attempts to each endpoint that failed or answered 5xx (--metrics-per-endpoint)",
        &failures,
    )
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: &[(Labels, i64)],
) -> Result<(), std::fmt::Error> {
    family(
        encoder,
        (name, help, MetricType::Gauge),
        samples,
        ConstGauge::new,
    )
}

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    family(
        encoder,
        (name, help, MetricType::Counter),
        samples,
        ConstCounter::new,
    )
}

/// One family: its name, help and type, then a sample per label set, made by `metric`.
fn family<V: Copy, M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    (name, help, metric_type): (&str, &str, MetricType),
    samples: &[(Labels, V)],
    metric: impl Fn(V) -> M,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, metric_type)?;
    for (labels, value) in samples {
        metric(*value).encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

/// The standard `process_*` metrics, read from /proc at each scrape.
#[derive(Debug)]
struct ProcessCollector {
    start_time: f64,
}

impl ProcessCollector {
    fn new() -> Self {
        let start_time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |since| since.as_secs_f64());
        Self { start_time }
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let process = ProcessSample::read();
        if let Some(cpu) = process.cpu_seconds {
            let family = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(cpu).encode(family)?;
        }
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                process.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                process.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                process.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                process.max_fds,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                Some(self.start_time),
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                let family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
                ConstGauge::new(value).encode(family)?;
            }
        }
        Ok(())
    }
}

/// One reading of the process's resources; a value the system does not give is `None`.
struct ProcessSample {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<f64>,
    virtual_bytes: Option<f64>,
    open_fds: Option<f64>,
    max_fds: Option<f64>,
}

impl ProcessSample {
    fn read() -> Self {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        // Fields after the command name, which is in parentheses and may hold spaces.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        // utime and stime are fields 14 and 15 (1-based) of stat; the list starts at field 3.
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
        let cpu_seconds = match (field(14), field(15)) {
            (Some(user), Some(system)) => Some((user + system) / ticks),
            _ => None,
        };
        let page = rustix::param::page_size() as f64;
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|entries| entries.count() as f64);
        let max_fds = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .map(|limit| limit as f64);
        Self {
            cpu_seconds,
            resident_bytes: field(24).map(|pages| pages * page),
            virtual_bytes: field(23),
            open_fds,
            max_fds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_infos_take_their_sample_names_in_prometheus_text() {
        let openmetrics = "# HELP sluice_requests Requests.\n# TYPE sluice_requests counter\nsluice_requests_total{code=\"200\"} 3\n# HELP sluice_build The build.\n# TYPE sluice_build info\nsluice_build_info{version=\"0.1.0\"} 1\n# HELP g A gauge.\n# TYPE g gauge\n# UNIT g seconds\ng 1.5\n# EOF\n";
        let text = to_prometheus_text(openmetrics);
        assert_eq!(
            text,
            "# HELP sluice_requests_total Requests.\n# TYPE sluice_requests_total counter\nsluice_requests_total{code=\"200\"} 3\n# HELP sluice_build_info The build.\n# TYPE sluice_build_info gauge\nsluice_build_info{version=\"0.1.0\"} 1\n# HELP g A gauge.\n# TYPE g gauge\ng 1.5\n"
        );
    }

    #[test]
    fn the_process_sample_reads_this_process() {
        let sample = ProcessSample::read();
        assert!(sample.cpu_seconds.is_some_and(|cpu| cpu >= 0.0));
        assert!(sample.resident_bytes.is_some_and(|bytes| bytes > 1e6));
        assert!(sample.open_fds.is_some_and(|fds| fds >= 3.0));
        assert!(sample.max_fds.is_some_and(|fds| fds >= 64.0));
    }
}
