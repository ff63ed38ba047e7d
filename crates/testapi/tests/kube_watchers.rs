//! kube-rs against the test API server: watchers and reflectors list, watch, reconnect after dropped watches and outages, and re-list after expiry.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use serde_json::{json, Value};
use sluice_testapi::TestApiServer;
use tokio::sync::mpsc;

async fn start() -> (TestApiServer, Client) {
    let server = TestApiServer::start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let config = kube::Config::new(server.url().parse().unwrap());
    let client = Client::try_from(config).unwrap();
    (server, client)
}

fn service(namespace: &str, name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
        "spec": {"ports": [{"name": "http", "port": 80}]}
    })
}

fn slice(namespace: &str, name: &str, service: &str, addresses: &[&str]) -> Value {
    let endpoints: Vec<Value> = addresses
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": endpoints
    })
}

/// What a watcher yielded, by object namespace/name.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Init,
    InitApply(String),
    InitDone,
    Apply(String),
    Delete(String),
    Error(String),
}

fn key<K: Resource>(object: &K) -> String {
    format!(
        "{}/{}",
        object.meta().namespace.clone().unwrap_or_default(),
        object.meta().name.clone().unwrap_or_default()
    )
}

/// Runs `watcher(...).default_backoff()` and reports everything it yields, errors included.
fn watch_events<K>(api: Api<K>, config: watcher::Config) -> mpsc::UnboundedReceiver<Seen>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = watcher(api, config).default_backoff().boxed();
        while let Some(item) = stream.next().await {
            let seen = match item {
                Ok(watcher::Event::Init) => Seen::Init,
                Ok(watcher::Event::InitApply(o)) => Seen::InitApply(key(&o)),
                Ok(watcher::Event::InitDone) => Seen::InitDone,
                Ok(watcher::Event::Apply(o)) => Seen::Apply(key(&o)),
                Ok(watcher::Event::Delete(o)) => Seen::Delete(key(&o)),
                Err(error) => Seen::Error(format!("{error:?}")),
            };
            if tx.send(seen).is_err() {
                return;
            }
        }
    });
    rx
}

/// Reads events until one equals `wanted`; returns everything read, `wanted` last.
async fn until(
    events: &mut mpsc::UnboundedReceiver<Seen>,
    wanted: Seen,
    timeout: Duration,
) -> Vec<Seen> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(event)) => {
                let done = event == wanted;
                seen.push(event);
                if done {
                    return seen;
                }
            }
            Ok(None) => panic!("watcher ended; saw {seen:?}"),
            Err(_) => panic!("no {wanted:?} within {timeout:?}; saw {seen:?}"),
        }
    }
}

/// Runs a reflector and returns its store.
fn reflect<K>(api: Api<K>, config: watcher::Config) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, config).default_backoff().reflect(writer);
    tokio::spawn(stream.for_each(|_| futures_util::future::ready(())));
    reader
}

fn keys<K: Resource + Clone>(store: &Store<K>) -> Vec<String>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let mut keys: Vec<String> = store.state().iter().map(|o| key(o.as_ref())).collect();
    keys.sort();
    keys
}

async fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const SHORT: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflectors_list_and_watch_services_and_endpoint_slices() {
    let (server, client) = start().await;
    server.create(service("shop", "before", "web")).unwrap();
    server
        .create(slice("shop", "before-1", "before", &["10.0.0.1"]))
        .unwrap();
    let services = reflect(
        Api::<Service>::all(client.clone()),
        watcher::Config::default(),
    );
    let slices = reflect(
        Api::<EndpointSlice>::all(client.clone()),
        watcher::Config::default(),
    );
    tokio::time::timeout(SHORT, services.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    tokio::time::timeout(SHORT, slices.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(keys(&services), ["shop/before"]);

    // Created through the Rust API and through the HTTP API with kube.
    server.create(service("other", "rust", "web")).unwrap();
    let api = Api::<Service>::namespaced(client.clone(), "shop");
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(service("shop", "kube", "web")).unwrap(),
        )
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    eventually("both services", SHORT, || {
        keys(&services) == ["other/rust", "shop/before", "shop/kube"]
    })
    .await;

    server
        .apply(slice(
            "shop",
            "before-1",
            "before",
            &["10.0.0.1", "10.0.0.2", "10.0.0.3"],
        ))
        .unwrap();
    eventually("three endpoints", SHORT, || {
        slices
            .state()
            .first()
            .is_some_and(|s| s.endpoints.as_ref().is_some_and(|e| e.len() == 3))
    })
    .await;

    api.delete("kube", &DeleteParams::default()).await.unwrap();
    eventually("the deletion", SHORT, || {
        keys(&services) == ["other/rust", "shop/before"]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_resumes_after_its_watch_is_dropped_without_relisting() {
    let (server, client) = start().await;
    server.create(service("ns", "a", "web")).unwrap();
    let mut events = watch_events(Api::<Service>::all(client), watcher::Config::default());
    until(&mut events, Seen::InitDone, SHORT).await;
    assert!(server.wait_for_open_watches(1, SHORT).await);
    let watches_before = server.stats().watches;

    assert_eq!(server.drop_watches(), 1);
    eventually("the watch to reconnect", Duration::from_secs(10), || {
        server.stats().watches > watches_before && server.open_watches() == 1
    })
    .await;
    server.create(service("ns", "after-drop", "web")).unwrap();
    let seen = until(&mut events, Seen::Apply("ns/after-drop".into()), SHORT).await;
    assert!(
        !seen.contains(&Seen::Init),
        "resumed from its resourceVersion, no re-list: {seen:?}"
    );

    // Dropping is one-shot: the new watch stays up.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.open_watches(), 1);
    server.delete("Service", "ns", "a").unwrap();
    until(&mut events, Seen::Delete("ns/a".into()), SHORT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_relists_after_resource_versions_expire_and_ends_with_the_right_state() {
    let (server, client) = start().await;
    server.create(service("ns", "before", "web")).unwrap();
    let api = Api::<Service>::all(client);
    let store = reflect(api.clone(), watcher::Config::default());
    let mut events = watch_events(api, watcher::Config::default());
    until(&mut events, Seen::InitDone, SHORT).await;
    tokio::time::timeout(SHORT, store.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    // Both watchers have listed and are watching: the expiry reaches their open watches.
    assert!(server.wait_for_open_watches(2, SHORT).await);

    server.expire_resource_versions();
    // Changes right after the expiry: the watchers learn them from the re-list.
    server.delete("svc", "ns", "before").unwrap();
    server.create(service("ns", "during", "web")).unwrap();
    let seen = until(&mut events, Seen::InitDone, Duration::from_secs(10)).await;
    assert!(
        matches!(seen.first(), Some(Seen::Error(e)) if e.contains("code: 410")),
        "{seen:?}"
    );
    let relist: Vec<&Seen> = seen.iter().skip_while(|s| **s != Seen::Init).collect();
    assert_eq!(
        relist,
        [
            &Seen::Init,
            &Seen::InitApply("ns/during".into()),
            &Seen::InitDone
        ],
        "{seen:?}"
    );
    server.create(service("ns", "after", "web")).unwrap();
    until(&mut events, Seen::Apply("ns/after".into()), SHORT).await;
    eventually("the reflector's state", Duration::from_secs(10), || {
        keys(&store) == ["ns/after", "ns/during"]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_resuming_from_a_compacted_version_after_an_outage_relists() {
    let (server, client) = start().await;
    server.create(service("ns", "a", "web")).unwrap();
    let mut events = watch_events(Api::<Service>::all(client), watcher::Config::default());
    until(&mut events, Seen::InitDone, SHORT).await;
    assert!(server.wait_for_open_watches(1, SHORT).await);

    server
        .refuse_connections(Duration::from_millis(1500))
        .await
        .unwrap();
    server.create(service("ns", "b", "web")).unwrap();
    server.compact();
    let seen = until(&mut events, Seen::InitDone, Duration::from_secs(15)).await;
    assert!(
        seen.iter()
            .any(|s| matches!(s, Seen::Error(e) if e.contains("code: 410"))),
        "the resumed watch got 410 Expired: {seen:?}"
    );
    assert!(seen.contains(&Seen::InitApply("ns/b".into())), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_during_refused_connections_show_up_after_the_outage() {
    let (server, client) = start().await;
    server
        .create(slice("ns", "web-1", "web", &["10.0.0.1"]))
        .unwrap();
    let api = Api::<EndpointSlice>::all(client);
    let store = reflect(api.clone(), watcher::Config::default());
    let mut events = watch_events(api, watcher::Config::default());
    until(&mut events, Seen::InitDone, SHORT).await;
    tokio::time::timeout(SHORT, store.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    assert!(server.wait_for_open_watches(2, SHORT).await);

    server
        .refuse_connections(Duration::from_secs(2))
        .await
        .unwrap();
    let refused = tokio::net::TcpStream::connect(server.addr())
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    server
        .apply(slice("ns", "web-1", "web", &["10.0.0.1", "10.0.0.9"]))
        .unwrap();
    server
        .create(slice("ns", "web-2", "web", &["10.0.1.1"]))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        keys(&store),
        ["ns/web-1"],
        "nothing arrives during the outage"
    );

    eventually(
        "the writes made during the outage",
        Duration::from_secs(20),
        || {
            keys(&store) == ["ns/web-1", "ns/web-2"]
                && store
                    .state()
                    .iter()
                    .any(|s| s.endpoints.as_ref().is_some_and(|e| e.len() == 2))
        },
    )
    .await;
    let seen = until(&mut events, Seen::Apply("ns/web-2".into()), SHORT).await;
    assert!(
        !seen.contains(&Seen::Init),
        "resumed without re-listing: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_list_watchers_initialise_from_initial_events() {
    let (server, client) = start().await;
    server.create(service("ns", "a", "web")).unwrap();
    server.create(service("ns", "b", "web")).unwrap();
    let mut events = watch_events(
        Api::<Service>::all(client),
        watcher::Config::default().streaming_lists(),
    );
    let seen = until(&mut events, Seen::InitDone, SHORT).await;
    assert_eq!(
        seen,
        [
            Seen::Init,
            Seen::InitApply("ns/a".into()),
            Seen::InitApply("ns/b".into()),
            Seen::InitDone
        ]
    );
    server.create(service("ns", "c", "web")).unwrap();
    until(&mut events, Seen::Apply("ns/c".into()), SHORT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_selected_watchers_see_objects_enter_and_leave() {
    let (server, client) = start().await;
    server.create(service("ns", "web", "web")).unwrap();
    server.create(service("ns", "db", "db")).unwrap();
    let config = watcher::Config::default().labels("app=web");
    let mut events = watch_events(Api::<Service>::all(client), config);
    let seen = until(&mut events, Seen::InitDone, SHORT).await;
    assert_eq!(
        seen,
        [Seen::Init, Seen::InitApply("ns/web".into()), Seen::InitDone]
    );
    server
        .patch(
            "svc",
            "ns",
            "db",
            &json!({"metadata": {"labels": {"app": "web"}}}),
        )
        .unwrap();
    until(&mut events, Seen::Apply("ns/db".into()), SHORT).await;
    server
        .patch(
            "svc",
            "ns",
            "web",
            &json!({"metadata": {"labels": {"app": "gone"}}}),
        )
        .unwrap();
    until(&mut events, Seen::Delete("ns/web".into()), SHORT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_client_writes_ingress_status_and_leases() {
    let (server, _) = start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    server.write_kubeconfig(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&path).unwrap(),
        &KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let client = Client::try_from(config).unwrap();

    let ingresses = Api::<Ingress>::namespaced(client.clone(), "shop");
    let ingress: Ingress = serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "web"},
        "spec": {"ingressClassName": "sluice", "rules": [{"host": "shop.example"}]}
    }))
    .unwrap();
    ingresses
        .create(&PostParams::default(), &ingress)
        .await
        .unwrap();
    let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": "127.0.0.1"}]}}});
    let patched = ingresses
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let ip = |i: &Ingress| {
        i.status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .and_then(|l| l.first())
            .and_then(|e| e.ip.clone())
    };
    assert_eq!(ip(&patched).as_deref(), Some("127.0.0.1"));
    assert_eq!(patched.metadata.generation, Some(1));
    let relabelled = ingresses
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"labels": {"a": "b"}}, "status": {"loadBalancer": {}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        ip(&relabelled).as_deref(),
        Some("127.0.0.1"),
        "main-resource patches keep status"
    );
    assert_eq!(
        ingresses
            .get_status("web")
            .await
            .unwrap()
            .labels()
            .get("a")
            .map(String::as_str),
        Some("b")
    );

    // Leader election leases: server-side apply conflicts between managers.
    let leases = Api::<Lease>::namespaced(client, "sluice");
    let lease = |holder: &str| json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}});
    leases
        .patch(
            "leader",
            &PatchParams::apply("sluice-a"),
            &Patch::Apply(lease("a")),
        )
        .await
        .unwrap();
    let err = leases
        .patch(
            "leader",
            &PatchParams::apply("sluice-b"),
            &Patch::Apply(lease("b")),
        )
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(status) => {
            assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"))
        }
        other => panic!("expected a 409 Conflict, got {other}"),
    }
    let renewed = leases
        .patch(
            "leader",
            &PatchParams::apply("sluice-a"),
            &Patch::Strategic(json!({"spec": {"leaseDurationSeconds": 20}})),
        )
        .await
        .unwrap();
    assert_eq!(renewed.spec.unwrap().lease_duration_seconds, Some(20));
}
