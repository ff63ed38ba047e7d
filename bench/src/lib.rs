//! A synthetic cluster for benchmarks: Services, Ingresses and EndpointSlices at any scale, as JSON objects.

use serde_json::{json, Value};

/// Namespace every synthetic object lives in.
pub const NAMESPACE: &str = "bench";

/// The size of a synthetic cluster.
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    pub services: usize,
    pub endpoints_per_service: usize,
}

/// The IngressClass, then for every Service `svc-N`: the Service, one EndpointSlice with
/// `endpoints_per_service` ready endpoints, and an Ingress routing `svc-N.bench.test` to it.
/// Endpoint addresses are in 10.0.0.0/8 and are never contacted.
pub fn cluster(scale: Scale) -> Vec<Value> {
    let mut objects = vec![ingress_class()];
    for index in 0..scale.services {
        objects.push(service(index));
        objects.push(endpoint_slice(index, 0, scale.endpoints_per_service));
        objects.push(ingress(index, &["/"]));
    }
    objects
}

pub fn ingress_class() -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": "sluice", "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
        "spec": {"controller": "sluice.dev/ingress-controller"}
    })
}

pub fn service(index: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": format!("svc-{index}"), "namespace": NAMESPACE},
        "spec": {"clusterIP": ip(0xff_0000 + index), "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
    })
}

/// The EndpointSlice of `svc-N`, with `count` endpoints starting at address offset `shift`
/// (changing `shift` moves every endpoint: a real endpoint change).
pub fn endpoint_slice(index: usize, shift: usize, count: usize) -> Value {
    let endpoints: Vec<Value> = (0..count)
        .map(|n| json!({"addresses": [ip(index * 64 + (n + shift) % 64)], "conditions": {"ready": true}}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("svc-{index}-a"), "namespace": NAMESPACE, "labels": {"kubernetes.io/service-name": format!("svc-{index}")}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": endpoints
    })
}

/// The Ingress of `svc-N`, with one Prefix rule per path.
pub fn ingress(index: usize, paths: &[&str]) -> Value {
    let paths: Vec<Value> = paths
        .iter()
        .map(|path| json!({"path": path, "pathType": "Prefix", "backend": {"service": {"name": format!("svc-{index}"), "port": {"name": "http"}}}}))
        .collect();
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": format!("svc-{index}"), "namespace": NAMESPACE},
        "spec": {"ingressClassName": "sluice", "rules": [{"host": format!("svc-{index}.bench.test"), "http": {"paths": paths}}]}
    })
}

/// An address in 10.0.0.0/8 from a number.
fn ip(n: usize) -> String {
    format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff)
}

/// Median and 99th percentile of samples (seconds), sorted in place.
pub fn percentiles(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| {
        samples
            .get(((samples.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    (at(0.5), at(0.99))
}

/// The scales (numbers of Services) named on the command line, else 1,000 and 10,000.
pub fn scales_from_args() -> Result<Vec<usize>, std::num::ParseIntError> {
    let scales: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    Ok(if scales.is_empty() {
        vec![1_000, 10_000]
    } else {
        scales
    })
}
