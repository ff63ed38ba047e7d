//! Command-line interface: `serve`, `check` and `demo`, with their flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand};
use sluice_config::annotations::parse_size;
use sluice_config::{CompileOptions, ObjectKey};
use sluice_proxy::{
    AccessLogFormat, ListenerMetrics, ListenerOptions, ProxyOptions, TrustedProxies,
};

use sluice_sources::kubernetes::PublishTarget;

use crate::kube_source::{KubeConfig, LeaderElection};
use crate::serve::{AccessLogConfig, ServeConfig, SourceConfig};

#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "Kubernetes ingress controller and HTTP reverse proxy"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub log: crate::logging::LogArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve Ingress routes from Kubernetes manifests in a directory, reloading on change.
    Serve(Box<ServeArgs>),
    /// Parse and compile manifests, print the route table and every diagnostic; exit 1 on errors.
    Check(CheckArgs),
    /// Run a complete example: three demo pods, a ClusterIP, manifests, and sluice on 127.0.0.1:8080.
    Demo(Box<DemoArgs>),
    /// Replay a Deployment's rolling update under load through sluice and count failed requests.
    Drill(Box<DrillArgs>),
}

/// `sluice drill`: the drill's options, and the proxy settings it runs sluice with.
#[derive(Debug, Clone, Args)]
pub struct DrillArgs {
    #[command(flatten)]
    pub drill: sluice_drill::DrillOptions,
    /// sluice's --response-retry-buffer for the drill (0: off, to see what it saves).
    #[arg(long, default_value = "64k", value_parser = parse_size_flag, value_name = "SIZE")]
    pub response_retry_buffer: u64,
    /// What routes the drill's app: an Ingress, or a Gateway API Gateway with an HTTPRoute or
    /// a TCPRoute.
    #[arg(long, value_enum, default_value = "ingress")]
    pub route: DrillRoute,
}

/// The object that routes the drill's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DrillRoute {
    /// An Ingress of class sluice, served on the proxy listener.
    Ingress,
    /// A GatewayClass, a Gateway whose listener is the drill's socket, and an HTTPRoute.
    Httproute,
    /// A Gateway whose TCP listener is the drill's socket, and a TCPRoute: each client
    /// connection is spliced to one pod, with no retry and no HTTP parsing.
    Tcproute,
}

/// Which Ingresses to serve.
#[derive(Debug, Clone, Args)]
pub struct ClassArgs {
    /// The IngressClass name to serve.
    #[arg(long, default_value = "sluice", value_name = "NAME")]
    pub ingress_class: String,
    /// Also serve Ingresses that name no class.
    #[arg(long)]
    pub watch_ingress_without_class: bool,
    /// Serve the Gateway API GatewayClasses whose spec.controllerName is this, and their
    /// Gateways.
    #[arg(long, default_value = sluice_config::DEFAULT_GATEWAY_CONTROLLER, value_name = "NAME")]
    pub gateway_controller_name: String,
    /// Where the listeners of a Gateway that names no IPAddress in spec.addresses are bound.
    #[arg(long, default_value = "0.0.0.0", value_name = "IP")]
    pub gateway_address: std::net::IpAddr,
    /// Apply Traefik Middlewares of other namespaces than the Ingress (or Service) that names
    /// them; without it such a reference makes the routes answer 503.
    #[arg(long)]
    pub allow_cross_namespace_middlewares: bool,
}

impl ClassArgs {
    pub fn compile_options(&self) -> CompileOptions {
        CompileOptions {
            ingress_class: self.ingress_class.clone(),
            watch_without_class: self.watch_ingress_without_class,
            default_certificate: None,
            gateway_controller: self.gateway_controller_name.clone(),
            gateway_address: self.gateway_address,
            allow_cross_namespace_middlewares: self.allow_cross_namespace_middlewares,
        }
    }
}

/// TLS settings shared by `serve` and `demo`.
#[derive(Debug, Clone, Args)]
pub struct TlsArgs {
    /// The kubernetes.io/tls Secret served to handshakes that name no TLS host (no SNI, or an
    /// unknown one). Without it, a self-signed certificate generated at start is served.
    #[arg(long, value_name = "NS/NAME", value_parser = parse_object_key)]
    pub default_certificate: Option<ObjectKey>,
    /// The port that redirects to https:// name; the TLS listener's port by default. Set 443
    /// when a load balancer in front maps 443 to the TLS listener.
    #[arg(long, value_name = "PORT")]
    pub https_redirect_port: Option<u16>,
}

/// Proxy tunables and client limits shared by `serve` and `demo`.
#[derive(Debug, Clone, Args)]
pub struct ProxyArgs {
    /// Timeout for connecting to an endpoint (e.g. 5s, 500ms); expiry answers 504.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub connect_timeout: Duration,
    /// Timeout for an endpoint's response headers, counted from the moment the request body has
    /// been sent; expiry answers 504.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub response_header_timeout: Duration,
    /// The longest pause between two body chunks, client to sluice or endpoint to sluice, and
    /// the longest a client may leave a response unread.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub body_idle_timeout: Duration,
    /// The request head must arrive within this, from accept or from the first byte of a later
    /// request on the connection (slowloris).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub client_header_timeout: Duration,
    /// A keep-alive client connection with no request in flight closes after this.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub client_idle_timeout: Duration,
    /// An idle keep-alive connection to an endpoint closes after this, or sooner when the
    /// endpoint announces a shorter Keep-Alive timeout.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub upstream_idle_timeout: Duration,
    /// The largest request head (request line and headers); larger gets 431.
    #[arg(long, default_value = "64k", value_parser = parse_size_flag, value_name = "SIZE")]
    pub max_header_bytes: u64,
    /// The most header fields a request may have; more gets 431.
    #[arg(long, default_value_t = sluice_proxy::DEFAULT_MAX_HEADERS, value_name = "N")]
    pub max_headers: usize,
    /// The largest request body (e.g. 10m); larger gets 413. Unlimited when not given; a
    /// route's proxy-body-size annotation overrides it.
    #[arg(long, value_parser = parse_size_flag, value_name = "SIZE")]
    pub max_body_size: Option<u64>,
    /// HTTP/2 streams one client connection may have open at once.
    #[arg(long, default_value_t = sluice_proxy::DEFAULT_MAX_CONCURRENT_STREAMS, value_name = "N")]
    pub max_concurrent_streams: u32,
    /// Peers whose X-Forwarded-* and Forwarded headers are believed
    /// (CIDR[,CIDR...]); from any other peer they are replaced.
    #[arg(long, default_value = "", value_parser = parse_trusted_proxies, value_name = "CIDR[,CIDR...]", hide_default_value = true)]
    pub trusted_proxies: TrustedProxies,
    /// Every connection starts with a PROXY protocol v1 or v2 header (from a load balancer in
    /// front) that names the client; a connection without a valid one is closed.
    #[arg(long)]
    pub proxy_protocol: bool,
    /// Secret that keys sticky-session cookie values; give every replica the same one. Without
    /// it a built-in key is used: replicas still agree, but values are not secret.
    #[arg(
        long,
        env = "SLUICE_SESSION_SECRET",
        hide_env_values = true,
        value_name = "SECRET"
    )]
    pub session_secret: Option<String>,
    /// An upgraded (WebSocket) connection with no byte either way for this long is closed.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub websocket_idle_timeout: Duration,
    /// A response that declares a length up to this size is read whole from the pod before
    /// the client gets a byte, when a retry could follow: a pod that dies mid-body then costs
    /// a retry, not a truncated response. 0 turns it off; a route's
    /// sluice.dev/response-retry-buffer overrides it.
    #[arg(long, default_value = "64k", value_parser = parse_size_flag, value_name = "SIZE")]
    pub response_retry_buffer: u64,
    /// The most response bytes held at once, across all requests; past it responses stream.
    #[arg(long, default_value = "64m", value_parser = parse_size_flag, value_name = "SIZE")]
    pub response_retry_buffer_total: u64,
    /// Compresses compressible responses for clients that accept it: `off`, or a comma list
    /// of `gzip`, `br` and `zstd`. An Ingress's `sluice.dev/compression` and a Traefik
    /// `compress` middleware choose for their routes.
    #[arg(long, default_value = "off", value_parser = sluice_routing::Codings::parse, value_name = "LIST|off")]
    pub compression: sluice_routing::Codings,
}

/// `--listen-tls`: an address, or `None` for `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenTls(pub Option<SocketAddr>);

/// `--listen-tls ADDR`, or `off`.
fn parse_listen_tls(text: &str) -> Result<ListenTls, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(ListenTls(None));
    }
    text.parse()
        .map(|address| ListenTls(Some(address)))
        .map_err(|error| format!("{text:?} is neither an address (IP:PORT) nor \"off\": {error}"))
}

fn parse_size_flag(text: &str) -> Result<u64, String> {
    parse_size(text)
        .ok_or_else(|| format!("{text:?} is not a size (bytes, or a number with k, m or g)"))
}

fn parse_trusted_proxies(text: &str) -> Result<TrustedProxies, String> {
    text.parse()
}

impl ProxyArgs {
    pub fn proxy_options(&self) -> ProxyOptions {
        ProxyOptions {
            connect_timeout: self.connect_timeout,
            response_header_timeout: self.response_header_timeout,
            body_idle_timeout: self.body_idle_timeout,
            upstream_idle_timeout: self.upstream_idle_timeout,
            max_body_size: self.max_body_size,
            trusted_proxies: self.trusted_proxies.clone(),
            session_secret: self.session_secret.as_ref().map(|s| s.as_bytes().to_vec()),
            https_redirect_port: None,
            websocket_idle_timeout: self.websocket_idle_timeout,
            response_retry_buffer: self.response_retry_buffer,
            response_retry_buffer_total: self.response_retry_buffer_total,
            compression: self.compression,
        }
    }

    /// The proxy listener's options; `grace_period` bounds the last phase of shutdown.
    pub fn listener_options(&self, grace_period: Duration) -> ListenerOptions {
        ListenerOptions {
            proxy_protocol: self.proxy_protocol,
            client_header_timeout: self.client_header_timeout,
            client_idle_timeout: self.client_idle_timeout,
            body_idle_timeout: self.body_idle_timeout,
            max_header_bytes: usize::try_from(self.max_header_bytes).unwrap_or(usize::MAX),
            max_headers: self.max_headers,
            max_concurrent_streams: self.max_concurrent_streams,
            grace_period,
            metrics: ListenerMetrics::default(),
            gateway_socket: None,
        }
    }
}

/// What sluice lets operators see: metrics, the access log, and who may use the admin API.
#[derive(Debug, Clone, Args)]
pub struct ObserveArgs {
    /// Export each endpoint's in-flight requests, latency and outcomes under its pod address
    /// (one series per pod: mind the cardinality).
    #[arg(long)]
    pub metrics_per_endpoint: bool,
    /// One line per request: off, json, or nginx's combined format with sluice's fields
    /// appended.
    #[arg(long, default_value = "off", value_parser = parse_access_log, value_name = "off|json|combined")]
    pub access_log: AccessLogChoice,
    /// Write the access log to this file (appending) instead of stdout.
    #[arg(long, value_name = "PATH")]
    pub access_log_file: Option<PathBuf>,
    /// Access-log lines held for the writer; when it falls this far behind, lines are dropped
    /// (and counted in sluice_access_log_dropped_total) rather than delay a request.
    #[arg(long, default_value_t = sluice_proxy::DEFAULT_ACCESS_LOG_QUEUE, value_name = "LINES")]
    pub access_log_buffer: usize,
    /// Export a span per request and one per upstream attempt to this OpenTelemetry
    /// collector over OTLP/HTTP (protobuf, POSTed to URL/v1/traces), and pass W3C Trace
    /// Context on to the pods. Off when not given.
    #[arg(long, value_name = "URL")]
    pub tracing_otlp_endpoint: Option<String>,
    /// The share of new traces recorded, 0 to 1; a client's `traceparent` decides for its
    /// own trace (sampled: always recorded; not sampled: never).
    #[arg(long, default_value_t = 1.0, value_parser = parse_ratio, value_name = "F")]
    pub tracing_sample_ratio: f64,
    /// The `service.name` of the exported spans.
    #[arg(long, default_value = "sluice", value_name = "NAME")]
    pub tracing_service_name: String,
    /// Require `Authorization: Bearer TOKEN` on every admin request but /healthz and /readyz.
    #[arg(
        long,
        env = "SLUICE_ADMIN_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub admin_token: Option<String>,
    /// Serve the admin listener on a non-loopback address without --admin-token (anyone who
    /// reaches it can read every host, backend and pod address and change the log level).
    #[arg(long)]
    pub admin_insecure: bool,
    /// Address of a listener that serves only /metrics, /healthz and /readyz, with no token:
    /// what probes and Prometheus need (deploy/ binds 0.0.0.0:9100), while --admin keeps the
    /// dashboard and the JSON API on loopback.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
}

/// `--access-log`: a format, or `None` for `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessLogChoice(pub Option<AccessLogFormat>);

fn parse_access_log(text: &str) -> Result<AccessLogChoice, String> {
    match text.to_ascii_lowercase().as_str() {
        "off" => Ok(AccessLogChoice(None)),
        "json" => Ok(AccessLogChoice(Some(AccessLogFormat::Json))),
        "combined" => Ok(AccessLogChoice(Some(AccessLogFormat::Combined))),
        _ => Err(format!("{text:?} is not one of off, json, combined")),
    }
}

fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err(format!("{text:?} is not a number from 0 to 1")),
    }
}

impl ObserveArgs {
    pub fn observe_config(&self) -> crate::serve::ObserveConfig {
        crate::serve::ObserveConfig {
            per_endpoint: self.metrics_per_endpoint,
            access_log: self.access_log.0.map(|format| AccessLogConfig {
                format,
                file: self.access_log_file.clone(),
                buffer: self.access_log_buffer,
            }),
            tracing: self.tracing_otlp_endpoint.clone().map(|endpoint| {
                sluice_proxy::TracingOptions {
                    endpoint,
                    sample_ratio: self.tracing_sample_ratio,
                    service_name: self.tracing_service_name.clone(),
                }
            }),
            admin_token: self.admin_token.clone().filter(|token| !token.is_empty()),
            admin_insecure: self.admin_insecure,
            metrics: self.metrics,
        }
    }
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("source").required(true).args(["manifests", "kubernetes"])))]
pub struct ServeArgs {
    /// Directory of Kubernetes manifests (*.yaml, *.yml, *.json), watched for changes.
    #[arg(long, value_name = "DIR")]
    pub manifests: Option<PathBuf>,
    /// Watch the Kubernetes API (--kubeconfig when given, else in-cluster, else KUBECONFIG).
    #[arg(long)]
    pub kubernetes: bool,
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Address the proxy listens on.
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Address of the TLS listener (HTTPS, HTTP/2 by ALPN, passthrough), or "off".
    #[arg(long, default_value = "0.0.0.0:8443", value_parser = parse_listen_tls, value_name = "ADDR|off")]
    pub listen_tls: ListenTls,
    /// Address of the admin listener: the dashboard (/), /healthz, /readyz, /metrics, the
    /// JSON API (/api/routes, /api/backends, /api/status, /api/diagnostics) and PUT
    /// /log-level. A non-loopback address needs --admin-token (or --admin-insecure).
    #[arg(long, default_value = "127.0.0.1:9000", value_name = "ADDR")]
    pub admin: SocketAddr,
    #[command(flatten)]
    pub class: ClassArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub proxy: ProxyArgs,
    #[command(flatten)]
    pub observe: ObserveArgs,
    /// On SIGTERM, how long /readyz answers 503 while sluice keeps serving, so load balancers
    /// stop sending before the listener closes.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub shutdown_delay: Duration,
    /// After the shutdown delay, how long requests in flight may finish before their
    /// connections are closed.
    #[arg(long, alias = "drain-timeout", default_value = "30s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub grace_period: Duration,
    /// How long a Gateway UDP listener keeps a client's flow (its backend and endpoint)
    /// without a datagram either way.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub udp_idle_timeout: Duration,
    /// The most client flows one Gateway UDP listener keeps at once (each holds a socket); a
    /// datagram from a new client beyond it is dropped until flows go idle.
    #[arg(long, default_value_t = sluice_proxy::DEFAULT_UDP_MAX_FLOWS, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub udp_max_flows: u32,
    /// Data-plane workers: single-threaded runtimes on threads of their own, each with its own
    /// SO_REUSEPORT socket on --listen and --listen-tls and its own upstream connections; the
    /// kernel spreads new connections over them. Default: the cores sluice may run on.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: Option<u16>,
}

/// Flags of the Kubernetes source.
#[derive(Debug, Args)]
pub struct KubeArgs {
    /// Kubeconfig file to use instead of the in-cluster or default configuration.
    #[arg(long, value_name = "PATH", conflicts_with = "manifests")]
    pub kubeconfig: Option<PathBuf>,
    /// Watch only this namespace (repeat for several); all namespaces by default.
    #[arg(long = "namespace", value_name = "NS", conflicts_with = "manifests")]
    pub namespaces: Vec<String>,
    /// Write this Service's load-balancer address (else its ClusterIP) into served Ingresses' status.
    #[arg(long, value_name = "NS/NAME", conflicts_with = "manifests", value_parser = parse_object_key)]
    pub publish_service: Option<ObjectKey>,
    /// Write this IP or hostname into served Ingresses' status.
    #[arg(
        long,
        value_name = "IP|HOSTNAME",
        conflicts_with = "manifests",
        conflicts_with = "publish_service"
    )]
    pub publish_address: Option<String>,
    /// Write status only while holding a coordination.k8s.io Lease (for several replicas).
    #[arg(long, conflicts_with = "manifests")]
    pub leader_elect: bool,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "sluice-leader", value_name = "NAME")]
    pub leader_elect_lease: String,
    /// Namespace of the leader-election Lease.
    #[arg(
        long,
        env = "POD_NAMESPACE",
        default_value = "default",
        value_name = "NS"
    )]
    pub leader_elect_namespace: String,
    /// This replica's identity in the election (defaults to the pod name, else the host name).
    #[arg(long, env = "POD_NAME", value_name = "ID")]
    pub leader_elect_identity: Option<String>,
    /// How long the Lease holds without renewal before another replica may take it over.
    #[arg(long, default_value = "15s", value_parser = parse_lease_duration, value_name = "DURATION")]
    pub leader_elect_lease_duration: Duration,
}

/// Whole seconds, at least 2 (the Lease's `leaseDurationSeconds`).
fn parse_lease_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if duration.as_secs() < 2 || duration.subsec_nanos() != 0 {
        return Err(format!(
            "{text:?}: the lease duration must be whole seconds, at least 2s"
        ));
    }
    Ok(duration)
}

fn parse_object_key(text: &str) -> Result<ObjectKey, String> {
    match text.split_once('/') {
        Some((namespace, name))
            if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
        {
            Ok(ObjectKey::new(namespace, name))
        }
        _ => Err(format!("{text:?} is not NAMESPACE/NAME")),
    }
}

impl KubeArgs {
    fn into_config(self) -> KubeConfig {
        let publish = match (self.publish_service, self.publish_address) {
            (Some(service), _) => Some(PublishTarget::Service(service)),
            (None, Some(address)) => Some(PublishTarget::Address(address)),
            (None, None) => None,
        };
        let identity = self.leader_elect_identity.unwrap_or_else(host_name);
        KubeConfig {
            kubeconfig: self.kubeconfig,
            namespaces: self.namespaces,
            publish,
            leader_election: self.leader_elect.then_some(LeaderElection {
                lease: self.leader_elect_lease,
                namespace: self.leader_elect_namespace,
                identity,
                duration: self.leader_elect_lease_duration,
            }),
        }
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| format!("sluice-{}", std::process::id()))
}

impl ServeArgs {
    pub fn into_config(self) -> ServeConfig {
        let source = match self.manifests {
            Some(dir) => SourceConfig::Manifests(dir),
            None => SourceConfig::Kubernetes(self.kube.into_config()),
        };
        let mut compile = self.class.compile_options();
        compile.default_certificate = self.tls.default_certificate.clone();
        let mut proxy = self.proxy.proxy_options();
        proxy.https_redirect_port = self
            .tls
            .https_redirect_port
            .or(self.listen_tls.0.map(|address| address.port()));
        ServeConfig {
            compile,
            proxy,
            listen_tls: self.listen_tls.0,
            listener: self.proxy.listener_options(self.grace_period),
            observe: self.observe.observe_config(),
            shutdown_delay: self.shutdown_delay,
            grace_period: self.grace_period,
            udp_idle_timeout: self.udp_idle_timeout,
            udp_max_flows: self.udp_max_flows as usize,
            source,
            listen: self.listen,
            admin: self.admin,
            workers: self
                .workers
                .map_or_else(crate::workers::available_cores, usize::from),
        }
    }
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Directory of Kubernetes manifests to check.
    #[arg(long, value_name = "DIR")]
    pub manifests: PathBuf,
    #[command(flatten)]
    pub class: ClassArgs,
    /// Check this kubernetes.io/tls Secret as the default certificate, as `serve` would use it.
    #[arg(long, value_name = "NS/NAME", value_parser = parse_object_key)]
    pub default_certificate: Option<ObjectKey>,
    /// Also print every ingress-nginx and Traefik annotation in the directory (on Ingresses
    /// of any class, and Services): how many objects use it, and whether sluice honours it
    /// fully, partly or not.
    #[arg(long)]
    pub migration_report: bool,
    /// With --migration-report: print only the report, as one JSON object (rows and totals;
    /// docs/migration-report.schema.json), for tooling. The exit code still says whether the
    /// directory has errors.
    #[arg(long, requires = "migration_report")]
    pub json: bool,
}

impl CheckArgs {
    pub fn compile_options(&self) -> CompileOptions {
        CompileOptions {
            default_certificate: self.default_certificate.clone(),
            ..self.class.compile_options()
        }
    }
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Address the demo proxy listens on.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// The demo's TLS listener (secure.demo with a certificate from a throwaway CA), or "off".
    #[arg(long, default_value = "127.0.0.1:8443", value_parser = parse_listen_tls, value_name = "ADDR|off")]
    pub listen_tls: ListenTls,
    /// Address of the demo's admin listener (the dashboard is at its root).
    #[arg(long, default_value = "127.0.0.1:9000", value_name = "ADDR")]
    pub admin: SocketAddr,
    #[command(flatten)]
    pub proxy: ProxyArgs,
    #[command(flatten)]
    pub observe: ObserveArgs,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_defaults_match_the_proxy_defaults() {
        let cli = Cli::parse_from(["sluice", "serve", "--manifests", "dir"]);
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        assert_eq!(
            args.proxy.connect_timeout,
            sluice_proxy::DEFAULT_CONNECT_TIMEOUT
        );
        assert_eq!(
            args.proxy.response_header_timeout,
            sluice_proxy::DEFAULT_RESPONSE_HEADER_TIMEOUT
        );
        assert_eq!(args.listen, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(args.admin, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(args.class.ingress_class, "sluice");
    }

    #[test]
    fn client_limits_default_to_the_documented_values() {
        let cli = Cli::parse_from(["sluice", "serve", "--manifests", "dir"]);
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        let config = args.into_config();
        let listener = &config.listener;
        assert_eq!(
            listener.client_header_timeout,
            sluice_proxy::DEFAULT_CLIENT_HEADER_TIMEOUT
        );
        assert_eq!(
            listener.client_idle_timeout,
            sluice_proxy::DEFAULT_CLIENT_IDLE_TIMEOUT
        );
        assert_eq!(
            listener.body_idle_timeout,
            sluice_proxy::DEFAULT_BODY_IDLE_TIMEOUT
        );
        assert_eq!(
            listener.max_header_bytes,
            sluice_proxy::DEFAULT_MAX_HEADER_BYTES
        );
        assert_eq!(listener.max_headers, sluice_proxy::DEFAULT_MAX_HEADERS);
        assert_eq!(
            listener.max_concurrent_streams,
            sluice_proxy::DEFAULT_MAX_CONCURRENT_STREAMS
        );
        assert!(!listener.proxy_protocol);
        let proxy = &config.proxy;
        assert_eq!(
            proxy.upstream_idle_timeout,
            sluice_proxy::DEFAULT_UPSTREAM_IDLE_TIMEOUT
        );
        assert_eq!(proxy.max_body_size, None);
        assert!(proxy.trusted_proxies.is_empty());
        assert_eq!(
            proxy.response_retry_buffer,
            sluice_proxy::DEFAULT_RESPONSE_RETRY_BUFFER
        );
        assert_eq!(
            proxy.response_retry_buffer_total,
            sluice_proxy::DEFAULT_RESPONSE_RETRY_BUFFER_TOTAL
        );
    }

    #[test]
    fn sizes_and_trusted_proxies_are_checked_when_parsed() {
        let cli = Cli::parse_from([
            "sluice",
            "serve",
            "--manifests",
            "dir",
            "--max-body-size",
            "8m",
            "--response-retry-buffer",
            "0",
            "--response-retry-buffer-total",
            "1m",
            "--compression",
            "gzip,zstd",
            "--trusted-proxies",
            "10.0.0.0/8,192.0.2.1",
        ]);
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        let proxy = args.into_config().proxy;
        assert_eq!(proxy.max_body_size, Some(8 << 20));
        assert_eq!(proxy.response_retry_buffer, 0);
        assert_eq!(proxy.response_retry_buffer_total, 1 << 20);
        assert_eq!(proxy.compression.to_string(), "zstd,gzip");
        assert!(proxy.trusted_proxies.contains("10.1.2.3".parse().unwrap()));
        assert!(!proxy.trusted_proxies.contains("11.0.0.1".parse().unwrap()));
        for bad in [
            ["--max-body-size", "8 MB"],
            ["--response-retry-buffer", "-1"],
            ["--trusted-proxies", "10.0.0.0/40"],
        ] {
            let mut argv = vec!["sluice", "serve", "--manifests", "dir"];
            argv.extend(bad);
            assert!(Cli::try_parse_from(argv).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn serve_needs_exactly_one_source() {
        assert!(Cli::try_parse_from(["sluice", "serve"]).is_err());
        assert!(
            Cli::try_parse_from(["sluice", "serve", "--manifests", "d", "--kubernetes"]).is_err()
        );
        assert!(
            Cli::try_parse_from(["sluice", "serve", "--manifests", "d", "--namespace", "a"])
                .is_err(),
            "--namespace needs --kubernetes"
        );
        assert!(Cli::try_parse_from([
            "sluice",
            "serve",
            "--kubernetes",
            "--namespace",
            "a",
            "--namespace",
            "b"
        ])
        .is_ok());
    }

    #[test]
    fn publish_service_must_be_namespace_slash_name() {
        assert!(Cli::try_parse_from([
            "sluice",
            "serve",
            "--kubernetes",
            "--publish-service",
            "just-a-name"
        ])
        .is_err());
        let cli = Cli::parse_from([
            "sluice",
            "serve",
            "--kubernetes",
            "--publish-service",
            "sluice-system/sluice",
            "--leader-elect",
        ]);
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        let SourceConfig::Kubernetes(kube) = args.into_config().source else {
            panic!("not kubernetes")
        };
        assert_eq!(
            kube.publish,
            Some(PublishTarget::Service(ObjectKey::new(
                "sluice-system",
                "sluice"
            )))
        );
        assert_eq!(
            kube.leader_election.map(|l| l.lease).as_deref(),
            Some("sluice-leader")
        );
    }
}
