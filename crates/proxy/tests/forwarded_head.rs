//! Property: whatever bytes a client sends as a request head, sluice never panics, and every head a backend receives has exactly one Host, an origin-form target and no hop-by-hop header.
//!
//! The proxy runs in this process on a real listener, in front of a raw backend that records
//! each head byte for byte; each case writes its bytes on a new connection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::uri::Authority;
use proptest::prelude::*;
use sluice_proxy::{
    serve, ListenerOptions, Proxy, ProxyOptions, ShutdownSignal, ShutdownTrigger, TableHandle,
};
use sluice_routing::{
    Backend, BackendId, BackendMode, Endpoint, EndpointSet, HostMatch, PathMatch, RoutePolicy,
    TableBuilder,
};
use sluice_testkit::{RawBackend, RawRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Hop-by-hop headers (RFC 9110 §7.6.1 and the legacy ones) that must never reach a backend;
/// `te` may only say `trailers`, and `transfer-encoding` only frame this hop's body.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "trailer",
    "upgrade",
];

/// The proxy under test and its backend, shared by every case.
struct Harness {
    runtime: tokio::runtime::Runtime,
    proxy: SocketAddr,
    backend: RawBackend,
    _stop: ShutdownTrigger,
}

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (proxy, backend, stop) = runtime.block_on(start());
        Harness {
            runtime,
            proxy,
            backend,
            _stop: stop,
        }
    })
}

async fn start() -> (SocketAddr, RawBackend, ShutdownTrigger) {
    let backend = RawBackend::start(IpAddr::V4(Ipv4Addr::new(127, 0, 5, 1)))
        .await
        .unwrap();
    let id = BackendId::new("default", "app", "80");
    let endpoint = Endpoint::new(Authority::try_from(backend.addr().to_string()).unwrap());
    let mut builder = TableBuilder::new();
    builder.add_backend(Backend::new(
        id.clone(),
        BackendMode::Endpoints,
        EndpointSet::new(vec![endpoint]),
    ));
    let policy = Arc::new(RoutePolicy::default());
    builder.add_route(
        HostMatch::Any,
        PathMatch::prefix("/"),
        id.clone(),
        "app".into(),
        policy.clone(),
    );
    builder.set_default_backend(id, policy);
    let proxy = Arc::new(Proxy::new(
        TableHandle::new(builder.build()),
        &ProxyOptions::default(),
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, signal) = ShutdownSignal::new();
    let handler = move |request, client| {
        let proxy = proxy.clone();
        async move { proxy.handle(request, client).await }
    };
    let options = ListenerOptions {
        client_header_timeout: Duration::from_millis(500),
        ..ListenerOptions::default()
    };
    tokio::spawn(serve(listener, handler, signal, options));
    (addr, backend, stop)
}

/// Writes `bytes` on a new connection and reads until a response head has arrived, the
/// connection closes, or `wait` passes.
async fn send(addr: SocketAddr, bytes: &[u8], wait: Duration) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // The server may refuse and close before taking every byte.
    let _ = stream.write_all(bytes).await;
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + wait;
    while !received.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Ok(Ok(read)) if read > 0 => received.extend_from_slice(&buffer[..read]),
            _ => break,
        }
    }
    received
}

/// Why a head a backend received breaks the rules, if it does.
fn violation(head: &RawRequest) -> Option<String> {
    let target = head.request_line().split(' ').nth(1).unwrap_or_default();
    if !target.starts_with('/') {
        return Some(format!("not origin-form: {:?}", head.request_line()));
    }
    if head.header_values("host").len() != 1 {
        return Some(format!("Host lines: {:?}", head.header_values("host")));
    }
    // A WebSocket upgrade keeps exactly `Connection: upgrade` and `Upgrade: websocket`.
    let upgrading = head.header_values("connection") == ["upgrade"]
        && head.header_values("upgrade") == ["websocket"];
    for name in HOP_BY_HOP {
        if upgrading && (name == "connection" || name == "upgrade") {
            continue;
        }
        if !head.header_values(name).is_empty() {
            return Some(format!("hop-by-hop {name}: {:?}", head.header_values(name)));
        }
    }
    if head
        .header_values("te")
        .iter()
        .any(|value| *value != "trailers")
    {
        return Some(format!("te: {:?}", head.header_values("te")));
    }
    if head
        .header_values("transfer-encoding")
        .iter()
        .any(|value| *value != "chunked")
    {
        return Some(format!(
            "transfer-encoding: {:?}",
            head.header_values("transfer-encoding")
        ));
    }
    None
}

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just("GET".to_owned()),
        2 => Just("POST".to_owned()),
        1 => Just("HEAD".to_owned()),
        1 => Just("OPTIONS".to_owned()),
        1 => Just("CONNECT".to_owned()),
        1 => "[A-Z]{1,7}",
    ]
}

fn target() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        2 => Just(".".to_owned()),
        1 => Just("..".to_owned()),
        1 => Just("%2e%2E".to_owned()),
        1 => Just("%2F".to_owned()),
        1 => Just(String::new()),
        8 => "[a-z;=]{1,5}",
        1 => prop_oneof![Just("%00".to_owned()), Just("%z".to_owned())],
    ];
    prop_oneof![
        8 => proptest::collection::vec(segment, 0..6).prop_map(|s| format!("/{}", s.join("/"))),
        1 => Just("http://a.test/x?y=1".to_owned()),
        1 => Just("*".to_owned()),
        1 => Just("a.test:443".to_owned()),
        1 => "[ -~]{0,12}",
    ]
}

/// Headers a proxy must handle with care, mostly well formed, with some that make the request
/// invalid and some made up.
fn header() -> impl Strategy<Value = (String, String)> {
    let curated = prop_oneof![
        Just(("Connection", "close")),
        Just(("Connection", "keep-alive, x-any")),
        Just(("Connection", "host, content-length, te, x-forwarded-for")),
        Just(("Connection", "upgrade")),
        Just(("Keep-Alive", "timeout=5")),
        Just(("TE", "trailers")),
        Just(("TE", "gzip, trailers;q=0.5")),
        Just(("Upgrade", "websocket")),
        Just(("Upgrade", "h2c")),
        Just(("Proxy-Connection", "keep-alive")),
        Just(("Proxy-Authorization", "Basic eA==")),
        Just(("Trailer", "X-Any")),
        Just(("Content-Length", "8")),
        Just(("Content-Length", "0")),
        Just(("X-Forwarded-For", "1.2.3.4")),
        Just(("Forwarded", "for=1.2.3.4")),
        Just(("Cookie", "a=1")),
        Just(("X-Any", "yes")),
    ]
    .prop_map(|(n, v)| (n.to_owned(), v.to_owned()));
    let made_up = ("[A-Za-z-]{1,10}", "[ -~]{0,10}");
    let breaking = prop_oneof![
        Just(("Host", "b.test")),
        Just(("Transfer-Encoding", "chunked")),
        Just(("Content-Length", "x")),
    ]
    .prop_map(|(n, v)| (n.to_owned(), v.to_owned()));
    prop_oneof![12 => curated, 1 => made_up, 1 => breaking]
}

/// A request head assembled from plausible parts (a Host first, then headers a proxy must
/// handle with care), sometimes with bare LFs, and followed by eight body bytes.
fn structured_request() -> impl Strategy<Value = Vec<u8>> {
    let version = prop_oneof![
        12 => Just("HTTP/1.1"),
        3 => Just("HTTP/1.0"),
        1 => Just("HTTP/1.1 "),
        1 => Just("HTTP/9.9"),
    ];
    let line_end = prop_oneof![15 => Just("\r\n"), 1 => Just("\n")];
    (
        method(),
        target(),
        version,
        proptest::collection::vec(header(), 0..5),
        line_end,
    )
        .prop_map(|(method, target, version, headers, end)| {
            let mut head = format!("{method} {target} {version}{end}Host: a.test{end}");
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}{end}"));
            }
            head.push_str(end);
            head.push_str("abcdefgh");
            head.into_bytes()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_head_reaches_a_backend_only_in_a_safe_form(
        request in prop_oneof![
            3 => structured_request(),
            1 => proptest::collection::vec(any::<u8>(), 0..160),
        ]
    ) {
        let harness = harness();
        let before = harness.backend.requests().len();
        harness.runtime.block_on(send(harness.proxy, &request, Duration::from_millis(300)));
        for head in &harness.backend.requests()[before..] {
            if let Some(problem) = violation(head) {
                prop_assert!(false, "{problem}\nsent {:?}\nbackend got {:?}", String::from_utf8_lossy(&request), head.head);
            }
        }
        let alive = harness.runtime.block_on(send(
            harness.proxy,
            b"GET /alive HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
            Duration::from_secs(5),
        ));
        prop_assert!(alive.starts_with(b"HTTP/1.1 200"), "sluice stopped answering: {:?}", String::from_utf8_lossy(&alive));
    }
}
