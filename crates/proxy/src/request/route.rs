//! The route phase: the request's host, TLS terms and path against the published table, then the route's canary, then its default backend when its own backend has no endpoints.

use http::{HeaderValue, StatusCode};
use sluice_routing::{GatewayMiss, RequestFacts, Target};

use super::inbound::Inbound;
use super::Stop;
use crate::connection::ClientInfo;
use crate::error::ProxyError;
use crate::filters::contract::{LocalAnswer, RequestContext};
use crate::filters::error_pages;
use crate::headers::request_cookie;

/// The route of the request, as the route phase finds it: the route, its canary when the
/// canary takes the request, and its default backend when its own backend has no endpoints.
/// Notes the Host, whether the host has TLS, and the target in the context.
pub(crate) fn route_request<'r>(
    client: &ClientInfo,
    inbound: &Inbound,
    parts: &http::request::Parts,
    context: &mut RequestContext<'r>,
) -> Result<Target<'r>, Stop> {
    let routed = canary_or_main(route(client, inbound, parts, context)?, &parts.headers);
    let (target, stood_in_for) = error_pages::serving_target(context.table, routed);
    context.target = Some(target);
    context.stood_in_for = stood_in_for;
    Ok(target)
}

/// The route phase: 421 when the request's host has a TLS site whose terms differ from the
/// connection's, the `from-to-www-redirect` 308, then host and path, served on this listener
/// (else 404), and the trailing-slash 301.
fn route<'r>(
    client: &ClientInfo,
    inbound: &Inbound,
    parts: &http::request::Parts,
    context: &mut RequestContext<'r>,
) -> Result<Target<'r>, Stop> {
    let table = context.table;
    if let Some(socket) = client.gateway_socket {
        return Ok(gateway_route(client, socket, inbound, parts, context)?);
    }
    let host = inbound.route_host();
    let tls_site = table.tls().site(&host);
    let over_tls = match &client.tls {
        Some(session) if !session.may_serve(tls_site) => {
            tracing::debug!(%host, sni = ?session.sni, "the request's host is served with another certificate: 421");
            return Err(ProxyError::Misdirected.into());
        }
        Some(session) => {
            if let Some(sent) = session.client_refusal() {
                return Err(ProxyError::ClientCertificate { sent }.into());
            }
            true
        }
        None => false,
    };
    if let Some(to) = table.host_redirect(&host) {
        return Err(www_redirect(inbound, to, over_tls));
    }
    let target = table
        .lookup(&host, inbound.path())
        .filter(|target| target.policy.tls.listeners.serves(over_tls))
        .ok_or(Stop::Fail(ProxyError::NoRoute))?;
    if let Some(directory) = target
        .path
        .and_then(|path| path.slash_redirect(inbound.path()))
    {
        return Err(slash_redirect(inbound, &directory, over_tls));
    }
    context.host_has_tls = tls_site.is_some();
    context.host = inbound.host.clone();
    Ok(target)
}

/// The route phase on a Gateway listener's socket: the listener by hostname, then the first
/// rule in HTTPRoute precedence whose matches the request meets (else 404), then a backendRef
/// by weight (an invalid one answers 500).
fn gateway_route<'r>(
    client: &ClientInfo,
    socket: std::net::SocketAddr,
    inbound: &Inbound,
    parts: &http::request::Parts,
    context: &mut RequestContext<'r>,
) -> Result<Target<'r>, ProxyError> {
    let table = context.table;
    let host = inbound.route_host();
    if let Some(sni) = client.tls.as_ref().and_then(|s| s.sni.as_deref()) {
        // The host must select the listener the handshake's server name did.
        let gateways = table.gateways();
        if gateways.listener_position(socket, sni) != gateways.listener_position(socket, &host) {
            return Err(ProxyError::Misdirected);
        }
    }
    let facts = RequestFacts {
        method: &parts.method,
        path: inbound.path(),
        query: inbound.target.query(),
        headers: &parts.headers,
    };
    let target = table
        .gateway_lookup(socket, &host, &facts, |total| fastrand::u32(1..=total))
        .map_err(|miss| match miss {
            GatewayMiss::NoRoute => ProxyError::NoRoute,
            GatewayMiss::NoBackend => ProxyError::InvalidBackendRef,
        })?;
    context.host = inbound.host.clone();
    Ok(target)
}

/// The route's canary when its rule takes this request (header, then cookie, then weight,
/// as ingress-nginx decides), else the route itself.
fn canary_or_main<'r>(target: Target<'r>, headers: &http::HeaderMap) -> Target<'r> {
    let Some(canary) = target.canary else {
        return target;
    };
    let rule = canary.rule;
    let header = rule
        .header
        .as_deref()
        .and_then(|name| headers.get(name))
        .map(HeaderValue::as_bytes);
    let cookie = rule
        .cookie
        .as_deref()
        .and_then(|name| request_cookie(headers, name));
    if rule.chooses(header, cookie, |total| fastrand::u32(1..=total)) {
        target.to_canary()
    } else {
        target
    }
}

/// `from-to-www-redirect`: ingress-nginx's 308 to the rule host on the client's scheme, with
/// the request URI less one trailing slash (so `/` becomes nothing); the port the client
/// named is kept.
fn www_redirect(inbound: &Inbound, to: &str, over_tls: bool) -> Stop {
    let scheme = if over_tls { "https" } else { "http" };
    let port = inbound
        .host
        .to_str()
        .ok()
        .and_then(|host| host.rsplit_once(':'))
        .map(|(_, port)| port)
        .filter(|port| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()));
    let uri = inbound.target.as_str();
    let uri = uri.strip_suffix('/').unwrap_or(uri);
    let location = match port {
        Some(port) => format!("{scheme}://{to}:{port}{uri}"),
        None => format!("{scheme}://{to}{uri}"),
    };
    redirect_to(StatusCode::PERMANENT_REDIRECT, location)
}

/// nginx's answer to `/foo` on a location written `/foo/`: a 301 to the directory, on the
/// scheme and Host the client used, the query kept.
fn slash_redirect(inbound: &Inbound, directory: &str, over_tls: bool) -> Stop {
    let scheme = if over_tls { "https" } else { "http" };
    let host = inbound.host.to_str().unwrap_or_default();
    let location = match inbound.target.query() {
        Some(query) => format!("{scheme}://{host}{directory}?{query}"),
        None => format!("{scheme}://{host}{directory}"),
    };
    redirect_to(StatusCode::MOVED_PERMANENTLY, location)
}

/// The route phase's redirect to `location`; a location no header can carry (a Host with
/// bytes a header refuses) is a 404, as no route could serve it.
fn redirect_to(status: StatusCode, location: String) -> Stop {
    match HeaderValue::try_from(location) {
        Ok(location) => Stop::Answer(LocalAnswer::redirect(status, location)),
        Err(_) => Stop::Fail(ProxyError::NoRoute),
    }
}
