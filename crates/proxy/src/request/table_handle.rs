//! The one published swap target for routes and endpoint sets, which also tells the runtime state which endpoints left.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use sluice_routing::{BackendId, EndpointSet, RoutingTable};

use crate::upstream::runtime::Runtime;

/// How often a publish also sweeps runtime state of endpoints no longer listed.
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Shared handle to the published routing table and the data plane's runtime state. Cloning it
/// is cheap. Every change to what the data plane serves goes through it, so endpoints that
/// leave or start terminating get their idle connections closed.
#[derive(Clone, Default)]
pub struct TableHandle {
    table: Arc<ArcSwap<RoutingTable>>,
    runtime: Arc<Runtime>,
    last_sweep: Arc<Mutex<Option<Instant>>>,
}

impl TableHandle {
    pub fn new(table: RoutingTable) -> Self {
        Self {
            table: Arc::new(ArcSwap::from_pointee(table)),
            runtime: Arc::default(),
            last_sweep: Arc::default(),
        }
    }

    /// The current table. A request loads it once and keeps it to the end, so a publish in the
    /// middle of a request never changes its route.
    pub fn load(&self) -> Arc<RoutingTable> {
        self.table.load_full()
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// Publishes a new table; requests and connections in flight are untouched. The data
    /// plane's runtime state is attached to the new backends and endpoint sets first, so the
    /// request path finds it without a lookup.
    pub fn publish(&self, table: RoutingTable) {
        for backend in table.backends() {
            self.runtime.budget(backend);
            self.runtime.attach(&backend.endpoints().load());
        }
        let old = self.table.swap(Arc::new(table));
        let new = self.table.load();
        for backend in old.backends() {
            let Some(successor) = new.backend_by_id(backend.id()) else {
                self.runtime.backend_removed(backend.id());
                self.runtime
                    .endpoints_changed(&backend.endpoints().load(), &EndpointSet::default());
                continue;
            };
            let (before, after) = (backend.endpoints().load(), successor.endpoints().load());
            if !Arc::ptr_eq(&before, &after) && before != after {
                self.runtime.endpoints_changed(&before, &after);
            }
        }
        if self.sweep_due() {
            self.runtime.sweep(&new);
        }
    }

    /// Whether a minute has passed since the runtime state was last swept.
    fn sweep_due(&self) -> bool {
        let Ok(mut last) = self.last_sweep.lock() else {
            return false;
        };
        let due = last.is_none_or(|at| at.elapsed() >= SWEEP_INTERVAL);
        if due {
            *last = Some(Instant::now());
        }
        due
    }

    /// Swaps one backend's endpoint set in the serving table. Returns `false` when the table
    /// has no such backend or the set is unchanged.
    pub fn store_endpoints(&self, backend: &BackendId, endpoints: Arc<EndpointSet>) -> bool {
        let table = self.table.load();
        let Some(backend) = table.backend_by_id(backend) else {
            return false;
        };
        if *backend.endpoints().load() == *endpoints {
            return false;
        }
        self.runtime.attach(&endpoints);
        let old = backend.endpoints().swap(endpoints.clone());
        self.runtime.endpoints_changed(&old, &endpoints);
        true
    }
}
