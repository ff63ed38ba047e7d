//! The data plane's runtime state in one place: per-endpoint connections and health, per-backend retry budgets, the filters' per-policy state, and metrics.

use std::any::{Any, TypeId};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use hashbrown::{HashMap, HashSet};
use sluice_routing::{Backend, BackendId, Condition, Endpoint, EndpointSet, RoutingTable};

use crate::telemetry::ProxyMetrics;
use crate::upstream::budget::RetryBudget;
use crate::upstream::hash_ring::HashRing;
use crate::upstream::health::EndpointStats;
use crate::upstream::pool::ConnectionPool;

/// One endpoint's connections and what the proxy learnt about it.
#[derive(Default)]
pub(crate) struct EndpointRuntime {
    pub(crate) pool: Arc<ConnectionPool>,
    pub(crate) stats: Arc<EndpointStats>,
}

/// The runtime of one endpoint set, attached to the set: each endpoint's, in the set's order,
/// and the consistent-hash ring over its eligible endpoints once a hash balancer needs it.
pub(crate) struct SetRuntime {
    endpoints: Vec<Arc<EndpointRuntime>>,
    ring: OnceLock<HashRing>,
}

impl SetRuntime {
    pub(crate) fn endpoints(&self) -> &[Arc<EndpointRuntime>] {
        &self.endpoints
    }

    /// The ring over `eligible`, which must be the set's eligible endpoints.
    pub(crate) fn ring(&self, eligible: &[Endpoint]) -> &HashRing {
        self.ring.get_or_init(|| HashRing::new(eligible))
    }
}

/// One endpoint as the proxy sees it, for the admin API and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EndpointReport {
    pub in_flight: u32,
    /// The peak-EWMA time to response headers; `None` before the first response.
    pub latency: Option<std::time::Duration>,
    /// Attempts sent, and those that failed or answered 5xx.
    pub attempts: u64,
    pub failures: u64,
    /// Out of rotation after failed connects.
    pub ejected: bool,
}

/// Runtime state keyed by endpoint address and backend id. Entries appear on first use and
/// endpoints leave when their backend's set no longer lists them. The maps are the registry;
/// the request path reaches the same entries through the endpoint set and the backend, where
/// they are attached when published, without a lookup.
#[derive(Default)]
pub struct Runtime {
    endpoints: RwLock<HashMap<Endpoint, Arc<EndpointRuntime>>>,
    budgets: RwLock<HashMap<BackendId, Arc<RetryBudget>>>,
    /// The filters' per-policy state (rate-limit buckets, auth caches, the mirror cap), by
    /// type and by the key its filter names (the route and the settings the state counts
    /// under), so a recompile that leaves those as they were keeps the state.
    policy_states: Mutex<HashMap<(TypeId, String), PolicyState>>,
    pub(crate) metrics: ProxyMetrics,
}

/// One policy state, and when a filter last asked for it.
struct PolicyState {
    value: Arc<dyn Any + Send + Sync>,
    asked: Instant,
}

/// How long a policy state no filter holds is kept for a recompiled route to find again.
const UNHELD_POLICY_STATE: Duration = Duration::from_secs(600);

impl Runtime {
    /// The policy state of type `T` under `key`, made by `init` when there is none. States
    /// that no filter has held for ten minutes are forgotten as others are asked for.
    pub(crate) fn policy_state<T: Any + Send + Sync>(
        &self,
        key: &str,
        init: impl FnOnce() -> T,
    ) -> Arc<T> {
        let now = Instant::now();
        let Ok(mut states) = self.policy_states.lock() else {
            return Arc::new(init());
        };
        states.retain(|_, state| {
            Arc::strong_count(&state.value) > 1 || now - state.asked < UNHELD_POLICY_STATE
        });
        let key = (TypeId::of::<T>(), key.to_owned());
        if let Some(state) = states.get_mut(&key) {
            state.asked = now;
            if let Ok(value) = Arc::clone(&state.value).downcast::<T>() {
                return value;
            }
        }
        let value = Arc::new(init());
        let state = PolicyState {
            value: value.clone(),
            asked: now,
        };
        states.insert(key, state);
        value
    }

    /// The data plane's metrics, to register and read.
    pub fn metrics(&self) -> &ProxyMetrics {
        &self.metrics
    }

    /// What the proxy has learnt about `endpoint` from its traffic (nothing yet when no
    /// request has used it).
    pub fn endpoint_report(&self, endpoint: &Endpoint) -> EndpointReport {
        let Some(runtime) = self.existing(endpoint) else {
            return EndpointReport::default();
        };
        let stats = &runtime.stats;
        let (attempts, failures) = stats.outcomes();
        EndpointReport {
            in_flight: stats.in_flight(),
            latency: stats.latency(),
            attempts,
            failures,
            ejected: stats.is_ejected(),
        }
    }

    pub(crate) fn endpoint(&self, endpoint: &Endpoint) -> Arc<EndpointRuntime> {
        get_or_insert(&self.endpoints, endpoint)
    }

    /// The runtime of the endpoint at `position` in `set` ([`EndpointSet::position`]).
    pub(crate) fn endpoint_at(
        &self,
        set: &EndpointSet,
        position: usize,
        endpoint: &Endpoint,
    ) -> Arc<EndpointRuntime> {
        match self.attach(set).endpoints().get(position) {
            Some(runtime) => runtime.clone(),
            None => self.endpoint(endpoint),
        }
    }

    /// Each endpoint's runtime, in the set's order; attached to the set on first use (the
    /// publish path attaches it before any request sees the set).
    pub(crate) fn attach<'s>(&self, set: &'s EndpointSet) -> &'s SetRuntime {
        // For a slot holding something else, which never happens.
        static UNATTACHED: SetRuntime = SetRuntime {
            endpoints: Vec::new(),
            ring: OnceLock::new(),
        };
        set.runtime()
            .get_or_attach(|| SetRuntime {
                endpoints: set.iter().map(|e| self.endpoint(e)).collect(),
                ring: OnceLock::new(),
            })
            .unwrap_or(&UNATTACHED)
    }

    /// The backend's retry budget, attached to the backend on first use. A recompiled backend
    /// with the same id shares it.
    pub(crate) fn budget<'b>(&self, backend: &'b Backend) -> &'b RetryBudget {
        let attached = backend
            .runtime()
            .get_or_attach(|| get_or_insert(&self.budgets, backend.id()));
        match attached {
            Some(budget) => budget,
            None => &UNATTACHED_BUDGET,
        }
    }

    /// A backend's set changed from `old` to `new`: endpoints that stopped being ready have
    /// their idle connections closed, and endpoints no longer listed are forgotten.
    pub(crate) fn endpoints_changed(&self, old: &EndpointSet, new: &EndpointSet) {
        let mut gone = Vec::new();
        for endpoint in old.iter() {
            let was_ready = old.condition(endpoint) == Some(Condition::Ready);
            let now = new.condition(endpoint);
            if was_ready && now != Some(Condition::Ready) {
                if let Some(runtime) = self.existing(endpoint) {
                    runtime.pool.retire();
                }
            }
            if now.is_none() {
                gone.push(endpoint);
            }
        }
        if gone.is_empty() {
            return;
        }
        if let Ok(mut map) = self.endpoints.write() {
            for endpoint in gone {
                if let Some(runtime) = map.remove(endpoint) {
                    runtime.pool.retire();
                }
            }
        }
    }

    /// Forgets endpoints the table no longer lists and no request is using. Entries normally
    /// leave with their set; this catches the few that a request still holding an old set
    /// re-created after that.
    pub(crate) fn sweep(&self, table: &RoutingTable) {
        let mut listed: HashSet<Endpoint> = HashSet::new();
        for backend in table.backends() {
            listed.extend(backend.endpoints().load().iter().cloned());
        }
        if let Ok(mut map) = self.endpoints.write() {
            map.retain(|endpoint, runtime| {
                listed.contains(endpoint) || runtime.stats.in_flight() > 0
            });
        }
    }

    /// Closes idle upstream connections that expired or that their endpoint closed.
    pub(crate) fn reap_idle_connections(&self) {
        let now = std::time::Instant::now();
        let pools: Vec<Arc<ConnectionPool>> = match self.endpoints.read() {
            Ok(map) => map.values().map(|runtime| runtime.pool.clone()).collect(),
            Err(_) => return,
        };
        for pool in pools {
            pool.reap(now);
        }
    }

    /// A backend left the table: forget its retry budget.
    pub(crate) fn backend_removed(&self, backend: &BackendId) {
        if let Ok(mut map) = self.budgets.write() {
            map.remove(backend);
        }
    }

    fn existing(&self, endpoint: &Endpoint) -> Option<Arc<EndpointRuntime>> {
        self.endpoints.read().ok()?.get(endpoint).cloned()
    }
}

/// A budget for a backend whose slot holds something else, which never happens: refuses
/// nothing beyond the floor it shares with every such backend.
static UNATTACHED_BUDGET: std::sync::LazyLock<RetryBudget> =
    std::sync::LazyLock::new(RetryBudget::default);

/// The entry for `key`, created on first use. Reads take the shared lock only.
fn get_or_insert<K, V>(map: &RwLock<HashMap<K, Arc<V>>>, key: &K) -> Arc<V>
where
    K: Clone + Eq + std::hash::Hash,
    V: Default,
{
    if let Some(found) = map.read().ok().and_then(|map| map.get(key).cloned()) {
        return found;
    }
    match map.write() {
        Ok(mut map) => map.entry(key.clone()).or_default().clone(),
        Err(_) => Arc::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::uri::Authority;
    use sluice_routing::{Backend, BackendMode, TableBuilder};

    fn endpoint(text: &str) -> Endpoint {
        Endpoint::new(Authority::try_from(text).expect("valid authority"))
    }

    fn tracked(runtime: &Runtime) -> usize {
        runtime.endpoints.read().map(|map| map.len()).unwrap_or(0)
    }

    #[test]
    fn an_endpoint_that_leaves_its_set_is_forgotten() {
        let runtime = Runtime::default();
        let (a, b) = (endpoint("10.0.0.1:80"), endpoint("10.0.0.2:80"));
        runtime
            .endpoint(&a)
            .stats
            .record_connect_failure(std::time::Instant::now(), true);
        runtime.endpoint(&b);
        let old = EndpointSet::new(vec![a.clone(), b.clone()]);
        let new = EndpointSet::with_terminating(vec![b.clone()], Vec::new());
        runtime.endpoints_changed(&old, &new);
        assert!(runtime.existing(&a).is_none());
        assert!(runtime.existing(&b).is_some());
    }

    #[test]
    fn a_terminating_endpoint_keeps_its_state() {
        let runtime = Runtime::default();
        let a = endpoint("10.0.0.1:80");
        let stats = runtime.endpoint(&a).stats.clone();
        let old = EndpointSet::new(vec![a.clone()]);
        let new = EndpointSet::with_terminating(Vec::new(), vec![a.clone()]);
        runtime.endpoints_changed(&old, &new);
        assert!(Arc::ptr_eq(&runtime.endpoint(&a).stats, &stats));
    }

    #[test]
    fn a_sweep_drops_endpoints_no_backend_lists_unless_in_use() {
        let runtime = Runtime::default();
        let (listed, stale, busy) = (
            endpoint("10.0.0.1:80"),
            endpoint("10.0.0.2:80"),
            endpoint("10.0.0.3:80"),
        );
        runtime.endpoint(&listed);
        runtime.endpoint(&stale);
        let _in_use = runtime.endpoint(&busy).stats.begin();
        let mut builder = TableBuilder::new();
        builder.add_backend(Backend::new(
            BackendId::new("ns", "svc", "80"),
            BackendMode::Endpoints,
            EndpointSet::new(vec![listed.clone()]),
        ));
        runtime.sweep(&builder.build());
        assert_eq!(tracked(&runtime), 2);
        assert!(runtime.existing(&stale).is_none());
    }
}
