//! End-to-end, with raw bytes: malformed framing gets 400 and reaches no backend, limits answer 431 and 413, and HTTP/2 floods close only the connection that sent them.
//!
//! hyper already refuses some of these on its own; the tests say which in their names and test
//! them anyway, so a change of hyper version cannot open a hole.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use sluice_testkit::{get, http_client, RawBackend};
use support::wire::exchange;
use support::{
    annotated_ingress, ingress, pod_ip, raw_backend_behind_sluice, service, write_catch_all,
    write_manifest, Sluice,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(5);

/// Sends each malformed request head and checks: 400, the connection closed, nothing at the
/// backend; then that sluice still serves.
async fn heads_are_refused(ip: u8, heads: &[(&str, &str)]) {
    let (backend, _dir, sluice) = raw_backend_behind_sluice(ip, &[]).await;
    for (case, head) in heads {
        let reply = exchange(sluice.listen, head.as_bytes(), WAIT).await;
        assert_eq!(reply.status(), Some(400), "{case}: {}", reply.text);
        assert!(reply.closed, "{case}: the connection must close");
    }
    assert_eq!(backend.bytes_received(), 0, "no byte reached the backend");
    let ok = exchange(
        sluice.listen,
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        WAIT,
    )
    .await;
    assert_eq!(ok.status(), Some(200), "sluice still serves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framing_that_hyper_would_accept_is_refused_by_the_scan() {
    heads_are_refused(
        71,
        &[
            (
                "Content-Length and Transfer-Encoding",
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            ),
            (
                "Transfer-Encoding and Content-Length",
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n",
            ),
            (
                "a bare LF ending a header line (LF inside a value)",
                "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\nX-Smuggled: 2\r\n\r\n",
            ),
            ("bare LF line ends", "GET / HTTP/1.1\nHost: a\n\n"),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framing_that_hyper_refuses_is_refused_by_both() {
    heads_are_refused(
        72,
        &[
            (
                "differing Content-Lengths",
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde",
            ),
            (
                "Transfer-Encoding not ending in chunked",
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            ),
            (
                "obs-fold",
                "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n  continued\r\n\r\n",
            ),
            (
                "whitespace before the colon",
                "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
            ),
            (
                "CR in a header value",
                "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r2\r\n\r\n",
            ),
            (
                "NUL in a header value",
                "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\x002\r\n\r\n",
            ),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_that_breaks_while_streaming_never_completes_at_the_backend_also_refused_by_hyper(
) {
    let (backend, _dir, sluice) = raw_backend_behind_sluice(73, &[]).await;
    let head = "POST /upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (case, body) in [
        ("a bad chunk size", "5\r\nhello\r\nzz\r\nworld\r\n0\r\n\r\n"),
        (
            "a bare LF after the size",
            "5\r\nhello\r\n5\nworld\r\n0\r\n\r\n",
        ),
        (
            "a bare LF after the data",
            "5\r\nhello\r\n5\r\nworld\n0\r\n\r\n",
        ),
        (
            "data longer than its size",
            "5\r\nhello, world\r\n0\r\n\r\n",
        ),
    ] {
        let mut stream = TcpStream::connect(sluice.listen).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        // The head first, so the request is already on its way upstream when the body breaks.
        tokio::time::sleep(Duration::from_millis(100)).await;
        stream.write_all(body.as_bytes()).await.unwrap();
        let reply = support::wire::read_until_closed(&mut stream, WAIT).await;
        assert!(reply.closed, "{case}: the connection must close");
        assert!(
            matches!(reply.status(), Some(400) | None),
            "{case}: {}",
            reply.text
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let requests = backend.requests();
    assert!(
        requests.iter().all(|request| !request.complete),
        "a backend received a complete request: {requests:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_over_max_header_bytes_or_max_headers_gets_431() {
    let (backend, _dir, sluice) =
        raw_backend_behind_sluice(74, &["--max-header-bytes", "4k", "--max-headers", "20"]).await;
    let big = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "x".repeat(5000)
    );
    let reply = exchange(sluice.listen, big.as_bytes(), WAIT).await;
    assert_eq!(reply.status(), Some(431), "{}", reply.text);
    let many: String = (0..30).map(|i| format!("X-{i}: {i}\r\n")).collect();
    let reply = exchange(
        sluice.listen,
        format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n").as_bytes(),
        WAIT,
    )
    .await;
    assert_eq!(reply.status(), Some(431), "{}", reply.text);
    assert_eq!(backend.bytes_received(), 0);
    let fits = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "x".repeat(3000)
    );
    let reply = exchange(sluice.listen, fits.as_bytes(), WAIT).await;
    assert_eq!(reply.status(), Some(200), "{}", reply.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_gets_413_declared_or_streamed() {
    let (backend, _dir, sluice) = raw_backend_behind_sluice(75, &["--max-body-size", "1k"]).await;
    let declared = format!(
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2000\r\n\r\n{}",
        "x".repeat(2000)
    );
    let reply = exchange(sluice.listen, declared.as_bytes(), WAIT).await;
    assert_eq!(reply.status(), Some(413), "{}", reply.text);
    assert_eq!(backend.connections(), 0, "refused before connecting");

    let chunk = "x".repeat(600);
    let streamed = format!(
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n{chunk}\r\n258\r\n{chunk}\r\n0\r\n\r\n"
    );
    let reply = exchange(sluice.listen, streamed.as_bytes(), WAIT).await;
    assert_eq!(reply.status(), Some(413), "{}", reply.text);
    assert!(backend.requests().iter().all(|request| !request.complete));

    let small = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
    let reply = exchange(sluice.listen, small.as_bytes(), WAIT).await;
    assert_eq!(reply.status(), Some(200), "{}", reply.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_body_size_annotation_limits_its_routes_only() {
    let small = RawBackend::start(pod_ip(76)).await.unwrap();
    let large = RawBackend::start(pod_ip(77)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_manifest(
        dir.path(),
        "sizes.yaml",
        &[
            annotated_ingress(
                "small",
                "",
                &[("/small", "Prefix", "small", 80)],
                &[("nginx.ingress.kubernetes.io/proxy-body-size", "100")],
            ),
            annotated_ingress(
                "large",
                "",
                &[("/large", "Prefix", "large", 80)],
                &[("nginx.ingress.kubernetes.io/proxy-body-size", "0")],
            ),
            ingress("plain", "", &[("/plain", "Prefix", "small", 80)]),
            service("small", 80, &[small.addr()]),
            service("large", 80, &[large.addr()]),
        ],
    );
    let sluice = Sluice::start(dir.path(), &["--max-body-size", "1k"]).await;
    let post = |path: &str, size: usize| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: a\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n{}",
            "x".repeat(size)
        )
    };
    for (path, size, status) in [
        ("/small", 101, 413),
        ("/small", 100, 200),
        ("/large", 5000, 200),
        ("/plain", 1025, 413),
        ("/plain", 1024, 200),
    ] {
        let reply = exchange(sluice.listen, post(path, size).as_bytes(), WAIT).await;
        assert_eq!(reply.status(), Some(status), "{path} with {size} bytes");
    }
}

/// HTTP/2 frames, written by hand so a test can send what no client library would.
mod h2 {
    pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const GOAWAY: u8 = 0x7;
    pub const CONTINUATION: u8 = 0x9;
    pub const END_STREAM: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;

    pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let length = u32::try_from(payload.len()).unwrap().to_be_bytes();
        let mut frame = vec![length[1], length[2], length[3], kind, flags];
        frame.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
        frame.extend_from_slice(payload);
        frame
    }

    /// An HPACK block for `GET /` to `authority`: static-table entries for :method, :scheme
    /// and :path, and :authority as a literal without indexing.
    pub fn get_block(authority: &str) -> Vec<u8> {
        let mut block = vec![
            0x82,
            0x86,
            0x84,
            0x01,
            u8::try_from(authority.len()).unwrap(),
        ];
        block.extend_from_slice(authority.as_bytes());
        block
    }

    /// The preface and an empty SETTINGS frame.
    pub fn start() -> Vec<u8> {
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(SETTINGS, 0, 0, &[]));
        bytes
    }

    /// The frames in `bytes`: (type, flags, stream, payload).
    pub fn frames(mut bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        let mut frames = Vec::new();
        while bytes.len() >= 9 {
            let length =
                usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
            if bytes.len() < 9 + length {
                break;
            }
            let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & 0x7fff_ffff;
            frames.push((bytes[3], bytes[4], stream, bytes[9..9 + length].to_vec()));
            bytes = &bytes[9 + length..];
        }
        frames
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_announces_max_concurrent_streams() {
    let (_backend, _dir, sluice) =
        raw_backend_behind_sluice(78, &["--max-concurrent-streams", "17"]).await;
    let reply = exchange(sluice.listen, &h2::start(), Duration::from_millis(500)).await;
    let settings = h2::frames(reply.text.as_bytes());
    let (_, _, _, payload) = settings
        .iter()
        .find(|(kind, flags, _, _)| *kind == h2::SETTINGS && flags & 1 == 0)
        .expect("the server's SETTINGS");
    let announced: Vec<(u16, u32)> = payload
        .chunks(6)
        .map(|p| {
            (
                u16::from_be_bytes([p[0], p[1]]),
                u32::from_be_bytes([p[2], p[3], p[4], p[5]]),
            )
        })
        .collect();
    assert!(announced.contains(&(0x3, 17)), "{announced:?}");
}

/// Runs `attack` on one connection while another client keeps sending requests; returns
/// whether the attacking connection was closed, and how many of the other client's requests
/// failed.
async fn under_attack(sluice: &Sluice, attack: Vec<u8>) -> (bool, usize) {
    let url = sluice.url("/");
    let bystander = tokio::spawn(async move {
        let client = http_client();
        let mut failed = 0;
        for _ in 0..50 {
            match get(&client, &url, "a").await {
                Ok(reply) if reply.status == 200 => {}
                _ => failed += 1,
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        failed
    });
    let mut stream = TcpStream::connect(sluice.listen).await.unwrap();
    // The server may close mid-attack; a failed write is part of the outcome.
    let _ = stream.write_all(&attack).await;
    let mut buffer = vec![0u8; 64 * 1024];
    let mut received = Vec::new();
    let closed = loop {
        match tokio::time::timeout(WAIT, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(read)) => received.extend_from_slice(&buffer[..read]),
            Err(_) => break false,
        }
    };
    let goaway = h2::frames(&received)
        .iter()
        .any(|(kind, _, _, _)| *kind == h2::GOAWAY);
    (closed || goaway, bystander.await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_rapid_reset_flood_closes_only_its_own_connection_as_h2_already_does() {
    let (_backend, _dir, sluice) = raw_backend_behind_sluice(79, &[]).await;
    let mut attack = h2::start();
    let block = h2::get_block("a");
    for stream in (1..4000u32).step_by(2) {
        attack.extend(h2::frame(
            h2::HEADERS,
            h2::END_STREAM | h2::END_HEADERS,
            stream,
            &block,
        ));
        attack.extend(h2::frame(h2::RST_STREAM, 0, stream, &8u32.to_be_bytes()));
    }
    let (closed, failed) = under_attack(&sluice, attack).await;
    assert!(closed, "the attacking connection must be closed");
    assert_eq!(failed, 0, "other clients are unaffected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_continuation_flood_closes_only_its_own_connection_as_h2_already_does() {
    let (_backend, _dir, sluice) = raw_backend_behind_sluice(80, &[]).await;
    let mut attack = h2::start();
    attack.extend(h2::frame(
        h2::HEADERS,
        h2::END_STREAM,
        1,
        &h2::get_block("a"),
    ));
    // Literal headers with new names, never ending the header block.
    let mut junk = Vec::new();
    for i in 0..100u32 {
        let name = format!("x-flood-{i:05}");
        junk.push(0x00);
        junk.push(u8::try_from(name.len()).unwrap());
        junk.extend_from_slice(name.as_bytes());
        junk.push(100);
        junk.extend_from_slice(&[b'v'; 100]);
    }
    for _ in 0..500 {
        attack.extend(h2::frame(h2::CONTINUATION, 0, 1, &junk));
    }
    let (closed, failed) = under_attack(&sluice, attack).await;
    assert!(closed, "the attacking connection must be closed");
    assert_eq!(failed, 0, "other clients are unaffected");
}

/// h2 counts only streams reset before the server accepted them. A client that lets each batch
/// of requests reach the backend and then cancels them all costs the backend real work on
/// every stream; sluice's own rule disconnects it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_that_cancels_accepted_requests_as_fast_as_it_sends_them_is_disconnected() {
    let slow = sluice_testkit::EchoBackend::start("slow", pod_ip(81))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_catch_all(dir.path(), "app", &[slow.addr()]);
    let sluice = Sluice::start(dir.path(), &[]).await;
    let mut block = vec![0x82, 0x86, 0x04, 22];
    block.extend_from_slice(b"/__testkit/sleep/10000");
    block.extend_from_slice(&[0x01, 1, b'a']);
    let mut stream = TcpStream::connect(sluice.listen).await.unwrap();
    stream.write_all(&h2::start()).await.unwrap();
    let mut next_stream = 1u32;
    let mut closed = false;
    for _round in 0..10 {
        let batch: Vec<u32> = (0..50).map(|i| next_stream + 2 * i).collect();
        next_stream += 100;
        let mut opened = Vec::new();
        let mut reset = Vec::new();
        for id in &batch {
            opened.extend(h2::frame(
                h2::HEADERS,
                h2::END_STREAM | h2::END_HEADERS,
                *id,
                &block,
            ));
            reset.extend(h2::frame(h2::RST_STREAM, 0, *id, &8u32.to_be_bytes()));
        }
        let sent = stream.write_all(&opened).await.is_ok();
        // Long enough for the requests to reach the backend.
        tokio::time::sleep(Duration::from_millis(150)).await;
        if !sent || stream.write_all(&reset).await.is_err() {
            closed = true;
            break;
        }
        let mut buffer = vec![0u8; 64 * 1024];
        if let Ok(read) =
            tokio::time::timeout(Duration::from_millis(50), stream.read(&mut buffer)).await
        {
            if matches!(read, Ok(0) | Err(_)) {
                closed = true;
                break;
            }
        }
    }
    assert!(
        closed,
        "a client that cancels everything it asks for is disconnected"
    );
    assert!(
        sluice.log().contains("rapid reset"),
        "the log says why: {}",
        sluice.log()
    );
}

#[test]
fn h2_frames_round_trip() {
    let bytes = h2::frame(h2::DATA, h2::END_STREAM, 3, b"abc");
    assert_eq!(
        h2::frames(&bytes),
        vec![(h2::DATA, h2::END_STREAM, 3, b"abc".to_vec())]
    );
}
