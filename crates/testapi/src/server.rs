//! The running server: the listener (which the refuse-connections fault really closes), connections, and the Rust API tests use.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::error::TestApiError;
use crate::http;
use crate::object;
use crate::resources::{self, ResourceType, RESOURCES};
use crate::selector::Selectors;
use crate::state::{Interrupt, Options, Outage, RecordedRequest, Shared, Stats};
use crate::store::{self, PatchKind, Subresource};

/// The field manager of writes made through the Rust API.
const MANAGER: &str = "sluice-testapi";

/// A test Kubernetes API server on loopback. Stops (and ends every connection) when dropped.
#[derive(Debug)]
pub struct TestApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    accept: JoinHandle<()>,
}

impl TestApiServer {
    /// Starts a server on `addr` (use `127.0.0.1:0` for an ephemeral port) with default options.
    pub async fn start(addr: SocketAddr) -> Result<Self, TestApiError> {
        Self::start_with(addr, Options::default()).await
    }

    /// Starts a server on `addr` with `options`.
    pub async fn start_with(addr: SocketAddr, options: Options) -> Result<Self, TestApiError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| TestApiError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| TestApiError::Bind { addr, source })?;
        let (outages, outage_requests) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::new(options, addr, outages));
        let accept = tokio::spawn(accept_loop(listener, shared.clone(), outage_requests));
        Ok(Self {
            shared,
            addr,
            accept,
        })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig for this server: plain http, no credentials, namespace `default`.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: sluice-testapi\n  cluster:\n    server: {url}\n\
             users:\n\
             - name: sluice-testapi\n  user: {{}}\n\
             contexts:\n\
             - name: sluice-testapi\n  context:\n    cluster: sluice-testapi\n    user: sluice-testapi\n    namespace: default\n\
             current-context: sluice-testapi\n\
             preferences: {{}}\n",
            url = self.url()
        )
    }

    /// Writes [`Self::kubeconfig`] to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), TestApiError> {
        std::fs::write(path, self.kubeconfig()).map_err(|source| TestApiError::WriteKubeconfig {
            path: path.to_owned(),
            source,
        })
    }

    /// Creates an object as a POST would (status is reset for types with a status subresource).
    /// The type comes from `apiVersion` and `kind`; the namespace from `metadata.namespace`
    /// (default `default`).
    pub fn create(&self, object: Value) -> Result<Value, TestApiError> {
        let res = store::type_of(&object)?;
        let namespace = namespace_of(&object);
        let created = self
            .shared
            .write(|store| store.create(res, &namespace, object, Some(MANAGER), true))?;
        Ok((*created).clone())
    }

    /// Creates the object, or replaces everything but its status (ignoring any
    /// resourceVersion in `object`), like `kubectl apply` of a whole manifest.
    pub fn apply(&self, mut object: Value) -> Result<Value, TestApiError> {
        let res = store::type_of(&object)?;
        let namespace = namespace_of(&object);
        let name = object::meta_str(&object, "name").map(str::to_owned);
        if let Some(meta) = object::metadata_mut(&mut object) {
            meta.remove("resourceVersion");
        }
        let stored = self.shared.write(|store| {
            match name
                .as_deref()
                .filter(|n| store.get(res, &namespace, n).is_ok())
            {
                Some(name) => store.replace(
                    res,
                    &namespace,
                    name,
                    object,
                    Subresource::Main,
                    Some(MANAGER),
                ),
                None => store.create(res, &namespace, object, Some(MANAGER), true),
            }
        })?;
        Ok((*stored).clone())
    }

    /// Replaces an object as a PUT would: 409 Conflict when `metadata.resourceVersion` is set
    /// and stale; `.status` is kept for types with a status subresource.
    pub fn replace(&self, object: Value) -> Result<Value, TestApiError> {
        self.put(object, Subresource::Main)
    }

    /// Replaces only `.status`, as a PUT to the `status` subresource would.
    pub fn replace_status(&self, object: Value) -> Result<Value, TestApiError> {
        self.put(object, Subresource::Status)
    }

    fn put(&self, object: Value, subresource: Subresource) -> Result<Value, TestApiError> {
        let res = store::type_of(&object)?;
        let namespace = namespace_of(&object);
        let name = object::meta_str(&object, "name")
            .ok_or_else(|| TestApiError::bad_request("metadata.name is required"))?
            .to_owned();
        let stored = self.shared.write(|store| {
            store.replace(res, &namespace, &name, object, subresource, Some(MANAGER))
        })?;
        Ok((*stored).clone())
    }

    /// Applies a JSON merge patch to the main resource.
    pub fn patch(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        merge_patch: &Value,
    ) -> Result<Value, TestApiError> {
        let res = resolve(kind)?;
        let stored = self.shared.write(|store| {
            store.patch(
                res,
                namespace,
                name,
                merge_patch,
                PatchKind::Merge,
                Subresource::Main,
                Some(MANAGER),
            )
        })?;
        Ok((*stored).clone())
    }

    /// Deletes an object and returns its final state. `kind` is a kind, plural or short name
    /// (`Service`, `services`, `svc`); `namespace` is ignored for cluster-scoped types.
    pub fn delete(&self, kind: &str, namespace: &str, name: &str) -> Result<Value, TestApiError> {
        let res = resolve(kind)?;
        let deleted = self
            .shared
            .write(|store| store.delete(res, namespace, name, None))?;
        Ok((*deleted).clone())
    }

    /// The object, if it exists.
    pub fn get(&self, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let res = resolve(kind).ok()?;
        let object = self.shared.read().get(res, namespace, name).ok()?;
        Some((*object).clone())
    }

    /// Every object of a type, in one namespace or (with `None`) all, sorted by namespace/name.
    pub fn list(&self, kind: &str, namespace: Option<&str>) -> Result<Vec<Value>, TestApiError> {
        let res = resolve(kind)?;
        let (items, _) = self
            .shared
            .read()
            .snapshot(res, namespace, &Selectors::default());
        Ok(items.iter().map(|o| (**o).clone()).collect())
    }

    /// How many objects of a type exist.
    pub fn count(&self, kind: &str) -> Result<usize, TestApiError> {
        let res = resolve(kind)?;
        Ok(self.shared.read().count(res))
    }

    /// Stores many objects in one lock, creating or replacing each and keeping `.status` as
    /// given: for seeding large fixtures fast. Watches see them as ADDED (or MODIFIED).
    pub fn insert_many(
        &self,
        objects: impl IntoIterator<Item = Value>,
    ) -> Result<usize, TestApiError> {
        let objects: Vec<Value> = objects.into_iter().collect();
        self.shared.write(|store| store.insert_many(objects))
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.read().resource_version()
    }

    /// Fault: aborts every open watch connection. Clients reconnect; later watches are not
    /// touched. Returns how many were open.
    pub fn drop_watches(&self) -> usize {
        let open = self.shared.open_watches();
        self.shared.interrupt(Interrupt::Drop);
        open
    }

    /// Fault: compacts every event log up to now, and ends every open watch with an ERROR event
    /// holding a 410 Expired Status, so clients re-list. A watch that later resumes from any
    /// older resourceVersion gets the same 410 event (over HTTP 200).
    pub fn expire_resource_versions(&self) {
        self.compact();
        self.shared.interrupt(Interrupt::Expire);
    }

    /// Compacts every event log up to now without touching open watches: only a watch that
    /// later resumes from an older resourceVersion gets 410 Expired.
    pub fn compact(&self) {
        let _ = self.shared.write(|store| {
            store.compact_all();
            Ok(())
        });
    }

    /// Fault: closes the listening socket (connects fail with ECONNREFUSED), ends every open
    /// connection, and binds the same address again after `duration`. Returns once the listener
    /// is closed.
    pub async fn refuse_connections(&self, duration: Duration) -> Result<(), TestApiError> {
        let (started, is_started) = oneshot::channel();
        self.shared.request_outage(Outage { duration, started })?;
        is_started.await.map_err(|_| TestApiError::NotRunning)
    }

    /// Fault: delivers every watch event `delay` after the change happened (zero turns it off).
    pub fn set_event_delay(&self, delay: Duration) {
        self.shared.set_event_delay(delay);
    }

    /// Watch streams open now.
    pub fn open_watches(&self) -> usize {
        self.shared.open_watches()
    }

    /// Waits until at least `count` watch streams are open; false on timeout.
    pub async fn wait_for_open_watches(&self, count: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.open_watches() < count {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    /// Counters of what was served.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// The most recent requests, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests()
    }

    pub fn clear_requests(&self) {
        self.shared.clear_requests();
    }

    /// The resource types served.
    pub fn resource_types() -> &'static [ResourceType] {
        RESOURCES
    }
}

impl Drop for TestApiServer {
    fn drop(&mut self) {
        self.accept.abort();
        self.shared.shut_down();
    }
}

fn resolve(kind: &str) -> Result<usize, TestApiError> {
    resources::by_name(kind)
        .ok_or_else(|| TestApiError::bad_request(format!("no resource type named {kind:?}")))
}

fn namespace_of(object: &Value) -> String {
    object::meta_str(object, "namespace")
        .filter(|ns| !ns.is_empty())
        .unwrap_or("default")
        .to_owned()
}

/// Accepts connections, and closes and reopens the listener on outage requests.
async fn accept_loop(
    mut listener: TcpListener,
    shared: Arc<Shared>,
    mut outages: mpsc::UnboundedReceiver<Outage>,
) {
    enum Next {
        Accepted(std::io::Result<TcpStream>),
        Outage(Outage),
    }
    loop {
        let next = tokio::select! {
            accepted = listener.accept() => Next::Accepted(accepted.map(|(stream, _)| stream)),
            Some(outage) = outages.recv() => Next::Outage(outage),
        };
        match next {
            Next::Accepted(Ok(stream)) => serve_connection(stream, shared.clone()),
            Next::Accepted(Err(error)) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Next::Outage(outage) => {
                drop(listener);
                shared.kill_connections();
                tracing::info!(addr = %shared.addr, ?outage.duration, "refusing connections");
                let _ = outage.started.send(());
                tokio::time::sleep(outage.duration).await;
                listener = rebind(shared.addr).await;
                tracing::info!(addr = %shared.addr, "accepting connections again");
            }
        }
    }
}

async fn rebind(addr: SocketAddr) -> TcpListener {
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return listener,
            Err(error) => {
                tracing::warn!(%addr, %error, "rebinding after an outage failed; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let mut killed = shared.subscribe_connections();
    let mut shutdown = shared.subscribe_shutdown();
    tokio::spawn(async move {
        let service = service_fn(move |request| http::handle(shared.clone(), request));
        let connection = http1::Builder::new()
            .keep_alive(true)
            .serve_connection(TokioIo::new(stream), service);
        tokio::select! {
            result = connection => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
            }
            _ = killed.changed() => {}
            _ = shutdown.wait_for(|down| *down) => {}
        }
    });
}
