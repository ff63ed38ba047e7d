//! The load generator: open-loop requests at a fixed rate through a pooled keep-alive client, each one classified.
//!
//! Every tick (1 ms at most) sends as many requests as are due since the start, so a slow
//! answer never slows the rate down. Each request is its own task. Latency is measured from
//! sending to the end of the body, and the percentiles cover successful requests only.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, Error as ClientError};
use hyper_util::rt::TokioExecutor;
use tokio::sync::oneshot;
use tokio::task::{JoinError, JoinHandle, JoinSet};
use tokio::time::{Instant, MissedTickBehavior};

use crate::error::DrillError;
use crate::options::Method;

/// The Host header of every request.
pub const DRILL_HOST: &str = "drill.local";
/// How long a request may take before it counts as `timeout`.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const POST_BODY: &[u8] = &[b'x'; 64];

type DrillClient = Client<HttpConnector, Full<Bytes>>;

/// Why one request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// A complete response with a status other than 200.
    Status(u16),
    /// The proxy could not be reached.
    Connect,
    /// The connection closed or reset before a complete response head.
    Reset,
    /// The body broke off after 200 headers.
    Truncated,
    /// No complete answer within [`REQUEST_TIMEOUT`].
    Timeout,
}

impl Failure {
    /// The failure kind as the report names it: `status_503`, `connect`, `reset`, ...
    pub fn kind(self) -> String {
        match self {
            Failure::Status(code) => format!("status_{code}"),
            Failure::Connect => "connect".to_owned(),
            Failure::Reset => "reset".to_owned(),
            Failure::Truncated => "truncated".to_owned(),
            Failure::Timeout => "timeout".to_owned(),
        }
    }
}

/// What the load generator saw.
#[derive(Clone, Debug, Default)]
pub struct LoadOutcome {
    /// Requests sent (and finished).
    pub requests: u64,
    /// Requests that failed.
    pub failed: u64,
    /// Failed requests by kind.
    pub failures: BTreeMap<String, u64>,
    latencies_us: Vec<u64>,
}

impl LoadOutcome {
    fn record(&mut self, latency: Duration, result: Result<(), Failure>) {
        self.requests += 1;
        match result {
            Ok(()) => self
                .latencies_us
                .push(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX)),
            Err(failure) => {
                self.failed += 1;
                *self.failures.entry(failure.kind()).or_default() += 1;
            }
        }
    }

    fn record_lost(&mut self, _error: JoinError) {
        self.requests += 1;
        self.failed += 1;
        *self.failures.entry("lost".to_owned()).or_default() += 1;
    }

    /// The `quantile` (0..=1, nearest rank) of successful requests' latency, in milliseconds.
    pub fn latency_ms(&self, quantile: f64) -> f64 {
        let mut sorted = self.latencies_us.clone();
        sorted.sort_unstable();
        let Some(last) = sorted.len().checked_sub(1) else {
            return 0.0;
        };
        let rank = (quantile.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
        let micros = sorted[rank.saturating_sub(1).min(last)];
        micros as f64 / 1000.0
    }
}

/// A running load generator.
pub struct Load {
    stop: oneshot::Sender<()>,
    task: JoinHandle<LoadOutcome>,
}

impl Load {
    /// Starts sending `rps` requests a second to `http://{target}/`.
    pub fn start(target: SocketAddr, rps: u32, method: Method) -> Result<Load, DrillError> {
        let uri: Uri = format!("http://{target}/")
            .parse()
            .map_err(|_| DrillError::Target(target))?;
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(generate(uri, rps.max(1), method, stopped));
        Ok(Load { stop, task })
    }

    /// Stops sending, waits for the requests in flight, and returns what was seen.
    pub async fn finish(self) -> LoadOutcome {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

async fn generate(
    uri: Uri,
    rps: u32,
    method: Method,
    mut stopped: oneshot::Receiver<()>,
) -> LoadOutcome {
    let client = client();
    let mut outcome = LoadOutcome::default();
    let mut in_flight = JoinSet::new();
    let start = Instant::now();
    let mut sent: u64 = 0;
    let mut ticker = tokio::time::interval(tick_period(rps));
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            _ = ticker.tick() => {
                let due = (start.elapsed().as_secs_f64() * f64::from(rps)) as u64;
                for _ in sent..due {
                    in_flight.spawn(exchange(client.clone(), uri.clone(), method));
                }
                sent = sent.max(due);
            }
            Some(done) = in_flight.join_next(), if !in_flight.is_empty() => record(&mut outcome, done),
        }
    }
    while let Some(done) = in_flight.join_next().await {
        record(&mut outcome, done);
    }
    outcome
}

fn record(outcome: &mut LoadOutcome, done: Result<(Duration, Result<(), Failure>), JoinError>) {
    match done {
        Ok((latency, result)) => outcome.record(latency, result),
        Err(error) => outcome.record_lost(error),
    }
}

fn tick_period(rps: u32) -> Duration {
    (Duration::from_secs(1) / rps).max(Duration::from_millis(1))
}

fn client() -> DrillClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .build(connector)
}

/// Sends one request and reads its whole answer; returns the latency and the verdict.
async fn exchange(
    client: DrillClient,
    uri: Uri,
    method: Method,
) -> (Duration, Result<(), Failure>) {
    let started = Instant::now();
    let result = tokio::time::timeout(REQUEST_TIMEOUT, attempt(&client, request(uri, method)))
        .await
        .unwrap_or(Err(Failure::Timeout));
    (started.elapsed(), result)
}

fn request(uri: Uri, method: Method) -> Request<Full<Bytes>> {
    let body = match method {
        Method::Get => Bytes::new(),
        Method::Post => Bytes::from_static(POST_BODY),
    };
    let mut request = Request::new(Full::new(body));
    *request.uri_mut() = uri;
    let host = HeaderValue::from_static(DRILL_HOST);
    request.headers_mut().insert(header::HOST, host);
    if method == Method::Post {
        *request.method_mut() = http::Method::POST;
        let octets = HeaderValue::from_static("application/octet-stream");
        request.headers_mut().insert(header::CONTENT_TYPE, octets);
    }
    request
}

async fn attempt(client: &DrillClient, request: Request<Full<Bytes>>) -> Result<(), Failure> {
    let response = client.request(request).await.map_err(classify)?;
    let status = response.status();
    let body = response.into_body().collect().await;
    if status != StatusCode::OK {
        return Err(Failure::Status(status.as_u16()));
    }
    body.map(|_| ()).map_err(|_| Failure::Truncated)
}

fn classify(error: ClientError) -> Failure {
    if error.is_connect() {
        Failure::Connect
    } else {
        Failure::Reset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank_of_successes() {
        let mut outcome = LoadOutcome::default();
        for ms in 1..=100 {
            outcome.record(Duration::from_millis(ms), Ok(()));
        }
        outcome.record(Duration::from_secs(5), Err(Failure::Status(502)));
        assert_eq!(outcome.latency_ms(0.5), 50.0);
        assert_eq!(outcome.latency_ms(0.99), 99.0);
        assert_eq!(outcome.requests, 101);
        assert_eq!(outcome.failures.get("status_502"), Some(&1));
        assert_eq!(LoadOutcome::default().latency_ms(0.5), 0.0);
    }
}
