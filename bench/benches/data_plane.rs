//! Micro-benchmarks of the data plane's per-request and per-publish steps at cluster scale: route lookup among 10,000 hosts and 50,000 paths, publishing a table of that size, and each balancer's pick among 1,000 endpoints.
//!
//! `cargo bench -p sluice-bench --bench data_plane`

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use http::uri::Authority;
use http::{HeaderName, Request};
use sluice_proxy::bench_support::first_pick;
use sluice_proxy::{Runtime, TableHandle};
use sluice_routing::{
    Backend, BackendId, BackendMode, Balancer, Endpoint, EndpointSet, HashKey, HostMatch,
    PathMatch, RoutePolicy, RoutingTable, TableBuilder,
};

/// The same allocator as the sluice binary.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const HOSTS: usize = 10_000;
const PATHS: [&str; 5] = ["/", "/api", "/api/v1", "/static", "/users"];
const ENDPOINTS: usize = 1_000;

/// 10,000 hosts with five Prefix paths each, every host its own backend of three endpoints.
fn table() -> RoutingTable {
    let mut builder = TableBuilder::new();
    let policy = Arc::new(RoutePolicy::default());
    for host in 0..HOSTS {
        let id = BackendId::new("bench", &format!("svc-{host}"), "80");
        let endpoints = (0..3).map(|n| endpoint(host * 3 + n)).collect();
        builder.add_backend(Backend::new(
            id.clone(),
            BackendMode::Endpoints,
            EndpointSet::new(endpoints),
        ));
        let name: Arc<str> = format!("bench/ing-{host}").into();
        for path in PATHS {
            builder.add_route(
                HostMatch::from_rule_host(Some(&format!("svc-{host}.bench.test"))),
                PathMatch::prefix(path),
                id.clone(),
                name.clone(),
                policy.clone(),
            );
        }
    }
    builder.build()
}

fn endpoint(index: usize) -> Endpoint {
    let text = format!(
        "10.{}.{}.{}:8080",
        index >> 16 & 0xff,
        index >> 8 & 0xff,
        index & 0xff
    );
    Endpoint::new(Authority::try_from(text).unwrap_or_else(|e| panic!("{e}")))
}

fn route_lookup(c: &mut Criterion) {
    let table = table();
    let queries: Vec<(String, &str)> = (0..1024)
        .map(|n| {
            (
                format!("svc-{}.bench.test", n * 7919 % HOSTS),
                ["/api/v1/orders/7", "/", "/users/42", "/static/app.js"][n % 4],
            )
        })
        .collect();
    let mut next = 0;
    c.bench_function("route lookup, 10,000 hosts and 50,000 paths", |b| {
        b.iter(|| {
            let (host, path) = &queries[next % queries.len()];
            next += 1;
            table
                .lookup(host, path)
                .map(|target| target.backend.id().as_str().len())
        })
    });
}

fn table_publish(c: &mut Criterion) {
    let handle = TableHandle::new(table());
    let mut group = c.benchmark_group("publish");
    group.sample_size(20);
    group.bench_function("publish a table of 10,000 hosts and 50,000 paths", |b| {
        b.iter_batched(table, |table| handle.publish(table), BatchSize::LargeInput)
    });
    group.finish();
}

fn balancer_pick(c: &mut Criterion) {
    let backend = Backend::new(
        BackendId::new("bench", "svc", "80"),
        BackendMode::Endpoints,
        EndpointSet::new((0..ENDPOINTS).map(endpoint).collect()),
    );
    let runtime = Runtime::default();
    let (parts, ()) = Request::get("/orders/7")
        .header("x-user", "alice")
        .body(())
        .unwrap_or_else(|e| panic!("{e}"))
        .into_parts();
    let client = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));
    let balancers = [
        ("round robin", Balancer::RoundRobin),
        ("least request", Balancer::LeastRequest),
        ("ewma", Balancer::Ewma),
        (
            "hash of a header",
            Balancer::Hash(HashKey::Header(HeaderName::from_static("x-user"))),
        ),
        (
            "hash of the client address",
            Balancer::Hash(HashKey::ClientAddress),
        ),
    ];
    let mut group = c.benchmark_group("balancer pick, 1,000 endpoints");
    for (name, balancer) in &balancers {
        group.bench_function(*name, |b| {
            b.iter(|| first_pick(balancer, &backend, &runtime, &parts, client))
        });
    }
    group.finish();
}

criterion_group!(benches, route_lookup, table_publish, balancer_pick);
criterion_main!(benches);
