//! End-to-end: gRPC through sluice with tonic on both ends (the four call kinds, a deadline, a pod that dies mid-stream, no endpoints, no route), over h2c and over TLS with ALPN h2.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use sluice_testkit::TestCa;
use support::grpc::{h2c_client, tls_client, EchoPod, EchoRequest};
use support::tls::tls_ingress;
use support::{annotated_ingress, pod_ip, service, write_manifest, Sluice};
use tonic::Code;

fn request(message: &str) -> tonic::Request<EchoRequest> {
    tonic::Request::new(EchoRequest {
        message: message.to_owned(),
        ..EchoRequest::default()
    })
}

/// A gRPC Ingress for `grpc.test` to Service `echo` (backend-protocol GRPC) with `pods`.
fn manifests(dir: &std::path::Path, pods: &[SocketAddr], extra: &[String]) {
    let mut documents = vec![
        annotated_ingress(
            "echo",
            "grpc.test",
            &[("/", "Prefix", "echo", 80)],
            &[("nginx.ingress.kubernetes.io/backend-protocol", "GRPC")],
        ),
        service("echo", 80, pods),
    ];
    documents.extend_from_slice(extra);
    write_manifest(dir, "echo.yaml", &documents);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_four_call_kinds_pass_over_h2c_with_their_trailers() {
    let pod = EchoPod::start("grpc-1", SocketAddr::new(pod_ip(160), 0)).await;
    let dir = tempfile::tempdir().unwrap();
    manifests(dir.path(), &[pod.addr], &[]);
    let sluice = Sluice::start(dir.path(), &[]).await;
    let mut client = h2c_client(sluice.listen, "grpc.test");

    let reply = client.unary(request("hello")).await.unwrap();
    assert_eq!(
        (reply.message.as_str(), reply.pod.as_str()),
        ("hello", "grpc-1")
    );

    let mut stream = client
        .server_stream(EchoRequest {
            message: "item".into(),
            count: 3,
            delay_ms: 10,
        })
        .await
        .unwrap();
    let mut items = Vec::new();
    while let Some(item) = stream.message().await.unwrap() {
        items.push(item.message);
    }
    assert_eq!(items, ["item #0", "item #1", "item #2"]);

    let reply = client.client_stream(vec!["a", "b", "c"]).await.unwrap();
    assert_eq!(reply.message, "a,b,c");

    let (send, receive) = tokio::sync::mpsc::channel(4);
    let mut replies = client.bidi(receive).await.unwrap();
    for word in ["ping", "pong"] {
        send.send(EchoRequest {
            message: word.into(),
            ..EchoRequest::default()
        })
        .await
        .unwrap();
        let echoed = tokio::time::timeout(Duration::from_secs(5), replies.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(
            echoed.message, word,
            "each message echoes before the next is sent"
        );
    }
    drop(send);
    assert!(
        replies.message().await.unwrap().is_none(),
        "the call ends with status OK in its trailers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_over_tls_with_alpn_h2_reaches_an_h2c_pod() {
    let pod = EchoPod::start("grpc-tls", SocketAddr::new(pod_ip(161), 0)).await;
    let ca = TestCa::new("test CA").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let secure = tls_ingress(
        "echo",
        &["grpc.test"],
        "echo",
        &[(&["grpc.test"], "cert")],
        &[("nginx.ingress.kubernetes.io/backend-protocol", "GRPC")],
    );
    write_manifest(
        dir.path(),
        "echo.yaml",
        &[
            secure,
            service("echo", 80, &[pod.addr]),
            ca.server(&["grpc.test"])
                .unwrap()
                .secret_yaml("default", "cert", None),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let mut client = tls_client(sluice.listen_tls, "grpc.test", &ca.cert_pem());
    let reply = client.unary(request("secure")).await.unwrap();
    assert_eq!(
        (reply.message.as_str(), reply.pod.as_str()),
        ("secure", "grpc-tls")
    );
    let reply = client.client_stream(vec!["x", "y"]).await.unwrap();
    assert_eq!(reply.message, "x,y");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluice_answers_its_own_failures_with_grpc_statuses_in_trailers_only_responses() {
    let slow = EchoPod::start("slow", SocketAddr::new(pod_ip(162), 0)).await;
    let dir = tempfile::tempdir().unwrap();
    let empty = annotated_ingress(
        "empty",
        "empty.test",
        &[("/", "Prefix", "nobody", 80)],
        &[("nginx.ingress.kubernetes.io/backend-protocol", "GRPC")],
    );
    manifests(
        dir.path(),
        &[slow.addr],
        &[empty, service("nobody", 80, &[])],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;

    let status = h2c_client(sluice.listen, "empty.test")
        .unary(request("x"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "no endpoints: {status:?}");
    let status = h2c_client(sluice.listen, "nowhere.test")
        .unary(request("x"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "no route: {status:?}");

    let mut late = request("late");
    late.get_mut().delay_ms = 2_000;
    late.set_timeout(Duration::from_millis(200));
    let started = std::time::Instant::now();
    let status = h2c_client(sluice.listen, "grpc.test")
        .unary(late)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        started.elapsed() < Duration::from_millis(1_500),
        "grpc-timeout bounds the upstream call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_dies_mid_stream_ends_the_call_with_an_error_not_a_clean_end() {
    let pod = EchoPod::start("dying", SocketAddr::new(pod_ip(163), 0)).await;
    let dir = tempfile::tempdir().unwrap();
    manifests(dir.path(), &[pod.addr], &[]);
    let sluice = Sluice::start(dir.path(), &[]).await;
    let mut client = h2c_client(sluice.listen, "grpc.test");
    let mut stream = client
        .server_stream(EchoRequest {
            message: "tick".into(),
            count: 100,
            delay_ms: 100,
        })
        .await
        .unwrap();
    assert_eq!(stream.message().await.unwrap().unwrap().message, "tick #0");
    drop(pod);
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match stream.message().await {
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the call ends");
    assert!(
        ended.is_err(),
        "a stream cut short is an error, never a clean end: {ended:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_share_one_http2_connection_until_it_carries_100_streams() {
    let pod = EchoPod::start("shared", SocketAddr::new(pod_ip(164), 0)).await;
    let dir = tempfile::tempdir().unwrap();
    manifests(dir.path(), &[pod.addr], &[]);
    let sluice = Sluice::start(dir.path(), &[]).await;
    let calls = |count: usize| {
        let listen = sluice.listen;
        async move {
            let mut tasks = tokio::task::JoinSet::new();
            for index in 0..count {
                tasks.spawn(async move {
                    let mut call = request(&format!("call {index}"));
                    call.get_mut().delay_ms = 300;
                    h2c_client(listen, "grpc.test").unary(call).await
                });
            }
            let mut ok = 0;
            while let Some(result) = tasks.join_next().await {
                ok += usize::from(result.unwrap().is_ok());
            }
            ok
        }
    };
    assert_eq!(calls(50).await, 50);
    let after_fifty = pod.connections.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        after_fifty, 1,
        "50 concurrent calls, one upstream connection"
    );
    assert_eq!(calls(150).await, 150);
    let after_more = pod.connections.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        (2..=3).contains(&after_more),
        "150 concurrent streams need a second connection (and no more than one per 100): {after_more}"
    );
}

/// A GatewayClass, a Gateway `gw` with one HTTP listener for `grpc.test` on `gateway`, and
/// GRPCRoute `echo` with `rules` (YAML, indented as the route's rules).
fn grpc_gateway(gateway: SocketAddr, rules: &str) -> String {
    let (ip, port) = (gateway.ip(), gateway.port());
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: sluice}}
spec: {{controllerName: sluice.dev/gateway-controller}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  gatewayClassName: sluice
  addresses: [{{value: "{ip}"}}]
  listeners: [{{name: grpc, port: {port}, protocol: HTTP, hostname: grpc.test}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: echo}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
{rules}"#
    )
}

async fn wait_for_socket(gateway: SocketAddr) {
    support::wait_until("the Gateway socket", Duration::from_secs(10), || async {
        tokio::net::TcpStream::connect(gateway).await.is_ok()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpcroute_routes_calls_by_service_and_method_on_its_gateway() {
    let unary_pod = EchoPod::start("unary", SocketAddr::new(pod_ip(165), 0)).await;
    let other_pod = EchoPod::start("other", SocketAddr::new(pod_ip(166), 0)).await;
    let dir = tempfile::tempdir().unwrap();
    let gateway = SocketAddr::new("127.0.3.30".parse().unwrap(), support::free_port());
    let rules = "  - matches: [{method: {service: echo.Echo, method: Unary}}]
    backendRefs: [{name: unary, port: 80}]
  - matches: [{method: {service: echo.Echo}}]
    backendRefs: [{name: other, port: 80}]
";
    write_manifest(
        dir.path(),
        "echo.yaml",
        &[
            grpc_gateway(gateway, rules),
            service("unary", 80, &[unary_pod.addr]),
            service("other", 80, &[other_pod.addr]),
        ],
    );
    let _sluice = Sluice::start(dir.path(), &[]).await;
    wait_for_socket(gateway).await;
    let mut client = h2c_client(gateway, "grpc.test");
    let reply = client.unary(request("hi")).await.unwrap();
    assert_eq!(reply.pod, "unary");
    let mut stream = client
        .server_stream(EchoRequest {
            message: "item".into(),
            count: 2,
            delay_ms: 0,
        })
        .await
        .unwrap();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.pod, "other", "every other method of the service");
    let mut elsewhere = h2c_client(gateway, "other.test");
    let refused = elsewhere.unary(request("hi")).await.unwrap_err();
    assert_eq!(
        refused.code(),
        Code::Unimplemented,
        "no listener for the host"
    );
}

/// Conformance `GRPCRouteWeight`: weights 70/30/0 over 500 calls on one h2 connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcroute_weights_split_calls_and_a_weight_of_zero_gets_none() {
    let v1 = EchoPod::start("v1", SocketAddr::new(pod_ip(213), 0)).await;
    let v2 = EchoPod::start("v2", SocketAddr::new(pod_ip(214), 0)).await;
    let v3 = EchoPod::start("v3", SocketAddr::new(pod_ip(215), 0)).await;
    let dir = tempfile::tempdir().unwrap();
    let gateway = SocketAddr::new("127.0.3.31".parse().unwrap(), support::free_port());
    let rules = "  - backendRefs:
    - {name: v1, port: 80, weight: 70}
    - {name: v2, port: 80, weight: 30}
    - {name: v3, port: 80, weight: 0}
";
    write_manifest(
        dir.path(),
        "echo.yaml",
        &[
            grpc_gateway(gateway, rules),
            service("v1", 80, &[v1.addr]),
            service("v2", 80, &[v2.addr]),
            service("v3", 80, &[v3.addr]),
        ],
    );
    let _sluice = Sluice::start(dir.path(), &[]).await;
    wait_for_socket(gateway).await;
    let client = h2c_client(gateway, "grpc.test");
    let calls = (0..500).map(|_| {
        let mut client = client.clone();
        async move { client.unary(request("hi")).await.map(|reply| reply.pod) }
    });
    let mut answered = std::collections::HashMap::<String, usize>::new();
    for pod in futures_util::future::join_all(calls).await {
        *answered.entry(pod.unwrap()).or_default() += 1;
    }
    let share = |name: &str| answered.get(name).copied().unwrap_or(0);
    assert_eq!(share("v3"), 0, "weight 0 gets nothing: {answered:?}");
    assert_eq!(share("v1") + share("v2"), 500, "{answered:?}");
    // 70 % of 500 is 350 with a standard deviation near 10: 290..=410 is six of them.
    assert!((290..=410).contains(&share("v1")), "{answered:?}");
}
