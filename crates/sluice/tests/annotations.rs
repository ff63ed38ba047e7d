//! End-to-end: ingress-nginx's annotations with ingress-nginx's semantics, through the real binary and real backends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use bytes::Bytes;
use http::Method;
use sluice_testkit::{http_client, send, Reply};
use support::{annotated_ingress, ingress, pods_on, run_check, service, write_manifest, Sluice};

const ALLOW: &str = "nginx.ingress.kubernetes.io/allowlist-source-range";
const WHITELIST: &str = "nginx.ingress.kubernetes.io/whitelist-source-range";
const DENY: &str = "nginx.ingress.kubernetes.io/denylist-source-range";

async fn get_as(sluice: &Sluice, path: &str, forwarded_for: Option<&str>) -> Reply {
    let headers: Vec<(&str, &str)> = forwarded_for
        .map(|client| vec![("x-forwarded-for", client)])
        .unwrap_or_default();
    send(
        &http_client(),
        Method::GET,
        &sluice.url(path),
        "shop.test",
        &headers,
        Bytes::new(),
    )
    .await
    .unwrap()
}

/// `shop.test`: `/` open (Ingress `open`), `/admin` with `annotations` (Ingress `admin`),
/// both to one echo pod.
fn write_shop(dir: &std::path::Path, pod: std::net::SocketAddr, annotations: &[(&str, &str)]) {
    write_manifest(
        dir,
        "shop.yaml",
        &[
            ingress("open", "shop.test", &[("/", "Prefix", "web", 80)]),
            annotated_ingress(
                "admin",
                "shop.test",
                &[("/admin", "Prefix", "web", 80)],
                annotations,
            ),
            service("web", 80, &[pod]),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowlist_admits_its_ranges_and_answers_403_to_everyone_else() {
    let pods = pods_on(&["web"], 140, 0).await;
    let dir = tempfile::tempdir().unwrap();
    write_shop(
        dir.path(),
        pods[0].addr(),
        &[(ALLOW, "10.0.0.0/8, 2001:db8::/32")],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let refused = get_as(&sluice, "/admin", None).await;
    assert_eq!(refused.status, 403, "127.0.0.1 is outside the allowlist");
    assert_eq!(refused.body, "403 forbidden\n");
    assert_eq!(pods[0].requests(), 0, "the pod never saw it");
    // Only the annotated Ingress's routes are restricted.
    assert_eq!(get_as(&sluice, "/", None).await.status, 200);
    // The older name, with the client's own range.
    write_shop(dir.path(), pods[0].addr(), &[(WHITELIST, "127.0.0.0/8")]);
    sluice.wait_for_generation_after(1).await;
    assert_eq!(get_as(&sluice, "/admin", None).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_denylist_is_checked_first_and_wins_over_the_allowlist() {
    let pods = pods_on(&["web"], 141, 0).await;
    let dir = tempfile::tempdir().unwrap();
    write_shop(
        dir.path(),
        pods[0].addr(),
        &[(ALLOW, "127.0.0.0/8"), (DENY, "127.0.0.1")],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    assert_eq!(get_as(&sluice, "/admin", None).await.status, 403);
    write_shop(dir.path(), pods[0].addr(), &[(DENY, "192.0.2.0/24")]);
    sluice.wait_for_generation_after(1).await;
    assert_eq!(get_as(&sluice, "/admin", None).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_apply_to_the_client_behind_a_trusted_proxy() {
    let pods = pods_on(&["web"], 142, 0).await;
    let dir = tempfile::tempdir().unwrap();
    write_shop(dir.path(), pods[0].addr(), &[(ALLOW, "10.0.0.0/8")]);
    let trusted = Sluice::start(dir.path(), &["--trusted-proxies", "127.0.0.0/8"]).await;
    assert_eq!(
        get_as(&trusted, "/admin", Some("10.1.2.3")).await.status,
        200
    );
    assert_eq!(
        get_as(&trusted, "/admin", Some("192.168.1.1")).await.status,
        403
    );
    // From a peer that is not trusted, X-Forwarded-For is not believed.
    let untrusted = Sluice::start(dir.path(), &[]).await;
    assert_eq!(
        get_as(&untrusted, "/admin", Some("10.1.2.3")).await.status,
        403
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_range_is_an_error_and_its_routes_answer_503() {
    let pods = pods_on(&["web"], 143, 0).await;
    let dir = tempfile::tempdir().unwrap();
    write_shop(
        dir.path(),
        pods[0].addr(),
        &[(ALLOW, "10.0.0.0/8, 10.0.0.300")],
    );
    let (code, report) = run_check(dir.path());
    assert_eq!(code, Some(1), "{report}");
    assert!(
        report.contains("\"10.0.0.300\" is not an IPv4 or IPv6 address or CIDR range"),
        "{report}"
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    assert_eq!(get_as(&sluice, "/admin", None).await.status, 503);
    assert_eq!(get_as(&sluice, "/", None).await.status, 200);
    assert_eq!(pods[0].requests(), 1);
}
