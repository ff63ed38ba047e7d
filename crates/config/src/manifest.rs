//! Parsing manifest text (multi-document YAML or JSON, including `kind: List`) into typed objects.

use serde_json::Value;

use crate::error::DocumentError;
use crate::snapshot::KubeObject;

/// What one document (or `List` item) of a manifest turned out to be.
#[allow(clippy::large_enum_variant)] // transient, like `KubeObject`
#[derive(Clone, Debug, PartialEq)]
pub enum Document {
    /// An object of a kind sluice reads.
    Object(KubeObject),
    /// A well-formed object of a kind sluice does not read (a Deployment, say).
    Skipped {
        api_version: String,
        kind: String,
        name: String,
    },
}

/// The text format of a manifest file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

impl Format {
    /// The format for a file extension sluice reads (`yaml`, `yml`, `json`), or `None`.
    pub fn from_extension(extension: &str) -> Option<Self> {
        match extension.to_ascii_lowercase().as_str() {
            "yaml" | "yml" => Some(Self::Yaml),
            "json" => Some(Self::Json),
            _ => None,
        }
    }
}

/// Parses every document of a manifest. Succeeds only if every document is valid: a file is
/// applied whole or not at all, so a half-edited file never half-applies.
pub fn parse_manifest(text: &str, format: Format) -> Result<Vec<Document>, Vec<DocumentError>> {
    let values = match format {
        Format::Yaml => {
            serde_saphyr::from_multiple::<Value>(text).map_err(|e| e.without_snippet().to_string())
        }
        Format::Json => serde_json::from_str::<Value>(text)
            .map(|v| vec![v])
            .map_err(|e| e.to_string()),
    }
    .map_err(|reason| vec![DocumentError::syntax(reason)])?;

    let mut documents = Vec::new();
    let mut errors = Vec::new();
    for (index, value) in values.into_iter().enumerate() {
        let number = index + 1;
        match parse_document(value) {
            Ok(mut parsed) => documents.append(&mut parsed),
            Err((item, reason)) => errors.push(DocumentError::document(number, item, reason)),
        }
    }
    if errors.is_empty() {
        Ok(documents)
    } else {
        Err(errors)
    }
}

/// One document; a `List` expands into its items. Errors carry the 1-based item number.
fn parse_document(value: Value) -> Result<Vec<Document>, (Option<usize>, String)> {
    if value.is_null() {
        return Ok(Vec::new());
    }
    let (_, kind) = type_of(&value).map_err(|reason| (None, reason))?;
    if kind == "List" {
        let Value::Object(mut list) = value else {
            return Err((None, "a List must be a mapping".to_owned()));
        };
        let items = match list.remove("items") {
            Some(Value::Array(items)) => items,
            None | Some(Value::Null) => Vec::new(),
            Some(_) => return Err((None, "items: expected a sequence of objects".to_owned())),
        };
        return items
            .into_iter()
            .enumerate()
            .map(|(index, item)| parse_object(item).map_err(|reason| (Some(index + 1), reason)))
            .collect();
    }
    parse_object(value)
        .map(|document| vec![document])
        .map_err(|reason| (None, reason))
}

fn type_of(value: &Value) -> Result<(String, String), String> {
    let Value::Object(map) = value else {
        return Err("expected a Kubernetes object (a mapping with apiVersion and kind)".to_owned());
    };
    let field = |name: &str| match map.get(name) {
        Some(Value::String(text)) if !text.is_empty() => Ok(text.clone()),
        Some(_) => Err(format!("{name}: expected a non-empty string")),
        None => Err(format!("{name}: missing")),
    };
    Ok((field("apiVersion")?, field("kind")?))
}

fn parse_object(value: Value) -> Result<Document, String> {
    let (api_version, kind) = type_of(&value)?;
    let expected_api_version = match kind.as_str() {
        "Ingress" | "IngressClass" => "networking.k8s.io/v1",
        "Service" | "Secret" | "ConfigMap" | "Namespace" => "v1",
        "EndpointSlice" => "discovery.k8s.io/v1",
        "GatewayClass" | "Gateway" | "HTTPRoute" | "GRPCRoute" | "TLSRoute" | "TCPRoute"
        | "UDPRoute" | "BackendTLSPolicy" | "ListenerSet" | "ReferenceGrant" => {
            return gateway_object(value, &api_version, &kind);
        }
        "XListenerSet" => return experimental_listener_set(value, &api_version),
        "Middleware" if is_traefik(&api_version) => {
            let group = api_version.split_once('/').map(|(g, _)| g.to_owned());
            let middleware = crate::traefik::Middleware {
                group: group.unwrap_or_default(),
                ..typed(value)?
            };
            return named(KubeObject::Middleware(middleware));
        }
        _ => {
            let name = value
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            return Ok(Document::Skipped {
                api_version,
                kind,
                name,
            });
        }
    };
    if api_version != expected_api_version {
        return Err(format!(
            "apiVersion: {kind} {api_version} is not supported; sluice reads {kind} {expected_api_version}"
        ));
    }
    let object = match kind.as_str() {
        "Ingress" => KubeObject::Ingress(typed(value)?),
        "IngressClass" => KubeObject::IngressClass(typed(value)?),
        "Service" => KubeObject::Service(typed(value)?),
        "EndpointSlice" => KubeObject::EndpointSlice(typed(value)?),
        "ConfigMap" => KubeObject::ConfigMap(typed(value)?),
        "Namespace" => KubeObject::Namespace(typed(value)?),
        _ => KubeObject::Secret(typed(value)?),
    };
    named(object)
}

/// A Gateway API object: `gateway.networking.k8s.io/v1`, or `v1beta1`, which the upstream CRDs
/// still serve with the same schema; TLSRoute, TCPRoute and UDPRoute also as `v1alpha2` (and TLSRoute
/// `v1alpha3`), the versions they had before they became standard, with the fields sluice
/// reads unchanged.
fn gateway_object(value: Value, api_version: &str, kind: &str) -> Result<Document, String> {
    let version = api_version
        .strip_prefix(crate::gateway::GATEWAY_GROUP)
        .and_then(|rest| rest.strip_prefix('/'));
    let stream_route = matches!(kind, "TLSRoute" | "TCPRoute" | "UDPRoute");
    let read = match version {
        Some("v1" | "v1beta1") => true,
        Some("v1alpha2") => stream_route,
        Some("v1alpha3") => matches!(kind, "TLSRoute" | "BackendTLSPolicy"),
        _ => false,
    };
    if !read {
        return Err(format!(
            "apiVersion: {kind} {api_version} is not supported; sluice reads {kind} {}/v1",
            crate::gateway::GATEWAY_GROUP
        ));
    }
    let object = match kind {
        "GatewayClass" => KubeObject::GatewayClass(typed(value)?),
        "Gateway" => KubeObject::Gateway(typed(value)?),
        "HTTPRoute" => KubeObject::HttpRoute(typed(value)?),
        "GRPCRoute" => KubeObject::GrpcRoute(typed(value)?),
        "TLSRoute" => KubeObject::TlsRoute(typed(value)?),
        "TCPRoute" => KubeObject::TcpRoute(typed(value)?),
        "UDPRoute" => KubeObject::UdpRoute(typed(value)?),
        "BackendTLSPolicy" => KubeObject::BackendTlsPolicy(typed(value)?),
        "ListenerSet" => KubeObject::ListenerSet(typed(value)?),
        _ => KubeObject::ReferenceGrant(typed(value)?),
    };
    named(object)
}

/// An `XListenerSet` of `gateway.networking.x-k8s.io/v1alpha1`, the experimental spelling of
/// ListenerSet with the same fields, read as a ListenerSet.
fn experimental_listener_set(value: Value, api_version: &str) -> Result<Document, String> {
    let expected = format!("{}/v1alpha1", crate::gateway::EXPERIMENTAL_GATEWAY_GROUP);
    if api_version != expected {
        return Err(format!(
            "apiVersion: XListenerSet {api_version} is not supported; sluice reads XListenerSet {expected}"
        ));
    }
    named(KubeObject::ListenerSet(typed(value)?))
}

/// A Gateway API object as the API server sends it (JSON with `apiVersion` and `kind`); the
/// error names the field that failed.
pub fn gateway_api_object(value: Value) -> Result<KubeObject, String> {
    let (api_version, kind) = type_of(&value)?;
    let document = match kind.as_str() {
        "XListenerSet" => experimental_listener_set(value, &api_version)?,
        _ => gateway_object(value, &api_version, &kind)?,
    };
    match document {
        Document::Object(object) => Ok(object),
        Document::Skipped { kind, .. } => Err(format!("{kind} is not a Gateway API kind")),
    }
}

/// Whether `api_version` is a Traefik CRD group's (`traefik.io/v1alpha1`,
/// `traefik.containo.us/v1alpha1`).
fn is_traefik(api_version: &str) -> bool {
    api_version.split_once('/').is_some_and(|(group, version)| {
        crate::traefik::TRAEFIK_GROUPS.contains(&group)
            && version == crate::traefik::MIDDLEWARE_VERSION
    })
}

/// A Traefik Middleware as the API server sends it. One whose spec does not parse is kept
/// with its metadata and the reason, so that routes using it fail closed.
pub fn middleware_object(value: Value) -> Result<KubeObject, String> {
    let metadata = value.get("metadata").cloned().unwrap_or_default();
    let group = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|version| version.split_once('/'))
        .map(|(group, _)| group.to_owned())
        .unwrap_or_default();
    let middleware = match typed::<crate::traefik::Middleware>(value) {
        Ok(middleware) => middleware,
        Err(reason) => crate::traefik::Middleware {
            metadata: typed(metadata)?,
            unreadable: Some(reason),
            ..Default::default()
        },
    };
    Ok(KubeObject::Middleware(crate::traefik::Middleware {
        group,
        ..middleware
    }))
}

/// The object, once it has a name.
fn named(object: KubeObject) -> Result<Document, String> {
    match object.metadata().name.as_deref() {
        Some(name) if !name.is_empty() => Ok(Document::Object(object)),
        _ => Err(format!("metadata.name: missing in {}", object.kind())),
    }
}

/// Deserialises into a k8s-openapi type; the error names the field path that failed.
fn typed<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        if path == "." || path.is_empty() {
            error.inner().to_string()
        } else {
            format!("{path}: {}", error.inner())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVICE: &str =
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports:\n  - port: 80\n";

    #[test]
    fn reads_multiple_documents_and_skips_other_kinds() {
        let text = format!(
            "{SERVICE}---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n"
        );
        let documents = parse_manifest(&text, Format::Yaml).expect("valid manifest");
        assert!(matches!(
            &documents[0],
            Document::Object(KubeObject::Service(_))
        ));
        assert!(matches!(&documents[1], Document::Skipped { kind, .. } if kind == "Deployment"));
    }

    #[test]
    fn expands_lists() {
        let text = r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"}}]}"#;
        let documents = parse_manifest(text, Format::Json).expect("valid list");
        assert_eq!(documents.len(), 1);
    }

    #[test]
    fn names_the_document_and_field_that_failed() {
        let text = format!("{SERVICE}---\napiVersion: v1\nkind: Service\nmetadata:\n  name: bad\nspec:\n  ports:\n  - port: eighty\n");
        let errors = parse_manifest(&text, Format::Yaml).expect_err("invalid port");
        assert_eq!(errors.len(), 1);
        let message = errors[0].to_string();
        assert!(message.contains("document 2"), "{message}");
        assert!(message.contains("spec.ports[0].port"), "{message}");
    }

    #[test]
    fn rejects_old_api_versions_with_a_hint() {
        let text = "apiVersion: extensions/v1beta1\nkind: Ingress\nmetadata:\n  name: old\n";
        let errors = parse_manifest(text, Format::Yaml).expect_err("old apiVersion");
        assert!(errors[0].to_string().contains("networking.k8s.io/v1"));
    }

    #[test]
    fn reports_yaml_syntax_errors() {
        let errors = parse_manifest("kind: [unclosed\n", Format::Yaml).expect_err("bad yaml");
        assert!(errors[0].document.is_none());
    }

    #[test]
    fn reads_gateway_api_objects_at_v1_and_v1beta1() {
        let text = "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: web\nspec:\n  parentRefs: [{name: gw}]\n---\napiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata:\n  name: grant\nspec:\n  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: a}]\n  to: [{group: '', kind: Service}]\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata:\n  name: sluice\nspec:\n  controllerName: sluice.dev/gateway-controller\n";
        let documents = parse_manifest(text, Format::Yaml).expect("parses");
        let kinds: Vec<_> = documents
            .iter()
            .map(|document| match document {
                Document::Object(object) => object.kind(),
                Document::Skipped { .. } => "skipped",
            })
            .collect();
        assert_eq!(kinds, ["HTTPRoute", "ReferenceGrant", "GatewayClass"]);
    }

    #[test]
    fn a_gateway_api_object_names_its_bad_field_and_unknown_versions() {
        let bad_port = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n  name: gw\nspec:\n  gatewayClassName: sluice\n  listeners:\n  - {name: http, port: eighty, protocol: HTTP}\n";
        let errors = parse_manifest(bad_port, Format::Yaml).expect_err("bad port");
        assert!(
            errors[0].reason.contains("spec.listeners[0].port"),
            "{errors:?}"
        );
        let alpha = "apiVersion: gateway.networking.k8s.io/v1alpha2\nkind: GRPCRoute\nmetadata:\n  name: g\n";
        let errors = parse_manifest(alpha, Format::Yaml).expect_err("old version");
        assert!(
            errors[0]
                .reason
                .contains("sluice reads GRPCRoute gateway.networking.k8s.io/v1"),
            "{errors:?}"
        );
    }

    #[test]
    fn requires_a_name() {
        let errors = parse_manifest(
            "apiVersion: v1\nkind: Service\nmetadata: {}\n",
            Format::Yaml,
        )
        .expect_err("no name");
        assert!(errors[0].to_string().contains("metadata.name"));
    }
}
