//! Gateway API beyond HTTP through the real binary: TLS listeners that pass the stream through or terminate it (TLSRoute), TCP listeners (TCPRoute), weights per connection, endpoint changes, and their status in `/api/gateways`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use sluice_testkit::TestCa;
use support::tls::{served_subject, server_config, tls_dial};
use support::{free_port, pod_ip, service, wait_for_socket, wait_until, write_manifest, Sluice};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// The address a test's Gateway names in `spec.addresses`.
fn gateway_ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 3, n))
}

const CLASS: &str = "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: sluice}\nspec: {controllerName: sluice.dev/gateway-controller}\n";

/// A Gateway `gw` at `ip` with `listeners` (YAML list items, indented four spaces).
fn gateway(ip: IpAddr, listeners: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw}}\nspec:\n  gatewayClassName: sluice\n  addresses: [{{type: IPAddress, value: \"{ip}\"}}]\n  listeners:\n{listeners}"
    )
}

/// A TCP pod that says its name on every connection, then echoes what it gets.
async fn identity_pod(name: &'static str, ip: IpAddr) -> SocketAddr {
    let listener = TcpListener::bind(SocketAddr::new(ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                if stream
                    .write_all(format!("{name}\n").as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    addr
}

/// A pod that terminates TLS itself with `issued` and says its name and the server name it
/// was asked for, then echoes.
async fn tls_pod(name: &'static str, ip: IpAddr, issued: &sluice_testkit::IssuedPem) -> SocketAddr {
    let config = server_config(issued);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(SocketAddr::new(ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let sni = tls.get_ref().1.server_name().unwrap_or("-").to_owned();
                let hello = format!("{name} sni={sni}\n");
                if tls.write_all(hello.as_bytes()).await.is_err() {
                    return;
                }
                let mut buffer = [0u8; 1024];
                while let Ok(n) = tls.read(&mut buffer).await {
                    if n == 0 || tls.write_all(&buffer[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// The first line read from `stream`; `None` when it closes (or says nothing for 5 s) first.
async fn first_line<S>(stream: S) -> Option<String>
where
    S: tokio::io::AsyncRead + Unpin,
{
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    match tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut line)).await {
        Ok(Ok(n)) if n > 0 => Some(line.trim_end().to_owned()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listeners_pass_through_or_terminate_by_server_name() {
    let pod_ca = TestCa::new("pod CA").unwrap();
    let edge_ca = TestCa::new("edge CA").unwrap();
    let pod = tls_pod(
        "tls-pod",
        pod_ip(201),
        &pod_ca.server(&["app.pass.test"]).unwrap(),
    )
    .await;
    let plain = identity_pod("plain-pod", pod_ip(202)).await;
    let edge = edge_ca.server(&["term.test"]).unwrap();
    let (pass_port, term_port) = (free_port(), free_port());
    let ip = gateway_ip(20);
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            CLASS.to_owned(),
            gateway(
                ip,
                &format!(
                    "  - {{name: pass, port: {pass_port}, protocol: TLS, hostname: \"*.pass.test\", tls: {{mode: Passthrough}}}}\n  - {{name: term, port: {term_port}, protocol: TLS, hostname: term.test, tls: {{mode: Terminate, certificateRefs: [{{name: edge-cert}}]}}}}\n"
                ),
            ),
            "apiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TLSRoute\nmetadata: {name: pass}\nspec:\n  parentRefs: [{name: gw, sectionName: pass}]\n  hostnames: [app.pass.test]\n  rules: [{backendRefs: [{name: tls-pod, port: 443}]}]\n".to_owned(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: TLSRoute\nmetadata: {name: term}\nspec:\n  parentRefs: [{name: gw, sectionName: term}]\n  hostnames: [term.test]\n  rules: [{backendRefs: [{name: plain, port: 9000}]}]\n".to_owned(),
            service("tls-pod", 443, &[pod]),
            service("plain", 9000, &[plain]),
            edge.secret_yaml("default", "edge-cert", None),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let (pass, term) = (
        SocketAddr::new(ip, pass_port),
        SocketAddr::new(ip, term_port),
    );
    wait_for_socket(pass).await;
    wait_for_socket(term).await;

    // Passthrough: the client sees the pod's certificate, and the pod sees the server name.
    let mut stream = tls_dial(pass, "app.pass.test", &pod_ca.cert_pem())
        .await
        .expect("the pod's certificate, trusted by the pod's CA");
    stream.write_all(b"ping\n").await.unwrap();
    let mut reader = BufReader::new(stream);
    let mut hello = String::new();
    reader.read_line(&mut hello).await.unwrap();
    assert_eq!(hello.trim_end(), "tls-pod sni=app.pass.test");
    let mut echoed = String::new();
    reader.read_line(&mut echoed).await.unwrap();
    assert_eq!(echoed, "ping\n");
    assert_eq!(
        served_subject(pass, Some("app.pass.test")),
        "CN=app.pass.test"
    );
    // A name the listener takes but no route serves, and a name the listener does not take:
    // the connection is closed without a handshake.
    for name in ["other.pass.test", "term.test"] {
        let refused = tls_dial(pass, name, &pod_ca.cert_pem()).await;
        assert!(refused.is_err(), "{name} must not reach a backend");
    }
    let refused = [("protocol", "TLS"), ("route", ""), ("result", "refused")];
    assert_eq!(
        sluice
            .metric_sum("sluice_stream_connections_total", &refused)
            .await,
        2.0
    );

    // Terminate: the client sees the listener's certificate, the pod gets the plain bytes.
    let mut stream = tls_dial(term, "term.test", &edge_ca.cert_pem())
        .await
        .expect("the listener's certificate, trusted by the edge CA");
    assert_eq!(
        stream.get_ref().1.alpn_protocol(),
        None,
        "no ALPN on a TLS listener"
    );
    stream.write_all(b"hello\n").await.unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).await.unwrap();
    assert_eq!(line, "plain-pod\n");
    line.clear();
    reader.read_line(&mut line).await.unwrap();
    assert_eq!(line, "hello\n");
    assert_eq!(served_subject(term, Some("term.test")), "CN=term.test");

    // Status: the routes attach, each listener takes TLSRoute only.
    let report: serde_json::Value =
        serde_json::from_str(&sluice.admin_get("/api/gateways").await.body).unwrap();
    for listener in report["gateways"][0]["listeners"].as_array().unwrap() {
        assert_eq!(listener["attachedRoutes"], 1, "{report}");
        assert_eq!(
            listener["supportedKinds"][0]["kind"], "TLSRoute",
            "{report}"
        );
    }
    let routes = report["routes"].as_array().unwrap();
    assert_eq!(routes.len(), 2, "{report}");
    for route in routes {
        assert_eq!(route["kind"], "TLSRoute", "{report}");
        let accepted = &route["parents"][0]["conditions"][0];
        assert_eq!(
            (accepted["type"].as_str(), accepted["status"].as_str()),
            (Some("Accepted"), Some("True")),
            "{report}"
        );
    }
}

/// Opens a connection to `addr` and returns the name its pod says.
async fn who_answers(addr: SocketAddr) -> Option<String> {
    let stream = TcpStream::connect(addr).await.ok()?;
    first_line(stream).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_listeners_split_connections_by_weight_and_follow_endpoint_changes() {
    let a1 = identity_pod("a1", pod_ip(203)).await;
    let a2 = identity_pod("a2", pod_ip(204)).await;
    let b = identity_pod("b", pod_ip(205)).await;
    let port = free_port();
    let ip = gateway_ip(21);
    let dir = tempfile::tempdir().unwrap();
    let manifest = |a_endpoints: &[SocketAddr]| {
        vec![
            CLASS.to_owned(),
            gateway(ip, &format!("  - {{name: tcp, port: {port}, protocol: TCP}}\n")),
            "apiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TCPRoute\nmetadata: {name: split}\nspec:\n  parentRefs: [{name: gw}]\n  rules: [{backendRefs: [{name: a, port: 9000, weight: 3}, {name: b, port: 9000, weight: 1}]}]\n".to_owned(),
            service("a", 9000, a_endpoints),
            service("b", 9000, &[b]),
        ]
    };
    write_manifest(dir.path(), "app.yaml", &manifest(&[a1, a2]));
    let sluice = Sluice::start(dir.path(), &[]).await;
    let socket = SocketAddr::new(ip, port);
    wait_for_socket(socket).await;

    let mut counts = std::collections::BTreeMap::<String, u32>::new();
    for _ in 0..1000 {
        let name = who_answers(socket)
            .await
            .expect("every connection reaches a pod");
        *counts.entry(name).or_default() += 1;
    }
    let count = |name: &str| counts.get(name).copied().unwrap_or(0);
    let a = count("a1") + count("a2");
    // Weights 3:1 over 1,000 connections: b's share is 250 on average, 3.5 sigma either way.
    assert!((200..=300).contains(&count("b")), "{counts:?}");
    assert_eq!(a + count("b"), 1000, "{counts:?}");
    assert!(
        count("a1") > 250 && count("a2") > 250,
        "a's endpoints take turns: {counts:?}"
    );
    let route = [("protocol", "TCP"), ("route", "default/split")];
    let spliced = [route[0], route[1], ("result", "spliced")];
    assert!(
        sluice
            .metric_sum("sluice_stream_connections_total", &spliced)
            .await
            >= 1000.0
    );
    // Each pod said its name: "a1\n", "a2\n" (3 bytes) or "b\n" (2 bytes).
    let sent = sluice
        .metric_sum("sluice_stream_sent_bytes_total", &route)
        .await;
    let said = f64::from(3 * a + 2 * count("b"));
    assert!(sent >= said, "{sent} bytes sent, {said} said");

    // An established connection to a2 survives a2's removal; new ones no longer reach it.
    let mut held = None;
    for _ in 0..40 {
        let mut stream = BufReader::new(TcpStream::connect(socket).await.unwrap());
        let mut name = String::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_line(&mut name))
            .await
            .expect("the pod says its name")
            .unwrap();
        if name == "a2\n" {
            held = Some(stream);
            break;
        }
    }
    let mut held = held.expect("a2 answers one of 40 connections");
    let generation = sluice.generation().await;
    write_manifest(dir.path(), "app.yaml", &manifest(&[a1]));
    sluice.wait_for_generation_after(generation).await;
    for _ in 0..100 {
        let name = who_answers(socket)
            .await
            .expect("a connection reaches a pod");
        assert_ne!(name, "a2", "a removed endpoint gets no new connections");
    }
    held.get_mut().write_all(b"still here\n").await.unwrap();
    let mut echoed = String::new();
    tokio::time::timeout(Duration::from_secs(5), held.read_line(&mut echoed))
        .await
        .expect("the established connection still echoes")
        .unwrap();
    assert_eq!(echoed, "still here\n");

    let report: serde_json::Value =
        serde_json::from_str(&sluice.admin_get("/api/gateways").await.body).unwrap();
    let listener = &report["gateways"][0]["listeners"][0];
    assert_eq!(
        listener["supportedKinds"][0]["kind"], "TCPRoute",
        "{report}"
    );
    assert_eq!(listener["attachedRoutes"], 1, "{report}");
    assert_eq!(report["routes"][0]["kind"], "TCPRoute", "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_kind_the_listener_protocol_does_not_take_is_refused_with_its_reason() {
    let pod = identity_pod("pod", pod_ip(206)).await;
    let port = free_port();
    let ip = gateway_ip(22);
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            CLASS.to_owned(),
            gateway(
                ip,
                &format!("  - {{name: tcp, port: {port}, protocol: TCP, allowedRoutes: {{kinds: [{{kind: HTTPRoute}}]}}}}\n"),
            ),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: web}\nspec:\n  parentRefs: [{name: gw}]\n  rules: [{backendRefs: [{name: pod, port: 9000}]}]\n".to_owned(),
            service("pod", 9000, &[pod]),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let report: serde_json::Value =
        serde_json::from_str(&sluice.admin_get("/api/gateways").await.body).unwrap();
    let listener = &report["gateways"][0]["listeners"][0];
    let resolved = listener["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "ResolvedRefs")
        .unwrap();
    assert_eq!(resolved["status"], "False", "{report}");
    assert_eq!(resolved["reason"], "InvalidRouteKinds", "{report}");
    assert_eq!(
        listener["supportedKinds"],
        serde_json::json!([]),
        "{report}"
    );
    let accepted = &report["routes"][0]["parents"][0]["conditions"][0];
    assert_eq!(accepted["status"], "False", "{report}");
    assert_eq!(accepted["reason"], "NotAllowedByListeners", "{report}");
}

/// A UDP pod that answers every datagram with its name and the datagram.
async fn udp_pod(name: &'static str, ip: IpAddr) -> SocketAddr {
    let socket = tokio::net::UdpSocket::bind(SocketAddr::new(ip, 0))
        .await
        .unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buffer = [0u8; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buffer).await {
            let reply = format!("{name} {}", String::from_utf8_lossy(&buffer[..n]));
            let _ = socket.send_to(reply.as_bytes(), from).await;
        }
    });
    addr
}

/// Sends `payload` from `client` to `to`; the pod's name from the reply, or `None` when no
/// reply comes within a second.
async fn udp_ask(client: &tokio::net::UdpSocket, to: SocketAddr, payload: &str) -> Option<String> {
    client.send_to(payload.as_bytes(), to).await.unwrap();
    let mut buffer = [0u8; 2048];
    let (n, _) = tokio::time::timeout(Duration::from_secs(1), client.recv_from(&mut buffer))
        .await
        .ok()?
        .ok()?;
    let reply = String::from_utf8_lossy(&buffer[..n]).into_owned();
    let (name, echoed) = reply.split_once(' ')?;
    assert_eq!(echoed, payload, "the pod got the datagram as sent");
    Some(name.to_owned())
}

/// Service `name` with one UDP port 5300, its slice holding `endpoints`.
fn udp_service(name: &str, endpoints: &[SocketAddr]) -> String {
    service(name, 5300, endpoints)
        .replace("  - port: 5300\n", "  - port: 5300\n    protocol: UDP\n")
        .replace("ports:\n- port:", "ports:\n- protocol: UDP\n  port:")
}

/// A client UDP socket on loopback with a port of its own (so a flow of its own).
async fn udp_client() -> tokio::net::UdpSocket {
    let loopback = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
    tokio::net::UdpSocket::bind(loopback).await.unwrap()
}

/// A client whose first datagram to the Gateway UDP `socket` has had its reply.
async fn first_udp_client(socket: SocketAddr) -> tokio::net::UdpSocket {
    let first = udp_client().await;
    wait_until(
        "the UDP listener to answer",
        Duration::from_secs(10),
        || async { udp_ask(&first, socket, "hello").await.is_some() },
    )
    .await;
    first
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_listeners_keep_a_client_on_its_backend_and_split_new_clients_by_weight() {
    let a1 = udp_pod("a1", pod_ip(207)).await;
    let a2 = udp_pod("a2", pod_ip(208)).await;
    let b = udp_pod("b", pod_ip(209)).await;
    let port = free_port();
    let ip = gateway_ip(23);
    let dir = tempfile::tempdir().unwrap();
    let manifest = |a_endpoints: &[SocketAddr]| {
        vec![
            CLASS.to_owned(),
            gateway(ip, &format!("  - {{name: dns, port: {port}, protocol: UDP}}\n")),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: UDPRoute\nmetadata: {name: dns}\nspec:\n  parentRefs: [{name: gw}]\n  rules: [{backendRefs: [{name: a, port: 5300, weight: 3}, {name: b, port: 5300, weight: 1}]}]\n".to_owned(),
            udp_service("a", a_endpoints),
            udp_service("b", &[b]),
        ]
    };
    write_manifest(dir.path(), "app.yaml", &manifest(&[a1, a2]));
    let sluice = Sluice::start(dir.path(), &["--udp-idle-timeout", "1s"]).await;
    let socket = SocketAddr::new(ip, port);
    let first = first_udp_client(socket).await;

    // One client is one flow: every datagram goes to the same pod.
    let pinned = udp_ask(&first, socket, "again").await.unwrap();
    for n in 0..20 {
        let name = udp_ask(&first, socket, &format!("datagram {n}")).await;
        assert_eq!(name.as_deref(), Some(pinned.as_str()));
    }

    // New clients are split 3:1 between the Services, a's pods in turn. Every client socket
    // is kept open to the end, so that no later client reuses its port and with it its flow.
    let mut clients = Vec::new();
    let mut counts = std::collections::BTreeMap::<String, u32>::new();
    for _ in 0..1000 {
        let client = udp_client().await;
        let name = udp_ask(&client, socket, "weigh")
            .await
            .expect("every flow gets a reply");
        *counts.entry(name).or_default() += 1;
        clients.push(client);
    }
    assert!((200..=300).contains(&counts["b"]), "{counts:?}");
    assert!(counts["a1"] > 250 && counts["a2"] > 250, "{counts:?}");
    let route = [("protocol", "UDP"), ("route", "default/dns")];
    let flows = [route[0], route[1], ("result", "spliced")];
    assert!(
        sluice
            .metric_sum("sluice_stream_connections_total", &flows)
            .await
            >= 1001.0
    );
    let open = sluice
        .metric_sum("sluice_stream_open_connections", &route)
        .await;
    assert!(open >= 1001.0, "{open} flows open within the idle timeout");
    // 1,000 "weigh" datagrams of 5 bytes, besides the first client's.
    let received = sluice
        .metric_sum("sluice_stream_received_bytes_total", &route)
        .await;
    assert!(received >= 5000.0, "{received}");

    // a2 leaves: its flow goes on while it is busy, and after the idle timeout the client
    // gets a new flow elsewhere.
    let mut on_a2 = None;
    for _ in 0..40 {
        let client = udp_client().await;
        if udp_ask(&client, socket, "where").await.as_deref() == Some("a2") {
            on_a2 = Some(client);
            break;
        }
        clients.push(client);
    }
    let on_a2 = on_a2.expect("a2 takes one of 40 flows");
    let generation = sluice.generation().await;
    write_manifest(dir.path(), "app.yaml", &manifest(&[a1]));
    sluice.wait_for_generation_after(generation).await;
    assert_eq!(
        udp_ask(&on_a2, socket, "still").await.as_deref(),
        Some("a2")
    );
    for _ in 0..50 {
        let client = udp_client().await;
        let name = udp_ask(&client, socket, "new").await.unwrap();
        assert_ne!(name, "a2", "a removed endpoint gets no new flow");
        clients.push(client);
    }
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let after = udp_ask(&on_a2, socket, "later").await.unwrap();
    assert_ne!(
        after, "a2",
        "after the idle timeout the client's flow is new"
    );

    let report: serde_json::Value =
        serde_json::from_str(&sluice.admin_get("/api/gateways").await.body).unwrap();
    let listener = &report["gateways"][0]["listeners"][0];
    assert_eq!(
        listener["supportedKinds"][0]["kind"], "UDPRoute",
        "{report}"
    );
    assert_eq!(listener["attachedRoutes"], 1, "{report}");
    assert_eq!(report["routes"][0]["kind"], "UDPRoute", "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_udp_listener_keeps_at_most_udp_max_flows_and_takes_new_clients_when_flows_go_idle() {
    let pod = udp_pod("echo", pod_ip(220)).await;
    let port = free_port();
    let ip = gateway_ip(25);
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            CLASS.to_owned(),
            gateway(ip, &format!("  - {{name: dns, port: {port}, protocol: UDP}}\n")),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: UDPRoute\nmetadata: {name: dns}\nspec:\n  parentRefs: [{name: gw}]\n  rules: [{backendRefs: [{name: echo, port: 5300}]}]\n".to_owned(),
            udp_service("echo", &[pod]),
        ],
    );
    let sluice = Sluice::start(
        dir.path(),
        &["--udp-idle-timeout", "1s", "--udp-max-flows", "2"],
    )
    .await;
    let socket = SocketAddr::new(ip, port);
    let first = first_udp_client(socket).await;
    let second = udp_client().await;
    assert_eq!(
        udp_ask(&second, socket, "two").await.as_deref(),
        Some("echo")
    );

    // Two flows are the limit: a third client is dropped, the two go on.
    let third = udp_client().await;
    assert_eq!(
        udp_ask(&third, socket, "three").await,
        None,
        "beyond --udp-max-flows"
    );
    assert_eq!(
        udp_ask(&first, socket, "one").await.as_deref(),
        Some("echo")
    );
    assert_eq!(
        udp_ask(&second, socket, "two").await.as_deref(),
        Some("echo")
    );
    let failed = [("protocol", "UDP"), ("result", "failed")];
    assert!(
        sluice
            .metric_sum("sluice_stream_connections_total", &failed)
            .await
            >= 1.0,
        "the dropped client is counted as failed"
    );

    // Once the two flows have been idle for the timeout, the third client gets one.
    tokio::time::sleep(Duration::from_millis(1700)).await;
    assert_eq!(
        udp_ask(&third, socket, "three").await.as_deref(),
        Some("echo")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_tls_policy_reencrypts_terminated_tls_streams_and_never_falls_back_to_plaintext()
{
    let pod_ca = TestCa::new("pod CA").unwrap();
    let other_ca = TestCa::new("other CA").unwrap();
    let edge_ca = TestCa::new("edge CA").unwrap();
    let web = sluice_testkit::EchoBackend::start("web", pod_ip(210))
        .await
        .unwrap();
    let issued = pod_ca.server(&["stream.internal"]).unwrap();
    let stream_pod = tls_pod("tls-pod", pod_ip(211), &issued).await;
    let (http_port, tls_port) = (free_port(), free_port());
    let ip = gateway_ip(24);
    let dir = tempfile::tempdir().unwrap();
    let ca_map = |name: &str, ca: &TestCa| {
        let pem: String = ca
            .cert_pem()
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect();
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata:\n  ca.crt: |\n{pem}")
    };
    let tls_route = |name: &str, host: &str, service: &str| {
        format!("apiVersion: gateway.networking.k8s.io/v1\nkind: TLSRoute\nmetadata: {{name: {name}}}\nspec:\n  parentRefs: [{{name: gw, sectionName: tls}}]\n  hostnames: [{host}]\n  rules: [{{backendRefs: [{{name: {service}, port: 9000}}]}}]\n")
    };
    let policy = |name: &str, service: &str, validation: &str| {
        format!("apiVersion: gateway.networking.k8s.io/v1\nkind: BackendTLSPolicy\nmetadata: {{name: {name}}}\nspec:\n  targetRefs: [{{group: \"\", kind: Service, name: {service}}}]\n  validation: {validation}\n")
    };
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            CLASS.to_owned(),
            gateway(
                ip,
                &format!("  - {{name: http, port: {http_port}, protocol: HTTP}}\n  - {{name: tls, port: {tls_port}, protocol: TLS, hostname: \"*.term.test\", tls: {{mode: Terminate, certificateRefs: [{{name: edge-cert}}]}}}}\n"),
            ),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: web}\nspec:\n  parentRefs: [{name: gw, sectionName: http}]\n  rules: [{backendRefs: [{name: web, port: 8080}]}]\n".to_owned(),
            tls_route("good", "good.term.test", "stream"),
            tls_route("wrong-ca", "wrong.term.test", "stream-wrong-ca"),
            // The system's CAs do not know the pod's: the plaintext pod is never reached.
            policy("web-tls", "web", "{wellKnownCACertificates: System, hostname: web.internal}"),
            policy("stream-tls", "stream", "{caCertificateRefs: [{group: \"\", kind: ConfigMap, name: pod-ca}], hostname: stream.internal}"),
            policy("stream-wrong-ca-tls", "stream-wrong-ca", "{caCertificateRefs: [{group: \"\", kind: ConfigMap, name: other-ca}], hostname: stream.internal}"),
            ca_map("pod-ca", &pod_ca),
            ca_map("other-ca", &other_ca),
            service("web", 8080, &[web.addr()]),
            service("stream", 9000, &[stream_pod]),
            service("stream-wrong-ca", 9000, &[stream_pod]),
            edge_ca.server(&["*.term.test"]).unwrap().secret_yaml("default", "edge-cert", None),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let (http, tls) = (
        SocketAddr::new(ip, http_port),
        SocketAddr::new(ip, tls_port),
    );
    wait_for_socket(http).await;
    wait_for_socket(tls).await;

    let client = sluice_testkit::http_client();
    let reply = sluice_testkit::get(&client, &format!("http://{http}/"), "shop.test")
        .await
        .unwrap();
    assert_eq!(reply.status, 503, "{reply:?}");
    assert_eq!(web.requests(), 0, "nothing reaches the pod in plaintext");

    // Terminated at the edge, then TLS again to the pod with the policy's hostname as SNI,
    // verified against the policy's CA.
    let mut stream = tls_dial(tls, "good.term.test", &edge_ca.cert_pem())
        .await
        .expect("the edge certificate");
    stream.write_all(b"ping\n").await.unwrap();
    let mut reader = BufReader::new(stream);
    let mut hello = String::new();
    reader.read_line(&mut hello).await.unwrap();
    assert_eq!(hello.trim_end(), "tls-pod sni=stream.internal");
    let mut echoed = String::new();
    reader.read_line(&mut echoed).await.unwrap();
    assert_eq!(echoed, "ping\n");

    // A CA that did not sign the pod's certificate: the connection fails, nothing is spliced.
    let stream = tls_dial(tls, "wrong.term.test", &edge_ca.cert_pem())
        .await
        .expect("the edge certificate");
    assert_eq!(first_line(stream).await, None);
    let failed = [
        ("protocol", "TLS"),
        ("route", "default/wrong-ca"),
        ("result", "failed"),
    ];
    wait_until(
        "the failed connection to count",
        Duration::from_secs(5),
        || async {
            sluice
                .metric_sum("sluice_stream_connections_total", &failed)
                .await
                == 1.0
        },
    )
    .await;
    let report: serde_json::Value =
        serde_json::from_str(&sluice.admin_get("/api/gateways").await.body).unwrap();
    let policies = report["backendTLSPolicies"].as_array().unwrap();
    assert_eq!(policies.len(), 3, "{report}");
    for policy in policies {
        let accepted = &policy["ancestors"][0]["conditions"][0];
        assert_eq!(accepted["status"], "True", "{policy}");
        assert_eq!(
            policy["ancestors"][0]["ancestorRef"]["name"], "gw",
            "{policy}"
        );
    }
}
