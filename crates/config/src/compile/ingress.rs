//! One Ingress compiled on its own: its rules, backends and annotations into a fragment, with its findings.

use std::sync::{Arc, LazyLock};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::{
    Ingress, IngressBackend, IngressServiceBackend, ServiceBackendPort,
};
use sluice_routing::{BackendId, ErrorPages, HostMatch, PathMatch, RoutePolicy, TableBuilder};

use super::backend::{resolve, BackendField, BackendSink, ServiceIndex, ServiceReference};
use super::backend::{EndpointResolver, EndpointSources};
use super::fragment::{tls_entries, Fragment, FragmentRoute, RecordingResolver};
use super::options::CompileOptions;
use super::policy::{route_policy, IngressSide, ServiceName};
use super::version::Version;
use crate::annotations::{
    ingress_policy, IngressAnnotations, IngressPolicy, ServiceUpstream, USE_ANNOTATION,
};
use crate::diagnostic::{Diagnostics, ObjectRef};
use crate::snapshot::{ObjectKey, Snapshot};

/// The policy of every route whose Ingress and Service set none, shared.
static DEFAULT_POLICY: LazyLock<Arc<RoutePolicy>> = LazyLock::new(Arc::default);

/// Compiles one served Ingress on its own, into a fragment the merge combines with the others,
/// and its findings (after `diagnostics`, those found before). Whether the Ingress is served
/// at all is decided by the caller.
pub(super) fn compile_ingress(
    key: &ObjectKey,
    ingress: &Ingress,
    annotations: &IngressAnnotations,
    inputs: &Inputs<'_>,
    diagnostics: Diagnostics,
) -> (Fragment, Diagnostics) {
    let Inputs {
        services,
        endpoints,
        secrets,
        config_maps,
        middlewares,
        options,
    } = *inputs;
    let mut compiler = IngressCompiler {
        services,
        endpoints: RecordingResolver::new(endpoints),
        fragment: Fragment::default(),
        backends: TableBuilder::new(),
        endpoint_sources: EndpointSources::default(),
        diagnostics,
        policies: Vec::new(),
        middlewares,
        secrets,
        options,
    };
    let mut policy = match ingress.metadata.annotations.as_ref() {
        Some(map) => ingress_policy(
            map,
            &key.namespace,
            &ObjectRef::ingress(key),
            &mut compiler.diagnostics,
        ),
        None => IngressPolicy::default(),
    };
    if let Some(verify) = policy.proxy_ssl_verify.clone() {
        let (roots, read) =
            super::tls::verify_roots(key, &verify, secrets, &mut compiler.diagnostics);
        policy.verify_roots = Some(roots);
        compiler.fragment.secrets.extend(read);
    }
    if let Some(secret) = policy.auth_secret.clone() {
        let (basic, read) =
            super::auth::basic_auth(key, &secret, secrets, &mut compiler.diagnostics);
        match basic {
            Some(basic) => policy.route.access.basic = Some(basic),
            None => policy.route.access.unavailable = true,
        }
        compiler.fragment.secrets.push(read);
    }
    if let Some(reference) = policy.custom_headers.clone() {
        let read = custom_headers(
            key,
            &reference,
            config_maps,
            &mut policy,
            &mut compiler.diagnostics,
        );
        compiler.fragment.config_maps.push(read);
    }
    if let Some(list) = policy.router_middlewares.clone() {
        let object = ObjectRef::ingress(key);
        let field = crate::annotations::annotation_field(crate::annotations::ROUTER_MIDDLEWARES);
        let scope = (&object, field.as_str(), key.namespace.as_str());
        compiler.apply_middlewares(&list, scope, &mut policy.route);
    }
    if let Some((name, prefix)) = policy.default_backend.clone() {
        let field = BackendField::DefaultBackendAnnotation { prefix };
        if let Some(id) = compiler.default_backend_annotation(key, &name, field, &policy) {
            let pages = policy.route.error_pages.get_or_insert_with(|| ErrorPages {
                backend: None,
                codes: Vec::new(),
            });
            pages.backend = Some(id);
        }
    }
    compiler.add_ingress(key, ingress, annotations, &policy);
    compiler.fragment.tls = tls_entries(key, ingress, &mut compiler.diagnostics);
    compiler.fragment.site = annotations.site.clone();
    let IngressCompiler {
        endpoints,
        mut fragment,
        backends,
        endpoint_sources,
        diagnostics,
        ..
    } = compiler;
    fragment.endpoint_sets = endpoints.into_used();
    fragment.backends = backends
        .into_backends()
        .into_iter()
        .map(|backend| {
            let endpoints = backend.endpoints().load();
            (backend.id().clone(), backend.mode(), endpoints)
        })
        .collect();
    fragment.endpoint_sources = endpoint_sources.into_entries();
    (fragment, diagnostics)
}

/// What an Ingress's compile reads besides the Ingress itself.
#[derive(Clone, Copy)]
pub(super) struct Inputs<'a> {
    pub(super) services: &'a ServiceIndex<'a>,
    pub(super) endpoints: &'a dyn EndpointResolver,
    pub(super) secrets:
        &'a std::collections::BTreeMap<ObjectKey, k8s_openapi::api::core::v1::Secret>,
    pub(super) config_maps: &'a std::collections::BTreeMap<ObjectKey, ConfigMap>,
    pub(super) middlewares: &'a std::collections::BTreeMap<ObjectKey, crate::traefik::Middleware>,
    pub(super) options: &'a CompileOptions,
}

/// `custom-headers`: each key and value of the ConfigMap becomes a response header of the
/// Ingress's routes (`sluice.dev/response-headers` wins for a name both set). A missing
/// ConfigMap or an entry that is not a header is a warning. Returns the ConfigMap read.
fn custom_headers(
    key: &ObjectKey,
    (namespace, name, field): &(String, String, String),
    config_maps: &std::collections::BTreeMap<ObjectKey, ConfigMap>,
    policy: &mut IngressPolicy,
    diagnostics: &mut Diagnostics,
) -> (ObjectKey, Option<Version<ConfigMap>>) {
    let object = ObjectRef::ingress(key);
    let config_key = ObjectKey::new(namespace, name);
    let config_map = config_maps.get(&config_key);
    let read = (config_key, config_map.map(Version::of));
    let Some(config_map) = config_map else {
        let message =
            format!("ConfigMap {namespace}/{name} does not exist; no custom headers are added");
        diagnostics.warning(&object, field.clone(), message);
        return read;
    };
    let headers = &mut policy.route.edits.response_headers;
    for (header, value) in config_map.data.iter().flatten() {
        let valid = http::HeaderName::from_bytes(header.as_bytes()).is_ok()
            && http::HeaderValue::from_str(value).is_ok();
        if !valid {
            let message = format!("ConfigMap {namespace}/{name}: {header:?} with its value is not a header; it is not added");
            diagnostics.warning(&object, field.clone(), message);
            continue;
        }
        let lower = header.to_ascii_lowercase();
        if !headers.set.iter().any(|(set, _)| *set == lower) {
            headers.set.push((lower, value.clone()));
        }
    }
    read
}

/// Ingresses ordered by age, oldest first, then by namespace/name: the order conflicts resolve in.
/// An Ingress without a creationTimestamp (typical in manifests) counts as newest.
pub(super) fn oldest_first(snapshot: &Snapshot) -> Vec<(&ObjectKey, &Ingress)> {
    let mut ingresses: Vec<_> = snapshot.ingresses.iter().collect();
    ingresses.sort_by_key(|(key, ingress)| {
        let created = ingress.metadata.creation_timestamp.as_ref();
        (created.is_none(), created, *key)
    });
    ingresses
}

/// Compiles one Ingress into its fragment.
pub(super) struct IngressCompiler<'a, 'r> {
    pub(super) services: &'a ServiceIndex<'a>,
    pub(super) endpoints: RecordingResolver<'r>,
    pub(super) fragment: Fragment,
    /// The backends the Ingress's references resolve to (its routes go to `fragment`).
    pub(super) backends: TableBuilder,
    pub(super) endpoint_sources: EndpointSources,
    pub(super) diagnostics: Diagnostics,
    /// The policy of each backend the Ingress sends to, computed once per backend.
    pub(super) policies: Vec<(BackendId, Arc<RoutePolicy>)>,
    /// Traefik Middlewares, which `router.middlewares` and `service.middlewares` name.
    pub(super) middlewares: &'a std::collections::BTreeMap<ObjectKey, crate::traefik::Middleware>,
    /// Secrets a Middleware reads (basicAuth users, forwardAuth CAs).
    pub(super) secrets:
        &'a std::collections::BTreeMap<ObjectKey, k8s_openapi::api::core::v1::Secret>,
    pub(super) options: &'a CompileOptions,
}

/// The Ingress being added: what every rule of it shares.
pub(super) struct Current<'a> {
    pub(super) key: &'a ObjectKey,
    /// `namespace/name`, shared by all its routes.
    pub(super) source: Arc<str>,
    pub(super) service_upstream: ServiceUpstream,
    pub(super) policy: &'a IngressPolicy,
    /// `policy.route`, shared by its routes unless a Service changes it.
    pub(super) base: Arc<RoutePolicy>,
}

impl<'a> IngressCompiler<'a, '_> {
    fn add_ingress(
        &mut self,
        key: &'a ObjectKey,
        ingress: &Ingress,
        annotations: &IngressAnnotations,
        policy: &'a IngressPolicy,
    ) {
        let base = if policy.route == RoutePolicy::default() {
            DEFAULT_POLICY.clone()
        } else {
            Arc::new(policy.route.clone())
        };
        self.fragment.source = format!("{}/{}", key.namespace, key.name).into();
        self.fragment.regex_paths = policy.regex_paths.clone();
        self.fragment.aliases = policy.server_aliases.clone();
        self.fragment.www_redirect = policy.www_redirect.clone();
        self.fragment.canary = policy.canary.clone().map(Arc::new);
        let current = Current {
            key,
            source: self.fragment.source.clone(),
            service_upstream: annotations.service_upstream,
            policy,
            base,
        };
        let Some(spec) = ingress.spec.as_ref() else {
            self.diagnostics.error(
                &ObjectRef::ingress(key),
                "spec",
                "missing; nothing to serve",
            );
            return;
        };
        if let Some(backend) = &spec.default_backend {
            self.fragment.default_backend =
                self.backend_of(backend, &current, BackendField::Default);
        }
        for (rule_index, rule) in spec.rules.as_deref().unwrap_or_default().iter().enumerate() {
            let Some(host) = self.host_of(rule.host.as_deref(), rule_index, key) else {
                continue;
            };
            let Some(http) = &rule.http else {
                let field = format!("spec.rules[{rule_index}].http");
                self.diagnostics.warning(
                    &ObjectRef::ingress(key),
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
                let written = path.path.as_deref().unwrap_or("/");
                let Some(path_match) = self.path_of(written, &path.path_type, field, key) else {
                    continue;
                };
                if written.ends_with("/*") && policy.regex_paths.is_none() {
                    let message = format!("{written:?} is GKE's wildcard style, but Kubernetes paths have no wildcard: it matches only paths under a segment literally named \"*\"; write {:?} with pathType Prefix", written.trim_end_matches('*'));
                    self.diagnostics.warning(
                        &ObjectRef::ingress(key),
                        path_field(field, ".path"),
                        message,
                    );
                }
                let path_match = if written.ends_with('/') && !policy.no_slash_redirect {
                    path_match.with_slash_redirect()
                } else {
                    path_match
                };
                let Some((backend, policy)) = self.backend_of(&path.backend, &current, field)
                else {
                    continue;
                };
                self.fragment.routes.push(FragmentRoute {
                    host: host.clone(),
                    path: path_match,
                    written: written.into(),
                    field,
                    backend,
                    source: current.source.clone(),
                    policy,
                });
            }
        }
    }

    /// The backend of the Service `default-backend` names, on its first port; a missing
    /// Service is a warning and no default backend.
    fn default_backend_annotation(
        &mut self,
        key: &ObjectKey,
        name: &str,
        field: BackendField,
        policy: &IngressPolicy,
    ) -> Option<BackendId> {
        let service = self.services.get(&key.namespace, name);
        let port = service
            .and_then(|s| s.spec.as_ref()?.ports.as_ref()?.first())
            .map(|port| port.port);
        let Some(port) = port else {
            self.fragment.services.push((
                ObjectKey::new(&key.namespace, name),
                service.map(Version::of),
            ));
            let message = format!(
                "Service {}/{name} does not exist or has no port; the Ingress has no default backend",
                key.namespace
            );
            self.diagnostics
                .warning(&ObjectRef::ingress(key), field.at(""), message);
            return None;
        };
        let reference = IngressBackend {
            service: Some(IngressServiceBackend {
                name: name.to_owned(),
                port: Some(ServiceBackendPort {
                    number: Some(port),
                    name: None,
                }),
            }),
            resource: None,
        };
        let current = Current {
            key,
            source: format!("{}/{}", key.namespace, key.name).into(),
            service_upstream: ServiceUpstream::Off,
            policy,
            base: DEFAULT_POLICY.clone(),
        };
        let (id, _) = self.backend_of(&reference, &current, field)?;
        // The policy computed for it is not a route's: the Ingress's routes compute their own.
        self.policies.retain(|(known, _)| *known != id);
        Some(id)
    }

    fn host_of(&mut self, host: Option<&str>, rule: usize, key: &ObjectKey) -> Option<HostMatch> {
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
                &ObjectRef::ingress(key),
                format!("spec.rules[{rule}].host"),
                message,
            );
            return None;
        }
        Some(HostMatch::from_rule_host(host))
    }

    fn path_of(
        &mut self,
        path: &str,
        path_type: &str,
        field: BackendField,
        key: &ObjectKey,
    ) -> Option<PathMatch> {
        if !path.starts_with('/') {
            let message = format!("{path:?} must start with \"/\"; path dropped");
            self.diagnostics.error(
                &ObjectRef::ingress(key),
                path_field(field, ".path"),
                message,
            );
            return None;
        }
        match path_type {
            "Exact" => Some(PathMatch::exact(path)),
            "Prefix" | "ImplementationSpecific" => Some(PathMatch::prefix(path)),
            other => {
                let message = format!("{other:?} is not a pathType (Exact, Prefix or ImplementationSpecific); path dropped");
                self.diagnostics.error(
                    &ObjectRef::ingress(key),
                    path_field(field, ".pathType"),
                    message,
                );
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
                &ObjectRef::ingress(current.key),
                field.at(""),
                format!("{what}; route dropped"),
            );
            return None;
        };
        if let Some(refusal) = self.alb_refusal(service, current, field) {
            return Some(refusal);
        }
        let reference = ServiceReference {
            namespace: &current.key.namespace,
            service,
            field,
            ingress: current.key,
            owner_kind: "Ingress",
            service_upstream: current.service_upstream == ServiceUpstream::On,
        };
        let found = self.services.get(&current.key.namespace, &service.name);
        self.fragment.services.push((
            ObjectKey::new(&current.key.namespace, &service.name),
            found.map(Version::of),
        ));
        let sink = BackendSink {
            builder: &mut self.backends,
            endpoint_sources: &mut self.endpoint_sources,
            diagnostics: &mut self.diagnostics,
        };
        let resolved = resolve(self.services, &self.endpoints, &reference, sink)?;
        if let Some((_, policy)) = self.policies.iter().find(|(id, _)| *id == resolved.id) {
            return Some((resolved.id, policy.clone()));
        }
        let ingress = IngressSide {
            key: current.key,
            kind: "Ingress",
            policy: current.policy,
            service_upstream: current.service_upstream,
            base: &current.base,
        };
        let service_name = ServiceName {
            namespace: &current.key.namespace,
            name: &service.name,
        };
        let mut policy = route_policy(&ingress, &resolved, service_name, &mut self.diagnostics);
        if let Some(list) = resolved.wishes.middlewares.clone() {
            let object = ObjectRef::new("Service", Some(&current.key.namespace), &service.name);
            let field =
                crate::annotations::annotation_field(crate::annotations::SERVICE_MIDDLEWARES);
            let mut changed = RoutePolicy::clone(&policy);
            let scope = (&object, field.as_str(), current.key.namespace.as_str());
            self.apply_middlewares(&list, scope, &mut changed);
            policy = Arc::new(changed);
        }
        self.policies.push((resolved.id.clone(), policy.clone()));
        Some((resolved.id, policy))
    }
}

impl IngressCompiler<'_, '_> {
    /// A backend an AWS load balancer action or condition decides for (a port named
    /// `use-annotation`, or a Service an `actions.NAME` / `conditions.NAME` annotation names):
    /// sluice cannot run the action, so the path gets a backend of no endpoints and a policy
    /// that answers 503, never another path's Service.
    fn alb_refusal(
        &mut self,
        service: &IngressServiceBackend,
        current: &Current<'_>,
        field: BackendField,
    ) -> Option<(BackendId, Arc<RoutePolicy>)> {
        let port_name = service.port.as_ref().and_then(|p| p.name.as_deref());
        let claim = current
            .policy
            .alb_claims
            .iter()
            .find(|(claimed, _)| *claimed == service.name);
        let object = ObjectRef::ingress(current.key);
        let namespace = &current.key.namespace;
        let name = &service.name;
        let (why, port) = match (port_name, claim) {
            (Some(USE_ANNOTATION), _) => {
                let message = format!("port {USE_ANNOTATION} points at the AWS load balancer action alb.ingress.kubernetes.io/actions.{name}, which sluice does not run: this path answers 503 (never another path's Service); route it with sluice's annotations instead");
                self.diagnostics
                    .error(&object, field.at(".service.port.name"), message);
                ("an AWS load balancer action", USE_ANNOTATION.to_owned())
            }
            (_, Some((_, claim_field))) => {
                let message = format!("decides for backend Service {name}, which sluice cannot do (it is the AWS load balancer's routing): the paths to Service {name} answer 503, never another path's Service; route them with sluice's annotations instead");
                self.diagnostics
                    .error(&object, claim_field.clone(), message);
                let port = service.port.as_ref().map_or_else(String::new, |p| {
                    p.number
                        .map_or_else(|| p.name.clone().unwrap_or_default(), |n| n.to_string())
                });
                ("an AWS load balancer condition or action", port)
            }
            _ => return None,
        };
        let id = BackendId::new(namespace, name, &port);
        if !self.backends.has_backend(&id) {
            let backend = sluice_routing::Backend::new(
                id.clone(),
                sluice_routing::BackendMode::Endpoints,
                sluice_routing::EndpointSet::default(),
            );
            self.backends.add_backend(backend);
        }
        let policy = RoutePolicy {
            refused: Some(format!("{why} (alb.ingress.kubernetes.io)")),
            ..RoutePolicy::clone(&current.base)
        };
        Some((id, Arc::new(policy)))
    }
}

/// The field path of a rule's path entry (`spec.rules[r].http.paths[p]`) plus `suffix`.
pub(super) fn path_field(field: BackendField, suffix: &str) -> String {
    match field {
        BackendField::Path { rule, path } => {
            format!("spec.rules[{rule}].http.paths[{path}]{suffix}")
        }
        BackendField::Default => format!("spec.defaultBackend{suffix}"),
        BackendField::DefaultBackendAnnotation { .. }
        | BackendField::RouteBackend { .. }
        | BackendField::Mirror
        | BackendField::MiddlewareService => field.at(""),
    }
}
