//! Response compression through the real binary: curl (which decodes gzip, Brotli and zstd) and raw sockets against a backend that serves JSON, images, already-encoded, small, streamed and event-stream answers; `--compression`, `sluice.dev/compression` and a Traefik `compress` middleware.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use support::{pod_ip, service, write_manifest, Sluice};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// The JSON document the backend serves at `/json`: 4,000 bytes or so.
fn document() -> String {
    let items: Vec<String> = (0..100)
        .map(|i| format!("{{\"id\": {i}, \"name\": \"item number {i}\"}}"))
        .collect();
    format!("{{\"items\": [{}]}}\n", items.join(", "))
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// The backend: answers by path; `/stream` sends its first chunk, then its second only once
/// `release` is notified.
async fn backend(ip: std::net::IpAddr, release: Arc<Notify>) -> SocketAddr {
    let listener = TcpListener::bind(SocketAddr::new(ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let release = release.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let release = release.clone();
                    async move { Ok::<_, Infallible>(answer(request.uri().path(), release)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

fn answer(path: &str, release: Arc<Notify>) -> http::Response<Body> {
    let builder = http::Response::builder();
    match path {
        "/json" => builder
            .header("content-type", "application/json")
            .header("etag", "\"v1\"")
            .header("vary", "Origin")
            .body(full(document())),
        "/small" => builder
            .header("content-type", "application/json")
            .body(full("{\"small\": true}")),
        "/image" => builder
            .header("content-type", "image/png")
            .body(full(vec![7u8; 4096])),
        "/encoded" => builder
            .header("content-type", "text/plain")
            .header("content-encoding", "gzip")
            .body(full(vec![1u8; 2048])),
        "/events" => builder
            .header("content-type", "text/event-stream")
            .body(full("data: one\n\n".repeat(200))),
        "/stream" => {
            let (sender, receiver) =
                tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(2);
            tokio::spawn(async move {
                let first = Frame::data(Bytes::from("first part of the stream\n".repeat(10)));
                let _ = sender.send(Ok(first)).await;
                release.notified().await;
                let _ = sender
                    .send(Ok(Frame::data(Bytes::from("second part\n"))))
                    .await;
            });
            let stream = tokio_stream_from(receiver);
            builder
                .header("content-type", "text/plain")
                .body(StreamBody::new(stream).boxed())
        }
        _ => builder.status(404).body(full("")),
    }
    .unwrap()
}

/// A receiver as a stream of frames.
fn tokio_stream_from(
    mut receiver: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, Infallible>>,
) -> impl futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>> {
    futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

/// One curl request: the response head's lines and the body as curl wrote it (decoded when
/// `--compressed` is among `args`).
fn curl(url: &str, args: &[&str]) -> (Vec<String>, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let head_file = dir.path().join("head");
    let output = Command::new("curl")
        .args(["-s", "--max-time", "5", "-D"])
        .arg(&head_file)
        .args(args)
        .arg(url)
        .output()
        .expect("curl");
    assert!(output.status.success(), "curl {url} {args:?}: {output:?}");
    let head = std::fs::read_to_string(&head_file).unwrap();
    (
        head.lines()
            .map(|line| line.trim_end().to_owned())
            .collect(),
        output.stdout,
    )
}

/// The value of header `name` in `head`, when present.
fn header<'h>(head: &'h [String], name: &str) -> Option<&'h str> {
    head.iter().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

fn decode(coding: &str, bytes: &[u8]) -> Vec<u8> {
    let mut plain = Vec::new();
    match coding {
        "gzip" => flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut plain)
            .unwrap(),
        "br" => brotli::Decompressor::new(bytes, 4096)
            .read_to_end(&mut plain)
            .unwrap(),
        "zstd" => zstd::stream::read::Decoder::new(bytes)
            .unwrap()
            .read_to_end(&mut plain)
            .unwrap(),
        other => panic!("unknown coding {other}"),
    };
    plain
}

fn ingress(name: &str, host: &str, annotations: &str) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n  annotations: {{{annotations}}}\nspec:\n  ingressClassName: sluice\n  rules:\n  - host: {host}\n    http:\n      paths:\n      - path: /\n        pathType: Prefix\n        backend:\n          service:\n            name: app\n            port:\n              number: 80\n"
    )
}

async fn start(flags: &[&str], documents: &[String]) -> (tempfile::TempDir, Sluice) {
    let dir = tempfile::tempdir().unwrap();
    write_manifest(dir.path(), "app.yaml", documents);
    let sluice = Sluice::start(dir.path(), flags).await;
    (dir, sluice)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_coding_is_chosen_by_accept_encoding_and_decodes_to_the_pods_bytes() {
    let pod = backend(pod_ip(150), Arc::new(Notify::new())).await;
    let documents = [
        service("app", 80, &[pod]),
        ingress(
            "compressed",
            "compressed.test",
            "sluice.dev/compression: \"gzip,br,zstd\"",
        ),
        ingress("plain", "plain.test", ""),
    ];
    let (_dir, sluice) = start(&[], &documents).await;
    let url = sluice.url("/json");
    let host = |name: &str| format!("Host: {name}");
    let expected = document();

    for (accept, coding) in [
        ("gzip", "gzip"),
        ("br", "br"),
        ("zstd", "zstd"),
        ("gzip, deflate, br, zstd", "zstd"),
        ("gzip;q=1, br;q=0.5", "gzip"),
        ("br, zstd;q=0", "br"),
    ] {
        let accept_header = format!("Accept-Encoding: {accept}");
        let (head, raw) = curl(
            &url,
            &["-H", &host("compressed.test"), "-H", &accept_header],
        );
        assert_eq!(
            header(&head, "content-encoding"),
            Some(coding),
            "{accept}: {head:?}"
        );
        assert_eq!(header(&head, "content-length"), None, "{head:?}");
        assert_eq!(
            header(&head, "vary"),
            Some("Origin, Accept-Encoding"),
            "{head:?}"
        );
        assert_eq!(header(&head, "etag"), Some("W/\"v1\""), "{head:?}");
        assert!(
            raw.len() < expected.len() / 3,
            "{coding}: {} bytes",
            raw.len()
        );
        assert_eq!(
            String::from_utf8(decode(coding, &raw)).unwrap(),
            expected,
            "{accept}"
        );
        // curl decodes it too.
        let (_, decoded) = curl(
            &url,
            &[
                "--compressed",
                "-H",
                &host("compressed.test"),
                "-H",
                &accept_header,
            ],
        );
        assert_eq!(
            String::from_utf8(decoded).unwrap(),
            expected,
            "curl, {accept}"
        );
    }

    // A client that accepts no coding gets the pod's bytes, and Vary says why.
    let (head, raw) = curl(&url, &["-H", &host("compressed.test")]);
    assert_eq!(header(&head, "content-encoding"), None);
    assert_eq!(header(&head, "vary"), Some("Origin, Accept-Encoding"));
    assert_eq!(header(&head, "etag"), Some("\"v1\""));
    assert_eq!(String::from_utf8(raw).unwrap(), expected);
    let (head, _) = curl(
        &url,
        &[
            "-H",
            &host("compressed.test"),
            "-H",
            "Accept-Encoding: identity",
        ],
    );
    assert_eq!(header(&head, "content-encoding"), None);

    // --compression is off by default: a route without the annotation is never compressed.
    let (head, raw) = curl(
        &url,
        &["-H", &host("plain.test"), "-H", "Accept-Encoding: gzip"],
    );
    assert_eq!(header(&head, "content-encoding"), None, "{head:?}");
    assert_eq!(header(&head, "vary"), Some("Origin"));
    assert_eq!(String::from_utf8(raw).unwrap(), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_that_must_not_be_compressed_go_out_as_sent() {
    let pod = backend(pod_ip(151), Arc::new(Notify::new())).await;
    let documents = [service("app", 80, &[pod]), ingress("any", "any.test", "")];
    let (_dir, sluice) = start(&["--compression", "gzip,br,zstd"], &documents).await;
    let gzip = [
        "-H",
        "Host: any.test",
        "-H",
        "Accept-Encoding: gzip, br, zstd",
    ];

    // Under 1024 bytes, an image, an answer already encoded (its own coding and length kept),
    // server-sent events: as the pod sent them, and no Vary added.
    for (path, encoding, length) in [
        ("/small", None, Some("15")),
        ("/image", None, Some("4096")),
        ("/encoded", Some("gzip"), Some("2048")),
        ("/events", None, Some("2200")),
    ] {
        let (head, _) = curl(&sluice.url(path), &gzip);
        assert_eq!(header(&head, "vary"), None, "{path}: {head:?}");
        assert_eq!(
            header(&head, "content-encoding"),
            encoding,
            "{path}: {head:?}"
        );
        assert_eq!(header(&head, "content-length"), length, "{path}: {head:?}");
    }
    // HEAD: never coded, but the answer varies with Accept-Encoding.
    let (head, _) = curl(&sluice.url("/json"), &[&gzip[..], &["-I"]].concat());
    assert_eq!(header(&head, "content-encoding"), None, "{head:?}");
    assert_eq!(header(&head, "vary"), Some("Origin, Accept-Encoding"));
    // A range is the pod's bytes, never coded ones.
    let (head, _) = curl(
        &sluice.url("/json"),
        &[&gzip[..], &["-H", "Range: bytes=0-99"]].concat(),
    );
    assert_eq!(header(&head, "content-encoding"), None, "{head:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_is_flushed_chunk_by_chunk() {
    let release = Arc::new(Notify::new());
    let pod = backend(pod_ip(152), release.clone()).await;
    let documents = [service("app", 80, &[pod]), ingress("any", "any.test", "")];
    let (_dir, sluice) = start(&["--compression", "gzip"], &documents).await;
    let mut socket = TcpStream::connect(sluice.listen).await.unwrap();
    socket
        .write_all(b"GET /stream HTTP/1.1\r\nHost: any.test\r\nAccept-Encoding: gzip\r\n\r\n")
        .await
        .unwrap();
    // The first part must decode before the pod sends the second.
    let mut received = Vec::new();
    let mut decoder = flate2::write::GzDecoder::new(Vec::new());
    let mut fed = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let first = "first part of the stream\n".repeat(10);
    loop {
        let mut buffer = [0u8; 4096];
        let read = tokio::time::timeout_at(deadline, socket.read(&mut buffer))
            .await
            .expect("the first part, compressed, before the pod sends more")
            .unwrap();
        assert!(read > 0, "closed early");
        received.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&received).into_owned();
        let Some(body_at) = text.find("\r\n\r\n") else {
            continue;
        };
        let head = &text[..body_at];
        assert!(head.contains("content-encoding: gzip"), "{head}");
        assert!(head.contains("transfer-encoding: chunked"), "{head}");
        let body = dechunk(&received[body_at + 4..]);
        decoder.write_all(&body[fed..]).unwrap();
        decoder.flush().unwrap();
        fed = body.len();
        if decoder.get_ref().len() >= first.len() {
            break;
        }
    }
    assert_eq!(String::from_utf8_lossy(decoder.get_ref()), first);
    release.notify_one();
}

/// The data of the complete chunks in `body` (a chunked body, maybe cut short).
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut data = Vec::new();
    while let Some(line_end) = body.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(std::str::from_utf8(&body[..line_end]).unwrap().trim(), 16)
                .unwrap();
        let start = line_end + 2;
        if size == 0 || body.len() < start + size + 2 {
            break;
        }
        data.extend_from_slice(&body[start..start + size]);
        body = &body[start + size + 2..];
    }
    data
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flag_covers_gateway_routes_and_annotations_and_middlewares_choose_for_theirs() {
    let pod = backend(pod_ip(153), Arc::new(Notify::new())).await;
    let gateway_port = support::free_port();
    let documents = [
        service("app", 80, &[pod]),
        ingress("not-compressed", "off.test", "sluice.dev/compression: \"off\""),
        ingress("gzip-only", "gzip-only.test", "sluice.dev/compression: gzip"),
        ingress(
            "traefik",
            "traefik.test",
            "traefik.ingress.kubernetes.io/router.middlewares: default-compress@kubernetescrd",
        ),
        "apiVersion: traefik.io/v1alpha1\nkind: Middleware\nmetadata: {name: compress, namespace: default}\nspec:\n  compress:\n    encodings: [br]\n".to_owned(),
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: sluice}\nspec: {controllerName: sluice.dev/gateway-controller}\n".to_owned(),
        format!("apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: web, namespace: default}}\nspec:\n  gatewayClassName: sluice\n  listeners:\n  - {{name: http, port: {gateway_port}, protocol: HTTP}}\n"),
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: app, namespace: default}\nspec:\n  parentRefs: [{name: web}]\n  rules:\n  - backendRefs: [{name: app, port: 80}]\n".to_owned(),
    ];
    let (_dir, sluice) = start(
        &[
            "--compression",
            "zstd,gzip",
            "--gateway-address",
            "127.0.0.1",
        ],
        &documents,
    )
    .await;
    support::wait_for_socket(SocketAddr::from(([127, 0, 0, 1], gateway_port))).await;
    let all = "Accept-Encoding: gzip, br, zstd";
    let encoding_of = |url: &str, host: &str| {
        let host = format!("Host: {host}");
        let (head, _) = curl(url, &["-H", &host, "-H", all]);
        header(&head, "content-encoding").map(str::to_owned)
    };
    let json = sluice.url("/json");
    assert_eq!(encoding_of(&json, "off.test"), None);
    assert_eq!(
        encoding_of(&json, "gzip-only.test").as_deref(),
        Some("gzip")
    );
    assert_eq!(encoding_of(&json, "traefik.test").as_deref(), Some("br"));
    let gateway = format!("http://127.0.0.1:{gateway_port}/json");
    assert_eq!(encoding_of(&gateway, "any.test").as_deref(), Some("zstd"));
    // Over HTTP/2 too (h2c with prior knowledge).
    let (head, raw) = curl(
        &gateway,
        &["--http2-prior-knowledge", "-H", "Accept-Encoding: gzip"],
    );
    assert_eq!(header(&head, "content-encoding"), Some("gzip"), "{head:?}");
    assert_eq!(String::from_utf8(decode("gzip", &raw)).unwrap(), document());
}
