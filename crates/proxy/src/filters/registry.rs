//! The registry: the chain of filters a route's policy asks for, in the order every phase runs it, built once per policy and kept on it.

use sluice_routing::RoutePolicy;

use super::services::{RouteFilter, Services};
use super::{
    access, compression, cors, error_pages, fail_closed, header_edits, hsts, limits, mirror,
    redirect, session, source_ranges, traefik,
};

/// A route's filters in the order they run, built from its policy once and kept on it.
#[derive(Default)]
pub(crate) struct Filters {
    chain: Vec<RouteFilter>,
    keeps_body: bool,
}

impl Filters {
    /// The filters of `policy`, built on first use and kept on the policy.
    /// `services` gives the proxy-wide settings a route may leave to it (`--compression`);
    /// they do not change while the process runs.
    pub(crate) fn of<'p>(policy: &'p RoutePolicy, services: &Services) -> &'p Filters {
        static NONE: Filters = Filters {
            chain: Vec::new(),
            keeps_body: false,
        };
        policy
            .filters
            .get_or_attach(|| Self::build(policy, services))
            .unwrap_or(&NONE)
    }

    /// The chain, in the order every phase runs it.
    pub(crate) fn chain(&self) -> &[RouteFilter] {
        &self.chain
    }

    /// Whether a filter reads the request body once it is ready, so it must be kept whole.
    pub(crate) fn keeps_body(&self) -> bool {
        self.keeps_body
    }

    /// The chain of `policy`: each filter the policy asks for, in nginx's order of phases for
    /// the annotations (fail closed first, then the server's `app-root`, the location's
    /// redirect, the HTTPS redirect, the limits and source ranges), CORS, an HTTPRoute rule's
    /// redirect, the edits of the heads, session affinity, HSTS, Traefik's middlewares, then
    /// the filters that copy the request, grant access, or replace the answer, and last the
    /// compression of what goes out. Every phase runs the chain in this order.
    fn build(policy: &RoutePolicy, services: &Services) -> Self {
        let mut chain: Vec<RouteFilter> = Vec::new();
        let mut add = |filter: Option<RouteFilter>| chain.extend(filter);
        add(fail_closed::FailClosed::of(policy));
        add(redirect::AppRoot::of(policy));
        add(redirect::RouteRedirect::of_annotations(policy));
        add(redirect::HttpsRedirect::of(policy));
        add(limits::ClientLimits::of(policy));
        add(source_ranges::SourceRangeCheck::of(policy));
        add(cors::CorsFilter::of(policy));
        add(redirect::RouteRedirect::of_route_rule(policy));
        add(header_edits::UpstreamEdits::of(policy));
        add(header_edits::ResponseEdits::of(policy));
        add(session::Session::of(policy));
        add(hsts::Hsts::of(policy));
        add(traefik::Chain::of(policy));
        add(mirror::Mirrors::of(policy));
        add(access::Access::of(policy));
        add(error_pages::ErrorPages::of(policy));
        add(compression::Compress::of(policy, services.compression));
        let keeps_body = chain.iter().any(|filter| filter.keeps_body());
        Self { chain, keeps_body }
    }
}
