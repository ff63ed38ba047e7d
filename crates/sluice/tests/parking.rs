//! End-to-end: an idle HTTP/1.1 keep-alive connection parks (it gives back hyper's buffers and waits on its socket alone) and serves its next request as if it had never stopped, under the same header, idle and shutdown rules.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use support::wire::{read_response, read_until_closed};
use support::{raw_backend_behind_sluice, wait_until, Sluice};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const GET: &[u8] = b"GET /parked HTTP/1.1\r\nHost: a\r\n\r\n";

async fn parked(sluice: &Sluice) -> f64 {
    sluice
        .metric_sum("sluice_parked_connections", &[("listener", "http")])
        .await
}

async fn wait_parked(sluice: &Sluice, count: f64) {
    wait_until("the connections park", Duration::from_secs(5), || async {
        parked(sluice).await == count
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_parks_and_serves_its_next_request() {
    let (backend, _dir, sluice) = raw_backend_behind_sluice(120, &[]).await;
    let mut stream = TcpStream::connect(sluice.listen).await.unwrap();
    stream.write_all(GET).await.unwrap();
    assert!(read_response(&mut stream).await.starts_with("HTTP/1.1 200"));
    wait_parked(&sluice, 1.0).await;
    let open = sluice
        .metric_sum(
            "sluice_open_connections",
            &[("listener", "http"), ("protocol", "http1")],
        )
        .await;
    assert_eq!(open, 1.0, "a parked connection is still open");
    for round in 0..3 {
        // The same socket, parked since the last answer, takes another request.
        stream.write_all(GET).await.unwrap();
        let reply = read_response(&mut stream).await;
        assert!(reply.starts_with("HTTP/1.1 200"), "round {round}: {reply}");
        wait_parked(&sluice, 1.0).await;
    }
    let requests = backend.requests();
    assert_eq!(requests.len(), 4);
    assert!(requests
        .iter()
        .all(|request| request.request_line() == "GET /parked HTTP/1.1"));
    drop(stream);
    wait_parked(&sluice, 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_all_answered_before_the_connection_parks() {
    let (backend, _dir, sluice) = raw_backend_behind_sluice(121, &[]).await;
    let mut stream = TcpStream::connect(sluice.listen).await.unwrap();
    stream
        .write_all(b"GET /one HTTP/1.1\r\nHost: a\r\n\r\nGET /two HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert!(read_response(&mut stream).await.starts_with("HTTP/1.1 200"));
    assert!(read_response(&mut stream).await.starts_with("HTTP/1.1 200"));
    wait_parked(&sluice, 1.0).await;
    let lines: Vec<String> = backend
        .requests()
        .iter()
        .map(|request| request.request_line().to_owned())
        .collect();
    assert_eq!(lines, ["GET /one HTTP/1.1", "GET /two HTTP/1.1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_connection_times_its_next_head_from_the_first_byte() {
    let (backend, _dir, sluice) = raw_backend_behind_sluice(
        122,
        &[
            "--client-header-timeout",
            "1s",
            "--client-idle-timeout",
            "20s",
        ],
    )
    .await;
    let mut stream = TcpStream::connect(sluice.listen).await.unwrap();
    stream.write_all(GET).await.unwrap();
    assert!(read_response(&mut stream).await.starts_with("HTTP/1.1 200"));
    wait_parked(&sluice, 1.0).await;
    // Parked for longer than the header timeout: that costs nothing.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stream.write_all(b"GET /late HTTP/1.1\r\nHo").await.unwrap();
    let sent = Instant::now();
    let cut = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    let took = sent.elapsed();
    assert!(
        cut.closed,
        "a partial head after parking is cut off: {cut:?}"
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "cut off {took:?} after its first byte, with a 1 s header timeout"
    );
    assert_eq!(backend.requests().len(), 1, "the partial head went nowhere");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_timeout_runs_from_the_last_response_across_parking() {
    let (_backend, _dir, sluice) =
        raw_backend_behind_sluice(123, &["--client-idle-timeout", "2s"]).await;
    let mut stream = TcpStream::connect(sluice.listen).await.unwrap();
    stream.write_all(GET).await.unwrap();
    assert!(read_response(&mut stream).await.starts_with("HTTP/1.1 200"));
    let answered = Instant::now();
    let idle = read_until_closed(&mut stream, Duration::from_secs(8)).await;
    let took = answered.elapsed();
    assert!(idle.closed && idle.text.is_empty(), "{idle:?}");
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(4),
        "closed {took:?} after the response, with a 2 s idle timeout"
    );
    wait_parked(&sluice, 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_closes_parked_connections_at_once() {
    let (_backend, _dir, mut sluice) =
        raw_backend_behind_sluice(124, &["--shutdown-delay", "0s", "--grace-period", "20s"]).await;
    let mut stream = TcpStream::connect(sluice.listen).await.unwrap();
    stream.write_all(GET).await.unwrap();
    assert!(read_response(&mut stream).await.starts_with("HTTP/1.1 200"));
    wait_parked(&sluice, 1.0).await;
    let stopped = Instant::now();
    sluice.terminate();
    let closed = read_until_closed(&mut stream, Duration::from_secs(10)).await;
    assert!(closed.closed && closed.text.is_empty(), "{closed:?}");
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "a parked connection does not wait for the grace period: {:?}",
        stopped.elapsed()
    );
    assert_eq!(sluice.wait_exit(Duration::from_secs(10)).await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2c_connection_is_never_parked() {
    let (backend, _dir, sluice) = raw_backend_behind_sluice(125, &[]).await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let uri: http::Uri = sluice.url("/h2c").parse().unwrap();
    for _ in 0..2 {
        let response = client.get(uri.clone()).await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.version(), http::Version::HTTP_2);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(parked(&sluice).await, 0.0);
    }
    assert_eq!(backend.requests().len(), 2);
}
