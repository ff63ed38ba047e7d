//! Gateway frontend TLS: the client-certificate validation a Gateway's `spec.tls.frontend` sets for each listener that terminates TLS (its port's, else the default), its CA references resolved, and the listener's conditions when they do not resolve.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use sluice_routing::{ClientAuth, VerifyClient};

use super::*;
use crate::gateway::FrontendValidation;

/// The validation that applies to `listener`: the one of its port in `perPort`, else the
/// default.
pub(super) fn validation_for<'a>(
    gateway: &'a Gateway,
    listener: &Listener,
) -> Option<&'a FrontendValidation> {
    let frontend = gateway.spec.tls.as_ref()?.frontend.as_ref()?;
    match frontend.per_port.iter().find(|p| p.port == listener.port) {
        Some(per_port) => per_port.tls.validation.as_ref(),
        None => frontend.default.as_ref()?.validation.as_ref(),
    }
}

/// Whether `validation` lets clients through without a valid certificate.
pub(super) fn insecure_fallback(validation: &FrontendValidation) -> bool {
    validation.mode.as_deref() == Some("AllowInsecureFallback")
}

/// The client-certificate rule of a listener: the CAs of every `caCertificateRefs` entry (a
/// ConfigMap's or Secret's `ca.crt`), or the listener's `ResolvedRefs` reason and message.
pub(super) fn client_auth(
    validation: &FrontendValidation,
    (snapshot, gateway): (&Snapshot, &ObjectKey),
    tls: &mut TlsMerge<'_>,
) -> Result<Arc<ClientAuth>, (&'static str, String)> {
    if validation.ca_certificate_refs.is_empty() {
        let message = "frontend validation names no caCertificateRefs".to_owned();
        return Err(("InvalidCACertificateRef", message));
    }
    let mut roots = Vec::new();
    let mut sources = Vec::new();
    for reference in &validation.ca_certificate_refs {
        let group = reference.group.as_deref().unwrap_or("");
        let kind = reference.kind.as_deref().unwrap_or("ConfigMap");
        if !group.is_empty() || !matches!(kind, "ConfigMap" | "Secret") {
            let message = format!(
                "caCertificateRefs names {kind} {}; a ConfigMap or Secret is needed",
                reference.name
            );
            return Err(("InvalidCACertificateKind", message));
        }
        let namespace = reference.namespace.as_deref().unwrap_or(&gateway.namespace);
        let from = GrantFrom {
            kind: "Gateway",
            namespace: &gateway.namespace,
        };
        if namespace != gateway.namespace
            && !granted(snapshot, from, (kind, namespace, &reference.name))
        {
            let message = format!(
                "no ReferenceGrant in {namespace} lets Gateways of {} use {kind} {}",
                gateway.namespace, reference.name
            );
            return Err(("RefNotPermitted", message));
        }
        let key = ObjectKey::new(namespace, &reference.name);
        let loaded = match kind {
            "ConfigMap" => config_map_roots(snapshot, &key),
            _ => tls.client_roots(&key).map(|roots| roots.as_ref().clone()),
        };
        let loaded = loaded.map_err(|problem| {
            let message = format!("{kind} {namespace}/{}: {problem}", reference.name);
            ("InvalidCACertificateRef", message)
        })?;
        roots.extend(loaded);
        sources.push(format!("{namespace}/{}", reference.name));
    }
    Ok(Arc::new(ClientAuth {
        secret: sources.join(",").into(),
        roots,
        verify: match insecure_fallback(validation) {
            true => VerifyClient::InsecureFallback,
            false => VerifyClient::Required,
        },
    }))
}

/// The CA certificates in a ConfigMap's `ca.crt`, or why there are none.
pub(super) fn config_map_roots(
    snapshot: &Snapshot,
    key: &ObjectKey,
) -> Result<Vec<CertificateDer<'static>>, String> {
    let config_map = snapshot
        .config_maps
        .get(key)
        .ok_or("the ConfigMap does not exist")?;
    let pem = config_map
        .data
        .as_ref()
        .and_then(|data| data.get("ca.crt"))
        .ok_or("the ConfigMap has no ca.crt")?;
    ca_bundle(pem.as_bytes())
}

/// The certificates of a PEM `ca.crt`: at least one, all valid.
pub(super) fn ca_bundle(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let roots = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("ca.crt is not valid PEM: {error}"))?;
    if roots.is_empty() {
        return Err("ca.crt holds no certificate".to_owned());
    }
    Ok(roots)
}

/// Marks a listener whose client-certificate CAs do not resolve: not accepted, not
/// programmed (its handshakes would have nothing to check certificates against).
pub(super) fn refuse_listener(plan: &mut ListenerPlan<'_>, (reason, message): (&str, String)) {
    replace(
        &mut plan.conditions,
        Condition::new("ResolvedRefs", false, reason, message.clone()),
    );
    replace(
        &mut plan.conditions,
        Condition::new("Accepted", false, "NoValidCACertificate", message.clone()),
    );
    replace(
        &mut plan.conditions,
        Condition::new("Programmed", false, "Invalid", message),
    );
}
