//! Discovery documents: `/version`, `/api`, `/apis`, resource lists, a minimal OpenAPI v3, and the Table form kubectl prints.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use crate::object;
use crate::resources::{self, ResourceType, RESOURCES};

/// The Kubernetes version the server claims to be.
pub(crate) const GIT_VERSION: &str = "v1.33.0";

pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api`: the core group's versions.
pub(crate) fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn api_group(group: &str) -> Option<Value> {
    let versions: Vec<Value> = resources::group_versions()
        .into_iter()
        .filter(|(g, _)| *g == group)
        .map(|(g, v)| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    let preferred = versions.first()?.clone();
    Some(json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": versions,
        "preferredVersion": preferred,
    }))
}

/// `/apis/{group}`.
pub(crate) fn group(group: &str) -> Option<Value> {
    if group.is_empty() {
        return None;
    }
    api_group(group)
}

/// `/apis`: every named group.
pub(crate) fn group_list() -> Value {
    let mut names: Vec<&str> = Vec::new();
    for (group, _) in resources::group_versions() {
        if !group.is_empty() && !names.contains(&group) {
            names.push(group);
        }
    }
    let groups: Vec<Value> = names.into_iter().filter_map(api_group).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `api/v1` or `apis/networking.k8s.io/v1`, as OpenAPI v3 names group versions.
fn openapi_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: where each group version's document is.
pub(crate) fn openapi_root() -> Value {
    let mut paths = Map::new();
    for (group, version) in resources::group_versions() {
        let path = openapi_path(group, version);
        let hash = format!("{:016X}", resources::fnv(&path));
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={hash}")}),
        );
    }
    json!({"paths": paths})
}

/// `/openapi/v3/{api/v1|apis/g/v}`: paths with operations tagged by group/version/kind and the
/// query parameters kubectl looks for (`fieldValidation` tells it the server validates, so it
/// sends `fieldValidation=Strict` instead of validating against a schema). No schemas: kubectl
/// then computes strategic merge patches from its compiled-in types.
pub(crate) fn openapi_group_version(path: &str) -> Option<Value> {
    let (group, version) = resources::group_versions()
        .into_iter()
        .find(|(g, v)| openapi_path(g, v) == path)?;
    let mut paths = Map::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let (collection, item) = resource_paths(r);
        let operation = |action: &str| {
            json!({
                "operationId": format!("{action}{}", r.kind),
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": query_parameters(),
                "responses": {"200": {"description": "OK"}},
            })
        };
        paths.insert(
            collection,
            json!({
                "get": operation("list"),
                "post": operation("post"),
                "delete": operation("deletecollection"),
            }),
        );
        paths.insert(
            item.clone(),
            json!({
                "get": operation("get"),
                "put": operation("put"),
                "patch": operation("patch"),
                "delete": operation("delete"),
            }),
        );
        if r.status_subresource {
            paths.insert(
                format!("{item}/status"),
                json!({
                    "get": operation("get"),
                    "put": operation("put"),
                    "patch": operation("patch"),
                }),
            );
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

fn resource_paths(r: &ResourceType) -> (String, String) {
    let base = r.group_version_path();
    let collection = if r.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", r.plural)
    } else {
        format!("{base}/{}", r.plural)
    };
    let item = format!("{collection}/{{name}}");
    (collection, item)
}

fn query_parameters() -> Value {
    let names = [
        "dryRun",
        "fieldManager",
        "fieldValidation",
        "force",
        "pretty",
    ];
    Value::Array(
        names
            .iter()
            .map(|name| json!({"name": name, "in": "query", "schema": {"type": "string"}}))
            .collect(),
    )
}

/// The content type the protobuf OpenAPI v2 document is served with (client-go cannot parse
/// the `@` in the media type it asks for).
pub(crate) const OPENAPI_V2_PROTOBUF: &str = "application/octet-stream";

/// `/openapi/v2` as JSON: no definitions, so kubectl versions that validate against OpenAPI v2
/// find no schema for any kind and skip client-side validation.
pub(crate) fn openapi_v2_json() -> Value {
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": {},
        "definitions": {},
    })
}

/// The same document as the protobuf (gnostic `openapi_v2.Document`) that kubectl before 1.27
/// downloads: `swagger` (1), `info` (2: `title` 1, `version` 2), empty `paths` (8) and
/// `definitions` (9).
pub(crate) fn openapi_v2_protobuf() -> Vec<u8> {
    fn field(out: &mut Vec<u8>, number: u8, bytes: &[u8]) {
        out.push((number << 3) | 2);
        // Every payload here is shorter than 128 bytes, so its length is one varint byte.
        out.push(u8::try_from(bytes.len()).unwrap_or(0) & 0x7f);
        out.extend_from_slice(bytes);
    }
    let mut info = Vec::new();
    field(&mut info, 1, b"Kubernetes");
    field(&mut info, 2, GIT_VERSION.as_bytes());
    let mut document = Vec::new();
    field(&mut document, 1, b"2.0");
    field(&mut document, 2, &info);
    field(&mut document, 8, &[]);
    field(&mut document, 9, &[]);
    document
}

/// The `meta.k8s.io/v1` Table kubectl asks for when it prints (`NAME`, `AGE`).
pub(crate) fn table(items: &[&Value], resource_version: u64) -> Value {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let rows: Vec<Value> = items
        .iter()
        .map(|item| {
            let name = object::meta_str(item, "name").unwrap_or("");
            let age = object::meta_str(item, "creationTimestamp")
                .and_then(object::parse_rfc3339)
                .map(|created| human_age(now.saturating_sub(created)))
                .unwrap_or_else(|| "<unknown>".to_owned());
            json!({
                "cells": [name, age],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": item.get("metadata").cloned().unwrap_or_else(|| json!({})),
                },
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version.to_string()},
        "columnDefinitions": [
            {"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0},
            {"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp is a timestamp representing the server time when this object was created.", "priority": 0},
        ],
        "rows": rows,
    })
}

/// `45s`, `3m`, `5h`, `2d`, as kubectl prints ages.
fn human_age(secs: u64) -> String {
    match secs {
        0..=119 => format!("{secs}s"),
        120..=7199 => format!("{}m", secs / 60),
        7200..=172_799 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn resource_lists_describe_ingresses_and_their_status() {
        let list = resources::api_resource_list("networking.k8s.io", "v1", &[]).unwrap();
        let names: Vec<&str> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["ingresses", "ingresses/status", "ingressclasses"]);
        assert_eq!(list["resources"][0]["namespaced"], true);
        assert_eq!(list["resources"][0]["singularName"], "ingress");
        assert_eq!(list["resources"][2]["namespaced"], false);
        assert!(resources::api_resource_list("batch", "v1", &[]).is_none());
    }

    #[test]
    fn an_undiscovered_kind_is_left_out_of_its_group_versions_list() {
        let names = |undiscovered: &[&str]| -> Vec<String> {
            let list =
                resources::api_resource_list("networking.k8s.io", "v1", undiscovered).unwrap();
            list["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["name"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(names(&["Ingress"]), ["ingressclasses"]);
        assert_eq!(names(&["IngressClass"]), ["ingresses", "ingresses/status"]);
        assert!(resources::api_resource_list(
            "networking.k8s.io",
            "v1",
            &["Ingress", "IngressClass"]
        )
        .is_none());
    }

    #[test]
    fn openapi_root_points_at_every_group_version_document() {
        let root = openapi_root();
        for (path, entry) in root["paths"].as_object().unwrap() {
            let url = entry["serverRelativeURL"].as_str().unwrap();
            assert!(url.starts_with(&format!("/openapi/v3/{path}?hash=")));
            let doc = openapi_group_version(path).unwrap();
            assert!(!doc["paths"].as_object().unwrap().is_empty());
        }
        assert!(openapi_group_version("apis/batch/v1").is_none());
    }

    #[test]
    fn openapi_v2_protobuf_is_well_formed() {
        let bytes = openapi_v2_protobuf();
        assert_eq!(&bytes[..5], b"\x0a\x032.0");
        assert_eq!(bytes[5], 0x12);
        assert_eq!(usize::from(bytes[6]), 2 + 10 + 2 + GIT_VERSION.len());
        assert_eq!(&bytes[bytes.len() - 4..], b"\x42\x00\x4a\x00");
    }

    #[test]
    fn ages_print_like_kubectl() {
        assert_eq!(human_age(5), "5s");
        assert_eq!(human_age(600), "10m");
        assert_eq!(human_age(3 * 3600), "3h");
        assert_eq!(human_age(3 * 86_400), "3d");
    }
}
