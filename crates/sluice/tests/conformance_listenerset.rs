//! Gateway API ListenerSet conformance tests through the real binary, on the manifests of the fixtures (`crates/config/tests/fixtures/gateway_listenerset_*.yaml`, upstream v1.6.1's test manifests), with real echo pods behind the base manifests' `infra-backend-v1` (2 replicas), `-v2` (2) and `-v3` (1), the hosts and paths upstream requests, and the status `/api/gateways` shows.
//!
//! Ports differ: the listeners bind a free port instead of 80, at `--gateway-address`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;

use serde_json::Value;
use sluice_testkit::{get, http_client, EchoBackend};
use support::{free_port, pod_ip, wait_for_socket, write_manifest, Sluice};

const INFRA: &str = "gateway-conformance-infra";

fn gateway_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 9, 1))
}

/// The manifests of fixture `name` without its expectations and its placeholder backends,
/// the listeners' port 80 replaced by `port`.
fn fixture_manifests(name: &str, port: u16) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../config/tests/fixtures")
        .join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap();
    text.split("\n---\n")
        .filter(|doc| {
            !doc.contains("kind: Expectations")
                && !doc.contains("kind: Service\n")
                && !doc.contains("kind: EndpointSlice\n")
        })
        .map(|doc| {
            format!("{}\n", doc.trim_end()).replace("port: 80\n", &format!("port: {port}\n"))
        })
        .collect()
}

/// An infra backend Service with its pods, as the base manifests' Deployment runs them.
async fn infra_backend(name: &str, replicas: u8, first_ip: u8) -> (Vec<EchoBackend>, String) {
    let port = free_port();
    let mut pods = Vec::new();
    let mut endpoints = String::new();
    for n in 0..replicas {
        let addr = SocketAddr::new(pod_ip(first_ip + n), port);
        pods.push(
            EchoBackend::start_on(&format!("{name}-{n}"), addr)
                .await
                .unwrap(),
        );
        endpoints.push_str(&format!("- addresses: [\"{}\"]\n", addr.ip()));
    }
    let yaml = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {INFRA}}}\nspec:\n  selector: {{app: {name}}}\n  ports: [{{protocol: TCP, port: 8080, targetPort: 3000}}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}-pods, namespace: {INFRA}, labels: {{kubernetes.io/service-name: {name}}}}}\naddressType: IPv4\nports: [{{port: {port}}}]\nendpoints:\n{endpoints}"
    );
    (pods, yaml)
}

/// Sluice serving fixture `name` with the three infra backends; its listeners' address.
async fn serve_fixture(
    name: &str,
) -> (tempfile::TempDir, Sluice, SocketAddr, Vec<Vec<EchoBackend>>) {
    let port = free_port();
    let mut docs = fixture_manifests(name, port);
    let mut backends = Vec::new();
    for (index, (backend, replicas)) in [
        ("infra-backend-v1", 2),
        ("infra-backend-v2", 2),
        ("infra-backend-v3", 1),
    ]
    .into_iter()
    .enumerate()
    {
        let first_ip = 240 + 4 * u8::try_from(index).unwrap();
        let (pods, yaml) = infra_backend(backend, replicas, first_ip).await;
        docs.push(yaml);
        backends.push(pods);
    }
    let dir = tempfile::tempdir().unwrap();
    write_manifest(dir.path(), "conformance.yaml", &docs);
    let address = gateway_ip().to_string();
    let sluice = Sluice::start(dir.path(), &["--gateway-address", &address]).await;
    let socket = SocketAddr::new(gateway_ip(), port);
    wait_for_socket(socket).await;
    (dir, sluice, socket, backends)
}

/// Which Service's pod answered `host` and `path`: `infra-backend-v1`, or the status code
/// when none did.
async fn who_answers(socket: SocketAddr, host: &str, path: &str) -> String {
    let client = http_client();
    let reply = get(&client, &format!("http://{socket}{path}"), host)
        .await
        .unwrap();
    match reply.status.as_u16() {
        200 => reply
            .body
            .trim()
            .rsplit_once('-')
            .map(|(service, _)| service.to_owned())
            .unwrap_or(reply.body),
        status => status.to_string(),
    }
}

async fn report(sluice: &Sluice) -> Value {
    serde_json::from_str(&sluice.admin_get("/api/gateways").await.body).unwrap()
}

fn listener_set<'r>(report: &'r Value, name: &str) -> &'r Value {
    report["listenerSets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|set| set["name"] == name)
        .unwrap_or_else(|| panic!("no ListenerSet {name} in {report}"))
}

/// `(type, status, reason)` of a condition list.
fn conditions(list: &Value) -> Vec<(String, String, String)> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let field = |key: &str| c[key].as_str().unwrap().to_owned();
            (field("type"), field("status"), field("reason"))
        })
        .collect()
}

fn triple(t: &str, s: &str, r: &str) -> (String, String, String) {
    (t.to_owned(), s.to_owned(), r.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_http_routing() {
    let (_dir, sluice, socket, _backends) = serve_fixture("gateway_listenerset_http_routing").await;
    let hosts = [
        "gateway-listener-1.com",
        "gateway-listener-2.com",
        "listener-set-http-routing-1-listener-1.com",
        "listener-set-http-routing-1-listener-2.com",
        "listener-set-http-routing-2-listener-1.com",
        "listener-set-http-routing-2-listener-2.com",
    ];
    // Per path, the backend each host reaches, in the order of `hosts` (404: none).
    let cases: [(&str, [&str; 6]); 6] = [
        ("/route", ["infra-backend-v1"; 6]),
        (
            "/gateway-route",
            [
                "infra-backend-v2",
                "infra-backend-v2",
                "404",
                "404",
                "404",
                "404",
            ],
        ),
        (
            "/gateway-section-route",
            ["infra-backend-v3", "404", "404", "404", "404", "404"],
        ),
        (
            "/listener-set-http-routing-1-route",
            [
                "404",
                "404",
                "infra-backend-v2",
                "infra-backend-v2",
                "404",
                "404",
            ],
        ),
        (
            "/listener-set-http-routing-1-section-route",
            ["404", "404", "infra-backend-v3", "404", "404", "404"],
        ),
        (
            "/listener-set-http-routing-2-route",
            [
                "404",
                "404",
                "404",
                "404",
                "infra-backend-v2",
                "infra-backend-v2",
            ],
        ),
    ];
    for (path, expected) in cases {
        for (host, want) in hosts.iter().zip(expected) {
            assert_eq!(who_answers(socket, host, path).await, want, "{host}{path}");
        }
    }
    let report = report(&sluice).await;
    let gateway = report["gateways"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "gateway-with-listener-sets-http-routing")
        .unwrap();
    assert_eq!(gateway["attachedListenerSets"], 2, "{gateway}");
    for (set, attached) in [
        ("listener-set-http-routing-1", [3, 2]),
        ("listener-set-http-routing-2", [2, 2]),
    ] {
        let status = listener_set(&report, set);
        assert_eq!(
            conditions(&status["conditions"]),
            [
                triple("Accepted", "True", "Accepted"),
                triple("Programmed", "True", "Programmed")
            ]
        );
        for (listener, attached) in status["listeners"].as_array().unwrap().iter().zip(attached) {
            assert_eq!(listener["attachedRoutes"], attached, "{listener}");
            let held: Vec<_> = conditions(&listener["conditions"])
                .into_iter()
                .filter(|(t, _, _)| t != "Conflicted")
                .map(|(t, s, _)| (t, s))
                .collect();
            assert!(held.iter().all(|(_, s)| s == "True"), "{listener}");
        }
    }
    let route = report["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "attaches-to-all-listeners")
        .unwrap();
    let kinds: Vec<&str> = route["parents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["parentRef"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Gateway", "ListenerSet", "ListenerSet"], "{route}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_hostname_conflict_leaves_the_gateway_and_the_older_set_serving() {
    let (dir, sluice, socket, _backends) =
        serve_fixture("gateway_listenerset_hostname_conflict").await;
    let report = report(&sluice).await;
    let conflicted = [
        triple("Accepted", "False", "HostnameConflict"),
        triple("ResolvedRefs", "True", "ResolvedRefs"),
        triple("Conflicted", "True", "HostnameConflict"),
        triple("Programmed", "False", "HostnameConflict"),
    ];
    let first = listener_set(&report, "listenerset-with-hostname-conflict-with-gateway-1");
    assert_eq!(conditions(&first["listeners"][1]["conditions"]), conflicted);
    let second = listener_set(&report, "listenerset-with-hostname-conflict-with-gateway-2");
    assert_eq!(
        conditions(&second["conditions"]),
        [
            triple("Accepted", "False", "ListenersNotValid"),
            triple("Programmed", "False", "ListenersNotValid")
        ]
    );
    // Routes through the serving sockets: a route on the conflicted set listener is served by
    // nobody, one on the older set's listener is.
    let route = |name: &str, set: &str, section: &str, path: &str| {
        format!("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {INFRA}}}\nspec:\n  parentRefs: [{{kind: ListenerSet, group: gateway.networking.k8s.io, name: {set}, namespace: {INFRA}, sectionName: {section}}}]\n  rules: [{{matches: [{{path: {{type: PathPrefix, value: {path}}}}}], backendRefs: [{{name: infra-backend-v1, port: 8080}}]}}]\n")
    };
    let generation = sluice.generation().await;
    write_manifest(
        dir.path(),
        "routes.yaml",
        &[
            route(
                "on-older-set",
                "listenerset-with-hostname-conflict-with-gateway-1",
                "hostname-conflict-with-listener-set-listener",
                "/older",
            ),
            route(
                "on-conflicted",
                "listenerset-with-hostname-conflict-with-listener-set-1",
                "hostname-conflict-with-listener-set-listener",
                "/conflicted",
            ),
        ],
    );
    sluice.wait_for_generation_after(generation).await;
    let host = "hostname-conflict-with-listener-set-listener.com";
    assert_eq!(
        who_answers(socket, host, "/older").await,
        "infra-backend-v1"
    );
    assert_eq!(who_answers(socket, host, "/conflicted").await, "404");
    let report = self::report(&sluice).await;
    let conflicted_route = report["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "on-conflicted")
        .unwrap();
    assert_eq!(
        conflicted_route["parents"][0]["conditions"][0]["status"], "False",
        "{conflicted_route}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_set_allowed_routes_namespaces_and_dual_parent_refs() {
    let (_dir, _sluice, socket, _backends) =
        serve_fixture("gateway_listenerset_allowed_routes_namespaces").await;
    let all = "listener-set-listener-allowed-routes-all.com";
    let same = "listener-set-listener-allowed-routes-same.com";
    let selector = "listener-set-listener-allowed-routes-selector.com";
    let cross = "listener-set-listener-allowed-routes-cross-ns-same.com";
    for (host, path, want) in [
        (all, "/route-in-same-namespace", "infra-backend-v1"),
        (all, "/route-in-selected-namespace", "infra-backend-v2"),
        (all, "/route-not-in-selected-namespace", "infra-backend-v3"),
        (same, "/route-in-same-namespace", "infra-backend-v1"),
        (same, "/route-in-selected-namespace", "404"),
        (same, "/route-not-in-selected-namespace", "404"),
        (selector, "/route-in-same-namespace", "404"),
        (selector, "/route-in-selected-namespace", "infra-backend-v2"),
        (selector, "/route-not-in-selected-namespace", "404"),
        (cross, "/route-in-listenerset-namespace", "infra-backend-v1"),
        (cross, "/route-in-gateway-namespace", "404"),
    ] {
        assert_eq!(who_answers(socket, host, path).await, want, "{host}{path}");
    }
    let (_dir, _sluice, socket, _backends) =
        serve_fixture("gateway_listenerset_dual_parentref_independence").await;
    for (host, path, want) in [
        ("gw-dual.com", "/dualboth", "infra-backend-v1"),
        ("ls-dual.com", "/dualboth", "infra-backend-v1"),
        ("ls-dual.com", "/dualone", "infra-backend-v2"),
        ("gw-dual.com", "/dualone", "404"),
    ] {
        assert_eq!(who_answers(socket, host, path).await, want, "{host}{path}");
    }
}
