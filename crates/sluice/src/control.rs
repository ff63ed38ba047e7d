//! The control loop's state: compile each load, publish the table when it changed, and keep the diagnostics for the admin API.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::Serialize;
use sluice_config::{compile, CompileOptions, Diagnostic, Severity};
use sluice_proxy::TableHandle;
use sluice_sources::Load;

/// What the admin API reports next to the table.
#[derive(Debug, Default, Serialize)]
pub struct Status {
    /// Compile diagnostics and file errors of the latest load.
    pub diagnostics: Vec<Diagnostic>,
    /// How many tables have been published.
    pub generation: u64,
}

/// Owns the published table and the latest status. One per process.
pub struct ControlPlane {
    table: TableHandle,
    options: CompileOptions,
    status: ArcSwap<Status>,
    generation: AtomicU64,
    ready: AtomicBool,
}

impl ControlPlane {
    pub fn new(options: CompileOptions) -> Arc<Self> {
        Arc::new(Self {
            table: TableHandle::default(),
            options,
            status: ArcSwap::from_pointee(Status::default()),
            generation: AtomicU64::new(0),
            ready: AtomicBool::new(false),
        })
    }

    pub fn table(&self) -> &TableHandle {
        &self.table
    }

    pub fn status(&self) -> Arc<Status> {
        self.status.load_full()
    }

    /// True once the first table has been published.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Compiles a load and publishes the table if it differs from the one serving now.
    pub fn apply(&self, load: Load) {
        let compiled = compile(&load.snapshot, &self.options);
        let mut diagnostics = load.diagnostics("; the file's last good content stays in use");
        diagnostics.extend(compiled.diagnostics);
        self.log_new(&diagnostics);
        let changed = !self.is_ready() || *self.table.load() != compiled.table;
        if changed {
            self.table.publish(compiled.table);
            let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
            tracing::info!(generation, files = load.files, "published routing table");
        }
        let generation = self.generation.load(Ordering::Acquire);
        self.status.store(Arc::new(Status {
            diagnostics,
            generation,
        }));
        self.ready.store(true, Ordering::Release);
    }

    /// Logs diagnostics that the previous load did not already report.
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
