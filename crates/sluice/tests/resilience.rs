//! End-to-end: retries, ejection, terminating endpoints and idle connections, through the real binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use sluice_testkit::{get, http_client, send, EchoBackend, Reply};
use support::{
    annotated_ingress, free_port, ingress, pod_ip, pods_on, service_with_states, wait_until,
    write_manifest, PodState, Sluice,
};

fn ready(addrs: &[SocketAddr]) -> Vec<(SocketAddr, PodState)> {
    addrs.iter().map(|&addr| (addr, PodState::Ready)).collect()
}

/// Sluice serving one catch-all Ingress to Service `app` with these endpoints.
async fn sluice_for(endpoints: &[(SocketAddr, PodState)]) -> (tempfile::TempDir, Sluice) {
    let dir = tempfile::tempdir().unwrap();
    write_app(&dir, endpoints);
    let sluice = Sluice::start(dir.path(), &[]).await;
    (dir, sluice)
}

fn write_app(dir: &tempfile::TempDir, endpoints: &[(SocketAddr, PodState)]) {
    let documents = [
        ingress("app", "", &[("/", "Prefix", "app", 80)]),
        service_with_states("app", 80, endpoints),
    ];
    write_manifest(dir.path(), "app.yaml", &documents);
}

async fn call(sluice: &Sluice, method: Method, path: &str, headers: &[(&str, &str)]) -> Reply {
    call_with_body(sluice, method, path, headers, Bytes::new()).await
}

async fn call_with_body(
    sluice: &Sluice,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Reply {
    send(
        &http_client(),
        method,
        &sluice.url(path),
        "app.test",
        headers,
        body,
    )
    .await
    .unwrap()
}

fn total_requests(pods: &[EchoBackend]) -> u64 {
    pods.iter().map(EchoBackend::requests).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_endpoint_costs_no_request_and_is_ejected() {
    let port = free_port();
    let live = pods_on(&["live-1", "live-2"], 20, port).await;
    let dead = SocketAddr::new(pod_ip(22), port);
    let mut endpoints = ready(&[live[0].addr(), live[1].addr()]);
    endpoints.push((dead, PodState::Ready));
    let (_dir, sluice) = sluice_for(&endpoints).await;

    for _ in 0..60 {
        let reply = call(&sluice, Method::GET, "/", &[]).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let retries = sluice.metric_sum("sluice_retries_total", &[]).await;
    let ejections = sluice.metric("sluice_endpoint_ejections_total").await;
    assert!(ejections >= 1.0, "the dead endpoint was not ejected");
    // Three failed connects eject it; at most a trial or two may follow within the test.
    assert!((3.0..=5.0).contains(&retries), "{retries} retries");
    assert_eq!(total_requests(&live), 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_is_retried_when_its_connect_failed() {
    let port = free_port();
    let live = pods_on(&["live"], 24, port).await;
    let dead = SocketAddr::new(pod_ip(25), port);
    let (_dir, sluice) = sluice_for(&ready(&[live[0].addr(), dead])).await;

    for _ in 0..4 {
        let reply = call_with_body(&sluice, Method::POST, "/", &[], Bytes::from("order")).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    assert!(sluice.metric_sum("sluice_retries_total", &[]).await >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_goes_to_an_endpoint_not_yet_tried() {
    let port = free_port();
    let pods = pods_on(&["a", "b", "c", "d"], 30, port).await;
    let addrs: Vec<SocketAddr> = pods.iter().map(EchoBackend::addr).collect();
    let (_dir, sluice) = sluice_for(&ready(&addrs)).await;

    let reply = call(&sluice, Method::GET, "/__testkit/status/503", &[]).await;
    assert_eq!(
        reply.status, 503,
        "the last endpoint's own answer comes back"
    );
    let per_pod: Vec<u64> = pods.iter().map(EchoBackend::requests).collect();
    assert_eq!(per_pod.iter().sum::<u64>(), 3, "three tries: {per_pod:?}");
    assert!(
        per_pod.iter().all(|&n| n <= 1),
        "a pod was tried twice: {per_pod:?}"
    );
    assert_eq!(sluice.metric_sum("sluice_retries_total", &[]).await, 2.0);
}

/// A case name, the request's method, headers and body length, and how many attempts it gets.
type RetryCase = (
    &'static str,
    Method,
    &'static [(&'static str, &'static str)],
    usize,
    u64,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_reached_its_endpoint_is_retried_only_when_safe() {
    let port = free_port();
    let pods = pods_on(&["a", "b", "c"], 34, port).await;
    let addrs: Vec<SocketAddr> = pods.iter().map(EchoBackend::addr).collect();
    let (_dir, sluice) = sluice_for(&ready(&addrs)).await;
    let reset = "/__testkit/reset";
    let mut expected_total = 0;
    let cases: [RetryCase; 5] = [
        ("POST", Method::POST, &[], 10, 1),
        (
            "POST with Idempotency-Key",
            Method::POST,
            &[("idempotency-key", "k1")],
            10,
            3,
        ),
        ("GET", Method::GET, &[], 0, 3),
        ("PUT with a small body", Method::PUT, &[], 1_000, 3),
        (
            "PUT with a body over the replay limit",
            Method::PUT,
            &[],
            100_000,
            1,
        ),
    ];
    for (case, method, headers, body_len, attempts) in cases {
        let body = Bytes::from(vec![b'x'; body_len]);
        let reply = call_with_body(&sluice, method, reset, headers, body).await;
        assert_eq!(reply.status, 502, "{case}: {}", reply.body);
        expected_total += attempts;
        assert_eq!(total_requests(&pods), expected_total, "{case}: attempts");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_endpoints_serve_only_when_none_is_ready() {
    let port = free_port();
    let pods = pods_on(&["old", "new"], 40, port).await;
    let (old, new) = (pods[0].addr(), pods[1].addr());
    let (dir, sluice) = sluice_for(&[(old, PodState::Draining), (new, PodState::Ready)]).await;

    let served_by = |replies: Vec<Reply>| {
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for reply in replies {
            assert_eq!(reply.status, 200, "{}", reply.body);
            *by.entry(reply.body.trim().to_owned()).or_default() += 1;
        }
        by
    };
    let mut replies = Vec::new();
    for _ in 0..10 {
        replies.push(call(&sluice, Method::GET, "/", &[]).await);
    }
    assert_eq!(served_by(replies), BTreeMap::from([("new".into(), 10)]));

    let generation = sluice.generation().await;
    write_app(&dir, &[(old, PodState::Draining), (new, PodState::Gone)]);
    sluice.wait_for_generation_after(generation).await;
    let mut replies = Vec::new();
    for _ in 0..10 {
        replies.push(call(&sluice, Method::GET, "/", &[]).await);
    }
    assert_eq!(
        served_by(replies),
        BTreeMap::from([("old".into(), 10)]),
        "with no ready endpoint, the serving terminating one takes the traffic"
    );

    let generation = sluice.generation().await;
    write_app(&dir, &[(old, PodState::Gone), (new, PodState::Gone)]);
    sluice.wait_for_generation_after(generation).await;
    let reply = call(&sluice, Method::GET, "/", &[]).await;
    assert_eq!(
        reply.status, 503,
        "endpoints that no longer serve get nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_to_an_endpoint_that_leaves_are_closed() {
    let port = free_port();
    let pods = pods_on(&["leaving", "staying", "draining"], 44, port).await;
    let addrs: Vec<SocketAddr> = pods.iter().map(EchoBackend::addr).collect();
    let (dir, sluice) = sluice_for(&ready(&addrs)).await;
    let client = http_client();
    for _ in 0..9 {
        let reply = get(&client, &sluice.url("/"), "app.test").await.unwrap();
        assert_eq!(reply.status, 200);
    }
    for pod in &pods {
        assert!(
            pod.open_connections() >= 1,
            "{} has no pooled connection",
            pod.name()
        );
    }

    let generation = sluice.generation().await;
    write_app(
        &dir,
        &[(addrs[1], PodState::Ready), (addrs[2], PodState::Draining)],
    );
    sluice.wait_for_generation_after(generation).await;
    wait_until(
        "idle connections to the removed and the terminating pod to close",
        Duration::from_secs(5),
        || async { pods[0].open_connections() == 0 && pods[2].open_connections() == 0 },
    )
    .await;
    assert!(
        pods[1].open_connections() >= 1,
        "the staying pod's connection was closed too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_add_at_most_a_fifth_to_a_failing_backends_load() {
    let port = free_port();
    let pods = pods_on(&["a", "b", "c"], 48, port).await;
    let addrs: Vec<SocketAddr> = pods.iter().map(EchoBackend::addr).collect();
    let (_dir, sluice) = sluice_for(&ready(&addrs)).await;

    // Every pod answers 503, so every request would like two retries.
    let requests = 1_000;
    for _ in 0..requests {
        let reply = call(&sluice, Method::GET, "/__testkit/status/503", &[]).await;
        assert_eq!(reply.status, 503);
    }
    let retries = sluice.metric_sum("sluice_retries_total", &[]).await;
    let refused = sluice.metric("sluice_retry_budget_exhausted_total").await;
    // 20% of 1,000 requests within the 10 s window (the floor, 100, is lower).
    assert!((150.0..=200.0).contains(&retries), "{retries} retries");
    assert!(refused >= 700.0, "only {refused} retries refused");
    assert_eq!(
        total_requests(&pods),
        requests + retries as u64,
        "the pods saw every retry"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_annotations_shape_the_attempts() {
    let port = free_port();
    let pods = pods_on(&["a", "b", "c"], 52, port).await;
    let addrs: Vec<SocketAddr> = pods.iter().map(EchoBackend::addr).collect();
    let dir = tempfile::tempdir().unwrap();
    let route = [("/", "Prefix", "app", 80)];
    let documents = [
        annotated_ingress(
            "impatient",
            "impatient.test",
            &route,
            &[
                ("sluice.dev/per-try-timeout", "200ms"),
                ("nginx.ingress.kubernetes.io/proxy-next-upstream-tries", "2"),
            ],
        ),
        annotated_ingress(
            "errors-only",
            "errors-only.test",
            &route,
            &[(
                "nginx.ingress.kubernetes.io/proxy-next-upstream",
                "error timeout",
            )],
        ),
        service_with_states("app", 80, &ready(&addrs)),
    ];
    write_manifest(dir.path(), "app.yaml", &documents);
    let sluice = Sluice::start(dir.path(), &[]).await;
    let client = http_client();

    let started = std::time::Instant::now();
    let slow = sluice.url("/__testkit/sleep/3000");
    let reply = send(
        &client,
        Method::GET,
        &slow,
        "impatient.test",
        &[],
        Bytes::new(),
    )
    .await
    .unwrap();
    let took = started.elapsed();
    assert_eq!(reply.status, 504, "{}", reply.body);
    assert!(
        took >= Duration::from_millis(380) && took < Duration::from_millis(2_000),
        "two tries of 200 ms took {took:?}"
    );
    assert_eq!(total_requests(&pods), 2, "proxy-next-upstream-tries: 2");

    let unavailable = sluice.url("/__testkit/status/503");
    let reply = send(
        &client,
        Method::GET,
        &unavailable,
        "errors-only.test",
        &[],
        Bytes::new(),
    )
    .await
    .unwrap();
    assert_eq!(reply.status, 503);
    assert_eq!(
        total_requests(&pods),
        3,
        "a 503 is not retried without http_503"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_try_fails_the_client_gets_the_last_endpoint_answer() {
    let port = free_port();
    let live = pods_on(&["unwell"], 56, port).await;
    let dead = SocketAddr::new(pod_ip(57), port);
    let (_dir, sluice) = sluice_for(&ready(&[live[0].addr(), dead])).await;
    // Whichever comes first, the dead endpoint's refused connect does not replace the live
    // endpoint's own 503.
    for _ in 0..4 {
        let reply = call(&sluice, Method::GET, "/__testkit/status/503", &[]).await;
        assert_eq!(reply.status, 503, "{}", reply.body);
        assert_eq!(reply.body.trim(), "unwell");
    }
}
