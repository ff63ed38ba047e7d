//! Route policies: an Ingress's policy annotations combined with its Service's into the policy its routes share.

use std::sync::Arc;

use sluice_routing::{
    BackendMode, Balancer, Endpoint, RoutePolicy, SessionAffinity, UpstreamProtocol,
};

use super::backend::{cluster_ip_endpoint, ClusterIpUse, Resolved};
use crate::annotations::{
    annotation_field, app_protocol, IngressPolicy, ServiceUpstream, SLUICE_SERVICE_UPSTREAM,
    STICKY_COOKIE,
};
use crate::diagnostic::{Diagnostics, ObjectRef};
use crate::snapshot::ObjectKey;

/// Why service-upstream mode drops an annotation that chooses the endpoint.
const SINGLE_BACKEND: &str = "ignored: service-upstream sends to a single ClusterIP backend, so kube-proxy picks the pod per connection";

/// What one Ingress brings to the policies of its routes.
pub(super) struct IngressSide<'a> {
    pub key: &'a ObjectKey,
    /// `Ingress`, or the Gateway API route kind whose rules reuse these policies.
    pub kind: &'static str,
    pub policy: &'a IngressPolicy,
    pub service_upstream: ServiceUpstream,
    /// `policy.route` behind an `Arc`: the policy of every route the Service does not change.
    pub base: &'a Arc<RoutePolicy>,
}

impl IngressSide<'_> {
    fn object(&self) -> ObjectRef {
        ObjectRef::new(self.kind, Some(&self.key.namespace), &self.key.name)
    }
}

/// The Service a route sends to, by namespace and name.
#[derive(Clone, Copy)]
pub(super) struct ServiceName<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
}

impl ServiceName<'_> {
    fn object(self) -> ObjectRef {
        ObjectRef::new("Service", Some(self.namespace), self.name)
    }
}

/// The policy of the Ingress's routes to `backend`. Shares the Ingress's base policy unless the
/// Service adds a sticky cookie or a fallback, or service-upstream mode takes choices away.
pub(super) fn route_policy(
    ingress: &IngressSide<'_>,
    backend: &Resolved<'_>,
    service: ServiceName<'_>,
    diagnostics: &mut Diagnostics,
) -> Arc<RoutePolicy> {
    let policy = mode_policy(ingress, backend, service, diagnostics);
    let upstream = upstream_protocol(ingress, backend);
    if let UpstreamProtocol::Tls(tls) = &upstream {
        if tls.verify_roots.is_none() && ingress.kind == "Ingress" {
            diagnostics.info(
                &ingress.object(),
                annotation_field("nginx.ingress.kubernetes.io/proxy-ssl-verify"),
                format!("the pods of Service {} are spoken to over TLS without verifying their certificates (proxy-ssl-verify is off, as in ingress-nginx); set proxy-ssl-verify: \"on\" and proxy-ssl-secret to verify them", service.name),
            );
        }
    }
    if policy.upstream == upstream {
        return policy;
    }
    Arc::new(RoutePolicy {
        upstream,
        ..RoutePolicy::clone(&policy)
    })
}

/// The protocol spoken to the backend: the Ingress's `backend-protocol`, else the Service's
/// Traefik scheme annotation, else the Service port's `appProtocol`, else HTTP/1.1.
fn upstream_protocol(ingress: &IngressSide<'_>, backend: &Resolved<'_>) -> UpstreamProtocol {
    ingress
        .policy
        .backend_protocol
        .clone()
        .or_else(|| backend.wishes.scheme.clone())
        .or_else(|| {
            let (_, port) = backend.cluster?;
            app_protocol(port.app_protocol.as_deref()?)
        })
        .map(|protocol| match protocol {
            UpstreamProtocol::Tls(mut tls) => {
                tls.verify_roots = ingress.policy.verify_roots.clone();
                UpstreamProtocol::Tls(tls)
            }
            other => other,
        })
        .unwrap_or_default()
}

fn mode_policy(
    ingress: &IngressSide<'_>,
    backend: &Resolved<'_>,
    service: ServiceName<'_>,
    diagnostics: &mut Diagnostics,
) -> Arc<RoutePolicy> {
    match backend.mode {
        BackendMode::Endpoints => endpoints_policy(ingress, backend, service, diagnostics),
        BackendMode::ServiceUpstream => {
            service_upstream_policy(ingress, backend, service, diagnostics)
        }
        BackendMode::ExternalName => {
            let reason = format!(
                "ignored: Service {} is an ExternalName Service, which has no ClusterIP",
                service.name
            );
            fallback_ignored(ingress, backend, service, &reason, diagnostics);
            ingress.base.clone()
        }
    }
}

fn endpoints_policy(
    ingress: &IngressSide<'_>,
    backend: &Resolved<'_>,
    service: ServiceName<'_>,
    diagnostics: &mut Diagnostics,
) -> Arc<RoutePolicy> {
    let sticky = service_sticky(ingress, backend, service, diagnostics);
    let fallback = fallback(ingress, backend, service, diagnostics);
    if sticky.is_none() && fallback.is_none() {
        return ingress.base.clone();
    }
    let mut policy = RoutePolicy::clone(ingress.base);
    if let Some(cookie) = sticky {
        policy.session = Some(SessionAffinity::Cookie(cookie));
    }
    policy.fallback = fallback;
    Arc::new(policy)
}

/// The Service's sticky cookie, unless the Ingress sets its own affinity (the Ingress wins).
fn service_sticky(
    ingress: &IngressSide<'_>,
    backend: &Resolved<'_>,
    service: ServiceName<'_>,
    diagnostics: &mut Diagnostics,
) -> Option<sluice_routing::StickyCookie> {
    let cookie = backend.wishes.sticky.as_ref()?;
    let Some(field) = &ingress.policy.affinity else {
        return Some(cookie.clone());
    };
    diagnostics.info(
        &ingress.object(),
        field.clone(),
        format!(
            "takes precedence over the sticky cookie {STICKY_COOKIE} of Service {}/{} for this Ingress's routes",
            service.namespace, service.name
        ),
    );
    None
}

/// The ClusterIP fallback, when the Ingress or the Service asks for it and the Service has a
/// ClusterIP.
fn fallback(
    ingress: &IngressSide<'_>,
    backend: &Resolved<'_>,
    service: ServiceName<'_>,
    diagnostics: &mut Diagnostics,
) -> Option<Endpoint> {
    let object = if ingress.service_upstream == ServiceUpstream::Fallback {
        ingress.object()
    } else if backend.wishes.service_upstream == ServiceUpstream::Fallback {
        service.object()
    } else {
        return None;
    };
    let (cluster_service, port) = backend.cluster?;
    let field = annotation_field(SLUICE_SERVICE_UPSTREAM);
    let usage = ClusterIpUse {
        what: "the service-upstream fallback",
        field: &field,
        consequence: "there is no fallback",
    };
    let endpoint = cluster_ip_endpoint(cluster_service, port, &object, &usage, diagnostics)?;
    diagnostics.info(
        &object,
        field,
        format!(
            "service-upstream fallback: pod endpoints are used, and the ClusterIP only when no endpoint is left or every endpoint attempt failed (Service {}, {endpoint})",
            service.name
        ),
    );
    Some(endpoint)
}

/// Round robin over the one ClusterIP and no sticky cookie; every annotation that would choose
/// the pod is a warning.
fn service_upstream_policy(
    ingress: &IngressSide<'_>,
    backend: &Resolved<'_>,
    service: ServiceName<'_>,
    diagnostics: &mut Diagnostics,
) -> Arc<RoutePolicy> {
    let ingress_object = || ingress.object();
    for field in &ingress.policy.endpoint_choice {
        diagnostics.warning(&ingress_object(), field.clone(), SINGLE_BACKEND);
    }
    if backend.wishes.sticky.is_some() {
        diagnostics.warning(
            &service.object(),
            annotation_field(STICKY_COOKIE),
            format!(
                "{SINGLE_BACKEND} (for {} {}/{})",
                ingress.kind, ingress.key.namespace, ingress.key.name
            ),
        );
    }
    let reason = format!(
        "ignored: routes to Service {} are in service-upstream mode, so every request already goes to its ClusterIP",
        service.name
    );
    fallback_ignored(ingress, backend, service, &reason, diagnostics);
    let base = ingress.base;
    if base.balancer == Balancer::RoundRobin && base.session.is_none() {
        return base.clone();
    }
    Arc::new(RoutePolicy {
        balancer: Balancer::RoundRobin,
        session: None,
        ..RoutePolicy::clone(base)
    })
}

/// A warning on each `fallback` annotation (Ingress or Service) that this backend cannot honour.
fn fallback_ignored(
    ingress: &IngressSide<'_>,
    backend: &Resolved<'_>,
    service: ServiceName<'_>,
    reason: &str,
    diagnostics: &mut Diagnostics,
) {
    let field = || annotation_field(SLUICE_SERVICE_UPSTREAM);
    if ingress.service_upstream == ServiceUpstream::Fallback {
        diagnostics.warning(&ingress.object(), field(), reason);
    }
    if backend.wishes.service_upstream == ServiceUpstream::Fallback {
        let message = format!(
            "{reason} (for {} {}/{})",
            ingress.kind, ingress.key.namespace, ingress.key.name
        );
        diagnostics.warning(&service.object(), field(), message);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use sluice_routing::RoutePolicy;

    use crate::compile::{compile, CompileOptions};
    use crate::manifest::{parse_manifest, Document, Format};
    use crate::snapshot::Snapshot;

    fn ingress(name: &str, annotations: &str) -> String {
        format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, annotations: {{{annotations}}}}}\nspec:\n  ingressClassName: sluice\n  rules:\n  - host: {name}.test\n    http:\n      paths:\n      - {{path: /a, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}\n      - {{path: /b, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}\n---\n"
        )
    }

    /// Each Ingress's routes, by Ingress name.
    fn policies(text: &str) -> Vec<(String, Vec<Arc<RoutePolicy>>)> {
        let objects = parse_manifest(text, Format::Yaml)
            .unwrap()
            .into_iter()
            .filter_map(|document| match document {
                Document::Object(object) => Some(object),
                Document::Skipped { .. } => None,
            });
        let compiled = compile(&Snapshot::from_objects(objects), &CompileOptions::default());
        let mut by_ingress: Vec<(String, Vec<Arc<RoutePolicy>>)> = Vec::new();
        for routes in compiled.table.hosts().into_values() {
            let name = routes[0].ingress.to_string();
            let list = routes.iter().map(|route| route.policy.clone()).collect();
            by_ingress.push((name, list));
        }
        by_ingress.sort_by(|a, b| a.0.cmp(&b.0));
        by_ingress
    }

    #[test]
    fn policies_are_shared_per_ingress_and_by_every_unannotated_ingress() {
        let service = "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {clusterIP: 10.96.0.10, ports: [{port: 80}]}\n";
        let text = ingress("a", "")
            + &ingress("b", "")
            + &ingress("c", "sluice.dev/load-balance: ewma")
            + service;
        let by_ingress = policies(&text);
        let [(_, a), (_, b), (_, c)] = by_ingress.as_slice() else {
            panic!("three Ingresses expected: {by_ingress:?}");
        };
        let shared = &a[0];
        for policy in a.iter().chain(b) {
            assert!(
                Arc::ptr_eq(shared, policy),
                "unannotated routes share one policy"
            );
        }
        assert!(
            Arc::ptr_eq(&c[0], &c[1]),
            "one policy per Ingress and backend"
        );
        assert!(!Arc::ptr_eq(shared, &c[0]));
    }

    #[test]
    fn the_opentelemetry_annotations_turn_tracing_off_or_distrust_the_clients_trace() {
        use sluice_routing::RouteTracing;
        let service = "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {clusterIP: 10.96.0.10, ports: [{port: 80}]}\n";
        let text = ingress(
            "a",
            "nginx.ingress.kubernetes.io/enable-opentelemetry: \"false\"",
        ) + &ingress(
            "b",
            "nginx.ingress.kubernetes.io/opentelemetry-trust-incoming-span: \"false\"",
        ) + &ingress(
            "c",
            "nginx.ingress.kubernetes.io/enable-opentelemetry: \"true\"",
        ) + &ingress(
            "d",
            "nginx.ingress.kubernetes.io/enable-opentelemetry: maybe",
        ) + service;
        let by_ingress = policies(&text);
        let found: Vec<RouteTracing> = by_ingress.iter().map(|(_, r)| r[0].tracing).collect();
        let off = RouteTracing {
            off: true,
            distrust_incoming: false,
        };
        let distrust = RouteTracing {
            off: false,
            distrust_incoming: true,
        };
        assert_eq!(
            found,
            [
                off,
                distrust,
                RouteTracing::default(),
                RouteTracing::default()
            ]
        );
    }

    #[test]
    fn compression_is_read_from_sluice_dev_compression_and_a_bad_list_keeps_the_default() {
        use sluice_routing::{Codings, Compression};
        let service = "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {clusterIP: 10.96.0.10, ports: [{port: 80}]}\n";
        let text = ingress("a", "sluice.dev/compression: \"gzip, br\"")
            + &ingress("b", "sluice.dev/compression: \"off\"")
            + &ingress("c", "sluice.dev/compression: deflate")
            + &ingress("d", "nginx.ingress.kubernetes.io/compression: gzip")
            + service;
        let by_ingress = policies(&text);
        let found: Vec<Compression> = by_ingress.iter().map(|(_, r)| r[0].compression).collect();
        let gzip_br = Codings::parse("gzip,br").unwrap_or_default();
        assert_eq!(
            found,
            [
                Compression::Codings(gzip_br),
                Compression::Codings(Codings::NONE),
                Compression::Default,
                Compression::Default,
            ]
        );
    }

    #[test]
    fn the_upstream_protocol_comes_from_the_ingress_then_the_service_then_app_protocol() {
        use sluice_routing::UpstreamProtocol;
        let services = "apiVersion: v1\nkind: Service\nmetadata: {name: web, annotations: {traefik.ingress.kubernetes.io/service.serversscheme: h2c}}\nspec: {clusterIP: 10.96.0.10, ports: [{port: 80, appProtocol: https}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: native}\nspec: {clusterIP: 10.96.0.11, ports: [{port: 80, appProtocol: kubernetes.io/h2c}]}\n---\n";
        let text = ingress("a", "nginx.ingress.kubernetes.io/backend-protocol: GRPCS")
            + &ingress("b", "")
            + &ingress("c", "").replace("name: web", "name: native")
            + services;
        let by_ingress = policies(&text);
        let protocols: Vec<&UpstreamProtocol> = by_ingress
            .iter()
            .map(|(_, routes)| &routes[0].upstream)
            .collect();
        assert!(
            matches!(protocols[0], UpstreamProtocol::Tls(tls) if tls.http2_only),
            "backend-protocol wins: {protocols:?}"
        );
        assert_eq!(
            protocols[1],
            &UpstreamProtocol::H2c,
            "then Traefik's serversscheme"
        );
        assert_eq!(protocols[2], &UpstreamProtocol::H2c, "then appProtocol");
    }
}
