//! ingress-nginx's `default-backend` and `custom-http-errors`: the default backend serves a route whose Service has no endpoints (told so by `X-Code: 503` and the route's `X-*` headers), and answers in place of the pod for the listed statuses.

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri, Version};
use sluice_routing::{Backend, RoutePolicy, RoutingTable, Target};

use super::contract::{Filter, Flow, RequestContext, Step};
use super::services::{boxed, RouteFilter, Services};
use crate::error::ProxyError;
use crate::upstream::attempt::{Answer, AttemptSettings, Exchange};
use crate::upstream::connect::Wire;
use crate::upstream::request_body::RequestBody;

/// A route's `default-backend` and `custom-http-errors`.
pub(crate) struct ErrorPages {
    /// The statuses the default backend answers in place of the pod.
    codes: Vec<u16>,
}

/// The URI as the client sent it (`X-Original-URI`), kept by the request filter.
struct OriginalUri(String);

impl ErrorPages {
    pub(crate) fn of(policy: &RoutePolicy) -> Option<RouteFilter> {
        let pages = policy.error_pages.as_ref()?;
        boxed(Self {
            codes: pages.codes.clone(),
        })
    }
}

impl Filter<Services> for ErrorPages {
    fn on_request(&self, context: &mut RequestContext<'_>, request: &Parts, _: &Services) -> Flow {
        if let Some(uri) = request.uri.path_and_query() {
            context.slots.insert(OriginalUri(uri.as_str().to_owned()));
        }
        Ok(())
    }

    /// A default backend standing in for the route is told why; a route with
    /// `custom-http-errors` keeps what asking for a page needs.
    fn on_upstream_request<'a>(
        &'a self,
        context: &'a mut RequestContext<'_>,
        upstream: &'a mut Parts,
        _: &'a Services,
    ) -> Step<'a, Flow> {
        let Some(target) = context.target else {
            return Step::Done(Ok(()));
        };
        let original_uri = match context.slots.get::<OriginalUri>() {
            Some(OriginalUri(uri)) => uri.clone(),
            None => "/".to_owned(),
        };
        if let Some(replaced) = context.stood_in_for {
            tell_default_backend(&mut upstream.headers, &target, replaced, &original_uri);
        }
        if let Some(capture) = ErrorPageRequest::capture(&target, upstream, &original_uri) {
            context.slots.insert(capture);
        }
        Step::Done(Ok(()))
    }

    /// The default backend's page in place of a pod's answer whose status the route lists.
    fn on_answer<'a>(
        &'a self,
        context: &'a mut RequestContext<'_>,
        outcome: Result<Answer, ProxyError>,
        services: &'a Services,
    ) -> Step<'a, Result<Answer, ProxyError>> {
        let status = match &outcome {
            Ok(answer) if self.codes.contains(&answer.response.status().as_u16()) => {
                answer.response.status()
            }
            _ => return Step::Done(outcome),
        };
        let (Some(target), Some(request)) = (
            context.target,
            context.slots.take::<Box<ErrorPageRequest>>(),
        ) else {
            return Step::Done(outcome);
        };
        let (table, client) = (context.table, context.real_client);
        Step::Wait(Box::pin(async move {
            let settings = services.attempt_settings();
            match request.ask(status, table, &target, settings, client).await {
                Some(page) => Ok(page),
                None => outcome,
            }
        }))
    }
}

/// The route's target, or the same route served by its `default-backend` when its own
/// backend has no endpoint to send to; then also the backend it stands in for.
pub(crate) fn serving_target<'r>(
    table: &'r RoutingTable,
    target: Target<'r>,
) -> (Target<'r>, Option<&'r Backend>) {
    let Some(id) = target
        .policy
        .error_pages
        .as_ref()
        .and_then(|pages| pages.backend.as_ref())
    else {
        return (target, None);
    };
    if !target.backend.endpoints().load().eligible().is_empty() {
        return (target, None);
    }
    match table.backend_by_id(id) {
        Some(backend) => (Target { backend, ..target }, Some(target.backend)),
        None => (target, None),
    }
}

/// What the default backend serving a route without endpoints is told, as nginx.tmpl's
/// `custom-default-backend-` locations tell it: `X-Code: 503`, `X-Format` (the `Accept`),
/// `X-Namespace` and `X-Ingress-Name`, the `X-Service-Name` and `X-Service-Port` that had no
/// endpoints, and `X-Original-URI`.
pub(crate) fn tell_default_backend(
    headers: &mut HeaderMap,
    target: &Target<'_>,
    replaced: &Backend,
    original_uri: &str,
) {
    describe_request(headers, target, replaced, original_uri);
    headers.insert(
        HeaderName::from_static("x-code"),
        HeaderValue::from(StatusCode::SERVICE_UNAVAILABLE.as_u16()),
    );
}

/// The `X-*` headers both kinds of default-backend request carry: where the request was
/// going, and the URI the client sent.
fn describe_request(
    headers: &mut HeaderMap,
    target: &Target<'_>,
    service: &Backend,
    original_uri: &str,
) {
    let format = headers.get(ACCEPT).cloned();
    let (namespace, ingress) = target
        .ingress
        .split_once('/')
        .unwrap_or(("", target.ingress));
    let (_, service, port) = service.id().parts();
    let mut set = |name: &'static str, value: &str| {
        if let Ok(value) = HeaderValue::try_from(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    };
    set("x-original-uri", original_uri);
    set("x-namespace", namespace);
    set("x-ingress-name", ingress);
    set("x-service-name", service);
    set("x-service-port", port);
    if let Some(format) = format {
        headers.insert(HeaderName::from_static("x-format"), format);
    }
}

/// What asking the default backend for an error page needs from the request.
pub(crate) struct ErrorPageRequest {
    version: Version,
    head: bool,
    headers: HeaderMap,
}

impl ErrorPageRequest {
    /// Taken once the upstream head is made, for a route with `custom-http-errors`:
    /// `original_uri` is the URI as the client sent it.
    pub(crate) fn capture(
        target: &Target<'_>,
        upstream: &Parts,
        original_uri: &str,
    ) -> Option<Box<Self>> {
        let pages = target.policy.error_pages.as_ref()?;
        if pages.codes.is_empty() {
            return None;
        }
        let mut headers = upstream.headers.clone();
        headers.remove(CONTENT_LENGTH);
        headers.remove(TRANSFER_ENCODING);
        describe_request(&mut headers, target, target.backend, original_uri);
        Some(Box::new(Self {
            version: upstream.version,
            head: upstream.method == Method::HEAD,
            headers,
        }))
    }

    /// Asks the default backend (the annotation's, else the table's) for `/` with `X-Code`,
    /// as ingress-nginx's custom error location does (GET, or HEAD for a HEAD). `None` when
    /// there is no default backend or it does not answer: the pod's answer stands.
    pub(crate) async fn ask(
        self: Box<Self>,
        status: StatusCode,
        table: &RoutingTable,
        target: &Target<'_>,
        settings: AttemptSettings<'_>,
        client: std::net::IpAddr,
    ) -> Option<Answer> {
        let backend: &Backend = match target.policy.error_pages.as_ref()?.backend.as_ref() {
            Some(id) => table.backend_by_id(id)?,
            None => table.default_backend()?,
        };
        let mut request = Request::new(());
        *request.method_mut() = if self.head { Method::HEAD } else { Method::GET };
        *request.uri_mut() = Uri::from_static("/");
        *request.version_mut() = self.version;
        *request.headers_mut() = self.headers;
        request.headers_mut().insert(
            HeaderName::from_static("x-code"),
            HeaderValue::from(status.as_u16()),
        );
        let (parts, ()) = request.into_parts();
        let body = RequestBody::Replayable(Bytes::new());
        let attempted = Exchange::new(settings, backend, target.policy, parts, body, client, None)
            .over(Wire::Http1)
            .run()
            .await;
        attempted.result.ok()
    }
}
