//! End-to-end: on SIGTERM sluice fails readiness, keeps serving for the shutdown delay, then stops accepting and finishes every request in flight before exiting 0.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use sluice_testkit::{get, http_client, EchoBackend, LoadRun};
use support::{pod_ip, wait_until, write_catch_all, Sluice};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_without_losing_a_request() {
    let pod = EchoBackend::start("pod", pod_ip(60)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_catch_all(dir.path(), "app", &[pod.addr()]);
    let mut sluice = Sluice::start(
        dir.path(),
        &["--shutdown-delay", "1500ms", "--grace-period", "10s"],
    )
    .await;
    let load = LoadRun::start(&sluice.url("/"), "app.test", 4, Duration::from_secs(30));
    tokio::time::sleep(Duration::from_millis(300)).await;

    sluice.terminate();
    let terminated = Instant::now();
    wait_until("/readyz to fail", Duration::from_millis(500), || async {
        sluice.readyz().await == 503
    })
    .await;
    // Requests started during the delay, and still running when the listener closes.
    let url = sluice.url("/__testkit/sleep/2500");
    let slow: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { get(&http_client(), &url, "app.test").await })
        })
        .collect();
    let fresh = get(&http_client(), &sluice.url("/"), "app.test")
        .await
        .unwrap();
    assert_eq!(
        fresh.status, 200,
        "a new connection during the delay is served"
    );
    // A load balancer stops sending once readiness fails; stop before the listener closes.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let report = load.finish().await;
    assert_eq!(
        report.failed, 0,
        "failures while draining: {:?}",
        report.failures
    );
    assert!(report.ok > 50, "load ran: {} ok", report.ok);

    wait_until(
        "the listener to close after the delay",
        Duration::from_secs(3),
        || async { tokio::net::TcpStream::connect(sluice.listen).await.is_err() },
    )
    .await;
    assert!(
        terminated.elapsed() >= Duration::from_millis(1400),
        "closed before the delay"
    );
    for request in slow {
        let reply = request
            .await
            .unwrap()
            .expect("an in-flight request was lost");
        assert_eq!(reply.status, 200);
    }
    assert_eq!(sluice.wait_exit(Duration::from_secs(10)).await, Some(0));
}
