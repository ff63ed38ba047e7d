//! What a compile is told (the command line's settings) and what it gives back (the table, its endpoint sources, the diagnostics, the Gateway report).

use sluice_routing::RoutingTable;

use super::backend::EndpointSources;
use super::gateway::DEFAULT_GATEWAY_CONTROLLER;
use crate::diagnostic::Diagnostic;
use crate::gateway::status::GatewayReport;
use crate::snapshot::ObjectKey;

/// What the compiler is told from the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileOptions {
    /// The IngressClass name this sluice serves (`--ingress-class`).
    pub ingress_class: String,
    /// Serve Ingresses that name no class (`--watch-ingress-without-class`).
    pub watch_without_class: bool,
    /// The Secret whose certificate a handshake gets when no TLS host matches
    /// (`--default-certificate`).
    pub default_certificate: Option<ObjectKey>,
    /// The `controllerName` of the GatewayClasses served (`--gateway-controller-name`).
    pub gateway_controller: String,
    /// Where the listeners of a Gateway without `spec.addresses` are bound
    /// (`--gateway-address`).
    pub gateway_address: std::net::IpAddr,
    /// Traefik middlewares of other namespaces than the referring Ingress's may be applied
    /// (`--allow-cross-namespace-middlewares`, Traefik's `allowCrossNamespace`).
    pub allow_cross_namespace_middlewares: bool,
}

impl Default for CompileOptions {
    fn default() -> Self {
        Self {
            ingress_class: "sluice".to_owned(),
            watch_without_class: false,
            default_certificate: None,
            gateway_controller: DEFAULT_GATEWAY_CONTROLLER.to_owned(),
            gateway_address: std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            allow_cross_namespace_middlewares: false,
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
    /// The status of the Gateway API objects this sluice serves.
    pub gateways: GatewayReport,
}
