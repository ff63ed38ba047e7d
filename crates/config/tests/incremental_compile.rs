//! The incremental compiler against a fresh compile: over random sequences of changes to Ingresses, Services, EndpointSlices and the IngressClass, both give exactly the same table, diagnostics, endpoint sources and served list after every change.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::{json, Value};
use sluice_config::{compile, CompileOptions, Compiler, KubeObject, SliceIndex, Snapshot};

const INGRESSES: usize = 6;
const SERVICES: usize = 5;

/// One change to the cluster.
#[derive(Clone, Debug)]
enum Change {
    Ingress {
        index: usize,
        spec: IngressSpec,
    },
    RemoveIngress(usize),
    Service {
        index: usize,
        named_port: bool,
        service_upstream: bool,
    },
    RemoveService(usize),
    Slice {
        index: usize,
        ready: u8,
        terminating: u8,
    },
    RemoveSlice(usize),
    /// Adds or removes the IngressClass `sluice`, marked default or not.
    Class(Option<bool>),
}

#[derive(Clone, Debug)]
struct IngressSpec {
    class: Option<&'static str>,
    created: Option<u8>,
    rules: Vec<(Option<&'static str>, &'static str, usize, i32)>,
    default_backend: Option<usize>,
    annotation: Option<(&'static str, &'static str)>,
}

fn ingress_spec() -> impl Strategy<Value = IngressSpec> {
    let rule = (
        prop::option::of(prop::sample::select(vec!["a.test", "b.test", "*.w.test"])),
        prop::sample::select(vec!["/", "/api", "/api/v1"]),
        0..SERVICES,
        prop::sample::select(vec![80, 81]),
    );
    (
        prop::option::of(prop::sample::select(vec!["sluice", "nginx"])),
        prop::option::of(0u8..3),
        prop::collection::vec(rule, 0..4),
        prop::option::of(0..SERVICES),
        prop::option::of(prop::sample::select(vec![
            ("nginx.ingress.kubernetes.io/service-upstream", "true"),
            ("nginx.ingress.kubernetes.io/load-balance", "ewma"),
            ("nginx.ingress.kubernetes.io/proxy-next-upstream-tries", "x"),
        ])),
    )
        .prop_map(
            |(class, created, rules, default_backend, annotation)| IngressSpec {
                class,
                created,
                rules,
                default_backend,
                annotation,
            },
        )
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        4 => (0..INGRESSES, ingress_spec()).prop_map(|(index, spec)| Change::Ingress { index, spec }),
        1 => (0..INGRESSES).prop_map(Change::RemoveIngress),
        2 => (0..SERVICES, any::<bool>(), prop::bool::weighted(0.2)).prop_map(
            |(index, named_port, service_upstream)| Change::Service { index, named_port, service_upstream }
        ),
        1 => (0..SERVICES).prop_map(Change::RemoveService),
        3 => (0..SERVICES, 0u8..3, 0u8..2).prop_map(|(index, ready, terminating)| Change::Slice { index, ready, terminating }),
        1 => (0..SERVICES).prop_map(Change::RemoveSlice),
        1 => prop::option::of(any::<bool>()).prop_map(Change::Class),
    ]
}

/// The cluster as a source sees it: objects get a new `resourceVersion` on every write when
/// `versioned` (the API server), none otherwise (manifest files).
struct Cluster {
    snapshot: Snapshot,
    versioned: bool,
    writes: u64,
}

impl Cluster {
    fn write(&mut self, mut object: Value) {
        self.writes += 1;
        if self.versioned {
            object["metadata"]["resourceVersion"] = json!(self.writes.to_string());
        }
        let kind = object["kind"].as_str().unwrap().to_owned();
        let object = match kind.as_str() {
            "Ingress" => KubeObject::Ingress(serde_json::from_value(object).unwrap()),
            "Service" => KubeObject::Service(serde_json::from_value(object).unwrap()),
            "EndpointSlice" => KubeObject::EndpointSlice(serde_json::from_value(object).unwrap()),
            "IngressClass" => KubeObject::IngressClass(serde_json::from_value(object).unwrap()),
            other => panic!("no such kind {other}"),
        };
        self.snapshot.insert(object);
    }

    fn apply(&mut self, change: &Change) {
        match change {
            Change::Ingress { index, spec } => self.write(ingress(*index, spec)),
            Change::RemoveIngress(index) => {
                self.snapshot
                    .ingresses
                    .retain(|key, _| key.name != format!("ing{index}"));
            }
            Change::Service {
                index,
                named_port,
                service_upstream,
            } => self.write(service(*index, *named_port, *service_upstream)),
            Change::RemoveService(index) => {
                self.snapshot
                    .services
                    .retain(|key, _| key.name != format!("svc{index}"));
            }
            Change::Slice {
                index,
                ready,
                terminating,
            } => self.write(slice(*index, *ready, *terminating)),
            Change::RemoveSlice(index) => {
                self.snapshot
                    .endpoint_slices
                    .retain(|key, _| key.name != format!("svc{index}-1"));
            }
            Change::Class(Some(default)) => self.write(json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
                "metadata": {"name": "sluice", "annotations": {
                    "ingressclass.kubernetes.io/is-default-class": default.to_string()}},
                "spec": {"controller": "sluice.dev/ingress-controller"}
            })),
            Change::Class(None) => {
                self.snapshot.ingress_classes.clear();
            }
        }
    }
}

fn backend(service: usize, port: i32) -> Value {
    json!({"service": {"name": format!("svc{service}"), "port": {"number": port}}})
}

fn ingress(index: usize, spec: &IngressSpec) -> Value {
    let rules: Vec<Value> = spec
        .rules
        .iter()
        .map(|(host, path, service, port)| {
            let mut rule = json!({"http": {"paths": [
                {"path": path, "pathType": "Prefix", "backend": backend(*service, *port)}
            ]}});
            if let Some(host) = host {
                rule["host"] = json!(host);
            }
            rule
        })
        .collect();
    let mut object = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": format!("ing{index}"), "namespace": "ns"},
        "spec": {"rules": rules}
    });
    if let Some(class) = spec.class {
        object["spec"]["ingressClassName"] = json!(class);
    }
    if let Some(created) = spec.created {
        object["metadata"]["creationTimestamp"] =
            json!(format!("2026-01-0{}T00:00:00Z", created + 1));
    }
    if let Some(service) = spec.default_backend {
        object["spec"]["defaultBackend"] = backend(service, 80);
    }
    if let Some((name, value)) = spec.annotation {
        object["metadata"]["annotations"] = json!({ name: value });
    }
    object
}

fn service(index: usize, named_port: bool, service_upstream: bool) -> Value {
    let mut port = json!({"port": 80, "targetPort": 8080});
    if named_port {
        port["name"] = json!("http");
    }
    let mut object = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": format!("svc{index}"), "namespace": "ns"},
        "spec": {"clusterIP": format!("10.96.0.{}", index + 1), "ports": [port]}
    });
    if service_upstream {
        object["metadata"]["annotations"] =
            json!({"traefik.ingress.kubernetes.io/service.nativelb": "true"});
    }
    object
}

fn slice(index: usize, ready: u8, terminating: u8) -> Value {
    let endpoint = |n: u8, serving_only: bool| {
        let conditions = if serving_only {
            json!({"ready": false, "serving": true, "terminating": true})
        } else {
            json!({"ready": true})
        };
        json!({"addresses": [format!("10.1.{index}.{n}")], "conditions": conditions})
    };
    let endpoints: Vec<Value> = (0..ready)
        .map(|n| endpoint(n, false))
        .chain((0..terminating).map(|n| endpoint(100 + n, true)))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("svc{index}-1"), "namespace": "ns",
                     "labels": {"kubernetes.io/service-name": format!("svc{index}")}},
        "addressType": "IPv4",
        "ports": [{"port": 8080}],
        "endpoints": endpoints
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn incremental_compiles_equal_fresh_compiles(
        versioned in any::<bool>(),
        watch_without_class in any::<bool>(),
        changes in prop::collection::vec(change(), 1..40),
    ) {
        let options = CompileOptions { watch_without_class, ..CompileOptions::default() };
        let mut cluster = Cluster { snapshot: Snapshot::default(), versioned, writes: 0 };
        let mut incremental = Compiler::new(options.clone());
        for (step, change) in changes.iter().enumerate() {
            cluster.apply(change);
            let snapshot = &cluster.snapshot;
            let reused = incremental.compile(snapshot, &SliceIndex::new(snapshot));
            let fresh = compile(snapshot, &options);
            prop_assert_eq!(&reused.table, &fresh.table, "table after step {} ({:?})", step, change);
            prop_assert_eq!(&reused.diagnostics, &fresh.diagnostics, "diagnostics after step {}", step);
            prop_assert_eq!(&reused.endpoint_sources, &fresh.endpoint_sources);
            prop_assert_eq!(&reused.served, &fresh.served);
        }
    }
}

/// A change the cache must notice without a resourceVersion: the same Ingress, edited.
#[test]
fn an_edited_manifest_without_a_resource_version_is_recompiled() {
    let mut cluster = Cluster {
        snapshot: Snapshot::default(),
        versioned: false,
        writes: 0,
    };
    cluster.apply(&Change::Service {
        index: 0,
        named_port: false,
        service_upstream: false,
    });
    cluster.apply(&Change::Service {
        index: 1,
        named_port: false,
        service_upstream: false,
    });
    let spec = |service| IngressSpec {
        class: Some("sluice"),
        created: None,
        rules: vec![(Some("a.test"), "/", service, 80)],
        default_backend: None,
        annotation: None,
    };
    let mut incremental = Compiler::new(CompileOptions::default());
    cluster.apply(&Change::Ingress {
        index: 0,
        spec: spec(0),
    });
    let first = incremental.compile(&cluster.snapshot, &SliceIndex::new(&cluster.snapshot));
    cluster.apply(&Change::Ingress {
        index: 0,
        spec: spec(1),
    });
    let second = incremental.compile(&cluster.snapshot, &SliceIndex::new(&cluster.snapshot));
    let target = |compiled: &sluice_config::Compiled| {
        compiled
            .table
            .lookup("a.test", "/")
            .map(|t| t.backend.id().to_string())
    };
    assert_eq!(target(&first).as_deref(), Some("ns/svc0:80"));
    assert_eq!(target(&second).as_deref(), Some("ns/svc1:80"));
}
