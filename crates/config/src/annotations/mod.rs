//! Annotations sluice understands, parsed into typed values with a diagnostic for every one it ignores.

mod access;
mod affinity;
mod auth;
mod balance;
mod canary;
mod controllers;
mod cors;
mod edits;
mod keys;
mod policy;
mod refusals;
mod retry;
pub(crate) mod support;
mod template;
mod tls;
mod traefik;
mod values;

use std::borrow::Cow;
use std::collections::BTreeMap;

use sluice_routing::{StickyCookie, UpstreamProtocol};

use crate::diagnostic::{Diagnostics, ObjectRef};
use values::{parse_bool, Found, Report};

pub(crate) use access::ip_range;
pub use auth::AuthSecret;
pub use controllers::{controller_of, OTHER_CONTROLLERS, USE_ANNOTATION};
#[cfg(test)]
pub(crate) use keys::nginx_names;
pub(crate) use keys::PREFIXES;
pub(crate) use policy::ingress_policy;
pub use policy::IngressPolicy;
pub use refusals::IGNORE_SNIPPETS;
pub use retry::UNLIMITED_TRIES;
pub(crate) use tls::app_protocol;
pub use tls::{ClientAuthRequest, ProxySslVerify, SiteAnnotations};
pub use traefik::{default_name as default_service_cookie_name, STICKY_COOKIE};
pub(crate) use values::annotation_field;
pub use values::parse_size;

/// The legacy per-Ingress class annotation, superseded by `spec.ingressClassName`.
pub const INGRESS_CLASS: &str = "kubernetes.io/ingress.class";
/// Marks an IngressClass as the cluster default.
pub const DEFAULT_CLASS: &str = "ingressclass.kubernetes.io/is-default-class";

/// sluice's own service-upstream annotation, the only one that also takes `"fallback"`.
pub const SLUICE_SERVICE_UPSTREAM: &str = "sluice.dev/service-upstream";
/// Ingress annotations that send the Ingress's traffic to each Service's ClusterIP.
pub const INGRESS_SERVICE_UPSTREAM: [&str; 3] = [
    "nginx.ingress.kubernetes.io/service-upstream",
    "ingress.kubernetes.io/service-upstream",
    SLUICE_SERVICE_UPSTREAM,
];
/// Service annotations that send all traffic for the Service to its ClusterIP.
pub const SERVICE_SERVICE_UPSTREAM: [&str; 2] = [
    "traefik.ingress.kubernetes.io/service.nativelb",
    SLUICE_SERVICE_UPSTREAM,
];

/// Annotation prefixes of ingress controllers; keys under them that sluice does not know are
/// reported, so nobody migrates believing an nginx or Traefik setting still applies.
const CONTROLLER_PREFIXES: [&str; 4] = [
    "sluice.dev/",
    "nginx.ingress.kubernetes.io/",
    "ingress.kubernetes.io/",
    "traefik.ingress.kubernetes.io/",
];

/// What the service-upstream annotations ask for, weakest first: of several, the strongest wins.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum ServiceUpstream {
    /// Pod endpoints (no annotation, or `"false"`).
    #[default]
    Off,
    /// Pod endpoints, and the ClusterIP when none is left or every attempt failed
    /// (`sluice.dev/service-upstream: fallback`).
    Fallback,
    /// Every request to the ClusterIP (`"true"`).
    On,
}

/// What an Ingress's annotations ask of sluice, besides its routes' policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IngressAnnotations {
    /// Set by any of [`INGRESS_SERVICE_UPSTREAM`].
    pub service_upstream: ServiceUpstream,
    /// The legacy [`INGRESS_CLASS`] annotation.
    pub legacy_class: Option<String>,
    /// Passthrough and client certificates.
    pub site: SiteAnnotations,
}

/// What a Service's annotations ask of sluice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceAnnotations {
    /// Traefik's `service.middlewares`: applied to every route to the Service.
    pub middlewares: Option<String>,
    /// Set by any of [`SERVICE_SERVICE_UPSTREAM`].
    pub service_upstream: ServiceUpstream,
    /// Traefik's sticky cookie ([`STICKY_COOKIE`]), for every route to the Service.
    pub sticky: Option<StickyCookie>,
    /// Traefik's `service.serversscheme`: the protocol spoken to the pods.
    pub scheme: Option<UpstreamProtocol>,
}

pub(crate) type Annotations = BTreeMap<String, String>;

/// The prefix of Traefik's Kubernetes Ingress annotations.
pub const TRAEFIK_PREFIX: &str = "traefik.ingress.kubernetes.io/";
/// Traefik's middlewares for an Ingress's routes (`NAMESPACE-NAME@kubernetescrd`, comma-separated).
pub const ROUTER_MIDDLEWARES: &str = "traefik.ingress.kubernetes.io/router.middlewares";
/// Traefik's middlewares for every route to a Service, on the Service.
pub const SERVICE_MIDDLEWARES: &str = "traefik.ingress.kubernetes.io/service.middlewares";

/// The annotations with every Traefik key's part after the prefix in lowercase: Traefik's
/// decoder matches them case-insensitively (`router.entryPoints` is `router.entrypoints`).
/// Borrowed when no key needs folding.
pub fn fold_traefik_keys(annotations: &Annotations) -> Cow<'_, Annotations> {
    let folds = |key: &str| {
        key.strip_prefix(TRAEFIK_PREFIX)
            .is_some_and(|rest| rest.bytes().any(|b| b.is_ascii_uppercase()))
    };
    if !annotations.keys().any(|key| folds(key)) {
        return Cow::Borrowed(annotations);
    }
    let folded = annotations
        .iter()
        .map(|(key, value)| match key.strip_prefix(TRAEFIK_PREFIX) {
            Some(rest) => (
                format!("{TRAEFIK_PREFIX}{}", rest.to_ascii_lowercase()),
                value.clone(),
            ),
            None => (key.clone(), value.clone()),
        })
        .collect();
    Cow::Owned(folded)
}

/// Reads an Ingress's annotations, reporting unknown controller annotations and invalid values.
pub(crate) fn ingress_annotations(
    annotations: Option<&Annotations>,
    namespace: &str,
    object: &ObjectRef,
    diagnostics: &mut Diagnostics,
) -> IngressAnnotations {
    let Some(annotations) = annotations else {
        return IngressAnnotations::default();
    };
    let annotations = &*fold_traefik_keys(annotations);
    let known = |key: &str| {
        INGRESS_SERVICE_UPSTREAM.contains(&key)
            || keys::classify(key).is_some()
            || key == tls::TRAEFIK_ROUTER_TLS
            || key == tls::TRAEFIK_ROUTER_ENTRYPOINTS
            || key == ROUTER_MIDDLEWARES
            || refusals::is_refusal_key(key)
    };
    report_unknown(annotations, known, object, diagnostics);
    controllers::report_other_controllers(annotations, is_nginx_name, object, diagnostics);
    let mut report = Report {
        object,
        diagnostics,
    };
    let keys = keys::PolicyKeys::scan_quietly(annotations);
    IngressAnnotations {
        service_upstream: service_upstream(annotations, &INGRESS_SERVICE_UPSTREAM, &mut report),
        legacy_class: annotations.get(INGRESS_CLASS).cloned(),
        site: tls::site_annotations(&keys, namespace, &mut report),
    }
}

/// Reads the annotations of the Service `namespace/name`, reporting unknown sluice and Traefik
/// service annotations.
pub(crate) fn service_annotations(
    annotations: Option<&Annotations>,
    (namespace, name): (&str, &str),
    object: &ObjectRef,
    diagnostics: &mut Diagnostics,
) -> ServiceAnnotations {
    let Some(annotations) = annotations else {
        return ServiceAnnotations::default();
    };
    let annotations = &*fold_traefik_keys(annotations);
    let relevant: Annotations = annotations
        .iter()
        .filter(|(key, _)| {
            key.starts_with("sluice.dev/")
                || key.starts_with("traefik.ingress.kubernetes.io/service.")
        })
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let known = |key: &str| {
        SERVICE_SERVICE_UPSTREAM.contains(&key)
            || traefik::STICKY_KEYS.contains(&key)
            || key == tls::TRAEFIK_SERVERS_SCHEME
            || key == SERVICE_MIDDLEWARES
    };
    report_unknown(&relevant, known, object, diagnostics);
    let mut report = Report {
        object,
        diagnostics,
    };
    ServiceAnnotations {
        middlewares: annotations.get(SERVICE_MIDDLEWARES).cloned(),
        service_upstream: service_upstream(annotations, &SERVICE_SERVICE_UPSTREAM, &mut report),
        sticky: traefik::service_sticky(annotations, namespace, name, &mut report),
        scheme: tls::servers_scheme(annotations, &mut report),
    }
}

/// Whether an IngressClass carries `is-default-class: "true"`: exactly `"true"`, as the
/// Kubernetes admission plugin that assigns the default class compares it.
pub(crate) fn is_default_class(annotations: Option<&Annotations>) -> bool {
    annotations
        .and_then(|a| a.get(DEFAULT_CLASS))
        .is_some_and(|value| value == "true")
}

/// Whether ingress-nginx has an annotation of this name (without its prefix): one sluice
/// reads, or one the migration table lists.
fn is_nginx_name(name: &str) -> bool {
    keys::classify(&format!("nginx.ingress.kubernetes.io/{name}")).is_some()
        || name == "service-upstream"
        || support::is_ingress_nginx_name(name)
}

fn report_unknown(
    annotations: &Annotations,
    known: impl Fn(&str) -> bool,
    object: &ObjectRef,
    diagnostics: &mut Diagnostics,
) {
    for key in annotations.keys() {
        let controller_owned = CONTROLLER_PREFIXES
            .iter()
            .any(|prefix| key.starts_with(prefix));
        if !controller_owned || known(key) {
            continue;
        }
        let other = key
            .strip_prefix("ingress.kubernetes.io/")
            .is_some_and(|name| !is_nginx_name(name));
        if other {
            continue;
        }
        diagnostics.warning(
            object,
            annotation_field(key),
            "annotation is not supported by sluice and is ignored",
        );
    }
}

/// The strongest of the service-upstream `keys` set. An invalid value is a warning and counts
/// as `"false"`; a `fallback` that a `"true"` overrides is a warning too.
fn service_upstream(
    annotations: &Annotations,
    keys: &[&str],
    report: &mut Report<'_>,
) -> ServiceUpstream {
    let mut strongest = ServiceUpstream::Off;
    let mut fallback = None;
    for key in keys {
        let Some(value) = annotations.get(*key) else {
            continue;
        };
        let found = Found { key, value };
        let sluice = *key == SLUICE_SERVICE_UPSTREAM;
        let expected = if sluice {
            "\"true\", \"false\" or \"fallback\""
        } else {
            "\"true\" or \"false\""
        };
        let parsed = report.parse(Some(found), expected, "treated as false", |value| {
            parse_service_upstream(value, sluice)
        });
        if parsed == Some(ServiceUpstream::Fallback) {
            fallback = Some(found);
        }
        strongest = strongest.max(parsed.unwrap_or_default());
    }
    if let (ServiceUpstream::On, Some(found)) = (strongest, fallback) {
        report.warning(
            found,
            "ignored: another service-upstream annotation of this object is \"true\", which sends every request to the ClusterIP",
        );
    }
    strongest
}

fn parse_service_upstream(value: &str, fallback_allowed: bool) -> Option<ServiceUpstream> {
    if fallback_allowed && value.eq_ignore_ascii_case("fallback") {
        return Some(ServiceUpstream::Fallback);
    }
    parse_bool(value).map(|on| {
        if on {
            ServiceUpstream::On
        } else {
            ServiceUpstream::Off
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_is_a_value_of_the_sluice_key_only() {
        assert_eq!(
            parse_service_upstream("fallback", true),
            Some(ServiceUpstream::Fallback)
        );
        assert_eq!(parse_service_upstream("fallback", false), None);
        assert_eq!(
            parse_service_upstream("True", false),
            Some(ServiceUpstream::On)
        );
    }

    #[test]
    fn the_strongest_service_upstream_value_wins() {
        let object = ObjectRef::new("Ingress", Some("default"), "web");
        let mut diagnostics = Diagnostics::default();
        let annotations: Annotations = [
            ("nginx.ingress.kubernetes.io/service-upstream", "true"),
            (SLUICE_SERVICE_UPSTREAM, "fallback"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let mut report = Report {
            object: &object,
            diagnostics: &mut diagnostics,
        };
        let mode = service_upstream(&annotations, &INGRESS_SERVICE_UPSTREAM, &mut report);
        assert_eq!(mode, ServiceUpstream::On);
        assert_eq!(diagnostics.into_sorted().len(), 1);
    }
}
