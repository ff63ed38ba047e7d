//! The Gateway API objects sluice reads (`gateway.networking.k8s.io`, v1.6.1, standard channel plus the experimental `retry` and `sessionPersistence`), as plain serde types.
//!
//! Enumerations the spec may extend (protocols, match and filter types) stay strings: a value
//! sluice does not know is not a parse error but a condition on the object
//! (`UnsupportedValue`), as the spec asks. Fields sluice does not read are ignored.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::{Deserialize, Serialize};

/// The API group of every Gateway API kind.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
/// The experimental group, where ListenerSet was `XListenerSet` before it became standard.
pub const EXPERIMENTAL_GATEWAY_GROUP: &str = "gateway.networking.x-k8s.io";

/// A Gateway API object: its metadata and spec (status is written, never read).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct GatewayObject<S> {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: S,
}

pub type GatewayClass = GatewayObject<GatewayClassSpec>;
pub type Gateway = GatewayObject<GatewaySpec>;
pub type HttpRoute = GatewayObject<HttpRouteSpec>;
pub type GrpcRoute = GatewayObject<GrpcRouteSpec>;
pub type ReferenceGrant = GatewayObject<ReferenceGrantSpec>;
/// TLSRoute: TLS connections routed by their server name.
pub type TlsRoute = GatewayObject<StreamRouteSpec>;
/// TCPRoute: TCP connections routed by the listener they arrive on.
pub type TcpRoute = GatewayObject<StreamRouteSpec>;
/// UDPRoute: UDP flows routed by the listener they arrive on.
pub type UdpRoute = GatewayObject<StreamRouteSpec>;
/// BackendTLSPolicy: TLS from the Gateway to the pods of a Service (port).
pub type BackendTlsPolicy = GatewayObject<BackendTlsPolicySpec>;

/// A BackendTLSPolicy's spec: the Service (ports) it targets and how their certificates are
/// checked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendTlsPolicySpec {
    #[serde(default)]
    pub target_refs: Vec<PolicyTargetReference>,
    #[serde(default)]
    pub validation: BackendTlsValidation,
}

/// `spec.validation` of a BackendTLSPolicy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendTlsValidation {
    /// ConfigMaps (or Secrets) of the policy's namespace whose `ca.crt` holds the CAs.
    #[serde(default)]
    pub ca_certificate_refs: Vec<ObjectReference>,
    /// `System`: the CAs the operating system trusts.
    #[serde(
        default,
        rename = "wellKnownCACertificates",
        skip_serializing_if = "Option::is_none"
    )]
    pub well_known_ca_certificates: Option<String>,
    /// Sent as SNI, and the name verified unless `subjectAltNames` are given.
    #[serde(default)]
    pub hostname: String,
    /// Names one of which the certificate must carry, instead of `hostname`.
    #[serde(default)]
    pub subject_alt_names: Vec<SubjectAltName>,
}

/// One of `spec.validation.subjectAltNames`: `type: Hostname` with `hostname`, or `type: URI`
/// with `uri`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubjectAltName {
    #[serde(rename = "type")]
    pub name_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
}

/// A policy's target: a Service of the policy's namespace, and optionally one port by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyTargetReference {
    #[serde(default)]
    pub group: String,
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
}

/// ListenerSet: listeners an application team adds to a Gateway that allows them.
pub type ListenerSet = GatewayObject<ListenerSetSpec>;

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerSetSpec {
    pub parent_ref: ParentGatewayReference,
    /// Listener entries: a Gateway listener's fields.
    #[serde(default)]
    pub listeners: Vec<Listener>,
}

/// A ListenerSet's parent: a Gateway (group and kind default to the Gateway's), in the
/// ListenerSet's namespace unless another is named.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentGatewayReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `spec.allowedListeners` of a Gateway: which namespaces' ListenerSets may attach (none by
/// default).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AllowedListeners {
    /// `from`: `None` (the default), `Same`, `All` or `Selector`, and the selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<RouteNamespaces>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClassSpec {
    pub controller_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Implementation parameters; sluice takes none, so naming any rejects the class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters_ref: Option<ParametersReference>,
}

/// A reference to an implementation's parameters object (a GatewayClass's or a Gateway's).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParametersReference {
    #[serde(default)]
    pub group: String,
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl std::fmt::Display for ParametersReference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = match self.group.as_str() {
            "" => String::new(),
            group => format!(".{group}"),
        };
        write!(f, "{}{group} {:?}", self.kind, self.name)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    pub gateway_class_name: String,
    #[serde(default)]
    pub listeners: Vec<Listener>,
    #[serde(default)]
    pub addresses: Vec<GatewayAddress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure: Option<GatewayInfrastructure>,
    /// `spec.tls`: the client-certificate validation of the Gateway's TLS listeners.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<GatewayTls>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_listeners: Option<AllowedListeners>,
}

/// `spec.tls` of a Gateway.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayTls {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend: Option<FrontendTls>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendTls>,
}

/// `spec.tls.backend`: what the Gateway presents to backends it speaks TLS to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendTls {
    /// A `kubernetes.io/tls` Secret whose certificate is presented to backends that ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate_ref: Option<ObjectReference>,
}

/// `spec.tls.frontend`: how clients' certificates are validated, by default and per port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FrontendTls {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<FrontendTlsConfig>,
    #[serde(default)]
    pub per_port: Vec<PerPortTls>,
}

/// The TLS settings of a Gateway's listeners on one port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PerPortTls {
    pub port: u16,
    #[serde(default)]
    pub tls: FrontendTlsConfig,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FrontendTlsConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<FrontendValidation>,
}

/// Client certificates must chain to one of `caCertificateRefs` (ConfigMaps or Secrets with
/// `ca.crt`); `mode` is `AllowValidOnly` (the default) or `AllowInsecureFallback`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FrontendValidation {
    #[serde(default)]
    pub ca_certificate_refs: Vec<ObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// `spec.infrastructure`: of it sluice reads only `parametersRef`, which it cannot honour.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayInfrastructure {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters_ref: Option<ParametersReference>,
}

/// One listener: a port, a protocol, an optional hostname, TLS, and which routes may attach.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    pub port: u16,
    /// `HTTP`, `HTTPS`, `TLS`, `TCP`, `UDP` or an implementation's own.
    pub protocol: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ListenerTls>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_routes: Option<AllowedRoutes>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerTls {
    /// `Terminate` (the default) or `Passthrough`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default)]
    pub certificate_refs: Vec<ObjectReference>,
}

/// Which routes may attach to a listener: from which namespaces, of which kinds.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AllowedRoutes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<RouteNamespaces>,
    #[serde(default)]
    pub kinds: Vec<RouteGroupKind>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteNamespaces {
    /// `Same` (the default), `All` or `Selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteGroupKind {
    /// The API group; absent means `gateway.networking.k8s.io`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub kind: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayAddress {
    /// `IPAddress` (the default), `Hostname` or an implementation's own.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub address_type: Option<String>,
    pub value: String,
}

/// A reference to an object by group, kind, name and namespace (a certificate Secret, say).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// Absent or empty means the core group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A route's reference to the Gateway (and optionally the listener) it attaches to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Absent means `Gateway`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteSpec {
    #[serde(default)]
    pub parent_refs: Vec<ParentReference>,
    #[serde(default)]
    pub hostnames: Vec<String>,
    #[serde(default)]
    pub rules: Vec<HttpRouteRule>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// No match means one match of `PathPrefix /`.
    #[serde(default)]
    pub matches: Vec<HttpRouteMatch>,
    #[serde(default)]
    pub filters: Vec<HttpRouteFilter>,
    #[serde(default)]
    pub backend_refs: Vec<HttpBackendRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<HttpRouteTimeouts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<HttpRouteRetry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_persistence: Option<SessionPersistence>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteMatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HttpPathMatch>,
    #[serde(default)]
    pub headers: Vec<ValueMatch>,
    #[serde(default)]
    pub query_params: Vec<ValueMatch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpPathMatch {
    /// `Exact`, `PathPrefix` (the default) or `RegularExpression`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub match_type: Option<String>,
    /// Absent means `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// A header or query parameter match: `Exact` (the default) or `RegularExpression`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ValueMatch {
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub match_type: Option<String>,
    pub name: String,
    pub value: String,
}

/// One filter: its `type` names which of the other fields holds its settings.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteFilter {
    #[serde(rename = "type")]
    pub filter_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_header_modifier: Option<HeaderModifier>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_header_modifier: Option<HeaderModifier>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_mirror: Option<RequestMirror>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_redirect: Option<RequestRedirect>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_rewrite: Option<UrlRewrite>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension_ref: Option<LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors: Option<Cors>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HeaderModifier {
    #[serde(default)]
    pub set: Vec<Header>,
    #[serde(default)]
    pub add: Vec<Header>,
    #[serde(default)]
    pub remove: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct Header {
    pub name: String,
    pub value: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestMirror {
    pub backend_ref: BackendObjectReference,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<Fraction>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct Fraction {
    pub numerator: u32,
    /// Absent means 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denominator: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRedirect {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathModifier>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// 301, 302, 303, 307 or 308; absent means 302.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UrlRewrite {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathModifier>,
}

/// How a redirect or rewrite changes the path: `ReplaceFullPath` or `ReplacePrefixMatch`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PathModifier {
    #[serde(rename = "type")]
    pub modifier_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_full_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_prefix_match: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct LocalObjectReference {
    pub group: String,
    pub kind: String,
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cors {
    #[serde(default)]
    pub allow_origins: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_credentials: Option<bool>,
    #[serde(default)]
    pub allow_methods: Vec<String>,
    #[serde(default)]
    pub allow_headers: Vec<String>,
    #[serde(default)]
    pub expose_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<u32>,
}

/// A backend by group, kind, name, namespace and port; absent group and kind mean a Service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendObjectReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpBackendRef {
    #[serde(flatten)]
    pub backend: BackendObjectReference,
    /// Absent means 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    #[serde(default)]
    pub filters: Vec<HttpRouteFilter>,
}

/// Durations in the spec's format (`1h`, `10s`, `500ms`; `0s` turns a timeout off).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteTimeouts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_request: Option<String>,
}

/// Experimental: which statuses are retried, how many times, and the backoff between tries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteRetry {
    #[serde(default)]
    pub codes: Vec<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<String>,
}

/// Experimental: requests of one session go to one backend, by cookie or header.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionPersistence {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absolute_timeout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<String>,
    /// `Cookie` (the default) or `Header`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub persistence_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie_config: Option<CookieConfig>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CookieConfig {
    /// `Permanent` or `Session` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime_type: Option<String>,
}

/// The spec of TLSRoute and TCPRoute (and UDPRoute): parents, hostnames (TLSRoute only) and
/// rules that are backendRefs alone.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamRouteSpec {
    #[serde(default)]
    pub parent_refs: Vec<ParentReference>,
    #[serde(default)]
    pub hostnames: Vec<String>,
    #[serde(default)]
    pub rules: Vec<StreamRouteRule>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamRouteRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default)]
    pub backend_refs: Vec<StreamBackendRef>,
}

/// A stream route's backendRef: an object reference and a weight, no filters.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamBackendRef {
    #[serde(flatten)]
    pub backend: BackendObjectReference,
    /// Absent means 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcRouteSpec {
    #[serde(default)]
    pub parent_refs: Vec<ParentReference>,
    #[serde(default)]
    pub hostnames: Vec<String>,
    #[serde(default)]
    pub rules: Vec<GrpcRouteRule>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcRouteRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default)]
    pub matches: Vec<GrpcRouteMatch>,
    #[serde(default)]
    pub filters: Vec<HttpRouteFilter>,
    #[serde(default)]
    pub backend_refs: Vec<HttpBackendRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_persistence: Option<SessionPersistence>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcRouteMatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<GrpcMethodMatch>,
    #[serde(default)]
    pub headers: Vec<ValueMatch>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcMethodMatch {
    /// `Exact` (the default) or `RegularExpression`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub match_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

/// Which objects of another namespace may refer to objects of this one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct ReferenceGrantSpec {
    #[serde(default)]
    pub from: Vec<ReferenceGrantFrom>,
    #[serde(default)]
    pub to: Vec<ReferenceGrantTo>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct ReferenceGrantFrom {
    pub group: String,
    pub kind: String,
    pub namespace: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct ReferenceGrantTo {
    pub group: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_httproute_reads_with_every_field_the_spec_names() {
        let yaml = r#"
metadata: {name: web, namespace: shop}
spec:
  parentRefs: [{name: gw, sectionName: http, port: 80}]
  hostnames: ["*.example.com"]
  rules:
  - matches:
    - path: {type: PathPrefix, value: /api}
      headers: [{name: version, value: "2"}, {type: RegularExpression, name: x, value: "a.*"}]
      queryParams: [{name: q, value: "1"}]
      method: GET
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {set: [{name: a, value: b}], add: [{name: c, value: d}], remove: [e]}
    - type: RequestRedirect
      requestRedirect: {scheme: https, port: 443, statusCode: 301,
                        path: {type: ReplacePrefixMatch, replacePrefixMatch: /v2}}
    - type: RequestMirror
      requestMirror: {backendRef: {name: mirror, port: 8080}, fraction: {numerator: 1}}
    backendRefs:
    - {name: v1, port: 8080, weight: 90}
    - name: v2
      port: 8080
      weight: 10
      filters: [{type: ResponseHeaderModifier, responseHeaderModifier: {remove: [server]}}]
    timeouts: {request: 10s, backendRequest: 2s}
    retry: {codes: [500, 503], attempts: 3, backoff: 100ms}
    sessionPersistence: {sessionName: s, type: Cookie, cookieConfig: {lifetimeType: Permanent}}
"#;
        let route: HttpRoute = serde_saphyr::from_str(yaml).unwrap();
        let rule = &route.spec.rules[0];
        assert_eq!(
            route.spec.parent_refs[0].section_name.as_deref(),
            Some("http")
        );
        assert_eq!(
            rule.matches[0].headers[1].match_type.as_deref(),
            Some("RegularExpression")
        );
        assert_eq!(rule.matches[0].method.as_deref(), Some("GET"));
        let redirect = rule.filters[1].request_redirect.as_ref().unwrap();
        assert_eq!(redirect.status_code, Some(301));
        let path = redirect.path.as_ref().unwrap();
        assert_eq!(path.replace_prefix_match.as_deref(), Some("/v2"));
        let mirror = rule.filters[2].request_mirror.as_ref().unwrap();
        assert_eq!(mirror.fraction.as_ref().unwrap().denominator, None);
        assert_eq!(rule.backend_refs[1].backend.name, "v2");
        assert_eq!(rule.backend_refs[1].weight, Some(10));
        assert_eq!(
            rule.backend_refs[1].filters[0].filter_type,
            "ResponseHeaderModifier"
        );
        assert_eq!(rule.retry.as_ref().unwrap().codes, [500, 503]);
        let session = rule.session_persistence.as_ref().unwrap();
        assert_eq!(session.persistence_type.as_deref(), Some("Cookie"));
    }

    #[test]
    fn a_gateway_reads_its_listeners_and_unknown_fields_are_ignored() {
        let yaml = r#"
metadata: {name: gw, namespace: infra}
spec:
  gatewayClassName: sluice
  infrastructure: {labels: {a: b}}
  addresses: [{type: IPAddress, value: 127.0.0.5}]
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    hostname: "*.example.com"
    tls: {mode: Terminate, certificateRefs: [{kind: Secret, name: cert}]}
    allowedRoutes:
      namespaces: {from: Selector, selector: {matchLabels: {team: a}}}
      kinds: [{kind: HTTPRoute}]
"#;
        let gateway: Gateway = serde_saphyr::from_str(yaml).unwrap();
        let listener = &gateway.spec.listeners[0];
        assert_eq!(listener.port, 443);
        assert_eq!(
            listener.tls.as_ref().unwrap().certificate_refs[0].name,
            "cert"
        );
        let allowed = listener.allowed_routes.as_ref().unwrap();
        assert_eq!(
            allowed.namespaces.as_ref().unwrap().from.as_deref(),
            Some("Selector")
        );
        assert_eq!(gateway.spec.addresses[0].value, "127.0.0.5");
    }
}
