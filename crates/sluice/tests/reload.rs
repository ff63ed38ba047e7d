//! End-to-end: manifest changes while serving — under load, with broken files, and across idle and in-flight connections.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use sluice_testkit::{get, http_client, EchoBackend, LoadRun};
use support::{
    ingress, pod_ip, run_check, service, wait_until, write_catch_all, write_manifest, Sluice,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_changes_under_constant_load_fail_no_request() {
    let blue = EchoBackend::start("blue", pod_ip(50)).await.unwrap();
    let green = EchoBackend::start("green", pod_ip(51)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let version = |color: &str, pod: &EchoBackend| {
        vec![
            ingress("app", "app.test", &[("/", "Prefix", color, 80)]),
            service(color, 80, &[pod.addr()]),
        ]
    };
    write_manifest(dir.path(), "app.yaml", &version("blue", &blue));
    let sluice = Sluice::start(dir.path(), &[]).await;

    let load = LoadRun::start(&sluice.url("/"), "app.test", 4, Duration::from_secs(30));
    for round in 0..6 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let (color, pod) = if round % 2 == 0 {
            ("green", &green)
        } else {
            ("blue", &blue)
        };
        let generation = sluice.generation().await;
        let mut documents = version(color, pod);
        // Also add and remove an unrelated route each round, so every publish changes the table.
        documents.push(ingress(
            &format!("extra-{round}"),
            "extra.test",
            &[("/", "Prefix", color, 80)],
        ));
        write_manifest(dir.path(), "app.yaml", &documents);
        sluice.wait_for_generation_after(generation).await;
    }
    tokio::time::sleep(Duration::from_millis(250)).await;
    let report = load.finish().await;

    assert_eq!(
        report.failed, 0,
        "failed requests during reloads: {:?}",
        report.failures
    );
    assert!(report.ok > 100, "the load must be real: {report:?}");
    assert!(
        report.by_backend.get("blue").copied().unwrap_or(0) > 0
            && report.by_backend.get("green").copied().unwrap_or(0) > 0,
        "traffic must follow the changes: {:?}",
        report.by_backend
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_keeps_the_old_routes_and_check_names_it() {
    let pod = EchoBackend::start("steady", pod_ip(60)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_catch_all(dir.path(), "app", &[pod.addr()]);
    let sluice = Sluice::start(dir.path(), &[]).await;
    let client = http_client();

    // A broken edit of the serving file, and a new broken file next to it.
    std::fs::write(
        dir.path().join("app.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: app\n",
    )
    .unwrap();
    let broken = "apiVersion: v1\nkind: Service\nmetadata: {name: ok}\nspec: {ports: [{port: 80}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: bad}\nspec: {ports: [{port: eighty}]}\n";
    std::fs::write(dir.path().join("broken.yaml"), broken).unwrap();
    wait_until(
        "the broken files to be reported",
        Duration::from_secs(5),
        || async {
            let diagnostics = sluice.routes().await["diagnostics"].to_string();
            diagnostics.contains("broken.yaml") && diagnostics.contains("app.yaml")
        },
    )
    .await;

    for _ in 0..5 {
        let reply = get(&client, &sluice.url("/anything"), "app.test")
            .await
            .unwrap();
        assert_eq!(
            reply.body, "steady\n",
            "the last good configuration keeps serving"
        );
    }
    let diagnostics = sluice.routes().await["diagnostics"].clone();
    let broken_report = diagnostics
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["object"].as_str().unwrap().ends_with("broken.yaml"))
        .unwrap();
    assert_eq!(broken_report["field"], "document 2");
    assert!(
        broken_report["message"]
            .as_str()
            .unwrap()
            .contains("spec.ports[0].port"),
        "{broken_report}"
    );

    let (code, stdout) = run_check(dir.path());
    assert_eq!(code, Some(1), "check must fail: {stdout}");
    assert!(
        stdout.contains("broken.yaml document 2"),
        "check must name the file and document: {stdout}"
    );
    assert!(stdout.contains("app.yaml"), "{stdout}");
}

#[test]
fn check_passes_a_valid_directory_and_prints_the_routes() {
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            ingress("app", "app.test", &[("/v1", "Exact", "app", 80)]),
            service("app", 80, &["127.0.1.70:8080".parse().unwrap()]),
        ],
    );
    let (code, stdout) = run_check(dir.path());
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("app.test"), "{stdout}");
    assert!(
        stdout.contains("/v1") && stdout.contains("Exact") && stdout.contains("default/app:80"),
        "{stdout}"
    );
    assert!(stdout.contains("127.0.1.70:8080"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_keeps_idle_keep_alive_connections_and_in_flight_requests() {
    let pod = EchoBackend::start("pod", pod_ip(80)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let manifests = |extra_path: &str| {
        vec![
            ingress(
                "app",
                "",
                &[("/", "Prefix", "app", 80), (extra_path, "Exact", "app", 80)],
            ),
            service("app", 80, &[pod.addr()]),
        ]
    };
    write_manifest(dir.path(), "app.yaml", &manifests("/one"));
    let sluice = Sluice::start(dir.path(), &[]).await;

    // One keep-alive connection answers, then sits idle across a publish.
    let mut connection = KeepAlive::open(sluice.listen);
    assert_eq!(connection.get("/"), "pod\n");
    // A slow request is in flight on another connection during the same publish.
    let slow_url = sluice.url("/__testkit/sleep/1500");
    let in_flight =
        tokio::spawn(async move { get(&http_client(), &slow_url, "app.test").await.unwrap() });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let generation = sluice.generation().await;
    write_manifest(dir.path(), "app.yaml", &manifests("/two"));
    sluice.wait_for_generation_after(generation).await;

    assert_eq!(
        connection.get("/two"),
        "pod\n",
        "the idle connection must survive the publish"
    );
    let slow = in_flight.await.unwrap();
    assert_eq!(
        (slow.status.as_u16(), slow.body.as_str()),
        (200, "pod\n"),
        "the in-flight request must complete"
    );
}

/// One raw HTTP/1.1 keep-alive connection.
struct KeepAlive {
    reader: BufReader<TcpStream>,
}

impl KeepAlive {
    fn open(addr: std::net::SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        Self {
            reader: BufReader::new(stream),
        }
    }

    /// Sends a GET and reads the response body (by Content-Length).
    fn get(&mut self, path: &str) -> String {
        write!(
            self.reader.get_mut(),
            "GET {path} HTTP/1.1\r\nHost: app.test\r\n\r\n"
        )
        .unwrap();
        let mut length = 0;
        loop {
            let mut line = String::new();
            assert!(
                self.reader.read_line(&mut line).unwrap() > 0,
                "connection closed"
            );
            if line == "\r\n" {
                break;
            }
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).unwrap();
        String::from_utf8(body).unwrap()
    }
}
