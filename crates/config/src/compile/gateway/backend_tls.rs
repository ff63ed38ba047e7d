//! BackendTLSPolicy: which policy applies to a Service port (per target the oldest, a port's own before the whole Service's), the TLS it asks for, and its status on each Gateway whose routes reach the Service.

use std::collections::{BTreeMap, BTreeSet};

use rustls::pki_types::CertificateDer;
use sluice_routing::{SubjectName, UpstreamTls};

use super::*;
use crate::gateway::status::{AncestorStatus, ListenerSetStatus, PolicyStatus};
use crate::gateway::{BackendTlsPolicy, ObjectReference};

/// A Service port a policy targets: namespace, Service and, when the target names one, the
/// port's name.
type Target = (String, String, Option<String>);

/// Every BackendTLSPolicy resolved: what each asks for, and which wins each target.
#[derive(Default)]
pub(crate) struct BackendTlsPolicies<'s> {
    policies: Vec<Resolved<'s>>,
    /// The policy (index into `policies`) that holds each target.
    winners: BTreeMap<Target, usize>,
}

/// One policy, resolved.
struct Resolved<'s> {
    key: &'s ObjectKey,
    policy: &'s BackendTlsPolicy,
    /// The TLS its targets are spoken to with, or why there is none (no valid CA).
    tls: Result<UpstreamTls, String>,
    /// Its `Accepted` and `ResolvedRefs` conditions.
    conditions: Vec<Condition>,
}

impl<'s> BackendTlsPolicies<'s> {
    /// Resolves every policy of `snapshot`, oldest first: an older policy keeps a target a
    /// younger one names too, and the younger one is `Conflicted` if it keeps none.
    pub(crate) fn resolve(snapshot: &'s Snapshot) -> Self {
        let mut resolved = Self::default();
        for (key, policy) in oldest_first(&snapshot.backend_tls_policies) {
            let index = resolved.policies.len();
            let mut won = false;
            let mut lost = false;
            for target in targets(key, policy) {
                match resolved.winners.contains_key(&target) {
                    true => lost = true,
                    false => {
                        resolved.winners.insert(target, index);
                        won = true;
                    }
                }
            }
            let (tls, mut conditions) = validate(snapshot, key, policy);
            if lost && !won {
                let message = "an older BackendTLSPolicy targets the same Service port";
                replace(
                    &mut conditions,
                    Condition::new("Accepted", false, "Conflicted", message),
                );
            }
            resolved.policies.push(Resolved {
                key,
                policy,
                tls,
                conditions,
            });
        }
        resolved
    }

    /// The TLS for a backendRef to `(namespace, service, port)`: `None` when no policy
    /// targets it, `Err` with why it is refused when the policy that does has no valid CA.
    pub(super) fn for_backend(
        &self,
        services: &ServiceIndex<'_>,
        (namespace, service, port): (&str, &str, u16),
    ) -> Option<Result<UpstreamTls, String>> {
        let port_name = port_name(services, (namespace, service), port);
        let target = |section: Option<String>| (namespace.to_owned(), service.to_owned(), section);
        let index = port_name
            .and_then(|name| self.winners.get(&target(Some(name))))
            .or_else(|| self.winners.get(&target(None)))?;
        let resolved = &self.policies[*index];
        Some(resolved.tls.clone().map_err(|why| {
            format!(
                "BackendTLSPolicy {}/{} has no valid CA certificate ({why}); its Service is not reached in plaintext",
                resolved.key.namespace, resolved.key.name
            )
        }))
    }

    /// The policies that name `(namespace, service)` (any of its ports, or `port_name`).
    fn naming(
        &self,
        (namespace, service): (&str, &str),
        port_name: Option<&str>,
    ) -> impl Iterator<Item = usize> + '_ {
        let port_name = port_name.map(str::to_owned);
        let (namespace, service) = (namespace.to_owned(), service.to_owned());
        self.policies
            .iter()
            .enumerate()
            .filter(move |(_, resolved)| {
                targets(resolved.key, resolved.policy).any(|(ns, svc, section)| {
                    ns == namespace
                        && svc == service
                        && section.is_none_or(|section| Some(&section) == port_name.as_ref())
                })
            })
            .map(|(index, _)| index)
    }

    /// The status of every policy: one ancestor per Gateway whose accepted routes have a
    /// backendRef to a Service port the policy names, with the policy's conditions.
    pub(super) fn statuses(
        &self,
        (routes, statuses, sets): (&[RouteInput<'_>], &[RouteStatus], &[ListenerSetStatus]),
        services: &ServiceIndex<'_>,
        controller: &str,
    ) -> Vec<PolicyStatus> {
        let mut ancestors: Vec<BTreeSet<(String, String)>> =
            vec![BTreeSet::new(); self.policies.len()];
        for status in statuses {
            let Some(route) = routes.iter().find(|route| {
                route.name.kind == status.kind
                    && route.name.key.namespace == status.namespace
                    && route.name.key.name == status.name
            }) else {
                continue;
            };
            let parents = &status.parents;
            let gateways: Vec<(String, String)> = parents
                .iter()
                .filter(|parent| {
                    parent
                        .conditions
                        .iter()
                        .any(|c| c.condition_type == "Accepted" && c.holds())
                })
                .filter_map(|parent| {
                    let reference = &parent.parent_ref;
                    let namespace = reference
                        .namespace
                        .clone()
                        .unwrap_or_else(|| route.name.key.namespace.clone());
                    match reference.kind.as_deref() {
                        // A ListenerSet's routes reach the Services through its Gateway.
                        Some("ListenerSet") => sets
                            .iter()
                            .find(|set| set.namespace == namespace && set.name == reference.name)
                            .and_then(|set| set.gateway.split_once('/'))
                            .map(|(ns, name)| (ns.to_owned(), name.to_owned())),
                        _ => Some((namespace, reference.name.clone())),
                    }
                })
                .collect();
            if gateways.is_empty() {
                continue;
            }
            for backend_ref in route.spec.rules.iter().flat_map(|rule| &rule.backend_refs) {
                let target = &backend_ref.backend;
                let namespace = target
                    .namespace
                    .as_deref()
                    .unwrap_or(&route.name.key.namespace);
                let port_name = target
                    .port
                    .and_then(|port| port_name(services, (namespace, &target.name), port));
                for index in self.naming((namespace, &target.name), port_name.as_deref()) {
                    ancestors[index].extend(gateways.iter().cloned());
                }
            }
        }
        let mut statuses: Vec<PolicyStatus> = self
            .policies
            .iter()
            .zip(ancestors)
            .map(|(resolved, gateways)| {
                let generation = resolved.policy.metadata.generation;
                PolicyStatus {
                    kind: "BackendTLSPolicy".to_owned(),
                    namespace: resolved.key.namespace.clone(),
                    name: resolved.key.name.clone(),
                    generation,
                    targets: targets(resolved.key, resolved.policy)
                        .map(|(namespace, service, section)| match section {
                            Some(section) => format!("Service {namespace}/{service}:{section}"),
                            None => format!("Service {namespace}/{service}"),
                        })
                        .collect(),
                    ancestors: gateways
                        .into_iter()
                        .map(|(namespace, name)| AncestorStatus {
                            ancestor_ref: ParentReference {
                                group: Some(GATEWAY_GROUP.to_owned()),
                                kind: Some("Gateway".to_owned()),
                                namespace: Some(namespace),
                                name,
                                ..ParentReference::default()
                            },
                            controller_name: controller.to_owned(),
                            conditions: observed(resolved.conditions.clone(), generation),
                        })
                        .collect(),
                }
            })
            .collect();
        statuses.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        statuses
    }

    /// An error per policy that is not accepted, a warning per reference that does not
    /// resolve on one that is.
    pub(super) fn report(&self, diagnostics: &mut Diagnostics) {
        for resolved in &self.policies {
            let object = ObjectRef::new(
                "BackendTLSPolicy",
                Some(&resolved.key.namespace),
                &resolved.key.name,
            );
            let failing = |kind: &str| {
                resolved
                    .conditions
                    .iter()
                    .find(|c| c.condition_type == kind && !c.holds())
            };
            if let Some(accepted) = failing("Accepted") {
                let message = format!("{}: {}", accepted.reason, accepted.message);
                match accepted.reason.as_str() {
                    // The older policy applies: nothing is left unprotected.
                    "Conflicted" => diagnostics.warning(&object, "spec.targetRefs", message),
                    _ => diagnostics.error(&object, "spec.validation", message),
                }
            } else if let Some(refs) = failing("ResolvedRefs") {
                let message = format!("{}: {}; the other CAs are used", refs.reason, refs.message);
                diagnostics.warning(&object, "spec.validation.caCertificateRefs", message);
            }
        }
    }
}

/// The name of a Service's port `port`.
fn port_name(
    services: &ServiceIndex<'_>,
    (namespace, service): (&str, &str),
    port: u16,
) -> Option<String> {
    services
        .get(namespace, service)
        .and_then(|service| service.spec.as_ref())
        .and_then(|spec| spec.ports.as_ref())
        .and_then(|ports| ports.iter().find(|p| p.port == i32::from(port)))
        .and_then(|port| port.name.clone())
}

/// The Service ports a policy targets (other kinds of target are not sluice's to serve).
fn targets<'p>(
    key: &'p ObjectKey,
    policy: &'p BackendTlsPolicy,
) -> impl Iterator<Item = Target> + 'p {
    policy
        .spec
        .target_refs
        .iter()
        .filter(|target| target.group.is_empty() && target.kind == "Service")
        .map(|target| {
            (
                key.namespace.clone(),
                target.name.clone(),
                target.section_name.clone(),
            )
        })
}

/// The TLS a policy asks for and its `Accepted` and `ResolvedRefs` conditions. A reference
/// that does not resolve makes `ResolvedRefs` false; with no valid CA at all the policy is
/// not accepted, and its Services answer 5xx rather than be reached without verification.
fn validate(
    snapshot: &Snapshot,
    key: &ObjectKey,
    policy: &BackendTlsPolicy,
) -> (Result<UpstreamTls, String>, Vec<Condition>) {
    let validation = &policy.spec.validation;
    let system = validation.well_known_ca_certificates.as_deref() == Some("System");
    let mut roots = Vec::new();
    let mut sources = Vec::new();
    let mut unresolved: Option<(&str, String)> = None;
    for reference in &validation.ca_certificate_refs {
        match ca_certificates(snapshot, key, reference) {
            Ok(loaded) => {
                roots.extend(loaded);
                sources.push(format!(
                    "{} {}/{}",
                    reference.kind.as_deref().unwrap_or("ConfigMap"),
                    key.namespace,
                    reference.name
                ));
            }
            Err(problem) => {
                unresolved.get_or_insert(problem);
            }
        }
    }
    if let Some(other) = validation
        .well_known_ca_certificates
        .as_deref()
        .filter(|w| *w != "System")
    {
        unresolved.get_or_insert((
            "InvalidKind",
            format!("wellKnownCACertificates {other:?} is not System"),
        ));
    }
    let resolved_refs = match &unresolved {
        None => Condition::new(
            "ResolvedRefs",
            true,
            "ResolvedRefs",
            "every CA certificate reference resolves",
        ),
        Some((reason, message)) => Condition::new("ResolvedRefs", false, reason, message.clone()),
    };
    if roots.is_empty() && !system {
        let why = unresolved.map_or_else(
            || "validation names no CA certificates".to_owned(),
            |(_, message)| message,
        );
        let accepted = Condition::new("Accepted", false, "NoValidCACertificate", why.clone());
        return (Err(why), vec![accepted, resolved_refs]);
    }
    let tls = UpstreamTls {
        verify_roots: Some(roots),
        system_roots: system,
        server_name: Some(validation.hostname.clone()),
        subject_alt_names: subject_names(policy),
        ca_sources: match system {
            true => [sources, vec!["the system's CAs".to_owned()]].concat(),
            false => sources,
        },
        ..UpstreamTls::default()
    };
    let accepted = Condition::new(
        "Accepted",
        true,
        "Accepted",
        "the policy applies to the Service ports it targets",
    );
    (Ok(tls), vec![accepted, resolved_refs])
}

/// The names of `subjectAltNames` (entries of an unknown type are left out).
fn subject_names(policy: &BackendTlsPolicy) -> Vec<SubjectName> {
    policy
        .spec
        .validation
        .subject_alt_names
        .iter()
        .filter_map(|san| match san.name_type.as_str() {
            "Hostname" => san.hostname.clone().map(SubjectName::Dns),
            "URI" => san.uri.clone().map(SubjectName::Uri),
            _ => None,
        })
        .collect()
}

/// The CA certificates one `caCertificateRefs` entry names (a ConfigMap's or Secret's
/// `ca.crt` in the policy's namespace), or the `ResolvedRefs` reason and message.
fn ca_certificates(
    snapshot: &Snapshot,
    policy: &ObjectKey,
    reference: &ObjectReference,
) -> Result<Vec<CertificateDer<'static>>, (&'static str, String)> {
    let group = reference.group.as_deref().unwrap_or("");
    let kind = reference.kind.as_deref().unwrap_or("ConfigMap");
    if !group.is_empty() || !matches!(kind, "ConfigMap" | "Secret") {
        let group = if group.is_empty() {
            String::new()
        } else {
            format!(".{group}")
        };
        let message = format!(
            "caCertificateRefs names {kind}{group} {}; a ConfigMap or Secret is needed",
            reference.name
        );
        return Err(("InvalidKind", message));
    }
    let key = ObjectKey::new(&policy.namespace, &reference.name);
    let parsed = match kind {
        "ConfigMap" => super::frontend::config_map_roots(snapshot, &key),
        _ => snapshot
            .secrets
            .get(&key)
            .ok_or_else(|| "the Secret does not exist".to_owned())
            .and_then(|secret| {
                let data = secret.data.as_ref().and_then(|data| data.get("ca.crt"));
                let pem = data.ok_or_else(|| "the Secret has no ca.crt".to_owned())?;
                super::frontend::ca_bundle(&pem.0)
            }),
    };
    parsed.map_err(|problem| {
        let message = format!("{kind} {}/{}: {problem}", policy.namespace, reference.name);
        ("InvalidCACertificateRef", message)
    })
}

/// Resolves a Gateway's `spec.tls.backend.clientCertificateRef`, when it has one: the
/// certificate it presents to backends, and its `ResolvedRefs` condition (reason
/// `InvalidClientCertificateRef` or `RefNotPermitted` when it does not resolve; the Gateway
/// stays accepted, and backends that require a certificate refuse its connections).
pub(super) fn resolve_backend_client(
    served: &mut ServedGateway<'_>,
    snapshot: &Snapshot,
    sinks: &mut GatewaySinks<'_, '_>,
) {
    let reference = served
        .gateway
        .spec
        .tls
        .as_ref()
        .and_then(|tls| tls.backend.as_ref())
        .and_then(|backend| backend.client_certificate_ref.as_ref());
    let Some(reference) = reference else {
        return;
    };
    let condition = match client_certificate(reference, (snapshot, served.key), sinks.tls) {
        Ok(certificate) => {
            served.backend_client = Some(certificate);
            let message = "the backend client certificate resolves";
            Condition::new("ResolvedRefs", true, "ResolvedRefs", message)
        }
        Err((reason, message)) => {
            let object = ObjectRef::new("Gateway", Some(&served.key.namespace), &served.key.name);
            let field = "spec.tls.backend.clientCertificateRef";
            let warning = format!("{message}; no certificate is presented to backends");
            sinks.diagnostics.error(&object, field, warning);
            Condition::new("ResolvedRefs", false, reason, message)
        }
    };
    served.conditions.push(condition);
}

/// The certificate of a `clientCertificateRef`: a Secret, in another namespace only with a
/// ReferenceGrant; or the `ResolvedRefs` reason and message.
fn client_certificate(
    reference: &ObjectReference,
    (snapshot, gateway): (&Snapshot, &ObjectKey),
    tls: &mut TlsMerge<'_>,
) -> Result<Arc<Certificate>, (&'static str, String)> {
    let group = reference.group.as_deref().unwrap_or("");
    let kind = reference.kind.as_deref().unwrap_or("Secret");
    if !group.is_empty() || kind != "Secret" {
        let group = match group {
            "" => String::new(),
            group => format!(".{group}"),
        };
        let message = format!(
            "clientCertificateRef names {kind}{group} {}; a Secret is needed",
            reference.name
        );
        return Err(("InvalidClientCertificateRef", message));
    }
    let namespace = reference.namespace.as_deref().unwrap_or(&gateway.namespace);
    let from = GrantFrom {
        kind: "Gateway",
        namespace: &gateway.namespace,
    };
    if namespace != gateway.namespace
        && !granted(snapshot, from, ("Secret", namespace, &reference.name))
    {
        let message = format!(
            "no ReferenceGrant in {namespace} lets Gateways of {} use Secret {}",
            gateway.namespace, reference.name
        );
        return Err(("RefNotPermitted", message));
    }
    let key = ObjectKey::new(namespace, &reference.name);
    tls.listener_certificate(&key).map_err(|problem| {
        let message = format!("Secret {namespace}/{}: {problem}", reference.name);
        ("InvalidClientCertificateRef", message)
    })
}
