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
    Backend, BackendId, BackendMode, Certificate, EndpointSet, GatewayRule, HostPattern, Mirror,
    RequestMatch, RoutePolicy, RuleAction, RulePrecedence, SocketProtocol, TableBuilder, TlsSite,
    UpstreamFailureStatus, UpstreamProtocol, WeightedBackend,
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
    ParentReference, RouteGroupKind, EXPERIMENTAL_GATEWAY_GROUP, GATEWAY_GROUP,
};
use crate::snapshot::{ObjectKey, Snapshot};

mod backend_tls;
pub(crate) use backend_tls::BackendTlsPolicies;
mod frontend;
mod listener_sets;
mod listeners;
mod route_rules;
mod routes;

use listener_sets::*;
use listeners::*;
use route_rules::*;
use routes::*;

/// The `controllerName` sluice serves by default (`--gateway-controller-name`).
pub const DEFAULT_GATEWAY_CONTROLLER: &str = "sluice.dev/gateway-controller";

/// The feature names sluice passes, as `GatewayClass.status.supportedFeatures` lists them: the
/// features of the conformance tests docs/gateway-api.md says pass (checked by
/// `tests/supported_features.rs`), in ascending order as the field requires.
pub const SUPPORTED_FEATURES: &[&str] = &[
    "BackendTLSPolicy",
    "BackendTLSPolicySANValidation",
    "GRPCRoute",
    "GRPCRouteNamedRouteRule",
    "Gateway",
    "GatewayBackendClientCertificate",
    "GatewayFrontendClientCertificateValidation",
    "GatewayFrontendClientCertificateValidationInsecureFallback",
    "GatewayHTTPSListenerDetectMisdirectedRequests",
    "GatewayPort8080",
    "HTTPRoute",
    "HTTPRoute303RedirectStatusCode",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteBackendProtocolH2C",
    "HTTPRouteBackendProtocolWebSocket",
    "HTTPRouteBackendRequestHeaderModification",
    "HTTPRouteBackendRequestRedirect",
    "HTTPRouteBackendTimeout",
    "HTTPRouteCORS",
    "HTTPRouteDestinationPortMatching",
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
    "HTTPRouteRetryBackendTimeout",
    "HTTPRouteRetryConnectionError",
    "HTTPRouteSchemeRedirect",
    "ListenerSet",
    "ReferenceGrant",
    "TCPRoute",
    "TLSRoute",
    "TLSRouteModeMixed",
    "TLSRouteModeTerminate",
    "UDPRoute",
];

/// What the Gateway compile reads.
pub(crate) struct GatewayInputs<'a> {
    pub snapshot: &'a Snapshot,
    /// The BackendTLSPolicies, resolved once per compile.
    pub backend_tls: &'a BackendTlsPolicies<'a>,
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
    /// What it presents to backends that ask for a client certificate.
    backend_client: Option<Arc<Certificate>>,
    /// Where its listeners (and its ListenerSets') bind; empty when it is not accepted.
    addresses: Vec<IpAddr>,
}

/// What a route's parentRef names among the served objects, by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Parent {
    Gateway(usize),
    ListenerSet(usize),
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
    let served_class = |name: &str| {
        classes
            .iter()
            .any(|(class, spec)| *class == name && spec.spec.parameters_ref.is_none())
    };
    let mut gateways: Vec<ServedGateway<'_>> = oldest_first(&snapshot.gateways)
        .into_iter()
        .filter(|(_, gateway)| served_class(&gateway.spec.gateway_class_name))
        .map(|(key, gateway)| ServedGateway {
            key,
            gateway,
            conditions: Vec::new(),
            backend_client: None,
            addresses: Vec::new(),
        })
        .collect();
    let mut sinks = sinks;
    inputs.backend_tls.report(sinks.diagnostics);
    let mut sets = served_listener_sets(snapshot, &gateways);
    let mut plans = plan_listeners((&mut gateways, &mut sets), inputs, &mut sinks);
    for served in &mut gateways {
        backend_tls::resolve_backend_client(served, snapshot, &mut sinks);
    }
    for plan in plans.iter().filter(|plan| plan.programmed()) {
        let Some(protocol) = plan.protocol else {
            continue;
        };
        let served = &gateways[plan.gateway];
        let site = plan.certificate.as_ref().map(|certificate| {
            let owner: Arc<str> = format!("{}/{}", served.key.namespace, served.key.name).into();
            Arc::new(TlsSite::new(
                owner,
                Some(certificate.clone()),
                plan.client_auth.clone(),
            ))
        });
        for socket in &plan.sockets {
            sinks.builder.gateways().add_listener(
                (*socket, protocol),
                plan.hostname.clone(),
                site.clone(),
            );
        }
    }
    let routes = route_inputs(snapshot);
    for (rank, route) in routes.iter().enumerate() {
        let parents = attach_route(
            route,
            rank,
            ((&gateways, &sets), &mut plans),
            inputs,
            &mut sinks,
        );
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
    report.listener_sets = listener_set_statuses(&sets, &gateways, &plans);
    report.backend_tls_policies = inputs.backend_tls.statuses(
        (&routes, &report.routes, &report.listener_sets),
        inputs.services,
        inputs.controller,
    );
    report.gateways = gateways
        .iter()
        .enumerate()
        .map(|(index, served)| gateway_status(index, served, (&plans, &sets)))
        .collect();
    report
}

/// A class is accepted unless it names parameters: sluice takes none, and the spec rejects a
/// class whose parameters are of an unsupported kind (its Gateways are then not served).
fn class_status(name: &str, class: &GatewayClass) -> ClassStatus {
    let accepted = match &class.spec.parameters_ref {
        None => Condition::new("Accepted", true, "Accepted", "served by sluice"),
        Some(parameters) => Condition::new(
            "Accepted",
            false,
            "InvalidParameters",
            format!("spec.parametersRef names {parameters}; sluice takes no parameters"),
        ),
    };
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
