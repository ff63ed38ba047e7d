//! A cache of ready endpoint sets per Service and port name, shared between compiles until a Service's slices change.

use std::cell::RefCell;
use std::sync::Arc;

use hashbrown::HashMap;
use sluice_routing::EndpointSet;

/// One Service's cached sets, by port name (`None` for an unnamed port).
type SetsByPort = Vec<(Option<String>, Arc<EndpointSet>)>;

/// Namespace → Service name → sets. Looked up by `&str`, so a hit allocates nothing; interior
/// mutability lets a compile (which holds `&self`) fill it.
#[derive(Debug, Default)]
pub struct EndpointCache(RefCell<HashMap<String, HashMap<String, SetsByPort>>>);

impl EndpointCache {
    /// The cached set for this Service port, or `compute`'s answer, stored for next time.
    pub fn get_or_compute(
        &self,
        namespace: &str,
        service: &str,
        port_name: Option<&str>,
        compute: impl FnOnce() -> EndpointSet,
    ) -> Arc<EndpointSet> {
        let mut cache = self.0.borrow_mut();
        let ports = cache
            .get(namespace)
            .and_then(|services| services.get(service));
        if let Some((_, set)) =
            ports.and_then(|ports| ports.iter().find(|(name, _)| name.as_deref() == port_name))
        {
            return set.clone();
        }
        let set = Arc::new(compute());
        let ports = cache
            .entry(namespace.to_owned())
            .or_default()
            .entry(service.to_owned())
            .or_default();
        ports.push((port_name.map(str::to_owned), set.clone()));
        set
    }

    /// Forgets every set of this Service (its EndpointSlices changed).
    pub fn invalidate(&mut self, namespace: &str, service: &str) {
        if let Some(services) = self.0.get_mut().get_mut(namespace) {
            services.remove(service);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn computes_once_per_port_until_invalidated() {
        let mut cache = EndpointCache::default();
        let computed = std::cell::Cell::new(0);
        let compute = || {
            computed.set(computed.get() + 1);
            EndpointSet::default()
        };
        let first = cache.get_or_compute("shop", "web", Some("http"), compute);
        let again = cache.get_or_compute("shop", "web", Some("http"), compute);
        assert!(Arc::ptr_eq(&first, &again));
        cache.get_or_compute("shop", "web", None, compute);
        assert_eq!(computed.get(), 2, "each port name is its own entry");
        cache.invalidate("shop", "web");
        cache.get_or_compute("shop", "web", Some("http"), compute);
        assert_eq!(computed.get(), 3);
    }
}
