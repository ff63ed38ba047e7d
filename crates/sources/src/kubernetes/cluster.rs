//! The cluster state: applies watch events to the snapshot and says what each one changed — a recompile, some Services' endpoints, or only an Ingress status.

use std::collections::BTreeSet;

use hashbrown::HashMap;
use std::sync::Arc;

use kube::runtime::watcher::Event;
use sluice_config::{
    ready_endpoints, EndpointCache, EndpointResolver, KubeObject, ObjectKey, Snapshot,
    SERVICE_NAME_LABEL,
};
use sluice_routing::EndpointSet;

use super::trim::trim;
use super::watch::{WatchEvent, WatchId};

/// What applying one event changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Effect {
    /// An object the routing table depends on changed: recompile.
    pub recompile: bool,
    /// EndpointSlices of these Services changed: recompute their backends' endpoints.
    pub services: BTreeSet<ObjectKey>,
    /// Only the status of an Ingress changed (e.g. sluice's own status write).
    pub ingress_status: bool,
}

impl Effect {
    pub fn merge(&mut self, other: Effect) {
        self.recompile |= other.recompile;
        self.services.extend(other.services);
        self.ingress_status |= other.ingress_status;
    }

    pub fn is_empty(&self) -> bool {
        *self == Effect::default()
    }
}

/// The snapshot the watches build, plus the bookkeeping that makes updates cheap and re-lists
/// flap-free. It is also the compile's [`EndpointResolver`]: endpoint sets stay cached until their
/// Service's slices change.
#[derive(Debug, Default)]
pub struct ClusterState {
    snapshot: Snapshot,
    /// Keys seen by a list in progress, per watch. Listed objects are applied as they arrive
    /// (an unchanged one has no effect); objects the list did not return are removed only at
    /// `InitDone`, so a re-list never shows a moment with objects missing.
    relists: HashMap<WatchId, BTreeSet<ObjectKey>>,
    /// Which watches have completed a list at least once.
    synced: BTreeSet<WatchId>,
    /// EndpointSlice keys per Service, so one Service's endpoints are found without a scan.
    slices_by_service: HashMap<ObjectKey, BTreeSet<ObjectKey>>,
    /// Ready endpoints per Service and port name, computed on first use and dropped when the
    /// Service's slices change: a recompile reuses every set whose slices did not change.
    endpoint_cache: EndpointCache,
    /// What each watch covers, by [`WatchId`].
    scopes: Vec<WatchScope>,
    /// The last content version stamped on a stored object (see `stamp_version`).
    content_versions: u64,
}

/// The kind and namespace one watch covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchScope {
    pub kind: &'static str,
    /// `None` for every namespace (and for cluster-scoped kinds).
    pub namespace: Option<String>,
}

impl WatchScope {
    fn covers(&self, key: &ObjectKey) -> bool {
        self.namespace
            .as_ref()
            .is_none_or(|namespace| *namespace == key.namespace)
    }
}

impl ClusterState {
    /// A state for watches with these scopes, indexed by [`WatchId`].
    pub fn new(scopes: Vec<WatchScope>) -> Self {
        Self {
            scopes,
            ..Self::default()
        }
    }

    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// Whether every watch has completed its first list.
    pub fn synced(&self) -> bool {
        self.synced.len() >= self.scopes.len()
    }

    /// Applies one watch event.
    pub fn apply(&mut self, event: WatchEvent) -> Effect {
        let effect = self.apply_event(event);
        for service in &effect.services {
            self.endpoint_cache
                .invalidate(&service.namespace, &service.name);
        }
        effect
    }

    fn apply_event(&mut self, event: WatchEvent) -> Effect {
        match event.event {
            Event::Apply(mut object) => {
                trim(&mut object);
                self.upsert(object)
            }
            Event::Delete(object) => self.delete(&object),
            Event::Init => {
                self.relists.insert(event.watch, BTreeSet::new());
                Effect::default()
            }
            Event::InitApply(mut object) => {
                trim(&mut object);
                let key = ObjectKey::of(object.metadata());
                self.relists.entry(event.watch).or_default().insert(key);
                self.upsert(object)
            }
            Event::InitDone => {
                self.synced.insert(event.watch);
                let listed = self.relists.remove(&event.watch).unwrap_or_default();
                self.remove_unlisted(event.watch, &listed)
            }
        }
    }

    /// The ready endpoints of a Service's slices for one port name (cached until they change).
    pub fn endpoints_of(&self, service: &ObjectKey, port_name: Option<&str>) -> Arc<EndpointSet> {
        self.cached_endpoints(&service.namespace, &service.name, port_name)
    }

    fn cached_endpoints(
        &self,
        namespace: &str,
        service: &str,
        port_name: Option<&str>,
    ) -> Arc<EndpointSet> {
        self.endpoint_cache
            .get_or_compute(namespace, service, port_name, || {
                let keys = self
                    .slices_by_service
                    .get(&ObjectKey::new(namespace, service));
                let slices = keys
                    .into_iter()
                    .flatten()
                    .filter_map(|key| self.snapshot.endpoint_slices.get(key));
                ready_endpoints(slices, port_name)
            })
    }

    /// Gives an incoming object a `resourceVersion` that changes only with its content: the
    /// stored object's when the content is the same, a new one when it differs. The API's own
    /// version is trimmed (it changes on every write, status included), so an unchanged
    /// object compares equal; this one lets the incremental compiler tell a changed Ingress or
    /// Service by its version instead of comparing it whole.
    fn stamp_version(&mut self, object: &mut KubeObject) {
        let stored = self.snapshot.stored_metadata(object);
        let version = stored.and_then(|m| m.resource_version.clone());
        object.metadata_mut().resource_version = version;
        if !self.same_for_compile(object) {
            self.content_versions += 1;
            object.metadata_mut().resource_version =
                Some(format!("sluice-{}", self.content_versions));
        }
    }

    fn upsert(&mut self, mut object: KubeObject) -> Effect {
        self.stamp_version(&mut object);
        let key = ObjectKey::of(object.metadata());
        match object {
            KubeObject::EndpointSlice(slice) => {
                if self.snapshot.endpoint_slices.get(&key) == Some(&slice) {
                    return Effect::default();
                }
                let mut services = self.unindex_slice(&key);
                if let Some(service) = service_of(&key, &slice) {
                    self.slices_by_service
                        .entry(service.clone())
                        .or_default()
                        .insert(key.clone());
                    services.insert(service);
                }
                self.snapshot.endpoint_slices.insert(key, slice);
                Effect {
                    services,
                    ..Effect::default()
                }
            }
            KubeObject::Ingress(ingress) => {
                let effect = match self.snapshot.ingresses.get(&key) {
                    Some(previous) if *previous == ingress => return Effect::default(),
                    Some(previous)
                        if previous.spec == ingress.spec
                            && previous.metadata == ingress.metadata =>
                    {
                        Effect {
                            ingress_status: true,
                            ..Effect::default()
                        }
                    }
                    _ => recompile(),
                };
                self.snapshot.ingresses.insert(key, ingress);
                effect
            }
            other => {
                let changed = !self.contains_equal(&other);
                self.snapshot.insert(other);
                if changed {
                    recompile()
                } else {
                    Effect::default()
                }
            }
        }
    }

    fn delete(&mut self, object: &KubeObject) -> Effect {
        self.remove(object.kind(), &ObjectKey::of(object.metadata()))
    }

    fn remove(&mut self, kind: &str, key: &ObjectKey) -> Effect {
        let snapshot = &mut self.snapshot;
        let removed = match kind {
            "EndpointSlice" => {
                let services = self.unindex_slice(key);
                self.snapshot.endpoint_slices.remove(key);
                return Effect {
                    services,
                    ..Effect::default()
                };
            }
            "Ingress" => snapshot.ingresses.remove(key).is_some(),
            "IngressClass" => snapshot.ingress_classes.remove(&key.name).is_some(),
            "Service" => snapshot.services.remove(key).is_some(),
            "Secret" => snapshot.secrets.remove(key).is_some(),
            "ConfigMap" => snapshot.config_maps.remove(key).is_some(),
            "Namespace" => snapshot.namespaces.remove(&key.name).is_some(),
            "GatewayClass" => snapshot.gateway_classes.remove(&key.name).is_some(),
            "Gateway" => snapshot.gateways.remove(key).is_some(),
            "HTTPRoute" => snapshot.http_routes.remove(key).is_some(),
            "GRPCRoute" => snapshot.grpc_routes.remove(key).is_some(),
            "TLSRoute" => snapshot.tls_routes.remove(key).is_some(),
            "TCPRoute" => snapshot.tcp_routes.remove(key).is_some(),
            "UDPRoute" => snapshot.udp_routes.remove(key).is_some(),
            "BackendTLSPolicy" => snapshot.backend_tls_policies.remove(key).is_some(),
            "ListenerSet" => snapshot.listener_sets.remove(key).is_some(),
            "ReferenceGrant" => snapshot.reference_grants.remove(key).is_some(),
            kind if kind.starts_with("Middleware") => snapshot.middlewares.remove(key).is_some(),
            _ => false,
        };
        if removed {
            recompile()
        } else {
            Effect::default()
        }
    }

    /// After a completed list: removes the objects of the watch's kind and scope that the list
    /// did not return (deleted while the watch was away).
    fn remove_unlisted(&mut self, watch: WatchId, listed: &BTreeSet<ObjectKey>) -> Effect {
        let Some(scope) = self.scopes.get(watch.0).cloned() else {
            return Effect::default();
        };
        let stale: Vec<ObjectKey> = self
            .keys_of(scope.kind)
            .filter(|key| scope.covers(key) && !listed.contains(key))
            .collect();
        let mut effect = Effect::default();
        for key in stale {
            effect.merge(self.remove(scope.kind, &key));
        }
        effect
    }

    fn keys_of(&self, kind: &str) -> Box<dyn Iterator<Item = ObjectKey> + '_> {
        let snapshot = &self.snapshot;
        match kind {
            "Ingress" => Box::new(snapshot.ingresses.keys().cloned()),
            "IngressClass" => Box::new(
                snapshot
                    .ingress_classes
                    .values()
                    .map(|class| ObjectKey::of(&class.metadata)),
            ),
            "Service" => Box::new(snapshot.services.keys().cloned()),
            "EndpointSlice" => Box::new(snapshot.endpoint_slices.keys().cloned()),
            "Secret" => Box::new(snapshot.secrets.keys().cloned()),
            "ConfigMap" => Box::new(snapshot.config_maps.keys().cloned()),
            "Namespace" => Box::new(
                snapshot
                    .namespaces
                    .values()
                    .map(|namespace| ObjectKey::of(&namespace.metadata)),
            ),
            "GatewayClass" => Box::new(
                snapshot
                    .gateway_classes
                    .values()
                    .map(|class| ObjectKey::of(&class.metadata)),
            ),
            "Gateway" => Box::new(snapshot.gateways.keys().cloned()),
            "HTTPRoute" => Box::new(snapshot.http_routes.keys().cloned()),
            "GRPCRoute" => Box::new(snapshot.grpc_routes.keys().cloned()),
            "TLSRoute" => Box::new(snapshot.tls_routes.keys().cloned()),
            "TCPRoute" => Box::new(snapshot.tcp_routes.keys().cloned()),
            "UDPRoute" => Box::new(snapshot.udp_routes.keys().cloned()),
            "BackendTLSPolicy" => Box::new(snapshot.backend_tls_policies.keys().cloned()),
            "ListenerSet" => Box::new(snapshot.listener_sets.keys().cloned()),
            "ReferenceGrant" => Box::new(snapshot.reference_grants.keys().cloned()),
            kind if kind.starts_with("Middleware") => {
                // One watch per group: each removes only what its own group listed.
                let group = if kind == "Middleware" {
                    "traefik.io"
                } else {
                    "traefik.containo.us"
                };
                Box::new(
                    snapshot
                        .middlewares
                        .iter()
                        .filter(move |(_, m)| m.group == group)
                        .map(|(key, _)| key.clone()),
                )
            }
            _ => Box::new(std::iter::empty()),
        }
    }

    /// Whether the stored object is the same as far as compile reads it: all of it, but an
    /// Ingress's status (which sluice itself writes).
    fn same_for_compile(&self, object: &KubeObject) -> bool {
        match object {
            KubeObject::Ingress(ingress) => {
                let key = ObjectKey::of(&ingress.metadata);
                self.snapshot.ingresses.get(&key).is_some_and(|stored| {
                    stored.spec == ingress.spec && stored.metadata == ingress.metadata
                })
            }
            other => self.contains_equal(other),
        }
    }

    fn contains_equal(&self, object: &KubeObject) -> bool {
        self.snapshot.holds(object)
    }

    /// Removes a slice from the index; returns the Service it belonged to.
    fn unindex_slice(&mut self, key: &ObjectKey) -> BTreeSet<ObjectKey> {
        let mut services = BTreeSet::new();
        if let Some(service) = self
            .snapshot
            .endpoint_slices
            .get(key)
            .and_then(|old| service_of(key, old))
        {
            if let Some(slices) = self.slices_by_service.get_mut(&service) {
                slices.remove(key);
                if slices.is_empty() {
                    self.slices_by_service.remove(&service);
                }
            }
            services.insert(service);
        }
        services
    }
}

impl EndpointResolver for ClusterState {
    fn ready_endpoints(
        &self,
        namespace: &str,
        service: &str,
        port_name: Option<&str>,
    ) -> Arc<EndpointSet> {
        self.cached_endpoints(namespace, service, port_name)
    }
}

fn recompile() -> Effect {
    Effect {
        recompile: true,
        ..Effect::default()
    }
}

/// The Service an EndpointSlice belongs to, from its `kubernetes.io/service-name` label.
fn service_of(
    key: &ObjectKey,
    slice: &k8s_openapi::api::discovery::v1::EndpointSlice,
) -> Option<ObjectKey> {
    let name = slice.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
    Some(ObjectKey::new(&key.namespace, name))
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use sluice_config::{parse_manifest, Document, Format};

    fn object(yaml: &str) -> KubeObject {
        match parse_manifest(yaml, Format::Yaml).unwrap().remove(0) {
            Document::Object(object) => object,
            Document::Skipped { kind, .. } => panic!("unexpected kind {kind}"),
        }
    }

    fn slice(name: &str, service: &str, ips: &[&str]) -> KubeObject {
        let endpoints: Vec<String> = ips
            .iter()
            .map(|ip| format!("{{addresses: [{ip}]}}"))
            .collect();
        object(&format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}, namespace: shop, resourceVersion: \"7\", labels: {{kubernetes.io/service-name: {service}}}}}\naddressType: IPv4\nports: [{{name: http, port: 8080}}]\nendpoints: [{}]\n",
            endpoints.join(", ")
        ))
    }

    fn ingress(status_ip: Option<&str>) -> KubeObject {
        let status = status_ip
            .map(|ip| format!("status: {{loadBalancer: {{ingress: [{{ip: {ip}}}]}}}}\n"))
            .unwrap_or_default();
        object(&format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: web, namespace: shop}}\nspec: {{ingressClassName: sluice}}\n{status}"
        ))
    }

    fn event(watch: usize, event: Event<KubeObject>) -> WatchEvent {
        WatchEvent {
            watch: WatchId(watch),
            event,
            received: Instant::now(),
        }
    }

    fn state() -> ClusterState {
        ClusterState::new(vec![
            WatchScope {
                kind: "EndpointSlice",
                namespace: None,
            },
            WatchScope {
                kind: "Ingress",
                namespace: Some("shop".into()),
            },
        ])
    }

    fn list(state: &mut ClusterState, watch: usize, objects: Vec<KubeObject>) -> Effect {
        let mut effect = state.apply(event(watch, Event::Init));
        for object in objects {
            effect.merge(state.apply(event(watch, Event::InitApply(object))));
        }
        effect.merge(state.apply(event(watch, Event::InitDone)));
        effect
    }

    fn web() -> ObjectKey {
        ObjectKey::new("shop", "web")
    }

    #[test]
    fn a_slice_change_names_its_service_and_nothing_else() {
        let mut state = state();
        list(&mut state, 0, vec![slice("web-a", "web", &["10.0.0.1"])]);
        let effect = state.apply(event(
            0,
            Event::Apply(slice("web-a", "web", &["10.0.0.1", "10.0.0.2"])),
        ));
        assert_eq!(
            effect,
            Effect {
                services: [web()].into(),
                ..Effect::default()
            }
        );
        assert_eq!(state.endpoints_of(&web(), Some("http")).len(), 2);
        let again = state.apply(event(
            0,
            Event::Apply(slice("web-a", "web", &["10.0.0.1", "10.0.0.2"])),
        ));
        assert!(again.is_empty(), "an unchanged slice has no effect");
    }

    #[test]
    fn slices_merge_per_service_and_deletes_are_seen() {
        let mut state = state();
        list(
            &mut state,
            0,
            vec![
                slice("web-a", "web", &["10.0.0.1"]),
                slice("web-b", "web", &["10.0.0.2"]),
                slice("api-a", "api", &["10.0.0.9"]),
            ],
        );
        assert_eq!(state.endpoints_of(&web(), Some("http")).len(), 2);
        let effect = state.apply(event(0, Event::Delete(slice("web-b", "web", &[]))));
        assert_eq!(effect.services, [web()].into());
        assert_eq!(state.endpoints_of(&web(), Some("http")).len(), 1);
    }

    #[test]
    fn a_relist_with_the_same_objects_changes_nothing() {
        let mut state = state();
        list(&mut state, 0, vec![slice("web-a", "web", &["10.0.0.1"])]);
        list(&mut state, 1, vec![ingress(None)]);
        assert!(state.synced());
        assert!(list(&mut state, 0, vec![slice("web-a", "web", &["10.0.0.1"])]).is_empty());
        assert!(list(&mut state, 1, vec![ingress(None)]).is_empty());
    }

    #[test]
    fn objects_stay_in_place_until_the_relist_completes_and_missing_ones_then_go() {
        let mut state = state();
        list(
            &mut state,
            0,
            vec![
                slice("web-a", "web", &["10.0.0.1"]),
                slice("web-b", "web", &["10.0.0.2"]),
            ],
        );
        state.apply(event(0, Event::Init));
        state.apply(event(
            0,
            Event::InitApply(slice("web-a", "web", &["10.0.0.1"])),
        ));
        assert_eq!(
            state.endpoints_of(&web(), Some("http")).len(),
            2,
            "no gap while re-listing"
        );
        let effect = state.apply(event(0, Event::InitDone));
        assert_eq!(effect.services, [web()].into());
        assert_eq!(state.endpoints_of(&web(), Some("http")).len(), 1);
    }

    #[test]
    fn the_content_version_changes_with_the_content_and_only_with_it() {
        let mut state = state();
        list(&mut state, 1, vec![ingress(None)]);
        let version = |state: &ClusterState| {
            state.snapshot().ingresses[&web()]
                .metadata
                .resource_version
                .clone()
        };
        let first = version(&state);
        assert!(first.is_some(), "a stored object carries a content version");
        state.apply(event(1, Event::Apply(ingress(None))));
        assert_eq!(version(&state), first, "the same content keeps its version");
        state.apply(event(1, Event::Apply(ingress(Some("10.96.0.7")))));
        assert_eq!(
            version(&state),
            first,
            "a status change is not a content change"
        );
        let mut changed = ingress(Some("10.96.0.7"));
        if let KubeObject::Ingress(i) = &mut changed {
            i.spec.as_mut().unwrap().ingress_class_name = Some("other".into());
        }
        state.apply(event(1, Event::Apply(changed)));
        assert_ne!(version(&state), first, "a spec change gets a new version");
    }

    #[test]
    fn a_status_only_change_does_not_recompile() {
        let mut state = state();
        list(&mut state, 1, vec![ingress(None)]);
        let effect = state.apply(event(1, Event::Apply(ingress(Some("10.96.0.7")))));
        assert_eq!(
            effect,
            Effect {
                ingress_status: true,
                ..Effect::default()
            }
        );
        let mut changed = ingress(Some("10.96.0.7"));
        if let KubeObject::Ingress(i) = &mut changed {
            i.spec.as_mut().unwrap().ingress_class_name = Some("other".into());
        }
        assert!(state.apply(event(1, Event::Apply(changed))).recompile);
    }

    #[test]
    fn not_synced_until_every_watch_listed_once() {
        let mut state = state();
        list(&mut state, 0, vec![]);
        assert!(!state.synced());
        list(&mut state, 1, vec![]);
        assert!(state.synced());
    }

    #[test]
    fn deleted_routes_and_middlewares_leave_the_snapshot_and_a_relist_drops_only_its_own_group() {
        let mut state = ClusterState::new(vec![
            WatchScope {
                kind: "HTTPRoute",
                namespace: None,
            },
            WatchScope {
                kind: "Middleware",
                namespace: None,
            },
            WatchScope {
                kind: "Middleware (traefik.containo.us)",
                namespace: None,
            },
        ]);
        let route = object("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: web, namespace: shop}\nspec: {}\n");
        let current = object("apiVersion: traefik.io/v1alpha1\nkind: Middleware\nmetadata: {name: a, namespace: shop}\nspec: {addPrefix: {prefix: /a}}\n");
        let older = object("apiVersion: traefik.containo.us/v1alpha1\nkind: Middleware\nmetadata: {name: b, namespace: shop}\nspec: {addPrefix: {prefix: /b}}\n");
        list(&mut state, 0, vec![route.clone()]);
        list(&mut state, 1, vec![current.clone()]);
        list(&mut state, 2, vec![older]);
        assert_eq!(state.snapshot().middlewares.len(), 2);
        // A re-list of the traefik.io group that returns nothing drops only its own object.
        list(&mut state, 1, vec![]);
        let left: Vec<&str> = state
            .snapshot()
            .middlewares
            .keys()
            .map(|k| k.name.as_str())
            .collect();
        assert_eq!(left, ["b"]);
        assert!(state.apply(event(0, Event::Delete(route))).recompile);
        assert!(state.snapshot().http_routes.is_empty());
    }

    #[test]
    fn every_gateway_api_kind_leaves_on_delete_and_on_a_relist_without_it() {
        let kinds = ["TLSRoute", "TCPRoute", "UDPRoute", "BackendTLSPolicy"];
        let scopes = kinds
            .iter()
            .map(|kind| WatchScope {
                kind,
                namespace: None,
            })
            .collect();
        let mut state = ClusterState::new(scopes);
        let of = |kind: &str, name: &str| {
            object(&format!("apiVersion: gateway.networking.k8s.io/v1\nkind: {kind}\nmetadata: {{name: {name}, namespace: shop}}\nspec: {{}}\n"))
        };
        for (watch, kind) in kinds.iter().enumerate() {
            list(
                &mut state,
                watch,
                vec![of(kind, "deleted"), of(kind, "relisted")],
            );
        }
        let count = |state: &ClusterState| {
            let snapshot = state.snapshot();
            [
                snapshot.tls_routes.len(),
                snapshot.tcp_routes.len(),
                snapshot.udp_routes.len(),
                snapshot.backend_tls_policies.len(),
            ]
        };
        assert_eq!(count(&state), [2, 2, 2, 2]);
        for (watch, kind) in kinds.iter().enumerate() {
            assert!(
                state
                    .apply(event(watch, Event::Delete(of(kind, "deleted"))))
                    .recompile,
                "{kind}"
            );
        }
        assert_eq!(count(&state), [1, 1, 1, 1]);
        for watch in 0..kinds.len() {
            list(&mut state, watch, vec![]);
        }
        assert_eq!(count(&state), [0, 0, 0, 0]);
    }
}
