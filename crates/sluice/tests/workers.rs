//! End-to-end: `--workers N` runs N data-plane threads, each accepting on its own SO_REUSEPORT socket, draining on SIGTERM like one, and refusing a port another process holds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_testkit::EchoBackend;
use support::wire::{exchange, read_until_closed, Reply};
use support::{free_port, pod_ip, sluice_binary, wait_until, write_catch_all, Sluice};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// One request on a connection of its own, and its whole answer.
async fn one_request(sluice: &Sluice, path: &str) -> Reply {
    let head = format!("GET {path} HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n");
    exchange(sluice.listen, head.as_bytes(), Duration::from_secs(10)).await
}

async fn accepted(sluice: &Sluice, worker: &str) -> f64 {
    sluice
        .metric_sum(
            "sluice_accepted_connections_total",
            &[("listener", "http"), ("worker", worker)],
        )
        .await
}

fn thread_names(pid: u32) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .map(|task| std::fs::read_to_string(task.unwrap().path().join("comm")).unwrap())
        .map(|name| name.trim().to_owned())
        .collect()
}

async fn sluice_with_workers(ip: u8, extra: &[&str]) -> (EchoBackend, tempfile::TempDir, Sluice) {
    let pod = EchoBackend::start("pod", pod_ip(ip)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_catch_all(dir.path(), "app", &[pod.addr()]);
    let mut flags = vec!["--workers", "2"];
    flags.extend_from_slice(extra);
    let sluice = Sluice::start(dir.path(), &flags).await;
    (pod, dir, sluice)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_each_accept_connections_and_serve_them() {
    let (_pod, _dir, sluice) = sluice_with_workers(170, &[]).await;
    let names = thread_names(sluice.pid());
    for worker in ["sluice-worker-0", "sluice-worker-1"] {
        assert!(names.iter().any(|name| name == worker), "{names:?}");
    }
    assert!(
        !names.iter().any(|name| name == "sluice-worker-2"),
        "{names:?}"
    );
    for round in 0..64 {
        let reply = one_request(&sluice, "/spread").await;
        assert_eq!(reply.status(), Some(200), "round {round}: {reply:?}");
        assert!(reply.closed, "round {round}: Connection: close is honoured");
    }
    // The kernel hashes each connection's addresses to one of the two sockets: 64 fresh
    // connections all landing on one worker would happen once in 2^63 runs.
    let (first, second) = (accepted(&sluice, "0").await, accepted(&sluice, "1").await);
    assert_eq!(first + second, 64.0, "every connection counted once");
    assert!(
        first > 0.0 && second > 0.0,
        "worker 0: {first}, worker 1: {second}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_requests_in_flight_on_every_worker() {
    let (_pod, _dir, mut sluice) =
        sluice_with_workers(171, &["--shutdown-delay", "0s", "--grace-period", "10s"]).await;
    let listen = sluice.listen;
    let slow: Vec<_> = (0..16)
        .map(|_| {
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(listen).await.unwrap();
                let head = b"GET /__testkit/sleep/1500 HTTP/1.1\r\nHost: app.test\r\n\r\n";
                stream.write_all(head).await.unwrap();
                read_until_closed(&mut stream, Duration::from_secs(10)).await
            })
        })
        .collect();
    wait_until(
        "both workers hold requests",
        Duration::from_secs(5),
        || async { accepted(&sluice, "0").await + accepted(&sluice, "1").await == 16.0 },
    )
    .await;
    assert!(accepted(&sluice, "0").await > 0.0 && accepted(&sluice, "1").await > 0.0);
    sluice.terminate();
    for request in slow {
        let reply = request.await.unwrap();
        assert_eq!(reply.status(), Some(200), "{reply:?}");
        // The listener is stopping: the answer in flight closes its connection.
        assert_eq!(reply.header("connection"), Some("close"), "{reply:?}");
        assert!(reply.closed, "{reply:?}");
    }
    assert_eq!(sluice.wait_exit(Duration::from_secs(10)).await, Some(0));
}

#[tokio::test]
async fn a_port_another_process_holds_with_reuseport_is_an_error() {
    // Another process's socket with SO_REUSEPORT would share the port silently with sockets
    // that set it too; sluice binds the address alone first, and refuses.
    let port = free_port();
    let address = format!("127.0.0.1:{port}").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_reuseport(true).unwrap();
    socket.bind(address).unwrap();
    let _held = socket.listen(16).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(sluice_binary())
        .args(["serve", "--manifests"])
        .arg(dir.path())
        .args(["--workers", "2", "--listen", &address.to_string()])
        .args(["--listen-tls", "off"])
        .args(["--admin", &format!("127.0.0.1:{}", free_port())])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A sluice that shared the port would serve on: give it 10 s to exit.
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if child.try_wait().unwrap().is_none() {
        let _ = child.kill();
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        !output.status.success(),
        "sluice served on a port another process holds"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on {address} (--listen)")),
        "{stderr}"
    );
}

#[test]
fn zero_workers_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(sluice_binary())
        .args(["serve", "--manifests"])
        .arg(dir.path())
        .args(["--workers", "0"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--workers"), "{stderr}");
}
