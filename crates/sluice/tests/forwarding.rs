//! End-to-end: what a backend receives, byte for byte — origin-form targets, one Host, the forwarding headers it may trust, and paths routed and forwarded alike.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full};
use sluice_testkit::{h2_send, RawBackend, RawRequest};
use support::wire::{exchange, Reply};
use support::{
    ingress, pod_ip, raw_backend_behind_sluice, service, write_catch_all, write_manifest, Sluice,
};

const WAIT: Duration = Duration::from_secs(5);

async fn send(sluice: &Sluice, request: &str) -> Reply {
    exchange(sluice.listen, request.as_bytes(), WAIT).await
}

/// Sends `request` and returns what the backend received for it.
async fn forwarded(backend: &RawBackend, sluice: &Sluice, request: &str) -> RawRequest {
    let before = backend.requests().len();
    let reply = send(sluice, request).await;
    assert_eq!(reply.status(), Some(200), "{request:?} got {}", reply.text);
    let requests = backend.requests();
    assert_eq!(
        requests.len(),
        before + 1,
        "one request reaches the backend"
    );
    requests[before].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_receives_origin_form_and_the_clients_host() {
    let (backend, _dir, sluice) = raw_backend_behind_sluice(60, &[]).await;
    let received = forwarded(
        &backend,
        &sluice,
        "GET /x?y=1&z=%20 HTTP/1.1\r\nHost: Shop.Test:8080\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(received.request_line(), "GET /x?y=1&z=%20 HTTP/1.1");
    assert_eq!(received.header_values("host"), ["Shop.Test:8080"]);

    let absolute = forwarded(
        &backend,
        &sluice,
        "GET http://shop.test/abs?q=1 HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(absolute.request_line(), "GET /abs?q=1 HTTP/1.1");
    assert_eq!(absolute.header_values("host"), ["shop.test"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_request_reaches_the_backend_in_origin_form_with_authority_as_host() {
    let (backend, _dir, sluice) = raw_backend_behind_sluice(61, &[]).await;
    let request = http::Request::get(format!("http://h2.test:{}/x?y=1", sluice.listen.port()))
        .header("host", "ignored.test")
        .header("cookie", "a=1")
        .header("cookie", "b=2")
        .body(Either::Left(Full::new(Bytes::new())))
        .unwrap();
    let response = h2_send(sluice.listen, request).await.unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    response.into_body().collect().await.unwrap();
    let received = backend.only_request();
    assert_eq!(received.request_line(), "GET /x?y=1 HTTP/1.1");
    assert_eq!(
        received.header_values("host"),
        [format!("h2.test:{}", sluice.listen.port())],
        ":authority wins over a Host header"
    );
    assert_eq!(
        received.header_values("cookie"),
        ["a=1; b=2"],
        "HTTP/2 cookie fields are joined for HTTP/1.1 (RFC 9113 §8.2.3)"
    );
}

/// A Python `http.server` backend, as a user would try first: it prints its port, then
/// answers every GET with the path and Host it saw.
struct PythonBackend {
    child: std::process::Child,
    addr: SocketAddr,
}

const PYTHON_SERVER: &str = r#"
import http.server, json, sys
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = json.dumps({"path": self.path, "host": self.headers.get_all("Host")}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer((sys.argv[1], 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

impl PythonBackend {
    fn start(ip: std::net::IpAddr) -> Self {
        let mut child = Command::new("python3")
            .args(["-c", PYTHON_SERVER, &ip.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs (it is on every machine of this kind)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line.trim().parse().expect("python prints its port");
        Self {
            child,
            addr: SocketAddr::new(ip, port),
        }
    }
}

impl Drop for PythonBackend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_http_server_sees_the_clients_path_and_host() {
    let python = PythonBackend::start(pod_ip(62));
    let dir = tempfile::tempdir().unwrap();
    write_catch_all(dir.path(), "py", &[python.addr]);
    let sluice = Sluice::start(dir.path(), &[]).await;
    let reply = send(
        &sluice,
        "GET /orders/7?expand=items HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(reply.status(), Some(200), "{}", reply.text);
    let seen: serde_json::Value = serde_json::from_str(reply.body()).unwrap();
    assert_eq!(seen["path"], "/orders/7?expand=items");
    assert_eq!(seen["host"], serde_json::json!(["shop.test"]));
}

const SPOOFING: &str = "GET / HTTP/1.1\r\nHost: shop.test\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil.test\r\nX-Forwarded-Port: 443\r\nX-Real-IP: 6.6.6.6\r\nForwarded: for=6.6.6.6\r\nX-Request-ID: picked-by-client\r\nConnection: close\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_from_an_untrusted_client_are_replaced() {
    let (backend, _dir, sluice) = raw_backend_behind_sluice(63, &[]).await;
    let reply = send(&sluice, SPOOFING).await;
    assert_eq!(reply.status(), Some(200));
    let received = backend.only_request();
    let port = sluice.listen.port().to_string();
    assert_eq!(received.header_values("x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(received.header_values("x-forwarded-proto"), ["http"]);
    assert_eq!(received.header_values("x-forwarded-host"), ["shop.test"]);
    assert_eq!(received.header_values("x-forwarded-port"), [port.as_str()]);
    assert_eq!(received.header_values("x-real-ip"), ["127.0.0.1"]);
    assert!(received.header_values("forwarded").is_empty());
    // A request id claims nothing: any client's is kept, as nginx.tmpl's $req_id keeps it.
    assert_eq!(received.header_values("x-request-id"), ["picked-by-client"]);
    assert_eq!(
        reply.header("x-request-id"),
        Some("picked-by-client"),
        "the response carries the id"
    );
    // Without one, the request gets a new id, which the response carries back.
    let reply = send(
        &sluice,
        "GET / HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    let requests = backend.requests();
    let id = requests[1].header("x-request-id").unwrap();
    assert!(
        id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    assert_eq!(reply.header("x-request-id"), Some(id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxy_keeps_its_forwarding_headers_and_names_the_client() {
    let (backend, _dir, sluice) =
        raw_backend_behind_sluice(64, &["--trusted-proxies", "127.0.0.0/8"]).await;
    let request = "GET / HTTP/1.1\r\nHost: shop.test\r\nX-Forwarded-For: 198.51.100.7, 127.0.0.9\r\nX-Forwarded-Proto: https\r\nForwarded: for=198.51.100.7;proto=https\r\nX-Request-ID: from-the-edge\r\nConnection: close\r\n\r\n";
    let reply = send(&sluice, request).await;
    let received = backend.only_request();
    assert_eq!(
        received.header_values("x-forwarded-for"),
        ["198.51.100.7, 127.0.0.9, 127.0.0.1"]
    );
    assert_eq!(received.header_values("x-real-ip"), ["198.51.100.7"]);
    assert_eq!(received.header_values("x-forwarded-proto"), ["https"]);
    assert_eq!(
        received.header_values("forwarded"),
        ["for=198.51.100.7;proto=https"]
    );
    assert_eq!(received.header_values("x-request-id"), ["from-the-edge"]);
    assert_eq!(reply.header("x-request-id"), Some("from-the-edge"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_protocol_names_the_client_and_a_connection_without_it_is_closed() {
    let (backend, _dir, sluice) = raw_backend_behind_sluice(65, &["--proxy-protocol"]).await;
    let v1 = "PROXY TCP4 198.51.100.7 127.0.0.1 55555 443\r\nGET /v1 HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n";
    assert_eq!(send(&sluice, v1).await.status(), Some(200));
    let mut v2 = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
    v2.extend_from_slice(&[203, 0, 113, 9, 127, 0, 0, 1, 0xd9, 0x03, 0x01, 0xbb]);
    v2.extend_from_slice(b"GET /v2 HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n");
    assert_eq!(exchange(sluice.listen, &v2, WAIT).await.status(), Some(200));
    let requests = backend.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].header_values("x-forwarded-for"),
        ["198.51.100.7"]
    );
    assert_eq!(requests[0].header_values("x-real-ip"), ["198.51.100.7"]);
    assert_eq!(requests[0].header_values("x-forwarded-port"), ["443"]);
    assert_eq!(
        requests[1].header_values("x-forwarded-for"),
        ["203.0.113.9"]
    );

    let plain = send(&sluice, "GET / HTTP/1.1\r\nHost: shop.test\r\n\r\n").await;
    assert!(
        plain.closed && plain.text.is_empty(),
        "{plain:?} {}",
        sluice.log()
    );
    let garbage = send(
        &sluice,
        "PROXY TCP4 not-an-address\r\nGET / HTTP/1.1\r\n\r\n",
    )
    .await;
    assert!(garbage.closed && garbage.text.is_empty(), "{garbage:?}");
    assert_eq!(backend.requests().len(), 2, "neither reached the backend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cannot_strip_host_framing_or_the_headers_sluice_sets() {
    let (backend, _dir, sluice) = raw_backend_behind_sluice(66, &[]).await;
    let request = "POST /upload HTTP/1.1\r\nHost: shop.test\r\nContent-Length: 5\r\nTE: trailers\r\nConnection: close, host, content-length, te, x-forwarded-for, x-request-id, x-private\r\nX-Private: secret\r\n\r\nhello";
    let reply = send(&sluice, request).await;
    assert_eq!(reply.status(), Some(200), "{}", reply.text);
    let received = backend.only_request();
    assert_eq!(received.header_values("host"), ["shop.test"]);
    assert_eq!(received.header_values("content-length"), ["5"]);
    assert_eq!(received.body, b"hello");
    assert_eq!(received.header_values("te"), ["trailers"]);
    assert_eq!(received.header_values("x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(received.header_values("x-request-id").len(), 1);
    assert!(received.header_values("x-private").is_empty());
    assert!(received.header_values("connection").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_two_hosts_or_a_host_that_disagrees_gets_400() {
    let (backend, _dir, sluice) = raw_backend_behind_sluice(67, &[]).await;
    for request in [
        "GET / HTTP/1.1\r\nHost: shop.test\r\nHost: evil.test\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: shop.test\r\nHost: shop.test\r\n\r\n",
        "GET http://shop.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n",
        "GET / HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: user@shop.test\r\n\r\n",
    ] {
        let reply = send(&sluice, request).await;
        assert_eq!(reply.status(), Some(400), "{request:?}: {}", reply.text);
        assert!(reply.closed, "{request:?}: the connection closes");
    }
    assert_eq!(backend.connections(), 0, "nothing reached the backend");
}

/// Two Ingress paths to two Services: `/public` and `/admin`.
async fn public_and_admin() -> (RawBackend, RawBackend, tempfile::TempDir, Sluice) {
    let public = RawBackend::start(pod_ip(68)).await.unwrap();
    let admin = RawBackend::start(pod_ip(69)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "paths.yaml",
        &[
            ingress(
                "paths",
                "",
                &[
                    ("/public", "Prefix", "public", 80),
                    ("/admin", "Prefix", "admin", 80),
                ],
            ),
            service("public", 80, &[public.addr()]),
            service("admin", 80, &[admin.addr()]),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    (public, admin, dir, sluice)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_is_routed_and_forwarded_as_the_same_normalised_path() {
    let (public, admin, _dir, sluice) = public_and_admin().await;
    // (request target, the service it must reach, the request line that service receives)
    let cases = [
        ("/public/../admin", "admin", "GET /admin HTTP/1.1"),
        ("/public/%2e%2e/admin", "admin", "GET /admin HTTP/1.1"),
        (
            "/public/%2E%2e/admin?x=%2e%2e",
            "admin",
            "GET /admin?x=%2e%2e HTTP/1.1",
        ),
        ("/public/.%2e/admin", "admin", "GET /admin HTTP/1.1"),
        ("/public/./../admin/./x", "admin", "GET /admin/x HTTP/1.1"),
        (
            "/admin/../public/page",
            "public",
            "GET /public/page HTTP/1.1",
        ),
        (
            "/public/..%2fadmin",
            "public",
            "GET /public/..%2fadmin HTTP/1.1",
        ),
        (
            "/public/..%2Fadmin",
            "public",
            "GET /public/..%2Fadmin HTTP/1.1",
        ),
        (
            "/public/%252e%252e/admin",
            "public",
            "GET /public/%252e%252e/admin HTTP/1.1",
        ),
        ("/public//../admin", "public", "GET /public/admin HTTP/1.1"),
    ];
    for (target, service, request_line) in cases {
        let (expected, other) = match service {
            "admin" => (&admin, &public),
            _ => (&public, &admin),
        };
        let before = (expected.requests().len(), other.requests().len());
        let reply = send(
            &sluice,
            &format!("GET {target} HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert_eq!(reply.status(), Some(200), "{target}: {}", reply.text);
        let requests = expected.requests();
        assert_eq!(
            requests.len(),
            before.0 + 1,
            "{target} must reach {service}"
        );
        assert_eq!(
            other.requests().len(),
            before.1,
            "{target} reached the other service"
        );
        assert_eq!(requests[before.0].request_line(), request_line, "{target}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_that_cannot_be_normalised_gets_400() {
    let (public, admin, _dir, sluice) = public_and_admin().await;
    for target in [
        "/..",
        "/../admin",
        "/public/../../admin",
        "/public/%2e%2e/%2e%2e/admin",
        "/public/%00",
        "/public/%zz",
        "/public/%4",
    ] {
        let reply = send(
            &sluice,
            &format!("GET {target} HTTP/1.1\r\nHost: shop.test\r\n\r\n"),
        )
        .await;
        assert_eq!(reply.status(), Some(400), "{target}: {}", reply.text);
    }
    let (from_public, from_admin) = (public.connections(), admin.connections());
    assert_eq!(
        (from_public, from_admin),
        (0, 0),
        "nothing reached a backend"
    );
    let other = send(
        &sluice,
        "GET /public%2F..%2Fadmin HTTP/1.1\r\nHost: shop.test\r\n\r\n",
    )
    .await;
    assert_eq!(
        other.status(),
        Some(404),
        "%2F never splits a segment: {}",
        other.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_request_gets_405() {
    let (backend, _dir, sluice) = raw_backend_behind_sluice(70, &[]).await;
    let reply = send(
        &sluice,
        "CONNECT shop.test:443 HTTP/1.1\r\nHost: shop.test:443\r\n\r\n",
    )
    .await;
    assert_eq!(reply.status(), Some(405), "{}", reply.text);
    assert_eq!(backend.connections(), 0);
}

/// A pod that speaks HTTP/1.0 as Python's `http.server` does: it reads one request head,
/// answers `HTTP/1.0 200 OK` with `head` (ending in the blank line) and `body`, and closes.
async fn http_1_0_pod(head: &'static str, body: &'static str) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind((pod_ip(231), 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut received = Vec::new();
                let mut buffer = [0u8; 4096];
                while !received.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => received.extend_from_slice(&buffer[..read]),
                    }
                }
                let answer = format!(
                    "HTTP/1.0 200 OK\r\nServer: SimpleHTTP/0.6 Python/3.11\r\n{head}{body}"
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    addr
}

/// Reads from `stream` until what came ends with `end`.
async fn read_through(stream: &mut tokio::net::TcpStream, end: &str) -> String {
    use tokio::io::AsyncReadExt;
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    while !received.ends_with(end.as_bytes()) {
        let read = tokio::time::timeout(WAIT, stream.read(&mut buffer))
            .await
            .expect("the response in time")
            .unwrap();
        assert!(
            read > 0,
            "closed after {:?}",
            String::from_utf8_lossy(&received)
        );
        received.extend_from_slice(&buffer[..read]);
    }
    String::from_utf8(received).unwrap()
}

/// The content of a chunked body (without trailers).
fn dechunk(mut body: &str) -> String {
    let mut content = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").expect("a chunk size line");
        let size = usize::from_str_radix(size, 16).expect("a hex chunk size");
        if size == 0 {
            assert_eq!(rest, "\r\n", "the last chunk ends the body");
            return content;
        }
        content.push_str(&rest[..size]);
        body = rest[size..]
            .strip_prefix("\r\n")
            .expect("CRLF after a chunk");
    }
}

/// RFC 9110 §6.2: the client gets `HTTP/1.1` from the proxy whatever the pod spoke, and its
/// keep-alive connection serves the next request; a body the pod ends by closing goes out
/// chunked, one with `Content-Length` keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_1_0_pods_answer_reaches_the_client_as_http_1_1_on_a_kept_connection() {
    let with_length = http_1_0_pod(
        "Content-Type: text/plain\r\nContent-Length: 6\r\n\r\n",
        "sized\n",
    )
    .await;
    let close_delimited = http_1_0_pod(
        "Content-Type: text/plain\r\n\r\n",
        "ends when the pod closes\n",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            ingress(
                "app",
                "old.test",
                &[
                    ("/sized", "Prefix", "sized", 80),
                    ("/close", "Prefix", "close", 80),
                ],
            ),
            service("sized", 80, &[with_length]),
            service("close", 80, &[close_delimited]),
        ],
    );
    let sluice = Sluice::start(dir.path(), &[]).await;
    let mut client = tokio::net::TcpStream::connect(sluice.listen).await.unwrap();
    for round in 0..2 {
        let (head, body) = kept_answer(&mut client, "/close", "\r\n0\r\n\r\n", round).await;
        assert!(head.contains("\r\ntransfer-encoding: chunked"), "{head}");
        assert_eq!(dechunk(&body), "ends when the pod closes\n");
        let (head, body) = kept_answer(&mut client, "/sized", "sized\n", round).await;
        assert!(head.contains("\r\ncontent-length: 6"), "{head}");
        assert_eq!(body, "sized\n");
    }
}

/// GETs `path` of `old.test` on the kept connection `client` and reads the answer through
/// `end`: it must be `HTTP/1.1 200 OK` and keep the connection. Returns the head (lowercase)
/// and the body.
async fn kept_answer(
    client: &mut tokio::net::TcpStream,
    path: &str,
    end: &str,
    round: u32,
) -> (String, String) {
    use tokio::io::AsyncWriteExt;
    let request = format!("GET {path} HTTP/1.1\r\nHost: old.test\r\n\r\n");
    client.write_all(request.as_bytes()).await.unwrap();
    let answer = read_through(client, end).await;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.1 200 OK\r\n"),
        "round {round} {path}: {head}"
    );
    let head = head.to_ascii_lowercase();
    assert!(!head.contains("connection: close"), "{head}");
    (head, body.to_owned())
}
