//! The request pipeline, one phase per step: route, balance, forward upstream (retrying safely), respond.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST, SET_COOKIE};
use http::request::Parts;
use http::uri::Authority;
use http::{HeaderValue, Request, Response};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use sluice_routing::{normalize_request_host, Endpoint, RoutingTable, Target};

use crate::attempt::{may_resend, Answer, AttemptSettings, Exchange};
use crate::body::{RequestBody, TrackedBody, DEFAULT_REPLAY_LIMIT};
use crate::error::ProxyError;
use crate::headers::{ensure_host, set_forwarded, strip_hop_by_hop};
use crate::sticky::{request_cookie, set_cookie, SessionKey};
use crate::table_handle::TableHandle;
use crate::upstream::UpstreamOptions;

/// A response body: the upstream's, streamed through, or the proxy's own short text.
pub type ProxyBody = Either<TrackedBody, Full<Bytes>>;

/// The proxy: the published table and runtime state, plus upstream settings. One per process,
/// shared by all connections.
pub struct Proxy {
    table: TableHandle,
    session_key: SessionKey,
    connect_timeout: Duration,
    response_header_timeout: Duration,
    replay_limit: usize,
}

impl Proxy {
    pub fn new(table: TableHandle, options: &UpstreamOptions) -> Self {
        Self {
            table,
            session_key: options
                .session_secret
                .as_deref()
                .map(SessionKey::new)
                .unwrap_or_default(),
            connect_timeout: options.connect_timeout,
            response_header_timeout: options.response_header_timeout,
            replay_limit: DEFAULT_REPLAY_LIMIT,
        }
    }

    /// Handles one request from `client`. Never fails: every error becomes a short response.
    pub async fn handle(
        &self,
        request: Request<Incoming>,
        client: SocketAddr,
    ) -> Response<ProxyBody> {
        match self.forward(request, client).await {
            Ok(response) => response,
            Err(error) => {
                tracing::debug!(%client, %error, source = ?std::error::Error::source(&error), "answered by proxy");
                error_response(&error)
            }
        }
    }

    async fn forward(
        &self,
        request: Request<Incoming>,
        client: SocketAddr,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let table = self.table.load();
        let target = route(&table, &request)?;
        let (mut parts, body) = request.into_parts();
        prepare_upstream_headers(&mut parts, client);
        let may_replay = may_resend(&parts, target.policy);
        let body = RequestBody::prepare(&parts, body, may_replay, self.replay_limit).await?;
        let session = self.session(&target, &parts);
        let settings = AttemptSettings {
            runtime: self.table.runtime(),
            connect_timeout: self.connect_timeout,
            response_header_timeout: self.response_header_timeout,
        };
        let answer = Exchange::new(
            settings,
            target.backend,
            target.policy,
            parts,
            body,
            client.ip(),
            session.clone(),
        )
        .run()
        .await?;
        Ok(self.respond(answer, &target, session.as_ref()))
    }

    /// The endpoint a sticky-session cookie pins, if the route is sticky and the cookie names
    /// an endpoint that still serves.
    fn session(&self, target: &Target<'_>, parts: &Parts) -> Option<Endpoint> {
        let cookie = target.policy.sticky.as_ref()?;
        let value = request_cookie(&parts.headers, &cookie.name)?;
        let set = target.backend.endpoints().load();
        self.session_key.pinned(&set, value).cloned()
    }

    /// Step 5: drop the upstream hop's headers, pin a new session, and count the endpoint's
    /// load until the body ends.
    fn respond(
        &self,
        answer: Answer,
        target: &Target<'_>,
        session: Option<&Endpoint>,
    ) -> Response<ProxyBody> {
        let Answer {
            mut response,
            in_flight,
            endpoint,
        } = answer;
        strip_hop_by_hop(response.headers_mut());
        let repinned = session != Some(&endpoint);
        if let (Some(cookie), true) = (&target.policy.sticky, repinned) {
            let value = self.session_key.value(&endpoint);
            if let Some(header) = set_cookie(cookie, &value) {
                response.headers_mut().append(SET_COOKIE, header);
            }
        }
        response.map(|body| Either::Left(TrackedBody::new(body, in_flight)))
    }
}

/// Step 1: the route for host and path.
fn route<'t>(
    table: &'t RoutingTable,
    request: &Request<Incoming>,
) -> Result<Target<'t>, ProxyError> {
    let host = request_host(request).ok_or(ProxyError::BadRequest("missing Host"))?;
    table
        .lookup(&normalize_request_host(host), request.uri().path())
        .ok_or(ProxyError::NoRoute)
}

/// The host a request is for: the URI authority (HTTP/2, absolute-form) or the Host header.
fn request_host(request: &Request<Incoming>) -> Option<&str> {
    match request.uri().authority() {
        Some(authority) => Some(authority.host()),
        None => request.headers().get(HOST)?.to_str().ok(),
    }
}

/// Rewrites the headers that belong to this hop, once for all attempts; the path and query
/// stay byte for byte.
fn prepare_upstream_headers(parts: &mut Parts, client: SocketAddr) {
    let original_authority: Option<Authority> = parts.uri.authority().cloned();
    ensure_host(&mut parts.headers, original_authority.as_ref());
    let host: Option<HeaderValue> = parts.headers.get(HOST).cloned();
    strip_hop_by_hop(&mut parts.headers);
    set_forwarded(&mut parts.headers, client.ip(), host);
}

fn error_response(error: &ProxyError) -> Response<ProxyBody> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from_static(
        error.body().as_bytes(),
    ))));
    *response.status_mut() = error.status();
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
