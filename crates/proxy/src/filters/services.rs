//! What the proxy lends a route's filters (its settings, clients and runtime state), and the chain's form of a filter.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use super::contract::{Filter, Host};
use crate::error::ProxyError;
use crate::upstream::attempt::{Answer, AttemptSettings};
use crate::upstream::outbound::OutboundClient;
use crate::upstream::request_body::RequestBody;
use crate::upstream::retry_buffer::RetryBuffer;
use crate::upstream::runtime::Runtime;
use crate::upstream::session_key::SessionKey;

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

/// A filter boxed for the chain.
pub(crate) fn boxed(filter: impl Filter<Services> + 'static) -> Option<RouteFilter> {
    Some(Box::new(filter))
}
