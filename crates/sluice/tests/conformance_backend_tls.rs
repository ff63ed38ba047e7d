//! Gateway API BackendTLSPolicy conformance tests set up as upstream (v1.6.1) sets them up, through the real binary: the `same-namespace` and `same-namespace-with-https-listener` Gateways, the one `tls-backend` pod (TLS on its own port, a certificate for abc.example.com, spiffe://abc.example.com/test-identity and other.example.com from the suite's CA), the Services, policies and CA ConfigMaps of each test, and requests that check the status code, the server name the pod saw and the policies' conditions in `/api/gateways`.
//!
//! Ports differ: the listeners bind free ports instead of 80 and 443, and the pod listens on
//! a free port instead of 8443 (the Services' `targetPort`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use sluice_testkit::{get, http_client, TestCa};
use support::tls::{curl, write_pem};
use support::{free_port, pod_ip, wait_for_socket, wait_until, write_manifest, Sluice};
use tokio::net::TcpListener;

const INFRA: &str = "gateway-conformance-infra";

fn gateway_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 8, 1))
}

/// The `tls-backend` pod: serves HTTP/1.1 over TLS with `issued` and answers every request
/// with the server name its client asked for and the path, as the echo server reports them.
async fn tls_backend(ip: IpAddr, issued: &sluice_testkit::IssuedPem) -> SocketAddr {
    support::tls::https_pod(ip, issued, |sni, path| {
        format!("tls-backend sni={sni} path={path}\n")
    })
    .await
}

/// A ConfigMap with `ca.crt` (empty when `pem` is).
fn ca_config_map(name: &str, pem: &str) -> String {
    let indented: String = pem.lines().map(|line| format!("    {line}\n")).collect();
    match pem.is_empty() {
        true => format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {INFRA}}}\ndata:\n  ca.crt: \"\"\n"),
        false => format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {INFRA}}}\ndata:\n  ca.crt: |\n{indented}"),
    }
}

/// A Service selecting the tls-backend pod, with named ports `(name, port, appProtocol)`
/// that all target the pod's port, and its EndpointSlice.
fn service(name: &str, ports: &[(&str, u16, Option<&str>)], pod: SocketAddr) -> String {
    let mut spec_ports = Vec::new();
    let mut slice_ports = Vec::new();
    for (port_name, port, app) in ports {
        let app = app
            .map(|a| format!(", appProtocol: {a}"))
            .unwrap_or_default();
        spec_ports.push(format!(
            "{{name: {port_name}, protocol: TCP{app}, port: {port}, targetPort: {}}}",
            pod.port()
        ));
        slice_ports.push(format!("{{name: {port_name}, port: {}}}", pod.port()));
    }
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {INFRA}}}\nspec:\n  selector: {{app: tls-backend}}\n  ports: [{}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}-0, namespace: {INFRA}, labels: {{kubernetes.io/service-name: {name}}}}}\naddressType: IPv4\nports: [{}]\nendpoints: [{{addresses: [\"{}\"]}}]\n",
        spec_ports.join(", "),
        slice_ports.join(", "),
        pod.ip()
    )
}

/// An HTTPRoute with one rule per `(path, service, port)`, each an Exact path match.
fn route(name: &str, parent: &str, hostname: &str, rules: &[(&str, &str, u16)]) -> String {
    let mut yaml = format!("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {INFRA}}}\nspec:\n  parentRefs: [{{name: {parent}, namespace: {INFRA}}}]\n  hostnames: [{hostname}]\n  rules:\n");
    for (path, service, port) in rules {
        writeln!(yaml, "  - matches: [{{path: {{type: Exact, value: {path}}}}}]\n    backendRefs: [{{group: \"\", kind: Service, name: {service}, port: {port}}}]").unwrap();
    }
    yaml
}

/// A BackendTLSPolicy on `service` (its port `section`, when given) with one CA reference
/// `(group, kind, name)`, `hostname`, and `subjectAltNames` `(type, value)`.
fn policy(
    name: &str,
    (service, section): (&str, Option<&str>),
    ca: (&str, &str, &str),
    hostname: &str,
    sans: &[(&str, &str)],
) -> String {
    let section = section
        .map(|s| format!(", sectionName: {s}"))
        .unwrap_or_default();
    let (group, kind, ca_name) = ca;
    let mut yaml = format!("apiVersion: gateway.networking.k8s.io/v1\nkind: BackendTLSPolicy\nmetadata: {{name: {name}, namespace: {INFRA}}}\nspec:\n  targetRefs: [{{group: \"\", kind: Service, name: {service}{section}}}]\n  validation:\n    caCertificateRefs: [{{group: \"{group}\", kind: {kind}, name: {ca_name}}}]\n    hostname: {hostname}\n");
    if !sans.is_empty() {
        yaml.push_str("    subjectAltNames:\n");
        for (kind, value) in sans {
            let field = if *kind == "URI" { "uri" } else { "hostname" };
            writeln!(yaml, "    - {{type: {kind}, {field}: \"{value}\"}}").unwrap();
        }
    }
    yaml
}

const CHECKS_CA: (&str, &str, &str) = ("", "ConfigMap", "tls-checks-ca-certificate");

/// The base Gateways: `same-namespace` (HTTP) and `same-namespace-with-https-listener`.
fn gateways(http_port: u16, https_port: u16) -> String {
    let ip = gateway_ip();
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: sluice}}\nspec: {{controllerName: sluice.dev/gateway-controller}}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: same-namespace, namespace: {INFRA}}}\nspec:\n  gatewayClassName: sluice\n  addresses: [{{type: IPAddress, value: \"{ip}\"}}]\n  listeners: [{{name: http, port: {http_port}, protocol: HTTP, allowedRoutes: {{namespaces: {{from: Same}}}}}}]\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: same-namespace-with-https-listener, namespace: {INFRA}}}\nspec:\n  gatewayClassName: sluice\n  addresses: [{{type: IPAddress, value: \"{ip}\"}}]\n  listeners:\n  - {{name: https, port: {https_port}, protocol: HTTPS, allowedRoutes: {{namespaces: {{from: Same}}}}, tls: {{certificateRefs: [{{group: \"\", kind: Secret, name: tls-validity-checks-certificate, namespace: {INFRA}}}]}}}}\n"
    )
}

/// The manifests of the BackendTLSPolicy, ConflictResolution, InvalidCACertificateRef,
/// InvalidKind and SANValidation tests, applied together as the suite runs them; the
/// reconcile-test policy names `reconcile_ca`.
fn test_manifests(pod: SocketAddr, reconcile_ca: &str) -> Vec<String> {
    let btls = |name: &str, app: Option<&'static str>| service(name, &[("btls", 443, app)], pod);
    let mut docs = vec![
        route("backendtlspolicy", "same-namespace", "abc.example.com", &[
            ("/backendtlspolicy", "backendtlspolicy-test", 443),
            ("/backendtlspolicy-host-mismatch", "backendtlspolicy-host-mismatch-test", 443),
            ("/backendtlspolicy-cert-mismatch", "backendtlspolicy-cert-mismatch-test", 443),
            ("/backendtlspolicy-reconcile-test", "backendtlspolicy-reconcile-test", 443),
        ]),
        route("backendtlspolicy-reencrypt", "same-namespace-with-https-listener", "https-listener.org", &[
            ("/backendtlspolicy", "backendtlspolicy-test", 443),
        ]),
        btls("backendtlspolicy-test", None),
        btls("backendtlspolicy-host-mismatch-test", Some("HTTPS")),
        btls("backendtlspolicy-cert-mismatch-test", Some("HTTPS")),
        btls("backendtlspolicy-reconcile-test", None),
        policy("normative-test", ("backendtlspolicy-test", Some("btls")), CHECKS_CA, "abc.example.com", &[]),
        policy("host-mismatch", ("backendtlspolicy-host-mismatch-test", Some("btls")), CHECKS_CA, "mismatch.example.com", &[]),
        policy("cert-mismatch", ("backendtlspolicy-cert-mismatch-test", Some("btls")), ("", "ConfigMap", "mismatch-ca-certificate"), "abc.example.com", &[]),
        policy("reconcile-test", ("backendtlspolicy-reconcile-test", Some("btls")), ("", "ConfigMap", reconcile_ca), "abc.example.com", &[]),
        // ConflictResolution.
        route("backendtlspolicy-conflict-resolution", "same-namespace", "abc.example.com", &[
            ("/backendtlspolicy-conflicted-without-section-name", "backendtlspolicy-conflicted-without-section-name-test", 443),
            ("/backendtlspolicy-conflicted-with-section-name", "backendtlspolicy-conflicted-with-section-name-test", 443),
            ("/backendtlspolicy-not-conflicted-with-section-name", "backendtlspolicy-not-conflicted-test", 443),
            ("/backendtlspolicy-not-conflicted-without-section-name", "backendtlspolicy-not-conflicted-test", 8443),
        ]),
        service("backendtlspolicy-conflicted-without-section-name-test", &[("https", 443, None)], pod),
        service("backendtlspolicy-conflicted-with-section-name-test", &[("https-1", 443, None), ("https-2", 8443, None)], pod),
        service("backendtlspolicy-not-conflicted-test", &[("https-1", 443, None), ("https-2", 8443, None)], pod),
        policy("conflicted-without-section-name-1", ("backendtlspolicy-conflicted-without-section-name-test", None), CHECKS_CA, "other.example.com", &[]),
        policy("conflicted-without-section-name-2", ("backendtlspolicy-conflicted-without-section-name-test", None), CHECKS_CA, "abc.example.com", &[]),
        policy("conflicted-with-section-name-1", ("backendtlspolicy-conflicted-with-section-name-test", Some("https-1")), CHECKS_CA, "other.example.com", &[]),
        policy("conflicted-with-section-name-2", ("backendtlspolicy-conflicted-with-section-name-test", Some("https-1")), CHECKS_CA, "abc.example.com", &[]),
        policy("not-conflicted-with-section-name", ("backendtlspolicy-not-conflicted-test", Some("https-1")), CHECKS_CA, "other.example.com", &[]),
        policy("not-conflicted-without-section-name", ("backendtlspolicy-not-conflicted-test", None), CHECKS_CA, "abc.example.com", &[]),
        // InvalidCACertificateRef and InvalidKind.
        route("backendtlspolicy-invalid-ca-certificate-ref", "same-namespace", "abc.example.com", &[
            ("/backendtlspolicy-nonexistent-ca-certificate-ref", "backendtlspolicy-nonexistent-ca-certificate-ref-test", 443),
            ("/backendtlspolicy-malformed-ca-certificate-ref", "backendtlspolicy-malformed-ca-certificate-ref-test", 443),
        ]),
        service("backendtlspolicy-nonexistent-ca-certificate-ref-test", &[("https", 443, Some("HTTPS"))], pod),
        service("backendtlspolicy-malformed-ca-certificate-ref-test", &[("https", 443, Some("HTTPS"))], pod),
        policy("nonexistent-ca-certificate-ref", ("backendtlspolicy-nonexistent-ca-certificate-ref-test", None), ("", "ConfigMap", "nonexistent-ca-certificate"), "abc.example.com", &[]),
        policy("malformed-ca-certificate-ref", ("backendtlspolicy-malformed-ca-certificate-ref-test", None), ("", "ConfigMap", "malformed-ca-certificate"), "abc.example.com", &[]),
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: malformed-ca-certificate, namespace: {INFRA}}}\ndata: {{}}\n"),
        route("backendtlspolicy-invalid-kind-test", "same-namespace", "abc.example.com", &[
            ("/backendtlspolicy-invalid-kind", "backendtlspolicy-invalid-kind-test", 443),
        ]),
        service("backendtlspolicy-invalid-kind-test", &[("https", 443, Some("HTTPS"))], pod),
        policy("invalid-kind", ("backendtlspolicy-invalid-kind-test", None), ("invalid.io", "InvalidKind", "invalid-kind"), "abc.example.com", &[]),
    ];
    // SANValidation.
    let sans: [(&str, &[(&str, &str)]); 6] = [
        ("san-dns", &[("Hostname", "abc.example.com")]),
        ("san-dns-mismatch", &[("Hostname", "dce.example.com")]),
        (
            "san-uri",
            &[("URI", "spiffe://abc.example.com/test-identity")],
        ),
        (
            "san-uri-mismatch",
            &[("URI", "spiffe://def.example.com/test-identity")],
        ),
        (
            "multiple-sans",
            &[
                ("URI", "spiffe://abc.example.com/test-identity"),
                ("Hostname", "abc.example.com"),
            ],
        ),
        (
            "multiple-mismatch-sans",
            &[
                ("URI", "spiffe://def.example.com/test-identity"),
                ("Hostname", "def.example.com"),
            ],
        ),
    ];
    let rules: Vec<(String, String)> = sans
        .iter()
        .map(|(name, _)| {
            (
                format!("/backendtlspolicy-{name}"),
                format!("backendtlspolicy-{name}-test"),
            )
        })
        .collect();
    let rule_refs: Vec<(&str, &str, u16)> = rules
        .iter()
        .map(|(p, s)| (p.as_str(), s.as_str(), 443))
        .collect();
    docs.push(route(
        "backendtlspolicy-san-test",
        "same-namespace",
        "abc.example.com",
        &rule_refs,
    ));
    for (name, names) in sans {
        let service_name = format!("backendtlspolicy-{name}-test");
        docs.push(btls(&service_name, None));
        docs.push(policy(
            name,
            (&service_name, Some("btls")),
            CHECKS_CA,
            "abc.example.com",
            names,
        ));
    }
    docs
}

/// The conditions `(type, status, reason)` of policy `name` under Gateway `gateway`, as
/// `/api/gateways` shows them.
fn policy_conditions(report: &Value, name: &str, gateway: &str) -> Vec<(String, String, String)> {
    let policy = report["backendTLSPolicies"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no BackendTLSPolicy {name} in {report}"));
    let ancestor = policy["ancestors"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["ancestorRef"]["name"] == gateway)
        .unwrap_or_else(|| panic!("{name} has no ancestor {gateway}: {policy}"));
    assert_eq!(ancestor["ancestorRef"]["kind"], "Gateway", "{ancestor}");
    assert_eq!(
        ancestor["controllerName"], "sluice.dev/gateway-controller",
        "{ancestor}"
    );
    ancestor["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert_eq!(
                c["observedGeneration"],
                policy["generation"].as_i64().unwrap_or(0),
                "{c}"
            );
            let text = |key: &str| c[key].as_str().unwrap().to_owned();
            (text("type"), text("status"), text("reason"))
        })
        .collect()
}

fn triple(t: &str, s: &str, r: &str) -> (String, String, String) {
    (t.to_owned(), s.to_owned(), r.to_owned())
}

struct Setup {
    dir: tempfile::TempDir,
    files: tempfile::TempDir,
    sluice: Sluice,
    http: SocketAddr,
    https: SocketAddr,
    pod: SocketAddr,
    checks_ca: TestCa,
}

impl Setup {
    async fn start() -> Self {
        let checks_ca = TestCa::new("tls-checks-ca").unwrap();
        let mismatch_ca = TestCa::new("mismatch-ca").unwrap();
        let backend_cert = checks_ca
            .server(&[
                "abc.example.com",
                "spiffe://abc.example.com/test-identity",
                "other.example.com",
            ])
            .unwrap();
        let pod = tls_backend(pod_ip(230), &backend_cert).await;
        let listener_ca = TestCa::new("tls-validity-checks").unwrap();
        // The suite's names, and https-listener.org itself: curl (OpenSSL) does not let `*.org`
        // match a name directly under a top-level domain, as Go's client does.
        let listener_cert = listener_ca
            .server(&["*", "*.org", "*.wildcard.org", "https-listener.org"])
            .unwrap();
        let files = tempfile::tempdir().unwrap();
        write_pem(files.path(), "listener-ca.pem", &listener_ca.cert_pem());
        let (http_port, https_port) = (free_port(), free_port());
        let dir = tempfile::tempdir().unwrap();
        let mut docs = vec![
            gateways(http_port, https_port),
            listener_cert.secret_yaml(INFRA, "tls-validity-checks-certificate", None),
            ca_config_map("tls-checks-ca-certificate", &checks_ca.cert_pem()),
            ca_config_map("mismatch-ca-certificate", &mismatch_ca.cert_pem()),
        ];
        docs.extend(test_manifests(pod, "tls-checks-ca-certificate"));
        write_manifest(dir.path(), "conformance.yaml", &docs);
        let sluice = Sluice::start(dir.path(), &[]).await;
        let (http, https) = (
            SocketAddr::new(gateway_ip(), http_port),
            SocketAddr::new(gateway_ip(), https_port),
        );
        wait_for_socket(http).await;
        wait_for_socket(https).await;
        Self {
            dir,
            files,
            sluice,
            http,
            https,
            pod,
            checks_ca,
        }
    }

    async fn report(&self) -> Value {
        let reply = self.sluice.admin_get("/api/gateways").await;
        serde_json::from_str(&reply.body).unwrap()
    }

    /// GET `path` with Host abc.example.com on the HTTP listener: status and body.
    async fn get(&self, path: &str) -> (u16, String) {
        let client = http_client();
        let reply = get(
            &client,
            &format!("http://{}{path}", self.http),
            "abc.example.com",
        )
        .await
        .unwrap();
        (reply.status.as_u16(), reply.body)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policy_reencrypts_with_the_policy_hostname_and_fails_on_a_wrong_name_or_ca() {
    let setup = Setup::start().await;
    let report = setup.report().await;
    let ok = vec![
        triple("Accepted", "True", "Accepted"),
        triple("ResolvedRefs", "True", "ResolvedRefs"),
    ];
    for name in [
        "normative-test",
        "host-mismatch",
        "cert-mismatch",
        "reconcile-test",
    ] {
        assert_eq!(
            policy_conditions(&report, name, "same-namespace"),
            ok,
            "{name}"
        );
    }
    assert_eq!(
        policy_conditions(
            &report,
            "normative-test",
            "same-namespace-with-https-listener"
        ),
        ok
    );

    // HTTP request sent to Service with valid BackendTLSPolicy should succeed.
    let (status, body) = setup.get("/backendtlspolicy").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        "tls-backend sni=abc.example.com path=/backendtlspolicy\n"
    );
    // Mismatched hostname, and a CA that did not sign the pod's certificate: an HTTP error.
    for path in [
        "/backendtlspolicy-host-mismatch",
        "/backendtlspolicy-cert-mismatch",
    ] {
        let (status, body) = setup.get(path).await;
        // A failed connection answers 503 on Gateway routes, as Envoy's do.
        assert_eq!(status, 503, "{path}: {body}");
        assert!(!body.contains("tls-backend"), "{body}");
    }

    // Re-encrypt: HTTPS from the client (SNI https-listener.org), TLS to the pod with SNI
    // abc.example.com.
    let ca = setup.files.path().join("listener-ca.pem");
    let resolve = format!(
        "https-listener.org:{}:{}",
        setup.https.port(),
        setup.https.ip()
    );
    let url = format!(
        "https://https-listener.org:{}/backendtlspolicy",
        setup.https.port()
    );
    let (code, body) = curl(&[
        "--cacert",
        ca.to_str().unwrap(),
        "--resolve",
        &resolve,
        &url,
    ]);
    assert_eq!(code, 0, "curl failed: {body}");
    assert_eq!(
        body,
        "tls-backend sni=abc.example.com path=/backendtlspolicy\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_ca_config_map_is_reconciled() {
    let setup = Setup::start().await;
    let not_found = vec![
        triple("Accepted", "False", "NoValidCACertificate"),
        triple("ResolvedRefs", "False", "InvalidCACertificateRef"),
    ];
    let ok = vec![
        triple("Accepted", "True", "Accepted"),
        triple("ResolvedRefs", "True", "ResolvedRefs"),
    ];
    let rewrite = |reconcile_ca: &str, extra: Option<String>| {
        let mut docs = vec![test_manifests(setup.pod, reconcile_ca).join("---\n")];
        docs.extend(extra);
        write_manifest(setup.dir.path(), "tests.yaml", &docs);
    };
    // The suite's own manifests move to a file of their own, so that the test's can change.
    let shared = std::fs::read_to_string(setup.dir.path().join("conformance.yaml")).unwrap();
    let base: Vec<&str> = shared.split("\n---\n").take(4).collect();
    std::fs::write(
        setup.dir.path().join("conformance.yaml"),
        base.join("\n---\n"),
    )
    .unwrap();
    rewrite("tls-checks-ca-certificate", None);
    let wait_for = |expected: Vec<(String, String, String)>, status: u16| {
        let setup = &setup;
        async move {
            wait_until("the policy's conditions", Duration::from_secs(10), || {
                let expected = expected.clone();
                async move {
                    let report = setup.report().await;
                    policy_conditions(&report, "reconcile-test", "same-namespace") == expected
                        && setup.get("/backendtlspolicy-reconcile-test").await.0 == status
                }
            })
            .await;
        }
    };
    wait_for(ok.clone(), 200).await;

    // The policy names a ConfigMap that does not exist yet: not accepted, and 503.
    let test_map = "tls-checks-ca-certificate-reconcile-test";
    rewrite(test_map, None);
    wait_for(not_found.clone(), 503).await;
    // The ConfigMap appears with the CA.
    let pem = setup.checks_ca.cert_pem();
    rewrite(test_map, Some(ca_config_map(test_map, &pem)));
    wait_for(ok.clone(), 200).await;
    let (_, body) = setup.get("/backendtlspolicy-reconcile-test").await;
    assert_eq!(
        body,
        "tls-backend sni=abc.example.com path=/backendtlspolicy-reconcile-test\n"
    );
    // Its ca.crt is emptied, then restored.
    rewrite(test_map, Some(ca_config_map(test_map, "")));
    wait_for(not_found, 503).await;
    rewrite(test_map, Some(ca_config_map(test_map, &pem)));
    wait_for(ok, 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_go_to_the_older_policy_and_a_port_policy_beats_a_service_policy() {
    let setup = Setup::start().await;
    let report = setup.report().await;
    let ok = vec![
        triple("Accepted", "True", "Accepted"),
        triple("ResolvedRefs", "True", "ResolvedRefs"),
    ];
    let conflicted = vec![
        triple("Accepted", "False", "Conflicted"),
        triple("ResolvedRefs", "True", "ResolvedRefs"),
    ];
    for (name, expected) in [
        ("conflicted-without-section-name-1", &ok),
        ("conflicted-without-section-name-2", &conflicted),
        ("conflicted-with-section-name-1", &ok),
        ("conflicted-with-section-name-2", &conflicted),
        ("not-conflicted-with-section-name", &ok),
        ("not-conflicted-without-section-name", &ok),
    ] {
        assert_eq!(
            &policy_conditions(&report, name, "same-namespace"),
            expected,
            "{name}"
        );
    }
    for (path, sni) in [
        (
            "/backendtlspolicy-conflicted-without-section-name",
            "other.example.com",
        ),
        (
            "/backendtlspolicy-conflicted-with-section-name",
            "other.example.com",
        ),
        (
            "/backendtlspolicy-not-conflicted-with-section-name",
            "other.example.com",
        ),
        (
            "/backendtlspolicy-not-conflicted-without-section-name",
            "abc.example.com",
        ),
    ] {
        let (status, body) = setup.get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(body, format!("tls-backend sni={sni} path={path}\n"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_ca_references_are_not_accepted_and_their_services_answer_5xx() {
    let setup = Setup::start().await;
    let report = setup.report().await;
    for (name, reason) in [
        ("nonexistent-ca-certificate-ref", "InvalidCACertificateRef"),
        ("malformed-ca-certificate-ref", "InvalidCACertificateRef"),
        ("invalid-kind", "InvalidKind"),
    ] {
        assert_eq!(
            policy_conditions(&report, name, "same-namespace"),
            vec![
                triple("Accepted", "False", "NoValidCACertificate"),
                triple("ResolvedRefs", "False", reason),
            ],
            "{name}"
        );
        let path = format!("/backendtlspolicy-{name}");
        let (status, body) = setup.get(&path).await;
        assert_eq!(status, 503, "{path}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subject_alt_names_replace_the_hostname_in_verification() {
    let setup = Setup::start().await;
    let report = setup.report().await;
    for (name, succeeds) in [
        ("san-dns", true),
        ("san-dns-mismatch", false),
        ("san-uri", true),
        ("san-uri-mismatch", false),
        ("multiple-sans", true),
        ("multiple-mismatch-sans", false),
    ] {
        assert_eq!(
            policy_conditions(&report, name, "same-namespace")[0],
            triple("Accepted", "True", "Accepted"),
            "{name}"
        );
        let path = format!("/backendtlspolicy-{name}");
        let (status, body) = setup.get(&path).await;
        match succeeds {
            true => {
                assert_eq!(status, 200, "{path}: {body}");
                assert_eq!(
                    body,
                    format!("tls-backend sni=abc.example.com path={path}\n")
                );
            }
            false => {
                assert_eq!(status, 503, "{path}: {body}");
                assert!(!body.contains("tls-backend"), "{body}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluice_check_shows_every_policy_under_its_gateway() {
    let setup = Setup::start().await;
    let (_, check) = support::run_check(setup.dir.path());
    assert!(
        check.contains("BackendTLSPolicy gateway-conformance-infra/normative-test under Gateway gateway-conformance-infra/same-namespace: Accepted=True (Accepted), ResolvedRefs=True (ResolvedRefs)"),
        "{check}"
    );
    assert!(
        check.contains("BackendTLSPolicy gateway-conformance-infra/invalid-kind under Gateway gateway-conformance-infra/same-namespace: Accepted=False (NoValidCACertificate"),
        "{check}"
    );
    assert!(
        check.contains("BackendTLSPolicy gateway-conformance-infra/normative-test targets Service gateway-conformance-infra/backendtlspolicy-test:btls"),
        "{check}"
    );
}

/// The `tls-backend-with-client-cert-validation` pod: like [`tls_backend`], but it requires a
/// client certificate signed by `client_ca` and says whether it was `expected`'s.
async fn mtls_backend(
    ip: IpAddr,
    issued: &sluice_testkit::IssuedPem,
    client_ca: &TestCa,
    expected: &sluice_testkit::IssuedPem,
) -> SocketAddr {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(client_ca.cert_pem().as_bytes()).unwrap())
        .unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(issued.cert.as_bytes())
            .map(Result::unwrap)
            .collect();
    let key = PrivateKeyDer::from_pem_slice(issued.key.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .unwrap();
    let expected = CertificateDer::from_pem_slice(expected.cert.as_bytes()).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(SocketAddr::new(ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, expected) = (acceptor.clone(), expected.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let presented = tls.get_ref().1.peer_certificates().and_then(|c| c.first());
                let client = match presented == Some(&expected) {
                    true => "the gateway's",
                    false => "another",
                };
                let service = service_fn(move |_: http::Request<hyper::body::Incoming>| {
                    let body = format!("client certificate: {client}\n");
                    async move { Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from(body)))) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_backend_client_certificate_is_presented_to_a_pod_that_requires_one() {
    let checks_ca = TestCa::new("tls-checks-ca").unwrap();
    let backend_cert = checks_ca.server(&["abc.example.com"]).unwrap();
    let client_cert = checks_ca.client("tls-checks-client").unwrap();
    let pod = mtls_backend(pod_ip(231), &backend_cert, &checks_ca, &client_cert).await;
    let (with_cert, broken) = (free_port(), free_port());
    let ip = gateway_ip();
    let gateway = |name: &str, port: u16, secret: &str| {
        format!("apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: {INFRA}}}\nspec:\n  gatewayClassName: sluice\n  addresses: [{{type: IPAddress, value: \"{ip}\"}}]\n  listeners: [{{name: http, port: {port}, protocol: HTTP, allowedRoutes: {{namespaces: {{from: Same}}}}}}]\n  tls:\n    backend:\n      clientCertificateRef: {{group: \"\", kind: Secret, name: {secret}}}\n")
    };
    let route = |name: &str, parent: &str| {
        format!("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {INFRA}}}\nspec:\n  parentRefs: [{{name: {parent}, namespace: {INFRA}}}]\n  hostnames: [abc.example.com]\n  rules:\n  - backendRefs: [{{group: \"\", kind: Service, name: tls-backend-with-client-cert-validation, port: 443}}]\n    matches: [{{path: {{type: Exact, value: /}}}}]\n")
    };
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "conformance.yaml",
        &[
            "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: sluice}\nspec: {controllerName: sluice.dev/gateway-controller}\n".to_owned(),
            gateway("gateway-tls-backend-client-certificate", with_cert, "tls-checks-client-certificate"),
            // The same route on a Gateway whose reference does not resolve: no certificate.
            gateway("gateway-client-certificate-nonexistent-secret", broken, "nonexistent-certificate"),
            client_cert.secret_yaml(INFRA, "tls-checks-client-certificate", None),
            route("gateway-tls-backend-client-certificate", "gateway-tls-backend-client-certificate"),
            route("without-client-certificate", "gateway-client-certificate-nonexistent-secret"),
            service("tls-backend-with-client-cert-validation", &[("https", 443, None)], pod),
            policy(
                "gateway-tls-backend-client-certificate-test",
                ("tls-backend-with-client-cert-validation", None),
                CHECKS_CA,
                "abc.example.com",
                &[],
            ),
            ca_config_map("tls-checks-ca-certificate", &checks_ca.cert_pem()),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    wait_for_socket(SocketAddr::new(ip, with_cert)).await;
    wait_for_socket(SocketAddr::new(ip, broken)).await;
    let report: Value =
        serde_json::from_str(&sluice.admin_get("/api/gateways").await.body).unwrap();
    let gateway_conditions = |name: &str| {
        let gateway = report["gateways"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == name)
            .unwrap();
        gateway["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["type"].as_str().unwrap().to_owned(),
                    c["status"].as_str().unwrap().to_owned(),
                    c["reason"].as_str().unwrap().to_owned(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert!(
        gateway_conditions("gateway-tls-backend-client-certificate").contains(&triple(
            "ResolvedRefs",
            "True",
            "ResolvedRefs"
        ))
    );
    let broken_conditions = gateway_conditions("gateway-client-certificate-nonexistent-secret");
    assert!(
        broken_conditions.contains(&triple(
            "ResolvedRefs",
            "False",
            "InvalidClientCertificateRef"
        )),
        "{broken_conditions:?}"
    );
    assert!(
        broken_conditions.contains(&triple("Accepted", "True", "Accepted")),
        "{broken_conditions:?}"
    );
    assert_eq!(
        policy_conditions(
            &report,
            "gateway-tls-backend-client-certificate-test",
            "gateway-tls-backend-client-certificate"
        )[0],
        triple("Accepted", "True", "Accepted")
    );

    let client = http_client();
    let reply = get(
        &client,
        &format!("http://{ip}:{with_cert}/"),
        "abc.example.com",
    )
    .await
    .unwrap();
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.body, "client certificate: the gateway's\n");
    // Without the Gateway's certificate the pod refuses the handshake: an error, not a bypass.
    let reply = get(
        &client,
        &format!("http://{ip}:{broken}/"),
        "abc.example.com",
    )
    .await
    .unwrap();
    assert_eq!(reply.status, 503, "{reply:?}");
}
