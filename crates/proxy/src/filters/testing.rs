//! A small stage for the filters' unit tests: one route's policy and backend, a client, and the hooks of its chain run as the phase driver runs them, with the per-request state kept between calls.
#![allow(clippy::expect_used)]

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::uri::Authority;
use http::{response, HeaderValue, Request, Response};
use sluice_routing::{
    Attached, Backend, BackendId, BackendMode, Endpoint, EndpointSet, PathMatch, RoutePolicy,
    RoutingTable, Target,
};

use super::contract::{Connection, Flow, RequestContext, Slots};
use super::registry::Filters;
use super::services::{AttemptTimeouts, Services};
use crate::upstream::outbound::OutboundClient;
use crate::upstream::request_body::RequestBody;
use crate::upstream::retry_buffer::RetryBuffer;
use crate::upstream::runtime::Runtime;

/// A request head for `method` and `target`, HTTP/1.1, no headers.
pub(crate) fn request(method: &str, target: &str) -> Parts {
    let (parts, ()) = Request::builder()
        .method(method)
        .uri(target)
        .body(())
        .expect("a valid request")
        .into_parts();
    parts
}

/// A response head with `status` and no headers.
pub(crate) fn response_head(status: u16) -> response::Parts {
    let (parts, ()) = Response::builder()
        .status(status)
        .body(())
        .expect("a valid response")
        .into_parts();
    parts
}

/// One route, its client and what its filters kept for the request so far.
pub(crate) struct Scene {
    pub(crate) policy: RoutePolicy,
    backend: Backend,
    table: RoutingTable,
    telemetry: Attached,
    path: Option<PathMatch>,
    pub(crate) services: Services,
    connection: Connection,
    real_client: IpAddr,
    host: HeaderValue,
    slots: Slots,
    pinned: Option<Endpoint>,
    endpoint: Option<Endpoint>,
    held: Vec<Box<dyn std::any::Any + Send + Sync>>,
}

impl Scene {
    /// A route with `policy` to a backend of three endpoints (127.0.9.1..3:8080), asked by
    /// 127.0.0.1 over plain HTTP for Host `example.com`.
    pub(crate) fn new(policy: RoutePolicy) -> Self {
        let endpoints = (1..=3).map(endpoint_at).collect();
        let client: SocketAddr = "127.0.0.1:40000".parse().expect("address");
        Self {
            policy,
            backend: Backend::new(
                BackendId::new("shop", "web", "80"),
                BackendMode::Endpoints,
                EndpointSet::new(endpoints),
            ),
            table: RoutingTable::default(),
            telemetry: Attached::default(),
            path: None,
            services: Services {
                session_key: Default::default(),
                https_redirect_port: None,
                outbound: OutboundClient::default(),
                runtime: Arc::new(Runtime::default()),
                retry_buffer: RetryBuffer::default(),
                timeouts: AttemptTimeouts {
                    connect: Duration::from_secs(1),
                    response_header: Duration::from_secs(5),
                    body_idle: Duration::from_secs(5),
                    upstream_idle: Duration::from_secs(60),
                },
                compression: sluice_routing::Codings::NONE,
                compression_budget: super::services::MemoryBudget::new(
                    super::services::COMPRESSION_MEMORY,
                ),
            },
            connection: Connection {
                client,
                server: "127.0.0.1:80".parse().expect("address"),
                over_tls: false,
            },
            real_client: client.ip(),
            host: HeaderValue::from_static("example.com"),
            slots: Slots::default(),
            pinned: None,
            endpoint: None,
            held: Vec::new(),
        }
    }

    /// The request comes from `ip`.
    pub(crate) fn client(&mut self, ip: &str) {
        self.real_client = ip.parse().expect("an address");
    }

    /// The request's Host header.
    pub(crate) fn host(&mut self, host: &str) {
        self.host = HeaderValue::from_str(host).expect("a header value");
    }

    /// The connection is TLS.
    pub(crate) fn over_tls(&mut self) {
        self.connection.over_tls = true;
    }

    /// The route matched with `path`.
    pub(crate) fn route_path(&mut self, path: PathMatch) {
        self.path = Some(path);
    }

    /// The backend's endpoint `n` (1 to 3).
    pub(crate) fn endpoint(&self, n: u8) -> Endpoint {
        endpoint_at(n)
    }

    /// `endpoint` answered the request.
    pub(crate) fn answered_by(&mut self, endpoint: &Endpoint) {
        self.endpoint = Some(endpoint.clone());
    }

    /// The endpoint a filter pinned the request to.
    pub(crate) fn pinned(&self) -> Option<Endpoint> {
        self.pinned.clone()
    }

    /// The request filters of the chain, in order, until one answers.
    pub(crate) fn on_request(&mut self, request: &Parts) -> Flow {
        self.run(|filters, context, services| {
            filters
                .iter()
                .try_for_each(|filter| filter.on_request(context, request, services))
        })
    }

    /// The access hooks of the chain, in order, until one answers.
    pub(crate) fn on_access(&mut self, request: &Parts) -> Flow {
        self.run(|filters, context, services| {
            block_on(async {
                for filter in filters {
                    filter
                        .on_access(context, request, services)
                        .result()
                        .await?;
                }
                Ok(())
            })
        })
    }

    /// The body-ready hooks of the chain, in order (inside a Tokio runtime: a hook may spawn).
    pub(crate) fn on_body_ready(&mut self, upstream: &Parts, body: &RequestBody) {
        self.run(|filters, context, services| {
            for filter in filters {
                filter.on_body_ready(context, upstream, body, services);
            }
        });
    }

    /// The log hooks of the chain, in order.
    pub(crate) fn on_log(&mut self, head: &mut response::Parts) {
        self.run(|filters, context, _| {
            for filter in filters {
                filter.on_log(context, head);
            }
        });
    }

    /// The places the filters hold until the response ends, given back.
    pub(crate) fn end_response(&mut self) {
        self.held.clear();
    }

    /// The upstream-request hooks of the chain, in order, until one answers.
    pub(crate) fn on_upstream_request(&mut self, upstream: &mut Parts) -> Flow {
        self.run(|filters, context, services| {
            block_on(async {
                for filter in filters {
                    filter
                        .on_upstream_request(context, upstream, services)
                        .result()
                        .await?;
                }
                Ok(())
            })
        })
    }

    /// The response filters of the chain, in order.
    pub(crate) fn on_response(&mut self, head: &mut response::Parts) {
        self.run(|filters, context, services| {
            for filter in filters {
                filter.on_response(context, head, services);
            }
        });
    }

    /// Runs `hooks` over a context made from the scene, and keeps what the filters noted.
    fn run<T>(
        &mut self,
        hooks: impl FnOnce(&[super::services::RouteFilter], &mut RequestContext<'_>, &Services) -> T,
    ) -> T {
        let target = Target {
            backend: &self.backend,
            policy: &self.policy,
            ingress: "shop/web",
            telemetry: &self.telemetry,
            path: self.path.as_ref(),
            canary: None,
        };
        let mut context = RequestContext {
            table: &self.table,
            connection: self.connection,
            real_client: self.real_client,
            request_id: HeaderValue::from_static("0123456789abcdef"),
            target: Some(target),
            host: self.host.clone(),
            host_has_tls: false,
            forwarded_https: false,
            pinned: self.pinned.take(),
            endpoint: self.endpoint.clone(),
            tried: None,
            upstream_status: None,
            attempts: 0,
            slots: std::mem::take(&mut self.slots),
            stood_in_for: None,
            peer_trusted: false,
            held: std::mem::take(&mut self.held),
        };
        let filters = Filters::of(&self.policy, &self.services);
        let result = hooks(filters.chain(), &mut context, &self.services);
        self.pinned = context.pinned;
        self.slots = context.slots;
        self.held = context.held;
        result
    }
}

/// Runs a hook's future to its end on a runtime of its own.
fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(future)
}

fn endpoint_at(n: u8) -> Endpoint {
    Endpoint::new(Authority::try_from(format!("127.0.9.{n}:8080")).expect("an authority"))
}
