//! End-to-end: file descriptors — sluice raises its soft limit to the hard one, and when it does run out it backs off, logs once a second, keeps its last table and recovers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use sluice_testkit::{get, http_client, RawBackend};
use support::{ingress, pod_ip, service, wait_until, write_manifest, Launch, Sluice};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// This process's hard limit on open files.
fn hard_limit() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .unwrap();
    let hard = line.split_whitespace().nth(4).unwrap();
    hard.parse().unwrap_or(u64::MAX)
}

fn app(dir: &std::path::Path, backend: &RawBackend, paths: &[&str]) {
    let routes: Vec<(&str, &str, &str, u16)> = paths
        .iter()
        .map(|path| (*path, "Prefix", "app", 80))
        .collect();
    write_manifest(
        dir,
        "app.yaml",
        &[
            ingress("app", "", &routes),
            service("app", 80, &[backend.addr()]),
        ],
    );
}

/// Opens `count` connections that each finish one request and stay open.
async fn busy_clients(sluice: &Sluice, count: usize) -> Vec<TcpStream> {
    let mut clients = Vec::new();
    for _ in 0..count {
        let mut stream = TcpStream::connect(sluice.listen).await.unwrap();
        stream
            .write_all(b"GET /a HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        let response = support::wire::read_response(&mut stream).await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        clients.push(stream);
    }
    clients
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soft_open_files_limit_is_raised_to_the_hard_limit() {
    assert!(
        hard_limit() >= 2048,
        "this test needs a hard limit of at least 2048"
    );
    let backend = RawBackend::start(pod_ip(100)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    app(dir.path(), &backend, &["/a"]);
    let launch = Launch {
        shell_prefix: Some("ulimit -S -n 256;".to_owned()),
        log_filter: Some("info".to_owned()),
    };
    let extra: [&str; 0] = [];
    let sluice = Sluice::start_with(dir.path(), &extra, launch).await;
    assert!(
        sluice.log().contains("raised the open files limit"),
        "{}",
        sluice.log()
    );
    // 400 clients, each with its own upstream connection while busy: far above 256.
    let clients = busy_clients(&sluice, 400).await;
    assert_eq!(clients.len(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_file_descriptors_sluice_backs_off_logs_once_a_second_and_recovers() {
    let backend = RawBackend::start(pod_ip(101)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    app(dir.path(), &backend, &["/a"]);
    let launch = Launch {
        shell_prefix: Some("ulimit -n 128;".to_owned()),
        log_filter: None,
    };
    let sluice = Sluice::start_with(dir.path(), &[], launch).await;

    // More connections than descriptors: the rest wait in the listen backlog.
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(TcpStream::connect(sluice.listen).await.unwrap());
    }
    // A manifest change while out of descriptors cannot be read yet.
    app(dir.path(), &backend, &["/a", "/b"]);
    let warnings = || sluice.log().matches("accept failed").count();
    wait_until(
        "sluice to run out of descriptors",
        Duration::from_secs(10),
        || async { warnings() > 0 },
    )
    .await;
    let before = warnings();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let logged = warnings() - before;
    assert!(
        (1..=4).contains(&logged),
        "{logged} accept warnings in 3 s: {}",
        sluice.log()
    );

    drop(idle);
    let client = http_client();
    let url = sluice.url("/b");
    wait_until(
        "the change made while out of descriptors to apply",
        Duration::from_secs(15),
        || async {
            get(&client, &url, "a")
                .await
                .is_ok_and(|reply| reply.status == 200)
        },
    )
    .await;
    let reply = get(&client, &sluice.url("/a"), "a").await.unwrap();
    assert_eq!(reply.status, 200);
}
