//! Mirrors (`mirror-target`, and Gateway API `RequestMirror` filters): a copy of each request goes to a mirror, fire-and-forget; its answer is discarded and its failure never touches the client's request.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, HOST};
use http::request::Parts;
use http::{HeaderName, HeaderValue, Request, Uri};
use http_body_util::Full;
use sluice_routing::{Mirror, RoutePolicy, RoutingTable};

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

/// A route's mirrors: one primitive, two kinds of target ([`Mirror`]). A URL mirror copies the
/// client's request as it came, in the request filters; a backend mirror copies the request
/// as the route's other filters left it, in the upstream-request phase. Both send in the
/// body-ready phase.
pub(crate) struct Mirrors {
    mirrors: Vec<Mirror>,
    /// How long a URL mirror may take (`proxy-read-timeout`, else a minute).
    timeout: Duration,
}

/// The head of one copy.
pub(crate) struct MirrorHead(Box<Request<()>>);

/// This request's copies so far: each head, whether it carries the body, and how long it may
/// take.
#[derive(Default)]
struct Copies(Vec<(MirrorHead, bool, Duration)>);

impl Mirrors {
    pub(crate) fn of(policy: &RoutePolicy) -> Option<RouteFilter> {
        (!policy.mirrors.is_empty())
            .then(|| {
                boxed(Self {
                    mirrors: policy.mirrors.clone(),
                    timeout: policy.timeouts.read.unwrap_or(DEFAULT_MIRROR_TIMEOUT),
                })
            })
            .flatten()
    }

    fn keep(context: &mut RequestContext<'_>, copy: (MirrorHead, bool, Duration)) {
        match context.slots.get_mut::<Copies>() {
            Some(copies) => copies.0.push(copy),
            None => context.slots.insert(Copies(vec![copy])),
        }
    }
}

/// A URL mirror's head: the client's method and headers (hop-by-hop and framing dropped),
/// the target URL with its variables filled in (the request's URI when the target names no
/// path), `Host` from `mirror-host` or the target, and `X-Original-URI`.
fn url_head(
    (target, host): (&[sluice_routing::Variable], Option<&str>),
    context: &RequestContext<'_>,
    request: &Parts,
) -> Option<MirrorHead> {
    let url = fill(target, context, request);
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
    let host = match host {
        Some(host) => HeaderValue::try_from(host).ok(),
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

/// A backend mirror's head, when its share draws this request: the upstream request's
/// method, target and headers, sent to one ready endpoint of the backend (at random).
fn backend_head(
    (index, numerator, denominator): (Option<sluice_routing::BackendIndex>, u32, u32),
    table: &RoutingTable,
    request: &Parts,
) -> Option<MirrorHead> {
    if fastrand::u32(0..denominator.max(1)) >= numerator {
        return None;
    }
    let backend = table.backend(index?)?;
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
}

impl Filter<Services> for Mirrors {
    fn on_request(&self, context: &mut RequestContext<'_>, request: &Parts, _: &Services) -> Flow {
        for mirror in &self.mirrors {
            if let Mirror::Url { target, host, body } = mirror {
                if let Some(head) = url_head((target, host.as_deref()), context, request) {
                    Self::keep(context, (head, *body, self.timeout));
                }
            }
        }
        Ok(())
    }

    fn on_upstream_request<'a>(
        &'a self,
        context: &'a mut RequestContext<'_>,
        upstream: &'a mut Parts,
        _: &'a Services,
    ) -> Step<'a, Flow> {
        for mirror in &self.mirrors {
            if let Mirror::Backend {
                index,
                numerator,
                denominator,
                ..
            } = mirror
            {
                let share = (*index, *numerator, *denominator);
                if let Some(head) = backend_head(share, context.table, upstream) {
                    Self::keep(context, (head, true, DEFAULT_MIRROR_TIMEOUT));
                }
            }
        }
        Step::Done(Ok(()))
    }

    fn keeps_body(&self) -> bool {
        self.mirrors.iter().any(Mirror::copies_body)
    }

    /// Sends the copies in the background. A body streamed to the pod (larger than the
    /// replay buffer) cannot be copied: then a copy that carries the body is not sent.
    fn on_body_ready(
        &self,
        context: &mut RequestContext<'_>,
        _upstream: &Parts,
        body: &RequestBody,
        services: &Services,
    ) {
        if let Some(Copies(copies)) = context.slots.take() {
            for (head, with_body, timeout) in copies {
                send_copy(head, body, with_body, services, timeout);
            }
        }
    }
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
    use sluice_testkit::RawBackend;

    use super::*;
    use crate::filters::registry::Filters;
    use crate::filters::testing::{request, Scene};

    #[test]
    fn a_copy_goes_to_the_mirror_with_the_body_and_the_original_uri() {
        let servers = tokio::runtime::Runtime::new().expect("a runtime");
        let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 9, 30));
        let mirror = servers.block_on(RawBackend::start(ip)).expect("the mirror");
        let policy = RoutePolicy {
            mirrors: vec![Mirror::Url {
                target: vec![Variable::Text(format!("http://{}/copy", mirror.addr()))],
                host: Some("mirror.internal".into()),
                body: true,
            }],
            ..RoutePolicy::default()
        };
        let mut scene = Scene::new(policy);
        assert!(
            Filters::of(&scene.policy, &scene.services).keeps_body(),
            "the body is kept for the copy"
        );
        let client_request = request("POST", "/orders?id=7");
        assert!(scene.on_request(&client_request).is_ok());
        let _inside = servers.enter();
        let body = RequestBody::Replayable(Bytes::from_static(b"order"));
        scene.on_body_ready(&client_request, &body);
        let deadline = Instant::now() + Duration::from_secs(5);
        while mirror.requests().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let copies = mirror.requests();
        assert_eq!(copies.len(), 1, "the mirror got one copy");
        let copy = &copies[0];
        assert_eq!(copy.request_line(), "POST /copy HTTP/1.1");
        assert_eq!(copy.header("host"), Some("mirror.internal"));
        assert_eq!(copy.header("x-original-uri"), Some("/orders?id=7"));
        assert_eq!(copy.body, b"order");
    }
}
