//! One kube-rs watcher per kind and namespace: retries forever with jittered backoff, reports its state, and forwards events stamped with their arrival time.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures_util::StreamExt;
use k8s_openapi::api::networking::v1::IngressClass;
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sluice_config::KubeObject;

use super::cluster::WatchScope;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Index of one watch (a kind in one namespace, or cluster-wide) in the [`WatchRegistry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WatchId(pub usize);

/// An event of one watch, stamped when it left the watch stream.
#[derive(Debug)]
pub struct WatchEvent {
    pub watch: WatchId,
    pub event: Event<KubeObject>,
    pub received: Instant,
}

/// Where a watch is in its life, for `/api/status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WatchPhase {
    /// Listing, before the first (or a new) full list completed.
    Listing,
    /// Watching, with a complete set of objects.
    Synced,
    /// The last attempt failed; retrying with backoff. The objects of the last list stay in use.
    Retrying,
}

/// The state of one watch.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchReport {
    pub kind: &'static str,
    /// `None` for a cluster-wide watch.
    pub namespace: Option<String>,
    pub phase: WatchPhase,
    /// Whether a full list ever completed (readiness needs every watch to have synced once).
    pub synced_once: bool,
    /// The last error, while retrying.
    pub error: Option<String>,
    /// When the watch entered its current phase (RFC 3339).
    pub since: String,
}

/// The state of every watch. Written by the watch tasks, read by the admin API.
#[derive(Debug, Default)]
pub struct WatchRegistry(Mutex<Vec<WatchReport>>);

impl WatchRegistry {
    pub fn reports(&self) -> Vec<WatchReport> {
        self.0
            .lock()
            .map(|reports| reports.clone())
            .unwrap_or_default()
    }

    /// What each watch covers, indexed by [`WatchId`].
    pub fn scopes(&self) -> Vec<WatchScope> {
        let reports = self.reports();
        reports
            .into_iter()
            .map(|r| WatchScope {
                kind: r.kind,
                namespace: r.namespace,
            })
            .collect()
    }

    fn register(&self, kind: &'static str, namespace: Option<&str>) -> WatchId {
        let report = WatchReport {
            kind,
            namespace: namespace.map(str::to_owned),
            phase: WatchPhase::Listing,
            synced_once: false,
            error: None,
            since: now(),
        };
        let mut reports = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        reports.push(report);
        WatchId(reports.len() - 1)
    }

    fn enter(&self, watch: WatchId, phase: WatchPhase, error: Option<String>) {
        let mut reports = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(report) = reports.get_mut(watch.0) else {
            return;
        };
        if report.phase != phase {
            report.since = now();
        }
        report.phase = phase;
        report.synced_once |= phase == WatchPhase::Synced;
        report.error = error;
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// Starts one watch per kind and namespace (cluster-wide when `namespaces` is empty;
/// IngressClass is always cluster-wide). Events arrive on the returned channel.
pub fn start_watches(
    client: &Client,
    namespaces: &[String],
) -> (
    mpsc::UnboundedReceiver<WatchEvent>,
    Arc<WatchRegistry>,
    Vec<JoinHandle<()>>,
) {
    let (sender, events) = mpsc::unbounded_channel();
    let registry = Arc::new(WatchRegistry::default());
    let scopes: Vec<Option<&str>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().map(|n| Some(n.as_str())).collect()
    };
    let mut tasks = vec![spawn_watch(
        Api::<IngressClass>::all(client.clone()),
        None,
        &registry,
        &sender,
        KubeObject::IngressClass,
    )];
    for namespace in scopes {
        let context = (namespace, &registry, &sender);
        tasks.push(spawn_namespaced(client, context, KubeObject::Ingress));
        tasks.push(spawn_namespaced(client, context, KubeObject::Service));
        tasks.push(spawn_namespaced(client, context, KubeObject::EndpointSlice));
        tasks.push(spawn_namespaced(client, context, KubeObject::Secret));
        tasks.push(spawn_namespaced(client, context, KubeObject::ConfigMap));
    }
    (events, registry, tasks)
}

type Context<'a> = (
    Option<&'a str>,
    &'a Arc<WatchRegistry>,
    &'a mpsc::UnboundedSender<WatchEvent>,
);

fn spawn_namespaced<K>(
    client: &Client,
    (namespace, registry, sender): Context<'_>,
    into: fn(K) -> KubeObject,
) -> JoinHandle<()>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    let api = match namespace {
        Some(namespace) => Api::<K>::namespaced(client.clone(), namespace),
        None => Api::<K>::all(client.clone()),
    };
    spawn_watch(api, namespace, registry, sender, into)
}

fn spawn_watch<K>(
    api: Api<K>,
    namespace: Option<&str>,
    registry: &Arc<WatchRegistry>,
    sender: &mpsc::UnboundedSender<WatchEvent>,
    into: fn(K) -> KubeObject,
) -> JoinHandle<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let kind = kind_name::<K>();
    let watch = registry.register(kind, namespace);
    let (registry, sender) = (registry.clone(), sender.clone());
    tokio::spawn(async move {
        let stream = watcher(api).default_backoff();
        futures_util::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            let received = Instant::now();
            match item {
                Ok(event) => {
                    registry.enter(watch, phase_after(&event), None);
                    let event = event_into(event, into);
                    if sender
                        .send(WatchEvent {
                            watch,
                            event,
                            received,
                        })
                        .is_err()
                    {
                        return;
                    }
                }
                Err(error) => {
                    tracing::warn!(kind, namespace = ?registry.reports().get(watch.0).and_then(|r| r.namespace.clone()), %error, "watch failed; retrying with backoff");
                    registry.enter(watch, WatchPhase::Retrying, Some(error.to_string()));
                }
            }
        }
    })
}

fn watcher<K>(api: Api<K>) -> impl futures_util::Stream<Item = Result<Event<K>, watcher::Error>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher::watcher(api, watcher::Config::default())
}

fn kind_name<K: Resource<DynamicType = ()>>() -> &'static str {
    match K::kind(&()).as_ref() {
        "Ingress" => "Ingress",
        "IngressClass" => "IngressClass",
        "Service" => "Service",
        "EndpointSlice" => "EndpointSlice",
        "Secret" => "Secret",
        "ConfigMap" => "ConfigMap",
        _ => "Unknown",
    }
}

fn phase_after<K>(event: &Event<K>) -> WatchPhase {
    match event {
        Event::Init | Event::InitApply(_) => WatchPhase::Listing,
        Event::InitDone | Event::Apply(_) | Event::Delete(_) => WatchPhase::Synced,
    }
}

fn event_into<K>(event: Event<K>, into: fn(K) -> KubeObject) -> Event<KubeObject> {
    match event {
        Event::Apply(object) => Event::Apply(into(object)),
        Event::Delete(object) => Event::Delete(into(object)),
        Event::Init => Event::Init,
        Event::InitApply(object) => Event::InitApply(into(object)),
        Event::InitDone => Event::InitDone,
    }
}
