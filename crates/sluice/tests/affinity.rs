//! End-to-end: sticky sessions, consistent hashing, and the ClusterIP fallback, configured by annotations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::net::SocketAddr;

use bytes::Bytes;
use http::Method;
use sluice_testkit::{http_client, send, EchoBackend, Reply};
use support::{
    annotated_ingress, free_port, pod_ip, pods_on, service_with_states, write_manifest, PodState,
    Sluice,
};

const COOKIE_AFFINITY: [(&str, &str); 3] = [
    ("nginx.ingress.kubernetes.io/affinity", "cookie"),
    ("nginx.ingress.kubernetes.io/session-cookie-name", "route"),
    ("nginx.ingress.kubernetes.io/session-cookie-max-age", "3600"),
];

fn ready(pods: &[EchoBackend]) -> Vec<(SocketAddr, PodState)> {
    pods.iter()
        .map(|pod| (pod.addr(), PodState::Ready))
        .collect()
}

struct App {
    dir: tempfile::TempDir,
    annotations: Vec<(&'static str, &'static str)>,
    sluice: Option<Sluice>,
}

impl App {
    /// Sluice serving a catch-all Ingress with `annotations` to Service `app`.
    async fn start(
        annotations: &[(&'static str, &'static str)],
        endpoints: &[(SocketAddr, PodState)],
    ) -> Self {
        let mut app = Self {
            dir: tempfile::tempdir().unwrap(),
            annotations: annotations.to_vec(),
            sluice: None,
        };
        app.write(endpoints);
        app.sluice = Some(Sluice::start(app.dir.path(), &[]).await);
        app
    }

    fn sluice(&self) -> &Sluice {
        self.sluice.as_ref().unwrap()
    }

    fn write(&self, endpoints: &[(SocketAddr, PodState)]) {
        let documents = [
            annotated_ingress("app", "", &[("/", "Prefix", "app", 80)], &self.annotations),
            service_with_states("app", 80, endpoints),
        ];
        write_manifest(self.dir.path(), "app.yaml", &documents);
    }

    /// Rewrites the endpoints and waits until sluice serves them.
    async fn set_endpoints(&self, endpoints: &[(SocketAddr, PodState)]) {
        let generation = self.sluice().generation().await;
        self.write(endpoints);
        self.sluice().wait_for_generation_after(generation).await;
    }

    async fn get(&self, headers: &[(&str, &str)]) -> Reply {
        let url = self.sluice().url("/");
        let reply = send(
            &http_client(),
            Method::GET,
            &url,
            "app.test",
            headers,
            Bytes::new(),
        )
        .await
        .unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply
    }
}

fn pod_of(reply: &Reply) -> String {
    reply.body.trim().to_owned()
}

/// The `name=value` pair of the reply's Set-Cookie for `name`, if any.
fn cookie(reply: &Reply, name: &str) -> Option<String> {
    reply
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find(|value| value.starts_with(&format!("{name}=")))
        .map(|value| value.split(';').next().unwrap_or_default().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_stays_on_its_pod_and_survives_scaling_up() {
    let port = free_port();
    let pods = pods_on(&["a", "b", "c", "d", "e"], 70, port).await;
    let app = App::start(&COOKIE_AFFINITY, &ready(&pods[..3])).await;

    let first = app.get(&[]).await;
    let set_cookie = first.headers.get("set-cookie").unwrap().to_str().unwrap();
    assert!(set_cookie.contains("Max-Age=3600"), "{set_cookie}");
    assert!(set_cookie.contains("Path=/"), "{set_cookie}");
    let session = cookie(&first, "route").unwrap();
    let value = session.trim_start_matches("route=");
    assert_eq!(value.len(), 16, "{session}");
    assert!(!value.contains("127") && value.chars().all(|c| c.is_ascii_hexdigit()));
    let pinned = pod_of(&first);

    for _ in 0..10 {
        let reply = app.get(&[("cookie", &session)]).await;
        assert_eq!(pod_of(&reply), pinned);
        assert!(
            cookie(&reply, "route").is_none(),
            "a valid session is not rewritten"
        );
    }
    app.set_endpoints(&ready(&pods)).await;
    for _ in 0..10 {
        assert_eq!(pod_of(&app.get(&[("cookie", &session)]).await), pinned);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_cookie_is_rebalanced_and_rewritten() {
    let port = free_port();
    let pods = pods_on(&["a", "b", "c"], 76, port).await;
    let app = App::start(&COOKIE_AFFINITY, &ready(&pods)).await;
    let mut served = BTreeSet::new();
    for forged in ["route=0000000000000000", "route=127.0.1.76:80", "route="] {
        let reply = app.get(&[("cookie", forged)]).await;
        let fresh = cookie(&reply, "route").expect("a fresh cookie");
        assert_ne!(fresh, forged);
        served.insert(pod_of(&reply));
        let again = app.get(&[("cookie", &fresh)]).await;
        assert_eq!(pod_of(&again), pod_of(&reply), "the fresh cookie pins");
    }
    assert_eq!(
        served.len(),
        3,
        "forged cookies are balanced like new sessions"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_moves_when_its_pod_leaves_or_fails() {
    let port = free_port();
    let mut pods = pods_on(&["a", "b", "c"], 80, port).await;
    let app = App::start(&COOKIE_AFFINITY, &ready(&pods)).await;
    let first = app.get(&[]).await;
    let session = cookie(&first, "route").unwrap();

    // The pinned pod leaves the Service: the session moves and the cookie is rewritten.
    let pinned = pods
        .iter()
        .position(|p| p.name() == pod_of(&first))
        .unwrap();
    let gone = pods.remove(pinned);
    app.set_endpoints(&ready(&pods)).await;
    let moved = app.get(&[("cookie", &session)]).await;
    assert_ne!(pod_of(&moved), gone.name());
    let session = cookie(&moved, "route").expect("the cookie is rewritten");

    // The new pod dies while still listed (its endpoint lags): its connect fails, the request
    // goes to the other pod, and the cookie follows.
    let pinned = pods
        .iter()
        .position(|p| p.name() == pod_of(&moved))
        .unwrap();
    drop(pods.remove(pinned));
    let rescued = app.get(&[("cookie", &session)]).await;
    assert_eq!(pod_of(&rescued), pods[0].name());
    let session = cookie(&rescued, "route").expect("the cookie follows the rescue");
    assert_eq!(
        pod_of(&app.get(&[("cookie", &session)]).await),
        pods[0].name()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminating_pod_keeps_its_sessions_but_gets_no_new_ones() {
    let port = free_port();
    let pods = pods_on(&["old", "new"], 84, port).await;
    let app = App::start(&COOKIE_AFFINITY, &ready(&pods[..1])).await;
    let session = cookie(&app.get(&[]).await, "route").unwrap();

    app.set_endpoints(&[
        (pods[0].addr(), PodState::Draining),
        (pods[1].addr(), PodState::Ready),
    ])
    .await;
    for _ in 0..5 {
        assert_eq!(pod_of(&app.get(&[("cookie", &session)]).await), "old");
    }
    for _ in 0..5 {
        let fresh = app.get(&[]).await;
        assert_eq!(pod_of(&fresh), "new", "a draining pod takes no new session");
        assert!(cookie(&fresh, "route").is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traefik_sticky_service_pins_sessions_with_its_own_cookie() {
    let port = free_port();
    let pods = pods_on(&["a", "b", "c"], 88, port).await;
    let dir = tempfile::tempdir().unwrap();
    let service = service_with_states("app", 80, &ready(&pods)).replacen(
        "  name: app\n",
        "  name: app\n  annotations:\n    traefik.ingress.kubernetes.io/service.sticky.cookie: \"true\"\n    traefik.ingress.kubernetes.io/service.sticky.cookie.name: shop_session\n    traefik.ingress.kubernetes.io/service.sticky.cookie.samesite: lax\n",
        1,
    );
    let documents = [
        annotated_ingress("app", "", &[("/", "Prefix", "app", 80)], &[]),
        service,
    ];
    write_manifest(dir.path(), "app.yaml", &documents);
    let sluice = Sluice::start(dir.path(), &[]).await;
    let url = sluice.url("/");
    let client = http_client();
    let first = send(&client, Method::GET, &url, "app.test", &[], Bytes::new())
        .await
        .unwrap();
    let set_cookie = first.headers.get("set-cookie").unwrap().to_str().unwrap();
    assert!(set_cookie.contains("SameSite=Lax"), "{set_cookie}");
    let session = cookie(&first, "shop_session").unwrap();
    for _ in 0..6 {
        let reply = send(
            &client,
            Method::GET,
            &url,
            "app.test",
            &[("cookie", &session)],
            Bytes::new(),
        )
        .await
        .unwrap();
        assert_eq!(pod_of(&reply), pod_of(&first));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hashing_a_header_keeps_each_user_on_one_pod() {
    let port = free_port();
    let pods = pods_on(&["a", "b", "c", "d"], 92, port).await;
    let app = App::start(
        &[(
            "nginx.ingress.kubernetes.io/upstream-hash-by",
            "$http_x_user",
        )],
        &ready(&pods),
    )
    .await;
    let mut used = BTreeSet::new();
    for user in 0..24 {
        let name = format!("user-{user}");
        let first = pod_of(&app.get(&[("x-user", &name)]).await);
        for _ in 0..3 {
            assert_eq!(
                pod_of(&app.get(&[("x-user", &name)]).await),
                first,
                "{name}"
            );
        }
        used.insert(first);
    }
    assert!(used.len() >= 3, "24 users landed on {used:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_mode_uses_the_cluster_ip_only_when_no_pod_answers() {
    let port = free_port();
    let pods = pods_on(&["pod"], 96, port).await;
    let cluster_ip = EchoBackend::start("cluster-ip", pod_ip(99)).await.unwrap();
    let dead = SocketAddr::new(pod_ip(97), port);
    let app_yaml = |endpoints: &[(SocketAddr, PodState)]| {
        service_with_states("app", cluster_ip.addr().port(), endpoints)
            .replacen(
                "clusterIP: 10.96.0.10",
                &format!("clusterIP: {}", cluster_ip.addr().ip()),
                1,
            )
            .replacen(
                &format!("  - port: {}\n", cluster_ip.addr().port()),
                &format!(
                    "  - port: {}\n    targetPort: {port}\n",
                    cluster_ip.addr().port()
                ),
                1,
            )
    };
    let dir = tempfile::tempdir().unwrap();
    let ingress = annotated_ingress(
        "app",
        "",
        &[("/", "Prefix", "app", cluster_ip.addr().port())],
        &[("sluice.dev/service-upstream", "fallback")],
    );
    write_manifest(
        dir.path(),
        "app.yaml",
        &[ingress.clone(), app_yaml(&ready(&pods))],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let client = http_client();
    let get = || async {
        let reply = send(
            &client,
            Method::GET,
            &sluice.url("/"),
            "app.test",
            &[],
            Bytes::new(),
        )
        .await
        .unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
        pod_of(&reply)
    };
    assert_eq!(get().await, "pod", "pods are used while one answers");

    let generation = sluice.generation().await;
    write_manifest(
        dir.path(),
        "app.yaml",
        &[ingress.clone(), app_yaml(&[(dead, PodState::Ready)])],
    );
    sluice.wait_for_generation_after(generation).await;
    assert_eq!(get().await, "cluster-ip", "every endpoint attempt failed");

    let generation = sluice.generation().await;
    write_manifest(dir.path(), "app.yaml", &[ingress, app_yaml(&[])]);
    sluice.wait_for_generation_after(generation).await;
    assert_eq!(get().await, "cluster-ip", "no endpoint left");
    assert!(sluice.metric("sluice_clusterip_fallbacks_total").await >= 2.0);
}
