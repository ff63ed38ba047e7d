//! The response retry buffer through the real binary: a pod that dies mid-body costs a retry on another pod, while large, event-stream, chunked and non-idempotent responses stream as they come.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full};
use sluice_testkit::{http_client, pattern, EchoBackend};
use support::{annotated_ingress, ingress, pod_ip, service, write_manifest, Sluice};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The size every test response declares.
const LENGTH: usize = 1000;

/// A pod that answers every request with `Content-Length: 1000` and the first 500 bytes of
/// the pattern, then dies: the connection is reset (RST, as a killed process's sockets are).
/// Counts the requests it cut.
async fn dying_pod(ip: u8) -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind(SocketAddr::new(pod_ip(ip), 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let cut = Arc::new(AtomicU64::new(0));
    let counted = cut.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n")
                    && stream.read(&mut byte).await.is_ok_and(|n| n == 1)
                {
                    head.push(byte[0]);
                }
                let declared = head
                    .windows(16)
                    .position(|w| w.eq_ignore_ascii_case(b"content-length: "))
                    .map(|at| {
                        let digits = head[at + 16..]
                            .iter()
                            .take_while(|b| b.is_ascii_digit())
                            .map(|b| char::from(*b))
                            .collect::<String>();
                        digits.parse::<usize>().unwrap_or(0)
                    })
                    .unwrap_or(0);
                let mut body = vec![0u8; declared];
                let _ = stream.read_exact(&mut body).await;
                let mut answer =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {LENGTH}\r\n\r\n").into_bytes();
                answer.extend_from_slice(&pattern(LENGTH / 2));
                counted.fetch_add(1, Ordering::SeqCst);
                let _ = stream.write_all(&answer).await;
                let _ = stream.flush().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                let _ = stream.set_zero_linger();
                drop(stream);
            });
        }
    });
    (addr, cut)
}

/// What curl got: its exit code (18 is "transfer closed with bytes remaining"), the status and
/// the body.
struct Fetched {
    exit: Option<i32>,
    status: String,
    body: Vec<u8>,
}

impl Fetched {
    fn is_whole(&self) -> bool {
        self.exit == Some(0) && self.status == "200" && self.body == pattern(LENGTH)
    }

    fn is_truncated(&self) -> bool {
        self.exit == Some(18) && self.status == "200" && self.body.len() < LENGTH
    }
}

/// curl `method url` with Host `host` and any extra arguments.
async fn curl(url: String, host: &str, extra: &[&str]) -> Fetched {
    let output_dir = tempfile::tempdir().unwrap();
    let body_file = output_dir.path().join("body");
    let mut command = std::process::Command::new("curl");
    command
        .args(["-sS", "--max-time", "10", "-H"])
        .arg(format!("Host: {host}"))
        .args(["-o"])
        .arg(&body_file)
        .args(["-w", "%{http_code}"])
        .args(extra)
        .arg(url);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("curl runs");
    Fetched {
        exit: output.status.code(),
        status: String::from_utf8_lossy(&output.stdout).into_owned(),
        body: std::fs::read(&body_file).unwrap_or_default(),
    }
}

/// A Service `app` of these pods behind Ingresses for `held.test` (with `annotations`) and
/// `plain.test`, and sluice with `flags`.
async fn sluice_for(
    pods: &[SocketAddr],
    annotations: &[(&str, &str)],
    flags: &[&str],
) -> (tempfile::TempDir, Sluice) {
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            annotated_ingress(
                "held",
                "held.test",
                &[("/", "Prefix", "app", 80)],
                annotations,
            ),
            ingress("plain", "plain.test", &[("/", "Prefix", "app", 80)]),
            service("app", 80, pods),
        ],
    );
    let sluice = Sluice::start(dir.path(), flags).await;
    (dir, sluice)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_dies_mid_body_costs_a_retry_not_a_truncated_response() {
    let (dying, cut) = dying_pod(180).await;
    let whole = EchoBackend::start("whole", pod_ip(181)).await.unwrap();
    let (_dir, sluice) = sluice_for(&[dying, whole.addr()], &[], &[]).await;
    let url = sluice.url(&format!("/__testkit/bytes/{LENGTH}"));
    for round in 0..8 {
        let fetched = curl(url.clone(), "plain.test", &[]).await;
        assert!(
            fetched.is_whole(),
            "GET {round}: exit {:?}, status {}, {} bytes",
            fetched.exit,
            fetched.status,
            fetched.body.len()
        );
    }
    let cuts = cut.load(Ordering::SeqCst);
    assert!(cuts >= 1, "the dying pod was tried");
    assert!(
        cuts <= 4,
        "three cut responses in a row eject the pod ({cuts} were cut)"
    );
    let retried = sluice
        .metric_sum("sluice_retries_total", &[("reason", "response_cut")])
        .await;
    assert_eq!(retried, cuts as f64, "each cut response was retried");
    if cuts >= 3 {
        assert!(sluice.metric("sluice_endpoint_ejections_total").await >= 1.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_buffer_off_the_client_gets_the_truncated_response_as_before() {
    let (dying, cut) = dying_pod(182).await;
    let whole = EchoBackend::start("whole", pod_ip(183)).await.unwrap();
    // Off for the proxy, back on for held.test by its annotation.
    let (_dir, sluice) = sluice_for(
        &[dying, whole.addr()],
        &[("sluice.dev/response-retry-buffer", "64k")],
        &["--response-retry-buffer", "0"],
    )
    .await;
    let url = sluice.url(&format!("/__testkit/bytes/{LENGTH}"));
    let mut truncated = 0;
    for round in 0..4 {
        let fetched = curl(url.clone(), "plain.test", &[]).await;
        assert!(
            fetched.is_whole() || fetched.is_truncated(),
            "GET {round}: exit {:?}, status {}",
            fetched.exit,
            fetched.status
        );
        truncated += u64::from(fetched.is_truncated());
    }
    assert!(truncated >= 1, "round robin reached the dying pod");
    assert_eq!(truncated, cut.load(Ordering::SeqCst), "no cut was retried");
    for round in 0..4 {
        let fetched = curl(url.clone(), "held.test", &[]).await;
        assert!(fetched.is_whole(), "held.test GET {round}");
    }
    assert!(
        cut.load(Ordering::SeqCst) > truncated,
        "held.test reached it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_without_idempotency_key_is_neither_held_nor_retried() {
    let (dying, cut) = dying_pod(184).await;
    let whole = EchoBackend::start("whole", pod_ip(185)).await.unwrap();
    let (_dir, sluice) = sluice_for(&[dying, whole.addr()], &[], &[]).await;
    let url = sluice.url(&format!("/__testkit/bytes/{LENGTH}"));
    let post = [
        "-X",
        "POST",
        "--data-binary",
        "sixty-four bytes of form data",
    ];
    let mut truncated = 0;
    for round in 0..4 {
        let fetched = curl(url.clone(), "plain.test", &post).await;
        assert!(
            fetched.is_whole() || fetched.is_truncated(),
            "POST {round}: exit {:?}, status {}",
            fetched.exit,
            fetched.status
        );
        truncated += u64::from(fetched.is_truncated());
    }
    assert!(truncated >= 1, "round robin reached the dying pod");
    assert_eq!(whole.requests() + truncated, 4, "no POST was sent twice");
    // With an Idempotency-Key the same POST may go again, so it is held and retried.
    let keyed = [&post[..], &["-H", "Idempotency-Key: 7f3a"]].concat();
    let cut_before = cut.load(Ordering::SeqCst);
    for round in 0..4 {
        let fetched = curl(url.clone(), "plain.test", &keyed).await;
        assert!(fetched.is_whole(), "keyed POST {round}");
    }
    assert!(
        cut.load(Ordering::SeqCst) > cut_before,
        "the dying pod was tried"
    );
}

/// When the first body byte of `method path` reached the client, from the request's start,
/// and the whole body.
async fn first_byte(sluice: &Sluice, method: http::Method, path: &str) -> (Duration, Bytes) {
    let client = http_client();
    let request = http::Request::builder()
        .method(method)
        .uri(sluice.url(path))
        .header("host", "plain.test")
        .body(Either::Left(Full::new(Bytes::from_static(b"form"))))
        .unwrap();
    let started = Instant::now();
    let response = client.request(request).await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    let mut body = response.into_body();
    let mut received = Vec::new();
    let mut first = None;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            first.get_or_insert_with(|| started.elapsed());
            received.extend_from_slice(&data);
        }
    }
    (first.unwrap(), Bytes::from(received))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_event_stream_chunked_and_post_responses_stream_before_the_pod_has_finished() {
    let pods = [
        EchoBackend::start("one", pod_ip(186)).await.unwrap(),
        EchoBackend::start("two", pod_ip(187)).await.unwrap(),
    ];
    let addrs: Vec<_> = pods.iter().map(EchoBackend::addr).collect();
    let (_dir, sluice) = sluice_for(&addrs, &[], &[]).await;
    let pause = 2000;
    let streamed = [
        (http::Method::GET, 100_000, ""),
        (http::Method::GET, 1000, "&type=text%2Fevent-stream"),
        (http::Method::GET, 1000, "&chunked"),
        (http::Method::POST, 1000, ""),
    ];
    for (method, length, extra) in streamed {
        let path = format!("/__testkit/halves/{length}?pause={pause}{extra}");
        let (first, body) = first_byte(&sluice, method.clone(), &path).await;
        assert!(
            first < Duration::from_millis(pause / 2),
            "{method} {path}: the first bytes came after {first:?}, not before the pod finished"
        );
        assert_eq!(body, pattern(length), "{method} {path}");
    }
    // The control: a small GET is held until its last byte has arrived.
    let path = format!("/__testkit/halves/1000?pause={pause}");
    let (first, body) = first_byte(&sluice, http::Method::GET, &path).await;
    assert!(
        first >= Duration::from_millis(pause * 9 / 10),
        "GET {path} was held, so its first byte came with its last ({first:?})"
    );
    assert_eq!(body, pattern(1000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_total_cap_responses_stream_and_the_counter_says_so() {
    let pods = [
        EchoBackend::start("one", pod_ip(188)).await.unwrap(),
        EchoBackend::start("two", pod_ip(189)).await.unwrap(),
    ];
    let addrs: Vec<_> = pods.iter().map(EchoBackend::addr).collect();
    let flags = [
        "--response-retry-buffer",
        "64k",
        "--response-retry-buffer-total",
        "100k",
    ];
    let (_dir, sluice) = sluice_for(&addrs, &[], &flags).await;
    assert_eq!(
        sluice
            .metric("sluice_response_retry_buffer_full_total")
            .await,
        0.0
    );
    let pause = 2000;
    let path = format!("/__testkit/halves/60000?pause={pause}");
    let calls = (0..3).map(|_| first_byte(&sluice, http::Method::GET, &path));
    let answers = futures_util::future::join_all(calls).await;
    let mut held = 0;
    for (first, body) in &answers {
        assert_eq!(body, &pattern(60_000));
        if *first >= Duration::from_millis(pause * 9 / 10) {
            held += 1;
        } else {
            assert!(*first < Duration::from_millis(pause / 2), "{first:?}");
        }
    }
    assert_eq!(held, 1, "60 KB fits the 100 KB cap once: {answers:?}");
    assert_eq!(
        sluice
            .metric("sluice_response_retry_buffer_full_total")
            .await,
        2.0
    );
}
