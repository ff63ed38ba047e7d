//! Gateway API conformance tests of TLSRoute and TCPRoute set up as upstream (v1.6.1) sets them up, through the real binary: its Gateways, listeners, route names, hostnames, backend Services with their named ports and replica counts, and a backend that speaks the suite's TCP echo protocol (a greeting, `PING`, `IS_TLS`, `TEST`).
//!
//! Ports differ: each listener binds a free port instead of 443, 8443, 8883 or 93xx, and
//! each test has its own `--gateway-address`, as the suite's Gateways get addresses of their
//! own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use sluice_testkit::{IssuedPem, TestCa};
use support::tls::{server_config, tls_dial};
use support::{free_port, pod_ip, wait_for_socket, wait_until, write_manifest, Sluice};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const INFRA: &str = "gateway-conformance-infra";
const WEB: &str = "gateway-conformance-web-backend";
const GREETING: &str = "Gateway API Test TCP Server";

fn gateway_ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 5, n))
}

/// The base manifests' namespaces and the GatewayClass.
fn base() -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {INFRA}, labels: {{gateway-conformance: infra}}}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {WEB}, labels: {{gateway-conformance: backend}}}}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: sluice}}\nspec: {{controllerName: sluice.dev/gateway-controller}}\n"
    )
}

/// One pod of the suite's TCP echo server (`TCP_ECHO_SERVER=1`): plain TCP on one port and,
/// with a certificate, TLS on another; it greets first, then answers `PING`, `IS_TLS` and
/// `TEST` (a JSON line with its namespace, pod name and the server name TLS was asked for).
struct EchoPod {
    plain: SocketAddr,
    tls: Option<SocketAddr>,
}

impl EchoPod {
    async fn start(
        pod: &str,
        namespace: &str,
        ip: IpAddr,
        certificate: Option<&IssuedPem>,
    ) -> Self {
        let plain = TcpListener::bind(SocketAddr::new(ip, 0)).await.unwrap();
        let plain_addr = plain.local_addr().unwrap();
        let identity = Arc::new((pod.to_owned(), namespace.to_owned()));
        let id = identity.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = plain.accept().await {
                tokio::spawn(converse(stream, id.clone(), None));
            }
        });
        let tls = match certificate {
            None => None,
            Some(issued) => {
                let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config(issued)));
                let listener = TcpListener::bind(SocketAddr::new(ip, 0)).await.unwrap();
                let addr = listener.local_addr().unwrap();
                tokio::spawn(async move {
                    while let Ok((stream, _)) = listener.accept().await {
                        let (acceptor, identity) = (acceptor.clone(), identity.clone());
                        tokio::spawn(async move {
                            if let Ok(tls) = acceptor.accept(stream).await {
                                let sni = tls.get_ref().1.server_name().map(str::to_owned);
                                converse(tls, identity, Some(sni.unwrap_or_default())).await;
                            }
                        });
                    }
                });
                Some(addr)
            }
        };
        Self {
            plain: plain_addr,
            tls,
        }
    }
}

/// The echo server's side of one connection: `sni` is `Some` on its TLS port.
async fn converse<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    identity: Arc<(String, String)>,
    sni: Option<String>,
) {
    let (read, mut write) = tokio::io::split(stream);
    let mut lines = BufReader::new(read).lines();
    if write
        .write_all(format!("{GREETING}\n").as_bytes())
        .await
        .is_err()
    {
        return;
    }
    while let Ok(Some(line)) = lines.next_line().await {
        let answer = match line.as_str() {
            "PING" => "PONG".to_owned(),
            "IS_TLS" => sni.is_some().to_string(),
            "TEST" => serde_json::json!({
                "namespace": identity.1,
                "pod": identity.0,
                "isTLS": sni.is_some(),
                "tls": {"serverName": sni.clone().unwrap_or_default()},
            })
            .to_string(),
            _ => "UNKNOWN".to_owned(),
        };
        if write
            .write_all(format!("{answer}\n").as_bytes())
            .await
            .is_err()
        {
            return;
        }
    }
}

/// What the suite's TCP client learns on one connection: the pod's `TEST` answer, after
/// checking the greeting, `PONG` and `IS_TLS`.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(stream: S, tls: bool) -> serde_json::Value {
    let (read, mut write) = tokio::io::split(stream);
    let mut lines = BufReader::new(read).lines();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(5), lines.next_line())
            .await
            .expect("an answer within 5 s")
            .unwrap()
            .expect("a line")
    };
    assert_eq!(next().await, GREETING);
    write.write_all(b"PING\n").await.unwrap();
    assert_eq!(next().await, "PONG");
    write.write_all(b"IS_TLS\n").await.unwrap();
    assert_eq!(next().await, tls.to_string());
    write.write_all(b"TEST\n").await.unwrap();
    serde_json::from_str(&next().await).unwrap()
}

/// The suite's rejection check: the handshake ends with the connection closed or reset, not
/// with a TLS alert and not completed.
async fn expect_rejection(addr: SocketAddr, server_name: &str, ca: &str) {
    let error = tls_dial(addr, server_name, ca)
        .await
        .err()
        .unwrap_or_else(|| panic!("{server_name}: the handshake completed"));
    assert!(
        matches!(
            error.kind(),
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
        ),
        "{server_name}: closed or reset, not {error:?}"
    );
}

/// A Service with named ports (`name`, service port) in `namespace`, its EndpointSlice giving
/// each pod's address for each named port.
fn service(name: &str, namespace: &str, ports: &[(&str, u16)], pods: &[Vec<SocketAddr>]) -> String {
    let service_ports: Vec<String> = ports
        .iter()
        .map(|(port_name, port)| {
            format!("{{name: {port_name}, protocol: TCP, port: {port}, targetPort: {port}}}")
        })
        .collect();
    let mut yaml = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  selector: {{app: {name}}}\n  ports: [{}]\n",
        service_ports.join(", ")
    );
    for (index, pod) in pods.iter().enumerate() {
        let slice_ports: Vec<String> = ports
            .iter()
            .zip(pod)
            .map(|((port_name, _), addr)| format!("{{name: {port_name}, port: {}}}", addr.port()))
            .collect();
        yaml.push_str(&format!(
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}-{index}, namespace: {namespace}, labels: {{kubernetes.io/service-name: {name}}}}}\naddressType: IPv4\nports: [{}]\nendpoints: [{{addresses: [\"{}\"]}}]\n",
            slice_ports.join(", "),
            pod[0].ip()
        ));
    }
    yaml
}

/// Deployment `tcp-backend` of the base manifests: two replicas, plain TCP on `echo-tcp-plain`
/// (3000) and TLS with `tls-passthrough-checks-certificate` (abc.example.com) on
/// `echo-tcp-tls` (8443).
async fn tcp_backend(ca: &TestCa, first_ip: u8) -> String {
    let certificate = ca.server(&["abc.example.com"]).unwrap();
    let mut pods = Vec::new();
    for n in 0..2u8 {
        let pod = EchoPod::start(
            &format!("tcp-backend-7d9f8-{n}"),
            INFRA,
            pod_ip(first_ip + n),
            Some(&certificate),
        )
        .await;
        pods.push(vec![pod.plain, pod.tls.unwrap()]);
    }
    service(
        "tcp-backend",
        INFRA,
        &[("echo-tcp-plain", 3000), ("echo-tcp-tls", 8443)],
        &pods,
    )
}

/// A one-replica TCP echo Deployment `name` (port `tcp` 3000) in `namespace`.
async fn tcp_echo(name: &str, namespace: &str, ip: u8) -> String {
    let pod = EchoPod::start(&format!("{name}-5c6d7-0"), namespace, pod_ip(ip), None).await;
    service(name, namespace, &[("tcp", 3000)], &[vec![pod.plain]])
}

async fn serve(documents: &[String], ip: IpAddr, ports: &[u16]) -> (tempfile::TempDir, Sluice) {
    let dir = tempfile::tempdir().unwrap();
    write_manifest(dir.path(), "conformance.yaml", documents);
    let sluice = Sluice::start(dir.path(), &["--gateway-address", &ip.to_string()]).await;
    for port in ports {
        wait_for_socket(SocketAddr::new(ip, *port)).await;
    }
    (dir, sluice)
}

/// A TLS listener item (`allowedRoutes` from Same, kinds TLSRoute).
fn tls_listener(name: &str, port: u16, hostname: &str, tls: &str) -> String {
    format!("  - {{name: {name}, port: {port}, protocol: TLS, hostname: \"{hostname}\", tls: {tls}, allowedRoutes: {{namespaces: {{from: Same}}, kinds: [{{kind: TLSRoute}}]}}}}\n")
}

fn gateway(name: &str, listeners: &str) -> String {
    format!("apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: {INFRA}}}\nspec:\n  gatewayClassName: sluice\n  listeners:\n{listeners}")
}

fn tls_route(name: &str, gateway: &str, hostname: &str, service: &str, port: u16) -> String {
    format!("apiVersion: gateway.networking.k8s.io/v1\nkind: TLSRoute\nmetadata: {{name: {name}, namespace: {INFRA}}}\nspec:\n  parentRefs: [{{name: {gateway}, namespace: {INFRA}}}]\n  hostnames: [\"{hostname}\"]\n  rules:\n  - backendRefs: [{{name: {service}, port: {port}}}]\n")
}

fn terminate_certificate(ca: &TestCa) -> String {
    ca.server(&["tls.example.com"]).unwrap().secret_yaml(
        INFRA,
        "tls-terminate-checks-certificate",
        None,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_simple_same_namespace() {
    let ca = TestCa::new("tls-checks-ca-certificate").unwrap();
    let port = free_port();
    let ip = gateway_ip(1);
    let documents = [
        base(),
        gateway(
            "gateway-tlsroute",
            &tls_listener("https", port, "*.example.com", "{mode: Passthrough}"),
        ),
        tls_route(
            "gateway-conformance-infra-test",
            "gateway-tlsroute",
            "abc.example.com",
            "tcp-backend",
            8443,
        ),
        tcp_backend(&ca, 10).await,
    ];
    let (_dir, _sluice) = serve(&documents, ip, &[port]).await;
    let socket = SocketAddr::new(ip, port);
    for _ in 0..3 {
        let stream = tls_dial(socket, "abc.example.com", &ca.cert_pem())
            .await
            .expect("the pod's certificate for abc.example.com");
        let test = exchange(stream, true).await;
        assert_eq!(test["namespace"], INFRA);
        assert!(test["pod"].as_str().unwrap().starts_with("tcp-backend-"));
        assert_eq!(test["tls"]["serverName"], "abc.example.com");
    }
    expect_rejection(socket, "other.example.com", &ca.cert_pem()).await;
    expect_rejection(socket, "abc.example.org", &ca.cert_pem()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_terminate_and_mixed_termination_same_namespace() {
    let ca = TestCa::new("tls-checks-ca-certificate").unwrap();
    let (terminate_port, mixed_port) = (free_port(), free_port());
    let ip = gateway_ip(2);
    let documents = [
        base(),
        // TLSRouteTerminateSimpleSameNamespace
        gateway(
            "gateway-tlsroute-terminate",
            &tls_listener(
                "tlsterminate",
                terminate_port,
                "tls.example.com",
                "{mode: Terminate, certificateRefs: [{name: tls-terminate-checks-certificate}]}",
            ),
        ),
        tls_route(
            "tlsroute-terminated-test",
            "gateway-tlsroute-terminate",
            "tls.example.com",
            "tcp-backend",
            3000,
        ),
        // TLSRouteMixedTerminationSameNamespace
        gateway(
            "gateway-tlsroute-mixed-termination",
            &(tls_listener(
                "tls-terminate",
                mixed_port,
                "tls.example.com",
                "{mode: Terminate, certificateRefs: [{name: tls-terminate-checks-certificate}]}",
            ) + &tls_listener(
                "tls-passthrough",
                mixed_port,
                "abc.example.com",
                "{mode: Passthrough}",
            )),
        ),
        tls_route(
            "gateway-conformance-mixed-passthroughroute",
            "gateway-tlsroute-mixed-termination",
            "abc.example.com",
            "tcp-backend",
            8443,
        ),
        tls_route(
            "gateway-conformance-mixed-terminateroute",
            "gateway-tlsroute-mixed-termination",
            "tls.example.com",
            "tcp-backend",
            3000,
        ),
        tcp_backend(&ca, 12).await,
        terminate_certificate(&ca),
    ];
    let (_dir, sluice) = serve(&documents, ip, &[terminate_port, mixed_port]).await;
    let ca_pem = ca.cert_pem();
    for port in [terminate_port, mixed_port] {
        let stream = tls_dial(SocketAddr::new(ip, port), "tls.example.com", &ca_pem)
            .await
            .expect("the listener's certificate for tls.example.com");
        let test = exchange(stream, false).await;
        assert_eq!(test["namespace"], INFRA);
        assert!(test["pod"].as_str().unwrap().starts_with("tcp-backend-"));
    }
    let stream = tls_dial(SocketAddr::new(ip, mixed_port), "abc.example.com", &ca_pem)
        .await
        .expect("the pod's certificate for abc.example.com");
    let test = exchange(stream, true).await;
    assert_eq!(test["tls"]["serverName"], "abc.example.com");

    let report: serde_json::Value =
        serde_json::from_str(&sluice.admin_get("/api/gateways").await.body).unwrap();
    let mixed = report["gateways"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "gateway-tlsroute-mixed-termination")
        .unwrap();
    for listener in mixed["listeners"].as_array().unwrap() {
        assert_eq!(listener["attachedRoutes"], 1, "{listener}");
        assert_eq!(listener["supportedKinds"][0]["kind"], "TLSRoute");
        assert_eq!(
            listener["conditions"][0]["reason"], "Accepted",
            "{listener}"
        );
    }
}

/// A TCP listener item taking TCPRoutes.
fn tcp_listener(name: &str, port: u16) -> String {
    format!("  - {{name: {name}, port: {port}, protocol: TCP, allowedRoutes: {{kinds: [{{kind: TCPRoute}}]}}}}\n")
}

fn tcp_route(name: &str, parent: &str, backends: &str, created: Option<&str>) -> String {
    let created = created
        .map(|at| format!(", creationTimestamp: \"{at}\""))
        .unwrap_or_default();
    format!("apiVersion: gateway.networking.k8s.io/v1\nkind: TCPRoute\nmetadata: {{name: {name}, namespace: {INFRA}{created}}}\nspec:\n  parentRefs: [{parent}]\n  rules:\n  - backendRefs: [{backends}]\n")
}

/// The pod that answers one plain connection to `socket` (the suite's `EchoSendOnce`).
async fn echo_send_once(socket: SocketAddr) -> String {
    let stream = TcpStream::connect(socket).await.unwrap();
    let test = exchange(stream, false).await;
    test["pod"].as_str().unwrap().to_owned()
}

/// The Deployment a pod name belongs to: the name without its last two `-` parts.
fn deployment_of(pod: &str) -> String {
    let parts: Vec<&str> = pod.split('-').collect();
    parts[..parts.len() - 2].join("-")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_parent_ref_port_and_section_name_and_multiple_routes_attachment() {
    let ports = [free_port(), free_port(), free_port(), free_port()];
    let ip = gateway_ip(3);
    let mut documents = vec![
        base(),
        // TCPRouteParentRefPortAndSectionName
        gateway(
            "tcp-multi-listener-gateway",
            &(tcp_listener("one", ports[0]) + &tcp_listener("two", ports[1]) + &tcp_listener("three", ports[2])),
        ),
        tcp_route(
            "tcp-route-by-port",
            &format!("{{name: tcp-multi-listener-gateway, port: {}}}", ports[0]),
            "{name: tcp-echo-one, port: 3000}",
            None,
        ),
        tcp_route(
            "tcp-route-by-section",
            "{name: tcp-multi-listener-gateway, sectionName: two}",
            "{name: tcp-echo-two, port: 3000}",
            None,
        ),
        tcp_route(
            "tcp-route-by-section-and-port",
            &format!("{{name: tcp-multi-listener-gateway, sectionName: three, port: {}}}", ports[2]),
            "{name: tcp-echo-three, port: 3000}",
            None,
        ),
        tcp_echo("tcp-echo-one", INFRA, 20).await,
        tcp_echo("tcp-echo-two", INFRA, 21).await,
        tcp_echo("tcp-echo-three", INFRA, 22).await,
        // TCPRouteMultipleRoutesAttachment: the older route first.
        format!("apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: tcp-multi-route-attach-gateway, namespace: {INFRA}}}\nspec:\n  gatewayClassName: sluice\n  listeners:\n  - {{name: tcp, port: {}, protocol: TCP, allowedRoutes: {{namespaces: {{from: Same}}, kinds: [{{group: gateway.networking.k8s.io, kind: TCPRoute}}]}}}}\n", ports[3]),
        tcp_route(
            "tcproute-attach-older",
            "{name: tcp-multi-route-attach-gateway, sectionName: tcp}",
            "{name: tcp-attach-backend-1, port: 3000}",
            Some("2026-12-04T10:00:00Z"),
        ),
        tcp_echo("tcp-attach-backend-1", INFRA, 23).await,
        tcp_echo("tcp-attach-backend-2", INFRA, 24).await,
    ];
    let (dir, sluice) = serve(&documents, ip, &ports).await;
    for (port, backend) in ports
        .iter()
        .zip(["tcp-echo-one", "tcp-echo-two", "tcp-echo-three"])
    {
        let pod = echo_send_once(SocketAddr::new(ip, *port)).await;
        assert_eq!(deployment_of(&pod), backend, "port {port}");
    }
    let attach = SocketAddr::new(ip, ports[3]);
    assert_eq!(
        deployment_of(&echo_send_once(attach).await),
        "tcp-attach-backend-1"
    );
    // A second later the newer route arrives; the older keeps the listener's traffic.
    let generation = sluice.generation().await;
    documents.push(tcp_route(
        "tcproute-attach-newer",
        "{name: tcp-multi-route-attach-gateway, sectionName: tcp}",
        "{name: tcp-attach-backend-2, port: 3000}",
        Some("2026-12-04T10:00:01Z"),
    ));
    write_manifest(dir.path(), "conformance.yaml", &documents);
    sluice.wait_for_generation_after(generation).await;
    let report: serde_json::Value =
        serde_json::from_str(&sluice.admin_get("/api/gateways").await.body).unwrap();
    let listener = report["gateways"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "tcp-multi-route-attach-gateway")
        .map(|g| g["listeners"][0].clone())
        .unwrap();
    assert_eq!(listener["attachedRoutes"], 2, "{listener}");
    for route in report["routes"].as_array().unwrap() {
        assert_eq!(route["kind"], "TCPRoute");
        let accepted = &route["parents"][0]["conditions"][0];
        assert_eq!(accepted["reason"], "Accepted", "{route}");
    }
    for _ in 0..100 {
        let pod = echo_send_once(attach).await;
        assert_eq!(deployment_of(&pod), "tcp-attach-backend-1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_weighted_routing() {
    let port = free_port();
    let ip = gateway_ip(4);
    let documents = [
        base(),
        gateway("tcp-weighted-gateway", &tcp_listener("tcp", port)),
        tcp_route(
            "tcp-weighted-route",
            "{name: tcp-weighted-gateway, sectionName: tcp}",
            "{name: tcp-backend-v1, port: 3000, weight: 70}, {name: tcp-backend-v2, port: 3000, weight: 30}, {name: tcp-backend-v3, port: 3000, weight: 0}",
            None,
        ),
        tcp_echo("tcp-backend-v1", INFRA, 30).await,
        tcp_echo("tcp-backend-v2", INFRA, 31).await,
        tcp_echo("tcp-backend-v3", INFRA, 32).await,
    ];
    let (_dir, _sluice) = serve(&documents, ip, &[port]).await;
    let socket = SocketAddr::new(ip, port);
    // The suite's weight check: 500 connections, 10 at a time, each share within 5 points,
    // tried up to 10 times (a share is off by more than 5 points in about 1.5 % of tries).
    let mut tries = Vec::new();
    for _ in 0..10 {
        let counts = weighted_sample(socket).await;
        assert!(
            !counts.contains_key("tcp-backend-v3"),
            "weight 0 gets no connection: {counts:?}"
        );
        let share = |name: &str| f64::from(counts.get(name).copied().unwrap_or(0)) / 500.0;
        let within = (share("tcp-backend-v1") - 0.7).abs() <= 0.05
            && (share("tcp-backend-v2") - 0.3).abs() <= 0.05;
        tries.push(counts);
        if within {
            return;
        }
    }
    panic!("no try within 5 points of 70/30: {tries:?}");
}

/// The Deployments that answer 500 connections to `socket`, opened 10 at a time.
async fn weighted_sample(socket: SocketAddr) -> std::collections::BTreeMap<String, u32> {
    let mut counts = std::collections::BTreeMap::<String, u32>::new();
    for _ in 0..50 {
        let batch: Vec<_> = (0..10)
            .map(|_| tokio::spawn(echo_send_once(socket)))
            .collect();
        for task in batch {
            *counts
                .entry(deployment_of(&task.await.unwrap()))
                .or_default() += 1;
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_route_reference_grant() {
    let port = free_port();
    let ip = gateway_ip(5);
    let grant = format!("apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {{name: tcp-reference-grant, namespace: {WEB}}}\nspec:\n  from: [{{group: gateway.networking.k8s.io, kind: TCPRoute, namespace: {INFRA}}}]\n  to: [{{group: \"\", kind: Service, name: tcp-reference-grant-backend}}]\n");
    let mut documents = vec![
        base(),
        gateway("tcp-reference-grant-gateway", &tcp_listener("tcp", port)),
        tcp_route(
            "tcp-reference-grant",
            "{name: tcp-reference-grant-gateway, sectionName: tcp}",
            &format!("{{name: tcp-reference-grant-backend, namespace: {WEB}, port: 3000}}"),
            None,
        ),
        tcp_echo("tcp-reference-grant-backend", WEB, 40).await,
        grant,
    ];
    let (dir, sluice) = serve(&documents, ip, &[port]).await;
    let socket = SocketAddr::new(ip, port);
    let stream = TcpStream::connect(socket).await.unwrap();
    let test = exchange(stream, false).await;
    assert_eq!(test["namespace"], WEB);
    assert!(test["pod"]
        .as_str()
        .unwrap()
        .starts_with("tcp-reference-grant-backend-"));

    // The grant goes: the route's reference is no longer permitted, connections are closed.
    let generation = sluice.generation().await;
    documents.pop();
    write_manifest(dir.path(), "conformance.yaml", &documents);
    sluice.wait_for_generation_after(generation).await;
    let report: serde_json::Value =
        serde_json::from_str(&sluice.admin_get("/api/gateways").await.body).unwrap();
    let resolved = &report["routes"][0]["parents"][0]["conditions"][1];
    assert_eq!(resolved["type"], "ResolvedRefs");
    assert_eq!(resolved["status"], "False", "{report}");
    assert_eq!(resolved["reason"], "RefNotPermitted", "{report}");
    let mut stream = TcpStream::connect(socket).await.unwrap();
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut stream, &mut buffer),
    )
    .await
    .expect("closed at once");
    assert!(matches!(read, Ok(0) | Err(_)), "no pod answers: {read:?}");
}

/// One pod of the suite's UDP echo server (`UDP_ECHO_SERVER=1`): every datagram is answered
/// with a JSON object naming the request, namespace, Service (`SERVICE_NAME`) and pod.
async fn udp_echo(service_name: &str, namespace: &str, ip: u8) -> String {
    let socket = tokio::net::UdpSocket::bind(SocketAddr::new(pod_ip(ip), 0))
        .await
        .unwrap();
    let addr = socket.local_addr().unwrap();
    let identity = serde_json::json!({
        "namespace": namespace,
        "service": service_name,
        "pod": format!("{service_name}-6b8c9-0"),
    });
    tokio::spawn(async move {
        let mut buffer = [0u8; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buffer).await {
            let mut reply = identity.clone();
            reply["request"] = String::from_utf8_lossy(&buffer[..n]).into();
            let _ = socket.send_to(reply.to_string().as_bytes(), from).await;
        }
    });
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {service_name}, namespace: {namespace}}}\nspec:\n  selector: {{app: {service_name}}}\n  ports: [{{name: udp, protocol: UDP, port: 8080, targetPort: 8080}}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {service_name}-0, namespace: {namespace}, labels: {{kubernetes.io/service-name: {service_name}}}}}\naddressType: IPv4\nports: [{{name: udp, protocol: UDP, port: {}}}]\nendpoints: [{{addresses: [\"{}\"]}}]\n",
        addr.port(),
        addr.ip()
    )
}

/// A UDP listener item taking UDPRoutes.
fn udp_listener(name: &str, port: u16) -> String {
    format!("  - {{name: {name}, port: {port}, protocol: UDP, allowedRoutes: {{kinds: [{{kind: UDPRoute}}]}}}}\n")
}

fn udp_route(name: &str, parent: &str, backends: &str) -> String {
    format!("apiVersion: gateway.networking.k8s.io/v1\nkind: UDPRoute\nmetadata: {{name: {name}, namespace: {INFRA}}}\nspec:\n  parentRefs: [{parent}]\n  rules:\n  - backendRefs: [{backends}]\n")
}

/// The suite's UDP probe: one datagram from a new socket, the echo's JSON reply (none within
/// 2 s: `None`).
async fn udp_echo_send_once(to: SocketAddr, payload: &str) -> Option<serde_json::Value> {
    let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.send_to(payload.as_bytes(), to).await.unwrap();
    let mut buffer = [0u8; 2048];
    let (n, _) = tokio::time::timeout(Duration::from_secs(2), client.recv_from(&mut buffer))
        .await
        .ok()?
        .ok()?;
    serde_json::from_slice(&buffer[..n]).ok()
}

/// Starts sluice and waits until the UDP listener at `socket` answers.
async fn serve_udp(
    documents: &[String],
    ip: IpAddr,
    sockets: &[SocketAddr],
) -> (tempfile::TempDir, Sluice) {
    let (dir, sluice) = serve(documents, ip, &[]).await;
    for socket in sockets {
        let socket = *socket;
        wait_until(
            &format!("{socket} to answer"),
            Duration::from_secs(10),
            || async move {
                udp_echo_send_once(socket, "gateway-api-conformance-udp-echo")
                    .await
                    .is_some()
            },
        )
        .await;
    }
    (dir, sluice)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_parent_ref_attach_all_listeners() {
    let ports = [free_port(), free_port(), free_port()];
    let ip = gateway_ip(6);
    let documents = [
        base(),
        gateway(
            "udp-attach-all-listeners-gateway",
            &(udp_listener("udp-1", ports[0])
                + &udp_listener("udp-2", ports[1])
                + &udp_listener("udp-3", ports[2])),
        ),
        udp_route(
            "udp-route-attach-all",
            "{name: udp-attach-all-listeners-gateway}",
            "{name: udp-echo-attach-all, port: 8080}",
        ),
        udp_echo("udp-echo-attach-all", INFRA, 50).await,
    ];
    let sockets: Vec<SocketAddr> = ports.iter().map(|p| SocketAddr::new(ip, *p)).collect();
    let (_dir, sluice) = serve_udp(&documents, ip, &sockets).await;
    for socket in &sockets {
        let reply = udp_echo_send_once(*socket, "gateway-api-conformance-udp-echo")
            .await
            .expect("an echo");
        assert_eq!(reply["service"], "udp-echo-attach-all");
        assert_eq!(reply["namespace"], INFRA);
        assert_eq!(reply["request"], "gateway-api-conformance-udp-echo");
    }
    let report: serde_json::Value =
        serde_json::from_str(&sluice.admin_get("/api/gateways").await.body).unwrap();
    let listeners = report["gateways"][0]["listeners"].as_array().unwrap();
    assert_eq!(listeners.len(), 3);
    for listener in listeners {
        assert_eq!(listener["attachedRoutes"], 1, "{listener}");
        assert_eq!(listener["supportedKinds"][0]["kind"], "UDPRoute");
        assert_eq!(listener["conditions"][0]["status"], "True", "{listener}");
        assert_eq!(listener["conditions"][1]["status"], "True", "{listener}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_weighted_routing() {
    let port = free_port();
    let ip = gateway_ip(7);
    let documents = [
        base(),
        gateway("udp-weighted-gateway", &udp_listener("udp", port)),
        udp_route(
            "udp-weighted-route",
            "{name: udp-weighted-gateway, sectionName: udp}",
            "{name: udp-backend-v1, port: 8080, weight: 70}, {name: udp-backend-v2, port: 8080, weight: 30}, {name: udp-backend-v3, port: 8080, weight: 0}",
        ),
        udp_echo("udp-backend-v1", INFRA, 51).await,
        udp_echo("udp-backend-v2", INFRA, 52).await,
        udp_echo("udp-backend-v3", INFRA, 53).await,
    ];
    let socket = SocketAddr::new(ip, port);
    let (_dir, _sluice) = serve_udp(&documents, ip, &[socket]).await;
    // 500 new sockets, 10 at a time, each share within 5 points; up to 10 tries.
    let mut tries = Vec::new();
    for _ in 0..10 {
        let mut counts = std::collections::BTreeMap::<String, u32>::new();
        for _ in 0..50 {
            let batch: Vec<_> = (0..10)
                .map(|_| {
                    tokio::spawn(udp_echo_send_once(
                        socket,
                        "gateway-api-conformance-udp-weight\n",
                    ))
                })
                .collect();
            for task in batch {
                let reply = task.await.unwrap().expect("every probe gets an echo");
                let pod = reply["pod"].as_str().unwrap().to_owned();
                *counts.entry(deployment_of(&pod)).or_default() += 1;
            }
        }
        assert!(
            !counts.contains_key("udp-backend-v3"),
            "weight 0 gets no flow: {counts:?}"
        );
        let share = |name: &str| f64::from(counts.get(name).copied().unwrap_or(0)) / 500.0;
        let within = (share("udp-backend-v1") - 0.7).abs() <= 0.05
            && (share("udp-backend-v2") - 0.3).abs() <= 0.05;
        tries.push(counts);
        if within {
            return;
        }
    }
    panic!("no try within 5 points of 70/30: {tries:?}");
}

/// A DNS query for `foo.bar.com.` A, with `id`.
fn dns_query(id: u16) -> Vec<u8> {
    let mut query = Vec::new();
    query.extend_from_slice(&id.to_be_bytes());
    query.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]); // RD; one question
    for label in ["foo", "bar", "com"] {
        query.push(u8::try_from(label.len()).unwrap());
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]); // root; type A; class IN
    query
}

/// Stands in for the suite's `coredns` pod (`whoami` for foo.bar.com): answers each query
/// with one A record holding the address the query came from.
async fn dns_pod(ip: u8) -> SocketAddr {
    let socket = tokio::net::UdpSocket::bind(SocketAddr::new(pod_ip(ip), 0))
        .await
        .unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buffer = [0u8; 512];
        while let Ok((n, from)) = socket.recv_from(&mut buffer).await {
            if n < 12 {
                continue;
            }
            let mut answer = buffer[..n].to_vec();
            answer[2] = 0x81; // QR, RD
            answer[3] = 0x80; // RA, NOERROR
            answer[6..8].copy_from_slice(&1u16.to_be_bytes()); // one answer
            answer.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4]);
            match from.ip() {
                IpAddr::V4(v4) => answer.extend_from_slice(&v4.octets()),
                IpAddr::V6(_) => answer.extend_from_slice(&[0, 0, 0, 0]),
            }
            let _ = socket.send_to(&answer, from).await;
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_route_simple_dns() {
    let port = free_port();
    let ip = gateway_ip(8);
    let coredns = dns_pod(54).await;
    let documents = [
        base(),
        gateway("udp-gateway", &udp_listener("coredns", port)),
        udp_route(
            "udp-coredns",
            "{name: udp-gateway, sectionName: coredns}",
            "{name: coredns, port: 53}",
        ),
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: coredns, namespace: {INFRA}}}\nspec:\n  selector: {{app: udp}}\n  ports: [{{name: udp-dns, protocol: UDP, port: 53, targetPort: 53}}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: coredns-0, namespace: {INFRA}, labels: {{kubernetes.io/service-name: coredns}}}}\naddressType: IPv4\nports: [{{name: udp-dns, protocol: UDP, port: {}}}]\nendpoints: [{{addresses: [\"{}\"]}}]\n",
            coredns.port(),
            coredns.ip()
        ),
    ];
    let (_dir, sluice) = serve(&documents, ip, &[]).await;
    let socket = SocketAddr::new(ip, port);
    let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut answer = None;
    for id in 1..=50u16 {
        client.send_to(&dns_query(id), socket).await.unwrap();
        let mut buffer = [0u8; 512];
        if let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_millis(200), client.recv_from(&mut buffer)).await
        {
            answer = Some((id, buffer[..n].to_vec()));
            break;
        }
    }
    let (id, answer) = answer.expect("a DNS answer through the UDP listener");
    assert_eq!(u16::from_be_bytes([answer[0], answer[1]]), id);
    assert_eq!(answer[2] & 0x80, 0x80, "a response");
    assert_eq!(u16::from_be_bytes([answer[6], answer[7]]), 1, "one answer");
    let report: serde_json::Value =
        serde_json::from_str(&sluice.admin_get("/api/gateways").await.body).unwrap();
    let accepted = &report["routes"][0]["parents"][0]["conditions"][0];
    assert_eq!(accepted["reason"], "Accepted", "{report}");
}

/// A pod of the base manifests' `tls-backend` Deployments (echo-basic over TLS): answers every
/// HTTPS request with its pod name and the server name its client asked for.
async fn https_echo_pod(pod: &'static str, ip: IpAddr, issued: &IssuedPem) -> SocketAddr {
    support::tls::https_pod(ip, issued, move |sni, _| format!("{pod} sni={sni}\n")).await
}

/// Upstream's TLSRouteHostnameIntersection with the base manifests' HTTPS Gateway
/// `same-namespace-with-https-listener` (its four HTTPS listeners, and HTTPRouteHTTPSListener's
/// two routes on it) on the same port, as the suite applies both: sluice binds Gateways without
/// `spec.addresses` at one address, so the four TLS Passthrough Gateways and the HTTPS one share
/// one socket. The server name picks the most specific listener of either protocol: a TLS one
/// passes the connection through to its route's pod, untouched; an HTTPS one terminates it and
/// serves HTTP. The hostless TLS listener cannot be told apart from the older hostless HTTPS
/// listener and is Conflicted; every other case of the upstream test holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_route_hostname_intersection_beside_the_base_https_gateway() {
    let ca = TestCa::new("tls-checks-ca-certificate").unwrap();
    let port = free_port();
    let ip = gateway_ip(7);
    // tls-checks-certificate, as the suite makes it (without its spiffe:// name).
    let backend_certificate = ca
        .server(&["abc.example.com", "other.example.com"])
        .unwrap();
    // tls-validity-checks-certificate: upstream's names are "*", "*.org" and "*.wildcard.org",
    // of which clients verify only the last; the names the test asks for instead.
    let listener_certificate = ca
        .server(&[
            "example.org",
            "second-example.org",
            "non.matching.org",
            "*.wildcard.org",
        ])
        .unwrap();
    let tls_backend = https_echo_pod("tls-backend-6b8f9-0", pod_ip(60), &backend_certificate).await;
    let tls_backend_2 =
        https_echo_pod("tls-backend-2-5d7c4-0", pod_ip(61), &backend_certificate).await;
    // infra-backend-v1 and -v2 as the base manifests have them: two replicas each.
    let infra = support::pods_on(
        &[
            "infra-backend-v1-0",
            "infra-backend-v1-1",
            "infra-backend-v2-0",
            "infra-backend-v2-1",
        ],
        42,
        free_port(),
    )
    .await;
    let addrs: Vec<SocketAddr> = infra.iter().map(|pod| pod.addr()).collect();
    let passthrough = |name: &str, hostname: Option<&str>| {
        let hostname = hostname
            .map(|h| format!(", hostname: \"{h}\""))
            .unwrap_or_default();
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: {INFRA}, creationTimestamp: \"2026-02-01T00:00:00Z\"}}\nspec:\n  gatewayClassName: sluice\n  listeners:\n  - {{name: listener, protocol: TLS, port: {port}{hostname}, allowedRoutes: {{namespaces: {{from: Same}}, kinds: [{{kind: TLSRoute}}]}}, tls: {{mode: Passthrough}}}}\n"
        )
    };
    let route = |name: &str, gateway: &str, hostname: &str, service: &str| {
        format!("apiVersion: gateway.networking.k8s.io/v1\nkind: TLSRoute\nmetadata: {{name: {name}, namespace: {INFRA}}}\nspec:\n  parentRefs: [{{name: {gateway}, namespace: {INFRA}}}]\n  hostnames: [\"{hostname}\"]\n  rules:\n  - backendRefs: [{{name: {service}, port: 443}}]\n")
    };
    let https_listener = |name: &str, hostname: Option<&str>| {
        let hostname = hostname
            .map(|h| format!(", hostname: \"{h}\""))
            .unwrap_or_default();
        format!("  - {{name: {name}, port: {port}, protocol: HTTPS{hostname}, allowedRoutes: {{namespaces: {{from: Same}}}}, tls: {{certificateRefs: [{{group: \"\", kind: Secret, name: tls-validity-checks-certificate, namespace: {INFRA}}}]}}}}\n")
    };
    let https_gateway = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: same-namespace-with-https-listener, namespace: {INFRA}, creationTimestamp: \"2026-01-01T00:00:00Z\"}}\nspec:\n  gatewayClassName: sluice\n  listeners:\n{}{}{}{}",
        https_listener("https", None),
        https_listener("https-with-hostname", Some("second-example.org")),
        https_listener("https-with-wildcard-hostname", Some("*.wildcard.org")),
        https_listener("https-with-hostname-matching-wildcard", Some("fourth-example.wildcard.org")),
    );
    let http_route = |name: &str, parent: &str, hostnames: &str, service: &str| {
        format!("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {INFRA}}}\nspec:\n  parentRefs: [{parent}]\n  hostnames: [{hostnames}]\n  rules:\n  - backendRefs: [{{name: {service}, port: 8080}}]\n")
    };
    let documents = [
        base(),
        https_gateway,
        listener_certificate.secret_yaml(INFRA, "tls-validity-checks-certificate", None),
        http_route(
            "httproute-https-test",
            "{name: same-namespace-with-https-listener}",
            "example.org",
            "infra-backend-v1",
        ),
        http_route(
            "httproute-https-test-no-hostname",
            "{name: same-namespace-with-https-listener, sectionName: https-with-hostname}",
            "",
            "infra-backend-v2",
        ),
        passthrough("gw-tlsroute-exact-hostname-x-1", Some("abc.example.com")),
        passthrough(
            "gw-tlsroute-more-specific-wc-hostname-x-2",
            Some("*.example.com"),
        ),
        passthrough("gw-tlsroute-less-specific-wc-hostname-x-3", Some("*.com")),
        passthrough("gw-tlsroute-empty-hostname-x-4", None),
        route(
            "tlsroute-more-specific-wc-hostname-x-1",
            "gw-tlsroute-exact-hostname-x-1",
            "*.example.com",
            "tls-backend",
        ),
        route(
            "tlsroute-exact-hostname-x-2",
            "gw-tlsroute-more-specific-wc-hostname-x-2",
            "abc.example.com",
            "tls-backend",
        ),
        route(
            "tlsroute-less-specific-wc-hostname-x-2",
            "gw-tlsroute-more-specific-wc-hostname-x-2",
            "*.com",
            "tls-backend-2",
        ),
        route(
            "tlsroute-exact-hostname-x-3",
            "gw-tlsroute-less-specific-wc-hostname-x-3",
            "abc.example.com",
            "tls-backend",
        ),
        route(
            "tlsroute-more-specific-wc-hostname-x-3",
            "gw-tlsroute-less-specific-wc-hostname-x-3",
            "*.example.com",
            "tls-backend-2",
        ),
        route(
            "tlsroute-exact-hostname-x-4",
            "gw-tlsroute-empty-hostname-x-4",
            "abc.example.com",
            "tls-backend",
        ),
        route(
            "tlsroute-less-specific-wc-hostname-x-4",
            "gw-tlsroute-empty-hostname-x-4",
            "*.example.com",
            "tls-backend-2",
        ),
        service_on_port("tls-backend", 443, &[tls_backend]),
        service_on_port("tls-backend-2", 443, &[tls_backend_2]),
        service_on_port("infra-backend-v1", 8080, &addrs[..2]),
        service_on_port("infra-backend-v2", 8080, &addrs[2..]),
    ];
    let (dir, sluice) = serve(&documents, ip, &[port]).await;
    let socket = SocketAddr::new(ip, port);
    let ca_file = support::tls::write_pem(dir.path(), "ca.pem", &ca.cert_pem());
    let get = |host: &str| {
        let args = support::tls::https_args(socket, host, "/");
        let mut all = vec![
            "--cacert".to_owned(),
            ca_file.clone(),
            "-w".to_owned(),
            " %{http_code}".to_owned(),
        ];
        all.extend(args);
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        support::tls::curl(&all)
    };
    // Passed through to the pods, which present their own certificate and see the name.
    assert_eq!(
        get("abc.example.com"),
        (
            0,
            "tls-backend-6b8f9-0 sni=abc.example.com\n 200".to_owned()
        )
    );
    assert_eq!(
        get("other.example.com"),
        (
            0,
            "tls-backend-2-5d7c4-0 sni=other.example.com\n 200".to_owned()
        )
    );
    // *.com selects the TLS listener of gw-...-x-3, whose routes do not take the name: closed.
    expect_rejection(socket, "non.matching.com", &ca.cert_pem()).await;
    // Names of the HTTPS listeners: terminated with the listener's certificate, HTTP served.
    for (host, backend) in [
        ("example.org", "infra-backend-v1-"),
        ("second-example.org", "infra-backend-v2-"),
    ] {
        let (code, answer) = get(host);
        assert_eq!(code, 0, "{host}: {answer}");
        assert!(answer.starts_with(backend), "{host}: {answer}");
        assert!(answer.ends_with("\n 200"), "{host}: {answer}");
    }
    // No HTTPRoute serves non.matching.org on the hostless HTTPS listener that takes it.
    let (code, answer) = get("non.matching.org");
    assert_eq!(code, 0, "{answer}");
    assert!(answer.ends_with(" 404"), "{answer}");
    let report: serde_json::Value =
        serde_json::from_str(&sluice.admin_get("/api/gateways").await.body).unwrap();
    let listener_reason = |gateway: &str, condition: &str| {
        let gateway = report["gateways"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == gateway)
            .unwrap();
        let conditions = gateway["listeners"][0]["conditions"].as_array().unwrap();
        let found = conditions.iter().find(|c| c["type"] == condition).unwrap();
        format!(
            "{} {}",
            found["status"].as_str().unwrap(),
            found["reason"].as_str().unwrap()
        )
    };
    assert_eq!(
        listener_reason("gw-tlsroute-exact-hostname-x-1", "Programmed"),
        "True Programmed"
    );
    assert_eq!(
        listener_reason("same-namespace-with-https-listener", "Programmed"),
        "True Programmed"
    );
    assert_eq!(
        listener_reason("gw-tlsroute-empty-hostname-x-4", "Conflicted"),
        "True HostnameConflict"
    );
}

/// A Service `name` in the infra namespace with one port, its endpoints `pods` (all on one
/// port, as one EndpointSlice port requires).
fn service_on_port(name: &str, port: u16, pods: &[SocketAddr]) -> String {
    let target = pods[0].port();
    let endpoints: Vec<String> = pods
        .iter()
        .map(|pod| format!("{{addresses: [\"{}\"]}}", pod.ip()))
        .collect();
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {INFRA}}}\nspec:\n  selector: {{app: {name}}}\n  ports: [{{protocol: TCP, port: {port}, targetPort: {target}}}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}-0, namespace: {INFRA}, labels: {{kubernetes.io/service-name: {name}}}}}\naddressType: IPv4\nports: [{{port: {target}}}]\nendpoints: [{}]\n",
        endpoints.join(", ")
    )
}
