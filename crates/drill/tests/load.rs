//! The load generator sends at the asked rate and names each kind of failure correctly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use sluice_drill::load::{Load, LoadOutcome};
use sluice_drill::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A server that answers every connection with `reply` (after reading the request) and closes it.
async fn raw_server(reply: &'static [u8]) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(answer(stream, reply));
        }
    });
    address
}

async fn answer(mut stream: TcpStream, reply: &'static [u8]) {
    let mut buffer = [0u8; 4096];
    let mut seen = Vec::new();
    while !seen.windows(4).any(|window| window == b"\r\n\r\n") {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => seen.extend_from_slice(&buffer[..read]),
        }
    }
    let _ = stream.write_all(reply).await;
}

async fn load_against(address: SocketAddr, method: Method) -> LoadOutcome {
    let load = Load::start(address, 100, method).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    load.finish().await
}

fn only(outcome: &LoadOutcome, kind: &str) {
    assert!(
        outcome.requests >= 30,
        "about 50 requests expected: {outcome:?}"
    );
    assert!(
        outcome.requests <= 70,
        "about 50 requests expected: {outcome:?}"
    );
    assert_eq!(outcome.failed, outcome.requests, "{outcome:?}");
    assert_eq!(
        outcome.failures.keys().collect::<Vec<_>>(),
        [kind],
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_503_counts_as_status_503() {
    let reply =
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbusy";
    only(
        &load_against(raw_server(reply).await, Method::Post).await,
        "status_503",
    );
}

#[tokio::test]
async fn a_connection_closed_without_an_answer_counts_as_reset() {
    only(
        &load_against(raw_server(b"").await, Method::Get).await,
        "reset",
    );
}

#[tokio::test]
async fn a_body_that_breaks_off_counts_as_truncated() {
    let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly ten b";
    only(
        &load_against(raw_server(reply).await, Method::Get).await,
        "truncated",
    );
}

#[tokio::test]
async fn a_proxy_that_is_not_there_counts_as_connect() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    only(&load_against(address, Method::Get).await, "connect");
}

#[tokio::test]
async fn complete_200s_are_successes_with_latency() {
    let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
    let outcome = load_against(raw_server(reply).await, Method::Get).await;
    assert!(outcome.requests >= 30, "{outcome:?}");
    assert_eq!(outcome.failed, 0, "{outcome:?}");
    assert!(outcome.latency_ms(0.5) > 0.0);
    assert!(outcome.latency_ms(0.99) >= outcome.latency_ms(0.5));
}
