//! Fail closed: a route whose protection sluice cannot honour (a snippet, a WAF, a Traefik middleware, another controller's action) answers every request 503, before any other filter could leak it.

use http::request::Parts;
use http::StatusCode;
use sluice_routing::RoutePolicy;

use super::contract::{grpc_status, Filter, Flow, LocalAnswer, RequestContext};
use super::services::{boxed, RouteFilter, Services};

pub(crate) struct FailClosed(String);

impl FailClosed {
    pub(crate) fn of(policy: &RoutePolicy) -> Option<RouteFilter> {
        boxed(Self(policy.refused.clone()?))
    }
}

/// The 503 of a route whose access rules cannot be honoured or read.
pub(crate) fn route_denied() -> Box<LocalAnswer> {
    LocalAnswer::refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        "503 service unavailable\n",
        grpc_status::UNAVAILABLE,
        "the route's access rules could not be read",
    )
}

impl Filter<Services> for FailClosed {
    fn on_request(
        &self,
        _context: &mut RequestContext<'_>,
        _request: &Parts,
        _: &Services,
    ) -> Flow {
        tracing::debug!(reason = %self.0, "the route fails closed: 503");
        Err(route_denied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::testing::{request, Scene};

    #[test]
    fn a_refused_route_answers_503_whatever_is_asked() {
        let policy = RoutePolicy {
            refused: Some("configuration-snippet".into()),
            ..RoutePolicy::default()
        };
        let mut scene = Scene::new(policy);
        let answer = scene
            .on_request(&request("GET", "/"))
            .expect_err("answered");
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            answer.grpc.map(|(code, _)| code),
            Some(grpc_status::UNAVAILABLE)
        );
    }
}
