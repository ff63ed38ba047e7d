//! End-to-end: each timeout measures what its name says — the response-header timeout starts when the body is sent, body chunks may pause only so long either way, and client connections are held to a header and an idle timeout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sluice_testkit::{EchoBackend, RawBackend};
use support::wire::{exchange, read_response, read_until_closed};
use support::{pod_ip, sluice_in_front_of};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_slower_than_the_response_header_timeout_still_succeeds() {
    let backend = RawBackend::start(pod_ip(90)).await.unwrap();
    let (_dir, sluice) =
        sluice_in_front_of(backend.addr(), &["--response-header-timeout", "1s"]).await;
    let mut stream = TcpStream::connect(sluice.listen).await.unwrap();
    stream
        .write_all(
            b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
    // Ten bytes over two seconds: twice the response-header timeout.
    for byte in b"0123456789" {
        tokio::time::sleep(Duration::from_millis(200)).await;
        stream.write_all(&[*byte]).await.unwrap();
    }
    let reply = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    assert_eq!(reply.status(), Some(200), "{}", reply.text);
    assert_eq!(backend.only_request().body, b"0123456789");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stalls_mid_body_gets_408_and_the_backend_no_complete_request() {
    let backend = RawBackend::start(pod_ip(91)).await.unwrap();
    let (_dir, sluice) = sluice_in_front_of(backend.addr(), &["--body-idle-timeout", "1s"]).await;
    for method in ["POST", "PUT"] {
        let started = Instant::now();
        let mut stream = TcpStream::connect(sluice.listen).await.unwrap();
        let head =
            format!("{method} / HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789");
        stream.write_all(head.as_bytes()).await.unwrap();
        let reply = read_until_closed(&mut stream, Duration::from_secs(10)).await;
        assert_eq!(reply.status(), Some(408), "{method}: {}", reply.text);
        assert!(reply.closed);
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "not before the timeout"
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(backend.requests().iter().all(|request| !request.complete));
}

/// A backend that misbehaves after reading a request head: it answers part of a body and
/// stalls, or never reads the request body at all.
#[derive(Clone, Copy)]
enum Stall {
    MidResponse,
    NeverReadsBody,
}

async fn stalling_backend(ip: u8, stall: Stall) -> SocketAddr {
    let listener = TcpListener::bind(SocketAddr::new(pod_ip(ip), 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.is_ok_and(|n| n == 1)
            {
                head.push(byte[0]);
            }
            if let Stall::MidResponse = stall {
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
                    .await;
            }
            held.push(stream);
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_stalls_mid_response_is_cut_off_after_the_body_idle_timeout() {
    // The only pod: no other endpoint could take a retry, so the response is not held
    // (crates/sluice/tests/retry_buffer.rs covers the held case) and streams as it comes.
    let pod = stalling_backend(92, Stall::MidResponse).await;
    let (_dir, sluice) = sluice_in_front_of(pod, &["--body-idle-timeout", "1s"]).await;
    let reply = exchange(
        sluice.listen,
        b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(reply.status(), Some(200));
    assert!(
        reply.closed,
        "the client's connection is closed, not left hanging"
    );
    assert_eq!(reply.body(), "0123456789", "the response is cut short");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_stops_reading_an_upload_gets_504() {
    let pod = stalling_backend(93, Stall::NeverReadsBody).await;
    let (_dir, sluice) = sluice_in_front_of(pod, &["--body-idle-timeout", "1s"]).await;
    let mut stream = TcpStream::connect(sluice.listen).await.unwrap();
    let size = 64 << 20;
    let head = format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {size}\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let upload = tokio::spawn(async move {
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..size / chunk.len() {
            if writer.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let mut received = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), reader.read_to_end(&mut received)).await;
    upload.abort();
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 504"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_a_response_is_cut_off() {
    let pod = EchoBackend::start("endless", pod_ip(94)).await.unwrap();
    let (_dir, sluice) = sluice_in_front_of(pod.addr(), &["--body-idle-timeout", "1s"]).await;
    let mut stream = TcpStream::connect(sluice.listen).await.unwrap();
    stream
        .write_all(b"GET /__testkit/bytes/1000000000000 HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    // Read nothing while sluice's writes back up, for longer than the timeout.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut buffer = vec![0u8; 1 << 20];
    let mut total = 0usize;
    let ended = loop {
        match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(read)) => total += read,
            Err(_) => break false,
        }
        if total > 256 << 20 {
            break false;
        }
    };
    assert!(
        ended,
        "still streaming after {total} bytes: the stalled client was not cut off"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_that_does_not_arrive_in_time_closes_the_connection() {
    let backend = RawBackend::start(pod_ip(95)).await.unwrap();
    let (_dir, sluice) =
        sluice_in_front_of(backend.addr(), &["--client-header-timeout", "1s"]).await;
    // Nothing at all after connecting.
    let silent = exchange(sluice.listen, b"", Duration::from_secs(4)).await;
    assert!(silent.closed, "a silent connection is closed");
    // Half a head.
    let partial = exchange(
        sluice.listen,
        b"GET / HTTP/1.1\r\nHost: a\r\n",
        Duration::from_secs(4),
    )
    .await;
    assert!(partial.closed, "a partial head is cut off");
    // A head sent one byte every 300 ms, slowloris style: 27 bytes take 8 s.
    let mut stream = TcpStream::connect(sluice.listen).await.unwrap();
    let mut cut_off = false;
    for byte in b"GET / HTTP/1.1\r\nHost: a\r\n\r\n" {
        if stream.write_all(&[*byte]).await.is_err() {
            cut_off = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        cut_off,
        "the trickled head was cut off before it was complete"
    );
    assert_eq!(backend.connections(), 0);
}

/// An idle timeout far shorter than the header timeout: an idle spell that starts between two
/// of the supervisor's looks is still noticed on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_timeout_shorter_than_the_header_timeout_closes_on_time() {
    let backend = RawBackend::start(pod_ip(230)).await.unwrap();
    let (_dir, sluice) = sluice_in_front_of(
        backend.addr(),
        &[
            "--client-header-timeout",
            "10s",
            "--client-idle-timeout",
            "1s",
        ],
    )
    .await;
    let mut stream = TcpStream::connect(sluice.listen).await.unwrap();
    // A while into the connection, so that the idle spell starts between two looks.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert!(read_response(&mut stream).await.starts_with("HTTP/1.1 200"));
    let started = std::time::Instant::now();
    let idle = read_until_closed(&mut stream, Duration::from_secs(8)).await;
    let took = started.elapsed();
    assert!(idle.closed && idle.text.is_empty(), "{idle:?}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "closed {took:?} after the response, with a 1 s idle timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_connection_waits_for_the_idle_timeout_not_the_header_timeout() {
    let backend = RawBackend::start(pod_ip(96)).await.unwrap();
    let (_dir, sluice) = sluice_in_front_of(
        backend.addr(),
        &[
            "--client-header-timeout",
            "1s",
            "--client-idle-timeout",
            "3s",
        ],
    )
    .await;
    let mut stream = TcpStream::connect(sluice.listen).await.unwrap();
    let request = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    stream.write_all(request).await.unwrap();
    assert!(read_response(&mut stream).await.starts_with("HTTP/1.1 200"));
    // Idle for longer than the header timeout: the connection stays.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    stream.write_all(request).await.unwrap();
    assert!(read_response(&mut stream).await.starts_with("HTTP/1.1 200"));
    // Idle for longer than the idle timeout: it closes.
    let idle = read_until_closed(&mut stream, Duration::from_secs(6)).await;
    assert!(idle.closed && idle.text.is_empty(), "{idle:?}");
    assert_eq!(backend.requests().len(), 2);
}
