//! One request's attempts against real endpoints on loopback: every way an ejected endpoint's trial can end resolves it, endpoints waiting for their trial count against the ejection cap, and where retries go once every endpoint was tried.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use http::uri::Authority;
use sluice_routing::BackendId;
use sluice_testkit::EchoBackend;

use super::*;
use crate::upstream::response_body::TrackedBody;

fn loopback(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 3, last))
}

fn endpoint(addr: SocketAddr) -> Endpoint {
    Endpoint::new(Authority::try_from(addr.to_string()).unwrap())
}

/// An address on which nothing listens (connects are refused).
fn closed(last: u8) -> SocketAddr {
    let listener = std::net::TcpListener::bind(SocketAddr::new(loopback(last), 0)).unwrap();
    listener.local_addr().unwrap()
}

/// A backend of these endpoints, the runtime state, and a route policy.
struct Setup {
    runtime: Runtime,
    retry_buffer: RetryBuffer,
    backend: Backend,
    policy: RoutePolicy,
}

impl Setup {
    fn new(endpoints: &[Endpoint]) -> Self {
        Self {
            runtime: Runtime::default(),
            retry_buffer: RetryBuffer::default(),
            backend: Backend::new(
                BackendId::new("default", "app", "80"),
                BackendMode::Endpoints,
                EndpointSet::new(endpoints.to_vec()),
            ),
            policy: RoutePolicy::default(),
        }
    }

    fn settings(&self) -> AttemptSettings<'_> {
        AttemptSettings {
            runtime: &self.runtime,
            connect_timeout: Duration::from_secs(1),
            response_header_timeout: Duration::from_secs(5),
            body_idle_timeout: Duration::from_secs(5),
            upstream_idle_timeout: Duration::from_secs(60),
            retry_buffer: &self.retry_buffer,
        }
    }

    /// GETs `path`, trying `pinned` first when given.
    async fn get(&self, path: &str, pinned: Option<&Endpoint>) -> Result<u16, String> {
        self.send(path, pinned, self.settings()).await
    }

    async fn send(
        &self,
        path: &str,
        pinned: Option<&Endpoint>,
        settings: AttemptSettings<'_>,
    ) -> Result<u16, String> {
        let (parts, ()) = Request::get(path)
            .header("host", "app.test")
            .body(())
            .unwrap()
            .into_parts();
        let exchange = Exchange::new(
            settings,
            &self.backend,
            &self.policy,
            parts,
            RequestBody::Replayable(bytes::Bytes::new()),
            loopback(1),
            pinned.cloned(),
        );
        let answer = exchange
            .run()
            .await
            .result
            .map_err(|error| error.to_string())?;
        let status = answer.response.status().as_u16();
        // Read the body to its end, as the response path does: that returns the connection.
        let body = TrackedBody::new(answer.response.into_body());
        http_body_util::BodyExt::collect(body)
            .await
            .map_err(|error| error.to_string())?;
        Ok(status)
    }

    /// Ejects `endpoint` long enough ago that its ejection has run out: the next request to
    /// ask is its trial.
    fn eject_expired(&self, endpoint: &Endpoint) {
        let long_ago = Instant::now() - Duration::from_secs(60);
        let stats = &self.runtime.endpoint(endpoint).stats;
        let ejections = (0..3)
            .filter(|_| stats.record_connect_failure(long_ago, true))
            .count();
        assert!(ejections == 1 && stats.is_ejected());
    }

    fn admission(&self, endpoint: &Endpoint) -> &'static str {
        match self.runtime.endpoint(endpoint).stats.admit(Instant::now()) {
            Admission::Open => "open",
            Admission::Trial(_) => "trial due",
            Admission::Ejected => "ejected",
        }
    }
}

async fn echo(name: &str, last: u8) -> (EchoBackend, Endpoint) {
    let pod = EchoBackend::start(name, loopback(last)).await.unwrap();
    let endpoint = endpoint(pod.addr());
    (pod, endpoint)
}

#[tokio::test]
async fn a_trial_over_a_pooled_connection_that_answers_returns_the_endpoint() {
    let (_pod, only) = echo("only", 10).await;
    let setup = Setup::new(std::slice::from_ref(&only));
    assert_eq!(setup.get("/", None).await, Ok(200));
    // Let the connection go back to the pool, then eject the endpoint.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(setup.runtime.endpoint(&only).pool.idle_count(), 1);
    setup.eject_expired(&only);

    assert_eq!(setup.get("/", None).await, Ok(200));
    assert_eq!(setup.admission(&only), "open");
    assert!(!setup.runtime.endpoint(&only).stats.is_ejected());
}

#[tokio::test]
async fn a_trial_refused_by_the_retry_budget_releases_its_claim() {
    let (_busy, busy) = echo("busy", 11).await;
    let (_ejected, ejected) = echo("ejected", 12).await;
    let setup = Setup::new(&[busy.clone(), ejected.clone()]);
    let budget = setup.runtime.budget(&setup.backend);
    while budget.try_retry(Instant::now()) {}
    setup.eject_expired(&ejected);

    // The first try answers 503; the retry would be the ejected endpoint's trial, but the
    // budget is spent.
    assert_eq!(
        setup.get("/__testkit/status/503", Some(&busy)).await,
        Ok(503)
    );
    assert_eq!(setup.runtime.metrics.retry_budget_exhausted.get(), 1);
    assert_eq!(
        setup.admission(&ejected),
        "trial due",
        "the claim was released for the next request"
    );
}

#[tokio::test]
async fn a_trial_that_fails_after_sending_ejects_the_endpoint_again() {
    let (_a, a) = echo("a", 13).await;
    let (_b, b) = echo("b", 14).await;
    let (_c, c) = echo("c", 15).await;
    let setup = Setup::new(&[a.clone(), b, c]);
    setup.eject_expired(&a);

    let _ = setup.get("/__testkit/reset", Some(&a)).await;
    assert_eq!(setup.admission(&a), "ejected");
    assert_eq!(setup.runtime.metrics.ejections(), 1);
}

#[tokio::test]
async fn a_trial_that_times_out_ejects_the_endpoint_again() {
    let (_a, a) = echo("a", 16).await;
    let (_b, b) = echo("b", 17).await;
    let (_c, c) = echo("c", 18).await;
    let mut setup = Setup::new(&[a.clone(), b, c]);
    setup.policy.retry.per_try_timeout = Some(Duration::from_millis(100));
    setup.policy.retry.tries = 1;
    setup.eject_expired(&a);

    let answer = setup.get("/__testkit/sleep/2000", Some(&a)).await;
    assert_eq!(answer, Err("upstream response timed out".to_owned()));
    assert_eq!(setup.admission(&a), "ejected");
}

#[tokio::test]
async fn a_trial_whose_connect_fails_ejects_the_endpoint_again() {
    let dead = endpoint(closed(19));
    let (_b, b) = echo("b", 20).await;
    let (_c, c) = echo("c", 21).await;
    let setup = Setup::new(&[dead.clone(), b, c]);
    setup.eject_expired(&dead);

    assert_eq!(
        setup.get("/", Some(&dead)).await,
        Ok(200),
        "the next endpoint answers"
    );
    assert_eq!(setup.admission(&dead), "ejected");
}

#[tokio::test]
async fn a_trial_whose_client_goes_away_releases_its_claim() {
    let (_slow, slow) = echo("slow", 22).await;
    let setup = Setup::new(std::slice::from_ref(&slow));
    setup.eject_expired(&slow);

    let gave_up = tokio::time::timeout(
        Duration::from_millis(200),
        setup.get("/__testkit/sleep/5000", None),
    )
    .await;
    assert!(gave_up.is_err(), "the client went away first");
    assert_eq!(setup.admission(&slow), "trial due");
}

#[tokio::test]
async fn an_endpoint_waiting_for_its_trial_counts_against_the_ejection_cap() {
    let (_waiting, waiting) = echo("waiting", 23).await;
    let dead = endpoint(closed(24));
    let mut setup = Setup::new(&[waiting.clone(), dead.clone()]);
    setup.policy.retry.on.off = true;
    setup.eject_expired(&waiting);

    // Three failed connects would eject `dead`, but with `waiting` still out (no request has
    // taken its trial), ejecting `dead` too would leave the backend nothing.
    for _ in 0..3 {
        let _ = setup.get("/", Some(&dead)).await;
    }
    assert!(!setup.runtime.endpoint(&dead).stats.is_ejected());
    assert_eq!(setup.runtime.metrics.ejections(), 0);
}

/// A listener whose accept queue is full, so a new connect to it neither completes nor is
/// refused: it times out, as a connect to a host that drops packets does.
struct Blackhole {
    addr: SocketAddr,
    _listener: tokio::net::TcpListener,
    _queued: Vec<tokio::net::TcpStream>,
}

impl Blackhole {
    async fn start(last: u8) -> Self {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(loopback(last), 0)).unwrap();
        let listener = socket.listen(1).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut queued = Vec::new();
        loop {
            let connect = tokio::net::TcpStream::connect(addr);
            match tokio::time::timeout(Duration::from_millis(200), connect).await {
                Ok(Ok(stream)) => queued.push(stream),
                _ => break,
            }
            assert!(queued.len() < 64, "the accept queue never filled");
        }
        Self {
            addr,
            _listener: listener,
            _queued: queued,
        }
    }
}

#[tokio::test]
async fn a_connect_that_times_out_counts_as_a_try_and_a_refused_one_does_not() {
    let mut holes = Vec::new();
    for last in 30..34 {
        holes.push(Blackhole::start(last).await);
    }
    let timing_out: Vec<Endpoint> = holes.iter().map(|h| endpoint(h.addr)).collect();
    let mut setup = Setup::new(&timing_out);
    setup.policy.retry.tries = 3;
    let settings = AttemptSettings {
        connect_timeout: Duration::from_millis(150),
        ..setup.settings()
    };
    let answer = setup.send("/", None, settings).await;
    assert_eq!(answer, Err("upstream connect timed out".to_owned()));
    assert_eq!(
        setup.runtime.metrics.retries(),
        2,
        "three tries in all, not one per endpoint"
    );

    let refusing: Vec<Endpoint> = (40..44).map(|last| endpoint(closed(last))).collect();
    let setup = Setup::new(&refusing);
    let answer = setup.get("/", None).await;
    assert_eq!(answer, Err("upstream connect failed".to_owned()));
    assert_eq!(
        setup.runtime.metrics.retries(),
        3,
        "a refused connect costs nothing: every endpoint is tried"
    );
}

/// The retry simulation's query: the first `fail` requests with this uuid answer `code`.
fn failing(uuid: &str, code: u16, fail: u32) -> String {
    format!("/retry?responseCode={code}&succeedAfter={fail}&uuid={uuid}")
}

#[tokio::test]
async fn a_revisiting_route_retries_its_only_pod_up_to_its_tries() {
    let (pod, only) = echo("only", 40).await;
    let mut setup = Setup::new(std::slice::from_ref(&only));
    setup.policy.retry.revisit = true;
    setup.policy.retry.on.http_500 = true;
    setup.policy.retry.tries = 4;

    assert_eq!(setup.get(&failing("a", 500, 3), None).await, Ok(200));
    assert_eq!(pod.requests(), 4, "three failures, then the answer");
    assert_eq!(setup.get(&failing("b", 500, 4), None).await, Ok(500));
    assert_eq!(pod.requests(), 8, "four tries in all, then the last 500");
}

#[tokio::test]
async fn a_route_that_does_not_revisit_never_tries_one_pod_twice() {
    let (pod, only) = echo("only", 41).await;
    let mut setup = Setup::new(std::slice::from_ref(&only));
    setup.policy.retry.on.http_500 = true;
    setup.policy.retry.tries = 4;

    assert_eq!(setup.get(&failing("a", 500, 1), None).await, Ok(500));
    assert_eq!(pod.requests(), 1);
}

#[tokio::test]
async fn a_revisit_goes_to_the_pod_tried_longest_ago() {
    let (a_pod, a) = echo("a", 42).await;
    let (b_pod, b) = echo("b", 43).await;
    let mut setup = Setup::new(&[a.clone(), b]);
    setup.policy.retry.revisit = true;
    setup.policy.retry.tries = 5;

    // Each pod fails its first two: a, b, a, b fail; the fifth try (a) answers.
    assert_eq!(
        setup.get(&failing("shared", 503, 2), Some(&a)).await,
        Ok(200)
    );
    assert_eq!((a_pod.requests(), b_pod.requests()), (3, 2));
}

#[tokio::test]
async fn revisiting_a_refused_endpoint_costs_a_try_each_time() {
    let dead = endpoint(closed(44));
    let mut setup = Setup::new(std::slice::from_ref(&dead));
    setup.policy.retry.revisit = true;
    setup.policy.retry.tries = 3;

    let answer = setup.get("/", None).await;
    assert!(answer.is_err(), "{answer:?}");
    // The first refusal is free, as refusals are (it put no load on the endpoint, and an
    // untried endpoint could have been next); each revisit costs a try.
    assert_eq!(
        setup.runtime.metrics.retries(),
        3,
        "the try and three revisits"
    );
}
