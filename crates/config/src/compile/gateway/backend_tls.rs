//! BackendTLSPolicy, which sluice does not implement yet, failing closed: a backendRef to a Service port a policy targets is refused (503, or a closed connection on a TLS or TCP listener) rather than sent in plaintext, and each policy gets an error that says so.

use super::*;
use crate::gateway::BackendTlsPolicy;

/// Why a Gateway route's backendRef to `(namespace, service, port)` is refused: the first
/// BackendTLSPolicy targeting the Service (or that port of it by name), if any.
pub(super) fn refusal(
    inputs: &GatewayInputs<'_>,
    (namespace, service, port): (&str, &str, u16),
) -> Option<String> {
    let port_name = inputs
        .services
        .get(namespace, service)
        .and_then(|service| service.spec.as_ref())
        .and_then(|spec| spec.ports.as_ref())
        .and_then(|ports| ports.iter().find(|p| p.port == i32::from(port)))
        .and_then(|port| port.name.clone());
    let (key, _) = inputs
        .snapshot
        .backend_tls_policies
        .iter()
        .filter(|(key, _)| key.namespace == namespace)
        .find(|(_, policy)| targets(policy, service, port_name.as_deref()))?;
    Some(format!(
        "BackendTLSPolicy {}/{} asks for TLS to Service {namespace}/{service}, which sluice does not implement yet",
        key.namespace, key.name
    ))
}

/// Whether `policy` targets Service `service` (all its ports, or the one named `port_name`).
fn targets(policy: &BackendTlsPolicy, service: &str, port_name: Option<&str>) -> bool {
    policy.spec.target_refs.iter().any(|target| {
        target.group.is_empty()
            && target.kind == "Service"
            && target.name == service
            && target
                .section_name
                .as_deref()
                .is_none_or(|section| Some(section) == port_name)
    })
}

/// One error per BackendTLSPolicy: what it asks for is not done, and its Services' routes are
/// refused instead.
pub(super) fn report_unsupported(snapshot: &Snapshot, diagnostics: &mut Diagnostics) {
    for key in snapshot.backend_tls_policies.keys() {
        let object = ObjectRef::new("BackendTLSPolicy", Some(&key.namespace), &key.name);
        diagnostics.error(
            &object,
            "spec",
            "sluice does not implement BackendTLSPolicy yet: Gateway routes to the Services it targets answer 503 (TLS and TCP listeners close the connection) rather than reach them in plaintext",
        );
    }
}
