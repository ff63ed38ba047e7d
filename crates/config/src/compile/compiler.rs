//! The compiler, incremental: each Ingress compiles into a fragment cached with the inputs it read, and a merge combines the fragments into the table, so a change to one Ingress recompiles only that Ingress.
//!
//! A fragment holds an Ingress's routes, default backend, backends, endpoint sources and
//! diagnostics, exactly as they come out of compiling that Ingress alone. What crosses
//! Ingresses (which of two claims to the same host and path wins, whose defaultBackend serves)
//! is decided by the merge, in age order, every time. A cached fragment is reused while its
//! inputs are unchanged: the Ingress itself, every Service it referenced (present or missing),
//! every endpoint set it read, and the IngressClasses. Objects from the API server are compared
//! by `resourceVersion`; objects without one (manifest files) by content.

use std::collections::BTreeMap;
use std::sync::Arc;

use hashbrown::HashMap;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use sluice_routing::TableBuilder;

use super::backend::{EndpointResolver, EndpointSources, ServiceIndex};
use super::class::ClassFilter;
use super::fragment::Fragment;
use super::gateway::{compile_gateways, BackendTlsPolicies, GatewayInputs, GatewaySinks};
use super::ingress::{compile_ingress, oldest_first, Inputs};
use super::merge::{Merge, RegexCache};
use super::options::{CompileOptions, Compiled};
use super::tls::{IngressTls, SecretCache, TlsMerge};
use super::version::Version;
use crate::annotations::{ingress_annotations, IngressAnnotations};
use crate::diagnostic::{Diagnostic, Diagnostics, ObjectRef};
use crate::snapshot::{ObjectKey, Snapshot};

/// A compiler that keeps each Ingress's fragment between compiles. Its result always equals a
/// fresh [`super::compile_with`] of the same snapshot (a property test holds it to that).
#[derive(Default)]
pub struct Compiler {
    options: CompileOptions,
    /// The IngressClasses the cached fragments were compiled with; any change drops them all.
    classes: BTreeMap<String, IngressClass>,
    cache: HashMap<ObjectKey, CachedIngress>,
    /// Certificates and CAs by Secret, reparsed only when a Secret changes.
    secrets: SecretCache,
    /// Regex paths by pattern, compiled once and kept while some route uses them.
    regexes: RegexCache,
}

/// One Ingress as last compiled.
struct CachedIngress {
    version: Version<Ingress>,
    /// Class and annotation findings, and everything else about this Ingress alone.
    diagnostics: Vec<Diagnostic>,
    /// `None` when this sluice does not serve the Ingress's class.
    fragment: Option<Fragment>,
}

impl Compiler {
    pub fn new(options: CompileOptions) -> Self {
        Self {
            options,
            ..Self::default()
        }
    }

    pub fn options(&self) -> &CompileOptions {
        &self.options
    }

    /// Compiles `snapshot`, recompiling only the Ingresses whose inputs changed since the last
    /// compile, then merges every fragment into the table.
    pub fn compile(&mut self, snapshot: &Snapshot, endpoints: &dyn EndpointResolver) -> Compiled {
        if self.classes != snapshot.ingress_classes {
            self.cache.clear();
            self.classes = snapshot.ingress_classes.clone();
        }
        let mut class_diagnostics = Diagnostics::default();
        let classes = ClassFilter::new(
            snapshot,
            &self.options.ingress_class,
            self.options.watch_without_class,
            &mut class_diagnostics,
        );
        let services = ServiceIndex::new(snapshot);
        let options = self.options.clone();
        let inputs = Inputs {
            services: &services,
            endpoints,
            secrets: &snapshot.secrets,
            config_maps: &snapshot.config_maps,
            middlewares: &snapshot.middlewares,
            options: &options,
        };
        let order = oldest_first(snapshot);
        for &(key, ingress) in &order {
            let current = self
                .cache
                .get(key)
                .is_some_and(|cached| cached.still_valid(ingress, &inputs));
            if !current {
                let cached = compile_cached(key, ingress, &classes, &inputs);
                self.cache.insert(key.clone(), cached);
            }
        }
        if self.cache.len() > order.len() {
            self.cache
                .retain(|key, _| snapshot.ingresses.contains_key(key));
        }
        self.secrets.refresh(snapshot);
        let controller = self.options.gateway_controller.clone();
        let backend_tls = BackendTlsPolicies::resolve(snapshot);
        let gateways = GatewayInputs {
            snapshot,
            backend_tls: &backend_tls,
            controller: &controller,
            default_address: self.options.gateway_address,
            services: &services,
            endpoints,
        };
        self.merge(snapshot, &order, class_diagnostics, &gateways)
    }

    /// Combines the fragments in age order: the oldest claim to a host and path wins, and the
    /// oldest served Ingress with a defaultBackend provides the table's.
    /// TLS hosts are claimed the same way, after each Ingress's routes.
    fn merge(
        &mut self,
        snapshot: &Snapshot,
        order: &[(&ObjectKey, &Ingress)],
        diagnostics: Diagnostics,
        gateways: &GatewayInputs<'_>,
    ) -> Compiled {
        let mut tls = TlsMerge::new(&mut self.secrets, snapshot);
        let mut merge = Merge {
            builder: TableBuilder::new(),
            diagnostics,
            claimed: HashMap::with_capacity(order.len()),
            default_owner: None,
            endpoint_sources: EndpointSources::default(),
            regex_hosts: HashMap::new(),
            regexes: std::mem::take(&mut self.regexes),
            regexes_used: RegexCache::new(),
        };
        for &(key, _) in order {
            if let Some(fragment) = self.cache.get(key).and_then(|c| c.fragment.as_ref()) {
                merge.note_regex_hosts(key, fragment);
            }
        }
        let mut served = Vec::new();
        let mut fragments = Vec::with_capacity(order.len());
        for &(key, _) in order {
            let Some(cached) = self.cache.get(key) else {
                continue;
            };
            merge.diagnostics.extend_from(&cached.diagnostics);
            if let Some(fragment) = &cached.fragment {
                merge.add(key, fragment);
                fragments.push((key, fragment));
                let ingress_tls = IngressTls {
                    key,
                    source: &fragment.source,
                    entries: &fragment.tls,
                    site: &fragment.site,
                    routes: &fragment.routes,
                };
                tls.add(&ingress_tls, &mut merge.builder, &mut merge.diagnostics);
                served.push(key.clone());
            }
        }
        if let Some(secret) = &self.options.default_certificate {
            tls.default_certificate(secret, &mut merge.builder, &mut merge.diagnostics);
        }
        merge.add_other_names(&fragments);
        merge.add_canaries(&fragments);
        self.regexes = merge.regexes_used;
        let sinks = GatewaySinks {
            builder: &mut merge.builder,
            endpoint_sources: &mut merge.endpoint_sources,
            diagnostics: &mut merge.diagnostics,
            tls: &mut tls,
        };
        let gateways = compile_gateways(gateways, sinks);
        Compiled {
            table: merge.builder.build(),
            diagnostics: merge.diagnostics.into_sorted(),
            endpoint_sources: merge.endpoint_sources,
            served,
            gateways,
        }
    }
}

impl CachedIngress {
    /// Whether the Ingress and everything its fragment read are as they were.
    fn still_valid(&self, ingress: &Ingress, inputs: &Inputs<'_>) -> bool {
        let Inputs {
            services,
            endpoints,
            secrets,
            config_maps,
            middlewares,
            ..
        } = *inputs;
        if !self.version.matches(ingress) {
            return false;
        }
        let Some(fragment) = &self.fragment else {
            return true;
        };
        let services_same = fragment
            .services
            .iter()
            .all(|(key, seen)| Version::unchanged(seen, services.get(&key.namespace, &key.name)));
        let secrets_same = fragment
            .secrets
            .iter()
            .all(|(key, seen)| Version::unchanged(seen, secrets.get(key)));
        let config_maps_same = fragment
            .config_maps
            .iter()
            .all(|(key, seen)| Version::unchanged(seen, config_maps.get(key)));
        let middlewares_same = fragment.middlewares.as_ref().is_none_or(|seen| {
            seen.len() == middlewares.len()
                && seen
                    .iter()
                    .zip(middlewares)
                    .all(|((seen_key, version), (key, now))| {
                        seen_key == key && version.matches(now)
                    })
        });
        services_same
            && secrets_same
            && config_maps_same
            && middlewares_same
            && fragment.endpoint_sets.iter().all(|used| {
                let now = endpoints.ready_endpoints(
                    &used.namespace,
                    &used.service,
                    used.port_name.as_deref(),
                );
                Arc::ptr_eq(&now, &used.set) || now == used.set
            })
    }
}

/// Compiles one Ingress: whether this sluice serves it, and if so its fragment.
fn compile_cached(
    key: &ObjectKey,
    ingress: &Ingress,
    classes: &ClassFilter<'_>,
    inputs: &Inputs<'_>,
) -> CachedIngress {
    // Annotation findings only matter for Ingresses this sluice serves: an nginx Ingress left
    // in place during a migration should not flood the report.
    let mut annotation_diagnostics = Diagnostics::default();
    let annotations = match ingress.metadata.annotations.as_ref() {
        Some(annotations) => ingress_annotations(
            Some(annotations),
            &key.namespace,
            &ObjectRef::ingress(key),
            &mut annotation_diagnostics,
        ),
        None => IngressAnnotations::default(),
    };
    let mut diagnostics = Diagnostics::default();
    let fragment = classes
        .serves(ingress, &annotations, key, &mut diagnostics)
        .then(|| {
            let (fragment, found) =
                compile_ingress(key, ingress, &annotations, inputs, annotation_diagnostics);
            diagnostics.append(found);
            fragment
        });
    CachedIngress {
        version: Version::of(ingress),
        diagnostics: diagnostics.into_vec(),
        fragment,
    }
}
