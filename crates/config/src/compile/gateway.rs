//! Compiles the served Gateway API objects into the table's Gateway sockets, and their status: classes, Gateways and listeners, route attachment, rules and backendRefs.
//!
//! The order decides conflicts, as for Ingresses: Gateways oldest first (then by
//! namespace/name) claim a socket and hostname before younger ones, and routes oldest first
//! rank before younger ones in the precedence of equal matches.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use k8s_openapi::api::networking::v1::{IngressServiceBackend, ServiceBackendPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use sluice_routing::{
    Backend, BackendId, BackendMode, Certificate, EndpointSet, GatewayFilters, GatewayMirror,
    GatewayRule, HostPattern, RequestMatch, RoutePolicy, RuleAction, RulePrecedence, TableBuilder,
    TlsSite, UpstreamProtocol, WeightedBackend,
};

use super::backend::{
    resolve, BackendField, BackendSink, EndpointResolver, EndpointSources, Resolved, ServiceIndex,
    ServiceReference,
};
use super::policy::{route_policy, IngressSide, ServiceName};
use super::tls::TlsMerge;
use crate::annotations::{IngressPolicy, ServiceUpstream};
use crate::diagnostic::{Diagnostics, ObjectRef};
use crate::gateway::rules::{
    add_filters, request_matches, rule_settings, FilterSet, RuleSettings, Unsupported,
};
use crate::gateway::status::{
    observed, ClassStatus, Condition, GatewayReport, GatewayStatus, ListenerStatus, ParentStatus,
    RouteStatus,
};
use crate::gateway::{
    BackendObjectReference, Gateway, GatewayClass, HttpBackendRef, HttpRouteSpec, Listener,
    ParentReference, RouteGroupKind, GATEWAY_GROUP,
};
use crate::snapshot::{ObjectKey, Snapshot};

/// The `controllerName` sluice serves by default (`--gateway-controller-name`).
pub const DEFAULT_GATEWAY_CONTROLLER: &str = "sluice.dev/gateway-controller";

/// The feature names sluice passes, as `GatewayClass.status.supportedFeatures` lists them.
pub const SUPPORTED_FEATURES: &[&str] = &[
    "Gateway",
    "GatewayHTTPSListenerDetectMisdirectedRequests",
    "GatewayPort8080",
    "GRPCRoute",
    "HTTPRoute",
    "HTTPRoute303RedirectStatusCode",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteBackendProtocolH2C",
    "HTTPRouteBackendProtocolWebSocket",
    "HTTPRouteBackendRequestHeaderModification",
    "HTTPRouteBackendTimeout",
    "HTTPRouteCORS",
    "HTTPRouteHostRewrite",
    "HTTPRouteMethodMatching",
    "HTTPRouteNamedRouteRule",
    "HTTPRouteParentRefPort",
    "HTTPRoutePathRedirect",
    "HTTPRoutePathRewrite",
    "HTTPRoutePortRedirect",
    "HTTPRouteQueryParamMatching",
    "HTTPRouteRequestMirror",
    "HTTPRouteRequestMultipleMirrors",
    "HTTPRouteRequestPercentageMirror",
    "HTTPRouteRequestTimeout",
    "HTTPRouteResponseHeaderModification",
    "HTTPRouteRetry",
    "HTTPRouteSchemeRedirect",
    "ReferenceGrant",
];

/// What the Gateway compile reads.
pub(crate) struct GatewayInputs<'a> {
    pub snapshot: &'a Snapshot,
    /// The `controllerName` of the classes served.
    pub controller: &'a str,
    /// Where listeners of a Gateway without `spec.addresses` are bound.
    pub default_address: IpAddr,
    pub services: &'a ServiceIndex<'a>,
    pub endpoints: &'a dyn EndpointResolver,
}

/// Where the Gateway compile writes, and the certificates it loads.
pub(crate) struct GatewaySinks<'a, 'c> {
    pub builder: &'a mut TableBuilder,
    pub endpoint_sources: &'a mut EndpointSources,
    pub diagnostics: &'a mut Diagnostics,
    pub tls: &'a mut TlsMerge<'c>,
}

/// A served Gateway.
struct ServedGateway<'a> {
    key: &'a ObjectKey,
    gateway: &'a Gateway,
    conditions: Vec<Condition>,
}

/// One listener of a served Gateway, as compiled.
struct ListenerPlan<'a> {
    gateway: usize,
    /// The Gateway's namespace (`allowedRoutes.namespaces.from: Same`).
    namespace: &'a str,
    listener: &'a Listener,
    sockets: Vec<SocketAddr>,
    hostname: HostPattern,
    tls: bool,
    kinds: Vec<RouteGroupKind>,
    conditions: Vec<Condition>,
    attached: u32,
    /// On an HTTPS listener: the certificate of its first `certificateRefs` Secret.
    certificate: Option<Arc<Certificate>>,
}

impl ListenerPlan<'_> {
    fn accepted(&self) -> bool {
        self.condition("Accepted")
    }

    fn programmed(&self) -> bool {
        self.condition("Programmed")
    }

    fn condition(&self, condition_type: &str) -> bool {
        self.conditions
            .iter()
            .any(|c| c.condition_type == condition_type && c.holds())
    }
}

/// Compiles every served Gateway API object; returns their status.
pub(crate) fn compile_gateways(
    inputs: &GatewayInputs<'_>,
    sinks: GatewaySinks<'_, '_>,
) -> GatewayReport {
    let snapshot = inputs.snapshot;
    let classes: Vec<(&String, &GatewayClass)> = snapshot
        .gateway_classes
        .iter()
        .filter(|(_, class)| class.spec.controller_name == inputs.controller)
        .collect();
    let mut report = GatewayReport {
        classes: classes
            .iter()
            .map(|(name, class)| class_status(name, class))
            .collect(),
        ..GatewayReport::default()
    };
    let served_class = |name: &str| classes.iter().any(|(class, _)| *class == name);
    let mut gateways: Vec<ServedGateway<'_>> = oldest_first(&snapshot.gateways)
        .into_iter()
        .filter(|(_, gateway)| served_class(&gateway.spec.gateway_class_name))
        .map(|(key, gateway)| ServedGateway {
            key,
            gateway,
            conditions: Vec::new(),
        })
        .collect();
    let mut sinks = sinks;
    let mut plans = plan_listeners(&mut gateways, inputs, &mut sinks);
    for plan in plans.iter().filter(|plan| plan.programmed()) {
        let served = &gateways[plan.gateway];
        let site = plan.certificate.as_ref().map(|certificate| {
            let owner: Arc<str> = format!("{}/{}", served.key.namespace, served.key.name).into();
            Arc::new(TlsSite::new(owner, Some(certificate.clone()), None))
        });
        for socket in &plan.sockets {
            sinks
                .builder
                .gateways()
                .add_listener(*socket, plan.hostname.clone(), site.clone());
        }
    }
    for (rank, route) in route_inputs(snapshot).iter().enumerate() {
        let parents = attach_route(route, rank, (&gateways, &mut plans), inputs, &mut sinks);
        if !parents.is_empty() {
            report.routes.push(RouteStatus {
                kind: route.name.kind.to_owned(),
                namespace: route.name.key.namespace.clone(),
                name: route.name.key.name.clone(),
                generation: route.generation,
                parents,
            });
        }
    }
    report.gateways = gateways
        .iter()
        .enumerate()
        .map(|(index, served)| gateway_status(index, served, &plans))
        .collect();
    report
}

fn class_status(name: &str, class: &GatewayClass) -> ClassStatus {
    let accepted = Condition::new("Accepted", true, "Accepted", "served by sluice");
    ClassStatus {
        name: name.to_owned(),
        generation: class.metadata.generation,
        conditions: observed(vec![accepted], class.metadata.generation),
        supported_features: SUPPORTED_FEATURES.iter().map(|f| (*f).to_owned()).collect(),
    }
}

/// Objects oldest first; one without a creationTimestamp (typical in manifests) counts as
/// newest; then by namespace/name.
fn oldest_first<T: HasMetadata>(objects: &BTreeMap<ObjectKey, T>) -> Vec<(&ObjectKey, &T)> {
    let mut sorted: Vec<_> = objects.iter().collect();
    sorted.sort_by_key(|(key, object)| {
        let created = object.metadata().creation_timestamp.as_ref();
        (created.is_none(), created, *key)
    });
    sorted
}

/// The metadata of a Gateway API object.
trait HasMetadata {
    fn metadata(&self) -> &ObjectMeta;
}

impl<S> HasMetadata for crate::gateway::GatewayObject<S> {
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

/// Each served Gateway's listeners with their sockets and conditions, conflicts resolved in
/// Gateway order; sets each Gateway's own conditions.
fn plan_listeners<'a>(
    gateways: &mut [ServedGateway<'a>],
    inputs: &GatewayInputs<'_>,
    sinks: &mut GatewaySinks<'_, '_>,
) -> Vec<ListenerPlan<'a>> {
    let diagnostics = &mut *sinks.diagnostics;
    let mut plans = Vec::new();
    let mut claimed = ClaimedSockets::new();
    for (index, served) in gateways.iter_mut().enumerate() {
        let object = ObjectRef::new("Gateway", Some(&served.key.namespace), &served.key.name);
        let addresses = gateway_addresses(served.gateway, inputs.default_address);
        let addresses = match addresses {
            Ok(addresses) => addresses,
            Err(message) => {
                diagnostics.error(&object, "spec.addresses", &message);
                served.conditions = vec![
                    Condition::new("Accepted", false, "UnsupportedAddress", &message),
                    Condition::new("Programmed", false, "AddressNotUsable", &message),
                ];
                Vec::new()
            }
        };
        for (position, listener) in served.gateway.spec.listeners.iter().enumerate() {
            let field = format!("spec.listeners[{position}]");
            let certificate = match listener.protocol.as_str() {
                "HTTPS" => Some(listener_certificate(
                    listener,
                    (inputs.snapshot, served.key),
                    sinks.tls,
                )),
                _ => None,
            };
            let mut plan = plan_listener(index, listener, &addresses, certificate);
            plan.namespace = &served.key.namespace;
            if plan.accepted() && !addresses.is_empty() {
                claim_sockets(&mut plan, &mut claimed);
            }
            let troubles = plan
                .conditions
                .iter()
                .filter(|c| match c.condition_type.as_str() {
                    "Conflicted" => c.holds(),
                    "Programmed" => false,
                    _ => !c.holds(),
                });
            for condition in troubles {
                diagnostics.warning(
                    &object,
                    &field,
                    format!("{}: {}", condition.reason, condition.message),
                );
            }
            plans.push(plan);
        }
        if served.conditions.is_empty() {
            served.conditions = gateway_conditions(index, &plans);
        }
    }
    plans
}

/// The addresses a Gateway's listeners bind: its `IPAddress` addresses, else the default.
fn gateway_addresses(gateway: &Gateway, default: IpAddr) -> Result<Vec<IpAddr>, String> {
    let mut addresses = Vec::new();
    for address in &gateway.spec.addresses {
        let kind = address.address_type.as_deref().unwrap_or("IPAddress");
        if kind != "IPAddress" {
            return Err(format!(
                "address type {kind} is not supported; only IPAddress"
            ));
        }
        if address.value.is_empty() {
            continue;
        }
        let ip = address
            .value
            .parse::<IpAddr>()
            .map_err(|_| format!("{:?} is not an IP address", address.value))?;
        addresses.push(ip);
    }
    if addresses.is_empty() {
        addresses.push(default);
    }
    Ok(addresses)
}

/// A listener's sockets, hostname, route kinds and conditions, before conflicts.
fn plan_listener<'a>(
    gateway: usize,
    listener: &'a Listener,
    addresses: &[IpAddr],
    certificate: Option<Result<Arc<Certificate>, (&'static str, String)>>,
) -> ListenerPlan<'a> {
    let tls = listener.protocol == "HTTPS";
    let (mut kinds, kinds_valid) = supported_kinds(listener);
    let mut conditions = Vec::new();
    let protocol_ok = matches!(listener.protocol.as_str(), "HTTP" | "HTTPS");
    if !protocol_ok {
        // A listener sluice cannot serve takes no route kind.
        kinds.clear();
    }
    if protocol_ok {
        conditions.push(Condition::new(
            "Accepted",
            true,
            "Accepted",
            "listener accepted",
        ));
    } else {
        let message = format!(
            "protocol {} is not supported; HTTP and HTTPS are",
            listener.protocol
        );
        conditions.push(Condition::new(
            "Accepted",
            false,
            "UnsupportedProtocol",
            message,
        ));
    }
    let (refs, certificate) = match certificate {
        Some(Ok(certificate)) => (Ok(()), Some(certificate)),
        Some(Err(problem)) => (Err(problem), None),
        None => (Ok(()), None),
    };
    match (&refs, kinds_valid) {
        (Err((reason, message)), _) => {
            conditions.push(Condition::new(
                "ResolvedRefs",
                false,
                reason,
                message.clone(),
            ));
        }
        (Ok(()), false) => conditions.push(Condition::new(
            "ResolvedRefs",
            false,
            "InvalidRouteKinds",
            "allowedRoutes.kinds names a kind sluice does not serve",
        )),
        (Ok(()), true) => conditions.push(Condition::new(
            "ResolvedRefs",
            true,
            "ResolvedRefs",
            "references resolved",
        )),
    }
    conditions.push(Condition::new(
        "Conflicted",
        false,
        "NoConflicts",
        "no conflict",
    ));
    let programmed = match (protocol_ok, &refs) {
        (false, _) => Condition::new("Programmed", false, "Invalid", "the listener is not valid"),
        (true, Err(_)) => Condition::new(
            "Programmed",
            false,
            "Invalid",
            "the certificate references do not resolve",
        ),
        (true, Ok(())) => Condition::new("Programmed", true, "Programmed", "listening"),
    };
    conditions.push(programmed);
    ListenerPlan {
        gateway,
        namespace: "",
        listener,
        sockets: addresses
            .iter()
            .map(|ip| SocketAddr::new(*ip, listener.port))
            .collect(),
        hostname: HostPattern::parse(listener.hostname.as_deref()),
        tls,
        kinds,
        conditions,
        attached: 0,
        certificate,
    }
}

/// The route kinds a listener takes, and whether every kind it names is one sluice serves.
fn supported_kinds(listener: &Listener) -> (Vec<RouteGroupKind>, bool) {
    let kind = |name: &str| RouteGroupKind {
        group: Some(GATEWAY_GROUP.to_owned()),
        kind: name.to_owned(),
    };
    let named = listener.allowed_routes.as_ref().map(|a| &a.kinds);
    let Some(named) = named.filter(|kinds| !kinds.is_empty()) else {
        return (vec![kind("HTTPRoute"), kind("GRPCRoute")], true);
    };
    let served: Vec<RouteGroupKind> = named
        .iter()
        .filter(|k| {
            k.group.as_deref().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP
                && matches!(k.kind.as_str(), "HTTPRoute" | "GRPCRoute")
        })
        .map(|k| kind(&k.kind))
        .collect();
    let all_served = served.len() == named.len();
    (served, all_served)
}

/// Checks an HTTPS listener's certificate Secrets (kind, ReferenceGrant, a certificate that
/// loads) and returns the first one's certificate, which the listener serves.
fn listener_certificate(
    listener: &Listener,
    (snapshot, key): (&Snapshot, &ObjectKey),
    tls: &mut TlsMerge<'_>,
) -> Result<Arc<Certificate>, (&'static str, String)> {
    let refs = listener
        .tls
        .as_ref()
        .map(|tls| tls.certificate_refs.as_slice())
        .unwrap_or_default();
    if refs.is_empty() {
        return Err((
            "InvalidCertificateRef",
            "an HTTPS listener needs tls.certificateRefs".to_owned(),
        ));
    }
    for reference in refs {
        let core = reference.group.as_deref().unwrap_or("").is_empty();
        if !core || reference.kind.as_deref().unwrap_or("Secret") != "Secret" {
            return Err((
                "InvalidCertificateRef",
                format!("{} is not a Secret", reference.name),
            ));
        }
        let namespace = reference.namespace.as_deref().unwrap_or(&key.namespace);
        let from = GrantFrom {
            kind: "Gateway",
            namespace: &key.namespace,
        };
        if namespace != key.namespace
            && !granted(snapshot, from, ("Secret", namespace, &reference.name))
        {
            return Err((
                "RefNotPermitted",
                format!(
                    "no ReferenceGrant in {namespace} lets Gateways of {} use Secret {}",
                    key.namespace, reference.name
                ),
            ));
        }
    }
    let mut first = None;
    for reference in refs {
        let namespace = reference.namespace.as_deref().unwrap_or(&key.namespace);
        let secret = ObjectKey::new(namespace, &reference.name);
        let certificate = tls.listener_certificate(&secret).map_err(|problem| {
            let message = format!("Secret {namespace}/{}: {problem}", reference.name);
            ("InvalidCertificateRef", message)
        })?;
        first.get_or_insert(certificate);
    }
    first.ok_or(("InvalidCertificateRef", "no certificate".to_owned()))
}

/// Who asks to refer across namespaces.
#[derive(Clone, Copy)]
struct GrantFrom<'a> {
    kind: &'a str,
    namespace: &'a str,
}

/// Whether a ReferenceGrant in the target's namespace lets `from` refer to the core-group
/// object `(kind, namespace, name)`.
fn granted(
    snapshot: &Snapshot,
    from: GrantFrom<'_>,
    (kind, namespace, name): (&str, &str, &str),
) -> bool {
    snapshot
        .reference_grants
        .iter()
        .filter(|(key, _)| key.namespace == namespace)
        .any(|(_, grant)| {
            let from_ok = grant.spec.from.iter().any(|f| {
                f.group == GATEWAY_GROUP && f.kind == from.kind && f.namespace == from.namespace
            });
            let to_ok = grant.spec.to.iter().any(|t| {
                t.group.is_empty() && t.kind == kind && t.name.as_deref().is_none_or(|n| n == name)
            });
            from_ok && to_ok
        })
}

/// Who listens on each socket: protocol (TLS or not), hostname, and Gateway (by index).
type ClaimedSockets = BTreeMap<SocketAddr, Vec<(bool, HostPattern, usize)>>;

/// Claims the listener's sockets and hostname; a socket another listener holds with the
/// other protocol, or another listener of the same Gateway with the same hostname, makes this
/// one Conflicted and not programmed. Listeners of different Gateways with the same address,
/// port and hostname cannot be told apart: they merge, and the socket serves the routes of
/// both.
fn claim_sockets(plan: &mut ListenerPlan<'_>, claimed: &mut ClaimedSockets) {
    let conflict = plan.sockets.iter().find_map(|socket| {
        let holders = claimed.get(socket)?;
        if holders.iter().any(|(tls, _, _)| *tls != plan.tls) {
            return Some((
                "ProtocolConflict",
                format!("{socket} is served with another protocol"),
            ));
        }
        holders
            .iter()
            .any(|(_, host, gateway)| *host == plan.hostname && *gateway == plan.gateway)
            .then(|| {
                (
                    "HostnameConflict",
                    format!(
                        "another listener serves hostname {} on {socket}",
                        plan.hostname
                    ),
                )
            })
    });
    if let Some((reason, message)) = conflict {
        let programmed = plan.programmed();
        replace(
            &mut plan.conditions,
            Condition::new("Conflicted", true, reason, message.clone()),
        );
        if programmed {
            replace(
                &mut plan.conditions,
                Condition::new("Programmed", false, "Invalid", message),
            );
        }
        return;
    }
    if plan.programmed() {
        for socket in &plan.sockets {
            claimed.entry(*socket).or_default().push((
                plan.tls,
                plan.hostname.clone(),
                plan.gateway,
            ));
        }
    }
}

fn replace(conditions: &mut [Condition], condition: Condition) {
    if let Some(existing) = conditions
        .iter_mut()
        .find(|c| c.condition_type == condition.condition_type)
    {
        *existing = condition;
    }
}

/// A Gateway's conditions from its listeners: accepted while any listener is, programmed
/// while any listener is.
fn gateway_conditions(index: usize, plans: &[ListenerPlan<'_>]) -> Vec<Condition> {
    let own: Vec<_> = plans.iter().filter(|p| p.gateway == index).collect();
    let valid = own.iter().filter(|p| p.accepted()).count();
    let programmed = own.iter().any(|p| p.programmed());
    vec![
        match (valid, own.len()) {
            (valid, all) if valid == all => {
                Condition::new("Accepted", true, "Accepted", "served by sluice")
            }
            (0, _) => Condition::new(
                "Accepted",
                false,
                "ListenersNotValid",
                "no listener is valid",
            ),
            _ => Condition::new(
                "Accepted",
                true,
                "ListenersNotValid",
                "served by sluice, but some listeners are not valid",
            ),
        },
        match programmed {
            true => Condition::new("Programmed", true, "Programmed", "listening"),
            false => Condition::new("Programmed", false, "Invalid", "no listener is programmed"),
        },
    ]
}

fn gateway_status(
    index: usize,
    served: &ServedGateway<'_>,
    plans: &[ListenerPlan<'_>],
) -> GatewayStatus {
    let generation = served.gateway.metadata.generation;
    GatewayStatus {
        namespace: served.key.namespace.clone(),
        name: served.key.name.clone(),
        generation,
        conditions: observed(served.conditions.clone(), generation),
        listeners: plans
            .iter()
            .filter(|plan| plan.gateway == index)
            .map(|plan| ListenerStatus {
                name: plan.listener.name.clone(),
                supported_kinds: plan.kinds.clone(),
                attached_routes: plan.attached,
                conditions: observed(plan.conditions.clone(), generation),
                sockets: plan.sockets.clone(),
            })
            .collect(),
    }
}

/// A route's rules as compiled once for all its parents.
struct CompiledRules {
    /// The route's place in the oldest-first order, and its `namespace/name`.
    rank: usize,
    route: Arc<str>,
    /// Rule index, its matches and what it does.
    rules: Vec<(usize, Vec<RequestMatch>, Arc<RuleAction>)>,
    dropped: Vec<Unsupported>,
    /// The first backendRef that did not resolve: reason and message.
    unresolved: Option<(&'static str, String)>,
}

/// A route of either kind by kind and key.
#[derive(Clone, Copy)]
struct RouteRef<'a> {
    /// `HTTPRoute` or `GRPCRoute`.
    kind: &'static str,
    key: &'a ObjectKey,
}

impl RouteRef<'_> {
    fn object(&self) -> ObjectRef {
        ObjectRef::new(self.kind, Some(&self.key.namespace), &self.key.name)
    }
}

/// A route as the compile reads it: a GRPCRoute is read as the HTTPRoute it amounts to (its
/// service and method matches are path matches).
struct RouteInput<'a> {
    name: RouteRef<'a>,
    generation: Option<i64>,
    spec: std::borrow::Cow<'a, HttpRouteSpec>,
}

/// Every route, HTTPRoutes then GRPCRoutes, each kind oldest first.
fn route_inputs(snapshot: &Snapshot) -> Vec<RouteInput<'_>> {
    let http = oldest_first(&snapshot.http_routes)
        .into_iter()
        .map(|(key, route)| RouteInput {
            name: RouteRef {
                kind: "HTTPRoute",
                key,
            },
            generation: route.metadata.generation,
            spec: std::borrow::Cow::Borrowed(&route.spec),
        });
    let grpc = oldest_first(&snapshot.grpc_routes)
        .into_iter()
        .map(|(key, route)| RouteInput {
            name: RouteRef {
                kind: "GRPCRoute",
                key,
            },
            generation: route.metadata.generation,
            spec: std::borrow::Cow::Owned(crate::gateway::grpc::as_http_route(&route.spec)),
        });
    http.chain(grpc).collect()
}

impl CompiledRules {
    /// Leaves a rule out, with a warning at the field that makes it unsupported.
    fn drop_rule(
        &mut self,
        unsupported: Unsupported,
        object: &ObjectRef,
        diagnostics: &mut Diagnostics,
    ) {
        let message = format!("{}; the rule is not served", unsupported.message);
        diagnostics.warning(object, &unsupported.field, message);
        self.dropped.push(unsupported);
    }
}

/// Attaches one route to the listeners its parentRefs select, serves its rules there, and
/// returns the status of each parentRef that names a served Gateway.
fn attach_route(
    route: &RouteInput<'_>,
    rank: usize,
    (gateways, plans): (&[ServedGateway<'_>], &mut [ListenerPlan<'_>]),
    inputs: &GatewayInputs<'_>,
    sinks: &mut GatewaySinks<'_, '_>,
) -> Vec<ParentStatus> {
    let key = route.name.key;
    let object = route.name.object();
    let route_hosts: Vec<HostPattern> = match route.spec.hostnames.as_slice() {
        [] => vec![HostPattern::Any],
        names => names.iter().map(|n| HostPattern::parse(Some(n))).collect(),
    };
    let mut compiled: Option<CompiledRules> = None;
    let mut parents = Vec::new();
    let mut attached_to: Vec<usize> = Vec::new();
    for (index, parent) in route.spec.parent_refs.iter().enumerate() {
        let Some(gateway) = parent_gateway(parent, key, gateways) else {
            continue;
        };
        let rules = compiled.get_or_insert_with(|| compile_rules(route, rank, inputs, sinks));
        let attachment = attach(
            parent,
            route.name,
            gateway,
            &route_hosts,
            plans,
            inputs.snapshot,
        );
        let conditions = parent_conditions(&attachment, rules);
        if let Err((reason, message)) = &attachment {
            sinks.diagnostics.warning(
                &object,
                format!("spec.parentRefs[{index}]"),
                format!("not accepted ({reason}): {message}"),
            );
        }
        if let (Ok(listeners), false) = (&attachment, rules.rules.is_empty()) {
            for (plan_index, hosts) in listeners {
                serve_rules(&plans[*plan_index], hosts, rules, sinks.builder);
                if !attached_to.contains(plan_index) {
                    attached_to.push(*plan_index);
                }
            }
        }
        parents.push(ParentStatus {
            parent_ref: ParentReference {
                group: Some(GATEWAY_GROUP.to_owned()),
                kind: Some("Gateway".to_owned()),
                namespace: Some(
                    parent
                        .namespace
                        .clone()
                        .unwrap_or_else(|| key.namespace.clone()),
                ),
                ..parent.clone()
            },
            controller_name: inputs.controller.to_owned(),
            conditions: observed(conditions, route.generation),
        });
    }
    for plan_index in attached_to {
        plans[plan_index].attached += 1;
    }
    parents
}

/// The listeners (by plan index) a parentRef attaches a route to, each with the hostnames the
/// route is served under there; or the `Accepted=False` reason and message.
type Attachment = Result<Vec<(usize, Vec<HostPattern>)>, (&'static str, String)>;

/// The served Gateway a parentRef names, by index.
fn parent_gateway(
    parent: &ParentReference,
    route: &ObjectKey,
    gateways: &[ServedGateway<'_>],
) -> Option<usize> {
    let group_ok = parent.group.as_deref().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP;
    let kind_ok = parent.kind.as_deref().unwrap_or("Gateway") == "Gateway";
    if !group_ok || !kind_ok {
        return None;
    }
    let namespace = parent.namespace.as_deref().unwrap_or(&route.namespace);
    gateways
        .iter()
        .position(|g| g.key.namespace == namespace && g.key.name == parent.name)
}

/// The listeners (by plan index) a parentRef attaches the route to, with the hostnames it is
/// served under on each; or why it attaches to none.
fn attach(
    parent: &ParentReference,
    route: RouteRef<'_>,
    gateway: usize,
    route_hosts: &[HostPattern],
    plans: &[ListenerPlan<'_>],
    snapshot: &Snapshot,
) -> Attachment {
    let candidates: Vec<usize> = (0..plans.len())
        .filter(|&i| plans[i].gateway == gateway)
        .filter(|&i| {
            parent
                .section_name
                .as_deref()
                .is_none_or(|s| s == plans[i].listener.name)
        })
        .filter(|&i| parent.port.is_none_or(|p| p == plans[i].listener.port))
        .collect();
    if candidates.is_empty() {
        return Err((
            "NoMatchingParent",
            "no listener of the Gateway has this sectionName and port".to_owned(),
        ));
    }
    let allowed: Vec<usize> = candidates
        .into_iter()
        .filter(|&i| plans[i].accepted() && allows(&plans[i], route, snapshot))
        .collect();
    if allowed.is_empty() {
        return Err((
            "NotAllowedByListeners",
            "no listener of the Gateway allows routes of this kind from this namespace".to_owned(),
        ));
    }
    let attached: Vec<(usize, Vec<HostPattern>)> = allowed
        .into_iter()
        .filter_map(|i| {
            let hosts: Vec<HostPattern> = route_hosts
                .iter()
                .filter_map(|host| plans[i].hostname.intersect(host))
                .collect();
            (!hosts.is_empty()).then_some((i, hosts))
        })
        .collect();
    if attached.is_empty() {
        return Err((
            "NoMatchingListenerHostname",
            "no hostname of the route matches a listener's".to_owned(),
        ));
    }
    Ok(attached)
}

/// Whether the listener's `allowedRoutes` takes an HTTPRoute from the route's namespace.
fn allows(plan: &ListenerPlan<'_>, route: RouteRef<'_>, snapshot: &Snapshot) -> bool {
    let kind_ok = plan.kinds.iter().any(|k| k.kind == route.kind);
    let route = route.key;
    let namespaces = plan
        .listener
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    let from = namespaces.and_then(|n| n.from.as_deref()).unwrap_or("Same");
    let namespace_ok = match from {
        "All" => true,
        "Selector" => namespaces
            .and_then(|n| n.selector.as_ref())
            .is_some_and(|selector| selects(selector, &route.namespace, snapshot)),
        _ => route.namespace == plan.namespace,
    };
    kind_ok && namespace_ok
}

/// Whether a namespace selector selects `namespace`, judged on its labels (from the Namespace
/// object, when read) and the one every namespace carries, `kubernetes.io/metadata.name`.
fn selects(selector: &LabelSelector, namespace: &str, snapshot: &Snapshot) -> bool {
    let mut labels = snapshot
        .namespaces
        .get(namespace)
        .and_then(|n| n.metadata.labels.clone())
        .unwrap_or_default();
    labels.insert(
        "kubernetes.io/metadata.name".to_owned(),
        namespace.to_owned(),
    );
    let labels_ok = selector
        .match_labels
        .as_ref()
        .is_none_or(|wanted| wanted.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let expressions_ok = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let listed = |v: &String| e.values.iter().flatten().any(|w| w == v);
        match e.operator.as_str() {
            "In" => value.is_some_and(listed),
            "NotIn" => !value.is_some_and(listed),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_ok && expressions_ok
}

/// A parentRef's conditions: `Accepted` (with `PartiallyInvalid` when rules were dropped) and
/// `ResolvedRefs`.
fn parent_conditions(attachment: &Attachment, rules: &CompiledRules) -> Vec<Condition> {
    let mut conditions = Vec::new();
    match (attachment, rules.rules.is_empty(), rules.dropped.first()) {
        (Err((reason, message)), _, _) => {
            conditions.push(Condition::new("Accepted", false, reason, message.clone()))
        }
        (Ok(_), true, Some(dropped)) => conditions.push(Condition::new(
            "Accepted",
            false,
            "UnsupportedValue",
            format!(
                "every rule is invalid; {}: {}",
                dropped.field, dropped.message
            ),
        )),
        (Ok(_), _, dropped) => {
            conditions.push(Condition::new(
                "Accepted",
                true,
                "Accepted",
                "route accepted",
            ));
            if let Some(dropped) = dropped {
                conditions.push(Condition::new(
                    "PartiallyInvalid",
                    true,
                    "UnsupportedValue",
                    format!(
                        "{}: {}; the rule is dropped",
                        dropped.field, dropped.message
                    ),
                ));
            }
        }
    }
    conditions.push(match &rules.unresolved {
        Some((reason, message)) => Condition::new("ResolvedRefs", false, reason, message.clone()),
        None => Condition::new(
            "ResolvedRefs",
            true,
            "ResolvedRefs",
            "every backendRef resolved",
        ),
    });
    conditions
}

/// Adds the route's rules to one listener, under each hostname the route is served with. A
/// listener that is not programmed (conflicted, or not served yet) serves nothing: its socket
/// and hostname may belong to another listener.
fn serve_rules(
    plan: &ListenerPlan<'_>,
    hosts: &[HostPattern],
    rules: &CompiledRules,
    builder: &mut TableBuilder,
) {
    if !plan.programmed() {
        return;
    }
    for (rule, matches, action) in &rules.rules {
        for (matched, request_match) in matches.iter().enumerate() {
            let gateway_rule = GatewayRule {
                request_match: request_match.clone(),
                precedence: RulePrecedence::of(request_match, rules.rank, (*rule, matched)),
                route: rules.route.clone(),
                action: action.clone(),
            };
            for socket in &plan.sockets {
                for host in hosts {
                    builder.gateways().add_rule(
                        (*socket, &plan.hostname),
                        host.clone(),
                        gateway_rule.clone(),
                    );
                }
            }
        }
    }
}

/// Compiles every rule of a route: matches, filters and backendRefs.
fn compile_rules(
    route: &RouteInput<'_>,
    rank: usize,
    inputs: &GatewayInputs<'_>,
    sinks: &mut GatewaySinks<'_, '_>,
) -> CompiledRules {
    let key = route.name.key;
    let object = route.name.object();
    let name: Arc<str> = format!("{}/{}", key.namespace, key.name).into();
    let mut compiled = CompiledRules {
        rank,
        route: name,
        rules: Vec::new(),
        dropped: Vec::new(),
        unresolved: None,
    };
    for (index, rule) in route.spec.rules.iter().enumerate() {
        let field = format!("spec.rules[{index}]");
        let mut filters = FilterSet::default();
        let parts = request_matches(&rule.matches, &field).and_then(|matches| {
            add_filters(&rule.filters, &field, &mut filters)?;
            let settings = rule_settings(
                rule.timeouts.as_ref(),
                rule.retry.as_ref(),
                rule.session_persistence.as_ref(),
                &field,
            )?;
            Ok((matches, settings))
        });
        let (matches, settings) = match parts {
            Ok(parts) => parts,
            Err(unsupported) => {
                compiled.drop_rule(unsupported, &object, sinks.diagnostics);
                continue;
            }
        };
        let mut choices = Vec::new();
        let mut dropped = None;
        for (position, backend_ref) in rule.backend_refs.iter().enumerate() {
            let at = format!("{field}.backendRefs[{position}]");
            let mut own = filters.clone();
            if let Err(unsupported) = add_filters(&backend_ref.filters, &at, &mut own) {
                dropped = Some(unsupported);
                break;
            }
            let reference = RouteBackend {
                route: route.name,
                backend_ref,
                field: (index, position),
            };
            let own = policy_of(
                own,
                &settings,
                route.name,
                inputs,
                (sinks, &mut compiled.unresolved),
            );
            match backend_choice(&reference, own, inputs, sinks) {
                Ok(choice) => choices.push(choice),
                Err((reason, message, choice)) => {
                    sinks.diagnostics.error(
                        &object,
                        &at,
                        format!("{message}; its share of the requests answers 500"),
                    );
                    compiled.unresolved.get_or_insert((reason, message));
                    choices.push(choice);
                }
            }
        }
        if let Some(unsupported) = dropped {
            compiled.drop_rule(unsupported, &object, sinks.diagnostics);
            continue;
        }
        let policy = policy_of(
            filters,
            &settings,
            route.name,
            inputs,
            (sinks, &mut compiled.unresolved),
        );
        if rule.backend_refs.is_empty()
            && policy
                .gateway
                .as_ref()
                .is_some_and(|g| g.redirect.is_some())
        {
            choices.push(redirect_only(policy.clone(), sinks.builder));
        }
        let action = Arc::new(RuleAction {
            choices,
            policy,
            telemetry: Default::default(),
        });
        compiled.rules.push((index, matches, action));
    }
    compiled
}

/// A rule that only redirects still needs a backend to stand on: an empty one, which the
/// redirect answers before any endpoint is chosen.
fn redirect_only(policy: Arc<RoutePolicy>, builder: &mut TableBuilder) -> WeightedBackend {
    let id = BackendId::new("sluice", "redirect-only", "0");
    builder.add_backend(Backend::new(
        id.clone(),
        BackendMode::Endpoints,
        EndpointSet::default(),
    ));
    WeightedBackend {
        backend: builder.backend_index(&id),
        weight: 1,
        policy,
        telemetry: Default::default(),
    }
}

/// A backendRef of a route rule, and where it sits.
struct RouteBackend<'a> {
    route: RouteRef<'a>,
    backend_ref: &'a HttpBackendRef,
    /// Rule and backendRef index.
    field: (usize, usize),
}

/// The weighted backend a backendRef resolves to; an invalid one keeps its weight and answers
/// 500, with the `ResolvedRefs` reason and message.
fn backend_choice(
    reference: &RouteBackend<'_>,
    base: Arc<RoutePolicy>,
    inputs: &GatewayInputs<'_>,
    sinks: &mut GatewaySinks<'_, '_>,
) -> Result<WeightedBackend, (&'static str, String, WeightedBackend)> {
    let target = &reference.backend_ref.backend;
    let weight = reference.backend_ref.weight.unwrap_or(1);
    let (rule, backend) = reference.field;
    let field = BackendField::RouteBackend { rule, backend };
    let resolved = match resolve_service_ref(reference.route, target, field, inputs, sinks) {
        Ok(resolved) => resolved,
        Err((reason, message)) => {
            let choice = WeightedBackend {
                backend: None,
                weight,
                policy: base,
                telemetry: Default::default(),
            };
            return Err((reason, message, choice));
        }
    };
    let no_annotations = IngressPolicy::default();
    let side = IngressSide {
        key: reference.route.key,
        kind: reference.route.kind,
        policy: &no_annotations,
        service_upstream: ServiceUpstream::Off,
        base: &base,
    };
    let namespace = target
        .namespace
        .as_deref()
        .unwrap_or(&reference.route.key.namespace);
    let service_name = ServiceName {
        namespace,
        name: &target.name,
    };
    let mut policy = route_policy(&side, &resolved, service_name, sinks.diagnostics);
    if reference.route.kind == "GRPCRoute" && policy.upstream == UpstreamProtocol::Http1 {
        // gRPC needs HTTP/2; a Service port that says nothing is spoken to in h2c.
        policy = Arc::new(RoutePolicy {
            upstream: UpstreamProtocol::H2c,
            ..RoutePolicy::clone(&policy)
        });
    }
    Ok(WeightedBackend {
        backend: sinks.builder.backend_index(&resolved.id),
        weight,
        policy,
        telemetry: Default::default(),
    })
}

/// Resolves a route's reference to a Service port (kind, ReferenceGrant, port, presence) and
/// adds its backend to the table; or the `ResolvedRefs` reason and message.
fn resolve_service_ref<'s>(
    route: RouteRef<'_>,
    target: &BackendObjectReference,
    field: BackendField,
    inputs: &GatewayInputs<'s>,
    sinks: &mut GatewaySinks<'_, '_>,
) -> Result<Resolved<'s>, (&'static str, String)> {
    let core = target.group.as_deref().unwrap_or("").is_empty();
    let kind = target.kind.as_deref().unwrap_or("Service");
    if !core || kind != "Service" {
        return Err((
            "InvalidKind",
            format!("backendRef kind {kind} is not a Service"),
        ));
    }
    let (kind_of_route, route) = (route.kind, route.key);
    let namespace = target.namespace.as_deref().unwrap_or(&route.namespace);
    let from = GrantFrom {
        kind: kind_of_route,
        namespace: &route.namespace,
    };
    if namespace != route.namespace
        && !granted(inputs.snapshot, from, ("Service", namespace, &target.name))
    {
        let message = format!(
            "no ReferenceGrant in {namespace} lets {kind_of_route}s of {} use Service {}",
            route.namespace, target.name
        );
        return Err(("RefNotPermitted", message));
    }
    let Some(port) = target.port else {
        let message = format!("backendRef to Service {} needs a port", target.name);
        return Err(("UnsupportedValue", message));
    };
    if inputs.services.get(namespace, &target.name).is_none() {
        let message = format!("Service {namespace}/{} not found", target.name);
        return Err(("BackendNotFound", message));
    }
    let service = IngressServiceBackend {
        name: target.name.clone(),
        port: Some(ServiceBackendPort {
            number: Some(i32::from(port)),
            name: None,
        }),
    };
    let service_reference = ServiceReference {
        namespace,
        service: &service,
        field,
        ingress: route,
        owner_kind: kind_of_route,
        service_upstream: false,
    };
    let sink = BackendSink {
        builder: sinks.builder,
        endpoint_sources: sinks.endpoint_sources,
        diagnostics: sinks.diagnostics,
    };
    resolve(inputs.services, inputs.endpoints, &service_reference, sink).ok_or_else(|| {
        let message = format!("Service {namespace}/{} has no such port", target.name);
        ("BackendNotFound", message)
    })
}

/// The policy of a rule (or of one of its backendRefs): its filters, CORS and settings.
fn policy_of(
    set: FilterSet<'_>,
    settings: &RuleSettings,
    route: RouteRef<'_>,
    inputs: &GatewayInputs<'_>,
    sinks: (
        &mut GatewaySinks<'_, '_>,
        &mut Option<(&'static str, String)>,
    ),
) -> Arc<RoutePolicy> {
    let cors = set.cors.clone();
    let filters = with_mirrors(set, route, inputs, sinks);
    Arc::new(RoutePolicy {
        gateway: Some(Arc::new(filters)),
        cors,
        retry: settings.retry.clone(),
        timeouts: settings.timeouts,
        sticky: settings.sticky.clone(),
        balancer: settings.balancer.clone(),
        ..RoutePolicy::default()
    })
}

/// The filters with their mirrors' backends resolved; a mirror that does not resolve is left
/// out (the route's `ResolvedRefs` says why) and the rule is served without it.
fn with_mirrors(
    set: FilterSet<'_>,
    route: RouteRef<'_>,
    inputs: &GatewayInputs<'_>,
    (sinks, unresolved): (
        &mut GatewaySinks<'_, '_>,
        &mut Option<(&'static str, String)>,
    ),
) -> GatewayFilters {
    let FilterSet {
        mut filters,
        mirrors,
        ..
    } = set;
    let object = route.object();
    for mirror in mirrors {
        let field = BackendField::Mirror;
        match resolve_service_ref(route, mirror.backend, field, inputs, sinks) {
            Ok(resolved) => filters.mirrors.push(GatewayMirror {
                index: sinks.builder.backend_index(&resolved.id),
                backend: resolved.id,
                numerator: mirror.numerator,
                denominator: mirror.denominator,
            }),
            Err((reason, message)) => {
                sinks.diagnostics.error(
                    &object,
                    &mirror.field,
                    format!("{message}; requests are not mirrored there"),
                );
                unresolved.get_or_insert((reason, message));
            }
        }
    }
    filters
}
