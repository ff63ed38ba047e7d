//! Gateway API conformance tests of frontend client-certificate validation (`spec.tls.frontend`) set up as upstream (v1.6.1) sets them up, through the real binary with curl: the Gateway's default and per-port CA ConfigMaps, its two HTTPS listeners, the routes to `infra-backend-v1` and `-v2`, and the client certificates of each CA.
//!
//! Ports differ: the listeners bind free ports instead of 443 and 8443, and the default and
//! per-port settings are keyed by those ports, as upstream's are by 443 and 8443.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;

use sluice_testkit::{EchoBackend, IssuedPem, TestCa};
use support::tls::{curl, write_pem};
use support::{free_port, pod_ip, wait_for_socket, write_manifest, Sluice};

const INFRA: &str = "gateway-conformance-infra";

fn gateway_ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 6, n))
}

/// A ConfigMap with `ca.crt`, as the suite creates `tls-validity-checks-ca-certificate`.
fn ca_config_map(name: &str, ca: &TestCa) -> String {
    let pem: String = ca
        .cert_pem()
        .lines()
        .map(|line| format!("    {line}\n"))
        .collect();
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {INFRA}}}\ndata:\n  ca.crt: |\n{pem}")
}

/// An infra backend Service (port 8080) with its one pod.
fn backend(name: &str, pod: SocketAddr) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {INFRA}}}\nspec:\n  ports: [{{port: 8080, targetPort: {port}}}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}-0, namespace: {INFRA}, labels: {{kubernetes.io/service-name: {name}}}}}\naddressType: IPv4\nports: [{{port: {port}}}]\nendpoints: [{{addresses: [\"{ip}\"]}}]\n",
        port = pod.port(),
        ip = pod.ip()
    )
}

/// The Gateway of `gateway-with-clientcertificate-validation.yaml` (or, `insecure`, of its
/// `AllowInsecureFallback` variant), its listeners on `ports` instead of 443 and 8443.
fn gateway(name: &str, insecure: bool, (default_port, per_port): (u16, u16)) -> String {
    let mode = |indent: usize| match insecure {
        true => format!("mode: AllowInsecureFallback\n{}", " ".repeat(indent)),
        false => String::new(),
    };
    let (default_mode, per_port_mode) = (mode(10), mode(12));
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: {INFRA}}}
spec:
  gatewayClassName: sluice
  tls:
    frontend:
      default:
        validation:
          {default_mode}caCertificateRefs:
          - {{kind: ConfigMap, group: \"\", name: tls-validity-checks-ca-certificate}}
      perPort:
      - port: {per_port}
        tls:
          validation:
            {per_port_mode}caCertificateRefs:
            - {{kind: ConfigMap, group: \"\", name: tls-validity-checks-per-port-ca-certificate}}
  listeners:
  - name: https
    port: {default_port}
    protocol: HTTPS
    allowedRoutes: {{namespaces: {{from: Same}}}}
    tls:
      certificateRefs: [{{group: \"\", kind: Secret, name: tls-validity-checks-certificate, namespace: {INFRA}}}]
  - name: https-with-hostname
    port: {per_port}
    hostname: second-example.org
    protocol: HTTPS
    allowedRoutes: {{namespaces: {{from: Same}}}}
    tls:
      certificateRefs: [{{group: \"\", kind: Secret, name: tls-validity-checks-certificate, namespace: {INFRA}}}]
"
    )
}

fn route(name: &str, parent: &str, hostnames: &str, backend: &str) -> String {
    format!("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {INFRA}}}\nspec:\n  parentRefs: [{parent}]\n{hostnames}  rules:\n  - backendRefs: [{{name: {backend}, port: 8080}}]\n")
}

/// What the test needs: the CAs and certificates the suite creates, written for curl.
struct Certificates {
    files: tempfile::TempDir,
    server: TestCa,
    default_ca: TestCa,
    per_port_ca: TestCa,
}

impl Certificates {
    fn new() -> Self {
        Self {
            files: tempfile::tempdir().unwrap(),
            server: TestCa::new("tls-validity-checks").unwrap(),
            default_ca: TestCa::new("tls-validity-checks-ca").unwrap(),
            per_port_ca: TestCa::new("tls-validity-checks-per-port-ca").unwrap(),
        }
    }

    fn documents(&self) -> Vec<String> {
        let server = self
            .server
            .server(&["example.org", "second-example.org"])
            .unwrap();
        vec![
            server.secret_yaml(INFRA, "tls-validity-checks-certificate", None),
            ca_config_map("tls-validity-checks-ca-certificate", &self.default_ca),
            ca_config_map(
                "tls-validity-checks-per-port-ca-certificate",
                &self.per_port_ca,
            ),
        ]
    }

    /// `--cacert`, and `--cert`/`--key` of a client certificate of `ca` when given.
    fn curl_args(&self, client: Option<(&str, &TestCa)>) -> Vec<String> {
        let dir = self.files.path();
        let mut args = vec![
            "--cacert".to_owned(),
            write_pem(dir, "server-ca.pem", &self.server.cert_pem()),
        ];
        if let Some((name, ca)) = client {
            let issued: IssuedPem = ca.client(name).unwrap();
            args.extend([
                "--cert".to_owned(),
                write_pem(dir, &format!("{name}.pem"), &issued.cert),
                "--key".to_owned(),
                write_pem(dir, &format!("{name}.key"), &issued.key),
            ]);
        }
        args
    }
}

/// curl's exit code and the body for `https://host:port/` reached at `ip`.
fn get(ip: IpAddr, port: u16, host: &str, args: &[String]) -> (i32, String) {
    let resolve = format!("{host}:{port}:{ip}");
    let url = format!("https://{host}:{port}/");
    let mut all: Vec<&str> = vec!["--max-time", "5", "--resolve", &resolve];
    all.extend(args.iter().map(String::as_str));
    all.push(&url);
    curl(&all)
}

async fn start(documents: &[String], dir: &Path, ip: IpAddr, ports: [u16; 2]) -> Sluice {
    write_manifest(dir, "conformance.yaml", documents);
    let sluice = Sluice::start(dir, &["--gateway-address", &ip.to_string()]).await;
    for port in ports {
        wait_for_socket(SocketAddr::new(ip, port)).await;
    }
    sluice
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_frontend_client_certificate_validation() {
    let v1 = EchoBackend::start("infra-backend-v1-0", pod_ip(60))
        .await
        .unwrap();
    let v2 = EchoBackend::start("infra-backend-v2-0", pod_ip(61))
        .await
        .unwrap();
    let certificates = Certificates::new();
    let ports = [free_port(), free_port()];
    let ip = gateway_ip(1);
    let mut documents = certificates.documents();
    documents.extend([
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: sluice}\nspec: {controllerName: sluice.dev/gateway-controller}\n".to_owned(),
        gateway("client-validation-default", false, (ports[0], ports[1])),
        route(
            "client-certificate-validation-https-test",
            "{name: client-validation-default}",
            "  hostnames: [example.org]\n",
            "infra-backend-v1",
        ),
        route(
            "client-certificate-validation-https-test-no-hostname",
            "{name: client-validation-default, sectionName: https-with-hostname}",
            "",
            "infra-backend-v2",
        ),
        backend("infra-backend-v1", v1.addr()),
        backend("infra-backend-v2", v2.addr()),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let _sluice = start(&documents, dir.path(), ip, ports).await;
    let default_client = certificates.curl_args(Some(("client", &certificates.default_ca)));
    let per_port_client =
        certificates.curl_args(Some(("per-port-client", &certificates.per_port_ca)));
    let no_client = certificates.curl_args(None);

    // The default validation on the first port: its CA's client passes, the other's fails.
    let (code, body) = get(ip, ports[0], "example.org", &default_client);
    assert_eq!(code, 0, "{body}");
    assert!(body.contains("infra-backend-v1"), "{body}");
    let (code, body) = get(ip, ports[0], "example.org", &per_port_client);
    assert_ne!(code, 0, "another CA's client certificate must fail: {body}");
    let (code, body) = get(ip, ports[0], "example.org", &no_client);
    assert_ne!(code, 0, "no client certificate must fail: {body}");
    assert_eq!(v1.requests(), 1, "only the valid client reached the pod");

    // The per-port validation on the second port.
    let (code, body) = get(ip, ports[1], "second-example.org", &per_port_client);
    assert_eq!(code, 0, "{body}");
    assert!(body.contains("infra-backend-v2"), "{body}");
    let (code, body) = get(ip, ports[1], "second-example.org", &default_client);
    assert_ne!(
        code, 0,
        "the default CA's client must fail on the per-port listener: {body}"
    );
    assert_eq!(v2.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_frontend_client_certificate_validation_insecure_fallback() {
    let v1 = EchoBackend::start("infra-backend-v1-0", pod_ip(62))
        .await
        .unwrap();
    let v2 = EchoBackend::start("infra-backend-v2-0", pod_ip(63))
        .await
        .unwrap();
    let certificates = Certificates::new();
    let ports = [free_port(), free_port()];
    let ip = gateway_ip(2);
    let mut documents = certificates.documents();
    documents.extend([
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: sluice}\nspec: {controllerName: sluice.dev/gateway-controller}\n".to_owned(),
        gateway(
            "client-validation-insecure-fallback",
            true,
            (ports[0], ports[1]),
        ),
        route(
            "client-cert-validation-insecure-fallback-test",
            "{name: client-validation-insecure-fallback}",
            "  hostnames: [example.org]\n",
            "infra-backend-v1",
        ),
        route(
            "client-cert-validation-insecure-fallback-test-no-hostname",
            "{name: client-validation-insecure-fallback, sectionName: https-with-hostname}",
            "",
            "infra-backend-v2",
        ),
        backend("infra-backend-v1", v1.addr()),
        backend("infra-backend-v2", v2.addr()),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let sluice = start(&documents, dir.path(), ip, ports).await;

    let report: serde_json::Value =
        serde_json::from_str(&sluice.admin_get("/api/gateways").await.body).unwrap();
    let conditions = report["gateways"][0]["conditions"].as_array().unwrap();
    let insecure = conditions
        .iter()
        .find(|c| c["type"] == "InsecureFrontendValidationMode")
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(insecure["status"], "True");
    assert_eq!(insecure["reason"], "ConfigurationChanged");

    for (port, host, marker) in [
        (ports[0], "example.org", "infra-backend-v1"),
        (ports[1], "second-example.org", "infra-backend-v2"),
    ] {
        for client in [
            certificates.curl_args(Some(("client", &certificates.default_ca))),
            certificates.curl_args(Some(("per-port-client", &certificates.per_port_ca))),
            certificates.curl_args(None),
        ] {
            let (code, body) = get(ip, port, host, &client);
            assert_eq!(code, 0, "{host}: {body}");
            assert!(body.contains(marker), "{body}");
        }
    }
}

/// The Gateway's frontend validation covers a port however a listener gets there: a
/// ListenerSet's HTTPS listener on the Gateway's per-port-validated port asks for and checks
/// client certificates of that port's CA, as the Gateway's own listener there does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_set_listener_gets_its_gateways_frontend_validation() {
    let v1 = EchoBackend::start("infra-backend-v1-0", pod_ip(64))
        .await
        .unwrap();
    let certificates = Certificates::new();
    let ports = [free_port(), free_port()];
    let ip = gateway_ip(3);
    let mut documents = certificates.documents();
    let gateway = gateway("client-validation-default", false, (ports[0], ports[1])).replace(
        "  gatewayClassName: sluice\n",
        "  gatewayClassName: sluice\n  allowedListeners: {namespaces: {from: Same}}\n",
    );
    documents.extend([
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: sluice}\nspec: {controllerName: sluice.dev/gateway-controller}\n".to_owned(),
        gateway,
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: ListenerSet\nmetadata: {{name: added-https, namespace: {INFRA}}}\nspec:\n  parentRef: {{name: client-validation-default, kind: Gateway, group: gateway.networking.k8s.io}}\n  listeners:\n  - name: https-added\n    port: {}\n    hostname: example.org\n    protocol: HTTPS\n    allowedRoutes: {{namespaces: {{from: Same}}}}\n    tls:\n      certificateRefs: [{{group: \"\", kind: Secret, name: tls-validity-checks-certificate}}]\n",
            ports[1]
        ),
        route(
            "through-the-listener-set",
            "{name: added-https, kind: ListenerSet, group: gateway.networking.k8s.io}",
            "  hostnames: [example.org]\n",
            "infra-backend-v1",
        ),
        backend("infra-backend-v1", v1.addr()),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let _sluice = start(&documents, dir.path(), ip, ports).await;
    let per_port_client =
        certificates.curl_args(Some(("per-port-client", &certificates.per_port_ca)));
    let default_client = certificates.curl_args(Some(("client", &certificates.default_ca)));
    let no_client = certificates.curl_args(None);

    let (code, body) = get(ip, ports[1], "example.org", &per_port_client);
    assert_eq!(code, 0, "{body}");
    assert!(body.contains("infra-backend-v1"), "{body}");
    let (code, body) = get(ip, ports[1], "example.org", &no_client);
    assert_ne!(code, 0, "no client certificate must fail: {body}");
    let (code, body) = get(ip, ports[1], "example.org", &default_client);
    assert_ne!(code, 0, "another port's CA must fail: {body}");
    assert_eq!(v1.requests(), 1, "only the valid client reached the pod");
}
