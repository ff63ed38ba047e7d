//! End-to-end: the real sluice binary between real clients and real backends on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full};
use sluice_testkit::{get, h2c_client, http_client, EchoBackend};
use support::{free_port, ingress, pod_ip, service, write_manifest, Sluice};

async fn pods(names: &[&str], first_ip: u8) -> Vec<EchoBackend> {
    let mut pods = Vec::new();
    for (offset, name) in names.iter().enumerate() {
        pods.push(
            EchoBackend::start(name, pod_ip(first_ip + offset as u8))
                .await
                .unwrap(),
        );
    }
    pods
}

/// One pod named `name` behind a catch-all Ingress, and sluice serving it.
async fn one_pod_behind_sluice(
    name: &str,
    ip: u8,
) -> (Vec<EchoBackend>, tempfile::TempDir, Sluice) {
    let pod = pods(&[name], ip).await;
    let dir = tempfile::tempdir().unwrap();
    let documents = [
        ingress("echo", "", &[("/", "Prefix", "echo", 80)]),
        service("echo", 80, &addrs(&pod)),
    ];
    write_manifest(dir.path(), "echo.yaml", &documents);
    let sluice = Sluice::start(dir.path(), &[]).await;
    (pod, dir, sluice)
}

fn addrs(pods: &[EchoBackend]) -> Vec<std::net::SocketAddr> {
    pods.iter().map(EchoBackend::addr).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_by_host_and_path_and_round_robins_across_pods() {
    let web = pods(&["web-1", "web-2", "web-3"], 1).await;
    let api = pods(&["api-1"], 4).await;
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "shop.yaml",
        &[
            ingress(
                "shop",
                "shop.test",
                &[("/", "Prefix", "web", 80), ("/api", "Prefix", "api", 80)],
            ),
            service("web", 80, &addrs(&web)),
            service("api", 80, &addrs(&api)),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let client = http_client();

    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    for _ in 0..30 {
        let reply = get(&client, &sluice.url("/catalog?page=2"), "SHOP.test:8080")
            .await
            .unwrap();
        assert_eq!(reply.status, 200);
        *seen.entry(reply.body.trim().to_owned()).or_default() += 1;
    }
    assert_eq!(
        seen,
        BTreeMap::from([
            ("web-1".into(), 10),
            ("web-2".into(), 10),
            ("web-3".into(), 10)
        ]),
        "round robin must spread evenly"
    );

    let reply = get(&client, &sluice.url("/api/orders"), "shop.test")
        .await
        .unwrap();
    assert_eq!(reply.body, "api-1\n");
    let reply = get(&client, &sluice.url("/apiary"), "shop.test")
        .await
        .unwrap();
    assert!(
        reply.body.starts_with("web-"),
        "/apiary is not under /api: {}",
        reply.body
    );
    let reply = get(&client, &sluice.url("/"), "other.test").await.unwrap();
    assert_eq!(reply.status, 404);
    assert_eq!(reply.body, "404 no route\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_upstream_sends_everything_to_the_cluster_ip() {
    let pod = pods(&["pod-behind-kube-proxy"], 10).await;
    let cluster_ip = EchoBackend::start("cluster-ip", pod_ip(11)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = cluster_ip.addr().port();
    let service_yaml = service("legacy", port, &addrs(&pod)).replacen(
        "spec:\n",
        &format!("spec:\n  clusterIP: {}\n", cluster_ip.addr().ip()),
        1,
    );
    let ingress_yaml = ingress("legacy", "", &[("/", "Prefix", "legacy", port)])
        .replacen("  name: legacy\n", "  name: legacy\n  annotations:\n    nginx.ingress.kubernetes.io/service-upstream: \"true\"\n", 1);
    write_manifest(dir.path(), "legacy.yaml", &[ingress_yaml, service_yaml]);
    let sluice = Sluice::start(dir.path(), &[]).await;

    let client = http_client();
    for _ in 0..5 {
        let reply = get(&client, &sluice.url("/"), "legacy.test").await.unwrap();
        assert_eq!(reply.body, "cluster-ip\n");
    }
    assert_eq!(
        pod[0].requests(),
        0,
        "pods are reached only through the ClusterIP"
    );
    let routes = sluice.routes().await;
    let backend = &routes["backends"][format!("default/legacy:{port}/service-upstream")];
    assert_eq!(backend["mode"], "service-upstream");
    let diagnostics = routes["diagnostics"].to_string();
    assert!(
        diagnostics.contains("cannot balance across pods"),
        "{diagnostics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_404_503_502_and_504_with_short_bodies() {
    let slow = pods(&["slow"], 20).await;
    let closed_port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let not_ready = service("idle", 80, &[]);
    let refused = service(
        "refused",
        80,
        &[format!("127.0.1.21:{closed_port}").parse().unwrap()],
    );
    write_manifest(
        dir.path(),
        "errors.yaml",
        &[
            ingress(
                "errors",
                "errors.test",
                &[
                    ("/idle", "Prefix", "idle", 80),
                    ("/refused", "Prefix", "refused", 80),
                    ("/slow", "Prefix", "slow", 80),
                    ("/__testkit", "Prefix", "slow", 80),
                ],
            ),
            not_ready,
            refused,
            service("slow", 80, &addrs(&slow)),
        ],
    );
    let sluice = Sluice::start(dir.path(), &["--response-header-timeout", "300ms"]).await;
    let client = http_client();
    let cases = [
        ("nothing.test", "/", 404, "404 no route\n"),
        ("errors.test", "/idle", 503, "503 no endpoints available\n"),
        (
            "errors.test",
            "/refused",
            502,
            "502 upstream connect failed\n",
        ),
        (
            "errors.test",
            "/__testkit/reset",
            502,
            "502 upstream connection failed\n",
        ),
        (
            "errors.test",
            "/__testkit/sleep/3000",
            504,
            "504 upstream response timed out\n",
        ),
    ];
    for (host, path, status, body) in cases {
        let reply = get(&client, &sluice.url(path), host).await.unwrap();
        assert_eq!(
            (reply.status.as_u16(), reply.body.as_str()),
            (status, body),
            "{host}{path}"
        );
        assert_eq!(reply.headers["content-type"], "text/plain; charset=utf-8");
    }
    let reply = get(&client, &sluice.url("/slow"), "errors.test")
        .await
        .unwrap();
    assert_eq!(
        reply.status, 200,
        "the backend still serves after the errors"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strips_hop_by_hop_headers_from_responses() {
    let (_echo, _dir, sluice) = one_pod_behind_sluice("echo", 30).await;
    let reply = get(
        &http_client(),
        &sluice.url("/__testkit/hop-headers"),
        "echo.test",
    )
    .await
    .unwrap();
    assert_eq!(reply.headers["x-kept"], "yes");
    for stripped in ["x-hop-secret", "keep-alive"] {
        assert!(
            !reply.headers.contains_key(stripped),
            "{stripped} must not reach the client: {:?}",
            reply.headers
        );
    }
    if let Some(connection) = reply.headers.get("connection") {
        assert!(!connection.to_str().unwrap().contains("x-hop-secret"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_an_error_and_sluice_keeps_serving() {
    let (_echo, _dir, sluice) = one_pod_behind_sluice("survivor", 31).await;

    let garbage = [
        "GARBAGE\r\n\r\n",
        "GET /x HTTP/1.1\r\nHost: a\r\nContent-Length: nope\r\n\r\n",
        "GET /x HTTP/1.1\r\nHost: a\r\nBad Header Name: 1\r\n\r\n",
        "GET /x HTTP/1.1\r\nHost: \u{1}\u{2}\r\n\r\n",
        "\u{0}\u{ff}\u{fe}PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\u{0}\u{0}",
    ];
    for request in garbage {
        let response = raw_exchange(sluice.listen, request);
        assert!(
            response.is_empty() || response.starts_with("HTTP/1.1 4"),
            "{request:?} got {response:?}"
        );
    }
    let reply = get(&http_client(), &sluice.url("/still-here"), "echo.test")
        .await
        .unwrap();
    assert_eq!(reply.body, "survivor\n");
}

/// Sends one raw HTTP/1.1 request and reads the whole response (the server closes after it).
fn raw_exchange(addr: std::net::SocketAddr, request: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let request = request.replacen("Connection: keep-alive", "Connection: close", 1);
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    String::from_utf8_lossy(&response).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_h2c_with_prior_knowledge() {
    let echo = pods(&["h2-pod"], 40).await;
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "h2.yaml",
        &[
            ingress("h2", "", &[("/", "Prefix", "h2", 80)]),
            service("h2", 80, &addrs(&echo)),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let client = h2c_client();
    let request = http::Request::get(sluice.url("/x?y=1"))
        .body(Either::Left(Full::new(Bytes::new())))
        .unwrap();
    let response = client.request(request).await.unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "h2-pod\n");
}
