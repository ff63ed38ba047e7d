//! The one published swap target for routes: the current table, read lock-free per request.

use std::sync::Arc;

use arc_swap::ArcSwap;
use sluice_routing::RoutingTable;

/// Shared handle to the published routing table. Cloning it is cheap.
#[derive(Clone, Default)]
pub struct TableHandle(Arc<ArcSwap<RoutingTable>>);

impl TableHandle {
    pub fn new(table: RoutingTable) -> Self {
        Self(Arc::new(ArcSwap::from_pointee(table)))
    }

    /// The current table. A request loads it once and keeps it to the end, so a publish in the
    /// middle of a request never changes its route.
    pub fn load(&self) -> Arc<RoutingTable> {
        self.0.load_full()
    }

    /// Publishes a new table; requests and connections in flight are untouched.
    pub fn publish(&self, table: RoutingTable) {
        self.0.store(Arc::new(table));
    }
}
