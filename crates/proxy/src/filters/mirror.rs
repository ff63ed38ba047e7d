//! Mirrors (`mirror-target`, and Gateway API `RequestMirror` filters): a copy of each request goes to a mirror, fire-and-forget; its answer is discarded and its failure never touches the client's request.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, HOST};
use http::request::Parts;
use http::{HeaderName, HeaderValue, Request, Uri};
use http_body_util::Full;
use sluice_routing::{GatewayMirror, Mirror, RoutePolicy, RoutingTable};

use super::contract::{Filter, Flow, RequestContext, Step};
use super::services::{boxed, RouteFilter, Services};
use super::template::{fill, request_uri};
use crate::headers::headers_for_copy;
use crate::upstream::request_body::RequestBody;

/// The most mirrored requests in progress, for the whole process (counted in the runtime):
/// past it, copies are skipped, so a slow mirror can never hold more than this much memory.
const MAX_IN_FLIGHT: usize = 1024;
/// How long a mirror may take when the route sets no `proxy-read-timeout`.
const DEFAULT_MIRROR_TIMEOUT: Duration = Duration::from_secs(60);

/// Mirrored requests in progress, for the whole process.
#[derive(Default)]
struct MirrorsInFlight(AtomicUsize);

const X_ORIGINAL_URI: HeaderName = HeaderName::from_static("x-original-uri");

/// A route's mirror.
pub(crate) struct MirrorCopy {
    mirror: Mirror,
    timeout: Duration,
}

/// The head of the copy, taken from the client's request before the upstream head is made.
pub(crate) struct MirrorHead(Box<Request<()>>);

impl MirrorCopy {
    pub(crate) fn of(policy: &RoutePolicy) -> Option<RouteFilter> {
        boxed(Self {
            mirror: policy.mirror.clone()?,
            timeout: policy.timeouts.read.unwrap_or(DEFAULT_MIRROR_TIMEOUT),
        })
    }

    /// The copy's head: the client's method and headers (hop-by-hop and framing dropped), the
    /// target URL with its variables filled in (the request's URI when the target names no
    /// path), `Host` from `mirror-host` or the target, and `X-Original-URI`.
    pub(crate) fn head(&self, context: &RequestContext<'_>, request: &Parts) -> Option<MirrorHead> {
        let url = fill(&self.mirror.target, context, request);
        let mut uri = Uri::try_from(url.as_str()).ok()?;
        let original = request_uri(request);
        if uri.path_and_query().is_none_or(|p| p.as_str() == "/") && !url.ends_with('/') {
            let mut parts = uri.into_parts();
            parts.path_and_query = original.parse().ok();
            uri = Uri::from_parts(parts).ok()?;
        }
        let mut copy = Request::new(());
        *copy.method_mut() = request.method.clone();
        let headers = copy.headers_mut();
        *headers = headers_for_copy(&request.headers);
        let host = match &self.mirror.host {
            Some(host) => HeaderValue::try_from(host.as_str()).ok(),
            None => uri
                .authority()
                .and_then(|a| HeaderValue::try_from(a.as_str()).ok()),
        };
        if let Some(host) = host {
            headers.insert(HOST, host);
        }
        if let Ok(value) = HeaderValue::try_from(original) {
            headers.insert(X_ORIGINAL_URI, value);
        }
        *copy.uri_mut() = uri;
        Some(MirrorHead(Box::new(copy)))
    }
}

/// The copy's head, kept from the request filters to the body-ready phase.
struct CopyHead(MirrorHead);

impl Filter<Services> for MirrorCopy {
    fn on_request(&self, context: &mut RequestContext<'_>, request: &Parts, _: &Services) -> Flow {
        if let Some(head) = self.head(context, request) {
            context.slots.insert(CopyHead(head));
        }
        Ok(())
    }

    fn keeps_body(&self) -> bool {
        self.mirror.body
    }

    /// Sends the copy in the background. A body streamed to the pod (larger than the replay
    /// buffer) cannot be copied: that request is not mirrored.
    fn on_body_ready(
        &self,
        context: &mut RequestContext<'_>,
        _upstream: &Parts,
        body: &RequestBody,
        services: &Services,
    ) {
        if let Some(CopyHead(head)) = context.slots.take() {
            send_copy(head, body, self.mirror.body, services, self.timeout);
        }
    }
}

/// An HTTPRoute's `RequestMirror` filters: they copy the request as the route's other
/// filters left it, as Envoy's do.
pub(crate) struct GatewayMirrors(Vec<GatewayMirror>);

/// The heads of this request's Gateway API copies.
struct GatewayCopies(Vec<MirrorHead>);

impl GatewayMirrors {
    pub(crate) fn of(policy: &RoutePolicy) -> Option<RouteFilter> {
        let mirrors = &policy.gateway.as_ref()?.mirrors;
        (!mirrors.is_empty())
            .then(|| boxed(Self(mirrors.clone())))
            .flatten()
    }
}

impl Filter<Services> for GatewayMirrors {
    fn on_upstream_request<'a>(
        &'a self,
        context: &'a mut RequestContext<'_>,
        upstream: &'a mut Parts,
        _: &'a Services,
    ) -> Step<'a, Flow> {
        let heads = gateway_mirror_heads(&self.0, context.table, upstream);
        if !heads.is_empty() {
            context.slots.insert(GatewayCopies(heads));
        }
        Step::Done(Ok(()))
    }

    fn keeps_body(&self) -> bool {
        true
    }

    /// Sends the copies, with the request's body.
    fn on_body_ready(
        &self,
        context: &mut RequestContext<'_>,
        _upstream: &Parts,
        body: &RequestBody,
        services: &Services,
    ) {
        if let Some(GatewayCopies(heads)) = context.slots.take() {
            for head in heads {
                send_copy(head, body, true, services, DEFAULT_MIRROR_TIMEOUT);
            }
        }
    }
}

/// The heads of a Gateway API route's `RequestMirror` copies for this request: for each
/// mirror whose share draws it, the upstream request's method, target and headers (after the
/// route's filters), sent to one ready endpoint of the mirror's backend (at random).
fn gateway_mirror_heads(
    mirrors: &[GatewayMirror],
    table: &RoutingTable,
    request: &Parts,
) -> Vec<MirrorHead> {
    mirrors
        .iter()
        .filter(|mirror| fastrand::u32(0..mirror.denominator) < mirror.numerator)
        .filter_map(|mirror| {
            let backend = table.backend(mirror.index?)?;
            let set = backend.endpoints().load();
            let ready = set.ready();
            let endpoint = ready.get(fastrand::usize(..ready.len().max(1)))?;
            let uri = format!("http://{}{}", endpoint.authority(), request_uri(request));
            let mut copy = Request::new(());
            *copy.method_mut() = request.method.clone();
            *copy.headers_mut() = headers_for_copy(&request.headers);
            if let Some(host) = request.headers.get(HOST).cloned().or_else(|| {
                let authority = request.uri.authority()?;
                HeaderValue::try_from(authority.as_str()).ok()
            }) {
                copy.headers_mut().insert(HOST, host);
            }
            *copy.uri_mut() = Uri::try_from(uri).ok()?;
            Some(MirrorHead(Box::new(copy)))
        })
        .collect()
}

/// Sends one copy in the background, with the body when `with_body` (a body streamed to the
/// pod cannot be copied: then nothing is sent), at most `timeout` long.
fn send_copy(
    head: MirrorHead,
    body: &RequestBody,
    with_body: bool,
    services: &Services,
    timeout: Duration,
) {
    let bytes = match (with_body, body) {
        (false, _) => Bytes::new(),
        (true, RequestBody::Replayable(bytes)) => bytes.clone(),
        (true, RequestBody::Streaming(_)) => {
            tracing::debug!("request body streamed to the pod: not mirrored");
            return;
        }
    };
    let Ok(client) = services.outbound.get().cloned() else {
        return;
    };
    let Some(slot) = InFlight::take(services.state("", MirrorsInFlight::default)) else {
        tracing::debug!("{MAX_IN_FLIGHT} mirrored requests in progress: this one is skipped");
        return;
    };
    let (mut parts, ()) = (*head.0).into_parts();
    parts
        .headers
        .insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    let request = Request::from_parts(parts, Full::new(bytes));
    tokio::spawn(async move {
        let _slot = slot;
        match tokio::time::timeout(timeout, client.request(request)).await {
            Ok(Ok(_answer)) => {}
            Ok(Err(error)) => tracing::debug!(%error, "mirror failed"),
            Err(_) => tracing::debug!("mirror did not answer in time"),
        }
    });
}

/// One mirrored request in progress.
struct InFlight(Arc<MirrorsInFlight>);

impl InFlight {
    fn take(count: Arc<MirrorsInFlight>) -> Option<Self> {
        let before = count.0.fetch_add(1, Ordering::Relaxed);
        if before >= MAX_IN_FLIGHT {
            count.0.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(Self(count))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]

    use std::net::{IpAddr, Ipv4Addr};
    use std::time::Instant;

    use sluice_routing::Variable;
    use sluice_testkit::EchoBackend;

    use super::*;
    use crate::filters::registry::Filters;
    use crate::filters::testing::{request, Scene};

    #[test]
    fn a_copy_goes_to_the_mirror_with_the_body_and_the_original_uri() {
        let servers = tokio::runtime::Runtime::new().expect("a runtime");
        let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 9, 30));
        let mirror = servers
            .block_on(EchoBackend::start("mirror", ip))
            .expect("the mirror");
        let policy = RoutePolicy {
            mirror: Some(Mirror {
                target: vec![Variable::Text(format!("http://{}/copy", mirror.addr()))],
                host: Some("mirror.internal".into()),
                body: true,
            }),
            ..RoutePolicy::default()
        };
        let mut scene = Scene::new(policy);
        assert!(
            Filters::of(&scene.policy).keeps_body(),
            "the body is kept for the copy"
        );
        let client_request = request("POST", "/orders?id=7");
        assert!(scene.on_request(&client_request).is_ok());
        let _inside = servers.enter();
        let body = RequestBody::Replayable(Bytes::from_static(b"order"));
        scene.on_body_ready(&client_request, &body);
        let deadline = Instant::now() + Duration::from_secs(5);
        while mirror.requests() == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(mirror.requests(), 1, "the mirror got one copy");
    }
}
