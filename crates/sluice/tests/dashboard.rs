//! End-to-end: the dashboard in a real browser (headless Chromium over the DevTools protocol) against a running sluice: routes, live updates, endpoint states, the filter, and screenshots in both themes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use sluice_testkit::{get, http_client};
use support::browser::Browser;
use support::{
    free_port, ingress, pods_on, service, service_with_states, write_manifest, PodState, Sluice,
};

const LIVE: Duration = Duration::from_secs(10);

/// Where screenshots go: `target/dashboard/` (test artifacts).
fn artifacts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/dashboard")
}

fn rows_for_host(host: &str) -> String {
    format!("document.querySelectorAll('#routes tbody tr[data-host=\"{host}\"]').length")
}

fn visible_rows() -> &'static str {
    "Array.from(document.querySelectorAll('#routes tbody tr')).filter(r => r.offsetParent !== null).map(r => r.dataset.host)"
}

fn endpoint_state(addr: SocketAddr) -> String {
    format!("(document.querySelector('tr[data-endpoint=\"{addr}\"]') || {{dataset: {{}}}}).dataset.state")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_routes_live_endpoint_states_and_filters_in_a_real_browser() {
    let port = free_port();
    let mut pods = pods_on(&["shop-1", "shop-2", "shop-3"], 80, port).await;
    let [live, leaving, failing] = [pods[0].addr(), pods[1].addr(), pods[2].addr()];
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "shop.yaml",
        &[
            ingress(
                "shop",
                "shop.test",
                &[("/", "Prefix", "shop", 80), ("/api", "Prefix", "shop", 80)],
            ),
            service_with_states(
                "shop",
                80,
                &[
                    (live, PodState::Ready),
                    (failing, PodState::Ready),
                    (leaving, PodState::Draining),
                ],
            ),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let mut browser = Browser::start().await;
    browser.viewport(1280, 800, false).await;
    browser
        .navigate(&format!("http://{}/?theme=light", sluice.admin))
        .await;
    browser
        .wait_for(
            "the first refresh",
            "document.body.dataset.loaded === 'true'",
            LIVE,
        )
        .await;

    // The routes appear.
    assert_eq!(browser.eval(&rows_for_host("shop.test")).await, 2);
    assert_eq!(
        browser
            .eval("document.querySelector('#stat-routes').textContent.trim()")
            .await,
        "2"
    );

    // The terminating pod is shown as such.
    let state = endpoint_state(leaving);
    browser
        .wait_for(
            "a terminating endpoint",
            &format!("{state} === 'serving_terminating'"),
            LIVE,
        )
        .await;

    // A pod that starts failing (its process is gone: connects are refused) is ejected.
    drop(pods.remove(2));
    let client = http_client();
    for _ in 0..12 {
        let reply = get(&client, &sluice.url("/"), "shop.test").await.unwrap();
        assert_eq!(reply.status, 200, "retried on a live pod");
    }
    browser
        .wait_for(
            "an ejected endpoint",
            &format!("{} === 'ejected'", endpoint_state(failing)),
            LIVE,
        )
        .await;
    assert_eq!(
        browser.eval(&format!("{} ", endpoint_state(live))).await,
        "ready"
    );

    // A manifest added to the directory appears without a reload.
    let marker = "window.__not_reloaded = true; true";
    assert_eq!(browser.eval(marker).await, true);
    let other = pods_on(&["cart"], 90, 0).await;
    write_manifest(
        dir.path(),
        "cart.yaml",
        &[
            ingress("cart", "cart.test", &[("/", "Prefix", "cart", 80)]),
            service("cart", 80, &[other[0].addr()]),
        ],
    );
    browser
        .wait_for(
            "the new route",
            &format!("{} === 1", rows_for_host("cart.test")),
            LIVE,
        )
        .await;
    assert_eq!(browser.eval("window.__not_reloaded === true").await, true);

    browser
        .screenshot(&artifacts().join("dashboard-light.png"))
        .await;

    // The filter narrows the table, as typed.
    browser.type_into("#filter", "cart").await;
    browser
        .wait_for(
            "the filter",
            &format!("JSON.stringify({}) === '[\"cart.test\"]'", visible_rows()),
            LIVE,
        )
        .await;
    // ... and survives the next refresh.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        browser.eval(visible_rows()).await,
        serde_json::json!(["cart.test"])
    );
    browser
        .eval("const f = document.querySelector('#filter'); f.value = ''; f.dispatchEvent(new Event('input')); true")
        .await;

    // Dark mode, at the desktop size and at a phone's.
    browser
        .eval("document.querySelector('#theme-toggle').click(); document.documentElement.dataset.theme")
        .await;
    browser
        .wait_for(
            "dark mode",
            "document.documentElement.dataset.theme === 'dark'",
            LIVE,
        )
        .await;
    browser
        .screenshot(&artifacts().join("dashboard-dark.png"))
        .await;
    browser.viewport(390, 844, true).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let overflow = browser
        .eval("document.documentElement.scrollWidth <= window.innerWidth + 1")
        .await;
    assert_eq!(overflow, true, "no sideways scrolling on a phone");
    browser
        .screenshot(&artifacts().join("dashboard-phone.png"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_a_canary_under_its_route_with_its_rule_and_backend() {
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "shop.yaml",
        &[
            ingress("main", "shop.test", &[("/", "Prefix", "stable", 80)]),
            support::annotated_ingress(
                "beta",
                "shop.test",
                &[("/", "Prefix", "beta", 80)],
                &[
                    ("nginx.ingress.kubernetes.io/canary", "true"),
                    ("nginx.ingress.kubernetes.io/canary-by-cookie", "canary"),
                    ("nginx.ingress.kubernetes.io/canary-weight", "20"),
                ],
            ),
            service("stable", 80, &["127.0.0.1:9".parse().unwrap()]),
            service("beta", 80, &["127.0.0.1:10".parse().unwrap()]),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let mut browser = Browser::start().await;
    browser.navigate(&format!("http://{}/", sluice.admin)).await;
    browser
        .wait_for(
            "the first refresh",
            "document.body.dataset.loaded === 'true'",
            LIVE,
        )
        .await;
    assert_eq!(
        browser.eval(&rows_for_host("shop.test")).await,
        2,
        "the route and its canary"
    );
    let canary = browser
        .eval("Array.from(document.querySelectorAll('#routes tbody tr[data-host=\"shop.test\"]')).map(r => r.textContent).find(t => t.includes('canary')) || ''")
        .await;
    let text = canary.as_str().unwrap();
    assert!(
        text.contains("canary: cookie canary, then weight 20/100"),
        "{text}"
    );
    assert!(
        text.contains("default/beta:80") && text.contains("default/beta"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_gateways_listener_sets_l4_routes_and_policies_with_their_conditions() {
    let (http_port, tcp_port) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let gateway = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: sluice}}\nspec: {{controllerName: sluice.dev/gateway-controller}}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: edge}}\nspec:\n  gatewayClassName: sluice\n  addresses: [{{type: IPAddress, value: 127.0.3.90}}]\n  allowedListeners: {{namespaces: {{from: Same}}}}\n  listeners:\n  - {{name: web, port: {http_port}, protocol: HTTP, hostname: shop.test}}\n  - {{name: db, port: {tcp_port}, protocol: TCP}}\n"
    );
    write_manifest(
        dir.path(),
        "gateway.yaml",
        &[
            gateway,
            format!("apiVersion: gateway.networking.k8s.io/v1\nkind: ListenerSet\nmetadata: {{name: team-a}}\nspec:\n  parentRef: {{name: edge}}\n  listeners:\n  - {{name: team-a, port: {http_port}, protocol: HTTP, hostname: team-a.test}}\n  - {{name: clash, port: {http_port}, protocol: HTTP, hostname: shop.test}}\n"),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: TCPRoute\nmetadata: {name: db}\nspec:\n  parentRefs: [{name: edge, sectionName: db}]\n  rules: [{backendRefs: [{name: db, port: 5432}]}]\n".to_owned(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: team-a}\nspec:\n  parentRefs: [{kind: ListenerSet, name: team-a}]\n  rules: [{backendRefs: [{name: web, port: 80}]}]\n".to_owned(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: BackendTLSPolicy\nmetadata: {name: web-tls}\nspec:\n  targetRefs: [{group: \"\", kind: Service, name: web}]\n  validation: {caCertificateRefs: [{group: \"\", kind: ConfigMap, name: missing-ca}], hostname: web.internal}\n".to_owned(),
            service("web", 80, &["127.0.0.1:9".parse().unwrap()]),
            service("db", 5432, &["127.0.0.1:10".parse().unwrap()]),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let mut browser = Browser::start().await;
    browser.navigate(&format!("http://{}/", sluice.admin)).await;
    browser
        .wait_for(
            "the first refresh",
            "document.body.dataset.loaded === 'true'",
            LIVE,
        )
        .await;
    let row = |kind: &str, object: &str| {
        format!("Array.from(document.querySelectorAll('#gateway-table tbody tr')).filter(r => r.dataset.kind === '{kind}' && r.dataset.object.includes('{object}')).map(r => r.textContent).join(' | ')")
    };
    let text = |value: serde_json::Value| value.as_str().unwrap().to_owned();
    let gateway = text(browser.eval(&row("Gateway", "default/edge")).await);
    assert!(
        gateway.contains("1 ListenerSet") && gateway.contains("Accepted ✓"),
        "{gateway}"
    );
    let tcp = text(browser.eval(&row("listener", "default/edge · db")).await);
    assert!(
        tcp.contains(&format!("127.0.3.90:{tcp_port}")) && tcp.contains("1 route"),
        "{tcp}"
    );
    let route = text(browser.eval(&row("TCPRoute", "default/db")).await);
    assert!(
        route.contains("Gateway default/edge · db") && route.contains("Accepted ✓"),
        "{route}"
    );
    let set = text(browser.eval(&row("ListenerSet", "default/team-a")).await);
    assert!(
        set.contains("Gateway default/edge") && set.contains("Accepted ✓"),
        "{set}"
    );
    let clash = text(
        browser
            .eval(&row("listener", "default/team-a · clash"))
            .await,
    );
    assert!(clash.contains("Accepted ✗ HostnameConflict"), "{clash}");
    let set_route = text(browser.eval(&row("HTTPRoute", "default/team-a")).await);
    assert!(
        set_route.contains("ListenerSet default/team-a"),
        "{set_route}"
    );
    let policy = text(
        browser
            .eval(&row("BackendTLSPolicy", "default/web-tls"))
            .await,
    );
    assert!(
        policy.contains("Gateway default/edge")
            && policy.contains("Accepted ✗ NoValidCACertificate"),
        "{policy}"
    );
}
