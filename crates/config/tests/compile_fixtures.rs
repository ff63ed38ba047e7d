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
    /// Connections to Gateway TLS and TCP sockets, routed once each.
    #[serde(default)]
    connections: Vec<ExpectedConnection>,
    #[serde(default)]
    diagnostics: Vec<ExpectedDiagnostic>,
    /// The Gateway API status report (`Compiled::gateways`) as JSON; only the keys given are
    /// compared, and lists element by element.
    gateway_status: Option<Value>,
    /// TLS hosts and the Secret each is served with (`default`: the default certificate; null:
    /// the host is no TLS host).
    #[serde(default)]
    tls: std::collections::BTreeMap<String, Option<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Options {
    ingress_class: Option<String>,
    #[serde(default)]
    watch_ingress_without_class: bool,
    #[serde(default)]
    allow_cross_namespace_middlewares: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectedRequest {
    host: String,
    /// The path, with a query string on requests to a Gateway socket.
    path: String,
    /// A Gateway listener's socket: the request is matched as a Gateway route.
    socket: Option<std::net::SocketAddr>,
    /// The method on a Gateway socket (default GET).
    method: Option<String>,
    /// Request headers on a Gateway socket.
    #[serde(default)]
    headers: Vec<(String, String)>,
    /// On a Gateway socket without a backend: 404 (no route) or 500 (invalid backendRef).
    status: Option<u16>,
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

/// A connection to a Gateway TLS or TCP socket: which backend its server name reaches.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ExpectedConnection {
    socket: std::net::SocketAddr,
    /// The ClientHello's server name (none on TCP).
    #[serde(default)]
    server_name: String,
    /// `passthrough` or `terminate` on a TLS socket; absent on TCP, or when no listener takes
    /// the name (`backend` is null then).
    tls: Option<String>,
    /// The backend id (first weighted backendRef), or null: the connection is closed.
    backend: Option<String>,
    /// A UDP flow rather than a TCP connection.
    #[serde(default)]
    udp: bool,
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
        allow_cross_namespace_middlewares: expected.options.allow_cross_namespace_middlewares,
        ..CompileOptions::default()
    };
    let compiled = compile(&snapshot, &options);
    assert_eq!(
        compiled,
        compile(&snapshot, &options),
        "compile is not deterministic"
    );
    let mut failures = Vec::new();
    for request in &expected.requests {
        let (backend, status) = lookup(&compiled.table, request);
        if status
            != request
                .status
                .unwrap_or(if backend.is_some() { 200 } else { 404 })
        {
            failures.push(format!(
                "{}{}: expected status {:?}, got {status}",
                request.host, request.path, request.status
            ));
        }
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
    for connection in &expected.connections {
        failures.extend(check_connection(&compiled.table, connection));
    }
    let sites = sluice_routing::TableView::of(&compiled.table).tls;
    for (host, certificate) in &expected.tls {
        let actual = sites.get(host).map(|site| site.certificate.clone());
        if &actual != certificate {
            failures.push(format!(
                "TLS host {host}: expected certificate {certificate:?}, got {actual:?}"
            ));
        }
    }
    if let Some(expected_status) = &expected.gateway_status {
        let actual = serde_json::to_value(&compiled.gateways).unwrap();
        let mut mismatches = Vec::new();
        compare_subset("gatewayStatus", expected_status, &actual, &mut mismatches);
        failures.extend(mismatches);
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

/// The target of a fixture request and the status it gets (200 when it has a target): an
/// Ingress lookup, or a Gateway lookup on the request's socket (the first weighted backendRef
/// with a weight above zero).
fn lookup<'t>(
    table: &'t sluice_routing::RoutingTable,
    request: &ExpectedRequest,
) -> (Option<sluice_routing::Target<'t>>, u16) {
    let host = normalize_request_host(&request.host);
    let Some(socket) = request.socket else {
        let target = table.lookup(&host, &request.path);
        return (target, if target.is_some() { 200 } else { 404 });
    };
    let (path, query) = match request.path.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (request.path.as_str(), None),
    };
    let method =
        http::Method::from_bytes(request.method.as_deref().unwrap_or("GET").as_bytes()).unwrap();
    let mut headers = http::HeaderMap::new();
    for (name, value) in &request.headers {
        headers.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    let facts = sluice_routing::RequestFacts {
        method: &method,
        path,
        query,
        headers: &headers,
    };
    match table.gateway_lookup(socket, &host, &facts, |_| 1) {
        Ok(target) => (Some(target), 200),
        Err(sluice_routing::GatewayMiss::NoRoute) => (None, 404),
        Err(sluice_routing::GatewayMiss::NoBackend) => (None, 500),
    }
}

/// A connection's TLS mode and backend as the table routes it, against the fixture's.
fn check_connection(
    table: &sluice_routing::RoutingTable,
    expected: &ExpectedConnection,
) -> Vec<String> {
    let gateways = table.gateways();
    let (socket, name) = (expected.socket, expected.server_name.as_str());
    let mut failures = Vec::new();
    let mode = gateways.tls_mode(socket, name).map(|mode| match mode {
        sluice_routing::TlsMode::Passthrough => "passthrough",
        sluice_routing::TlsMode::Terminate(_) => "terminate",
    });
    let tls_socket = gateways
        .addresses()
        .contains(&(socket, sluice_routing::SocketProtocol::Tls));
    if tls_socket && mode != expected.tls.as_deref() {
        failures.push(format!(
            "{socket} {name:?}: expected TLS mode {:?}, got {mode:?}",
            expected.tls
        ));
    }
    let outcome = match expected.udp {
        true => gateways.datagram_lookup(socket, |_| 1),
        false => gateways.stream_lookup(socket, name, |_| 1),
    };
    let backend = match outcome {
        sluice_routing::GatewayOutcome::Matched { choice, .. } => choice
            .and_then(|choice| choice.backend)
            .and_then(|index| table.backend(index))
            .map(|backend| backend.id().as_str().to_owned()),
        sluice_routing::GatewayOutcome::NoRoute => None,
    };
    if backend != expected.backend {
        failures.push(format!(
            "{socket} {name:?}: expected backend {:?}, got {backend:?}",
            expected.backend
        ));
    }
    failures
}

/// Compares `expected` with `actual`: objects by the keys `expected` gives, lists of the same
/// length element by element, anything else whole.
fn compare_subset(at: &str, expected: &Value, actual: &Value, mismatches: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Array(wanted), Value::Array(got)) if wanted.len() == got.len() => {
            for (index, (wanted, got)) in wanted.iter().zip(got).enumerate() {
                compare_subset(&format!("{at}[{index}]"), wanted, got, mismatches);
            }
        }
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
