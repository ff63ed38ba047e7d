//! compile(): the pure step from a snapshot of Kubernetes objects to a routing table and diagnostics.

mod backend;
mod class;
mod endpoint_cache;
mod policy;

use hashbrown::HashMap;
use std::sync::Arc;

use k8s_openapi::api::networking::v1::{Ingress, IngressBackend};
use sluice_routing::{BackendId, HostMatch, PathMatch, RoutePolicy, RoutingTable, TableBuilder};

use crate::annotations::{
    ingress_annotations, ingress_policy, IngressAnnotations, IngressPolicy, ServiceUpstream,
};
use crate::diagnostic::{Diagnostic, Diagnostics, ObjectRef};
use crate::snapshot::{ObjectKey, Snapshot};
use backend::{resolve, BackendField, BackendSink, ServiceIndex, ServiceReference};
use policy::{route_policy, IngressSide, ServiceName};

pub use backend::{
    ready_endpoints, EndpointResolver, EndpointSource, EndpointSources, SliceIndex,
    SERVICE_NAME_LABEL,
};
pub use class::CONTROLLER;
pub use endpoint_cache::EndpointCache;

/// What the compiler is told from the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileOptions {
    /// The IngressClass name this sluice serves (`--ingress-class`).
    pub ingress_class: String,
    /// Serve Ingresses that name no class (`--watch-ingress-without-class`).
    pub watch_without_class: bool,
}

impl Default for CompileOptions {
    fn default() -> Self {
        Self {
            ingress_class: "sluice".to_owned(),
            watch_without_class: false,
        }
    }
}

/// The result of one compile: the table to publish and everything worth telling about it.
#[derive(Debug, PartialEq)]
pub struct Compiled {
    pub table: RoutingTable,
    pub diagnostics: Vec<Diagnostic>,
    /// Which backends each Service's EndpointSlices feed, for endpoint updates without a recompile.
    pub endpoint_sources: EndpointSources,
    /// The Ingresses this sluice serves (class matched), for status updates.
    pub served: Vec<ObjectKey>,
}

/// Compiles a snapshot into a routing table. Pure and deterministic: no I/O, and the same
/// snapshot always gives an equal result.
pub fn compile(snapshot: &Snapshot, options: &CompileOptions) -> Compiled {
    compile_with(snapshot, options, &SliceIndex::new(snapshot))
}

/// [`compile`] with endpoint sets from `endpoints`, which must agree with the snapshot's
/// EndpointSlices (the Kubernetes source passes its cache, so a recompile re-reads no slice).
pub fn compile_with(
    snapshot: &Snapshot,
    options: &CompileOptions,
    endpoints: &dyn EndpointResolver,
) -> Compiled {
    let mut compiler = Compiler {
        services: ServiceIndex::new(snapshot),
        endpoints,
        builder: TableBuilder::new(),
        diagnostics: Diagnostics::default(),
        claimed: HashMap::with_capacity(snapshot.ingresses.len()),
        owners: Vec::with_capacity(snapshot.ingresses.len()),
        default_backend_owner: None,
        endpoint_sources: EndpointSources::default(),
        default_policy: Arc::default(),
        policies: Vec::new(),
    };
    let mut served = Vec::new();
    let classes = class::ClassFilter::new(
        snapshot,
        &options.ingress_class,
        options.watch_without_class,
        &mut compiler.diagnostics,
    );
    for (key, ingress) in oldest_first(snapshot) {
        // Annotation findings only matter for Ingresses this sluice serves: an nginx Ingress
        // left in place during a migration should not flood the report.
        let mut annotation_diagnostics = Diagnostics::default();
        let annotations = match ingress.metadata.annotations.as_ref() {
            Some(annotations) => ingress_annotations(
                Some(annotations),
                &ObjectRef::ingress(key),
                &mut annotation_diagnostics,
            ),
            None => IngressAnnotations::default(),
        };
        if classes.serves(ingress, &annotations, key, &mut compiler.diagnostics) {
            compiler.diagnostics.append(annotation_diagnostics);
            let policy = match ingress.metadata.annotations.as_ref() {
                Some(map) => {
                    ingress_policy(map, &ObjectRef::ingress(key), &mut compiler.diagnostics)
                }
                None => IngressPolicy::default(),
            };
            compiler.add_ingress(key, ingress, &annotations, &policy);
            served.push(key.clone());
        }
    }
    Compiled {
        table: compiler.builder.build(),
        diagnostics: compiler.diagnostics.into_sorted(),
        endpoint_sources: compiler.endpoint_sources,
        served,
    }
}

/// Ingresses ordered by age, oldest first, then by namespace/name: the order conflicts resolve in.
/// An Ingress without a creationTimestamp (typical in manifests) counts as newest.
fn oldest_first(snapshot: &Snapshot) -> Vec<(&ObjectKey, &Ingress)> {
    let mut ingresses: Vec<_> = snapshot.ingresses.iter().collect();
    ingresses.sort_by_key(|(key, ingress)| {
        let created = ingress.metadata.creation_timestamp.as_ref();
        (created.is_none(), created, *key)
    });
    ingresses
}

struct Compiler<'a> {
    services: ServiceIndex<'a>,
    endpoints: &'a dyn EndpointResolver,
    builder: TableBuilder,
    diagnostics: Diagnostics,
    /// Which Ingress (index into `owners`) owns each host + path, for conflict reports.
    claimed: HashMap<(HostMatch, PathMatch), usize>,
    /// Every served Ingress, in the order they were added (oldest first).
    owners: Vec<&'a ObjectKey>,
    /// Index into `owners` of the Ingress whose defaultBackend serves.
    default_backend_owner: Option<usize>,
    endpoint_sources: EndpointSources,
    /// The policy of every route whose Ingress and Service set none, shared.
    default_policy: Arc<RoutePolicy>,
    /// The policy of each backend the current Ingress sends to, computed once per Ingress.
    policies: Vec<(BackendId, Arc<RoutePolicy>)>,
}

/// The Ingress being added: what every rule of it shares.
struct Current<'a> {
    key: &'a ObjectKey,
    /// Index into `Compiler::owners`.
    owner: usize,
    /// `namespace/name`, shared by all its routes.
    source: Arc<str>,
    service_upstream: ServiceUpstream,
    policy: &'a IngressPolicy,
    /// `policy.route`, shared by its routes unless a Service changes it.
    base: Arc<RoutePolicy>,
}

impl<'a> Compiler<'a> {
    /// The Ingress at `owner`, as diagnostics name it (built only when one is reported).
    fn owner(&self, owner: usize) -> ObjectRef {
        ObjectRef::ingress(self.owners[owner])
    }

    fn add_ingress(
        &mut self,
        key: &'a ObjectKey,
        ingress: &Ingress,
        annotations: &IngressAnnotations,
        policy: &IngressPolicy,
    ) {
        self.owners.push(key);
        self.policies.clear();
        let base = if policy.route == RoutePolicy::default() {
            self.default_policy.clone()
        } else {
            Arc::new(policy.route.clone())
        };
        let current = Current {
            key,
            owner: self.owners.len() - 1,
            source: format!("{}/{}", key.namespace, key.name).into(),
            service_upstream: annotations.service_upstream,
            policy,
            base,
        };
        let Some(spec) = ingress.spec.as_ref() else {
            self.diagnostics.error(
                &self.owner(current.owner),
                "spec",
                "missing; nothing to serve",
            );
            return;
        };
        if let Some(backend) = &spec.default_backend {
            self.add_default_backend(&current, backend);
        }
        for (rule_index, rule) in spec.rules.as_deref().unwrap_or_default().iter().enumerate() {
            let Some(host) = self.host_of(rule.host.as_deref(), rule_index, current.owner) else {
                continue;
            };
            let Some(http) = &rule.http else {
                let field = format!("spec.rules[{rule_index}].http");
                self.diagnostics.warning(
                    &self.owner(current.owner),
                    field,
                    "missing; rule has no paths and is ignored",
                );
                continue;
            };
            for (path_index, path) in http.paths.iter().enumerate() {
                let field = BackendField::Path {
                    rule: rule_index,
                    path: path_index,
                };
                let Some(path_match) =
                    self.path_of(path.path.as_deref(), &path.path_type, field, current.owner)
                else {
                    continue;
                };
                let Some((backend, policy)) = self.backend_of(&path.backend, &current, field)
                else {
                    continue;
                };
                if self.claim(&host, &path_match, field, current.owner) {
                    self.builder.add_route(
                        host.clone(),
                        path_match,
                        backend,
                        current.source.clone(),
                        policy,
                    );
                }
            }
        }
    }

    fn add_default_backend(&mut self, current: &Current<'_>, backend: &IngressBackend) {
        if let Some(owner) = self.default_backend_owner {
            let winner = self.owners[owner];
            let message = format!(
                "ignored: Ingress {}/{} is older and its defaultBackend wins",
                winner.namespace, winner.name
            );
            self.diagnostics
                .warning(&self.owner(current.owner), "spec.defaultBackend", message);
            return;
        }
        if let Some((id, policy)) = self.backend_of(backend, current, BackendField::Default) {
            self.builder.set_default_backend(id, policy);
            self.default_backend_owner = Some(current.owner);
        }
    }

    fn host_of(&mut self, host: Option<&str>, rule: usize, owner: usize) -> Option<HostMatch> {
        let text = host.unwrap_or_default();
        let name = text.strip_prefix("*.").unwrap_or(text);
        let valid = name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
        if !text.is_empty() && !valid {
            let message = format!("{text:?} is not a valid host (a DNS name, optionally starting with \"*.\"); rule dropped");
            self.diagnostics.error(
                &self.owner(owner),
                format!("spec.rules[{rule}].host"),
                message,
            );
            return None;
        }
        Some(HostMatch::from_rule_host(host))
    }

    fn path_of(
        &mut self,
        path: Option<&str>,
        path_type: &str,
        field: BackendField,
        owner: usize,
    ) -> Option<PathMatch> {
        let path = path.unwrap_or("/");
        if !path.starts_with('/') {
            let message = format!("{path:?} must start with \"/\"; path dropped");
            self.diagnostics
                .error(&self.owner(owner), path_field(field, ".path"), message);
            return None;
        }
        match path_type {
            "Exact" => Some(PathMatch::exact(path)),
            "Prefix" | "ImplementationSpecific" => Some(PathMatch::prefix(path)),
            other => {
                let message = format!("{other:?} is not a pathType (Exact, Prefix or ImplementationSpecific); path dropped");
                self.diagnostics
                    .error(&self.owner(owner), path_field(field, ".pathType"), message);
                None
            }
        }
    }

    /// The backend a reference resolves to, with the policy of the current Ingress's routes to it.
    fn backend_of(
        &mut self,
        backend: &IngressBackend,
        current: &Current<'_>,
        field: BackendField,
    ) -> Option<(BackendId, Arc<RoutePolicy>)> {
        let Some(service) = &backend.service else {
            let what = if backend.resource.is_some() {
                "resource backends are not supported"
            } else {
                "no service"
            };
            self.diagnostics.error(
                &self.owner(current.owner),
                field.at(""),
                format!("{what}; route dropped"),
            );
            return None;
        };
        let reference = ServiceReference {
            namespace: &current.key.namespace,
            service,
            field,
            ingress: self.owners[current.owner],
            service_upstream: current.service_upstream == ServiceUpstream::On,
        };
        let sink = BackendSink {
            builder: &mut self.builder,
            endpoint_sources: &mut self.endpoint_sources,
            diagnostics: &mut self.diagnostics,
        };
        let resolved = resolve(&self.services, self.endpoints, &reference, sink)?;
        if let Some((_, policy)) = self.policies.iter().find(|(id, _)| *id == resolved.id) {
            return Some((resolved.id, policy.clone()));
        }
        let ingress = IngressSide {
            key: current.key,
            policy: current.policy,
            service_upstream: current.service_upstream,
            base: &current.base,
        };
        let service_name = ServiceName {
            namespace: &current.key.namespace,
            name: &service.name,
        };
        let policy = route_policy(&ingress, &resolved, service_name, &mut self.diagnostics);
        self.policies.push((resolved.id.clone(), policy.clone()));
        Some((resolved.id, policy))
    }

    /// Claims host + path for this Ingress; a later (younger) claim loses with a diagnostic.
    fn claim(
        &mut self,
        host: &HostMatch,
        path: &PathMatch,
        field: BackendField,
        owner: usize,
    ) -> bool {
        let key = (host.clone(), path.clone());
        let Some(&first) = self.claimed.get(&key) else {
            self.claimed.insert(key, owner);
            return true;
        };
        let holder = if first == owner {
            "an earlier rule of this Ingress".to_owned()
        } else {
            format!("{}, which is older", self.owner(first))
        };
        let message = format!(
            "duplicate of host {host} path {} ({:?}) already served by {holder}; ignored",
            path.path(),
            path.kind()
        );
        self.diagnostics
            .warning(&self.owner(owner), path_field(field, ""), message);
        false
    }
}

/// The field path of a rule's path entry (`spec.rules[r].http.paths[p]`) plus `suffix`.
fn path_field(field: BackendField, suffix: &str) -> String {
    match field {
        BackendField::Path { rule, path } => {
            format!("spec.rules[{rule}].http.paths[{path}]{suffix}")
        }
        BackendField::Default => format!("spec.defaultBackend{suffix}"),
    }
}
