//! Prometheus metrics: endpoint propagation, compile time and publishes, plus the data plane's retry, ejection and fallback counters.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use sluice_proxy::ProxyCounters;

/// Every metric sluice exports, registered once.
pub struct Metrics {
    registry: Registry,
    /// From a watch event's receipt to the moment the data plane uses the new endpoint set.
    pub endpoint_propagation: Histogram,
    /// How long one compile of the whole snapshot takes.
    pub compile: Histogram,
    /// How many routing tables were published.
    pub publishes: Counter,
}

impl Metrics {
    /// The control plane's metrics plus the data plane's counters, which keep counting in the
    /// proxy and are read at each scrape.
    pub fn new(proxy: &ProxyCounters) -> Self {
        let mut registry = Registry::with_prefix("sluice");
        // 10 µs to about 5 s, doubling.
        let endpoint_propagation = Histogram::new(exponential_buckets(0.000_01, 2.0, 20));
        let compile = Histogram::new(exponential_buckets(0.000_1, 2.0, 18));
        let publishes = Counter::default();
        registry.register(
            "endpoint_propagation_seconds",
            "Seconds from an EndpointSlice watch event's receipt to the data plane using the new endpoint set",
            endpoint_propagation.clone(),
        );
        registry.register(
            "compile_seconds",
            "Seconds one compile of the snapshot into a routing table takes",
            compile.clone(),
        );
        registry.register(
            "table_publishes",
            "Routing tables published",
            publishes.clone(),
        );
        register_proxy_counters(&mut registry, proxy);
        Self {
            registry,
            endpoint_propagation,
            compile,
            publishes,
        }
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        if let Err(error) = encode(&mut text, &self.registry) {
            tracing::warn!(%error, "cannot encode metrics");
        }
        text
    }
}

fn register_proxy_counters(registry: &mut Registry, proxy: &ProxyCounters) {
    let counters = [
        (
            "upstream_retries",
            "Attempts sent to another endpoint after a request's first attempt failed",
            &proxy.retries,
        ),
        (
            "upstream_retries_over_budget",
            "Retries not made because the backend's retry budget (20% over 10 s) was spent",
            &proxy.retries_over_budget,
        ),
        (
            "endpoint_ejections",
            "Endpoints ejected after consecutive failed connects",
            &proxy.ejections,
        ),
        (
            "clusterip_fallbacks",
            "Requests sent to a Service's ClusterIP because no endpoint attempt was left (service-upstream: fallback)",
            &proxy.fallbacks,
        ),
        (
            "upstream_stale_connection_resends",
            "Requests sent again on a new connection because the endpoint closed a pooled keep-alive connection as the request went out",
            &proxy.stale_connection_resends,
        ),
    ];
    for (name, help, counter) in counters {
        registry.register(name, help, counter.clone());
    }
}
