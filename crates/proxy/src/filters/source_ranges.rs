//! `allowlist-source-range` and `denylist-source-range`: a client outside the ranges gets 403, after the HTTPS redirect, as nginx's access phase follows its rewrite phase.

use http::request::Parts;
use http::StatusCode;
use sluice_routing::{RoutePolicy, SourceRanges, SourceVerdict};

use super::contract::{grpc_status, Filter, Flow, LocalAnswer, RequestContext};
use super::fail_closed::route_denied;
use super::services::{boxed, RouteFilter, Services};

pub(crate) struct SourceRangeCheck(SourceRanges);

impl SourceRangeCheck {
    /// The check of `policy`'s ranges, unless its access phase takes them (`satisfy any`).
    pub(crate) fn of(policy: &RoutePolicy) -> Option<RouteFilter> {
        let taken_by_access = policy.access.satisfy_any && policy.access.is_set();
        (policy.source_ranges.is_set() && !taken_by_access)
            .then(|| boxed(Self(policy.source_ranges.clone())))
            .flatten()
    }
}

/// The 403 of a client the route's source ranges do not admit.
pub(crate) fn forbidden() -> Box<LocalAnswer> {
    LocalAnswer::refusal(
        StatusCode::FORBIDDEN,
        "403 forbidden\n",
        grpc_status::PERMISSION_DENIED,
        "the client's address is not admitted by the route's source ranges",
    )
}

impl Filter<Services> for SourceRangeCheck {
    fn on_request(&self, context: &mut RequestContext<'_>, _request: &Parts, _: &Services) -> Flow {
        match self.0.verdict(context.real_client) {
            SourceVerdict::Admitted => Ok(()),
            SourceVerdict::Forbidden => Err(forbidden()),
            SourceVerdict::Unavailable => Err(route_denied()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::testing::{request, Scene};

    #[test]
    fn only_clients_inside_the_allowed_ranges_pass() {
        let policy = RoutePolicy {
            source_ranges: SourceRanges {
                allow: vec!["10.0.0.0/8".parse().expect("cidr")],
                ..SourceRanges::default()
            },
            ..RoutePolicy::default()
        };
        let mut scene = Scene::new(policy);
        scene.client("10.1.2.3");
        assert!(scene.on_request(&request("GET", "/")).is_ok());
        scene.client("192.0.2.1");
        let refused = scene.on_request(&request("GET", "/")).expect_err("refused");
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
    }
}
