//! Gateway API through the real binary: each listener of a served Gateway is its own socket, HTTPRoutes match and filter as the spec says, weights split traffic, and status shows in `/api/gateways` and `sluice check`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use sluice_testkit::{get, http_client, send, EchoBackend, RawBackend};
use support::{
    free_port, pod_ip, run_check, service, wait_for_socket, wait_until, write_manifest, Sluice,
};

/// The address a test's Gateway names in `spec.addresses`.
fn gateway_ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 3, n))
}

/// A GatewayClass of sluice's controller and a Gateway `gw` at `ip` with these listeners
/// (`name`, `port`, `hostname` or empty), each taking routes from its own namespace.
fn gateway(ip: IpAddr, listeners: &[(&str, u16, &str)]) -> String {
    let mut yaml = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: sluice}}\nspec: {{controllerName: sluice.dev/gateway-controller}}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw}}\nspec:\n  gatewayClassName: sluice\n  addresses: [{{type: IPAddress, value: \"{ip}\"}}]\n  listeners:\n"
    );
    for (name, port, hostname) in listeners {
        yaml.push_str(&format!("  - {{name: {name}, port: {port}, protocol: HTTP"));
        if !hostname.is_empty() {
            yaml.push_str(&format!(", hostname: \"{hostname}\""));
        }
        yaml.push_str("}\n");
    }
    yaml
}

/// An HTTPRoute `name` attached to Gateway `gw`, with `spec` (YAML, indented two spaces)
/// after its parentRefs.
fn route(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}}}\nspec:\n  parentRefs: [{{name: gw}}]\n{spec}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_listener_is_its_own_socket_and_routes_by_path_header_query_and_method() {
    let v1 = EchoBackend::start("v1", pod_ip(190)).await.unwrap();
    let v2 = EchoBackend::start("v2", pod_ip(191)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let socket = SocketAddr::new(gateway_ip(1), port);
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            gateway(gateway_ip(1), &[("http", port, "")]),
            route(
                "matching",
                "  rules:\n  - matches: [{path: {type: PathPrefix, value: /}}]\n    backendRefs: [{name: v1, port: 8080}]\n  - matches: [{path: {type: PathPrefix, value: /v2}}, {headers: [{name: version, value: two}]}]\n    backendRefs: [{name: v2, port: 8080}]\n  - matches: [{path: {type: Exact, value: /exact}, method: POST}, {queryParams: [{type: RegularExpression, name: animal, value: wh.le}]}]\n    backendRefs: [{name: v2, port: 8080}]\n",
            ),
            service("v1", 8080, &[v1.addr()]),
            service("v2", 8080, &[v2.addr()]),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    wait_for_socket(socket).await;
    let client = http_client();
    let base = format!("http://{socket}");
    let body = |path: &'static str, headers: &'static [(&'static str, &'static str)]| {
        let client = client.clone();
        let url = format!("{base}{path}");
        async move {
            let reply = send(
                &client,
                http::Method::GET,
                &url,
                "example.com",
                headers,
                Bytes::new(),
            )
            .await
            .unwrap();
            assert_eq!(reply.status, 200, "{path}: {reply:?}");
            reply.body.trim().to_owned()
        }
    };
    assert_eq!(body("/", &[]).await, "v1");
    assert_eq!(body("/v2", &[]).await, "v2");
    assert_eq!(body("/v2/deeper", &[]).await, "v2");
    assert_eq!(
        body("/v2example", &[]).await,
        "v1",
        "prefixes match whole segments"
    );
    assert_eq!(body("/", &[("version", "two")]).await, "v2");
    assert_eq!(body("/?animal=whale", &[]).await, "v2");
    assert_eq!(
        body("/?animal=whales", &[]).await,
        "v1",
        "a regex matches the whole value"
    );
    assert_eq!(
        body("/exact", &[]).await,
        "v1",
        "GET does not meet the POST match"
    );
    let post = send(
        &client,
        http::Method::POST,
        &format!("{base}/exact"),
        "example.com",
        &[],
        Bytes::new(),
    )
    .await
    .unwrap();
    assert_eq!(post.body.trim(), "v2");
    // The Ingress listener does not serve HTTPRoutes.
    let ingress_side = get(&client, &sluice.url("/"), "example.com").await.unwrap();
    assert_eq!(ingress_side.status, 404);
    let status = sluice.admin_get("/api/gateways").await;
    let report: serde_json::Value = serde_json::from_str(&status.body).unwrap();
    let listener = &report["gateways"][0]["listeners"][0];
    assert_eq!(listener["attachedRoutes"], 1, "{report}");
    assert_eq!(listener["sockets"][0], socket.to_string());
    let parent = &report["routes"][0]["parents"][0];
    assert_eq!(parent["conditions"][0]["type"], "Accepted");
    assert_eq!(parent["conditions"][0]["status"], "True", "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_change_what_the_pod_and_the_client_get() {
    let pod = RawBackend::start(pod_ip(192)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let socket = SocketAddr::new(gateway_ip(2), port);
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            gateway(gateway_ip(2), &[("http", port, "")]),
            route(
                "filters",
                "  rules:\n  - matches: [{path: {type: PathPrefix, value: /prefix/one}}]\n    filters:\n    - type: RequestHeaderModifier\n      requestHeaderModifier:\n        set: [{name: X-Header-Set, value: set-overwrites-values}]\n        add: [{name: X-Header-Add-Append, value: header-val-2}]\n        remove: [X-Header-Remove]\n    - type: URLRewrite\n      urlRewrite: {hostname: rewritten.example, path: {type: ReplacePrefixMatch, replacePrefixMatch: /one}}\n    - type: ResponseHeaderModifier\n      responseHeaderModifier: {add: [{name: X-Answer, value: added}]}\n    backendRefs: [{name: pod, port: 8080}]\n  - matches: [{path: {type: PathPrefix, value: /old}}]\n    filters:\n    - type: RequestRedirect\n      requestRedirect: {scheme: https, hostname: new.example, statusCode: 301, path: {type: ReplacePrefixMatch, replacePrefixMatch: /new}}\n",
            ),
            service("pod", 8080, &[pod.addr()]),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    wait_for_socket(socket).await;
    let client = http_client();
    let headers = [
        ("X-Header-Set", "set-val"),
        ("X-Header-Add-Append", "append-val-1"),
        ("X-Header-Remove", "remove-val"),
    ];
    let reply = send(
        &client,
        http::Method::GET,
        &format!("http://{socket}/prefix/one/two?q=1"),
        "example.com",
        &headers,
        Bytes::new(),
    )
    .await
    .unwrap();
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.headers["x-answer"], "added");
    let request = pod.only_request();
    assert_eq!(request.request_line(), "GET /one/two?q=1 HTTP/1.1");
    assert_eq!(request.header("host"), Some("rewritten.example"));
    assert_eq!(
        request.header_values("x-header-set"),
        ["set-overwrites-values"]
    );
    assert_eq!(
        request.header_values("x-header-add-append"),
        ["append-val-1", "header-val-2"]
    );
    assert!(
        request.header_values("x-header-remove").is_empty(),
        "{}",
        request.head
    );
    let redirect = get(
        &client,
        &format!("http://{socket}/old/page?x=y"),
        "example.com",
    )
    .await
    .unwrap();
    assert_eq!(redirect.status, 301);
    assert_eq!(
        redirect.headers["location"],
        "https://new.example/new/page?x=y"
    );
    assert_eq!(
        pod.requests().len(),
        1,
        "the redirect never reaches the pod"
    );
    // The redirect-only rule's placeholder backend is no Service: reports leave it out.
    let backends: serde_json::Value =
        serde_json::from_str(&sluice.admin_get("/api/backends").await.body).unwrap();
    let ids: Vec<&str> = backends["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["default/pod:8080"], "{backends}");
    let metrics = sluice.admin_get("/metrics").await.body;
    assert!(!metrics.contains("redirect-only"), "{metrics}");
    assert!(
        metrics.contains(r#"sluice_requests_total{namespace="default",ingress="filters",service="",port="",method="GET",code="301"} 1"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_split_requests_and_an_invalid_backend_ref_answers_500_for_its_share() {
    let v1 = EchoBackend::start("v1", pod_ip(193)).await.unwrap();
    let v2 = EchoBackend::start("v2", pod_ip(194)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let socket = SocketAddr::new(gateway_ip(3), port);
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            gateway(gateway_ip(3), &[("http", port, "")]),
            route(
                "weights",
                "  rules:\n  - backendRefs: [{name: v1, port: 8080, weight: 3}, {name: v2, port: 8080, weight: 0}, {name: missing, port: 8080, weight: 1}]\n",
            ),
            service("v1", 8080, &[v1.addr()]),
            service("v2", 8080, &[v2.addr()]),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    wait_for_socket(socket).await;
    let client = http_client();
    let (mut ok, mut failed) = (0u64, 0u64);
    for _ in 0..400 {
        let reply = get(&client, &format!("http://{socket}/"), "example.com")
            .await
            .unwrap();
        match reply.status.as_u16() {
            200 => ok += 1,
            500 => failed += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(v2.requests(), 0, "weight 0 gets nothing");
    // 3:1 over 400 requests: 100 expected at 500; 60..140 is over six standard deviations.
    assert!((60..=140).contains(&failed), "{failed} of 400 answered 500");
    assert_eq!(ok + failed, 400);
    assert_eq!(v1.requests(), ok);
    let report: serde_json::Value =
        serde_json::from_str(&sluice.admin_get("/api/gateways").await.body).unwrap();
    let resolved = &report["routes"][0]["parents"][0]["conditions"][1];
    assert_eq!(resolved["type"], "ResolvedRefs");
    assert_eq!(resolved["status"], "False");
    assert_eq!(resolved["reason"], "BackendNotFound", "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_on_one_port_split_by_hostname_and_a_taken_port_is_port_unavailable() {
    let v1 = EchoBackend::start("v1", pod_ip(195)).await.unwrap();
    let v2 = EchoBackend::start("v2", pod_ip(196)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let socket = SocketAddr::new(gateway_ip(4), port);
    let taken = std::net::TcpListener::bind(SocketAddr::new(gateway_ip(4), 0)).unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let routes = [
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: foo}\nspec:\n  parentRefs: [{name: gw, sectionName: foo}]\n  rules: [{backendRefs: [{name: v1, port: 8080}]}]\n".to_owned(),
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: wild}\nspec:\n  parentRefs: [{name: gw, sectionName: wild}]\n  rules: [{backendRefs: [{name: v2, port: 8080}]}]\n".to_owned(),
    ];
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            gateway(
                gateway_ip(4),
                &[
                    ("foo", port, "foo.example.com"),
                    ("wild", port, "*.example.com"),
                    ("busy", taken_port, ""),
                ],
            ),
            routes[0].clone(),
            routes[1].clone(),
            service("v1", 8080, &[v1.addr()]),
            service("v2", 8080, &[v2.addr()]),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    wait_for_socket(socket).await;
    let client = http_client();
    let name = |host: &'static str| {
        let client = client.clone();
        async move {
            let reply = get(&client, &format!("http://{socket}/"), host)
                .await
                .unwrap();
            (reply.status.as_u16(), reply.body.trim().to_owned())
        }
    };
    assert_eq!(name("foo.example.com").await, (200, "v1".to_owned()));
    assert_eq!(name("bar.example.com").await, (200, "v2".to_owned()));
    assert_eq!(name("a.b.example.com").await, (200, "v2".to_owned()));
    assert_eq!(
        name("example.com").await.0,
        404,
        "no listener takes the bare suffix"
    );
    let report: serde_json::Value =
        serde_json::from_str(&sluice.admin_get("/api/gateways").await.body).unwrap();
    let busy = &report["gateways"][0]["listeners"][2];
    assert_eq!(busy["name"], "busy");
    let accepted = &busy["conditions"][0];
    assert_eq!(
        (
            accepted["type"].as_str(),
            accepted["status"].as_str(),
            accepted["reason"].as_str()
        ),
        (Some("Accepted"), Some("False"), Some("PortUnavailable")),
        "{report}"
    );
    drop(taken);
    let (code, text) = run_check(dir.path());
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("listener foo on "), "{text}");
    assert!(
        text.contains("HTTPRoute default/wild on Gateway default/gw listener wild: Accepted=True"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_httproute_is_served_without_a_restart_and_a_removed_gateway_closes_its_socket() {
    let v1 = EchoBackend::start("v1", pod_ip(197)).await.unwrap();
    let v2 = EchoBackend::start("v2", pod_ip(198)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let socket = SocketAddr::new(gateway_ip(5), port);
    let services = [
        service("v1", 8080, &[v1.addr()]),
        service("v2", 8080, &[v2.addr()]),
    ];
    let app = |backend: &str| {
        let mut documents = vec![
            gateway(gateway_ip(5), &[("http", port, "")]),
            route(
                "app",
                &format!("  rules: [{{backendRefs: [{{name: {backend}, port: 8080}}]}}]\n"),
            ),
        ];
        documents.extend(services.iter().cloned());
        documents
    };
    write_manifest(dir.path(), "app.yaml", &app("v1"));
    let sluice = Sluice::start(dir.path(), &[]).await;
    wait_for_socket(socket).await;
    let client = http_client();
    let url = format!("http://{socket}/");
    assert_eq!(get(&client, &url, "x").await.unwrap().body.trim(), "v1");
    let generation = sluice.generation().await;
    write_manifest(dir.path(), "app.yaml", &app("v2"));
    sluice.wait_for_generation_after(generation).await;
    assert_eq!(get(&client, &url, "x").await.unwrap().body.trim(), "v2");
    write_manifest(dir.path(), "app.yaml", &services);
    wait_until(
        "the Gateway's socket to close",
        Duration::from_secs(10),
        || async { tokio::net::TcpStream::connect(socket).await.is_err() },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_listeners_serve_each_hostname_its_certificate_over_h2_and_http11_and_misdirected_requests_get_421(
) {
    use support::tls::{curl, write_pem};
    let pod = EchoBackend::start("secure", pod_ip(199)).await.unwrap();
    let ca = sluice_testkit::TestCa::new("gateway CA").unwrap();
    let files = tempfile::tempdir().unwrap();
    let ca_file = write_pem(files.path(), "ca.pem", &ca.cert_pem());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let ip = gateway_ip(6);
    let listener = |name: &str, host: &str, secret: &str| {
        format!("  - {{name: {name}, port: {port}, protocol: HTTPS, hostname: {host}, tls: {{certificateRefs: [{{name: {secret}}}]}}}}\n")
    };
    let gateway_yaml = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: sluice}}\nspec: {{controllerName: sluice.dev/gateway-controller}}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw}}\nspec:\n  gatewayClassName: sluice\n  addresses: [{{value: \"{ip}\"}}]\n  listeners:\n{}{}",
        listener("a", "a.gw.test", "cert-a"),
        listener("b", "b.gw.test", "cert-b"),
    ) + &listener("c", "c.gw.test", "no-such-secret")
        + &listener("d", "d.gw.test", "cert-a");
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            gateway_yaml,
            route(
                "secure",
                "  rules: [{backendRefs: [{name: secure, port: 8080}]}]\n",
            ),
            service("secure", 8080, &[pod.addr()]),
            ca.server(&["a.gw.test", "d.gw.test"])
                .unwrap()
                .secret_yaml("default", "cert-a", None),
            ca.server(&["b.gw.test"])
                .unwrap()
                .secret_yaml("default", "cert-b", None),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    wait_for_socket(SocketAddr::new(ip, port)).await;
    let resolve = |host: &str| format!("{host}:{port}:{ip}");
    for host in ["a.gw.test", "b.gw.test"] {
        for (flag, status_line) in [("--http2", "HTTP/2 200"), ("--http1.1", "HTTP/1.1 200")] {
            let url = format!("https://{host}:{port}/");
            let (code, out) = curl(&[
                "-i",
                flag,
                "--cacert",
                &ca_file,
                "--resolve",
                &resolve(host),
                &url,
            ]);
            // Verification against the CA fails unless the certificate names the host.
            assert_eq!(code, 0, "{host} {flag}: {out}");
            assert!(out.starts_with(status_line), "{host} {flag}: {out}");
            assert!(out.ends_with("secure\n"), "{out}");
        }
    }
    let url = format!("https://a.gw.test:{port}/");
    // b has another certificate; d shares a's, but it is another listener all the same.
    for host in ["b.gw.test", "d.gw.test"] {
        let header = format!("Host: {host}");
        let resolved = resolve("a.gw.test");
        let args = [
            "-i",
            "--http1.1",
            "--cacert",
            &ca_file,
            "--resolve",
            &resolved,
            "-H",
            &header,
            &url,
        ];
        let (code, out) = curl(&args);
        assert_eq!(code, 0, "{out}");
        assert!(out.starts_with("HTTP/1.1 421"), "{host}: {out}");
    }
    let (code, out) = curl(&[
        "-i",
        "--http2",
        "--cacert",
        &ca_file,
        "--resolve",
        &resolve("d.gw.test"),
        &format!("https://d.gw.test:{port}/"),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("HTTP/2 200"), "{out}");
    let report: serde_json::Value =
        serde_json::from_str(&sluice.admin_get("/api/gateways").await.body).unwrap();
    let listeners = report["gateways"][0]["listeners"].as_array().unwrap();
    let condition = |listener: &serde_json::Value, index: usize| {
        let c = &listener["conditions"][index];
        let field = |name: &str| c[name].as_str().unwrap().to_owned();
        (field("type"), field("status"), field("reason"))
    };
    for listener in &listeners[..2] {
        assert_eq!(condition(listener, 3).1, "True", "{report}");
    }
    let refs = condition(&listeners[2], 1);
    let expected = (
        "ResolvedRefs".to_owned(),
        "False".to_owned(),
        "InvalidCertificateRef".to_owned(),
    );
    assert_eq!(refs, expected, "{report}");
    assert_eq!(condition(&listeners[2], 3).1, "False", "{report}");
}

/// The four HTTPS listeners on one port of the conformance suite's base Gateway
/// `same-namespace-with-https-listener`, with the routes of `HTTPRouteHTTPSListener` and
/// `HTTPRouteHTTPSListenerDetectMisdirectedRequests` (routes 3 and 4 take their listener's
/// hostname, as the suite's expectations need), asked every (SNI, Host) pair those tests ask,
/// over HTTP/1.1 and HTTP/2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_https_listeners_answer_every_sni_and_host_pair_as_the_suite_expects() {
    use support::tls::{curl, write_pem};
    let v1 = EchoBackend::start("v1", pod_ip(207)).await.unwrap();
    let v2 = EchoBackend::start("v2", pod_ip(208)).await.unwrap();
    let v3 = EchoBackend::start("v3", pod_ip(209)).await.unwrap();
    let ca = sluice_testkit::TestCa::new("conformance CA").unwrap();
    let files = tempfile::tempdir().unwrap();
    let ca_file = write_pem(files.path(), "ca.pem", &ca.cert_pem());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let ip = gateway_ip(8);
    let listener = |name: &str, host: Option<&str>| {
        let host = host
            .map(|h| format!(", hostname: \"{h}\""))
            .unwrap_or_default();
        format!("  - {{name: {name}, port: {port}, protocol: HTTPS{host}, tls: {{certificateRefs: [{{name: certificate}}]}}}}\n")
    };
    let gateway_yaml = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: sluice}}\nspec: {{controllerName: sluice.dev/gateway-controller}}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw}}\nspec:\n  gatewayClassName: sluice\n  addresses: [{{value: \"{ip}\"}}]\n  listeners:\n{}{}{}{}",
        listener("https", None),
        listener("https-with-hostname", Some("second-example.org")),
        listener("https-with-wildcard-hostname", Some("*.wildcard.org")),
        listener(
            "https-with-hostname-matching-wildcard",
            Some("fourth-example.wildcard.org")
        ),
    );
    let detect = |section: &str, hosts: &str, backend: &str| {
        format!("  parentRefs: [{{name: gw{section}}}]\n{hosts}  rules:\n  - matches: [{{path: {{type: PathPrefix, value: /detect-misdirected-requests}}}}]\n    backendRefs: [{{name: {backend}, port: 8080}}]\n")
    };
    let named = |name: &str, spec: String| {
        format!("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}}}\nspec:\n{spec}")
    };
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            gateway_yaml,
            route(
                "httproute-https-test",
                "  hostnames: [example.org]\n  rules: [{backendRefs: [{name: v1, port: 8080}]}]\n",
            ),
            named(
                "httproute-https-test-no-hostname",
                "  parentRefs: [{name: gw, sectionName: https-with-hostname}]\n  rules: [{backendRefs: [{name: v2, port: 8080}]}]\n".to_owned(),
            ),
            named("detect-1", detect("", "  hostnames: [example.org]\n", "v1")),
            named("detect-2", detect(", sectionName: https-with-hostname", "", "v2")),
            named(
                "detect-3",
                detect(", sectionName: https-with-wildcard-hostname", "", "v3"),
            ),
            named(
                "detect-4",
                detect(
                    ", sectionName: https-with-hostname-matching-wildcard",
                    "",
                    "v1",
                ),
            ),
            service("v1", 8080, &[v1.addr()]),
            service("v2", 8080, &[v2.addr()]),
            service("v3", 8080, &[v3.addr()]),
            ca.server(&[
                "example.org",
                "second-example.org",
                "unknown-example.org",
                "*.wildcard.org",
            ])
                .unwrap()
                .secret_yaml("default", "certificate", None),
        ],
    );
    let _sluice = Sluice::start(dir.path(), &[]).await;
    wait_for_socket(SocketAddr::new(ip, port)).await;
    // (server name, Host, path, status, backend)
    let detect = "/detect-misdirected-requests";
    let cases: &[(&str, &str, &str, u16, &str)] = &[
        // HTTPRouteHTTPSListener
        ("example.org", "example.org", "/", 200, "v1"),
        ("unknown-example.org", "unknown-example.org", "/", 404, ""),
        ("second-example.org", "second-example.org", "/", 200, "v2"),
        // HTTPRouteHTTPSListenerDetectMisdirectedRequests
        ("example.org", "example.org", detect, 200, "v1"),
        ("example.org", "second-example.org", detect, 421, ""),
        ("example.org", "unknown-example.org", detect, 404, ""),
        (
            "second-example.org",
            "second-example.org",
            detect,
            200,
            "v2",
        ),
        ("second-example.org", "example.org", detect, 421, ""),
        ("second-example.org", "unknown-example.org", detect, 421, ""),
        (
            "third-example.wildcard.org",
            "third-example.wildcard.org",
            detect,
            200,
            "v3",
        ),
        (
            "third-example.wildcard.org",
            "fith-example.wildcard.org",
            detect,
            200,
            "v3",
        ),
        (
            "third-example.wildcard.org",
            "fourth-example.wildcard.org",
            detect,
            421,
            "",
        ),
        (
            "third-example.wildcard.org",
            "second-example.org",
            detect,
            421,
            "",
        ),
        (
            "third-example.wildcard.org",
            "unknown-example.org",
            detect,
            421,
            "",
        ),
        (
            "fourth-example.wildcard.org",
            "fourth-example.wildcard.org",
            detect,
            200,
            "v1",
        ),
        (
            "fourth-example.wildcard.org",
            "fith-example.wildcard.org",
            detect,
            421,
            "",
        ),
        ("unknown-example.org", "example.org", detect, 200, "v1"),
        (
            "unknown-example.org",
            "unknown-example.org",
            detect,
            404,
            "",
        ),
    ];
    for &(server_name, host, path, status, backend) in cases {
        for version in ["--http1.1", "--http2"] {
            let resolve = format!("{server_name}:{port}:{ip}");
            let url = format!("https://{server_name}:{port}{path}");
            let host_header = format!("Host: {host}");
            let (code, out) = curl(&[
                "-i",
                version,
                "--cacert",
                &ca_file,
                "--resolve",
                &resolve,
                "-H",
                &host_header,
                "-w",
                "\n%{http_code}",
                &url,
            ]);
            let case = format!("SNI {server_name}, Host {host}, {path} {version}");
            assert_eq!(code, 0, "{case}: {out}");
            let (answer, got) = out.rsplit_once('\n').unwrap();
            assert_eq!(got, status.to_string(), "{case}: {out}");
            if !backend.is_empty() {
                assert!(answer.ends_with(&format!("{backend}\n")), "{case}: {out}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_settings_mirror_time_out_retry_stick_and_answer_cors() {
    let pods = support::pods_on(&["p1", "p2", "p3"], 200, free_port()).await;
    let all: Vec<SocketAddr> = pods.iter().map(EchoBackend::addr).collect();
    let copies = RawBackend::start(pod_ip(203)).await.unwrap();
    let never = RawBackend::start(pod_ip(204)).await.unwrap();
    let also = RawBackend::start(pod_ip(205)).await.unwrap();
    let half = RawBackend::start(pod_ip(206)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let socket = SocketAddr::new(gateway_ip(7), port);
    let rules = r#"  rules:
  - matches: [{path: {value: /mirror}}]
    filters:
    - {type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: x-set, value: before-mirror}]}}
    - {type: RequestMirror, requestMirror: {backendRef: {name: copies, port: 8080}}}
    - {type: RequestMirror, requestMirror: {backendRef: {name: also, port: 8080}, fraction: {numerator: 1, denominator: 1}}}
    - {type: RequestMirror, requestMirror: {backendRef: {name: never, port: 8080}, fraction: {numerator: 0}}}
    backendRefs: [{name: pods, port: 8080}]
  - matches: [{path: {value: /half}}]
    filters:
    - {type: RequestMirror, requestMirror: {backendRef: {name: half, port: 8080}, percent: 50}}
    backendRefs: [{name: pods, port: 8080}]
  - matches: [{path: {value: /__testkit/sleep}}]
    timeouts: {request: 300ms}
    backendRefs: [{name: pods, port: 8080}]
  - matches: [{path: {value: /__testkit/status}}]
    retry: {codes: [500], attempts: 2, backoff: 400ms}
    backendRefs: [{name: pods, port: 8080}]
  - matches: [{path: {value: /sticky}}]
    sessionPersistence: {sessionName: gw-session}
    backendRefs: [{name: pods, port: 8080}]
  - matches: [{path: {value: /by-header}}]
    sessionPersistence: {type: Header, sessionName: X-Session}
    backendRefs: [{name: pods, port: 8080}]
  - matches: [{path: {value: /cors}}]
    filters:
    - {type: CORS, cors: {allowOrigins: ["https://app.example.com"], allowMethods: [GET, PUT], maxAge: 60}}
    backendRefs: [{name: pods, port: 8080}]
  - matches: [{path: {value: /wild}}]
    filters:
    - {type: CORS, cors: {allowOrigins: ["*"], allowMethods: ["*"], allowHeaders: ["*"], allowCredentials: true}}
    backendRefs: [{name: pods, port: 8080}]
"#;
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            gateway(gateway_ip(7), &[("http", port, "")]),
            route("settings", rules),
            service("pods", 8080, &all),
            service("copies", 8080, &[copies.addr()]),
            service("never", 8080, &[never.addr()]),
            service("also", 8080, &[also.addr()]),
            service("half", 8080, &[half.addr()]),
        ],
    );
    let _sluice = Sluice::start(dir.path(), &[]).await;
    wait_for_socket(socket).await;
    let client = http_client();
    let url = |path: &str| format!("http://{socket}{path}");
    for _ in 0..4 {
        let reply = get(&client, &url("/mirror/a?b=c"), "mirror.test")
            .await
            .unwrap();
        assert_eq!(reply.status, 200);
    }
    wait_until(
        "four copies at each full mirror",
        Duration::from_secs(5),
        || async { copies.requests().len() == 4 && also.requests().len() == 4 },
    )
    .await;
    for copy in [&copies.requests()[0], &also.requests()[0]] {
        assert_eq!(copy.request_line(), "GET /mirror/a?b=c HTTP/1.1");
        assert_eq!(copy.header("host"), Some("mirror.test"));
        assert_eq!(
            copy.header("x-set"),
            Some("before-mirror"),
            "filters run first"
        );
    }
    assert!(never.requests().is_empty(), "a 0 share mirrors nothing");
    for _ in 0..200 {
        let reply = get(&client, &url("/half"), "x").await.unwrap();
        assert_eq!(reply.status, 200);
    }
    // 50 % of 200 requests: 100 expected, standard deviation about 7.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let halved = half.requests().len();
    assert!(
        (50..=150).contains(&halved),
        "{halved} of 200 mirrored at 50 %"
    );

    let started = std::time::Instant::now();
    let slow = get(&client, &url("/__testkit/sleep/3000"), "x")
        .await
        .unwrap();
    assert_eq!(slow.status, 504, "{slow:?}");
    assert!(started.elapsed() < Duration::from_millis(2500));

    let before: u64 = pods.iter().map(EchoBackend::requests).sum();
    let started = std::time::Instant::now();
    let failed = get(&client, &url("/__testkit/status/500"), "x")
        .await
        .unwrap();
    assert_eq!(failed.status, 500);
    let after: u64 = pods.iter().map(EchoBackend::requests).sum();
    assert_eq!(
        after - before,
        3,
        "one try and two retries, each on another pod"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(800),
        "two backoffs of 400 ms: {waited:?}"
    );

    let first = get(&client, &url("/sticky"), "x").await.unwrap();
    let cookie = first.headers["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert!(cookie.starts_with("gw-session="), "{cookie}");
    for _ in 0..6 {
        let again = send(
            &client,
            http::Method::GET,
            &url("/sticky"),
            "x",
            &[("cookie", &cookie)],
            Bytes::new(),
        )
        .await
        .unwrap();
        assert_eq!(again.body, first.body, "the session stays on one pod");
    }
    let first = get(&client, &url("/by-header"), "x").await.unwrap();
    let session = first.headers["x-session"].to_str().unwrap().to_owned();
    for _ in 0..6 {
        let again = send(
            &client,
            http::Method::GET,
            &url("/by-header"),
            "x",
            &[("x-session", &session)],
            Bytes::new(),
        )
        .await
        .unwrap();
        assert_eq!(
            again.body, first.body,
            "the header keeps the session on one pod"
        );
        assert!(
            !again.headers.contains_key("x-session"),
            "a kept session is not announced again"
        );
    }
    let mut bodies = std::collections::HashSet::new();
    for _ in 0..6 {
        bodies.insert(get(&client, &url("/by-header"), "x").await.unwrap().body);
    }
    assert!(
        bodies.len() > 1,
        "without the header requests spread: {bodies:?}"
    );

    let origin = [
        ("origin", "https://app.example.com"),
        ("access-control-request-method", "PUT"),
    ];
    let preflight = send(
        &client,
        http::Method::OPTIONS,
        &url("/cors"),
        "x",
        &origin,
        Bytes::new(),
    )
    .await
    .unwrap();
    assert!(preflight.status.is_success(), "{preflight:?}");
    assert_eq!(
        preflight.headers["access-control-allow-origin"],
        "https://app.example.com"
    );
    assert_eq!(preflight.headers["access-control-max-age"], "60");
    let asked = [
        ("origin", "https://any.example"),
        ("access-control-request-method", "PATCH"),
        ("access-control-request-headers", "x-one, x-two"),
    ];
    let wild = send(
        &client,
        http::Method::OPTIONS,
        &url("/wild"),
        "x",
        &asked,
        Bytes::new(),
    )
    .await
    .unwrap();
    // With credentials, wildcards are answered with what was asked, never a literal `*`.
    assert_eq!(
        wild.headers["access-control-allow-origin"],
        "https://any.example"
    );
    assert_eq!(wild.headers["access-control-allow-methods"], "PATCH");
    assert_eq!(wild.headers["access-control-allow-headers"], "x-one, x-two");
    assert_eq!(wild.headers["access-control-allow-credentials"], "true");
    let other = [("origin", "https://evil.test")];
    let refused = send(
        &client,
        http::Method::GET,
        &url("/cors"),
        "x",
        &other,
        Bytes::new(),
    )
    .await
    .unwrap();
    assert!(refused.headers.get("access-control-allow-origin").is_none());
}

/// A pod that speaks only HTTP/2 with prior knowledge (as the suite's `kubernetes.io/h2c`
/// port does) and answers with the request's version; an HTTP/1.1 request breaks it.
async fn h2c_only_pod(ip: IpAddr) -> SocketAddr {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = hyper::service::service_fn(|request: http::Request<_>| async move {
                let version = format!("{:?}\n", request.version());
                Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                    Bytes::from(version),
                )))
            });
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    addr
}

/// A Service whose one port declares `appProtocol` (`kubernetes.io/h2c`, `kubernetes.io/ws`).
fn service_speaking(name: &str, app_protocol: &str, endpoint: SocketAddr) -> String {
    service(name, 8080, &[endpoint]).replacen(
        "  - port: 8080\n",
        &format!("  - port: 8080\n    appProtocol: {app_protocol}\n"),
        1,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_backend_timeouts_cors_credentials_and_h2c_and_websocket_backends() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;
    let pod = EchoBackend::start("plain", pod_ip(210)).await.unwrap();
    let h2c = h2c_only_pod(pod_ip(211)).await;
    let websocket = support::websocket_echo_pod("echo", pod_ip(212)).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let socket = SocketAddr::new(gateway_ip(9), port);
    let redirect = |path: &str, settings: &str| {
        format!("  - matches: [{{path: {{value: {path}}}}}]\n    filters: [{{type: RequestRedirect, requestRedirect: {settings}}}]\n")
    };
    let mut rules = String::from("  rules:\n");
    for (path, settings) in [
        ("/see-other", "{statusCode: 303}"),
        ("/temporary", "{statusCode: 307}"),
        ("/permanent", "{statusCode: 308}"),
        ("/scheme-nil-and-port-nil", "{hostname: example.org}"),
        (
            "/scheme-nil-and-port-80",
            "{hostname: example.org, port: 80}",
        ),
        (
            "/scheme-https-and-port-nil",
            "{hostname: example.org, scheme: https}",
        ),
        (
            "/scheme-https-and-port-443",
            "{hostname: example.org, scheme: https, port: 443}",
        ),
        (
            "/scheme-https-and-port-8443",
            "{hostname: example.org, scheme: https, port: 8443}",
        ),
    ] {
        rules.push_str(&redirect(path, settings));
    }
    rules.push_str(
        r#"  - matches: [{path: {value: /full}}]
    backendRefs:
    - name: plain
      port: 8080
      filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /redirected-full}}}]
  - matches: [{path: {value: /__testkit/sleep}}]
    timeouts: {backendRequest: 300ms}
    backendRefs: [{name: plain, port: 8080}]
  - matches: [{path: {value: /cors-behavior-creds-false}}]
    filters: [{type: CORS, cors: {allowOrigins: ["https://app.example"], allowCredentials: false}}]
    backendRefs: [{name: plain, port: 8080}]
  - matches: [{path: {value: /cors-behavior-creds-true}}]
    filters: [{type: CORS, cors: {allowOrigins: ["https://app.example"], allowCredentials: true}}]
    backendRefs: [{name: plain, port: 8080}]
  - matches: [{path: {value: /h2c}}]
    backendRefs: [{name: h2c, port: 8080}]
  - matches: [{path: {value: /ws}}]
    backendRefs: [{name: websocket, port: 8080}]
"#,
    );
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            gateway(gateway_ip(9), &[("http", port, "")]),
            route("kinds", &rules),
            service("plain", 8080, &[pod.addr()]),
            service_speaking("h2c", "kubernetes.io/h2c", h2c),
            service_speaking("websocket", "kubernetes.io/ws", websocket),
        ],
    );
    let _sluice = Sluice::start(dir.path(), &[]).await;
    wait_for_socket(socket).await;
    let client = http_client();
    let url = |path: &str| format!("http://{socket}{path}");
    let ask =
        |method: http::Method, path: &str, headers: &'static [(&'static str, &'static str)]| {
            let (client, url) = (client.clone(), url(path));
            async move {
                send(&client, method, &url, "gw.example", headers, Bytes::new())
                    .await
                    .unwrap()
            }
        };
    let listener_host = format!("gw.example:{port}");
    for (method, path, status, location) in [
        (
            http::Method::POST,
            "/see-other",
            303,
            format!("http://{listener_host}/see-other"),
        ),
        (
            http::Method::GET,
            "/temporary",
            307,
            format!("http://{listener_host}/temporary"),
        ),
        (
            http::Method::GET,
            "/permanent",
            308,
            format!("http://{listener_host}/permanent"),
        ),
        (
            http::Method::GET,
            "/scheme-nil-and-port-nil",
            302,
            format!("http://example.org:{port}/scheme-nil-and-port-nil"),
        ),
        (
            http::Method::GET,
            "/scheme-nil-and-port-80",
            302,
            "http://example.org/scheme-nil-and-port-80".to_owned(),
        ),
        (
            http::Method::GET,
            "/scheme-https-and-port-nil",
            302,
            "https://example.org/scheme-https-and-port-nil".to_owned(),
        ),
        (
            http::Method::GET,
            "/scheme-https-and-port-443",
            302,
            "https://example.org/scheme-https-and-port-443".to_owned(),
        ),
        (
            http::Method::GET,
            "/scheme-https-and-port-8443",
            302,
            "https://example.org:8443/scheme-https-and-port-8443".to_owned(),
        ),
        (
            http::Method::GET,
            "/full/original",
            302,
            format!("http://{listener_host}/redirected-full"),
        ),
    ] {
        let reply = ask(method, path, &[]).await;
        assert_eq!(reply.status, status, "{path}: {reply:?}");
        assert_eq!(reply.headers["location"], location.as_str(), "{path}");
    }
    assert_eq!(pod.requests(), 0, "no redirect reaches the pod");

    let started = std::time::Instant::now();
    let slow = ask(http::Method::GET, "/__testkit/sleep/3000", &[]).await;
    assert_eq!(slow.status, 504, "{slow:?}");
    assert!(started.elapsed() < Duration::from_millis(2500));
    let quick = ask(http::Method::GET, "/__testkit/sleep/10", &[]).await;
    assert_eq!(quick.status, 200, "{quick:?}");

    const CREDENTIALS: [(&str, &str); 2] =
        [("cookie", "sid=abc123"), ("authorization", "Bearer test")];
    const APP: [(&str, &str); 3] = [
        CREDENTIALS[0],
        CREDENTIALS[1],
        ("origin", "https://app.example"),
    ];
    const NOT_APP: [(&str, &str); 3] = [
        CREDENTIALS[0],
        CREDENTIALS[1],
        ("origin", "http://not-app.example"),
    ];
    let creds_false = ask(http::Method::GET, "/cors-behavior-creds-false", &APP).await;
    assert_eq!(creds_false.status, 200);
    assert!(!creds_false
        .headers
        .contains_key("access-control-allow-credentials"));
    let not_app = ask(http::Method::GET, "/cors-behavior-creds-true", &NOT_APP).await;
    assert_eq!(not_app.status, 200);
    assert!(!not_app
        .headers
        .contains_key("access-control-allow-credentials"));
    assert!(!not_app.headers.contains_key("access-control-allow-origin"));
    let app = ask(http::Method::GET, "/cors-behavior-creds-true", &APP).await;
    assert_eq!(app.status, 200);
    assert_eq!(app.headers["access-control-allow-credentials"], "true");
    assert_eq!(
        app.headers["access-control-allow-origin"],
        "https://app.example"
    );

    let spoken = ask(http::Method::GET, "/h2c", &[]).await;
    assert_eq!(spoken.status, 200, "{spoken:?}");
    assert_eq!(spoken.body, "HTTP/2.0\n", "the pod was spoken to in h2c");

    let mut request = url("/ws")
        .replacen("http", "ws", 1)
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("host", "gw.example".parse().unwrap());
    let (mut chat, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(response.status(), 101);
    chat.send(Message::text("Test")).await.unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(5), chat.next()).await;
    match reply {
        Ok(Some(Ok(Message::Text(text)))) => assert_eq!(text.as_str(), "echo: Test"),
        other => panic!("no echo: {other:?}"),
    }
}
