//! Distributed tracing through the real binary: a loopback OTLP/HTTP collector that decodes the protobuf `ExportTraceServiceRequest`s sluice posts, curl as the client, and a raw backend that records the `traceparent` each pod receives byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use sluice_testkit::{RawBackend, RawBackendOptions, RawRequest};
use support::{annotated_ingress, pod_ip, service, write_manifest, Sluice};
use tokio::net::TcpListener;

/// One span as the collector received it, with its resource's `service.name`.
#[derive(Clone, Debug)]
struct Received {
    service: String,
    span: Span,
}

impl Received {
    fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }

    fn span_id(&self) -> String {
        hex(&self.span.span_id)
    }

    fn parent_id(&self) -> String {
        hex(&self.span.parent_span_id)
    }

    fn attribute(&self, key: &str) -> Option<String> {
        attribute(&self.span.attributes, key)
    }
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    Some(match value.value.as_ref()? {
        Value::StringValue(text) => text.clone(),
        Value::IntValue(number) => number.to_string(),
        Value::BoolValue(flag) => flag.to_string(),
        other => format!("{other:?}"),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An OTLP/HTTP collector on loopback: every POST is decoded as protobuf.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Received>>>,
    /// Path and content type of every POST.
    posts: Arc<Mutex<Vec<(String, String)>>>,
}

impl Collector {
    async fn start() -> (Self, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let collector = Self::default();
        let shared = collector.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let shared = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(shared.take(request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        (collector, addr)
    }

    async fn take(
        &self,
        request: http::Request<hyper::body::Incoming>,
    ) -> http::Response<Full<Bytes>> {
        let path = request.uri().path().to_owned();
        let content_type = request
            .headers()
            .get("content-type")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = request.into_body().collect().await.unwrap().to_bytes();
        self.posts.lock().unwrap().push((path, content_type));
        let export =
            ExportTraceServiceRequest::decode(body).expect("a protobuf ExportTraceServiceRequest");
        let mut spans = self.spans.lock().unwrap();
        for resource_spans in export.resource_spans {
            let service = resource_spans
                .resource
                .as_ref()
                .and_then(|resource| attribute(&resource.attributes, "service.name"))
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    spans.push(Received {
                        service: service.clone(),
                        span,
                    });
                }
            }
        }
        http::Response::builder()
            .header("content-type", "application/x-protobuf")
            .body(Full::new(Bytes::new()))
            .unwrap()
    }

    fn of_trace(&self, trace_id: &str) -> Vec<Received> {
        let spans = self.spans.lock().unwrap();
        spans
            .iter()
            .filter(|span| span.trace_id() == trace_id)
            .cloned()
            .collect()
    }

    /// The spans of `trace_id` once its SERVER span has arrived: it ends last, and one task
    /// exports spans in the order they ended, so its attempts' spans are in by then. Spans
    /// are exported within a few seconds.
    async fn wait_for(&self, trace_id: &str) -> Vec<Received> {
        for _ in 0..200 {
            let spans = self.of_trace(trace_id);
            if spans.iter().any(|s| s.span.kind == SpanKind::Server as i32) {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "the SERVER span of trace {trace_id} did not arrive: {:#?}",
            self.of_trace(trace_id)
        );
    }
}

/// `curl` with `headers`: the status it got.
fn curl(url: &str, headers: &[String]) -> u16 {
    let mut command = Command::new("curl");
    command.args([
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "10",
    ]);
    for header in headers {
        command.arg("-H").arg(header);
    }
    let output = command.arg(url).output().expect("curl");
    String::from_utf8_lossy(&output.stdout).parse().unwrap_or(0)
}

/// The `traceparent` fields a pod received: version, trace id, parent id, flags.
fn traceparent_of(request: &RawRequest) -> [String; 4] {
    let value = request.header("traceparent").expect("one traceparent");
    let parts: Vec<String> = value.split('-').map(str::to_owned).collect();
    assert_eq!(parts.len(), 4, "{value}");
    assert!(
        parts[1].len() == 32 && parts[2].len() == 16,
        "a well-formed traceparent: {value}"
    );
    [
        parts[0].clone(),
        parts[1].clone(),
        parts[2].clone(),
        parts[3].clone(),
    ]
}

/// The request the pod received that carries `marker` in its request line.
fn request_with(pod: &RawBackend, marker: &str) -> RawRequest {
    let found: Vec<RawRequest> = pod
        .requests()
        .into_iter()
        .filter(|request| request.request_line().contains(marker))
        .collect();
    assert_eq!(found.len(), 1, "one request for {marker}: {found:#?}");
    found.into_iter().next().unwrap()
}

fn failing_answer(request: &RawRequest) -> String {
    let status = if request.request_line().contains("/api/fail") {
        "503 Service Unavailable"
    } else {
        "200 OK"
    };
    format!("HTTP/1.1 {status}\r\ncontent-length: 2\r\n\r\nok")
}

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

struct Setup {
    _dir: tempfile::TempDir,
    sluice: Sluice,
    pod: RawBackend,
    collector: Collector,
    log: std::path::PathBuf,
}

/// sluice tracing to a loopback collector with `flags`, in front of one raw pod (and, on
/// `retry.test`, a Service whose first endpoint refuses connections).
async fn setup(pod_octet: u8, flags: &[&str]) -> Setup {
    let (collector, collector_addr) = Collector::start().await;
    let pod = RawBackend::start_with(
        SocketAddr::new(pod_ip(pod_octet), 0),
        RawBackendOptions {
            answer: Some(failing_answer),
            ..RawBackendOptions::default()
        },
    )
    .await
    .unwrap();
    // Nothing listens there: a connect is refused, and the request goes to the next pod.
    let refused = SocketAddr::new(pod_ip(pod_octet + 1), pod.addr().port());
    let dir = tempfile::tempdir().unwrap();
    let path = |prefix| [(prefix, "Prefix", "app", 80)];
    write_manifest(
        dir.path(),
        "app.yaml",
        &[
            service("app", 80, &[pod.addr()]),
            annotated_ingress("traced", "trace.test", &path("/api"), &[]),
            annotated_ingress(
                "untraced",
                "untraced.test",
                &path("/"),
                &[("nginx.ingress.kubernetes.io/enable-opentelemetry", "false")],
            ),
            annotated_ingress(
                "distrusting",
                "distrust.test",
                &path("/"),
                &[(
                    "nginx.ingress.kubernetes.io/opentelemetry-trust-incoming-span",
                    "false",
                )],
            ),
            service("flaky", 80, &[refused, pod.addr()]),
            annotated_ingress(
                "retried",
                "retry.test",
                &[("/", "Prefix", "flaky", 80)],
                &[],
            ),
        ],
    );
    let log = dir.path().join("access.log");
    let endpoint = format!("http://{collector_addr}");
    let mut args = vec![
        "--tracing-otlp-endpoint",
        &endpoint,
        "--access-log",
        "json",
        "--access-log-file",
        log.to_str().unwrap(),
    ];
    args.extend_from_slice(flags);
    let sluice = Sluice::start(dir.path(), &args).await;
    Setup {
        _dir: dir,
        sluice,
        pod,
        collector,
        log,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_trace_is_continued_with_a_server_span_and_a_client_span_the_pod_sees() {
    let setup = setup(240, &["--tracing-service-name", "edge-proxy"]).await;
    let url = setup.sluice.url("/api/items?page=2");
    let incoming = format!("traceparent: 00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let status = curl(
        &url,
        &[
            "Host: trace.test".into(),
            incoming,
            "tracestate: rojo=00f067aa0ba902b7,congo=t61rcWkgMzE".into(),
            "User-Agent: trace-test/1.0".into(),
        ],
    );
    assert_eq!(status, 200);

    // The pod continues the client's trace, under sluice's CLIENT span, with tracestate as sent.
    let received = request_with(&setup.pod, "/api/items");
    let [version, trace_id, parent_id, flags] = traceparent_of(&received);
    assert_eq!(
        (version.as_str(), trace_id.as_str(), flags.as_str()),
        ("00", CLIENT_TRACE, "01")
    );
    assert_ne!(parent_id, CLIENT_SPAN);
    assert_eq!(
        received.header("tracestate"),
        Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
    );

    let spans = setup.collector.wait_for(CLIENT_TRACE).await;
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let server = spans
        .iter()
        .find(|s| s.span.kind == SpanKind::Server as i32)
        .expect("a SERVER span");
    let client = spans
        .iter()
        .find(|s| s.span.kind == SpanKind::Client as i32)
        .expect("a CLIENT span");
    assert_eq!(server.span.name, "GET /api");
    assert_eq!(
        server.parent_id(),
        CLIENT_SPAN,
        "the client's span is the parent"
    );
    assert_eq!(client.parent_id(), server.span_id());
    assert_eq!(
        client.span_id(),
        parent_id,
        "the pod's parent is the CLIENT span"
    );
    assert_eq!(server.service, "edge-proxy");
    for (key, value) in [
        ("http.request.method", "GET"),
        ("url.path", "/api/items"),
        ("url.scheme", "http"),
        ("http.response.status_code", "200"),
        ("server.address", "trace.test"),
        ("client.address", "127.0.0.1"),
        ("network.protocol.version", "1.1"),
        ("user_agent.original", "trace-test/1.0"),
        ("http.route", "/api"),
        ("sluice.route.kind", "Ingress"),
        ("sluice.route.namespace", "default"),
        ("sluice.route.name", "traced"),
        ("sluice.service.name", "app"),
    ] {
        assert_eq!(
            server.attribute(key).as_deref(),
            Some(value),
            "SERVER {key}"
        );
    }
    assert_eq!(
        client.attribute("server.address"),
        Some(setup.pod.addr().ip().to_string())
    );
    assert_eq!(
        client.attribute("server.port"),
        Some(setup.pod.addr().port().to_string())
    );
    assert_eq!(
        client.attribute("http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(client.attribute("http.request.resend_count"), None);
    assert!(server.span.start_time_unix_nano <= client.span.start_time_unix_nano);
    assert!(server.span.end_time_unix_nano >= client.span.end_time_unix_nano);
    let posts = setup.collector.posts.lock().unwrap().clone();
    assert!(
        posts
            .iter()
            .all(|(path, kind)| path == "/v1/traces" && kind == "application/x-protobuf"),
        "{posts:?}"
    );

    // The access log carries the trace id.
    support::wait_until("the access-log line", Duration::from_secs(5), || async {
        std::fs::read_to_string(&setup.log).is_ok_and(|text| text.contains(CLIENT_TRACE))
    })
    .await;
    let text = std::fs::read_to_string(&setup.log).unwrap();
    let line: serde_json::Value = text
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .find(|line| line["path"] == "/api/items?page=2")
        .expect("the request's line");
    assert_eq!(line["trace_id"], CLIENT_TRACE);

    // A 5xx from the pod marks both spans as errors.
    let failing = "0af7651916cd43dd8448eb211c80319c";
    let status = curl(
        &setup.sluice.url("/api/fail"),
        &[
            "Host: trace.test".into(),
            format!("traceparent: 00-{failing}-b7ad6b7169203331-01"),
        ],
    );
    assert_eq!(status, 503);
    let spans = setup.collector.wait_for(failing).await;
    for span in &spans {
        let status = span.span.status.as_ref().expect("a status");
        assert_eq!(status.code, StatusCode::Error as i32, "{span:#?}");
        assert_eq!(
            span.attribute("http.response.status_code").as_deref(),
            Some("503")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_usable_traceparent_a_new_trace_starts_and_the_pod_still_gets_one() {
    let setup = setup(242, &[]).await;
    // No traceparent: a new trace whose root is sluice's SERVER span.
    assert_eq!(
        curl(
            &setup.sluice.url("/api/fresh"),
            &["Host: trace.test".into()]
        ),
        200
    );
    let [_, trace_id, parent_id, flags] = traceparent_of(&request_with(&setup.pod, "/api/fresh"));
    assert_eq!(flags, "01");
    let spans = setup.collector.wait_for(&trace_id).await;
    let server = spans
        .iter()
        .find(|s| s.span.kind == SpanKind::Server as i32)
        .unwrap();
    assert!(server.span.parent_span_id.is_empty(), "a root span");
    let client = spans
        .iter()
        .find(|s| s.span.kind == SpanKind::Client as i32)
        .unwrap();
    assert_eq!(client.span_id(), parent_id);

    // Malformed traceparents are never forwarded as sent: each starts a new trace, and the
    // client's tracestate, which belongs to the trace it named, goes with it.
    let malformed = [
        format!("00-{}-{CLIENT_SPAN}-01", CLIENT_TRACE.to_uppercase()),
        format!("00-00000000000000000000000000000000-{CLIENT_SPAN}-01"),
        format!("00-{CLIENT_TRACE}-0000000000000000-01"),
        format!("ff-{CLIENT_TRACE}-{CLIENT_SPAN}-01"),
        format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01-trailing"),
        "not a traceparent".to_owned(),
    ];
    for (index, value) in malformed.iter().enumerate() {
        let path = format!("/api/malformed-{index}");
        let status = curl(
            &setup.sluice.url(&path),
            &[
                "Host: trace.test".into(),
                format!("traceparent: {value}"),
                "tracestate: vendor=value".into(),
            ],
        );
        assert_eq!(status, 200);
        let received = request_with(&setup.pod, &path);
        let [version, trace_id, _, _] = traceparent_of(&received);
        assert_eq!(version, "00");
        assert_ne!(received.header("traceparent"), Some(value.as_str()));
        assert_ne!(trace_id, CLIENT_TRACE, "{value}");
        assert_eq!(received.header("tracestate"), None, "{value}");
        let spans = setup.collector.wait_for(&trace_id).await;
        assert!(spans
            .iter()
            .all(|s| s.span.parent_span_id.is_empty() || s.span.kind == SpanKind::Client as i32));
    }

    // An unsampled trace is followed: no spans, and the pod is told not to record either.
    let unsampled = "11111111111111111111111111111111";
    let status = curl(
        &setup.sluice.url("/api/unsampled"),
        &[
            "Host: trace.test".into(),
            format!("traceparent: 00-{unsampled}-{CLIENT_SPAN}-00"),
        ],
    );
    assert_eq!(status, 200);
    let [_, trace_id, _, flags] = traceparent_of(&request_with(&setup.pod, "/api/unsampled"));
    assert_eq!((trace_id.as_str(), flags.as_str()), (unsampled, "00"));
    // A later sampled request's spans arrive; the unsampled trace's never do.
    let later = "22222222222222222222222222222222";
    curl(
        &setup.sluice.url("/api/later"),
        &[
            "Host: trace.test".into(),
            format!("traceparent: 00-{later}-{CLIENT_SPAN}-01"),
        ],
    );
    setup.collector.wait_for(later).await;
    assert!(setup.collector.of_trace(unsampled).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ingress_nginx_annotations_turn_tracing_off_or_distrust_the_clients_span() {
    let setup = setup(244, &[]).await;
    let incoming = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");

    // enable-opentelemetry: "false": no span, the traceparent forwarded unchanged.
    let status = curl(
        &setup.sluice.url("/off"),
        &[
            "Host: untraced.test".into(),
            format!("traceparent: {incoming}"),
        ],
    );
    assert_eq!(status, 200);
    assert_eq!(
        request_with(&setup.pod, "/off").header("traceparent"),
        Some(incoming.as_str())
    );

    // opentelemetry-trust-incoming-span: "false": a new trace, the pod sees that one.
    let status = curl(
        &setup.sluice.url("/distrusted"),
        &[
            "Host: distrust.test".into(),
            format!("traceparent: {incoming}"),
        ],
    );
    assert_eq!(status, 200);
    let [_, trace_id, _, _] = traceparent_of(&request_with(&setup.pod, "/distrusted"));
    assert_ne!(trace_id, CLIENT_TRACE);
    let spans = setup.collector.wait_for(&trace_id).await;
    let server = spans
        .iter()
        .find(|s| s.span.kind == SpanKind::Server as i32)
        .unwrap();
    assert!(server.span.parent_span_id.is_empty());
    assert_eq!(
        server.attribute("sluice.route.name").as_deref(),
        Some("distrusting")
    );
    // Both requests' spans have gone out by now; none belongs to the client's trace.
    assert!(setup.collector.of_trace(CLIENT_TRACE).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_request_has_a_client_span_per_attempt_with_the_retrys_reason() {
    let setup = setup(246, &[]).await;
    // The Service's first endpoint refuses connections; round robin sends one of these
    // requests there first, and it is retried on the pod.
    let mut retried = None;
    for index in 0..4 {
        let trace = format!("{index:032x}").replace('0', "a");
        let status = curl(
            &setup.sluice.url(&format!("/retry-{index}")),
            &[
                "Host: retry.test".into(),
                format!("traceparent: 00-{trace}-{CLIENT_SPAN}-01"),
            ],
        );
        assert_eq!(status, 200);
        let spans = setup.collector.wait_for(&trace).await;
        let clients = spans
            .iter()
            .filter(|s| s.span.kind == SpanKind::Client as i32)
            .count();
        if clients == 2 {
            retried = Some((trace, spans));
            break;
        }
    }
    let (trace, spans) = retried.expect("a request retried after a refused connect");
    let server = spans
        .iter()
        .find(|s| s.span.kind == SpanKind::Server as i32)
        .unwrap();
    let mut clients: Vec<&Received> = spans
        .iter()
        .filter(|s| s.span.kind == SpanKind::Client as i32)
        .collect();
    clients.sort_by_key(|s| s.span.start_time_unix_nano);
    assert_eq!(clients.len(), 2, "{clients:#?}");
    let (first, second) = (clients[0], clients[1]);
    assert!(clients.iter().all(|c| c.parent_id() == server.span_id()));
    assert_eq!(
        first.attribute("error.type").as_deref(),
        Some("connect_error")
    );
    assert_eq!(
        first.span.status.as_ref().map(|s| s.code),
        Some(StatusCode::Error as i32)
    );
    assert_eq!(first.attribute("http.request.resend_count"), None);
    assert_eq!(
        second.attribute("http.request.resend_count").as_deref(),
        Some("1")
    );
    assert_eq!(
        second.attribute("http.response.status_code").as_deref(),
        Some("200")
    );
    let event = second
        .span
        .events
        .iter()
        .find(|e| e.name == "retry")
        .expect("a retry event");
    assert_eq!(
        attribute(&event.attributes, "sluice.retry.reason").as_deref(),
        Some("connect_error")
    );
    // The pod saw the second attempt's span as its parent.
    let pod_request = setup
        .pod
        .requests()
        .into_iter()
        .find(|request| {
            request
                .header("traceparent")
                .is_some_and(|t| t.contains(&trace))
        })
        .unwrap();
    assert_eq!(traceparent_of(&pod_request)[2], second.span_id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_costs_no_request_and_the_drops_are_counted() {
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let pod = RawBackend::start(pod_ip(248)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    support::write_catch_all(dir.path(), "app", &[pod.addr()]);
    let sluice = Sluice::start(dir.path(), &["--tracing-otlp-endpoint", &endpoint]).await;
    for index in 0..20 {
        assert_eq!(curl(&sluice.url(&format!("/{index}")), &[]), 200);
    }
    assert!(pod
        .requests()
        .iter()
        .all(|r| r.header("traceparent").is_some()));
    support::wait_until("dropped spans counted", Duration::from_secs(15), || async {
        sluice.metric("sluice_tracing_spans_dropped_total").await >= 40.0
    })
    .await;
    // Still serving.
    assert_eq!(curl(&sluice.url("/after"), &[]), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sample_ratio_of_zero_records_only_the_traces_clients_sampled() {
    let setup = setup(250, &["--tracing-sample-ratio", "0"]).await;
    assert_eq!(
        curl(&setup.sluice.url("/api/new"), &["Host: trace.test".into()]),
        200
    );
    let [_, unrecorded, _, flags] = traceparent_of(&request_with(&setup.pod, "/api/new"));
    assert_eq!(flags, "00", "the pod is told the trace is not recorded");
    let status = curl(
        &setup.sluice.url("/api/sampled"),
        &[
            "Host: trace.test".into(),
            format!("traceparent: 00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"),
        ],
    );
    assert_eq!(status, 200);
    setup.collector.wait_for(CLIENT_TRACE).await;
    assert!(setup.collector.of_trace(&unrecorded).is_empty());
}

#[test]
fn a_sample_ratio_outside_zero_to_one_is_refused() {
    let output = Command::new(support::sluice_binary())
        .args(["serve", "--manifests", ".", "--tracing-sample-ratio", "1.5"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--tracing-sample-ratio"), "{stderr}");
}
