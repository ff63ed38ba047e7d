//! One kube-rs watcher per kind and namespace: retries forever with jittered backoff, reports its state, and forwards events stamped with their arrival time.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::IngressClass;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sluice_config::gateway::{EXPERIMENTAL_GATEWAY_GROUP, GATEWAY_GROUP};
use sluice_config::traefik::{MIDDLEWARE_VERSION, TRAEFIK_GROUPS};
use sluice_config::{gateway_api_object, middleware_object, KubeObject};

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

    /// Adds a watch of `kind` (in `namespace`, or cluster-wide), listing until it first syncs.
    pub fn register(&self, kind: &'static str, namespace: Option<&str>) -> WatchId {
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

    /// Moves `watch` to `phase`, with the error it is retrying after.
    pub fn enter(&self, watch: WatchId, phase: WatchPhase, error: Option<String>) {
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
/// IngressClass is always cluster-wide), with the Gateway API kinds and Traefik Middleware
/// groups the API server serves. Events arrive on the returned channel.
pub fn start_watches(
    client: &Client,
    namespaces: &[String],
    (gateway_api, middlewares): (&[ServedResource], &[ServedResource]),
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
        (None, &registry, &sender),
        kind_name::<IngressClass>(),
        |class| Some(KubeObject::IngressClass(class)),
    )];
    if !gateway_api.is_empty() {
        // Gateway listeners select route namespaces by their labels.
        tasks.push(spawn_watch(
            Api::<Namespace>::all(client.clone()),
            (None, &registry, &sender),
            kind_name::<Namespace>(),
            |namespace| Some(KubeObject::Namespace(namespace)),
        ));
    }
    for resource in gateway_api.iter().filter(|r| !r.namespaced) {
        let api = Api::<DynamicObject>::all_with(client.clone(), &resource.api);
        let into = gateway_conversion(resource);
        tasks.push(spawn_watch(
            api,
            (None, &registry, &sender),
            resource.kind,
            into,
        ));
    }
    for namespace in scopes {
        let context = (namespace, &registry, &sender);
        tasks.push(spawn_namespaced(client, context, KubeObject::Ingress));
        tasks.push(spawn_namespaced(client, context, KubeObject::Service));
        tasks.push(spawn_namespaced(client, context, KubeObject::EndpointSlice));
        tasks.push(spawn_namespaced(client, context, KubeObject::Secret));
        tasks.push(spawn_namespaced(client, context, KubeObject::ConfigMap));
        for resource in gateway_api.iter().filter(|r| r.namespaced) {
            let api = match namespace {
                Some(namespace) => {
                    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource.api)
                }
                None => Api::<DynamicObject>::all_with(client.clone(), &resource.api),
            };
            let into = gateway_conversion(resource);
            tasks.push(spawn_watch(api, context, resource.kind, into));
        }
        for resource in middlewares {
            let api = match namespace {
                Some(namespace) => {
                    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource.api)
                }
                None => Api::<DynamicObject>::all_with(client.clone(), &resource.api),
            };
            let into = middleware_conversion(resource);
            tasks.push(spawn_watch(api, context, resource.kind, into));
        }
    }
    (events, registry, tasks)
}

/// The Traefik Middleware groups the API server serves (`traefik.io`, and the older
/// `traefik.containo.us`), each at `v1alpha1`. Empty when neither CRD is installed, or when
/// discovery keeps failing for `patience`: routes that name middlewares then fail closed.
pub async fn middleware_resources(
    client: &Client,
    patience: std::time::Duration,
) -> Vec<ServedResource> {
    let started = Instant::now();
    let mut found = Vec::new();
    for group in TRAEFIK_GROUPS {
        let group_version = format!("{group}/{MIDDLEWARE_VERSION}");
        let mut delay = std::time::Duration::from_millis(200);
        loop {
            match client.list_api_group_resources(&group_version).await {
                Ok(list) => {
                    let served = list
                        .resources
                        .iter()
                        .find(|r| r.kind == "Middleware" && !r.name.contains('/'));
                    if let Some(resource) = served {
                        let gvk = GroupVersionKind::gvk(group, MIDDLEWARE_VERSION, "Middleware");
                        found.push(ServedResource {
                            kind: if group == "traefik.io" {
                                "Middleware"
                            } else {
                                "Middleware (traefik.containo.us)"
                            },
                            api: ApiResource::from_gvk_with_plural(&gvk, &resource.name),
                            namespaced: resource.namespaced,
                        });
                    }
                    break;
                }
                Err(kube::Error::Api(status)) if status.code == 404 => break,
                Err(error) if started.elapsed() < patience => {
                    tracing::warn!(%error, group, "cannot discover Traefik Middlewares; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(std::time::Duration::from_secs(5));
                }
                Err(error) => {
                    tracing::warn!(%error, group, "cannot discover Traefik Middlewares; they are not watched in this run, and routes that name them answer 503");
                    break;
                }
            }
        }
    }
    found
}

/// Reads a watched Middleware; one whose spec does not parse is kept, marked unreadable, so
/// that the routes using it fail closed.
fn middleware_conversion(
    resource: &ServedResource,
) -> impl Fn(DynamicObject) -> Option<KubeObject> + Send + 'static {
    let api_version = resource.api.api_version.clone();
    move |object: DynamicObject| {
        let mut value = serde_json::to_value(&object).unwrap_or_default();
        if let Some(fields) = value.as_object_mut() {
            fields.insert("apiVersion".into(), api_version.clone().into());
            fields.insert("kind".into(), "Middleware".into());
        }
        middleware_object(value)
            .inspect_err(|error| tracing::warn!(namespace = ?object.metadata.namespace, name = ?object.metadata.name, %error, "cannot read a Middleware"))
            .ok()
    }
}

/// The Gateway API kinds sluice watches, with the version each is read at.
const GATEWAY_KINDS: &[&str] = &[
    "GatewayClass",
    "Gateway",
    "HTTPRoute",
    "GRPCRoute",
    "TLSRoute",
    "TCPRoute",
    "UDPRoute",
    "BackendTLSPolicy",
    "ListenerSet",
    "ReferenceGrant",
];

/// A Gateway API kind the API server serves.
#[derive(Clone, Debug)]
pub struct ServedResource {
    pub kind: &'static str,
    pub api: ApiResource,
    pub namespaced: bool,
}

/// The Gateway API kinds the API server serves (the CRDs installed), each at `v1` when served
/// there, else `v1beta1`, else (TLSRoute, TCPRoute, UDPRoute of older CRDs) `v1alpha3` or
/// `v1alpha2`.
/// Empty when the group is not served. Retries a failing API server
/// for up to `patience` before giving up on Gateway API for this run.
pub async fn gateway_api_resources(
    client: &Client,
    patience: std::time::Duration,
) -> Vec<ServedResource> {
    let started = Instant::now();
    let mut delay = std::time::Duration::from_millis(200);
    loop {
        match discover_gateway_api(client).await {
            Ok(found) => {
                if found.is_empty() {
                    tracing::info!("the API server serves no Gateway API kinds (the CRDs are not installed): Gateways and routes are not watched; restart sluice after installing them");
                }
                return found;
            }
            Err(error) if started.elapsed() < patience => {
                tracing::warn!(%error, "cannot discover the Gateway API kinds; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(5));
            }
            Err(error) => {
                tracing::warn!(%error, "cannot discover the Gateway API kinds; Gateways and routes are not watched in this run");
                return Vec::new();
            }
        }
    }
}

async fn discover_gateway_api(client: &Client) -> Result<Vec<ServedResource>, kube::Error> {
    let mut found: Vec<ServedResource> = Vec::new();
    for version in ["v1", "v1beta1", "v1alpha3", "v1alpha2"] {
        let group_version = format!("{GATEWAY_GROUP}/{version}");
        let list = match client.list_api_group_resources(&group_version).await {
            Ok(list) => list,
            Err(kube::Error::Api(status)) if status.code == 404 => continue,
            Err(error) => return Err(error),
        };
        for resource in list.resources.iter().filter(|r| !r.name.contains('/')) {
            let Some(kind) = GATEWAY_KINDS.iter().find(|k| **k == resource.kind) else {
                continue;
            };
            if found.iter().any(|f| f.kind == *kind) {
                continue;
            }
            let gvk = GroupVersionKind::gvk(GATEWAY_GROUP, version, kind);
            found.push(ServedResource {
                kind,
                api: ApiResource::from_gvk_with_plural(&gvk, &resource.name),
                namespaced: resource.namespaced,
            });
        }
    }
    if !found.iter().any(|f| f.kind == "ListenerSet") {
        found.extend(experimental_listener_sets(client).await?);
    }
    Ok(found)
}

/// `XListenerSet` of `gateway.networking.x-k8s.io/v1alpha1`, the experimental channel's
/// ListenerSet, watched as ListenerSet where the standard one is not served.
async fn experimental_listener_sets(
    client: &Client,
) -> Result<Option<ServedResource>, kube::Error> {
    let group_version = format!("{EXPERIMENTAL_GATEWAY_GROUP}/v1alpha1");
    let list = match client.list_api_group_resources(&group_version).await {
        Ok(list) => list,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
        Err(error) => return Err(error),
    };
    Ok(list
        .resources
        .iter()
        .find(|r| r.kind == "XListenerSet" && !r.name.contains('/'))
        .map(|resource| {
            let gvk = GroupVersionKind::gvk(EXPERIMENTAL_GATEWAY_GROUP, "v1alpha1", "XListenerSet");
            ServedResource {
                kind: "ListenerSet",
                api: ApiResource::from_gvk_with_plural(&gvk, &resource.name),
                namespaced: resource.namespaced,
            }
        }))
}

/// Reads a watched Gateway API object into the snapshot's type. An object whose spec does not
/// parse is kept with its metadata only (so that its deletion is still seen), and the reason
/// is logged.
fn gateway_conversion(
    resource: &ServedResource,
) -> impl Fn(DynamicObject) -> Option<KubeObject> + Send + 'static {
    let (api_version, kind) = (resource.api.api_version.clone(), resource.kind);
    // The kind as served: `XListenerSet` for the experimental ListenerSet.
    let served_kind = resource.api.kind.clone();
    move |object: DynamicObject| {
        let mut value = serde_json::to_value(&object).unwrap_or_default();
        if let Some(fields) = value.as_object_mut() {
            fields.insert("apiVersion".into(), api_version.clone().into());
            fields.insert("kind".into(), served_kind.clone().into());
        }
        gateway_api_object(value).map_or_else(
            |error| {
                let name = object.metadata.name.clone().unwrap_or_default();
                tracing::warn!(kind, namespace = ?object.metadata.namespace, name, %error, "cannot read the object's spec; it is kept without one");
                let bare = serde_json::json!({"apiVersion": api_version, "kind": served_kind, "metadata": object.metadata});
                gateway_api_object(bare).ok()
            },
            Some,
        )
    }
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
    spawn_watch(
        api,
        (namespace, registry, sender),
        kind_name::<K>(),
        move |object| Some(into(object)),
    )
}

fn spawn_watch<K>(
    api: Api<K>,
    (namespace, registry, sender): Context<'_>,
    kind: &'static str,
    into: impl Fn(K) -> Option<KubeObject> + Send + 'static,
) -> JoinHandle<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
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
                    let Some(event) = event_into(event, &into) else {
                        continue;
                    };
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
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
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
        "Namespace" => "Namespace",
        _ => "Unknown",
    }
}

fn phase_after<K>(event: &Event<K>) -> WatchPhase {
    match event {
        Event::Init | Event::InitApply(_) => WatchPhase::Listing,
        Event::InitDone | Event::Apply(_) | Event::Delete(_) => WatchPhase::Synced,
    }
}

/// The event with its object in the snapshot's type; `None` for an object that cannot be
/// read at all (the conversion logged why).
fn event_into<K>(
    event: Event<K>,
    into: &impl Fn(K) -> Option<KubeObject>,
) -> Option<Event<KubeObject>> {
    Some(match event {
        Event::Apply(object) => Event::Apply(into(object)?),
        Event::Delete(object) => Event::Delete(into(object)?),
        Event::Init => Event::Init,
        Event::InitApply(object) => Event::InitApply(into(object)?),
        Event::InitDone => Event::InitDone,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_experimental_xlistenerset_is_read_as_a_listener_set() {
        let gvk = GroupVersionKind::gvk(EXPERIMENTAL_GATEWAY_GROUP, "v1alpha1", "XListenerSet");
        let resource = ServedResource {
            kind: "ListenerSet",
            api: ApiResource::from_gvk_with_plural(&gvk, "xlistenersets"),
            namespaced: true,
        };
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.x-k8s.io/v1alpha1",
            "kind": "XListenerSet",
            "metadata": {"name": "team-a", "namespace": "shop"},
            "spec": {"parentRef": {"name": "edge"},
                     "listeners": [{"name": "a", "port": 80, "protocol": "HTTP"}]}
        }))
        .expect("a DynamicObject");
        let converted = gateway_conversion(&resource)(object);
        let Some(KubeObject::ListenerSet(set)) = converted else {
            panic!("not a ListenerSet: {converted:?}");
        };
        assert_eq!(set.spec.parent_ref.name, "edge");
        assert_eq!(set.spec.listeners.len(), 1);
    }
}
