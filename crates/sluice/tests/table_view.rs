//! End-to-end: what `sluice check` and `/api/routes` show of the table: each canary with its kind, weight and backend, and the Gateway listeners' routes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{annotated_ingress, ingress, run_check, service, write_manifest, Sluice};

fn canary_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "shop.yaml",
        &[
            ingress("main", "shop.test", &[("/", "Prefix", "stable", 80)]),
            annotated_ingress(
                "beta",
                "shop.test",
                &[("/", "Prefix", "beta", 80)],
                &[
                    ("nginx.ingress.kubernetes.io/canary", "true"),
                    ("nginx.ingress.kubernetes.io/canary-by-header", "X-Canary"),
                    ("nginx.ingress.kubernetes.io/canary-by-header-value", "yes"),
                    ("nginx.ingress.kubernetes.io/canary-weight", "20"),
                ],
            ),
            service("stable", 80, &["127.0.0.1:9".parse().unwrap()]),
            service("beta", 80, &["127.0.0.1:10".parse().unwrap()]),
        ],
    );
    dir
}

#[test]
fn check_prints_each_canary_with_its_rule_and_backend() {
    let dir = canary_dir();
    let (code, out) = run_check(dir.path());
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("-> default/beta:80  (canary from default/beta: header x-canary = yes, then weight 20/100)"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_routes_api_lists_each_canary_with_its_kinds_weight_and_backend() {
    let dir = canary_dir();
    let sluice = Sluice::start(dir.path(), &[]).await;
    let routes = sluice.routes().await;
    let route = &routes["hosts"]["shop.test"][0];
    assert_eq!(route["backend"], "default/stable:80");
    let canary = &route["canary"];
    assert_eq!(
        canary["kinds"],
        serde_json::json!(["header value", "weight"])
    );
    assert_eq!(canary["header"], "x-canary");
    assert_eq!(canary["headerValue"], "yes");
    assert_eq!(canary["weight"], 20);
    assert_eq!(canary["weightTotal"], 100);
    assert_eq!(canary["backend"], "default/beta:80");
    assert_eq!(canary["ingress"], "default/beta");
}

#[test]
fn check_prints_the_routes_gateway_listeners_serve() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../config/tests/fixtures/gateway_httproute_weight.yaml");
    let text = std::fs::read_to_string(fixture).unwrap();
    let objects = text.split("apiVersion: sluice.dev/test").next().unwrap();
    std::fs::write(dir.path().join("gateway.yaml"), objects).unwrap();
    let (code, out) = run_check(dir.path());
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("Ingress routes:\n  (none)"), "{out}");
    assert!(out.contains("Gateway API routes:\n  0.0.0.0:80 HTTP listener *\n    * PathPrefix / -> gateway-conformance-infra/infra-backend-v1:8080 (70), gateway-conformance-infra/infra-backend-v2:8080 (30), gateway-conformance-infra/infra-backend-v3:8080 (0)  (from gateway-conformance-infra/weighted-backends)"), "{out}");
}
