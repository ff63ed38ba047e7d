//! End-to-end: metrics scraped and parsed as Prometheus does, access logs in both formats, the log level at run time, the admin token and the JSON API, through the real binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use sluice_testkit::{get, http_client, send, Reply};
use support::{
    free_port, ingress, pod_ip, pods_on, service, service_with_states, sum_of, wait_until,
    write_manifest, PodState, Sluice,
};

async fn call(sluice: &Sluice, method: Method, path: &str) -> Reply {
    send(
        &http_client(),
        method,
        &sluice.url(path),
        "app.test",
        &[
            ("user-agent", "observability-test/1.0"),
            ("referer", "http://ref.test/"),
        ],
        Bytes::new(),
    )
    .await
    .unwrap()
}

async fn admin(sluice: &Sluice, path: &str, headers: &[(&str, &str)]) -> Reply {
    send(
        &http_client(),
        Method::GET,
        &format!("http://{}{path}", sluice.admin),
        "admin",
        headers,
        Bytes::new(),
    )
    .await
    .unwrap()
}

/// An address on a pod IP where nothing listens (the live pods' port, as one slice lists
/// one port for all): connects are refused.
fn dead_endpoint(ip: u8, port: u16) -> SocketAddr {
    SocketAddr::new(pod_ip(ip), port)
}

fn write_app(dir: &std::path::Path, endpoints: &[(SocketAddr, PodState)]) {
    let documents = [
        ingress("app", "app.test", &[("/", "Prefix", "app", 80)]),
        service_with_states("app", 80, endpoints),
    ];
    write_manifest(dir, "app.yaml", &documents);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_family_moves_with_traffic_retries_ejections_and_publishes() {
    let pods = pods_on(&["live"], 60, 0).await;
    let live = pods[0].addr();
    let dead = dead_endpoint(61, live.port());
    let dir = tempfile::tempdir().unwrap();
    write_app(
        dir.path(),
        &[(live, PodState::Ready), (dead, PodState::Ready)],
    );
    let sluice = Sluice::start(dir.path(), &["--metrics-per-endpoint"]).await;
    let route = [
        ("namespace", "default"),
        ("ingress", "app"),
        ("service", "app"),
        ("port", "80"),
    ];
    for _ in 0..20 {
        assert_eq!(call(&sluice, Method::GET, "/a/b?c=1").await.status, 200);
    }
    assert_eq!(call(&sluice, Method::POST, "/").await.status, 200);
    let scrape = sluice.scrape().await;
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut labels = route.to_vec();
        labels.extend_from_slice(extra);
        labels
    };
    let get_200 = with(&[("method", "GET"), ("code", "200")]);
    assert_eq!(sum_of(&scrape, "sluice_requests_total", &get_200), 20.0);
    let post_200 = with(&[("method", "POST"), ("code", "200")]);
    assert_eq!(sum_of(&scrape, "sluice_requests_total", &post_200), 1.0);
    for histogram in [
        "sluice_request_duration_seconds_count",
        "sluice_request_size_bytes_count",
        "sluice_response_size_bytes_count",
    ] {
        assert_eq!(sum_of(&scrape, histogram, &route), 21.0, "{histogram}");
    }
    assert!(sum_of(&scrape, "sluice_response_size_bytes_sum", &route) > 0.0);
    // The dead endpoint: refused connects, each retried on the live pod, then ejected.
    let refused = [("reason", "refused")];
    assert!(sum_of(&scrape, "sluice_upstream_connect_errors_total", &refused) >= 3.0);
    let retried = [("reason", "connect_error")];
    assert!(sum_of(&scrape, "sluice_retries_total", &retried) >= 3.0);
    assert_eq!(sum_of(&scrape, "sluice_endpoint_ejections_total", &[]), 1.0);
    assert!(sum_of(&scrape, "sluice_upstream_connect_seconds_count", &[]) >= 1.0);
    assert!(sum_of(&scrape, "sluice_upstream_reused_connections_total", &[]) >= 10.0);
    let app = [("namespace", "default"), ("service", "app")];
    let state = |state| {
        let mut labels = app.to_vec();
        labels.push(("state", state));
        sum_of(&scrape, "sluice_endpoints", &labels)
    };
    assert_eq!(
        (
            state("ready"),
            state("serving_terminating"),
            state("ejected")
        ),
        (1.0, 0.0, 1.0)
    );
    // Per endpoint, as asked for with --metrics-per-endpoint.
    let live_text = live.to_string();
    let live_label = [("endpoint", live_text.as_str())];
    assert!(sum_of(&scrape, "sluice_endpoint_attempts_total", &live_label) >= 21.0);
    let dead_text = dead.to_string();
    let dead_label = [("endpoint", dead_text.as_str())];
    assert!(sum_of(&scrape, "sluice_endpoint_failures_total", &dead_label) >= 3.0);
    // Connections, config, build and process.
    let open = [("listener", "http")];
    assert!(sum_of(&scrape, "sluice_open_connections", &open) >= 0.0);
    assert!(scrape.samples.iter().any(
        |s| s.metric == "sluice_open_connections" && s.labels.get("protocol") == Some("http1")
    ));
    assert_eq!(sum_of(&scrape, "sluice_config_generation", &[]), 1.0);
    assert_eq!(sum_of(&scrape, "sluice_config_publishes_total", &[]), 1.0);
    assert_eq!(
        sum_of(&scrape, "sluice_diagnostics", &[("severity", "error")]),
        0.0
    );
    assert_eq!(sum_of(&scrape, "sluice_build_info", &[]), 1.0);
    assert!(sum_of(&scrape, "sluice_compile_seconds_count", &[]) >= 1.0);
    for process in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert!(sum_of(&scrape, process, &[]) > 0.0, "{process}");
    }
    assert!(scrape
        .samples
        .iter()
        .any(|s| s.metric == "process_cpu_seconds_total"));

    // A request that matches no route is counted with empty route labels.
    let unrouted = get(&http_client(), &sluice.url("/"), "nowhere.test")
        .await
        .unwrap();
    assert_eq!(unrouted.status, 404);
    // A new manifest publishes a new table.
    let other = pods_on(&["other"], 62, 0).await;
    write_manifest(
        dir.path(),
        "other.yaml",
        &[
            ingress("other", "other.test", &[("/", "Prefix", "other", 80)]),
            service("other", 80, &[other[0].addr()]),
        ],
    );
    sluice.wait_for_generation_after(1).await;
    let scrape = sluice.scrape().await;
    assert_eq!(sum_of(&scrape, "sluice_config_publishes_total", &[]), 2.0);
    assert_eq!(sum_of(&scrape, "sluice_config_generation", &[]), 2.0);
    let no_route = [("ingress", ""), ("service", ""), ("code", "404")];
    assert_eq!(sum_of(&scrape, "sluice_requests_total", &no_route), 1.0);
}

/// The `sluice_*` families docs/observability.md documents (its metrics section).
fn documented_families() -> Vec<String> {
    let doc = include_str!("../../../docs/observability.md");
    let metrics = doc.split("## Access log").next().unwrap();
    let mut families: Vec<String> = metrics
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|token| {
            token.starts_with("sluice_")
                && token.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        })
        .map(str::to_owned)
        .collect();
    families.sort();
    families.dedup();
    families
}

/// Prometheus's guidance: every family from start. Before any request, a scrape already holds
/// the `# TYPE` line of every documented family, and the manifest directory's watch is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_family_is_exported_before_the_first_request() {
    let pods = pods_on(&["web"], 234, 0).await;
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            ingress("app", "app.test", &[("/", "Prefix", "web", 80)]),
            service("web", 80, &[pods[0].addr()]),
        ],
    );
    let sluice = Sluice::start(dir.path(), &["--metrics-per-endpoint"]).await;
    let body = admin(&sluice, "/metrics", &[]).await.body;
    let families = documented_families();
    assert!(families.len() >= 28, "{families:?}");
    let missing: Vec<&String> = families
        .iter()
        .filter(|family| {
            !body.lines().any(|line| {
                line.strip_prefix("# TYPE ")
                    .and_then(|rest| rest.split(' ').next())
                    == Some(family.as_str())
            })
        })
        .collect();
    assert!(
        missing.is_empty(),
        "not exported before traffic: {missing:?}\n{body}"
    );
    assert!(
        body.lines()
            .any(|line| line == "sluice_watch_up{kind=\"manifests\"} 1"),
        "{body}"
    );
    assert_eq!(pods[0].requests(), 0, "no request was made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_pod_address_is_a_label_without_the_per_endpoint_flag_and_openmetrics_is_negotiated() {
    let pods = pods_on(&["p"], 63, 0).await;
    let dir = tempfile::tempdir().unwrap();
    write_app(dir.path(), &[(pods[0].addr(), PodState::Ready)]);
    let sluice = Sluice::start(dir.path(), &[]).await;
    assert_eq!(call(&sluice, Method::GET, "/").await.status, 200);
    let text = admin(&sluice, "/metrics", &[]).await;
    assert_eq!(
        text.headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert!(!text.body.contains(&pods[0].addr().ip().to_string()));
    assert!(!text.body.contains("# EOF"));
    assert!(text.body.contains("# TYPE sluice_requests_total counter"));
    let open = admin(
        &sluice,
        "/metrics",
        &[(
            "accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        )],
    )
    .await;
    assert!(open.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/openmetrics-text"));
    assert!(open.body.ends_with("# EOF\n"));
    assert!(open.body.contains("# TYPE sluice_requests counter"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_access_log_has_one_line_per_request_with_every_field() {
    let pods = pods_on(&["pod"], 64, 0).await;
    let dir = tempfile::tempdir().unwrap();
    write_app(dir.path(), &[(pods[0].addr(), PodState::Ready)]);
    let log = dir.path().join("access.log");
    let log_flag = log.to_str().unwrap();
    let sluice = Sluice::start(
        dir.path(),
        &["--access-log", "json", "--access-log-file", log_flag],
    )
    .await;
    let reply = call(&sluice, Method::GET, "/items?page=2").await;
    assert_eq!(reply.status, 200);
    let request_id = reply.headers["x-request-id"].to_str().unwrap().to_owned();
    let line = wait_for_lines(&log, 1).await.remove(0);
    let entry: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
    assert_eq!(entry["client"], "127.0.0.1");
    assert_eq!(entry["method"], "GET");
    assert_eq!(entry["host"], "app.test");
    assert_eq!(entry["path"], "/items?page=2");
    assert_eq!(entry["protocol"], "HTTP/1.1");
    assert_eq!(entry["status"], 200);
    assert_eq!(entry["upstream"], pods[0].addr().to_string());
    assert_eq!(entry["upstream_status"], 200);
    assert_eq!(entry["attempts"], 1);
    assert_eq!(entry["route"], "default/app");
    assert_eq!(entry["request_id"], request_id);
    assert_eq!(entry["user_agent"], "observability-test/1.0");
    assert_eq!(entry["referer"], "http://ref.test/");
    assert_eq!(entry["request_bytes"], 0);
    assert_eq!(
        entry["response_bytes"].as_u64().unwrap(),
        reply.body.len() as u64
    );
    assert!(entry["duration_seconds"].as_f64().unwrap() > 0.0);
    assert!(entry["time"].as_str().unwrap().ends_with('Z'));
    assert!(entry["tls_version"].is_null());

    // A request no endpoint answers: the attempts, and the endpoint tried last.
    let port = free_port();
    let dead = [dead_endpoint(74, port), dead_endpoint(75, port)];
    write_manifest(
        dir.path(),
        "dead.yaml",
        &[
            ingress("dead", "dead.test", &[("/", "Prefix", "dead", 80)]),
            service("dead", 80, &dead),
        ],
    );
    sluice.wait_for_generation_after(1).await;
    let failed = get(&http_client(), &sluice.url("/"), "dead.test")
        .await
        .unwrap();
    assert_eq!(failed.status, 502);
    let line = wait_for_lines(&log, 2).await.remove(1);
    let entry: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(entry["status"], 502);
    assert_eq!(entry["attempts"], 2, "{line}");
    let last = entry["upstream"].as_str().unwrap().to_owned();
    assert!(dead.iter().any(|addr| addr.to_string() == last), "{line}");
    assert!(entry["upstream_status"].is_null());
    assert_eq!(entry["route"], "default/dead");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_combined_access_log_is_nginx_combined_with_sluice_fields_appended() {
    let pods = pods_on(&["pod"], 65, 0).await;
    let dir = tempfile::tempdir().unwrap();
    write_app(dir.path(), &[(pods[0].addr(), PodState::Ready)]);
    let log = dir.path().join("access.log");
    let sluice = Sluice::start(
        dir.path(),
        &[
            "--access-log",
            "combined",
            "--access-log-file",
            log.to_str().unwrap(),
        ],
    )
    .await;
    let reply = call(&sluice, Method::GET, "/a?b=1").await;
    let request_id = reply.headers["x-request-id"].to_str().unwrap().to_owned();
    let line = wait_for_lines(&log, 1).await.remove(0);
    let fields = parse_combined(&line);
    assert_eq!(fields.remote_addr, "127.0.0.1");
    assert_eq!(fields.request, "GET /a?b=1 HTTP/1.1");
    assert_eq!(fields.status, "200");
    assert_eq!(fields.body_bytes, reply.body.len().to_string());
    assert_eq!(fields.referer, "http://ref.test/");
    assert_eq!(fields.user_agent, "observability-test/1.0");
    let upstream = pods[0].addr().to_string();
    let expected_extras = [
        "0",
        "?",
        "[default/app]",
        upstream.as_str(),
        "200",
        "1",
        request_id.as_str(),
        "app.test",
        "-",
        "-",
    ];
    let extras: Vec<&str> = fields.extras.split(' ').collect();
    assert_eq!(extras.len(), expected_extras.len(), "{line}");
    for (got, want) in extras.iter().zip(expected_extras) {
        if want == "?" {
            assert!(got.parse::<f64>().is_ok(), "request time {got:?}");
        } else {
            assert_eq!(*got, want, "{line}");
        }
    }
    // nginx's $time_local: [30/Nov/2026:22:11:10 +0000]
    assert_eq!(fields.time.len(), 26, "{}", fields.time);
    assert!(fields.time.ends_with(" +0000"));
}

/// The fields of an nginx `combined` line, parsed as log parsers do.
struct Combined<'l> {
    remote_addr: &'l str,
    time: &'l str,
    request: &'l str,
    status: &'l str,
    body_bytes: &'l str,
    referer: &'l str,
    user_agent: &'l str,
    extras: &'l str,
}

fn parse_combined(line: &str) -> Combined<'_> {
    let (remote_addr, rest) = line.split_once(" - - [").expect("remote_addr - -");
    let (time, rest) = rest.split_once("] \"").expect("[time]");
    let (request, rest) = rest.split_once("\" ").expect("\"request\"");
    let (status, rest) = rest.split_once(' ').expect("status");
    let (body_bytes, rest) = rest.split_once(" \"").expect("bytes");
    let (referer, rest) = rest.split_once("\" \"").expect("\"referer\"");
    let (user_agent, extras) = rest.split_once("\" ").expect("\"user agent\"");
    Combined {
        remote_addr,
        time,
        request,
        status,
        body_bytes,
        referer,
        user_agent,
        extras,
    }
}

async fn wait_for_lines(path: &std::path::Path, count: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= count {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{} lines in {text:?}",
            lines.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_access_log_drops_lines_and_never_delays_a_request() {
    let pods = pods_on(&["pod"], 66, 0).await;
    let dir = tempfile::tempdir().unwrap();
    write_app(dir.path(), &[(pods[0].addr(), PodState::Ready)]);
    // A FIFO that the test opens but never reads: once its pipe buffer is full, every write
    // of the access-log writer blocks for good.
    let fifo = dir.path().join("stuck.log");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::File::open(fifo).unwrap())
    };
    let sluice = Sluice::start(
        dir.path(),
        &[
            "--access-log",
            "json",
            "--access-log-file",
            fifo.to_str().unwrap(),
            "--access-log-buffer",
            "32",
        ],
    )
    .await;
    let _held_open_unread = reader.join().unwrap();
    let client = http_client();
    let mut slowest = Duration::ZERO;
    for _ in 0..1_500 {
        let started = Instant::now();
        let reply = get(&client, &sluice.url("/"), "app.test").await.unwrap();
        assert_eq!(reply.status, 200);
        slowest = slowest.max(started.elapsed());
    }
    let dropped = sluice.metric("sluice_access_log_dropped_total").await;
    assert!(dropped > 1_000.0, "only {dropped} lines dropped");
    assert!(
        slowest < Duration::from_secs(1),
        "a request took {slowest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_level_changes_at_run_time_and_json_logs_parse() {
    let pods = pods_on(&["pod"], 67, 0).await;
    let dir = tempfile::tempdir().unwrap();
    write_app(dir.path(), &[(pods[0].addr(), PodState::Ready)]);
    let sluice = Sluice::start(dir.path(), &["--log-format", "json", "--log-level", "info"]).await;
    let client = http_client();
    let url = format!("http://{}/log-level", sluice.admin);
    let current = get(&client, &url, "admin").await.unwrap();
    assert_eq!(current.body.trim(), "info");
    let put = |level: &'static str| {
        send(
            &client,
            Method::PUT,
            &url,
            "admin",
            &[],
            Bytes::from_static(level.as_bytes()),
        )
    };
    assert_eq!(put("debug").await.unwrap().status, 200);
    assert_eq!(
        get(&client, &url, "admin").await.unwrap().body.trim(),
        "debug"
    );
    // At debug, a request answered by the proxy itself is logged.
    let missing = get(&client, &sluice.url("/"), "nowhere.test")
        .await
        .unwrap();
    assert_eq!(missing.status, 404);
    wait_until("a debug line", Duration::from_secs(5), || async {
        sluice.log().contains("answered by proxy")
    })
    .await;
    let refused = put("no such level[").await.unwrap();
    assert_eq!(refused.status, 400);
    assert_eq!(
        get(&client, &url, "admin").await.unwrap().body.trim(),
        "debug"
    );
    for line in sluice.log().lines().filter(|line| !line.is_empty()) {
        let entry: serde_json::Value = serde_json::from_str(line).expect("a JSON log line");
        assert!(entry["level"].is_string(), "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_token_guards_everything_but_the_probes() {
    let pods = pods_on(&["pod"], 68, 0).await;
    let dir = tempfile::tempdir().unwrap();
    write_app(dir.path(), &[(pods[0].addr(), PodState::Ready)]);
    let sluice = Sluice::start(dir.path(), &["--admin-token", "s3cret-token"]).await;
    for path in ["/healthz", "/readyz"] {
        assert_eq!(admin(&sluice, path, &[]).await.status, 200, "{path}");
    }
    for path in [
        "/",
        "/metrics",
        "/api/routes",
        "/api/backends",
        "/api/status",
        "/api/diagnostics",
        "/log-level",
    ] {
        let refused = admin(&sluice, path, &[]).await;
        assert_eq!(refused.status, 401, "{path}");
        assert_eq!(
            refused.headers["www-authenticate"],
            "Bearer realm=\"sluice\""
        );
        let wrong = admin(&sluice, path, &[("authorization", "Bearer s3cret-tokeN")]).await;
        assert_eq!(wrong.status, 401, "{path}");
        let allowed = admin(&sluice, path, &[("authorization", "Bearer s3cret-token")]).await;
        assert_eq!(allowed.status, 200, "{path}");
    }
    // A browser opens the dashboard by address: the page takes the token as ?token=.
    assert_eq!(
        admin(&sluice, "/?token=s3cret-token", &[]).await.status,
        200
    );
    assert_eq!(
        admin(&sluice, "/api/routes?token=s3cret-token", &[])
            .await
            .status,
        401
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_api_reports_backends_endpoint_states_and_diagnostics() {
    // One port for both, as one slice lists one port for all its endpoints.
    let pods = pods_on(&["ready", "leaving"], 70, free_port()).await;
    let dir = tempfile::tempdir().unwrap();
    write_app(
        dir.path(),
        &[
            (pods[0].addr(), PodState::Ready),
            (pods[1].addr(), PodState::Draining),
        ],
    );
    write_manifest(
        dir.path(),
        "bad.yaml",
        &[ingress(
            "bad",
            "bad.test",
            &[("/", "Prefix", "missing", 80)],
        )],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    assert_eq!(call(&sluice, Method::GET, "/").await.status, 200);
    let backends: serde_json::Value =
        serde_json::from_str(&admin(&sluice, "/api/backends", &[]).await.body).unwrap();
    let app = backends["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["id"] == "default/app:80")
        .expect("the app backend");
    assert_eq!(app["mode"], "endpoints");
    assert_eq!(app["service"], "app");
    assert_eq!(app["policy"]["balancer"], "round_robin");
    let state_of = |addr: SocketAddr| {
        app["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["address"] == addr.to_string())
            .map(|e| e["state"].as_str().unwrap().to_owned())
    };
    assert_eq!(state_of(pods[0].addr()).as_deref(), Some("ready"), "{app}");
    assert_eq!(
        state_of(pods[1].addr()).as_deref(),
        Some("serving_terminating"),
        "{app}"
    );
    let diagnostics: serde_json::Value =
        serde_json::from_str(&admin(&sluice, "/api/diagnostics", &[]).await.body).unwrap();
    let found = diagnostics["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["object"].as_str().unwrap_or_default().contains("bad"));
    assert!(found, "{diagnostics}");
    let status: serde_json::Value = sluice.status().await;
    assert!(status["requests"]["total"].as_u64().unwrap() >= 1);
    let page = admin(&sluice, "/", &[]).await;
    assert_eq!(page.headers["content-type"], "text/html; charset=utf-8");
    assert!(page.body.contains("<title>"));
    assert!(!page.body.contains("http://") || !page.body.contains("<script src=\"http"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_handshakes_are_counted_by_result() {
    let pods = pods_on(&["pod"], 72, 0).await;
    let dir = tempfile::tempdir().unwrap();
    write_app(dir.path(), &[(pods[0].addr(), PodState::Ready)]);
    let sluice = Sluice::start(dir.path(), &[]).await;
    // The default (self-signed) certificate: curl -k completes the handshake.
    let url = format!("https://127.0.0.1:{}/", sluice.listen_tls.port());
    let (code, _) = support::tls::curl(&["-k", "-o", "/dev/null", &url]);
    assert_eq!(code, 0);
    // Not TLS at all.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(sluice.listen_tls)
            .await
            .unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest).await;
    }
    // rustls closes the socket before the failure is counted, so the count may land just
    // after the client sees the connection end.
    let handshakes = |result| {
        let sluice = &sluice;
        async move {
            sluice
                .metric_sum(
                    "sluice_tls_handshakes_total",
                    &[("listener", "https"), ("result", result)],
                )
                .await
        }
    };
    wait_until(
        "the failed handshake counted",
        Duration::from_secs(5),
        || async { handshakes("failure").await >= 1.0 },
    )
    .await;
    assert_eq!(
        (handshakes("success").await, handshakes("failure").await),
        (1.0, 1.0)
    );
}
