//! `sluice drill`: a rolling deploy under load through the real control plane and proxy, reporting every failed request.
//!
//! The drill crate plays the cluster (pods, endpoint lag, the ClusterIP, the load); this module
//! plays sluice exactly as `serve` does: the Ingress and Service are real YAML compiled by
//! `compile()`, endpoint changes become EndpointSlices whose sets are swapped into the serving
//! table, and requests go through the same [`Proxy`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use sluice_config::{parse_manifest, ready_endpoints, CompileOptions, Document, Format, Snapshot};
use sluice_drill::{Environment, Mode, PodEndpoint, ProxyUnderTest, Report};
use sluice_proxy::{
    serve, serve_streams, ListenerOptions, Proxy, ProxyOptions, ShutdownSignal, ShutdownTrigger,
    StreamMetrics, StreamOptions,
};
use sluice_routing::{BackendId, BackendMode, SocketProtocol};
use tokio::net::TcpListener;

use crate::cli::{DrillArgs, DrillRoute};
use crate::control::ControlPlane;

/// Runs the drill and prints its report; `Ok(false)` when `--max-failed` was exceeded.
pub async fn run(args: DrillArgs) -> anyhow::Result<bool> {
    let DrillArgs {
        drill: options,
        response_retry_buffer,
        route,
    } = args;
    let proxy_options = ProxyOptions {
        response_retry_buffer,
        ..ProxyOptions::default()
    };
    let retries = Arc::new(std::sync::OnceLock::new());
    let report = sluice_drill::run(&options, |environment| {
        let retries = retries.clone();
        let proxy_options = proxy_options.clone();
        async move {
            let proxy = DrillProxy::start(environment, &proxy_options, route).await?;
            let _ = retries.set(proxy.control.clone());
            Ok(proxy)
        }
    })
    .await?;
    let retried = retries.get().map_or(0, |control: &Arc<ControlPlane>| {
        control.table().runtime().metrics().retries()
    });
    let report = report.with_retries(retried);
    print_report(&report, options.json);
    Ok(!report.exceeds(options.max_failed))
}

fn print_report(report: &Report, json: bool) {
    report.print_summary();
    if json {
        println!("{}", report.to_json_line());
    }
}

/// sluice under test: a control plane fed by the drill, and the proxy serving on loopback.
struct DrillProxy {
    control: Arc<ControlPlane>,
    /// The backend whose endpoint set follows the pods; `None` in service-upstream mode, where
    /// the only endpoint is the ClusterIP.
    backend: Option<BackendId>,
    address: SocketAddr,
    _stop: ShutdownTrigger,
}

impl DrillProxy {
    async fn start(
        environment: Environment,
        options: &ProxyOptions,
        route: DrillRoute,
    ) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("cannot listen for the drill's proxy")?;
        let address = listener.local_addr()?;
        let control = ControlPlane::new(CompileOptions::default());
        let snapshot = snapshot(&environment, route, address)?;
        control.publish_snapshot(&snapshot, Vec::new());
        let backend = control
            .table()
            .load()
            .backends()
            .first()
            .filter(|backend| backend.mode() == BackendMode::Endpoints)
            .map(|backend| backend.id().clone());
        let (stop, signal) = ShutdownSignal::new();
        match route {
            DrillRoute::Tcproute => {
                let options = StreamOptions {
                    table: control.table().clone(),
                    socket: address,
                    protocol: SocketProtocol::Tcp,
                    connect_timeout: Duration::from_secs(1),
                    handshake_timeout: Duration::from_secs(10),
                    grace_period: Duration::from_secs(1),
                    metrics: StreamMetrics::default(),
                };
                tokio::spawn(serve_streams(listener, options, None, signal));
            }
            DrillRoute::Ingress | DrillRoute::Httproute => {
                let proxy = Arc::new(Proxy::new(control.table().clone(), options));
                let handler = move |request, client| {
                    let proxy = proxy.clone();
                    async move { proxy.handle(request, client).await }
                };
                let options = ListenerOptions {
                    grace_period: Duration::from_secs(1),
                    // The HTTPRoute's Gateway listens on this very socket.
                    gateway_socket: (route == DrillRoute::Httproute).then_some(address),
                    ..ListenerOptions::default()
                };
                tokio::spawn(serve(listener, handler, signal, options));
            }
        }
        Ok(Self {
            control,
            backend,
            address,
            _stop: stop,
        })
    }
}

impl ProxyUnderTest for DrillProxy {
    fn address(&self) -> SocketAddr {
        self.address
    }

    /// What the Kubernetes source does on an EndpointSlice event: recompute the backend's set
    /// from the slice and swap it in.
    fn publish_endpoints(&self, endpoints: &[PodEndpoint]) {
        let Some(backend) = &self.backend else {
            return;
        };
        let slice = match endpoint_slice(endpoints) {
            Ok(slice) => slice,
            Err(error) => {
                tracing::error!(%error, "drill: cannot build the EndpointSlice");
                return;
            }
        };
        let set = ready_endpoints([&slice], None);
        self.control.update_endpoints(backend, Arc::new(set));
    }
}

/// The drill app's route (an Ingress, or a Gateway listening on `address` and an HTTPRoute),
/// Service and EndpointSlice, as YAML a user would write.
fn snapshot(
    environment: &Environment,
    route: DrillRoute,
    address: SocketAddr,
) -> anyhow::Result<Snapshot> {
    let mode = match environment.mode {
        Mode::Endpoints => None,
        Mode::ServiceUpstream => Some("\"true\""),
        Mode::Fallback => Some("fallback"),
    };
    let (cluster_ip, service_port) = match environment.cluster_ip {
        Some(address) => (address.ip().to_string(), address.port()),
        None => ("10.96.0.10".to_owned(), 80),
    };
    let target_port = environment
        .initial_endpoints
        .first()
        .map_or(8080, |endpoint| endpoint.address.port());
    // An Ingress asks for service-upstream itself; a Gateway API route asks through its Service.
    let (route_yaml, service_annotations) = match route {
        DrillRoute::Ingress => (ingress_yaml(mode, service_port), String::new()),
        DrillRoute::Httproute | DrillRoute::Tcproute => (
            gateway_yaml(route, address, service_port),
            mode.map(|mode| format!("\n  annotations:\n    sluice.dev/service-upstream: {mode}"))
                .unwrap_or_default(),
        ),
    };
    let yaml = format!(
        "{route_yaml}---
apiVersion: v1
kind: Service
metadata:
  name: app
  namespace: default{service_annotations}
spec:
  clusterIP: {cluster_ip}
  ports:
  - port: {service_port}
    targetPort: {target_port}
---
{}",
        slice_yaml(&environment.initial_endpoints)
    );
    let mut snapshot = Snapshot::default();
    let documents = parse_manifest(&yaml, Format::Yaml)
        .map_err(|errors| anyhow::anyhow!("drill manifests do not parse: {errors:?}"))?;
    for document in documents {
        if let Document::Object(object) = document {
            snapshot.insert(object);
        }
    }
    Ok(snapshot)
}

/// The drill's Ingress for `drill.local`, with the service-upstream annotation of `mode`.
fn ingress_yaml(mode: Option<&str>, service_port: u16) -> String {
    let annotations = match mode {
        None => String::new(),
        Some("fallback") => {
            "\n  annotations:\n    sluice.dev/service-upstream: fallback".to_owned()
        }
        Some(_) => "\n  annotations:\n    nginx.ingress.kubernetes.io/service-upstream: \"true\""
            .to_owned(),
    };
    format!(
        "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: drill
  namespace: default{annotations}
spec:
  ingressClassName: sluice
  rules:
  - host: drill.local
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: app
            port:
              number: {service_port}
"
    )
}

/// sluice's GatewayClass, a Gateway with one listener at `address`, and a route to the app: an
/// HTTP listener and an HTTPRoute for `drill.local`, or a TCP listener and a TCPRoute.
fn gateway_yaml(route: DrillRoute, address: SocketAddr, service_port: u16) -> String {
    let (protocol, kind, hostnames) = match route {
        DrillRoute::Tcproute => ("TCP", "TCPRoute", ""),
        _ => ("HTTP", "HTTPRoute", "\n  hostnames:\n  - drill.local"),
    };
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: sluice
spec:
  controllerName: {controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: drill
  namespace: default
spec:
  gatewayClassName: sluice
  addresses:
  - type: IPAddress
    value: \"{ip}\"
  listeners:
  - name: drill
    port: {port}
    protocol: {protocol}
---
apiVersion: gateway.networking.k8s.io/v1
kind: {kind}
metadata:
  name: drill
  namespace: default
spec:
  parentRefs:
  - name: drill{hostnames}
  rules:
  - backendRefs:
    - name: app
      port: {service_port}
",
        controller = sluice_config::DEFAULT_GATEWAY_CONTROLLER,
        ip = address.ip(),
        port = address.port(),
    )
}

/// The EndpointSlice listing `endpoints` with their conditions.
fn endpoint_slice(endpoints: &[PodEndpoint]) -> anyhow::Result<EndpointSlice> {
    let text = slice_yaml(endpoints);
    let documents = parse_manifest(&text, Format::Yaml)
        .map_err(|errors| anyhow::anyhow!("EndpointSlice does not parse: {errors:?}"))?;
    for document in documents {
        if let Document::Object(sluice_config::KubeObject::EndpointSlice(slice)) = document {
            return Ok(slice);
        }
    }
    anyhow::bail!("no EndpointSlice in the generated YAML")
}

fn slice_yaml(endpoints: &[PodEndpoint]) -> String {
    let port = endpoints
        .first()
        .map_or(8080, |endpoint| endpoint.address.port());
    let mut yaml = format!(
        "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: app-drill
  namespace: default
  labels:
    kubernetes.io/service-name: app
addressType: IPv4
ports:
- port: {port}
endpoints:
"
    );
    if endpoints.is_empty() {
        yaml = yaml.replace("endpoints:\n", "endpoints: []\n");
    }
    for endpoint in endpoints {
        yaml.push_str(&format!(
            "- addresses: [\"{}\"]\n  conditions: {{ready: {}, serving: {}, terminating: {}}}\n",
            endpoint.address.ip(),
            endpoint.ready,
            endpoint.serving,
            endpoint.terminating
        ));
    }
    yaml
}
