//! Backend resolution: from an Ingress's Service reference to a backend with its mode and endpoints.

use hashbrown::HashMap;
use std::borrow::Cow;
use std::sync::Arc;

use http::uri::Authority;
use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::{EndpointConditions, EndpointSlice};
use k8s_openapi::api::networking::v1::IngressServiceBackend;
use sluice_routing::{Backend, BackendId, BackendMode, Endpoint, EndpointSet, TableBuilder};

use crate::annotations::{
    annotation_field, service_annotations, ServiceAnnotations, ServiceUpstream, PREFIXES,
};
use crate::diagnostic::{Diagnostics, ObjectRef};
use crate::snapshot::{ObjectKey, Snapshot};

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Where compile() gets a Service port's ready endpoints from. [`SliceIndex`] computes them from
/// the snapshot's EndpointSlices; the Kubernetes source caches them between compiles and keeps
/// them current as slices change. Either way the answer must equal [`ready_endpoints`] over the
/// snapshot's slices, so compile stays a pure function of the snapshot.
pub trait EndpointResolver {
    fn ready_endpoints(
        &self,
        namespace: &str,
        service: &str,
        port_name: Option<&str>,
    ) -> Arc<EndpointSet>;
}

impl EndpointResolver for SliceIndex<'_> {
    fn ready_endpoints(
        &self,
        namespace: &str,
        service: &str,
        port_name: Option<&str>,
    ) -> Arc<EndpointSet> {
        Arc::new(ready_endpoints(
            self.slices(namespace, service).iter().copied(),
            port_name,
        ))
    }
}

/// Services by namespace and name, built once per compile so a lookup allocates no key.
pub(super) struct ServiceIndex<'a>(HashMap<&'a str, HashMap<&'a str, &'a Service>>);

impl<'a> ServiceIndex<'a> {
    pub(super) fn new(snapshot: &'a Snapshot) -> Self {
        let mut index: HashMap<&str, HashMap<&str, &Service>> = HashMap::new();
        for (key, service) in &snapshot.services {
            index
                .entry(key.namespace.as_str())
                .or_default()
                .insert(key.name.as_str(), service);
        }
        Self(index)
    }

    pub(super) fn get(&self, namespace: &str, name: &str) -> Option<&'a Service> {
        self.0.get(namespace)?.get(name).copied()
    }
}

/// EndpointSlices grouped by the `namespace/service` they belong to, built once per compile.
pub struct SliceIndex<'a>(HashMap<&'a str, HashMap<&'a str, Vec<&'a EndpointSlice>>>);

impl<'a> SliceIndex<'a> {
    pub fn new(snapshot: &'a Snapshot) -> Self {
        let mut index: HashMap<_, HashMap<_, Vec<_>>> = HashMap::new();
        for (key, slice) in &snapshot.endpoint_slices {
            if let Some(service) = slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL))
            {
                let services = index.entry(key.namespace.as_str()).or_default();
                services.entry(service.as_str()).or_default().push(slice);
            }
        }
        Self(index)
    }

    fn slices(&self, namespace: &str, service: &str) -> &[&'a EndpointSlice] {
        self.0
            .get(namespace)
            .and_then(|services| services.get(service))
            .map(Vec::as_slice)
            .unwrap_or_default()
    }
}

/// A backend that takes its endpoints from a Service's EndpointSlices, through one port name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointSource {
    pub backend: BackendId,
    /// The Service port's name (`None` for an unnamed port); slices are matched on it.
    pub port_name: Option<String>,
}

/// For every Service, the backends fed by its EndpointSlices: what an EndpointSlice change must
/// recompute, without a recompile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointSources(HashMap<ObjectKey, Vec<EndpointSource>>);

impl EndpointSources {
    /// The backends fed by the Service `service` (namespace/name).
    pub fn of_service(&self, service: &ObjectKey) -> &[EndpointSource] {
        self.0.get(service).map(Vec::as_slice).unwrap_or_default()
    }

    /// Every (Service, source) pair.
    pub(super) fn into_entries(self) -> Vec<(ObjectKey, EndpointSource)> {
        self.0
            .into_iter()
            .flat_map(|(service, sources)| {
                sources
                    .into_iter()
                    .map(move |source| (service.clone(), source))
            })
            .collect()
    }

    pub(super) fn add(&mut self, service: ObjectKey, source: EndpointSource) {
        let sources = self.0.entry(service).or_default();
        if !sources.contains(&source) {
            sources.push(source);
        }
    }
}

/// Where a backend reference sits in its Ingress. Formatted only when a diagnostic needs it,
/// so the common case allocates nothing for it.
#[derive(Clone, Copy, Debug)]
pub(super) enum BackendField {
    Default,
    Path {
        rule: usize,
        path: usize,
    },
    /// The Service the `default-backend` annotation names, written under the prefix of this
    /// rank in the annotation prefixes.
    DefaultBackendAnnotation {
        prefix: usize,
    },
    /// A backendRef of a Gateway API route rule.
    RouteBackend {
        rule: usize,
        backend: usize,
    },
    /// The backendRef of a Gateway API `RequestMirror` filter.
    Mirror,
    /// The Service of a Traefik `errors` Middleware.
    MiddlewareService,
}

/// The field of the `default-backend` annotation written under the prefix of rank `prefix`.
fn default_backend_field(prefix: usize) -> String {
    let prefix = PREFIXES.get(prefix).copied().unwrap_or_default();
    annotation_field(&format!("{prefix}default-backend"))
}

impl BackendField {
    /// The field path with `suffix` appended, e.g. `.service.port`.
    pub(super) fn at(self, suffix: &str) -> String {
        match self {
            Self::Default => format!("spec.defaultBackend{suffix}"),
            Self::Path { rule, path } => {
                format!("spec.rules[{rule}].http.paths[{path}].backend{suffix}")
            }
            Self::DefaultBackendAnnotation { prefix } => default_backend_field(prefix),
            Self::RouteBackend { rule, backend } => {
                let suffix = suffix.strip_prefix(".service").unwrap_or(suffix);
                format!("spec.rules[{rule}].backendRefs[{backend}]{suffix}")
            }
            Self::Mirror => format!("a RequestMirror backendRef{suffix}"),
            Self::MiddlewareService => {
                let suffix = suffix.strip_prefix(".service").unwrap_or(suffix);
                format!("spec.errors.service{suffix}")
            }
        }
    }
}

/// One `backend.service` of an Ingress, with where it sits and what the Ingress asks of it.
pub(super) struct ServiceReference<'a> {
    pub namespace: &'a str,
    pub service: &'a IngressServiceBackend,
    pub field: BackendField,
    pub ingress: &'a ObjectKey,
    /// `Ingress`, or the Gateway API route kind that refers to the Service.
    pub owner_kind: &'static str,
    /// The Ingress carries a service-upstream annotation.
    pub service_upstream: bool,
}

impl ServiceReference<'_> {
    /// The object that refers to the Service, for diagnostics.
    fn owner(&self) -> ObjectRef {
        ObjectRef::new(
            self.owner_kind,
            Some(&self.ingress.namespace),
            &self.ingress.name,
        )
    }
}

/// A resolved Service reference: the backend and what the route policy needs from the Service.
pub(super) struct Resolved<'s> {
    pub id: BackendId,
    pub mode: BackendMode,
    /// The Service's own annotations (the default when it has none or is missing).
    pub wishes: ServiceAnnotations,
    /// The Service and its port, when both exist: where a fallback ClusterIP comes from.
    pub cluster: Option<(&'s Service, &'s ServicePort)>,
}

impl Resolved<'_> {
    fn bare(id: BackendId, mode: BackendMode, wishes: ServiceAnnotations) -> Self {
        Self {
            id,
            mode,
            wishes,
            cluster: None,
        }
    }
}

/// Where resolved backends go: the table builder and the endpoint sources.
pub(super) struct BackendSink<'a> {
    pub builder: &'a mut TableBuilder,
    pub endpoint_sources: &'a mut EndpointSources,
    pub diagnostics: &'a mut Diagnostics,
}

/// Resolves a Service reference and adds its backend to the table builder (once per id).
/// Returns the backend, or `None` when the reference names no port at all.
pub(super) fn resolve<'s>(
    services: &ServiceIndex<'s>,
    endpoints: &dyn EndpointResolver,
    reference: &ServiceReference<'_>,
    sink: BackendSink<'_>,
) -> Option<Resolved<'s>> {
    let BackendSink {
        builder,
        endpoint_sources,
        diagnostics,
    } = sink;
    let ServiceReference {
        namespace,
        service: target,
        field,
        ..
    } = *reference;
    let port_text = port_text(reference, diagnostics)?;
    let service_ref = || ObjectRef::new("Service", Some(namespace), &target.name);
    let Some(service) = services.get(namespace, &target.name) else {
        diagnostics.error(
            &reference.owner(),
            field.at(".service.name"),
            format!(
                "Service {namespace}/{} not found; requests to this backend answer 503",
                target.name
            ),
        );
        let mode = if reference.service_upstream {
            BackendMode::ServiceUpstream
        } else {
            BackendMode::Endpoints
        };
        let id = backend_id(namespace, &target.name, &port_text, mode);
        builder.add_backend(Backend::new(id.clone(), mode, EndpointSet::default()));
        return Some(Resolved::bare(id, mode, ServiceAnnotations::default()));
    };
    let wishes = match service.metadata.annotations.as_ref() {
        Some(annotations) => service_annotations(
            Some(annotations),
            (namespace, &target.name),
            &service_ref(),
            diagnostics,
        ),
        None => ServiceAnnotations::default(),
    };
    let mode = backend_mode(
        service,
        reference.service_upstream || wishes.service_upstream == ServiceUpstream::On,
    );
    let id = backend_id(namespace, &target.name, &port_text, mode);
    let Some(port) = find_port(service, reference) else {
        diagnostics.error(
            &reference.owner(),
            field.at(".service.port"),
            format!(
                "Service {namespace}/{} has no port {port_text} (it has: {}); requests to this backend answer 503",
                target.name,
                port_list(service)
            ),
        );
        builder.add_backend(Backend::new(id.clone(), mode, EndpointSet::default()));
        return Some(Resolved::bare(id, mode, wishes));
    };
    // Service-upstream diagnostics are about the Ingress that asks for it, so every such Ingress
    // gets them, not only the first to reference the backend (repeats on one object dedup).
    let new_backend = !builder.has_backend(&id);
    if new_backend || mode == BackendMode::ServiceUpstream {
        let upstream_object = if reference.service_upstream {
            reference.owner()
        } else {
            service_ref()
        };
        let set = match mode {
            BackendMode::Endpoints => endpoints_mode(
                endpoints,
                namespace,
                &target.name,
                port,
                &service_ref,
                diagnostics,
            ),
            BackendMode::ServiceUpstream => Arc::new(cluster_ip_mode(
                service,
                port,
                &upstream_object,
                diagnostics,
            )),
            BackendMode::ExternalName => Arc::new(external_name_mode(
                service,
                port,
                &service_ref(),
                diagnostics,
            )),
        };
        builder.add_backend(Backend::new(id.clone(), mode, set));
    }
    if new_backend && mode == BackendMode::Endpoints {
        let source = EndpointSource {
            backend: id.clone(),
            port_name: port.name.clone().filter(|name| !name.is_empty()),
        };
        endpoint_sources.add(ObjectKey::new(namespace, &target.name), source);
    }
    Some(Resolved {
        id,
        mode,
        wishes,
        cluster: Some((service, port)),
    })
}

/// `namespace/service:port`, with `/service-upstream` appended in that mode: one Service port can
/// be reached both ways by different Ingresses.
fn backend_id(namespace: &str, service: &str, port_text: &str, mode: BackendMode) -> BackendId {
    match mode {
        BackendMode::ServiceUpstream => {
            BackendId::new(namespace, service, &format!("{port_text}/service-upstream"))
        }
        _ => BackendId::new(namespace, service, port_text),
    }
}

fn port_text<'r>(
    reference: &ServiceReference<'r>,
    diagnostics: &mut Diagnostics,
) -> Option<Cow<'r, str>> {
    let port = reference.service.port.as_ref();
    match (
        port.and_then(|p| p.number),
        port.and_then(|p| p.name.as_deref()),
    ) {
        (Some(number), _) => Some(Cow::Owned(number.to_string())),
        (None, Some(name)) if !name.is_empty() => Some(Cow::Borrowed(name)),
        _ => {
            diagnostics.error(
                &reference.owner(),
                reference.field.at(".service.port"),
                "must set number or name; route dropped",
            );
            None
        }
    }
}

fn find_port<'s>(
    service: &'s Service,
    reference: &ServiceReference<'_>,
) -> Option<&'s ServicePort> {
    let wanted = reference.service.port.as_ref()?;
    let ports = service.spec.as_ref()?.ports.as_deref()?;
    ports
        .iter()
        .find(|port| match (wanted.number, wanted.name.as_deref()) {
            (Some(number), _) => port.port == number,
            (None, Some(name)) => port.name.as_deref() == Some(name),
            _ => false,
        })
}

fn port_list(service: &Service) -> String {
    let ports: Vec<String> = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|p| match p.name.as_deref() {
            Some(name) if !name.is_empty() => format!("{}/{name}", p.port),
            _ => p.port.to_string(),
        })
        .collect();
    if ports.is_empty() {
        "no ports".to_owned()
    } else {
        ports.join(", ")
    }
}

fn backend_mode(service: &Service, service_upstream: bool) -> BackendMode {
    let service_type = service.spec.as_ref().and_then(|s| s.type_.as_deref());
    if service_type == Some("ExternalName") {
        BackendMode::ExternalName
    } else if service_upstream {
        BackendMode::ServiceUpstream
    } else {
        BackendMode::Endpoints
    }
}

fn endpoints_mode(
    endpoints: &dyn EndpointResolver,
    namespace: &str,
    service: &str,
    port: &ServicePort,
    service_ref: &dyn Fn() -> ObjectRef,
    diagnostics: &mut Diagnostics,
) -> Arc<EndpointSet> {
    let set = endpoints.ready_endpoints(namespace, service, port.name.as_deref());
    if set.ready().is_empty() {
        let consequence = match set.terminating().len() {
            0 => "requests to it answer 503 (or go to the ClusterIP where a route uses service-upstream: fallback)".to_owned(),
            draining => format!("its {draining} terminating endpoint(s) that still serve take the requests"),
        };
        diagnostics.warning(
            &service_ref(),
            "",
            format!(
                "no ready endpoints for port {}; {consequence}",
                port_label(port)
            ),
        );
    }
    set
}

fn port_label(port: &ServicePort) -> String {
    match port.name.as_deref() {
        Some(name) if !name.is_empty() => format!("{} ({name})", port.port),
        _ => port.port.to_string(),
    }
}

/// The endpoints of every slice for the Service port named `port_name`, merged: the ready ones,
/// and those terminating but still serving.
///
/// Each slice's port is the one with the same name as the Service port (an unnamed Service port
/// matches an unnamed slice port); its number is the target port, which may differ per slice.
/// An endpoint is ready when `conditions.ready` is true or absent. One that is not ready counts
/// as terminating-but-serving when `serving` and `terminating` are both true; any other is left
/// out. Its first address is used.
pub fn ready_endpoints<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    port_name: Option<&str>,
) -> EndpointSet {
    let wanted = port_name.unwrap_or_default();
    let mut ready = Vec::new();
    let mut terminating = Vec::new();
    for slice in slices {
        let slice_port = slice
            .ports
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|p| p.name.as_deref().unwrap_or_default() == wanted);
        let Some(port) = slice_port.and_then(|p| p.port) else {
            continue;
        };
        for endpoint in slice.endpoints.as_deref().unwrap_or_default() {
            let Some(address) = endpoint.addresses.first() else {
                continue;
            };
            let conditions = endpoint.conditions.as_ref();
            let flag = |get: fn(&EndpointConditions) -> Option<bool>| conditions.and_then(get);
            let list = if flag(|c| c.ready).unwrap_or(true) {
                &mut ready
            } else if flag(|c| c.serving) == Some(true) && flag(|c| c.terminating) == Some(true) {
                &mut terminating
            } else {
                continue;
            };
            list.extend(endpoint_at(address, port));
        }
    }
    EndpointSet::with_terminating(ready, terminating)
}

/// `ip:port`, `[ipv6]:port` or `name:port` as an endpoint; `None` if it is not a valid authority.
fn endpoint_at(host: &str, port: i32) -> Option<Endpoint> {
    let text = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    Authority::try_from(text).ok().map(Endpoint::new)
}

/// What a ClusterIP is wanted for, as its diagnostics say it.
pub(super) struct ClusterIpUse<'a> {
    /// Who needs it, e.g. `service-upstream`.
    pub what: &'a str,
    /// The field of the annotation that asks for it.
    pub field: &'a str,
    /// What happens without it.
    pub consequence: &'a str,
}

/// The Service's ClusterIP at `port` as an endpoint. A headless Service, a missing or an
/// invalid ClusterIP is an error diagnostic on `object`.
pub(super) fn cluster_ip_endpoint(
    service: &Service,
    port: &ServicePort,
    object: &ObjectRef,
    usage: &ClusterIpUse<'_>,
    diagnostics: &mut Diagnostics,
) -> Option<Endpoint> {
    let ClusterIpUse {
        what,
        field,
        consequence,
    } = usage;
    let cluster_ip = service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .unwrap_or_default();
    let service_name = service.metadata.name.as_deref().unwrap_or_default();
    let problem = match cluster_ip {
        "None" => Some(format!("Service {service_name} is headless (clusterIP: None), so {what} has no ClusterIP to send to; {consequence}")),
        "" => Some(format!("Service {service_name} has no spec.clusterIP, which {what} needs; {consequence}")),
        _ => None,
    };
    if let Some(problem) = problem {
        diagnostics.error(object, *field, problem);
        return None;
    }
    let endpoint = endpoint_at(cluster_ip, port.port);
    if endpoint.is_none() {
        diagnostics.error(
            object,
            "spec.clusterIP",
            format!("{cluster_ip:?} is not a valid IP address; {consequence}"),
        );
    }
    endpoint
}

fn cluster_ip_mode(
    service: &Service,
    port: &ServicePort,
    object: &ObjectRef,
    diagnostics: &mut Diagnostics,
) -> EndpointSet {
    let usage = ClusterIpUse {
        what: "service-upstream",
        field: "metadata.annotations",
        consequence: "requests answer 503",
    };
    let Some(endpoint) = cluster_ip_endpoint(service, port, object, &usage, diagnostics) else {
        return EndpointSet::default();
    };
    let service_name = service.metadata.name.as_deref().unwrap_or_default();
    diagnostics.info(
        object,
        "metadata.annotations",
        format!(
            "service-upstream: requests to Service {service_name} go to its ClusterIP {endpoint} and kube-proxy picks the pod, so sluice cannot balance across pods or keep sessions sticky, and a retry only happens on a new connection to the ClusterIP (where kube-proxy may pick another pod)"
        ),
    );
    EndpointSet::new(vec![endpoint])
}

fn external_name_mode(
    service: &Service,
    port: &ServicePort,
    object: &ObjectRef,
    diagnostics: &mut Diagnostics,
) -> EndpointSet {
    let name = service
        .spec
        .as_ref()
        .and_then(|s| s.external_name.as_deref())
        .unwrap_or_default();
    match endpoint_at(name.trim_end_matches('.'), port.port) {
        Some(endpoint) if !name.is_empty() => EndpointSet::new(vec![endpoint]),
        _ => {
            diagnostics.error(
                object,
                "spec.externalName",
                format!("{name:?} is not a valid DNS name; requests answer 503"),
            );
            EndpointSet::default()
        }
    }
}
