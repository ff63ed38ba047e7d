//! The codec beside hyper's HTTP/1.1 server, which sluice used before: the same handler behind both, the same bytes sent to each over loopback, and the bytes each answers compared (dates aside). Then what only sluice does: refusals, parking, limits.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::client_body::ClientBody;
use crate::connection::ClientInfo;
use crate::server::{serve, ListenerOptions};
use crate::shutdown::{ShutdownSignal, ShutdownTrigger};

type TestBody = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

fn full(text: &'static str) -> TestBody {
    Full::new(Bytes::from_static(text.as_bytes()))
        .map_err(|never| match never {})
        .boxed()
}

/// A body of these frames, each ready when polled, with no length known.
struct Frames(std::collections::VecDeque<Frame<Bytes>>);

impl hyper::body::Body for Frames {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.pop_front().map(Ok))
    }
}

fn frames(frames: Vec<Frame<Bytes>>) -> TestBody {
    Frames(frames.into()).boxed()
}

/// What both servers answer, by path.
async fn handle(request: Request<ClientBody>) -> Response<TestBody> {
    let path = request.uri().path().to_owned();
    let mut response = match path.as_str() {
        "/echo" => {
            let collected = request.into_body().collect().await;
            let body = match collected {
                Ok(collected) => {
                    let trailers = collected.trailers().cloned();
                    let mut text = collected.to_bytes().to_vec();
                    if let Some(trailers) = trailers {
                        for (name, value) in &trailers {
                            text.extend_from_slice(format!("|{name}={value:?}").as_bytes());
                        }
                    }
                    Full::new(Bytes::from(text))
                        .map_err(|never| match never {})
                        .boxed()
                }
                Err(_) => full("broken"),
            };
            Response::new(body)
        }
        "/stream" => Response::new(frames(vec![
            Frame::data(Bytes::from_static(b"one ")),
            Frame::data(Bytes::new()),
            Frame::data(Bytes::from_static(b"two")),
        ])),
        "/trailers" => {
            let mut trailers = http::HeaderMap::new();
            trailers.insert("x-sum", HeaderValue::from_static("42"));
            trailers.insert("x-unnamed", HeaderValue::from_static("1"));
            trailers.insert("content-type", HeaderValue::from_static("nope"));
            let mut response = Response::new(frames(vec![
                Frame::data(Bytes::from_static(b"data")),
                Frame::trailers(trailers),
            ]));
            response
                .headers_mut()
                .insert("trailer", HeaderValue::from_static("x-sum, content-type"));
            response
        }
        "/length" => {
            let mut response = Response::new(full("12345"));
            response
                .headers_mut()
                .insert("content-length", HeaderValue::from_static("5"));
            response
        }
        "/stream-length" => {
            let mut response = Response::new(frames(vec![
                Frame::data(Bytes::from_static(b"12")),
                Frame::data(Bytes::from_static(b"345")),
            ]));
            response
                .headers_mut()
                .insert("content-length", HeaderValue::from_static("5"));
            response
        }
        "/chunked-header" => {
            let mut response = Response::new(full("abc"));
            response
                .headers_mut()
                .insert("transfer-encoding", HeaderValue::from_static("gzip"));
            response
        }
        "/empty-length" => {
            let mut response = Response::new(full(""));
            response
                .headers_mut()
                .insert("content-length", HeaderValue::from_static("7"));
            response
        }
        "/close" => {
            let mut response = Response::new(full("bye"));
            response
                .headers_mut()
                .insert("connection", HeaderValue::from_static("close"));
            response
        }
        "/keep-alive-1.0" => {
            let mut response = Response::new(full("old"));
            *response.version_mut() = http::Version::HTTP_10;
            response
        }
        "/many" => {
            let mut response = Response::new(full(""));
            let headers = response.headers_mut();
            headers.append("x-a", HeaderValue::from_static("1"));
            headers.append("x-b", HeaderValue::from_static("2"));
            headers.append("x-a", HeaderValue::from_static("3"));
            headers.append("connection", HeaderValue::from_static("x-b"));
            headers.append("connection", HeaderValue::from_static("keep-alive"));
            response
        }
        "/reason" => {
            let mut response = Response::new(full("teapot"));
            *response.status_mut() = StatusCode::IM_A_TEAPOT;
            response
                .extensions_mut()
                .insert(hyper::ext::ReasonPhrase::from_static(b"Short And Stout"));
            response
        }
        _ => Response::new(full("")),
    };
    if let Some(status) = path.strip_prefix("/status/") {
        *response.status_mut() = status.parse().unwrap_or(StatusCode::OK);
    }
    response
}

/// sluice's listener with the test handler.
async fn sluice_server() -> (SocketAddr, ShutdownTrigger) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let (trigger, signal) = ShutdownSignal::new();
    let handler = |request: Request<ClientBody>, _client: ClientInfo| handle(request);
    tokio::spawn(serve(listener, handler, signal, ListenerOptions::default()));
    (address, trigger)
}

/// hyper's HTTP/1.1 server with the same handler, as sluice was built before.
async fn hyper_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service =
                hyper::service::service_fn(|request: Request<hyper::body::Incoming>| async {
                    Ok::<_, Infallible>(handle(request.map(ClientBody::from_hyper)).await)
                });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .with_upgrades(),
            );
        }
    });
    address
}

/// What a server sent back for `input`, written in `pieces` with a pause between them, read
/// until it closes or says nothing more for a while; whether it closed.
async fn exchange(address: SocketAddr, pieces: &[&[u8]]) -> (String, bool) {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    for piece in pieces {
        stream.write_all(piece).await.expect("write");
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let mut received = Vec::new();
    let mut buffer = [0u8; 65536];
    let closed = loop {
        match tokio::time::timeout(Duration::from_millis(300), stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(read)) => received.extend_from_slice(&buffer[..read]),
            Err(_) => break false,
        }
    };
    (without_dates(&String::from_utf8_lossy(&received)), closed)
}

fn without_dates(text: &str) -> String {
    text.split("\r\n")
        .map(|line| match line.starts_with("date: ") {
            true => "date: <now>",
            false => line,
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

/// Requests, as the bytes a client sends (in pieces where a piece boundary matters).
const CASES: &[(&str, &[&[u8]])] = &[
    ("get", &[b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"]),
    ("get, close", &[b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"]),
    ("http/1.0", &[b"GET / HTTP/1.0\r\nHost: a\r\n\r\n"]),
    ("http/1.0 keep-alive", &[b"GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"]),
    ("http/1.0 answer to 1.0 keep-alive", &[b"GET /keep-alive-1.0 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"]),
    ("http/1.0 answer to 1.1", &[b"GET /keep-alive-1.0 HTTP/1.1\r\n\r\n"]),
    ("pipelined", &[b"GET /stream HTTP/1.1\r\n\r\nGET /length HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n"]),
    ("empty lines between", &[b"GET / HTTP/1.1\r\n\r\n\r\n\r\nGET /length HTTP/1.1\r\n\r\n"]),
    ("head in pieces", &[b"GET /len", b"gth HTTP/1.1\r\nHo", b"st: a\r\n\r\n"]),
    ("echo length", &[b"POST /echo HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello world"]),
    ("echo length in pieces", &[b"POST /echo HTTP/1.1\r\nContent-Length: 11\r\n\r\nhel", b"lo wor", b"ld"]),
    ("echo chunked", &[b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"]),
    ("echo chunked trailers", &[b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\nGET / HTTP/1.1\r\n\r\n"]),
    ("echo chunked in pieces", &[b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r", b"\nhel", b"lo\r\n0\r", b"\n\r\n"]),
    ("expect continue", &[b"POST /echo HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", b"hello"]),
    ("expect continue, answered early", &[b"POST / HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"]),
    ("body left unread, all arrived", &[b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /length HTTP/1.1\r\n\r\n"]),
    ("body left unread, more to come", &[b"POST / HTTP/1.1\r\nContent-Length: 50\r\n\r\nhello"]),
    ("stream", &[b"GET /stream HTTP/1.1\r\n\r\n"]),
    ("stream to http/1.0", &[b"GET /stream HTTP/1.0\r\n\r\n"]),
    ("trailers, accepted", &[b"GET /trailers HTTP/1.1\r\nTE: trailers\r\n\r\n"]),
    ("trailers, not accepted", &[b"GET /trailers HTTP/1.1\r\n\r\n"]),
    ("length header", &[b"GET /length HTTP/1.1\r\n\r\n"]),
    ("length header, streamed", &[b"GET /stream-length HTTP/1.1\r\n\r\n"]),
    ("transfer-encoding header", &[b"GET /chunked-header HTTP/1.1\r\n\r\n"]),
    ("length header, empty body", &[b"GET /empty-length HTTP/1.1\r\n\r\n"]),
    ("head", &[b"HEAD /length HTTP/1.1\r\n\r\nHEAD /empty-length HTTP/1.1\r\n\r\nHEAD /stream HTTP/1.1\r\n\r\n"]),
    ("204 and 304", &[b"GET /status/204 HTTP/1.1\r\n\r\nGET /status/304 HTTP/1.1\r\n\r\n"]),
    ("answer closes", &[b"GET /close HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n"]),
    ("many headers", &[b"GET /many HTTP/1.1\r\n\r\n"]),
    ("many headers, closing", &[b"GET /many HTTP/1.1\r\nConnection: close\r\n\r\n"]),
    ("reason phrase", &[b"GET /reason HTTP/1.1\r\n\r\n"]),
    ("status", &[b"GET /status/503 HTTP/1.1\r\n\r\nGET /status/599 HTTP/1.1\r\n\r\n"]),
    ("equal lengths", &[b"POST /echo HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"]),
    ("chunked, cut short", &[b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel"]),
];

#[tokio::test]
async fn every_case_gets_the_bytes_hyper_answered() {
    let (sluice, _trigger) = sluice_server().await;
    let hyper = hyper_server().await;
    let runs: Vec<_> = CASES
        .iter()
        .map(|(name, pieces)| {
            let ours = tokio::spawn(exchange(sluice, pieces));
            let theirs = tokio::spawn(exchange(hyper, pieces));
            (name, ours, theirs)
        })
        .collect();
    let mut differences = Vec::new();
    for (name, ours, theirs) in runs {
        let (Ok(ours), Ok(theirs)) = (ours.await, theirs.await) else {
            panic!("{name}: a client failed");
        };
        if ours != theirs {
            differences.push(format!(
                "{name}:\n  sluice ({}): {:?}\n  hyper  ({}): {:?}",
                if ours.1 { "closed" } else { "open" },
                ours.0,
                if theirs.1 { "closed" } else { "open" },
                theirs.0
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// A listener with `options` whose handler is `handler`.
async fn listener_with<F, Fut>(
    options: ListenerOptions,
    handler: F,
) -> (SocketAddr, ShutdownTrigger)
where
    F: Fn(Request<ClientBody>, ClientInfo) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<TestBody>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let (trigger, signal) = ShutdownSignal::new();
    tokio::spawn(serve(listener, handler, signal, options));
    (address, trigger)
}

#[tokio::test]
async fn refused_heads_get_their_status_never_reach_the_handler_and_close_the_connection() {
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    let options = ListenerOptions {
        max_header_bytes: 1024,
        max_headers: 10,
        ..ListenerOptions::default()
    };
    let (address, _trigger) = listener_with(options, move |_request, _client| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { Response::new(full("served")) }
    })
    .await;
    let many_fields: String = (0..11).map(|index| format!("X-{index}: v\r\n")).collect();
    let cases = [
        (
            "bare LF".to_owned(),
            "GET / HTTP/1.1\r\nHost: a\nX: 1\r\n\r\n".to_owned(),
            "400",
        ),
        (
            "NUL".to_owned(),
            "GET / HTTP/1.1\r\nHost: a\0\r\n\r\n".to_owned(),
            "400",
        ),
        (
            "obs-fold".to_owned(),
            "GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n".to_owned(),
            "400",
        ),
        (
            "length and chunked".to_owned(),
            "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n".to_owned(),
            "400",
        ),
        (
            "head too large".to_owned(),
            format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(2000)),
            "431",
        ),
        (
            "head too large, unfinished".to_owned(),
            format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(2000)),
            "431",
        ),
        (
            "too many fields".to_owned(),
            format!("GET / HTTP/1.1\r\n{many_fields}\r\n"),
            "431",
        ),
    ];
    for (name, request, status) in cases {
        let (reply, closed) = exchange(address, &[request.as_bytes()]).await;
        assert!(
            reply.starts_with(&format!("HTTP/1.1 {status} ")),
            "{name}: {reply:?}"
        );
        assert!(reply.contains("connection: close\r\n"), "{name}: {reply:?}");
        assert!(closed, "{name}: the connection must close");
    }
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
    let (reply, _) = exchange(address, &[b"GET / HTTP/1.1\r\n\r\n"]).await;
    assert!(reply.ends_with("served"), "{reply:?}");
}

#[tokio::test]
async fn an_idle_connection_parks_without_buffers_and_serves_again() {
    let options = ListenerOptions::default();
    let parked = options.metrics.parked.clone();
    let (address, _trigger) = listener_with(options, |_request, _client| async {
        Response::new(full("ok"))
    })
    .await;
    let mut stream = TcpStream::connect(address).await.expect("connect");
    let mut buffer = [0u8; 1024];
    for round in 0..3 {
        stream
            .write_all(b"GET / HTTP/1.1\r\n\r\n")
            .await
            .expect("write");
        let read = stream.read(&mut buffer).await.expect("read");
        assert!(buffer[..read].ends_with(b"ok"), "round {round}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while parked.get() != 1 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(parked.get(), 1, "round {round}: parked once idle");
    }
    drop(stream);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while parked.get() != 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        parked.get(),
        0,
        "a parked connection that closes is no longer counted"
    );
}

/// Notes when it is dropped.
struct DropFlag(std::sync::Arc<tokio::sync::Notify>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

#[tokio::test]
async fn a_client_that_leaves_cancels_the_request_in_flight() {
    let dropped = std::sync::Arc::new(tokio::sync::Notify::new());
    let flag = dropped.clone();
    let (address, _trigger) =
        listener_with(ListenerOptions::default(), move |_request, _client| {
            let flag = DropFlag(flag.clone());
            async move {
                let _flag = flag;
                std::future::pending::<()>().await;
                Response::new(full("never"))
            }
        })
        .await;
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream
        .write_all(b"GET / HTTP/1.1\r\n\r\n")
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(stream);
    let cancelled = tokio::time::timeout(Duration::from_secs(2), dropped.notified()).await;
    assert!(cancelled.is_ok(), "the handler's future was dropped");
}

#[tokio::test]
async fn a_switch_hands_over_the_socket_with_the_bytes_sent_past_the_upgrade() {
    let (address, _trigger) = listener_with(
        ListenerOptions::default(),
        |mut request, _client| async move {
            let switch = request
                .extensions_mut()
                .remove::<crate::switch::PendingSwitch>();
            tokio::spawn(async move {
                let Some(switch) = switch else { return };
                let Ok(mut stream) = switch.switched().await else {
                    return;
                };
                let mut buffer = [0u8; 64];
                while let Ok(read) = stream.read(&mut buffer).await {
                    if read == 0 || stream.write_all(&buffer[..read]).await.is_err() {
                        break;
                    }
                }
            });
            let mut response = Response::new(full(""));
            *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
            response
                .headers_mut()
                .insert("upgrade", HeaderValue::from_static("echo"));
            response
        },
    )
    .await;
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream
        .write_all(b"GET / HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\nearly")
        .await
        .expect("write");
    let mut received = Vec::new();
    let mut buffer = [0u8; 256];
    while !received.ends_with(b"early") {
        let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buffer))
            .await
            .expect("in time")
            .expect("read");
        assert!(read > 0, "closed: {:?}", String::from_utf8_lossy(&received));
        received.extend_from_slice(&buffer[..read]);
    }
    let text = without_dates(&String::from_utf8_lossy(&received));
    assert_eq!(
        text,
        "HTTP/1.1 101 Switching Protocols\r\nupgrade: echo\r\ndate: <now>\r\n\r\nearly"
    );
    stream.write_all(b" and late").await.expect("write");
    let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buffer))
        .await
        .expect("in time")
        .expect("read");
    assert_eq!(&buffer[..read], b" and late");
}

#[tokio::test]
async fn stopping_closes_idle_connections_and_ends_answers_in_flight_with_close() {
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let waiting = release.clone();
    let (address, trigger) = listener_with(ListenerOptions::default(), move |request, _client| {
        let waiting = waiting.clone();
        async move {
            if request.uri().path() == "/slow" {
                waiting.notified().await;
            }
            Response::new(full("done"))
        }
    })
    .await;
    let mut idle = TcpStream::connect(address).await.expect("connect");
    idle.write_all(b"GET / HTTP/1.1\r\n\r\n")
        .await
        .expect("write");
    let mut buffer = [0u8; 1024];
    let read = idle.read(&mut buffer).await.expect("read");
    assert!(buffer[..read].ends_with(b"done"));
    let mut busy = TcpStream::connect(address).await.expect("connect");
    busy.write_all(b"GET /slow HTTP/1.1\r\n\r\n")
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_millis(50)).await;
    trigger.stop();
    let closed = tokio::time::timeout(Duration::from_secs(2), idle.read(&mut buffer)).await;
    assert!(
        matches!(closed, Ok(Ok(0))),
        "the idle connection closes: {closed:?}"
    );
    release.notify_one();
    let mut received = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(2), busy.read(&mut buffer)).await {
            Ok(Ok(0)) => break,
            Ok(Ok(read)) => received.extend_from_slice(&buffer[..read]),
            other => panic!("{other:?}"),
        }
    }
    let text = String::from_utf8_lossy(&received);
    assert!(
        text.contains("connection: close\r\n") && text.ends_with("done"),
        "{text:?}"
    );
}

#[tokio::test]
async fn a_body_read_after_its_answer_holds_the_next_request_back_and_gets_only_its_own_bytes() {
    let (read_tx, mut read_rx) = tokio::sync::mpsc::unbounded_channel();
    let (address, _trigger) = listener_with(ListenerOptions::default(), move |request, _client| {
        let read_tx = read_tx.clone();
        async move {
            if request.uri().path() == "/upload" {
                // Answer first; read the body afterwards, as an upload that goes on after an
                // early answer does.
                let body = request.into_body();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let read = body.collect().await.map(|collected| collected.to_bytes());
                    let _ = read_tx.send(read.map_err(|error| error.to_string()));
                });
                return Response::new(full("answered"));
            }
            Response::new(full("next"))
        }
    })
    .await;
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream
        .write_all(b"POST /upload HTTP/1.1\r\nContent-Length: 6\r\n\r\nabc")
        .await
        .expect("write");
    let mut buffer = [0u8; 1024];
    let read = stream.read(&mut buffer).await.expect("read");
    assert!(buffer[..read].ends_with(b"answered"));
    stream
        .write_all(b"defGET /next HTTP/1.1\r\n\r\n")
        .await
        .expect("write");
    let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buffer))
        .await
        .expect("in time")
        .expect("read");
    assert!(
        buffer[..read].ends_with(b"next"),
        "{:?}",
        String::from_utf8_lossy(&buffer[..read])
    );
    let body = read_rx.recv().await.expect("the body was read");
    assert_eq!(body.as_deref(), Ok(&b"abcdef"[..]));
}
