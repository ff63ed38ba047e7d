//! Prometheus metrics of the control plane: endpoint propagation, compile time and publishes.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

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
    pub fn new() -> Self {
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
