//! The filters layer: the filter contract, the registry that builds a route's chain from its policy, and one file per filter; it may use `upstream`, `telemetry` and the crate's bottom, never `request` or `server`.
//!
//! Adding a filter: write `filters/<name>.rs` with a type that implements
//! [`contract::Filter`] for the hooks it needs, keep its per-request state in
//! [`contract::Slots`] and its per-policy state through [`Services::state`], and add one line to
//! [`Filters::build`] where it belongs in the order. The compiler sets the policy field it
//! reads; the phase driver does not change.

pub(crate) mod access;
pub(crate) mod contract;
pub(crate) mod cors;
pub(crate) mod error_pages;
pub(crate) mod external_auth;
pub(crate) mod fail_closed;
pub(crate) mod header_edits;
pub(crate) mod hsts;
pub(crate) mod limits;
pub(crate) mod mirror;
pub(crate) mod passwords;
pub(crate) mod redirect;
pub(crate) mod session;
pub(crate) mod source_ranges;
pub(crate) mod template;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod traefik;

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use sluice_routing::RoutePolicy;

use crate::error::ProxyError;
use crate::upstream::attempt::{Answer, AttemptSettings};
use crate::upstream::body::RequestBody;
use crate::upstream::outbound::OutboundClient;
use crate::upstream::retry_buffer::RetryBuffer;
use crate::upstream::runtime::Runtime;
use crate::upstream::session_key::SessionKey;
use contract::{Filter, Host};

/// What the proxy lends its filters: its settings, its clients and its runtime state. One per
/// process, owned by the proxy.
pub(crate) struct Services {
    pub(crate) session_key: SessionKey,
    /// The port `https://` redirects name; `None` without a TLS listener.
    pub(crate) https_redirect_port: Option<u16>,
    /// The client for auth services and mirrors.
    pub(crate) outbound: OutboundClient,
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) retry_buffer: RetryBuffer,
    pub(crate) timeouts: AttemptTimeouts,
}

/// The proxy-wide timeouts of an attempt.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttemptTimeouts {
    pub(crate) connect: Duration,
    pub(crate) response_header: Duration,
    pub(crate) body_idle: Duration,
    pub(crate) upstream_idle: Duration,
}

impl Services {
    /// What an exchange with endpoints needs from the proxy.
    pub(crate) fn attempt_settings(&self) -> AttemptSettings<'_> {
        AttemptSettings {
            runtime: &self.runtime,
            connect_timeout: self.timeouts.connect,
            response_header_timeout: self.timeouts.response_header,
            body_idle_timeout: self.timeouts.body_idle,
            upstream_idle_timeout: self.timeouts.upstream_idle,
            retry_buffer: &self.retry_buffer,
        }
    }

    /// A policy's state of type `T` that outlives recompiles (rate-limit buckets, an auth
    /// cache), kept in the runtime under `key`, made by `init` the first time.
    pub(crate) fn state<T: Any + Send + Sync>(
        &self,
        key: &str,
        init: impl FnOnce() -> T,
    ) -> Arc<T> {
        self.runtime.policy_state(key, init)
    }
}

impl Host for Services {
    type Body = RequestBody;
    type Outcome = Result<Answer, ProxyError>;
}

/// One filter as the chain holds it.
pub(crate) type RouteFilter = Box<dyn Filter<Services>>;

/// A route's filters in the order they run, built from its policy once and kept on it.
#[derive(Default)]
pub(crate) struct Filters {
    chain: Vec<RouteFilter>,
    keeps_body: bool,
}

impl Filters {
    /// The filters of `policy`, built on first use and kept on the policy.
    pub(crate) fn of(policy: &RoutePolicy) -> &Filters {
        static NONE: Filters = Filters {
            chain: Vec::new(),
            keeps_body: false,
        };
        policy
            .filters
            .get_or_attach(|| Self::build(policy))
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
    /// the filters that copy the request, grant access, or replace the answer. Every phase
    /// runs the chain in this order.
    fn build(policy: &RoutePolicy) -> Self {
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
        add(mirror::GatewayMirrors::of(policy));
        add(access::Access::of(policy));
        add(mirror::MirrorCopy::of(policy));
        add(error_pages::ErrorPages::of(policy));
        let keeps_body = chain.iter().any(|filter| filter.keeps_body());
        Self { chain, keeps_body }
    }
}

/// A filter boxed for the chain.
pub(crate) fn boxed(filter: impl Filter<Services> + 'static) -> Option<RouteFilter> {
    Some(Box::new(filter))
}
