//! The snapshot: every Kubernetes object a source has seen, typed and keyed by namespace and name.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::gateway::{
    BackendTlsPolicy, Gateway, GatewayClass, GrpcRoute, HttpRoute, ListenerSet, ReferenceGrant,
    TcpRoute, TlsRoute, UdpRoute,
};
use crate::traefik::Middleware;

/// Namespace given to namespaced objects that do not name one, as `kubectl apply` does.
pub const DEFAULT_NAMESPACE: &str = "default";

/// `namespace/name` of a namespaced object; cluster-scoped objects use an empty namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    /// The key of an object from its metadata (namespace defaults to `default`).
    pub fn of(metadata: &ObjectMeta) -> Self {
        Self::new(
            metadata.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE),
            metadata.name.as_deref().unwrap_or_default(),
        )
    }
}

/// One object of a kind sluice reads.
///
/// Variants differ in size, but a `KubeObject` only lives between parsing and insertion into
/// a [`Snapshot`], so boxing would cost an allocation per object for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum KubeObject {
    Ingress(Ingress),
    IngressClass(IngressClass),
    Service(Service),
    EndpointSlice(EndpointSlice),
    Secret(Secret),
    ConfigMap(ConfigMap),
    GatewayClass(GatewayClass),
    Gateway(Gateway),
    HttpRoute(HttpRoute),
    GrpcRoute(GrpcRoute),
    TlsRoute(TlsRoute),
    TcpRoute(TcpRoute),
    UdpRoute(UdpRoute),
    BackendTlsPolicy(BackendTlsPolicy),
    ListenerSet(ListenerSet),
    ReferenceGrant(ReferenceGrant),
    /// Read for its labels, which Gateway listeners select route namespaces by.
    Namespace(Namespace),
    /// A Traefik Middleware, which `router.middlewares` names.
    Middleware(Middleware),
}

impl KubeObject {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Ingress(_) => "Ingress",
            Self::IngressClass(_) => "IngressClass",
            Self::Service(_) => "Service",
            Self::EndpointSlice(_) => "EndpointSlice",
            Self::Secret(_) => "Secret",
            Self::ConfigMap(_) => "ConfigMap",
            Self::GatewayClass(_) => "GatewayClass",
            Self::Gateway(_) => "Gateway",
            Self::HttpRoute(_) => "HTTPRoute",
            Self::GrpcRoute(_) => "GRPCRoute",
            Self::TlsRoute(_) => "TLSRoute",
            Self::TcpRoute(_) => "TCPRoute",
            Self::UdpRoute(_) => "UDPRoute",
            Self::BackendTlsPolicy(_) => "BackendTLSPolicy",
            Self::ListenerSet(_) => "ListenerSet",
            Self::ReferenceGrant(_) => "ReferenceGrant",
            Self::Namespace(_) => "Namespace",
            Self::Middleware(_) => "Middleware",
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Self::Ingress(o) => &o.metadata,
            Self::IngressClass(o) => &o.metadata,
            Self::Service(o) => &o.metadata,
            Self::EndpointSlice(o) => &o.metadata,
            Self::Secret(o) => &o.metadata,
            Self::ConfigMap(o) => &o.metadata,
            Self::GatewayClass(o) => &o.metadata,
            Self::Gateway(o) => &o.metadata,
            Self::HttpRoute(o) => &o.metadata,
            Self::GrpcRoute(o) => &o.metadata,
            Self::TlsRoute(o) => &o.metadata,
            Self::TcpRoute(o) => &o.metadata,
            Self::UdpRoute(o) => &o.metadata,
            Self::BackendTlsPolicy(o) => &o.metadata,
            Self::ListenerSet(o) => &o.metadata,
            Self::ReferenceGrant(o) => &o.metadata,
            Self::Namespace(o) => &o.metadata,
            Self::Middleware(o) => &o.metadata,
        }
    }

    pub fn metadata_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Self::Ingress(o) => &mut o.metadata,
            Self::IngressClass(o) => &mut o.metadata,
            Self::Service(o) => &mut o.metadata,
            Self::EndpointSlice(o) => &mut o.metadata,
            Self::Secret(o) => &mut o.metadata,
            Self::ConfigMap(o) => &mut o.metadata,
            Self::GatewayClass(o) => &mut o.metadata,
            Self::Gateway(o) => &mut o.metadata,
            Self::HttpRoute(o) => &mut o.metadata,
            Self::GrpcRoute(o) => &mut o.metadata,
            Self::TlsRoute(o) => &mut o.metadata,
            Self::TcpRoute(o) => &mut o.metadata,
            Self::UdpRoute(o) => &mut o.metadata,
            Self::BackendTlsPolicy(o) => &mut o.metadata,
            Self::ListenerSet(o) => &mut o.metadata,
            Self::ReferenceGrant(o) => &mut o.metadata,
            Self::Namespace(o) => &mut o.metadata,
            Self::Middleware(o) => &mut o.metadata,
        }
    }
}

/// Every object the compiler reads. Both sources (manifest directory and Kubernetes API)
/// produce this same value; everything after it is shared.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub ingresses: BTreeMap<ObjectKey, Ingress>,
    /// IngressClass is cluster-scoped: keyed by name alone.
    pub ingress_classes: BTreeMap<String, IngressClass>,
    pub services: BTreeMap<ObjectKey, Service>,
    pub endpoint_slices: BTreeMap<ObjectKey, EndpointSlice>,
    pub secrets: BTreeMap<ObjectKey, Secret>,
    /// ConfigMaps that annotations name (`custom-headers`).
    pub config_maps: BTreeMap<ObjectKey, ConfigMap>,
    /// GatewayClass is cluster-scoped: keyed by name alone.
    pub gateway_classes: BTreeMap<String, GatewayClass>,
    pub gateways: BTreeMap<ObjectKey, Gateway>,
    pub http_routes: BTreeMap<ObjectKey, HttpRoute>,
    pub grpc_routes: BTreeMap<ObjectKey, GrpcRoute>,
    pub tls_routes: BTreeMap<ObjectKey, TlsRoute>,
    pub tcp_routes: BTreeMap<ObjectKey, TcpRoute>,
    pub udp_routes: BTreeMap<ObjectKey, UdpRoute>,
    pub backend_tls_policies: BTreeMap<ObjectKey, BackendTlsPolicy>,
    /// ListenerSets: listeners added to a Gateway that allows them.
    pub listener_sets: BTreeMap<ObjectKey, ListenerSet>,
    pub reference_grants: BTreeMap<ObjectKey, ReferenceGrant>,
    /// Namespace is cluster-scoped: keyed by name alone. Only Gateway listeners read it.
    pub namespaces: BTreeMap<String, Namespace>,
    /// Traefik Middlewares, of either API group.
    pub middlewares: BTreeMap<ObjectKey, Middleware>,
}

impl Snapshot {
    /// Adds an object, replacing any object of the same kind, namespace and name.
    pub fn insert(&mut self, object: KubeObject) {
        let key = ObjectKey::of(object.metadata());
        match object {
            KubeObject::Ingress(o) => {
                self.ingresses.insert(key, o);
            }
            KubeObject::IngressClass(o) => {
                self.ingress_classes.insert(key.name, o);
            }
            KubeObject::Service(o) => {
                self.services.insert(key, o);
            }
            KubeObject::EndpointSlice(o) => {
                self.endpoint_slices.insert(key, o);
            }
            KubeObject::Secret(o) => {
                self.secrets.insert(key, o);
            }
            KubeObject::ConfigMap(o) => {
                self.config_maps.insert(key, o);
            }
            KubeObject::GatewayClass(o) => {
                self.gateway_classes.insert(key.name, o);
            }
            KubeObject::Gateway(o) => {
                self.gateways.insert(key, o);
            }
            KubeObject::HttpRoute(o) => {
                self.http_routes.insert(key, o);
            }
            KubeObject::GrpcRoute(o) => {
                self.grpc_routes.insert(key, o);
            }
            KubeObject::TlsRoute(o) => {
                self.tls_routes.insert(key, o);
            }
            KubeObject::TcpRoute(o) => {
                self.tcp_routes.insert(key, o);
            }
            KubeObject::UdpRoute(o) => {
                self.udp_routes.insert(key, o);
            }
            KubeObject::BackendTlsPolicy(o) => {
                self.backend_tls_policies.insert(key, o);
            }
            KubeObject::ListenerSet(o) => {
                self.listener_sets.insert(key, o);
            }
            KubeObject::ReferenceGrant(o) => {
                self.reference_grants.insert(key, o);
            }
            KubeObject::Namespace(o) => {
                self.namespaces.insert(key.name, o);
            }
            KubeObject::Middleware(o) => {
                self.middlewares.insert(key, o);
            }
        }
    }

    /// Removes the object of this object's kind, namespace and name, if present.
    pub fn remove(&mut self, object: &KubeObject) {
        let key = ObjectKey::of(object.metadata());
        match object {
            KubeObject::Ingress(_) => {
                self.ingresses.remove(&key);
            }
            KubeObject::IngressClass(_) => {
                self.ingress_classes.remove(&key.name);
            }
            KubeObject::Service(_) => {
                self.services.remove(&key);
            }
            KubeObject::EndpointSlice(_) => {
                self.endpoint_slices.remove(&key);
            }
            KubeObject::Secret(_) => {
                self.secrets.remove(&key);
            }
            KubeObject::ConfigMap(_) => {
                self.config_maps.remove(&key);
            }
            KubeObject::GatewayClass(_) => {
                self.gateway_classes.remove(&key.name);
            }
            KubeObject::Gateway(_) => {
                self.gateways.remove(&key);
            }
            KubeObject::HttpRoute(_) => {
                self.http_routes.remove(&key);
            }
            KubeObject::GrpcRoute(_) => {
                self.grpc_routes.remove(&key);
            }
            KubeObject::TlsRoute(_) => {
                self.tls_routes.remove(&key);
            }
            KubeObject::TcpRoute(_) => {
                self.tcp_routes.remove(&key);
            }
            KubeObject::UdpRoute(_) => {
                self.udp_routes.remove(&key);
            }
            KubeObject::BackendTlsPolicy(_) => {
                self.backend_tls_policies.remove(&key);
            }
            KubeObject::ListenerSet(_) => {
                self.listener_sets.remove(&key);
            }
            KubeObject::ReferenceGrant(_) => {
                self.reference_grants.remove(&key);
            }
            KubeObject::Namespace(_) => {
                self.namespaces.remove(&key.name);
            }
            KubeObject::Middleware(_) => {
                self.middlewares.remove(&key);
            }
        }
    }

    /// The metadata of the stored object of this object's kind, namespace and name.
    pub fn stored_metadata(&self, object: &KubeObject) -> Option<&ObjectMeta> {
        let key = ObjectKey::of(object.metadata());
        match object {
            KubeObject::Ingress(_) => self.ingresses.get(&key).map(|o| &o.metadata),
            KubeObject::IngressClass(_) => self.ingress_classes.get(&key.name).map(|o| &o.metadata),
            KubeObject::Service(_) => self.services.get(&key).map(|o| &o.metadata),
            KubeObject::EndpointSlice(_) => self.endpoint_slices.get(&key).map(|o| &o.metadata),
            KubeObject::Secret(_) => self.secrets.get(&key).map(|o| &o.metadata),
            KubeObject::ConfigMap(_) => self.config_maps.get(&key).map(|o| &o.metadata),
            KubeObject::GatewayClass(_) => self.gateway_classes.get(&key.name).map(|o| &o.metadata),
            KubeObject::Gateway(_) => self.gateways.get(&key).map(|o| &o.metadata),
            KubeObject::HttpRoute(_) => self.http_routes.get(&key).map(|o| &o.metadata),
            KubeObject::GrpcRoute(_) => self.grpc_routes.get(&key).map(|o| &o.metadata),
            KubeObject::TlsRoute(_) => self.tls_routes.get(&key).map(|o| &o.metadata),
            KubeObject::TcpRoute(_) => self.tcp_routes.get(&key).map(|o| &o.metadata),
            KubeObject::UdpRoute(_) => self.udp_routes.get(&key).map(|o| &o.metadata),
            KubeObject::BackendTlsPolicy(_) => {
                self.backend_tls_policies.get(&key).map(|o| &o.metadata)
            }
            KubeObject::ListenerSet(_) => self.listener_sets.get(&key).map(|o| &o.metadata),
            KubeObject::ReferenceGrant(_) => self.reference_grants.get(&key).map(|o| &o.metadata),
            KubeObject::Namespace(_) => self.namespaces.get(&key.name).map(|o| &o.metadata),
            KubeObject::Middleware(_) => self.middlewares.get(&key).map(|o| &o.metadata),
        }
    }

    /// Whether the snapshot holds an object equal to this one.
    pub fn holds(&self, object: &KubeObject) -> bool {
        let key = ObjectKey::of(object.metadata());
        match object {
            KubeObject::Ingress(o) => self.ingresses.get(&key) == Some(o),
            KubeObject::IngressClass(o) => self.ingress_classes.get(&key.name) == Some(o),
            KubeObject::Service(o) => self.services.get(&key) == Some(o),
            KubeObject::EndpointSlice(o) => self.endpoint_slices.get(&key) == Some(o),
            KubeObject::Secret(o) => self.secrets.get(&key) == Some(o),
            KubeObject::ConfigMap(o) => self.config_maps.get(&key) == Some(o),
            KubeObject::GatewayClass(o) => self.gateway_classes.get(&key.name) == Some(o),
            KubeObject::Gateway(o) => self.gateways.get(&key) == Some(o),
            KubeObject::HttpRoute(o) => self.http_routes.get(&key) == Some(o),
            KubeObject::GrpcRoute(o) => self.grpc_routes.get(&key) == Some(o),
            KubeObject::TlsRoute(o) => self.tls_routes.get(&key) == Some(o),
            KubeObject::TcpRoute(o) => self.tcp_routes.get(&key) == Some(o),
            KubeObject::UdpRoute(o) => self.udp_routes.get(&key) == Some(o),
            KubeObject::BackendTlsPolicy(o) => self.backend_tls_policies.get(&key) == Some(o),
            KubeObject::ListenerSet(o) => self.listener_sets.get(&key) == Some(o),
            KubeObject::ReferenceGrant(o) => self.reference_grants.get(&key) == Some(o),
            KubeObject::Namespace(o) => self.namespaces.get(&key.name) == Some(o),
            KubeObject::Middleware(o) => self.middlewares.get(&key) == Some(o),
        }
    }

    /// Builds a snapshot from objects; later objects replace earlier ones with the same key.
    pub fn from_objects(objects: impl IntoIterator<Item = KubeObject>) -> Self {
        let mut snapshot = Self::default();
        for object in objects {
            snapshot.insert(object);
        }
        snapshot
    }
}
