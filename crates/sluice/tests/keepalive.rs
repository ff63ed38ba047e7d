//! End-to-end: pods that close idle keep-alive connections (Node after 5 s, gunicorn after 2 s) cost no GET, even when requests arrive just as the pod closes.
//!
//! The pods close after one second idle, and their close takes 50 ms to reach sluice (a
//! network's delay), so a request sent in that window meets a closing socket and is reset.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use sluice_testkit::{http_client, send, RawBackend, RawBackendOptions};
use support::{service, write_manifest, Sluice};

/// Routes, one pod each: every pod's pool holds one connection, idle about as long as the
/// pod allows, so nearly every request races the pod's close.
const ROUTES: u8 = 25;
const ROUNDS: usize = 20;

fn pod_ip(route: u8, announcing: bool) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 4 + u8::from(announcing), route + 1))
}

/// One Ingress with a path per pod: `/p0` … `/p24`.
fn manifests(pods: &[RawBackend]) -> Vec<String> {
    let mut ingress = String::from(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: pods\nspec:\n  ingressClassName: sluice\n  rules:\n  - http:\n      paths:\n",
    );
    let mut documents = Vec::new();
    for (index, pod) in pods.iter().enumerate() {
        writeln!(
            ingress,
            "      - path: /p{index}\n        pathType: Prefix\n        backend:\n          service:\n            name: p{index}\n            port:\n              number: 80"
        )
        .unwrap();
        documents.push(service(&format!("p{index}"), 80, &[pod.addr()]));
    }
    documents.insert(0, ingress);
    documents
}

/// Sends `ROUNDS` requests to each route, each client pausing 0.9–1.1 s between its
/// requests; returns the statuses that were not 200 (0 for a transport error).
async fn spaced_requests(sluice: &Sluice, method: Method) -> Vec<u16> {
    let mut clients = Vec::new();
    for route in 0..ROUTES {
        let url = sluice.url(&format!("/p{route}"));
        let method = method.clone();
        clients.push(tokio::spawn(async move {
            let client = http_client();
            let mut failures = Vec::new();
            for _ in 0..ROUNDS {
                let pause = 900 + jitter(200);
                tokio::time::sleep(Duration::from_millis(pause)).await;
                let body = match method {
                    Method::POST => Bytes::from_static(b"order=1"),
                    _ => Bytes::new(),
                };
                match send(&client, method.clone(), &url, "shop.test", &[], body).await {
                    Ok(reply) if reply.status == 200 => {}
                    Ok(reply) => failures.push(reply.status.as_u16()),
                    Err(_) => failures.push(0),
                }
            }
            failures
        }));
    }
    let mut failures = Vec::new();
    for client in clients {
        failures.extend(client.await.unwrap());
    }
    failures
}

/// A random number of milliseconds below `below` (std's randomly keyed hasher is the source).
fn jitter(below: u64) -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::Instant::now()) % below
}

/// Pods on `/p0` … behind sluice, each closing idle connections after a second.
async fn pods_behind_sluice(announce: bool) -> (Vec<RawBackend>, tempfile::TempDir, Sluice) {
    let mut pods = Vec::new();
    for route in 0..ROUTES {
        let options = RawBackendOptions {
            idle_close: Some(Duration::from_secs(1)),
            close_notice: Duration::from_millis(50),
            announce_idle_close: announce,
            ..RawBackendOptions::default()
        };
        let addr = SocketAddr::new(pod_ip(route, announce), 0);
        pods.push(RawBackend::start_with(addr, options).await.unwrap());
    }
    let dir = tempfile::tempdir().unwrap();
    write_manifest(dir.path(), "pods.yaml", &manifests(&pods));
    let sluice = Sluice::start(dir.path(), &[]).await;
    (pods, dir, sluice)
}

/// GETs and POSTs at once; returns their failures after reporting them with the number of
/// GETs sluice resent on a new connection.
async fn gets_and_posts(sluice: &Sluice, case: &str) -> (Vec<u16>, Vec<u16>) {
    let (gets, posts) = tokio::join!(
        spaced_requests(sluice, Method::GET),
        spaced_requests(sluice, Method::POST)
    );
    let metrics = metrics(sluice).await;
    let resends = metrics
        .lines()
        .find(|line| line.starts_with("sluice_upstream_stale_connection_resends_total "))
        .and_then(|line| line.rsplit(' ').next())
        .unwrap_or("absent")
        .to_owned();
    let total = usize::from(ROUTES) * ROUNDS;
    eprintln!(
        "{case}: {total} GETs, {} failed; {total} POSTs, {} failed; resent on a new connection: {resends}",
        gets.len(),
        posts.len()
    );
    (gets, posts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_spaced_like_the_pods_idle_timeout_lose_no_get() {
    let (_pods, _dir, sluice) = pods_behind_sluice(false).await;
    let (gets, posts) = gets_and_posts(&sluice, "silent pods").await;
    assert!(gets.is_empty(), "failed GETs: {gets:?}");
    assert!(
        posts.iter().all(|status| *status == 502),
        "a POST that cannot be resent fails as a 502, never otherwise: {posts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_that_announce_their_idle_timeout_lose_no_post_either() {
    let (_pods, _dir, sluice) = pods_behind_sluice(true).await;
    let (gets, posts) = gets_and_posts(&sluice, "pods announcing Keep-Alive: timeout=1").await;
    assert!(gets.is_empty(), "failed GETs: {gets:?}");
    assert!(posts.is_empty(), "failed POSTs: {posts:?}");
}

async fn metrics(sluice: &Sluice) -> String {
    let url = format!("http://{}/metrics", sluice.admin);
    sluice_testkit::get(&http_client(), &url, "admin")
        .await
        .map(|reply| reply.body)
        .unwrap_or_default()
}
