//! Trimming of stored objects: drop what sluice never reads, to keep memory down at cluster scale.

use sluice_config::KubeObject;

/// The annotation `kubectl apply` stores a whole copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// The only Secret keys sluice reads (TLS certificates).
const SECRET_KEYS: [&str; 3] = ["tls.crt", "tls.key", "ca.crt"];

/// Removes managedFields, the last-applied copy, the resourceVersion (so that two versions with
/// the same content compare equal; the cluster state stamps its own content version), and
/// per-kind fields sluice does not use.
pub(super) fn trim(object: &mut KubeObject) {
    let metadata = match object {
        KubeObject::Ingress(o) => &mut o.metadata,
        KubeObject::IngressClass(o) => &mut o.metadata,
        KubeObject::Service(o) => &mut o.metadata,
        KubeObject::EndpointSlice(o) => &mut o.metadata,
        KubeObject::Secret(o) => &mut o.metadata,
    };
    metadata.managed_fields = None;
    metadata.resource_version = None;
    if let Some(annotations) = metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
    match object {
        KubeObject::EndpointSlice(slice) => {
            for endpoint in slice.endpoints.iter_mut().flatten() {
                endpoint.deprecated_topology = None;
                endpoint.hints = None;
                endpoint.target_ref = None;
                endpoint.node_name = None;
            }
        }
        KubeObject::Secret(secret) => {
            secret.string_data = None;
            if let Some(data) = secret.data.as_mut() {
                data.retain(|key, _| SECRET_KEYS.contains(&key.as_str()));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
    use k8s_openapi::ByteString;

    #[test]
    fn drops_managed_fields_last_applied_and_unused_secret_keys() {
        let mut object = KubeObject::Secret(Secret {
            metadata: ObjectMeta {
                name: Some("tls".into()),
                resource_version: Some("42".into()),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                annotations: Some(
                    [
                        (LAST_APPLIED.to_owned(), "{}".to_owned()),
                        ("keep".to_owned(), "1".to_owned()),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            data: Some(
                [
                    ("tls.crt".to_owned(), ByteString(b"cert".to_vec())),
                    ("password".to_owned(), ByteString(b"x".to_vec())),
                ]
                .into(),
            ),
            ..Secret::default()
        });
        trim(&mut object);
        let KubeObject::Secret(secret) = object else {
            unreachable!()
        };
        assert!(secret.metadata.managed_fields.is_none());
        assert!(secret.metadata.resource_version.is_none());
        assert_eq!(
            secret
                .metadata
                .annotations
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            ["keep"]
        );
        assert_eq!(secret.data.unwrap().keys().collect::<Vec<_>>(), ["tls.crt"]);
    }
}
