//! Times compile() on a synthetic cluster: the cost of one recompile after an Ingress change.
//!
//! Usage: `cargo run --release -p sluice-bench --bin compile-scale -- [SERVICES...]`
//! (default 1000 10000). For each scale it prints the median and p99 of 21 compiles, twice:
//! computing every endpoint set from the EndpointSlices (the manifest source), and with endpoint
//! sets cached between compiles (the Kubernetes source, whose cache drops a set only when that
//! Service's slices change). A third row times what sluice actually does after one Ingress
//! changed: the incremental compiler, which recompiles that Ingress alone and merges (objects
//! carry a `resourceVersion`, as from the API server).

use std::sync::Arc;
use std::time::Instant;

use sluice_bench::{cluster, percentiles, scales_from_args, Scale};
use sluice_config::{
    compile_with, CompileOptions, Compiler, EndpointCache, EndpointResolver, KubeObject,
    SliceIndex, Snapshot,
};
use sluice_routing::EndpointSet;

/// The same allocator as the sluice binary.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    let scales = scales_from_args()?;
    println!("| Services = Ingresses | endpoints | endpoint sets | compile median | compile p99 |");
    println!("|---|---|---|---|---|");
    for services in scales {
        let scale = Scale {
            services,
            endpoints_per_service: 10,
        };
        let snapshot = snapshot(&cluster(scale))?;
        let slices = SliceIndex::new(&snapshot);
        let cached = Cached {
            slices: &slices,
            cache: EndpointCache::default(),
        };
        let only = std::env::var("ONLY").ok();
        for (label, resolver) in [
            ("computed", &slices as &dyn EndpointResolver),
            ("cached", &cached),
        ] {
            if only.as_deref().is_some_and(|only| only != label) {
                continue;
            }
            let (median, p99) = time_compiles(&snapshot, resolver, services)?;
            println!(
                "| {services} | {} | {label} | {:.2} ms | {:.2} ms |",
                services * 10,
                median * 1e3,
                p99 * 1e3
            );
        }
        if only.as_deref().is_none_or(|only| only == "incremental") {
            let (median, p99) = time_incremental(snapshot.clone(), &cached, services)?;
            println!(
                "| {services} | {} | cached, one Ingress changed, incremental | {:.2} ms | {:.2} ms |",
                services * 10,
                median * 1e3,
                p99 * 1e3
            );
        }
    }
    Ok(())
}

fn time_compiles(
    snapshot: &Snapshot,
    resolver: &dyn EndpointResolver,
    services: usize,
) -> anyhow::Result<(f64, f64)> {
    let options = CompileOptions::default();
    let mut samples = Vec::new();
    for _ in 0..21 {
        let started = Instant::now();
        let compiled = compile_with(snapshot, &options, resolver);
        samples.push(started.elapsed().as_secs_f64());
        anyhow::ensure!(
            compiled.table.backends().len() == services,
            "every Service must become a backend"
        );
        anyhow::ensure!(
            compiled.diagnostics.is_empty(),
            "unexpected diagnostics: {:?}",
            compiled.diagnostics.first()
        );
    }
    Ok(percentiles(&mut samples))
}

/// One Ingress changes before each compile; the incremental compiler keeps the rest.
fn time_incremental(
    mut snapshot: Snapshot,
    resolver: &dyn EndpointResolver,
    services: usize,
) -> anyhow::Result<(f64, f64)> {
    let mut compiler = Compiler::new(CompileOptions::default());
    compiler.compile(&snapshot, resolver);
    let mut samples = Vec::new();
    for change in 0..21 {
        let index = change * 7 % services;
        let object = sluice_bench::ingress(index, &["/", &format!("/v{change}")]);
        let mut ingress: k8s_openapi::api::networking::v1::Ingress =
            serde_json::from_value(object)?;
        ingress.metadata.resource_version = Some(format!("changed-{change}"));
        snapshot.insert(KubeObject::Ingress(ingress));
        let started = Instant::now();
        let compiled = compiler.compile(&snapshot, resolver);
        samples.push(started.elapsed().as_secs_f64());
        anyhow::ensure!(
            compiled.table.backends().len() == services,
            "every Service must become a backend"
        );
        anyhow::ensure!(
            compiled
                .table
                .lookup(&format!("svc-{index}.bench.test"), &format!("/v{change}"))
                .is_some(),
            "the changed Ingress's new path must route"
        );
    }
    Ok(percentiles(&mut samples))
}

/// Endpoint sets computed once and then shared, through the same cache the Kubernetes
/// source's cluster state uses.
struct Cached<'a> {
    slices: &'a SliceIndex<'a>,
    cache: EndpointCache,
}

impl EndpointResolver for Cached<'_> {
    fn ready_endpoints(
        &self,
        namespace: &str,
        service: &str,
        port_name: Option<&str>,
    ) -> Arc<EndpointSet> {
        self.cache
            .get_or_compute(namespace, service, port_name, || {
                (*self.slices.ready_endpoints(namespace, service, port_name)).clone()
            })
    }
}

/// The objects as the API server would hand them over, each with a `resourceVersion`.
fn snapshot(objects: &[serde_json::Value]) -> anyhow::Result<Snapshot> {
    let mut snapshot = Snapshot::default();
    for object in objects {
        let mut object = object.clone();
        object["metadata"]["resourceVersion"] = serde_json::json!("1");
        let object = &object;
        let typed = match object["kind"].as_str() {
            Some("Ingress") => KubeObject::Ingress(serde_json::from_value(object.clone())?),
            Some("IngressClass") => {
                KubeObject::IngressClass(serde_json::from_value(object.clone())?)
            }
            Some("Service") => KubeObject::Service(serde_json::from_value(object.clone())?),
            Some("EndpointSlice") => {
                KubeObject::EndpointSlice(serde_json::from_value(object.clone())?)
            }
            other => anyhow::bail!("unexpected kind {other:?}"),
        };
        snapshot.insert(typed);
    }
    Ok(snapshot)
}
