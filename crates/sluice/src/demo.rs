//! `sluice demo`: three demo pods and a ClusterIP stand-in on 127.0.0.x, manifests that point at them, and sluice serving them.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use sluice_config::CompileOptions;
use sluice_proxy::ProxyOptions;
use sluice_testkit::{EchoBackend, TestCa};

use crate::cli::DemoArgs;
use crate::serve::{shutdown_on_signal, ServeConfig, Server, SourceConfig};

/// The manifests in examples/demo/, with `{{POD_PORT}}`, `{{CLUSTER_IP}}` and `{{CLUSTER_PORT}}`
/// left for the demo to fill in.
const TEMPLATES: [(&str, &str); 5] = [
    (
        "ingress-class.yaml",
        include_str!("../../../examples/demo/ingress-class.yaml"),
    ),
    ("web.yaml", include_str!("../../../examples/demo/web.yaml")),
    (
        "legacy.yaml",
        include_str!("../../../examples/demo/legacy.yaml"),
    ),
    (
        "sticky.yaml",
        include_str!("../../../examples/demo/sticky.yaml"),
    ),
    (
        "secure.yaml",
        include_str!("../../../examples/demo/secure.yaml"),
    ),
];

/// The host the demo serves over HTTPS.
const SECURE_HOST: &str = "secure.demo";

/// Loopback addresses of the demo pods, as an EndpointSlice would list pod IPs.
const POD_IPS: [Ipv4Addr; 3] = [
    Ipv4Addr::new(127, 0, 0, 11),
    Ipv4Addr::new(127, 0, 0, 12),
    Ipv4Addr::new(127, 0, 0, 13),
];
const POD_NAMES: [&str; 3] = ["pod-a", "pod-b", "pod-c"];
/// Loopback address of the stand-in for a Service's ClusterIP.
const CLUSTER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 20);

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let pods = start_pods().await?;
    let pod_port = pods[0].addr().port();
    let cluster_ip = EchoBackend::start(
        "cluster-ip (kube-proxy would pick a pod here)",
        IpAddr::V4(CLUSTER_IP),
    )
    .await
    .with_context(|| format!("cannot start the ClusterIP stand-in on {CLUSTER_IP}"))?;
    let dir = tempfile::Builder::new()
        .prefix("sluice-demo-")
        .tempdir()
        .context("cannot create a directory for the demo manifests")?;
    let ca = TestCa::new("sluice demo CA").context("cannot create the demo CA")?;
    let issued = ca
        .server(&[SECURE_HOST])
        .context("cannot issue the demo certificate")?;
    let secret = issued.secret_yaml("default", "secure-demo-tls", None);
    write_manifests(dir.path(), pod_port, cluster_ip.addr(), &secret)?;
    let ca_path = dir.path().join("ca.crt");
    std::fs::write(&ca_path, ca.cert_pem())
        .with_context(|| format!("cannot write {}", ca_path.display()))?;

    let config = ServeConfig {
        source: SourceConfig::Manifests(dir.path().to_owned()),
        listen: args.listen,
        listen_tls: args.listen_tls.0,
        admin: args.admin,
        compile: CompileOptions::default(),
        proxy: ProxyOptions {
            https_redirect_port: args.listen_tls.0.map(|address| address.port()),
            ..args.proxy.proxy_options()
        },
        listener: args.proxy.listener_options(Duration::from_secs(2)),
        observe: args.observe.observe_config(),
        shutdown_delay: Duration::ZERO,
        grace_period: Duration::from_secs(2),
        udp_idle_timeout: Duration::from_secs(60),
        udp_max_flows: sluice_proxy::DEFAULT_UDP_MAX_FLOWS as usize,
        workers: crate::workers::available_cores(),
    };
    let server = Server::bind(config).await?;
    print_instructions(&args, dir.path(), &pods);
    server.run(shutdown_on_signal(Duration::ZERO)).await
}

/// Starts the three pods on one port number, as pods behind one targetPort listen.
async fn start_pods() -> anyhow::Result<Vec<EchoBackend>> {
    let mut last_error = None;
    for _attempt in 0..20 {
        let first = EchoBackend::start(POD_NAMES[0], IpAddr::V4(POD_IPS[0]))
            .await
            .with_context(|| format!("cannot start a demo pod on {}", POD_IPS[0]))?;
        let port = first.addr().port();
        let mut pods = vec![first];
        for (name, ip) in POD_NAMES.iter().zip(POD_IPS).skip(1) {
            match EchoBackend::start_on(name, SocketAddr::new(IpAddr::V4(ip), port)).await {
                Ok(pod) => pods.push(pod),
                Err(error) => {
                    last_error = Some(error);
                    break;
                }
            }
        }
        if pods.len() == POD_IPS.len() {
            return Ok(pods);
        }
    }
    Err(anyhow::anyhow!(
        "cannot find a port free on all demo pod addresses: {last_error:?}"
    ))
}

fn write_manifests(
    dir: &Path,
    pod_port: u16,
    cluster_ip: SocketAddr,
    secret: &str,
) -> anyhow::Result<()> {
    for (name, template) in TEMPLATES {
        let text = template
            .replace("{{SECRET}}", secret)
            .replace("{{POD_PORT}}", &pod_port.to_string())
            .replace("{{CLUSTER_IP}}", &cluster_ip.ip().to_string())
            .replace("{{CLUSTER_PORT}}", &cluster_ip.port().to_string());
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn print_instructions(args: &DemoArgs, dir: &Path, pods: &[EchoBackend]) {
    let proxy = args.listen;
    let pod_list: Vec<String> = pods
        .iter()
        .map(|p| format!("{} on {}", p.name(), p.addr()))
        .collect();
    println!(
        r#"
sluice demo is running.
  proxy:     http://{proxy}
  dashboard: http://{admin}/   (routes, backends, endpoint states, live)
  pods:      {pods}
  manifests: {dir}   (edit them: changes apply within a second)

Try:
  # path routing and round robin: / is served by three pods in turn
  for i in 1 2 3; do curl -s http://{proxy}/; done
  # /api is served by one pod
  curl -s http://{proxy}/api/items
  # service-upstream: the legacy.demo Ingress goes to the Service's ClusterIP
  curl -s -H 'Host: legacy.demo' http://{proxy}/
  # a Service whose only pod is not ready: 503
  curl -s http://{proxy}/down
  # sticky sessions: the first answer sets a cookie, the next three stay on that pod
  curl -s -c /tmp/sluice-demo-cookies -H 'Host: sticky.demo' http://{proxy}/
  for i in 1 2 3; do curl -s -b /tmp/sluice-demo-cookies -H 'Host: sticky.demo' http://{proxy}/; done
{https}  # the compiled table, endpoints and diagnostics
  curl -s http://{admin}/api/routes
  # Prometheus metrics, per route
  curl -s http://{admin}/metrics | grep sluice_requests_total

Press Ctrl-C to stop.
"#,
        admin = args.admin,
        https = https_instructions(args, dir),
        pods = pod_list.join(", "),
        dir = dir.display(),
    );
}

/// The HTTPS lines of the instructions: curl trusting the demo CA, and the redirect.
fn https_instructions(args: &DemoArgs, dir: &Path) -> String {
    let Some(tls) = args.listen_tls.0 else {
        return String::new();
    };
    let ca = dir.join("ca.crt");
    format!(
        "  # HTTPS with SNI: the certificate for {SECURE_HOST} from a Secret, HTTP/2 by ALPN, HSTS\n  curl -s --cacert {ca} --resolve {SECURE_HOST}:{port}:{ip} https://{SECURE_HOST}:{port}/ -i\n  # plain HTTP for a host with TLS: a 308 to https://\n  curl -s -o /dev/null -w '%{{http_code}} %{{redirect_url}}\\n' -H 'Host: {SECURE_HOST}' http://{proxy}/\n",
        ca = ca.display(),
        port = tls.port(),
        ip = tls.ip(),
        proxy = args.listen,
    )
}
