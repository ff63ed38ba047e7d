//! Fuzzes annotation parsing: an Ingress and its Service carrying arbitrary values for every annotation sluice reads compile without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_config::{compile, parse_manifest, CompileOptions, Document, Format, Snapshot};

/// Every annotation name sluice reads, under the prefixes it reads them with.
const NAMES: [&str; 20] = [
    "nginx.ingress.kubernetes.io/load-balance",
    "nginx.ingress.kubernetes.io/upstream-hash-by",
    "nginx.ingress.kubernetes.io/affinity",
    "nginx.ingress.kubernetes.io/affinity-mode",
    "nginx.ingress.kubernetes.io/session-cookie-name",
    "nginx.ingress.kubernetes.io/session-cookie-path",
    "nginx.ingress.kubernetes.io/session-cookie-max-age",
    "nginx.ingress.kubernetes.io/session-cookie-expires",
    "nginx.ingress.kubernetes.io/session-cookie-secure",
    "nginx.ingress.kubernetes.io/session-cookie-samesite",
    "nginx.ingress.kubernetes.io/session-cookie-domain",
    "nginx.ingress.kubernetes.io/proxy-next-upstream",
    "nginx.ingress.kubernetes.io/proxy-next-upstream-tries",
    "nginx.ingress.kubernetes.io/proxy-next-upstream-timeout",
    "nginx.ingress.kubernetes.io/proxy-body-size",
    "nginx.ingress.kubernetes.io/service-upstream",
    "sluice.dev/per-try-timeout",
    "sluice.dev/service-upstream",
    "traefik.ingress.kubernetes.io/service.sticky.cookie",
    "traefik.ingress.kubernetes.io/service.sticky.cookie.maxage",
];

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // Each line sets one annotation: its first character picks the name, the rest is the value.
    let annotations: serde_json::Map<String, serde_json::Value> = text
        .lines()
        .filter_map(|line| {
            let mut chars = line.chars();
            let pick = chars.next()? as usize % NAMES.len();
            Some((NAMES[pick].to_owned(), chars.as_str().into()))
        })
        .collect();
    let ingress = serde_json::json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "web", "annotations": annotations},
        "spec": {"ingressClassName": "sluice", "rules": [{"http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": "web", "port": {"number": 80}}}}
        ]}}]}
    });
    let service = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "annotations": annotations},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}
    });
    let mut snapshot = Snapshot::default();
    for object in [ingress, service] {
        let documents = parse_manifest(&object.to_string(), Format::Json).expect("valid JSON");
        for document in documents {
            if let Document::Object(object) = document {
                snapshot.insert(object);
            }
        }
    }
    let _ = compile(&snapshot, &CompileOptions::default());
});
