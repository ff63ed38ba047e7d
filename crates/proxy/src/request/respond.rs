//! The response phase's own part: the endpoint's answer made the proxy's (this hop's headers out, the proxy's HTTP version), the route's response filters, and a switch of protocols joined into a tunnel.

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{Either, Full};

use crate::filters::contract::RequestContext;
use crate::filters::registry::Filters;
use crate::filters::services::Services;
use crate::headers::strip_hop_by_hop;
use crate::upstream::attempt::Answer;
use crate::upstream::response_body::{EndpointBody, ProxyBody, TrackedBody};
use crate::upstream::upgrade::{restore_upgrade_headers, ClientUpgrade, Tunnels};

/// The client's response for an endpoint's `answer`: the route's response filters have run,
/// and the endpoint's load is counted until the body ends (or, for a switch of protocols,
/// until the tunnel does).
pub(crate) fn respond(
    answer: Answer,
    filters: &Filters,
    context: &mut RequestContext<'_>,
    (services, tunnels): (&Services, &Tunnels),
    client_upgrade: Option<ClientUpgrade>,
) -> Response<ProxyBody> {
    let Answer { response, endpoint } = answer;
    context.upstream_status = Some(response.status());
    let switched = match client_upgrade {
        Some(client) if response.status() == StatusCode::SWITCHING_PROTOCOLS => {
            let protocol = response.headers().get(http::header::UPGRADE).cloned();
            Some((client, protocol))
        }
        _ => None,
    };
    let (mut head, body) = response.into_parts();
    strip_hop_by_hop(&mut head.headers);
    // A proxy answers in its own HTTP version (RFC 9110 §6.2), whatever the pod spoke: an
    // HTTP/1.0 pod's answer keeps the client's connection alive, a body it ends by closing
    // going out chunked.
    head.version = http::Version::HTTP_11;
    context.endpoint = Some(endpoint);
    for filter in filters.chain() {
        filter.on_response(context, &mut head, services);
    }
    let Some((client, protocol)) = switched else {
        let coding = filters
            .chain()
            .iter()
            .find_map(|filter| filter.on_response_body(context, &mut head, services));
        let body = TrackedBody::new(body).coded(coding);
        return Response::from_parts(head, Either::Left(body));
    };
    if let Some(protocol) = protocol {
        restore_upgrade_headers(&mut head.headers, protocol);
    }
    // The connection is the tunnel's now: it never goes back to the pool. (A switch of
    // protocols is never held, so its body is always the streaming one.)
    if let EndpointBody::Streaming(body) = body {
        if let Some((in_flight, endpoint)) = body.into_tunnel() {
            tunnels.open(client, endpoint, in_flight);
        }
    }
    Response::from_parts(head, Either::Right(Full::new(Bytes::new())))
}
