//! End-to-end: the admin surface closed by default: `--metrics` serves only what probes and Prometheus need, and a non-loopback `--admin` without a token refuses to start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use sluice_testkit::{get, http_client};
use support::{free_port, write_catch_all, Sluice};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_listener_answers_probes_and_metrics_and_nothing_of_the_json_api() {
    let dir = tempfile::tempdir().unwrap();
    write_catch_all(dir.path(), "app", &["127.0.0.1:9".parse().unwrap()]);
    let metrics = format!("127.0.0.1:{}", free_port());
    let sluice = Sluice::start(
        dir.path(),
        &["--metrics", &metrics, "--admin-token", "t0ken"],
    )
    .await;
    let client = http_client();
    let at = |path: &str| format!("http://{metrics}{path}");
    for probe in ["/healthz", "/readyz"] {
        assert_eq!(
            get(&client, &at(probe), "sluice").await.unwrap().status,
            200,
            "{probe}"
        );
    }
    let scrape = get(&client, &at("/metrics"), "sluice").await.unwrap();
    assert_eq!(scrape.status, 200, "no token needed for Prometheus");
    assert!(
        scrape.body.contains("sluice_config_publishes_total"),
        "{}",
        scrape.body
    );
    for path in [
        "/",
        "/api/routes",
        "/api/status",
        "/api/backends",
        "/log-level",
    ] {
        let reply = get(&client, &at(path), "sluice").await.unwrap();
        assert_eq!(reply.status, 404, "{path}: {}", reply.body);
        assert!(
            !reply.body.contains("app"),
            "{path} says nothing of the routes"
        );
    }
    // The admin listener still has it all, behind its token.
    assert_eq!(sluice.admin_get("/api/routes").await.status, 401);
}

/// `sluice serve` with `args`: whether it exits within a second, with its code and stderr.
fn serve(dir: &std::path::Path, args: &[&str]) -> Option<(Option<i32>, String)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("serve")
        .arg("--manifests")
        .arg(dir)
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--listen-tls", "off"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while std::time::Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
            return Some((status.code(), stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn a_non_loopback_admin_without_a_token_refuses_to_start_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    write_catch_all(dir.path(), "app", &["127.0.0.1:9".parse().unwrap()]);
    let open = format!("0.0.0.0:{}", free_port());
    let (code, stderr) = serve(dir.path(), &["--admin", &open]).expect("it exits at once");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("is not a loopback address and no --admin-token is set"),
        "{stderr}"
    );
    assert!(stderr.contains("--admin-insecure"), "{stderr}");
    // With a token, or the operator's explicit word, it serves.
    let open = format!("0.0.0.0:{}", free_port());
    assert!(serve(dir.path(), &["--admin", &open, "--admin-token", "t0ken"]).is_none());
    let open = format!("0.0.0.0:{}", free_port());
    assert!(serve(dir.path(), &["--admin", &open, "--admin-insecure"]).is_none());
}
