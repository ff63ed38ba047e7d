//! compile(): the pure step from a snapshot of Kubernetes objects to a routing table and diagnostics.

mod backend;
mod class;

use std::collections::HashMap;

use k8s_openapi::api::networking::v1::{Ingress, IngressBackend};
use sluice_routing::{BackendId, HostMatch, PathMatch, RoutingTable, TableBuilder};

use crate::annotations::ingress_annotations;
use crate::diagnostic::{Diagnostic, Diagnostics, ObjectRef};
use crate::snapshot::{ObjectKey, Snapshot};
use backend::{resolve, ServiceReference, SliceIndex};

pub use backend::{ready_endpoints, EndpointSource, EndpointSources, SERVICE_NAME_LABEL};
pub use class::CONTROLLER;

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
    let mut compiler = Compiler {
        snapshot,
        slices: SliceIndex::new(snapshot),
        builder: TableBuilder::new(),
        diagnostics: Diagnostics::default(),
        claimed: HashMap::new(),
        default_backend_owner: None,
        endpoint_sources: EndpointSources::default(),
    };
    let mut served = Vec::new();
    let classes = class::ClassFilter::new(
        snapshot,
        &options.ingress_class,
        options.watch_without_class,
        &mut compiler.diagnostics,
    );
    for (key, ingress) in oldest_first(snapshot) {
        let object = ObjectRef::new("Ingress", Some(&key.namespace), &key.name);
        // Annotation findings only matter for Ingresses this sluice serves: an nginx Ingress
        // left in place during a migration should not flood the report.
        let mut annotation_diagnostics = Diagnostics::default();
        let annotations = ingress_annotations(
            ingress.metadata.annotations.as_ref(),
            &object,
            &mut annotation_diagnostics,
        );
        if classes.serves(ingress, &annotations, &object, &mut compiler.diagnostics) {
            compiler.diagnostics.append(annotation_diagnostics);
            compiler.add_ingress(key, ingress, &object, annotations.service_upstream);
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
    snapshot: &'a Snapshot,
    slices: SliceIndex<'a>,
    builder: TableBuilder,
    diagnostics: Diagnostics,
    /// Which Ingress owns each host + path, for conflict reports.
    claimed: HashMap<(HostMatch, PathMatch), ObjectRef>,
    default_backend_owner: Option<ObjectRef>,
    endpoint_sources: EndpointSources,
}

impl Compiler<'_> {
    fn add_ingress(
        &mut self,
        key: &ObjectKey,
        ingress: &Ingress,
        object: &ObjectRef,
        service_upstream: bool,
    ) {
        let Some(spec) = ingress.spec.as_ref() else {
            self.diagnostics
                .error(object, "spec", "missing; nothing to serve");
            return;
        };
        let source = format!("{}/{}", key.namespace, key.name);
        if let Some(backend) = &spec.default_backend {
            self.add_default_backend(key, backend, object, service_upstream);
        }
        for (rule_index, rule) in spec.rules.as_deref().unwrap_or_default().iter().enumerate() {
            let rule_field = format!("spec.rules[{rule_index}]");
            let Some(host) = self.host_of(rule.host.as_deref(), &rule_field, object) else {
                continue;
            };
            let Some(http) = &rule.http else {
                self.diagnostics.warning(
                    object,
                    format!("{rule_field}.http"),
                    "missing; rule has no paths and is ignored",
                );
                continue;
            };
            for (path_index, path) in http.paths.iter().enumerate() {
                let field = format!("{rule_field}.http.paths[{path_index}]");
                let Some(path_match) =
                    self.path_of(path.path.as_deref(), &path.path_type, &field, object)
                else {
                    continue;
                };
                let reference = Reference {
                    key,
                    object,
                    service_upstream,
                    field: format!("{field}.backend"),
                };
                let Some(backend) = self.backend_of(&path.backend, &reference) else {
                    continue;
                };
                if self.claim(&host, &path_match, &field, object) {
                    self.builder
                        .add_route(host.clone(), path_match, backend, &source);
                }
            }
        }
    }

    fn add_default_backend(
        &mut self,
        key: &ObjectKey,
        backend: &IngressBackend,
        object: &ObjectRef,
        service_upstream: bool,
    ) {
        if let Some(owner) = &self.default_backend_owner {
            let message = format!(
                "ignored: Ingress {} is older and its defaultBackend wins",
                owner.as_str().trim_start_matches("Ingress ")
            );
            self.diagnostics
                .warning(object, "spec.defaultBackend", message);
            return;
        }
        let reference = Reference {
            key,
            object,
            service_upstream,
            field: "spec.defaultBackend".to_owned(),
        };
        if let Some(id) = self.backend_of(backend, &reference) {
            self.builder.set_default_backend(id);
            self.default_backend_owner = Some(object.clone());
        }
    }

    fn host_of(
        &mut self,
        host: Option<&str>,
        rule_field: &str,
        object: &ObjectRef,
    ) -> Option<HostMatch> {
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
            self.diagnostics
                .error(object, format!("{rule_field}.host"), message);
            return None;
        }
        Some(HostMatch::from_rule_host(host))
    }

    fn path_of(
        &mut self,
        path: Option<&str>,
        path_type: &str,
        field: &str,
        object: &ObjectRef,
    ) -> Option<PathMatch> {
        let path = path.unwrap_or("/");
        if !path.starts_with('/') {
            self.diagnostics.error(
                object,
                format!("{field}.path"),
                format!("{path:?} must start with \"/\"; path dropped"),
            );
            return None;
        }
        match path_type {
            "Exact" => Some(PathMatch::exact(path)),
            "Prefix" | "ImplementationSpecific" => Some(PathMatch::prefix(path)),
            other => {
                let message = format!("{other:?} is not a pathType (Exact, Prefix or ImplementationSpecific); path dropped");
                self.diagnostics
                    .error(object, format!("{field}.pathType"), message);
                None
            }
        }
    }

    fn backend_of(
        &mut self,
        backend: &IngressBackend,
        reference: &Reference<'_>,
    ) -> Option<BackendId> {
        let Some(service) = &backend.service else {
            let what = if backend.resource.is_some() {
                "resource backends are not supported"
            } else {
                "no service"
            };
            self.diagnostics.error(
                reference.object,
                &reference.field,
                format!("{what}; route dropped"),
            );
            return None;
        };
        let service_reference = ServiceReference {
            namespace: &reference.key.namespace,
            service,
            field: format!("{}.service", reference.field),
            ingress: reference.object,
            service_upstream: reference.service_upstream,
        };
        resolve(
            self.snapshot,
            &self.slices,
            &service_reference,
            &mut self.builder,
            &mut self.endpoint_sources,
            &mut self.diagnostics,
        )
    }

    /// Claims host + path for this Ingress; a later (younger) claim loses with a diagnostic.
    fn claim(
        &mut self,
        host: &HostMatch,
        path: &PathMatch,
        field: &str,
        object: &ObjectRef,
    ) -> bool {
        let key = (host.clone(), path.clone());
        match self.claimed.get(&key) {
            None => {
                self.claimed.insert(key, object.clone());
                true
            }
            Some(owner) => {
                let owner = if owner == object {
                    "an earlier rule of this Ingress".to_owned()
                } else {
                    format!("{owner}, which is older")
                };
                let message = format!(
                    "duplicate of host {host} path {} ({:?}) already served by {owner}; ignored",
                    path.path(),
                    path.kind()
                );
                self.diagnostics.warning(object, field, message);
                false
            }
        }
    }
}

/// Where a backend reference sits, for resolving and reporting it.
struct Reference<'a> {
    key: &'a ObjectKey,
    object: &'a ObjectRef,
    service_upstream: bool,
    field: String,
}
