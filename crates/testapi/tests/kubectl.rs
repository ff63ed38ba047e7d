//! kubectl against the test API server: apply a multi-document manifest of the five kinds, read them back, change them, delete them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use sluice_testapi::TestApiServer;

const MANIFEST: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: shop
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: sluice
spec:
  controller: sluice.dev/ingress-controller
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
  labels:
    app: web
spec:
  selector:
    app: web
  ports:
  - name: http
    port: 80
    targetPort: 8080
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc
  namespace: shop
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
ports:
- name: http
  port: 8080
  protocol: TCP
endpoints:
- addresses: ["127.0.0.2"]
  conditions:
    ready: true
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  namespace: shop
spec:
  ingressClassName: sluice
  rules:
  - host: shop.example
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: web
            port:
              name: http
"#;

/// The kubectl binary; a missing kubectl fails the test with how to install it.
fn kubectl_binary() -> PathBuf {
    let candidates = std::env::var_os("KUBECTL")
        .map(PathBuf::from)
        .into_iter()
        .chain(std::env::var_os("PATH").into_iter().flat_map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("kubectl"))
                .collect::<Vec<_>>()
        }))
        .chain([PathBuf::from("/usr/bin/kubectl")]);
    for candidate in candidates {
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "kubectl is not installed, and this test needs it. Install it with \
         `apt-get update && apt-get install -y kubernetes-client` (CI does this in .ci/run), \
         or point KUBECTL at a kubectl binary."
    );
}

/// Runs kubectl with the kubeconfig on a blocking thread (the server runs on this runtime).
async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let binary = kubectl_binary();
    let mut command = Command::new(binary);
    command.arg("--kubeconfig").arg(kubeconfig).args(args);
    command.env_remove("KUBECONFIG");
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("running kubectl");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn kubectl_ok(kubeconfig: &Path, args: &[&str]) -> String {
    let (ok, stdout, stderr) = kubectl(kubeconfig, args).await;
    assert!(ok, "kubectl {args:?} failed:\n{stdout}\n{stderr}");
    stdout
}

fn summary(list: &Value) -> Vec<String> {
    let mut items: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            format!(
                "{} {}/{}",
                i["kind"].as_str().unwrap(),
                i["metadata"]["namespace"].as_str().unwrap(),
                i["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    items.sort();
    items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_reads_changes_and_deletes_the_five_kinds() {
    let server = TestApiServer::start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let manifest = dir.path().join("shop.yaml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    let manifest = manifest.to_str().unwrap();

    // Validation stays on: kubectl leaves it to the server, as the OpenAPI documents allow.
    let applied = kubectl_ok(&kubeconfig, &["apply", "-f", manifest]).await;
    for line in [
        "namespace/shop created",
        "ingressclass.networking.k8s.io/sluice created",
        "service/web created",
        "endpointslice.discovery.k8s.io/web-abc created",
        "ingress.networking.k8s.io/web created",
    ] {
        assert!(applied.contains(line), "missing {line:?} in:\n{applied}");
    }

    let listed = kubectl_ok(
        &kubeconfig,
        &["get", "ingress,svc,endpointslices", "-A", "-o", "json"],
    )
    .await;
    let list: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(
        summary(&list),
        [
            "EndpointSlice shop/web-abc",
            "Ingress shop/web",
            "Service shop/web"
        ]
    );
    let ingress = server.get("Ingress", "shop", "web").unwrap();
    assert_eq!(ingress["spec"]["rules"][0]["host"], "shop.example");
    assert!(
        ingress["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );
    assert!(server.get("IngressClass", "", "sluice").is_some());

    // A second apply with changes goes through strategic merge patches.
    let changed = MANIFEST
        .replace("port: 80\n", "port: 81\n")
        .replace("127.0.0.2", "127.0.0.3");
    std::fs::write(dir.path().join("shop.yaml"), changed).unwrap();
    let reapplied = kubectl_ok(&kubeconfig, &["apply", "-f", manifest]).await;
    assert!(reapplied.contains("service/web configured"), "{reapplied}");
    assert!(
        reapplied.contains("endpointslice.discovery.k8s.io/web-abc configured"),
        "{reapplied}"
    );
    assert!(
        reapplied.contains("ingress.networking.k8s.io/web unchanged"),
        "{reapplied}"
    );
    let service = server.get("svc", "shop", "web").unwrap();
    assert_eq!(
        service["spec"]["ports"],
        serde_json::json!([{"name": "http", "port": 81, "targetPort": 8080}])
    );
    let slice = server.get("endpointslices", "shop", "web-abc").unwrap();
    assert_eq!(slice["endpoints"][0]["addresses"][0], "127.0.0.3");

    // The table kubectl prints.
    let table = kubectl_ok(&kubeconfig, &["get", "svc", "-n", "shop"]).await;
    assert!(table.lines().next().unwrap().starts_with("NAME"), "{table}");
    assert!(table.contains("web"), "{table}");

    let deleted = kubectl_ok(&kubeconfig, &["delete", "-f", manifest]).await;
    for line in [
        "namespace \"shop\" deleted",
        "service \"web\" deleted",
        "ingress.networking.k8s.io \"web\" deleted",
    ] {
        assert!(deleted.contains(line), "missing {line:?} in:\n{deleted}");
    }
    let listed = kubectl_ok(
        &kubeconfig,
        &[
            "get",
            "ingress,svc,endpointslices,ingressclasses",
            "-A",
            "-o",
            "json",
        ],
    )
    .await;
    let list: Value = serde_json::from_str(&listed).unwrap();
    assert!(list["items"].as_array().unwrap().is_empty(), "{listed}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(server.get("Namespace", "", "shop").is_none());

    // The --server flag works as well as the kubeconfig.
    let (ok, stdout, stderr) = kubectl(
        &kubeconfig,
        &["--server", &server.url(), "get", "namespaces", "-o", "name"],
    )
    .await;
    assert!(ok, "{stderr}");
    assert!(stdout.contains("namespace/default"), "{stdout}");
}

/// The issue's CI check: `kubectl apply --dry-run=client --validate=false -f deploy/` must
/// succeed. kubectl needs a server for discovery even in a client-side dry run; this one is it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deploy_manifests_pass_a_client_side_dry_run() {
    let server = TestApiServer::start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    let deploy = deploy.to_str().unwrap();
    let output = kubectl_ok(
        &kubeconfig,
        &[
            "apply",
            "--dry-run=client",
            "--validate=false",
            "-f",
            deploy,
        ],
    )
    .await;
    for object in [
        "namespace/sluice-system",
        "serviceaccount/sluice",
        "clusterrole",
        "deployment.apps/sluice",
        "service/sluice",
        "ingressclass",
    ] {
        assert!(
            output.contains(object),
            "{object} missing from the dry run:\n{output}"
        );
    }
    assert_eq!(
        output.matches("(dry run)").count(),
        output.lines().count(),
        "every object is a dry run:\n{output}"
    );
    assert!(
        server
            .get("Deployment", "sluice-system", "sluice")
            .is_none(),
        "a dry run must not create anything"
    );
}
