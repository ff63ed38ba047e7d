//! A tiny reverse proxy for drills: round robin over the published ready endpoints (or one fixed upstream), no retries.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use sluice_drill::{Environment, Mode, PodEndpoint, ProxyUnderTest};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

type ProxyBody = BoxBody<Bytes, hyper::Error>;

struct Upstreams {
    fixed: Option<SocketAddr>,
    ready: Mutex<Vec<SocketAddr>>,
    next: AtomicUsize,
    client: Client<HttpConnector, Incoming>,
}

impl Upstreams {
    fn pick(&self) -> Option<SocketAddr> {
        if let Some(fixed) = self.fixed {
            return Some(fixed);
        }
        let ready = self.ready.lock().unwrap();
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        (!ready.is_empty()).then(|| ready[turn % ready.len()])
    }
}

pub struct RoundRobinProxy {
    address: SocketAddr,
    upstreams: Arc<Upstreams>,
    task: JoinHandle<()>,
}

impl RoundRobinProxy {
    /// Endpoints mode balances over the ready endpoints; the other modes send everything to the ClusterIP.
    pub async fn start(environment: Environment) -> anyhow::Result<Self> {
        let fixed = match environment.mode {
            Mode::Endpoints => None,
            Mode::ServiceUpstream | Mode::Fallback => environment.cluster_ip,
        };
        let upstreams = Arc::new(Upstreams {
            fixed,
            ready: Mutex::new(Vec::new()),
            next: AtomicUsize::new(0),
            client: Client::builder(TokioExecutor::new()).build(connector()),
        });
        let proxy_listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = proxy_listener.local_addr()?;
        let task = tokio::spawn(serve(proxy_listener, upstreams.clone()));
        let proxy = Self {
            address,
            upstreams,
            task,
        };
        proxy.publish_endpoints(&environment.initial_endpoints);
        Ok(proxy)
    }
}

impl Drop for RoundRobinProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ProxyUnderTest for RoundRobinProxy {
    fn address(&self) -> SocketAddr {
        self.address
    }

    fn publish_endpoints(&self, endpoints: &[PodEndpoint]) {
        let ready = endpoints
            .iter()
            .filter(|e| e.ready)
            .map(|e| e.address)
            .collect();
        *self.upstreams.ready.lock().unwrap() = ready;
    }
}

async fn serve(listener: TcpListener, upstreams: Arc<Upstreams>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let upstreams = upstreams.clone();
        let service = service_fn(move |request| forward(upstreams.clone(), request));
        tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
    }
}

async fn forward(
    upstreams: Arc<Upstreams>,
    mut request: Request<Incoming>,
) -> Result<Response<ProxyBody>, hyper::Error> {
    let Some(upstream) = upstreams.pick() else {
        return Ok(status(StatusCode::SERVICE_UNAVAILABLE));
    };
    *request.uri_mut() = format!("http://{upstream}/").parse().unwrap();
    match upstreams.client.request(request).await {
        Ok(response) => Ok(response.map(BodyExt::boxed)),
        Err(_) => Ok(status(StatusCode::BAD_GATEWAY)),
    }
}

fn connector() -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector
}

fn status(code: StatusCode) -> Response<ProxyBody> {
    let body = Full::new(Bytes::from(code.to_string()))
        .map_err(|never| match never {})
        .boxed();
    let mut response = Response::new(body);
    *response.status_mut() = code;
    response
}
