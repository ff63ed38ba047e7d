//! The resource types the test API server serves, with the discovery facts kube-rs and kubectl rely on.

use serde_json::{json, Value};

/// One served resource type (a group/version/plural), as discovery describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    /// Whether the type has a `status` subresource: the main resource cannot change `.status`.
    pub status_subresource: bool,
    pub short_names: &'static [&'static str],
}

impl ResourceType {
    /// `v1` or `networking.k8s.io/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The path prefix of this type's group version: `/api/v1` or `/apis/{group}/{version}`.
    pub fn group_version_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    /// The `.status` a freshly created object of this type gets (the API server drops the one sent).
    pub(crate) fn initial_status(&self) -> Option<Value> {
        match (self.group, self.kind) {
            ("networking.k8s.io", "Ingress") | ("", "Service") => Some(json!({"loadBalancer": {}})),
            ("", "Namespace") => Some(json!({"phase": "Active"})),
            _ => None,
        }
    }
}

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// Every served resource type. Index positions are stable and used as store table ids.
pub const RESOURCES: &[ResourceType] = &[
    ResourceType {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        status_subresource: true,
        short_names: &["ns"],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        status_subresource: true,
        short_names: &["svc"],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "secrets",
        singular: "secret",
        kind: "Secret",
        namespaced: true,
        status_subresource: false,
        short_names: &[],
    },
    ResourceType {
        group: "networking.k8s.io",
        version: "v1",
        plural: "ingresses",
        singular: "ingress",
        kind: "Ingress",
        namespaced: true,
        status_subresource: true,
        short_names: &["ing"],
    },
    ResourceType {
        group: "networking.k8s.io",
        version: "v1",
        plural: "ingressclasses",
        singular: "ingressclass",
        kind: "IngressClass",
        namespaced: false,
        status_subresource: false,
        short_names: &[],
    },
    ResourceType {
        group: "discovery.k8s.io",
        version: "v1",
        plural: "endpointslices",
        singular: "endpointslice",
        kind: "EndpointSlice",
        namespaced: true,
        status_subresource: false,
        short_names: &[],
    },
    ResourceType {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        status_subresource: false,
        short_names: &[],
    },
    ResourceType {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        status_subresource: false,
        short_names: &["ev"],
    },
    // Kinds that only deploy/ uses: served so `kubectl apply --dry-run=client -f deploy/` works.
    ResourceType {
        group: "",
        version: "v1",
        plural: "serviceaccounts",
        singular: "serviceaccount",
        kind: "ServiceAccount",
        namespaced: true,
        status_subresource: false,
        short_names: &["sa"],
    },
    ResourceType {
        group: "apps",
        version: "v1",
        plural: "deployments",
        singular: "deployment",
        kind: "Deployment",
        namespaced: true,
        status_subresource: true,
        short_names: &["deploy"],
    },
    ResourceType {
        group: "policy",
        version: "v1",
        plural: "poddisruptionbudgets",
        singular: "poddisruptionbudget",
        kind: "PodDisruptionBudget",
        namespaced: true,
        status_subresource: true,
        short_names: &["pdb"],
    },
    ResourceType {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "clusterroles",
        singular: "clusterrole",
        kind: "ClusterRole",
        namespaced: false,
        status_subresource: false,
        short_names: &[],
    },
    ResourceType {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "clusterrolebindings",
        singular: "clusterrolebinding",
        kind: "ClusterRoleBinding",
        namespaced: false,
        status_subresource: false,
        short_names: &[],
    },
    ResourceType {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "roles",
        singular: "role",
        kind: "Role",
        namespaced: true,
        status_subresource: false,
        short_names: &[],
    },
    ResourceType {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "rolebindings",
        singular: "rolebinding",
        kind: "RoleBinding",
        namespaced: true,
        status_subresource: false,
        short_names: &[],
    },
    ResourceType {
        group: "",
        version: "v1",
        plural: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        status_subresource: false,
        short_names: &["cm"],
    },
    // The Gateway API kinds sluice serves (the upstream CRDs, standard channel).
    ResourceType {
        group: "gateway.networking.k8s.io",
        version: "v1",
        plural: "gatewayclasses",
        singular: "gatewayclass",
        kind: "GatewayClass",
        namespaced: false,
        status_subresource: true,
        short_names: &["gc"],
    },
    ResourceType {
        group: "gateway.networking.k8s.io",
        version: "v1",
        plural: "gateways",
        singular: "gateway",
        kind: "Gateway",
        namespaced: true,
        status_subresource: true,
        short_names: &["gtw"],
    },
    ResourceType {
        group: "gateway.networking.k8s.io",
        version: "v1",
        plural: "httproutes",
        singular: "httproute",
        kind: "HTTPRoute",
        namespaced: true,
        status_subresource: true,
        short_names: &[],
    },
    ResourceType {
        group: "gateway.networking.k8s.io",
        version: "v1",
        plural: "grpcroutes",
        singular: "grpcroute",
        kind: "GRPCRoute",
        namespaced: true,
        status_subresource: true,
        short_names: &[],
    },
    ResourceType {
        group: "gateway.networking.k8s.io",
        version: "v1",
        plural: "tlsroutes",
        singular: "tlsroute",
        kind: "TLSRoute",
        namespaced: true,
        status_subresource: true,
        short_names: &[],
    },
    ResourceType {
        group: "gateway.networking.k8s.io",
        version: "v1",
        plural: "tcproutes",
        singular: "tcproute",
        kind: "TCPRoute",
        namespaced: true,
        status_subresource: true,
        short_names: &[],
    },
    ResourceType {
        group: "gateway.networking.k8s.io",
        version: "v1",
        plural: "udproutes",
        singular: "udproute",
        kind: "UDPRoute",
        namespaced: true,
        status_subresource: true,
        short_names: &[],
    },
    ResourceType {
        group: "gateway.networking.k8s.io",
        version: "v1",
        plural: "backendtlspolicies",
        singular: "backendtlspolicy",
        kind: "BackendTLSPolicy",
        namespaced: true,
        status_subresource: true,
        short_names: &["btlspolicy"],
    },
    ResourceType {
        group: "gateway.networking.k8s.io",
        version: "v1",
        plural: "listenersets",
        singular: "listenerset",
        kind: "ListenerSet",
        namespaced: true,
        status_subresource: true,
        short_names: &["lset"],
    },
    // The experimental channel's ListenerSet (Gateway API v1.3 and v1.4).
    ResourceType {
        group: "gateway.networking.x-k8s.io",
        version: "v1alpha1",
        plural: "xlistenersets",
        singular: "xlistenerset",
        kind: "XListenerSet",
        namespaced: true,
        status_subresource: true,
        short_names: &[],
    },
    ResourceType {
        group: "gateway.networking.k8s.io",
        version: "v1beta1",
        plural: "referencegrants",
        singular: "referencegrant",
        kind: "ReferenceGrant",
        namespaced: true,
        status_subresource: false,
        short_names: &["refgrant"],
    },
    // Traefik's Middleware CRD, in its group and in the older one still found in clusters.
    ResourceType {
        group: "traefik.io",
        version: "v1alpha1",
        plural: "middlewares",
        singular: "middleware",
        kind: "Middleware",
        namespaced: true,
        status_subresource: false,
        short_names: &[],
    },
    ResourceType {
        group: "traefik.containo.us",
        version: "v1alpha1",
        plural: "middlewares",
        singular: "middleware",
        kind: "Middleware",
        namespaced: true,
        status_subresource: false,
        short_names: &[],
    },
];

/// The index of the `namespaces` type in [`RESOURCES`].
pub(crate) const NAMESPACES: usize = 0;

/// The type served at `group`/`version`/`plural`.
pub(crate) fn by_plural(group: &str, version: &str, plural: &str) -> Option<usize> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The type of an object with this `apiVersion` and `kind`.
pub(crate) fn by_api_version_kind(api_version: &str, kind: &str) -> Option<usize> {
    let (group, version) = split_api_version(api_version);
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.kind == kind)
}

/// The type named by a kind (`Service`), plural (`services`), singular or short name (`svc`),
/// optionally qualified by group (`ingresses.networking.k8s.io`), case-insensitively.
pub(crate) fn by_name(name: &str) -> Option<usize> {
    let (name, group) = match name.split_once('.') {
        Some((name, group)) => (name, Some(group)),
        None => (name, None),
    };
    RESOURCES.iter().position(|r| {
        group.is_none_or(|g| g == r.group)
            && (r.kind.eq_ignore_ascii_case(name)
                || r.plural.eq_ignore_ascii_case(name)
                || r.singular.eq_ignore_ascii_case(name)
                || r.short_names.iter().any(|s| s.eq_ignore_ascii_case(name)))
    })
}

/// `networking.k8s.io/v1` → (`networking.k8s.io`, `v1`); `v1` → (``, `v1`).
pub(crate) fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

/// The distinct group versions, core first, in a stable order.
pub(crate) fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = Vec::new();
    for r in RESOURCES {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

/// The `APIResourceList` for one group version, with subresources, without the
/// `undiscovered` kinds.
pub(crate) fn api_resource_list(
    group: &str,
    version: &str,
    undiscovered: &[&str],
) -> Option<Value> {
    let mut resources = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version && !undiscovered.contains(&r.kind))
    {
        resources.push(json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": VERBS,
            "shortNames": r.short_names,
            "storageVersionHash": format!("{:x}", fnv(r.plural)),
        }));
        if r.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": STATUS_VERBS,
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

/// A small stable hash for `storageVersionHash` and OpenAPI document hashes.
pub(crate) fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
