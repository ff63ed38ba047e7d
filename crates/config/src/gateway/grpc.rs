//! GRPCRoute as the HTTPRoute it amounts to: a gRPC call is a POST to `/{service}/{method}`, so service and method matches are path matches, and everything else is shared.

use super::types::{
    GrpcMethodMatch, GrpcRouteMatch, GrpcRouteSpec, HttpBackendRef, HttpPathMatch, HttpRouteMatch,
    HttpRouteRule, HttpRouteSpec, StreamRouteSpec,
};

/// The HTTPRoute spec a TLSRoute or TCPRoute spec stands for in route attachment and backend
/// resolution: its rules match everything, and the data plane takes a stream's first rule.
pub(crate) fn stream_as_http_route(spec: &StreamRouteSpec) -> HttpRouteSpec {
    HttpRouteSpec {
        parent_refs: spec.parent_refs.clone(),
        hostnames: spec.hostnames.clone(),
        rules: spec
            .rules
            .iter()
            .map(|rule| HttpRouteRule {
                name: rule.name.clone(),
                backend_refs: rule
                    .backend_refs
                    .iter()
                    .map(|reference| HttpBackendRef {
                        backend: reference.backend.clone(),
                        weight: reference.weight,
                        filters: Vec::new(),
                    })
                    .collect(),
                ..HttpRouteRule::default()
            })
            .collect(),
    }
}

/// The HTTPRoute spec a GRPCRoute spec stands for.
pub(crate) fn as_http_route(spec: &GrpcRouteSpec) -> HttpRouteSpec {
    HttpRouteSpec {
        parent_refs: spec.parent_refs.clone(),
        hostnames: spec.hostnames.clone(),
        rules: spec
            .rules
            .iter()
            .map(|rule| HttpRouteRule {
                name: rule.name.clone(),
                matches: rule.matches.iter().map(http_match).collect(),
                filters: rule.filters.clone(),
                backend_refs: rule.backend_refs.clone(),
                timeouts: None,
                retry: None,
                session_persistence: rule.session_persistence.clone(),
            })
            .collect(),
    }
}

fn http_match(grpc: &GrpcRouteMatch) -> HttpRouteMatch {
    HttpRouteMatch {
        path: grpc.method.as_ref().map(path_match),
        headers: grpc.headers.clone(),
        query_params: Vec::new(),
        method: None,
    }
}

/// `Exact` service and method: that one path; service only: every method of it (a prefix);
/// method only, or `RegularExpression`: a pattern over both path segments.
fn path_match(method: &GrpcMethodMatch) -> HttpPathMatch {
    let (service, name) = (method.service.as_deref(), method.method.as_deref());
    let (kind, value) = match (
        method.match_type.as_deref().unwrap_or("Exact"),
        service,
        name,
    ) {
        ("Exact", Some(service), Some(name)) => ("Exact", format!("/{service}/{name}")),
        ("Exact", Some(service), None) => ("PathPrefix", format!("/{service}")),
        ("Exact", None, Some(name)) => (
            "RegularExpression",
            format!("/[^/]+/{}", regex::escape(name)),
        ),
        ("Exact", None, None) => ("PathPrefix", "/".to_owned()),
        ("RegularExpression", service, name) => (
            "RegularExpression",
            format!(
                "/{}/{}",
                service.unwrap_or("[^/]+"),
                name.unwrap_or("[^/]+")
            ),
        ),
        (other, _, _) => (other, String::new()),
    };
    HttpPathMatch {
        match_type: Some(kind.to_owned()),
        value: Some(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(kind: Option<&str>, service: Option<&str>, method: Option<&str>) -> (String, String) {
        let matched = path_match(&GrpcMethodMatch {
            match_type: kind.map(str::to_owned),
            service: service.map(str::to_owned),
            method: method.map(str::to_owned),
        });
        (
            matched.match_type.unwrap_or_default(),
            matched.value.unwrap_or_default(),
        )
    }

    #[test]
    fn service_and_method_matches_become_path_matches() {
        let echo = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho";
        assert_eq!(
            path(None, Some(echo), Some("Echo")),
            ("Exact".into(), format!("/{echo}/Echo"))
        );
        assert_eq!(
            path(None, Some(echo), None),
            ("PathPrefix".into(), format!("/{echo}"))
        );
        assert_eq!(
            path(None, None, Some("Echo")),
            ("RegularExpression".into(), "/[^/]+/Echo".into())
        );
        assert_eq!(
            path(Some("RegularExpression"), Some(".*Echo"), None),
            ("RegularExpression".into(), "/.*Echo/[^/]+".into())
        );
    }
}
