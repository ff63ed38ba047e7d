//! Trimming of stored objects: drop what sluice never reads, to keep memory down at cluster scale.

use sluice_config::KubeObject;

/// The annotation `kubectl apply` stores a whole copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// The Secret keys sluice reads in any Secret: TLS certificates and CAs, basic auth's htpasswd
/// file, and what Traefik's middlewares read (a basicAuth `users` list, a forwardAuth CA's
/// `tls.ca`).
const SECRET_KEYS: [&str; 6] = ["tls.crt", "tls.key", "ca.crt", "auth", "users", "tls.ca"];
/// The keys of a `kubernetes.io/basic-auth` Secret, which a Traefik basicAuth reads.
const BASIC_AUTH_KEYS: [&str; 2] = ["username", "password"];
/// A ConfigMap larger than this is not one sluice reads (`custom-headers` lists a few headers):
/// its data is dropped.
const LARGE_CONFIG_MAP: usize = 64 * 1024;
/// An Opaque Secret this small is kept whole: it may be an `auth-map` (one key per user).
const SMALL_OPAQUE_SECRET: usize = 16 * 1024;

/// Removes managedFields, the last-applied copy, the resourceVersion (so that two versions with
/// the same content compare equal; the cluster state stamps its own content version), and
/// per-kind fields sluice does not use.
pub(super) fn trim(object: &mut KubeObject) {
    let metadata = object.metadata_mut();
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
            let opaque = secret.type_.as_deref().is_none_or(|kind| kind == "Opaque");
            let basic_auth = secret.type_.as_deref() == Some("kubernetes.io/basic-auth");
            if let Some(data) = secret.data.as_mut() {
                let size: usize = data.values().map(|value| value.0.len()).sum();
                if !opaque || size > SMALL_OPAQUE_SECRET {
                    data.retain(|key, _| {
                        SECRET_KEYS.contains(&key.as_str())
                            || (basic_auth && BASIC_AUTH_KEYS.contains(&key.as_str()))
                    });
                }
            }
        }
        KubeObject::ConfigMap(config_map) => {
            config_map.binary_data = None;
            let size: usize = config_map
                .data
                .iter()
                .flatten()
                .map(|(key, value)| key.len() + value.len())
                .sum();
            if size > LARGE_CONFIG_MAP {
                config_map.data = None;
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
            type_: Some("kubernetes.io/tls".into()),
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

    #[test]
    fn a_small_opaque_secret_is_kept_whole_for_auth_maps() {
        let secret = |size: usize| {
            KubeObject::Secret(Secret {
                data: Some(
                    [
                        ("ana".to_owned(), ByteString(vec![b'x'; size])),
                        ("auth".to_owned(), ByteString(b"bob:{SHA}x".to_vec())),
                    ]
                    .into(),
                ),
                ..Secret::default()
            })
        };
        let kept = |mut object: KubeObject| {
            trim(&mut object);
            let KubeObject::Secret(secret) = object else {
                unreachable!()
            };
            secret.data.unwrap().into_keys().collect::<Vec<_>>()
        };
        assert_eq!(kept(secret(60)), ["ana", "auth"]);
        assert_eq!(kept(secret(SMALL_OPAQUE_SECRET + 1)), ["auth"]);
    }
}
