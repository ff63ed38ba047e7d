//! End-to-end: 100 MB up and 100 MB down through sluice, streamed, with sluice's memory staying small.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use http_body_util::{BodyExt, Either};
use sluice_testkit::{http_client, EchoBackend, PatternBody};
use support::{pod_ip, write_catch_all, Sluice};

const SIZE: u64 = 100 * 1024 * 1024;
const RSS_LIMIT: u64 = 50 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_100_mb_each_way_without_buffering() {
    let pod = EchoBackend::start("bulk", pod_ip(90)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_catch_all(dir.path(), "bulk", &[pod.addr()]);
    let sluice = Sluice::start(dir.path(), &[]).await;
    let client = http_client();

    let upload = http::Request::post(sluice.url("/__testkit/upload"))
        .header("host", "bulk.test")
        .body(Either::Right(PatternBody::new(SIZE)))
        .unwrap();
    let response = client.request(upload).await.unwrap();
    assert_eq!(response.status(), 200);
    let received = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        String::from_utf8_lossy(&received).trim(),
        SIZE.to_string(),
        "the backend must receive every byte"
    );

    let download = http::Request::get(sluice.url(&format!("/__testkit/bytes/{SIZE}")))
        .header("host", "bulk.test")
        .body(Either::Left(Default::default()))
        .unwrap();
    let response = client.request(download).await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut downloaded = 0u64;
    while let Some(frame) = body.frame().await {
        if let Some(data) = frame.unwrap().data_ref() {
            downloaded += data.len() as u64;
        }
    }
    assert_eq!(downloaded, SIZE, "the client must receive every byte");

    let peak = sluice.peak_rss();
    eprintln!(
        "sluice peak RSS after 2 x 100 MB: {:.1} MiB",
        peak as f64 / (1024.0 * 1024.0)
    );
    assert!(
        peak < RSS_LIMIT,
        "sluice peaked at {} MiB of RSS; bodies must stream, not buffer",
        peak / (1024 * 1024)
    );
}

/// What an endpoint that answers uploads early received, one entry per connection.
type Connections = std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>;

/// An endpoint that answers `200 ok` as soon as a request head has arrived, without reading
/// the body (as nginx's `return` does), and records every byte each connection brings.
async fn early_answering_endpoint(ip: std::net::IpAddr) -> (std::net::SocketAddr, Connections) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Connections::default();
    let record = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let index = {
                    let mut all = record.lock().unwrap();
                    all.push(Vec::new());
                    all.len() - 1
                };
                let mut answered = 0;
                let mut buffer = [0u8; 16384];
                while let Ok(read) = stream.read(&mut buffer).await {
                    if read == 0 {
                        break;
                    }
                    let heads = {
                        let mut all = record.lock().unwrap();
                        all[index].extend_from_slice(&buffer[..read]);
                        all[index].windows(4).filter(|w| w == b"\r\n\r\n").count()
                    };
                    for _ in answered..heads {
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if stream.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                    answered = answered.max(heads);
                }
            });
        }
    });
    (addr, connections)
}

/// An endpoint that answers an upload before it has read the body (nginx's `return`) gets
/// the whole body all the same, and nothing else in it: the client's upload is taken whole,
/// its connection carries its next request, and a request after it on the endpoint's
/// connection starts where the body ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_before_the_upload_has_gone_still_gets_the_whole_body_and_nothing_more() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (addr, connections) = early_answering_endpoint(pod_ip(92)).await;
    let dir = tempfile::tempdir().unwrap();
    write_catch_all(dir.path(), "early", &[addr]);
    // One worker: one pool, which the next request takes the connection from.
    let sluice = Sluice::start(dir.path(), &["--workers", "1"]).await;

    // A streamed upload: the head and a first piece, the rest only after the answer.
    let length = 1_000_000;
    let mut client = tokio::net::TcpStream::connect(sluice.listen).await.unwrap();
    let head =
        format!("POST /upload HTTP/1.1\r\nhost: early.test\r\ncontent-length: {length}\r\n\r\n");
    client.write_all(head.as_bytes()).await.unwrap();
    client.write_all(&vec![b'x'; 1000]).await.unwrap();
    let answer = read_answer(&mut client).await;
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    client.write_all(&vec![b'x'; length - 1000]).await.unwrap();

    // The same client connection carries the next request.
    client
        .write_all(b"GET /next HTTP/1.1\r\nhost: early.test\r\n\r\n")
        .await
        .unwrap();
    let answer = read_answer(&mut client).await;
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");

    // What sluice wrote may still be on its way through the sockets.
    let arrived = |connections: &Connections| {
        let all = connections.lock().unwrap();
        let bytes: usize = all.iter().map(Vec::len).sum();
        bytes >= head.len() + length + "GET /next HTTP/1.1\r\n\r\n".len()
    };
    let limit = std::time::Duration::from_secs(10);
    support::wait_until("the endpoint to receive both requests", limit, || {
        std::future::ready(arrived(&connections))
    })
    .await;
    let connections = connections.lock().unwrap().clone();
    let mut gets = 0;
    for (index, bytes) in connections.iter().enumerate() {
        let mut rest = &bytes[..];
        if rest.starts_with(b"POST /upload ") {
            let head_end = rest.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            let body = &rest[head_end..(head_end + length).min(rest.len())];
            assert_eq!(
                body.len(),
                length,
                "connection {index}: the body came short"
            );
            assert!(
                body.iter().all(|&b| b == b'x'),
                "connection {index}: not the body"
            );
            rest = &rest[head_end + length..];
        }
        if rest.starts_with(b"GET /next ") {
            gets += 1;
        } else {
            let text = String::from_utf8_lossy(rest);
            assert!(
                rest.is_empty(),
                "connection {index} carried more: {text:.200}"
            );
        }
    }
    assert_eq!(
        gets, 1,
        "the GET must reach the endpoint once, at a request's start"
    );

    /// Reads one `200 ok` answer (or whatever comes before sluice closes).
    async fn read_answer(client: &mut tokio::net::TcpStream) -> Vec<u8> {
        let mut answer = Vec::new();
        let mut buffer = [0u8; 4096];
        while !answer.ends_with(b"\r\n\r\nok") {
            let read = client.read(&mut buffer).await.unwrap();
            assert!(read > 0, "sluice closed before the answer: {answer:?}");
            answer.extend_from_slice(&buffer[..read]);
        }
        answer
    }
}
