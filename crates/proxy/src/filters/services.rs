//! What the proxy lends a route's filters (its settings, clients and runtime state), and the chain's form of a filter.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use super::contract::{Filter, Host};
use crate::error::ProxyError;
use crate::upstream::attempt::{Answer, AttemptSettings};
use crate::upstream::outbound::OutboundClient;
use crate::upstream::request_body::RequestBody;
use crate::upstream::response_body::BodyCoding;
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
    /// The codings of routes that leave compression to the proxy (`--compression`).
    pub(crate) compression: sluice_routing::Codings,
    /// The memory all compressing responses may take together.
    pub(crate) compression_budget: MemoryBudget,
}

/// The most memory the compressors of all responses in flight may hold together: 256 MiB, at
/// least 128 Brotli or zstd streams and 800 gzip ones at once. A response that would go over
/// it goes out as the endpoint sent it.
pub(crate) const COMPRESSION_MEMORY: usize = 256 << 20;

/// A share of memory taken and given back by many requests at once: what is taken is
/// returned when its [`MemoryShare`] drops.
#[derive(Clone, Debug)]
pub(crate) struct MemoryBudget {
    left: Arc<std::sync::atomic::AtomicUsize>,
}

impl MemoryBudget {
    pub(crate) fn new(bytes: usize) -> Self {
        Self {
            left: Arc::new(std::sync::atomic::AtomicUsize::new(bytes)),
        }
    }

    /// Takes `bytes`, or `None` when less is left.
    pub(crate) fn take(&self, bytes: usize) -> Option<MemoryShare> {
        use std::sync::atomic::Ordering;
        self.left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(bytes)
            })
            .ok()
            .map(|_| MemoryShare {
                budget: self.left.clone(),
                bytes,
            })
    }
}

/// Memory taken from a [`MemoryBudget`], given back on drop.
#[derive(Debug)]
pub(crate) struct MemoryShare {
    budget: Arc<std::sync::atomic::AtomicUsize>,
    bytes: usize,
}

impl Drop for MemoryShare {
    fn drop(&mut self) {
        self.budget
            .fetch_add(self.bytes, std::sync::atomic::Ordering::AcqRel);
    }
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
    type Coding = Box<dyn BodyCoding>;
}

/// One filter as the chain holds it.
pub(crate) type RouteFilter = Box<dyn Filter<Services>>;

/// A filter boxed for the chain.
pub(crate) fn boxed(filter: impl Filter<Services> + 'static) -> Option<RouteFilter> {
    Some(Box::new(filter))
}
