//! Table-driven compile tests: every `fixtures/<case>.yaml` holds Kubernetes objects plus one
//! `kind: Expectations` document saying which backend (and route policy) each request reaches
//! and exactly which diagnostics the compile reports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;
use sluice_config::{
    compile, parse_manifest, CompileOptions, Diagnostic, Document, Format, Severity, Snapshot,
};
use sluice_routing::normalize_request_host;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Expectations {
    #[allow(dead_code)]
    api_version: String,
    #[allow(dead_code)]
    kind: String,
    #[serde(default)]
    options: Options,
    #[serde(default)]
    requests: Vec<ExpectedRequest>,
    #[serde(default)]
    diagnostics: Vec<ExpectedDiagnostic>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Options {
    ingress_class: Option<String>,
    #[serde(default)]
    watch_ingress_without_class: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectedRequest {
    host: String,
    path: String,
    /// The backend id (`namespace/service:port`), or null for "no route" (404).
    backend: Option<String>,
    /// The backend's exact set of ready endpoints, when given.
    endpoints: Option<Vec<String>>,
    /// The backend's exact set of terminating-but-serving endpoints, when given.
    terminating: Option<Vec<String>>,
    /// `endpoints`, `service-upstream` or `external-name`, when given.
    mode: Option<String>,
    /// The route policy as JSON (`serde_json::to_value(&RoutePolicy)`); only the keys given are
    /// compared, recursively through objects.
    policy: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectedDiagnostic {
    severity: Severity,
    object: String,
    field: String,
    /// A substring of the message.
    message: String,
}

impl ExpectedDiagnostic {
    fn matches(&self, actual: &Diagnostic) -> bool {
        self.severity == actual.severity
            && self.object == actual.object.as_str()
            && self.field == actual.field
            && actual.message.contains(&self.message)
    }
}

fn load(path: &Path) -> (Snapshot, Expectations) {
    let text = std::fs::read_to_string(path).unwrap();
    let documents = parse_manifest(&text, Format::Yaml)
        .unwrap_or_else(|errors| panic!("{}: {errors:?}", path.display()));
    let objects = documents.into_iter().filter_map(|document| match document {
        Document::Object(object) => Some(object),
        Document::Skipped { .. } => None,
    });
    let values: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let expectations = values
        .into_iter()
        .find(|value| value["kind"] == "Expectations")
        .map(|value| {
            serde_json::from_value(value)
                .unwrap_or_else(|e| panic!("{}: bad Expectations: {e}", path.display()))
        })
        .unwrap_or_else(|| panic!("{}: no Expectations document", path.display()));
    (Snapshot::from_objects(objects), expectations)
}

fn check(path: &Path) -> Vec<String> {
    let (snapshot, expected) = load(path);
    let options = CompileOptions {
        ingress_class: expected
            .options
            .ingress_class
            .clone()
            .unwrap_or_else(|| "sluice".to_owned()),
        watch_without_class: expected.options.watch_ingress_without_class,
        default_certificate: None,
    };
    let compiled = compile(&snapshot, &options);
    assert_eq!(
        compiled,
        compile(&snapshot, &options),
        "compile is not deterministic"
    );
    let mut failures = Vec::new();
    for request in &expected.requests {
        let backend = compiled
            .table
            .lookup(&normalize_request_host(&request.host), &request.path);
        let actual = backend.map(|t| t.backend.id().as_str().to_owned());
        if actual != request.backend {
            failures.push(format!(
                "{}{}: expected backend {:?}, got {actual:?}",
                request.host, request.path, request.backend
            ));
            continue;
        }
        let Some(target) = backend else {
            continue;
        };
        let backend = target.backend;
        let set = backend.endpoints().load();
        let lists = [
            ("endpoints", &request.endpoints, set.ready()),
            ("terminating", &request.terminating, set.terminating()),
        ];
        for (what, expected_list, actual) in lists {
            let actual: Vec<String> = actual.iter().map(ToString::to_string).collect();
            if let Some(expected_list) = expected_list {
                if &actual != expected_list {
                    failures.push(format!(
                        "{}{}: expected {what} {expected_list:?}, got {actual:?}",
                        request.host, request.path
                    ));
                }
            }
        }
        if let Some(expected_policy) = &request.policy {
            let actual = serde_json::to_value(target.policy).unwrap();
            let mut mismatches = Vec::new();
            compare_subset("policy", expected_policy, &actual, &mut mismatches);
            failures.extend(
                mismatches
                    .into_iter()
                    .map(|m| format!("{}{}: {m}", request.host, request.path)),
            );
        }
        if let Some(mode) = &request.mode {
            if &backend.mode().to_string() != mode {
                failures.push(format!(
                    "{}{}: expected mode {mode}, got {}",
                    request.host,
                    request.path,
                    backend.mode()
                ));
            }
        }
    }
    let mut unmatched: Vec<&Diagnostic> = compiled.diagnostics.iter().collect();
    for wanted in &expected.diagnostics {
        match unmatched.iter().position(|actual| wanted.matches(actual)) {
            Some(position) => {
                unmatched.remove(position);
            }
            None => failures.push(format!("missing diagnostic {wanted:?}")),
        }
    }
    failures.extend(
        unmatched
            .iter()
            .map(|actual| format!("unexpected diagnostic: {actual}")),
    );
    failures
}

/// Compares `expected` with `actual`, objects by the keys `expected` gives, anything else whole.
fn compare_subset(at: &str, expected: &Value, actual: &Value, mismatches: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(wanted), Value::Object(got)) => {
            for (key, wanted) in wanted {
                let got = got.get(key).unwrap_or(&Value::Null);
                compare_subset(&format!("{at}.{key}"), wanted, got, mismatches);
            }
        }
        _ if expected == actual => {}
        _ => mismatches.push(format!("expected {at} = {expected}, got {actual}")),
    }
}

#[test]
fn every_fixture_compiles_as_expected() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 30,
        "expected the full fixture set, found {}",
        paths.len()
    );
    let mut report = String::new();
    for path in &paths {
        let failures = check(path);
        let case = path.file_stem().unwrap().to_string_lossy();
        if !failures.is_empty() {
            report.push_str(&format!("\n{case}:\n  {}", failures.join("\n  ")));
        }
    }
    assert!(report.is_empty(), "fixtures failed:{report}");
}
