//! Annotations sluice understands, parsed into typed values with a diagnostic for every one it ignores.

use std::collections::BTreeMap;

use crate::diagnostic::{Diagnostics, ObjectRef};

/// The legacy per-Ingress class annotation, superseded by `spec.ingressClassName`.
pub const INGRESS_CLASS: &str = "kubernetes.io/ingress.class";
/// Marks an IngressClass as the cluster default.
pub const DEFAULT_CLASS: &str = "ingressclass.kubernetes.io/is-default-class";

/// Ingress annotations that send the Ingress's traffic to each Service's ClusterIP.
pub const INGRESS_SERVICE_UPSTREAM: [&str; 3] = [
    "nginx.ingress.kubernetes.io/service-upstream",
    "ingress.kubernetes.io/service-upstream",
    "sluice.dev/service-upstream",
];
/// Service annotations that send all traffic for the Service to its ClusterIP.
pub const SERVICE_SERVICE_UPSTREAM: [&str; 2] = [
    "traefik.ingress.kubernetes.io/service.nativelb",
    "sluice.dev/service-upstream",
];

/// Annotation prefixes of ingress controllers; keys under them that sluice does not know are
/// reported, so nobody migrates believing an nginx or Traefik setting still applies.
const CONTROLLER_PREFIXES: [&str; 4] = [
    "sluice.dev/",
    "nginx.ingress.kubernetes.io/",
    "ingress.kubernetes.io/",
    "traefik.ingress.kubernetes.io/",
];

/// What an Ingress's annotations ask of sluice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IngressAnnotations {
    /// Set by any of [`INGRESS_SERVICE_UPSTREAM`].
    pub service_upstream: bool,
    /// The legacy [`INGRESS_CLASS`] annotation.
    pub legacy_class: Option<String>,
}

/// What a Service's annotations ask of sluice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceAnnotations {
    /// Set by any of [`SERVICE_SERVICE_UPSTREAM`].
    pub service_upstream: bool,
}

type Annotations = BTreeMap<String, String>;

/// Reads an Ingress's annotations, reporting unknown controller annotations and invalid values.
pub(crate) fn ingress_annotations(
    annotations: Option<&Annotations>,
    object: &ObjectRef,
    diagnostics: &mut Diagnostics,
) -> IngressAnnotations {
    let Some(annotations) = annotations else {
        return IngressAnnotations::default();
    };
    let known = |key: &str| INGRESS_SERVICE_UPSTREAM.contains(&key);
    report_unknown(annotations, known, object, diagnostics);
    IngressAnnotations {
        service_upstream: any_true(annotations, &INGRESS_SERVICE_UPSTREAM, object, diagnostics),
        legacy_class: annotations.get(INGRESS_CLASS).cloned(),
    }
}

/// Reads a Service's annotations, reporting unknown sluice and Traefik service annotations.
pub(crate) fn service_annotations(
    annotations: Option<&Annotations>,
    object: &ObjectRef,
    diagnostics: &mut Diagnostics,
) -> ServiceAnnotations {
    let Some(annotations) = annotations else {
        return ServiceAnnotations::default();
    };
    let relevant: Annotations = annotations
        .iter()
        .filter(|(key, _)| {
            key.starts_with("sluice.dev/")
                || key.starts_with("traefik.ingress.kubernetes.io/service.")
        })
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    report_unknown(
        &relevant,
        |key| SERVICE_SERVICE_UPSTREAM.contains(&key),
        object,
        diagnostics,
    );
    ServiceAnnotations {
        service_upstream: any_true(annotations, &SERVICE_SERVICE_UPSTREAM, object, diagnostics),
    }
}

/// Whether an IngressClass carries `is-default-class: "true"`: exactly `"true"`, as the
/// Kubernetes admission plugin that assigns the default class compares it.
pub(crate) fn is_default_class(annotations: Option<&Annotations>) -> bool {
    annotations
        .and_then(|a| a.get(DEFAULT_CLASS))
        .is_some_and(|value| value == "true")
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
        if controller_owned && !known(key) {
            diagnostics.warning(
                object,
                annotation_field(key),
                "annotation is not supported by sluice and is ignored",
            );
        }
    }
}

fn any_true(
    annotations: &Annotations,
    keys: &[&str],
    object: &ObjectRef,
    diagnostics: &mut Diagnostics,
) -> bool {
    let mut enabled = false;
    for key in keys {
        let Some(value) = annotations.get(*key) else {
            continue;
        };
        match parse_bool(value) {
            Some(value) => enabled |= value,
            None => diagnostics.warning(
                object,
                annotation_field(key),
                format!(
                    "invalid value {value:?}: expected \"true\" or \"false\"; treated as false"
                ),
            ),
        }
    }
    enabled
}

fn annotation_field(key: &str) -> String {
    format!("metadata.annotations[{key}]")
}

/// Booleans as ingress-nginx and Traefik accept them (Go's `strconv.ParseBool`).
fn parse_bool(value: &str) -> Option<bool> {
    match value.trim() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_follow_go_parse_bool() {
        assert_eq!(parse_bool("True"), Some(true));
        assert_eq!(parse_bool("0"), Some(false));
        assert_eq!(parse_bool("yes"), None);
    }
}
