//! The control plane's state: compile snapshots, publish the table when it changed, swap endpoint cells, and keep what the admin API reports.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use arc_swap::ArcSwap;
use serde::Serialize;
use sluice_config::gateway::status::GatewayReport;
use sluice_config::{
    CompileOptions, Compiler, Diagnostic, EndpointResolver, EndpointSources, ObjectKey, Severity,
    SliceIndex, Snapshot,
};
use sluice_proxy::TableHandle;
use sluice_routing::{BackendId, EndpointSet, SocketProtocol};
use sluice_sources::kubernetes::{WatchRegistry, WatchReport};
use sluice_sources::Load;
use tokio::sync::watch;

use crate::metrics::Metrics;

/// What the admin API reports next to the table.
#[derive(Debug, Default, Serialize)]
pub struct Status {
    /// Compile diagnostics and file errors of the latest compile.
    pub diagnostics: Vec<Diagnostic>,
    /// How many tables have been published.
    pub generation: u64,
    /// The status of the Gateway API objects served, as compiled (before sockets are bound).
    #[serde(skip)]
    pub gateways: GatewayReport,
}

/// When something last happened and how long it took.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timing {
    pub seconds: f64,
    /// RFC 3339.
    pub at: String,
}

/// The latest endpoint propagation: from watch event to endpoint cells swapped.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Propagation {
    #[serde(flatten)]
    pub timing: Timing,
    /// Backends whose endpoint set changed.
    pub backends: usize,
}

/// Recent control-plane activity for `/api/status`.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Activity {
    pub last_compile: Option<Timing>,
    pub last_propagation: Option<Propagation>,
    pub propagations: u64,
    /// Median and 99th percentile of the last [`RECENT_PROPAGATIONS`] propagations.
    pub propagation_p50_seconds: Option<f64>,
    pub propagation_p99_seconds: Option<f64>,
    /// The latest propagations, newest last.
    #[serde(skip)]
    recent: std::collections::VecDeque<f64>,
}

/// How many propagations the percentiles in [`Activity`] cover.
pub const RECENT_PROPAGATIONS: usize = 1024;

impl Activity {
    fn add_propagation(&mut self, seconds: f64) {
        if self.recent.len() == RECENT_PROPAGATIONS {
            self.recent.pop_front();
        }
        self.recent.push_back(seconds);
        let mut sorted: Vec<f64> = self.recent.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        let at = |quantile: f64| {
            let index = ((sorted.len() as f64 - 1.0) * quantile).round() as usize;
            sorted.get(index).copied()
        };
        self.propagation_p50_seconds = at(0.5);
        self.propagation_p99_seconds = at(0.99);
    }
}

/// What a publish tells the source loop for the fast endpoint path and status writes.
#[derive(Debug, Default)]
pub struct Published {
    pub endpoint_sources: EndpointSources,
    pub served: Vec<ObjectKey>,
}

/// Owns the published table and the latest status. One per process.
pub struct ControlPlane {
    table: TableHandle,
    /// Keeps each Ingress's compiled routes between publishes, so one changed Ingress
    /// recompiles alone. Only the source's task publishes; the lock is never contended.
    compiler: Mutex<Compiler>,
    status: ArcSwap<Status>,
    generation: AtomicU64,
    ready: AtomicBool,
    draining: AtomicBool,
    metrics: Arc<Metrics>,
    activity: Mutex<Activity>,
    watches: OnceLock<Arc<WatchRegistry>>,
    /// The Gateway sockets the published table serves (address, protocol), for the listener
    /// manager.
    gateway_sockets: watch::Sender<Vec<(SocketAddr, SocketProtocol)>>,
    /// Gateway sockets that could not be bound, and why.
    unbound: Mutex<Vec<(SocketAddr, String)>>,
    /// Bumped whenever the Gateway API status may have changed (a publish, a socket bound or
    /// not), for the status writer.
    gateway_changes: watch::Sender<u64>,
}

impl ControlPlane {
    pub fn new(options: CompileOptions) -> Arc<Self> {
        let table = TableHandle::default();
        Arc::new_cyclic(|control| Self {
            metrics: Arc::new(Metrics::new(table.runtime().metrics(), control.clone())),
            table,
            compiler: Mutex::new(Compiler::new(options)),
            status: ArcSwap::from_pointee(Status::default()),
            generation: AtomicU64::new(0),
            ready: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            activity: Mutex::new(Activity::default()),
            watches: OnceLock::new(),
            gateway_sockets: watch::Sender::new(Vec::new()),
            unbound: Mutex::new(Vec::new()),
            gateway_changes: watch::Sender::new(0),
        })
    }

    pub fn table(&self) -> &TableHandle {
        &self.table
    }

    /// The Gateway sockets the published table serves, as they change.
    pub fn gateway_sockets(&self) -> watch::Receiver<Vec<(SocketAddr, SocketProtocol)>> {
        self.gateway_sockets.subscribe()
    }

    /// Records which Gateway sockets could not be bound (replacing the last record).
    pub fn set_unbound(&self, unbound: Vec<(SocketAddr, String)>) {
        if let Ok(mut current) = self.unbound.lock() {
            if *current != unbound {
                *current = unbound;
                self.gateway_changes.send_modify(|version| *version += 1);
            }
        }
    }

    /// The options the compiler runs with.
    pub fn compile_options(&self) -> CompileOptions {
        match self.compiler.lock() {
            Ok(compiler) => compiler.options().clone(),
            Err(poisoned) => poisoned.into_inner().options().clone(),
        }
    }

    /// Changes whenever the Gateway API status may have changed.
    pub fn gateway_changes(&self) -> watch::Receiver<u64> {
        self.gateway_changes.subscribe()
    }

    /// The Gateway API status: as compiled, with the listeners whose socket could not be
    /// bound marked `PortUnavailable`.
    pub fn gateway_report(&self) -> GatewayReport {
        let mut report = self.status.load().gateways.clone();
        if let Ok(unbound) = self.unbound.lock() {
            report.mark_unbound(&unbound);
        }
        report
    }

    pub fn status(&self) -> Arc<Status> {
        self.status.load_full()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn activity(&self) -> Activity {
        self.activity.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// The Kubernetes watches' states, when the source is the Kubernetes API.
    pub fn watch_reports(&self) -> Option<Vec<WatchReport>> {
        self.watches.get().map(|registry| registry.reports())
    }

    pub fn set_watches(&self, registry: Arc<WatchRegistry>) {
        let _ = self.watches.set(registry);
    }

    /// True once the first table has been published; stays true.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Whether the process is shutting down (readiness fails from then on).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Compiles a manifest-directory load and publishes it.
    pub fn apply(&self, load: Load) {
        self.publish_snapshot(
            &load.snapshot,
            load.diagnostics("; the file's last good content stays in use"),
        );
    }

    /// Compiles a snapshot and publishes the table if it differs from the one serving now.
    /// `diagnostics` (e.g. file errors) are reported before the compile's own.
    pub fn publish_snapshot(&self, snapshot: &Snapshot, diagnostics: Vec<Diagnostic>) -> Published {
        self.publish_with(snapshot, &SliceIndex::new(snapshot), diagnostics)
    }

    /// [`Self::publish_snapshot`] with endpoint sets from `endpoints` (the Kubernetes source's
    /// cache, so a recompile does not recompute unchanged endpoint sets).
    pub fn publish_with(
        &self,
        snapshot: &Snapshot,
        endpoints: &dyn EndpointResolver,
        mut diagnostics: Vec<Diagnostic>,
    ) -> Published {
        let started = Instant::now();
        let compiled = match self.compiler.lock() {
            Ok(mut compiler) => compiler.compile(snapshot, endpoints),
            Err(poisoned) => {
                // A compile that panicked may have left the cache half-updated: start afresh.
                let mut compiler = poisoned.into_inner();
                *compiler = Compiler::new(compiler.options().clone());
                compiler.compile(snapshot, endpoints)
            }
        };
        let elapsed = started.elapsed();
        self.metrics.compile.observe(elapsed.as_secs_f64());
        self.record(|activity| activity.last_compile = Some(timing(elapsed.as_secs_f64())));
        diagnostics.extend(compiled.diagnostics);
        self.log_new(&diagnostics);
        let changed = !self.is_ready() || *self.table.load() != compiled.table;
        if changed {
            let sockets = compiled.table.gateways().addresses();
            self.gateway_sockets.send_if_modified(|current| {
                let modified = *current != sockets;
                *current = sockets;
                modified
            });
            self.table.publish(compiled.table);
            self.metrics.publishes.inc();
            let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
            tracing::info!(
                generation,
                compile_ms = elapsed.as_secs_f64() * 1e3,
                "published routing table"
            );
        }
        let generation = self.generation.load(Ordering::Acquire);
        let gateways_changed = self.status.load().gateways != compiled.gateways;
        self.status.store(Arc::new(Status {
            diagnostics,
            generation,
            gateways: compiled.gateways,
        }));
        if gateways_changed {
            self.gateway_changes.send_modify(|version| *version += 1);
        }
        self.ready.store(true, Ordering::Release);
        Published {
            endpoint_sources: compiled.endpoint_sources,
            served: compiled.served,
        }
    }

    /// Swaps one backend's endpoint cell in the serving table, if the set changed. No recompile.
    pub fn update_endpoints(&self, backend: &BackendId, endpoints: Arc<EndpointSet>) -> bool {
        self.table.store_endpoints(backend, endpoints)
    }

    /// Records one propagation: from the watch event's receipt until now.
    pub fn record_propagation(&self, received: Instant, backends: usize) {
        let seconds = received.elapsed().as_secs_f64();
        self.metrics.endpoint_propagation.observe(seconds);
        self.record(|activity| {
            activity.last_propagation = Some(Propagation {
                timing: timing(seconds),
                backends,
            });
            activity.propagations += 1;
            activity.add_propagation(seconds);
        });
    }

    fn record(&self, update: impl FnOnce(&mut Activity)) {
        if let Ok(mut activity) = self.activity.lock() {
            update(&mut activity);
        }
    }

    /// Logs diagnostics that the previous compile did not already report.
    fn log_new(&self, diagnostics: &[Diagnostic]) {
        let previous = self.status.load();
        let seen: BTreeSet<&Diagnostic> = previous.diagnostics.iter().collect();
        for diagnostic in diagnostics.iter().filter(|d| !seen.contains(d)) {
            match diagnostic.severity {
                Severity::Error => tracing::error!("{diagnostic}"),
                Severity::Warning => tracing::warn!("{diagnostic}"),
                Severity::Info => tracing::info!("{diagnostic}"),
            }
        }
    }
}

fn timing(seconds: f64) -> Timing {
    Timing {
        seconds,
        at: k8s_openapi::jiff::Timestamp::now().to_string(),
    }
}
