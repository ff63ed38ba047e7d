//! Gateway API conformance tests set up as upstream sets them up (`conformance/base/manifests.yaml` and each test's manifest: its namespace, Gateway, route names, paths, backend Services and replica counts, the hosts, origins and query strings it sends), through the real binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use sluice_testkit::{http_client, send, EchoBackend, Reply, TestBody};
use support::{free_port, pod_ip, wait_until, write_manifest, Sluice};

const INFRA: &str = "gateway-conformance-infra";

/// The address sluice binds the base Gateway at (`--gateway-address`): upstream's Gateways
/// name no address.
fn gateway_ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 4, n))
}

/// The base manifests' infra namespace and its `same-namespace` Gateway (one HTTP listener
/// taking routes from its own namespace), on `port` instead of 80.
fn base_gateway(port: u16) -> String {
    format!(
        "apiVersion: v1
kind: Namespace
metadata:
  name: {INFRA}
  labels: {{gateway-conformance: infra}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: sluice}}
spec: {{controllerName: sluice.dev/gateway-controller}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: same-namespace
  namespace: {INFRA}
spec:
  gatewayClassName: sluice
  listeners:
  - name: http
    port: {port}
    protocol: HTTP
    allowedRoutes:
      namespaces: {{from: Same}}
"
    )
}

/// A base-manifest backend Service (port 8080 to the echo server's 3000) with one pod per
/// address, as its Deployment's replicas would be.
fn backend_service(name: &str, pods: &[SocketAddr]) -> String {
    let mut yaml = format!(
        "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {INFRA}}}
spec:
  selector: {{app: {name}}}
  ports:
  - {{protocol: TCP, port: 8080, targetPort: 3000}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-pods
  namespace: {INFRA}
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports:
- {{port: {}}}
endpoints:
",
        pods[0].port()
    );
    for pod in pods {
        yaml.push_str(&format!("- addresses: [\"{}\"]\n", pod.ip()));
    }
    yaml
}

/// An HTTPRoute `name` in the infra namespace attached to `same-namespace`, with `rules` (YAML
/// list items, indented two spaces), as upstream's test manifests write them.
fn infra_route(name: &str, rules: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {INFRA}}}\nspec:\n  parentRefs: [{{name: same-namespace}}]\n  rules:\n{rules}"
    )
}

/// `replicas` echo pods of Deployment `name`, each named `<name>-<n>` like a pod of it, all on
/// one port.
async fn deployment(name: &str, replicas: u8, first_ip: u8) -> Vec<EchoBackend> {
    let port = free_port();
    let mut pods = Vec::new();
    for n in 0..replicas {
        let addr = SocketAddr::new(pod_ip(first_ip + n), port);
        pods.push(
            EchoBackend::start_on(&format!("{name}-{n}"), addr)
                .await
                .unwrap(),
        );
    }
    pods
}

fn addrs(pods: &[EchoBackend]) -> Vec<SocketAddr> {
    pods.iter().map(EchoBackend::addr).collect()
}

fn received(pods: &[EchoBackend]) -> u64 {
    pods.iter().map(EchoBackend::requests).sum()
}

/// sluice serving `documents`, its Gateway listener accepting at the returned address.
async fn serve(
    documents: &[String],
    ip: IpAddr,
    port: u16,
) -> (tempfile::TempDir, Sluice, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    write_manifest(dir.path(), "conformance.yaml", documents);
    let flag = ip.to_string();
    let sluice = Sluice::start(dir.path(), &["--gateway-address", &flag]).await;
    let socket = SocketAddr::new(ip, port);
    wait_until(
        &format!("{socket} to accept"),
        Duration::from_secs(10),
        || async move { tokio::net::TcpStream::connect(socket).await.is_ok() },
    )
    .await;
    (dir, sluice, socket)
}

/// The harness's request: the Gateway address as the URL and the Host.
async fn request(
    client: &Client<HttpConnector, TestBody>,
    socket: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> Reply {
    send(
        client,
        method,
        &format!("http://{socket}{path}"),
        &socket.to_string(),
        headers,
        Bytes::new(),
    )
    .await
    .unwrap()
}

/// `tests/httproute-retry.yaml`, `httproute-retry-connection-error.yaml` and
/// `httproute-retry-with-timeouts.yaml` on the base manifests' `infra-backend-v3`, which has
/// `replicas: 1`: every retry goes to that one pod. Each case of `httproute-retry.go` (and of
/// the connection-error and timeout tests) with a fresh uuid, as the harness sends it; the
/// pod's count shows how many tries the request took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproute_retry_retries_the_only_pod_of_infra_backend_v3() {
    let v3 = deployment("infra-backend-v3", 1, 10).await;
    let port = free_port();
    let retries = infra_route(
        "retries",
        "  - matches: [{path: {type: PathPrefix, value: /retry/code-500-attempts-3}}]
    retry: {codes: [500], attempts: 3}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /retry/code-all-attempts-2}}]
    retry: {codes: [500, 502, 503, 504], attempts: 2}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
",
    );
    let connection_error = infra_route(
        "retries-connection-error",
        "  - matches: [{path: {type: PathPrefix, value: /retry/no-status-code-attempts-3}}]
    retry: {attempts: 3}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
",
    );
    let with_timeouts = infra_route(
        "retries-with-timeouts",
        "  - matches: [{path: {type: PathPrefix, value: /retry/backend-request-timeout-200ms}}]
    retry: {attempts: 2}
    timeouts: {backendRequest: 200ms}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /retry/request-timeout-200ms}}]
    retry: {codes: [500], attempts: 5}
    timeouts: {backendRequest: 200ms, request: 400ms}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
",
    );
    let documents = [
        base_gateway(port),
        backend_service("infra-backend-v3", &addrs(&v3)),
        retries,
        connection_error,
        with_timeouts,
    ];
    let (_dir, _sluice, socket) = serve(&documents, gateway_ip(1), port).await;
    let client = http_client();
    // (path, the simulation's query before the uuid, expected statuses, tries the pod sees,
    // where timing does not make that vary)
    let cases: [(&str, &str, &[u16], Option<u64>); 17] = [
        (
            "/retry/code-500-attempts-3",
            "responseCode=500&succeedAfter=2",
            &[200],
            Some(3),
        ),
        (
            "/retry/code-500-attempts-3",
            "responseCode=500&succeedAfter=4",
            &[500],
            Some(4),
        ),
        (
            "/retry/code-500-attempts-3",
            "responseCode=503&succeedAfter=2",
            &[503],
            Some(1),
        ),
        (
            "/retry/code-all-attempts-2",
            "responseCode=500&succeedAfter=1",
            &[200],
            Some(2),
        ),
        (
            "/retry/code-all-attempts-2",
            "responseCode=500&succeedAfter=3",
            &[500],
            Some(3),
        ),
        (
            "/retry/code-all-attempts-2",
            "responseCode=502&succeedAfter=1",
            &[200],
            Some(2),
        ),
        (
            "/retry/code-all-attempts-2",
            "responseCode=502&succeedAfter=3",
            &[502],
            Some(3),
        ),
        (
            "/retry/code-all-attempts-2",
            "responseCode=503&succeedAfter=1",
            &[200],
            Some(2),
        ),
        (
            "/retry/code-all-attempts-2",
            "responseCode=503&succeedAfter=3",
            &[503],
            Some(3),
        ),
        (
            "/retry/code-all-attempts-2",
            "responseCode=504&succeedAfter=1",
            &[200],
            Some(2),
        ),
        (
            "/retry/code-all-attempts-2",
            "responseCode=504&succeedAfter=3",
            &[504],
            Some(3),
        ),
        (
            "/retry/no-status-code-attempts-3",
            "succeedAfter=2",
            &[200],
            Some(3),
        ),
        (
            "/retry/no-status-code-attempts-3",
            "succeedAfter=4",
            &[500, 503],
            Some(4),
        ),
        (
            "/retry/backend-request-timeout-200ms",
            "responseCode=500&succeedAfter=2&delayRetry=300ms",
            &[200],
            Some(3),
        ),
        (
            "/retry/backend-request-timeout-200ms",
            "responseCode=500&succeedAfter=3&delayRetry=300ms",
            &[504],
            Some(3),
        ),
        (
            "/retry/request-timeout-200ms",
            "responseCode=500&succeedAfter=1",
            &[200],
            Some(2),
        ),
        (
            "/retry/request-timeout-200ms",
            "responseCode=500&succeedAfter=4&delayRetry=100ms",
            &[504],
            None,
        ),
    ];
    for (index, (path, simulation, want, tries)) in cases.into_iter().enumerate() {
        let query = format!("{simulation}&uuid=case-{index}");
        let before = received(&v3);
        let reply = request(
            &client,
            socket,
            Method::GET,
            &format!("{path}?{query}"),
            &[],
        )
        .await;
        assert!(
            want.contains(&reply.status.as_u16()),
            "case {index} {path}?{query}: {reply:?}"
        );
        if reply.status == 200 {
            assert_eq!(reply.body.trim(), "infra-backend-v3-0", "case {index}");
        }
        if let Some(tries) = tries {
            assert_eq!(received(&v3) - before, tries, "case {index} {path}?{query}");
        }
    }
}

/// `tests/httproute-cors.yaml` on the base manifests' `infra-backend-v1` (2 replicas), with the
/// origins, methods and headers of each case of `httproute-cors.go`. Every preflight is answered
/// by the Gateway: no pod sees one, the non-matching origin's included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproute_cors_answers_every_preflight_and_matches_multi_label_wildcards() {
    let v1 = deployment("infra-backend-v1", 2, 20).await;
    let port = free_port();
    let rule = |name: &str, path: &str, cors: &str| {
        infra_route(
            name,
            &format!(
                "  - filters: [{{type: CORS, cors: {cors}}}]
    matches: [{{path: {{type: PathPrefix, value: {path}}}}}]
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
"
            ),
        )
    };
    let mut both = rule(
        "cors-wildcard-methods-headers",
        "/cors-wildcard-methods-headers",
        "{allowOrigins: [\"*\"], allowMethods: [\"*\"], allowHeaders: [\"*\"], allowCredentials: true}",
    );
    both.push_str(
        "  - filters: [{type: CORS, cors: {allowOrigins: [\"*\"], allowMethods: [\"*\"], allowHeaders: [\"*\"], allowCredentials: false}}]
    matches: [{path: {type: PathPrefix, value: /cors-wildcard-methods-headers-unauth}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
",
    );
    let documents = [
        base_gateway(port),
        backend_service("infra-backend-v1", &addrs(&v1)),
        rule(
            "cors-multiple-origins-methods-headers",
            "/cors-1",
            "{allowOrigins: [\"https://www.foo.com\", \"https://*.bar.com\"], allowMethods: [GET, OPTIONS], allowHeaders: [x-header-1, x-header-2], exposeHeaders: [x-header-3, x-header-4], allowCredentials: true, maxAge: 3600}",
        ),
        rule(
            "cors-wildcard-methods",
            "/cors-2",
            "{allowOrigins: [\"https://www.foo.com\"], allowMethods: [\"*\"]}",
        ),
        rule(
            "cors-wildcard-origin",
            "/cors-wildcard-origin",
            "{allowOrigins: [\"*\"], allowMethods: [PUT], allowCredentials: false}",
        ),
        both,
    ];
    let (_dir, _sluice, socket) = serve(&documents, gateway_ip(2), port).await;
    let client = http_client();
    const PREFLIGHT: &[u16] = &[200, 204];
    const REFUSED: &[u16] = &[200, 204, 403];
    const SIMPLE: &[u16] = &[200];
    let requested = |origin, method| {
        vec![
            ("origin", origin),
            ("access-control-request-method", method),
            ("access-control-request-headers", "x-header-1, x-header-2"),
        ]
    };
    let mut cases = Vec::new();
    for origin in [
        "https://www.foo.com",
        "https://www.bar.com",
        "https://xpto.www.bar.com",
    ] {
        let valid = vec![
            ("access-control-allow-origin", vec![origin]),
            (
                "access-control-allow-methods",
                vec!["GET,OPTIONS", "OPTIONS,GET"],
            ),
            (
                "access-control-allow-headers",
                vec!["x-header-1,x-header-2", "x-header-2,x-header-1"],
            ),
            (
                "access-control-expose-headers",
                vec!["x-header-3,x-header-4", "x-header-4,x-header-3"],
            ),
            ("access-control-max-age", vec!["3600"]),
            ("access-control-allow-credentials", vec!["true"]),
        ];
        cases.push(
            Case::new(
                Method::OPTIONS,
                "/cors-1",
                requested(origin, "GET"),
                PREFLIGHT,
            )
            .valid(valid),
        );
    }
    let refused = vec![
        ("origin", "https://foobar.com"),
        ("access-control-request-method", "GET"),
    ];
    cases.push(
        Case::new(Method::OPTIONS, "/cors-1", refused.clone(), REFUSED)
            .absent(&["access-control-allow-origin"]),
    );
    for origin in ["https://www.foo.com", "https://www.bar.com"] {
        let valid = vec![("access-control-allow-origin", vec![origin])];
        cases
            .push(Case::new(Method::GET, "/cors-1", requested(origin, "GET"), SIMPLE).valid(valid));
    }
    cases.push(
        Case::new(Method::GET, "/cors-1", refused, SIMPLE).absent(&["access-control-allow-origin"]),
    );
    let post = vec![
        ("origin", "https://www.foo.com"),
        ("access-control-request-method", "POST"),
    ];
    let valid = vec![
        ("access-control-allow-methods", vec!["POST", "*"]),
        ("access-control-allow-origin", vec!["https://www.foo.com"]),
    ];
    cases.push(
        Case::new(Method::OPTIONS, "/cors-2", post.clone(), PREFLIGHT)
            .valid(valid)
            .absent(&["access-control-allow-credentials"]),
    );
    // Upstream sends the same preflight again to check credentials alone.
    cases.push(
        Case::new(Method::OPTIONS, "/cors-2", post, PREFLIGHT)
            .absent(&["access-control-allow-credentials"]),
    );
    for origin in ["https://foobar.com", "https://foobar.com:12345"] {
        let put = vec![("origin", origin), ("access-control-request-method", "PUT")];
        let valid = vec![
            ("access-control-allow-origin", vec![origin, "*"]),
            ("access-control-allow-methods", vec!["PUT"]),
        ];
        cases.push(
            Case::new(Method::OPTIONS, "/cors-wildcard-origin", put, PREFLIGHT)
                .valid(valid)
                .absent(&["access-control-allow-credentials"]),
        );
        let valid = vec![("access-control-allow-origin", vec![origin, "*"])];
        cases.push(
            Case::new(
                Method::PUT,
                "/cors-wildcard-origin",
                vec![("origin", origin)],
                SIMPLE,
            )
            .valid(valid)
            .absent(&["access-control-allow-credentials"]),
        );
    }
    let other = requested("https://other.foo.com", "PUT");
    let valid = vec![
        ("access-control-allow-origin", vec!["https://other.foo.com"]),
        ("access-control-allow-methods", vec!["PUT"]),
        (
            "access-control-allow-headers",
            vec!["x-header-1,x-header-2", "x-header-2,x-header-1"],
        ),
        ("access-control-allow-credentials", vec!["true"]),
    ];
    cases.push(
        Case::new(
            Method::OPTIONS,
            "/cors-wildcard-methods-headers",
            other.clone(),
            PREFLIGHT,
        )
        .valid(valid),
    );
    let valid = vec![
        (
            "access-control-allow-origin",
            vec!["https://other.foo.com", "*"],
        ),
        ("access-control-allow-methods", vec!["PUT", "*"]),
        (
            "access-control-allow-headers",
            vec!["x-header-1,x-header-2", "x-header-2,x-header-1", "*"],
        ),
    ];
    cases.push(
        Case::new(
            Method::OPTIONS,
            "/cors-wildcard-methods-headers-unauth",
            other,
            PREFLIGHT,
        )
        .valid(valid)
        .absent(&["access-control-allow-credentials"]),
    );
    let origin = vec![("origin", "https://other.foo.com")];
    let valid = vec![
        ("access-control-allow-origin", vec!["https://other.foo.com"]),
        ("access-control-allow-credentials", vec!["true"]),
    ];
    cases.push(
        Case::new(
            Method::GET,
            "/cors-wildcard-methods-headers",
            origin.clone(),
            SIMPLE,
        )
        .valid(valid),
    );
    let valid = vec![(
        "access-control-allow-origin",
        vec!["https://other.foo.com", "*"],
    )];
    cases.push(
        Case::new(
            Method::GET,
            "/cors-wildcard-methods-headers-unauth",
            origin,
            SIMPLE,
        )
        .valid(valid)
        .absent(&["access-control-allow-credentials"]),
    );

    assert_eq!(cases.len(), 17, "every case of httproute-cors.go");
    for (index, case) in cases.iter().enumerate() {
        let before = received(&v1);
        let reply = request(
            &client,
            socket,
            case.method.clone(),
            case.path,
            &case.headers,
        )
        .await;
        case.check(index, &reply);
        let reached = received(&v1) - before;
        let simple = case.method != Method::OPTIONS;
        assert_eq!(
            reached,
            u64::from(simple),
            "case {index}: only simple requests reach a pod"
        );
        if simple {
            assert!(
                reply.body.starts_with("infra-backend-v1-"),
                "case {index}: {reply:?}"
            );
        }
    }
}

/// One request of `httproute-cors.go` and what its answer must hold, as the harness judges it:
/// a status among `statuses`, each named header one of its valid values (whitespace ignored),
/// and the absent headers absent.
struct Case {
    method: Method,
    path: &'static str,
    headers: Vec<(&'static str, &'static str)>,
    statuses: &'static [u16],
    valid: Vec<(&'static str, Vec<&'static str>)>,
    absent: &'static [&'static str],
}

impl Case {
    fn new(
        method: Method,
        path: &'static str,
        headers: Vec<(&'static str, &'static str)>,
        statuses: &'static [u16],
    ) -> Self {
        Self {
            method,
            path,
            headers,
            statuses,
            valid: Vec::new(),
            absent: &[],
        }
    }

    fn valid(mut self, valid: Vec<(&'static str, Vec<&'static str>)>) -> Self {
        self.valid = valid;
        self
    }

    fn absent(mut self, absent: &'static [&'static str]) -> Self {
        self.absent = absent;
        self
    }

    fn check(&self, index: usize, reply: &Reply) {
        let what = format!("case {index} {} {}: {reply:?}", self.method, self.path);
        assert!(self.statuses.contains(&reply.status.as_u16()), "{what}");
        for (name, values) in &self.valid {
            let got = reply
                .headers
                .get(*name)
                .map(|value| value.to_str().unwrap().replace(' ', ""));
            assert!(
                got.as_deref().is_some_and(|got| values.contains(&got)),
                "{name} is {got:?}, not one of {values:?}; {what}"
            );
        }
        for name in self.absent {
            assert!(!reply.headers.contains_key(*name), "{name} present; {what}");
        }
    }
}

/// `tests/httproute-omitted-backendrefs.yaml` (HTTPRouteNoBackendRefs) on the base manifests'
/// `infra-backend-v1` (2 replicas): rules whose `backendRefs` are omitted or empty answer 500
/// and reach no pod; `/forward` goes to v1. The route has ResolvedRefs=True, as the test checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproute_no_backend_refs_answers_500_for_rules_without_backends() {
    let v1 = deployment("infra-backend-v1", 2, 30).await;
    let port = free_port();
    let route = infra_route(
        "omitted-backendrefs",
        "  - matches: [{path: {type: Exact, value: /omitted-no-forward}}]
  - matches: [{path: {type: Exact, value: /empty-no-forward}}]
    backendRefs: []
  - matches: [{path: {type: PathPrefix, value: /}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
",
    );
    let documents = [
        base_gateway(port),
        backend_service("infra-backend-v1", &addrs(&v1)),
        route,
    ];
    let (_dir, sluice, socket) = serve(&documents, gateway_ip(3), port).await;
    let client = http_client();
    let forward = request(&client, socket, Method::GET, "/forward", &[]).await;
    assert_eq!(forward.status, 200, "{forward:?}");
    assert!(forward.body.starts_with("infra-backend-v1-"), "{forward:?}");
    for path in ["/omitted-no-forward", "/empty-no-forward"] {
        let reply = request(&client, socket, Method::GET, path, &[]).await;
        assert_eq!(reply.status, 500, "{path}: {reply:?}");
    }
    assert_eq!(received(&v1), 1, "only /forward reached a pod");
    let status = sluice.admin_get("/api/gateways").await;
    let report: serde_json::Value = serde_json::from_str(&status.body).unwrap();
    let conditions = report["routes"][0]["parents"][0]["conditions"]
        .as_array()
        .unwrap();
    for kind in ["Accepted", "ResolvedRefs"] {
        let condition = conditions.iter().find(|c| c["type"] == kind).unwrap();
        assert_eq!(condition["status"], "True", "{kind}: {report}");
    }
}

/// `tests/httproute-timeout-request.yaml` and `httproute-timeout-backend-request.yaml`
/// (HTTPRouteTimeoutRequest, HTTPRouteTimeoutBackendRequest) on the base manifests'
/// `infra-backend-v1` (2 replicas), with the echo server's `?delay=1s`: 500 ms answers 504 for
/// a pod that takes 1 s and 200 for a fast one, and `"0s"` disables the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproute_timeouts_answer_504_past_them_and_0s_disables_them() {
    let v1 = deployment("infra-backend-v1", 2, 40).await;
    let port = free_port();
    let route = |name: &str, prefix: &str, field: &str| {
        infra_route(
            name,
            &format!(
                "  - matches: [{{path: {{type: PathPrefix, value: /{prefix}}}}}]
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
    timeouts: {{{field}: 500ms}}
  - matches: [{{path: {{type: PathPrefix, value: /disable-{prefix}}}}}]
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
    timeouts: {{{field}: \"0s\"}}
"
            ),
        )
    };
    let documents = [
        base_gateway(port),
        backend_service("infra-backend-v1", &addrs(&v1)),
        route("request-timeout", "request-timeout", "request"),
        route(
            "backend-request-timeout",
            "backend-timeout",
            "backendRequest",
        ),
    ];
    let (_dir, _sluice, socket) = serve(&documents, gateway_ip(4), port).await;
    let client = http_client();
    for prefix in ["request-timeout", "backend-timeout"] {
        let cases = [
            (format!("/{prefix}"), 200),
            (format!("/{prefix}?delay=1s"), 504),
            (format!("/disable-{prefix}?delay=1s"), 200),
        ];
        for (path, status) in cases {
            let reply = request(&client, socket, Method::GET, &path, &[]).await;
            assert_eq!(reply.status, status, "{path}: {reply:?}");
            if status == 200 {
                assert!(reply.body.starts_with("infra-backend-v1-"), "{reply:?}");
            }
        }
    }
}
