//! The filter contract: the phases a route's filters act in, what each phase hands them, and the answers of the proxy's own a filter may give; it names nothing else of the crate.
//!
//! A filter implements only the hooks of the phases it acts in; every hook has a default that
//! does nothing. The phase driver (`request::driver`) calls the hooks of a route's chain in
//! order and names no filter. `H` is the proxy a filter runs in (`filters::Services`): what it
//! may use (the session key, the outbound client, the runtime), the request body of the
//! body-ready phase and the outcome of the send phase.

use std::any::Any;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, LOCATION};
use http::request::Parts;
use http::{response, HeaderMap, HeaderValue, StatusCode};
use sluice_routing::{Endpoint, RoutingTable, Target};

/// The proxy a filter runs in: its services, and the types the later phases hand on.
pub(crate) trait Host: Send + Sync {
    /// The request body, once the upstream phase has prepared it.
    type Body: Sync;
    /// What choosing an endpoint and sending came back with: an answer, or why none came.
    type Outcome: Send;
    /// A content coding of the response body on its way to the client (compression).
    type Coding: Send;
}

/// A hook's result that may still be waiting: most hooks are done at once, and only those
/// that ask another server (an auth service, an error page) hand back a future.
pub(crate) enum Step<'a, T> {
    Done(T),
    Wait(Pin<Box<dyn Future<Output = T> + Send + 'a>>),
}

impl<T> Step<'_, T> {
    /// The hook's result, awaited when it is still waiting.
    pub(crate) async fn result(self) -> T {
        match self {
            Self::Done(result) => result,
            Self::Wait(pending) => pending.await,
        }
    }
}

/// Whether the request goes on to the next phase, or is answered by the proxy.
pub(crate) type Flow = Result<(), Box<LocalAnswer>>;

/// One step a route adds to the request phases, in the order they run.
pub(crate) trait Filter<H: Host>: Send + Sync {
    /// Request filters: the client's request as it came; may note what later phases need in
    /// the context, or answer.
    fn on_request(&self, _context: &mut RequestContext<'_>, _request: &Parts, _host: &H) -> Flow {
        Ok(())
    }

    /// Access: may ask another server before it lets the request through or answers.
    fn on_access<'a>(
        &'a self,
        _context: &'a mut RequestContext<'_>,
        _request: &'a Parts,
        _host: &'a H,
    ) -> Step<'a, Flow> {
        Step::Done(Ok(()))
    }

    /// Upstream request: the head the endpoints get, once this hop's headers are out and the
    /// forwarding headers in; may change it, or answer.
    fn on_upstream_request<'a>(
        &'a self,
        _context: &'a mut RequestContext<'_>,
        _upstream: &'a mut Parts,
        _host: &'a H,
    ) -> Step<'a, Flow> {
        Step::Done(Ok(()))
    }

    /// Whether the filter reads the body in the body-ready phase, so it must be kept whole.
    fn keeps_body(&self) -> bool {
        false
    }

    /// Body ready: the upstream head and body, just before the first attempt.
    fn on_body_ready(
        &self,
        _context: &mut RequestContext<'_>,
        _upstream: &Parts,
        _body: &H::Body,
        _host: &H,
    ) {
    }

    /// Answer: what the send phase came back with; may put another answer in its place.
    fn on_answer<'a>(
        &'a self,
        _context: &'a mut RequestContext<'_>,
        outcome: H::Outcome,
        _host: &'a H,
    ) -> Step<'a, H::Outcome> {
        Step::Done(outcome)
    }

    /// Response filters: an endpoint's response head before it goes to the client.
    fn on_response(
        &self,
        _context: &mut RequestContext<'_>,
        _response: &mut response::Parts,
        _host: &H,
    ) {
    }

    /// Response body: once every response filter has run, may code an endpoint's body on its
    /// way to the client (and set the head to say so); the first filter that does wins.
    fn on_response_body(
        &self,
        _context: &mut RequestContext<'_>,
        _response: &mut response::Parts,
        _host: &H,
    ) -> Option<H::Coding> {
        None
    }

    /// Log: every answer, an endpoint's or the proxy's own, just before it goes out.
    fn on_log(&self, _context: &mut RequestContext<'_>, _response: &mut response::Parts) {}
}

/// What the phases of one request share. Facts every phase may read are fields; what one
/// filter keeps for its later hooks lives in [`Self::slots`], under a type of its own.
pub(crate) struct RequestContext<'r> {
    /// The published table the request is served from.
    pub(crate) table: &'r RoutingTable,
    pub(crate) connection: Connection,
    /// The client's address after trusted-proxy resolution.
    pub(crate) real_client: IpAddr,
    pub(crate) request_id: HeaderValue,
    /// The route, once the route phase found one.
    pub(crate) target: Option<Target<'r>>,
    /// The request's Host as the client wrote it (set by the route phase).
    pub(crate) host: HeaderValue,
    /// Whether the request's host has a TLS entry (an Ingress's `spec.tls` names it).
    pub(crate) host_has_tls: bool,
    /// A trusted proxy in front terminated TLS (`X-Forwarded-Proto: https`).
    pub(crate) forwarded_https: bool,
    /// The endpoint to try first (a session's, set by a session-affinity filter).
    pub(crate) pinned: Option<Endpoint>,
    /// The endpoint that answered, once one did.
    pub(crate) endpoint: Option<Endpoint>,
    /// The endpoint tried last, answered or not, once the attempts are over.
    pub(crate) tried: Option<Endpoint>,
    /// The endpoint's status, once an endpoint answered.
    pub(crate) upstream_status: Option<StatusCode>,
    /// Attempts made to endpoints (0 when the proxy answered before choosing one).
    pub(crate) attempts: u32,
    /// Each filter's per-request state, one value per type.
    pub(crate) slots: Slots,
    /// The backend the route's default backend stands in for, when the route phase served
    /// the route from it (its own had no endpoints).
    pub(crate) stood_in_for: Option<&'r sluice_routing::Backend>,
    /// The peer is a trusted proxy: its `X-Forwarded-*` headers are believed.
    pub(crate) peer_trusted: bool,
    /// Places a filter holds until the response ends (a connection limit's), given back when
    /// the response body ends or the client leaves.
    pub(crate) held: Vec<Box<dyn Any + Send + Sync>>,
}

/// What the accept layer learnt of the client's connection that filters may read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Connection {
    /// The client's address (after the PROXY protocol, when the listener reads it).
    pub(crate) client: SocketAddr,
    /// The local address the connection arrived on.
    pub(crate) server: SocketAddr,
    /// The connection is TLS, terminated here.
    pub(crate) over_tls: bool,
}

/// An answer the proxy gives itself: a redirect, a CORS preflight, an authentication
/// refusal, a limit, a fail-closed route's 503, a middleware's own answer. The log phase and
/// the metrics treat it like any other answer.
#[derive(Debug)]
pub(crate) struct LocalAnswer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// For a refusal: the gRPC status and message a gRPC caller gets instead (a trailers-only
    /// answer); `None` answers gRPC callers as any other.
    pub(crate) grpc: Option<(u8, &'static str)>,
}

impl LocalAnswer {
    /// `status` with exactly `headers` and `body` (a middleware's or an auth server's answer).
    pub(crate) fn exact(status: StatusCode, headers: HeaderMap, body: Bytes) -> Box<Self> {
        Box::new(Self {
            status,
            headers,
            body,
            grpc: None,
        })
    }

    /// `status` with a short plain-text `body`.
    pub(crate) fn text(status: StatusCode, body: &'static str) -> Box<Self> {
        let mut headers = HeaderMap::new();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        Self::exact(status, headers, Bytes::from_static(body.as_bytes()))
    }

    /// A redirect to `location`.
    pub(crate) fn redirect(status: StatusCode, location: HeaderValue) -> Box<Self> {
        let mut answer = Self::text(status, "redirecting\n");
        answer.headers.insert(LOCATION, location);
        answer
    }

    /// A refusal: `status` with `body`, and for a gRPC caller `grpc_status` with `message`.
    pub(crate) fn refusal(
        status: StatusCode,
        body: &'static str,
        grpc_status: u8,
        message: &'static str,
    ) -> Box<Self> {
        let mut answer = Self::text(status, body);
        answer.grpc = Some((grpc_status, message));
        answer
    }

    /// The same answer with `headers` added (appended to any of the same name).
    pub(crate) fn with_headers(mut self: Box<Self>, headers: &HeaderMap) -> Box<Self> {
        for (name, value) in headers {
            self.headers.append(name.clone(), value.clone());
        }
        self
    }
}

/// gRPC status codes a refusal names.
pub(crate) mod grpc_status {
    pub(crate) const RESOURCE_EXHAUSTED: u8 = 8;
    pub(crate) const PERMISSION_DENIED: u8 = 7;
    pub(crate) const INTERNAL: u8 = 13;
    pub(crate) const UNAVAILABLE: u8 = 14;
}

/// Per-request state of the filters, one value per type: a filter keeps what its later
/// hooks need under a type of its own. A request whose filters keep nothing allocates nothing.
#[derive(Default)]
pub(crate) struct Slots(Vec<Box<dyn Any + Send + Sync>>);

impl Slots {
    /// Keeps `value`, in place of any earlier value of its type.
    pub(crate) fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        match self.get_mut::<T>() {
            Some(slot) => *slot = value,
            None => self.0.push(Box::new(value)),
        }
    }

    pub(crate) fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.0.iter().find_map(|slot| (**slot).downcast_ref())
    }

    pub(crate) fn get_mut<T: Any + Send + Sync>(&mut self) -> Option<&mut T> {
        self.0.iter_mut().find_map(|slot| (**slot).downcast_mut())
    }

    /// Takes the value of type `T` out, when there is one.
    pub(crate) fn take<T: Any + Send + Sync>(&mut self) -> Option<T> {
        let at = self.0.iter().position(|slot| (**slot).is::<T>())?;
        self.0.swap_remove(at).downcast().ok().map(|value| *value)
    }
}
