//! Helpers for the drill's tests: one-connection HTTP clients, a round-robin proxy, and running a test inside a network namespace.
#![allow(dead_code)]

pub mod proxy;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{handshake, SendRequest};
use hyper_util::rt::TokioIo;
use sluice_drill::netns::{inside_drill_netns, nftables_unavailable, Netns};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// One keep-alive connection and the task driving it (finished once the connection closes).
pub struct Connection {
    pub sender: SendRequest<Full<Bytes>>,
    pub driver: JoinHandle<()>,
}

pub async fn connect(address: SocketAddr) -> Connection {
    let stream = TcpStream::connect(address).await.expect("connect");
    let (sender, connection) = handshake(TokioIo::new(stream)).await.expect("handshake");
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    Connection { sender, driver }
}

pub fn get() -> Request<Full<Bytes>> {
    request("GET", Bytes::new())
}

pub fn request(method: &str, body: Bytes) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri("/")
        .header("host", "drill.local")
        .body(Full::new(body))
        .unwrap()
}

/// Sends one request on `connection` and reads the whole answer.
pub async fn exchange(
    connection: &mut Connection,
    request: Request<Full<Bytes>>,
) -> Result<(u16, String), String> {
    let response = connection
        .sender
        .send_request(request)
        .await
        .map_err(|error| format!("request: {error}"))?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|error| format!("body: {error}"))?;
    Ok((
        status,
        String::from_utf8_lossy(&body.to_bytes()).into_owned(),
    ))
}

/// GET on a fresh connection; the answer's body.
pub async fn get_once(address: SocketAddr) -> String {
    let mut connection = connect(address).await;
    let (status, body) = exchange(&mut connection, get()).await.expect("answer");
    assert_eq!(status, 200, "{body}");
    body
}

pub fn is_refused(result: std::io::Result<TcpStream>) -> bool {
    matches!(result, Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused)
}

pub async fn within<F: std::future::Future>(limit: Duration, what: &str, future: F) -> F::Output {
    tokio::time::timeout(limit, future)
        .await
        .unwrap_or_else(|_| panic!("{what} took longer than {limit:?}"))
}

/// Runs `body` inside a fresh network namespace by re-running this test there, or says why it
/// cannot (not root, no `ip` or `nft`) and skips.
pub fn in_drill_netns(test_name: &str, body: impl FnOnce()) {
    if inside_drill_netns() {
        return body();
    }
    if let Some(why) = nftables_unavailable() {
        println!("skipped {test_name}: {why}");
        return;
    }
    let netns = Netns::create().expect("create a network namespace");
    let program = std::env::current_exe().expect("test binary");
    let args = ["--exact", test_name, "--nocapture", "--test-threads=1"].map(OsString::from);
    let status = netns
        .run(&program, args)
        .expect("run the test in the namespace");
    assert!(
        status.success(),
        "{test_name} failed inside {}",
        netns.name()
    );
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Asserts the peer closes (or resets) `stream` without sending anything.
pub async fn assert_closed_at_once(mut stream: TcpStream) {
    use tokio::io::AsyncReadExt;
    let mut buffer = [0u8; 16];
    let read = within(Duration::from_secs(1), "closing", stream.read(&mut buffer)).await;
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "expected close, got {read:?}"
    );
}
